"""StorageContainerLocationProtocol over Hadoop RPC: every served cmdType against a real in-process SCM
(stub HA, fake datanodes), over loopback sockets with our Hadoop RPC client; the follower's answer with a
fake facade."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scm_server import hadoop_ipc as codec
from scm_server import ozone_wire
from scm_server.client.hadoop_rpc import HadoopRpcConnection, RemoteError
from scm_server.exceptions import NotLeaderException
from scm_server.proto import hdds_pb2
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import hdds_pb2 as wire
from scm_server.server.hadoop_rpc.location_translator import PROTOCOL, SCM_EXCEPTION, LocationTranslator
from scm_server.server.hadoop_rpc.server import HadoopRpcServer
from tests.unit.edges.fakes import FakeSCM
from tests.unit.scm_state_harness import bring_up, make_datanodes, make_scm

CONF = {
    "ozone.scm.service.ids": "cluster1",
    "ozone.scm.nodes.cluster1": "scm1,scm2",
    "ozone.scm.address.cluster1.scm1": "127.0.0.1",
    "ozone.scm.address.cluster1.scm2": "scm2.example",
    "ozone.scm.client.port.cluster1.scm2": "29860",
}

Req = wire_loc.ScmContainerLocationRequest
Resp = wire_loc.ScmContainerLocationResponse


async def serve(scm: Any) -> tuple[HadoopRpcServer, HadoopRpcConnection]:
    server = HadoopRpcServer([LocationTranslator(scm, CONF.get, "scm-1-id", "127.0.0.1")])
    port = await server.start("127.0.0.1", 0)
    conn = HadoopRpcConnection(f"127.0.0.1:{port}", PROTOCOL)
    await conn.connect()
    return server, conn


class Admin:
    def __init__(self, conn: HadoopRpcConnection) -> None:
        self.conn = conn
        self.next_id = 0

    async def __call__(self, cmd: int, **fields: Any) -> Resp:
        self.next_id += 1
        req = Req(cmdType=cmd, traceID=f"t{self.next_id}", **fields)  # type: ignore[arg-type]
        resp = Resp.FromString(await self.conn.call("submitRequest", req, call_id=self.next_id))
        assert resp.IsInitialized() and resp.status == Resp.OK and resp.cmdType == cmd
        assert resp.traceID == f"t{self.next_id}"
        return resp


@pytest.fixture
async def admin(tmp_path: Path) -> Any:
    scm = await make_scm(tmp_path)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    server, conn = await serve(scm)
    yield Admin(conn), scm, dns
    await conn.close()
    await server.stop()
    await scm.stop()


async def test_safemode_scm_info_and_nodes(admin: Any) -> None:
    call, scm, dns = admin
    in_sm = (await call(wire_loc.InSafeMode, inSafeModeRequest={})).inSafeModeResponse.inSafeMode
    assert in_sm == scm.in_safe_mode()[0]
    rules = (await call(wire_loc.GetSafeModeRuleStatuses, getSafeModeRuleStatusesRequest={}))
    assert {r.ruleName for r in rules.getSafeModeRuleStatusesResponse.safeModeRuleStatusesProto} == {
        r.ruleName for r in scm.safe_mode_rule_statuses()
    }
    exited = await call(wire_loc.ForceExitSafeMode, forceExitSafeModeRequest={})
    assert exited.HasField("forceExitSafeModeResponse")
    assert not (await call(wire_loc.InSafeMode, inSafeModeRequest={})).inSafeModeResponse.inSafeMode
    info = (await call(wire_loc.GetScmInfo, getScmInfoRequest={})).getScmInfoResponse
    assert info.clusterId == scm.get_scm_info().clusterId
    nodes = (await call(wire_loc.QueryNode, nodeQueryRequest={"scope": wire.QueryScope.CLUSTER,
                                                               "state": wire.HEALTHY})).nodeQueryResponse
    assert sorted(n.nodeID.uuid for n in nodes.datanodes) == sorted(d.uuid for d in dns)
    assert all(n.nodeOperationalStates == [wire.IN_SERVICE] for n in nodes.datanodes)
    wanted = ozone_wire.uuid_proto(dns[1].uuid)
    single = (await call(wire_loc.SingleNodeQuery, singleNodeQueryRequest={"uuid": wanted})).singleNodeQueryResponse
    assert single.datanode.nodeID.uuid == dns[1].uuid and single.datanode.nodeID.hostName == dns[1].host
    with pytest.raises(RemoteError, match="NO_SUCH_DATANODE"):
        await call(wire_loc.SingleNodeQuery, singleNodeQueryRequest={"uuid": {"mostSigBits": 1, "leastSigBits": 2}})
    none_dead = (await call(wire_loc.QueryNode, nodeQueryRequest={"scope": wire.QueryScope.CLUSTER,
                                                                  "state": wire.DEAD})).nodeQueryResponse
    assert list(none_dead.datanodes) == []


async def test_containers_and_pipelines(admin: Any) -> None:
    call, scm, _dns = admin
    await call(wire_loc.ForceExitSafeMode, forceExitSafeModeRequest={})
    created = await call(wire_loc.AllocateContainer, containerRequest={
        "replicationType": wire.RATIS, "replicationFactor": wire.THREE, "owner": "admin"})
    cwp = created.containerResponse.containerWithPipeline
    assert created.containerResponse.errorCode == wire_loc.ContainerResponseProto.success
    cid = cwp.containerInfo.containerID
    assert cwp.containerInfo.state == wire.OPEN and cwp.containerInfo.owner == "admin"
    assert len(cwp.pipeline.members) == 3 and cwp.pipeline.id.HasField("uuid128")

    got = await call(wire_loc.GetContainer, getContainerRequest={"containerID": cid})
    assert got.getContainerResponse.containerInfo.containerID == cid
    gwp = await call(wire_loc.GetContainerWithPipeline, getContainerWithPipelineRequest={"containerID": cid})
    assert gwp.getContainerWithPipelineResponse.containerWithPipeline.pipeline.id.id == cwp.pipeline.id.id
    listed = (await call(wire_loc.ListContainer, scmListContainerRequest={"count": 10})).scmListContainerResponse
    assert cid in [c.containerID for c in listed.containers] and listed.containerCount >= 1
    open_only = await call(wire_loc.ListContainer, scmListContainerRequest={"count": 10, "state": wire.CLOSED})
    assert list(open_only.scmListContainerResponse.containers) == []
    count = await call(wire_loc.GetContainerCount, getContainerCountRequest={})
    assert count.getContainerCountResponse.containerCount == listed.containerCount
    replicas = await call(wire_loc.GetContainerReplicas, getContainerReplicasRequest={"containerID": cid})
    assert list(replicas.getContainerReplicasResponse.containerReplica) == []  # nothing reported yet
    closed = await call(wire_loc.CloseContainer, scmCloseContainerRequest={"containerID": cid})
    assert closed.scmCloseContainerResponse.status == wire_loc.SCMCloseContainerResponseProto.OK
    assert scm.get_container(cid).state == hdds_pb2.CLOSING

    pipelines = (await call(wire_loc.ListPipelines, listPipelineRequest={})).listPipelineResponse.pipelines
    assert {p.id.id for p in pipelines} == {p.id.id for p in scm.list_pipelines()}
    one = next(p for p in pipelines if p.factor == wire.THREE).id  # closed below, making room for a new one
    got_p = await call(wire_loc.GetPipeline, getPipelineRequest={"pipelineID": one})
    assert got_p.getPipelineResponse.pipeline.id.id == one.id
    await call(wire_loc.DeactivatePipeline, deactivatePipelineRequest={"pipelineID": one})
    assert {p.id.id: p.state for p in scm.list_pipelines()}[one.id] == hdds_pb2.PIPELINE_DORMANT
    await call(wire_loc.ActivatePipeline, activatePipelineRequest={"pipelineID": one})
    assert {p.id.id: p.state for p in scm.list_pipelines()}[one.id] == hdds_pb2.PIPELINE_OPEN
    await call(wire_loc.ClosePipeline, closePipelineRequest={"pipelineID": one})
    assert {p.id.id: p.state for p in scm.list_pipelines()}.get(one.id) in (None, hdds_pb2.PIPELINE_CLOSED)
    made = await call(wire_loc.AllocatePipeline, pipelineRequest={"replicationType": wire.RATIS,
                                                                  "replicationFactor": wire.THREE})
    assert made.pipelineResponse.errorCode == wire_loc.PipelineResponseProto.success
    assert len(made.pipelineResponse.pipeline.members) == 3
    assert made.pipelineResponse.pipeline.id.id in {p.id.id for p in scm.list_pipelines()}


async def test_replication_manager_and_node_admin(admin: Any) -> None:
    call, _scm, dns = admin
    await call(wire_loc.StartReplicationManager, startReplicationManagerRequest={})
    assert (await call(wire_loc.GetReplicationManagerStatus,
                       seplicationManagerStatusRequest={})).replicationManagerStatusResponse.isRunning
    await call(wire_loc.StopReplicationManager, stopReplicationManagerRequest={})
    assert not (await call(wire_loc.GetReplicationManagerStatus,
                           seplicationManagerStatusRequest={})).replicationManagerStatusResponse.isRunning
    report = (await call(wire_loc.GetReplicationManagerReport,
                         replicationManagerReportRequest={})).getReplicationManagerReportResponse.report
    assert report.IsInitialized() and {s.key for s in report.stat} >= {"OPEN", "CLOSED"}

    bad = await call(wire_loc.DecommissionNodes, decommissionNodesRequest={"hosts": ["no-such-host"]})
    assert [f.host for f in bad.decommissionNodesResponse.failedHosts] == ["no-such-host"]
    ok = await call(wire_loc.StartMaintenanceNodes, startMaintenanceNodesRequest={"hosts": [dns[0].host],
                                                                                 "endInHours": 1})
    assert list(ok.startMaintenanceNodesResponse.failedHosts) == []
    back = await call(wire_loc.RecommissionNodes, recommissionNodesRequest={"hosts": [dns[0].host]})
    assert list(back.recommissionNodesResponse.failedHosts) == []


async def test_failures_unsupported_and_malformed(admin: Any) -> None:
    call, _scm, _dns = admin
    with pytest.raises(RemoteError) as err:
        await call(wire_loc.GetContainer, getContainerRequest={"containerID": 4242})
    assert err.value.exception_class == SCM_EXCEPTION and "CONTAINER_NOT_FOUND" in err.value.message
    with pytest.raises(RemoteError) as err:
        await call(wire_loc.DeleteContainer, scmDeleteContainerRequest={"containerID": 1})
    # every other cmdType of Ozone 2.2.0 is served; this one Ozone's own translator does not know either
    assert err.value.exception_class == "java.lang.IllegalArgumentException"
    assert err.value.message == "Unknown command type: DeleteContainer"
    with pytest.raises(RemoteError) as err:
        await call.conn.call("submitRequest", b"\xff\xff", call_id=99)  # type: ignore[arg-type]
    assert "malformed ScmContainerLocationRequest" in err.value.message
    with pytest.raises(RemoteError) as err:
        await call(wire_loc.GetPipeline, getPipelineRequest={"pipelineID": {"id": "nope"}})
    assert "PIPELINE_NOT_FOUND" in err.value.message
    # the connection serves on
    assert (await call(wire_loc.InSafeMode, inSafeModeRequest={})).HasField("inSafeModeResponse")


async def test_follower_refers_to_the_leaders_client_port_but_answers_follower_reads() -> None:
    scm = FakeSCM(leader=False, leader_id="scm2")
    server, conn = await serve(scm)
    try:
        call = Admin(conn)
        with pytest.raises(RemoteError) as err:
            await call(wire_loc.ListPipelines, listPipelineRequest={})
        assert err.value.exception_class == codec.SERVER_NOT_LEADER
        assert codec.suggested_leader(err.value.message) == "scm2.example:29860"
        # follower-readable (Ozone's FOLLOWER_READABLE_COMMAND_TYPES) and admin commands answer here
        assert (await call(wire_loc.InSafeMode, inSafeModeRequest={})).HasField("inSafeModeResponse")
        assert (await call(wire_loc.ForceExitSafeMode, forceExitSafeModeRequest={})).HasField(
            "forceExitSafeModeResponse")
    finally:
        await conn.close()
        await server.stop()


def test_not_leader_without_a_known_leader_has_no_hint() -> None:
    t = LocationTranslator(FakeSCM(), CONF.get, "scm-1-id", "scm1.example")
    msg = t.leadership.message(NotLeaderException("x", ""))
    assert codec.suggested_leader(msg) is None and "Could not determine the leader node" in msg


async def test_container_with_pipeline_batches(admin: Any) -> None:
    """Ozone's OM refreshes a key's block locations with GetContainerWithPipelineBatch (`ozone sh key get`):
    every container answered in order with its pipeline; an unknown id fails the whole call, as in Ozone.
    GetExistContainerWithPipelinesInBatch leaves the unknown id out and answers the rest."""
    call, _scm, _dns = admin
    await call(wire_loc.ForceExitSafeMode, forceExitSafeModeRequest={})
    cids = []
    for _ in range(2):
        created = await call(wire_loc.AllocateContainer, containerRequest={
            "replicationType": wire.RATIS, "replicationFactor": wire.THREE, "owner": "om"})
        cids.append(created.containerResponse.containerWithPipeline.containerInfo.containerID)
    batch = await call(wire_loc.GetContainerWithPipelineBatch,
                       getContainerWithPipelineBatchRequest={"containerIDs": list(reversed(cids))})
    got = batch.getContainerWithPipelineBatchResponse.containerWithPipelines
    assert [c.containerInfo.containerID for c in got] == list(reversed(cids))
    assert all(len(c.pipeline.members) == 3 and c.pipeline.id.HasField("uuid128") for c in got)
    with pytest.raises(RemoteError, match="CONTAINER_NOT_FOUND"):
        await call(wire_loc.GetContainerWithPipelineBatch,
                   getContainerWithPipelineBatchRequest={"containerIDs": [cids[0], 999999]})
    exist = await call(wire_loc.GetExistContainerWithPipelinesInBatch,
                       getExistContainerWithPipelinesInBatchRequest={"containerIDs": [cids[0], 999999, cids[1]]})
    assert [c.containerInfo.containerID for c in
            exist.getExistContainerWithPipelinesInBatchResponse.containerWithPipelines] == cids
