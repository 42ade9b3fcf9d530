"""ContainerManager: allocation, matching containers, close, report handlers, leader-only transitions."""

from __future__ import annotations

from pathlib import Path

import pytest
from scm_state_harness import bring_up, make_datanodes, make_scm, replica

from scm_server.clock import FakeClock
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.proto import hdds_pb2, scm_datanode_pb2

R = hdds_pb2.ContainerReplicaProto
T = scm_datanode_pb2.SCMCommandProto.Type


async def test_allocate_and_matching_container_respects_open_container_limit(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    cm = scm.container_manager
    (p3,) = scm.pipeline_manager.open_pipelines(hdds_pb2.RATIS, hdds_pb2.THREE)
    # openContainerLimit = ceil(3 * 1 volume / pipeline limit 2) = 2 per owner and pipeline
    assert scm.node_manager.open_container_limit(m.uuid for m in p3.members) == 2
    got = [ (await cm.get_matching_container(1000, "om1", p3)).containerID for _ in range(6)]
    assert sorted(set(got)) == [1, 2]
    other = await cm.get_matching_container(1000, "om2", p3)  # another owner gets its own containers
    assert other.containerID == 3 and other.owner == "om2"
    excluded = await cm.get_matching_container(1000, "om1", p3, exclude_ids=[1, 2])
    assert excluded.containerID == 4
    info = cm.get_container(1)
    assert info.state == hdds_pb2.OPEN and info.pipelineID == p3.id and info.replicationFactor == hdds_pb2.THREE
    await scm.stop()


async def test_full_container_gets_a_new_one(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    cm = scm.container_manager
    (p3,) = scm.pipeline_manager.open_pipelines(hdds_pb2.RATIS, hdds_pb2.THREE)
    a = await cm.get_matching_container(1000, "om", p3)
    b = await cm.get_matching_container(1000, "om", p3)
    # Both containers report they are (almost) full.
    for dn in dns:
        dn.replicas[a.containerID] = replica(a.containerID, R.OPEN, used=(1 << 30) - 10)
        dn.replicas[b.containerID] = replica(b.containerID, R.OPEN, used=(1 << 30) - 10)
        await dn.heartbeat(scm)
    c = await cm.get_matching_container(1000, "om", p3)
    assert c.containerID not in (a.containerID, b.containerID)
    assert cm.get_container(a.containerID).usedBytes == (1 << 30) - 10
    await scm.stop()


async def test_report_driven_lifecycle_on_leader(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    cm = scm.container_manager
    info = await cm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    cid = info.containerID
    for dn in dns:
        dn.replicas[cid] = replica(cid, R.OPEN, keys=0, bcsid=0)
        await dn.heartbeat(scm)
    assert len(cm.get_replicas(cid)) == 3 and cm.get_container(cid).state == hdds_pb2.OPEN
    # A datanode asks to close (container full): FINALIZE -> CLOSING and close commands to members.
    action = scm_datanode_pb2.ContainerActionsProto(
        containerActions=[
            scm_datanode_pb2.ContainerAction(
                containerID=cid, action=scm_datanode_pb2.ContainerAction.CLOSE, reason=scm_datanode_pb2.ContainerAction.CONTAINER_FULL
            )
        ]
    )
    resp = await dns[0].heartbeat(scm, containerActions=action)
    assert cm.get_container(cid).state == hdds_pb2.CLOSING
    assert any(c.commandType == T.closeContainerCommand and c.closeContainerCommandProto.containerID == cid for c in resp.commands)
    # First CLOSED replica (via ICR) closes the container; usage is persisted with it.
    icr = scm_datanode_pb2.IncrementalContainerReportProto(report=[replica(cid, R.CLOSED, keys=7, bcsid=9)])
    await dns[1].heartbeat(scm, full=False, incrementalContainerReport=[icr])
    stored = scm.container_state_manager.get_container(cid)
    assert stored.state == hdds_pb2.CLOSED and stored.numberOfKeys == 7 and stored.sequenceId == 9
    # A DELETED replica in an ICR removes the replica.
    icr = scm_datanode_pb2.IncrementalContainerReportProto(report=[replica(cid, R.DELETED)])
    await dns[2].heartbeat(scm, full=False, incrementalContainerReport=[icr])
    assert {r.datanode_uuid for r in cm.get_replicas(cid)} == {dns[0].uuid, dns[1].uuid}
    # A full report that omits a container removes that replica.
    dns[0].replicas.clear()
    await dns[0].heartbeat(scm)
    assert {r.datanode_uuid for r in cm.get_replicas(cid)} == {dns[1].uuid}
    await scm.stop()


async def test_quasi_closed_then_force_close(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    cid = (await scm.container_manager.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")).containerID
    await scm.close_container(cid)
    dns[0].replicas[cid] = replica(cid, R.QUASI_CLOSED)
    await dns[0].heartbeat(scm)
    assert scm.get_container(cid).state == hdds_pb2.QUASI_CLOSED
    dns[1].replicas[cid] = replica(cid, R.CLOSED)
    await dns[1].heartbeat(scm)
    assert scm.get_container(cid).state == hdds_pb2.CLOSED
    await scm.stop()


async def test_follower_records_replicas_but_never_transitions(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    cid = (await scm.container_manager.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")).containerID
    scm.scm_context.update_leader_and_term(False, 5)  # pretend we became a Raft follower
    dns[0].replicas[cid] = replica(cid, R.CLOSED)
    resp = await dns[0].heartbeat(scm)
    assert scm.get_container(cid).state == hdds_pb2.OPEN  # no lifecycle change on a follower
    assert [r.datanode_uuid for r in scm.container_manager.get_replicas(cid)] == [dns[0].uuid]
    assert list(resp.commands) == [] and not resp.HasField("term")
    with pytest.raises(NotLeaderException):
        await scm.close_container(cid)
    with pytest.raises(NotLeaderException):
        await scm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    await scm.stop()


async def test_dead_node_loses_replicas_and_pipelines(tmp_path: Path) -> None:
    clock = FakeClock()
    scm = await make_scm(tmp_path, clock)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    cid = (await scm.container_manager.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")).containerID
    for dn in dns:
        dn.replicas[cid] = replica(cid, R.OPEN)
        await dn.heartbeat(scm)
    clock.advance(6 * 60)
    for dn in dns[:2]:
        await dn.heartbeat(scm)
    await scm.run_health_check()  # dn3 STALE: its pipelines close, the open container starts closing
    assert scm.node_manager.require_node(dns[2].uuid).health == hdds_pb2.STALE
    assert scm.get_container(cid).state == hdds_pb2.CLOSING
    assert all(p.state == hdds_pb2.PIPELINE_CLOSED for p in scm.pipeline_manager.pipelines_of(dns[2].uuid))
    clock.advance(5 * 60)
    for dn in dns[:2]:
        await dn.heartbeat(scm)
    await scm.run_health_check()  # dn3 DEAD: replicas removed, pipelines destroyed
    assert scm.node_manager.require_node(dns[2].uuid).health == hdds_pb2.DEAD
    assert dns[2].uuid not in {r.datanode_uuid for r in scm.container_manager.get_replicas(cid)}
    assert scm.pipeline_manager.pipelines_of(dns[2].uuid) == []
    await scm.stop()


async def test_admin_close_errors(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    with pytest.raises(SCMException) as err:
        await scm.close_container(42)
    assert err.value.result is ResultCodes.CONTAINER_NOT_FOUND
    with pytest.raises(SCMException) as err:
        scm.get_container(42)
    assert err.value.result is ResultCodes.CONTAINER_NOT_FOUND
    await scm.stop()


async def test_replication_pending_ops_complete_or_expire(tmp_path: Path) -> None:
    clock = FakeClock()
    scm = await make_scm(tmp_path, clock)
    dns = make_datanodes(4)
    await bring_up(scm, dns)
    cid = (await scm.container_manager.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")).containerID
    await scm.close_container(cid)
    for dn in dns[:2]:
        dn.replicas[cid] = replica(cid, R.CLOSED)
        await dn.heartbeat(scm)
    rm = scm.replication_manager
    scm.node_manager.clear_command_queues()

    def replicate_targets() -> list[str]:
        return [
            n.uuid
            for n in scm.node_manager.all_nodes()
            for c in scm.node_manager.queued_commands(n.uuid, T.replicateContainerCommand)
            if c.replicateContainerCommandProto.containerID == cid
        ]

    await rm.run_once()
    (target,) = replicate_targets()
    assert len(rm.pending_ops) == 1
    scm.node_manager.clear_command_queues()
    await rm.run_once()
    assert replicate_targets() == []  # pending: not issued again
    clock.advance(12 * 60 + 1)  # hdds.scm.replication.event.timeout passed without the replica
    await rm.run_once()
    assert len(replicate_targets()) == 1
    # The replica shows up: the pending op completes and the container is healthy.
    new_target = replicate_targets()[0]
    holder = next(d for d in dns if d.uuid == new_target)
    holder.replicas[cid] = replica(cid, R.CLOSED)
    await holder.heartbeat(scm)
    assert len(rm.pending_ops) == 0
    await rm.run_once()
    assert rm.last_results[cid].health.value == "HEALTHY"
    assert target  # first target was a real datanode
    await scm.stop()


async def test_concurrent_allocations_respect_open_container_limit(tmp_path: Path) -> None:
    import asyncio

    scm = await make_scm(tmp_path)
    await bring_up(scm, make_datanodes(3))
    real_submit = scm.ha_manager.submit_request

    async def raft_like_submit(request):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0)  # a Raft round trip suspends the caller, letting others interleave
        return await real_submit(request)

    scm.ha_manager.submit_request = raft_like_submit  # type: ignore[method-assign]
    blocks = await asyncio.gather(
        *(scm.allocate_block(1024, 1, hdds_pb2.RATIS, hdds_pb2.THREE, "om") for _ in range(40))
    )
    containers = {b[0].container_id for b in blocks}
    assert len(containers) == 2  # openContainerLimit, even with 40 concurrent callers
    assert len({b[0].local_id for b in blocks}) == 40
    await scm.stop()


async def test_replication_limit_counts_datanode_reported_queue(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path, **{"hdds.scm.replication.datanode.replication.limit": "2"})
    dns = make_datanodes(4)
    await bring_up(scm, dns)
    cid = (await scm.container_manager.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")).containerID
    await scm.close_container(cid)
    for dn in dns[:2]:
        dn.replicas[cid] = replica(cid, R.CLOSED)
        await dn.heartbeat(scm)
    busy = scm_datanode_pb2.CommandQueueReportProto(command=[T.replicateContainerCommand], count=[2])
    for dn in dns[2:]:
        await dn.heartbeat(scm, commandQueueReport=busy)  # both candidate targets report a full queue
    scm.node_manager.clear_command_queues()
    await scm.replication_manager.run_once()
    assert scm.replication_manager.commands_throttled == 1
    assert dict(scm.replication_manager.commands_deferred) == {"replicate": 1}  # ReplicateContainerCmdsDeferredTotal
    assert all(not scm.node_manager.queued_commands(d.uuid, T.replicateContainerCommand) for d in dns)
    idle = scm_datanode_pb2.CommandQueueReportProto(command=[T.replicateContainerCommand], count=[0])
    for dn in dns[2:]:
        await dn.heartbeat(scm, commandQueueReport=idle)
    await scm.replication_manager.run_once()
    assert sum(len(scm.node_manager.queued_commands(d.uuid, T.replicateContainerCommand)) for d in dns) == 1
    await scm.stop()


async def test_large_full_report_gives_the_event_loop_turns(tmp_path: Path) -> None:
    """A full report of many replicas must not hold the event loop (the SCM's Raft heartbeats run on
    it): other tasks get turns while it is processed, and every replica is still recorded."""
    import asyncio

    from scm_server.container.container_manager import REPORT_YIELD_EVERY

    scm = await make_scm(tmp_path, FakeClock())
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    cid = (await scm.container_manager.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")).containerID
    turns = 0
    running = True

    async def other() -> None:
        nonlocal turns
        while running:
            turns += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    await asyncio.sleep(0)
    before = turns
    unknown = [hdds_pb2.ContainerReplicaProto(containerID=10**9 + i, state=hdds_pb2.ContainerReplicaProto.CLOSED)
               for i in range(5 * REPORT_YIELD_EVERY)]
    report = scm_datanode_pb2.ContainerReportsProto(
        reports=[*unknown, hdds_pb2.ContainerReplicaProto(containerID=cid, state=hdds_pb2.ContainerReplicaProto.OPEN)])
    await scm.container_manager.process_container_report(dns[0].uuid, report)
    during = turns - before
    running = False
    await task
    assert during >= 5, f"only {during} turns for other tasks during a {len(report.reports)}-replica report"
    assert [r.datanode_uuid for r in scm.container_manager.get_replicas(cid)] == [dns[0].uuid]
    await scm.stop()


async def test_replicas_that_agree_share_their_int_objects(tmp_path: Path) -> None:
    """Memory at 1M containers x 3 replicas: equal BCSIDs, used bytes and key counts are one int object
    (the container record's for the first replica, else the first replica's), while differing values
    stay each replica's own."""
    scm = await make_scm(tmp_path, FakeClock())
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    cm = scm.container_manager
    cid = (await cm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")).containerID
    big = 10**12  # ints this large are never cached by CPython: each decode makes a new object
    record = cm.state_manager.record_of(cid)
    assert record is not None and cm.state_manager.record_of(10**9) is None
    # as after a close, the stored usage is what the replicas report (set here for the test only)
    record.used_bytes, record.number_of_keys = big + 1, big + 2
    by_dn = {}
    for i, dn in enumerate(dns):
        bcsid = big + 7 if i < 2 else big + 8  # the third replica reports another BCSID
        proto = hdds_pb2.ContainerReplicaProto(containerID=cid, state=hdds_pb2.ContainerReplicaProto.OPEN,
                                               used=big + 1, keyCount=big + 2, blockCommitSequenceId=bcsid)
        await cm.process_container_report(dn.uuid, scm_datanode_pb2.ContainerReportsProto(reports=[proto]))
        by_dn[dn.uuid] = i
    first, second, third = sorted(cm.get_replicas(cid), key=lambda r: by_dn[r.datanode_uuid])
    assert first.used_bytes is record.used_bytes and first.key_count is record.number_of_keys
    assert first.sequence_id == big + 7 and first.sequence_id is not record.sequence_id  # the record has 0
    assert (second.used_bytes, second.key_count, second.sequence_id) == (big + 1, big + 2, big + 7)
    assert second.used_bytes is first.used_bytes and second.key_count is first.key_count
    assert second.sequence_id is first.sequence_id
    assert third.sequence_id == big + 8 and third.sequence_id is not first.sequence_id
    assert third.used_bytes is first.used_bytes
    await scm.stop()


async def test_full_reports_leave_exactly_what_each_datanode_last_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Full reports in any order, in chunks between event-loop turns, first or repeated, with unknown
    and deleted entries: each datanode then holds exactly the known, not-deleted containers its last
    report listed, replicas stay ordered by datanode, and the counts agree."""
    import random

    from scm_server.container import container_manager as cm_module

    monkeypatch.setattr(cm_module, "REPORT_YIELD_EVERY", 3)  # several chunks per report
    scm = await make_scm(tmp_path, FakeClock())
    dns = make_datanodes(4)
    await bring_up(scm, dns)
    cm = scm.container_manager
    p3 = scm.pipeline_manager.open_pipelines(hdds_pb2.RATIS, hdds_pb2.THREE)[0]
    cids = [(await cm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om", p3)).containerID for _ in range(12)]
    rng = random.Random(7)
    expected: dict[str, set[int]] = {}
    for _ in range(40):
        dn = rng.choice(dns)
        listed = rng.sample(cids, rng.randint(0, len(cids)))
        deleted = set(rng.sample(listed, rng.randint(0, 2))) if listed else set()
        entries = [replica(c, R.DELETED if c in deleted else R.OPEN, keys=0, bcsid=0) for c in listed]
        entries.insert(rng.randint(0, len(entries)), replica(10**9, R.OPEN))  # unknown: ignored
        await cm.process_container_report(dn.uuid, scm_datanode_pb2.ContainerReportsProto(reports=entries))
        expected[dn.uuid] = set(listed) - deleted
        for c in cids:
            held = [r.datanode_uuid for r in cm.get_replicas(c)]
            assert held == sorted(d for d, cs in expected.items() if c in cs), f"container #{c}"
        for d, cs in expected.items():
            assert cm.containers_on(d) == cs and cm.container_count_on(d) == len(cs)
        assert cm.replica_count() == sum(len(cs) for cs in expected.values())
    assert not cm.has_replicas(10**9)
    await scm.stop()


async def test_matching_container_goes_round_the_open_ones_skipping_full_and_excluded(tmp_path: Path) -> None:
    """Ozone's getMatchingContainer: the next container with room after the one chosen last, in id order, wrapping
    around; a full or excluded one is passed over, and when none has room a new one is made."""
    scm = await make_scm(tmp_path)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    cm = scm.container_manager
    (p3,) = scm.pipeline_manager.open_pipelines(hdds_pb2.RATIS, hdds_pb2.THREE)
    ids = [(await cm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")).containerID for _ in range(4)]
    limit = 4
    got = [await cm.get_matching_container_id(1000, "om", p3, limit=limit) for _ in range(9)]
    assert got == [ids[i % 4] for i in range(9)]
    full = ids[1]
    for dn in dns:
        dn.replicas[full] = replica(full, R.OPEN, used=(1 << 30) - 10)
        await dn.heartbeat(scm)
    got = [await cm.get_matching_container_id(1000, "om", p3, limit=limit) for _ in range(6)]
    assert full not in got and sorted(set(got)) == sorted(set(ids) - {full})
    got = [await cm.get_matching_container_id(1000, "om", p3, [ids[0]], limit=3) for _ in range(4)]
    assert sorted(set(got)) == [ids[2], ids[3]]  # the excluded one and the full one passed over
    # every open container full or excluded: a new one
    made = await cm.get_matching_container_id(1000, "om", p3, [ids[0], ids[2], ids[3]], limit=1)
    assert made not in ids
    assert cm.get_container(made).state == hdds_pb2.OPEN
    await scm.stop()
