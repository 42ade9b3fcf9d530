"""scripts/ozone_proto_compare.py finds every kind of difference (on descriptors built here, no Ozone files)."""

from __future__ import annotations

import importlib.util
import pathlib

from google.protobuf import descriptor_pb2

ROOT = pathlib.Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("ozone_proto_compare", ROOT / "scripts" / "ozone_proto_compare.py")
assert _spec is not None and _spec.loader is not None
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)

F = descriptor_pb2.FieldDescriptorProto


def file(package: str, type_prefix: str, *, number: int = 2, default: str = "-1", enum_value: int = 2,
         extra: bool = False) -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name="x.proto", package=package, syntax="proto2")
    e = f.enum_type.add(name="Kind")
    e.value.add(name="A", number=1)
    e.value.add(name="B", number=enum_value)
    m = f.message_type.add(name="Header")
    m.field.add(name="callId", number=1, label=F.LABEL_REQUIRED, type=F.TYPE_SINT32)
    m.field.add(name="retryCount", number=number, label=F.LABEL_OPTIONAL, type=F.TYPE_SINT32, default_value=default)
    m.field.add(name="kind", number=3, label=F.LABEL_OPTIONAL, type=F.TYPE_ENUM, type_name=f".{type_prefix}.Kind")
    if extra:
        f.message_type.add(name="Extra")
    return f


def test_identical_files_have_no_differences() -> None:
    assert compare.compare_file(file("ozone.hdds", "ozone.hdds"), file("hadoop.hdds", "hadoop.hdds")) == []


def test_each_kind_of_difference_is_reported() -> None:
    theirs = file("hadoop.hdds", "hadoop.hdds")
    assert any("default '-2'" in d for d in compare.compare_file(file("ozone.hdds", "ozone.hdds", default="-2"), theirs))
    moved = compare.compare_file(file("ozone.hdds", "ozone.hdds", number=5), theirs)
    assert any("= 2: missing here" in d for d in moved) and any("= 5: not in Ozone" in d for d in moved)
    assert any("Kind.B: 3 vs Ozone 2" in d for d in compare.compare_file(file("ozone.hdds", "ozone.hdds", enum_value=3), theirs))
    assert any("Extra: not in Ozone" in d for d in compare.compare_file(file("ozone.hdds", "ozone.hdds", extra=True), theirs))
    # a referenced type in the wrong package is a difference too
    assert any("type_name" in d for d in compare.compare_file(file("ozone.hdds", "ozone.other"), theirs))
    # and a package that does not map
    assert any("package" in d for d in compare.compare_file(file("ozone.nope", "ozone.hdds"), theirs))
