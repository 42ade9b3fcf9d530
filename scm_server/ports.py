"""Free TCP ports for local clusters, benchmarks and tests.

A port found by binding to port 0 comes from the kernel's ephemeral range,
the same range the kernel draws from for the local end of every outgoing
connection. Between choosing such a port and the server binding it, a gRPC
client connecting anywhere may be given that very port as its local end, and
the server then fails with "Address already in use" (seen in CI: an SCM
joining a ring lost its security port to one of its own AddSCM connections).

So ports are chosen below the ephemeral range, where the kernel never
assigns local ends by itself, checked by binding them, and never handed out
twice by one process. Processes draw from different random sequences.
"""
from __future__ import annotations

import os
import random
import socket
import threading
from pathlib import Path

#: Lowest port handed out: above the well-known and most registered service ports.
LOWEST = 15000
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


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on, outside the ephemeral range, new to this process."""
    low, high = ephemeral_range()
    ranges = [r for r in ((LOWEST, low - 1), (high + 1, 65535)) if r[1] - r[0] >= 1000]
    with _lock:
        for _ in range(2000):
            if not ranges:
                break
            lo, hi = _rng.choice(ranges)
            port = _rng.randint(lo, hi)
            if port not in _given and _bindable(host, port):
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
