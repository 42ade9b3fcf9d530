"""StorageContainerDatanodeProtocol over Hadoop RPC, over loopback sockets with a fake facade."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from scm_server.client.hadoop_rpc import HadoopRpcConnection, RemoteError
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.proto import hdds_pb2
from scm_server.proto import scm_datanode_pb2 as ours
from scm_server.proto.ozone import ScmServerDatanodeHeartbeatProtocol_pb2 as wire_dn
from scm_server.proto.ozone import hdds_pb2 as wire
from scm_server.protocols import ContainerReport
from scm_server.server.hadoop_rpc.datanode_translator import PROTOCOL, SCM_EXCEPTION, DatanodeTranslator
from scm_server.server.hadoop_rpc.server import HadoopRpcServer
from tests.unit.edges.fakes import FakeSCM

DN = "11111111-2222-3333-4444-555555555555"


class RecordingSCM(FakeSCM):
    def __init__(self) -> None:
        super().__init__()
        self.registered: list[ours.SCMRegisterRequestProto] = []
        self.heartbeats: list[ours.SCMHeartbeatRequestProto] = []
        self.reports: list[ContainerReport | None] = []

    async def register_datanode(self, req: ours.SCMRegisterRequestProto) -> ours.SCMRegisteredResponseProto:
        self.registered.append(req)
        return ours.SCMRegisteredResponseProto(errorCode=ours.SCMRegisteredResponseProto.success,
                                               datanodeUUID=req.datanodeDetails.uuid, clusterID=self.cluster_id,
                                               hostname="dn1.example")

    async def process_heartbeat(
        self, req: ours.SCMHeartbeatRequestProto, container_report: ContainerReport | None = None
    ) -> ours.SCMHeartbeatResponseProto:
        self.heartbeats.append(req)
        self.reports.append(container_report)
        if req.datanodeDetails.hostName == "refused":
            raise SCMException(ResultCodes.SCM_NOT_INITIALIZED, "not caught up with the leader yet")
        resp = ours.SCMHeartbeatResponseProto(datanodeUUID=req.datanodeDetails.uuid, term=4)
        resp.commands.add(commandType=ours.SCMCommandProto.closeContainerCommand, cmdId=70, term=4,
                          closeContainerCommandProto=ours.CloseContainerCommandProto(
                              containerID=5, pipelineID={"id": DN}))
        resp.commands.add(commandType=ours.SCMCommandProto.deleteBlocksCommand, cmdId=71, term=4,
                          deleteBlocksCommandProto=ours.DeleteBlocksCommandProto(
                              cmdId=71, deletedBlocksTransactions=[{"txID": 1, "containerID": 5, "localID": [9]}]))
        return resp


@pytest.fixture
async def conn() -> Any:
    scm = RecordingSCM()
    server = HadoopRpcServer([DatanodeTranslator(scm)])
    port = await server.start("127.0.0.1", 0)
    c = HadoopRpcConnection(f"127.0.0.1:{port}", PROTOCOL)
    await c.connect()
    yield c, scm
    await c.close()
    await server.stop()


async def submit(c: HadoopRpcConnection, request: wire_dn.SCMDatanodeRequest, call_id: int) -> wire_dn.SCMDatanodeResponse:
    return wire_dn.SCMDatanodeResponse.FromString(await c.call("submitRequest", request, call_id=call_id))


def details(host: str = "dn1") -> wire.DatanodeDetailsProto:
    u = wire.UUID(mostSigBits=0x1111111122223333, leastSigBits=0x4444555555555555)
    return wire.DatanodeDetailsProto(ipAddress="10.0.0.1", hostName=host, uuid128=u, id=wire.DatanodeIDProto(uuid=u),
                                     persistedOpState=wire.IN_MAINTENANCE, networkLocation="/rack1",
                                     ports=[wire.Port(name="RATIS", value=9858)])


async def test_get_version(conn: Any) -> None:
    c, _ = conn
    resp = await submit(c, wire_dn.SCMDatanodeRequest(cmdType=wire_dn.GetVersion, traceID="t",
                                                      getVersionRequest=wire_dn.SCMVersionRequestProto()), 1)
    assert resp.status == wire_dn.OK and resp.traceID == "t"
    assert {kv.key: kv.value for kv in resp.getVersionResponse.keys}["clusterID"] == "CID-x"


async def test_register_takes_the_extended_details_and_uuid128(conn: Any) -> None:
    c, scm = conn
    req = wire_dn.SCMRegisterRequestProto(
        extendedDatanodeDetails=wire.ExtendedDatanodeDetailsProto(datanodeDetails=details(), version="2.2.0"),
        nodeReport=wire_dn.NodeReportProto(storageReport=[wire_dn.StorageReportProto(
            storageUuid="s1", storageLocation="/data", capacity=100, scmUsed=10, remaining=90, fsCapacity=120)]),
        containerReport=wire_dn.ContainerReportsProto(reports=[wire_dn.ContainerReplicaProto(
            containerID=5, state=wire_dn.ContainerReplicaProto.CLOSED, used=3, keyCount=2, readCount=9)]),
        pipelineReports=wire_dn.PipelineReportsProto(),
        dataNodeLayoutVersion=wire_dn.LayoutVersionProto(metadataLayoutVersion=7, softwareLayoutVersion=8),
    )
    resp = await submit(c, wire_dn.SCMDatanodeRequest(cmdType=wire_dn.Register, registerRequest=req), 2)
    assert resp.registerResponse.errorCode == wire_dn.SCMRegisteredResponseProto.success
    assert resp.registerResponse.datanodeUUID == DN and resp.registerResponse.hostname == "dn1.example"
    (got,) = scm.registered
    dn = got.datanodeDetails
    assert (dn.uuid, dn.hostName, dn.networkLocation) == (DN, "dn1", "/rack1")
    assert dn.persistedOpState == hdds_pb2.IN_MAINTENANCE == 5  # Ozone numbers it 3: carried by name
    assert got.nodeReport.storageReport[0].capacity == 100
    assert got.containerReport.reports[0].state == got.containerReport.reports[0].CLOSED
    assert got.dataNodeLayoutVersion.metadataLayoutVersion == 7


async def test_heartbeat_commands_carry_their_id_inside_and_the_term(conn: Any) -> None:
    c, scm = conn
    hb = wire_dn.SCMHeartbeatRequestProto(
        datanodeDetails=details(),
        incrementalContainerReport=[wire_dn.IncrementalContainerReportProto(report=[wire_dn.ContainerReplicaProto(
            containerID=6, state=wire_dn.ContainerReplicaProto.OPEN)])],
        commandStatusReports=[wire_dn.CommandStatusReportsProto(cmdStatus=[wire_dn.CommandStatus(
            cmdId=69, status=wire_dn.CommandStatus.EXECUTED, type=wire_dn.SCMCommandProto.closeContainerCommand)])],
    )
    resp = await submit(c, wire_dn.SCMDatanodeRequest(cmdType=wire_dn.SendHeartbeat, sendHeartbeatRequest=hb), 3)
    answer = resp.sendHeartbeatResponse
    assert answer.term == 4 and answer.datanodeUUID == DN
    close, delete = answer.commands
    assert close.commandType == wire_dn.SCMCommandProto.closeContainerCommand and close.term == 4
    # Ozone's close command: its id is the container ID (the datanode reads the container from cmdId)
    assert close.closeContainerCommandProto.cmdId == 5 and close.closeContainerCommandProto.containerID == 5
    assert close.closeContainerCommandProto.pipelineID.HasField("uuid128")
    assert delete.deleteBlocksCommandProto.cmdId == 71
    assert list(delete.deleteBlocksCommandProto.deletedBlocksTransactions[0].localID) == [9]
    assert answer.IsInitialized()
    (got,) = scm.heartbeats
    assert got.incrementalContainerReport[0].report[0].containerID == 6
    assert got.commandStatusReports[0].cmdStatus[0].cmdId == 69


async def test_facade_refusal_is_an_scm_exception_the_datanode_retries(conn: Any) -> None:
    c, _ = conn
    hb = wire_dn.SCMHeartbeatRequestProto(datanodeDetails=details("refused"))
    with pytest.raises(RemoteError) as caught:
        await submit(c, wire_dn.SCMDatanodeRequest(cmdType=wire_dn.SendHeartbeat, sendHeartbeatRequest=hb), 4)
    assert caught.value.exception_class == SCM_EXCEPTION and "not caught up" in caught.value.message


async def test_a_value_our_model_cannot_hold_is_named(conn: Any) -> None:
    c, _ = conn
    hb = wire_dn.SCMHeartbeatRequestProto(datanodeDetails=details(), containerReport=wire_dn.ContainerReportsProto(
        reports=[wire_dn.ContainerReplicaProto(containerID=1, state=wire_dn.ContainerReplicaProto.OPEN, used=-5)]))
    with pytest.raises(RemoteError, match=r"ContainerReplicaProto\.used"):
        await submit(c, wire_dn.SCMDatanodeRequest(cmdType=wire_dn.SendHeartbeat, sendHeartbeatRequest=hb), 5)


async def test_a_negative_key_count_is_named_too(conn: Any) -> None:
    c, scm = conn
    hb = wire_dn.SCMHeartbeatRequestProto(datanodeDetails=details(), containerReport=wire_dn.ContainerReportsProto(
        reports=[wire_dn.ContainerReplicaProto(containerID=1, state=wire_dn.ContainerReplicaProto.OPEN, used=1),
                 wire_dn.ContainerReplicaProto(containerID=2, state=wire_dn.ContainerReplicaProto.OPEN, keyCount=-1)]))
    with pytest.raises(RemoteError, match=r"ContainerReplicaProto\.keyCount: container 2 reported -1"):
        await submit(c, wire_dn.SCMDatanodeRequest(cmdType=wire_dn.SendHeartbeat, sendHeartbeatRequest=hb), 6)
    assert scm.heartbeats == []  # refused before the facade saw any of it


async def test_a_full_report_reaches_the_facade_as_it_arrived(conn: Any) -> None:
    """The heartbeat's full container report is passed apart, every replica with every value the report handlers
    read; the heartbeat itself no longer carries it."""
    c, scm = conn
    replicas = [wire_dn.ContainerReplicaProto(containerID=cid, state=wire_dn.ContainerReplicaProto.CLOSED, used=cid << 20,
                                              keyCount=cid, blockCommitSequenceId=cid + 7, originNodeId=DN,
                                              replicaIndex=cid % 3, isEmpty=cid == 2, readCount=4)
                for cid in range(1, 6)]
    hb = wire_dn.SCMHeartbeatRequestProto(datanodeDetails=details(), nodeReport=wire_dn.NodeReportProto(),
                                          containerReport=wire_dn.ContainerReportsProto(reports=replicas))
    await submit(c, wire_dn.SCMDatanodeRequest(cmdType=wire_dn.SendHeartbeat, sendHeartbeatRequest=hb), 7)
    (got,), (report,) = scm.heartbeats, scm.reports
    assert not got.HasField("containerReport") and got.HasField("nodeReport")
    assert report is not None
    fields = ("containerID", "state", "used", "keyCount", "blockCommitSequenceId", "originNodeId", "replicaIndex",
              "isEmpty")
    assert [tuple(getattr(r, f) for f in fields) for r in report.reports] == [
        tuple(getattr(r, f) for f in fields) for r in replicas]
    await submit(c, wire_dn.SCMDatanodeRequest(cmdType=wire_dn.SendHeartbeat, sendHeartbeatRequest=wire_dn.SCMHeartbeatRequestProto(
        datanodeDetails=details())), 8)
    assert scm.reports[-1] is None  # no report, none passed


async def test_the_simulators_client_round_trips_our_messages(conn: Any) -> None:
    """HadoopDatanodeClient: our messages in, Ozone's on the wire, ours back (the command id on our envelope)."""
    from scm_server.client.errors import SCMUnavailableError
    from scm_server.client.hadoop_rpc import HadoopDatanodeClient
    from scm_server.ports import free_port

    c, scm = conn
    client = HadoopDatanodeClient(c.address)
    try:
        version = await client.get_version()
        assert {kv.key: kv.value for kv in version.keys}["clusterID"] == "CID-x"
        dn = hdds_pb2.DatanodeDetailsProto(uuid=DN, ipAddress="10.0.0.1", hostName="dn1",
                                           persistedOpState=hdds_pb2.DECOMMISSIONED)
        registered = await client.register(ours.SCMRegisterRequestProto(
            datanodeDetails=dn, nodeReport=ours.NodeReportProto(), containerReport=ours.ContainerReportsProto(),
            pipelineReports=ours.PipelineReportsProto()))
        assert registered.errorCode == ours.SCMRegisteredResponseProto.success
        assert scm.registered[0].datanodeDetails.persistedOpState == hdds_pb2.DECOMMISSIONED
        answer = await client.send_heartbeat(ours.SCMHeartbeatRequestProto(datanodeDetails=dn))
        assert [(cmd.commandType, cmd.cmdId) for cmd in answer.commands] == [
            (ours.SCMCommandProto.closeContainerCommand, 5), (ours.SCMCommandProto.deleteBlocksCommand, 71)]  # 5: as Ozone sends it
        assert answer.commands[0].closeContainerCommandProto.pipelineID.id == DN and answer.term == 4
        with pytest.raises(SCMException) as refused:
            await client.send_heartbeat(ours.SCMHeartbeatRequestProto(
                datanodeDetails=hdds_pb2.DatanodeDetailsProto(uuid=DN, hostName="refused")))
        assert refused.value.result is ResultCodes.SCM_NOT_INITIALIZED
    finally:
        await client.close()
    shared = HadoopDatanodeClient(c.address)  # the simulator's datanodes share one client per SCM
    try:
        versions = await asyncio.gather(*(shared.get_version() for _ in range(10)))
        assert len(versions) == 10
        assert len([t for t in asyncio.all_tasks() if t.get_name() == f"hadoop-rpc-read {c.address}"]) == 2  # c's + one
    finally:
        await shared.close()
    gone = HadoopDatanodeClient(f"127.0.0.1:{free_port()}", timeout=2.0)
    with pytest.raises(SCMUnavailableError):
        await gone.get_version()
    await gone.close()
