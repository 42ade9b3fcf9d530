"""Erasure coding with Apache Ozone 2.2.0's own datanodes (seven JVMs) and OM on our 3-SCM ring (`make ozone-ec-test`).

The seven datanodes each bind and report a loopback address of their own, and a Hadoop TableMapping file puts
them on three racks (3, 2, 2); `ozone admin printTopology` shows them so. An `rs-3-2-1024k` bucket made with Ozone's
`ozone sh`; keys of 1, 5 and 17 MiB put and read back byte for byte (Ozone's EC client writes stripes over the
pipeline our SCM allocated: five datanodes, replica indexes 1..5); the container's replicas, as `ozone admin
container info` lists them, on five datanodes with indexes 1..5 spanning all three racks (RackScatter). Beside it a
RATIS/THREE bucket in the same cluster, with keys of 1 and 5 MiB.

Maintenance: a datanode holding an EC index and a Ratis replica is put in maintenance with `ozone admin datanode
maintenance`; the tier's rules (``hdds.scm.replication.maintenance.remaining.redundancy=2`` for EC: rs-3-2 may lose
no parity to maintenance, so the node's index is copied first; ``hdds.scm.replication.maintenance.replica.minimum=3``
for Ratis: its replica is copied first) are met when it reaches IN_MAINTENANCE, checked at that moment; then
`ozone admin datanode recommission` brings it back IN_SERVICE and the ReplicationManager deletes the extra copies
(EC over-replication: a delete naming the replica index) until each index and each Ratis replica is there once.

Then a datanode holding an EC index and a Ratis replica is stopped for good (SIGKILL): it goes stale then dead
(intervals shortened on both sides), our ReplicationManager has Ozone's datanodes reconstruct the lost index on a
spare datanode and copy the Ratis replicas, every container is back to full health on live datanodes
(tests/ozone_interop/container_health.py), the EC container still over three racks, and every key reads back.
Last, a live holder is decommissioned with `ozone admin datanode decommission` (by its address): it reaches
DECOMMISSIONED only with its index on another in-service datanode, and the keys still read back. The times of each
step are printed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ozone_interop.container_health import cluster_shortfalls, details, node_uuid, replicas_of
from tests.ozone_interop.ozone_procs import REPO, OzoneCluster, Timings, resolve_classpath, wait_for

pytestmark = [pytest.mark.ozone_ec, pytest.mark.timeout(1800)]
MIB = 1024 * 1024
RACKS = 3  # seven datanodes (3, 2, 2 per rack), each on its own loopback address, racks from a TableMapping file
DATANODES = 7  # five for rs-3-2, one spare for the rebuild, one for the decommission's copy
VOLUME, BUCKET, RATIS_BUCKET = "ecvol", "ecbucket", "ratisbucket"
SIZES = {"k1": 1 * MIB, "k5": 5 * MIB, "k17": 17 * MIB}
RATIS_SIZES = {"r1": 1 * MIB, "r5": 5 * MIB}
# both sides: a dead datanode within ~20 s, the ReplicationManager every 5 s
FAST = {
    "ozone.scm.stale.node.interval": "10s",
    "ozone.scm.dead.node.interval": "20s",
    "hdds.scm.replication.thread.interval": "5s",
    "ozone.scm.heartbeat.thread.interval": "1s",
    "ozone.scm.ec.pipeline.minimum": "1",
    # maintenance waits for copies of both kinds: rs-3-2 keeps both parities in service, Ratis three replicas
    "hdds.scm.replication.maintenance.remaining.redundancy": "2",
    "hdds.scm.replication.maintenance.replica.minimum": "3",
    "ozone.scm.datanode.admin.monitor.interval": "5s",
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


def read_back(c: OzoneCluster, tmp: Path, key: str, bucket: str = BUCKET) -> bytes:
    out = tmp / f"{bucket}.{key}.{time.monotonic_ns()}.out"
    c.sh("key", "get", f"/{VOLUME}/{bucket}/{key}", str(out))
    return out.read_bytes()


def all_keys_read_back(c: OzoneCluster, tmp: Path, data: dict[str, bytes], ratis_data: dict[str, bytes]) -> None:
    for key in SIZES:
        assert digest(read_back(c, tmp, key)) == digest(data[key]), key
    for key in RATIS_SIZES:
        assert digest(read_back(c, tmp, key, RATIS_BUCKET)) == digest(ratis_data[key]), key


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


def replica_racks(c: OzoneCluster, holders: dict[str, int]) -> dict[int, str]:
    """Replica index -> rack of the datanode holding it (``datanode list --json``: uuid -> IP -> the table's rack)."""
    ip_rack = {c.datanode_address(dn): c.datanode_rack(dn) for dn in c.datanodes}
    listed = json.loads(c.admin("datanode", "list", "--json"))
    ips = {node_uuid(h): str(details(h).get("ipAddress")) for h in listed}
    unknown = {uuid: ips.get(uuid) for uuid in holders if ips.get(uuid) not in ip_rack}
    assert not unknown, f"replica holders without a known address: {unknown}; datanode list: {listed[:1]}"
    return {index: ip_rack[ips[uuid]] for uuid, index in holders.items()}


def replica_indexes(c: OzoneCluster, cid: str) -> dict[str, int]:
    """Datanode (uuid) -> replica index, as `ozone admin container info --json` lists the replicas."""
    return {r.uuid: r.index for r in replicas_of(json.loads(c.admin("container", "info", cid, "--json")))}


def ratis_containers(c: OzoneCluster) -> dict[str, set[str]]:
    """RATIS containers -> the datanodes (uuids) holding a replica, from `container list` and `container info`."""
    listed = json.loads(c.admin("container", "list", "--all"))
    held = {str(x["containerID"]): set(replica_indexes(c, str(x["containerID"]))) for x in listed
            if x.get("replicationConfig", {}).get("replicationType") == "RATIS"
            and x.get("state") not in ("DELETING", "DELETED")}
    return {cid: dns for cid, dns in held.items() if dns}  # those never written (no replica) hold nothing


def op_state(c: OzoneCluster, uuid: str) -> str:
    """The datanode's operational state as `ozone admin datanode list --json` shows it."""
    for h in json.loads(c.admin("datanode", "list", "--json")):
        if node_uuid(h) == uuid:
            return str(h.get("opState") or details(h).get("persistedOpState"))
    raise AssertionError(f"datanode {uuid} not listed")


def process_of(c: OzoneCluster, by_uuid: dict[str, Any], uuid: str) -> str:
    """The harness's name (dn<i>) of the datanode `uuid`, matched by the Ratis port it reports."""
    ports = {str(p.get("value")) for p in by_uuid[uuid].get("ports", [])}
    name = next((dn.name for dn in c.datanodes if str(dn.ports["ratis_ipc"]) in ports), None)
    assert name is not None, (ports, by_uuid[uuid])
    return name


def maintenance_waits_for_copies(c: OzoneCluster, cid: str) -> None:
    """A holder of an EC index and a Ratis replica into maintenance and back (see the module's docstring)."""
    holders = replica_indexes(c, cid)
    ratis = wait_for("a RATIS container with three replicas",
                     lambda: {k: v for k, v in ratis_containers(c).items() if len(v) == 3} or None, 120, interval=2)
    uuid = next((u for u in sorted(holders) if any(u in held for held in ratis.values())), None)
    assert uuid is not None, (holders, ratis)
    index = holders[uuid]
    ip = str(details(next(h for h in json.loads(c.admin("datanode", "list", "--json"))
                          if node_uuid(h) == uuid)).get("ipAddress"))
    asked = time.monotonic()
    print(c.admin("datanode", "maintenance", ip))
    seen: list[str] = []

    def in_maintenance() -> bool | None:
        seen[:] = [op_state(c, uuid)]
        return True if seen[0] == "IN_MAINTENANCE" else None

    wait_for(f"{ip} IN_MAINTENANCE", in_maintenance, 300, interval=3)
    entered = time.monotonic()
    # the rules held when SCM let it in: index `index` on an in-service datanode too, every Ratis container it
    # holds with three replicas elsewhere
    elsewhere = {u: i for u, i in replica_indexes(c, cid).items() if u != uuid}
    assert sorted(set(elsewhere.values())) == [1, 2, 3, 4, 5], (index, elsewhere)
    for rcid, held in ratis_containers(c).items():
        if uuid in held:
            assert len(held - {uuid}) >= 3, (rcid, held)
    print(c.admin("datanode", "recommission", ip))
    wait_for(f"{ip} IN_SERVICE again", lambda: True if op_state(c, uuid) == "IN_SERVICE" else None, 120, interval=2)

    def one_copy_each() -> bool | None:
        if sorted(replica_indexes(c, cid).values()) != [1, 2, 3, 4, 5]:
            return None
        return True if all(len(held) == 3 for held in ratis_containers(c).values()) else None

    wait_for("extra copies deleted: each EC index and each Ratis replica once", one_copy_each, 300, interval=3)
    c.timings.add(f"maintenance {ip} (index {index} + Ratis copied) -> IN_MAINTENANCE", entered - asked)
    c.timings.add("recommission -> extra copies deleted", time.monotonic() - entered)
    print(f"ozone-ec: {ip} IN_MAINTENANCE {entered - asked:.1f} s after `ozone admin datanode maintenance`")


def test_ec_bucket_write_read_and_a_lost_index_rebuilt(cluster: OzoneCluster, tmp_path: Path) -> None:
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
    c.sh("volume", "create", f"/{VOLUME}")
    c.sh("bucket", "create", f"/{VOLUME}/{BUCKET}", "--type", "EC", "--replication", "rs-3-2-1024k")
    data = {}
    for key, size in SIZES.items():
        data[key] = os.urandom(size)
        src = tmp_path / f"{key}.in"
        src.write_bytes(data[key])
        c.sh("key", "put", f"/{VOLUME}/{BUCKET}/{key}", str(src))
        assert digest(read_back(c, tmp_path, key)) == digest(data[key]), key
    # a RATIS/THREE bucket beside it, in the same cluster
    c.sh("bucket", "create", f"/{VOLUME}/{RATIS_BUCKET}", "--type", "RATIS", "--replication", "THREE")
    ratis_data = {}
    for key, size in RATIS_SIZES.items():
        ratis_data[key] = os.urandom(size)
        src = tmp_path / f"{key}.in"
        src.write_bytes(ratis_data[key])
        c.sh("key", "put", f"/{VOLUME}/{RATIS_BUCKET}/{key}", str(src))
    ratis_info = json.loads(c.sh("key", "info", f"/{VOLUME}/{RATIS_BUCKET}/r5"))
    assert ratis_info["replicationConfig"]["replicationType"] == "RATIS", ratis_info["replicationConfig"]
    info = json.loads(c.sh("key", "info", f"/{VOLUME}/{BUCKET}/k17"))
    assert info["replicationConfig"]["replicationType"] == "EC", info["replicationConfig"]
    cids = sorted({str(loc["containerID"]) for k in SIZES
                   for loc in json.loads(c.sh("key", "info", f"/{VOLUME}/{BUCKET}/{k}"))["ozoneKeyLocations"]})
    cid = cids[0]

    def five_indexes() -> dict[str, int] | None:
        got = replica_indexes(c, cid)
        return got if sorted(got.values()) == [1, 2, 3, 4, 5] else None

    holders = wait_for(f"container {cid}'s five replicas with indexes 1..5", five_indexes, 120, interval=2)
    assert len(holders) == 5
    # RackScatter (ozone.scm.container.placement.ec.impl's default): five members over all three racks, at most
    # ceil(5/3) = 2 on one
    spread = replica_racks(c, holders)
    assert sorted(spread) == [1, 2, 3, 4, 5] and len(set(spread.values())) == RACKS, spread
    assert max(list(spread.values()).count(r) for r in set(spread.values())) <= 2, spread

    maintenance_waits_for_copies(c, cid)
    all_keys_read_back(c, tmp_path, data, ratis_data)

    # stop a datanode holding an EC index and a Ratis replica for good
    holders = wait_for(f"container {cid}'s five replicas with indexes 1..5", five_indexes, 120, interval=2)
    ratis_holders = set().union(*ratis_containers(c).values())
    hosts = json.loads(c.admin("datanode", "list", "--json"))
    by_uuid = {node_uuid(h): details(h) for h in hosts}
    victim_uuid = next((u for u in sorted(holders) if u in ratis_holders), "")
    assert victim_uuid in by_uuid, (victim_uuid, holders, ratis_holders, hosts[:1])
    victim_index = holders[victim_uuid]
    victim = process_of(c, by_uuid, victim_uuid)
    killed = time.monotonic()
    c.kill(victim)

    def dead() -> bool | None:
        listed = json.loads(c.admin("datanode", "list", "--json"))
        return True if any(node_uuid(h) == victim_uuid and "DEAD" in json.dumps(h) for h in listed) else None

    wait_for(f"{victim} DEAD", dead, 120, interval=2)
    dead_at = time.monotonic()

    def rebuilt() -> bool | None:
        got = replica_indexes(c, cid)
        live = {u: i for u, i in got.items() if u != victim_uuid}
        return True if sorted(live.values()) == [1, 2, 3, 4, 5] else None

    wait_for(f"container {cid} back to indexes 1..5 on live datanodes", rebuilt, 600, interval=3)
    rebuilt_at = time.monotonic()
    left: list[str] = []

    def all_healthy() -> bool | None:
        left[:] = cluster_shortfalls(c, {victim_uuid})
        return True if not left else None

    try:  # the Ratis containers too: closed, copied back to three live replicas; the report agrees
        wait_for("every container (EC and Ratis) back to full health", all_healthy, 600, interval=3)
    finally:
        print(f"still short at the end: {left}" if left else "")
    healthy_at = time.monotonic()
    live = {u: i for u, i in replica_indexes(c, cid).items() if u != victim_uuid}
    rebuilt_spread = replica_racks(c, live)
    assert len(set(rebuilt_spread.values())) == RACKS, rebuilt_spread  # the rebuilt index kept three racks
    all_keys_read_back(c, tmp_path, data, ratis_data)
    report = c.admin("container", "report")
    assert re.search(r"MISSING: 0", report), report
    c.timings.add(f"{victim} killed -> DEAD", dead_at - killed)
    c.timings.add(f"DEAD -> container {cid} rebuilt (index {victim_index} live again)", rebuilt_at - dead_at)
    c.timings.add("DEAD -> every container healthy (EC and Ratis)", healthy_at - dead_at)
    print(f"\nozone-ec: DEAD {dead_at - killed:.1f} s after the kill; index {victim_index} rebuilt "
          f"{rebuilt_at - dead_at:.1f} s and every container healthy {healthy_at - dead_at:.1f} s after DEAD")

    # decommission a live holder (index 4) with Ozone's CLI, by the address it reports: it may only reach
    # DECOMMISSIONED once index 4 sits on another in-service datanode (the spare one)
    leaving_uuid = next(u for u, i in live.items() if i == 4)
    leaving_ip = str(by_uuid[leaving_uuid].get("ipAddress"))
    asked = time.monotonic()
    print(c.admin("datanode", "decommission", leaving_ip))

    def decommissioned() -> bool | None:
        listed = json.loads(c.admin("datanode", "list", "--json"))
        return True if any(node_uuid(h) == leaving_uuid and '"DECOMMISSIONED"' in json.dumps(h) for h in listed) \
            else None

    wait_for(f"{leaving_ip} DECOMMISSIONED", decommissioned, 300, interval=3)
    done_at = time.monotonic()
    kept = {u: i for u, i in replica_indexes(c, cid).items() if u not in (victim_uuid, leaving_uuid)}
    assert sorted(kept.values()) == [1, 2, 3, 4, 5], kept  # every index on an in-service datanode
    all_keys_read_back(c, tmp_path, data, ratis_data)
    c.timings.add(f"decommission {leaving_ip} -> DECOMMISSIONED (index 4 copied)", done_at - asked)
    print(f"ozone-ec: {leaving_ip} DECOMMISSIONED {done_at - asked:.1f} s after `ozone admin datanode decommission`")
