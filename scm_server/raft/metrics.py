"""What the Raft driver counts and times: its log writes and syncs, and the client calls it serves.

The figures Apache Ratis keeps for the same events (its ``log_worker`` and ``server`` metrics, which Ozone's SCM
exports and Ozone's dashboards read) have counterparts here: entries appended to the log, synced writes, the time
of each write and of each sync, and the time of each client write (proposal to result) and linearizable read. A
time is kept in a :class:`Reservoir`: the most recent samples, from which quantiles are read, as Ratis's
(Dropwizard's) timers report them. No clock here: the driver measures and passes durations in.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["RESERVOIR_SIZE", "RaftMetrics", "Reservoir"]

RESERVOIR_SIZE = 1028  # Dropwizard's default reservoir size, which Ratis's timers use


class Reservoir:
    """The last ``size`` durations (seconds) and how many there were in all. Safe to add to from the log writer's
    thread while the loop reads it."""

    def __init__(self, size: int = RESERVOIR_SIZE) -> None:
        if size < 1:
            raise ValueError(f"a reservoir holds at least one sample, got size={size}")
        self._samples: deque[float] = deque(maxlen=size)
        self._lock = threading.Lock()
        self.count = 0
        self.total = 0.0

    def add(self, seconds: float) -> None:
        with self._lock:
            self._samples.append(seconds)
            self.count += 1
            self.total += seconds

    def quantiles(self, qs: Sequence[float]) -> list[float]:
        """The ``q`` quantile of the samples held, for each ``q`` in [0, 1] (nearest rank; 0.0 when empty)."""
        for q in qs:
            if not 0.0 <= q <= 1.0:
                raise ValueError(f"a quantile lies in [0, 1], got {q}")
        with self._lock:
            ordered = sorted(self._samples)
        if not ordered:
            return [0.0 for _ in qs]
        last = len(ordered) - 1
        return [ordered[min(last, max(0, int(q * len(ordered) + 0.5) - 1))] for q in qs]


@dataclass
class RaftMetrics:
    """One member's figures since it started."""

    appended_entries: int = 0  # log entries written (Ratis: log_worker appendEntryCount)
    flushes: int = 0  # synced log writes (log_worker flushCount)
    failed_client_writes: int = 0  # proposals that ended without a result (server numFailedClientWriteOnServer)
    append_latency: Reservoir = field(default_factory=Reservoir)  # each write of entries (appendEntryLatency)
    sync_time: Reservoir = field(default_factory=Reservoir)  # each synced write (syncTime)
    client_writes: Reservoir = field(default_factory=Reservoir)  # proposal to result (server clientWriteRequest)
    client_reads: Reservoir = field(default_factory=Reservoir)  # ReadIndex barrier (server clientReadRequest)

    def logged(self, entries: int, synced: bool, seconds: float) -> None:
        """One log write of ``entries`` entries that took ``seconds``, synced or not."""
        if entries:
            self.appended_entries += entries
            self.append_latency.add(seconds)
        if synced:
            self.flushes += 1
            self.sync_time.add(seconds)
