#!/usr/bin/env python3
"""Wire benchmark: the block protocol over Hadoop RPC next to gRPC, and our ring next to Ozone's, interleaved.

Our 3-SCM quorum (separate processes on loopback, simulated datanodes) serves ScmBlockLocationProtocol both over
gRPC (the project's own messages, ``SCMClient``) and over Hadoop RPC (Ozone's messages,
``scm_server.client.hadoop_rpc``). **Ozone's own SCM ring** (bench/ozone_anchor.py: Apache Ozone 2.2.0's 3-SCM HA
ring, Java and Ratis, with three real Ozone datanodes and the same block and container sizes) runs beside it for
the whole run and is driven through its leader by the same Python Hadoop RPC client. The rows, through each
leader, with ``--clients`` concurrent callers:

* the no-op call (GetScmInfo): what the transport alone costs;
* AllocateScmBlock with 1 block per call and with 100 blocks per call.

The targets (ours over gRPC, ours over Hadoop RPC, Ozone's over Hadoop RPC) are measured in interleaved rounds
(bench/interleave.py): ``--warmup-rounds`` first (the JVM's JIT and our caches warm; kept in the JSON, left out of
the figures), then ``--rounds`` rounds of ``--seconds`` a row, the targets' order alternating, the machine's load
average read at the start and end of each round. Each row prints the median of the rounds with the lowest and
highest round, and the ratios ours/Ozone and Hadoop RPC/gRPC taken round by round. Both clients are Python
asyncio clients in this process, so the figures compare the server paths plus equal client work.

Needs Ozone's jars (make ozone-jars); without them the bench prints a banner saying so and exits 1
(``--no-ozone`` leaves Ozone's ring out on purpose). Writes bench/results/wire.json.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import itertools
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

if not __package__:  # `python bench/wire.py`: import bench.* and tests.* from this checkout, as `python -m` does
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import interleave, ozone_anchor
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


ROWS = (("no-op (GetScmInfo)", 0), ("allocate 1 block", 1), ("allocate 100 blocks", 100))
OURS_GRPC, OURS_HADOOP, OZONE_HADOOP = "ours gRPC", "ours Hadoop RPC", "Ozone Hadoop RPC"
# Ozone's ring gets our benchmark's sizes (SETTINGS above), so a call asks the same of both rings.
OZONE_OVERRIDES = {"ozone.scm.container.size": "5GB", "ozone.scm.block.size": "256MB"}


def _grpc_call(c: SCMClient, num: int) -> Callable[[], Awaitable[Any]]:
    if num == 0:
        return c.get_scm_info
    return lambda: c.allocate_block(BLOCK, num, hdds_pb2.RATIS, hdds_pb2.THREE, "bench")


def _hadoop_call(c: BlockLocationClient, num: int) -> Callable[[], Awaitable[Any]]:
    if num == 0:
        return c.get_scm_info

    async def allocate() -> None:
        resp = await c.allocate_blocks(BLOCK, num, "bench")
        if not resp.success:
            raise RuntimeError(f"allocation refused: {resp.status} {resp.message}")

    return allocate


def _rows_of(clients: Sequence[Any], call: Callable[[Any, int], Callable[[], Awaitable[Any]]]) -> dict[str, interleave.MakeCall]:
    """Each row's call maker: a measuring loop takes the next of ``clients`` (``--clients`` loops, as many clients)."""
    return {name: functools.partial(_next_call, itertools.cycle(clients), num, call) for name, num in ROWS}


def _next_call(clients: Iterator[Any], num: int, call: Callable[[Any, int], Callable[[], Awaitable[Any]]]) -> Callable[[], Awaitable[Any]]:
    return call(next(clients), num)


async def _until_allocation(allocate: Callable[[], Awaitable[Any]], what: str, timeout: float = 90) -> None:
    """Until an allocation succeeds (an OPEN RATIS/THREE pipeline exists and the ring left safe mode)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            await allocate()
            return
        except (SCMError, RuntimeError):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} refused allocations for {timeout:.0f} s") from None
            await asyncio.sleep(0.5)


async def run(args: argparse.Namespace, tmp: Path, ozone: Any) -> dict[str, Any]:
    """Our ring started here; ``ozone`` (Ozone's ring, already started) or None; the interleaved rounds."""
    cluster = HALocalCluster(tmp / "wire", 3, settings=SETTINGS)
    hadoop_ports = [s.hadoop_ports["block"] for s in cluster.scms]  # Ozone's ozone.scm.block.client.port
    sim = None
    opened: list[Any] = []
    try:
        cluster.start_quorum()
        sim = DatanodeSimulator(cluster.datanode_addresses, 3, heartbeat_interval=1.0, racks=1,
                                admin_addresses=cluster.client_addresses)
        await sim.start()
        await cluster.wait_healthy_quorum(timeout=120)
        leader = await cluster.wait_leader()
        grpc_address = [cluster.scms[leader].client_address]  # serves the block protocol and GetScmInfo
        hadoop_address = [f"127.0.0.1:{hadoop_ports[leader]}"]
        async with SCMClient(cluster.client_addresses, CLIENT) as admin:
            await _until_allocation(lambda: admin.allocate_block(BLOCK, 1), "our ring")
        grpc_clients = [SCMClient(grpc_address, CLIENT) for _ in range(args.clients)]
        hadoop_clients = [BlockLocationClient(hadoop_address) for _ in range(args.clients)]
        opened += grpc_clients + hadoop_clients
        targets = {OURS_GRPC: _rows_of(grpc_clients, _grpc_call), OURS_HADOOP: _rows_of(hadoop_clients, _hadoop_call)}
        result: dict[str, Any] = {"leader": cluster.scms[leader].node_id}
        if ozone is not None:
            ozone_leader = await ozone_anchor.probe_leader(ozone)
            ozone_clients = [BlockLocationClient([ozone_anchor.block_address(ozone_leader)]) for _ in range(args.clients)]
            opened += ozone_clients
            await _until_allocation(_hadoop_call(ozone_clients[0], 1), "Ozone's SCM")
            targets[OZONE_HADOOP] = _rows_of(ozone_clients, _hadoop_call)
            result["ozone_leader"] = ozone_leader.node_id
        samples, loads = await interleave.run_rounds(
            targets, [name for name, _ in ROWS], rounds=args.rounds, warmup_rounds=args.warmup_rounds,
            clients=args.clients, seconds=args.seconds, measure=measure)
        return {**result, "targets": list(targets), "samples": samples, "loads": loads}
    finally:
        for c in opened:
            await c.close()
        if sim is not None:
            await sim.stop()
        cluster.stop_all()


def start_ozone(args: argparse.Namespace, tmp: Path) -> tuple[Any, dict[str, Any]]:
    """Ozone's ring, started before ours (its start takes minutes; ours then starts with it already running):
    (the ring, what to record) or (None, {"error": why}) when its jars cannot be had."""
    if args.no_ozone:
        return None, {}
    classpath, note = ozone_anchor.classpath_or_reason()
    if classpath is None:
        return None, {"error": note}
    cluster = ozone_anchor.start_ring(tmp / "ozone", classpath, OZONE_OVERRIDES)
    return cluster, {"jars": note, "start_seconds": round(cluster.timings.steps["Ozone ring + datanodes ready"], 1)}


def report(result: dict[str, Any], args: argparse.Namespace) -> str:
    """The tables: the rounds with their load, each row per target (median [lowest-highest round]), the ratios."""
    samples: list[interleave.Sample] = result["samples"]
    summary = interleave.summarize(samples)
    lines = [f"\nblock protocol through each leader (ours: {result['leader']}"
             + (f", Ozone's: {result['ozone_leader']}" if "ozone_leader" in result else "")
             + f"), {args.clients} clients; {args.rounds} interleaved rounds of {args.seconds:g} s a row"
             f" after {args.warmup_rounds} warm-up round(s), the targets' order alternating",
             f"{'round':>5}  {'load at start':<16} {'load at end':<16}"]
    for load in result["loads"]:
        tag = " (warm-up)" if load.warmup else ""
        lines.append(f"{load.round:>5}  {_load(load.start):<16} {_load(load.end):<16}{tag}")
    lines.append(f"{'row':<22} {'target':<18} {'calls/s median [low-high]':>27} {'p50 ms':>16} {'p99 ms':>16}")
    for name, _ in ROWS:
        for target in result["targets"]:
            got = summary[name][target]
            lines.append(f"{name:<22} {target:<18} {got['calls_per_s'].text():>27} {got['p50_ms'].text('.2f'):>16}"
                         f" {got['p99_ms'].text('.2f'):>16}")
    pairs = [(OURS_HADOOP, OURS_GRPC, "Hadoop RPC / gRPC, our ring (goal >= 1.0)")]
    if OZONE_HADOOP in result["targets"]:
        pairs.insert(0, (OURS_HADOOP, OZONE_HADOOP, "ours / Ozone's over Hadoop RPC (goal >= 1.0)"))
    for numerator, denominator, title in pairs:
        lines.append(f"{title}, round by round, median [low-high]:")
        for name, _ in ROWS:
            r = interleave.ratio(samples, name, numerator, denominator)
            lines.append(f"  {name:<24} {r.text('.2f') if r is not None else 'not measured'}")
    return "\n".join(lines)


def _load(values: tuple[float, float, float]) -> str:
    return " ".join(f"{v:.2f}" for v in values)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=4, help="concurrent callers per row (default 4)")
    p.add_argument("--seconds", type=float, default=3.0, help="duration of each row in each round (default 3)")
    p.add_argument("--rounds", type=int, default=5, help="measured rounds (default 5)")
    p.add_argument("--warmup-rounds", type=int, default=1, help="rounds run first and left out of the figures (default 1)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "wire.json")
    p.add_argument("--no-ozone", action="store_true", help="leave out Ozone's own SCM ring (the anchor)")
    args = p.parse_args()
    if args.rounds < 1 or args.warmup_rounds < 0 or args.seconds <= 0 or args.clients < 1:
        p.error("--rounds and --clients must be at least 1, --warmup-rounds at least 0, --seconds above 0")
    with tempfile.TemporaryDirectory(prefix="bench-wire-") as tmp:
        ozone, ozone_note = start_ozone(args, Path(tmp))
        try:
            result = asyncio.run(run(args, Path(tmp), ozone))
        finally:
            ozone_anchor.stop(ozone)
    print(report(result, args))
    if "error" in ozone_note:
        print(ozone_anchor.banner(ozone_note["error"]))
    elif args.no_ozone:
        print("\nOzone's own SCM ring left out (--no-ozone)")
    summary = interleave.summarize(result["samples"])
    ratios = {f"{num} / {den}": {name: dataclasses.asdict(r) for name, _ in ROWS
                                 if (r := interleave.ratio(result["samples"], name, num, den)) is not None}
              for num, den in ((OURS_HADOOP, OZONE_HADOOP), (OURS_HADOOP, OURS_GRPC))}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "leader": result["leader"], "ozone_leader": result.get("ozone_leader"), "ozone": ozone_note,
        "clients": args.clients, "seconds": args.seconds, "rounds": args.rounds, "warmup_rounds": args.warmup_rounds,
        "loads": [dataclasses.asdict(x) for x in result["loads"]],
        "samples": [dataclasses.asdict(x) for x in result["samples"]],
        "summary": {row: {t: {m: dataclasses.asdict(v) for m, v in ms.items()} for t, ms in ts.items()}
                    for row, ts in summary.items()},
        "ratios": ratios, "machine": platform.platform(),
    }, indent=2))
    return 1 if "error" in ozone_note else 0


if __name__ == "__main__":
    sys.exit(main())
