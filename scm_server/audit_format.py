"""The audit export format: the one module shared by the SCM side and the Spark audit job.

Written by :mod:`scm_server.client.audit_export_writer` (``ozone-scm admin audit export``), read by the
PySpark job in ``spark/scm_audit`` (``ozone-scm audit run``). An export directory holds::

    manifest.json          format name + version, SCM id, cluster ID, applied (term, index),
                           one entry per table (file, rows, bytes), digests of the replicated
                           column families, the ReplicationManager's last report
    containers.parquet     the replicated container table at the applied index
    pipelines.parquet      the replicated pipeline table at the applied index
    replicas.parquet       replicas as reported by datanodes (soft state, same moment)
    datanodes.parquet      datanode health / operational state / rack (soft state, same moment)
    rm_verdicts.parquet    SCM's own ReplicationManager check of every container (same moment)

Every row of every file carries ``scm_id``, ``cluster_id`` and ``applied_index`` (constant
columns, nearly free in Parquet), and every file's footer the same as key-value metadata, so a
file copied into the wrong directory is detectable. ``--all-scms`` writes one such directory per
SCM under the output directory.

This module must stay dependency-free (no pyarrow, no pyspark, nothing else from scm_server): the
job imports it on the driver, and an import-linter contract keeps it that way. Column types use a
small vocabulary (``long``, ``int``, ``string``, ``boolean``, ``array<string>``) that both sides map
to their own types.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

FORMAT_NAME = "ozone-scm-audit-export"
FORMAT_VERSION = 3
# Versions this release still reads. 2 added, per SCM, since when it holds soft state
# (``scmStartedAtMs``), each datanode's first full report since then (``first_report_ms``) and the
# ReplicationManager's state (``replicationManager.state``/``intervalMs``); a version-1 export reads
# with those unknown (null/0). 3 added each container's EC layout (``ec_replication``); an older
# export reads with it null (every container judged as Ratis, as those SCMs served no EC).
READABLE_VERSIONS = (1, 2, 3)
MANIFEST = "manifest.json"

# Parquet footer key-value metadata keys (every file).
META_FORMAT = "ozone.scm.audit.format"
META_SCM_ID = "ozone.scm.audit.scm.id"
META_CLUSTER_ID = "ozone.scm.audit.cluster.id"
META_APPLIED_INDEX = "ozone.scm.audit.applied.index"
META_APPLIED_TERM = "ozone.scm.audit.applied.term"

# Columns every table starts with.
IDENTITY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("scm_id", "string"),
    ("cluster_id", "string"),
    ("applied_index", "long"),
)

CONTAINERS = "containers"
REPLICAS = "replicas"
DATANODES = "datanodes"
PIPELINES = "pipelines"
RM_VERDICTS = "rm_verdicts"

# Tables replicated through Raft (must agree across SCMs at one applied index) vs soft state.
REPLICATED_TABLES = (CONTAINERS, PIPELINES)
SOFT_TABLES = (REPLICAS, DATANODES, RM_VERDICTS)

COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    CONTAINERS: (
        ("container_id", "long"),
        ("lifecycle_state", "string"),  # LifeCycleState name: OPEN, CLOSING, QUASI_CLOSED, CLOSED, ...
        ("replication_type", "string"),  # RATIS, STAND_ALONE, EC
        ("replication_factor", "string"),  # ONE, THREE
        ("pipeline_id", "string"),
        ("owner", "string"),
        ("sequence_id", "long"),  # BCSID stored with the container
        ("used_bytes", "long"),
        ("number_of_keys", "long"),
        ("state_enter_time", "long"),
        ("delete_transaction_id", "long"),
        ("ec_replication", "string"),  # EC containers: Ozone's name of the layout, rs-3-2-1024k; null otherwise (v3)
    ),
    REPLICAS: (
        ("container_id", "long"),
        ("datanode_uuid", "string"),
        ("replica_state", "string"),  # ContainerReplicaProto.State name
        ("bcsid", "long"),
        ("replica_index", "int"),  # EC: the replica's position 1..data+parity; 0 for Ratis
        ("used_bytes", "long"),
        ("key_count", "long"),
        ("origin_node_id", "string"),
        ("is_empty", "boolean"),
        ("last_report_ms", "long"),
    ),
    DATANODES: (
        ("datanode_uuid", "string"),
        ("hostname", "string"),
        ("ip_address", "string"),
        ("rack", "string"),
        ("health", "string"),  # HEALTHY, STALE, DEAD
        ("op_state", "string"),  # IN_SERVICE, DECOMMISSIONING, ...
        ("op_state_expiry_s", "long"),
        ("last_heartbeat_ms", "long"),
        ("capacity", "long"),
        ("used", "long"),
        ("remaining", "long"),
        ("replica_count", "long"),
        ("first_report_ms", "long"),  # first full container report since this SCM started; 0 = none (v2)
    ),
    PIPELINES: (
        ("pipeline_id", "string"),
        ("pipeline_state", "string"),  # PIPELINE_OPEN, ...
        ("replication_type", "string"),
        ("replication_factor", "string"),
        ("leader_id", "string"),
        ("members", "array<string>"),
        ("creation_time_ms", "long"),
    ),
    RM_VERDICTS: (
        ("container_id", "long"),
        ("health", "string"),  # primary ContainerHealthState
        ("states", "array<string>"),
        ("reason", "string"),
    ),
}

TABLES = tuple(COLUMNS)

# Fields of the container table compared across SCMs (everything but the identity columns).
CONTAINER_FIELDS = tuple(name for name, _ in COLUMNS[CONTAINERS] if name != "container_id")
PIPELINE_FIELDS = tuple(name for name, _ in COLUMNS[PIPELINES] if name != "pipeline_id")


def file_name(table: str) -> str:
    return f"{table}.parquet"


def columns(table: str) -> tuple[tuple[str, str], ...]:
    """All columns of ``table`` as (name, type), identity columns first."""
    return IDENTITY_COLUMNS + COLUMNS[table]


class ExportFormatError(ValueError):
    """An export directory or manifest that is not a usable export; the message says why and what to do."""


@dataclasses.dataclass(frozen=True)
class TableEntry:
    file: str
    rows: int
    bytes: int


@dataclasses.dataclass(frozen=True)
class ExportManifest:
    """What ``manifest.json`` says about one SCM's export."""

    scm_id: str
    cluster_id: str
    node_id: str
    applied_term: int
    applied_index: int
    captured_at_ms: int
    barrier_id: str
    consistency: str
    is_leader: bool
    tables: Mapping[str, TableEntry]
    digests: Mapping[str, Mapping[str, Any]]
    replication_manager: Mapping[str, Any]
    raw: Mapping[str, Any]
    format_version: int = FORMAT_VERSION
    started_at_ms: int = 0  # since when the SCM holds soft state (0: unknown, a version-1 export)

    @property
    def label(self) -> str:
        """A short, human name for this export: the node id when known, else the scm id."""
        return self.node_id or self.scm_id


def _need(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise ExportFormatError(f"{where}: manifest has no {key!r}; re-run `ozone-scm admin audit export`")
    value = data[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise ExportFormatError(f"{where}: manifest field {key!r} has the wrong type ({type(value).__name__})")
    return value


def parse_manifest(data: Any, where: str) -> ExportManifest:
    """Validate a decoded ``manifest.json`` (pure: no I/O). ``where`` names it in errors."""
    if not isinstance(data, Mapping):
        raise ExportFormatError(f"{where}: manifest is not a JSON object")
    fmt = data.get("format")
    if fmt != FORMAT_NAME:
        raise ExportFormatError(f"{where}: not an SCM audit export (format {fmt!r}, expected {FORMAT_NAME!r})")
    version = data.get("formatVersion")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        readable = ", ".join(str(v) for v in READABLE_VERSIONS)
        raise ExportFormatError(
            f"{where}: unknown export format version {version!r} (this audit reads versions {readable}); "
            "export again with the same ozone-scm release as the audit"
        )
    tables_raw = _need(data, "tables", Mapping, where)
    tables: dict[str, TableEntry] = {}
    for table in TABLES:
        entry = tables_raw.get(table)
        if not isinstance(entry, Mapping):
            raise ExportFormatError(f"{where}: manifest lists no {table!r} table; the export is incomplete")
        rows, size, name = entry.get("rows"), entry.get("bytes"), entry.get("file")
        if not isinstance(rows, int) or not isinstance(size, int) or not isinstance(name, str) or rows < 0:
            raise ExportFormatError(f"{where}: manifest entry for {table!r} is malformed")
        tables[table] = TableEntry(name, rows, size)
    return ExportManifest(
        scm_id=_need(data, "scmId", str, where),
        cluster_id=_need(data, "clusterId", str, where),
        node_id=str(data.get("nodeId") or ""),
        applied_term=_need(data, "appliedTerm", int, where),
        applied_index=_need(data, "appliedIndex", int, where),
        captured_at_ms=_need(data, "capturedAtMs", int, where),
        barrier_id=str(data.get("barrierId") or ""),
        consistency=str(data.get("consistency") or "local"),
        is_leader=bool(data.get("isLeader", False)),
        tables=tables,
        digests=dict(data.get("digests") or {}),
        replication_manager=dict(data.get("replicationManager") or {}),
        raw=dict(data),
        format_version=int(version),
        started_at_ms=int(data.get("scmStartedAtMs") or 0),
    )
