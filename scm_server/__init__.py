"""Apache Ozone's Storage Container Manager (SCM) with Raft high availability, in Python."""

import os

# gRPC's fork handlers exist for processes that fork and go on using gRPC without exec. Ours only fork to
# exec (Spark's JVM launcher, the kubelet fixture's Pods, subprocesses with a preexec_fn); with gRPC threads
# busy, those handlers are skipped half-way and the parent's poller can fail (epoll_wait EBADF) while the
# child dies before exec ("Java gateway process exited before sending its port number", seen in CI). gRPC's
# documented setting for fork-then-exec programs turns them off; it must be set before grpc is imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

# grpcio 1.80 made gRPC's EventEngine endpoints the default for Python. On this stack they cost grpc.aio more
# CPU per message than the iomgr endpoints they replace, and at one client that CPU is commit latency (the figures:
# docs/performance.md, "Figures behind choices in the code"). These are gRPC's documented switches back to iomgr for
# the pinned grpcio; like the setting above they must be set before grpc is imported, and an operator's own
# GRPC_EXPERIMENTS wins.
os.environ.setdefault(
    "GRPC_EXPERIMENTS", "-event_engine_listener,-event_engine_client,-event_engine_for_all_other_endpoints"
)

__version__ = "0.1.0"
