"""``ozone-scm local stop|start|restart`` and identity-based ``status``/``down``, with real processes.

Issue 11 item 5, tried as a new user would: `local up`, kill the leader and watch failover,
start it again, restart a member by hand (outside `local`), and a PID in cluster.json that now
belongs to an unrelated process. Every step runs the installed ``ozone-scm`` command.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scm_server.local import members as local_members
from scm_server.local import procs as local_procs

pytestmark = pytest.mark.processes  # whole-SCM scenarios: make test-slow

OZONE_SCM = str(Path(sys.executable).with_name("ozone-scm"))


def cli(*args: str | Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([OZONE_SCM, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def ok(*args: str | Path) -> str:
    proc = cli(*args)
    assert proc.returncode == 0, f"ozone-scm {' '.join(map(str, args))}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout


def status(data: Path) -> dict[str, Any]:
    """`local status --json`, in-process (the same code; the CLI itself is run by status_cli)."""
    info = local_members.status(data)
    roles = info["roles"]
    return {**info, "roles": roles.as_dict() if hasattr(roles, "as_dict") else str(roles)}


def status_cli(data: Path) -> dict[str, Any]:
    return dict(json.loads(ok("local", "status", "--data-dir", data, "--json")))


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.3)


def leader_of(st: dict[str, Any]) -> str | None:
    roles = st["roles"]
    if not isinstance(roles, dict):
        return None
    leaders = [p["node_id"] for p in roles["peers"] if p["role"] == "LEADER"]
    return leaders[0] if len(leaders) == 1 else None


@pytest.mark.timeout(420)
def test_stop_start_restart_and_identity(tmp_path: Path) -> None:
    data = tmp_path / "run-data"
    sleeper: subprocess.Popen[bytes] | None = None
    hand: subprocess.Popen[bytes] | None = None
    try:
        ok("local", "up", "--datanodes", "3", "--data-dir", data)
        st = status_cli(data)
        assert st["alive"] == {"scm1": True, "scm2": True, "scm3": True} and st["datanodes_alive"]
        leader = leader_of(st)
        assert leader is not None

        # kill the leader; the others elect a new one and `stop` says who
        out = ok("local", "stop", "--leader", "--kill", "--data-dir", data)
        assert out.startswith(f"{leader} (pid ") and "was LEADER) killed (SIGKILL)" in out
        assert "; new leader scm" in out, out
        new_leader = out.split("; new leader ")[1].split()[0]
        assert new_leader != leader
        st = status(data)
        assert not st["alive"][leader] and sum(st["alive"].values()) == 2
        assert st["pids"][leader] == []

        # stopping it again, or starting a running member, is refused with what to do
        again = cli("local", "stop", "--scm", leader, "--data-dir", data)
        assert again.returncode == 1 and f"{leader} is not running" in again.stderr
        running = cli("local", "start", "--scm", new_leader, "--data-dir", data)
        assert running.returncode == 1 and "already running" in running.stderr and "local restart" in running.stderr

        # start it again: it serves and follows the new leader
        out = ok("local", "start", "--scm", leader, "--data-dir", data)
        assert f"{leader} started (pid " in out and f"FOLLOWER, leader {new_leader}" in out, out
        st = status(data)
        assert all(st["alive"].values())

        # restart a follower with SIGTERM: a new process, same member
        follower = next(n for n in ("scm1", "scm2", "scm3") if n != new_leader)
        old_pid = st["pids"][follower]
        out = ok("local", "restart", "--scm", follower, "--data-dir", data)
        assert "stopped (SIGTERM)" in out and f"{follower} started" in out
        st = status(data)
        assert st["alive"][follower] and st["pids"][follower] != old_pid

        # a member restarted by hand, from its data dir with a relative --conf: the stored PID
        # is stale, yet status finds it and down stops it
        by_hand = next(n for n in ("scm1", "scm2", "scm3") if n not in (new_leader, follower))
        victim = st["pids"][by_hand][0]
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: not status(data)["alive"][by_hand], 30, f"{by_hand} to be seen dead")
        with open(data / by_hand / "scm.log", "ab") as log:
            hand = subprocess.Popen([OZONE_SCM, "--conf", f"{by_hand}/conf", "scm"], cwd=data, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        st = wait_until(lambda: (s := status(data))["pids"][by_hand] == [hand.pid] and leader_of(s) and s, 60,
                        f"{by_hand} started by hand to be found")
        recorded = {s["node_id"]: s["pid"] for s in st["state"]["scms"]}
        assert recorded[by_hand] != hand.pid  # cluster.json still names the old PID
        assert all(st["alive"].values())

        # a PID in cluster.json that now belongs to an unrelated process: never signalled
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        state_file = data / local_members.STATE_FILE
        raw = json.loads(state_file.read_text())
        for s in raw["scms"]:
            s["pid"] = sleeper.pid
        raw["datanode_sim_pid"] = sleeper.pid
        state_file.write_text(json.dumps(raw))
        st = status_cli(data)
        assert all(st["alive"].values()) and all(sleeper.pid not in pids for pids in st["pids"].values())

        out = ok("local", "down", "--data-dir", data)
        assert out.strip() == "Stopped: datanodes, scm1, scm2, scm3"
        assert sleeper.poll() is None, "down signalled a process that merely reuses a recorded PID"
        assert hand.wait(timeout=30) is not None
        specs = local_members.load(data).specs
        assert local_procs.find(specs) == {s.name: [] for s in specs}
        st = status_cli(data)
        assert not any(st["alive"].values()) and not st["datanodes_alive"]
    finally:
        if (data / local_members.STATE_FILE).exists():
            local_members.down(data)
        for p in (sleeper, hand):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
