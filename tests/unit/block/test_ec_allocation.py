"""EC block allocation (Ozone's WritableECContainerProvider + ECPipelineProvider) on an in-process SCM."""

from __future__ import annotations

from pathlib import Path

import pytest
from scm_state_harness import bring_up, make_datanodes, make_scm, replica

from scm_server.exceptions import ResultCodes, SCMException
from scm_server.pipeline.pipeline_manager import max_ec_pipelines
from scm_server.pipeline.placement import SCMContainerPlacementRackAware, SCMContainerPlacementRackScatter
from scm_server.proto import hdds_pb2

MB = 1 << 20
RS_3_2 = hdds_pb2.ECReplicationConfig(data=3, parity=2, codec="rs", ecChunkSize=1024 * 1024)
XOR_2_1 = hdds_pb2.ECReplicationConfig(data=2, parity=1, codec="XOR", ecChunkSize=1024 * 1024)


async def test_ec_blocks_get_open_pipelines_with_replica_indexes(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    await bring_up(scm, make_datanodes(6, racks=3))
    blocks = await scm.allocate_block(MB, 8, hdds_pb2.EC, hdds_pb2.THREE, "om", ec=RS_3_2)
    pipelines = {b.pipeline.id.id: b.pipeline for b in blocks}
    # ozone.scm.ec.pipeline.minimum (5): the first five allocations each get a new pipeline, then reuse
    assert len(pipelines) == 5
    for p in pipelines.values():
        assert p.state == hdds_pb2.PIPELINE_OPEN and p.type == hdds_pb2.EC
        assert list(p.memberReplicaIndexes) == [1, 2, 3, 4, 5]
        assert len({m.uuid for m in p.members}) == 5
        assert len({m.networkLocation for m in p.members}) == 3  # scattered over every rack there is
        assert p.ecReplicationConfig == RS_3_2
    containers = {b.container_id for b in blocks}
    assert len(containers) == 5  # one open container per EC pipeline
    for cid in containers:
        info = scm.container_manager.get_container(cid)
        assert info.replicationType == hdds_pb2.EC and info.ecReplicationConfig == RS_3_2
    # the EC layout survives the container table's compact records and its listing filter
    listed, total = scm.list_containers(0, 100, rtype=hdds_pb2.EC, ec=RS_3_2)
    assert total == 5 and {c.containerID for c in listed} == containers
    assert scm.list_containers(0, 100, ec=hdds_pb2.ECReplicationConfig(data=6, parity=3, codec="rs", ecChunkSize=MB))[1] == 0
    await scm.stop()


async def test_codec_is_lower_cased_and_bad_layouts_are_named(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    await bring_up(scm, make_datanodes(3))
    [block] = await scm.allocate_block(MB, 1, hdds_pb2.EC, hdds_pb2.THREE, "om", ec=XOR_2_1)
    assert block.pipeline.ecReplicationConfig.codec == "xor"  # as Ozone's messages carry it
    with pytest.raises(SCMException) as err:
        await scm.allocate_block(MB, 1, hdds_pb2.EC, hdds_pb2.THREE, "om")
    assert err.value.result is ResultCodes.INVALID_REQUEST and "ecReplicationConfig" in err.value.message
    bad = hdds_pb2.ECReplicationConfig(data=3, parity=2, codec="lrc", ecChunkSize=MB)
    with pytest.raises(SCMException) as err:
        await scm.allocate_block(MB, 1, hdds_pb2.EC, hdds_pb2.THREE, "om", ec=bad)
    assert "codec RS or XOR" in err.value.message
    with pytest.raises(SCMException) as err:  # rs-3-2 needs 5 datanodes; 3 are registered
        await scm.allocate_block(MB, 1, hdds_pb2.EC, hdds_pb2.THREE, "om", ec=RS_3_2)
    assert err.value.result is ResultCodes.FAILED_TO_FIND_SUITABLE_NODE
    assert "needs 5 healthy in-service datanodes, found 3" in err.value.message
    await scm.stop()


def test_the_pipeline_limit_follows_volumes_and_the_minimum() -> None:
    assert max_ec_pipelines(RS_3_2, healthy_volumes=10, per_volume_factor=1.0, minimum=5) == 5
    assert max_ec_pipelines(RS_3_2, healthy_volumes=60, per_volume_factor=1.0, minimum=5) == 12
    assert max_ec_pipelines(RS_3_2, healthy_volumes=60, per_volume_factor=0.0, minimum=5) == 5


async def test_a_full_ec_container_closes_its_pipeline(tmp_path: Path) -> None:
    """Ozone's WritableECContainerProvider: the pipeline whose container has no room for the block is closed
    (its container too) and the block goes to another pipeline."""
    scm = await make_scm(tmp_path, **{"ozone.scm.container.size": "4MB", "ozone.scm.block.size": "1MB",
                                      "ozone.scm.ec.pipeline.minimum": "1"})
    dns = make_datanodes(5)
    await bring_up(scm, dns)
    [first] = await scm.allocate_block(MB, 1, hdds_pb2.EC, hdds_pb2.THREE, "om", ec=RS_3_2)
    [again] = await scm.allocate_block(MB, 1, hdds_pb2.EC, hdds_pb2.THREE, "om", ec=RS_3_2)
    cid = first.container_id
    assert again.container_id == cid  # room left: the same container, the same pipeline
    indexes = {m.uuid: i for m, i in zip(first.pipeline.members, first.pipeline.memberReplicaIndexes, strict=True)}
    for dn in dns:  # the datanodes report the container 3.5 MB full
        dn.replicas[cid] = replica(cid, hdds_pb2.ContainerReplicaProto.OPEN, keys=2, used=7 * MB // 2)
        dn.replicas[cid].replicaIndex = indexes[dn.uuid]
        await dn.heartbeat(scm)
    [third] = await scm.allocate_block(MB, 1, hdds_pb2.EC, hdds_pb2.THREE, "om", ec=RS_3_2)
    assert third.container_id != cid
    assert third.pipeline.id.id != first.pipeline.id.id and third.pipeline.state == hdds_pb2.PIPELINE_OPEN
    assert scm.pipeline_manager.get_pipeline(first.pipeline.id.id).state == hdds_pb2.PIPELINE_CLOSED
    assert scm.container_manager.get_container(cid).state == hdds_pb2.CLOSING
    await scm.stop()


async def test_a_closed_ec_containers_read_pipeline_comes_from_its_replicas(tmp_path: Path) -> None:
    """As Ozone's createPipelineForRead: a CLOSED EC container (its pipeline removed after a datanode died) is
    described by where its replicas are, each member with its index and the layout, so Ozone's reader can
    decode it (without the layout Ozone's CLI failed: `No enum constant ...EcCodec.`)."""
    scm = await make_scm(tmp_path)
    dns = make_datanodes(6)
    await bring_up(scm, dns)
    info = await scm.container_manager.allocate_container(hdds_pb2.EC, hdds_pb2.ZERO, "om", ec=RS_3_2)
    cid = info.containerID
    pipeline = scm.pipeline_manager.get_pipeline(info.pipelineID.id)
    holders = {m.uuid: i for m, i in zip(pipeline.members, pipeline.memberReplicaIndexes, strict=True)}
    await scm.close_container(cid)
    for dn in dns:
        if dn.uuid in holders:
            dn.replicas[cid] = replica(cid, hdds_pb2.ContainerReplicaProto.CLOSED, keys=2)
            dn.replicas[cid].replicaIndex = holders[dn.uuid]
            await dn.heartbeat(scm)
    await scm.pipeline_manager.close_pipeline(pipeline.id.id, remove=True)
    cwp, _ = scm.get_container_with_pipeline(cid)
    assert cwp.containerInfo.state == hdds_pb2.CLOSED
    read = cwp.pipeline
    assert read.ecReplicationConfig == RS_3_2 and read.type == hdds_pb2.EC
    assert list(read.memberReplicaIndexes) == [1, 2, 3, 4, 5]
    assert {m.uuid: i for m, i in zip(read.members, read.memberReplicaIndexes, strict=True)} == holders
    await scm.stop()


async def test_ec_pipelines_follow_the_ec_placement_key(tmp_path: Path) -> None:
    """``ozone.scm.container.placement.ec.impl`` picks the policy of EC pipelines and of the ReplicationManager's
    EC targets; RackScatter (the default) puts the five members of rs-3-2 on five racks when five exist."""
    scm = await make_scm(tmp_path / "scatter")
    await bring_up(scm, make_datanodes(10, racks=5))
    assert isinstance(scm.pipeline_manager.ec_placement, SCMContainerPlacementRackScatter)
    assert isinstance(scm.replication_manager.ec_placement, SCMContainerPlacementRackScatter)
    blocks = await scm.allocate_block(MB, 5, hdds_pb2.EC, hdds_pb2.THREE, "om", ec=RS_3_2)
    for pipeline in {b.pipeline.id.id: b.pipeline for b in blocks}.values():
        assert len({m.networkLocation for m in pipeline.members}) == 5
    await scm.stop()
    aware = await make_scm(tmp_path / "aware", **{"ozone.scm.container.placement.ec.impl": "SCMContainerPlacementRackAware"})
    assert isinstance(aware.pipeline_manager.ec_placement, SCMContainerPlacementRackAware)
    assert isinstance(aware.replication_manager.ec_placement, SCMContainerPlacementRackAware)
    await aware.stop()
