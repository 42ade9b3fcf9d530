#!/usr/bin/env python3
"""Wire benchmark (issue 20, first version): the block protocol over Hadoop RPC next to gRPC, same run.

A 3-SCM quorum (separate processes on loopback) serving ScmBlockLocationProtocol both over gRPC (the
project's own messages, ``SCMClient``) and over Hadoop RPC (Ozone's messages, ``scm_server.client.hadoop_rpc``),
with simulated datanodes. Through the leader, for ``--seconds`` each and ``--clients`` concurrent callers:

* the no-op call of each transport (GetScmInfo): the anchor, what the transport alone costs;
* AllocateScmBlock with 1 block per call and with 100 blocks per call.

Prints calls/s and median / p99 latency per row, and the Hadoop RPC / gRPC ratio (goal of issue 20: the Hadoop
RPC path at least as fast as the gRPC path). Both clients are Python asyncio clients in this process, so the
figures compare the server paths plus equal client work; the Java client is the issue's later row.

**Ozone's own SCM ring as the anchor** (after ours is stopped, same run; bench/ozone_anchor.py): Apache Ozone
2.2.0's 3-SCM HA ring (Java, Ratis) with three real Ozone datanodes, driven through its leader by the same Python
Hadoop RPC client, same rows, clients, seconds and block/container sizes; prints ours/Ozone (goal of issue 20:
our ring at least as fast as Ozone's on allocation). Needs Ozone's jars (make ozone-jars); without them the
bench prints a banner saying so and exits 1 (``--no-ozone`` leaves the anchor out on purpose). Writes
bench/results/wire.json. Bounded: about 1 minute for ours, 3-4 more for Ozone's ring (mostly its start).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

if not __package__:  # `python bench/wire.py`: import bench.* and tests.* from this checkout, as `python -m` does
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import ozone_anchor
from scm_server.client import SCMClient, SCMClientConfig
from scm_server.client.hadoop_rpc import BlockLocationClient
from scm_server.datanode_sim import DatanodeSimulator
from scm_server.exceptions import SCMError
from scm_server.local.quorum import HALocalCluster
from scm_server.proto import hdds_pb2

ROOT = Path(__file__).resolve().parent.parent

SETTINGS = {
    "hdds.heartbeat.interval": "1s",
    "ozone.scm.stale.node.interval": "90s",
    "ozone.scm.dead.node.interval": "180s",
    "hdds.scm.replication.thread.interval": "60s",
    "hdds.scm.safemode.min.datanode": "3",
    "ozone.scm.container.size": "5GB",
    "ozone.scm.block.size": "256MB",
    "ozone.scm.ha.ratis.fsync": "false",
}
CLIENT = SCMClientConfig(max_retries=200, retry_interval=0.05, rpc_timeout=60)
BLOCK = 256 << 20


async def measure(clients: int, seconds: float, make_call: Callable[[], Callable[[], Awaitable[Any]]]) -> dict[str, float]:
    """``clients`` loops calling for ``seconds``; every call's latency kept."""
    latencies: list[float] = []
    deadline = time.monotonic() + seconds

    async def loop() -> None:
        call = make_call()
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - t0)

    t0 = time.monotonic()
    await asyncio.gather(*(loop() for _ in range(clients)))
    elapsed = time.monotonic() - t0
    latencies.sort()
    return {
        "calls": len(latencies),
        "calls_per_s": len(latencies) / elapsed,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
    }


async def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    cluster = HALocalCluster(tmp / "wire", 3, settings=SETTINGS)
    hadoop_ports = [s.hadoop_ports["block"] for s in cluster.scms]  # Ozone's ozone.scm.block.client.port
    sim = None
    try:
        cluster.start_quorum()
        sim = DatanodeSimulator(cluster.datanode_addresses, 3, heartbeat_interval=1.0, racks=1,
                                admin_addresses=cluster.client_addresses)
        await sim.start()
        await cluster.wait_healthy_quorum(timeout=120)
        leader = await cluster.wait_leader()
        grpc_address = [cluster.scms[leader].client_address]  # serves the block protocol and GetScmInfo
        hadoop_address = [f"127.0.0.1:{hadoop_ports[leader]}"]
        # wait until an allocation succeeds (an OPEN RATIS/THREE pipeline exists)
        async with SCMClient(cluster.client_addresses, CLIENT) as admin:
            deadline = time.monotonic() + 90
            while True:
                try:
                    await admin.allocate_block(BLOCK, 1)
                    break
                except SCMError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.5)

        grpc_clients = [SCMClient(grpc_address, CLIENT) for _ in range(args.clients)]
        hadoop_clients = [BlockLocationClient(hadoop_address) for _ in range(args.clients)]
        grpc_iter = iter(grpc_clients)
        hadoop_iter = iter(hadoop_clients)
        rows: dict[str, dict[str, float]] = {}
        try:
            for name, num in (("no-op (GetScmInfo)", 0), ("allocate 1 block", 1), ("allocate 100 blocks", 100)):
                grpc_iter, hadoop_iter = iter(grpc_clients), iter(hadoop_clients)

                def grpc_call(num: int = num, it: Any = grpc_iter) -> Callable[[], Awaitable[Any]]:
                    c = next(it)
                    if num == 0:
                        return c.get_scm_info
                    return lambda: c.allocate_block(BLOCK, num, hdds_pb2.RATIS, hdds_pb2.THREE, "bench")

                def hadoop_call(num: int = num, it: Any = hadoop_iter) -> Callable[[], Awaitable[Any]]:
                    c = next(it)
                    if num == 0:
                        return c.get_scm_info

                    async def allocate() -> None:
                        resp = await c.allocate_blocks(BLOCK, num, "bench")
                        if not resp.success:
                            raise RuntimeError(f"allocation refused: {resp.status} {resp.message}")

                    return allocate

                rows[f"{name} gRPC"] = await measure(args.clients, args.seconds, grpc_call)
                rows[f"{name} Hadoop RPC"] = await measure(args.clients, args.seconds, hadoop_call)
        finally:
            for c in grpc_clients:
                await c.close()
            for h in hadoop_clients:
                await h.close()
        return {"leader": cluster.scms[leader].node_id, "rows": rows}
    finally:
        if sim is not None:
            await sim.stop()
        cluster.stop_all()


OZONE_ROWS = (("no-op (GetScmInfo)", 0), ("allocate 1 block", 1), ("allocate 100 blocks", 100))
# Ozone's ring gets our benchmark's sizes (SETTINGS above), so a call asks the same of both rings.
OZONE_OVERRIDES = {"ozone.scm.container.size": "5GB", "ozone.scm.block.size": "256MB"}


async def measure_ozone(cluster: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The Hadoop RPC rows through the leader of Ozone's ring (started by bench/ozone_anchor.py)."""
    leader = await ozone_anchor.probe_leader(cluster)
    address = [ozone_anchor.block_address(leader)]
    clients = [BlockLocationClient(address) for _ in range(args.clients)]
    rows: dict[str, dict[str, float]] = {}
    try:
        # until an allocation succeeds, then a short JIT warm-up (the JVM's steady state is what runs in production)
        deadline = time.monotonic() + 90
        while not (await clients[0].allocate_blocks(BLOCK, 1, "bench")).success:
            if time.monotonic() > deadline:
                raise RuntimeError("Ozone's SCM refused allocations for 90 s")
            await asyncio.sleep(0.5)
        for _, num in OZONE_ROWS:
            await measure(args.clients, min(2.0, args.seconds), functools.partial(_next_call, iter(clients), num))
        for name, num in OZONE_ROWS:
            rows[f"{name} Hadoop RPC"] = await measure(
                args.clients, args.seconds, functools.partial(_next_call, iter(clients), num))
    finally:
        for c in clients:
            await c.close()
    return {"leader": leader.node_id, "rows": rows}


def _next_call(clients: Iterator[BlockLocationClient], num: int) -> Callable[[], Awaitable[Any]]:
    """The call of one row for the next of ``clients`` (each measuring loop takes its own client)."""
    return _hadoop_call(next(clients), num)


def _hadoop_call(c: BlockLocationClient, num: int) -> Callable[[], Awaitable[Any]]:
    if num == 0:
        return c.get_scm_info

    async def allocate() -> None:
        resp = await c.allocate_blocks(BLOCK, num, "bench")
        if not resp.success:
            raise RuntimeError(f"allocation refused: {resp.status} {resp.message}")

    return allocate


def run_ozone(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Ozone's ring: started, measured, stopped; {"error": why} when its jars cannot be had."""
    classpath, note = ozone_anchor.classpath_or_reason()
    if classpath is None:
        return {"error": note}
    cluster = None
    try:
        load_before = ozone_anchor.loadavg()
        cluster = ozone_anchor.start_ring(tmp / "ozone", classpath, OZONE_OVERRIDES)
        started = cluster.timings.steps["Ozone ring + datanodes ready"]
        result = asyncio.run(measure_ozone(cluster, args))
        return {**result, "jars": note, "start_seconds": round(started, 1),
                "loadavg_before_start": load_before, "loadavg_after": ozone_anchor.loadavg()}
    finally:
        ozone_anchor.stop(cluster)


def print_ozone(ours: dict[str, Any], ozone: dict[str, Any], args: argparse.Namespace) -> None:
    if "error" in ozone:
        print(ozone_anchor.banner(ozone["error"]))
        return
    print(f"\nOzone 2.2.0's own 3-SCM ring (Java/Ratis, 3 real datanodes) through its leader ({ozone['leader']}), "
          f"the same Python Hadoop RPC client, {args.clients} clients, {args.seconds:.0f} s a row "
          f"(load average {ozone['loadavg_after']}):")
    print(f"{'row':<24} {'ours calls/s':>12} {'p50':>7} {'p99':>7} {'Ozone calls/s':>13} {'p50':>7} {'p99':>7}"
          f" {'ours/Ozone':>10}")
    for name, _ in OZONE_ROWS:
        a, b = ours["rows"][f"{name} Hadoop RPC"], ozone["rows"][f"{name} Hadoop RPC"]
        print(f"{name:<24} {a['calls_per_s']:>12.0f} {a['p50_ms']:>7.2f} {a['p99_ms']:>7.2f}"
              f" {b['calls_per_s']:>13.0f} {b['p50_ms']:>7.2f} {b['p99_ms']:>7.2f}"
              f" {a['calls_per_s'] / b['calls_per_s']:>10.2f}")
    print("(ms; goal of issue 20: ours/Ozone >= 1.0 on allocation)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=4, help="concurrent callers per row (default 4)")
    p.add_argument("--seconds", type=float, default=5.0, help="duration of each row (default 5)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "wire.json")
    p.add_argument("--no-ozone", action="store_true", help="leave out Ozone's own SCM ring (the anchor)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-wire-") as tmp:
        load_ours = ozone_anchor.loadavg()
        result = asyncio.run(run(args, Path(tmp)))
        result["loadavg"] = {"before": load_ours, "after": ozone_anchor.loadavg()}
        if args.no_ozone:
            print("\nOzone's own SCM ring left out (--no-ozone)")
        else:
            result["ozone"] = run_ozone(args, Path(tmp))
    rows = result["rows"]
    print(f"\nblock protocol through the leader ({result['leader']}), {args.clients} clients, {args.seconds:.0f} s a row")
    print(f"{'row':<34} {'calls/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
    for name, r in rows.items():
        print(f"{name:<34} {r['calls_per_s']:>10.0f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f}")
    print("Hadoop RPC / gRPC throughput (goal >= 1.0):")
    for base in ("no-op (GetScmInfo)", "allocate 1 block", "allocate 100 blocks"):
        ratio = rows[f"{base} Hadoop RPC"]["calls_per_s"] / rows[f"{base} gRPC"]["calls_per_s"]
        print(f"  {base:<24} {ratio:.2f}")
    print(f"(our ring measured at load average {result['loadavg']['after']})")
    if "ozone" in result:
        print_ozone(result, result["ozone"], args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**result, "clients": args.clients, "seconds": args.seconds,
                                    "machine": platform.platform()}, indent=2))
    return 1 if "error" in result.get("ozone", {}) else 0


if __name__ == "__main__":
    sys.exit(main())
