"""The audit job: the thin entry point ``spark-submit`` runs (``ozone-scm audit run`` launches it).

    spark-submit [--master local[*]] .../scm_audit/job.py --input EXPORT_DIR --out REPORT_DIR

I/O lives here and only here: validate the input (:mod:`scm_audit.inputs`), read the Parquet
files, check every row's identity against its manifest, run the pure transforms
(:mod:`scm_audit.transforms`), collect the small aggregates to the driver, and write findings
(Parquet), ``summary.json`` and ``report.html`` into a staging directory that
:mod:`scm_audit.output` publishes atomically. A failure at any point leaves the previous report as
it was. Errors the user can fix are printed as one line, ``scm-audit: error: ...``, exit code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from scm_audit import inputs, output, report, transforms
from scm_audit.errors import AuditError
from scm_audit.schema import spark_schema
from scm_server import audit_format as fmt

SAMPLES_PER_KIND = 25
TOP_DATANODES = 40
ERROR_PREFIX = "scm-audit: error: "


def spark_session(master: str | None = None, app_name: str = "scm-audit", shuffle_partitions: int = 16) -> SparkSession:
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    builder = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        # The classification is one long chain of derived columns; inferring filter constraints
        # through it costs minutes of planning and buys nothing here (Spark's own advice for wide plans).
        .config("spark.sql.constraintPropagation.enabled", "false")
    )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


@dataclasses.dataclass
class Frames:
    containers: DataFrame
    replicas: DataFrame
    datanodes: DataFrame
    pipelines: DataFrame
    rm_verdicts: DataFrame
    maintenance: DataFrame


def load(spark: SparkSession, exports: inputs.ExportSet) -> Frames:
    """Every table of every export, with ``scm`` = the export's label."""
    tables: dict[str, DataFrame] = {}
    for table in fmt.TABLES:
        parts = [
            spark.read.schema(spark_schema(table)).parquet(str(e.file(table))).withColumn("scm", F.lit(e.label))
            for e in exports.exports
        ]
        frame = parts[0]
        for p in parts[1:]:
            frame = frame.unionByName(p)
        tables[table] = frame
    maintenance = spark.createDataFrame(
        [
            (e.label, int(e.manifest.replication_manager.get("maintenanceReplicaMinimum") or 2))
            for e in exports.exports
        ],
        "scm string, maintenance_replica_minimum int",
    )
    return Frames(
        containers=tables[fmt.CONTAINERS],
        replicas=tables[fmt.REPLICAS],
        datanodes=tables[fmt.DATANODES],
        pipelines=tables[fmt.PIPELINES],
        rm_verdicts=tables[fmt.RM_VERDICTS],
        maintenance=maintenance,
    )


def check_identity(frames: Frames, exports: inputs.ExportSet) -> None:
    """Every row carries its export's scm id, cluster id and applied index, and every table has the
    row count its manifest says (a file copied from another export, or cut short, fails here)."""
    parts = [
        getattr(frames, table)
        .groupBy("scm", "scm_id", "cluster_id", "applied_index")
        .count()
        .withColumn("table", F.lit(table))
        for table in fmt.TABLES
    ]
    union = parts[0]
    for p in parts[1:]:
        union = union.unionByName(p)
    seen: dict[tuple[str, str], list[Any]] = {}
    for row in union.collect():
        seen.setdefault((row["scm"], row["table"]), []).append(row)
    for e in exports.exports:
        m = e.manifest
        for table in fmt.TABLES:
            rows = seen.get((e.label, table), [])
            total = sum(r["count"] for r in rows)
            if total != m.tables[table].rows:
                raise AuditError(
                    f"{e.path}: {m.tables[table].file} has {total} rows, the manifest says {m.tables[table].rows}: "
                    "the export is truncated or mixed up; export again"
                )
            for r in rows:
                if (r["scm_id"], r["cluster_id"], r["applied_index"]) != (m.scm_id, m.cluster_id, m.applied_index):
                    raise AuditError(
                        f"{e.path}: {m.tables[table].file} holds rows of SCM {r['scm_id']} / cluster {r['cluster_id']} "
                        f"at applied index {r['applied_index']}, not of this export ({m.scm_id}, {m.cluster_id}, "
                        f"{m.applied_index}): files of different exports were mixed; export again"
                    )


def run(spark: SparkSession, input_dir: Path, out_dir: Path, *, keep_runs: int = output.DEFAULT_KEEP_RUNS,
        master: str = "", now: dt.datetime | None = None) -> dict[str, Any]:
    """Audit ``input_dir`` into ``out_dir``; returns the summary. Raises AuditError on bad input."""
    started = time.monotonic()
    started_at = now or dt.datetime.now(dt.UTC)
    exports = inputs.discover(input_dir)
    run_id = output.new_run_id(started_at)
    created = output.make_out_dir(out_dir)
    published = False
    try:
        staging = output.staging_dir(out_dir, run_id)
    except AuditError:
        output.remove_created(created)
        raise
    try:
        frames = load(spark, exports)
        check_identity(frames, exports)
        labels = [e.label for e in exports.exports]

        classified = transforms.classify(
            frames.containers, frames.replicas, frames.datanodes, frames.pipelines, frames.maintenance
        ).persist(StorageLevel.MEMORY_AND_DISK)
        container_findings = transforms.health_findings(classified).unionByName(
            transforms.replica_findings(frames.containers, frames.replicas, frames.datanodes)
        )
        parts = [
            transforms.with_verdicts(container_findings, classified, frames.rm_verdicts),
            transforms.verdict_findings(classified, frames.rm_verdicts),
        ]
        if len(labels) > 1:
            parts += [
                transforms.cross_scm_container_findings(frames.containers, labels),
                transforms.cross_scm_pipeline_findings(frames.pipelines, labels),
                transforms.digest_findings(spark, {e.label: e.manifest.digests for e in exports.exports}),
            ]
        findings = transforms.merge_findings(parts).persist(StorageLevel.MEMORY_AND_DISK)
        findings.coalesce(4).write.mode("overwrite").parquet(str(staging / output.FINDINGS_DIR))

        # Few actions, each over a small aggregate (every action plans the whole chain again).
        health: dict[str, dict[str, int]] = {}
        lifecycle: dict[str, dict[str, int]] = {}
        for r in classified.groupBy("scm", "health", "lifecycle_state").count().collect():
            scm_health = health.setdefault(r["scm"], {})
            scm_health[r["health"]] = scm_health.get(r["health"], 0) + int(r["count"])
            scm_life = lifecycle.setdefault(r["scm"], {})
            scm_life[r["lifecycle_state"]] = scm_life.get(r["lifecycle_state"], 0) + int(r["count"])
        by_kind: dict[str, int] = {}
        per_scm_kind: dict[str, dict[str, int]] = {}
        # Over all views, a finding counts once however many SCMs show it, even when their details or
        # SCM verdicts differ (one row per variant in the findings): by what it is about.
        subject = findings.select(
            "kind", "container_id", "datanode_uuid",
            F.when(F.col("container_id").isNull(), F.col("detail")).alias("about"),
        ).distinct()
        for r in subject.groupBy("kind").count().collect():
            by_kind[r["kind"]] = int(r["count"])
        for r in findings.groupBy("kind", "scm_ids").count().collect():
            for scm in r["scm_ids"] or []:
                kinds = per_scm_kind.setdefault(scm, {})
                kinds[r["kind"]] = kinds.get(r["kind"], 0) + int(r["count"])
        # Every state a container carries (SCM's ReplicationManager report counts these), beside the
        # main state above (the chart and the cards): the report shows both, labelled.
        states: dict[str, dict[str, int]] = {}
        for r in classified.select("scm", F.explode("states").alias("state")).groupBy("scm", "state").count().collect():
            states.setdefault(r["scm"], {})[r["state"]] = int(r["count"])
        # Which datanodes each SCM has heard from since it started (tiny: one row per SCM and datanode).
        datanode_rows = [
            r.asDict()
            for r in frames.datanodes.select("scm", "datanode_uuid", "health", "first_report_ms").collect()
        ]
        open_members = [
            r["member"]
            for r in frames.pipelines.where(F.col("pipeline_state") == F.lit("PIPELINE_OPEN"))
            .select(F.explode("members").alias("member"))
            .distinct()
            .collect()
        ]
        # The charts by datanode and rack are the headline view's (the primary SCM's), like the cards.
        primary = exports.primary.label
        primary_findings = findings.where(F.array_contains("scm_ids", primary))
        by_dn_frame = transforms.findings_by_datanode(primary_findings, frames.datanodes).cache()
        by_dn = [r.asDict() for r in by_dn_frame.collect()]
        by_dn.sort(key=lambda r: (-int(r["findings"]), r["datanode_uuid"]))
        by_rack = [
            {"rack": r["rack"], "findings": int(r["findings"]), "datanodes": int(r["datanodes"])}
            for r in transforms.findings_by_rack(by_dn_frame).collect()
        ]
        by_rack.sort(key=lambda r: (-r["findings"], r["rack"]))
        by_dn_frame.unpersist()
        top_dn = by_dn[:TOP_DATANODES]
        ranked = findings.withColumn(
            "_n",
            F.row_number().over(
                Window.partitionBy("kind").orderBy(
                    F.col("container_id").asc_nulls_last(), F.col("datanode_uuid").asc_nulls_last(), "detail"
                )
            ),
        )
        samples: dict[str, list[dict[str, Any]]] = {}
        for r in ranked.where(F.col("_n") <= SAMPLES_PER_KIND).drop("_n").collect():
            samples.setdefault(r["kind"], []).append(r.asDict())
        for rows in samples.values():
            rows.sort(key=lambda r: (r["container_id"] is None, r["container_id"] or 0, r["datanode_uuid"] or "", r["detail"] or ""))
        # Row counts were checked against the manifests by check_identity.
        replica_total = {e.label: e.manifest.tables[fmt.REPLICAS].rows for e in exports.exports}
        datanode_total = {e.label: e.manifest.tables[fmt.DATANODES].rows for e in exports.exports}
        history = output.load_history(out_dir)
        summary = report.build_summary(
            run_id=run_id,
            started_at=started_at,
            seconds=time.monotonic() - started,
            master=master or spark.sparkContext.master or "",
            spark_version=spark.version,
            exports=exports,
            health=health,
            lifecycle=lifecycle,
            replicas=replica_total,
            datanodes=datanode_total,
            by_kind=by_kind,
            per_scm_kind=per_scm_kind,
            by_datanode=top_dn,
            by_rack=by_rack,
            samples=samples,
            states=states,
            datanode_rows=datanode_rows,
            open_pipeline_members=open_members,
        )
        output.write_text(staging / output.SUMMARY, report.to_json(summary))
        output.write_text(staging / output.REPORT, report.render_html(summary, [*history, report.trend_point(summary)]))
        output.publish(out_dir, run_id, staging, summary, keep_runs=keep_runs)
        published = True
        classified.unpersist()
        findings.unpersist()
        return summary
    except Exception as exc:
        failure = read_failure(exc, exports)
        if failure is not None:
            raise failure from None
        raise
    finally:
        output.discard_staging(staging)
        if not published:
            output.remove_created(created)


def read_failure(exc: BaseException, exports: inputs.ExportSet) -> AuditError | None:
    """A Spark failure to read one of the export's files (a corrupt Parquet page, which the checks
    before the JVM cannot see) as one line naming the file; None for any other failure."""
    text = str(exc)
    for e in exports.exports:
        for table in fmt.TABLES:
            path = e.file(table).resolve()
            if path.as_uri() in text or f"file:{path}" in text:
                causes = [line.strip()[len("Caused by: "):] for line in text.splitlines() if line.strip().startswith("Caused by: ")]
                cause = causes[-1] if causes else text.strip().splitlines()[0] if text.strip() else type(exc).__name__
                cause = cause.split(": ", 1)[-1] if ": " in cause else cause
                return AuditError(
                    f"{path}: cannot be read as Parquet ({cause[:200]}): the file is corrupt; export again"
                )
    return None


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scm-audit", description="Audit SCM exports (container replication).")
    parser.add_argument("--input", required=True, type=Path, help="export directory (one SCM, or one per SCM)")
    parser.add_argument("--out", required=True, type=Path, help="report directory (runs and trends are kept here)")
    parser.add_argument("--keep-runs", type=int, default=output.DEFAULT_KEEP_RUNS)
    parser.add_argument("--shuffle-partitions", type=int, default=16)
    parser.add_argument("--master", default="", help="recorded in the summary (spark-submit sets the real one)")
    return parser.parse_args(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        inputs.discover(args.input)  # fail fast, before the JVM
        output.check_out_dir(args.out)
        spark = spark_session(None, shuffle_partitions=args.shuffle_partitions)
    except AuditError as exc:
        print(ERROR_PREFIX + str(exc), file=sys.stderr, flush=True)
        return 2
    try:
        summary = run(spark, args.input, args.out, keep_runs=args.keep_runs, master=args.master)
    except AuditError as exc:
        print(ERROR_PREFIX + str(exc), file=sys.stderr, flush=True)
        return 2
    finally:
        spark.stop()
    print(report.one_line(summary, args.out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
