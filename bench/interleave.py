"""Interleaved rounds: several rings (or transports) measured in turn within one run, so that what the shared
machine does meanwhile falls on all of them alike.

A run is ``rounds`` rounds; in each, every target runs every row once for a short while. The order of the targets
alternates from round to round (odd rounds reverse it), so none is always first after a pause. The machine's load
average is read at the start and the end of each round and kept beside it. Each row of each target is then the
median of its rounds with the lowest and highest round beside it (the spread), and a ratio between two targets is
taken round by round (both measured within the same minute) before its median and spread.

Used by bench/wire.py (our ring over gRPC and Hadoop RPC, Ozone's ring over Hadoop RPC). The schedule and the
summaries are pure; :func:`run_rounds` is the one effect, and takes the measuring function, the load reading and
(optionally) each target's CPU reading as arguments: with a reading of the CPU seconds a target's leader used so
far, every sample also carries the share of one core the leader used while that row ran.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MakeCall = Callable[[], Callable[[], Awaitable[Any]]]
"""Gives one measuring loop its call (each loop asks once, so each can hold its own client)."""
Measure = Callable[[int, float, MakeCall], Awaitable[Mapping[str, float]]]
"""``(clients, seconds, make_call)`` -> at least ``calls_per_s``, ``p50_ms``, ``p99_ms``."""
METRICS = ("calls_per_s", "p50_ms", "p99_ms")
CPU = "leader_cpu_pct"
"""The optional metric: the leader's CPU time over the row's wall time, in % of one core."""


@dataclass(frozen=True)
class Slot:
    round: int
    target: str
    row: str


@dataclass(frozen=True)
class Sample:
    """One row of one target in one round."""

    round: int
    target: str
    row: str
    calls_per_s: float
    p50_ms: float
    p99_ms: float
    warmup: bool = False
    leader_cpu_pct: float | None = None

    def metric(self, name: str) -> float:
        if name == CPU:
            if self.leader_cpu_pct is None:
                raise KeyError(f"{self.target}/{self.row}: no CPU reading")
            return self.leader_cpu_pct
        return {"calls_per_s": self.calls_per_s, "p50_ms": self.p50_ms, "p99_ms": self.p99_ms}[name]


@dataclass(frozen=True)
class RoundLoad:
    """The 1, 5 and 15 minute load averages at the start and at the end of one round."""

    round: int
    start: tuple[float, float, float]
    end: tuple[float, float, float]
    warmup: bool = False


@dataclass(frozen=True)
class Spread:
    """The median of the rounds and the lowest and highest of them."""

    median: float
    low: float
    high: float
    n: int

    def text(self, fmt: str = ".0f") -> str:
        return f"{self.median:{fmt}} [{self.low:{fmt}}-{self.high:{fmt}}]"


def schedule(targets: Sequence[str], rows: Sequence[str], rounds: int) -> list[list[Slot]]:
    """The slots of each round: every target's rows in turn, the targets' order reversed in odd rounds."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    if not targets or not rows:
        raise ValueError("name at least one target and one row")
    out = []
    for r in range(rounds):
        order = list(targets) if r % 2 == 0 else list(reversed(targets))
        out.append([Slot(r, t, row) for t in order for row in rows])
    return out


def spread(values: Sequence[float]) -> Spread:
    if not values:
        raise ValueError("no values to summarise")
    return Spread(statistics.median(values), min(values), max(values), len(values))


def summarize(samples: Sequence[Sample]) -> dict[str, dict[str, dict[str, Spread]]]:
    """row -> target -> metric -> its spread over the measured (not warm-up) rounds; the CPU metric only where
    every round of that row and target has it."""
    grouped: dict[str, dict[str, list[Sample]]] = {}
    for s in samples:
        if not s.warmup:
            grouped.setdefault(s.row, {}).setdefault(s.target, []).append(s)
    return {
        row: {target: {m: spread([s.metric(m) for s in got]) for m in _metrics_of(got)}
              for target, got in by_target.items()}
        for row, by_target in grouped.items()
    }


def _metrics_of(samples: Sequence[Sample]) -> tuple[str, ...]:
    return (*METRICS, CPU) if all(s.leader_cpu_pct is not None for s in samples) else METRICS


def ratio(samples: Sequence[Sample], row: str, numerator: str, denominator: str,
          metric: str = "calls_per_s") -> Spread | None:
    """``numerator``/``denominator`` on ``row``, round by round (rounds where both were measured), then their
    spread; None when no round has both."""
    by_round: dict[int, dict[str, float]] = {}
    for s in samples:
        if s.row == row and not s.warmup and s.target in (numerator, denominator):
            by_round.setdefault(s.round, {})[s.target] = s.metric(metric)
    values = [v[numerator] / v[denominator] for v in by_round.values()
              if numerator in v and denominator in v and v[denominator] > 0]
    return spread(values) if values else None


async def run_rounds(
    targets: Mapping[str, Mapping[str, MakeCall]],
    rows: Sequence[str],
    *,
    rounds: int,
    warmup_rounds: int,
    clients: int,
    seconds: float,
    measure: Measure,
    loadavg: Callable[[], tuple[float, float, float]] = os.getloadavg,
    cpu: Mapping[str, Callable[[], float]] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[list[Sample], list[RoundLoad]]:
    """Runs the schedule: ``warmup_rounds`` first (kept, marked, left out of the summaries), then ``rounds``.
    ``cpu``: target -> the CPU seconds its leader has used so far (read before and after each row)."""
    samples: list[Sample] = []
    loads: list[RoundLoad] = []
    for slots in schedule(list(targets), rows, warmup_rounds + rounds):
        r = slots[0].round
        warm = r < warmup_rounds
        start = loadavg()
        for slot in slots:
            read_cpu = (cpu or {}).get(slot.target)
            cpu0, t0 = (read_cpu() if read_cpu else 0.0), clock()
            got = await measure(clients, seconds, targets[slot.target][slot.row])
            share = None
            if read_cpu is not None:
                wall = clock() - t0
                share = 100 * (read_cpu() - cpu0) / wall if wall > 0 else 0.0
            samples.append(Sample(r, slot.target, slot.row, got["calls_per_s"], got["p50_ms"], got["p99_ms"], warm,
                                  share))
        loads.append(RoundLoad(r, start, loadavg(), warm))
    return samples, loads
