"""Process identity rules of ``scm_server.local.procs`` on a hand-made /proc tree.

The real-process behaviour (members restarted by hand, a PID reused by another process) is in
``tests/integration/ha/test_local_members.py``; here every rule is shown on its own, including
the ones that must NOT match.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from scm_server.local import procs as local_procs
from scm_server.local.procs import MemberSpec, parse_ozone_scm

PY = "/opt/venv/bin/python"


def fake_proc(root: Path, pid: int, argv: list[str], *, cwd: Path, env: dict[str, str] | None = None,
              open_files: list[Path] | None = None, start: int = 1000) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    fields = ["S"] + ["0"] * 18 + [str(start)] + ["0"] * 10
    (d / "stat").write_text(f"{pid} (python3 (x)) " + " ".join(fields))
    os.symlink(cwd, d / "cwd")
    (d / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in (env or {}).items()))
    (d / "fd").mkdir()
    for n, f in enumerate(open_files or []):
        os.symlink(f, d / "fd" / str(n + 3))


def test_command_lines_are_recognised() -> None:
    c = parse_ozone_scm([PY, "-m", "scm_server.cli.main", "--conf", "/x/conf", "scm"])
    assert c is not None and (c.conf, c.subcommand, c.args) == ("/x/conf", "scm", ())
    c = parse_ozone_scm([PY, "/opt/venv/bin/ozone-scm", "-vv", "--conf=rel/conf", "scm", "--init"])
    assert c is not None and (c.conf, c.subcommand, c.args) == ("rel/conf", "scm", ("--init",))
    c = parse_ozone_scm([PY, "-m", "scm_server.cli.main", "datanode-sim", "--count", "3", "--scm", "a:1,b:2"])
    assert c is not None and c.option("--scm") == "a:1,b:2" and c.option("--count") == "3"
    assert parse_ozone_scm(["sleep", "600"]) is None
    assert parse_ozone_scm([PY, "-c", "print('scm_server.cli.main')"]) is None


def test_members_found_by_directory_not_by_pid(tmp_path: Path) -> None:
    data = tmp_path / "run-data"
    for n in (1, 2, 3, 4):
        (data / f"scm{n}" / "conf").mkdir(parents=True)
        (data / f"scm{n}" / "metadata").mkdir(parents=True)
    proc = tmp_path / "proc"
    specs = [MemberSpec(f"scm{n}", conf_dir=data / f"scm{n}" / "conf", metadata_dir=data / f"scm{n}" / "metadata")
             for n in (1, 2, 3, 4)]
    specs.append(MemberSpec("datanodes", datanode_addresses=frozenset({"127.0.0.1:9861", "127.0.0.1:9862"})))
    main = [PY, "-m", "scm_server.cli.main"]
    # scm1 as `local up` starts it: absolute --conf
    fake_proc(proc, 101, [*main, "--conf", str(data / "scm1" / "conf"), "scm"], cwd=tmp_path)
    # scm2 restarted by hand from the data dir with a relative --conf and the ozone-scm script
    fake_proc(proc, 102, [PY, "/v/bin/ozone-scm", "--conf", "scm2/conf", "scm"], cwd=data)
    # scm3 started with OZONE_CONF_DIR instead of --conf
    fake_proc(proc, 103, [PY, "/v/bin/ozone-scm", "scm"], cwd=Path("/"), env={"OZONE_CONF_DIR": str(data / "scm3/conf")})
    # scm4 run from a copy of its configuration, but it holds its LevelDB files open
    fake_proc(proc, 104, [*main, "--conf", "/elsewhere/conf", "scm"], cwd=tmp_path,
              open_files=[data / "scm4" / "metadata" / "scm.db" / "LOCK"])
    # the simulator of this cluster, and one of another cluster
    fake_proc(proc, 105, [*main, "datanode-sim", "--count", "3", "--scm", "127.0.0.1:9862,127.0.0.1:9861"], cwd=tmp_path)
    fake_proc(proc, 106, [*main, "datanode-sim", "--count", "3", "--scm", "127.0.0.1:9861"], cwd=tmp_path)
    # not members: an admin command and an init run on scm1's conf, an unrelated process (a
    # reused PID), another cluster's SCM, and a zombie (empty cmdline)
    fake_proc(proc, 201, [*main, "--conf", str(data / "scm1" / "conf"), "admin", "scm", "roles"], cwd=tmp_path)
    fake_proc(proc, 202, [*main, "--conf", str(data / "scm1" / "conf"), "scm", "--init"], cwd=tmp_path)
    fake_proc(proc, 203, ["sleep", "600"], cwd=tmp_path)
    fake_proc(proc, 204, [*main, "--conf", str(tmp_path / "other" / "scm1" / "conf"), "scm"], cwd=tmp_path)
    (proc / "205").mkdir()
    (proc / "205" / "cmdline").write_bytes(b"")
    (proc / "205" / "stat").write_text("205 (python3) Z 1")

    found = local_procs.find(specs, proc)
    assert {name: [p.pid for p in ps] for name, ps in found.items()} == {
        "scm1": [101], "scm2": [102], "scm3": [103], "scm4": [104], "datanodes": [105],
    }
    assert found["scm1"][0].start_ticks == 1000


def test_a_reused_pid_is_not_signalled(tmp_path: Path) -> None:
    """stop_verified on a live process that is not the member leaves it running."""
    spec = MemberSpec("scm1", conf_dir=tmp_path / "scm1" / "conf")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        outcome = local_procs.stop_verified(sleeper.pid, lambda info: local_procs.matches(spec, info), timeout=1)
        assert outcome == "not-ours"
        assert sleeper.poll() is None
        # the same process, verified: stopped (SIGTERM) and seen to exit through its pidfd
        outcome = local_procs.stop_verified(sleeper.pid, lambda info: info.pid == sleeper.pid, timeout=10)
        assert outcome == "stopped"
        assert sleeper.wait(timeout=10) != 0
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
    # now the PID is gone
    assert local_procs.stop_verified(sleeper.pid, lambda info: True, timeout=1) in ("gone", "not-ours")
