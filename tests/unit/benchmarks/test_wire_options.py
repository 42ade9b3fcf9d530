"""bench/wire.py's row choice and its leader check, and bench/heartbeat_cpu.py on a few datanodes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bench import interleave, wire

REPO = Path(__file__).resolve().parents[3]


def test_rows_are_named_by_short_keys_in_the_bench_s_order() -> None:
    assert wire.rows_of("hb1000,noop") == (wire.NOOP, wire.HB1000)
    assert wire.rows_of(",".join(wire.ROW_KEYS)) == wire.ROWS
    with pytest.raises(ValueError, match=r"unknown row.*nope.*choose from noop,alloc1"):
        wire.rows_of("noop,nope")
    with pytest.raises(ValueError, match="none named"):
        wire.rows_of(" , ")


def test_the_leader_check_finds_the_process_that_holds_the_listening_port() -> None:
    with socket.socket() as listening, socket.socket() as other:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        other.bind(("127.0.0.1", 0))  # bound, not listening
        assert wire.holds_listener(os.getpid(), listening.getsockname()[1])
        assert not wire.holds_listener(os.getpid(), other.getsockname()[1])
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            assert not wire.holds_listener(child.pid, listening.getsockname()[1])
        finally:
            child.kill()
            child.wait()


def test_cpu_per_call_is_the_leader_s_share_over_the_calls() -> None:
    sample = interleave.Sample(1, "ours", wire.NOOP, calls_per_s=500.0, p50_ms=1.0, p99_ms=2.0, leader_cpu_pct=25.0)
    assert wire.cpu_us_per_call(sample) == pytest.approx(500.0)  # 0.25 s of CPU a second over 500 calls
    assert wire.cpu_us_per_call(interleave.Sample(1, "ours", wire.NOOP, 0.0, 0.0, 0.0, leader_cpu_pct=5.0)) is None
    assert wire.cpu_us_per_call(interleave.Sample(1, "ours", wire.NOOP, 10.0, 0.0, 0.0)) is None


def test_heartbeat_cpu_runs_and_every_datanode_s_report_lands() -> None:
    out = subprocess.run([sys.executable, str(REPO / "bench" / "heartbeat_cpu.py"), "--datanodes", "50",
                          "--heartbeats", "300"], capture_output=True, text=True, timeout=240, cwd="/")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "CPU per heartbeat" in out.stdout and "50 datanodes every 30 s" in out.stdout
