"""``ozone-scm admin audit export`` and ``ozone-scm audit run``: the replication audit's two steps.

* ``admin audit export --out DIR [--all-scms]`` streams a consistent snapshot out of the running
  SCM(s) and writes it as Parquet (:mod:`scm_server.client.audit_export_writer`);
* ``audit run --input DIR --out DIR [--master local[*]]`` validates the export, checks Java and the
  master, and runs the PySpark job through ``spark-submit`` (:mod:`scm_audit.submit`).

Thin: options in, one call, a short table or JSON out. Registered by ``cli/main.py``. Errors are
one line (``AuditError`` becomes a ClickException; export errors are SCMErrors ``main`` prints).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from scm_server.cli.context import CliContext, pass_ctx
from scm_server.cli.output import console, print_json


@click.group("audit")
def admin_audit() -> None:
    """Export SCM state for the Spark replication audit."""


@admin_audit.command("export")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path),
              help="Directory to write (new, empty, or a previous export, which is replaced once the new one is complete).")
@click.option("--all-scms", is_flag=True,
              help="Export every SCM (one subdirectory each), all at one Raft barrier when a leader is up.")
@click.option("--page-size", default=5000, show_default=True, help="Rows per streamed page.")
@click.option("--wait", "wait_seconds", default=30.0, show_default=True,
              help="Seconds an SCM may take to apply the barrier before its export fails.")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def export_cmd(ctx: CliContext, out: Path, all_scms: bool, page_size: int, wait_seconds: float, as_json: bool) -> None:
    """Write a consistent snapshot of the SCM(s) as Parquet, for `ozone-scm audit run`."""
    from scm_server.client import audit_export_writer

    addresses = ctx.scm_addresses()
    security = ctx.client_security()  # mutual TLS on a secure cluster (admin certificate), else None

    def progress(message: str) -> None:
        if not as_json:
            click.echo(message, err=True)

    results = asyncio.run(
        audit_export_writer.export(addresses, out, all_scms=all_scms, page_size=page_size, wait_seconds=wait_seconds,
                            on_progress=progress, security=security)
    )
    if as_json:
        print_json([r.as_dict() for r in results])
        return
    table = Table(title=f"Audit export in {out}")
    for col in ("SCM", "role", "applied index", "consistency", "containers", "replicas", "datanodes", "seconds"):
        table.add_column(col)
    for r in results:
        table.add_row(
            r.node_id or r.scm_id, "leader" if r.is_leader else "follower", f"{r.applied_index} (term {r.applied_term})",
            r.consistency, f"{r.rows.get('containers', 0):,}", f"{r.rows.get('replicas', 0):,}",
            f"{r.rows.get('datanodes', 0):,}", f"{r.seconds:.2f}",
        )
    console.print(table)
    console.print(f"Next: ozone-scm audit run --input {out} --out <report dir>", highlight=False, soft_wrap=True)


@click.group("audit")
def audit() -> None:
    """Spark replication audit of SCM exports (docs/audit.md)."""


@audit.command("run")
@click.option("--input", "input_dir", required=True, type=click.Path(path_type=Path),
              help="An `admin audit export` directory (one SCM, or one subdirectory per SCM).")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path),
              help="Report directory: report.html, summary.json, findings; past runs are kept for trends.")
@click.option("--master", default="local[*]", show_default=True,
              help="Spark master: local[*], local[N], spark://HOST:PORT or k8s://URL.")
@click.option("--keep-runs", default=20, show_default=True, help="Runs (with their findings) kept in --out.")
@click.option("--driver-memory", default=None, help="spark-submit --driver-memory (e.g. 4g for 10M replicas).")
@click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE", help="Extra spark-submit --conf (repeatable).")
@click.option("--timeout", default=None, type=float, help="Give up after this many seconds.")
@click.option("--status-file", default=None, type=click.Path(path_type=Path),
              help="Also write the run's summary as one small JSON object here (the operator's audit Pod uses "
                   "/dev/termination-log).")
@click.option("--executor-pod-template", default=None, metavar="JSON",
              help="With a k8s:// master: the Pod (JSON) Spark starts each executor from (the operator's audit Pod "
                   "passes one: security context, the report volume, the executor command).")
def run_cmd(input_dir: Path, out: Path, master: str, keep_runs: int, driver_memory: str | None,
            confs: tuple[str, ...], timeout: float | None, status_file: Path | None,
            executor_pod_template: str | None) -> None:
    """Classify every container, compare with SCM's verdicts and across SCMs, write the report."""
    from scm_audit import submit
    from scm_audit.errors import AuditError

    try:
        launch = submit.build_launch(
            input_dir, out, master=master, keep_runs=keep_runs, driver_memory=driver_memory, conf=confs,
            executor_pod_template=executor_pod_template,
        )
        with console.status(f"running the audit on Spark ({master})"):
            line = submit.run(launch, timeout=timeout)
    except AuditError as exc:
        raise click.ClickException(str(exc)) from exc
    if status_file is not None:
        status_file.write_text(json.dumps(compact_summary(json.loads((out / "summary.json").read_text()))))
    click.echo(line)


def compact_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """The few figures of a run that fit a termination message (4 KiB) and ``status.audit.lastResult``."""
    c, f = summary["containers"], summary["findings"]
    return {
        "runId": summary["runId"],
        "containers": c["total"],
        "notHealthy": c["total"] - c["healthy"],
        "findings": f["total"],
        "agreesWithSCM": bool(summary["agreement"]["agrees"]),
    }
