"""Crash consistency of the durable Raft log: a writer process is killed (os._exit) at every persist
point; reopening must load cleanly with every acknowledged (synced) entry intact."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scm_server.raft.faults import FAILPOINTS
from scm_server.raft.storage import LevelDBStorage

ROOT = Path(__file__).resolve().parents[3]
WRITER = Path(__file__).with_name("crash_writer.py")


def run_writer(path: Path, n: int, failpoint: str | None) -> tuple[int, list[int]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("RAFT_FAILPOINT", None)
    if failpoint:
        env["RAFT_FAILPOINT"] = failpoint
    proc = subprocess.run(
        [sys.executable, str(WRITER), str(path), str(n)], env=env, capture_output=True, timeout=60, check=False
    )
    acks = [int(line.split()[1]) for line in proc.stdout.decode().splitlines() if line.startswith("ack ")]
    return proc.returncode, acks


def verify(path: Path, acked: list[int]) -> LevelDBStorage:
    s = LevelDBStorage(path)
    top = max(acked, default=0)
    assert s.last_index() >= top, f"acknowledged entry {top} lost (last index {s.last_index()})"
    lo = s.first_index()
    for e in s.entries(lo, s.last_index() + 1):
        assert e.data == b"payload-%d" % e.index and e.term == 1
    hs = s.hard_state()
    if top:
        assert hs.commit >= top - 1 and hs.term == 1 and hs.vote == "w"
    snap = s.snapshot_metadata()
    assert snap.index == 0 or lo - 1 <= snap.index <= s.last_index()
    assert not list(s.snapshot_dir.glob("*.tmp"))
    return s


@pytest.mark.parametrize("point", FAILPOINTS)
@pytest.mark.parametrize("nth", [1, 3])
def test_crash_at_persist_point_loses_nothing_acknowledged(tmp_path: Path, point: str, nth: int) -> None:
    code, acked = run_writer(tmp_path, 30, f"{point}:{nth}")
    assert code == 1, f"the writer should have crashed at {point}:{nth} (exit {code})"
    s = verify(tmp_path, acked)
    recovered_last = s.last_index()
    s.close()
    # the recovered log keeps working: a second writer appends after it and finishes cleanly
    code, more = run_writer(tmp_path, 12, None)
    assert code == 0 and more[0] == recovered_last + 1 and len(more) == 12
    verify(tmp_path, acked + more).close()
