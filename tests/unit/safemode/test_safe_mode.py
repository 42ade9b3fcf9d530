"""SCMSafeModeManager: rules, status progression into SCMContext/services, restart with data, force exit."""

from __future__ import annotations

from pathlib import Path

from scm_state_harness import bring_up, make_conf, make_datanodes, make_scm, replica

from scm_server.clock import FakeClock
from scm_server.ha.scm_service import ServiceStatus
from scm_server.proto import hdds_pb2
from scm_server.safemode.safe_mode_manager import SafeModeStatusName
from scm_server.scm import StorageContainerManager

R = hdds_pb2.ContainerReplicaProto


def rules(scm: StorageContainerManager) -> dict[str, tuple[bool, str]]:
    return {r.ruleName: (r.validate, r.statusText) for r in scm.safe_mode_rule_statuses()}


async def test_pre_check_then_exit_pushes_status(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    sm = scm.safe_mode_manager
    assert sm.status is SafeModeStatusName.INITIAL
    assert scm.scm_context.is_in_safe_mode() and not scm.scm_context.is_pre_check_complete()
    assert scm.replication_manager.status is ServiceStatus.PAUSING
    dns = make_datanodes(3)
    await dns[0].register(scm)
    await dns[1].register(scm)
    ok, text = rules(scm)["DataNodeSafeModeRule"]
    assert not ok and text == "registered datanodes (=2) >= required datanodes (=3)"
    await dns[2].register(scm)
    assert sm.status is SafeModeStatusName.OUT_OF_SAFE_MODE  # empty cluster: other rules trivially hold
    assert not scm.scm_context.is_in_safe_mode() and scm.scm_context.is_pre_check_complete()
    assert scm.replication_manager.status is ServiceStatus.RUNNING  # services notified
    assert scm.force_exit_safe_mode() is False
    await scm.stop()


async def test_restart_waits_for_container_and_pipeline_reports(tmp_path: Path) -> None:
    clock = FakeClock()
    scm = await make_scm(tmp_path, clock)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    cids = []
    for _ in range(4):
        cid = (await scm.container_manager.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")).containerID
        cids.append(cid)
        await scm.close_container(cid)
        for dn in dns:
            dn.replicas[cid] = replica(cid, R.CLOSED, keys=5)
    for dn in dns:
        await dn.heartbeat(scm)
    assert all(scm.get_container(c).state == hdds_pb2.CLOSED for c in cids)
    # One more container that is still CLOSING when the SCM stops: excluded from the rule (HDDS-2198).
    closing = (await scm.container_manager.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")).containerID
    await scm.close_container(closing)
    await scm.stop()

    again = await StorageContainerManager.create(make_conf(tmp_path), clock=clock)
    await again.ha_manager.start()
    for dn in dns:
        dn.replicas.pop(closing, None)
    await dns[0].register(again)
    await dns[1].register(again)
    assert again.in_safe_mode() == (True, False)
    # dn3 reports nothing yet: one RATIS/THREE pipeline not fully reported.
    only_two = {k: v for k, v in dns[2].replicas.items()}
    dns[2].replicas.clear()
    pipelines = set(dns[2].pipelines)
    dns[2].pipelines.clear()
    await dns[2].register(again)
    status = rules(again)
    assert status["DataNodeSafeModeRule"][0]
    assert status["RatisContainerSafeModeRule"][0]  # every CLOSED container has >= 1 replica
    assert not status["HealthyPipelineSafeModeRule"][0]
    assert again.in_safe_mode() == (True, True)
    dns[2].replicas.update(only_two)
    dns[2].pipelines.update(pipelines)
    await dns[2].heartbeat(again)
    assert again.in_safe_mode() == (False, True)
    await again.stop()


async def test_container_rule_threshold(tmp_path: Path) -> None:
    clock = FakeClock()
    scm = await make_scm(tmp_path, clock, **{"hdds.scm.safemode.threshold.pct": "0.5"})
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    cids = []
    for _ in range(4):
        cid = (await scm.container_manager.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")).containerID
        cids.append(cid)
        await scm.close_container(cid)
        dns[0].replicas[cid] = replica(cid, R.CLOSED, keys=5)
    await dns[0].heartbeat(scm)
    await scm.stop()
    again = await StorageContainerManager.create(
        make_conf(tmp_path, **{"hdds.scm.safemode.threshold.pct": "0.5", "hdds.scm.safemode.healthy.pipeline.pct": "0",
                               "hdds.scm.safemode.atleast.one.node.reported.pipeline.pct": "0"}),
        clock=clock,
    )
    await again.ha_manager.start()
    for cid in cids[1:]:
        dns[0].replicas.pop(cid)
    for dn in dns[1:]:
        await dn.register(again)
    await dns[0].register(again)
    ok, text = rules(again)["RatisContainerSafeModeRule"]
    assert not ok and "[1/4]" in text
    dns[0].replicas[cids[1]] = replica(cids[1], R.CLOSED, keys=5)
    await dns[0].heartbeat(again)
    assert rules(again)["RatisContainerSafeModeRule"][0]
    assert not again.in_safe_mode()[0]
    await again.stop()


async def test_force_exit_and_disabled(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path / "a")
    assert scm.force_exit_safe_mode() is True
    assert scm.in_safe_mode() == (False, True) and scm.safe_mode_manager.forced
    await scm.stop()
    disabled = await make_scm(tmp_path / "b", **{"hdds.scm.safemode.enabled": "false"})
    assert disabled.in_safe_mode() == (False, True)
    await disabled.stop()


async def test_state_machine_ready_hook(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    ready = {"v": False}
    scm.safe_mode_manager.set_state_machine_ready_hook(lambda: ready["v"])
    await bring_up(scm, make_datanodes(3))
    assert scm.in_safe_mode() == (True, True)
    ready["v"] = True
    await scm.run_health_check()
    assert scm.in_safe_mode() == (False, True)
    await scm.stop()


async def test_container_rule_costs_no_rescan_per_heartbeat(tmp_path: Path) -> None:
    """Until datanodes report, every heartbeat and refresh re-validates the rules: after the first
    evaluation the container rule must not look at the pending containers again (at 1M containers a
    rescan per heartbeat kept the SCM busy for seconds), unless containers were removed."""
    clock = FakeClock()
    scm = await make_scm(tmp_path, clock)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    cids = []
    for _ in range(6):
        cid = (await scm.container_manager.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")).containerID
        cids.append(cid)
        await scm.close_container(cid)
        for dn in dns:
            dn.replicas[cid] = replica(cid, R.CLOSED, keys=5)
    for dn in dns:
        await dn.heartbeat(scm)
    await scm.stop()

    again = await StorageContainerManager.create(make_conf(tmp_path), clock=clock)
    await again.ha_manager.start()
    held = {dn.uuid: dict(dn.replicas) for dn in dns}
    for dn in dns:
        dn.replicas.clear()
        await dn.register(again)
    ok, text = rules(again)["RatisContainerSafeModeRule"]
    assert not ok and "[0/6]" in text
    cm = again.container_manager
    looked: list[int] = []
    exists, has_replicas = cm.exists, cm.has_replicas
    cm.exists = lambda cid: looked.append(cid) or exists(cid)  # type: ignore[method-assign]
    cm.has_replicas = lambda cid: looked.append(cid) or has_replicas(cid)  # type: ignore[method-assign]
    for _ in range(5):
        for dn in dns:
            await dn.heartbeat(again)
        await again.run_health_check()
    assert looked == [], f"the container rule rescanned pending containers on heartbeats: {looked}"
    # A removed pending container leaves the rule's total (one rescan, then none again).
    await cm.state_manager.remove_container(cids[0])
    assert "[0/5]" in rules(again)["RatisContainerSafeModeRule"][1]
    looked.clear()
    await dns[0].heartbeat(again)
    assert looked == []
    # Replicas reported for 4 of the 5: 80% < the 99% default, still in safemode; the 5th opens it.
    dns[0].replicas.update({c: r for c, r in held[dns[0].uuid].items() if c in cids[1:5]})
    await dns[0].heartbeat(again)
    ok, text = rules(again)["RatisContainerSafeModeRule"]
    assert not ok and "[4/5]" in text
    dns[1].replicas[cids[5]] = held[dns[1].uuid][cids[5]]
    await dns[1].heartbeat(again)
    assert rules(again)["RatisContainerSafeModeRule"][0]
    await again.stop()


async def test_ec_container_rule_needs_data_replicas(tmp_path: Path) -> None:
    """Ozone's ECContainerSafeModeRule: an rs-3-2 container with keys counts once 3 datanodes report it."""
    clock = FakeClock()
    scm = await make_scm(tmp_path, clock)
    dns = make_datanodes(5)
    await bring_up(scm, dns)
    ec = hdds_pb2.ECReplicationConfig(data=3, parity=2, codec="rs", ecChunkSize=1 << 20)
    info = await scm.container_manager.allocate_container(hdds_pb2.EC, hdds_pb2.ZERO, "om", ec=ec)
    cid = info.containerID
    await scm.close_container(cid)
    pipeline = scm.pipeline_manager.get_pipeline(info.pipelineID.id)
    holders = {m.uuid: i for m, i in zip(pipeline.members, pipeline.memberReplicaIndexes, strict=True)}
    for dn in dns:
        dn.replicas[cid] = replica(cid, R.CLOSED, keys=5)
        dn.replicas[cid].replicaIndex = holders[dn.uuid]
        await dn.heartbeat(scm)
    assert scm.container_manager.get_container(cid).state == hdds_pb2.CLOSED
    await scm.stop()
    again = await StorageContainerManager.create(
        make_conf(tmp_path, **{"hdds.scm.safemode.healthy.pipeline.pct": "0",
                               "hdds.scm.safemode.atleast.one.node.reported.pipeline.pct": "0"}),
        clock=clock,
    )
    await again.ha_manager.start()
    for dn in dns[:2]:
        await dn.register(again)
    ok, text = rules(again)["ECContainerSafeModeRule"]
    assert not ok and "[0/1]" in text  # two of the three data replicas a read needs
    ec_rule = next(r for r in again.safe_mode_manager.rules if r.name == "ECContainerSafeModeRule")
    assert ec_rule.figures() == (0, 1)  # SafeModeMetrics' EC counts: reported, threshold
    assert rules(again)["RatisContainerSafeModeRule"][0]  # EC containers are not the Ratis rule's
    for dn in dns[2:]:
        await dn.register(again)
    ok, text = rules(again)["ECContainerSafeModeRule"]
    assert ok and "[1/1]" in text
    assert ec_rule.figures() == (1, 1) and ec_rule.refreshes > 0 and ec_rule.last_refresh_ms >= 0
    assert not again.in_safe_mode()[0]
    await again.stop()


async def test_exit_duration_is_measured_on_the_injected_clock(tmp_path: Path) -> None:
    """SafeModeMetrics' ScmSafeModeExitDurationMs: from the manager's start to the exit of safemode."""
    clock = FakeClock()
    scm = await make_scm(tmp_path, clock)
    assert scm.safe_mode_manager.exit_duration_ms == 0
    clock.advance(42.5)
    await bring_up(scm, make_datanodes(3))
    assert not scm.in_safe_mode()[0]
    assert scm.safe_mode_manager.exit_duration_ms == 42_500
    await scm.stop()
