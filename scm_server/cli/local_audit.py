"""``ozone-scm local run --audit``: export every SCM of the local cluster and audit it with Spark.

Called by the local runners after their workload, while the cluster and the simulated datanodes
are still up, so a newcomer sees a replication report from the main job:

    run-data/audit/export/<scmN>/   the exports (all SCMs at one Raft barrier)
    run-data/audit/report/          report.html, summary.json, findings (runs kept for trends)

The same two steps by hand, against ``ozone-scm local up``::

    ozone-scm --conf run-data/scm1/conf admin audit export --all-scms --out run-data/audit/export
    (secure: ozone-scm --conf run-data/admin/conf admin audit export ...)
    ozone-scm audit run --input run-data/audit/export --out run-data/audit/report

The Spark job runs in a thread (``spark-submit`` is a subprocess) so the datanodes keep
heartbeating meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import click

from scm_server.cli.output import console
from scm_server.client import audit_export_writer
from scm_server.security.tls import ChannelSecurity


async def export_and_audit(client_addresses: Sequence[str], data_dir: Path, master: str = "local[*]",
                           security: ChannelSecurity | None = None) -> Path:
    from scm_audit import submit
    from scm_audit.errors import AuditError

    base = data_dir.resolve() / "audit"
    export_dir, report_dir = base / "export", base / "report"
    with console.status("exporting every SCM at one barrier for the audit"):
        results = await audit_export_writer.export(list(client_addresses), export_dir, all_scms=True, security=security)
    console.print(
        "Audit export: " + ", ".join(f"{r.node_id or r.scm_id}@{r.applied_index}" for r in results)
        + f" -> {export_dir}", highlight=False, soft_wrap=True,
    )
    try:
        launch = submit.build_launch(export_dir, report_dir, master=master)
        with console.status(f"running the Spark audit ({master})"):
            line = await asyncio.to_thread(submit.run, launch)
    except AuditError as exc:
        raise click.ClickException(f"audit: {exc}") from exc
    console.print(line, highlight=False, soft_wrap=True)
    console.print(f"Open {report_dir / 'report.html'} in a browser (self-contained, no network needed).",
                  highlight=False, soft_wrap=True)
    return report_dir
