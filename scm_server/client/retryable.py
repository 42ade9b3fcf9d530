"""Which errors a retry loop may wait out, and which mean the caller itself is broken.

Used by every loop that polls something until it is ready (``scm_server.local``, ``bench/``, the test
helpers): such a loop keeps trying through **these** errors only: a connection refused, reset or aborted, a
network unreachable, a timeout, gRPC ``UNAVAILABLE`` or ``DEADLINE_EXCEEDED``, HTTP 502/503/504 (``/ready`` says
503 until ready), an aiohttp connection error, our
client's :class:`~scm_server.client.errors.SCMUnavailableError` (no SCM answered within its retries). Anything
else (a ``ModuleNotFoundError`` of a broken harness, a ``TypeError``, an SCM's refusal) is raised at once, so a
loop says what broke instead of timing out with "last error: None". ``bench/raft_bench.py``'s etcd anchor once
waited 60 s for a leader etcd had elected in a second: its ``except Exception: continue`` swallowed the
``ModuleNotFoundError`` of an import that fails in the script form.

Pure: a classification of exception objects, no I/O.
"""

from __future__ import annotations

import errno
import urllib.error

import aiohttp
import grpc

from scm_server.client.errors import SCMUnavailableError
from scm_server.exceptions import SCMException

RETRYABLE_GRPC_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
RETRYABLE_HTTP_STATUS = frozenset({502, 503, 504})  # bad gateway, service unavailable (not ready), gateway timeout
NETWORK_ERRNOS = frozenset({
    errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE, errno.ETIMEDOUT,
    errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.ENETDOWN,
})


def is_transient(exc: BaseException) -> bool:
    """True for an error a retry loop waits out (the other side is not there or not ready yet)."""
    if isinstance(exc, aiohttp.ClientSSLError):
        return False  # a certificate or TLS setting that is wrong stays wrong
    if isinstance(exc, (TimeoutError, ConnectionError, SCMUnavailableError, aiohttp.ClientConnectionError)):
        return True
    if isinstance(exc, grpc.RpcError):
        code = getattr(exc, "code", None)
        return callable(code) and code() in RETRYABLE_GRPC_CODES
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code in RETRYABLE_HTTP_STATUS
    if isinstance(exc, aiohttp.ClientResponseError):
        return exc.status in RETRYABLE_HTTP_STATUS
    if isinstance(exc, urllib.error.URLError):
        reason = exc.reason
        return isinstance(reason, BaseException) and is_transient(reason)
    if isinstance(exc, OSError):
        return exc.errno in NETWORK_ERRNOS
    return False



def is_answer_or_transient(exc: BaseException) -> bool:
    """For a loop that polls a peer until it agrees: the peer's absence (:func:`is_transient`) or any answer it gave
    (an SCM's result code, NotLeader included; any gRPC status it sent). Only the caller's own errors are raised."""
    return is_transient(exc) or isinstance(exc, (SCMException, grpc.RpcError))
