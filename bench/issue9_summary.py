#!/usr/bin/env python3
"""The performance table of issue 9, from the JSON the benchmarks of this ``make bench`` run wrote.

Run last by ``bench/run_all.sh``: it measures nothing itself. It reads bench/results/raft_bench.json
(etcd anchor, single-client latency, failover, elections) and bench/results/scale.json (SCM at
10k/100k/1M containers) and prints one row per figure: ours, the anchor measured in the same run,
the ratio and the goal. A figure whose benchmark did not run (or failed) is printed as "not measured",
and the exit status is then 1. docs/performance.md explains each row.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / name
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data


def cell(raft: dict[str, Any], system: str, clients: int) -> dict[str, Any] | None:
    sys_ = raft.get("systems", {}).get(system)
    if not sys_:
        return None
    return next((c for c in sys_.get("cells", []) if c["clients"] == clients), None)


def stability(raft: dict[str, Any], system: str, paused: bool) -> dict[str, Any] | None:
    sys_ = raft.get("systems", {}).get(system) or {}
    for st in sys_.get("stability", []):
        if ("paused" in st["scenario"]) == paused:
            return st
    return None


def fmt(v: float | int | None, unit: str = "", digits: int = 2) -> str:
    if v is None:
        return "not measured"
    if isinstance(v, int) or (isinstance(v, float) and v >= 1000):
        return f"{v:,.0f}{unit}"
    return f"{v:.{digits}f}{unit}"


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def main() -> int:
    rows: list[tuple[str, str, str, str, str, str]] = []  # figure, ours, anchor, ratio, goal, met

    def row(figure: str, ours: float | None, anchor_text: str, anchor: float | None, goal: str,
            met: bool | None, unit: str = "", r: float | None = None) -> None:
        rr = r if r is not None else ratio(ours, anchor)
        if goal in ("(context)", "reported"):
            verdict = ""  # no goal to meet: the figure is shown for context
        else:
            verdict = "?" if met is None else ("yes" if met else "NO")
        rows.append((figure, fmt(ours, unit), f"{anchor_text} {fmt(anchor, unit)}", fmt(rr, "x"), goal, verdict))

    raft = load("raft_bench.json")
    missing = 0
    if raft is None:
        print("raft_bench.json missing: the Raft figures were not measured")
        missing += 1
    else:
        o64, e64, g64 = cell(raft, "ours", 64), cell(raft, "etcd", 64), cell(raft, "etcd-gw", 64)
        t_o, t_e = (o64 or {}).get("ops_per_s"), (e64 or {}).get("ops_per_s")
        r = ratio(t_o, t_e)
        row("writes/s at 64 clients", t_o, "etcd gRPC", t_e, ">= 1.0x", None if r is None else r >= 1.0)
        t_g = (g64 or {}).get("ops_per_s")
        row("writes/s at 64 clients", t_o, "etcd JSON gw", t_g, "(context)", None)
        o1, e1 = cell(raft, "ours", 1), cell(raft, "etcd", 1)
        p_o, p_e = (o1 or {}).get("p50_ms"), (e1 or {}).get("p50_ms")
        r = ratio(p_o, p_e)
        row("p50 commit latency, 1 client", p_o, "etcd gRPC", p_e, "<= 1.2x", None if r is None else r <= 1.2, " ms")
        ours_sys = raft["systems"].get("ours") or {}
        f_o = ours_sys.get("failover_median_s")
        f_e = (raft["systems"].get("etcd") or {}).get("failover_median_s")
        r = ratio(f_o, f_e)
        n_fo = len(ours_sys.get("failover_s") or [])
        row(f"failover gap after SIGKILL (median of {n_fo})", f_o, "etcd", f_e, "<= 1.0x",
            None if r is None else r <= 1.0, " s")
        for paused, what, key, goal in ((False, "elections, 60 s x 64 clients, no fault", "elections", "0"),
                                        (True, "leader changes, leader paused 100 ms/s", "leader_changes", "0")):
            so, se = stability(raft, "ours", paused), stability(raft, "etcd", paused)
            vo, ve = (so or {}).get(key), (se or {}).get(key)
            rows.append((what, fmt(vo), f"etcd {fmt(ve)}", "-", goal,
                         "?" if vo is None else ("yes" if vo == 0 else "NO")))
    scale = load("scale.json")
    if scale is None:
        print("scale.json missing: the SCM-at-scale figures were not measured")
        missing += 1
    else:
        for p in scale["points"]:
            n = p["containers"]
            a = p["allocation"]
            row(f"batched allocation via HA leader @{n:,}", a["blocks_per_second"], "no-op RPC calls/s",
                a["noop_rpc_per_second"], ">= 50k blk/s", a["blocks_per_second"] >= 50_000, "",
                a["calls_per_second_vs_noop_rpc"])
            rep = p["reports"]
            row(f"full reports, replicas/s @{n:,}", rep["replicas_per_second"], "decode floor",
                rep["decode_floor_replicas_per_second"], ">= 300k/s", rep["replicas_per_second"] >= 300_000)
        for p in scale["points"]:
            e = p.get("elections_after_restart")
            rows.append((f"elections in the ring @{p['containers']:,}", fmt(e), "-", "-", "0",
                         "?" if e is None else ("yes" if e == 0 else "NO")))
        big = max(scale["points"], key=lambda q: q["containers"])
        n = big["containers"]
        m = big["memory"]
        rss = max(m["rss_mb"])
        row(f"RSS per SCM @{n:,} x 3 replicas", rss, "empty SCM", max(m["empty_rss_mb"]), "<= 1024 MB",
            rss <= 1024 if n >= 1_000_000 else None, " MB")
        j = big["join"]
        row(f"new SCM joins ring @{n:,}", j["seconds"], "member load", big["load_seconds"], "<= 20 s",
            j["seconds"] <= 20 if n >= 1_000_000 else None, " s")
        row(f"alloc p99 during join @{n:,}", j["alloc_p99_ms_during"], "p99 before", j["alloc_p99_ms_before"],
            "reported", None, " ms")
    width = [max(len(r[i]) for r in rows) if rows else 10 for i in range(6)]
    head = ("figure", "ours", "anchor (same run)", "ratio", "goal", "met")
    width = [max(w, len(h)) for w, h in zip(width, head, strict=True)]
    print("\nIssue 9 figures (ours next to the anchor measured in the same run)")
    print(" | ".join(h.ljust(w) for h, w in zip(head, width, strict=True)))
    print("-+-".join("-" * w for w in width))
    for r in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(r, width, strict=True)))
    if scale is not None and scale.get("growth"):
        print("\ngrowth (per-operation cost relative to the smallest size; goal: flat for allocation, "
              "flat per replica for reports, linear join time)")
        for g in scale["growth"]:
            print(f"  {g['containers']:>10,} containers: us/block x{g['us_per_block_vs_smallest']}, "
                  f"us/replica x{g['us_per_replica_vs_smallest']}, join {g['join_seconds_per_100k']} s per 100k")
    la = (raft or {}).get("load_average_at_end")
    if la:
        print(f"\nload average at the end of raft_bench: {', '.join(f'{x:.1f}' for x in la)} "
              f"({(raft or {}).get('host_cpus')} CPUs): figures from a loaded machine are noisy")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
