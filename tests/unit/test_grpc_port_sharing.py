"""Our gRPC servers never share a port: gRPC's default SO_REUSEPORT would let a second process bind the same port
and take a share of the connections (a second SCM given the same ports); with ``server_options`` the bind fails."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import grpc.aio
import pytest

from scm_server.grpc_options import server_options


@pytest.fixture
def shared_listener() -> Iterator[socket.socket]:
    """A listener on loopback that allows SO_REUSEPORT (as gRPC's own servers do by default)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock
    sock.close()


def _bind(port: int, options: list[tuple[str, object]]) -> int:
    server = grpc.aio.server(options=options)
    try:
        return server.add_insecure_port(f"127.0.0.1:{port}")
    except RuntimeError:
        return 0


async def test_our_server_options_refuse_a_port_another_listener_holds(shared_listener: socket.socket) -> None:
    port = shared_listener.getsockname()[1]
    assert _bind(port, server_options()) == 0
    # the hazard itself: gRPC's defaults would have bound it beside the other listener
    assert _bind(port, [o for o in server_options() if o[0] != "grpc.so_reuseport"]) == port
