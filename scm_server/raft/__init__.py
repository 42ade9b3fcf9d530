"""Raft consensus for SCM HA: a pure core (``core/``) plus durable storage, a grpc.aio
transport and an asyncio driver around it. Depends on nothing else in ``scm_server``."""
