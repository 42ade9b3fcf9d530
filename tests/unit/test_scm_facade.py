"""StorageContainerManager facade: construction errors, admin reads, HA hooks, metrics, summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from scm_state_harness import bring_up, make_conf, make_datanodes, make_scm, replica

from scm_server.clock import FakeClock
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha.sequence_id_generator import LOCAL_ID
from scm_server.proto import hdds_pb2
from scm_server.raft.core.types import ConfState
from scm_server.scm import StorageContainerManager, _leader_known

R = hdds_pb2.ContainerReplicaProto


async def test_create_refuses_uninitialized_storage(tmp_path: Path) -> None:
    with pytest.raises(SCMException) as err:
        await StorageContainerManager.create(make_conf(tmp_path))
    assert err.value.result is ResultCodes.SCM_NOT_INITIALIZED
    assert "ozone-scm scm --init" in str(err.value)


async def test_admin_reads_and_summary(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    cwp = await scm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "admin")
    cid = cwp.containerInfo.containerID
    await scm.allocate_container(hdds_pb2.RATIS, hdds_pb2.ONE, "admin")
    await scm.close_container(cid)
    for dn in dns:
        dn.replicas[cid] = replica(cid, R.CLOSED, keys=3)
        await dn.heartbeat(scm)
    info, replicas = scm.get_container_with_pipeline(cid)
    assert info.containerInfo.state == hdds_pb2.CLOSED
    assert scm.container_and_pipeline(cid) == (info.containerInfo, info.pipeline)
    assert sorted(r.datanode.uuid for r in replicas) == sorted(d.uuid for d in dns)
    closed, total = scm.list_containers(state=hdds_pb2.CLOSED)
    assert [c.containerID for c in closed] == [cid] and total == 1
    page, total = scm.list_containers(start_id=0, count=1)
    assert len(page) == 1 and total == 2
    ones, _ = scm.list_containers(rfactor=hdds_pb2.ONE)
    assert [c.replicationFactor for c in ones] == [hdds_pb2.ONE]
    with pytest.raises(SCMException) as err:
        await scm.close_container(cid)
    assert err.value.result is ResultCodes.UNEXPECTED_CONTAINER_STATE
    scm.stop_replication_manager()
    assert scm.replication_manager_status() is False
    scm.start_replication_manager()
    assert scm.replication_manager_status() is True
    await scm.replication_manager.run_once()
    report = {c.key: c.count for c in scm.replication_manager_report().stat}
    assert report["CLOSED"] == 1 and report["OPEN"] == 1 and report["HEALTHY"] == 2
    summary = scm.status_summary()
    json.dumps(summary)  # plain data for the web page
    assert summary["containers_by_state"]["CLOSED"] == 1
    assert len(summary["nodes"]) == 3 and summary["nodes"][0]["health"] == "HEALTHY"
    assert summary["safemode"]["in_safe_mode"] is False
    assert {r["name"] for r in summary["safemode"]["rules"]} >= {"DataNodeSafeModeRule", "RatisContainerSafeModeRule"}
    assert summary["ha"]["is_leader"] is True and summary["ha"]["term"] == -1
    info_resp = scm.get_scm_info()
    assert info_resp.clusterId == scm.storage_config.cluster_id and info_resp.peerRoles
    await scm.stop()


async def test_metrics_registry_is_per_instance(tmp_path: Path) -> None:
    one = await make_scm(tmp_path / "one")
    two = await make_scm(tmp_path / "two")
    await bring_up(one, make_datanodes(3))
    await one.allocate_block(1024, 5, hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    text_one = generate_latest(one.metrics_registry).decode()
    text_two = generate_latest(two.metrics_registry).decode()
    assert "scm_blocks_allocated_total 5.0" in text_one
    assert "scm_blocks_allocated_total 0.0" in text_two
    assert 'scm_nodes{health="HEALTHY",op_state="IN_SERVICE"} 3.0' in text_one
    assert "scm_safemode 1.0" in text_two and "scm_safemode 0.0" in text_one
    assert 'scm_containers{state="OPEN"} 2.0' in text_one
    # without Raft an SCM is its own leader; no backup served yet: no backup metric
    assert "scm_raft_leader_known 1.0" in text_one
    assert "scm_backup_last_served_timestamp_seconds" not in text_one
    one.last_backup_served = 1764000000.5
    text_one = generate_latest(one.metrics_registry).decode()
    assert "scm_backup_last_served_timestamp_seconds 1.7640000005e+09" in text_one
    await one.stop()
    await two.stop()


async def test_leader_change_hooks_invalidate_batches_and_pause(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    await bring_up(scm, make_datanodes(3))
    first = await scm.sequence_id_generator.get_next_id(LOCAL_ID)
    scm.on_step_down(5)
    assert not scm.scm_context.is_leader()
    assert scm.replication_manager.status.value == "PAUSING"
    scm.on_become_leader(6)
    assert scm.scm_context.is_leader() and not scm.scm_context.is_leader_ready()
    scm.on_leader_ready()
    assert scm.replication_manager.status.value == "RUNNING"
    second = await scm.sequence_id_generator.get_next_id(LOCAL_ID)
    assert second > first + 1  # the rest of the old batch was dropped, never reused
    cmd_term = {c.term for dn in scm.node_manager.all_nodes() for c in dn.commands}
    assert cmd_term <= {6}
    await scm.stop()


async def test_reinitialize_after_checkpoint_install(tmp_path: Path) -> None:
    clock = FakeClock()
    leader = await make_scm(tmp_path / "leader", clock)
    await bring_up(leader, make_datanodes(3))
    for _ in range(3):
        await leader.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    checkpoint = leader.metadata_store.checkpoint(tmp_path / "cp")
    follower = await make_scm(tmp_path / "follower", clock, scm_id=None)
    assert follower.list_containers()[1] == 0
    follower.metadata_store.replace_from_checkpoint(checkpoint)
    follower.reinitialize()
    assert follower.list_containers()[1] == 3
    assert len(follower.list_pipelines()) == len(leader.list_pipelines())
    assert follower.transaction_buffer.latest_trx_info() == leader.transaction_buffer.latest_snapshot()
    await leader.stop()
    await follower.stop()


async def test_pipeline_action_closes_pipeline_and_container_view_survives(tmp_path: Path) -> None:
    from scm_server.proto import scm_datanode_pb2

    clock = FakeClock()
    scm = await make_scm(tmp_path, clock)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    cwp = await scm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    pid = cwp.pipeline.id
    actions = scm_datanode_pb2.PipelineActionsProto(
        pipelineActions=[
            scm_datanode_pb2.PipelineAction(
                action=scm_datanode_pb2.PipelineAction.CLOSE,
                closePipeline=scm_datanode_pb2.ClosePipelineInfo(
                    pipelineID=pid, reason=scm_datanode_pb2.ClosePipelineInfo.PIPELINE_FAILED, detailedReason="ratis log failed"
                ),
            )
        ]
    )
    resp = await dns[0].heartbeat(scm, pipelineActions=actions)
    assert scm.pipeline_manager.get_pipeline(pid.id).state == hdds_pb2.PIPELINE_CLOSED
    assert scm.get_container(cwp.containerInfo.containerID).state == hdds_pb2.CLOSING
    kinds = {c.commandType for c in resp.commands}
    assert scm_datanode_pb2.SCMCommandProto.closePipelineCommand in kinds
    assert scm_datanode_pb2.SCMCommandProto.closeContainerCommand in kinds
    await scm.pipeline_manager.scrub_pipelines()
    assert scm.pipeline_manager.find(pid.id) is not None  # kept until the destroy timeout
    clock.advance(66)
    await scm.pipeline_manager.scrub_pipelines()  # CLOSED pipelines are removed after 66s
    assert scm.pipeline_manager.find(pid.id) is None
    dns[1].replicas[cwp.containerInfo.containerID] = replica(cwp.containerInfo.containerID, R.CLOSING)
    await dns[1].heartbeat(scm)
    view, replicas = scm.get_container_with_pipeline(cwp.containerInfo.containerID)
    assert view.pipeline.state == hdds_pb2.PIPELINE_CLOSED  # synthesised from where the replicas are
    assert [m.uuid for m in view.pipeline.members] == [dns[1].uuid] and len(replicas) == 1
    assert scm.container_and_pipeline(cwp.containerInfo.containerID) == (view.containerInfo, view.pipeline)
    await scm.stop()


async def test_listed_containers_carry_the_usage_their_replicas_report(tmp_path: Path) -> None:
    """A page of ListContainer is what GetContainer answers for each: the stored row raised to the most any
    replica reports (soft state), the stored row itself unchanged."""
    scm = await make_scm(tmp_path)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    ids = [(await scm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "u")).containerInfo.containerID for _ in range(3)]
    for n, dn in enumerate(dns):
        dn.replicas[ids[0]] = replica(ids[0], R.OPEN, keys=4 + n, used=1000 * (n + 1), bcsid=7)
        dn.replicas[ids[1]] = replica(ids[1], R.OPEN, keys=1, used=10)
        await dn.heartbeat(scm)
    page, total = scm.list_containers()
    assert total == 3 and [c.containerID for c in page] == ids
    assert page == [scm.get_container(c) for c in ids]
    assert (page[0].usedBytes, page[0].numberOfKeys, page[0].sequenceId) == (3000, 6, 7)
    assert (page[1].usedBytes, page[1].numberOfKeys) == (10, 1)
    assert (page[2].usedBytes, page[2].numberOfKeys) == (0, 0)  # no replica reported yet
    assert scm.container_state_manager.get_container(ids[0]).usedBytes == 0  # soft: nothing stored
    await scm.stop()


async def test_start_runs_background_services_and_stop_is_clean(tmp_path: Path) -> None:
    import asyncio

    scm = await make_scm(tmp_path, **{"ozone.scm.heartbeat.thread.interval": "50ms"})
    await scm.start()
    await bring_up(scm, make_datanodes(3))
    scm.start_replication_manager()  # wakes the service loop at once
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while scm.replication_manager.runs == 0 and loop.time() < deadline:
        await asyncio.sleep(0.01)
    assert scm.replication_manager.runs >= 1
    before = scm.node_manager.heartbeats_processed
    await scm.stop()
    assert all(t.done() for t in scm._tasks) and scm._tasks == []
    assert not scm.metadata_store.is_open
    assert scm.node_manager.heartbeats_processed == before


async def test_datanode_admin_monitor_runs_every_configured_interval(tmp_path: Path) -> None:
    default = await make_scm(tmp_path / "default")
    assert default.datanode_admin_monitor.interval.total_seconds() == 30
    await default.stop()
    tuned = await make_scm(tmp_path / "tuned", **{"ozone.scm.datanode.admin.monitor.interval": "3s"})
    assert tuned.datanode_admin_monitor.interval.total_seconds() == 3
    await tuned.stop()


class _Ring:
    """An HA manager as the leader-known gauge reads it (no membership: no Raft, or Raft not started)."""

    def __init__(self, members: tuple[str, ...] | None, leader: str | None) -> None:
        self.members, self.leader = members, leader

    def ring_membership(self) -> ConfState | None:
        return None if self.members is None else ConfState(voters=self.members)

    def leader_peer_id(self) -> str | None:
        return self.leader


@pytest.mark.parametrize(("members", "leader", "known"), [
    (None, None, True),  # no Raft: the single SCM is its own leader
    (("p1", "p2", "p3"), None, False),  # between elections, or cut off from the majority
    (("p1", "p2", "p3"), "p2", True),
])
def test_leader_known_asks_the_ha_manager(members: tuple[str, ...] | None, leader: str | None, known: bool) -> None:
    assert _leader_known(_Ring(members, leader)) is known  # type: ignore[arg-type]
