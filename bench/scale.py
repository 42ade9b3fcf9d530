#!/usr/bin/env python3
"""SCM at scale: a 3-SCM HA ring holding 10k / 100k / 1M containers (3 replicas each).

For every size N (``--sizes``) the benchmark builds a fresh ring on loopback and measures, in one run:

* **load**: a member restarted with N containers in scm.db (time until it serves again);
* **allocation**: batched ``AllocateBlocks`` (``--batch`` blocks per call) through the HA leader,
  next to the no-op RPC (``GetScmInfo``) through the same server as its anchor;
* **full container reports**: every datanode's full report (3N replicas over ``--datanodes``
  datanodes) processed by the leader, replicas/s, next to the rate at which this process merely
  decodes the same reports (the floor any Python SCM pays) as its anchor;
* **memory**: RSS of every SCM once it holds N containers and all 3N replicas, next to its RSS with
  an empty container table (the anchor) and the 1 GiB goal;
* **join**: a 4th SCM joins the ring (``scm --init`` + ``--bootstrap``, AddSCM, checkpoint download and
  install, log catch-up, promotion to voter) while a client keeps allocating blocks on the leader;
  the phases come from the new SCM's own log, the anchor is the load time above (what any member
  pays to read N containers), and the allocation p99 during the join is printed next to the p99 of
  the same client just before it.

How the ring gets its containers: Raft would take minutes to create a million containers one by one,
so the ring is started once (Raft group, cluster id), stopped, and the same N CLOSED containers are
written into each member's scm.db (one proto per container, identical bytes on every member, the
``containerId`` sequence moved past them): the members agree, as if the containers had been replicated
and the log purged long ago. The ring runs with a small snapshot threshold and purge gap, so the
joining SCM cannot catch up from the log alone and must install a checkpoint (checked in its log; the
benchmark fails otherwise). Growth: per-operation costs are printed for each N side by side.

Prints a table and writes JSON to bench/results/scale.json. Bounded: about 6-8 minutes for the
defaults on a quiet 2-core machine (the 1M point dominates).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import platform
import re
import shutil
import signal
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from scm_server.client import SCMClient, SCMClientConfig
from scm_server.client.datanode_client import DatanodeProtocolClient
from scm_server.client.retryable import is_answer_or_transient
from scm_server.datanode_sim import DatanodeSimulator
from scm_server.local import throughput
from scm_server.local.quorum import HALocalCluster
from scm_server.metadata.scm_metadata_store import SCMMetadataStore
from scm_server.proto import hdds_pb2, scm_datanode_pb2

ROOT = Path(__file__).resolve().parent.parent

GIB = 1 << 30
SETTINGS = {
    # Nothing expires mid-run (as in scm_throughput.py), the replication manager does not scan the
    # table while we measure, and the log is purged early so a joining SCM needs a checkpoint.
    "hdds.heartbeat.interval": "1s",
    "ozone.scm.stale.node.interval": "300s",
    "ozone.scm.dead.node.interval": "600s",
    "hdds.scm.replication.thread.interval": "600s",
    "ozone.scm.pipeline.creation.interval": "1s",
    "hdds.scm.safemode.min.datanode": "3",
    "ozone.scm.container.size": "5GB",
    "ozone.scm.block.size": "256MB",
    # Ozone's default: the replication manager's first pass waits 5 min after safemode exit (a pass
    # over 1M containers takes the leader tens of seconds; docs/performance.md).
    "hdds.scm.wait.time.after.safemode.exit": "300s",
    "ozone.scm.ha.ratis.snapshot.threshold": "20",
    "ozone.scm.ha.ratis.log.purge.gap": "50",
}
LOG_FILLER = 100  # container allocations (one Raft entry each) before the join: the log start moves past 1
SEED_OWNER = "bench-scale"
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def pct(data: list[float], p: float) -> float:
    if not data:
        return 0.0
    s = sorted(data)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def scm_db_dir(metadata_dir: Path) -> Path:
    found = sorted(metadata_dir.rglob("scm.db"))
    if len(found) != 1:
        raise RuntimeError(f"expected one scm.db under {metadata_dir}, found {found}")
    return found[0].parent


def seed_containers(db_dirs: list[Path], n: int) -> dict[str, Any]:
    """Write the same ``n`` CLOSED containers into every (stopped) member's scm.db."""
    t0 = time.perf_counter()
    stores = [SCMMetadataStore(d, create=False, sync=False) for d in db_dirs]
    try:
        seq = [s.sequence_id.get("containerId") for s in stores]
        first = max((x.lastId for x in seq if x is not None), default=0) + 1
        pipeline = hdds_pb2.PipelineID(id=str(uuid.uuid4()))  # a long-gone pipeline, as for old closed containers
        now_ms = int(time.time() * 1000)
        chunk = 10_000
        for start in range(first, first + n, chunk):
            batches = [s.new_batch(sync=False) for s in stores]
            for cid in range(start, min(first + n, start + chunk)):
                info = hdds_pb2.ContainerInfoProto(
                    containerID=cid, state=hdds_pb2.CLOSED, pipelineID=pipeline, usedBytes=4 << 30,
                    numberOfKeys=1000, stateEnterTime=now_ms, owner=SEED_OWNER, deleteTransactionId=0,
                    sequenceId=cid, replicationFactor=hdds_pb2.THREE, replicationType=hdds_pb2.RATIS,
                )
                for s, b in zip(stores, batches, strict=True):
                    s.containers.put_with_batch(b, cid, info)
            for b in batches:
                b.commit()
        last = first + n - 1
        for s in stores:
            batch = s.new_batch(sync=True)
            s.sequence_id.put_with_batch(batch, "containerId", hdds_pb2.SequenceIdProto(lastId=last))
            batch.commit()
    finally:
        for s in stores:
            s.stop()
    return {"first_id": first, "last_id": last, "seconds": round(time.perf_counter() - t0, 2)}


def build_reports(sim: DatanodeSimulator, first: int, last: int) -> tuple[list[Any], int]:
    """Full heartbeats: container i lives on datanodes i, i+1, i+2 (mod D); 3 replicas each."""
    dns = sim.datanodes
    d = len(dns)
    held: list[list[int]] = [[] for _ in range(d)]
    for cid in range(first, last + 1):
        k = cid % d
        held[k].append(cid)
        held[(k + 1) % d].append(cid)
        held[(k + 2) % d].append(cid)
    reqs = []
    for dn, cids in zip(dns, held, strict=True):
        report = scm_datanode_pb2.ContainerReportsProto(reports=[
            hdds_pb2.ContainerReplicaProto(
                containerID=cid, state=hdds_pb2.ContainerReplicaProto.CLOSED, size=sim.container_size,
                used=4 << 30, keyCount=1000, blockCommitSequenceId=cid, originNodeId=dn.uuid,
            )
            for cid in cids
        ])
        reqs.append(scm_datanode_pb2.SCMHeartbeatRequestProto(
            datanodeDetails=dn.details(), nodeReport=dn.node_report(), containerReport=report))
    return reqs, sum(len(c) for c in held)


def decode_floor(reqs: list[Any]) -> float:
    """Replicas/s at which this process only decodes the same heartbeats and reads each replica's id."""
    blobs = [r.SerializeToString() for r in reqs]
    n = 0
    t0 = time.perf_counter()
    for blob in blobs:
        msg = scm_datanode_pb2.SCMHeartbeatRequestProto.FromString(blob)
        for rep in msg.containerReport.reports:
            n += rep.containerID > 0
    return n / (time.perf_counter() - t0)


async def send_reports(address: str, reqs: list[Any], concurrency: int = 2) -> float:
    """Send every full report to one SCM; seconds until the last one was answered."""
    client = DatanodeProtocolClient(address, timeout=600)
    todo = iter(reqs)

    async def worker() -> None:
        for r in todo:
            await client.send_heartbeat(r)

    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - t0
    finally:
        await client.close()


def log_phases(log_path: Path, since: datetime) -> dict[str, float]:
    """Seconds from ``since`` to the first log line of each join phase of the new SCM."""
    marks = {
        "add_requested": "asking the leader to add it",
        "checkpoint_installed": "installed checkpoint",
        "added_as_voter": "added to the ring by",
    }
    out: dict[str, float] = {}
    for line in log_path.read_text(errors="replace").splitlines():
        m = LOG_TIME.match(line)
        if not m:
            continue
        for name, text in marks.items():
            if name not in out and text in line:
                at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
                out[name] = round((at - since).total_seconds(), 2)
    return out


class AllocLoop:
    """One client allocating a block at a time on the ring (follows the leader), latencies kept."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses
        self.samples: list[tuple[float, float]] = []  # (start monotonic, latency ms)
        self.errors = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        config = SCMClientConfig(max_retries=50, retry_interval=0.1, rpc_timeout=30)
        async with SCMClient(self.addresses, config) as c:
            while not self._stop.is_set():
                t0 = time.monotonic()
                try:
                    await c.allocate_block(4096, 1, hdds_pb2.RATIS, hdds_pb2.THREE, "bench-scale-join")
                except Exception as exc:  # the ring's refusal or absence is counted; a harness error ends the run
                    if not is_answer_or_transient(exc):
                        raise
                    self.errors += 1
                    await asyncio.sleep(0.05)
                    continue
                self.samples.append((t0, (time.monotonic() - t0) * 1000))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    def between(self, a: float, b: float) -> list[float]:
        return [lat for t, lat in self.samples if a <= t < b]


async def wait_joined(cluster: HALocalCluster, index: int, timeout: float) -> dict[str, Any]:
    """Until the new SCM is a voter and its applied index reached the leader's commit index."""
    deadline = time.monotonic() + timeout
    target: int | None = None
    last: Any = None
    while time.monotonic() < deadline:
        try:
            views = await cluster.node_views()
            mine = next((v for v in views if v["index"] == index and "error" not in v), None)
            leader = next((v for v in views if v.get("isLeader")), None)
            if mine is not None and leader is not None:
                roles = await cluster.roles()
                voter = any(p.peer_id == mine["scmId"] and p.role == "FOLLOWER" for p in roles.peers)
                if target is None and voter:
                    target = leader["commit"]
                if voter and target is not None and mine["applied"] >= target:
                    return {"applied": mine["applied"], "leader_commit_at_promotion": target}
                last = {"mine": mine, "voter": voter}
        except Exception as exc:  # the new SCM is not serving yet
            if not is_answer_or_transient(exc):
                raise
            last = repr(exc)
        await asyncio.sleep(0.1)
    raise TimeoutError(f"SCM #{index} did not join within {timeout:.0f}s; last: {last}")


def say(n: int, started: float, what: str) -> None:
    print(f"  [{n:,}] {time.perf_counter() - started:6.1f}s {what}", flush=True)


async def max_term(cluster: HALocalCluster) -> int:
    return max((v.get("term", 0) for v in await cluster.node_views() if "error" not in v), default=0)


async def measure_point(n: int, args: argparse.Namespace, base: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"containers": n, "replicas": 3 * n}
    started = time.perf_counter()
    cluster = HALocalCluster(base / f"ring-{n}", 3, settings=SETTINGS)
    sim: DatanodeSimulator | None = None
    try:
        cluster.start_quorum(timeout=120)
        await cluster.wait_leader(timeout=60)
        empty_rss = [rss_bytes(s.proc.pid) for s in cluster.scms if s.proc is not None]
        cluster.stop_all()
        seed = await asyncio.to_thread(
            seed_containers, [scm_db_dir(s.metadata_dir) for s in cluster.scms], n)
        out["seed"] = seed
        say(n, started, f"seeded {n:,} containers into 3 scm.db in {seed['seconds']} s; restarting the ring")
        # Load: every member restarted on a table of n containers.
        t0 = time.perf_counter()
        for i in range(3):
            cluster.start(i)
        for i in range(3):
            cluster.wait_serving(i, timeout=600)
        await cluster.wait_leader(timeout=120)
        out["load_seconds"] = round(time.perf_counter() - t0, 2)
        term0 = await max_term(cluster)
        say(n, started, f"ring serving again after {out['load_seconds']} s (term {term0}); datanodes, allocation")

        config = SCMClientConfig(max_retries=50, retry_interval=0.2, rpc_timeout=120)
        async with SCMClient(cluster.client_addresses, config) as admin:
            sim = await throughput.prepare_cluster(admin, cluster.datanode_addresses, args.datanodes, 1.0, timeout=180)
            last = await admin.get_container(seed["last_id"])  # the leader loaded the seeded table
            if last.state != hdds_pb2.CLOSED or last.owner != SEED_OWNER:
                raise AssertionError(f"seeded container #{seed['last_id']} reads back as {last}")
            ping = await throughput.bench_ping(admin, args.pings, args.threads)
            alloc, ids = await throughput.bench_allocate_blocks(
                admin, args.blocks, args.threads, 4096, args.batch)
            if len(ids) != len(set(ids)):
                raise AssertionError("duplicate block IDs")
            out["allocation"] = {
                "blocks_per_second": round(alloc.ops_per_second),
                "us_per_block": round(1e6 / alloc.ops_per_second, 2) if alloc.ops_per_second else None,
                "p99_call_ms": round(alloc.percentile(99), 2),
                "noop_rpc_per_second": round(ping.ops_per_second),
                "calls_per_second_vs_noop_rpc": round(alloc.ops_per_second / args.batch / ping.ops_per_second, 3),
            }

        # Full container reports: the leader's time, then the followers' (they hold replicas too).
        leader = await cluster.wait_leader(timeout=60)
        say(n, started, f"allocation {out['allocation']['blocks_per_second']:,} blocks/s; building full reports")
        reqs, replicas = await asyncio.to_thread(build_reports, sim, seed["first_id"], seed["last_id"])
        say(n, started, f"sending {replicas:,} replicas in {len(reqs)} full reports to each SCM (leader first)")
        floor = decode_floor(reqs)
        secs = await send_reports(cluster.scms[leader].datanode_address, reqs)
        for i in range(3):
            if i != leader:
                await send_reports(cluster.scms[i].datanode_address, reqs)
        out["reports"] = {
            "datanodes": len(reqs), "replicas_per_report": round(replicas / len(reqs)),
            "replicas_per_second": round(replicas / secs),
            "us_per_replica": round(secs * 1e6 / replicas, 3),
            "decode_floor_replicas_per_second": round(floor),
            "vs_decode_floor": round(replicas / secs / floor, 3),
        }
        del reqs
        say(n, started, f"reports: leader {out['reports']['replicas_per_second']:,} replicas/s; join next")
        rss = [rss_bytes(s.proc.pid) for s in cluster.scms if s.proc is not None]
        out["memory"] = {
            "rss_mb": [round(r / 2**20, 1) for r in rss],
            "empty_rss_mb": [round(r / 2**20, 1) for r in empty_rss],
            "max_rss_vs_1gib_goal": round(max(rss) / GIB, 3),
            "bytes_per_container_over_empty": round((max(rss) - max(empty_rss)) / n),
        }

        # Join: a 4th SCM, while one client keeps allocating on the leader. First LOG_FILLER more Raft
        # entries, so the leader's log no longer starts at 1 (snapshot threshold 20, purge gap 50).
        async with SCMClient(cluster.client_addresses, config) as admin:
            for _ in range(LOG_FILLER):
                await admin.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "bench-scale-filler")
        loop = AllocLoop(cluster.client_addresses)
        loop.start()
        await asyncio.sleep(args.quiet_seconds)
        t_join = time.monotonic()
        since = datetime.now()
        index = await asyncio.to_thread(cluster.add_scm)  # init + bootstrap (CLI runs), then the daemon
        t_started = time.monotonic()
        joined = await wait_joined(cluster, index, timeout=args.join_timeout)
        t_done = time.monotonic()
        await asyncio.sleep(1.0)
        await loop.stop()
        log = cluster.scms[index].log_path
        if "installed checkpoint" not in log.read_text(errors="replace"):
            raise AssertionError(f"the new SCM caught up without a checkpoint install (see {log}); the join figure "
                                 "would not measure a checkpoint: raise LOG_FILLER")
        before = loop.between(t_join - args.quiet_seconds, t_join)
        during = loop.between(t_join, t_done)
        out["join"] = {
            "seconds": round(t_done - t_join, 2),
            "init_and_bootstrap_cli_seconds": round(t_started - t_join, 2),
            "phases_seconds_from_start": log_phases(log, since),
            **joined,
            "vs_load_seconds": round((t_done - t_join) / out["load_seconds"], 2) if out["load_seconds"] else None,
            "alloc_ops_during": len(during), "alloc_errors": loop.errors,
            "alloc_p50_ms_during": round(pct(during, 50), 2), "alloc_p99_ms_during": round(pct(during, 99), 2),
            "alloc_max_ms_during": round(max(during, default=0.0), 2),
            "alloc_p99_ms_before": round(pct(before, 99), 2),
            "alloc_p99_during_vs_before": round(pct(during, 99) / pct(before, 99), 2) if before else None,
        }
        rss4 = rss_bytes(cluster.scms[index].proc.pid) if cluster.scms[index].proc is not None else 0
        out["join"]["new_scm_rss_mb"] = round(rss4 / 2**20, 1)
        # Elections from the restart on (goal 0: nothing here should cost the leader its lease).
        out["elections_after_restart"] = await max_term(cluster) - term0
        say(n, started, f"joined in {out['join']['seconds']} s; {out['elections_after_restart']} elections")
    finally:
        if sim is not None:
            with contextlib.suppress(Exception):
                await sim.stop()
        for i in range(len(cluster.scms)):
            cluster.kill(i, signal.SIGTERM)
        shutil.rmtree(cluster.base_dir, ignore_errors=True)
    return out


def print_table(points: list[dict[str, Any]]) -> None:
    print("\nSCM at scale (3-SCM HA ring, loopback; each figure next to its anchor from the same run)")
    hdr = f"{'containers':>10} | {'load s':>6} | {'alloc blk/s':>11} {'us/blk':>7} {'vs noop':>7} | " \
          f"{'reports rep/s':>13} {'us/rep':>7} {'vs decode':>9} | {'RSS MB max':>10} {'B/ctr':>6} | " \
          f"{'join s':>6} {'vs load':>7} {'p99 ms before->during':>22}"
    print(hdr)
    print("-" * len(hdr))
    for p in points:
        a, r, m, j = p["allocation"], p["reports"], p["memory"], p["join"]
        print(f"{p['containers']:>10,} | {p['load_seconds']:>6.1f} | {a['blocks_per_second']:>11,} "
              f"{a['us_per_block']:>7} {a['calls_per_second_vs_noop_rpc']:>7} | {r['replicas_per_second']:>13,} "
              f"{r['us_per_replica']:>7} {r['vs_decode_floor']:>9} | {max(m['rss_mb']):>10} "
              f"{m['bytes_per_container_over_empty']:>6} | {j['seconds']:>6} {j['vs_load_seconds']:>7} "
              f"{j['alloc_p99_ms_before']:>9} -> {j['alloc_p99_ms_during']:<9}")
    for p in points:
        j = p["join"]
        print(f"join at {p['containers']:,}: phases (s from start) {j['phases_seconds_from_start']}, "
              f"init+bootstrap CLI {j['init_and_bootstrap_cli_seconds']} s, {j['alloc_ops_during']} allocations "
              f"during it ({j['alloc_errors']} retried), max {j['alloc_max_ms_during']} ms; "
              f"{p.get('elections_after_restart')} elections from the restart to the end (goal 0)")
    print("goals (issue 9): allocation >= 50k blocks/s through the HA leader; reports >= 300k replicas/s; "
          "RSS <= 1 GiB per SCM at 1M x 3; join at 1M <= 20 s; flat us/blk, linear report and join cost")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--datanodes", type=int, default=30)
    p.add_argument("--blocks", type=int, default=150_000, help="blocks allocated per size (about 3 s: long enough that creating the first containers is not most of it)")
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--pings", type=int, default=2000)
    p.add_argument("--quiet-seconds", type=float, default=3.0, help="allocation before the join (p99 anchor)")
    p.add_argument("--join-timeout", type=float, default=600.0)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "scale.json")
    args = p.parse_args()
    # The simulated datanodes warn once per SCM restart ("catching up with the leader"): expected here.
    logging.getLogger("scm_server.datanode_sim").setLevel(logging.ERROR)
    started = time.perf_counter()
    base = Path(tempfile.mkdtemp(prefix="scm-scale-"))
    points: list[dict[str, Any]] = []
    try:
        for n in args.sizes:
            t0 = time.perf_counter()
            point = asyncio.run(measure_point(n, args, base))
            point["wall_seconds"] = round(time.perf_counter() - t0, 1)
            points.append(point)
            print(f"[{n:,} containers] {json.dumps(point)}", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    out = {
        "points": points,
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count(),
                    "platform": platform.platform()},
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    if len(points) > 1:
        base_p = points[0]
        out["growth"] = [{
            "containers": pt["containers"],
            "us_per_block_vs_smallest": round(pt["allocation"]["us_per_block"] / base_p["allocation"]["us_per_block"], 2),
            "us_per_replica_vs_smallest": round(pt["reports"]["us_per_replica"] / base_p["reports"]["us_per_replica"], 2),
            "join_seconds_per_100k": round(pt["join"]["seconds"] / pt["containers"] * 1e5, 2),
        } for pt in points]
    print_table(points)
    if "growth" in out:
        for g in out["growth"]:
            print(f"growth at {g['containers']:,}: us/block x{g['us_per_block_vs_smallest']} and us/replica "
                  f"x{g['us_per_replica_vs_smallest']} of the smallest size; join {g['join_seconds_per_100k']} s "
                  "per 100k containers")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out} ({out['wall_seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
