"""A killed datanode and the ReplicationManager: classification and report stay consistent.

The bad case seen in an integration run: the ReplicationManager report still said HEALTHY while
a container had only two live replicas left. Ozone's semantics, which these tests pin down:

* a STALE node's replica still counts (RatisContainerReplicaCount counts by operational state;
  SCM waits for DEAD), so HEALTHY is right while the node is only STALE;
* on DEAD, DeadNodeHandler removes the node's replicas and notifies the ReplicationManager
  (REPLICATION_MANAGER_NOTIFY), so the report must turn UNDER_REPLICATED without waiting for
  ``hdds.scm.replication.thread.interval`` (1h here);
* a node IN_MAINTENANCE that goes DEAD keeps its replicas (they count as maintenance copies).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from scm_state_harness import FakeDatanode, bring_up, make_datanodes, make_scm, replica

from scm_server.clock import FakeClock
from scm_server.container.replication.replication_manager import ContainerHealthState, health_of
from scm_server.proto import hdds_pb2
from scm_server.scm import StorageContainerManager

R = hdds_pb2.ContainerReplicaProto


async def wait_until(cond: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Poll ``cond`` until true or fail after ``timeout_s`` (a deadline, not a fixed sleep)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.01)


async def closed_container_on_three(
    tmp_path: Path, clock: FakeClock
) -> tuple[StorageContainerManager, list[FakeDatanode], list[FakeDatanode], int]:
    scm = await make_scm(tmp_path, clock=clock, **{"hdds.scm.replication.thread.interval": "1h"})
    dns = make_datanodes(4)
    await bring_up(scm, dns)
    info = await scm.container_manager.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    cid = info.containerID
    members = {m.uuid for m in scm.pipeline_manager.find(info.pipelineID.id).members}  # type: ignore[union-attr]
    holders = [dn for dn in dns if dn.uuid in members]
    assert len(holders) == 3
    for dn in holders:
        dn.replicas[cid] = replica(cid, R.CLOSED, keys=10, bcsid=5)
        await dn.heartbeat(scm)
    assert scm.container_manager.get_container(cid).state == hdds_pb2.CLOSED
    scm.force_exit_safe_mode()
    assert not scm.in_safe_mode()[0]
    return scm, dns, holders, cid


async def kill(scm: StorageContainerManager, clock: FakeClock, dns: list[FakeDatanode], victim: FakeDatanode, seconds: float) -> None:
    """``victim`` stops heartbeating; the others keep going; then one health check runs."""
    clock.advance(seconds)
    for dn in dns:
        if dn is not victim:
            await dn.heartbeat(scm, full=False)
    await scm.run_health_check()


async def test_report_turns_under_replicated_when_a_replica_holder_dies(tmp_path: Path) -> None:
    clock = FakeClock()
    scm, dns, holders, cid = await closed_container_on_three(tmp_path, clock)
    rm = scm.replication_manager
    await rm.start()
    try:
        await wait_until(lambda: rm.runs >= 1, "the first ReplicationManager pass")
        assert health_of(scm.replication_manager_report(), ContainerHealthState.HEALTHY) == 1
        victim = holders[0]

        # STALE (past ozone.scm.stale.node.interval=5m, before dead=10m): still counts, as in Ozone.
        await kill(scm, clock, dns, victim, 6 * 60)
        assert scm.node_manager.require_node(victim.uuid).health == hdds_pb2.STALE
        runs = rm.runs
        await rm.run_once()
        assert rm.last_results[cid].health is ContainerHealthState.HEALTHY
        assert len(scm.container_manager.get_replicas(cid)) == 3

        # DEAD: replicas removed and the report refreshed now, not an interval (1h) later.
        runs = rm.runs
        await kill(scm, clock, dns, victim, 6 * 60)
        assert scm.node_manager.require_node(victim.uuid).health == hdds_pb2.DEAD
        assert {r.datanode_uuid for r in scm.container_manager.get_replicas(cid)} == {h.uuid for h in holders[1:]}
        await wait_until(lambda: rm.runs > runs, "a ReplicationManager pass after the node died")
        report = scm.replication_manager_report()
        assert health_of(report, ContainerHealthState.UNDER_REPLICATED) == 1
        assert health_of(report, ContainerHealthState.HEALTHY) == 0
        # Classification and report agree, and the repair goes to the one node without a copy.
        assert rm.last_results[cid].health is ContainerHealthState.UNDER_REPLICATED
        (spare,) = [dn for dn in dns if dn not in holders]
        assert [c.datanode for c in rm.last_results[cid].commands] == [spare.uuid]
    finally:
        await rm.stop()
        await scm.stop()


async def test_dead_node_in_maintenance_keeps_its_replicas(tmp_path: Path) -> None:
    clock = FakeClock()
    scm, dns, holders, cid = await closed_container_on_three(tmp_path, clock)
    victim = holders[0]
    scm.node_manager.set_node_operational_state(victim.uuid, hdds_pb2.IN_MAINTENANCE)
    await kill(scm, clock, dns, victim, 11 * 60)
    assert scm.node_manager.require_node(victim.uuid).health == hdds_pb2.DEAD
    assert victim.uuid in {r.datanode_uuid for r in scm.container_manager.get_replicas(cid)}
    await scm.replication_manager.run_once()
    # 2 in-service + 1 maintenance copy >= maintenance minimum 2: nothing to repair.
    assert scm.replication_manager.last_results[cid].health is ContainerHealthState.HEALTHY
    assert health_of(scm.replication_manager_report(), ContainerHealthState.UNDER_REPLICATED) == 0
    await scm.stop()
