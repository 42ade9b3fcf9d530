"""Which running process is which member of a local cluster, by identity, never by a stored PID alone.

Called by ``scm_server.local.members`` (``ozone-scm local status|down|stop|start|restart``).
It reads ``/proc`` (command line, working directory, environment, open files) and signals a
process only after verifying it, through a pidfd so that a PID reused between the check and the
signal cannot be hit. It never starts processes and never talks to an SCM.

A process is SCM member M when its command line is an ``ozone-scm ... scm`` daemon (the ``scm``
subcommand without ``--init``/``--bootstrap``; run as ``python -m scm_server.cli.main`` or the
``ozone-scm`` script) and either its configuration directory (``--conf``, resolved against its
working directory, or ``OZONE_CONF_DIR`` from its environment) is M's, or it holds a file open
under M's metadata directory. The datanode simulator of a cluster is the ``datanode-sim``
process whose ``--scm`` addresses are that cluster's datanode addresses. A stale PID in
``cluster.json`` that now belongs to some other process therefore matches nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

PROC = Path("/proc")


@dataclasses.dataclass(frozen=True)
class ProcInfo:
    pid: int
    argv: tuple[str, ...]
    cwd: Path | None
    start_ticks: int  # /proc/PID/stat field 22: distinguishes a reused PID

    @property
    def command(self) -> str:
        return " ".join(self.argv)


def read_proc(pid: int, proc: Path = PROC) -> ProcInfo | None:
    """The process's command line, cwd and start time, or None if it is gone, a zombie or a kernel thread.

    A process caught in the middle of execve shows an empty command line for a moment (its
    close-on-exec descriptors, which tell ``subprocess.Popen`` the exec happened, close before
    the new arguments are mapped): that case is read again instead of taken for "gone".
    """
    base = proc / str(pid)
    for _attempt in range(50):
        try:
            raw = (base / "cmdline").read_bytes()
            stat = (base / "stat").read_text()
        except OSError:
            return None
        # the command name in field 2 may hold spaces and parentheses: split after the last ')'
        fields = stat[stat.rfind(")") + 2:].split()
        if raw:
            break
        state, ppid = (fields[0], fields[1]) if len(fields) > 1 else ("Z", "0")
        if state in ("Z", "X", "x") or ppid in ("0", "2") or pid == 2:
            return None  # a zombie, or a kernel thread (no command line, ever)
        time.sleep(0.002)
    else:
        return None
    try:
        cwd: Path | None = Path(os.readlink(base / "cwd"))
    except OSError:
        cwd = None
    start = int(fields[19]) if len(fields) > 19 else 0
    argv = tuple(a.decode(errors="replace") for a in raw.rstrip(b"\0").split(b"\0"))
    return ProcInfo(pid, argv, cwd, start)


def all_pids(proc: Path = PROC) -> list[int]:
    return sorted(int(p.name) for p in proc.iterdir() if p.name.isdigit())


# ----------------------------------------------------------------------------- command lines


@dataclasses.dataclass(frozen=True)
class OzoneScmCommand:
    """An ``ozone-scm`` command line: global ``--conf`` and the subcommand with its arguments."""

    conf: str | None
    subcommand: str
    args: tuple[str, ...]

    def option(self, name: str) -> str | None:
        for i, a in enumerate(self.args):
            if a == name and i + 1 < len(self.args):
                return self.args[i + 1]
            if a.startswith(name + "="):
                return a[len(name) + 1:]
        return None


def parse_ozone_scm(argv: Sequence[str]) -> OzoneScmCommand | None:
    """Recognise ``python -m scm_server.cli.main ...`` and ``[python] .../ozone-scm ...``."""
    start = None
    for i, a in enumerate(argv):
        if a == "scm_server.cli.main" and i > 0 and argv[i - 1] == "-m":
            start = i + 1
            break
        if os.path.basename(a) == "ozone-scm":
            start = i + 1
            break
    if start is None:
        return None
    conf = None
    i = start
    while i < len(argv):
        a = argv[i]
        if a == "--conf" and i + 1 < len(argv):
            conf = argv[i + 1]
            i += 2
        elif a.startswith("--conf="):
            conf = a[len("--conf="):]
            i += 1
        elif a.startswith("-"):
            i += 1  # -v, -vv, --verbose
        else:
            return OzoneScmCommand(conf, a, tuple(argv[i + 1:]))
    return None


def _environ_conf(pid: int, proc: Path) -> str | None:
    try:
        env = (proc / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"OZONE_CONF_DIR="):
            return item[len(b"OZONE_CONF_DIR="):].decode(errors="replace")
    return None


def _same_dir(a: Path, b: Path) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return False


def holds_open_under(pid: int, directory: Path, proc: Path = PROC) -> bool:
    """True if the process has a file open under ``directory`` (e.g. its LevelDB LOCK files)."""
    root = os.path.realpath(directory) + os.sep
    try:
        fds = list((proc / str(pid) / "fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(fd).startswith(root):
                return True
    return False


@dataclasses.dataclass(frozen=True)
class MemberSpec:
    """What identifies one member: an SCM by its directories, the simulator by its SCM addresses."""

    name: str
    conf_dir: Path | None = None
    metadata_dir: Path | None = None
    datanode_addresses: frozenset[str] = frozenset()

    @property
    def is_scm(self) -> bool:
        return self.conf_dir is not None


def matches(spec: MemberSpec, info: ProcInfo, proc: Path = PROC) -> bool:
    cmd = parse_ozone_scm(info.argv)
    if cmd is None:
        return False
    if not spec.is_scm:
        scms = cmd.option("--scm")
        return (cmd.subcommand == "datanode-sim" and scms is not None
                and frozenset(a.strip() for a in scms.split(",") if a.strip()) == spec.datanode_addresses)
    if cmd.subcommand != "scm" or any(a in ("--init", "--bootstrap", "-h", "--help") for a in cmd.args):
        return False
    assert spec.conf_dir is not None
    conf = cmd.conf if cmd.conf is not None else _environ_conf(info.pid, proc)
    if conf is not None:
        path = Path(conf)
        if not path.is_absolute() and info.cwd is not None:
            path = info.cwd / path
        if _same_dir(path, spec.conf_dir):
            return True
    return spec.metadata_dir is not None and holds_open_under(info.pid, spec.metadata_dir, proc)


def find(specs: Iterable[MemberSpec], proc: Path = PROC) -> dict[str, list[ProcInfo]]:
    """Every running process of each member (normally one; two means a member started twice)."""
    specs = list(specs)
    found: dict[str, list[ProcInfo]] = {s.name: [] for s in specs}
    me = os.getpid()
    for pid in all_pids(proc):
        if pid == me:
            continue
        info = read_proc(pid, proc)
        if info is None or parse_ozone_scm(info.argv) is None:
            continue
        for spec in specs:
            if matches(spec, info, proc):
                found[spec.name].append(info)
                break
    return found


# ----------------------------------------------------------------------------- signalling


class _Pinned:
    """A process pinned by a pidfd (Linux >= 5.3): signals and waits can never reach a later
    process that reuses its PID. Without pidfd support, falls back to kill(2) after the check."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fd: int | None = None
        if hasattr(os, "pidfd_open"):
            try:
                self.fd = os.pidfd_open(pid)
            except ProcessLookupError:
                raise
            except OSError:
                self.fd = None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def send(self, sig: int) -> bool:
        try:
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, sig)
            else:
                os.kill(self.pid, sig)
            return True
        except ProcessLookupError:
            return False

    def wait_exit(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if self.fd is not None:
                ready, _, _ = select.select([self.fd], [], [], max(left, 0))
                if ready:
                    return True
            else:
                if read_proc(self.pid) is None:
                    return True
                time.sleep(min(0.05, max(left, 0)))
            if left <= 0:
                return False


def stop_verified(
    pid: int, verify: Callable[[ProcInfo], bool], *, sig: int = signal.SIGTERM, timeout: float = 20.0,
    proc: Path = PROC,
) -> str:
    """Signal ``pid`` only if it is still the process ``verify`` accepts; wait for it to exit,
    escalating to SIGKILL after ``timeout``. Returns "stopped", "killed" (had to escalate),
    "gone" (already exited) or "not-ours" (the PID now belongs to another process)."""
    try:
        pinned = _Pinned(pid)
    except ProcessLookupError:
        return "gone"
    try:
        info = read_proc(pid, proc)
        if info is None:
            return "gone"
        if not verify(info):
            return "not-ours"
        if not pinned.send(sig):
            return "gone"
        if pinned.wait_exit(timeout):
            return "stopped"
        pinned.send(signal.SIGKILL)
        pinned.wait_exit(10.0)
        return "killed"
    finally:
        pinned.close()
