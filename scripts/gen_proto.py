"""Generate Python protobuf and gRPC modules from proto/*.proto into scm_server/proto/.

The generated files are build products (git-ignored). grpcio-tools emits top-level
imports (``import hdds_pb2``); we rewrite them to package-relative imports so the
modules live inside ``scm_server.proto``. Run through ``make proto``.

``proto/ozone/*.proto`` (Ozone's and Hadoop's messages, wire-exact, for the Hadoop RPC edge) are
generated into ``scm_server/proto/ozone/`` without gRPC stubs (they travel over Hadoop RPC); their
imports (``from ozone import hdds_pb2``) are rewritten the same way.
"""

from __future__ import annotations

import os
import pathlib
import re
import sys

from grpc_tools import protoc

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "proto"
OUT = ROOT / "scm_server" / "proto"
IMPORT_RE = re.compile(r"^import (\w+_pb2(?:_grpc)?)( as \w+)?$", re.MULTILINE)
OZONE_IMPORT_RE = re.compile(r"^from ozone import (\w+_pb2)( as \w+)?$", re.MULTILINE)
OZONE = "ozone"  # proto/ozone/ -> scm_server/proto/ozone/


def main() -> int:
    protos = sorted(str(p.relative_to(SRC)) for p in SRC.glob("*.proto"))
    if not protos:
        print("no .proto files under proto/", file=sys.stderr)
        return 1
    OUT.mkdir(parents=True, exist_ok=True)
    for old in [*OUT.glob("*_pb2*.py*"), *(OUT / OZONE).glob("*_pb2*.py*")]:
        old.unlink()
    import grpc_tools

    include = str(pathlib.Path(grpc_tools.__file__).parent / "_proto")
    args = [
        "protoc",
        f"-I{SRC}",
        f"-I{include}",
        f"--python_out={OUT}",
        f"--grpc_python_out={OUT}",
        f"--mypy_out={OUT}",
        f"--mypy_grpc_out={OUT}",
        *protos,
    ]
    # protoc-gen-mypy lives next to this interpreter (the venv's bin/).
    bindir = str(pathlib.Path(sys.executable).parent)
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    rc = protoc.main(args)
    if rc != 0:
        print(f"protoc failed with exit code {rc}", file=sys.stderr)
        return rc
    wire = sorted(str(p.relative_to(SRC)) for p in (SRC / OZONE).glob("*.proto"))
    if wire:
        (OUT / OZONE).mkdir(exist_ok=True)
        rc = protoc.main(["protoc", f"-I{SRC}", f"-I{include}", f"--python_out={OUT}", f"--mypy_out={OUT}", *wire])
        if rc != 0:
            print(f"protoc failed on proto/{OZONE}/ with exit code {rc}", file=sys.stderr)
            return rc
    for path in [*OUT.glob("*_pb2*.py*"), *(OUT / OZONE).glob("*_pb2*.py*")]:
        text = path.read_text()
        fixed = IMPORT_RE.sub(lambda m: f"from . import {m.group(1)}{m.group(2) or ''}", text)
        fixed = OZONE_IMPORT_RE.sub(lambda m: f"from . import {m.group(1)}{m.group(2) or ''}", fixed)
        if fixed != text:
            path.write_text(fixed)
    for package, what in ((OUT, "protobuf and gRPC modules"), (OUT / OZONE, "Ozone wire-format modules")):
        init = package / "__init__.py"
        if package.is_dir() and not init.exists():
            init.write_text(f'"""Generated {what} (build products of make proto)."""\n')
    print(f"generated {len(protos) + len(wire)} proto files into {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
