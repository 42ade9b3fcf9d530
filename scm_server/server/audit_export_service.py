"""Server side of the audit export (proto/scm_audit.proto), on the admin (client) port.

``ozone-scm admin audit export`` streams one SCM's state out of the running process for the Spark
replication audit (docs/audit.md). What a consistent snapshot means here:

* **replicated tables** (containers, pipelines and the digests of every replicated column
  family) are read from a LevelDB snapshot taken right after flushing the transaction buffer, so
  they are exactly the state at the applied (term, index) the header names;
* **soft state** (replicas, datanode health/op state/rack, in-flight replication ops) is copied
  at the same moment, synchronously on the event loop (no await between the flush and the copy).
  The replica map is copied shallowly: reports replace a container's replica tuple, never mutate
  it, so the copy holds the replicas as they were (``ContainerManager.replica_map_view``);
* the **ReplicationManager's verdicts** are SCM's own check (``check_container`` over the same
  ``build_container_view`` the RM uses) run over that captured state while the rows stream out,
  so "SCM's verdict" and "the exported state" can never be from different moments.

Capture moments: ``ExportSnapshot`` without a barrier captures on receipt ("local"). With a
barrier, :class:`AuditSnapshotRegistry` captures when this SCM applies the leader's
``auditBarrier`` entry (:mod:`scm_server.ha.audit_barrier`), in the transaction buffer's
applied-listener, i.e. at exactly that index on every SCM ("barrier").

Memory stays flat on this side: the LevelDB snapshot costs no Python memory, the soft-state copy
is a dict of pointers (plus ≤ 1,000s of node records), rows are built a page at a time and the
stream's flow control stops this generator while the client is slow. A capture lives until its
stream completes or its TTL passes (at most ``MAX_CAPTURES`` at once).

Nothing here changes SCM state; the only replicated write is the barrier (leader only).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import random
import uuid
import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
from google.protobuf import message as pb_message
from google.protobuf import message_factory

from scm_server.container.container_manager import (
    ContainerReplica,
    StoredReplicas,
    merge_reported_usage,
    unpack_replicas,
)
from scm_server.container.replication.health import ClusterView, PendingView, check_container
from scm_server.container.replication.replication_manager import build_container_view
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.grpc_errors import RESULT_KEY, to_grpc_error
from scm_server.ha.scm_service import ServiceStatus
from scm_server.ha.transaction_buffer import TransactionInfo
from scm_server.metadata.scm_db_definition import SCMDBDefinition
from scm_server.node.node_manager import DatanodeInfo
from scm_server.pipeline.placement import SCMContainerPlacementRackAware, container_policy
from scm_server.proto import hdds_pb2, scm_audit_pb2, scm_ha_pb2
from scm_server.server import endpoints
from scm_server.server.grpc_services import RpcMetrics, _ServiceBase

if TYPE_CHECKING:
    from scm_server.scm import StorageContainerManager

LOG = logging.getLogger(__name__)

MAX_CAPTURES = 4
MAX_PAGE_SIZE = 100_000
NON_REPLICATED_TABLES = frozenset({SCMDBDefinition.TRANSACTION_INFO.name})
YIELD_EVERY = 2_000  # rows between event-loop yields while hashing the smaller tables


@dataclasses.dataclass
class AuditSnapshot:
    """One SCM's state at one applied index: a LevelDB snapshot plus copies of the soft state."""

    scm_id: str
    cluster_id: str
    node_id: str
    applied: TransactionInfo
    captured_at_ms: int
    expires_at_ms: int
    barrier_id: str
    consistency: str  # "barrier" | "local"
    is_leader: bool
    term: int
    db_snapshot: Any  # plyvel Snapshot
    replicas: dict[int, StoredReplicas]  # unpack_replicas(container id, stored) names the fields
    nodes: list[DatanodeInfo]
    replica_counts: dict[str, int]
    pending: dict[int, PendingView]
    last_report: hdds_pb2.ReplicationManagerReportProto
    maintenance_replica_minimum: int
    maintenance_remaining_redundancy: int
    started_at_ms: int = 0
    first_reports: dict[str, int] = dataclasses.field(default_factory=dict)
    rm_state: str = ""
    rm_interval_ms: int = 0
    placement_policy: str = SCMContainerPlacementRackAware.name  # the replication manager's, so its verdicts match
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            try:
                self.db_snapshot.close()
            except Exception:  # the DB may be closed already (stop, checkpoint install)
                LOG.debug("audit snapshot at %s: closing the LevelDB snapshot failed", self.applied)


def _copy_node(node: DatanodeInfo) -> DatanodeInfo:
    details = hdds_pb2.DatanodeDetailsProto()
    details.CopyFrom(node.details)
    return dataclasses.replace(
        node, details=details, storage_reports=list(node.storage_reports), commands=[], command_queue_report={}
    )


def capture(scm: StorageContainerManager, *, barrier_id: str = "", expires_at_ms: int = 0, applied: TransactionInfo | None = None) -> AuditSnapshot:
    """Take a snapshot of ``scm`` now. Synchronous on purpose: no await may separate the flush, the
    LevelDB snapshot and the soft-state copies, or they would describe different moments."""
    buffer = scm.transaction_buffer
    persisted = buffer.flush()
    info = applied or persisted
    rm = scm.replication_manager
    nodes = [_copy_node(n) for n in scm.node_manager.all_nodes()]
    cm = scm.container_manager
    last = hdds_pb2.ReplicationManagerReportProto()
    last.CopyFrom(rm.last_report)
    now = scm.clock.wall_ms()
    return AuditSnapshot(
        scm_id=scm.storage_config.scm_id or "",
        cluster_id=scm.storage_config.cluster_id or "",
        node_id=scm.node_id or "",
        applied=info,
        captured_at_ms=now,
        expires_at_ms=expires_at_ms or now + 600_000,
        barrier_id=barrier_id,
        consistency="barrier" if barrier_id else "local",
        is_leader=scm.scm_context.is_leader(),
        term=scm.scm_context.term,
        db_snapshot=scm.metadata_store.db.snapshot(),
        replicas=cm.replica_map_view(),
        nodes=nodes,
        replica_counts={n.uuid: cm.container_count_on(n.uuid) for n in nodes},
        pending=rm.pending_ops.snapshot(),
        last_report=last,
        maintenance_replica_minimum=rm.config.maintenance_replica_minimum,
        maintenance_remaining_redundancy=rm.config.maintenance_remaining_redundancy,
        started_at_ms=cm.started_wall_ms,
        first_reports=dict(cm.first_full_report_ms),
        rm_state=replication_manager_state(rm),
        rm_interval_ms=int(rm.interval.total_seconds() * 1000),
        placement_policy=rm.placement.name,
    )


def replication_manager_state(rm: Any) -> str:
    """STOPPED (``replicationmanager stop``), RUNNING, or PAUSED (not the ready leader, or in safemode):
    whether its last report can still be current."""
    if not rm.enabled:
        return "STOPPED"
    return "RUNNING" if rm.status is ServiceStatus.RUNNING else "PAUSED"


class AuditSnapshotRegistry:
    """Captures of one SCM, by barrier id. Listens to the barrier state manager (a barrier entry is
    being applied) and the transaction buffer (that entry's index is now applied: capture here)."""

    def __init__(self, scm: StorageContainerManager, max_captures: int = MAX_CAPTURES) -> None:
        self.scm = scm
        self.max_captures = max_captures
        self._captures: dict[str, AuditSnapshot] = {}
        self._pending: tuple[str, int] | None = None
        self._changed = asyncio.Event()
        scm.audit_barrier_state_manager.add_listener(self._on_barrier)
        scm.transaction_buffer.add_applied_listener(self._on_applied)

    # ---- listeners (inside the apply of the barrier entry; must not raise) ----
    def _on_barrier(self, barrier_id: str, expires_at_ms: int) -> None:
        if expires_at_ms and expires_at_ms < self.scm.clock.wall_ms():
            LOG.debug("audit barrier %s expired; not capturing (log replay?)", barrier_id)
            return
        self._pending = (barrier_id, expires_at_ms)

    def _on_applied(self, applied: TransactionInfo) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        barrier_id, expires_at_ms = pending
        try:
            snap = capture(self.scm, barrier_id=barrier_id, expires_at_ms=expires_at_ms, applied=applied)
        except Exception:
            LOG.exception("audit barrier %s: capture failed", barrier_id)
            return
        self._add(snap)
        LOG.info("audit snapshot captured at barrier %s, applied (term %d, index %d)", barrier_id, applied.term, applied.index)

    # ---- bookkeeping ----
    def _add(self, snap: AuditSnapshot) -> None:
        self.expire()
        while len(self._captures) >= self.max_captures:
            oldest = min(self._captures.values(), key=lambda s: s.captured_at_ms)
            self.drop(oldest.barrier_id)
        self._captures[snap.barrier_id] = snap
        self._changed.set()
        self._changed = asyncio.Event()

    def expire(self) -> None:
        now = self.scm.clock.wall_ms()
        for bid, snap in list(self._captures.items()):
            if snap.expires_at_ms < now:
                self.drop(bid)

    def drop(self, barrier_id: str) -> None:
        snap = self._captures.pop(barrier_id, None)
        if snap is not None:
            snap.release()

    def get(self, barrier_id: str) -> AuditSnapshot | None:
        self.expire()
        return self._captures.get(barrier_id)

    def __len__(self) -> int:
        return len(self._captures)

    async def wait_for(self, barrier_id: str, barrier_index: int, timeout: float) -> AuditSnapshot:
        """The capture for ``barrier_id``, waiting (bounded) until this SCM applies the barrier."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        while True:
            snap = self.get(barrier_id)
            if snap is not None:
                return snap
            applied = self.scm.transaction_buffer.latest_trx_info().index
            if barrier_index and applied >= barrier_index:
                raise SCMException(
                    ResultCodes.INVALID_REQUEST,
                    f"SCM {self.scm.node_id or ''} applied index {applied} is past barrier {barrier_id} "
                    f"(index {barrier_index}) but holds no capture for it: it skipped the entry (checkpoint "
                    "install or restart) or the capture expired; create a new barrier",
                )
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise SCMException(
                    ResultCodes.TIMEOUT,
                    f"SCM {self.scm.node_id or ''} did not apply audit barrier {barrier_id} (index "
                    f"{barrier_index or '?'}) within {timeout}s; its applied index is {applied}",
                )
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout=min(remaining, 0.2))

    def close(self) -> None:
        self.scm.audit_barrier_state_manager.remove_listener(self._on_barrier)
        for bid in list(self._captures):
            self.drop(bid)


_REGISTRIES: weakref.WeakKeyDictionary[Any, AuditSnapshotRegistry] = weakref.WeakKeyDictionary()


def registry_for(scm: StorageContainerManager) -> AuditSnapshotRegistry:
    """The one registry of an SCM facade (created on first use)."""
    registry = _REGISTRIES.get(scm)
    if registry is None:
        registry = AuditSnapshotRegistry(scm)
        _REGISTRIES[scm] = registry
    return registry


async def create_barrier(scm: StorageContainerManager, ttl_seconds: float) -> scm_audit_pb2.AuditBarrierResponseProto:
    """Leader only: propose the barrier entry; returns once it is applied here (captured too)."""
    scm.scm_context.check_leader()
    if ttl_seconds <= 0 or ttl_seconds > 86_400:
        raise SCMException(ResultCodes.INVALID_REQUEST, f"ttlSeconds must be in (0, 86400], got {ttl_seconds}")
    registry = registry_for(scm)
    barrier_id = uuid.uuid4().hex
    expires = scm.clock.wall_ms() + int(ttl_seconds * 1000)
    await scm.audit_barrier_state_manager.audit_barrier(barrier_id, expires)
    snap = registry.get(barrier_id)
    if snap is None:
        raise SCMException(ResultCodes.INTERNAL_ERROR, f"audit barrier {barrier_id} was applied but not captured")
    return scm_audit_pb2.AuditBarrierResponseProto(
        barrierId=barrier_id,
        transactionInfo=snap.applied.to_proto(),
        clusterId=snap.cluster_id,
        scmId=snap.scm_id,
    )


# ---- rows ----
def _replica_row(r: ContainerReplica) -> scm_audit_pb2.AuditReplicaRowProto:
    return scm_audit_pb2.AuditReplicaRowProto(
        containerID=r.container_id,
        datanodeUuid=r.datanode_uuid,
        state=r.state,  # type: ignore[arg-type]
        blockCommitSequenceId=r.sequence_id,
        replicaIndex=r.replica_index,
        used=r.used_bytes,
        keyCount=r.key_count,
        originNodeId=r.origin_node_id,
        isEmpty=r.is_empty,
        lastReportMs=r.last_report_ms,
    )


def _datanode_row(n: DatanodeInfo, replica_count: int, first_report_ms: int = 0) -> scm_audit_pb2.AuditDatanodeRowProto:
    reports = [r for r in n.storage_reports if not r.failed]
    return scm_audit_pb2.AuditDatanodeRowProto(
        uuid=n.uuid,
        hostName=n.details.hostName,
        ipAddress=n.details.ipAddress,
        rack=n.rack,
        health=n.health,  # type: ignore[arg-type]
        opState=n.op_state,  # type: ignore[arg-type]
        opStateExpiryEpochSeconds=n.op_state_expiry_epoch_s,
        lastHeartbeatMs=n.last_heartbeat_wall_ms,
        capacity=sum(r.capacity for r in reports),
        used=sum(r.scmUsed for r in reports),
        remaining=sum(r.remaining for r in reports),
        containers=replica_count,
        firstReportMs=first_report_ms,
    )


class _Digest:
    """Same encoding as ``GetTableDigests`` (inter_scm_service.table_digests), fed incrementally."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.hash = hashlib.sha256()
        self.count = 0

    def update(self, key: bytes, value: bytes) -> None:
        self.hash.update(len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value)
        self.count += 1

    def proto(self) -> scm_ha_pb2.TableDigestProto:
        return scm_ha_pb2.TableDigestProto(table=self.table, sha256=self.hash.hexdigest(), count=self.count)


def _chunk(**kwargs: Any) -> scm_audit_pb2.AuditExportChunkProto:
    return scm_audit_pb2.AuditExportChunkProto(**kwargs)


def _pages(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for off in range(0, len(items), size):
        yield items[off : off + size]


async def stream_snapshot(snap: AuditSnapshot, page_size: int) -> AsyncIterator[scm_audit_pb2.AuditExportChunkProto]:
    """Header, datanodes, pipelines, then containers + the RM's verdicts + replicas page by page (in
    container id order), then a trailer with row counts and digests, all from ``snap``."""
    P = scm_audit_pb2
    yield _chunk(
        header=P.AuditExportHeaderProto(
            scmId=snap.scm_id,
            clusterId=snap.cluster_id,
            nodeId=snap.node_id,
            transactionInfo=snap.applied.to_proto(),
            capturedAtMs=snap.captured_at_ms,
            barrierId=snap.barrier_id,
            isLeader=snap.is_leader,
            term=snap.term,
            consistency=snap.consistency,
            lastReport=snap.last_report,
            maintenanceReplicaMinimum=snap.maintenance_replica_minimum,
            startedAtMs=snap.started_at_ms,
            replicationManagerState=snap.rm_state,
            replicationManagerIntervalMs=snap.rm_interval_ms,
        )
    )
    rows = {t: 0 for t in ("containers", "replicas", "datanodes", "pipelines", "rm_verdicts")}
    nodes = sorted(snap.nodes, key=lambda n: n.uuid)
    for page in _pages(nodes, page_size):
        rows["datanodes"] += len(page)
        yield _chunk(datanodes=P.DatanodesPage(rows=[_datanode_row(n, snap.replica_counts.get(n.uuid, 0), snap.first_reports.get(n.uuid, 0)) for n in page]))
        await asyncio.sleep(0)

    db = snap.db_snapshot
    digests: dict[str, _Digest] = {}
    pipeline_cf = SCMDBDefinition.PIPELINES
    pipeline_digest = digests.setdefault(pipeline_cf.name, _Digest(pipeline_cf.name))
    pipeline_states: dict[str, int] = {}
    pipeline_rows: list[hdds_pb2.Pipeline] = []
    for key, value in db.iterator(prefix=pipeline_cf.prefix):
        pipeline_digest.update(key, value)
        pipeline = pipeline_cf.value_codec.decode(value)
        pipeline_states[pipeline.id.id] = pipeline.state
        pipeline_rows.append(pipeline)
        if len(pipeline_rows) >= page_size:
            rows["pipelines"] += len(pipeline_rows)
            yield _chunk(pipelines=P.PipelinesPage(rows=pipeline_rows))
            pipeline_rows = []
    if pipeline_rows:
        rows["pipelines"] += len(pipeline_rows)
        yield _chunk(pipelines=P.PipelinesPage(rows=pipeline_rows))

    cluster = ClusterView(
        nodes=nodes,
        load=lambda _dn: 0,  # only steers the choice of targets, which is not exported
        placement=container_policy(snap.placement_policy, random.Random(0)),
        maintenance_replica_minimum=snap.maintenance_replica_minimum,
        maintenance_remaining_redundancy=snap.maintenance_remaining_redundancy,
    )
    by_uuid = {n.uuid: n for n in nodes}
    replica_ids = sorted(snap.replicas)  # merged with the (sorted) container keys below
    next_replica = 0
    container_cf = SCMDBDefinition.CONTAINERS
    container_digest = digests.setdefault(container_cf.name, _Digest(container_cf.name))
    no_pending = PendingView()

    def replicas_before(limit: int | None) -> list[ContainerReplica]:
        """Replicas of containers with id < limit that the table does not know (orphans)."""
        nonlocal next_replica
        out: list[ContainerReplica] = []
        while next_replica < len(replica_ids) and (limit is None or replica_ids[next_replica] < limit):
            orphan = replica_ids[next_replica]
            out.extend(unpack_replicas(orphan, snap.replicas[orphan]))
            next_replica += 1
        return out

    containers: list[hdds_pb2.ContainerInfoProto] = []
    verdicts: list[scm_audit_pb2.AuditVerdictRowProto] = []
    replicas: list[ContainerReplica] = []

    def flush_page() -> list[scm_audit_pb2.AuditExportChunkProto]:
        out = []
        if containers:
            rows["containers"] += len(containers)
            out.append(_chunk(containers=P.ContainersPage(rows=containers)))
        if verdicts:
            rows["rm_verdicts"] += len(verdicts)
            out.append(_chunk(verdicts=P.VerdictsPage(rows=verdicts)))
        for page in _pages(replicas, page_size):
            rows["replicas"] += len(page)
            out.append(_chunk(replicas=P.ReplicasPage(rows=[_replica_row(r) for r in page])))
        return out

    for key, value in db.iterator(prefix=container_cf.prefix):
        container_digest.update(key, value)
        info = container_cf.value_codec.decode(value)
        cid = info.containerID
        replicas.extend(replicas_before(cid))
        stored: StoredReplicas = ()
        if next_replica < len(replica_ids) and replica_ids[next_replica] == cid:
            stored = snap.replicas[cid]
            next_replica += 1
        own = unpack_replicas(cid, stored)
        replicas.extend(own)
        containers.append(info)
        merged = hdds_pb2.ContainerInfoProto()
        merged.CopyFrom(info)
        merge_reported_usage(merged, stored)
        pipeline_state = pipeline_states.get(info.pipelineID.id) if info.HasField("pipelineID") else None
        view = build_container_view(merged, own, by_uuid.get, pipeline_state, snap.pending.get(cid, no_pending))
        result = check_container(view, cluster)
        verdicts.append(
            P.AuditVerdictRowProto(
                containerID=cid,
                health=result.health.value,
                states=sorted(s.value for s in result.states),
                reason=result.reason,
            )
        )
        if len(containers) >= page_size:
            for chunk in flush_page():
                yield chunk
            containers, verdicts, replicas = [], [], []
            await asyncio.sleep(0)
    replicas.extend(replicas_before(None))
    for chunk in flush_page():
        yield chunk
    containers, verdicts, replicas = [], [], []

    # Digests of the other replicated column families, from the same LevelDB snapshot.
    for cf in SCMDBDefinition.column_families():
        if cf.name in NON_REPLICATED_TABLES or cf.name in digests:
            continue
        digest = digests.setdefault(cf.name, _Digest(cf.name))
        for key, value in db.iterator(prefix=cf.prefix):
            digest.update(key, value)
            if digest.count % YIELD_EVERY == 0:
                await asyncio.sleep(0)
    ordered = [digests[cf.name].proto() for cf in SCMDBDefinition.column_families() if cf.name in digests]
    yield _chunk(
        trailer=P.AuditExportTrailerProto(
            digests=ordered,
            rowCounts=[hdds_pb2.KeyValue(key=k, value=str(v)) for k, v in rows.items()],
        )
    )


async def export_chunks(
    scm: StorageContainerManager, request: scm_audit_pb2.AuditExportRequestProto
) -> AsyncIterator[scm_audit_pb2.AuditExportChunkProto]:
    """Validate the request, find or take the capture, stream it, release it when done."""
    cluster_id = scm.storage_config.cluster_id or ""
    if request.clusterId and request.clusterId != cluster_id:
        raise SCMException(
            ResultCodes.INVALID_CLUSTER_ID,
            f"audit export for cluster {request.clusterId} asked of an SCM in cluster {cluster_id}",
        )
    page_size = request.pageSize
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise SCMException(ResultCodes.INVALID_REQUEST, f"pageSize must be 1..{MAX_PAGE_SIZE}, got {page_size}")
    if request.requireLeader:
        scm.scm_context.check_leader()
    registry = registry_for(scm)
    if request.barrierId:
        snap = await registry.wait_for(request.barrierId, request.barrierIndex, request.waitSeconds)
    else:
        snap = capture(scm)
    LOG.info(
        "audit export (%s) of %d containers' replicas at applied (term %d, index %d)",
        snap.consistency, len(snap.replicas), snap.applied.term, snap.applied.index,
    )
    try:
        async for chunk in stream_snapshot(snap, page_size):
            yield chunk
    except RuntimeError as exc:  # plyvel: "Database or snapshot is closed"
        raise SCMException(
            ResultCodes.IO_EXCEPTION,
            f"scm.db was closed or replaced during the audit export ({exc}); export again",
        ) from exc
    if request.barrierId:
        registry.drop(request.barrierId)
    else:
        snap.release()


class AuditExportService(_ServiceBase["StorageContainerManager"]):
    """SCMAuditProtocolService on ozone.scm.client.grpc.port (next to the admin protocol). Not one of Ozone's
    protocols: it reads a snapshot of the facade's own state, so it holds the facade itself, not a face of it."""

    SERVICE = "SCMAuditProtocolService"
    MODULE = scm_audit_pb2

    def __init__(
        self, scm: StorageContainerManager, protocol: endpoints.Protocol, get: endpoints.Getter, metrics: RpcMetrics
    ) -> None:
        super().__init__(scm, protocol, get, metrics)
        registry_for(scm)  # listen for barriers from the start

    async def CreateAuditBarrier(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        return await create_barrier(self.scm, req.ttlSeconds)

    def generic_handler(self) -> grpc.GenericRpcHandler:
        service = self.MODULE.DESCRIPTOR.services_by_name[self.SERVICE]
        barrier = service.methods_by_name["CreateAuditBarrier"]
        handlers = {
            "CreateAuditBarrier": grpc.unary_unary_rpc_method_handler(
                self._wrap("CreateAuditBarrier", self.CreateAuditBarrier, message_factory.GetMessageClass(barrier.input_type)),
                request_deserializer=None,
                response_serializer=lambda m: m.SerializeToString(),
            ),
            "ExportSnapshot": grpc.unary_stream_rpc_method_handler(
                self._export_handler,
                request_deserializer=None,
                response_serializer=lambda m: m.SerializeToString(),
            ),
        }
        return grpc.method_handlers_generic_handler(service.full_name, handlers)

    async def _abort(self, context: grpc.aio.ServicerContext, exc: SCMException) -> None:
        leader = self._leader_address(exc) if isinstance(exc, NotLeaderException) else None
        code, details, md = to_grpc_error(exc, leader)
        await context.abort(code, details, trailing_metadata=md)

    async def _export_handler(
        self, raw: bytes, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[scm_audit_pb2.AuditExportChunkProto]:
        result = ResultCodes.INVALID_REQUEST.value  # until the request parses
        try:
            request = await self._parse_request(scm_audit_pb2.AuditExportRequestProto, raw, context, "ExportSnapshot")
            result = "OK"
            try:
                async for chunk in export_chunks(self.scm, request):
                    yield chunk
            except SCMException as exc:
                result = exc.result.value
                await self._abort(context, exc)
            except (grpc.aio.AbortError, grpc.RpcError, asyncio.CancelledError):
                raise
            except Exception as exc:
                result = ResultCodes.INTERNAL_ERROR.value
                LOG.exception("%s/ExportSnapshot failed", self.SERVICE)
                await context.abort(
                    grpc.StatusCode.INTERNAL,
                    f"INTERNAL_ERROR: {type(exc).__name__}: {exc}",
                    trailing_metadata=((RESULT_KEY, ResultCodes.INTERNAL_ERROR.value),),
                )
        finally:
            self.metrics.requests.labels(self.SERVICE, "ExportSnapshot", result).inc()

