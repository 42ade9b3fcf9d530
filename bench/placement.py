#!/usr/bin/env python3
"""Placement decisions per second: each container policy and PipelinePlacementPolicy over N datanodes on R racks.

Pure calls, no SCM: what one ReplicationManager target choice (``choose_targets``, 1 target for a container whose
two replicas sit on one rack) and one fresh 3-replica choice (``choose_datanodes``) cost at cluster sizes Ozone
runs, and one pipeline placement. Prints a table; writes JSON to bench/results/placement.json.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scm_server.node.node_manager import DatanodeInfo
from scm_server.pipeline.placement import CONTAINER_POLICIES, PipelinePlacementPolicy, container_policy
from scm_server.proto import hdds_pb2, scm_datanode_pb2

GB = 1 << 30


def cluster(nodes: int, racks: int) -> list[DatanodeInfo]:
    return [
        DatanodeInfo(
            details=hdds_pb2.DatanodeDetailsProto(uuid=f"dn-{i}", hostName=f"dn-{i}", networkLocation=f"/rack{i % racks}"),
            health=hdds_pb2.HEALTHY, op_state=hdds_pb2.IN_SERVICE, op_state_expiry_epoch_s=0,
            last_heartbeat_mono=0, last_heartbeat_wall_ms=0,
            storage_reports=[scm_datanode_pb2.StorageReportProto(
                storageUuid=f"v{i}", storageLocation="/d", capacity=1000 * GB, remaining=(500 + i % 400) * GB)],
        )
        for i in range(nodes)
    ]


def rate(fn: Callable[[], object], seconds: float) -> float:
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        fn()
        count += 1
    return count / elapsed


def measure(n: int, racks: int, seconds: float) -> list[dict[str, object]]:
    nodes = cluster(n, racks)
    holders = {nodes[0].uuid, nodes[racks].uuid}  # two replicas on one rack
    rows: list[dict[str, object]] = []
    for name in sorted(CONTAINER_POLICIES):
        policy = container_policy(name, random.Random(1))
        rm = rate(functools.partial(policy.choose_targets, nodes, [nodes[0].rack] * 2, 1, lambda _u: 0, holders),
                  seconds)
        fresh = rate(functools.partial(policy.choose_datanodes, nodes, 3, data_size=5 * GB), seconds)
        rows.append({"nodes": n, "policy": name.rsplit(".", 1)[1], "rm_target_per_s": rm, "fresh_3_per_s": fresh})
    pipeline = PipelinePlacementPolicy(random.Random(1))
    pp = rate(functools.partial(pipeline.choose_datanodes, nodes, 3, lambda _u: 0, lambda _u: 2, data_size=5 * GB),
              seconds)
    rows.append({"nodes": n, "policy": "PipelinePlacementPolicy", "rm_target_per_s": None, "fresh_3_per_s": pp})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--racks", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    rows = [row for n in args.nodes for row in measure(n, args.racks, args.seconds)]
    for r in rows:
        rm = "-" if r["rm_target_per_s"] is None else f"{r['rm_target_per_s']:,.0f}"
        print(f"{r['nodes']:>6} {r['policy']!s:<36} RM target/s {rm:>10}  fresh 3/s {r['fresh_3_per_s']:>10,.0f}")
    out = Path(__file__).resolve().parent / "results" / "placement.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"racks": args.racks, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
