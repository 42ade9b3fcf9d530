"""Values carried between our messages and Ozone's wire messages: by name, UUIDs both ways, and the
hand-written AllocateScmBlockResponseProto, ContainerInfoProto and ContainerWithPipeline bytes equal to the
message built the plain way."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scm_server import ozone_wire
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.proto import hdds_pb2, scm_client_pb2
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import ScmServerProtocol_pb2 as wire_block
from scm_server.proto.ozone import hdds_pb2 as wire
from scm_server.server.hadoop_rpc import convert


@given(st.uuids())
def test_uuid_round_trip(u: uuid.UUID) -> None:
    proto = ozone_wire.uuid_proto(str(u))
    assert proto is not None and ozone_wire.uuid_text(proto) == str(u)


def test_uuid_of_a_non_uuid_is_none() -> None:
    assert ozone_wire.uuid_proto("p1") is None


def test_enums_travel_by_name_not_number() -> None:
    # ours numbers DECOMMISSIONING 2, Ozone 4
    dn = hdds_pb2.DatanodeDetailsProto(uuid=str(uuid.uuid4()), persistedOpState=hdds_pb2.DECOMMISSIONING)
    out = ozone_wire.datanode_to_wire(dn)
    assert out.persistedOpState == wire.DECOMMISSIONING == 4
    assert ozone_wire.uuid_text(out.uuid128) == dn.uuid == ozone_wire.uuid_text(out.id.uuid)


def test_status_of_result_codes() -> None:
    assert convert.status_of(ResultCodes.SAFE_MODE_EXCEPTION) == wire_block.SAFE_MODE_EXCEPTION == 9
    assert convert.status_of(ResultCodes.INTERNAL_ERROR) == 29  # 28 is unused on the wire
    assert convert.status_of(ResultCodes.INVALID_REQUEST) == wire_block.INTERNAL_ERROR  # not one of Ozone's


def _pipeline(pid: str, members: int) -> hdds_pb2.Pipeline:
    return hdds_pb2.Pipeline(
        id=hdds_pb2.PipelineID(id=pid), state=hdds_pb2.PIPELINE_OPEN, type=hdds_pb2.RATIS, factor=hdds_pb2.THREE,
        leaderID=f"00000000-0000-0000-0000-00000000000{members}", creationTimeStamp=7, memberOrders=[0, 1, 2][:members],
        members=[hdds_pb2.DatanodeDetailsProto(uuid=f"00000000-0000-0000-0000-00000000000{i}", ipAddress="10.0.0.1",
                                               hostName=f"dn{i}", ports=[hdds_pb2.Port(name="RATIS", value=9858)])
                 for i in range(members)],
    )


@settings(max_examples=50)
@given(st.lists(st.tuples(st.integers(-2**63, 2**63 - 1), st.integers(-2**63, 2**63 - 1), st.sampled_from(
    [str(uuid.UUID(int=1)), str(uuid.UUID(int=2)), "not-a-uuid"])), max_size=20))
def test_allocate_response_bytes_equal_the_plain_message(blocks: list[tuple[int, int, str]]) -> None:
    resp = scm_client_pb2.AllocateScmBlockResponseProto(blocks=[
        hdds_pb2.AllocatedBlock(containerBlockID=hdds_pb2.ContainerBlockID(containerID=c, localID=lid),
                                pipeline=_pipeline(pid, 3))
        for c, lid, pid in blocks
    ])
    plain = wire_block.AllocateScmBlockResponseProto()
    for block in resp.blocks:
        item = plain.blocks.add()
        item.containerBlockID.containerID = block.containerBlockID.containerID
        item.containerBlockID.localID = block.containerBlockID.localID
        item.pipeline.CopyFrom(ozone_wire.pipeline_to_wire(block.pipeline))
    assert convert.allocate_response_to_wire(resp) == plain
    assert convert.allocate_response_bytes(resp) == plain.SerializeToString()


def test_a_pipeline_changed_since_an_earlier_answer_is_converted_again() -> None:
    """Ozone's bytes of a pipeline are kept across answers, by the whole content of our message: the same
    pipeline id with another state, leader or member list is another entry, never the old bytes."""
    def answer(p: hdds_pb2.Pipeline) -> wire_block.AllocateScmBlockResponseProto:
        resp = scm_client_pb2.AllocateScmBlockResponseProto(blocks=[hdds_pb2.AllocatedBlock(
            containerBlockID=hdds_pb2.ContainerBlockID(containerID=1, localID=2), pipeline=p)])
        return wire_block.AllocateScmBlockResponseProto.FromString(convert.allocate_response_bytes(resp))

    pid = str(uuid.UUID(int=5))
    p = _pipeline(pid, 3)
    assert answer(p).blocks[0].pipeline.state == wire.PIPELINE_OPEN
    p.state = hdds_pb2.PIPELINE_DORMANT
    p.leaderID = str(uuid.UUID(int=9))
    del p.members[2]
    again = answer(p).blocks[0].pipeline
    assert again.state == wire.PIPELINE_DORMANT and again.leaderID == str(uuid.UUID(int=9))
    assert len(again.members) == 2 and again == ozone_wire.pipeline_to_wire(p)


def test_close_container_command_id_is_the_container_id_on_the_wire() -> None:
    """Ozone's datanode takes the container to close from closeContainerCommandProto.cmdId (Ozone's SCM sets the
    command's id to the container ID): with our own command id there, a real datanode looked for a container
    numbered like our command id and never closed container 1. Other commands keep our envelope's id."""
    from scm_server.proto import scm_datanode_pb2 as dn

    cmd_type = dn.SCMCommandProto
    close = cmd_type(commandType=cmd_type.closeContainerCommand, cmdId=1795760489738007, term=2,
                     closeContainerCommandProto=dn.CloseContainerCommandProto(
                         containerID=7, pipelineID=hdds_pb2.PipelineID(id=str(uuid.uuid4())), force=True))
    close_pipeline = cmd_type(commandType=cmd_type.closePipelineCommand, cmdId=1795760489738008, term=2,
                              closePipelineCommandProto=dn.ClosePipelineCommandProto(
                                  pipelineID=hdds_pb2.PipelineID(id=str(uuid.uuid4()))))
    wire_resp = ozone_wire.heartbeat_response_to_wire(
        dn.SCMHeartbeatResponseProto(datanodeUUID="dn", commands=[close, close_pipeline]))
    sent = wire_resp.commands[0].closeContainerCommandProto
    assert sent.cmdId == sent.containerID == 7 and sent.force
    assert wire_resp.commands[0].term == 2
    assert wire_resp.commands[1].closePipelineCommandProto.cmdId == 1795760489738008
    assert wire_resp.IsInitialized()


def test_enum_from_wire_maps_by_name_and_names_what_is_unknown() -> None:
    # Ozone numbers DECOMMISSIONING 4, ours 2
    assert convert.enum_from_wire(wire.DECOMMISSIONING, wire.NodeOperationalState, hdds_pb2.NodeOperationalState,
                                  "operational state") == hdds_pb2.DECOMMISSIONING == 2
    ours = hdds_pb2.ReplicationType.DESCRIPTOR.values_by_name
    unknown = next(v.number for v in wire.ReplicationType.DESCRIPTOR.values if v.name not in ours)
    with pytest.raises(SCMException, match=f"replication type {wire.ReplicationType.Name(unknown)} is not known") as err:
        convert.enum_from_wire(unknown, wire.ReplicationType, hdds_pb2.ReplicationType, "replication type")
    assert err.value.result is ResultCodes.INVALID_REQUEST


def test_replica_to_wire_names_the_state_and_keeps_the_optional_fields_only_when_set() -> None:
    dn = hdds_pb2.DatanodeDetailsProto(uuid=str(uuid.uuid4()), hostName="dn1")
    replica = hdds_pb2.ContainerReplicaProto(containerID=7, state=hdds_pb2.ContainerReplicaProto.CLOSED,
                                             blockCommitSequenceId=11, keyCount=3, used=4096, replicaIndex=2)
    out = convert.replica_to_wire(hdds_pb2.ContainerReplicaInfo(replica=replica, datanode=dn))
    assert (out.containerID, out.state, out.sequenceID, out.keyCount, out.bytesUsed) == (7, "CLOSED", 11, 3, 4096)
    assert out.placeOfBirth == dn.uuid  # no origin recorded: the holder itself
    assert out.replicaIndex == 2 and not out.HasField("dataChecksum")
    assert ozone_wire.uuid_text(out.datanodeDetails.uuid128) == dn.uuid


def test_report_to_wire_carries_counters_and_samples() -> None:
    report = hdds_pb2.ReplicationManagerReportProto(timestamp=5)
    report.stat.add(key="UNDER_REPLICATED", count=2)
    report.statSample.add(key="UNDER_REPLICATED", containerIds=[1, 9])
    out = convert.report_to_wire(report)
    assert out.timestamp == 5
    assert [(s.key, s.value) for s in out.stat] == [("UNDER_REPLICATED", 2)]
    assert [(s.key, [c.id for c in s.container]) for s in out.statSample] == [("UNDER_REPLICATED", [1, 9])]
def test_ec_commands_reach_ozone_datanodes_whole() -> None:
    """A reconstruction (sources with their indexes, targets, the missing indexes as bytes, the EC layout) and a
    delete naming an index arrive in Ozone's messages complete, the command id inside the command message, and an
    EC pipeline carries its replica indexes and layout."""
    from scm_server.proto import scm_datanode_pb2 as dn

    cmd_type = dn.SCMCommandProto
    nodes = [hdds_pb2.DatanodeDetailsProto(uuid=str(uuid.uuid4()), hostName=f"dn{i}") for i in range(3)]
    ec = hdds_pb2.ECReplicationConfig(data=3, parity=2, codec="rs", ecChunkSize=1 << 20)
    rebuild = cmd_type(commandType=cmd_type.reconstructECContainersCommand, cmdId=41, term=3,
                       reconstructECContainersCommandProto=dn.ReconstructECContainersCommandProto(
                           containerID=9, ecReplicationConfig=ec, targets=nodes[2:], missingContainerIndexes=bytes([4]),
                           sources=[dn.DatanodeDetailsAndReplicaIndexProto(datanodeDetails=n, replicaIndex=i + 1)
                                    for i, n in enumerate(nodes[:2])]))
    delete = cmd_type(commandType=cmd_type.deleteContainerCommand, cmdId=42, term=3,
                      deleteContainerCommandProto=dn.DeleteContainerCommandProto(containerID=9, force=True, replicaIndex=5))
    wire_resp = ozone_wire.heartbeat_response_to_wire(dn.SCMHeartbeatResponseProto(datanodeUUID="x", commands=[rebuild, delete]))
    assert wire_resp.IsInitialized()
    sent = wire_resp.commands[0].reconstructECContainersCommandProto
    assert sent.cmdId == 41 and sent.containerID == 9 and sent.missingContainerIndexes == b"\x04"
    assert [(s.datanodeDetails.hostName, s.replicaIndex) for s in sent.sources] == [("dn0", 1), ("dn1", 2)]
    assert [t.hostName for t in sent.targets] == ["dn2"] and ozone_wire.uuid_text(sent.targets[0].uuid128) == nodes[2].uuid
    assert (sent.ecReplicationConfig.data, sent.ecReplicationConfig.parity, sent.ecReplicationConfig.codec) == (3, 2, "rs")
    removed = wire_resp.commands[1].deleteContainerCommandProto
    assert (removed.cmdId, removed.replicaIndex, removed.force) == (42, 5, True)

    pipeline = hdds_pb2.Pipeline(id=hdds_pb2.PipelineID(id=str(uuid.uuid4())), members=nodes[:3], type=hdds_pb2.EC,
                                 state=hdds_pb2.PIPELINE_OPEN, memberReplicaIndexes=[1, 2, 3],
                                 ecReplicationConfig=hdds_pb2.ECReplicationConfig(data=2, parity=1, codec="xor",
                                                                                  ecChunkSize=1 << 20))
    out = ozone_wire.pipeline_to_wire(pipeline)
    assert out.type == wire.EC and list(out.memberReplicaIndexes) == [1, 2, 3]
    assert (out.ecReplicationConfig.data, out.ecReplicationConfig.codec) == (2, "xor")


# ---- containers written as bytes: the same answer as the by-name conversion, and the models kept in step ----

def _fields(descriptor: object) -> dict[str, tuple[int, int, bool]]:
    return {f.name: (f.number, f.type, f.is_repeated) for f in descriptor.fields}  # type: ignore[attr-defined]


def test_container_messages_number_their_fields_alike_in_both_models() -> None:
    """container_info_bytes sends our bytes as Ozone's: every field of ours has Ozone's number and type, and
    every enum value Ozone's number (a change to either proto breaks this, not the answers)."""
    for ours_msg, theirs in ((hdds_pb2.ContainerInfoProto, wire.ContainerInfoProto),
                             (hdds_pb2.ECReplicationConfig, wire.ECReplicationConfig),
                             (hdds_pb2.PipelineID, wire.PipelineID)):
        ours_fields, their_fields = _fields(ours_msg.DESCRIPTOR), _fields(theirs.DESCRIPTOR)
        assert {n: ours_fields[n] for n in ours_fields} == {n: their_fields[n] for n in ours_fields}, ours_msg
    for ours_enum, their_enum in ((hdds_pb2.LifeCycleState, wire.LifeCycleState),
                                  (hdds_pb2.ReplicationFactor, wire.ReplicationFactor),
                                  (hdds_pb2.ReplicationType, wire.ReplicationType)):
        assert all(their_enum.Value(name) == number for name, number in ours_enum.items())


_U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
_I64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)


@st.composite
def container_infos(draw: st.DrawFn) -> hdds_pb2.ContainerInfoProto:
    """Any container our model holds: optional fields present or not, EC or not, a pipeline id that is a UUID,
    another string, or none."""
    info = hdds_pb2.ContainerInfoProto(containerID=draw(_I64), state=draw(st.sampled_from(list(hdds_pb2.LifeCycleState.values()))))
    optional = {
        "usedBytes": _U64, "numberOfKeys": _U64, "stateEnterTime": _I64, "owner": st.text(max_size=8),
        "deleteTransactionId": _I64, "sequenceId": _I64, "suppressed": st.booleans(),
        "replicationFactor": st.sampled_from(list(hdds_pb2.ReplicationFactor.values())),
        "replicationType": st.sampled_from(list(hdds_pb2.ReplicationType.values())),
    }
    for name, values in optional.items():
        if draw(st.booleans()):
            setattr(info, name, draw(values))
    pipeline = draw(st.one_of(st.none(), st.uuids().map(str), st.text(max_size=6)))
    if pipeline is not None:
        info.pipelineID.id = pipeline
    if draw(st.booleans()):
        info.ecReplicationConfig.CopyFrom(hdds_pb2.ECReplicationConfig(
            data=draw(st.integers(1, 10)), parity=draw(st.integers(1, 4)), codec=draw(st.sampled_from(["rs", "xor"])),
            ecChunkSize=draw(st.integers(1, 1 << 22))))
    return info


@settings(max_examples=300, deadline=None)
@given(st.lists(container_infos(), max_size=5))
def test_container_infos_as_bytes_equal_the_by_name_conversion(infos: list[hdds_pb2.ContainerInfoProto]) -> None:
    by_name = wire_loc.SCMListContainerResponseProto(containerCount=len(infos) + 7)
    by_name.containers.extend(ozone_wire.by_name(i, wire.ContainerInfoProto) for i in infos)
    page = [(i.SerializeToString(), i.pipelineID.id if i.HasField("pipelineID") else None) for i in infos]
    as_bytes = wire_loc.SCMListContainerResponseProto.FromString(ozone_wire.container_list_bytes(page, len(infos) + 7))
    assert as_bytes == by_name
    for one in infos:
        assert wire.ContainerInfoProto.FromString(ozone_wire.container_info_bytes(one)) == ozone_wire.by_name(
            one, wire.ContainerInfoProto)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(container_infos(), st.booleans(), st.integers(0, 2)), max_size=4))
def test_containers_with_pipelines_as_bytes_equal_the_by_name_conversion(
    cases: list[tuple[hdds_pb2.ContainerInfoProto, bool, int]],
) -> None:
    closed = _pipeline(str(uuid.UUID(int=9)), 2)
    closed.state = hdds_pb2.PIPELINE_CLOSED
    pipelines = [_pipeline(str(uuid.UUID(int=8)), 3), closed, _pipeline("not-a-uuid", 1)]
    cwps = [hdds_pb2.ContainerWithPipeline(containerInfo=info, pipeline=pipelines[which] if with_pipeline else None)
            for info, with_pipeline, which in cases]
    by_name = wire_loc.GetContainerWithPipelineBatchResponseProto()
    by_name.containerWithPipelines.extend(ozone_wire.by_name(c, wire.ContainerWithPipeline) for c in cwps)
    pairs = [(c.containerInfo, c.pipeline if c.HasField("pipeline") else None) for c in cwps]
    as_bytes = wire_loc.GetContainerWithPipelineBatchResponseProto.FromString(convert.containers_with_pipelines_bytes(pairs))
    assert as_bytes == by_name
    # the same from the containers' serialized forms, twice (the second from the kept fields)
    triples = [(i.SerializeToString(), i.pipelineID.id if i.HasField("pipelineID") else None, p) for i, p in pairs]
    for _ in range(2):
        encoded = convert.encoded_containers_with_pipelines_bytes(triples)
        assert wire_loc.GetContainerWithPipelineBatchResponseProto.FromString(encoded) == by_name


def test_a_pipeline_id_that_is_no_uuid_has_no_128_bit_form() -> None:
    info = hdds_pb2.ContainerInfoProto(containerID=1, state=hdds_pb2.OPEN, pipelineID=hdds_pb2.PipelineID(id="p1"))
    out = wire.ContainerInfoProto.FromString(ozone_wire.container_info_bytes(info))
    assert out.pipelineID.id == "p1" and not out.pipelineID.HasField("uuid128")
    pid = str(uuid.uuid4())
    info.pipelineID.id = pid
    out = wire.ContainerInfoProto.FromString(ozone_wire.container_info_bytes(info))
    assert ozone_wire.uuid_text(out.pipelineID.uuid128) == pid
