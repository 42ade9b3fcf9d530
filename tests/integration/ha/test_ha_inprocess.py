"""The HA layer on its own: three (then four) SCMHAManagerImpl in one event loop on loopback.

Real RaftServer, real inter-SCM gRPC service, real scm.db per SCM; the replicated workload is the
real SequenceIdGenerator (batch CAS through Raft). Covers init/bootstrap/AddSCM join, ID
uniqueness across a leader stop, catch-up of a new SCM by checkpoint install after log purge,
decommission (refusing the leader), leader transfer and the table digests.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from scm_server.exceptions import SCMException
from scm_server.ha.bootstrap import scm_bootstrap, scm_init
from scm_server.ha.inter_scm_client import channel
from scm_server.proto import scm_ha_pb2, scm_ha_pb2_grpc

from .minihost import MiniHost, alloc_ports, make_conf, wait_for

pytestmark = pytest.mark.processes  # whole-SCM scenarios: make test-slow


async def _init_cluster(tmp_path: Path, node_ids: list[str], **extra: object) -> tuple[list[MiniHost], dict]:
    ports = alloc_ports(node_ids)
    confs = {n: make_conf(tmp_path, node_ids, n, ports, **extra) for n in node_ids}
    # auto-bootstrap: init + bootstrap on the primordial, start it, then the others
    assert scm_init(confs[node_ids[0]], security=None)
    assert scm_bootstrap(confs[node_ids[0]], security=None)
    first = MiniHost(confs[node_ids[0]])
    await first.start()
    await wait_for(lambda: first.ha.is_leader(), 10, "primordial SCM to lead its one-member group")
    hosts = [first]
    for n in node_ids[1:]:
        assert scm_init(confs[n], security=None)  # no-op: not primordial
        assert await asyncio.to_thread(scm_bootstrap, confs[n], security=None, rounds=3, rpc_timeout=2.0)
        h = MiniHost(confs[n])
        await h.start()
        hosts.append(h)
    return hosts, {"ports": ports, "confs": confs}


def _leader(hosts: list[MiniHost]) -> MiniHost:
    leaders = [h for h in hosts if h.ha.is_leader()]
    assert len(leaders) == 1, [h.ha.node_id for h in leaders]
    return leaders[0]


async def _digests(h: MiniHost, index: int) -> scm_ha_pb2.TableDigestsResponseProto:
    async with channel(f"127.0.0.1:{h.ha.grpc_port}") as ch:
        return await scm_ha_pb2_grpc.InterSCMProtocolServiceStub(ch).GetTableDigests(
            scm_ha_pb2.TableDigestsRequestProto(minAppliedIndex=index, waitSeconds=10), timeout=15
        )


async def test_three_scms_replicate_ids_failover_and_digests(tmp_path: Path) -> None:
    node_ids = ["scm1", "scm2", "scm3"]
    hosts, _ = await _init_cluster(tmp_path, node_ids)
    try:
        cluster_ids = {h.storage_config.cluster_id for h in hosts}
        assert len(cluster_ids) == 1
        await wait_for(lambda: all(len(h.ha.raft.conf.voters) == 3 for h in hosts), 20, "3 voters everywhere")
        leader = _leader(hosts)
        issued: list[int] = [await leader.seq.get_next_id("containerId") for _ in range(35)]
        # followers refuse with a leader hint carrying the leader's client address
        follower = next(h for h in hosts if h is not leader)
        with pytest.raises(SCMException) as err:
            await follower.seq.get_next_id("containerId")
        assert "not the leader" in str(err.value)
        assert leader.ha.get_leader() is not None and follower.ha.get_leader()[1].startswith("127.0.0.1:")  # type: ignore[index]
        # stop the leader: a new one takes over, IDs continue without reuse
        hosts.remove(leader)
        await leader.stop()
        await wait_for(lambda: sum(h.ha.is_leader() for h in hosts) == 1, 10, "a new leader")
        new_leader = _leader(hosts)
        await wait_for(lambda: new_leader.scm_context.is_leader_ready(), 10, "new leader ready")
        issued += [await new_leader.seq.get_next_id("containerId") for _ in range(25)]
        assert len(issued) == len(set(issued)), "an ID was handed out twice"
        assert issued == sorted(issued)
        # both survivors hold identical replicated tables at the same applied index
        index = new_leader.ha.raft.status().commit_index
        d = [await _digests(h, index) for h in hosts]
        assert d[0].transactionInfo.index == d[1].transactionInfo.index
        assert [x.sha256 for x in d[0].digests] == [x.sha256 for x in d[1].digests]
        assert any(x.table == "sequenceId" and x.count >= 1 for x in d[0].digests)
        # roles: one leader, the stopped SCM still a (silent) member
        roles = new_leader.ha.roles_proto()
        assert sorted(r.split(":")[2] for r in roles.roles) == ["FOLLOWER", "FOLLOWER", "LEADER"]
    finally:
        for h in hosts:
            await h.stop()


async def test_fourth_scm_catches_up_by_checkpoint_then_transfer_and_decommission(tmp_path: Path) -> None:
    node_ids = ["scm1", "scm2", "scm3", "scm4"]
    extra = {"ozone.scm.ha.ratis.snapshot.threshold": "20", "ozone.scm.ha.ratis.log.purge.gap": "5"}
    ports = alloc_ports(node_ids)
    confs = {n: make_conf(tmp_path, node_ids, n, ports, **extra) for n in node_ids}
    assert scm_init(confs["scm1"], security=None)
    first = MiniHost(confs["scm1"], batch_size=1)
    await first.start()
    hosts = [first]
    try:
        await wait_for(lambda: first.ha.is_leader(), 10, "primordial leader")
        issued = [await first.seq.get_next_id("containerId") for _ in range(120)]
        st = first.ha.raft.status()
        assert st.first_index > 1, f"log not purged (first index {st.first_index})"
        assert await asyncio.to_thread(scm_bootstrap, confs["scm4"], security=None, rounds=3, rpc_timeout=2.0)
        new = MiniHost(confs["scm4"])
        await new.start()
        hosts.append(new)
        assert new.ha.state_machine.installs >= 1, "the new SCM should have installed a checkpoint"
        assert new.seq_state.last_id("containerId") == first.seq_state.last_id("containerId")
        await wait_for(lambda: new.ha.dn_reports_ready(), 10, "datanode-report gate to open on the new SCM")
        # leader transfer to the new SCM, then it serves IDs
        async with channel(f"127.0.0.1:{first.ha.grpc_port}") as ch:
            stub = scm_ha_pb2_grpc.InterSCMProtocolServiceStub(ch)
            resp = await stub.TransferLeadership(scm_ha_pb2.TransferLeadershipRequestProto(newLeaderId=new.ha.peer_id))
            assert resp.newLeaderId == new.ha.peer_id
        await wait_for(lambda: new.ha.is_leader() and new.scm_context.is_leader_ready(), 10, "new SCM leads")
        issued += [await new.seq.get_next_id("containerId") for _ in range(5)]
        assert len(issued) == len(set(issued))
        # decommission: the leader is refused, the follower is removed
        async with channel(f"127.0.0.1:{new.ha.grpc_port}") as ch:
            stub = scm_ha_pb2_grpc.InterSCMProtocolServiceStub(ch)
            cid = new.storage_config.cluster_id
            with pytest.raises(Exception) as err:
                await stub.RemoveSCM(scm_ha_pb2.RemoveScmRequestProto(clusterId=cid, scmId=new.ha.peer_id))
            assert "Cannot remove current leader" in str(err.value)
            ok = await stub.RemoveSCM(scm_ha_pb2.RemoveScmRequestProto(clusterId=cid, scmId=first.ha.peer_id))
            assert ok.success
        await wait_for(lambda: new.ha.raft.conf.voters == (new.ha.peer_id,), 10, "first SCM removed")
        assert not first.fatal and not new.fatal
    finally:
        for h in hosts:
            await h.stop()


async def test_logical_rejection_fatal_error_and_stale_checkpoint(tmp_path: Path) -> None:
    from scm_server.exceptions import ResultCodes
    from scm_server.ha.inter_scm_client import DownloadedCheckpoint
    from scm_server.raft.core.types import SnapshotMetadata

    node_ids = ["scm1", "scm2", "scm3"]
    hosts, _ = await _init_cluster(tmp_path, node_ids)
    try:
        await wait_for(lambda: all(len(h.ha.raft.conf.voters) == 3 for h in hosts), 20, "3 voters")
        leader = _leader(hosts)
        await leader.seq.get_next_id("containerId")
        first = leader.ha.raft.status().commit_index
        await wait_for(lambda: all(h.transaction_buffer.latest_trx_info().index >= first for h in hosts), 10, "apply")
        before = [h.seq_state.last_id("containerId") for h in hosts]
        assert len(set(before)) == 1
        # a logical rejection comes back to the caller as SCMException; every replica is untouched
        with pytest.raises(SCMException) as err:
            await leader.seq_state.allocate_batch("noSuchType", 0, 10)
        assert err.value.result is ResultCodes.INVALID_REQUEST
        index = leader.ha.raft.status().commit_index
        await wait_for(lambda: all(h.transaction_buffer.latest_trx_info().index >= index for h in hosts), 10, "apply")
        assert [h.seq_state.last_id("containerId") for h in hosts] == before
        assert not any(h.fatal for h in hosts)

        # a checkpoint older than what an SCM already applied is refused, its DB untouched
        follower = next(h for h in hosts if h is not leader)
        old_dir = tmp_path / "old-checkpoint"
        old_db = leader.metadata_store.checkpoint(old_dir / "unpacked")
        old_trx = leader.metadata_store.read_transaction_info(old_db)
        assert old_trx is not None
        for _ in range(15):
            await leader.seq.get_next_id("localId")
        await wait_for(lambda: follower.transaction_buffer.latest_trx_info().index > old_trx.index, 10, "progress")

        async def fake_download(*_: object) -> DownloadedCheckpoint:
            return DownloadedCheckpoint(old_db, old_trx, leader.storage_config.cluster_id or "", 1, "test")

        follower.ha.download_checkpoint_from_leader = fake_download  # type: ignore[method-assign]
        applied = follower.transaction_buffer.latest_trx_info()
        with pytest.raises(SCMException, match="behind this SCM's applied index"):
            await follower.ha.state_machine.install_snapshot_from_leader(
                leader.ha.peer_id, "", SnapshotMetadata(index=old_trx.index, term=old_trx.term)
            )
        assert follower.transaction_buffer.latest_trx_info() == applied
        assert follower.metadata_store.is_open and follower.reinits == 0

        # a fatal apply error (INTERNAL_ERROR) stops every SCM instead of letting replicas diverge
        def explode(self: object, name: str, expected: int, new: int) -> bool:
            raise SCMException(ResultCodes.INTERNAL_ERROR, "disk on fire")

        from scm_server.ha.replicate import REPLICATED_ATTR

        info = getattr(type(leader.seq_state).allocate_batch, REPLICATED_ATTR)
        original = info.local
        object.__setattr__(info, "local", explode)
        try:
            before_poison = max(h.transaction_buffer.latest_trx_info().index for h in hosts)
            with pytest.raises(Exception):  # noqa: B017 - the caller sees the server stop
                await leader.seq_state.allocate_batch("containerId", leader.seq_state.last_id("containerId"), 10**9)
            # every SCM that applies the entry stops (a majority does: the entry is committed), and no
            # SCM that is still up has applied anything past the poisoned entry
            await wait_for(lambda: sum(bool(h.fatal) for h in hosts) >= 2, 20, "a majority to stop on the fatal error")
            assert all("disk on fire" in h.fatal[0] for h in hosts if h.fatal)
            for h in hosts:
                if not h.fatal:
                    assert h.transaction_buffer.latest_trx_info().index <= before_poison
        finally:
            object.__setattr__(info, "local", original)
    finally:
        for h in hosts:
            await h.stop()
