"""The container reads of StorageContainerLocationProtocol against a real in-process SCM over loopback: each
answer, written as bytes from our messages and the kept forms, carries what the by-name conversion of the
facade's own messages carries, complete (Ozone's required fields set)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from scm_server import ozone_wire
from scm_server.client.hadoop_rpc import HadoopRpcConnection
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.proto import hdds_pb2
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import hdds_pb2 as wire
from scm_server.server.hadoop_rpc.location_translator import PROTOCOL, LocationTranslator
from scm_server.server.hadoop_rpc.server import HadoopRpcServer
from tests.unit.scm_state_harness import bring_up, make_datanodes, make_scm, replica

CONF = {"ozone.scm.service.ids": "cluster1", "ozone.scm.nodes.cluster1": "scm1",
        "ozone.scm.address.cluster1.scm1": "127.0.0.1"}
Req = wire_loc.ScmContainerLocationRequest
Resp = wire_loc.ScmContainerLocationResponse
R = hdds_pb2.ContainerReplicaProto


@pytest.fixture
async def served(tmp_path: Path) -> Any:
    scm = await make_scm(tmp_path)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    ids = [(await scm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")).containerInfo.containerID
           for _ in range(6)]
    await scm.close_container(ids[0])
    for n, dn in enumerate(dns):
        dn.replicas[ids[1]] = replica(ids[1], R.OPEN, keys=n, used=n << 20)
        await dn.heartbeat(scm)
    server = HadoopRpcServer([LocationTranslator(scm, CONF.get, "scm1-id", "127.0.0.1")])
    port = await server.start("127.0.0.1", 0)
    conn = HadoopRpcConnection(f"127.0.0.1:{port}", PROTOCOL)
    await conn.connect()
    calls = itertools.count(1)

    async def call(cmd: int, **fields: Any) -> Resp:
        resp = Resp.FromString(await conn.call("submitRequest", Req(cmdType=cmd, traceID="t", **fields),
                                               call_id=next(calls)))
        assert resp.status == Resp.OK, resp.message
        assert resp.IsInitialized() and resp.traceID == "t"
        return resp

    yield scm, ids, call
    await conn.close()
    await server.stop()
    await scm.stop()


async def test_list_container_pages_are_the_facades_containers(served: Any) -> None:
    scm, ids, call = served
    for start, count, state in ((0, 1000, None), (ids[2], 2, None), (0, 10, wire.CLOSING), (ids[-1] + 1, 5, None)):
        fields: dict[str, Any] = {"startContainerID": start, "count": count}
        if state is not None:
            fields["state"] = state
        got = (await call(wire_loc.ListContainer, scmListContainerRequest=fields)).scmListContainerResponse
        page, total = scm.list_containers(start, count, state)
        assert list(got.containers) == [ozone_wire.by_name(c, wire.ContainerInfoProto) for c in page]
        assert got.containerCount == total
        assert all(c.pipelineID.HasField("uuid128") for c in got.containers)
    listed = (await call(wire_loc.ListContainer, scmListContainerRequest={"count": 1000})).scmListContainerResponse
    assert [c.containerID for c in listed.containers] == ids
    assert listed.containers[1].usedBytes == 2 << 20  # what the replicas report
    assert listed.containers[0].state == wire.CLOSING


async def test_container_with_pipeline_calls_are_the_facades(served: Any) -> None:
    scm, ids, call = served
    expected = [ozone_wire.by_name(scm.get_container_with_pipeline(c)[0], wire.ContainerWithPipeline) for c in ids]
    batch = await call(wire_loc.GetContainerWithPipelineBatch,
                       getContainerWithPipelineBatchRequest={"containerIDs": ids})
    assert list(batch.getContainerWithPipelineBatchResponse.containerWithPipelines) == expected
    lenient = await call(wire_loc.GetExistContainerWithPipelinesInBatch,
                         getExistContainerWithPipelinesInBatchRequest={"containerIDs": [ids[0], 9999, ids[1]]})
    assert list(lenient.getExistContainerWithPipelinesInBatchResponse.containerWithPipelines) == [
        expected[0], expected[1]]
    one = await call(wire_loc.GetContainerWithPipeline, getContainerWithPipelineRequest={"containerID": ids[1]})
    assert one.getContainerWithPipelineResponse.containerWithPipeline == expected[1]
    info = await call(wire_loc.GetContainer, getContainerRequest={"containerID": ids[1]})
    assert info.getContainerResponse.containerInfo == expected[1].containerInfo
    # the pipeline carries the ports a client reads and writes through only, as Ozone's does
    assert {p.name for m in expected[1].pipeline.members for p in m.ports} <= ozone_wire.IO_PORTS


async def test_the_batch_describes_a_container_whose_pipeline_is_gone_from_its_replicas(served: Any) -> None:
    """The batch serves unchanged containers on open pipelines from their kept bytes; a container whose pipeline
    was removed takes the facade's path (a closed pipeline of its replicas), and an unknown id fails the call."""
    scm, ids, call = served
    gone = scm.get_container(ids[1]).pipelineID.id
    await scm.pipeline_manager.close_pipeline(gone, remove=True)
    assert scm.pipeline_manager.find(gone) is None
    expected = [ozone_wire.by_name(scm.get_container_with_pipeline(c)[0], wire.ContainerWithPipeline) for c in ids]
    assert expected[1].pipeline.state == wire.PIPELINE_CLOSED and len(expected[1].pipeline.members) == 3
    for _ in range(2):  # the second time from the kept forms
        batch = await call(wire_loc.GetContainerWithPipelineBatch,
                           getContainerWithPipelineBatchRequest={"containerIDs": ids})
        assert list(batch.getContainerWithPipelineBatchResponse.containerWithPipelines) == expected
    with pytest.raises(SCMException) as err:
        scm.containers_encoded_with_pipelines([ids[0], 9999])
    assert err.value.result is ResultCodes.CONTAINER_NOT_FOUND and "9999" in str(err.value)
