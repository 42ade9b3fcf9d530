"""The by-name copy between Ozone's messages and ours: the plan worked out once per pair of messages and the kept
conversions of datanode details give what a copy field by field gives, and nothing a caller changes leaks."""

from __future__ import annotations

from scm_server import ozone_wire
from scm_server.proto import hdds_pb2, scm_datanode_pb2
from scm_server.proto.ozone import ScmServerDatanodeHeartbeatProtocol_pb2 as wire_dn


def details(n: int) -> hdds_pb2.DatanodeDetailsProto:
    return hdds_pb2.DatanodeDetailsProto(
        uuid=f"00000000-0000-4000-8000-{n:012d}", ipAddress="10.0.0.1", hostName=f"dn{n}", networkLocation="/r1",
        persistedOpState=hdds_pb2.DECOMMISSIONING, ports=[hdds_pb2.Port(name="RATIS", value=9858)])


def test_details_converted_twice_are_equal_and_a_change_to_one_does_not_reach_the_next() -> None:
    theirs = ozone_wire.datanode_to_wire(details(1))
    first = ozone_wire.datanode_from_wire(theirs)
    assert first == details(1)
    first.hostName = "changed by a caller"
    first.ports.add(name="X", value=1)
    again = ozone_wire.datanode_from_wire(theirs)
    assert again == details(1)
    assert ozone_wire.datanode_from_wire(ozone_wire.datanode_to_wire(details(2))) == details(2)


def test_a_heartbeat_goes_to_ozone_s_messages_and_back_unchanged() -> None:
    ours = scm_datanode_pb2.SCMHeartbeatRequestProto(
        datanodeDetails=details(3),
        nodeReport=scm_datanode_pb2.NodeReportProto(storageReport=[scm_datanode_pb2.StorageReportProto(
            storageUuid="s1", storageLocation="/data", capacity=100, scmUsed=10, remaining=90, committed=5)]),
        commandStatusReports=[scm_datanode_pb2.CommandStatusReportsProto(cmdStatus=[
            scm_datanode_pb2.CommandStatus(cmdId=7, status=scm_datanode_pb2.CommandStatus.EXECUTED,
                                           type=scm_datanode_pb2.SCMCommandProto.closeContainerCommand)])],
    )
    theirs = ozone_wire.by_name(ours, wire_dn.SCMHeartbeatRequestProto)
    assert theirs.nodeReport.storageReport[0].committed == 5
    assert theirs.commandStatusReports[0].cmdStatus[0].type == wire_dn.SCMCommandProto.closeContainerCommand
    back = ozone_wire.by_name(theirs, scm_datanode_pb2.SCMHeartbeatRequestProto)
    assert back == ours
