#!/usr/bin/env python3
"""SCM throughput benchmark, modelled on Ozone's SCMThroughputBenchmark (``freon stb``).

Starts its own single SCM process on loopback (or targets ``--scm``), registers simulated
datanodes over the real gRPC protocol, force-exits safemode, then measures:

* NoOpRpc (GetScmInfo): the baseline — a gRPC round trip through the same server doing no work;
* AllocateBlocks, one block per call and ``--batch`` blocks per call;
* AllocateContainers;
* ProcessReports: full container reports from the simulated datanodes (counted on /prom);
* memory: RSS of the SCM process before/after allocating ``--memory-containers`` containers,
  extrapolated linearly to 1M containers (stated as an extrapolation);
* a raw plyvel put loop on the same machine as a second baseline.

Prints a table and writes JSON to bench/results/scm_throughput.json. Bounded: ~1-2 minutes
with the defaults. The measuring code is ``scm_server.local.throughput`` (also behind
``ozone-scm freon stb``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scm_server.client import SCMClient, SCMClientConfig, parse_addresses
from scm_server.local import throughput
from scm_server.local.cluster import LocalCluster
from scm_server.proto import hdds_pb2

ROOT = Path(__file__).resolve().parent.parent

BENCH_SETTINGS = {
    # Ozone's stb Javadoc asks for long heartbeat/stale/dead intervals so nothing expires mid-run.
    "hdds.heartbeat.interval": "1s",
    "ozone.scm.stale.node.interval": "90s",
    "ozone.scm.dead.node.interval": "180s",
    "hdds.scm.replication.thread.interval": "60s",
    "ozone.scm.pipeline.creation.interval": "1s",
    "hdds.scm.safemode.min.datanode": "3",
    "ozone.scm.container.size": "5GB",
    "ozone.scm.block.size": "256MB",
}


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def plyvel_baseline(n: int) -> dict[str, Any]:
    import plyvel

    tmp = Path(tempfile.mkdtemp(prefix="plyvel-bench-"))
    try:
        db = plyvel.DB(str(tmp / "db"), create_if_missing=True)
        value = b"x" * 128
        t0 = time.perf_counter()
        for i in range(n):
            db.put(i.to_bytes(8, "big"), value)
        unsynced = n / (time.perf_counter() - t0)
        m = max(n // 20, 50)
        t0 = time.perf_counter()
        for i in range(m):
            db.put((n + i).to_bytes(8, "big"), value, sync=True)
        synced = m / (time.perf_counter() - t0)
        db.close()
        return {"plyvel_put_ops_per_second": round(unsynced), "plyvel_synced_put_ops_per_second": round(synced)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def allocate_many(admin: SCMClient, n: int, threads: int) -> float:
    counter = iter(range(n))

    async def worker() -> None:
        for _ in counter:
            await admin.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "bench-memory")

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(threads)))
    return time.perf_counter() - t0


async def run(args: argparse.Namespace, admin_addrs: list[str], dn_addrs: list[str], http_url: str | None,
              scm_pids: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {"results": []}
    config = SCMClientConfig(max_retries=15, retry_interval=0.2, rpc_timeout=120)
    async with SCMClient(admin_addrs, config) as admin:
        sim = await throughput.prepare_cluster(admin, dn_addrs, args.num_datanodes, heartbeat_interval=1.0)
        try:
            results = [await throughput.bench_ping(admin, args.ping_calls, args.num_threads)]
            single, ids1 = await throughput.bench_allocate_blocks(
                admin, args.num_blocks, args.num_threads, args.block_size, 1
            )
            batched, ids2 = await throughput.bench_allocate_blocks(
                admin, args.num_blocks * args.batch_factor, args.num_threads, args.block_size, args.batch
            )
            all_ids = ids1 + ids2
            assert len(all_ids) == len(set(all_ids)), "duplicate block IDs"
            results += [single, batched]
            results.append(await throughput.bench_allocate_containers(admin, args.num_containers, args.num_threads))
            results.append(await throughput.bench_process_reports(
                admin, sim, args.report_containers, args.num_heartbeats, args.num_threads, http_url
            ))
            out["results"] = [r.as_dict() for r in results]
            ping = results[0].ops_per_second
            out["baseline"] = {
                "noop_rpc_ops_per_second": round(ping, 1),
                "allocate_block_vs_noop_rpc": round(single.ops_per_second / ping, 3) if ping else None,
                "allocate_blocks_batched_vs_noop_rpc": round(batched.ops_per_second / ping, 3) if ping else None,
                **plyvel_baseline(args.plyvel_puts),
            }
            if scm_pids and args.memory_containers > 0:
                # With several SCMs every one holds all containers: take the largest growth.
                before_all = [rss_bytes(pid) for pid in scm_pids]
                secs = await allocate_many(admin, args.memory_containers, max(args.num_threads, 8))
                after_all = [rss_bytes(pid) for pid in scm_pids]
                i = max(range(len(scm_pids)), key=lambda k: after_all[k] - before_all[k])
                before, after = before_all[i], after_all[i]
                per_container = (after - before) / args.memory_containers
                out["memory"] = {
                    "containers_created": args.memory_containers,
                    "seconds": round(secs, 2),
                    "rss_before_mb": round(before / 2**20, 1),
                    "rss_after_mb": round(after / 2**20, 1),
                    "bytes_per_container": round(per_container),
                    "rss_per_1M_containers_mb_extrapolated": round(per_container * 1_000_000 / 2**20, 1),
                    "note": "linear extrapolation from the RSS growth of the SCM process while creating "
                            f"{args.memory_containers} containers (includes allocator slack, so it overstates "
                            "the cost at scale); bench/scale.py measures RSS with 1M containers loaded",
                }
        finally:
            await sim.stop()
    return out


def print_table(out: dict[str, Any]) -> None:
    print(f"{'benchmark':34} {'ops':>8} {'ops/s':>10} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8}")
    for r in out["results"]:
        lat = r["latency_ms"]
        print(f"{r['mode']:34} {r['operations']:>8} {r['ops_per_second']:>10,.0f} "
              f"{lat['p50']:>8.2f} {lat['p90']:>8.2f} {lat['p99']:>8.2f}")
    for r in out["results"]:
        if r["mode"] == "ProcessReports":
            print(f"ProcessReports: {r.get('replicas_per_report')} replicas/report, "
                  f"{r.get('replicas_per_second'):,} replicas/s, SCM /prom counted {r.get('reports_counted_by_scm_prom')}")
    b = out.get("baseline", {})
    print(f"baseline: no-op RPC {b.get('noop_rpc_ops_per_second'):,} ops/s; AllocateBlock = "
          f"{b.get('allocate_block_vs_noop_rpc')} x no-op RPC; batched = {b.get('allocate_blocks_batched_vs_noop_rpc')} x; "
          f"plyvel put {b.get('plyvel_put_ops_per_second'):,}/s (synced {b.get('plyvel_synced_put_ops_per_second'):,}/s)")
    if "memory" in out:
        m = out["memory"]
        print(f"memory: {m['containers_created']} containers grew SCM RSS {m['rss_before_mb']} -> {m['rss_after_mb']} MB "
              f"= {m['bytes_per_container']} B/container ~ {m['rss_per_1M_containers_mb_extrapolated']} MB per 1M "
              "containers (extrapolated; bench/scale.py measures 1M)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scm", help="client address(es) of running SCM(s), comma-separated (default: start our own)")
    p.add_argument("--scm-datanode", help="datanode-protocol address(es) of those SCMs, comma-separated")
    p.add_argument("--scms", type=int, default=1,
                   help="SCM processes to start when --scm is not given: 1 = single SCM, 3 = HA quorum")
    p.add_argument("--scm-http", help="http address of that SCM (for /prom)")
    p.add_argument("--num-blocks", type=int, default=3000)
    p.add_argument("--batch", type=int, default=100, help="numBlocks per call in the batched run")
    p.add_argument("--batch-factor", type=int, default=10, help="batched run allocates num-blocks x this")
    p.add_argument("--num-threads", type=int, default=8)
    p.add_argument("--num-containers", type=int, default=500)
    p.add_argument("--report-containers", type=int, default=2000)
    p.add_argument("--num-datanodes", type=int, default=10)
    p.add_argument("--num-heartbeats", type=int, default=4)
    p.add_argument("--block-size", type=int, default=4096)
    p.add_argument("--ping-calls", type=int, default=2000)
    p.add_argument("--plyvel-puts", type=int, default=100_000)
    p.add_argument("--memory-containers", type=int, default=5_000)
    p.add_argument("--out", type=Path, default=None, help="default bench/results/scm_throughput[_ha<N>].json")
    args = p.parse_args()
    if args.out is None:
        suffix = f"_ha{args.scms}" if args.scms > 1 and not args.scm else ""
        args.out = ROOT / "bench" / "results" / f"scm_throughput{suffix}.json"

    started = time.perf_counter()
    cluster: LocalCluster | None = None  # an HALocalCluster when --scms > 1
    tmp: Path | None = None
    try:
        if args.scm:
            admin_addrs = parse_addresses(args.scm)
            dn_addrs = parse_addresses(args.scm_datanode or args.scm)
            http_url = f"http://{args.scm_http}" if args.scm_http else None
            pids: list[int] = []
        else:
            tmp = Path(tempfile.mkdtemp(prefix="scm-bench-"))
            if args.scms > 1:
                from scm_server.local.quorum import HALocalCluster

                cluster = HALocalCluster(tmp, args.scms, settings=BENCH_SETTINGS)
                cluster.start_quorum()
            else:
                cluster = LocalCluster(tmp, 1, settings=BENCH_SETTINGS)
                cluster.write_configs()
                cluster.init()
                cluster.start(0)
                cluster.wait_serving(0, timeout=60)
            admin_addrs, dn_addrs = cluster.client_addresses, cluster.datanode_addresses
            http_url = cluster.scms[0].http_url
            pids = [s.proc.pid for s in cluster.scms if s.proc is not None]
        out = asyncio.run(run(args, admin_addrs, dn_addrs, http_url, pids))
    finally:
        if cluster is not None:
            cluster.stop_all()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    out["machine"] = {"python": platform.python_version(), "cpus": __import__("os").cpu_count(),
                      "platform": platform.platform()}
    out["scm"] = (
        "external " + args.scm if args.scm
        else "single SCM process started by the benchmark" if args.scms == 1
        else f"{args.scms}-SCM HA quorum started by the benchmark"
    )
    out["wall_seconds"] = round(time.perf_counter() - started, 1)
    print_table(out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out} ({out['wall_seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
