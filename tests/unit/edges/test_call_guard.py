"""The call guard: leader-only calls, labelled per-SCM views, exactly-once retries, expired deadlines.

Real gRPC servers (our servicers over the fake facade) on loopback and the real client.
"""

from __future__ import annotations

import asyncio
import random

import grpc
import grpc.aio
import pytest

from scm_server import call_metadata
from scm_server.client import SCMClient, SCMClientConfig
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.proto import hdds_pb2, scm_client_pb2
from scm_server.server.call_guard import Access, ResponseCache, access_of

from .test_client_failover import FAST, Cluster, FakeTime, cluster  # noqa: F401  (fixture)


def test_access_rules_follow_ozone() -> None:
    loc, blk = "StorageContainerLocationProtocolService", "ScmBlockLocationProtocolService"
    # Ozone's ADMIN_COMMAND_TYPE: every SCM; GetScmInfo: any SCM
    for m in ("ForceExitSafeMode", "StartReplicationManager", "StopReplicationManager", "GetScmInfo"):
        assert access_of(loc, m) is Access.ANY
    for m in ("AllocateContainer", "CloseContainer", "DecommissionNodes", "AllocatePipeline"):
        assert access_of(loc, m) is Access.LEADER
    for m in ("GetReplicationManagerReport", "QueryNode", "InSafeMode", "ListContainer", "SomeFutureRead"):
        assert access_of(loc, m) is Access.READ
    assert access_of(blk, "AllocateScmBlock") is Access.LEADER
    assert access_of("StorageContainerDatanodeProtocolService", "SendHeartbeat") is Access.ANY
    assert access_of("SCMSecurityProtocolService", "GetCACertificate") is Access.ANY  # decides for itself


async def test_follower_refuses_reads_and_the_client_follows_the_leader(cluster: Cluster) -> None:  # noqa: F811
    follower = cluster.scms["scm1"]
    follower.safe_mode = True
    cluster.scms["scm2"].safe_mode = False
    async with SCMClient([cluster.address("scm1")], FAST) as client:
        # answered by the leader (out of safemode), not by the follower's own state
        assert (await client.in_safe_mode()).in_safe_mode is False
        assert client.current_address == cluster.address("scm2")


async def test_local_read_is_answered_by_that_scm_and_labelled(cluster: Cluster) -> None:  # noqa: F811
    cluster.scms["scm1"].safe_mode = True
    cluster.scms["scm2"].safe_mode = False
    async with SCMClient([cluster.address("scm1")], FAST, local_read=True) as client:
        assert (await client.in_safe_mode()).in_safe_mode is True
        label = client.last_answer
        assert label is not None and label.role == "FOLLOWER" and label.follows == "scm2"
        assert "its own view, may lag the leader" in label.describe()
        # a mutation is still leader-only: no failover when pinned
        with pytest.raises(NotLeaderException):
            await client.allocate_block(1024)
    with pytest.raises(ValueError, match="exactly one SCM address"):
        SCMClient([cluster.address("scm1"), cluster.address("scm2")], FAST, local_read=True)


async def test_admin_commands_reach_every_scm(cluster: Cluster) -> None:  # noqa: F811
    for scm in cluster.scms.values():
        scm.safe_mode = True
    async with SCMClient([cluster.address("scm1"), cluster.address("scm2")], FAST) as client:
        assert await client.force_exit_safe_mode() is True
        assert [a for a, _ in client.last_broadcast] == [cluster.address("scm1"), cluster.address("scm2")]
    assert not any(scm.safe_mode for scm in cluster.scms.values())


async def test_retry_with_the_same_call_id_is_answered_once(cluster: Cluster) -> None:  # noqa: F811
    leader = cluster.scms["scm2"]
    channel = grpc.aio.insecure_channel(cluster.address("scm2"))
    stub = channel.unary_unary(
        "/hadoop.hdds.ScmBlockLocationProtocolService/AllocateScmBlock",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=scm_client_pb2.AllocateScmBlockResponseProto.FromString,
    )
    req = scm_client_pb2.AllocateScmBlockRequestProto(size=1024, numBlocks=2, type=hdds_pb2.RATIS,
                                                      factor=hdds_pb2.THREE, owner="o")
    md = call_metadata.request_metadata("client-1", 7)
    first = await stub(req, timeout=5, metadata=md)
    again = await stub(req, timeout=5, metadata=md)  # a retry: same client id and call id
    other = await stub(req, timeout=5, metadata=call_metadata.request_metadata("client-1", 8))
    await channel.close()
    ids = [b.containerBlockID.localID for b in first.blocks]
    assert [b.containerBlockID.localID for b in again.blocks] == ids
    assert [b.containerBlockID.localID for b in other.blocks] != ids
    assert leader.calls.count("allocate_block") == 2


class _ExpiredContext:
    """The part of grpc.aio.ServicerContext the guard reads, for a call that waited past its deadline."""

    def time_remaining(self) -> float:
        return -0.01

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()


async def test_expired_deadline_is_refused_without_running() -> None:
    from scm_server.server import endpoints
    from scm_server.server.grpc_services import LocationProtocolService, RpcMetrics

    from .fakes import FakeSCM

    scm = FakeSCM()
    service = LocationProtocolService(scm, endpoints.Protocol.CLIENT, {}.get, RpcMetrics(None))
    ran = []

    async def impl(req: object, ctx: object) -> scm_client_pb2.Empty:
        ran.append(req)
        return scm_client_pb2.Empty()

    with pytest.raises(SCMException) as info:
        await service._guarded("InSafeMode", impl, scm_client_pb2.Empty(), _ExpiredContext())  # type: ignore[arg-type]
    assert info.value.result is ResultCodes.TIMEOUT and "deadline passed before it ran" in str(info.value)
    assert ran == []


async def test_response_cache_joins_running_calls_and_recovers_from_cancellation() -> None:
    t = FakeTime()
    cache = ResponseCache(expiry=10, clock=t.clock)
    runs = 0
    release = asyncio.Event()

    async def work() -> int:
        nonlocal runs
        runs += 1
        await release.wait()
        return runs

    key = ("c", 1, "S/M")
    first = asyncio.ensure_future(cache.run(key, work))
    await asyncio.sleep(0)
    joiner = asyncio.ensure_future(cache.run(key, work))
    await asyncio.sleep(0)
    release.set()
    assert await first == 1 and await joiner == 1 and runs == 1
    assert await cache.run(key, work) == 1  # finished: the first answer
    t.now += 11
    assert await cache.run(key, work) == 2  # expired: runs again

    # the first copy is cancelled (its client went away): a retry that joined it runs the call itself
    release.clear()
    key2 = ("c", 2, "S/M")
    first = asyncio.ensure_future(cache.run(key2, work))
    await asyncio.sleep(0)
    joiner = asyncio.ensure_future(cache.run(key2, work))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    release.set()
    assert await joiner == 4

    async def fails() -> int:
        raise SCMException(ResultCodes.TIMEOUT, "raft timeout")

    with pytest.raises(SCMException):
        await cache.run(("c", 3, "S/M"), fails)
    assert await cache.run(("c", 3, "S/M"), work) == 5  # failures are not remembered


def test_client_config_rejects_bad_values() -> None:
    from scm_server.exceptions import ConfigError

    with pytest.raises(ConfigError, match=r"hdds\.scmclient\.failover\.max\.retry"):
        SCMClientConfig.from_getter({"hdds.scmclient.failover.max.retry": "-1"}.get)
    with pytest.raises(ConfigError, match=r"ozone\.scm\.ha\.ratis\.leader\.election\.timeout"):
        SCMClientConfig.from_getter({"ozone.scm.ha.ratis.leader.election.timeout": "soon"}.get)


async def test_response_cache_is_bounded_in_bytes() -> None:
    # A leader answering hundreds of 100-block allocations a second must not keep a minute of them.
    t = FakeTime()
    cache = ResponseCache(expiry=60, capacity=1000, clock=t.clock, max_bytes=10_000)
    runs = 0
    noise = random.Random(7).randbytes(3000)  # incompressible: kept at about its own size

    async def answer() -> bytes:
        nonlocal runs
        runs += 1
        return noise

    for call_id in range(10):
        assert await cache.run(("c", call_id, "S/M"), answer) == noise
        assert cache.bytes <= 10_000
    assert len(cache) == 3 and 9000 <= cache.bytes <= 10_000 and runs == 10
    assert await cache.run(("c", 9, "S/M"), answer) == noise and runs == 10  # newest kept
    assert await cache.run(("c", 0, "S/M"), answer) == noise and runs == 11  # oldest evicted: runs again


async def test_response_cache_keeps_repetitive_answers_compressed_and_returns_them_whole() -> None:
    # A 100-block answer repeats its pipeline in every block: it is kept compressed, so far more
    # answers fit in the same bytes, and a retry gets exactly the bytes the first call sent.
    t = FakeTime()
    cache = ResponseCache(expiry=60, capacity=1000, clock=t.clock, max_bytes=100_000)
    pipeline = random.Random(3).randbytes(700)
    answers = {i: b"".join(i.to_bytes(8, "big") + j.to_bytes(8, "big") + pipeline for j in range(100)) for i in range(50)}

    async def answer(i: int) -> bytes:
        return answers[i]

    for i in range(50):
        assert await cache.run(("c", i, "S/M"), lambda i=i: answer(i)) == answers[i]
    assert len(answers[0]) == 71_600 and len(cache) == 50 and cache.bytes < 100_000
    for i in range(50):
        async def fail() -> bytes:
            raise AssertionError("a retry within the window ran the call again")

        assert await cache.run(("c", i, "S/M"), fail) == answers[i]
    assert cache.hits == 50


def test_one_rule_table_keyed_by_each_transports_own_names() -> None:
    """call_guard.RULES, by Ozone protocol and command, is what both transports look up: gRPC by (service,
    method), Hadoop RPC by (protocol, cmdType)."""
    from scm_server.server import call_guard as g

    loc, block = g.LOCATION, g.BLOCK
    assert loc.hadoop_protocol == "org.apache.hadoop.hdds.scm.protocol.StorageContainerLocationProtocol"
    assert block.hadoop_protocol == "org.apache.hadoop.hdds.scm.protocol.ScmBlockLocationProtocol"
    for (face, command), rule in g.RULES.items():
        assert g.access_of(face.grpc_service, command) is rule.access
        assert ((face.grpc_service, command) in g.NON_IDEMPOTENT) is rule.non_idempotent
        assert ((face.hadoop_protocol, command) in g.HADOOP_NON_IDEMPOTENT) is rule.non_idempotent
        assert ((face.hadoop_protocol, command) in g.HADOOP_RAFT_CLIENT_CALLS) is rule.raft_client_call
    # over Hadoop RPC every SCM answers Ozone's ADMIN_COMMAND_TYPE and FOLLOWER_READABLE_COMMAND_TYPES (and
    # GetScmInfo); over gRPC the follower-readable ones are READs (a follower answers its own view when asked)
    anywhere = {c for (p, c), a in g.HADOOP_ACCESS.items() if p == loc.hadoop_protocol and a is g.Access.ANY}
    assert anywhere == {"StartReplicationManager", "StopReplicationManager", "ForceExitSafeMode", "InSafeMode",
                        "GetSafeModeRuleStatuses", "GetScmInfo"}
    assert g.access_of(loc.grpc_service, "InSafeMode") is g.Access.READ
    assert g.hadoop_access_of(loc.hadoop_protocol, "GetContainer") is g.Access.READ  # not listed: a leader's read
    assert g.hadoop_access_of(block.hadoop_protocol, "AllocateScmBlock") is g.Access.LEADER
    assert g.hadoop_access_of("org.apache.hadoop.ozone.protocol.StorageContainerDatanodeProtocol", "SendHeartbeat") \
        is g.Access.ANY
    # the gRPC names do not key the Hadoop table, nor the other way round
    assert g.hadoop_access_of(block.grpc_service, "AllocateScmBlock") is g.Access.ANY
    assert g.access_of(block.hadoop_protocol, "AllocateScmBlock") is g.Access.ANY


def test_hadoop_retry_cache_key_needs_a_client_id_and_a_non_idempotent_command() -> None:
    from scm_server.server import call_guard as g

    protocol = g.BLOCK.hadoop_protocol
    assert g.hadoop_cache_key(b"\x01\x02", 7, protocol, "AllocateScmBlock") == (
        "hrpc:0102", 7, f"{protocol}/AllocateScmBlock")
    assert g.hadoop_cache_key(b"", 7, protocol, "AllocateScmBlock") is None
    assert g.hadoop_cache_key(b"\x01", 7, protocol, "GetScmInfo") is None
