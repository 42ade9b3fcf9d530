"""SCMClient failover against real in-process gRPC servers running our servicers over a fake facade."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest

from scm_server.client import SCMClient, SCMClientConfig, SCMUnavailableError
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.ports import free_port as _free_port
from scm_server.server import endpoints
from scm_server.server.grpc_services import (
    BlockProtocolService,
    DatanodeProtocolService,
    LocationProtocolService,
    RpcMetrics,
)

from .fakes import FakeSCM


class Cluster:
    """Two 'SCMs' on loopback: a follower (scm1) and the leader (scm2), per an HA config."""

    def __init__(self) -> None:
        self.ports = {"scm1": _free_port(), "scm2": _free_port()}
        self.conf = {
            "ozone.scm.service.ids": "svc",
            "ozone.scm.nodes.svc": "scm1,scm2",
            "ozone.scm.address.svc.scm1": "127.0.0.1",
            "ozone.scm.address.svc.scm2": "127.0.0.1",
            "ozone.scm.client.grpc.port.svc.scm1": str(self.ports["scm1"]),
            "ozone.scm.client.grpc.port.svc.scm2": str(self.ports["scm2"]),
        }
        self.scms = {"scm1": FakeSCM(leader=False, leader_id="scm2"), "scm2": FakeSCM(leader=True)}
        self.servers: list[grpc.aio.Server] = []

    def address(self, node: str) -> str:
        return f"127.0.0.1:{self.ports[node]}"

    async def start(self) -> None:
        for node, scm in self.scms.items():
            server = grpc.aio.server()
            metrics = RpcMetrics(scm.metrics_registry)
            server.add_generic_rpc_handlers(tuple(
                cls(scm, endpoints.Protocol.CLIENT, self.conf.get, metrics).generic_handler()
                for cls in (LocationProtocolService, BlockProtocolService, DatanodeProtocolService)
            ))
            server.add_insecure_port(self.address(node))
            await server.start()
            self.servers.append(server)

    async def stop(self) -> None:
        for s in self.servers:
            await s.stop(None)


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    c = Cluster()
    await c.start()
    yield c
    await c.stop()


FAST = SCMClientConfig(max_retries=5, retry_interval=0.01, rpc_timeout=5)


async def test_follows_leader_hint_resolved_for_the_called_protocol(cluster: Cluster) -> None:
    async with SCMClient([cluster.address("scm1")], FAST) as client:
        blocks = await client.allocate_block(1024, 2)
        assert [b.containerBlockID.localID for b in blocks] == [1, 2]
        # The hint was the leader's *client* address (from config), not the ratis address.
        assert client.current_address == cluster.address("scm2")
        assert client.addresses == [cluster.address("scm1"), cluster.address("scm2")]
        assert client.failovers == 1
    assert cluster.scms["scm1"].calls == []  # refused by the call guard before the facade ran


async def test_unreachable_address_fails_over_to_next(cluster: Cluster) -> None:
    dead = f"127.0.0.1:{_free_port()}"
    async with SCMClient([dead, cluster.address("scm2")], FAST) as client:
        info = await client.get_container(1)
        assert info.containerID == 1
        assert client.current_address == cluster.address("scm2")


async def test_a_dead_leader_hint_does_not_trap_the_client_between_a_follower_and_the_hint() -> None:
    """scm1 (first in the list) names scm2 as leader, but scm2 is gone; scm3 leads. The client must reach scm3
    instead of alternating scm1 -> dead hint -> scm1 until its retries run out."""
    c = Cluster()
    dead = _free_port()
    c.ports["scm3"] = _free_port()
    c.conf.update({"ozone.scm.nodes.svc": "scm1,scm2,scm3", "ozone.scm.address.svc.scm3": "127.0.0.1",
                   "ozone.scm.client.grpc.port.svc.scm2": str(dead),
                   "ozone.scm.client.grpc.port.svc.scm3": str(c.ports["scm3"])})
    c.scms = {"scm1": FakeSCM(leader=False, leader_id="scm2"), "scm3": FakeSCM(leader=True)}
    await c.start()
    try:
        config = SCMClientConfig(max_retries=4, retry_interval=0.01, rpc_timeout=5)
        async with SCMClient([c.address("scm1"), c.address("scm3")], config) as client:
            assert (await client.get_container(1)).containerID == 1
            assert client.current_address == c.address("scm3")
    finally:
        await c.stop()


class FakeTime:
    """A clock that only moves when the client sleeps (the failover pauses)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


async def test_all_unreachable_raises_after_retries_and_two_elections() -> None:
    t = FakeTime()
    dead = [f"127.0.0.1:{_free_port()}", f"127.0.0.1:{_free_port()}"]
    config = SCMClientConfig(max_retries=3, retry_interval=0.5, rpc_timeout=60, election_timeout=1.0)
    client = SCMClient(dead, config, sleep=t.sleep, clock=t.clock)
    try:
        with pytest.raises(SCMUnavailableError, match=r"cannot reach SCM at 127\.0\.0\.1"):
            await client.in_safe_mode()
    finally:
        await client.close()
    # back-off after each full round (not after each address); 4 attempts would be used up after
    # 2 rounds, but the client keeps failing over for two elections (4 x the election timeout)
    assert t.sleeps == [0.5] * 8
    assert config.min_failover_window == 4.0


async def test_overall_deadline_bounds_the_failover() -> None:
    t = FakeTime()
    dead = [f"127.0.0.1:{_free_port()}"]
    config = SCMClientConfig(max_retries=100, retry_interval=0.5, rpc_timeout=2, election_timeout=1.0)
    client = SCMClient(dead, config, sleep=t.sleep, clock=t.clock)
    try:
        with pytest.raises(SCMUnavailableError):
            await client.in_safe_mode()
    finally:
        await client.close()
    assert sum(t.sleeps) == pytest.approx(2.0)


async def test_not_leader_everywhere_gives_not_leader(cluster: Cluster) -> None:
    cluster.scms["scm2"].leader = False
    cluster.scms["scm2"].leader_id = "scm1"
    t = FakeTime()
    client = SCMClient(
        [cluster.address("scm1")], SCMClientConfig(max_retries=4, retry_interval=0.1, rpc_timeout=5),
        sleep=t.sleep, clock=t.clock,
    )
    try:
        with pytest.raises(NotLeaderException):
            await client.get_container(1)
    finally:
        await client.close()


async def test_scm_errors_are_reraised_typed(cluster: Cluster) -> None:
    async with SCMClient([cluster.address("scm2")], FAST) as client:
        with pytest.raises(SCMException) as info:
            await client.get_container(12345)
        assert info.value.result is ResultCodes.CONTAINER_NOT_FOUND
        assert "Container #12345 not found" in str(info.value)
        with pytest.raises(SCMException) as info2:
            await client.allocate_block(0)
        assert info2.value.result is ResultCodes.INVALID_BLOCK_SIZE
        assert client.failovers == 0


async def test_malformed_request_is_invalid_argument_and_server_keeps_serving(cluster: Cluster) -> None:
    channel = grpc.aio.insecure_channel(cluster.address("scm2"))
    call = channel.unary_unary(
        "/hadoop.hdds.ScmBlockLocationProtocolService/AllocateScmBlock",
        request_serializer=None, response_deserializer=None,
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call(b"\xff\xff\xff\x0f garbage", timeout=5)
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed AllocateScmBlockRequestProto" in (info.value.details() or "")
    md = dict(info.value.trailing_metadata() or ())
    assert md.get("x-scm-result") == "INVALID_REQUEST"
    # missing required fields are bad input too
    with pytest.raises(grpc.aio.AioRpcError) as info2:
        await call(b"", timeout=5)
    assert info2.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    await channel.close()
    async with SCMClient([cluster.address("scm2")], FAST) as client:
        assert len(await client.allocate_block(10)) == 1


async def test_unexpected_exception_is_internal_with_result(cluster: Cluster) -> None:
    def boom() -> tuple[bool, bool]:
        raise RuntimeError("kaput")

    cluster.scms["scm2"].in_safe_mode = boom  # type: ignore[method-assign]
    async with SCMClient([cluster.address("scm2")], FAST) as client:
        with pytest.raises(SCMException) as info:
            await client.in_safe_mode()
        assert info.value.result is ResultCodes.INTERNAL_ERROR
        assert "kaput" in str(info.value)


async def test_leader_hint_by_peer_id_is_mapped_to_node_id(cluster: Cluster) -> None:
    follower = cluster.scms["scm1"]
    follower.leader_id = "peer-uuid-2"
    follower.peers = {"peer-uuid-2": "scm2"}
    async with SCMClient([cluster.address("scm1")], FAST) as client:
        assert (await client.get_container(1)).containerID == 1
        assert client.current_address == cluster.address("scm2")
