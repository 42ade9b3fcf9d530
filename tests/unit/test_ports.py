"""Ports for local servers come from outside the kernel's ephemeral range, so that the local end
of an outgoing connection can never take a port between choosing it and binding it."""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from scm_server import ports


def test_ports_are_outside_the_ephemeral_range_distinct_and_bindable() -> None:
    low, high = ports.ephemeral_range()
    got = [ports.free_port() for _ in range(200)]
    assert len(set(got)) == len(got)
    for p in got:
        assert not low <= p <= high, (p, low, high)
        assert not ports.LOCKED_POOL[0] <= p <= ports.LOCKED_POOL[1], p  # the Ozone tiers' locked pool
        assert p >= ports.LOWEST
    with socket.socket() as s:
        s.bind(("127.0.0.1", got[0]))


def test_a_port_in_use_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", ports.free_port()))
    listener.listen()
    taken = listener.getsockname()[1]
    try:
        # Make the random choice land on the busy port first: it is skipped, another is given. The
        # other is the nearest port below the ephemeral range that is free now (another test process
        # may hold the neighbours).
        free_now = next(
            q
            for q in (*range(taken + 1, 32768), *range(taken - 1, ports.LOWEST, -1))
            if q not in ports._given and ports._bindable("127.0.0.1", q)
        )
        seq = iter([taken, taken, free_now])
        monkeypatch.setattr(ports._rng, "randint", lambda lo, hi: next(seq))
        monkeypatch.setattr(ports._rng, "choice", lambda rs: rs[0])
        monkeypatch.setattr(ports, "ephemeral_range", lambda: (32768, 60999))
        p = ports.free_port()
        assert p != taken and p == free_now
    finally:
        listener.close()


def test_the_locked_pool_is_cut_out_of_the_ranges() -> None:
    assert ports._outside((20000, 29999), [(15000, 32767), (61000, 65535)]) == [
        (15000, 19999), (30000, 32767), (61000, 65535)]
    assert ports._outside((20000, 29999), [(21000, 22000)]) == []
    assert ports._outside((20000, 29999), [(25000, 40000)]) == [(30000, 40000)]


def test_a_port_another_process_reserved_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process's free_port reserves its port machine-wide until it exits: this process, drawing the same
    port while nothing listens on it yet, skips it; once that process is gone, the port may be handed out again."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom scm_server.ports import free_port\nprint(free_port(), flush=True)\n"
         "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdin is not None
    try:
        taken = int(child.stdout.readline())
        assert ports._bindable("127.0.0.1", taken)  # nobody listens on it: only the reservation keeps it
        draws = iter([taken] * 5 + list(range(ports.LOWEST, ports.LOWEST + 1000)))
        monkeypatch.setattr(ports._rng, "randint", lambda lo, hi: next(draws))
        assert ports.free_port() != taken
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    draws = iter([taken])
    monkeypatch.setattr(ports._rng, "randint", lambda lo, hi: next(draws))
    monkeypatch.setattr(ports._rng, "choice", lambda ranges: next(r for r in ranges if r[0] <= taken <= r[1]))
    assert ports.free_port() == taken  # its process ended: the kernel released the lock


def test_a_process_keeps_only_its_latest_ports_reserved(monkeypatch: pytest.MonkeyPatch) -> None:
    """At most RESERVED locks (one open file each) per process, the oldest released first."""
    monkeypatch.setattr(ports, "RESERVED", 3)
    monkeypatch.setattr(ports, "_reservations", ports.collections.deque())
    got = [ports.free_port() for _ in range(5)]
    assert len(ports._reservations) == 3
    child = ("import fcntl, os, sys\nfrom scm_server.ports import RESERVATIONS\n"
             "for port in sys.argv[1:]:\n"
             "    fd = os.open(RESERVATIONS / port, os.O_RDWR)\n"
             "    try:\n        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print('free')\n"
             "    except OSError:\n        print('held')\n")
    out = subprocess.run([sys.executable, "-c", child, *map(str, got)], capture_output=True, text=True, timeout=30)
    assert out.stdout.split() == ["free", "free", "held", "held", "held"], out.stderr
