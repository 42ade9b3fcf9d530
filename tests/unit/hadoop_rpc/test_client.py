"""The Python Hadoop RPC client against the real server edge (fake facades): multiplexing, errors, failover."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from scm_server import hadoop_ipc as codec
from scm_server.client.hadoop_rpc import (
    BLOCK_PROTOCOL,
    BlockLocationClient,
    ConnectionLost,
    HadoopRpcConnection,
)
from scm_server.ports import free_port
from scm_server.proto.ozone import ScmServerProtocol_pb2 as wire_block
from scm_server.server.hadoop_rpc.block_translator import BlockLocationTranslator
from scm_server.server.hadoop_rpc.server import HadoopRpcServer
from tests.unit.edges.fakes import FakeSCM


def conf_for(ports: dict[str, int]) -> dict[str, str]:
    conf = {"ozone.scm.service.ids": "c1", "ozone.scm.nodes.c1": ",".join(ports)}
    for node, port in ports.items():
        conf[f"ozone.scm.address.c1.{node}"] = "127.0.0.1"
        conf[f"ozone.scm.block.client.port.c1.{node}"] = str(port)
    return conf


@pytest.fixture
async def ring() -> Any:
    """scm1 and scm3 follow scm2 (the leader); each serves Hadoop RPC on its configured port."""
    ports = {"scm1": free_port(), "scm2": free_port(), "scm3": free_port()}
    conf = conf_for(ports)
    scms = {"scm1": FakeSCM(leader=False), "scm2": FakeSCM(leader=True), "scm3": FakeSCM(leader=False)}
    servers = []
    for node, scm in scms.items():
        server = HadoopRpcServer([BlockLocationTranslator(scm, conf.get, f"{node}-id", "127.0.0.1")])
        await server.start("127.0.0.1", ports[node])
        servers.append(server)
    yield {n: f"127.0.0.1:{p}" for n, p in ports.items()}, scms, servers
    for s in servers:
        await s.stop()


async def test_client_follows_the_hint_to_the_leader(ring: Any) -> None:
    addresses, scms, _ = ring
    async with BlockLocationClient([addresses["scm1"], addresses["scm2"], addresses["scm3"]]) as client:
        resp = await client.allocate_blocks(1024, 2, "om")
        assert resp.success and len(resp.allocateScmBlockResponse.blocks) == 2
        assert client.current == addresses["scm2"] and client.failovers == 1
        assert scms["scm2"].calls.count("allocate_block") == 1
        # the follower refused before its facade ran (the call guard's leader check)
        assert scms["scm1"].calls == []
        info = await client.get_scm_info()
        assert info.getScmInfoResponse.clusterId == "CID-x" and client.failovers == 1


async def test_client_skips_a_dead_scm(ring: Any) -> None:
    addresses, _, _ = ring
    dead = f"127.0.0.1:{free_port()}"
    async with BlockLocationClient([dead, addresses["scm2"]], retry_interval=0.01) as client:
        assert (await client.allocate_blocks(1024, 1, "om")).success
        assert client.current == addresses["scm2"]


async def test_client_gives_up_with_a_clear_error() -> None:
    async with BlockLocationClient([f"127.0.0.1:{free_port()}"], attempts=3, retry_interval=0.01) as client:
        with pytest.raises(ConnectionLost, match="after 3 attempts"):
            await client.get_scm_info()


async def test_many_calls_in_flight_on_one_connection(ring: Any) -> None:
    addresses, _, _ = ring
    conn = HadoopRpcConnection(addresses["scm2"], BLOCK_PROTOCOL)
    await conn.connect()
    request = wire_block.SCMBlockLocationRequest(cmdType=wire_block.GetScmInfo)
    bodies = await asyncio.gather(*(conn.call("send", request, call_id=i) for i in range(50)))
    assert all(wire_block.SCMBlockLocationResponse.FromString(b).status == wire_block.OK for b in bodies)
    await conn.close()


def reader_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("hadoop-rpc-read") and not t.done()]


async def test_concurrent_first_calls_share_one_connection(ring: Any) -> None:
    """Many callers at once on a new client open one connection to the SCM, not one each (the extra ones were
    never closed: their reader tasks stayed pending until the loop was torn down)."""
    addresses, _, _ = ring
    client = BlockLocationClient([addresses["scm2"]])
    answers = await asyncio.gather(*(client.get_scm_info() for _ in range(20)))
    assert all(a.getScmInfoResponse.clusterId == "CID-x" for a in answers)
    assert len(reader_tasks()) == 1
    await client.close()
    assert reader_tasks() == []


async def test_fatal_answer_fails_the_call(ring: Any) -> None:
    addresses, _, _ = ring
    conn = HadoopRpcConnection(addresses["scm2"], BLOCK_PROTOCOL, client_id=b"x" * 3)  # a client id Hadoop never sends
    await conn.connect()
    with pytest.raises(ConnectionLost, match="FATAL") as caught:
        await conn.call("send", wire_block.SCMBlockLocationRequest(cmdType=wire_block.GetScmInfo), call_id=1)
    assert caught.value.fatal is not None and caught.value.fatal.header.status == codec.Status.FATAL
    await conn.close()
