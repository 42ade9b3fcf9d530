"""The simulated datanodes' EC commands, executed directly (no SCM): a reconstruction writes each missing index
onto its target from ``data`` readable indexes or fails whole, and a delete naming an index removes only that
index."""

from __future__ import annotations

from scm_server.datanode_sim import DatanodeSimulator
from scm_server.datanode_sim.simulator import RState
from scm_server.proto import hdds_pb2, scm_datanode_pb2

Cmd = scm_datanode_pb2.SCMCommandProto
EC = hdds_pb2.ECReplicationConfig(data=3, parity=2, codec="rs", ecChunkSize=1 << 20)


def ec_sim() -> DatanodeSimulator:
    sim = DatanodeSimulator(["127.0.0.1:1"], 7, container_size=1 << 30)
    for i, dn in enumerate(sim.datanodes[:5]):
        dn.add_replica(9, RState.CLOSED, used=3000, keys=3, replica_index=i + 1)
    return sim


def reconstruct(sim: DatanodeSimulator, sources: list[int], targets: list[int], missing: list[int]) -> Cmd:
    return Cmd(commandType=Cmd.reconstructECContainersCommand, cmdId=7,
               reconstructECContainersCommandProto=scm_datanode_pb2.ReconstructECContainersCommandProto(
                   containerID=9, ecReplicationConfig=EC, missingContainerIndexes=bytes(missing),
                   targets=[sim.datanodes[t].details() for t in targets],
                   sources=[scm_datanode_pb2.DatanodeDetailsAndReplicaIndexProto(
                       datanodeDetails=sim.datanodes[s].details(), replicaIndex=s + 1) for s in sources]))


def statuses(dn: object) -> list[scm_datanode_pb2.CommandStatus]:
    return list(dn.endpoints[0].outbox.statuses)  # type: ignore[attr-defined]


def test_the_coordinator_writes_each_missing_index_on_its_target() -> None:
    sim = ec_sim()
    for gone in (sim.datanodes[1], sim.datanodes[3]):
        gone.alive = False  # indexes 2 and 4 lost with their datanodes
    coordinator = sim.datanodes[5]
    coordinator.execute(reconstruct(sim, [0, 2, 4], [5, 6], [2, 4]))
    rebuilt = {dn.hostname: dn.containers[9].replica_index for dn in sim.datanodes[5:]}
    assert rebuilt == {sim.datanodes[5].hostname: 2, sim.datanodes[6].hostname: 4}
    assert all(dn.containers[9].key_count == 3 and dn.containers[9].state == RState.CLOSED for dn in sim.datanodes[5:])
    assert statuses(coordinator)[-1].status == scm_datanode_pb2.CommandStatus.EXECUTED
    icr = sim.datanodes[6].endpoints[0].outbox.icrs[-1]
    assert icr.containerID == 9 and icr.replicaIndex == 4


def test_too_few_readable_sources_fail_the_whole_command() -> None:
    sim = ec_sim()
    sim.datanodes[2].alive = False  # a named source that cannot be read: 2 readable, 3 needed
    coordinator = sim.datanodes[5]
    coordinator.execute(reconstruct(sim, [0, 1, 2], [5], [4]))
    assert 9 not in coordinator.containers
    assert statuses(coordinator)[-1].status == scm_datanode_pb2.CommandStatus.FAILED


def test_delete_with_an_index_removes_only_that_index() -> None:
    sim = ec_sim()
    holder = sim.datanodes[1]  # index 2
    holder.execute(Cmd(commandType=Cmd.deleteContainerCommand, deleteContainerCommandProto=(
        scm_datanode_pb2.DeleteContainerCommandProto(containerID=9, force=True, replicaIndex=5))))
    assert holder.containers[9].replica_index == 2  # the command named another index: kept
    holder.execute(Cmd(commandType=Cmd.deleteContainerCommand, deleteContainerCommandProto=(
        scm_datanode_pb2.DeleteContainerCommandProto(containerID=9, force=True, replicaIndex=2))))
    assert 9 not in holder.containers
    assert holder.endpoints[0].outbox.icrs[-1].state == RState.DELETED
