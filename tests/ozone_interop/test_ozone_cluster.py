"""A real Apache Ozone cluster (2.2.0 jars from Maven Central) driven by Ozone's own `ozone sh` and `ozone admin`.

Parametrised by the SCM side (conftest.SCM_SIDES): Ozone's own 3-SCM HA ring (the anchor) and ours. Ozone's
three datanodes and its OM act only on what the SCM really sends, so the scenario checks the semantics: pipelines
created, containers allocated, blocks handed out, and a leader SIGKILLed while keys are written.
Run by `make ozone-interop` only (marker ozone_interop).
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from pathlib import Path

import pytest

from tests.ozone_interop.ozone_procs import (
    ADMIN_MAIN,
    OzoneCluster,
    digest,
    keys_survive_leader_kill,
    wait_for,
)

pytestmark = [pytest.mark.ozone_interop, pytest.mark.timeout(1800)]

VOLUME = "vol1"
BUCKET = "bucket1"


def put_and_get(cluster: OzoneCluster, tmp: Path, key: str, data: bytes) -> bytes:
    src = tmp / f"{key}.in"
    dst = tmp / f"{key}.out"
    src.write_bytes(data)
    cluster.sh("key", "put", f"/{VOLUME}/{BUCKET}/{key}", str(src))
    cluster.sh("key", "get", f"/{VOLUME}/{BUCKET}/{key}", str(dst))
    return dst.read_bytes()


def test_volume_bucket_key_put_get_identical_bytes(ozone_cluster: OzoneCluster, tmp_path: Path) -> None:
    c = ozone_cluster
    start = time.monotonic()
    c.sh("volume", "create", f"/{VOLUME}")
    c.sh("bucket", "create", f"/{VOLUME}/{BUCKET}")
    info = json.loads(c.sh("bucket", "info", f"/{VOLUME}/{BUCKET}"))
    assert info["volumeName"] == VOLUME and info["name"] == BUCKET

    # two chunks and a tail (Ozone's chunk is 4 MiB): the bytes cross chunk boundaries on three datanodes
    data = os.urandom(9 * 1024 * 1024 + 12345)
    back = put_and_get(c, tmp_path, "first-key", data)
    assert len(back) == len(data) and digest(back) == digest(data)

    key = json.loads(c.sh("key", "info", f"/{VOLUME}/{BUCKET}/first-key"))
    assert key["dataSize"] == len(data)
    assert key["replicationConfig"]["replicationFactor"] == "THREE"
    c.timings.add("scenario: volume, bucket, 9 MiB key put + get", time.monotonic() - start)


def test_admin_commands(ozone_cluster: OzoneCluster) -> None:
    c = ozone_cluster
    start = time.monotonic()
    assert "out of safe mode" in c.admin("safemode", "status").lower()

    containers = json.loads(c.admin("container", "list"))
    assert containers, "a key was written, so SCM has allocated at least one container"
    states = {ct["state"] for ct in containers}
    assert "OPEN" in states, containers
    assert all(ct["replicationConfig"]["replicationFactor"] == "THREE" for ct in containers), containers

    pipelines = c.admin("pipeline", "list")
    assert any("RATIS/THREE" in ln and "State:OPEN" in ln for ln in pipelines.splitlines()), pipelines

    roles = c.scm_roles()
    assert sorted(node for node, _ in roles) == sorted(s.node_id for s in c.scms), roles
    assert [role for _, role in roles].count("LEADER") == 1, roles
    assert [role for _, role in roles].count("FOLLOWER") == len(c.scms) - 1, roles
    roles_table_has_five_columns(c)
    ratis_one_refused_when_every_datanode_has_one(c, pipelines)
    if c.scm_side == "ours":
        close_container_through_the_datanodes(c)
        # what Ozone's datanodes, OM and CLIs did went through our Hadoop RPC listeners
        calls = c.our_hadoop_rpc_calls()
        for protocol in ("StorageContainerDatanodeProtocol", "ScmBlockLocationProtocol",
                         "StorageContainerLocationProtocol"):
            assert calls.get(protocol, 0) > 0, calls
    c.timings.add("scenario: admin safemode/container/pipeline/roles", time.monotonic() - start)


def roles_table_has_five_columns(c: OzoneCluster) -> None:
    """`ozone admin scm roles --table` splits each peerRoles line at ':' into the five columns "Host Name", "Ratis
    Port", "Role", "Node ID", "Host Address" and exits 255 on a line of another length (issue 29: ours were four)."""
    out = c.admin("scm", "roles", "--table")
    header = next((ln for ln in out.splitlines() if "Host Name" in ln), "")
    assert [h.strip() for h in header.strip().strip("|").split("|")] == [
        "Host Name", "Ratis Port", "Role", "Node ID", "Host Address"], out
    rows = [[cell.strip() for cell in ln.strip().strip("|").split("|")]
            for ln in out.splitlines() if re.search(r"\|\s*(LEADER|FOLLOWER)\s*\|", ln)]
    assert sorted(row[2] for row in rows) == ["FOLLOWER"] * (len(c.scms) - 1) + ["LEADER"], out
    for host, port, _role, peer, address in rows:
        assert host and peer and port in {str(s.ratis_port) for s in c.scms}, out
        assert address == "127.0.0.1", out  # every member's host is loopback (127.0.0.1, or localhost on Ozone's)


def ratis_one_refused_when_every_datanode_has_one(c: OzoneCluster, pipelines: str) -> None:
    """`ozone admin pipeline create -t RATIS -f ONE` while every datanode hosts its RATIS/ONE pipeline (SCM's
    background creator makes one per datanode, Ozone's default): Ozone's SCM picks only a datanode in no RATIS/ONE
    pipeline, for an administrator too, and refuses; ours answers the same, with Ozone's counts."""
    n = len(c.datanodes)

    def every_datanode_has_ratis_one(listed: str) -> bool | None:
        ones = [ln for ln in listed.splitlines() if "RATIS/ONE" in ln and "State:CLOSED" not in ln]
        return True if len(ones) == n else None

    if not every_datanode_has_ratis_one(pipelines):  # the `pipeline list` just taken; asked again only if needed
        wait_for(f"{n} RATIS/ONE pipelines, one per datanode",
                 lambda: every_datanode_has_ratis_one(c.admin("pipeline", "list")), 60, interval=2)
    result = c.tool(ADMIN_MAIN, "pipeline", "create", "-t", "RATIS", "-f", "ONE")
    assert result.returncode != 0, result.stdout
    assert f"Cannot create pipeline RATIS/ONE using 0 nodes. Used {n} nodes. Healthy nodes {n}" in result.stderr, (
        result.stderr[-2000:])


def close_container_through_the_datanodes(c: OzoneCluster) -> None:
    """A container's life through Ozone's datanodes: `container create` (SCM allocates it, the CLI creates it on
    the pipeline's three datanodes), `container close` (SCM sends closeContainerCommand in heartbeat answers, the
    datanodes close their replicas and report them), until SCM says CLOSED. Asserted on our ring only: on Ozone's
    own 2.2.0 ring in this tier the container stayed CLOSING for the 120 s (seen once, not investigated yet;
    docs/ozone-interop.md)."""
    created = c.admin("container", "create", "-t", "RATIS", "-r", "THREE")
    m = re.search(r"Container (\d+) is created", created)
    assert m is not None, created
    cid = m.group(1)
    c.admin("container", "close", cid)

    def container_closed() -> bool | None:
        info = json.loads(c.admin("container", "info", cid, "--json"))
        return True if info["containerInfo"]["state"] == "CLOSED" else None

    wait_for(f"container {cid} CLOSED after ozone admin container close", container_closed, 120, interval=1)


def test_admin_leaf_commands_reaching_scm(ozone_cluster: OzoneCluster) -> None:
    """The `ozone admin` leaf commands that reach SCM and leave the ring as it was, each checked on the fields it
    prints: upgrade finalization, deleted blocks, the balancer, datanode usage and decommission status, container
    list filters and report, pipeline deactivate/activate, the replication manager, reconfiguration (a key changed
    in one SCM's ozone-site.xml at run time) and a leadership transfer to a named follower. On both rings, with
    the same expectations (the balancer started and stopped; Ozone's node bean on /jmx and /prom)."""
    c = ozone_cluster
    start = time.monotonic()

    # A ring that never needed finalizing: Ozone's SCM sets its status from its finalization checkpoint
    # (FINALIZATION_COMPLETE) when it builds its upgrade context, so both rings print FINALIZATION_DONE
    assert c.admin("scm", "finalizationstatus").strip().splitlines()[-1] == "FINALIZATION_DONE"
    assert "Upgrade has already been finalized." in c.admin("scm", "finalizeupgrade")
    summary = c.admin("scm", "deletedBlocksTxn", "summary")
    assert "DeletedBlocksTransaction summary:" in summary, summary
    assert re.search(r"Total number of transactions: \d+", summary), summary

    assert "ContainerBalancer is Not Running." in c.admin("containerbalancer", "status")
    bad = c.tool(ADMIN_MAIN, "containerbalancer", "start", "--threshold", "100")  # Ozone's CLI checks it itself
    assert bad.returncode != 0 and "Threshold should be specified in the range" in bad.stderr, bad.stderr[-2000:]
    balancer = c.tool(ADMIN_MAIN, "containerbalancer", "start", "-i", "2")
    assert "Container Balancer started successfully." in balancer.stdout, balancer.stdout + balancer.stderr
    # a balanced cluster (or one whose 20 % of three datanodes is none) may stop the run on its own before the
    # stop arrives: either answer is Ozone's
    stop = c.tool(ADMIN_MAIN, "containerbalancer", "stop")
    assert stop.returncode == 0 or "but running state is actually STOPPED" in stop.stdout + stop.stderr, (
        stop.stdout + stop.stderr[-2000:])
    wait_for("the balancer stopped", lambda: True if "Not Running" in c.admin("containerbalancer", "status")
             else None, 60, interval=2)

    # Ozone's bean and metric names on the web port, the same values on both rings
    http = f"http://127.0.0.1:{c.scms[0].http_port}"
    with urllib.request.urlopen(f"{http}/jmx?qry=Hadoop:service=StorageContainerManager,name=SCMNodeMetrics",
                                timeout=30) as resp:
        (node_bean,) = json.loads(resp.read())["beans"]
    assert node_bean["InServiceHealthyNodes"] == len(c.datanodes), node_bean
    with urllib.request.urlopen(f"{http}/prom", timeout=30) as resp:
        prom = resp.read().decode()
    assert re.search(rf"^scm_node_manager_in_service_healthy_nodes(\{{[^}}]*\}})? {len(c.datanodes)}(\.0)?$", prom,
                     re.M), [ln for ln in prom.splitlines() if "in_service_healthy" in ln]

    usage = json.loads(c.admin("datanode", "usageinfo", "--most-used", "--count", "3", "--json"))
    assert len(usage) == len(c.datanodes), usage
    assert all(u["ozoneCapacity"] > 0 and u["pipelineCount"] >= 1 for u in usage), usage
    utilization = [(u["ozoneCapacity"] - u["ozoneAvailable"]) / u["ozoneCapacity"] for u in usage]
    assert utilization == sorted(utilization, reverse=True), usage  # most used first, by Ozone's utilization
    decom = c.admin("datanode", "status", "decommission")  # asks GetMetrics for NodeDecommissionMetrics too
    assert "Decommission Status: DECOMMISSIONING - 0 node(s)" in decom, decom

    open_ones = json.loads(c.admin("container", "list", "--state", "OPEN"))
    assert open_ones and {ct["state"] for ct in open_ones} == {"OPEN"}, open_ones
    closed = json.loads(c.admin("container", "list", "--state", "CLOSED"))
    assert {ct["state"] for ct in closed} <= {"CLOSED"}, closed
    report = c.tool(ADMIN_MAIN, "container", "report")
    assert report.returncode == 0, report.stderr[-2000:]
    assert re.search(r"^OPEN: \d+", report.stdout, re.M) or "not available until Replication Manager" in (
        report.stderr), report.stdout + report.stderr
    assert "ReplicationManager is Running." in c.admin("replicationmanager", "status")
    open_id = open_ones[0]["containerID"]
    refused = c.tool(ADMIN_MAIN, "container", "reconcile", str(open_id))  # Ozone's eligibility rule, both rings
    assert refused.returncode != 0, refused.stdout
    assert f"Cannot reconcile container {open_id} in state OPEN." in refused.stderr, refused.stderr[-2000:]

    listed = c.admin("pipeline", "list")
    one = next(re.search(r"Id: ([0-9a-f-]{36})", ln).group(1)  # type: ignore[union-attr]
               for ln in listed.splitlines() if "RATIS/ONE" in ln and "State:OPEN" in ln and "Id: " in ln)

    def state_of(pid: str) -> str | None:
        line = next((ln for ln in c.admin("pipeline", "list").splitlines() if pid in ln), "")
        m = re.search(r"State:(\w+)", line)
        return m.group(1) if m else None

    c.admin("pipeline", "deactivate", one)
    assert state_of(one) == "DORMANT"
    c.admin("pipeline", "activate", one)
    assert state_of(one) == "OPEN"

    first = c.scms[0]
    address = f"127.0.0.1:{first.client_port}"
    props = c.admin("reconfig", "--service=SCM", f"--address={address}", "properties")
    assert f"SCM: Node [{address}] Reconfigurable properties:" in props, props
    assert "hdds.scm.block.deletion.per-interval.max" in props.splitlines(), props
    c.rewrite_scm_site(first.node_id, {"hdds.scm.block.deletion.per-interval.max": "4321"})
    started = c.admin("reconfig", "--service=SCM", f"--address={address}", "start")
    assert f"SCM: Started reconfiguration task on node [{address}]." in started, started

    def finished() -> str | None:
        out = c.admin("reconfig", "--service=SCM", f"--address={address}", "status")
        return out if "finished at" in out else None

    status = wait_for("the reconfiguration task finished", finished, 60, interval=1)
    assert re.search(r'SUCCESS: Changed property hdds.scm.block.deletion.per-interval.max\n\tFrom: "\d+"\n'
                     r'\tTo: "4321"', status), status

    peers = c.scm_peer_ids()
    follower, (peer_id, _) = next((n, v) for n, v in sorted(peers.items()) if v[1] == "FOLLOWER")
    moved = c.admin("scm", "transfer", "-n", peer_id)
    assert f"Transfer leadership successfully to {peer_id}." in moved, moved
    wait_for(f"{follower} leading after scm transfer", lambda: True if c.scm_leader() == follower else None,
             60, interval=1)
    c.timings.add("scenario: ozone admin leaf commands reaching SCM", time.monotonic() - start)


def test_freon_generates_and_validates_keys(ozone_cluster: OzoneCluster) -> None:
    """Ozone's load generator through OM's client path (one allocateBlock per key): 40 keys written by
    `freon ockg`, then read back and compared by `freon ockv`. The keys/s is printed as an anchor figure."""
    c = ozone_cluster
    n = 40
    common = ["-n", str(n), "-t", "4", "-v", VOLUME, "-b", "freon", "-p", "interop"]
    start = time.monotonic()
    out = c.freon("ockg", *common, "-s", "64KB")
    written = time.monotonic() - start
    assert re.search(rf"Successful executions: {n}\b", out), out[-3000:]
    assert "Failures: 0" in out, out[-3000:]
    start = time.monotonic()
    out = c.freon("ockv", *common)
    assert re.search(rf"Successful executions: {n}\b", out), out[-3000:]
    c.timings.add(f"scenario: freon ockg {n} x 64 KiB keys ({n / written:.1f} keys/s incl. JVM start)", written)
    c.timings.add(f"scenario: freon ockv {n} keys read back and compared", time.monotonic() - start)


def test_scm_leader_sigkilled_while_keys_are_written(ozone_cluster: OzoneCluster, tmp_path: Path) -> None:
    """Keys are put one after another (each `ozone sh key put` its own JVM) while the SCM leader is SIGKILLed;
    the remaining two SCMs elect a leader, writing goes on, and every acknowledged key reads back identical."""
    keys_survive_leader_kill(ozone_cluster, tmp_path, VOLUME, BUCKET)
