"""Compare the project's wire-exact protos (proto/ozone/) with Apache Ozone's, field by field.

Usage::

    .venv/bin/python scripts/ozone_proto_compare.py --ozone-git-dir /path/to/ozone.git [--ref ozone-2.2.0]

Ozone's files are read from a git directory of apache/ozone (``git show REF:PATH``) into a temporary
directory, compiled there with protoc (grpcio-tools) into a descriptor set, and compared with the
descriptor set of ours; nothing of Ozone's is written into the repository. Package names are mapped
(``ozone.hdds`` <-> ``hadoop.hdds`` and so on: packages never travel on the wire); everything that
does is compared: message and enum names, field numbers, names, labels, types, referenced types,
defaults, the deprecated flag, enum values, extension ranges, services and their methods.

Prints one line per difference and a summary; exit code 0 when there is none, 1 otherwise, 2 when
the inputs cannot be read.
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import tempfile
from collections.abc import Iterator

from google.protobuf import descriptor_pb2

ROOT = pathlib.Path(__file__).resolve().parent.parent
OURS = ROOT / "proto"

CLIENT = "hadoop-hdds/interface-client/src/main/proto"
SERVER = "hadoop-hdds/interface-server/src/main/proto"
ADMIN = "hadoop-hdds/interface-admin/src/main/proto"

# ours (relative to proto/) -> Ozone's path in the repository
FILES: dict[str, str] = {
    "ozone/RpcHeader.proto": f"{CLIENT}/RpcHeader.proto",
    "ozone/IpcConnectionContext.proto": f"{CLIENT}/IpcConnectionContext.proto",
    "ozone/ProtobufRpcEngine.proto": f"{CLIENT}/ProtobufRpcEngine.proto",
    "ozone/hdds.proto": f"{CLIENT}/hdds.proto",
    "ozone/ScmServerProtocol.proto": f"{SERVER}/ScmServerProtocol.proto",
    "ozone/ScmServerDatanodeHeartbeatProtocol.proto": f"{SERVER}/ScmServerDatanodeHeartbeatProtocol.proto",
    "ozone/ScmServerSecurityProtocol.proto": f"{SERVER}/ScmServerSecurityProtocol.proto",
    "ozone/ScmAdminProtocol.proto": f"{ADMIN}/ScmAdminProtocol.proto",
    "ozone/ReconfigureProtocol.proto": f"{CLIENT}/ReconfigureProtocol.proto",
    "ozone/ScmSecretKeyProtocol.proto": f"{SERVER}/ScmSecretKeyProtocol.proto",
}
# Ozone's SCM protocol files not yet written here (reported, not compared)
NOT_YET: tuple[str, ...] = ()
# our package -> Ozone's package
PACKAGES = {
    "ozone.hadoop.common": "hadoop.common",
    "ozone.hdds.security.symmetric": "hadoop.hdds.security.symmetric",
    "ozone.hdds.security": "hadoop.hdds.security",
    "ozone.hdds.container": "hadoop.hdds.container",
    "ozone.hdds.block": "hadoop.hdds.block",
    "ozone.hdds": "hadoop.hdds",
}

F = descriptor_pb2.FieldDescriptorProto


def protoc_descriptors(include_dirs: list[pathlib.Path], files: list[str]) -> descriptor_pb2.FileDescriptorSet:
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "set.pb"
        args = ["protoc", *(f"-I{d}" for d in include_dirs), f"--descriptor_set_out={out}", *files]
        rc = protoc.main(args)
        if rc != 0:
            raise SystemExit(f"protoc failed ({rc}) on {' '.join(files)}")
        fds = descriptor_pb2.FileDescriptorSet()
        fds.ParseFromString(out.read_bytes())
        return fds


def ozone_type(name: str) -> str:
    """A type name of ours (``.ozone.hdds.Pipeline``) in Ozone's packages (``.hadoop.hdds.Pipeline``)."""
    for ours, theirs in PACKAGES.items():
        if name.startswith(f".{ours}."):
            return f".{theirs}.{name[len(ours) + 2:]}"
    return name


def walk(file: descriptor_pb2.FileDescriptorProto) -> Iterator[tuple[str, object]]:
    """(name relative to the package, message or enum descriptor), nested ones included."""

    def messages(prefix: str, msgs: object) -> Iterator[tuple[str, object]]:
        for m in msgs:  # type: ignore[attr-defined]
            name = f"{prefix}{m.name}"
            yield name, m
            for e in m.enum_type:
                yield f"{name}.{e.name}", e
            yield from messages(f"{name}.", m.nested_type)

    for e in file.enum_type:
        yield e.name, e
    yield from messages("", file.message_type)


def field_facts(f: descriptor_pb2.FieldDescriptorProto, mapped: bool) -> dict[str, object]:
    return {
        "name": f.name,
        "label": F.Label.Name(f.label),
        "type": F.Type.Name(f.type),
        "type_name": ozone_type(f.type_name) if mapped else f.type_name,
        "default": f.default_value if f.HasField("default_value") else None,
        "deprecated": f.options.deprecated,
    }


def compare_file(ours: descriptor_pb2.FileDescriptorProto, theirs: descriptor_pb2.FileDescriptorProto) -> list[str]:
    diffs: list[str] = []
    where = theirs.name
    if PACKAGES.get(ours.package) != theirs.package:
        diffs.append(f"{where}: package {ours.package} does not map to {theirs.package}")
    if ours.syntax != theirs.syntax:
        diffs.append(f"{where}: syntax {ours.syntax or 'proto2'} vs {theirs.syntax or 'proto2'}")
    mine = dict(walk(ours))
    other = dict(walk(theirs))
    for name in sorted(set(other) - set(mine)):
        diffs.append(f"{where}: {name}: missing here")
    for name in sorted(set(mine) - set(other)):
        diffs.append(f"{where}: {name}: not in Ozone")
    for name in sorted(set(mine) & set(other)):
        a, b = mine[name], other[name]
        if type(a) is not type(b):
            diffs.append(f"{where}: {name}: a message on one side, an enum on the other")
            continue
        if isinstance(a, descriptor_pb2.EnumDescriptorProto):
            assert isinstance(b, descriptor_pb2.EnumDescriptorProto)
            va = {v.name: v.number for v in a.value}
            vb = {v.name: v.number for v in b.value}
            if va != vb:
                for value in sorted(set(va) | set(vb)):
                    if va.get(value) != vb.get(value):
                        diffs.append(f"{where}: enum {name}.{value}: {va.get(value)} vs Ozone {vb.get(value)}")
            elif [v.name for v in a.value] != [v.name for v in b.value]:
                # the first value is the default of an optional field without one
                diffs.append(f"{where}: enum {name}: value order differs")
            continue
        assert isinstance(a, descriptor_pb2.DescriptorProto) and isinstance(b, descriptor_pb2.DescriptorProto)
        fa = {f.number: field_facts(f, True) for f in a.field}
        fb = {f.number: field_facts(f, False) for f in b.field}
        for num in sorted(set(fb) - set(fa)):
            diffs.append(f"{where}: {name}.{fb[num]['name']} = {num}: missing here")
        for num in sorted(set(fa) - set(fb)):
            diffs.append(f"{where}: {name}.{fa[num]['name']} = {num}: not in Ozone")
        for num in sorted(set(fa) & set(fb)):
            for key, value in fa[num].items():
                if value != fb[num][key]:
                    diffs.append(f"{where}: {name} field {num}: {key} {value!r} vs Ozone {fb[num][key]!r}")
        ra = [(r.start, r.end) for r in a.extension_range]
        rb = [(r.start, r.end) for r in b.extension_range]
        if ra != rb:
            diffs.append(f"{where}: {name}: extension ranges {ra} vs Ozone {rb}")
    sa = {s.name: {m.name: (ozone_type(m.input_type), ozone_type(m.output_type)) for m in s.method} for s in ours.service}
    sb = {s.name: {m.name: (m.input_type, m.output_type) for m in s.method} for s in theirs.service}
    if sa != sb:
        diffs.append(f"{where}: services {sa} vs Ozone {sb}")
    return diffs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ozone-git-dir", required=True, help="a git directory of apache/ozone (bare is fine)")
    parser.add_argument("--ref", default="ozone-2.2.0", help="tag or commit to compare with (default ozone-2.2.0)")
    args = parser.parse_args(argv)
    git = ["git", "--git-dir", args.ozone_git_dir]
    try:
        commit = subprocess.run([*git, "rev-parse", f"{args.ref}^{{commit}}"], check=True, capture_output=True,
                                text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"cannot resolve {args.ref} in {args.ozone_git_dir}: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for path in (*FILES.values(), *NOT_YET):
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            shown = subprocess.run([*git, "show", f"{commit}:{path}"], capture_output=True)
            if shown.returncode != 0:
                print(f"{path} not found at {commit}: {shown.stderr.decode().strip()}", file=sys.stderr)
                return 2
            target.write_bytes(shown.stdout)
        theirs_set = protoc_descriptors([root / CLIENT, root / SERVER, root / ADMIN], [str(root / p) for p in FILES.values()])
    ours_set = protoc_descriptors([OURS], [str(OURS / p) for p in FILES])
    theirs_by_name = {f.name: f for f in theirs_set.file}
    ours_by_name = {f.name: f for f in ours_set.file}
    diffs: list[str] = []
    compared = 0
    for mine, path in FILES.items():
        theirs = theirs_by_name[pathlib.Path(path).name]
        diffs.extend(compare_file(ours_by_name[mine], theirs))
        compared += sum(1 for _ in walk(theirs))
    print(f"Ozone {args.ref} = {commit}")
    for line in diffs:
        print(f"DIFF {line}")
    for path in NOT_YET:
        print(f"NOT YET WRITTEN {path}")
    print(f"{len(FILES)} files, {compared} messages and enums compared: {len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
