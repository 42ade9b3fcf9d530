"""Between the project's messages (proto/*.proto, gRPC era) and Ozone's wire messages (proto/ozone/).

The two models share names but not field numbers, and some enums number their values differently
(NodeOperationalState), so every value is carried across by name, never by number: :func:`by_name`
copies any message into its namesake of the other model, with the few messages that need more (a
datanode's 128-bit ids, a pipeline's) converted by hand. Pure functions; used by the server's Hadoop RPC
translators and by the client's Hadoop RPC datanode protocol (the simulator).
"""

from __future__ import annotations

import keyword
import uuid as uuid_mod
from collections.abc import Callable
from typing import Any, TypeVar

from google.protobuf import message as pb_message
from google.protobuf.descriptor import FieldDescriptor

from scm_server.hadoop_ipc import encode_varint
from scm_server.proto import hdds_pb2, scm_datanode_pb2
from scm_server.proto.ozone import ScmServerDatanodeHeartbeatProtocol_pb2 as wire_dn
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


def enum_by_name(value: int, source: object, target: object, default: int | None = None) -> int | None:
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
        state = enum_by_name(dn.persistedOpState, hdds_pb2.NodeOperationalState, wire.NodeOperationalState)
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


# The ports a pipeline's members carry where a client gets the pipeline to write or read through (a container with
# its pipeline, an allocated block): only these, as Ozone's Pipeline.getProtobufMessage with IO_PORTS; the
# pipeline calls (list, get, allocate) carry every port the datanode registered, as Ozone's do.
IO_PORTS = frozenset({"STANDALONE", "RATIS", "RATIS_DATASTREAM"})


def pipeline_to_wire(p: hdds_pb2.Pipeline, *, all_ports: bool = False) -> wire.Pipeline:
    out = wire.Pipeline(id=pipeline_id_to_wire(p.id))
    for m in p.members:
        member = datanode_to_wire(m)
        if not all_ports:
            kept = [port for port in member.ports if port.name in IO_PORTS]
            del member.ports[:]
            member.ports.extend(kept)
        out.members.append(member)
    if p.HasField("state"):
        out.state = enum_by_name(p.state, hdds_pb2.PipelineState, wire.PipelineState)  # type: ignore[assignment]
    if p.HasField("type"):
        out.type = enum_by_name(p.type, hdds_pb2.ReplicationType, wire.ReplicationType)  # type: ignore[assignment]
    if p.HasField("factor"):
        out.factor = enum_by_name(p.factor, hdds_pb2.ReplicationFactor, wire.ReplicationFactor)  # type: ignore[assignment]
    if p.leaderID:
        out.leaderID = p.leaderID
        leader = uuid_proto(p.leaderID)
        if leader is not None:
            out.leaderID128.CopyFrom(leader)
            out.leaderDatanodeID.uuid.CopyFrom(leader)
    suggested = uuid_proto(p.suggestedLeaderID) if p.suggestedLeaderID else None
    if suggested is not None:
        out.suggestedLeaderID.CopyFrom(suggested)
        out.suggestedLeaderDatanodeID.uuid.CopyFrom(suggested)
    out.memberOrders.extend(p.memberOrders)
    out.memberReplicaIndexes.extend(p.memberReplicaIndexes)
    if p.HasField("ecReplicationConfig"):
        out.ecReplicationConfig.CopyFrom(by_name(p.ecReplicationConfig, wire.ECReplicationConfig))
    if p.HasField("creationTimeStamp"):
        out.creationTimeStamp = p.creationTimeStamp
    return out


# ---- by name, recursively (the datanode protocol: many messages, same names, other numbers) ----

_MESSAGE = FieldDescriptor.TYPE_MESSAGE
_ENUM = FieldDescriptor.TYPE_ENUM


# A datanode sends the same details in every heartbeat: their conversion is kept by their bytes (a pure function of
# them), up to this many datanodes' worth before the cache starts again
_DETAILS_CACHE_SIZE = 65536
_details_cache: dict[bytes, hdds_pb2.DatanodeDetailsProto] = {}


def datanode_from_wire(dn: wire.DatanodeDetailsProto) -> hdds_pb2.DatanodeDetailsProto:
    """Ozone's datanode details in our message (a new message: the caller may change it)."""
    key = dn.SerializePartialToString()
    known = _details_cache.get(key)
    out = hdds_pb2.DatanodeDetailsProto()
    if known is not None:
        out.CopyFrom(known)
        return out
    _copy_by_name(dn, out, _TO_OURS)
    if not out.uuid:
        source = dn.id.uuid if dn.HasField("id") else dn.uuid128 if dn.HasField("uuid128") else None
        if source is not None:
            out.uuid = uuid_text(source)
    if len(_details_cache) >= _DETAILS_CACHE_SIZE:
        _details_cache.clear()
    kept = hdds_pb2.DatanodeDetailsProto()
    kept.CopyFrom(out)
    _details_cache[key] = kept
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


_SCALAR, _SUB, _ENUM_VALUE = 0, 1, 2
# (source message, target message) -> source field number -> how it is carried: (target field name, kind, repeated,
# enum numbers source -> target), or None when it is not (no such target field, another kind); built once per pair
_Step = tuple[str, int, bool, dict[int, int]]
_PLANS: dict[tuple[str, str], dict[int, _Step | None]] = {}


def _plan(source: Any, target: Any) -> dict[int, _Step | None]:
    """How each field of ``source`` (a message descriptor) lands in ``target``'s: the by-name rules of
    :func:`by_name` worked out once per pair of messages instead of per field of every message copied."""
    key = (source.full_name, target.full_name)
    plan = _PLANS.get(key)
    if plan is not None:
        return plan
    plan = {}
    fields = target.fields_by_name
    for fd in source.fields:
        tfd = fields.get(fd.name)
        if (
            tfd is None
            or (fd.type == _MESSAGE) != (tfd.type == _MESSAGE)
            or (fd.type == _ENUM) != (tfd.type == _ENUM)
            or fd.is_repeated != tfd.is_repeated
        ):
            plan[fd.number] = None
            continue
        numbers: dict[int, int] = {}
        if fd.type == _ENUM:
            kind = _ENUM_VALUE
            known = tfd.enum_type.values_by_name
            numbers = {v.number: known[v.name].number for v in fd.enum_type.values if v.name in known}
        else:
            kind = _SUB if fd.type == _MESSAGE else _SCALAR
        plan[fd.number] = (tfd.name, kind, fd.is_repeated, numbers)
    _PLANS[key] = plan
    return plan


def _copy_by_name(source: pb_message.Message, target: pb_message.Message, specials: dict[str, Any]) -> None:
    key = (type(source), type(target), id(specials))
    copier = _COPIERS.get(key)
    if copier is None:
        copier = _COPIERS[key] = _compile_copier(source.DESCRIPTOR, target.DESCRIPTOR, specials)
    copier(source, target)


# (source class, target class, which specials) -> the by-name copy of that pair, written out as Python once
_COPIERS: dict[tuple[type, type, int], Callable[[Any, Any], None]] = {}


def _compile_copier(source: Any, target: Any, specials: dict[str, Any]) -> Callable[[Any, Any], None]:
    """The by-name copy of ``source`` messages into ``target`` ones (descriptors) as one Python function, one
    statement per field :func:`_plan` carries, each field read by its attribute: what a walk of ``ListFields()``
    against the plan does, without the walk (a heartbeat's messages are copied this way on every call).

    A field is copied when ``ListFields()`` would list it: a field with presence when it is set, any other when it
    is not its default (a repeated one: not empty). A value that does not fit raises ValueError naming
    ``Message.field``, as before."""
    plan = _plan(source, target)
    namespace: dict[str, Any] = {"_convert": _convert_message, "_specials": specials}
    lines = ["def copy(s, t):"]
    for fd in source.fields:
        step = plan.get(fd.number)
        if step is None:
            continue
        name, kind, repeated, numbers = step
        src, dst = _attribute("s", fd.name), _attribute("t", name)
        body: list[str]
        if kind == _SUB:
            if repeated:
                body = [f"into = {dst}", f"for v in {src}:", "    _convert(v, into.add(), _specials)"]
            else:
                body = [f"sub = {dst}", "sub.SetInParent()", f"_convert({src}, sub, _specials)"]
        elif kind == _ENUM_VALUE:
            table = f"numbers_{fd.number}"
            namespace[table] = numbers
            if repeated:
                body = [f"{dst}.extend([{table}[x] for x in {src} if x in {table}])"]
            else:
                body = [f"x = {table}.get({src})", "if x is not None:", f"    {dst} = x"]
        elif repeated:
            body = [f"{dst}.extend({src})"]
        else:
            body = [f"{dst} = {src}"]
        test = f"s.HasField({fd.name!r})" if fd.has_presence and not repeated else src
        lines.append(f"    if {test}:")
        lines.append("        try:")
        lines.extend(f"            {line}" for line in body)
        lines.append("        except (ValueError, TypeError) as exc:")
        lines.append(f"            raise ValueError(f'{source.name}.{fd.name}: {{exc}}') from exc")
    lines.append("    return None")
    exec(compile("\n".join(lines), f"<by_name {source.full_name} -> {target.full_name}>", "exec"), namespace)
    copier: Callable[[Any, Any], None] = namespace["copy"]
    return copier


def _attribute(obj: str, name: str) -> str:
    """``obj.name`` as Python source; ``getattr`` for a field named as a Python keyword."""
    return f"getattr({obj}, {name!r})" if keyword.iskeyword(name) else f"{obj}.{name}"


def _fill_required(msg: pb_message.Message) -> None:
    """Required scalars the source did not have take their declared default (``force`` of a delete)."""
    for fd in msg.DESCRIPTOR.fields:
        if fd.is_required and fd.type != _MESSAGE and not msg.HasField(fd.name):
            setattr(msg, fd.name, fd.default_value)


def fill_required(msg: pb_message.Message) -> None:
    """Every required scalar unset anywhere in ``msg`` (its set sub-messages included) takes its declared
    default, so that a message carried over by name from our model (where Ozone's required ``owner`` or
    ``usedBytes`` may be optional and unset) is complete on the wire."""
    _fill_required(msg)
    for fd, value in msg.ListFields():
        if fd.type == _MESSAGE:
            for sub in value if fd.is_repeated else [value]:
                fill_required(sub)


def heartbeat_response_to_wire(
    resp: scm_datanode_pb2.SCMHeartbeatResponseProto,
) -> wire_dn.SCMHeartbeatResponseProto:
    """Our heartbeat answer in Ozone's form. Ozone keeps a command's id inside its command message
    (``closeContainerCommandProto.cmdId``), ours on the envelope (``SCMCommandProto.cmdId``).

    One exception, Ozone's own: a close-container command's id *is* its container ID (Ozone's SCM builds
    ``CloseContainerCommand(containerID, ...)`` and its datanode reads the container to close from ``cmdId``,
    ignoring ``containerID``), so ``closeContainerCommandProto.cmdId`` carries the container ID."""
    out = by_name(resp, wire_dn.SCMHeartbeatResponseProto)
    for ours, theirs in zip(resp.commands, out.commands, strict=True):
        for fd, sub in theirs.ListFields():
            if fd.type != _MESSAGE:
                continue
            if fd.name == "closeContainerCommandProto":
                sub.cmdId = sub.containerID
            elif "cmdId" in sub.DESCRIPTOR.fields_by_name and ours.HasField("cmdId"):
                sub.cmdId = ours.cmdId
            _fill_required(sub)
    return out


def heartbeat_response_from_wire(
    resp: wire_dn.SCMHeartbeatResponseProto,
) -> scm_datanode_pb2.SCMHeartbeatResponseProto:
    """Ozone's heartbeat answer in our form: each command's id moves from its command message to our envelope."""
    out = by_name(resp, scm_datanode_pb2.SCMHeartbeatResponseProto)
    for theirs, ours in zip(resp.commands, out.commands, strict=True):
        for fd, sub in theirs.ListFields():
            if fd.type == _MESSAGE and "cmdId" in sub.DESCRIPTOR.fields_by_name and sub.HasField("cmdId"):
                ours.cmdId = sub.cmdId
                break
    return out


def register_request_to_wire(req: scm_datanode_pb2.SCMRegisterRequestProto) -> wire_dn.SCMRegisterRequestProto:
    """Our registration in Ozone's form: the details go into ``extendedDatanodeDetails``."""
    out = by_name(req, wire_dn.SCMRegisterRequestProto)
    out.extendedDatanodeDetails.datanodeDetails.CopyFrom(datanode_to_wire(req.datanodeDetails))
    out.nodeReport.SetInParent()
    out.containerReport.SetInParent()
    out.pipelineReports.SetInParent()
    return out


# ---- containers: the same field numbers in both models, so our bytes are Ozone's ----

# Ozone's PipelineID field 100 (uuid128) of a pipeline id string, wrapped as ContainerInfoProto.pipelineID (field 3),
# by the id: pipelines are few and long-lived, so the table stays small (emptied past its bound)
_PIPELINE_UUID_FIELDS: dict[str, bytes] = {}
PIPELINE_UUID_FIELDS_MAX = 4096


def _pipeline_uuid_field(pipeline_id: str) -> bytes:
    field = _PIPELINE_UUID_FIELDS.get(pipeline_id)
    if field is None:
        u128 = uuid_proto(pipeline_id)
        inner = b"" if u128 is None else _length_delimited(100, u128.SerializeToString())
        field = _length_delimited(3, inner) if inner else b""
        if len(_PIPELINE_UUID_FIELDS) >= PIPELINE_UUID_FIELDS_MAX:
            _PIPELINE_UUID_FIELDS.clear()
        _PIPELINE_UUID_FIELDS[pipeline_id] = field
    return field


def _length_delimited(number: int, payload: bytes) -> bytes:
    return encode_varint(number << 3 | 2) + encode_varint(len(payload)) + payload


def container_info_bytes(info: hdds_pb2.ContainerInfoProto) -> bytes:
    """Ozone's ``ContainerInfoProto`` of ``info``, serialized, without a message built field by field.

    Both models number every field of ContainerInfoProto, PipelineID and ECReplicationConfig alike and their
    enums' values alike (a test holds them to it), so our bytes parse as Ozone's message; what Ozone has and we
    lack, the pipeline id's 128-bit form, follows as a second ``pipelineID`` field, which a parser merges into
    the first. Ozone's required ``owner``, ``usedBytes``, ``numberOfKeys`` and ``replicationType`` are optional in
    ours: a caller checks the message it parses these bytes into (``IsInitialized``)."""
    data = info.SerializeToString()
    if info.HasField("pipelineID"):
        data += _pipeline_uuid_field(info.pipelineID.id)
    return data


# Ozone's container as field 1 (SCMListContainerResponseProto.containers, ContainerWithPipeline.containerInfo), by
# our serialized ContainerInfoProto: the container manager keeps one bytes object per unchanged container
# (ContainerManager.encoded), so an unchanged container is framed once, its bytes' hash computed once. The bytes
# hold the pipeline id, so they alone determine the field. Emptied past its bound.
_CONTAINER_FIELDS: dict[bytes, bytes] = {}
CONTAINER_FIELDS_MAX = 1 << 16  # about 15 MB at most (a framed container is about 100-150 bytes)


def container_field(data: bytes, pipeline_id: str | None) -> bytes:
    """Field 1 holding Ozone's ``ContainerInfoProto`` of our serialized one, ``data`` (whose pipeline id is
    ``pipeline_id``), as :func:`container_info_bytes` writes it."""
    field = _CONTAINER_FIELDS.get(data)
    if field is None:
        field = _length_delimited(1, data + _pipeline_uuid_field(pipeline_id) if pipeline_id is not None else data)
        if len(_CONTAINER_FIELDS) >= CONTAINER_FIELDS_MAX:
            _CONTAINER_FIELDS.clear()
        _CONTAINER_FIELDS[data] = field
    return field


def container_list_bytes(page: list[tuple[bytes, str | None]], total: int) -> bytes:
    """Ozone's ``SCMListContainerResponseProto`` serialized: each container of ``page`` (our ContainerInfoProto's
    bytes and its pipeline id, :meth:`scm_server.scm.StorageContainerManager.list_containers_encoded`) as
    :func:`container_field` gives it, then ``containerCount``."""
    field = _CONTAINER_FIELDS.get
    parts = [field(data) or container_field(data, pipeline_id) for data, pipeline_id in page]
    parts.append(b"\x10" + encode_varint(total))  # containerCount = 2, a varint (never negative)
    return b"".join(parts)
