#!/usr/bin/env python3
"""Overload benchmark (issue 11, item 3): do single-block calls stay fast while another client asks
for 100,000 blocks?

One SCM process on loopback (``ozone.scm.block.max.blocks.per.request`` raised to 100000 so that a
single call can ask for all of them), three simulated datanodes. ``--small-clients`` clients (in this
process) allocate one block per call for ``--seconds`` in each phase; their latencies are recorded:

1. **alone**: nothing else runs (the anchor, measured side by side in the same run);
2. **100k blocks in one call**: a separate process repeatedly asks for 100,000 blocks in ONE call;
   the SCM yields every 8 blocks, so small calls interleave with it;
3. **100k blocks in calls of 1000**: the same client with Ozone-sized requests (1000 blocks per call,
   the default cap).

Prints p50/p99/max of the single-block calls per phase and the ratio of each p99 to the anchor's,
and the big client's throughput. Writes bench/results/overload.json. Bounded: about a minute.
Figures measured while other work loads the machine are noisy: re-run on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scm_server.client import SCMClient, SCMClientConfig
from scm_server.local import throughput
from scm_server.local.cluster import LocalCluster
from scm_server.proto import hdds_pb2

ROOT = Path(__file__).resolve().parent.parent

BIG = 100_000
SETTINGS = {
    "hdds.heartbeat.interval": "1s",
    "ozone.scm.stale.node.interval": "90s",
    "ozone.scm.dead.node.interval": "180s",
    "hdds.scm.replication.thread.interval": "60s",
    "ozone.scm.pipeline.creation.interval": "1s",
    "hdds.scm.safemode.min.datanode": "3",
    "ozone.scm.container.size": "5GB",
    "ozone.scm.block.size": "256MB",
    "ozone.scm.block.max.blocks.per.request": str(BIG),
}
CLIENT = SCMClientConfig(max_retries=5, retry_interval=0.1, rpc_timeout=120)

# The big client runs in its own process, so decoding its huge answers never delays our measurements.
BIG_CLIENT = r"""
import asyncio, sys, time
from scm_server.client import SCMClient, SCMClientConfig
from scm_server.proto import hdds_pb2
async def main(address, per_call, seconds):
    done, calls, end = 0, 0, time.monotonic() + seconds
    async with SCMClient([address], SCMClientConfig(max_retries=5, retry_interval=0.1, rpc_timeout=300)) as c:
        print("ready", flush=True)
        start = time.monotonic()
        while time.monotonic() < end:
            left = 100_000
            while left > 0 and time.monotonic() < end:
                n = min(per_call, left)
                blocks = await c.allocate_block(4096, n, hdds_pb2.RATIS, hdds_pb2.THREE, "big-client")
                left -= len(blocks)
                done += len(blocks)
                calls += 1
                print(f"{done} blocks in {calls} calls, {done / (time.monotonic() - start):.0f} blocks/s, "
                      f"{c.failovers} retries", flush=True)
asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
"""


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


async def small_calls(address: str, clients: int, seconds: float) -> list[float]:
    latencies: list[float] = []
    end = time.monotonic() + seconds

    async def one(i: int) -> None:
        async with SCMClient([address], CLIENT) as c:
            while time.monotonic() < end:
                t0 = time.perf_counter()
                await c.allocate_block(4096, 1, hdds_pb2.RATIS, hdds_pb2.THREE, f"small-{i}")
                latencies.append((time.perf_counter() - t0) * 1000)

    await asyncio.gather(*(one(i) for i in range(clients)))
    return latencies


async def phase(address: str, args: argparse.Namespace, big_per_call: int | None, env: dict[str, str]) -> dict[str, Any]:
    big = None
    if big_per_call is not None:
        big = subprocess.Popen(
            [sys.executable, "-c", BIG_CLIENT, address, str(big_per_call), str(args.seconds + 30)],
            stdout=subprocess.PIPE, text=True, env=env,
        )
        assert big.stdout is not None
        if big.stdout.readline().strip() != "ready":
            raise RuntimeError("the big client did not start")
        await asyncio.sleep(0.5)  # let its first call start
    started = time.monotonic()
    lat = await small_calls(address, args.small_clients, args.seconds)
    elapsed = time.monotonic() - started
    out: dict[str, Any] = {
        "small_calls": len(lat), "p50_ms": round(statistics.median(lat), 2), "p99_ms": round(pct(lat, 99), 2),
        "max_ms": round(max(lat), 2), "small_calls_per_s": round(len(lat) / elapsed, 1),
    }
    if big is not None:
        big.terminate()
        tail, _ = big.communicate(timeout=60)
        out["big_client"] = tail.strip().splitlines()[-1] if tail.strip() else "no call finished"
    return out


async def run(cluster: LocalCluster, args: argparse.Namespace) -> dict[str, Any]:
    address = cluster.client_addresses[0]
    async with SCMClient([address], CLIENT) as admin:
        sim = await throughput.prepare_cluster(admin, cluster.datanode_addresses, 3, heartbeat_interval=1.0)
        try:
            await small_calls(address, args.small_clients, 2.0)  # warm-up
            env = cluster._env()
            results = {
                "alone": await phase(address, args, None, env),
                "100k blocks in one call": await phase(address, args, BIG, env),
                "100k blocks in calls of 1000": await phase(address, args, 1000, env),
            }
        finally:
            await sim.stop()
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=12.0, help="measurement time per phase")
    p.add_argument("--small-clients", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "overload.json")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="scm-overload-"))
    cluster = LocalCluster(tmp / "c", 1, settings=SETTINGS)
    started = time.perf_counter()
    try:
        cluster.write_configs()
        cluster.init()
        cluster.start(0)
        cluster.wait_serving(0, 60)
        phases = asyncio.run(run(cluster, args))
    finally:
        cluster.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)
    anchor = phases["alone"]["p99_ms"]
    print(f"\nsingle-block allocateBlock latency, {args.small_clients} clients, {args.seconds:g}s per phase "
          f"(anchor: the same calls with nothing else running)")
    print(f"{'phase':32} {'calls':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'p99/anchor':>11}  big client")
    for name, r in phases.items():
        r["p99_over_anchor"] = round(r["p99_ms"] / anchor, 2) if anchor else None
        print(f"{name:32} {r['small_calls']:>7} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['max_ms']:>8.2f} "
              f"{r['p99_over_anchor']:>11.2f}  {r.get('big_client', '-')}")
    out = {
        "phases": phases, "settings": {"max_blocks_per_request": BIG, "small_clients": args.small_clients,
                                       "seconds_per_phase": args.seconds},
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
