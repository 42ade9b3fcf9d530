#!/usr/bin/env python3
"""SCM HA benchmark: client-observed failover time and HA block-allocation throughput.

1. **Failover** (``--runs``, default 10): a 3-SCM quorum (separate processes on loopback, fsync on,
   our default Raft timing: tick 100 ms, election timeout 1 s randomised to [1 s, 2 s)) with
   simulated datanodes and ``--clients`` failover clients allocating blocks continuously (overall
   deadline: Ozone's 15 minutes). Each run faults the leader and measures the *client-observed
   unavailability*: from the signal to the first successful allocateBlock that was started after it.
   ``--fault kill`` (default): SIGKILL; the SCM is then restarted (init + bootstrap + start) and the
   next run waits until it caught up. ``--fault stop``: SIGSTOP (a frozen leader: its connections
   stay open), SIGCONT once the clients are served again; every run of it is paired with a SIGKILL
   run in the same quorum, so the two figures are measured side by side (goal: stop within 1.5x of
   kill). Prints median / p90 / p99 / max. Anchor: Ozone's defaults (5 s election timeout, 2 s client
   failover interval: ozone.scm.ha.ratis.leader.election.timeout, hdds.scmclient.failover.retry.interval)
   give about 5-8 s; bench/failover_ozone.py measures Ozone's own ring beside ours over Hadoop RPC.
2. **Throughput**: ``scm_server.local.throughput`` (the code behind ``bench/scm_throughput.py`` and
   ``freon stb``): AllocateBlocks (1 per call and batched) and AllocateContainers against a single
   SCM and against the 3-SCM quorum, same client settings; prints the HA/single ratio (goal:
   block allocation within 30 %, thanks to ID batching: one Raft round trip per 1000 IDs).

Writes bench/results/failover.json. Bounded: about 2-3 minutes with the defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scm_server.client import SCMClient, SCMClientConfig
from scm_server.exceptions import SCMError
from scm_server.local import throughput
from scm_server.local.cluster import LocalCluster
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
}
# The client: retry quickly across SCMs (Ozone's default interval is 2 s); Ozone's overall deadline.
CLIENT = SCMClientConfig(max_retries=500, retry_interval=0.05, rpc_timeout=900)


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))
    return s[k]


class Load:
    def __init__(self, addresses: list[str], clients: int, security: Any = None) -> None:
        self.addresses = addresses
        self.clients = clients
        self.security = security  # the admin's client certificate on a secure cluster
        self.done: list[tuple[float, float]] = []  # (start, end) of successful ops
        self.ids: list[tuple[int, int]] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.get_running_loop().create_task(self._run(i)) for i in range(self.clients)]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    async def _run(self, i: int) -> None:
        async with SCMClient(self.addresses, CLIENT, security=self.security) as c:
            while not self._stop.is_set():
                t0 = time.monotonic()
                try:
                    blocks = await c.allocate_block(4096, 1, hdds_pb2.RATIS, hdds_pb2.THREE, f"failover-{i}")
                except (SCMError, OSError):
                    await asyncio.sleep(0.01)
                    continue
                self.done.append((t0, time.monotonic()))
                self.ids.extend((b.containerBlockID.containerID, b.containerBlockID.localID) for b in blocks)

    def first_success_after(self, t: float) -> float | None:
        ends = [end for start, end in self.done if start >= t]
        return min(ends) if ends else None


def _summary(samples: list[float]) -> dict[str, Any]:
    return {
        "median": round(statistics.median(samples), 3), "p90": round(pct(samples, 90), 3),
        "p99": round(pct(samples, 99), 3), "max": round(max(samples), 3), "samples": [round(s, 3) for s in samples],
    }


async def _one_fault(cluster: HALocalCluster, load: Load, fault: str) -> tuple[float, float]:
    """Fault the leader once; (seconds until a new leader was seen, client-observed gap)."""
    leader = await cluster.wait_leader(timeout=30)
    n = len(load.done)
    deadline = time.monotonic() + 30
    while len(load.done) < n + 200 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    proc = cluster.scms[leader].proc
    assert proc is not None
    fault_at = time.monotonic()
    if fault == "kill":
        cluster.kill(leader, signal.SIGKILL)
    else:
        proc.send_signal(signal.SIGSTOP)
    try:
        new = await cluster.wait_leader(timeout=30, exclude=leader)
        elected = time.monotonic() - fault_at
        deadline = time.monotonic() + 60
        while load.first_success_after(fault_at) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    finally:
        if fault == "stop":
            proc.send_signal(signal.SIGCONT)
    first = load.first_success_after(fault_at)
    if first is None:
        raise RuntimeError(f"no client success within 60 s of the {fault} fault")
    print(f"  {fault:4}: {cluster.scms[leader].node_id} -> new leader {cluster.scms[new].node_id} seen after "
          f"{elected:.2f}s, clients served again after {first - fault_at:.2f}s", flush=True)
    if fault == "kill":
        cluster.start_node(leader)
        cluster.wait_serving(leader, 60)
    await _caught_up(cluster)
    return elected, first - fault_at


async def failover_runs(cluster: HALocalCluster, runs: int, clients: int, fault: str) -> dict[str, Any]:
    admin = SCMClient(cluster.client_addresses, CLIENT, security=cluster.client_security)
    sim = await throughput.prepare_cluster(admin, cluster.datanode_addresses, 3, heartbeat_interval=1.0,
                                           security=cluster.datanode_security())
    await admin.close()
    load = Load(cluster.client_addresses, clients, security=cluster.client_security)
    load.start()
    faults = ["kill"] if fault == "kill" else ["stop", "kill"]
    samples: dict[str, list[float]] = {f: [] for f in faults}
    elections: dict[str, list[float]] = {f: [] for f in faults}
    try:
        await cluster.wait_healthy_quorum(timeout=120)
        for run in range(runs):
            print(f" run {run + 1}/{runs}", flush=True)
            for f in faults:
                elected, gap = await _one_fault(cluster, load, f)
                samples[f].append(gap)
                elections[f].append(elected)
    finally:
        await load.stop()
        await sim.stop()
    dup = len(load.ids) - len(set(load.ids))
    if dup:
        raise AssertionError(f"{dup} duplicate block IDs across failovers")
    out: dict[str, Any] = {
        "runs": runs,
        "clients": clients,
        "unavailability_s": {f: _summary(v) for f, v in samples.items()},
        "leader_seen_after_s_median": {f: round(statistics.median(v), 3) for f, v in elections.items()},
        "blocks_allocated": len(load.ids),
        "duplicate_block_ids": dup,
    }
    if "stop" in samples:
        out["stop_over_kill_median"] = round(
            statistics.median(samples["stop"]) / statistics.median(samples["kill"]), 2
        )
    return out


async def _caught_up(cluster: HALocalCluster, timeout: float = 60) -> None:
    """Every SCM has applied the leader's commit index and is out of safemode.

    Out of safemode too: a restarted SCM leaves safemode only once datanodes reported to it, and the
    next fault may make it the leader, which then refuses allocations (SAFE_MODE_EXCEPTION) for as long
    as it stays in safemode. The benchmark measures failover between ready members, not that wait."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        views = await cluster.node_views()
        leaders = [v for v in views if v.get("isLeader")]
        if len(views) == cluster.num_scms and len(leaders) == 1 and all(
            "error" not in v and v["applied"] >= leaders[0]["commit"] for v in views
        ):
            break
        await asyncio.sleep(0.1)
    else:
        raise TimeoutError("the restarted SCM did not catch up")
    while True:
        in_safe_mode = []
        for address in cluster.client_addresses:
            async with SCMClient([address], CLIENT, local_read=True, security=cluster.client_security) as c:
                try:
                    if (await c.in_safe_mode()).in_safe_mode:
                        in_safe_mode.append(address)
                except SCMError as exc:
                    in_safe_mode.append(f"{address} ({exc})")
        if not in_safe_mode:
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"SCMs still in safemode {timeout:.0f} s after the restart: {', '.join(in_safe_mode)}")
        await asyncio.sleep(0.2)


async def _measure(admin: SCMClient, args: argparse.Namespace) -> dict[str, Any]:
    single, ids1 = await throughput.bench_allocate_blocks(admin, args.blocks, args.threads, 4096, 1)
    batched, ids2 = await throughput.bench_allocate_blocks(admin, args.blocks * 10, args.threads, 4096, 100)
    containers = await throughput.bench_allocate_containers(admin, args.containers, args.threads)
    ids = ids1 + ids2
    assert len(ids) == len(set(ids)), "duplicate block IDs"
    return {r.mode: r.ops_per_second for r in (single, batched, containers)}


async def compare(single: LocalCluster, ha: HALocalCluster, args: argparse.Namespace) -> dict[str, Any]:
    """Both clusters up (the idle one costs little CPU); rounds alternate single / HA so that load
    from other processes on this shared machine hits both alike; medians are reported."""
    rounds: dict[str, list[dict[str, Any]]] = {"single_scm": [], "ha_3_scms": []}
    async with SCMClient(single.client_addresses, CLIENT) as a1, SCMClient(ha.client_addresses, CLIENT) as a3:
        sim1 = await throughput.prepare_cluster(a1, single.datanode_addresses, 3, heartbeat_interval=1.0)
        sim3 = await throughput.prepare_cluster(a3, ha.datanode_addresses, 3, heartbeat_interval=1.0)
        try:
            for admin in (a1, a3):
                await throughput.bench_allocate_blocks(admin, 500, args.threads, 4096, 1)  # warm-up
            for _ in range(args.rounds):
                rounds["single_scm"].append(await _measure(a1, args))
                rounds["ha_3_scms"].append(await _measure(a3, args))
        finally:
            await sim1.stop()
            await sim3.stop()
    out: dict[str, Any] = {"rounds": args.rounds}
    for name, rs in rounds.items():
        out[name] = {mode: {"ops_per_second_median": round(statistics.median(r[mode] for r in rs), 1),
                            "ops_per_second_rounds": [round(r[mode], 1) for r in rs]} for mode in rs[0]}
    out["ha_over_single"] = {
        mode: round(out["ha_3_scms"][mode]["ops_per_second_median"] / v["ops_per_second_median"], 3)
        for mode, v in out["single_scm"].items() if v["ops_per_second_median"]
    }
    return out


def run_throughput(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    single = LocalCluster(tmp / "single", 1, settings=SETTINGS)
    ha = HALocalCluster(tmp / "ha", 3, settings=SETTINGS)
    try:
        single.write_configs()
        single.init()
        single.start(0)
        single.wait_serving(0, 60)
        ha.start_quorum()
        return asyncio.run(compare(single, ha, args))
    finally:
        single.stop_all()
        ha.stop_all()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--blocks", type=int, default=3000)
    p.add_argument("--containers", type=int, default=300)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3, help="alternating single/HA measurement rounds")
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--skip-failover", action="store_true")
    p.add_argument("--fault", choices=["kill", "stop"], default="kill",
                   help="kill: SIGKILL the leader; stop: SIGSTOP it (frozen), each run paired with a SIGKILL")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "failover.json")
    args = p.parse_args()
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="scm-failover-"))
    out: dict[str, Any] = {}
    try:
        if not args.skip_failover:
            what = "SIGKILLs" if args.fault == "kill" else "SIGSTOPs (each paired with a SIGKILL)"
            print(f"failover: {args.runs} {what} of the leader of a 3-SCM quorum, {args.clients} clients", flush=True)
            cluster = HALocalCluster(tmp / "failover", 3, settings=SETTINGS)
            try:
                cluster.start_quorum()
                out["failover"] = asyncio.run(failover_runs(cluster, args.runs, args.clients, args.fault))
            finally:
                cluster.stop_all()
        if not args.skip_throughput:
            print("throughput: single SCM vs 3-SCM quorum", flush=True)
            out["throughput"] = run_throughput(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["settings"] = {"tick": "100ms", "election_timeout": "1s randomised to [1s, 2s)", "fsync": True,
                       "client_retry_interval_s": CLIENT.retry_interval}
    out["machine"] = {"python": platform.python_version(), "cpus": __import__("os").cpu_count()}
    out["wall_seconds"] = round(time.perf_counter() - started, 1)
    if "failover" in out:
        print(f"\nclient-observed unavailability after a fault of the leader, {args.runs} runs each "
              f"(goal < 2 s median for SIGKILL, SIGSTOP within 1.5x of it; Ozone defaults ~5-8 s):")
        for f, u in out["failover"]["unavailability_s"].items():
            name = {"kill": "SIGKILL", "stop": "SIGSTOP"}[f]
            print(f"  {name}: median {u['median']:.2f}s, p90 {u['p90']:.2f}s, p99 {u['p99']:.2f}s, max {u['max']:.2f}s")
        if "stop_over_kill_median" in out["failover"]:
            print(f"  SIGSTOP / SIGKILL (medians): {out['failover']['stop_over_kill_median']:.2f}x")
    if "throughput" in out:
        t = out["throughput"]
        print(f"{'mode':28} {'single ops/s':>13} {'HA ops/s':>10} {'HA/single':>10}")
        for mode, r in t["single_scm"].items():
            print(f"{mode:28} {r['ops_per_second_median']:>13,.0f} {t['ha_3_scms'][mode]['ops_per_second_median']:>10,.0f} "
                  f"{t['ha_over_single'].get(mode, float('nan')):>10.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out} ({out['wall_seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
