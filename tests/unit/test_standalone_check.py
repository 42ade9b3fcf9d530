"""The repository stands alone: nothing in it reads a path outside it (scripts/check_standalone.py).

The whole-repo run is what CI relies on; the hand-made cases show the check can fail, one per
way a path used to escape (the Jepsen test once read its histories from a directory beside the
repository). The fixtures spell that sibling directory's name in two pieces (:data:`SIBLING`), so that a
plain text search of the repository for a path outside it finds real reads only, not these samples.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path, PurePosixPath
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_standalone.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_standalone", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["check_standalone"] = mod
    spec.loader.exec_module(mod)
    return mod


cs = _load()
SIBLING = "sha" "red"  # the name of the directory beside the repository that tests once read


def test_the_repository_reads_nothing_outside_it() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), str(ROOT)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_the_jepsen_histories_are_in_the_repository() -> None:
    data = ROOT / "tests" / "verify" / "data" / "jepsen-etcd"
    assert len(list(data.glob("etcd_*.log"))) == 52
    assert (data / "verdicts.tsv").is_file()
    assert "MIT" in (data / "LICENSE").read_text()
    assert "porcupine" in (data / "README.md").read_text()


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("tests/verify/t.py", 'from pathlib import Path\nR = Path(__file__).resolve().parents[2]\nD = R.parent / "x"\n'),
        ("tests/verify/t.py", "from pathlib import Path\nD = Path(__file__).resolve().parents[3]\n"),
        ("tests/t.py", "from pathlib import Path\nD = Path(__file__).parent.parent.parent\n"),
        ("tests/t.py", 'import os\nD = os.path.join(os.path.dirname(__file__), "..", "..")\n'),
        ("tests/t.py", 'from pathlib import Path\nD = Path(__file__).parent / "../.."\n'),
        ("scm_server/x.py", 'open("../data/x.tsv")\n'),
        ("scm_server/x.py", 'DATA = "/work/data/histories"\n'),
        ("tests/t.py", f'DATA = "../{SIBLING}/data/jepsen-etcd"\n'),
        ("Makefile", f"data:\n\tcp -r ../{SIBLING}/data tests/\n"),
        ("Makefile", "x:\n\tcd .. && ls\n"),
        ("scripts/x.sh", 'cd "$(dirname "$0")/../.."\n'),
        ("scripts/x.sh", 'ls "$HOME"/x ../y\n'),
        ("docs/x.md", f"see [the data](../../{SIBLING}/README.md)\n"),
        ("README.md", "see [x](../x.md)\n"),
        ("docs/x.md", f"the histories are in `{SIBLING}/data/jepsen-etcd`\n"),
        ("Dockerfile", f"COPY ../{SIBLING}/data /data\n"),
    ],
)
def test_each_way_out_is_flagged(path: str, text: str) -> None:
    findings = cs.check_file(PurePosixPath(path), text)
    assert findings, f"{path}: {text!r} not flagged"
    assert all(str(f).startswith(f"{path}:") for f in findings)


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("tests/verify/t.py", 'from pathlib import Path\nD = Path(__file__).resolve().parent / "data" / "x"\n'),
        ("tests/raft/runtime/t.py", "from pathlib import Path\nROOT = Path(__file__).resolve().parents[3]\n"),
        ("tests/t.py", 'import os\nD = os.path.join(os.path.dirname(__file__), "..", "bench")\n'),
        ("scm_server/x.py", 'p = "/proc/self/cmdline"\nq = "/tmp/x"\nr = "a/../b"\n'),
        (".ci/run", 'cd "$(dirname "$0")/.."\nmake test\n'),
        ("docs/x.md", "see [the readme](../README.md) and [raft](raft.md#core)\n"),
        ("Makefile", "x:\n\tls ./a/../b\n"),
        ("Dockerfile", "RUN mkdir -p /home/ozone /root/.cache\nWORKDIR /home/ozone\n"),
    ],
)
def test_paths_inside_the_repository_pass(path: str, text: str) -> None:
    assert cs.check_file(PurePosixPath(path), text) == []


def test_a_copy_of_the_repository_with_a_sibling_reference_fails(tmp_path: Path) -> None:
    """The command line tool on a tree (no git): finds the bad file, exits 1, one line per finding."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "ok.py").write_text("X = 1\n")
    (tmp_path / "tests" / "bad.py").write_text(
        f'from pathlib import Path\nDATA = Path(__file__).resolve().parents[1].parent / "{SIBLING}"\n'
    )
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("tests/bad.py:2: ") and "climbs above the repository root" in lines[0]
    assert lines[-1].startswith("check_standalone: 1 reference(s)")
