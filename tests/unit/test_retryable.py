"""Which errors a retry loop waits out (``scm_server.client.retryable``): the network and a peer not ready yet,
never a broken harness."""

from __future__ import annotations

import asyncio
import errno
import ssl
import urllib.error

import aiohttp
import grpc
import grpc.aio
import pytest

from scm_server.client.errors import SCMUnavailableError
from scm_server.client.retryable import is_transient
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException


def rpc_error(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details="x")


WAITED_OUT: list[BaseException] = [
    ConnectionRefusedError(errno.ECONNREFUSED, "refused"),
    ConnectionResetError(errno.ECONNRESET, "reset"),
    TimeoutError("timed out"),
    asyncio.TimeoutError(),  # noqa: UP041 - what asyncio.wait_for raises, by its own name
    OSError(errno.EHOSTUNREACH, "no route to host"),
    rpc_error(grpc.StatusCode.UNAVAILABLE),
    rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED),
    urllib.error.URLError(ConnectionRefusedError(errno.ECONNREFUSED, "refused")),
    urllib.error.HTTPError("http://x/ready", 503, "Service Unavailable", {}, None),  # type: ignore[arg-type]
    aiohttp.ServerDisconnectedError(),
    SCMUnavailableError("127.0.0.1:1", "no answer"),
]

RAISED: list[BaseException] = [
    ModuleNotFoundError("No module named 'bench'"),  # the etcd anchor's broken import, script form
    ImportError("cannot import name 'x'"),
    TypeError("put() takes 2 positional arguments"),
    AttributeError("'NoneType' object has no attribute 'leader'"),
    KeyError("scms"),
    ValueError("bad"),
    rpc_error(grpc.StatusCode.INTERNAL),
    rpc_error(grpc.StatusCode.UNIMPLEMENTED),
    rpc_error(grpc.StatusCode.PERMISSION_DENIED),
    urllib.error.HTTPError("http://x/api", 404, "Not Found", {}, None),  # type: ignore[arg-type]
    urllib.error.URLError("unknown url type: htp"),
    ssl.SSLCertVerificationError(1, "certificate verify failed"),
    OSError(errno.ENOENT, "no such file"),
    SCMException(ResultCodes.INVALID_REQUEST, "numBlocks=0 must be at least 1"),
    NotLeaderException("not the leader"),
]


@pytest.mark.parametrize("exc", WAITED_OUT, ids=lambda e: type(e).__name__)
def test_a_retry_loop_waits_out_the_network(exc: BaseException) -> None:
    assert is_transient(exc)


@pytest.mark.parametrize("exc", RAISED, ids=lambda e: type(e).__name__)
def test_anything_else_is_raised(exc: BaseException) -> None:
    assert not is_transient(exc)


def test_a_loop_polling_a_peer_also_waits_out_its_answers() -> None:
    """``is_answer_or_transient``: what a peer said (an SCM's result code, NotLeader, any gRPC status it sent) is
    retried too; the caller's own errors are not."""
    from scm_server.client.arguments import InvalidArgumentError
    from scm_server.client.retryable import is_answer_or_transient
    from scm_server.exceptions import ConfigError

    for answer in (NotLeaderException("not the leader"), SCMException(ResultCodes.SAFE_MODE_EXCEPTION, "in safemode"),
                   rpc_error(grpc.StatusCode.FAILED_PRECONDITION), *WAITED_OUT):
        assert is_answer_or_transient(answer), answer
    for own in (ModuleNotFoundError("No module named 'bench'"), TypeError("x"), KeyError("scms"),
                InvalidArgumentError("allocate_block: numBlocks=0 must be at least 1"),
                ConfigError("ozone.scm.client.port: invalid port 'x'")):
        assert not is_answer_or_transient(own), own
