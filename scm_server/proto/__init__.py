"""Generated protobuf and gRPC modules (build products of `make proto`; do not edit)."""
