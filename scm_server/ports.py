"""Free TCP ports for local clusters, benchmarks and tests.

A port found by binding to port 0 comes from the kernel's ephemeral range,
the same range the kernel draws from for the local end of every outgoing
connection. Between choosing such a port and the server binding it, a gRPC
client connecting anywhere may be given that very port as its local end, and
the server then fails with "Address already in use" (seen in CI: an SCM
joining a ring lost its security port to one of its own AddSCM connections).

So ports are chosen below the ephemeral range, where the kernel never
assigns local ends by itself, checked by binding them, and never handed out
twice by one process. Processes draw from different random sequences, and a
port handed out is reserved machine-wide (an flock on a file named after it)
while it is among the process's last :data:`RESERVED` ports or until the process
ends: two processes checking the same port before either binds it would
otherwise both take it (seen in CI: a ring's Raft port, picked by one lane's
tests while another lane had picked it and was starting its server). An older
port has been bound by then, or given up; keeping every lock would hold a file
descriptor per port for the life of a long test run.

They are never drawn from :data:`LOCKED_POOL`, the range the Apache Ozone
tiers (tests/ozone_interop's PortPool) hand out in blocks under machine-wide
locks: a port chosen here could otherwise be taken there between the check and
the bind (seen in CI, with those tiers running beside the whole-SCM scenarios:
an SCM of the balancer tier could not bind its inter-SCM port).
"""
from __future__ import annotations

import collections
import fcntl
import os
import random
import socket
import tempfile
import threading
from pathlib import Path

#: Lowest port handed out: above the well-known and most registered service ports.
LOWEST = 15000
#: Ports free_port never hands out: the Ozone tiers' locked pool (OZONE_INTEROP_PORT_RANGE's default).
LOCKED_POOL = (20000, 29999)
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_lock = threading.Lock()
_given: set[int] = set()
_rng = random.Random(os.getpid() ^ int.from_bytes(os.urandom(4), "big"))


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for the local ends of outgoing connections."""
    try:
        low, high = (int(x) for x in _RANGE_FILE.read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux default


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _outside(hole: tuple[int, int], ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``ranges`` (inclusive bounds) with the ports of ``hole`` taken out."""
    out = []
    for lo, hi in ranges:
        if hi < hole[0] or lo > hole[1]:
            out.append((lo, hi))
            continue
        if lo < hole[0]:
            out.append((lo, hole[0] - 1))
        if hi > hole[1]:
            out.append((hole[1] + 1, hi))
    return out


#: Where the machine-wide reservations live (one empty file per port ever reserved; the locks go with the processes).
RESERVATIONS = Path(tempfile.gettempdir()) / "ozone-scm-free-ports"
#: How many of its latest ports a process keeps reserved.
RESERVED = 256
_reservations: collections.deque[int] = collections.deque()  # the open files whose locks this process holds


def try_lock(path: Path) -> int | None:
    """An exclusive flock on ``path`` (created if missing), without waiting: its open descriptor (the lock lasts
    until it is closed or the process ends, even killed), or None when another process holds it."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _reserve(port: int) -> bool:
    """Reserve ``port`` while it is among this process's latest :data:`RESERVED`; False when another process
    holds it. Where the reservation cannot be made at all (no writable temporary directory), the port is taken
    as reserved: the bind check still applies."""
    try:
        RESERVATIONS.mkdir(mode=0o1777, exist_ok=True)
        fd = try_lock(RESERVATIONS / str(port))
    except OSError:
        return True
    if fd is None:
        return False
    _reservations.append(fd)
    while len(_reservations) > RESERVED:
        os.close(_reservations.popleft())  # the oldest: bound long since, or given up
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on, outside the ephemeral range, new to this process."""
    low, high = ephemeral_range()
    ranges = [r for r in _outside(LOCKED_POOL, [(LOWEST, low - 1), (high + 1, 65535)]) if r[1] - r[0] >= 1000]
    with _lock:
        for _ in range(2000):
            if not ranges:
                break
            lo, hi = _rng.choice(ranges)
            port = _rng.randint(lo, hi)
            if port not in _given and _bindable(host, port) and _reserve(port):
                _given.add(port)
                return port
        # No room outside the ephemeral range (unusual kernel setting): let the kernel choose.
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                port = int(s.getsockname()[1])
            if port not in _given:
                _given.add(port)
                return port
    raise OSError(f"no free TCP port on {host}")


def dead_address(host: str = "127.0.0.1") -> str:
    """host:port of a port that nobody listens on (for tests of unreachable peers)."""
    return f"{host}:{free_port(host)}"
