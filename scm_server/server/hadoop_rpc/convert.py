"""Between the project's messages (proto/*.proto, gRPC era) and Ozone's wire messages (proto/ozone/).

The two models share names but not field numbers, and some enums number their values differently
(NodeOperationalState), so every value is carried across by name, never by number. Pure functions.
"""

from __future__ import annotations

import uuid as uuid_mod

from scm_server.exceptions import ResultCodes
from scm_server.hadoop_ipc import encode_varint
from scm_server.proto import hdds_pb2, scm_client_pb2
from scm_server.proto.ozone import ScmServerProtocol_pb2 as wire_block
from scm_server.proto.ozone import hdds_pb2 as wire

_INT64 = 1 << 64


def _signed64(value: int) -> int:
    return value - _INT64 if value >= 1 << 63 else value


def uuid_proto(text: str) -> wire.UUID | None:
    """Ozone's 128-bit UUID message of a UUID string; None when ``text`` is not a UUID."""
    try:
        value = uuid_mod.UUID(text).int
    except (ValueError, AttributeError):
        return None
    return wire.UUID(mostSigBits=_signed64(value >> 64), leastSigBits=_signed64(value & (_INT64 - 1)))


def uuid_text(proto: wire.UUID) -> str:
    value = ((proto.mostSigBits % _INT64) << 64) | (proto.leastSigBits % _INT64)
    return str(uuid_mod.UUID(int=value))


def _enum_by_name(value: int, source: object, target: object, default: int | None = None) -> int | None:
    name = source.Name(value)  # type: ignore[attr-defined]
    try:
        return int(target.Value(name))  # type: ignore[attr-defined]
    except ValueError:
        return default


def datanode_to_wire(dn: hdds_pb2.DatanodeDetailsProto) -> wire.DatanodeDetailsProto:
    out = wire.DatanodeDetailsProto(uuid=dn.uuid, ipAddress=dn.ipAddress, hostName=dn.hostName)
    for port in dn.ports:
        out.ports.add(name=port.name, value=port.value)
    if dn.HasField("networkName"):
        out.networkName = dn.networkName
    if dn.HasField("networkLocation"):
        out.networkLocation = dn.networkLocation
    if dn.HasField("persistedOpState"):
        state = _enum_by_name(dn.persistedOpState, hdds_pb2.NodeOperationalState, wire.NodeOperationalState)
        if state is not None:
            out.persistedOpState = state  # type: ignore[assignment]
    if dn.HasField("persistedOpStateExpiry"):
        out.persistedOpStateExpiry = dn.persistedOpStateExpiry
    if dn.HasField("currentVersion"):
        out.currentVersion = dn.currentVersion
    u128 = uuid_proto(dn.uuid)
    if u128 is not None:
        out.uuid128.CopyFrom(u128)
        out.id.uuid.CopyFrom(u128)
    return out


def pipeline_id_to_wire(pid: hdds_pb2.PipelineID) -> wire.PipelineID:
    out = wire.PipelineID(id=pid.id)
    u128 = uuid_proto(pid.id)
    if u128 is not None:
        out.uuid128.CopyFrom(u128)
    return out


def pipeline_id_from_wire(pid: wire.PipelineID) -> hdds_pb2.PipelineID:
    if pid.HasField("uuid128"):
        return hdds_pb2.PipelineID(id=uuid_text(pid.uuid128))
    return hdds_pb2.PipelineID(id=pid.id)


def pipeline_to_wire(p: hdds_pb2.Pipeline) -> wire.Pipeline:
    out = wire.Pipeline(id=pipeline_id_to_wire(p.id))
    out.members.extend(datanode_to_wire(m) for m in p.members)
    if p.HasField("state"):
        out.state = _enum_by_name(p.state, hdds_pb2.PipelineState, wire.PipelineState)  # type: ignore[assignment]
    if p.HasField("type"):
        out.type = _enum_by_name(p.type, hdds_pb2.ReplicationType, wire.ReplicationType)  # type: ignore[assignment]
    if p.HasField("factor"):
        out.factor = _enum_by_name(p.factor, hdds_pb2.ReplicationFactor, wire.ReplicationFactor)  # type: ignore[assignment]
    if p.leaderID:
        out.leaderID = p.leaderID
        leader = uuid_proto(p.leaderID)
        if leader is not None:
            out.leaderID128.CopyFrom(leader)
            out.leaderDatanodeID.uuid.CopyFrom(leader)
    out.memberOrders.extend(p.memberOrders)
    if p.HasField("creationTimeStamp"):
        out.creationTimeStamp = p.creationTimeStamp
    return out


def exclude_list_from_wire(ex: wire.ExcludeListProto) -> hdds_pb2.ExcludeListProto:
    return hdds_pb2.ExcludeListProto(
        datanodes=list(ex.datanodes),
        containerIds=list(ex.containerIds),
        pipelineIds=[pipeline_id_from_wire(p) for p in ex.pipelineIds],
    )


def replication_type_from_wire(value: int) -> int | None:
    return _enum_by_name(value, wire.ReplicationType, hdds_pb2.ReplicationType)


def replication_factor_from_wire(value: int) -> int | None:
    return _enum_by_name(value, wire.ReplicationFactor, hdds_pb2.ReplicationFactor)


def allocate_response_to_wire(resp: scm_client_pb2.AllocateScmBlockResponseProto) -> wire_block.AllocateScmBlockResponseProto:
    return wire_block.AllocateScmBlockResponseProto.FromString(allocate_response_bytes(resp))


def field_bytes(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field: its key (wire type 2), the length, the bytes."""
    return encode_varint(number << 3 | 2) + encode_varint(len(payload)) + payload


def allocate_response_bytes(resp: scm_client_pb2.AllocateScmBlockResponseProto) -> bytes:
    """The serialized Ozone ``AllocateScmBlockResponseProto`` of our answer, written field by field: the
    blocks of one answer share a few pipelines, each converted and serialized once (a 100-block answer
    would otherwise convert, copy and serialize its pipeline 100 times)."""
    pipelines: dict[str, bytes] = {}
    out = bytearray()
    for block in resp.blocks:
        pid = block.pipeline.id.id
        pipeline = pipelines.get(pid)
        if pipeline is None:
            pipeline = pipelines[pid] = pipeline_to_wire(block.pipeline).SerializeToString()
        cbid = wire.ContainerBlockID(
            containerID=block.containerBlockID.containerID, localID=block.containerBlockID.localID
        ).SerializeToString()
        # AllocateScmBlockResponseProto.blocks = 3 { containerBlockID = 1, pipeline = 2 }
        out += field_bytes(3, field_bytes(1, cbid) + field_bytes(2, pipeline))
    return bytes(out)


def key_blocks_from_wire(kb: wire_block.KeyBlocks) -> scm_client_pb2.KeyBlocks:
    return scm_client_pb2.KeyBlocks(
        key=kb.key,
        blocks=[
            scm_client_pb2.BlockIDProto(
                containerID=b.containerBlockID.containerID, localID=b.containerBlockID.localID
            )
            for b in kb.blocks
        ],
    )


def delete_results_to_wire(
    results: list[scm_client_pb2.DeleteKeyBlocksResultProto],
) -> wire_block.DeleteScmKeyBlocksResponseProto:
    out = wire_block.DeleteScmKeyBlocksResponseProto()
    for r in results:
        item = out.results.add(objectKey=r.objectKey)
        for br in r.blockResults:
            result = _enum_by_name(
                br.result, scm_client_pb2.DeleteScmBlockResult.Result, wire_block.DeleteScmBlockResult.Result,
                default=wire_block.DeleteScmBlockResult.unknownFailure,
            )
            block = item.blockResults.add(result=result)
            block.blockID.containerBlockID.containerID = br.blockID.containerID
            block.blockID.containerBlockID.localID = br.blockID.localID
    return out


def scm_info_to_wire(info: scm_client_pb2.GetScmInfoResponseProto) -> wire.GetScmInfoResponseProto:
    return wire.GetScmInfoResponseProto(clusterId=info.clusterId, scmId=info.scmId, peerRoles=list(info.peerRoles))


DEFAULT_RACK = "/default-rack"


def sort_by_distance(
    known: list[hdds_pb2.DatanodeDetailsProto], wanted: list[str], client: str
) -> list[hdds_pb2.DatanodeDetailsProto]:
    """SortDatanodes: the datanodes named in ``wanted`` (uuids; unknown ones dropped, as Ozone does), nearest
    to ``client`` first. The client is a datanode when its address or host name is one's; then that node comes
    first, its rack's next, other racks last. Equal distances (and every node, when the client is not a
    datanode) keep the order asked for, where Ozone shuffles them."""
    by_uuid = {dn.uuid: dn for dn in known}
    nodes = [by_uuid[u] for u in wanted if u in by_uuid]
    reader = next((dn for dn in known if client and client in (dn.ipAddress, dn.hostName)), None)
    if reader is None:
        return nodes
    reader_rack = reader.networkLocation or DEFAULT_RACK

    def distance(dn: hdds_pb2.DatanodeDetailsProto) -> int:
        if dn.uuid == reader.uuid:
            return 0
        return 2 if (dn.networkLocation or DEFAULT_RACK) == reader_rack else 4

    return sorted(nodes, key=distance)


def status_of(result: ResultCodes) -> int:
    """The block protocol's Status for an SCM result code: the same name where Ozone has it (its
    Status lists SCMException.ResultCodes in order), else INTERNAL_ERROR (the message names ours)."""
    try:
        return int(wire_block.Status.Value(result.value))
    except ValueError:
        return int(wire_block.INTERNAL_ERROR)
