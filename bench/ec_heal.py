#!/usr/bin/env python3
"""Time to healthy after a datanode dies: Apache Ozone's own 3-SCM ring against ours, in the same run.

Each side, one after the other, gets the same cluster from the ozone-interop harness
(tests/ozone_interop/ozone_procs.py, the processes the EC tier starts): seven Apache Ozone 2.2.0 datanodes on
their own loopback addresses, on three racks from a Hadoop TableMapping file, an Ozone Manager, and the SCM ring
of that side (Ozone's ``StorageContainerManagerStarter`` x3, or ours x3). Both sides get the same keys: stale after
10 s, dead after 20 s, the ReplicationManager every 5 s (Ozone's under/over-replicated queues too), a heartbeat
check every 1 s. The same bytes (a seeded generator) go into an ``rs-3-2-1024k`` EC bucket and a RATIS/THREE bucket;
then a datanode holding both an EC index and a Ratis replica is SIGKILLed for good. Measured, through Ozone's own
admin CLI: the kill -> DEAD (``ozone admin datanode list``), and DEAD -> every container (Ratis and EC) back to full
health (tests/ozone_interop/container_health.py: closed, all indexes / three replicas on live datanodes, and
``ozone admin container report`` with no container under-replicated, missing or unhealthy). Every key is read
back afterwards. Also, from the datanodes' own logs (the same Ozone code on both sides, to the millisecond): the
kill -> the last replicate / reconstruct command logged DONE. Printed: both sides and the ratios ours / Ozone's;
written to bench/results/ec_heal.json.

A probe runs three CLI JVMs, so the probed times are known to within one probe's length (printed with them); the
datanode log times are not.
Without Java, Maven or Maven Central the benchmark prints why and exits non-zero (bench/ozone_anchor.py).

Usage: ``nice -n 10 .venv/bin/python -m bench.ec_heal [--sides ozone,ours]``.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import random
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

if not __package__:  # `python bench/ec_heal.py`: import bench.* and tests.* from this checkout, as `python -m` does
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ozone_anchor import banner, classpath_or_reason
from tests.ozone_interop.container_health import (
    cluster_containers,
    cluster_shortfalls,
    details,
    full_holders,
    node_uuid,
)
from tests.ozone_interop.ozone_procs import REPO, OzoneCluster, Timings, wait_for

DATANODES, RACKS = 7, 3
VOLUME = "healvol"
BUCKETS = {"ecbucket": ("EC", "rs-3-2-1024k"), "ratisbucket": ("RATIS", "THREE")}
KEYS = {"k1": 1 << 20, "k5": 5 << 20}
# the same on both rings; Ozone's ReplicationManager also waits on its own queue intervals (30 s by default)
INTERVALS = {
    "ozone.scm.stale.node.interval": "10s",
    "ozone.scm.dead.node.interval": "20s",
    "ozone.scm.heartbeat.thread.interval": "1s",
    "hdds.scm.replication.thread.interval": "5s",
    "hdds.scm.replication.under.replicated.interval": "5s",
    "hdds.scm.replication.over.replicated.interval": "5s",
    "ozone.scm.ec.pipeline.minimum": "1",
}
SEED = 31


@dataclass
class SideResult:
    side: str
    victim: str = ""
    containers: int = 0
    start_s: float = 0.0
    kill_to_dead_s: float = 0.0
    dead_to_healthy_s: float = 0.0
    kill_to_healthy_s: float = 0.0
    probe_s: float = 0.0  # the last probe's length: the times are known to within it
    # kill -> the last repair command (replicate / reconstruct) a datanode logged DONE: to the millisecond, from
    # Ozone's own datanodes' logs (the same code on both sides), not bounded by the CLI probe's length
    kill_to_repaired_s: float = 0.0
    repairs: int = 0
    shortfalls_seen: list[str] = field(default_factory=list)  # what the first probes after DEAD said was missing


def payloads() -> dict[str, bytes]:
    rng = random.Random(SEED)
    return {key: rng.randbytes(size) for key, size in KEYS.items()}


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_keys(c: OzoneCluster, work: Path, data: dict[str, bytes]) -> None:
    c.sh("volume", "create", f"/{VOLUME}")
    for bucket, (kind, replication) in BUCKETS.items():
        c.sh("bucket", "create", f"/{VOLUME}/{bucket}", "--type", kind, "--replication", replication)
        for key, blob in data.items():
            src = work / f"{key}.in"
            src.write_bytes(blob)
            c.sh("key", "put", f"/{VOLUME}/{bucket}/{key}", str(src))


def read_all(c: OzoneCluster, work: Path, data: dict[str, bytes]) -> None:
    for bucket in BUCKETS:
        for key, blob in data.items():
            out = work / f"{bucket}.{key}.{time.monotonic_ns()}.out"
            c.sh("key", "get", f"/{VOLUME}/{bucket}/{key}", str(out))
            if digest(out.read_bytes()) != digest(blob):
                raise AssertionError(f"/{VOLUME}/{bucket}/{key} read back different bytes")


def pick_victim(c: OzoneCluster) -> tuple[str, str, int]:
    """(datanode process name, its uuid, containers listed) for a datanode holding an EC index and a Ratis replica,
    once an EC container lists all its indexes and a Ratis one its three replicas (waited for: replicas appear as
    the datanodes report them)."""

    def holders() -> tuple[str, int] | None:
        listed, infos = cluster_containers(c)
        full = full_holders(listed, infos)
        both = sorted(full.get("EC", set()) & full.get("RATIS", set()))
        return (both[0], len(listed)) if both else None

    victim_uuid, containers = wait_for("a datanode holding a full EC and a full Ratis container's replica", holders,
                                       300, interval=2)
    by_uuid = {node_uuid(h): details(h) for h in json.loads(c.admin("datanode", "list", "--json"))}
    ports = {str(p.get("value")) for p in by_uuid[victim_uuid].get("ports", [])}
    name = next((dn.name for dn in c.datanodes if str(dn.ports["ratis_ipc"]) in ports), None)
    if name is None:
        raise AssertionError(f"datanode {victim_uuid} matches no process by its ports {sorted(ports)}")
    return name, victim_uuid, containers


def wait_stable_before_kill(c: OzoneCluster) -> None:
    """Every container written is healthy before the kill (its replicas reported), so the clock measures repair."""
    wait_for("every container healthy before the kill", lambda: True if not cluster_shortfalls(c, set()) else None,
             300, interval=2)


# a datanode's log line (log4j ISO8601, local time) telling that a repair command it ran is done
REPAIR_DONE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*Successful DONE (replicateContainerCommand|reconstructECContainersCommand)"
)


def repairs_done(logs: list[Path], since: datetime.datetime) -> list[datetime.datetime]:
    """When each replicate / reconstruct command the datanodes ran after ``since`` (local time, as the logs) was
    done, from their logs' ``ReplicationSupervisor: Successful DONE ...`` lines."""
    out = []
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            m = REPAIR_DONE.match(line)
            if m:
                at = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
                if at >= since:
                    out.append(at)
    return out


def run_side(side: str, classpath: str, note: str) -> SideResult:
    base = REPO / "run-data" / "bench-ec-heal" / side
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    work = base / "keys"
    work.mkdir()
    result = SideResult(side)
    c = OzoneCluster(base, classpath, scm_side=side, datanodes=DATANODES, racks=RACKS, extra_props=INTERVALS,
                     timings=Timings(jars=note))
    started = time.monotonic()
    c.start()
    try:
        result.start_s = time.monotonic() - started
        data = payloads()
        write_keys(c, work, data)
        wait_stable_before_kill(c)
        victim, victim_uuid, result.containers = pick_victim(c)
        result.victim = victim
        killed, killed_wall = time.monotonic(), datetime.datetime.now()
        c.kill(victim)

        def dead() -> bool | None:
            listed = json.loads(c.admin("datanode", "list", "--json"))
            return True if any(node_uuid(h) == victim_uuid and "DEAD" in json.dumps(h) for h in listed) else None

        wait_for(f"{victim} DEAD", dead, 180, interval=1)
        dead_at = time.monotonic()

        def healthy() -> bool | None:
            began = time.monotonic()
            problems = cluster_shortfalls(c, {victim_uuid})
            result.probe_s = time.monotonic() - began
            if problems and len(result.shortfalls_seen) < 3:
                result.shortfalls_seen.append("; ".join(problems))
            return True if not problems else None

        wait_for("every container back to full health", healthy, 900, interval=1)
        healthy_at = time.monotonic()
        result.kill_to_dead_s = dead_at - killed
        result.dead_to_healthy_s = healthy_at - dead_at
        result.kill_to_healthy_s = healthy_at - killed
        done = repairs_done(sorted((base / "logs").glob("dn*.log")), killed_wall)
        result.repairs = len(done)
        result.kill_to_repaired_s = (max(done) - killed_wall).total_seconds() if done else 0.0
        read_all(c, work, data)
    finally:
        c.stop()
    print(f"[{side}] {json.dumps(asdict(result))}\n{c.timings.report()}", flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sides", default="ozone,ours", help="which SCM rings, in order (ozone, ours)")
    args = parser.parse_args(argv)
    sides = [s for s in args.sides.split(",") if s]
    classpath, note = classpath_or_reason()
    if classpath is None:
        print(banner(note))
        return 1
    results = {side: run_side(side, classpath, note) for side in sides}
    print(f"\ntime to healthy after a datanode death ({DATANODES} datanodes on {RACKS} racks, "
          f"rs-3-2-1024k + RATIS/THREE, {', '.join(f'{k}={v}' for k, v in INTERVALS.items())}):")
    print(f"  {'SCM ring':<10} {'containers':>10} {'kill->DEAD':>11} {'DEAD->healthy':>14} {'kill->healthy':>14} "
          f"{'probe':>7} {'kill->repaired':>15} {'repairs':>8}")
    for r in results.values():
        print(f"  {r.side:<10} {r.containers:>10} {r.kill_to_dead_s:>10.1f}s {r.dead_to_healthy_s:>13.1f}s "
              f"{r.kill_to_healthy_s:>13.1f}s {r.probe_s:>6.1f}s {r.kill_to_repaired_s:>14.1f}s {r.repairs:>8}")
    ratio = {}
    if "ours" in results and "ozone" in results and results["ozone"].dead_to_healthy_s > 0:
        ratio = {
            "dead_to_healthy": results["ours"].dead_to_healthy_s / results["ozone"].dead_to_healthy_s,
            "kill_to_healthy": results["ours"].kill_to_healthy_s / results["ozone"].kill_to_healthy_s,
        }
        if results["ozone"].kill_to_repaired_s > 0:
            ratio["kill_to_repaired"] = results["ours"].kill_to_repaired_s / results["ozone"].kill_to_repaired_s
        repaired = f", kill->repaired {ratio['kill_to_repaired']:.2f}x" if "kill_to_repaired" in ratio else ""
        print(f"  ours / Ozone's: DEAD->healthy {ratio['dead_to_healthy']:.2f}x, "
              f"kill->healthy {ratio['kill_to_healthy']:.2f}x{repaired} (the first two bounded by the probe)")
    out = REPO / "bench" / "results" / "ec_heal.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "jars": note, "intervals": INTERVALS, "sides": {s: asdict(r) for s, r in results.items()}, "ratio": ratio,
    }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
