"""Between the project's messages (proto/*.proto, gRPC era) and Ozone's wire messages (proto/ozone/).

The two models share names but not field numbers, and some enums number their values differently
(NodeOperationalState), so every value is carried across by name, never by number. Pure functions.
"""

from __future__ import annotations

import uuid as uuid_mod
from typing import Any, TypeVar

from google.protobuf import message as pb_message
from google.protobuf.descriptor import FieldDescriptor

from scm_server.exceptions import ResultCodes
from scm_server.hadoop_ipc import encode_varint
from scm_server.proto import hdds_pb2, scm_client_pb2, scm_datanode_pb2
from scm_server.proto.ozone import ScmServerDatanodeHeartbeatProtocol_pb2 as wire_dn
from scm_server.proto.ozone import ScmServerProtocol_pb2 as wire_block
from scm_server.proto.ozone import hdds_pb2 as wire

_INT64 = 1 << 64
M = TypeVar("M", bound=pb_message.Message)


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


# ---- by name, recursively (the datanode protocol: many messages, same names, other numbers) ----

_MESSAGE = FieldDescriptor.TYPE_MESSAGE
_ENUM = FieldDescriptor.TYPE_ENUM


def datanode_from_wire(dn: wire.DatanodeDetailsProto) -> hdds_pb2.DatanodeDetailsProto:
    out = hdds_pb2.DatanodeDetailsProto()
    _copy_by_name(dn, out, _TO_OURS)
    if not out.uuid:
        source = dn.id.uuid if dn.HasField("id") else dn.uuid128 if dn.HasField("uuid128") else None
        if source is not None:
            out.uuid = uuid_text(source)
    return out


# Messages whose conversion is not a plain copy by name, by the full name of the source message.
_TO_WIRE: dict[str, Any] = {
    "hadoop.hdds.DatanodeDetailsProto": datanode_to_wire,
    "hadoop.hdds.PipelineID": pipeline_id_to_wire,
    "hadoop.hdds.Pipeline": pipeline_to_wire,
}
_TO_OURS: dict[str, Any] = {
    "ozone.hdds.DatanodeDetailsProto": datanode_from_wire,
    "ozone.hdds.PipelineID": pipeline_id_from_wire,
}


def by_name(source: pb_message.Message, target_cls: type[M]) -> M:
    """``source`` as a ``target_cls``: every field of the same name carried over (messages recursively,
    enum values by name); fields the target lacks, and enum values it does not know, are left out.
    ValueError names the field when a value does not fit (a negative size into an unsigned field)."""
    out = target_cls()
    specials = _TO_WIRE if source.DESCRIPTOR.full_name.startswith("hadoop.") else _TO_OURS
    _copy_by_name(source, out, specials)
    return out


def _convert_message(value: pb_message.Message, target: pb_message.Message, specials: dict[str, Any]) -> None:
    special = specials.get(value.DESCRIPTOR.full_name)
    if special is not None:
        converted = special(value)
        if converted.DESCRIPTOR.full_name == target.DESCRIPTOR.full_name:
            target.CopyFrom(converted)
            return
    _copy_by_name(value, target, specials)


def _copy_by_name(source: pb_message.Message, target: pb_message.Message, specials: dict[str, Any]) -> None:
    fields = target.DESCRIPTOR.fields_by_name
    for fd, value in source.ListFields():
        tfd = fields.get(fd.name)
        if tfd is None or (fd.type == _MESSAGE) != (tfd.type == _MESSAGE) or (fd.type == _ENUM) != (tfd.type == _ENUM):
            continue
        repeated = fd.is_repeated
        if repeated != tfd.is_repeated:
            continue
        values = list(value) if repeated else [value]
        try:
            if fd.type == _MESSAGE:
                for v in values:
                    sub = getattr(target, fd.name).add() if repeated else getattr(target, fd.name)
                    sub.SetInParent()  # an empty message (ReregisterCommandProto) is still present
                    _convert_message(v, sub, specials)
            elif fd.type == _ENUM:
                src_enum, dst_enum = fd.enum_type, tfd.enum_type
                assert src_enum is not None and dst_enum is not None
                names = [src_enum.values_by_number[v].name for v in values if v in src_enum.values_by_number]
                mapped = [dst_enum.values_by_name[n].number for n in names if n in dst_enum.values_by_name]
                if repeated:
                    getattr(target, fd.name).extend(mapped)
                elif mapped:
                    setattr(target, fd.name, mapped[0])
            elif repeated:
                getattr(target, fd.name).extend(values)
            else:
                setattr(target, fd.name, value)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{source.DESCRIPTOR.name}.{fd.name}: {exc}") from exc


def _fill_required(msg: pb_message.Message) -> None:
    """Required scalars the source did not have take their declared default (``force`` of a delete)."""
    for fd in msg.DESCRIPTOR.fields:
        if fd.is_required and fd.type != _MESSAGE and not msg.HasField(fd.name):
            setattr(msg, fd.name, fd.default_value)


def heartbeat_response_to_wire(
    resp: scm_datanode_pb2.SCMHeartbeatResponseProto,
) -> wire_dn.SCMHeartbeatResponseProto:
    """Our heartbeat answer in Ozone's form. Ozone keeps a command's id inside its command message
    (``closeContainerCommandProto.cmdId``), ours on the envelope (``SCMCommandProto.cmdId``)."""
    out = by_name(resp, wire_dn.SCMHeartbeatResponseProto)
    for ours, theirs in zip(resp.commands, out.commands, strict=True):
        for fd, sub in theirs.ListFields():
            if fd.type != _MESSAGE:
                continue
            if "cmdId" in sub.DESCRIPTOR.fields_by_name and ours.HasField("cmdId"):
                sub.cmdId = ours.cmdId
            _fill_required(sub)
    return out
