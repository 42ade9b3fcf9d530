"""The ReplicationManager's throttles on EC work, on an in-process SCM: the cluster-wide in-flight cap
(hdds.scm.replication.inflight.limit.factor), the per-datanode replication limit with reconstructions weighing
hdds.scm.replication.datanode.reconstruction.weight, and the coordinator chosen among the targets."""

from __future__ import annotations

from pathlib import Path

from scm_state_harness import FakeDatanode, make_datanodes, make_scm

from scm_server.container.container_manager import ContainerReplica
from scm_server.proto import hdds_pb2, scm_datanode_pb2
from scm_server.scm import StorageContainerManager

T = scm_datanode_pb2.SCMCommandProto.Type
EC = hdds_pb2.ECReplicationConfig(data=2, parity=1, codec="xor", ecChunkSize=1 << 20)


async def ec_cluster(tmp_path: Path, containers: int, **settings: str) -> tuple[StorageContainerManager, list[FakeDatanode]]:
    """``containers`` xor-2-1 containers holding indexes 1 and 2 on dn1/dn2; index 3 lost everywhere."""
    scm = await make_scm(tmp_path, **settings)
    dns = make_datanodes(6)
    for dn in dns:
        await dn.register(scm)
    scm.force_exit_safe_mode()
    for cid in range(1, containers + 1):
        await scm.container_state_manager.add_container(hdds_pb2.ContainerInfoProto(
            containerID=cid, state=hdds_pb2.CLOSED, pipelineID=hdds_pb2.PipelineID(id="gone"), owner="om",
            numberOfKeys=4, sequenceId=5, replicationType=hdds_pb2.EC, ecReplicationConfig=EC))
        for index, dn in ((1, dns[0]), (2, dns[1])):
            scm.container_manager.update_container_replica(ContainerReplica(
                container_id=cid, datanode_uuid=dn.uuid, state=hdds_pb2.ContainerReplicaProto.CLOSED,
                sequence_id=5, key_count=4, replica_index=index))
    scm.node_manager.clear_command_queues()
    return scm, dns


def reconstructions(scm: StorageContainerManager) -> dict[str, int]:
    return {n.uuid: len(scm.node_manager.queued_commands(n.uuid, T.reconstructECContainersCommand))
            for n in scm.node_manager.all_nodes()}


async def test_the_cluster_wide_inflight_cap(tmp_path: Path) -> None:
    # 6 healthy datanodes x limit 2 x factor 0.25 = 3 reconstructions in flight at most
    scm, _ = await ec_cluster(tmp_path, 10, **{"hdds.scm.replication.datanode.replication.limit": "2",
                                               "hdds.scm.replication.inflight.limit.factor": "0.25"})
    try:
        assert scm.replication_manager.inflight_limit() == 3
        await scm.replication_manager.run_once()
        assert sum(reconstructions(scm).values()) == 3
        assert scm.replication_manager.commands_throttled == 7
        assert scm.replication_manager.commands_deferred["reconstruct"] == 0  # the cluster cap, not a datanode's
        assert scm.replication_manager.commands_issued["reconstruct"] == 3  # EcReconstructionCmdsSentTotal
    finally:
        await scm.stop()


async def test_per_target_limit_counts_queued_reconstructions_by_weight(tmp_path: Path) -> None:
    # no cluster cap; limit 4 per datanode, weight 3: a target that says it has one reconstruction queued
    # (load 3) takes one more (load 4 after our pending add), the three idle ones four each: 13 of 16 sent
    scm, dns = await ec_cluster(tmp_path, 16, **{"hdds.scm.replication.datanode.replication.limit": "4",
                                                 "hdds.scm.replication.inflight.limit.factor": "0"})
    try:
        busy = scm.node_manager.require_node(dns[2].uuid)
        busy.command_queue_report = {T.reconstructECContainersCommand: 1}
        assert scm.replication_manager.replication_load(busy.uuid) == 3
        await scm.replication_manager.run_once()
        sent = reconstructions(scm)
        assert sent[dns[0].uuid] == sent[dns[1].uuid] == 0  # holders are never targets
        assert sent[dns[2].uuid] == 1  # 3 queued + 1 pending reaches the limit of 4
        assert sent[dns[3].uuid] == sent[dns[4].uuid] == sent[dns[5].uuid] == 4
        assert scm.replication_manager.commands_throttled == 3
        assert scm.replication_manager.commands_deferred["reconstruct"] == 3  # EcReconstructionCmdsDeferredTotal
        # every reconstruction went to its own (single) target, the coordinator, naming both sources
        for dn in dns[2:]:
            for cmd in scm.node_manager.queued_commands(dn.uuid, T.reconstructECContainersCommand):
                r = cmd.reconstructECContainersCommandProto
                assert [t.uuid for t in r.targets] == [dn.uuid] and r.missingContainerIndexes == b"\x03"
                assert sorted((s.datanodeDetails.uuid, s.replicaIndex) for s in r.sources) == [
                    (dns[0].uuid, 1), (dns[1].uuid, 2)]
    finally:
        await scm.stop()
