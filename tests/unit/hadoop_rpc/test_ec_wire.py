"""EC over Hadoop RPC, against a real in-process SCM with six fake datanodes over loopback: AllocateScmBlock
with Ozone's ecReplicationConfig (our Python client), AllocateContainer/ListContainer with an EC layout, and
the replica indexes datanodes report coming back in GetContainerReplicas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scm_server.client.hadoop_rpc import BlockLocationClient, HadoopRpcConnection
from scm_server.proto import hdds_pb2, scm_datanode_pb2
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import ScmServerProtocol_pb2 as wire_block
from scm_server.proto.ozone import hdds_pb2 as wire
from scm_server.server.hadoop_rpc.block_translator import BlockLocationTranslator
from scm_server.server.hadoop_rpc.location_translator import PROTOCOL as LOCATION_PROTOCOL
from scm_server.server.hadoop_rpc.location_translator import LocationTranslator
from scm_server.server.hadoop_rpc.server import HadoopRpcServer
from tests.unit.scm_state_harness import bring_up, make_datanodes, make_scm

CONF = {"ozone.scm.service.ids": "cluster1", "ozone.scm.nodes.cluster1": "scm1",
        "ozone.scm.address.cluster1.scm1": "127.0.0.1"}
MB = 1 << 20
Req = wire_loc.ScmContainerLocationRequest
Resp = wire_loc.ScmContainerLocationResponse


def layout(name: str) -> wire.ECReplicationConfig:
    codec, data, parity, _ = name.split("-")  # upper case on the way in: the SCM reads either, as Ozone's
    return wire.ECReplicationConfig(data=int(data), parity=int(parity), codec=codec.upper(), ecChunkSize=MB)


@pytest.fixture
async def served(tmp_path: Path) -> Any:
    scm = await make_scm(tmp_path)
    await bring_up(scm, make_datanodes(9, racks=3))
    server = HadoopRpcServer([BlockLocationTranslator(scm, CONF.get, "scm1-id", "127.0.0.1"),
                              LocationTranslator(scm, CONF.get, "scm1-id", "127.0.0.1")])
    port = await server.start("127.0.0.1", 0)
    yield scm, f"127.0.0.1:{port}"
    await server.stop()
    await scm.stop()


@pytest.mark.parametrize("name", ["rs-3-2-1024k", "rs-6-3-1024k", "xor-2-1-1024k"])
async def test_allocate_scm_block_with_an_ec_layout(served: Any, name: str) -> None:
    scm, address = served
    ec = layout(name)
    async with BlockLocationClient([address], attempts=1) as client:
        resp = await client.allocate_blocks(MB, 2, "om", ec=ec)
    assert resp.status == wire_block.OK, resp.message
    width = ec.data + ec.parity
    for block in resp.allocateScmBlockResponse.blocks:
        p = block.pipeline
        assert p.type == wire.EC and p.state == wire.PIPELINE_OPEN
        assert list(p.memberReplicaIndexes) == list(range(1, width + 1))
        assert len(p.members) == width
        assert p.ecReplicationConfig == wire.ECReplicationConfig(
            data=ec.data, parity=ec.parity, codec=ec.codec.lower(), ecChunkSize=MB
        )
        info = scm.container_manager.get_container(block.containerBlockID.containerID)
        assert info.replicationType == hdds_pb2.EC and info.ecReplicationConfig.data == ec.data


async def test_ec_without_its_layout_is_refused_with_a_reason(served: Any) -> None:
    _, address = served
    async with BlockLocationClient([address], attempts=1) as client:
        resp = await client.allocate_blocks(MB, 1, "om", rtype=wire.EC)
    assert resp.status != wire_block.OK
    assert "EC without ecReplicationConfig" in resp.message


async def test_container_calls_carry_ec_layouts_and_replica_indexes(served: Any) -> None:
    scm, address = served
    conn = HadoopRpcConnection(address, LOCATION_PROTOCOL)
    await conn.connect()
    try:
        calls = iter(range(1, 100))

        async def call(cmd: int, **fields: Any) -> Resp:
            resp = Resp.FromString(await conn.call("submitRequest", Req(cmdType=cmd, traceID="t", **fields),
                                                   call_id=next(calls)))
            assert resp.status == Resp.OK, resp.message
            return resp

        made = await call(wire_loc.AllocateContainer, containerRequest=wire_loc.ContainerRequestProto(
            replicationType=wire.EC, owner="om", ecReplicationConfig=layout("rs-3-2-1024k")))
        cwp = made.containerResponse.containerWithPipeline
        cid = cwp.containerInfo.containerID
        assert cwp.containerInfo.ecReplicationConfig.data == 3
        assert list(cwp.pipeline.memberReplicaIndexes) == [1, 2, 3, 4, 5]

        # each member reports its replica with the index it holds
        for member, index in zip(cwp.pipeline.members, cwp.pipeline.memberReplicaIndexes, strict=True):
            uuid = scm.node_manager.require_node(member.hostName and _uuid_of(scm, member.hostName)).uuid
            report = scm_datanode_pb2.ContainerReportsProto(reports=[hdds_pb2.ContainerReplicaProto(
                containerID=cid, state=hdds_pb2.ContainerReplicaProto.OPEN, keyCount=0, used=0,
                replicaIndex=index, originNodeId=uuid)])
            await scm.container_manager.process_container_report(uuid, report)
        replicas = (await call(wire_loc.GetContainerReplicas,
                               getContainerReplicasRequest=wire_loc.GetContainerReplicasRequestProto(containerID=cid)))
        got = {r.datanodeDetails.hostName: r.replicaIndex for r in replicas.getContainerReplicasResponse.containerReplica}
        assert sorted(got.values()) == [1, 2, 3, 4, 5]
        assert got == {m.hostName: i for m, i in zip(cwp.pipeline.members, cwp.pipeline.memberReplicaIndexes,
                                                      strict=True)}

        listed = await call(wire_loc.ListContainer, scmListContainerRequest=wire_loc.SCMListContainerRequestProto(
            count=10, type=wire.EC, ecReplicationConfig=layout("rs-3-2-1024k")))
        assert [c.containerID for c in listed.scmListContainerResponse.containers] == [cid]
        other = await call(wire_loc.ListContainer, scmListContainerRequest=wire_loc.SCMListContainerRequestProto(
            count=10, type=wire.EC, ecReplicationConfig=layout("rs-6-3-1024k")))
        assert list(other.scmListContainerResponse.containers) == []
    finally:
        await conn.close()


def _uuid_of(scm: Any, host: str) -> str:
    [node] = [n for n in scm.node_manager.all_nodes() if n.host == host]
    return str(node.uuid)
