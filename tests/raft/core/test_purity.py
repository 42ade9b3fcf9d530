"""The core must stay pure: no clock, randomness, threads, sockets or files (house style)."""

from __future__ import annotations

import ast
from pathlib import Path

import scm_server.raft.core as core_pkg

ALLOWED = {
    "__future__",
    "enum",
    "dataclasses",
    "typing",
    "collections",
    "collections.abc",
    "bisect",
    "itertools",
    "functools",
    "zlib",
    "struct",
    "abc",
}
FORBIDDEN = {"time", "random", "asyncio", "threading", "socket", "os", "pathlib", "grpc", "plyvel", "aiohttp", "logging"}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: use absolute imports"
            names.append(node.module or "")
    return names


def test_core_imports_only_pure_modules() -> None:
    root = Path(core_pkg.__file__).parent
    files = sorted(root.glob("*.py"))
    assert len(files) >= 9
    bad = []
    for f in files:
        for name in _imports(f):
            if name.startswith("scm_server.raft.core"):
                continue
            if name not in ALLOWED or name.split(".")[0] in FORBIDDEN:
                bad.append(f"{f.name}: import {name}")
    assert not bad, "impure imports in the Raft core:\n" + "\n".join(bad)


def test_purity_check_catches_a_forbidden_import(tmp_path: Path) -> None:
    f = tmp_path / "x.py"
    f.write_text("import time\nfrom random import Random\n")
    assert _imports(f) == ["time", "random"]
