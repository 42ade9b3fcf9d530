"""Settings for the whole test session, made before any test module imports grpc."""

import scm_server  # noqa: F401  (sets GRPC_ENABLE_FORK_SUPPORT=false for this process: see scm_server/__init__.py)
