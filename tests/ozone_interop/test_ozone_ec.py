"""Erasure coding with Apache Ozone 2.2.0's own datanodes (seven JVMs) and OM on our 3-SCM ring (`make ozone-ec-test`).

The seven datanodes each bind and report a loopback address of their own, and a Hadoop TableMapping file puts
them on three racks (3, 2, 2); `ozone admin printTopology` shows them so. An `rs-3-2-1024k` bucket made with Ozone's
`ozone sh`; keys of 1, 5 and 17 MiB put and read back byte for byte (Ozone's EC client writes stripes over the
pipeline our SCM allocated: five datanodes, replica indexes 1..5); the container's replicas, as `ozone admin
container info` lists them, on five datanodes with indexes 1..5 spanning all three racks (RackScatter). Then a
datanode holding an index is stopped for good (SIGKILL): it goes stale then dead (intervals shortened on both
sides), our ReplicationManager has Ozone's datanodes reconstruct the lost index on a spare datanode, the
container is back to five distinct indexes on live datanodes over three racks, and every key still reads back.
Last, a live holder is decommissioned with `ozone admin datanode decommission` (by its address): it reaches
DECOMMISSIONED only with its index on another in-service datanode, and the keys still read back. The times from
the kill to DEAD, from DEAD to healthy and from the decommission to DECOMMISSIONED are printed.
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

from tests.ozone_interop.ozone_procs import REPO, OzoneCluster, Timings, resolve_classpath, wait_for

pytestmark = [pytest.mark.ozone_ec, pytest.mark.timeout(1800)]
MIB = 1024 * 1024
RACKS = 3  # seven datanodes (3, 2, 2 per rack), each on its own loopback address, racks from a TableMapping file
DATANODES = 7  # five for rs-3-2, one spare for the rebuild, one for the decommission's copy
VOLUME, BUCKET = "ecvol", "ecbucket"
SIZES = {"k1": 1 * MIB, "k5": 5 * MIB, "k17": 17 * MIB}
# both sides: a dead datanode within ~20 s, the ReplicationManager every 5 s
FAST = {
    "ozone.scm.stale.node.interval": "10s",
    "ozone.scm.dead.node.interval": "20s",
    "hdds.scm.replication.thread.interval": "5s",
    "ozone.scm.heartbeat.thread.interval": "1s",
    "ozone.scm.ec.pipeline.minimum": "1",
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


def read_back(c: OzoneCluster, tmp: Path, key: str) -> bytes:
    out = tmp / f"{key}.{time.monotonic_ns()}.out"
    c.sh("key", "get", f"/{VOLUME}/{BUCKET}/{key}", str(out))
    return out.read_bytes()


def details(entry: dict[str, Any]) -> dict[str, Any]:
    """A `datanode list --json` entry's datanode details (nested or flat, as the CLI version prints them)."""
    nested = entry.get("datanodeDetails")
    return nested if isinstance(nested, dict) else entry


def node_uuid(entry: dict[str, Any]) -> str:
    d = details(entry)
    return str(d.get("uuid") or d.get("uuidString") or d.get("id"))


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
    info = json.loads(c.admin("container", "info", cid, "--json"))
    out = {}
    for r in info.get("replicas", []):
        dn = r.get("datanodeDetails", {})
        out[str(dn.get("uuid") or dn.get("uuidString") or dn.get("hostName"))] = int(r.get("replicaIndex", 0))
    return out


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

    # stop a datanode holding index 2 for good
    hosts = json.loads(c.admin("datanode", "list", "--json"))
    by_uuid = {node_uuid(h): details(h) for h in hosts}
    victim_uuid = next(u for u, i in holders.items() if i == 2)
    assert victim_uuid in by_uuid, (victim_uuid, hosts[:1])
    ports = {str(p.get("value")) for p in by_uuid[victim_uuid].get("ports", [])}
    victim = next((dn.name for dn in c.datanodes if str(dn.ports["ratis_ipc"]) in ports), None)
    assert victim is not None, (ports, by_uuid[victim_uuid])
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
    healthy_at = time.monotonic()
    live = {u: i for u, i in replica_indexes(c, cid).items() if u != victim_uuid}
    rebuilt_spread = replica_racks(c, live)
    assert len(set(rebuilt_spread.values())) == RACKS, rebuilt_spread  # the rebuilt index kept three racks
    for key in SIZES:
        assert digest(read_back(c, tmp_path, key)) == digest(data[key]), key
    report = c.admin("container", "report")
    assert re.search(r"MISSING: 0", report), report
    c.timings.add(f"{victim} killed -> DEAD", dead_at - killed)
    c.timings.add(f"DEAD -> container {cid} rebuilt (indexes 1..5 live)", healthy_at - dead_at)
    print(f"\nozone-ec: DEAD {dead_at - killed:.1f} s after the kill; index 2 rebuilt {healthy_at - dead_at:.1f} s "
          "after DEAD")

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
    for key in SIZES:
        assert digest(read_back(c, tmp_path, key)) == digest(data[key]), key
    c.timings.add(f"decommission {leaving_ip} -> DECOMMISSIONED (index 4 copied)", done_at - asked)
    print(f"ozone-ec: {leaving_ip} DECOMMISSIONED {done_at - asked:.1f} s after `ozone admin datanode decommission`")
