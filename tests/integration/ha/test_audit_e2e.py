"""The replication audit end to end: a real 3-SCM quorum, simulated datanodes, known faults, the real
CLI (`admin audit export --all-scms`, then `audit run`, which runs the job through spark-submit in
local mode), and the audit must find exactly the injected faults and nothing else.

Faults, each on its own CLOSED container (the ReplicationManager is stopped so SCM does not repair
them before the export):

* a lost replica            -> UNDER_REPLICATED
* an extra replica          -> OVER_REPLICATED
* replicas on one rack      -> MIS_REPLICATED (two replicas on one rack is what the rack-aware policy
                               allows, so the third is moved there too)
* a stale BCSID on a replica -> REPLICA_BCSID_MISMATCH (SCM itself reports the container HEALTHY)
* a diverged container row in one follower's scm.db -> CROSS_SCM_CONTAINER_MISMATCH naming the field

and SCM's own verdicts must agree with the audit's on every container (no VERDICT_MISMATCH). The
faults go on containers whose pipeline spans both racks; a container SCM itself placed on a one-rack
pipeline (the placement spreads only over datanodes below their pipeline limit) must come out
MIS_REPLICATED, as the simulator's own layout says.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from scm_server.client.config import SCMClientConfig
from scm_server.client.retryable import is_answer_or_transient
from scm_server.client.scm_client import SCMClient
from scm_server.datanode_sim import DatanodeSimulator
from scm_server.datanode_sim.simulator import RState, SimDatanode
from scm_server.local.quorum import HALocalCluster
from scm_server.metadata import SCMMetadataStore
from scm_server.proto import hdds_pb2

from .harness import CLIENT_CONFIG, TEST_SETTINGS, wait_caught_up, wait_open_pipeline, wait_until

SETTINGS = {
    **TEST_SETTINGS,
    # Pipelines are made once all six datanodes are registered (the safemode pre-check).
    "hdds.scm.safemode.min.datanode": "6",
    # Nothing may expire or get repaired while the faults wait for the export.
    "hdds.scm.replication.thread.interval": "1h",
    "ozone.scm.stale.node.interval": "60s",
    "ozone.scm.dead.node.interval": "120s",
}
# A real quorum plus a JVM: its own target (make audit-test, run by .ci/run) keeps make test's time.
pytestmark = [pytest.mark.audit_e2e, pytest.mark.timeout(900)]
CONTAINERS = 10
LOCAL = SCMClientConfig(max_retries=0, retry_interval=0.05, rpc_timeout=10)


def ozone(cluster: HALocalCluster, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scm_server.cli.main", "--conf", str(cluster.scms[0].conf_dir), *args],
        capture_output=True, text=True, timeout=timeout,
    )


async def ozone_async(cluster: HALocalCluster, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The CLI in a thread, so the simulated datanodes (this event loop) keep heartbeating."""
    return await asyncio.to_thread(ozone, cluster, *args, timeout=timeout)


async def replicas_seen(address: str, cids: list[int]) -> dict[int, list[str]]:
    """Which datanodes one SCM lists for each container: its own view (x-scm-read: local), since a
    follower otherwise refuses reads and the client follows it to the leader."""
    out = {}
    async with SCMClient([address], LOCAL, local_read=True) as c:
        for cid in cids:
            _, replicas = await c.get_container_with_pipeline(cid)
            out[cid] = sorted(r.datanode.uuid for r in replicas)
    return out


def holders(sim: DatanodeSimulator, cid: int) -> list[SimDatanode]:
    return [dn for dn in sim.datanodes if cid in dn.containers]


def drop(dn: SimDatanode, cid: int) -> None:
    replica = dn.containers.pop(cid)
    gone = replica.to_proto(dn.sim.container_size)
    gone.state = RState.DELETED  # type: ignore[assignment]
    dn._icr(gone)


def place(dn: SimDatanode, replica: Any) -> None:
    copy = dataclasses.replace(replica)
    dn.containers[copy.container_id] = copy
    dn._icr(copy)


async def test_audit_finds_exactly_the_injected_faults(tmp_path: Path) -> None:
    cluster = HALocalCluster(tmp_path / "c", 3, settings=SETTINGS)
    sim = DatanodeSimulator(
        cluster.datanode_addresses, 6, heartbeat_interval=0.3, racks=2,
        admin_addresses=cluster.client_addresses, container_report_interval=5,
    )
    try:
        cluster.start_quorum()
        await sim.start()
        await cluster.wait_healthy_quorum(timeout=90)
        await wait_open_pipeline(cluster)
        stop = await ozone_async(cluster, "admin", "replicationmanager", "stop")
        assert stop.returncode == 0, stop.stderr

        # Ten CLOSED containers with one key each on their pipeline's three datanodes.
        cids: list[int] = []
        async with SCMClient(cluster.client_addresses, CLIENT_CONFIG) as admin:
            for _ in range(CONTAINERS):
                cwp = await admin.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "audit-test")
                cid = cwp.containerInfo.containerID
                await sim.write_to_container(cid, 1 << 20, 1, cwp.pipeline)
                cids.append(cid)
            for cid in cids:
                await admin.close_container(cid)

            async def all_closed() -> bool:
                states = [(await admin.get_container(cid)).state for cid in cids]
                return all(s == hdds_pb2.CLOSED for s in states)

            await wait_until(all_closed, 60, "every container CLOSED")
        # A pipeline can lie on one rack (the placement spreads only over datanodes below their
        # pipeline limit): its containers are MIS_REPLICATED from the start, and the audit must say
        # so. The ground truth is the simulator's own layout; faults go on containers on two racks.
        spread = [cid for cid in cids if len({dn.rack for dn in holders(sim, cid)}) == 2]
        narrow = [cid for cid in cids if cid not in spread]
        assert len(spread) >= 5, f"need five containers on two racks to inject faults into, got {spread} of {cids}"
        lost, extra, one_rack, stale, diverged = spread[:5]

        # -- faults on datanodes --
        drop(holders(sim, lost)[0], lost)
        spare = next(dn for dn in sim.datanodes if extra not in dn.containers)
        place(spare, holders(sim, extra)[0].containers[extra])
        racks = {dn.rack for dn in holders(sim, one_rack)}
        assert len(racks) == 2, f"container {one_rack} should start on two racks, got {racks}"
        by_rack: dict[str, list[SimDatanode]] = {}
        for dn in holders(sim, one_rack):
            by_rack.setdefault(dn.rack, []).append(dn)
        crowded = max(by_rack, key=lambda r: len(by_rack[r]))
        for dn in [d for r, ds in by_rack.items() if r != crowded for d in ds]:
            target = next(d for d in sim.datanodes if d.rack == crowded and one_rack not in d.containers)
            place(target, dn.containers[one_rack])
            drop(dn, one_rack)
        stale_dn = holders(sim, stale)[0]
        stale_dn.containers[stale].bcsid -= 1
        stale_dn._icr(stale_dn.containers[stale])

        # -- a diverged container row on one follower's scm.db (stopped, edited, restarted) --
        leader = await cluster.wait_leader()
        follower = next(i for i in range(3) if i != leader)
        cluster.kill(follower, signal.SIGTERM)
        store = SCMMetadataStore(cluster.scms[follower].metadata_dir)
        try:
            row = store.containers.get(diverged)
            assert row is not None
            row.usedBytes += 4096
            store.containers.put(diverged, row)
        finally:
            store.close()
        cluster.start_node(follower)
        cluster.wait_serving(follower, 90)
        await wait_caught_up(cluster, timeout=90)

        # Every SCM sees the faults before the export.
        expected = {cid: sorted(dn.uuid for dn in holders(sim, cid)) for cid in cids}
        assert len(expected[lost]) == 2 and len(expected[extra]) == 4 and len(expected[one_rack]) == 3

        async def everyone_agrees() -> bool:
            try:
                views = [await replicas_seen(s.client_address, cids) for s in cluster.scms]
            except Exception as exc:
                if not is_answer_or_transient(exc):
                    raise
                return False
            return all(v == expected for v in views)

        await wait_until(everyone_agrees, 90, "every SCM listing the injected replica layout")

        # -- export every SCM at one barrier, then audit through spark-submit --
        export_dir, report_dir = tmp_path / "export", tmp_path / "report"
        exported = await ozone_async(cluster, "admin", "audit", "export", "--all-scms", "--out", str(export_dir), "--json")
        assert exported.returncode == 0, exported.stderr
        results = json.loads(exported.stdout)
        assert sorted(r["node_id"] for r in results) == ["scm1", "scm2", "scm3"]
        assert {r["consistency"] for r in results} == {"barrier"}
        assert len({r["applied_index"] for r in results}) == 1, results
        audited = await ozone_async(
            cluster, "audit", "run", "--input", str(export_dir), "--out", str(report_dir), "--master", "local[2]",
            "--status-file", str(tmp_path / "status.json"), timeout=900,
        )
        assert audited.returncode == 0, audited.stderr[-3000:]
        assert "report:" in audited.stdout
    finally:
        await sim.stop()
        cluster.stop_all()

    summary = json.loads((report_dir / "summary.json").read_text())
    findings = pq.read_table(report_dir / "latest" / "findings").to_pylist()
    all_scms = ["scm1", "scm2", "scm3"]
    got = sorted((f["kind"], f["container_id"], f["scm_ids"]) for f in findings)
    assert got == sorted(
        [
            ("UNDER_REPLICATED", lost, all_scms),
            ("OVER_REPLICATED", extra, all_scms),
            ("MIS_REPLICATED", one_rack, all_scms),
            ("REPLICA_BCSID_MISMATCH", stale, all_scms),
            ("CROSS_SCM_CONTAINER_MISMATCH", diverged, sorted(all_scms)),
            *(("MIS_REPLICATED", cid, all_scms) for cid in narrow),
        ]
    ), json.dumps(findings, indent=1, default=str)
    by_kind = {f["kind"]: f for f in findings}
    assert by_kind["REPLICA_BCSID_MISMATCH"]["datanode_uuid"] == stale_dn.uuid
    assert by_kind["CROSS_SCM_CONTAINER_MISMATCH"]["fields"] == ["used_bytes"]
    odd = cluster.scms[follower].node_id
    assert f"{odd}=" in by_kind["CROSS_SCM_CONTAINER_MISMATCH"]["detail"]
    # SCM's own verdicts agree with the audit everywhere; the summary says so and counts right.
    assert summary["agreement"]["agrees"] is True
    assert summary["containers"]["total"] == CONTAINERS
    assert summary["containers"]["byHealth"]["HEALTHY"] == CONTAINERS - 3 - len(narrow)
    assert summary["crossScm"]["compared"] is True and summary["input"]["sameAppliedIndex"] is True
    assert summary["findings"]["total"] == 5 + len(narrow)
    # SCM's own verdict beside each container finding; every SCM heard from all six datanodes since it started.
    per_container = [f for f in findings if not f["kind"].startswith("CROSS_SCM")]
    assert per_container and all(f["scm_verdict"] and f["scm_verdict"] == f["audit_verdict"] for f in per_container), findings
    assert summary["views"]["complete"] is True, summary["perScm"]
    assert {v["view"]["expected"] for v in summary["perScm"].values()} == {6}
    # the compact summary the operator's audit Pod leaves as its termination message (status.audit.lastSummary)
    assert json.loads((tmp_path / "status.json").read_text()) == {
        "runId": summary["runId"], "containers": CONTAINERS, "notHealthy": 3 + len(narrow),
        "findings": 5 + len(narrow), "agreesWithSCM": True,
    }
    html = (report_dir / "report.html").read_text()
    assert "MIS_REPLICATED" in html and "<svg" in html and "http://" not in html and "https://" not in html
