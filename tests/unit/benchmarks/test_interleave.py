"""Interleaved rounds (bench/interleave.py): the schedule alternates the targets' order, every round's load is kept
beside it, warm-up rounds stay out of the figures, and a ratio is taken round by round before its median."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest

from bench import interleave
from bench.interleave import Sample, Slot


def test_the_targets_order_alternates_from_round_to_round() -> None:
    rounds = interleave.schedule(["ours", "ozone"], ["noop", "alloc"], 3)
    assert rounds[0] == [Slot(0, "ours", "noop"), Slot(0, "ours", "alloc"), Slot(0, "ozone", "noop"),
                         Slot(0, "ozone", "alloc")]
    assert [s.target for s in rounds[1]] == ["ozone", "ozone", "ours", "ours"]
    assert [s.target for s in rounds[2]] == ["ours", "ours", "ozone", "ozone"]


@pytest.mark.parametrize(("targets", "rows", "rounds", "message"), [
    (["a"], ["r"], 0, "rounds must be at least 1, got 0"),
    ([], ["r"], 1, "name at least one target and one row"),
])
def test_a_schedule_without_rounds_or_targets_is_refused(targets: list[str], rows: list[str], rounds: int,
                                                        message: str) -> None:
    with pytest.raises(ValueError, match=message):
        interleave.schedule(targets, rows, rounds)


def test_spread_is_the_median_with_the_lowest_and_highest() -> None:
    assert interleave.spread([3.0, 1.0, 10.0, 2.0]) == interleave.Spread(2.5, 1.0, 10.0, 4)
    assert interleave.Spread(2.5, 1.0, 10.0, 4).text(".1f") == "2.5 [1.0-10.0]"


def _samples() -> list[Sample]:
    # ours/ozone calls/s per round: warm-up 100/1 (left out), then 2.0, 0.5, 1.0
    figures = {0: (100.0, 1.0), 1: (200.0, 100.0), 2: (50.0, 100.0), 3: (90.0, 90.0)}
    out = []
    for r, (ours, ozone) in figures.items():
        out.append(Sample(r, "ours", "noop", ours, 1.0 + r, 2.0 + r, warmup=r == 0))
        out.append(Sample(r, "ozone", "noop", ozone, 3.0, 4.0, warmup=r == 0))
    return out


def test_summaries_leave_the_warm_up_out() -> None:
    summary = interleave.summarize(_samples())
    assert summary["noop"]["ours"]["calls_per_s"] == interleave.Spread(90.0, 50.0, 200.0, 3)
    assert summary["noop"]["ours"]["p50_ms"] == interleave.Spread(3.0, 2.0, 4.0, 3)
    assert summary["noop"]["ozone"]["p99_ms"].n == 3


def test_ratios_are_taken_round_by_round() -> None:
    got = interleave.ratio(_samples(), "noop", "ours", "ozone")
    # per round 2.0, 0.5, 1.0: median 1.0 (the ratio of the medians would be 90/100 = 0.9)
    assert got == interleave.Spread(1.0, 0.5, 2.0, 3)
    assert interleave.ratio(_samples(), "noop", "ours", "absent") is None


async def test_run_rounds_measures_every_slot_and_keeps_the_load_beside_each_round() -> None:
    called: list[tuple[str, str, int]] = []
    loads = iter([(float(i), 0.0, 0.0) for i in range(10)])

    def target(name: str) -> Mapping[str, interleave.MakeCall]:
        def row(row_name: str) -> interleave.MakeCall:
            def make_call() -> Callable[[], Awaitable[Any]]:
                async def call() -> str:
                    return f"{name}/{row_name}"
                return call
            return make_call
        return {"noop": row("noop"), "alloc": row("alloc")}

    async def measure(clients: int, seconds: float, make_call: interleave.MakeCall) -> dict[str, float]:
        answer = await make_call()()
        called.append((answer, f"{seconds:g}", clients))
        return {"calls_per_s": float(len(called)), "p50_ms": 1.0, "p99_ms": 2.0}

    samples, kept = await interleave.run_rounds(
        {"ours": target("ours"), "ozone": target("ozone")}, ["noop", "alloc"], rounds=2, warmup_rounds=1,
        clients=4, seconds=0.5, measure=measure, loadavg=lambda: next(loads))
    assert [c[0] for c in called] == [
        "ours/noop", "ours/alloc", "ozone/noop", "ozone/alloc",  # warm-up round
        "ozone/noop", "ozone/alloc", "ours/noop", "ours/alloc",
        "ours/noop", "ours/alloc", "ozone/noop", "ozone/alloc",
    ]
    assert {(c[1], c[2]) for c in called} == {("0.5", 4)}
    assert [(x.round, x.start[0], x.end[0], x.warmup) for x in kept] == [
        (0, 0.0, 1.0, True), (1, 2.0, 3.0, False), (2, 4.0, 5.0, False)]
    assert [s.warmup for s in samples] == [True] * 4 + [False] * 8
    assert [(s.round, s.target, s.row, s.calls_per_s) for s in samples[4:6]] == [
        (1, "ozone", "noop", 5.0), (1, "ozone", "alloc", 6.0)]


async def test_run_rounds_reads_each_targets_cpu_around_each_row_as_a_share_of_one_core() -> None:
    # the ours leader uses 0.5 s of CPU per row, Ozone's 1.5 s; each row takes 2 s of (injected) wall time
    used = {"ours": 0.0, "ozone": 0.0}
    per_row = {"ours": 0.5, "ozone": 1.5}
    now = [0.0]

    def target(name: str) -> Mapping[str, interleave.MakeCall]:
        def make_call() -> Callable[[], Awaitable[Any]]:
            async def call() -> None:
                used[name] += per_row[name]
                now[0] += 2.0
            return call
        return {"hb": make_call}

    async def measure(clients: int, seconds: float, make_call: interleave.MakeCall) -> dict[str, float]:
        await make_call()()
        return {"calls_per_s": 1.0, "p50_ms": 1.0, "p99_ms": 1.0}

    samples, _ = await interleave.run_rounds(
        {"ours": target("ours"), "ozone": target("ozone")}, ["hb"], rounds=2, warmup_rounds=0, clients=1,
        seconds=1, measure=measure, loadavg=lambda: (0.0, 0.0, 0.0),
        cpu={"ours": lambda: used["ours"], "ozone": lambda: used["ozone"]}, clock=lambda: now[0])
    assert {(s.target, s.leader_cpu_pct) for s in samples} == {("ours", 25.0), ("ozone", 75.0)}
    summary = interleave.summarize(samples)
    assert summary["hb"]["ozone"][interleave.CPU] == interleave.Spread(75.0, 75.0, 75.0, 2)
    # a target without a CPU reading has no CPU metric, and asking a sample for it says so
    plain = [Sample(1, "x", "hb", 1.0, 1.0, 1.0)]
    assert interleave.CPU not in interleave.summarize(plain)["hb"]["x"]
    with pytest.raises(KeyError, match="no CPU reading"):
        plain[0].metric(interleave.CPU)
