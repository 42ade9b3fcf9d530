"""Real processes on loopback: ``python -m scm_server.raft.kv`` members, driven through the KV and
admin gRPC services (elections, failover, pauses, membership, snapshots, exactly-once, backpressure)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scm_server.proto import raft_pb2, raft_pb2_grpc
from scm_server.raft.kv_client import KvClient
from scm_server.raft.transport import make_channel

from .cluster import KvCluster, KvProcess, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.slow]

Factory = Callable[..., KvCluster]


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Factory]:
    clusters: list[KvCluster] = []

    def make(**kw: object) -> KvCluster:
        c = KvCluster(tmp_path / f"c{len(clusters)}", **kw)  # type: ignore[arg-type]
        clusters.append(c)
        c.start()
        return c

    yield make
    for c in clusters:
        c.stop()


async def caught_up(p: KvProcess, index: int) -> bool:
    st = await p.status_once()
    return st.applied_index >= index


async def read_from(p: KvProcess, key: bytes, timeout: float = 20.0) -> bytes | None:
    """A linearizable Get served by this very member (ReadIndex forwarded to the leader if needed),
    retried until the member can serve it (e.g. it learns about a new leader) or the deadline."""

    async def once() -> tuple[bytes | None]:
        async with KvClient([p.address], rpc_timeout=2.0, max_attempts=1) as c:
            return (await c.get(key),)

    return (await wait_for(once, timeout, f"a read of {key!r} served by {p.node_id}"))[0]


async def test_election_replication_kill9_and_restart(make_cluster: Factory) -> None:
    c = make_cluster()
    leader = await c.leader()
    async with c.client() as kv:
        assert await kv.put(b"a", b"1") is None
        assert await kv.put(b"a", b"2") == b"1"
        assert await kv.get(b"a") == b"2"
        assert await kv.cas(b"a", b"2", b"3") is True
        assert await kv.cas(b"a", b"2", b"4") is False
        assert await kv.cas(b"new", None, b"x") is True
        leader.kill()  # SIGKILL
        new = await c.leader(exclude={leader.node_id})
        assert new.node_id != leader.node_id
        for i in range(20):
            await kv.put(b"k%d" % i, b"v%d" % i)
        assert await kv.get(b"a") == b"3"
        target = (await new.status()).commit_index
        leader.start()  # the old leader restarts from its own log and catches up
        await wait_for(lambda: caught_up(leader, target), 20, f"{leader.node_id} to catch up to {target}")
        st = await leader.status()
        assert st.role == "FOLLOWER" and st.leader_id == new.node_id
        assert await read_from(leader, b"k19") == b"v19"


async def test_followers_replace_a_killed_leader_before_an_election_timeout(make_cluster: Factory) -> None:
    """SIGKILL closes the leader's connections at once; the followers take the end of its stream as
    the sign and elect a new leader after 0.2-0.5 s, not after the election timeout (3-6 s here)."""
    c = make_cluster(election_tick=60)  # 60 ticks of 0.05 s
    leader = await c.leader(timeout=20)
    async with c.client() as kv:
        await kv.put(b"before", b"1")
        old_term = (await leader.status()).term
        leader.kill()
        new = await c.leader(timeout=2.8, exclude={leader.node_id})
        assert (await new.status()).term > old_term
        await kv.put(b"after", b"2")
        assert await kv.get(b"before") == b"1"


async def test_sigstop_leader_is_replaced_then_rejoins(make_cluster: Factory) -> None:
    c = make_cluster()
    leader = await c.leader()
    async with c.client() as kv:
        await kv.put(b"before", b"1")
        old_term = (await leader.status()).term
        leader.signal(signal.SIGSTOP)
        try:
            new = await c.leader(exclude={leader.node_id})
            await kv.put(b"during", b"2")
        finally:
            leader.signal(signal.SIGCONT)
        assert (await new.status()).term > old_term

        async def stepped_down() -> bool:
            st = await leader.status_once()
            return st.role != "LEADER" and st.leader_id == new.node_id

        await wait_for(stepped_down, 15, "the paused leader to step down")
        assert await read_from(leader, b"during") == b"2"


async def test_leader_transfer(make_cluster: Factory) -> None:
    c = make_cluster()
    leader = await c.leader()
    target = next(p for p in c.nodes.values() if p is not leader)
    async with leader.admin() as admin:
        assert await admin.transfer_leadership(target.node_id, timeout=10) == target.node_id
    assert (await c.leader()).node_id == target.node_id
    async with c.client() as kv:
        await kv.put(b"after-transfer", b"ok")
        assert await kv.get(b"after-transfer") == b"ok"


async def test_add_fourth_member_then_remove_the_leader(make_cluster: Factory) -> None:
    c = make_cluster()
    leader = await c.leader()
    async with c.client() as kv:
        for i in range(30):
            await kv.put(b"k%d" % i, b"v%d" % i)
        n4 = c.add_process("n4")
        n4.start()  # empty configuration: must not campaign, waits to be added
        await wait_for(n4.status_once, 15, "n4 to come up")
        st4 = await n4.status()
        assert st4.role == "FOLLOWER" and st4.voters == () and st4.term == 0
        async with leader.admin() as admin:
            await admin.add_member("n4", n4.address, timeout=30)
        st = await leader.status()
        assert "n4" in st.voters and st.learners == ()
        assert await read_from(n4, b"k29") == b"v29"
        # remove the leader itself: it keeps leading until the change commits, then steps down
        async with leader.admin() as admin:
            await admin.remove_member(leader.node_id, timeout=20)
        new = await c.leader(exclude={leader.node_id})
        assert leader.node_id not in (await new.status()).voters
        await kv.put(b"after-remove", b"1")
        assert await read_from(n4, b"after-remove") == b"1"


@pytest.mark.parametrize("mode", ["notify", "chunked"])
async def test_snapshot_install_after_compaction(make_cluster: Factory, mode: str) -> None:
    c = make_cluster(snapshot_threshold=40, purge_gap=5, install_mode=mode)
    leader = await c.leader()
    lagging = next(p for p in c.nodes.values() if p is not leader)
    async with c.client() as kv:
        await kv.put(b"first", b"1")
        lagging_last = (await lagging.status()).last_index
        lagging.kill()
        for i in range(150):
            await kv.put(b"k%d" % i, b"v%d" % i)
        st = await leader.status()
        assert st.snapshot_index > lagging_last and st.first_index > lagging_last + 1, (
            "the leader must have purged the entries the lagging member needs"
        )
        lagging.start()
        await wait_for(lambda: caught_up(lagging, st.commit_index), 30, "the lagging member to install a snapshot")
        lst = await lagging.status()
        assert lst.snapshot_index > lagging_last  # installed a snapshot, not a log replay
        assert await read_from(lagging, b"k149") == b"v149"
        assert await read_from(lagging, b"first") == b"1"


async def test_retry_cache_exactly_once_across_leader_change(make_cluster: Factory) -> None:
    c = make_cluster()
    leader = await c.leader()
    client_id = b"client-exactly-once"
    ch = make_channel(leader.address)
    try:
        stub = raft_pb2_grpc.KvServiceStub(ch)
        first = await stub.Put(raft_pb2.KvRequest(key=b"x", value=b"v1", client_id=client_id, call_id=7), timeout=5)
        assert first.ok and not first.found
        second = await stub.Put(raft_pb2.KvRequest(key=b"x", value=b"v2", client_id=client_id, call_id=8), timeout=5)
        assert second.ok and second.value == b"v1"
    finally:
        await ch.close()
    target = next(p for p in c.nodes.values() if p is not leader)
    async with leader.admin() as admin:
        await admin.transfer_leadership(target.node_id)
    new = await c.leader()
    assert new.node_id == target.node_id
    ch = make_channel(new.address)
    try:
        stub = raft_pb2_grpc.KvServiceStub(ch)
        # a retry of call 7 at the new leader returns the original result and is not re-applied
        retry = await stub.Put(raft_pb2.KvRequest(key=b"x", value=b"v1", client_id=client_id, call_id=7), timeout=5)
        assert retry.ok and not retry.found
        got = await stub.Get(raft_pb2.KvRequest(key=b"x"), timeout=5)
        assert got.ok and got.value == b"v2"
    finally:
        await ch.close()


async def test_proposal_queue_full_is_a_clear_error(make_cluster: Factory) -> None:
    c = make_cluster(max_pending=4, election_tick=40)
    leader = await c.leader()
    followers = [p for p in c.nodes.values() if p is not leader]
    for p in followers:
        p.signal(signal.SIGSTOP)
    ch = make_channel(leader.address)
    try:
        stub = raft_pb2_grpc.KvServiceStub(ch)
        replies = await asyncio.gather(
            *(stub.Put(raft_pb2.KvRequest(key=b"q%d" % i, value=b"v", timeout=0.5), timeout=5) for i in range(12))
        )
    finally:
        for p in followers:
            p.signal(signal.SIGCONT)
        await ch.close()
    full = [r for r in replies if r.error.code == "QUEUE_FULL"]
    assert len(full) >= 8, [r.error.code for r in replies]
    assert "max_pending_proposals=4" in full[0].error.message and "retry" in full[0].error.message
    async with c.client() as kv:  # the cluster recovers once the followers run again
        await kv.put(b"after", b"ok")
        assert await kv.get(b"after") == b"ok"


async def test_new_member_joins_after_the_log_was_purged(make_cluster: Factory) -> None:
    """The SCM bootstrap flow: a member added long after init catches up through a checkpoint."""
    c = make_cluster(snapshot_threshold=30, purge_gap=5)
    leader = await c.leader()
    async with c.client() as kv:
        for i in range(80):
            await kv.put(b"k%d" % i, b"v%d" % i)
        st = await leader.status()
        assert st.first_index > 1 and st.snapshot_index > 0
        n4 = c.add_process("n4")
        n4.start()
        await wait_for(n4.status_once, 15, "n4 to come up")
        async with leader.admin() as admin:
            await admin.add_member("n4", n4.address, timeout=30)
        st4 = await n4.status()
        assert st4.snapshot_index >= st.snapshot_index and "n4" in st4.voters
        assert await read_from(n4, b"k0") == b"v0"
        assert await read_from(n4, b"k79") == b"v79"


@pytest.mark.parametrize("point", ["before_save", "after_save"])
async def test_member_crashing_at_a_persist_point_recovers(make_cluster: Factory, point: str) -> None:
    """A real server killed by a failpoint in the middle of its write path (os._exit at the 40th
    hit) restarts cleanly, catches up, and the group loses nothing acknowledged."""
    c = make_cluster()
    leader = await c.leader()
    leader.kill()
    leader.start(extra_env={"RAFT_FAILPOINT": f"{point}:40"})
    async with c.client(max_attempts=60) as kv:
        acked: dict[bytes, bytes] = {}
        for i in range(200):
            try:
                await kv.put(b"k%d" % i, b"v%d" % i)
                acked[b"k%d" % i] = b"v%d" % i
            except Exception:  # the write racing the crash may have an unknown outcome
                continue
            if not leader.alive:
                break
        assert leader.proc is not None
        assert leader.proc.wait(30) == 1, "the failpoint should have crashed the member"
        leader.start()
        new = await c.leader()
        target = (await new.status()).commit_index
        await wait_for(lambda: caught_up(leader, target), 20, "the crashed member to catch up")
        for key, value in acked.items():
            assert await kv.get(key) == value
        assert await read_from(leader, max(acked, key=lambda k: int(k[1:]))) is not None


async def test_full_cluster_kill9_and_restart_keeps_every_acknowledged_write(make_cluster: Factory) -> None:
    """PySyncObj#201's scenario: every member SIGKILLed at once under load, then restarted."""
    c = make_cluster()
    await c.leader()
    acked: dict[bytes, bytes] = {}
    async with c.client() as kv:

        async def load(w: int) -> None:
            for i in range(10_000):
                key, value = b"w%d-%d" % (w, i), b"%d" % i
                try:
                    await kv.put(key, value)
                except Exception:  # in flight when the cluster died: outcome unknown
                    return
                acked[key] = value

        writers = [asyncio.ensure_future(load(w)) for w in range(8)]
        await wait_for(lambda: _true(len(acked) >= 300), 30, "300 acknowledged writes")
        for p in c.nodes.values():
            p.kill()
        for t in writers:  # writes in flight now have an unknown outcome: stop waiting for them
            t.cancel()
        await asyncio.gather(*writers, return_exceptions=True)
    for p in c.nodes.values():
        p.start()
    await c.leader()
    async with c.client() as kv:
        for key, value in acked.items():
            assert await kv.get(key) == value, f"acknowledged write {key!r} lost after a full-cluster crash"


async def _true(value: bool) -> bool:
    return value
