"""Apache Ozone's Recon against our SCM ring: Ozone 2.2.0's three datanodes and OM on our 3-SCM ring, a volume,
a bucket and keys written, then Ozone's Recon (2.2.0, from Maven Central) started beside them with
``ozone.recon.scm.snapshot.enabled=false``. Through Recon's REST API it must show what our SCM knows, as our SCM
reports it to Ozone's own CLI (``ozone admin ... --json``):

* ``/api/v1/datanodes``: every datanode our SCM lists (by UUID), HEALTHY;
* ``/api/v1/pipelines``: every OPEN pipeline our SCM lists (by id);
* ``/api/v1/containers``: every container our SCM lists (by id);
* ``/api/v1/clusterState``: the same counts of datanodes and containers, and at least our open pipelines.

Recon learns the datanodes from their own reports (they report to Recon as to an SCM), the pipelines and
containers from our SCM's client calls; each check is a bounded wait on the condition. ``OZONE_RECON_SCM=ozone``
runs the same against Ozone's own SCM ring (the anchor), ``=ozone,ours`` both, one after the other.

Run by ``make ozone-recon-test``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.ozone_interop.ozone_procs import REPO, Timings, resolve_classpath, wait_for

from .recon import ReconCluster, resolve_recon_classpath

pytestmark = [pytest.mark.ozone_recon, pytest.mark.timeout(1800)]
SIDES = [s for s in os.environ.get("OZONE_RECON_SCM", "ours").replace(" ", "").split(",") if s]
WAIT = 240  # seconds: Recon's first syncs (OM snapshot, SCM containers, datanode reports) on a loaded machine


@pytest.fixture(params=SIDES)
def cluster(request: pytest.FixtureRequest) -> Iterator[ReconCluster]:
    classpath, account = resolve_classpath()
    recon_classpath, recon_account = resolve_recon_classpath()
    timings = Timings(jars=f"{account}; recon: {recon_account}")
    base = REPO / "run-data" / "ozone-recon" / request.param
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    c = ReconCluster(base, classpath, recon_classpath, scm_side=request.param, timings=timings)
    start = time.monotonic()
    c.start()
    timings.add("cluster start, total", time.monotonic() - start)
    try:
        yield c
    finally:
        timings.memory = c.resident_memory()
        c.stop()
        print(f"\n[scm side: {request.param}; logs under {base}/logs]\n{timings.report()}")


def _scm_view(c: ReconCluster) -> tuple[set[str], set[str], set[int]]:
    """(datanode UUIDs, OPEN pipeline ids, container ids) as the SCM answers Ozone's own CLI."""
    nodes = json.loads(c.admin("datanode", "list", "--json"))
    pipelines = json.loads(c.admin("pipeline", "list", "--json"))
    containers = json.loads(c.admin("container", "list", "--all"))  # JSON without a flag
    # Ozone 2.2.0's CLI prints each datanode flat, its UUID under "id"; older ones nest it under datanodeDetails
    uuids = {str(_details(n).get("uuid") or _details(n).get("uuidString") or _details(n).get("id")) for n in nodes}
    open_pipelines = {_pipeline_id(p) for p in pipelines if "OPEN" in str(p.get("pipelineState", p.get("state")))}
    ids = {int(x["containerID"]) for x in containers}
    return uuids, open_pipelines, ids


def _details(entry: dict[str, Any]) -> dict[str, Any]:
    """A `datanode list --json` entry's datanode details (nested or flat, as the CLI version prints them)."""
    nested = entry.get("datanodeDetails")
    return nested if isinstance(nested, dict) else entry


def _pipeline_id(entry: dict[str, Any]) -> str:
    pid = entry.get("id")
    return str(pid.get("id") if isinstance(pid, dict) else pid)


def test_recon_shows_what_the_scm_knows(cluster: ReconCluster, tmp_path: os.PathLike[str]) -> None:
    c = cluster
    c.sh("volume", "create", "/recon")
    c.sh("bucket", "create", "/recon/bucket")
    src = os.path.join(str(tmp_path), "key.bin")
    with open(src, "wb") as f:
        f.write(os.urandom(256 * 1024))
    for i in range(3):
        # 300 s, as the interop tier's puts: on a shared 2-core machine beside the other tiers' JVMs a put's client
        # JVM, its first pipeline's Ratis group and the write took over 120 s once (CI, 2026-12-07)
        c.sh("key", "put", f"/recon/bucket/key{i}", src, timeout=300)
    uuids, open_pipelines, container_ids = _scm_view(c)
    assert len(uuids) == 3 and open_pipelines and container_ids, (uuids, open_pipelines, container_ids)
    print(f"\nSCM: {len(uuids)} datanodes, {len(open_pipelines)} open pipelines, containers {sorted(container_ids)}")

    c.start_recon()

    def datanodes() -> dict[str, str] | None:
        c.check_alive()
        body = c.recon_api_or_none("datanodes")
        if body is None:
            return None
        seen = {d["uuid"]: d["state"] for d in body.get("datanodes", [])}
        return seen if set(seen) == uuids and set(seen.values()) == {"HEALTHY"} else None

    wait_for("Recon's /api/v1/datanodes listing the SCM's datanodes, HEALTHY", datanodes, WAIT, interval=3)

    def pipelines() -> set[str] | None:
        c.check_alive()
        body = c.recon_api_or_none("pipelines")
        if body is None:
            return None
        seen = {str(p["pipelineId"]) for p in body.get("pipelines", [])}
        return seen if open_pipelines <= seen else None

    seen_pipelines = wait_for("Recon's /api/v1/pipelines listing the SCM's open pipelines", pipelines, WAIT,
                              interval=3)

    def containers() -> set[int] | None:
        c.check_alive()
        body = c.recon_api_or_none("containers")
        if body is None:
            return None
        seen = {int(x["ContainerID"]) for x in body.get("data", {}).get("containers", [])}
        return seen if seen == container_ids else None

    wait_for("Recon's /api/v1/containers listing the SCM's containers", containers, WAIT, interval=3)

    def cluster_state() -> dict[str, object] | None:
        body = c.recon_api_or_none("clusterState")
        if body is None:
            return None
        ok = (body.get("totalDatanodes") == len(uuids) and body.get("healthyDatanodes") == len(uuids)
              and body.get("containers") == len(container_ids)
              and int(body.get("pipelines", 0)) >= len(open_pipelines))
        return dict(body) if ok else None

    state = wait_for("Recon's /api/v1/clusterState counting the SCM's datanodes, pipelines and containers",
                     cluster_state, WAIT, interval=3)
    print(f"Recon: {len(seen_pipelines)} pipelines; clusterState "
          f"{ {k: state[k] for k in ('totalDatanodes', 'healthyDatanodes', 'pipelines', 'containers')} }")
