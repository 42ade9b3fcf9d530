"""The client call a replicated write is made for, so that a client's retry is applied once.

Who uses it: the gRPC edge (``scm_server.server``) opens :func:`client_call` around a call whose
result is fully decided by one replicated write (AllocateContainer); a ``@replicate(...,
client_call=True)`` method takes it (:func:`take`, once) and ``SCMHAManagerImpl.submit_request``
proposes that write under the *client's* (client id, call id) instead of the SCM's own. The Raft retry
cache is filled on apply on every SCM, so the retry is recognised by this SCM and by the next leader
alike: it gets the first write's result instead of a second container. Nothing here does I/O; the
value lives in the task's context (one gRPC call = one task), so concurrent calls never see each
other's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

# Raft client ids of client calls are prefixed, so they never collide with an SCM's own client id.
CLIENT_PREFIX = b"c:"

_CURRENT: ContextVar[tuple[bytes, int] | None] = ContextVar("scm_client_call", default=None)


@contextlib.contextmanager
def client_call(client_id: str, call_id: int) -> Iterator[None]:
    token = _CURRENT.set((CLIENT_PREFIX + client_id.encode("utf-8"), call_id))
    try:
        yield
    finally:
        _CURRENT.reset(token)


def take() -> tuple[bytes, int] | None:
    """The current client call, once: later writes of the same call use the SCM's own identity."""
    value = _CURRENT.get()
    if value is not None:
        _CURRENT.set(None)
    return value
