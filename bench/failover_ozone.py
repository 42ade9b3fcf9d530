#!/usr/bin/env python3
"""Failover with Ozone's own SCM ring as the anchor: SIGKILL of the leader under allocation over Hadoop RPC.

Two rings, one after the other in the same run (each alone on the machine while measured):

* **ours**: a 3-SCM quorum (separate processes on loopback, our shipped defaults: fsync on, tick 100 ms,
  election timeout 1 s randomised to [1 s, 2 s)) with simulated datanodes, its Hadoop RPC block listeners on;
* **Ozone's**: Apache Ozone 2.2.0's own 3-SCM HA ring (Java, Ratis; its shipped election timeout
  ``ozone.scm.ha.ratis.leader.election.timeout=5s``) with three real Ozone datanodes (bench/ozone_anchor.py).

Both are driven by the same Python Hadoop RPC client (``scm_server.client.hadoop_rpc.BlockLocationClient``, given
all three block addresses: it follows a ServerNotLeaderException's hint when it names one of them and otherwise
tries the next SCM after 50 ms): ``--clients`` callers allocate one block per call continuously. Each of
``--runs`` runs SIGKILLs the current leader and measures the **allocation gap**: from the kill to the first
successful AllocateScmBlock among calls started after it. The killed SCM is then started again and the next run
waits until it is back (ours: caught up and out of safe mode; Ozone's: its log says it left safe mode).
``--ozone-fast-election`` adds runs of Ozone's ring with its election timeout set to ours (1 s) after a rolling
restart. Prints median / max per ring and ours/Ozone.

``--secure`` measures the secure rings instead (bench/failover_secure.py): ours and Ozone's own 3-SCM ring, each in
secure mode (Kerberos with a real MIT KDC on loopback, its own CA, block tokens, gRPC TLS) with Ozone's datanodes
and OM on it: the time from the ring's start to the first key put, the allocation gap after SIGKILL of the leader
(Kerberized Hadoop RPC callers), and every acknowledged key read back; printed side by side with ours/Ozone.
Writes bench/results/failover_ozone_secure.json; every wait has a deadline (its duration: docs/performance.md).

Needs Ozone's jars (make ozone-jars); without them it prints a banner saying so and exits 1. Writes
bench/results/failover_ozone.json. Bounded: about 1 minute for ours, 4-6 for Ozone's ring with 5 runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if not __package__:  # `python bench/failover_ozone.py`: import bench.* and tests.* from this checkout, as `python -m` does
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import failover as ha_failover
from bench import ozone_anchor
from bench.hadoop_load import RETRY_INTERVAL, HadoopLoad, gap_after
from scm_server.client import SCMClient
from scm_server.local import throughput
from scm_server.local.quorum import HALocalCluster

ROOT = Path(__file__).resolve().parent.parent

# the same sizes on Ozone's ring as bench/failover.py gives ours
OZONE_OVERRIDES = {"ozone.scm.container.size": "5GB", "ozone.scm.block.size": "256MB"}


def summary(gaps: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(gaps), 3), "max": round(max(gaps), 3),
            "samples": [round(g, 3) for g in gaps]}


def check_ids(load: HadoopLoad, ring: str) -> int:
    dup = len(load.ids) - len(set(load.ids))
    if dup:
        raise AssertionError(f"{ring}: {dup} duplicate block IDs across failovers")
    return dup


# ---------------------------------------------------------------------------------------------------- our ring

async def ours_runs(cluster: HALocalCluster, hadoop_ports: list[int], runs: int, clients: int) -> dict[str, Any]:
    admin = SCMClient(cluster.client_addresses, ha_failover.CLIENT, security=cluster.client_security)
    sim = await throughput.prepare_cluster(admin, cluster.datanode_addresses, 3, heartbeat_interval=1.0,
                                           security=cluster.datanode_security())
    await admin.close()
    load = HadoopLoad([f"127.0.0.1:{p}" for p in hadoop_ports], clients)
    load.start()
    gaps: list[float] = []
    try:
        await cluster.wait_healthy_quorum(timeout=120)
        for run in range(runs):
            await load.steady()
            leader = await cluster.wait_leader(timeout=30)  # right before the kill: the SCM leading now
            fault_at = time.monotonic()
            cluster.kill(leader, signal.SIGKILL)
            gap = await gap_after(load, fault_at)
            new = await cluster.wait_leader(timeout=30, exclude=leader)
            print(f"  ours  run {run + 1}/{runs}: SIGKILL {cluster.scms[leader].node_id} -> "
                  f"{cluster.scms[new].node_id}, allocation gap {gap:.2f} s (load {ozone_anchor.loadavg()})",
                  flush=True)
            gaps.append(gap)
            cluster.start_node(leader)
            cluster.wait_serving(leader, 60)
            await ha_failover._caught_up(cluster)
    finally:
        await load.stop()
        await sim.stop()
    return {**summary(gaps), "allocations": len(load.ids), "duplicate_block_ids": check_ids(load, "ours"),
            "failed_attempts": load.refusals, "election_timeout": "1s randomised to [1s, 2s) (shipped default)"}


def run_ours(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    cluster = HALocalCluster(tmp / "ours", 3, settings=dict(ha_failover.SETTINGS))
    hadoop_ports = [s.hadoop_ports["block"] for s in cluster.scms]  # Ozone's ozone.scm.block.client.port
    try:
        cluster.start_quorum()
        return asyncio.run(ours_runs(cluster, hadoop_ports, args.runs, args.clients))
    finally:
        cluster.stop_all()


# ---------------------------------------------------------------------------------------------------- Ozone's ring

async def ozone_runs(cluster: ozone_anchor.AnchorCluster, runs: int, clients: int, label: str) -> dict[str, Any]:
    load = HadoopLoad([ozone_anchor.block_address(s) for s in cluster.scms], clients)
    load.start()
    gaps: list[float] = []
    restarts: list[float] = []
    since = time.time()
    try:
        for run in range(runs):
            await load.steady()
            # right before the kill: the SCM answering as leader now (under load Ozone's ring sometimes elects
            # another leader without a fault, so a leader found earlier may no longer be the one serving)
            leader = await ozone_anchor.probe_leader(cluster)
            # the signal right here, in the event loop: a hop to a thread first would let the clients' next calls
            # reach the leader after fault_at and before its death (measured 0.00-0.01 s gaps that way)
            proc = cluster.procs[leader.node_id].popen
            fault_at = time.monotonic()
            os.killpg(proc.pid, signal.SIGKILL)
            await asyncio.to_thread(proc.wait, 30)
            gap = await gap_after(load, fault_at)
            new = await ozone_anchor.probe_leader(cluster)
            print(f"  Ozone ({label}) run {run + 1}/{runs}: SIGKILL {leader.node_id} -> {new.node_id}, "
                  f"allocation gap {gap:.2f} s (load {ozone_anchor.loadavg()})", flush=True)
            gaps.append(gap)
            restarts.append(await asyncio.to_thread(ozone_anchor.restart_scm, cluster, leader))
    finally:
        await load.stop()
    elections = ozone_anchor.elections_since(cluster, since)
    print(f"  Ozone ({label}): {elections} leader elections won in the ring during the runs, for {runs} SIGKILLs",
          flush=True)
    return {**summary(gaps), "allocations": len(load.ids), "duplicate_block_ids": check_ids(load, f"Ozone {label}"),
            "elections": elections,
            "failed_attempts": load.refusals, "restart_to_out_of_safe_mode_s": [round(r, 1) for r in restarts]}


def rolling_restart(cluster: ozone_anchor.AnchorCluster) -> None:
    for scm in cluster.scms:
        cluster.kill(scm.node_id)
        ozone_anchor.restart_scm(cluster, scm)


def run_ozone(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    classpath, note = ozone_anchor.classpath_or_reason()
    if classpath is None:
        return {"error": note}
    cluster = None
    out: dict[str, Any] = {"jars": note}
    try:
        t0 = time.monotonic()
        cluster = ozone_anchor.start_ring(tmp / "ozone", classpath, OZONE_OVERRIDES)
        out["start_seconds"] = round(time.monotonic() - t0, 1)
        print(f"  Ozone's ring and datanodes ready in {out['start_seconds']:.0f} s", flush=True)
        out["shipped"] = asyncio.run(ozone_runs(cluster, args.runs, args.clients, "5 s election timeout"))
        out["shipped"]["election_timeout"] = f"{ozone_anchor.OZONE_ELECTION_TIMEOUT} (shipped default)"
        if args.ozone_fast_election:
            ozone_anchor.set_election_timeout(cluster, "1s")
            t0 = time.monotonic()
            rolling_restart(cluster)
            print(f"  Ozone's ring restarted with a 1 s election timeout in {time.monotonic() - t0:.0f} s", flush=True)
            out["fast"] = asyncio.run(ozone_runs(cluster, args.runs, args.clients, "1 s election timeout"))
            out["fast"]["election_timeout"] = "1s (ours, set for this row)"
    finally:
        ozone_anchor.stop(cluster)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=None, help="SIGKILLs of the leader per ring (default 5; 2 with --secure)")
    p.add_argument("--clients", type=int, default=4, help="concurrent allocating clients (default 4)")
    p.add_argument("--ozone-fast-election", action="store_true",
                   help="also measure Ozone's ring with its election timeout set to ours (1 s)")
    p.add_argument("--no-ozone", action="store_true", help="leave out Ozone's own SCM ring (the anchor)")
    p.add_argument("--secure", action="store_true",
                   help="the secure rings (Kerberos, CA, tokens, TLS; Ozone's DNs and OM on each), ours and Ozone's")
    p.add_argument("--rings", default="ours,ozone",
                   help="with --secure: which secure rings, in order (default ours,ozone)")
    p.add_argument("--out", type=Path, default=None,
                   help="where the JSON goes (default bench/results/failover_ozone[_secure].json)")
    args = p.parse_args()
    if args.secure:
        return main_secure(args)
    args.out = args.out or ROOT / "bench" / "results" / "failover_ozone.json"
    args.runs = args.runs or 5
    started = time.monotonic()
    out: dict[str, Any] = {"runs": args.runs, "clients": args.clients, "client_retry_interval_s": RETRY_INTERVAL}
    with tempfile.TemporaryDirectory(prefix="bench-failover-ozone-") as tmp:
        print(f"failover under allocation over Hadoop RPC: {args.runs} SIGKILLs of the leader per ring, "
              f"{args.clients} clients", flush=True)
        out["loadavg_start"] = ozone_anchor.loadavg()
        out["ours"] = run_ours(args, Path(tmp))
        out["loadavg_after_ours"] = ozone_anchor.loadavg()
        if args.no_ozone:
            print("Ozone's own SCM ring left out (--no-ozone)")
        else:
            out["ozone"] = run_ozone(args, Path(tmp))
            out["loadavg_after_ozone"] = ozone_anchor.loadavg()
    out["machine"] = {"platform": platform.platform(), "cpus": os.cpu_count()}
    out["wall_seconds"] = round(time.monotonic() - started, 1)
    print_table(out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out} ({out['wall_seconds']} s)")
    return 1 if "error" in out.get("ozone", {}) else 0


# ---------------------------------------------------------------------------------------------------- secure rings

def main_secure(args: argparse.Namespace) -> int:
    """Ours, then Ozone's, each secure and alone on the machine while measured; the table side by side."""
    from bench import failover_secure  # the secure tier's harness and MIT Kerberos: only for --secure

    runs = args.runs or 2  # a secure SCM of Ozone's comes back in minutes on a loaded machine
    out: dict[str, Any] = {"runs": runs, "clients": args.clients, "client_retry_interval_s": RETRY_INTERVAL,
                           "loadavg_start": ozone_anchor.loadavg()}
    started = time.monotonic()
    classpath, note = ozone_anchor.classpath_or_reason()
    if classpath is None:
        print(ozone_anchor.banner(note))
        return 1
    out["jars"] = note
    print(f"secure rings: ring start to first key put, then {runs} SIGKILLs of the leader under Kerberized "
          f"allocation ({args.clients} clients) per ring", flush=True)
    sides = [side for side in args.rings.split(",") if side != "ozone" or not args.no_ozone]
    unknown = [side for side in sides if side not in failover_secure.SIDES]
    if unknown or not sides:
        print(f"--rings {args.rings!r}: name the rings as ours and/or ozone, comma-separated (unknown: {unknown})")
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-failover-secure-") as tmp:
        for side in sides:
            out[side] = failover_secure.run_ring(side, Path(tmp) / side, classpath, runs, args.clients,
                                                 ozone_anchor.loadavg)
            out[f"loadavg_after_{side}"] = ozone_anchor.loadavg()
    out["machine"] = {"platform": platform.platform(), "cpus": os.cpu_count()}
    out["wall_seconds"] = round(time.monotonic() - started, 1)
    print_secure_table(out)
    target = args.out or ROOT / "bench" / "results" / "failover_ozone_secure.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(out, indent=2))
    print(f"wrote {target} ({out['wall_seconds']} s)")
    return 0


def print_secure_table(out: dict[str, Any]) -> None:
    if "ours" not in out:
        print(f"\nOzone's secure ring alone: {out.get('ozone')}")
        return
    ours, ozone = out["ours"], out.get("ozone")
    load = out.get("loadavg_after_ozone", out["loadavg_after_ours"])
    print(f"\nsecure rings, side by side ({out['runs']} SIGKILLs each, {out['clients']} Kerberized clients; "
          f"load average {out['loadavg_start']} at the start, {load} at the end):")
    print(f"{'':<44} {'ours':>8} {'Ozone 2.2.0':>12} {'ours/Ozone':>11}")
    rows = [("ring start -> first key put (s)", ours["up_s"], ozone and ozone["up_s"]),
            ("  of which: cluster ready (s)", ours["ready_s"], ozone and ozone["ready_s"]),
            ("allocation gap after SIGKILL, median (s)", statistics.median(ours["gaps"]),
             ozone and statistics.median(ozone["gaps"])),
            ("allocation gap after SIGKILL, max (s)", max(ours["gaps"]), ozone and max(ozone["gaps"]))]
    for name, a, b in rows:
        other = f"{b:>12.2f} {a / b:>11.2f}" if b else f"{'-':>12} {'-':>11}"
        print(f"{name:<44} {a:>8.2f} {other}")
    for side in ("ours", "ozone"):
        if side in out:
            r = out[side]
            print(f"  {side}: gaps {' '.join(f'{g:.2f}' for g in r['gaps'])}, {r['allocations']} allocations, "
                  f"0 duplicate block IDs, keys read back: {', '.join(r['keys_read_back'])}")


def print_table(out: dict[str, Any]) -> None:
    rows: list[tuple[str, dict[str, Any]]] = [("ours (1 s election timeout)", out["ours"])]
    ozone = out.get("ozone", {})
    if "error" in ozone:
        print(ozone_anchor.banner(ozone["error"]))
    for key, name in (("shipped", "Ozone 2.2.0 (5 s, shipped)"), ("fast", "Ozone 2.2.0 (1 s, set to ours)")):
        if key in ozone:
            rows.append((name, ozone[key]))
    print(f"\nallocation gap after SIGKILL of the leader ({out['runs']} runs each, {out['clients']} clients, "
          f"the same Python Hadoop RPC client; load average {out.get('loadavg_after_ozone', out['loadavg_after_ours'])}):")
    print(f"{'ring':<32} {'median s':>9} {'max s':>7}  samples")
    for name, r in rows:
        print(f"{name:<32} {r['median']:>9.2f} {r['max']:>7.2f}  {' '.join(f'{x:.2f}' for x in r['samples'])}")
    if "shipped" in ozone:
        print(f"ours / Ozone (medians, shipped defaults): {out['ours']['median'] / ozone['shipped']['median']:.2f}"
              " (goal of issue 20: <= 1.0)")
    if "fast" in ozone:
        print(f"ours / Ozone (medians, both 1 s): {out['ours']['median'] / ozone['fast']['median']:.2f}")


if __name__ == "__main__":
    sys.exit(main())
