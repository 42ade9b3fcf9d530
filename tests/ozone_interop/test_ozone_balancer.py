"""ContainerBalancer on our ring moving real containers between Apache Ozone's own datanodes (2.2.0 jars).

The imbalance is real: each datanode keeps its containers on a filesystem of its own (a tmpfs of `VOLUME_MIB`
mounted on its `hdds.datanode.dir`; every datanode of the tier shares one disk otherwise, so capacity and
remaining space would be the same on all of them and every one would look equally used). Keys are written with
RATIS/THREE while only three datanodes run, so those three hold every replica; their containers are closed;
then two empty datanodes join. `ozone admin containerbalancer start -t <threshold>` on our ring must then move
containers (our replicate command to the target, Ozone's datanode copying the replica from the source; once the
target reports it, our forced delete to the source) until `ozone admin datanode usageinfo` shows every datanode
within the threshold of the average. Meanwhile, every container keeps at least its three replicas as our SCM
reports them (`container info --json`: the copy is added before the source's replica is deleted), and after the
run every key reads back identical.

Run by `make ozone-balancer-test` (marker ozone_balancer; needs root for the tmpfs mounts, and fails saying so
otherwise).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ozone_interop.ozone_procs import (
    ADMIN_MAIN,
    DATANODE_HEAP,
    DATANODE_MAIN,
    REPO,
    DatanodeNode,
    OzoneCluster,
    Timings,
    digest,
    timed,
    wait_for,
)

pytestmark = [pytest.mark.ozone_balancer, pytest.mark.timeout(2400)]

VOLUME = "balvol"
BUCKET = "balbucket"
VOLUME_MIB = 512  # each datanode's filesystem
KEYS = 6
KEY_BYTES = 12 * 1024 * 1024 + 4321  # three blocks of 4 MiB and a tail
THRESHOLD = 4.0  # percent, as `containerbalancer start -t` takes it

# Small containers that fill and close in seconds, small blocks, and balancer timeouts in seconds (Ozone's CLI
# takes them in whole minutes; the keys take any duration): replication < move < iteration interval, as required.
PROPS = {
    "hdds.scm.safemode.min.datanode": "3",
    "ozone.scm.container.size": "24MB",
    "ozone.scm.block.size": "4MB",
    "hdds.datanode.volume.min.free.space": "8MB",
    "hdds.container.balancer.move.replication.timeout": "90s",
    "hdds.container.balancer.move.timeout": "120s",
    "hdds.container.balancer.balancing.iteration.interval": "150s",
}


@contextlib.contextmanager
def own_filesystems(dirs: list[Path]) -> Iterator[None]:
    """A tmpfs of VOLUME_MIB on each of ``dirs`` for the duration; unmounted afterwards whatever happens."""
    mounted: list[Path] = []
    try:
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
            result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={VOLUME_MIB}m", "tmpfs", str(d)],
                                    capture_output=True, text=True, check=False)
            if result.returncode != 0:
                pytest.fail(f"mounting a tmpfs on {d} failed ({result.stderr.strip()}): make ozone-balancer-test "
                            "gives each datanode a filesystem of its own and must run as root")
            mounted.append(d)
        yield
    finally:
        for d in reversed(mounted):
            subprocess.run(["umount", "-l", str(d)], capture_output=True, check=False)


def start_datanodes(c: OzoneCluster, dns: list[DatanodeNode]) -> None:
    procs = []
    for dn in dns:
        conf = c.conf_dir(dn.name, c.datanode_props(dn))
        procs.append((dn, c.spawn(dn.name, c.java_cmd(conf, DATANODE_HEAP, DATANODE_MAIN, []))))
    for dn, proc in procs:
        c.wait_port(proc, dn.ports["ratis_ipc"], timeout=180)
        c.timings.add(f"{dn.name} start (ratis port open)", proc.ready_seconds or 0.0)


def usage(c: OzoneCluster) -> dict[str, float]:
    """Each datanode's utilization in percent, as `datanode usageinfo` gives it (used = capacity - remaining)."""
    rows = json.loads(c.admin("datanode", "usageinfo", "--most-used", "--count", str(len(c.datanodes)), "--json"))
    return {u["datanodeDetails"]["uuidString"]: 100.0 * (u["ozoneCapacity"] - u["ozoneAvailable"]) / u["ozoneCapacity"]
            for u in rows if u["ozoneCapacity"] > 0}


def replicas(c: OzoneCluster, cid: int) -> list[str]:
    info = json.loads(c.admin("container", "info", str(cid), "--json"))
    return sorted(r["datanodeDetails"]["uuidString"] for r in info["replicas"])


def balancer_metrics(c: OzoneCluster) -> dict[str, int]:
    """Ozone's ContainerBalancerMetrics bean from /jmx of the SCM that ran the balancer (the most iterations)."""
    beans = []
    for scm in c.scms:
        url = (f"http://127.0.0.1:{scm.http_port}/jmx?"
               "qry=Hadoop:service=StorageContainerManager,name=ContainerBalancerMetrics")
        with urllib.request.urlopen(url, timeout=30) as resp:
            beans.extend(json.loads(resp.read())["beans"])
    assert beans, "no ContainerBalancerMetrics bean on any SCM"
    return max(beans, key=lambda b: int(b.get("NumIterations", 0)))


def test_balancer_moves_real_containers_until_within_threshold(ozone_classpath: tuple[str, str],
                                                                 tmp_path: Path) -> None:
    classpath, note = ozone_classpath
    timings = Timings(jars=note)
    base = REPO / "run-data" / "ozone-balancer"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    c = OzoneCluster(base, classpath, scm_side="ours", datanodes=5, timings=timings, extra_props=PROPS)
    first, joining = c.datanodes[:3], c.datanodes[3:]
    with own_filesystems([base / dn.name / "data" for dn in c.datanodes]):
        try:
            run_scenario(c, first, joining, tmp_path)
        finally:
            c.stop()
            print(f"\n[logs under {base}/logs]\n{timings.report()}")


def run_scenario(c: OzoneCluster, first: list[DatanodeNode], joining: list[DatanodeNode], tmp: Path) -> None:
    with timed(c.timings, "ring, 3 datanodes, OM"):
        c.start_scm_ring()
        start_datanodes(c, first)
        c.start_om()
        c.wait_ready()

    # keys on the first three datanodes only (RATIS/THREE: each holds every replica)
    start = time.monotonic()
    c.sh("volume", "create", f"/{VOLUME}")
    c.sh("bucket", "create", f"/{VOLUME}/{BUCKET}")
    written: dict[str, str] = {}
    for i in range(KEYS):
        data = os.urandom(KEY_BYTES)
        src = tmp / f"key{i}"
        src.write_bytes(data)
        c.sh("key", "put", f"/{VOLUME}/{BUCKET}/key{i}", str(src))
        written[f"key{i}"] = digest(data)
    containers = [ct for ct in json.loads(c.admin("container", "list")) if ct.get("usedBytes", 0) > 0]
    assert containers, "the keys were written, so containers hold data"
    ids = sorted(int(ct["containerID"]) for ct in containers)
    for cid in ids:
        if next(ct for ct in containers if int(ct["containerID"]) == cid)["state"] == "OPEN":
            c.admin("container", "close", str(cid))

    def all_closed() -> bool | None:
        states = {int(ct["containerID"]): ct["state"] for ct in json.loads(c.admin("container", "list"))}
        return True if all(states.get(cid) == "CLOSED" for cid in ids) else None

    wait_for(f"containers {ids} CLOSED", all_closed, 180, interval=2)
    c.timings.add(f"{KEYS} keys written, {len(ids)} containers closed", time.monotonic() - start)

    # two empty datanodes join: the imbalance is real
    with timed(c.timings, "dn4, dn5 joined and reporting"):
        start_datanodes(c, joining)
        wait_for("five datanodes reporting capacity", lambda: True if len(usage(c)) == 5 else None, 120,
                 interval=2)
    before = usage(c)
    avg = sum(before.values()) / len(before)
    assert max(before.values()) - avg > THRESHOLD and avg - min(before.values()) > THRESHOLD, before
    print(f"\nutilization before (%): {sorted(round(u, 2) for u in before.values())}, average {avg:.2f}")

    start = time.monotonic()
    started = c.tool(ADMIN_MAIN, "containerbalancer", "start", "-t", str(THRESHOLD), "-i", "3", "-d", "100")
    assert "Container Balancer started successfully." in started.stdout, started.stdout + started.stderr[-2000:]

    # while it runs: no container below its three replicas as our SCM sees them (added first, deleted after)
    lowest: dict[int, int] = {}
    status = ""

    def stopped() -> bool | None:
        nonlocal status
        for cid in ids:
            n = len(replicas(c, cid))
            lowest[cid] = min(lowest.get(cid, n), n)
            assert n >= 3, f"container #{cid} down to {n} replicas during a move"
        status = c.admin("containerbalancer", "status", "-H")
        return True if "is Not Running" in status else None

    wait_for("the balancer's run ended", stopped, 900, interval=5)
    c.timings.add("balancer run (start to Not Running)", time.monotonic() - start)
    print(f"containerbalancer status -H at the end:\n{status}")

    def within() -> dict[str, float] | None:
        now = usage(c)
        mean = sum(now.values()) / len(now)
        return now if all(abs(u - mean) <= THRESHOLD for u in now.values()) else None

    after = wait_for(f"every datanode within {THRESHOLD} % of the average", within, 60, interval=3)
    print(f"utilization after (%): {sorted(round(u, 2) for u in after.values())}")
    new_uuids = {u for u in after if u not in before or before[u] < avg - THRESHOLD}
    placement = {cid: replicas(c, cid) for cid in ids}
    assert all(len(r) == 3 for r in placement.values()), placement  # every move completed: added, then deleted
    moved = [cid for cid, r in placement.items() if set(r) & new_uuids]
    assert moved, placement
    c.timings.add(f"containers moved to the joined datanodes: {len(moved)} of {len(ids)}", 0.0)
    metrics = balancer_metrics(c)  # the leader's Ozone-named bean: the iterations run and the moves completed
    assert metrics["NumIterations"] >= 1 and metrics["NumContainerMovesCompleted"] >= len(moved), metrics
    assert metrics["NumContainerMovesFailed"] == 0, metrics
    c.timings.add(f"balancer bean: {metrics['NumIterations']} iterations, "
                  f"{metrics['NumContainerMovesCompleted']} moves completed", 0.0)

    # every key reads back identical
    for name, want in written.items():
        out = tmp / f"{name}.back"
        c.sh("key", "get", f"/{VOLUME}/{BUCKET}/{name}", str(out))
        assert digest(out.read_bytes()) == want, name
