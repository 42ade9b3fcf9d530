"""What reaches the user when an audit run fails: one line naming the file or path and the fix, and
nothing left behind that the run created (nothing that existed is touched)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from exports import write_export
from pyspark.sql import SparkSession

from scm_audit import job, output, submit
from scm_audit.errors import AuditError
from scm_server import audit_format as fmt

ROWS = {
    fmt.CONTAINERS: [{"container_id": i} for i in range(1, 120)],
    fmt.REPLICAS: [{"container_id": i, "datanode_uuid": d} for i in range(1, 120) for d in ("dn1", "dn2", "dn3")],
    fmt.DATANODES: [{"datanode_uuid": d} for d in ("dn1", "dn2", "dn3")],
    fmt.PIPELINES: [{"pipeline_id": "p1"}],
    fmt.RM_VERDICTS: [{"container_id": i, "health": "HEALTHY", "states": ["HEALTHY"]} for i in range(1, 120)],
}


def test_a_corrupt_parquet_page_is_named_in_one_line_and_a_new_out_dir_is_removed(spark: SparkSession, tmp_path: Path) -> None:
    export = write_export(tmp_path / "export", ROWS)
    replicas = export / fmt.file_name(fmt.REPLICAS)
    data = bytearray(replicas.read_bytes())
    for i in range(200, 600):  # inside the first column chunk: magic bytes and size stay as the manifest says
        data[i] ^= 0x5A
    replicas.write_bytes(bytes(data))
    (tmp_path / "keep").mkdir()
    out = tmp_path / "keep" / "new" / "report"
    with pytest.raises(AuditError) as err:
        job.run(spark, export, out)
    message = str(err.value)
    assert "\n" not in message and len(message) < 400, message
    assert message.startswith(f"{replicas.resolve()}: cannot be read as Parquet (") and "export again" in message
    assert list((tmp_path / "keep").iterdir()) == []  # keep/new and keep/new/report were the run's: removed


def test_out_under_a_file_or_in_a_read_only_place_is_refused_before_the_jvm(tmp_path: Path) -> None:
    export = write_export(tmp_path / "export", ROWS)
    plain = tmp_path / "plain.txt"
    plain.write_text("mine")
    with pytest.raises(AuditError, match=rf"^--out {plain}/r: {plain} is a file, not a directory.*choose an --out path"):
        submit.build_launch(export, plain / "r")
    with pytest.raises(AuditError, match=r"^--out /sys/scm-audit-test/r: cannot create it in /sys: .*choose a directory you can write to"):
        submit.build_launch(export, Path("/sys/scm-audit-test/r"))
    with pytest.raises(AuditError, match=r"cannot create it in /sys"):
        output.make_out_dir(Path("/sys/scm-audit-test"))
    assert plain.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["export", "plain.txt"]


def test_the_jobs_own_error_line_reaches_the_user_not_sparks_log(tmp_path: Path) -> None:
    """spark-submit merges the Python job's stderr into its stdout; the job's line must still win."""
    script = (
        "import sys\n"
        "print('26/11/27 05:56:33 ERROR TaskSetManager: Task 0 in stage 1.0 failed 1 times; aborting job', file=sys.stderr)\n"
        f"print({submit.ERROR_PREFIX!r} + '/x/replicas.parquet: cannot be read as Parquet (bad page): export again')\n"
        "print('\\tat org.apache.spark.scheduler.Task.run(Task.scala:147)', file=sys.stderr)\n"
        "sys.exit(2)\n"
    )
    launch = submit.Launch([sys.executable, "-c", script], dict(os.environ))
    with pytest.raises(AuditError) as err:
        submit.run(launch, timeout=60)
    assert str(err.value) == "/x/replicas.parquet: cannot be read as Parquet (bad page): export again"


def test_a_format_1_export_reads_with_report_times_unknown(spark: SparkSession, tmp_path: Path) -> None:
    """Version 1 had no first_report_ms column and no scmStartedAtMs: still read, those unknown."""
    import json

    import pyarrow.parquet as pq

    from scm_audit import inputs

    d = write_export(tmp_path / "v1", ROWS)
    nodes = d / fmt.file_name(fmt.DATANODES)
    table = pq.read_table(nodes)
    pq.write_table(table.drop_columns(["first_report_ms"]), nodes)
    manifest = json.loads((d / fmt.MANIFEST).read_text())
    manifest["formatVersion"] = 1
    del manifest["scmStartedAtMs"]
    manifest["tables"][fmt.DATANODES]["bytes"] = nodes.stat().st_size
    (d / fmt.MANIFEST).write_text(json.dumps(manifest))
    exports = inputs.discover(d)
    frames = job.load(spark, exports)
    job.check_identity(frames, exports)
    assert [r["first_report_ms"] for r in frames.datanodes.collect()] == [None, None, None]
