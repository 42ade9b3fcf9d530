"""The job's I/O around the transforms, in-process with the session's SparkSession: a run writes
findings, summary and a self-contained report; runs accumulate into trends; and a run that fails
(here: an export whose rows belong to another applied index) leaves the previous report untouched."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from exports import write_export
from pyspark.sql import SparkSession

from scm_audit import job, output
from scm_audit.errors import AuditError
from scm_server import audit_format as fmt

# Three whole job runs (each plans the full chain, ~20 s warm on 2 busy cores): with the end-to-end test in
# make audit-test (.ci/run), so make test keeps its time; the transforms and inputs stay in make test.
pytestmark = pytest.mark.audit_e2e

NODES = [{"datanode_uuid": f"dn{i}", "rack": f"/r{i % 2}", "hostname": f"host{i}"} for i in range(1, 5)]


def export_set(root: Path, *, usage: int = 100, index: int = 42, row_index: int | None = None) -> Path:
    """Two SCMs; container 2 is under-replicated, 3 is missing, and scm2 stores another used_bytes for 1."""
    for n, (node, leader) in enumerate((("scm1", True), ("scm2", False)), start=1):
        rows = {
            fmt.CONTAINERS: [
                {"container_id": 1, "used_bytes": usage if node == "scm1" else usage + 1},
                {"container_id": 2},
                {"container_id": 3},
            ],
            fmt.REPLICAS: [
                *({"container_id": 1, "datanode_uuid": d} for d in ("dn1", "dn2", "dn3")),
                *({"container_id": 2, "datanode_uuid": d} for d in ("dn1", "dn2")),
            ],
            fmt.DATANODES: NODES,
            fmt.PIPELINES: [{"pipeline_id": "p1"}],
            fmt.RM_VERDICTS: [
                {"container_id": 1, "health": "HEALTHY", "states": ["HEALTHY"]},
                {"container_id": 2, "health": "UNDER_REPLICATED", "states": ["UNDER_REPLICATED"]},
                {"container_id": 3, "health": "HEALTHY" if node == "scm2" else "MISSING", "states": ["?"]},
            ],
        }
        identity = (f"uuid-{n}", "CID-test", row_index) if row_index is not None and node == "scm2" else None
        write_export(root / node, rows, scm_id=f"uuid-{n}", node_id=node, is_leader=leader, applied_index=index,
                     digests={"deletedBlocks": {"sha256": "a" * 64, "count": 0}}, row_identity=identity)
    return root


def test_runs_write_a_report_keep_trends_and_never_publish_a_failed_run(spark: SparkSession, tmp_path: Path) -> None:
    out = tmp_path / "report"
    t0 = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.UTC)
    summary = job.run(spark, export_set(tmp_path / "e1"), out, now=t0)

    findings = pq.read_table(out / "latest" / output.FINDINGS_DIR).to_pylist()
    got = sorted((f["kind"], f["container_id"], f["scm_ids"], f["scm_verdict"]) for f in findings)
    assert got == [  # SCM's own verdict beside every container finding, from the same SCM's export
        ("CROSS_SCM_CONTAINER_MISMATCH", 1, ["scm1", "scm2"], None),
        ("MISSING", 3, ["scm1"], "MISSING"),
        ("MISSING", 3, ["scm2"], "HEALTHY"),
        ("UNDER_REPLICATED", 2, ["scm1", "scm2"], "UNDER_REPLICATED"),
        ("VERDICT_MISMATCH", 3, ["scm2"], "HEALTHY"),
    ]
    assert {k: v for k, v in summary["containers"].items() if k != "byState"} == {
        "total": 3, "healthy": 1,
        "byHealth": {**{s: 0 for s in summary["containers"]["byHealth"]}, "HEALTHY": 1, "UNDER_REPLICATED": 1, "MISSING": 1},
        "byLifecycleState": {"CLOSED": 3},
    }
    assert summary["agreement"] == {
        "containersCompared": {"scm1": 3, "scm2": 3}, "disagreements": {"scm1": 0, "scm2": 1}, "agrees": False,
    }
    assert summary["primary"] == "scm1" and summary["input"]["consistency"] == "barrier"
    # The headline is the leader's (scm1's) view; every view's findings beside it.
    assert summary["findings"]["byKind"] == {"MISSING": 1, "UNDER_REPLICATED": 1, "CROSS_SCM_CONTAINER_MISMATCH": 1}
    assert summary["findings"]["allViews"]["byKind"] == {
        "MISSING": 1, "UNDER_REPLICATED": 1, "VERDICT_MISMATCH": 1, "CROSS_SCM_CONTAINER_MISMATCH": 1,
    }
    assert summary["perScm"]["scm2"]["findingsByKind"] == {
        "MISSING": 1, "UNDER_REPLICATED": 1, "VERDICT_MISMATCH": 1, "CROSS_SCM_CONTAINER_MISMATCH": 1,
    }
    assert summary["containers"]["byState"]["MISSING"] == 1 and summary["views"]["complete"]
    assert summary["replicationManager"]["state"] == "RUNNING"
    assert {r["rack"]: r["findings"] for r in summary["findings"]["byRack"]} == {"/r1": 1, "/r0": 1}
    assert json.loads((out / output.SUMMARY).read_text())["runId"] == summary["runId"]
    html = (out / output.REPORT).read_text()
    for needle in ("UNDER_REPLICATED", "VERDICT_MISMATCH", "<svg", "Trends appear from the second run on"):
        assert needle in html
    for remote in ("http://", "https://", "<link", "src="):
        assert remote not in html, f"report is not self-contained: {remote}"
    good_report = (out / output.REPORT).read_bytes()

    # A failing run: scm2's rows say another applied index than its manifest.
    bad = export_set(tmp_path / "e2", row_index=41)
    with pytest.raises(AuditError, match=r"holds rows of SCM uuid-2 .* at applied index 41"):
        job.run(spark, bad, out, now=t0 + dt.timedelta(hours=1))
    assert (out / output.REPORT).read_bytes() == good_report
    assert [p.name for p in (out / output.RUNS).iterdir()] == [summary["runId"]]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]

    # A second good run: the trend chart appears and `latest` moves.
    second = job.run(spark, export_set(tmp_path / "e3", usage=100, index=50), out, now=t0 + dt.timedelta(hours=2))
    assert os.readlink(out / output.LATEST) == f"{output.RUNS}/{second['runId']}"
    assert len(output.load_history(out)) == 2
    html = (out / output.REPORT).read_text()
    assert "Trends appear" not in html and "<polyline" in html
