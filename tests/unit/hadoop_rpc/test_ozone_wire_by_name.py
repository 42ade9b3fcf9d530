"""The by-name copy between Ozone's messages and ours: the plan worked out once per pair of messages and the kept
conversions of datanode details give what a copy field by field gives, and nothing a caller changes leaks."""

from __future__ import annotations

import random
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor

from scm_server import ozone_wire
from scm_server.proto import hdds_pb2, scm_datanode_pb2
from scm_server.proto.ozone import ScmServerDatanodeHeartbeatProtocol_pb2 as wire_dn
from scm_server.proto.ozone import hdds_pb2 as wire_hdds


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


# ---- the compiled copy against the walk it replaces ----

def _walk_by_name(source: Any, target: Any, specials: dict[str, Any]) -> None:
    """The by-name copy as it was before it was compiled: ListFields() walked against the plan."""
    plan = ozone_wire._plan(source.DESCRIPTOR, target.DESCRIPTOR)
    for fd, value in source.ListFields():
        step = plan.get(fd.number)
        if step is None:
            continue
        name, kind, repeated, numbers = step
        try:
            if kind == ozone_wire._SUB:
                into = getattr(target, name)
                for v in value if repeated else [value]:
                    sub = into.add() if repeated else into
                    sub.SetInParent()
                    special = specials.get(v.DESCRIPTOR.full_name)
                    converted = special(v) if special is not None else None
                    if converted is not None and converted.DESCRIPTOR.full_name == sub.DESCRIPTOR.full_name:
                        sub.CopyFrom(converted)
                    else:
                        _walk_by_name(v, sub, specials)
            elif kind == ozone_wire._ENUM_VALUE:
                if repeated:
                    getattr(target, name).extend([numbers[v] for v in value if v in numbers])
                elif value in numbers:
                    setattr(target, name, numbers[value])
            elif repeated:
                getattr(target, name).extend(value)
            else:
                setattr(target, name, value)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{source.DESCRIPTOR.name}.{fd.name}: {exc}") from exc


_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(1 << 31), (1 << 31) - 1), FieldDescriptor.TYPE_SINT32: (-(1 << 31), (1 << 31) - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(1 << 31), (1 << 31) - 1), FieldDescriptor.TYPE_UINT32: (0, (1 << 32) - 1),
    FieldDescriptor.TYPE_FIXED32: (0, (1 << 32) - 1), FieldDescriptor.TYPE_INT64: (-(1 << 63), (1 << 63) - 1),
    FieldDescriptor.TYPE_SINT64: (-(1 << 63), (1 << 63) - 1), FieldDescriptor.TYPE_SFIXED64: (-(1 << 63), (1 << 63) - 1),
    FieldDescriptor.TYPE_UINT64: (0, (1 << 64) - 1), FieldDescriptor.TYPE_FIXED64: (0, (1 << 64) - 1),
}


def _fill(message: Any, rng: random.Random, depth: int = 0) -> None:
    """Random values in a random subset of ``message``'s fields (sub-messages to a few levels; small ints
    often, so values that do and do not fit the other model's field both occur)."""
    for fd in message.DESCRIPTOR.fields:
        if rng.random() < 0.4 or (fd.type == FieldDescriptor.TYPE_MESSAGE and depth >= 3):
            continue
        count = rng.randint(0, 3) if fd.is_repeated else 1
        for _ in range(count):
            if fd.type == FieldDescriptor.TYPE_MESSAGE:
                sub = getattr(message, fd.name).add() if fd.is_repeated else getattr(message, fd.name)
                sub.SetInParent()
                _fill(sub, rng, depth + 1)
                continue
            if fd.type == FieldDescriptor.TYPE_ENUM:
                value: Any = rng.choice(fd.enum_type.values).number
            elif fd.type in _INT_RANGES:
                low, high = _INT_RANGES[fd.type]
                value = rng.choice([0, 1, rng.randint(-3, 3), rng.randint(low, high)])
                value = min(max(value, low), high)
            elif fd.type == FieldDescriptor.TYPE_BOOL:
                value = rng.random() < 0.5
            elif fd.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
                value = rng.choice([0.0, 1.5, -2.25])
            elif fd.type == FieldDescriptor.TYPE_BYTES:
                value = rng.randbytes(rng.randint(0, 20))
            else:
                value = rng.choice(["", "a", "00000000-0000-4000-8000-000000000001", "dn-7"])
            if fd.is_repeated:
                getattr(message, fd.name).append(value)
            else:
                setattr(message, fd.name, value)


def _namesake_pairs() -> list[tuple[Any, Any]]:
    theirs = [wire_dn, wire_hdds]
    ours_modules = [scm_datanode_pb2, hdds_pb2]
    pairs = []
    for wire_module, ours_module in zip(theirs, ours_modules, strict=True):
        for name in wire_module.DESCRIPTOR.message_types_by_name:
            mine = ours_module.DESCRIPTOR.message_types_by_name.get(name)
            if mine is not None:
                pairs.append((getattr(wire_module, name), getattr(ours_module, name)))
    return pairs


@pytest.mark.parametrize("pair", _namesake_pairs(), ids=lambda p: p.DESCRIPTOR.name if hasattr(p, "DESCRIPTOR") else "")
def test_the_compiled_copy_gives_what_the_walk_gives_both_ways(pair: tuple[Any, Any]) -> None:
    rng = random.Random(f"by-name {pair[0].DESCRIPTOR.full_name}")
    for direction in (pair, pair[::-1]):
        source_cls, target_cls = direction
        specials = ozone_wire._TO_WIRE if source_cls.DESCRIPTOR.full_name.startswith("hadoop.") else ozone_wire._TO_OURS
        for _ in range(40):
            source = source_cls()
            _fill(source, rng)
            walked, compiled = target_cls(), target_cls()
            try:
                _walk_by_name(source, walked, specials)
            except Exception as exc:  # the same failure is expected of the compiled copy
                with pytest.raises(type(exc)) as raised:
                    ozone_wire._copy_by_name(source, compiled, specials)
                assert str(raised.value) == str(exc)
                continue
            ozone_wire._copy_by_name(source, compiled, specials)
            assert compiled == walked
            assert compiled.ListFields() == walked.ListFields()
