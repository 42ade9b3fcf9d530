"""Erasure coding with Apache Ozone 2.2.0's own datanodes (seven JVMs) and OM on our 3-SCM ring (`make ozone-ec-test`).

The seven datanodes each bind and report a loopback address of their own, and a Hadoop TableMapping file puts
them on three racks (3, 2, 2); `ozone admin printTopology` shows them so. An `rs-3-2-1024k` bucket and a RATIS/THREE
bucket made with Ozone's `ozone sh`; keys of 1, 5 and 17 MiB (EC) and 1 and 5 MiB (Ratis) put and read back byte for
byte (Ozone's EC client writes stripes over the pipeline our SCM allocated: five datanodes, replica indexes 1..5);
the EC container's replicas, as `ozone admin container info` lists them, on five datanodes with indexes 1..5
spanning all three racks (RackScatter), a Ratis container's three replicas over two racks or more.

Then a datanode holding both an EC index and a Ratis replica is stopped for good (SIGKILL): it goes stale then dead
(intervals shortened on both sides), our ReplicationManager has Ozone's datanodes close the open containers,
reconstruct the lost EC index and copy the Ratis replica, and every container is back to its full replica set on
live datanodes (tests/ozone_interop/container_health.py, with `ozone admin container report` agreeing), placed per
policy (EC over three racks, Ratis over two or more); every key still reads back.

Then a live holder of both is decommissioned with `ozone admin datanode decommission` (by its address): it reaches
DECOMMISSIONED only with every container it held full on in-service datanodes. Last, another holder of both is put
in maintenance with `ozone admin datanode maintenance` (with `hdds.scm.replication.maintenance.replica.minimum` 3,
so that its Ratis replicas must be copied first): IN_MAINTENANCE only with three in-service copies of each Ratis
container and four EC indexes (data + `hdds.scm.replication.maintenance.remaining.redundancy`) elsewhere, the keys
read back, and `ozone admin datanode recommission` brings it back IN_SERVICE. The times from the kill to DEAD, from
DEAD to healthy, and from each admin command to its state are printed.

Ozone's own SCM ring is not run here: `bench/ec_heal.py` runs the same death on Ozone's ring and ours, side by side.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ozone_interop.container_health import (
    Replica,
    cluster_containers,
    cluster_shortfalls,
    details,
    full_holders,
    node_uuid,
    replicas_of,
    required_replicas,
)
from tests.ozone_interop.ozone_procs import REPO, OzoneCluster, Timings, resolve_classpath, wait_for

pytestmark = [pytest.mark.ozone_ec, pytest.mark.timeout(2400)]
MIB = 1024 * 1024
RACKS = 3  # seven datanodes (3, 2, 2 per rack), each on its own loopback address, racks from a TableMapping file
DATANODES = 7  # five for rs-3-2, then one dead, one decommissioned: five left in service for the maintenance
VOLUME = "ecvol"
EC_BUCKET, RATIS_BUCKET = "ecbucket", "ratisbucket"
SIZES = {EC_BUCKET: {"k1": 1 * MIB, "k5": 5 * MIB, "k17": 17 * MIB}, RATIS_BUCKET: {"r1": 1 * MIB, "r5": 5 * MIB}}
MAINTENANCE_RATIS_MINIMUM = 3  # hdds.scm.replication.maintenance.replica.minimum: a Ratis replica must be copied
EC_DATA, EC_MAINTENANCE_REDUNDANCY = 3, 1  # rs-3-2; hdds.scm.replication.maintenance.remaining.redundancy's default
# both sides: a dead datanode within ~20 s, the ReplicationManager and the admin monitor every 5 s
FAST = {
    "ozone.scm.stale.node.interval": "10s",
    "ozone.scm.dead.node.interval": "20s",
    "hdds.scm.replication.thread.interval": "5s",
    "hdds.scm.replication.under.replicated.interval": "5s",
    "hdds.scm.replication.over.replicated.interval": "5s",
    "ozone.scm.heartbeat.thread.interval": "1s",
    "ozone.scm.ec.pipeline.minimum": "1",
    "ozone.scm.datanode.admin.monitor.interval": "5s",
    "hdds.scm.replication.maintenance.replica.minimum": str(MAINTENANCE_RATIS_MINIMUM),
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[OzoneCluster]:
    classpath, note = resolve_classpath()
    base = REPO / "run-data" / "ozone-ec"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    c = OzoneCluster(base, classpath, scm_side="ours", datanodes=DATANODES, timings=Timings(jars=note), extra_props=FAST,
                     racks=RACKS)
    started = time.monotonic()
    c.start()
    c.timings.add("cluster start, total", time.monotonic() - started)
    try:
        yield c
    finally:
        c.stop()
        print(f"\n[ozone-ec: logs under {base}/logs]\n{c.timings.report()}\n")


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_all(c: OzoneCluster, tmp: Path, data: Mapping[str, Mapping[str, bytes]]) -> None:
    """Every key of both buckets read back with Ozone's `ozone sh key get`, byte for byte."""
    for bucket, keys in data.items():
        for key, blob in keys.items():
            out = tmp / f"{bucket}.{key}.{time.monotonic_ns()}.out"
            c.sh("key", "get", f"/{VOLUME}/{bucket}/{key}", str(out))
            assert digest(out.read_bytes()) == digest(blob), f"/{VOLUME}/{bucket}/{key} read back different bytes"


def topology(text: str) -> dict[str, set[str]]:
    """Rack -> datanode IPs, as Ozone's `ozone admin printTopology -o` prints them (per health state,
    ``Location: /rack`` then one `` ip(hostname) OPSTATE`` line per datanode)."""
    racks: dict[str, set[str]] = {}
    location = None
    for line in text.splitlines():
        if line.startswith("Location:"):
            location = line.split(":", 1)[1].strip()
            racks.setdefault(location, set())
        elif line.startswith(" ") and location is not None and line.strip():
            racks[location].add(line.strip().split("(", 1)[0])
    return racks


@dataclass(frozen=True)
class Node:
    uuid: str
    ip: str
    name: str  # the harness's process name (dn1..dn7)
    rack: str  # the rack the topology table gives its address
    op_state: str
    health: str


def nodes(c: OzoneCluster) -> dict[str, Node]:
    """uuid -> the datanode as `ozone admin datanode list --json` shows it (address, op and health state)."""
    by_ip = {c.datanode_address(dn): dn for dn in c.datanodes}
    out = {}
    for entry in json.loads(c.admin("datanode", "list", "--json")):
        d = details(entry)
        ip = str(d.get("ipAddress"))
        dn = by_ip.get(ip)
        assert dn is not None, f"a datanode at {ip} the harness did not start: {entry}"
        out[node_uuid(entry)] = Node(node_uuid(entry), ip, dn.name, c.datanode_rack(dn),
                                     str(entry.get("opState") or d.get("persistedOpState")),
                                     str(entry.get("healthState")))
    return out


def containers_with_replicas(c: OzoneCluster) -> dict[int, tuple[str, int, list[Replica]]]:
    """Container ID -> (replication type, replicas a full set has, its replicas) for every written container."""
    listed, infos = cluster_containers(c)
    out = {}
    for x in listed:
        cid = int(x["containerID"])
        if cid in infos and (replicas_of(infos[cid]) or int(x.get("numberOfKeys", 0))):
            kind, need = required_replicas(x.get("replicationConfig", {}))
            out[cid] = (kind, need, replicas_of(infos[cid]))
    return out


def placement_problems(c: OzoneCluster, counted: set[str]) -> list[str]:
    """Per policy, over the replicas on the datanodes in ``counted``: an EC container's indexes 1..5 on distinct
    datanodes over every rack still holding one of ``counted`` (RackScatter: at most ceil(5 / racks) a rack);
    a Ratis container's replicas on at least two racks (rack-aware)."""
    known = nodes(c)
    racks_left = {known[u].rack for u in counted if u in known}
    problems = []
    for cid, (kind, need, replicas) in containers_with_replicas(c).items():
        here = [r for r in replicas if r.uuid in counted]
        racks = [known[r.uuid].rack for r in here]
        if kind == "EC":
            by_index = {r.index: known[r.uuid].rack for r in here}
            wanted = min(len(racks_left), need)
            if sorted(by_index) != list(range(1, need + 1)) or len(set(by_index.values())) < wanted:
                problems.append(f"EC container {cid}: index -> rack {dict(sorted(by_index.items()))}")
            elif max(racks.count(r) for r in set(racks)) > -(-need // wanted):
                problems.append(f"EC container {cid}: more than {-(-need // wanted)} replicas on one rack: {racks}")
        elif len(set(racks)) < min(2, len(racks_left)):
            problems.append(f"Ratis container {cid}: replicas on racks {racks}")
    return problems


def holder_of_both(c: OzoneCluster, candidates: set[str]) -> str:
    """A datanode among ``candidates`` holding a replica of a full EC container and of a full Ratis one."""

    def probe() -> str | None:
        listed, infos = cluster_containers(c)
        full = full_holders(listed, infos)
        both = sorted(full.get("EC", set()) & full.get("RATIS", set()) & candidates)
        return both[0] if both else None

    return wait_for("a datanode holding an EC index and a Ratis replica", probe, 300, interval=2)


def held_by(c: OzoneCluster, uuid: str) -> dict[int, tuple[str, int, list[Replica]]]:
    return {cid: v for cid, v in containers_with_replicas(c).items() if any(r.uuid == uuid for r in v[2])}


def wait_op_state(c: OzoneCluster, uuid: str, state: str, timeout: float) -> None:
    wait_for(f"datanode {uuid} {state}", lambda: True if nodes(c)[uuid].op_state == state else None, timeout,
             interval=3)


def test_ec_and_ratis_keys_survive_a_death_a_decommission_and_a_maintenance(cluster: OzoneCluster,
                                                                            tmp_path: Path) -> None:
    c = cluster
    # every datanode under the rack the table gives its address, as Ozone's printTopology shows our ring's answer
    expected = {f"/rack{r}": {c.datanode_address(dn) for dn in c.datanodes if c.datanode_rack(dn) == f"/rack{r}"}
                for r in range(1, RACKS + 1)}
    shown: list[str] = []

    def listed_by_rack() -> bool | None:
        shown[:] = [c.admin("printTopology", "-o")]
        return topology(shown[0]) == expected or None

    try:
        wait_for(f"printTopology listing {DATANODES} datanodes on {RACKS} racks", listed_by_rack, 60, interval=2)
    finally:
        print(f"\nozone admin printTopology -o:\n{shown[0] if shown else '(no answer)'}")

    # ---- an EC bucket and a Ratis bucket, written and read back
    c.sh("volume", "create", f"/{VOLUME}")
    c.sh("bucket", "create", f"/{VOLUME}/{EC_BUCKET}", "--type", "EC", "--replication", "rs-3-2-1024k")
    c.sh("bucket", "create", f"/{VOLUME}/{RATIS_BUCKET}", "--type", "RATIS", "--replication", "THREE")
    data: dict[str, dict[str, bytes]] = {}
    for bucket, keys in SIZES.items():
        data[bucket] = {}
        for key, size in keys.items():
            data[bucket][key] = os.urandom(size)
            src = tmp_path / f"{bucket}.{key}.in"
            src.write_bytes(data[bucket][key])
            c.sh("key", "put", f"/{VOLUME}/{bucket}/{key}", str(src))
    read_all(c, tmp_path, data)
    for bucket, kind in ((EC_BUCKET, "EC"), (RATIS_BUCKET, "RATIS")):
        info = json.loads(c.sh("key", "info", f"/{VOLUME}/{bucket}/{next(iter(SIZES[bucket]))}"))
        assert info["replicationConfig"]["replicationType"] == kind, info["replicationConfig"]

    # every written container full (replicas reported) and placed per policy before anything is stopped
    wait_for("every container full before the kill", lambda: True if not cluster_shortfalls(c, set()) else None,
             300, interval=2)
    everyone = set(nodes(c))
    assert len(everyone) == DATANODES
    written = containers_with_replicas(c)
    assert {"EC", "RATIS"} <= {kind for kind, _, _ in written.values()}, written
    assert not placement_problems(c, everyone), placement_problems(c, everyone)

    # ---- a datanode holding an EC index and a Ratis replica stopped for good
    victim = holder_of_both(c, everyone)
    before = nodes(c)[victim]
    lost = held_by(c, victim)
    print(f"\nozone-ec: stopping {before.name} ({before.ip}, {before.rack}), holding "
          + ", ".join(f"{kind} container {cid}" for cid, (kind, _, _) in sorted(lost.items())))
    killed = time.monotonic()
    c.kill(before.name)
    wait_for(f"{before.name} DEAD", lambda: True if nodes(c)[victim].health == "DEAD" else None, 120, interval=2)
    dead_at = time.monotonic()
    seen: list[str] = []

    def healthy() -> bool | None:
        problems = cluster_shortfalls(c, {victim})
        if problems and (not seen or seen[-1] != "; ".join(problems)):
            seen.append("; ".join(problems))
        return True if not problems else None

    wait_for("every container back to its full replica set on live datanodes", healthy, 600, interval=2)
    healthy_at = time.monotonic()
    live = everyone - {victim}
    assert not placement_problems(c, live), placement_problems(c, live)
    for cid, (kind, need, replicas) in held_by(c, victim).items():
        on_live = [r for r in replicas if r.uuid in live]
        assert (len({r.index for r in on_live}) if kind == "EC" else len(on_live)) >= need, (cid, replicas)
    read_all(c, tmp_path, data)
    c.timings.add(f"{before.name} killed -> DEAD", dead_at - killed)
    c.timings.add(f"DEAD -> all {len(written)} containers healthy (EC rebuilt, Ratis copied)", healthy_at - dead_at)
    print(f"ozone-ec: DEAD {dead_at - killed:.1f} s after the kill; every container healthy {healthy_at - dead_at:.1f} s "
          f"after DEAD (what the probes saw missing: {seen[:3]})")

    # ---- a live holder of both decommissioned with Ozone's CLI, by the address it reports
    leaving = holder_of_both(c, live)
    gone = nodes(c)[leaving]
    asked = time.monotonic()
    print(c.admin("datanode", "decommission", gone.ip))
    wait_op_state(c, leaving, "DECOMMISSIONED", 600)
    done_at = time.monotonic()
    in_service = live - {leaving}
    for cid, (kind, need, replicas) in held_by(c, leaving).items():
        kept = [r for r in replicas if r.uuid in in_service]
        count = len({r.index for r in kept}) if kind == "EC" else len({r.uuid for r in kept})
        assert count >= need, f"{gone.ip} DECOMMISSIONED with {kind} container {cid} short elsewhere: {replicas}"
    assert not cluster_shortfalls(c, {victim, leaving}), cluster_shortfalls(c, {victim, leaving})
    read_all(c, tmp_path, data)
    c.timings.add(f"decommission {gone.ip} -> DECOMMISSIONED (its EC and Ratis replicas copied)", done_at - asked)
    print(f"ozone-ec: {gone.ip} DECOMMISSIONED {done_at - asked:.1f} s after `ozone admin datanode decommission`")

    # ---- another holder of both into maintenance: its Ratis replicas copied first (minimum 3 elsewhere)
    resting_uuid = holder_of_both(c, in_service)
    resting = nodes(c)[resting_uuid]
    asked = time.monotonic()
    print(c.admin("datanode", "maintenance", resting.ip))
    wait_op_state(c, resting_uuid, "IN_MAINTENANCE", 600)
    entered = time.monotonic()
    others = in_service - {resting_uuid}
    for cid, (kind, _, replicas) in held_by(c, resting_uuid).items():
        kept = [r for r in replicas if r.uuid in others]
        if kind == "EC":
            assert len({r.index for r in kept}) >= EC_DATA + EC_MAINTENANCE_REDUNDANCY, (cid, replicas)
        else:
            assert len({r.uuid for r in kept}) >= MAINTENANCE_RATIS_MINIMUM, (cid, replicas)
    read_all(c, tmp_path, data)
    recommissioned = time.monotonic()
    print(c.admin("datanode", "recommission", resting.ip))
    wait_op_state(c, resting_uuid, "IN_SERVICE", 300)
    back = time.monotonic()
    read_all(c, tmp_path, data)
    c.timings.add(f"maintenance {resting.ip} -> IN_MAINTENANCE (Ratis replicas copied)", entered - asked)
    c.timings.add(f"recommission {resting.ip} -> IN_SERVICE", back - recommissioned)
    print(f"ozone-ec: {resting.ip} IN_MAINTENANCE {entered - asked:.1f} s after `ozone admin datanode maintenance`, "
          f"IN_SERVICE {back - recommissioned:.1f} s after `recommission`")
