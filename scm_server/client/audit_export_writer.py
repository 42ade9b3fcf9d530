"""Client side of the audit export: stream one SCM's snapshot and write it as Parquet.

Used by ``ozone-scm admin audit export`` (and ``ozone-scm local run --audit``). It talks to
``SCMAuditProtocolService`` on each SCM's admin (client) port (proto/scm_audit.proto) and writes
the directory layout described in :mod:`scm_server.audit_format`:

* one SCM: ``--out DIR`` holds ``manifest.json`` + one Parquet file per table;
* ``--all-scms``: ``DIR/<nodeId>/...`` per SCM, each SCM asked directly (no failover: the point is
  each SCM's own view). First a barrier is created on the leader so every SCM captures at the same
  Raft index; without a leader the SCMs are exported at their own indexes ("local" consistency,
  recorded in each manifest; the audit then says so).

Memory stays flat: pages are appended to a ``pyarrow.parquet.ParquetWriter`` per table and flushed
as row groups of ``ROW_GROUP_ROWS``; nothing holds a whole table. The output appears atomically:
everything is written under a hidden sibling directory and renamed into place only after the
trailer's row counts match what was written, so an interrupted export never leaves a
half-written directory where a good one was (the previous export stays until the new one is
complete).

On a secure cluster (``hdds.grpc.tls.enabled``) the channels carry the admin's client certificate
(``security``, from the CLI's configuration) through the one channel factory,
:func:`scm_server.security.tls.make_channel`; both RPCs need SCM superuser privilege.

pyarrow is an optional dependency (``pip install 'ozone-scm[audit]'``); without it the command
fails with one line saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import os
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from scm_server import audit_format as fmt
from scm_server.client.errors import SCMUnavailableError
from scm_server.client.scm_client import CHANNEL_OPTIONS
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMError, SCMException
from scm_server.grpc_errors import from_grpc_error
from scm_server.proto import hdds_pb2, scm_audit_pb2, scm_audit_pb2_grpc
from scm_server.security.tls import ChannelSecurity, make_channel

ROW_GROUP_ROWS = 131_072
DEFAULT_PAGE_SIZE = 5_000


class AuditExportError(SCMError):
    """The export could not be written; the message says why and what to do."""


def _require_pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise AuditExportError(
            "the audit export needs pyarrow: install it with `pip install 'ozone-scm[audit]'` (make env does)"
        ) from exc
    return pyarrow


def _enum_names(enum: Any) -> dict[int, str]:
    return {v: enum.Name(v) for v in enum.values()}


LIFECYCLE = _enum_names(hdds_pb2.LifeCycleState)
REPLICA_STATE = _enum_names(hdds_pb2.ContainerReplicaProto.State)
RTYPE = _enum_names(hdds_pb2.ReplicationType)
RFACTOR = _enum_names(hdds_pb2.ReplicationFactor)
NODE_STATE = _enum_names(hdds_pb2.NodeState)
OP_STATE = _enum_names(hdds_pb2.NodeOperationalState)
PIPELINE_STATE = _enum_names(hdds_pb2.PipelineState)


def arrow_schema(table: str, metadata: dict[str, str]) -> Any:
    pa = _require_pyarrow()
    types = {
        "long": pa.int64(),
        "int": pa.int32(),
        "string": pa.string(),
        "boolean": pa.bool_(),
        "array<string>": pa.list_(pa.string()),
    }
    return pa.schema([pa.field(name, types[kind]) for name, kind in fmt.columns(table)], metadata=metadata)


# ---- page -> columns (one function per table; the column order is audit_format's) ----
def container_columns(rows: Sequence[hdds_pb2.ContainerInfoProto]) -> dict[str, list[Any]]:
    return {
        "container_id": [r.containerID for r in rows],
        "lifecycle_state": [LIFECYCLE.get(r.state, str(r.state)) for r in rows],
        "replication_type": [RTYPE.get(r.replicationType, str(r.replicationType)) for r in rows],
        "replication_factor": [RFACTOR.get(r.replicationFactor, str(r.replicationFactor)) for r in rows],
        "pipeline_id": [r.pipelineID.id if r.HasField("pipelineID") else None for r in rows],
        "owner": [r.owner for r in rows],
        "sequence_id": [r.sequenceId for r in rows],
        "used_bytes": [r.usedBytes for r in rows],
        "number_of_keys": [r.numberOfKeys for r in rows],
        "state_enter_time": [r.stateEnterTime for r in rows],
        "delete_transaction_id": [r.deleteTransactionId for r in rows],
        "ec_replication": [ec_replication(r) for r in rows],
    }


def ec_replication(info: hdds_pb2.ContainerInfoProto) -> str | None:
    """Ozone's name of an EC container's layout (``rs-3-2-1024k``); None for a Ratis container."""
    if not info.HasField("ecReplicationConfig"):
        return None
    ec = info.ecReplicationConfig
    size = f"{ec.ecChunkSize // 1024}k" if ec.ecChunkSize % 1024 == 0 else str(ec.ecChunkSize)
    return f"{ec.codec.lower()}-{ec.data}-{ec.parity}-{size}"


def replica_columns(rows: Sequence[scm_audit_pb2.AuditReplicaRowProto]) -> dict[str, list[Any]]:
    return {
        "container_id": [r.containerID for r in rows],
        "datanode_uuid": [r.datanodeUuid for r in rows],
        "replica_state": [REPLICA_STATE.get(r.state, str(r.state)) for r in rows],
        "bcsid": [r.blockCommitSequenceId for r in rows],
        "replica_index": [r.replicaIndex for r in rows],
        "used_bytes": [r.used for r in rows],
        "key_count": [r.keyCount for r in rows],
        "origin_node_id": [r.originNodeId for r in rows],
        "is_empty": [r.isEmpty for r in rows],
        "last_report_ms": [r.lastReportMs for r in rows],
    }


def datanode_columns(rows: Sequence[scm_audit_pb2.AuditDatanodeRowProto]) -> dict[str, list[Any]]:
    return {
        "datanode_uuid": [r.uuid for r in rows],
        "hostname": [r.hostName for r in rows],
        "ip_address": [r.ipAddress for r in rows],
        "rack": [r.rack for r in rows],
        "health": [NODE_STATE.get(r.health, str(r.health)) for r in rows],
        "op_state": [OP_STATE.get(r.opState, str(r.opState)) for r in rows],
        "op_state_expiry_s": [r.opStateExpiryEpochSeconds for r in rows],
        "last_heartbeat_ms": [r.lastHeartbeatMs for r in rows],
        "capacity": [r.capacity for r in rows],
        "used": [r.used for r in rows],
        "remaining": [r.remaining for r in rows],
        "replica_count": [r.containers for r in rows],
        "first_report_ms": [r.firstReportMs for r in rows],
    }


def pipeline_columns(rows: Sequence[hdds_pb2.Pipeline]) -> dict[str, list[Any]]:
    return {
        "pipeline_id": [r.id.id for r in rows],
        "pipeline_state": [PIPELINE_STATE.get(r.state, str(r.state)) for r in rows],
        "replication_type": [RTYPE.get(r.type, str(r.type)) for r in rows],
        "replication_factor": [RFACTOR.get(r.factor, str(r.factor)) for r in rows],
        "leader_id": [r.leaderID for r in rows],
        "members": [[m.uuid for m in r.members] for r in rows],
        "creation_time_ms": [r.creationTimeStamp for r in rows],
    }


def verdict_columns(rows: Sequence[scm_audit_pb2.AuditVerdictRowProto]) -> dict[str, list[Any]]:
    return {
        "container_id": [r.containerID for r in rows],
        "health": [r.health for r in rows],
        "states": [list(r.states) for r in rows],
        "reason": [r.reason for r in rows],
    }


class TableWriter:
    """One Parquet file, appended a page at a time, flushed as row groups of ``row_group_rows``."""

    def __init__(self, directory: Path, table: str, identity: tuple[str, str, int], metadata: dict[str, str],
                 row_group_rows: int = ROW_GROUP_ROWS) -> None:
        pa = _require_pyarrow()
        import pyarrow.parquet as pq

        self.table = table
        self.path = directory / fmt.file_name(table)
        self.schema = arrow_schema(table, metadata)
        self.identity = identity
        self.row_group_rows = row_group_rows
        self.rows = 0
        self._pa = pa
        self._writer = pq.ParquetWriter(str(self.path), self.schema)
        self._pending: dict[str, list[Any]] = {name: [] for name, _ in fmt.COLUMNS[table]}
        self._pending_rows = 0

    def add(self, columns: dict[str, list[Any]]) -> None:
        n = len(next(iter(columns.values())))
        for name, values in columns.items():
            self._pending[name].extend(values)
        self._pending_rows += n
        self.rows += n
        if self._pending_rows >= self.row_group_rows:
            self._flush()

    def _flush(self) -> None:
        if not self._pending_rows:
            return
        pa, n = self._pa, self._pending_rows
        scm_id, cluster_id, applied_index = self.identity
        arrays = [
            pa.repeat(pa.scalar(scm_id, pa.string()), n),
            pa.repeat(pa.scalar(cluster_id, pa.string()), n),
            pa.repeat(pa.scalar(applied_index, pa.int64()), n),
        ]
        for field in list(self.schema)[3:]:
            arrays.append(pa.array(self._pending[field.name], type=field.type))
        self._writer.write_table(pa.Table.from_arrays(arrays, schema=self.schema))
        self._pending = {name: [] for name in self._pending}
        self._pending_rows = 0

    def close(self) -> int:
        self._flush()
        self._writer.close()
        return self.path.stat().st_size

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()


@dataclasses.dataclass
class ExportResult:
    path: Path
    scm_id: str
    node_id: str
    cluster_id: str
    applied_term: int
    applied_index: int
    consistency: str
    is_leader: bool
    rows: dict[str, int]
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["path"] = str(self.path)
        return d


def _map_rpc_error(err: grpc.aio.AioRpcError, address: str) -> SCMError:
    exc = from_grpc_error(err.code(), err.details() or "", err.trailing_metadata())
    if exc is not None:
        return exc
    return SCMUnavailableError(address, f"{err.code().name}: {err.details()}")


def _fsync_dir(path: Path) -> None:
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def stream_to_dir(
    address: str,
    directory: Path,
    *,
    barrier_id: str = "",
    barrier_index: int = 0,
    cluster_id: str = "",
    page_size: int = DEFAULT_PAGE_SIZE,
    wait_seconds: float = 30.0,
    timeout: float | None = 3600.0,
    require_leader: bool = False,
    security: ChannelSecurity | None = None,
) -> ExportResult:
    """Export one SCM into ``directory`` (which must not exist yet; created here)."""
    started = time.monotonic()
    request = scm_audit_pb2.AuditExportRequestProto(
        barrierId=barrier_id, barrierIndex=barrier_index, clusterId=cluster_id,
        pageSize=page_size, waitSeconds=wait_seconds, requireLeader=require_leader,
    )
    directory.mkdir(parents=True)
    writers: dict[str, TableWriter] = {}
    header: scm_audit_pb2.AuditExportHeaderProto | None = None
    trailer: scm_audit_pb2.AuditExportTrailerProto | None = None
    converters: dict[str, tuple[str, Callable[[Any], dict[str, list[Any]]]]] = {
        "containers": (fmt.CONTAINERS, container_columns),
        "replicas": (fmt.REPLICAS, replica_columns),
        "datanodes": (fmt.DATANODES, datanode_columns),
        "pipelines": (fmt.PIPELINES, pipeline_columns),
        "verdicts": (fmt.RM_VERDICTS, verdict_columns),
    }
    channel = make_channel(address, security, CHANNEL_OPTIONS)
    try:
        stub = scm_audit_pb2_grpc.SCMAuditProtocolServiceStub(channel)
        call = stub.ExportSnapshot(request, timeout=timeout)
        try:
            async for chunk in call:
                kind = chunk.WhichOneof("body")
                if kind == "header":
                    header = chunk.header
                    identity = (header.scmId, header.clusterId, header.transactionInfo.index)
                    metadata = {
                        fmt.META_FORMAT: f"{fmt.FORMAT_NAME}/{fmt.FORMAT_VERSION}",
                        fmt.META_SCM_ID: header.scmId,
                        fmt.META_CLUSTER_ID: header.clusterId,
                        fmt.META_APPLIED_TERM: str(header.transactionInfo.term),
                        fmt.META_APPLIED_INDEX: str(header.transactionInfo.index),
                    }
                    writers = {t: TableWriter(directory, t, identity, metadata) for t in fmt.TABLES}
                elif kind == "trailer":
                    trailer = chunk.trailer
                elif kind in converters:
                    if header is None:
                        raise AuditExportError(f"SCM at {address} sent {kind} before the export header")
                    table, convert = converters[kind]
                    page = getattr(chunk, kind).rows
                    if page:
                        writers[table].add(convert(page))
                else:
                    raise AuditExportError(f"SCM at {address} sent an unknown export chunk {kind!r}; upgrade the client")
        except grpc.aio.AioRpcError as err:
            raise _map_rpc_error(err, address) from err
        if header is None or trailer is None:
            raise AuditExportError(f"export stream from {address} ended early (no {'header' if header is None else 'trailer'})")
        expected = {kv.key: int(kv.value) for kv in trailer.rowCounts}
        sizes: dict[str, int] = {}
        for table, writer in writers.items():
            sizes[table] = writer.close()
            if expected.get(table) != writer.rows:
                raise AuditExportError(
                    f"export from {address}: {table} has {writer.rows} rows but the SCM sent {expected.get(table)}; export again"
                )
        writers = {}
        manifest = build_manifest(header, trailer, directory, expected, sizes)
        path = directory / fmt.MANIFEST
        path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        for f in directory.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(directory)
        return ExportResult(
            path=directory,
            scm_id=header.scmId,
            node_id=header.nodeId,
            cluster_id=header.clusterId,
            applied_term=header.transactionInfo.term,
            applied_index=header.transactionInfo.index,
            consistency=header.consistency or "local",
            is_leader=header.isLeader,
            rows=expected,
            seconds=time.monotonic() - started,
        )
    finally:
        for writer in writers.values():
            writer.abort()
        await channel.close()


def build_manifest(
    header: scm_audit_pb2.AuditExportHeaderProto,
    trailer: scm_audit_pb2.AuditExportTrailerProto,
    directory: Path,
    rows: dict[str, int],
    sizes: dict[str, int],
) -> dict[str, Any]:
    report = header.lastReport
    return make_manifest(
        scm_id=header.scmId,
        cluster_id=header.clusterId,
        node_id=header.nodeId,
        applied_term=header.transactionInfo.term,
        applied_index=header.transactionInfo.index,
        captured_at_ms=header.capturedAtMs,
        barrier_id=header.barrierId,
        consistency=header.consistency or "local",
        is_leader=header.isLeader,
        term=header.term,
        rows=rows,
        sizes=sizes,
        digests={d.table: {"sha256": d.sha256, "count": d.count} for d in trailer.digests},
        maintenance_replica_minimum=header.maintenanceReplicaMinimum,
        started_at_ms=header.startedAtMs,
        rm_state=header.replicationManagerState,
        rm_interval_ms=header.replicationManagerIntervalMs,
        last_report={
            "timestamp": report.timestamp,
            "stats": {c.key: c.count for c in report.stat},
            "samples": {s.key: list(s.containerIds) for s in report.statSample},
        },
    )


def make_manifest(
    *,
    scm_id: str,
    cluster_id: str,
    node_id: str,
    applied_term: int,
    applied_index: int,
    captured_at_ms: int,
    rows: dict[str, int],
    sizes: dict[str, int],
    barrier_id: str = "",
    consistency: str = "local",
    is_leader: bool = False,
    term: int = 0,
    digests: dict[str, Any] | None = None,
    maintenance_replica_minimum: int = 2,
    last_report: dict[str, Any] | None = None,
    started_at_ms: int = 0,
    rm_state: str = "",
    rm_interval_ms: int = 0,
    exporter: str = "ozone-scm admin audit export",
) -> dict[str, Any]:
    """``manifest.json`` of one export (the keys :func:`scm_server.audit_format.parse_manifest` reads)."""
    return {
        "format": fmt.FORMAT_NAME,
        "formatVersion": fmt.FORMAT_VERSION,
        "scmId": scm_id,
        "clusterId": cluster_id,
        "nodeId": node_id,
        "appliedTerm": applied_term,
        "appliedIndex": applied_index,
        "capturedAtMs": captured_at_ms,
        "exportedAtMs": int(time.time() * 1000),
        "scmStartedAtMs": started_at_ms,
        "barrierId": barrier_id,
        "consistency": consistency,
        "isLeader": is_leader,
        "term": term,
        "tables": {
            t: {"file": fmt.file_name(t), "rows": rows.get(t, 0), "bytes": sizes.get(t, 0)} for t in fmt.TABLES
        },
        "digests": digests or {},
        "replicationManager": {
            "maintenanceReplicaMinimum": maintenance_replica_minimum,
            "state": rm_state,
            "intervalMs": rm_interval_ms,
            "lastReport": last_report or {},
        },
        "exporter": exporter,
    }


async def create_barrier(addresses: Sequence[str], ttl_seconds: float = 300.0, rounds: int = 10,
                         pause: float = 0.3, timeout: float = 60.0,
                         security: ChannelSecurity | None = None) -> scm_audit_pb2.AuditBarrierResponseProto:
    """Ask the leader (following NotLeader hints across ``addresses``) to create an audit barrier."""
    queue_base = list(addresses)
    last: Exception | None = None
    channels: dict[str, grpc.aio.Channel] = {}
    try:
        for _ in range(rounds):
            queue, tried = list(queue_base), set()
            while queue:
                address = queue.pop(0)
                if address in tried:
                    continue
                tried.add(address)
                if address not in channels:
                    channels[address] = make_channel(address, security, CHANNEL_OPTIONS)
                channel = channels[address]
                stub = scm_audit_pb2_grpc.SCMAuditProtocolServiceStub(channel)
                try:
                    return await stub.CreateAuditBarrier(
                        scm_audit_pb2.AuditBarrierRequestProto(ttlSeconds=ttl_seconds), timeout=timeout
                    )
                except grpc.aio.AioRpcError as err:
                    exc = _map_rpc_error(err, address)
                    if isinstance(exc, NotLeaderException):
                        last = exc
                        if exc.leader_address and exc.leader_address not in tried:
                            queue.insert(0, exc.leader_address)
                        continue
                    if isinstance(exc, SCMUnavailableError):
                        last = exc
                        continue
                    raise exc from err
            await asyncio.sleep(pause)
    finally:
        for ch in channels.values():
            await ch.close()
    raise last or SCMUnavailableError(",".join(addresses), "no answer")


# ---- output directory handling ----
def _is_export_dir(path: Path) -> bool:
    return (path / fmt.MANIFEST).is_file()


def check_output_dir(out: Path) -> None:
    """``out`` may be new, empty, or a previous export (single or per-SCM); anything else is refused
    so that a typo never replaces a directory that is not ours."""
    if not out.exists():
        return
    if not out.is_dir():
        raise AuditExportError(f"--out {out} exists and is not a directory; choose a new directory")
    if os.path.ismount(out):
        raise AuditExportError(
            f"--out {out} is a mount point: the export is written beside it and then moved into its place, which "
            f"a mount point cannot be; give a directory inside the volume, e.g. {out / 'export'}"
        )
    children = [c for c in out.iterdir() if not c.name.startswith(".")]
    if not children or _is_export_dir(out):
        return
    if all(c.is_dir() and _is_export_dir(c) for c in children):
        return
    raise AuditExportError(
        f"--out {out} is not empty and does not hold a previous audit export; choose an empty or new directory"
    )


def check_options(page_size: int, wait_seconds: float) -> None:
    """Refuse option values the SCM would misread (a negative wait would never wait at all)."""
    if not math.isfinite(wait_seconds) or wait_seconds < 0:
        raise AuditExportError(
            f"--wait {wait_seconds:g} is not a number of seconds >= 0; give how long each SCM may take to apply "
            "the audit barrier, e.g. --wait 30"
        )
    if not 1 <= page_size <= 100_000:
        raise AuditExportError(f"--page-size {page_size} is out of range; give 1..100000 rows per page, e.g. --page-size 5000")


def prepare_parent(out: Path) -> list[Path]:
    """Create the missing directories above ``out`` and check that ``out``'s parent takes new entries.
    Returns the directories created here (outermost first), so a failed export can remove them again
    and leave the file system as it found it. Every problem is one :class:`AuditExportError` naming
    the path and what to do."""
    missing: list[Path] = []
    existing = out.parent
    while not existing.exists() and not existing.is_symlink():
        missing.append(existing)
        existing = existing.parent
    if not existing.is_dir():
        raise AuditExportError(
            f"--out {out}: {existing} is a file, not a directory, so nothing can be written under it; "
            "choose an --out path whose parents are directories"
        )
    created: list[Path] = []
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except OSError as exc:
            remove_created(created)
            raise AuditExportError(
                f"--out {out}: cannot create directory {directory}: {exc.strerror or exc}; "
                "choose a directory you can write to"
            ) from exc
        created.append(directory)
    probe = out.parent / f".{out.name}.probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        remove_created(created)
        raise AuditExportError(
            f"--out {out}: cannot write in {out.parent}: {exc.strerror or exc}; choose a directory you can write to"
        ) from exc
    return created


def remove_created(created: Sequence[Path]) -> None:
    """Remove directories this export created (innermost first), only while they are empty: never
    anything that existed before or that someone else put there meanwhile."""
    for directory in reversed(created):
        try:
            directory.rmdir()
        except OSError:
            return


def publish(tmp: Path, out: Path) -> None:
    """Move a complete export from ``tmp`` to ``out``, replacing a previous export atomically enough:
    the old one is renamed aside first and deleted only after the new one is in place."""
    old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
    if out.exists():
        os.replace(out, old)
    try:
        os.replace(tmp, out)
    except OSError:
        if old.exists():
            os.replace(old, out)
        raise
    _fsync_dir(out.parent)
    shutil.rmtree(old, ignore_errors=True)


def _label(result: ExportResult) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in (result.node_id or result.scm_id))
    return safe or "scm"


async def export(
    addresses: Sequence[str],
    out: Path,
    *,
    all_scms: bool = False,
    page_size: int = DEFAULT_PAGE_SIZE,
    wait_seconds: float = 30.0,
    on_progress: Any = None,
    security: ChannelSecurity | None = None,
) -> list[ExportResult]:
    """Export the leader (``addresses`` with failover), or every SCM at one barrier (``all_scms``)."""
    _require_pyarrow()
    check_options(page_size, wait_seconds)
    out = out.resolve()
    check_output_dir(out)
    created = prepare_parent(out)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    results: list[ExportResult] = []
    published = False
    try:
        if not all_scms:
            results.append(await _export_leader(addresses, tmp, page_size, wait_seconds, security))
        else:
            barrier: scm_audit_pb2.AuditBarrierResponseProto | None = None
            try:
                barrier = await create_barrier(addresses, security=security)
            except (NotLeaderException, SCMUnavailableError) as exc:
                if on_progress:
                    on_progress(f"no leader for an audit barrier ({exc}); exporting each SCM at its own index")
            cluster_id = barrier.clusterId if barrier else ""
            tmp.mkdir(parents=True)
            for address in addresses:
                part = tmp / f".part-{uuid.uuid4().hex[:8]}"
                result = await stream_to_dir(
                    address, part,
                    barrier_id=barrier.barrierId if barrier else "",
                    barrier_index=barrier.transactionInfo.index if barrier else 0,
                    cluster_id=cluster_id, page_size=page_size, wait_seconds=wait_seconds, security=security,
                )
                cluster_id = cluster_id or result.cluster_id
                target = tmp / _label(result)
                if target.exists():
                    target = tmp / f"{_label(result)}-{result.scm_id[:8]}"
                os.replace(part, target)
                result.path = out / target.name
                results.append(result)
                if on_progress:
                    on_progress(f"exported {target.name} at applied index {result.applied_index}")
        publish(tmp, out)
        published = True
        if not all_scms:
            results[0].path = out
        return results
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise AuditExportError(
            f"--out {out}: writing the export failed: {exc.strerror or exc}{where}; free space or choose another "
            "directory, then export again (a previous export there is untouched)"
        ) from exc
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if not published:
            remove_created(created)


async def _export_leader(addresses: Sequence[str], directory: Path, page_size: int, wait_seconds: float,
                         security: ChannelSecurity | None = None) -> ExportResult:
    """Single-SCM export from the leader (its ReplicationManager is the one acting), following
    NotLeader hints; with no leader at all, from the first SCM that answers (any SCM can serve an
    export; the manifest records whether it was the leader)."""
    queue, tried = list(addresses), set()
    last: SCMError | None = None
    while queue:
        address = queue.pop(0)
        if address in tried:
            continue
        tried.add(address)
        try:
            return await stream_to_dir(
                address, directory, page_size=page_size, wait_seconds=wait_seconds, require_leader=True,
                security=security,
            )
        except NotLeaderException as exc:
            last = exc
            if exc.leader_address and exc.leader_address not in tried:
                queue.insert(0, exc.leader_address)
        except SCMUnavailableError as exc:
            last = exc
        shutil.rmtree(directory, ignore_errors=True)
    for address in addresses:
        try:
            return await stream_to_dir(
                address, directory, page_size=page_size, wait_seconds=wait_seconds, security=security
            )
        except SCMUnavailableError as exc:
            last = exc
            shutil.rmtree(directory, ignore_errors=True)
    raise last or SCMException(ResultCodes.INVALID_REQUEST, "no SCM address to export from")
