"""Write small audit exports for tests with the real writer (``scm_server.client.audit_export_writer``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from frames import DEFAULTS

from scm_server import audit_format as fmt
from scm_server.client.audit_export_writer import TableWriter, make_manifest


def write_export(
    directory: Path,
    tables: dict[str, list[dict[str, Any]]],
    *,
    scm_id: str = "scm-uuid-1",
    node_id: str = "scm1",
    cluster_id: str = "CID-test",
    applied_index: int = 42,
    is_leader: bool = True,
    digests: dict[str, Any] | None = None,
    barrier_id: str = "b1",
    row_identity: tuple[str, str, int] | None = None,
    **manifest: Any,
) -> Path:
    """``manifest`` overrides :func:`make_manifest` keywords (started_at_ms, rm_state, last_report, ...)."""
    directory.mkdir(parents=True)
    identity = row_identity or (scm_id, cluster_id, applied_index)
    entries = {}
    for table in fmt.TABLES:
        writer = TableWriter(directory, table, identity, {fmt.META_SCM_ID: scm_id})
        rows = tables.get(table, [])
        if rows:
            full = [{**DEFAULTS[table], **r} for r in rows]
            if table == fmt.DATANODES:
                for r in full:
                    r["hostname"] = r.get("hostname") or r["datanode_uuid"]
            writer.add({name: [r.get(name) for r in full] for name, _ in fmt.COLUMNS[table]})
        size = writer.close()
        entries[table] = {"file": fmt.file_name(table), "rows": writer.rows, "bytes": size}
    manifest = make_manifest(
        scm_id=scm_id, cluster_id=cluster_id, node_id=node_id, applied_term=1, applied_index=applied_index,
        captured_at_ms=1_700_000_000_000, barrier_id=barrier_id, consistency="barrier" if barrier_id else "local",
        is_leader=is_leader, rows={t: e["rows"] for t, e in entries.items()},
        sizes={t: e["bytes"] for t, e in entries.items()}, digests=digests,
        **{"last_report": {"timestamp": 0, "stats": {"CLOSED": 1}}, "started_at_ms": 1_699_999_000_000,
           "rm_state": "RUNNING", "rm_interval_ms": 300_000, **manifest},
    )
    (directory / fmt.MANIFEST).write_text(json.dumps(manifest))
    return directory
