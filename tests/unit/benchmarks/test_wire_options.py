"""bench/wire.py's row choice and its leader check, and bench/heartbeat_cpu.py on a few datanodes."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
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


class _Beating:
    """A load whose datanodes send ``per_window`` heartbeats while the window runs (counted when read)."""

    def __init__(self, datanodes: int, per_window: int) -> None:
        self.datanodes = [object()] * datanodes
        self.per_window = per_window
        self.reads = 0

    @property
    def heartbeats_sent(self) -> int:
        self.reads += 1
        return 0 if self.reads == 1 else self.per_window


async def test_the_idle_cost_is_the_leader_s_cpu_over_the_window_per_heartbeat_projected_to_30_s() -> None:
    load = _Beating(datanodes=300, per_window=100)
    ring = wire.Ring(wire.OURS, "scm1", [], [], [], [os.getpid()], lambda: None, loads=[load])  # type: ignore[list-item]

    async def spin() -> None:  # this process stands for the leader: 100 ms of CPU inside the window
        end = time.process_time() + 0.1
        while time.process_time() < end:
            pass

    measured, _ = await asyncio.gather(wire.idle_cost([ring], 0.4), spin())
    got = measured[wire.OURS]
    assert got["datanodes"] == 300 and got["heartbeats"] == 100
    per_beat_s = got["cpu_us_per_heartbeat"] / 1e6
    # at least the CPU spent inside the window over its 100 heartbeats, less two clock ticks: /proc counts in ticks,
    # each of the two readings may lag by one (seen: 9 ticks for the 100 ms spin under the clock tier's load)
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert per_beat_s >= (0.1 - 2 * tick) / 100 - 1e-12
    assert got["pct_of_core_at_30s"] == pytest.approx(100 * per_beat_s * 300 / 30)
