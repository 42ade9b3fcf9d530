"""The commands of docs/ozone-compatibility.md's "Migrating an existing Ozone cluster", run as written.

The ``bash`` block of that section is read from the document. Its two assignments (``OZONE_DB``, ``CONF``) name a
user's paths; they are the only lines given other values: a copy of the ``scm.db`` Apache Ozone 2.2.0's own SCM
wrote (``data/ozone-2.2.0``, its VERSION and Ratis log beside it) and a configuration directory for one SCM on
free loopback ports. Every other line runs with bash exactly as written, with this environment's ``ozone-scm``
first on ``PATH``: the dry run (must write nothing), the migration, then ``ozone-scm --conf "$CONF" scm``, which must
come up as the leader serving Ozone's containers; it is then stopped with SIGTERM. The document changing changes
what runs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from scm_server.local.cluster import LocalCluster, child_env

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]
REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "ozone-compatibility.md"
HEADING = "## Migrating an existing Ozone cluster"
DATA = Path(__file__).parent / "data" / "ozone-2.2.0"
EXPECTED = json.loads((DATA / "expected.json").read_text())
ASSIGNMENT = re.compile(r"^([A-Z_]+)=(\S+)")


def doc_block() -> tuple[dict[str, str], list[str]]:
    """(the block's assignments, its other command lines) from the first ``bash`` block of the section."""
    text = DOC.read_text()
    at = text.index(f"\n{HEADING}\n")
    end = text.find("\n## ", at + 1)
    start = text.index("```bash\n", at) + len("```bash\n")
    assert start < end, f"no ```bash block in {HEADING!r} of {DOC}"
    block = text[start:text.index("```", start)]
    assignments: dict[str, str] = {}
    commands: list[str] = []
    for line in block.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = ASSIGNMENT.match(line)
        if m and not commands:
            assignments[m.group(1)] = m.group(2)
        else:
            commands.append(line)
    return assignments, commands


def test_the_block_is_what_this_test_expects() -> None:
    assignments, commands = doc_block()
    assert set(assignments) == {"OZONE_DB", "CONF"}, assignments
    assert [c.split()[3:5] for c in commands] == [["migrate", "from-ozone"]] * 2 + [["scm"]], commands
    assert commands[0].rstrip().endswith("--dry-run")


def _leader_with_containers(http: str, conf: Path, env: dict[str, str], proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, f"ozone-scm scm exited {proc.returncode}"
    try:
        with urllib.request.urlopen(f"{http}/prom", timeout=5) as resp:
            page = resp.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False
    if not re.search(r"^scm_is_leader(\{[^}]*\})? 1(\.0)?$", page, re.M):
        return False
    out = subprocess.run(["ozone-scm", "--conf", str(conf), "admin", "container", "list", "--count", "1000",
                          "--json"], capture_output=True, text=True, env=env, timeout=60, check=False)
    if out.returncode != 0:
        return False
    listed = {int(c.get("containerID", c.get("container_id", -1))) for c in json.loads(out.stdout)}
    return {c["containerID"] for c in EXPECTED["containers"]} <= listed


def test_the_migration_commands_run_as_written(tmp_path: Path) -> None:
    assignments, commands = doc_block()
    ozone = tmp_path / "ozone-meta"
    shutil.copytree(DATA, ozone)
    cluster = LocalCluster(tmp_path / "ours", 1)
    cluster.write_configs()
    scm = cluster.scms[0]
    values = {"OZONE_DB": str(ozone / "scm.db"), "CONF": str(scm.conf_dir)}
    prelude = "".join(f"{name}={values[name]}\n" for name in assignments)
    env = child_env()
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])

    def run(line: str) -> str:
        result = subprocess.run(["bash", "-euc", prelude + line], capture_output=True, text=True, env=env,
                                timeout=120, check=False)
        assert result.returncode == 0, f"`{line}` exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        return result.stdout + result.stderr

    dry_run, migrate, start = commands
    cluster_id = next(ln.split("=", 1)[1] for ln in (ozone / "scm" / "current" / "VERSION").read_text().splitlines()
                      if ln.startswith("clusterID="))
    printed = run(dry_run)
    assert cluster_id in printed, printed
    assert not any(scm.metadata_dir.iterdir()), "the dry run wrote into the target"
    run(migrate)
    assert (scm.metadata_dir / "scm.db").exists() or any(scm.metadata_dir.rglob("VERSION"))

    proc = subprocess.Popen(["bash", "-euc", prelude + start], env=env, start_new_session=True,
                            stdout=(tmp_path / "scm.log").open("wb"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while not _leader_with_containers(scm.http_url, scm.conf_dir, env, proc):
            assert time.monotonic() < deadline, (
                f"the migrated SCM did not serve Ozone's containers as leader within 90 s:\n"
                f"{(tmp_path / 'scm.log').read_text()[-3000:]}")
            time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
