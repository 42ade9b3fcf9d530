"""Since Ozone's port keys serve Hadoop RPC, a gRPC client pointed at one (an old ``--scm host:9860``) is told so:
the server answers and logs one line naming the gRPC keys, and the CLI's error line says which key to use."""

from __future__ import annotations

import logging

import pytest

from scm_server import hadoop_ipc as codec
from scm_server.cli.feedback import unavailable_hint
from scm_server.client.config import SCMClientConfig
from scm_server.client.errors import SCMUnavailableError
from scm_server.client.scm_client import SCMClient
from scm_server.ports import free_port
from scm_server.server.hadoop_rpc.server import HadoopRpcServer


def test_the_http2_preface_is_a_fatal_answer_naming_the_grpc_keys() -> None:
    decoder = codec.ConnectionDecoder(max_frame=1 << 20)
    events = list(decoder.feed(codec.HTTP2_PREFACE))
    assert len(events) == 1 and isinstance(events[0], codec.Fatal)
    assert "ozone.scm.<x>.grpc.port" in events[0].message


async def test_a_grpc_client_on_a_hadoop_rpc_port_gets_a_one_line_hint(caplog: pytest.LogCaptureFixture) -> None:
    server = HadoopRpcServer([], max_frame=1 << 20, idle_timeout=5, name="hadoop-rpc client")
    port = free_port()
    await server.start("127.0.0.1", port)
    try:
        # the answer comes as soon as the handshake fails; the deadline only bounds a loaded machine's wait (at
        # 2 s, gRPC's second connection attempt sometimes outlived it: "Deadline Exceeded", and no handshake error)
        with caplog.at_level(logging.WARNING), pytest.raises(SCMUnavailableError) as err:
            async with SCMClient([f"127.0.0.1:{port}"], SCMClientConfig(max_retries=0, rpc_timeout=20)) as client:
                await client.in_safe_mode()
    finally:
        await server.stop()
    hint = unavailable_hint(str(err.value))
    assert "admin commands use ozone.scm.client.grpc.port (default 19860)" in hint and "\n" not in hint
    assert any(codec.GRPC_ON_HADOOP_PORT in r.getMessage() for r in caplog.records)
