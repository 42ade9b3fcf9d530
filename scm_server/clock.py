"""Clock: the one place managers get time from (monotonic for ages and timeouts, wall for stamps).

Ozone's ReplicationManager and NodeManager take a ``java.time.Clock`` for the same reason:
tests drive time with :class:`FakeClock` and never sleep.

Who uses it: every layer that keeps time (the managers, the HA services, the CA runtime, the
facade), so it is a leaf: it imports nothing of ``scm_server`` (checked by import-linter).
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a monotonic clock (ages, deadlines)."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the epoch (timestamps stored or shown to users)."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


class FakeClock:
    """A manually advanced clock for tests and simulations."""

    def __init__(self, start_monotonic: float = 1000.0, start_wall_ms: int = 1_700_000_000_000) -> None:
        self._mono = start_monotonic
        self._wall = start_wall_ms

    def monotonic(self) -> float:
        return self._mono

    def wall_ms(self) -> int:
        return self._wall

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time only moves forward")
        self._mono += seconds
        self._wall += int(seconds * 1000)
