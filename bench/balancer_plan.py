#!/usr/bin/env python3
"""One ContainerBalancer iteration's planning time: the pure planner over N datanodes holding C RATIS/THREE
containers, a third of the datanodes three times as likely to hold a replica (an imbalanced cluster), 8 racks,
capacities 8/12/16 TB, containers 1-5 GB, Ozone's default limits (10 % threshold, 20 % of the datanodes, 500 GB
per iteration, 26 GB entering a target and leaving a source). Seeded: the same cluster every run. Prints a table;
writes JSON to bench/results/balancer_plan.json.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scm_server.container.balancer.core import BalancerLimits, ContainerReplicas, NodeUsage, plan_iteration

GB = 1 << 30


def cluster(nodes: int, containers: int, seed: int = 1) -> tuple[list[NodeUsage], list[ContainerReplicas]]:
    rng = random.Random(seed)
    names = [f"dn{i:05d}" for i in range(nodes)]
    capacity = {n: rng.choice([8, 12, 16]) * 1024 * GB for n in names}
    used = dict.fromkeys(names, 0)
    weights = [3 if i < nodes // 3 else 1 for i in range(nodes)]
    out = []
    for cid in range(1, containers + 1):
        holders: set[str] = set()
        while len(holders) < 3:
            holders.add(rng.choices(names, weights)[0])
        size = rng.randint(1, 5) * GB
        for h in holders:
            used[h] += size
        out.append(ContainerReplicas(cid, size, 3, frozenset(holders)))
    return [NodeUsage(n, capacity[n], used[n], f"/rack{i % 8}") for i, n in enumerate(names)], out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100:50000,300:200000,1000:1000000",
                        help="datanodes:containers pairs, comma-separated")
    args = parser.parse_args()
    rows = []
    for pair in args.sizes.split(","):
        n, c = (int(x) for x in pair.split(":"))
        nodes, containers = cluster(n, c)
        start = time.perf_counter()
        plan = plan_iteration(nodes, containers, BalancerLimits())
        seconds = time.perf_counter() - start
        rows.append({"datanodes": n, "containers": c, "moves": len(plan.moves), "over": len(plan.over_utilized),
                     "under": len(plan.under_utilized), "seconds": round(seconds, 2)})
    print("| datanodes | containers | over / under | moves planned | planning s |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['datanodes']:,} | {r['containers']:,} | {r['over']} / {r['under']} | {r['moves']} | {r['seconds']} |")
    out = Path(__file__).resolve().parent / "results" / "balancer_plan.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
