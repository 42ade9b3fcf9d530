"""The benchmarks' harness says what broke (issue 29 item 3).

``python bench/raft_bench.py`` (the path docs/performance.md names) ended three runs with "timed out after 60s
waiting for etcd cluster to elect a leader (last error: None)" while etcd had a leader within a second:
``EtcdCluster.leader()`` imports ``bench.anchors.etcd_grpc``, which the script form could not import, and its
``except Exception: continue`` swallowed the ``ModuleNotFoundError``. Both forms now import ``bench.*``, and the
retry loops wait out only the network (``scm_server.client.retryable``). No etcd needed here.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import raft_bench

REPO = Path(__file__).resolve().parents[3]
# every bench script with a command line (issue9_summary takes no options; ozone_anchor is a module)
SCRIPTS = sorted(p.name for p in (REPO / "bench").glob("*.py")
                 if 'if __name__ == "__main__"' in p.read_text() and p.stem != "issue9_summary")


def test_every_bench_script_runs_as_a_script() -> None:
    """``python bench/<name>.py --help`` from another directory, as a user runs it: exit 0 for every script (run
    together, they share the machine's two cores)."""
    assert len(SCRIPTS) >= 12, SCRIPTS
    procs = {name: subprocess.Popen([sys.executable, str(REPO / "bench" / name), "--help"], cwd="/",
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for name in SCRIPTS}
    failed = {}
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        if proc.returncode != 0:
            failed[name] = err.strip().splitlines()[-1:]
    assert not failed, f"bench scripts that fail in the script form: {failed}"


def test_the_etcd_client_imports_in_the_script_form(tmp_path: Path) -> None:
    """What ``EtcdCluster.grpc()`` imports inside ``leader()``, imported the way the script form runs the file:
    ``sys.path[0]`` is ``bench/`` (not the repository), ``__package__`` empty."""
    probe = (
        "import runpy, sys\n"
        f"sys.path[0] = {str(REPO / 'bench')!r}\n"
        f"runpy.run_path({str(REPO / 'bench' / 'raft_bench.py')!r}, run_name='raft_bench')\n"
        "from bench.anchors.etcd_grpc import EtcdGrpc\n"
        "print(EtcdGrpc.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "EtcdGrpc", out.stderr


async def test_a_broken_import_in_the_leader_probe_surfaces_at_once(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The etcd anchor with its client module unimportable: waiting for a leader raises the ImportError itself,
    at once, instead of waiting out the deadline and reporting "last error: None"."""
    etcd = raft_bench.EtcdCluster(tmp_path)
    monkeypatch.setattr(etcd, "alive", lambda: [0, 1, 2])  # three members "running"; nothing is started
    monkeypatch.setitem(sys.modules, "bench.anchors.etcd_grpc", None)  # import of it now fails
    started = time.monotonic()
    with pytest.raises(ImportError, match=r"bench\.anchors\.etcd_grpc"):
        await raft_bench.wait_until(etcd.healthy, 30, "etcd cluster to elect a leader")
    assert time.monotonic() - started < 10


async def test_the_leader_probe_waits_out_members_that_do_not_answer(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The other side of the rule: members that refuse connections (nothing listens on their ports) are waited
    out until the deadline."""
    etcd = raft_bench.EtcdCluster(tmp_path)
    monkeypatch.setattr(etcd, "alive", lambda: [0, 1, 2])
    try:
        with pytest.raises(TimeoutError, match=r"timed out after 1.5s waiting for etcd cluster to elect a leader"):
            await raft_bench.wait_until(etcd.healthy, 1.5, "etcd cluster to elect a leader")
    finally:
        await etcd.stop()
