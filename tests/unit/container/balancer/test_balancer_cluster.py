"""ContainerBalancer on a simulated cluster: an in-process SCM (stub HA, FakeClock) and datanodes that report
their space from the replicas they hold and carry out the replicate and delete commands their heartbeats bring.

Three datanodes hold every container, two hold none: the balancer moves containers over its iterations until every
datanode is within the threshold of the average, never leaves a container with fewer replicas than its factor,
and stops. A restarted SCM (the same scm.db, as a new leader reads the replicated record) resumes an unfinished run
from its recorded iteration."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scm_state_harness import FakeDatanode, make_scm, replica

from scm_server.clock import FakeClock
from scm_server.metadata import SCMMetadataStore
from scm_server.proto import hdds_pb2, scm_datanode_pb2
from scm_server.protocols import BalancerStartRequest
from scm_server.scm import StorageContainerManager
from tests.unit.scm_state_harness import make_conf

GB = 1 << 30
CAPACITY = 100 * GB
T = scm_datanode_pb2.SCMCommandProto.Type
R = hdds_pb2.ContainerReplicaProto
BALANCER_KEYS = {
    "hdds.container.balancer.balancing.iteration.interval": "10m",
    "hdds.container.balancer.move.timeout": "5m",
    "hdds.container.balancer.move.replication.timeout": "3m",
    "hdds.scm.replication.thread.interval": "1h",
}


@dataclass
class SpaceDatanode(FakeDatanode):
    """Reports capacity and the space its replicas use; copies and deletes replicas as commanded."""

    copies: int = 0
    refused_deletions: int = 0

    def node_report(self) -> scm_datanode_pb2.NodeReportProto:
        used = sum(r.used for r in self.replicas.values())
        return scm_datanode_pb2.NodeReportProto(storageReport=[scm_datanode_pb2.StorageReportProto(
            storageUuid=f"{self.uuid}-vol", storageLocation="/data", capacity=CAPACITY, scmUsed=used,
            remaining=CAPACITY - used)])

    def run(self, commands: list[scm_datanode_pb2.SCMCommandProto], peers: dict[str, SpaceDatanode]) -> None:
        self.execute(commands)
        for c in commands:
            if c.commandType == T.replicateContainerCommand:
                cid = c.replicateContainerCommandProto.containerID
                source = peers[c.replicateContainerCommandProto.sources[0].uuid]
                self.replicas[cid] = R.FromString(source.replicas[cid].SerializeToString())
                self.copies += 1
            elif c.commandType == T.deleteContainerCommand:
                cid = c.deleteContainerCommandProto.containerID
                # Ozone's datanode refuses a deletion without force of a replica holding data
                # (KeyValueHandler: "Non-force deletion of non-empty container is not allowed")
                if cid in self.replicas and self.replicas[cid].used > 0 and not c.deleteContainerCommandProto.force:
                    self.refused_deletions += 1
                    continue
                self.replicas.pop(cid, None)


def make_nodes() -> list[SpaceDatanode]:
    return [SpaceDatanode(uuid=f"00000000-0000-0000-0000-{i:012d}", host=f"dn{i}") for i in range(1, 6)]


async def _cluster(tmp_path: Path, clock: FakeClock) -> tuple[StorageContainerManager, list[SpaceDatanode], list[int]]:
    """Five datanodes; six closed RATIS/THREE containers of 10 GB, all on dn1..dn3 (60% used; dn4, dn5 empty)."""
    scm = await make_scm(tmp_path, clock=clock, **{"hdds.scm.safemode.min.datanode": "5", **BALANCER_KEYS})
    dns = make_nodes()
    for dn in dns:
        await dn.register(scm)
    await scm.pipeline_manager.create_pipelines_up_to_limit()
    for _ in range(2):
        for dn in dns:
            dn.execute(list((await dn.heartbeat(scm)).commands))
    ids = []
    for _ in range(6):
        cwp = await scm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "balancer-test")
        cid = cwp.containerInfo.containerID
        ids.append(cid)
        await scm.close_container(cid)
        for dn in dns[:3]:
            dn.replicas[cid] = replica(cid, R.CLOSED, used=10 * GB)
    await _heartbeats(scm, dns)
    assert all(scm.get_container(cid).state == hdds_pb2.CLOSED for cid in ids)
    return scm, dns, ids


async def _heartbeats(scm: StorageContainerManager, dns: list[SpaceDatanode]) -> None:
    peers = {dn.uuid: dn for dn in dns}
    for dn in dns:
        dn.run(list((await dn.heartbeat(scm)).commands), peers)


def _utilizations(dns: list[SpaceDatanode]) -> dict[str, float]:
    return {dn.host: sum(r.used for r in dn.replicas.values()) / CAPACITY for dn in dns}


async def _run(scm: StorageContainerManager, dns: list[SpaceDatanode], clock: FakeClock, ids: list[int],
               rounds: int) -> int:
    """Step the balancer and the datanodes until it stops (at most ``rounds`` rounds); returns the rounds used.
    After every round each container still has at least its three replicas, never two on one datanode."""
    for n in range(1, rounds + 1):
        await scm.container_balancer.step()
        await _heartbeats(scm, dns)
        for cid in ids:
            holders = [dn.uuid for dn in dns if cid in dn.replicas]
            assert len(holders) >= 3, f"container #{cid} down to {len(holders)} replicas in round {n}"
            assert len({r.datanode_uuid for r in scm.container_manager.get_replicas(cid)}) >= 3
        clock.advance(60)
        if not scm.container_balancer.is_balancer_running():
            return n
    raise AssertionError(f"the balancer still runs after {rounds} rounds")


async def test_balancer_moves_containers_until_the_cluster_is_within_its_threshold(tmp_path: Path) -> None:
    clock = FakeClock()
    scm, dns, ids = await _cluster(tmp_path, clock)
    try:
        assert _utilizations(dns) == {"dn1": 0.6, "dn2": 0.6, "dn3": 0.6, "dn4": 0.0, "dn5": 0.0}
        answer = await scm.start_container_balancer(BalancerStartRequest(
            threshold=10.0, iterations=10, max_datanodes_percentage=100, max_size_entering_target_gb=20))
        assert answer == "Container Balancer started successfully."
        await _run(scm, dns, clock, ids, rounds=200)
        usage = _utilizations(dns)
        avg = sum(usage.values()) / len(usage)
        assert abs(avg - 0.36) < 1e-9
        assert all(abs(u - avg) <= 0.10 for u in usage.values()), usage
        assert sum(dn.refused_deletions for dn in dns) == 0, "a move's deletion must be forced, as Ozone's"
        assert sum(dn.copies for dn in dns) == 6  # the fewest moves: 18 replicas over five nodes, 4/4/4/3/3
        assert sorted(round(u, 2) for u in usage.values()) == [0.3, 0.3, 0.4, 0.4, 0.4]
        for cid in ids:  # every container kept exactly its three replicas, as the SCM sees them too
            assert len([dn for dn in dns if cid in dn.replicas]) == 3
            assert len(scm.container_manager.get_replicas(cid)) == 3
        info = scm.container_balancer_status_info()
        assert not info.running and info.configuration is not None and not info.configuration.shouldRun
        results = [(it.iteration_result, it.moves_completed) for it in info.iterations]
        # 20 GB may enter a target per iteration: 4 moves, then 2, then the view is balanced and the run stops
        assert results == [("ITERATION_COMPLETED", 4), ("ITERATION_COMPLETED", 2), ("ITERATION_COMPLETED", 0)]
        assert info.iterations[0].size_entering_nodes == {dns[3].uuid: 20 * GB, dns[4].uuid: 20 * GB}
        bean = next(b for b in scm.ozone_beans() if b.name.endswith("name=ContainerBalancerMetrics"))
        assert bean.attributes["NumContainerMovesCompleted"] == 6
        assert bean.attributes["NumIterations"] == 3
        assert bean.attributes["DataSizeMovedGB"] == 60
    finally:
        await scm.stop()


async def test_a_new_leader_resumes_the_run_from_its_recorded_iteration(tmp_path: Path) -> None:
    clock = FakeClock()
    scm, dns, ids = await _cluster(tmp_path, clock)
    # 10 GB may enter each target per iteration: two moves per iteration, three iterations to balance
    await scm.start_container_balancer(BalancerStartRequest(
        threshold=10.0, iterations=10, max_datanodes_percentage=100, max_size_entering_target_gb=10))
    for _ in range(50):  # until the first iteration is closed and recorded
        await scm.container_balancer.step()
        await _heartbeats(scm, dns)
        clock.advance(60)
        record = scm.container_balancer.record()
        if record is not None and record.nextIterationIndex == 1:
            break
    else:
        raise AssertionError("the first iteration did not close")
    assert sum(dn.copies for dn in dns) == 2
    await scm.stop()

    # the same scm.db opened by a new SCM process: the replicated record says run, from iteration 2
    scm = await StorageContainerManager.create(
        make_conf(tmp_path, **{"hdds.scm.safemode.min.datanode": "5", **BALANCER_KEYS}), clock=clock,
        metadata_store=SCMMetadataStore(tmp_path, sync=False))
    await scm.ha_manager.start()
    try:
        for dn in dns:
            await dn.register(scm)
        await _heartbeats(scm, dns)
        assert scm.container_balancer_status() is True
        await _run(scm, dns, clock, ids, rounds=200)
        info = scm.container_balancer_status_info()
        assert [it.iteration_number for it in info.iterations] == [2, 3, 4]
        assert [it.moves_completed for it in info.iterations] == [2, 2, 0]
        usage = _utilizations(dns)
        assert sorted(round(u, 2) for u in usage.values()) == [0.3, 0.3, 0.4, 0.4, 0.4]
        assert sum(dn.copies for dn in dns) == 6
    finally:
        await scm.stop()


async def test_start_is_refused_in_safe_mode_and_with_bad_options(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path, **{"hdds.scm.safemode.min.datanode": "5"})
    try:
        try:
            await scm.start_container_balancer(BalancerStartRequest())
        except Exception as exc:
            assert "safe mode" in str(exc)
        else:
            raise AssertionError("started in safe mode")
        assert scm.container_balancer.record() is None  # nothing recorded
    finally:
        await scm.stop()
