"""Interleaved rounds: several rings (or transports) measured in turn within one run, so that what the shared
machine does meanwhile falls on all of them alike.

A run is ``rounds`` rounds; in each, every target runs every row once for a short while. The order of the targets
alternates from round to round (odd rounds reverse it), so none is always first after a pause. The machine's load
average is read at the start and the end of each round and kept beside it. Each row of each target is then the
median of its rounds with the lowest and highest round beside it (the spread), and a ratio between two targets is
taken round by round (both measured within the same minute) before its median and spread.

Used by bench/wire.py (our ring over gRPC and Hadoop RPC, Ozone's ring over Hadoop RPC). The schedule and the
summaries are pure; :func:`run_rounds` is the one effect, and takes the measuring function and the load reading
as arguments.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MakeCall = Callable[[], Callable[[], Awaitable[Any]]]
"""Gives one measuring loop its call (each loop asks once, so each can hold its own client)."""
Measure = Callable[[int, float, MakeCall], Awaitable[Mapping[str, float]]]
"""``(clients, seconds, make_call)`` -> at least ``calls_per_s``, ``p50_ms``, ``p99_ms``."""
METRICS = ("calls_per_s", "p50_ms", "p99_ms")


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

    def metric(self, name: str) -> float:
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
    """row -> target -> metric -> its spread over the measured (not warm-up) rounds."""
    grouped: dict[str, dict[str, list[Sample]]] = {}
    for s in samples:
        if not s.warmup:
            grouped.setdefault(s.row, {}).setdefault(s.target, []).append(s)
    return {
        row: {target: {m: spread([s.metric(m) for s in got]) for m in METRICS} for target, got in by_target.items()}
        for row, by_target in grouped.items()
    }


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
) -> tuple[list[Sample], list[RoundLoad]]:
    """Runs the schedule: ``warmup_rounds`` first (kept, marked, left out of the summaries), then ``rounds``."""
    samples: list[Sample] = []
    loads: list[RoundLoad] = []
    for slots in schedule(list(targets), rows, warmup_rounds + rounds):
        r = slots[0].round
        warm = r < warmup_rounds
        start = loadavg()
        for slot in slots:
            got = await measure(clients, seconds, targets[slot.target][slot.row])
            samples.append(Sample(r, slot.target, slot.row, got["calls_per_s"], got["p50_ms"], got["p99_ms"], warm))
        loads.append(RoundLoad(r, start, loadavg(), warm))
    return samples, loads
