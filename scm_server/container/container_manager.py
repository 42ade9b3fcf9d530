"""ContainerManager: container allocation, closing, and the container report handlers.

It sits on top of the replicated :class:`ContainerStateManager` (Ozone's ContainerManagerImpl +
ContainerReportHandler / IncrementalContainerReportHandler + CloseContainerEventHandler):

* leader-only: ``allocate_container`` (container id from the ``containerId`` sequence, chosen
  here and replicated with ``addContainer``), ``get_matching_container`` (Ozone's
  openContainerLimit per owner and pipeline), ``close_container`` (FINALIZE + close commands);
* every SCM: replicas (which datanode holds which container, in which state) are *soft state*
  rebuilt from full and incremental container reports; usage (bytes, keys, BCSID) likewise;
* lifecycle transitions driven by reports (OPEN->CLOSING when a replica is no longer open,
  CLOSING->CLOSED/QUASI_CLOSED, QUASI_CLOSED->CLOSED) happen only on the leader: a follower's
  Raft write would fail and must not stop the replica update (Ozone, AbstractContainerReportHandler).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from array import array
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from typing import Final, NamedTuple

from scm_server.clock import Clock
from scm_server.conf import SCMConfig
from scm_server.container.container_state_manager import (
    CLOSE,
    CLOSED,
    CLOSING,
    DELETED,
    FINALIZE,
    FORCE_CLOSE,
    OPEN,
    QUASI_CLOSE,
    QUASI_CLOSED,
    ContainerInfo,
    ContainerStateManager,
)
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.ha.scm_context import SCMContext
from scm_server.ha.sequence_id_generator import CONTAINER_ID, SequenceIdGenerator
from scm_server.metadata.enums import enum_name
from scm_server.node.node_manager import SCMNodeManager
from scm_server.pipeline.pipeline_manager import PipelineManager
from scm_server.proto import hdds_pb2, scm_datanode_pb2
from scm_server.protocols import ContainerReport, ReplicaReport

log = logging.getLogger(__name__)

ReplicaState = hdds_pb2.ContainerReplicaProto.State
R_OPEN = hdds_pb2.ContainerReplicaProto.OPEN
REPORT_YIELD_EVERY = 2000  # replicas of a full report handled per event-loop turn (a few ms: docs/performance.md)
R_CLOSING = hdds_pb2.ContainerReplicaProto.CLOSING
R_QUASI_CLOSED = hdds_pb2.ContainerReplicaProto.QUASI_CLOSED
R_CLOSED = hdds_pb2.ContainerReplicaProto.CLOSED
R_UNHEALTHY = hdds_pb2.ContainerReplicaProto.UNHEALTHY
R_INVALID = hdds_pb2.ContainerReplicaProto.INVALID
R_DELETED = hdds_pb2.ContainerReplicaProto.DELETED
CommandType = scm_datanode_pb2.SCMCommandProto.Type


class ContainerReplica(NamedTuple):
    """One replica as last reported by a datanode (soft state). Immutable: a newer report replaces it.

    The container manager keeps a container's replicas as one flat *plain* tuple
    (:data:`StoredReplicas`) and hands out this named view of them on reads
    (:func:`unpack_replicas`). CPython's collector stops tracking a plain tuple of ints and strings
    the first time it sees one, so the replicas of 1M containers are never walked by a full
    collection (as objects of a class they were, every time the heap grew by a quarter, which made
    report processing slower the bigger the cluster)."""

    container_id: int
    datanode_uuid: str
    state: int
    sequence_id: int = 0
    key_count: int = 0
    used_bytes: int = 0
    origin_node_id: str = ""
    is_empty: bool = False
    replica_index: int = 0
    last_report_ms: int = 0

    def to_proto(self) -> hdds_pb2.ContainerReplicaProto:
        return hdds_pb2.ContainerReplicaProto(
            containerID=self.container_id,
            state=self.state,  # type: ignore[arg-type]
            used=self.used_bytes,
            keyCount=self.key_count,
            blockCommitSequenceId=self.sequence_id,
            originNodeId=self.origin_node_id,
            isEmpty=self.is_empty,
            replicaIndex=self.replica_index,
        )


#: How the index stores a container's replicas (the container id is the index's key): one flat plain
#: tuple, ordered by datanode, of a record per replica: (datanode, state, BCSID, key count, used
#: bytes, last report ms), followed by (origin node, is_empty, replica index) only when one of those
#: is not its usual value (origin = the datanode itself, not empty, index 0); such a record has
#: :data:`_EXTRA` set in its state. One tuple per container instead of one per replica plus a tuple
#: of them saves about 144 bytes a container (144 MB at 1M containers x 3 replicas), and 6 fields
#: instead of 10 another 40 bytes a replica.
StoredReplicas = tuple[str | int | bool, ...]
# Offsets in a replica's record.
_SEQ: Final = 2
_KEYS: Final = 3
_USED: Final = 4
_SHORT: Final = 6  # fields in a usual record
_LONG: Final = 9  # with origin, is_empty and replica index
_EXTRA: Final = 0x100  # in a stored state: the record is long (no ReplicaState comes near it)


def unpack_replicas(container_id: int, flat: StoredReplicas) -> list[ContainerReplica]:
    """The named view of a container's stored replicas."""
    out = []
    i, n = 0, len(flat)
    while i < n:
        dn, state = flat[i], flat[i + 1]
        seq, keys, used, last_ms = flat[i + 2], flat[i + 3], flat[i + 4], flat[i + 5]
        if state & _EXTRA:  # type: ignore[operator]
            origin, empty, index = flat[i + 6], flat[i + 7], flat[i + 8]
            state &= ~_EXTRA  # type: ignore[operator]
            i += _LONG
        else:
            origin, empty, index = dn, False, 0
            i += _SHORT
        out.append(ContainerReplica(container_id, dn, state, seq, keys, used, origin, empty, index, last_ms))  # type: ignore[arg-type]
    return out


def _field_max(flat: StoredReplicas, offset: int) -> int:
    """The largest value at ``offset`` over a container's replica records (``flat`` not empty)."""
    most = flat[offset]
    i, n = 0, len(flat)
    while i < n:
        v = flat[i + offset]
        if v > most:  # type: ignore[operator]
            most = v
        i += _LONG if flat[i + 1] & _EXTRA else _SHORT  # type: ignore[operator]
    return most  # type: ignore[return-value]


def _find(flat: StoredReplicas, dn: str) -> tuple[int, int]:
    """(start, end) of ``dn``'s record, or (where it would go, same) when it has none."""
    i, n = 0, len(flat)
    while i < n and flat[i] < dn:  # type: ignore[operator]
        i += _LONG if flat[i + 1] & _EXTRA else _SHORT  # type: ignore[operator]
    if i < n and flat[i] == dn:
        return i, i + (_LONG if flat[i + 1] & _EXTRA else _SHORT)  # type: ignore[operator]
    return i, i


def _sorted_add(ids: array[int], cid: int) -> None:
    if not ids or ids[-1] < cid:
        ids.append(cid)  # the usual case: a full report lists its containers in id order
        return
    i = bisect_left(ids, cid)
    if i == len(ids) or ids[i] != cid:
        ids.insert(i, cid)


def _sorted_discard(ids: array[int], cid: int) -> None:
    i = bisect_left(ids, cid)
    if i < len(ids) and ids[i] == cid:
        del ids[i]

ReplicaListener = Callable[[int, str, bool], None]


# containers whose encoded form :meth:`ContainerManager.encoded` keeps, each with the record and replica tuple it was
# made from (which would otherwise be freed when replaced); docs/performance.md has what they cost
ENCODED_MAX = 100_000


def merge_reported_usage(info: hdds_pb2.ContainerInfoProto, replicas: StoredReplicas) -> hdds_pb2.ContainerInfoProto:
    """Raise ``info``'s used bytes, key count and BCSID to the most any replica reported (in place;
    pass a copy). What :meth:`ContainerManager.get_container` serves and the ReplicationManager
    checks; the audit export applies it to the snapshot's replicas the same way."""
    if replicas:
        info.usedBytes = max(info.usedBytes, _field_max(replicas, _USED))
        info.numberOfKeys = max(info.numberOfKeys, _field_max(replicas, _KEYS))
        info.sequenceId = max(info.sequenceId, _field_max(replicas, _SEQ))
    return info


class ContainerManager:
    def __init__(
        self,
        state_manager: ContainerStateManager,
        pipeline_manager: PipelineManager,
        node_manager: SCMNodeManager,
        sequence_id_generator: SequenceIdGenerator,
        scm_context: SCMContext,
        clock: Clock,
        config: SCMConfig,
        pipeline_wait_s: float = 10.0,
    ) -> None:
        self.state_manager = state_manager
        self.pipeline_manager = pipeline_manager
        self.node_manager = node_manager
        self.sequence_id_generator = sequence_id_generator
        self.scm_context = scm_context
        self.clock = clock
        self.config = config
        self.pipeline_wait_s = pipeline_wait_s
        # Replicas per container as one flat plain tuple sorted by datanode (see StoredReplicas; the
        # collector untracks it, see ContainerReplica); datanode ids are interned so 1M replicas
        # share a handful of strings.
        self._replicas: dict[int, StoredReplicas] = {}
        # The containers each datanode holds, as a sorted array of ids (8 bytes each; a set took
        # about 42 bytes a replica, 126 MB at 1M containers x 3).
        self._by_node: dict[str, array[int]] = defaultdict(lambda: array("q"))
        self._node_ids: dict[str, str] = {}
        self._replica_total = 0
        self._replica_listeners: list[ReplicaListener] = []
        self._last_chosen: dict[tuple[str, str], int] = {}  # (pipeline, owner) -> the container chosen last
        self._allocation_lock = asyncio.Lock()
        self.reports_processed = 0
        self.incremental_reports_processed = 0
        # Replicas are soft state rebuilt from full reports: since when, and which datanodes have sent
        # one (the audit marks a view partial until every registered datanode has; docs/audit.md).
        self.started_wall_ms = clock.wall_ms()
        self.first_full_report_ms: dict[str, int] = {}
        # Each container's ContainerInfoProto as get_container serves it, serialized, with the stored record and the
        # replica tuple it was made from: valid while both are the very objects the tables hold (neither is ever
        # changed in place: a change stores a new record or a new tuple), so nothing needs to invalidate it.
        self._encoded: dict[int, tuple[ContainerInfo, StoredReplicas | None, bytes]] = {}
        pipeline_manager.set_container_closer(self.close_containers_of_pipeline)

    def reinitialize(self) -> None:
        self.state_manager.reinitialize()
        self._encoded = {}  # every record is new: free the old ones the entries hold

    def add_replica_listener(self, listener: ReplicaListener) -> None:
        """``listener(container_id, dn_uuid, added)`` on replica appearance/removal (pending ops)."""
        self._replica_listeners.append(listener)

    # ---- reads ----
    def get_container(self, container_id: int) -> hdds_pb2.ContainerInfoProto:
        """The container info merged with soft usage from reports (a copy)."""
        view = self.state_manager.get_container(container_id)  # already a fresh copy
        return merge_reported_usage(view, self._replicas.get(container_id, ()))

    def encoded(self, container_ids: Iterable[int]) -> list[tuple[bytes, str | None]]:
        """For each id: ``get_container(id).SerializeToString()`` and the container's pipeline id, kept across
        calls (:data:`ENCODED_MAX` containers; the table is emptied when it grows past it) while neither the
        stored record nor the container's replicas change. What a long listing serves without building a
        message per container."""
        records = self.state_manager.records()
        replicas = self._replicas
        cache = self._encoded
        out = []
        for cid in container_ids:
            record = records.get(cid)
            if record is None:
                raise SCMException(ResultCodes.CONTAINER_NOT_FOUND, f"Container #{cid} not found")
            reported = replicas.get(cid)
            entry = cache.get(cid)
            if entry is None or entry[0] is not record or entry[1] is not reported:
                data = merge_reported_usage(record.to_proto(), reported or ()).SerializeToString()
                if len(cache) >= ENCODED_MAX:
                    cache.clear()
                entry = cache[cid] = (record, reported, data)
            out.append((entry[2], record.pipeline_id))
        return out

    def with_reported_usage(self, infos: list[hdds_pb2.ContainerInfoProto]) -> list[hdds_pb2.ContainerInfoProto]:
        """:meth:`get_container` of each of ``infos`` (fresh copies from the state manager, changed in place)."""
        replicas = self._replicas
        for info in infos:
            merge_reported_usage(info, replicas.get(info.containerID, ()))
        return infos

    def used_bytes(self, info: hdds_pb2.ContainerInfoProto) -> int:
        """Bytes used: the most any replica reported (soft), at least what is stored."""
        return self._used_bytes(info.containerID, info.usedBytes)

    def _used_bytes(self, container_id: int, stored: int) -> int:
        replicas = self._replicas.get(container_id)
        if not replicas:
            return stored
        return max(stored, _field_max(replicas, _USED))

    def exists(self, container_id: int) -> bool:
        return self.state_manager.contains(container_id)

    def get_containers(self, state: int | None = None) -> list[hdds_pb2.ContainerInfoProto]:
        return self.state_manager.get_containers(state)

    def get_replicas(self, container_id: int) -> list[ContainerReplica]:
        """Replicas of a container, ordered by datanode id."""
        return unpack_replicas(container_id, self._replicas.get(container_id, ()))

    def has_replicas(self, container_id: int) -> bool:
        return bool(self._replicas.get(container_id))

    def containers_on(self, dn_uuid: str) -> set[int]:
        return set(self._by_node.get(dn_uuid, ()))

    def container_count_on(self, dn_uuid: str) -> int:
        """Replicas held by a datanode, O(1) (no copy of its container set)."""
        return len(self._by_node.get(dn_uuid, ()))

    def replica_count(self) -> int:
        """Replicas known from reports, O(1) (a /prom gauge: no scan per scrape)."""
        return self._replica_total

    # ---- soft replica updates ----
    def _intern(self, dn_uuid: str) -> str:
        """One shared string per datanode id (replicas of 1M containers would otherwise each hold
        their own copies decoded from the reports)."""
        return self._node_ids.setdefault(dn_uuid, dn_uuid)

    def update_container_replica(self, replica: ContainerReplica) -> None:
        """Record a replica (Ozone's updateContainerReplica): soft state, never replicated."""
        self._put_replica(replica.container_id, self._intern(replica.datanode_uuid), *replica[2:])

    def _put_replica(
        self,
        cid: int,
        dn: str,
        state: int,
        sequence_id: int,
        key_count: int,
        used_bytes: int,
        origin: str,
        is_empty: bool,
        replica_index: int,
        last_report_ms: int,
        info: ContainerInfo | None = None,
    ) -> None:
        """Store one replica; ``info`` is the container's record when the caller has it at hand.
        ``dn`` must already be interned (the report loop interns it once per report)."""
        current = self._replicas.get(cid)
        # Equal values share one int object: the replicas of a container usually agree with each
        # other and with the container's record, and each decoded int is an object of 28-32 bytes.
        if current:
            if sequence_id == current[_SEQ]:
                sequence_id = current[_SEQ]
            if key_count == current[_KEYS]:
                key_count = current[_KEYS]
            if used_bytes == current[_USED]:
                used_bytes = current[_USED]
        else:
            if info is None:
                info = self.state_manager.record_of(cid)
            if info is not None:  # the first replica: share with the stored record
                cid = info.container_id
                if sequence_id == info.sequence_id:
                    sequence_id = info.sequence_id
                if key_count == info.number_of_keys:
                    key_count = info.number_of_keys
                if used_bytes == info.used_bytes:
                    used_bytes = info.used_bytes
        record: StoredReplicas
        if (not origin or origin == dn) and not is_empty and not replica_index:
            record = (dn, state, sequence_id, key_count, used_bytes, last_report_ms)
        else:
            origin = self._intern(origin) if origin else dn
            record = (dn, state | _EXTRA, sequence_id, key_count, used_bytes, last_report_ms, origin, is_empty, replica_index)
        if not current:
            self._replicas[cid] = record
        else:
            at, end = _find(current, dn)  # records are kept ordered by datanode id
            self._replicas[cid] = current[:at] + record + current[end:]
            if end > at:
                return  # a newer report of a replica already known
        ids = self._by_node[dn]
        if not ids or ids[-1] < cid:
            ids.append(cid)  # the usual case: a full report lists its containers in id order
        else:
            _sorted_add(ids, cid)
        self._replica_total += 1
        for listener in self._replica_listeners:
            listener(cid, dn, True)

    def remove_replica(self, container_id: int, dn_uuid: str) -> None:
        current = self._replicas.get(container_id)
        if current is None:
            return
        at, end = _find(current, dn_uuid)
        if at == end:
            return
        rest = current[:at] + current[end:]
        self._replica_total -= 1
        if rest:
            self._replicas[container_id] = rest
        else:
            del self._replicas[container_id]
        _sorted_discard(self._by_node[dn_uuid], container_id)
        for listener in self._replica_listeners:
            listener(container_id, dn_uuid, False)

    def forget_container(self, container_id: int) -> None:
        for r in self.get_replicas(container_id):
            self.remove_replica(container_id, r.datanode_uuid)

    # ---- allocation (leader) ----
    async def allocate_container(
        self,
        rtype: int,
        rfactor: int,
        owner: str,
        pipeline: hdds_pb2.Pipeline | None = None,
        ec: hdds_pb2.ECReplicationConfig | None = None,
    ) -> hdds_pb2.ContainerInfoProto:
        """A new OPEN container on ``pipeline`` (or on an OPEN pipeline of the replication given:
        ``ec`` is the layout when ``rtype`` is EC)."""
        self.scm_context.check_leader()
        if pipeline is None and rtype == hdds_pb2.EC:
            if ec is None:
                raise SCMException(ResultCodes.INVALID_REQUEST, "an EC container needs its ecReplicationConfig")
            pipeline = await self.pipeline_manager.get_or_create_ec_pipeline(ec, None, self._least_loaded_pipeline)
        if pipeline is None:
            pipeline = await self.pipeline_manager.get_or_create_open_pipeline(
                rtype, rfactor, None, self._least_loaded_pipeline, self.pipeline_wait_s
            )
        container_id = await self.sequence_id_generator.get_next_id(CONTAINER_ID)
        info = hdds_pb2.ContainerInfoProto(
            containerID=container_id,
            state=OPEN,
            pipelineID=pipeline.id,
            usedBytes=0,
            numberOfKeys=0,
            stateEnterTime=self.clock.wall_ms(),
            owner=owner,
            deleteTransactionId=0,
            sequenceId=0,
            replicationType=pipeline.type,
        )
        if pipeline.type == hdds_pb2.EC:
            info.ecReplicationConfig.CopyFrom(pipeline.ecReplicationConfig)
        else:
            info.replicationFactor = pipeline.factor
        applied = await self.state_manager.add_container(info)
        if applied and applied != container_id:
            # a client's retry of a call already applied (here or on an earlier leader): its container
            log.info("container allocation retried by its client: container #%d (not #%d)", applied, container_id)
            return self.state_manager.get_container(applied)
        log.info("allocated container #%d on pipeline %s for %s", container_id, pipeline.id.id, owner)
        return self.state_manager.get_container(container_id)

    def _least_loaded_pipeline(self, pipelines: list[hdds_pb2.Pipeline]) -> hdds_pb2.Pipeline:
        # O(1) per candidate pipeline: the per-pipeline OPEN index, not a rebuilt list.
        return min(pipelines, key=lambda p: (self.state_manager.open_container_count(p.id.id), p.id.id))

    async def get_matching_container(
        self, size: int, owner: str, pipeline: hdds_pb2.Pipeline, exclude_ids: Iterable[int] = ()
    ) -> hdds_pb2.ContainerInfoProto:
        """An OPEN container of ``owner`` on ``pipeline`` with room for ``size`` (Ozone semantics)."""
        return self.state_manager.get_container(await self.get_matching_container_id(size, owner, pipeline, exclude_ids))

    async def get_matching_container_id(
        self,
        size: int,
        owner: str,
        pipeline: hdds_pb2.Pipeline,
        exclude_ids: Iterable[int] = (),
        limit: int | None = None,
    ) -> int:
        """:meth:`get_matching_container`, its id only (block allocation needs no proto per block).
        ``limit`` is the pipeline's open container limit when the caller has it at hand (a block
        allocation computes it once per pipeline and call)."""
        excluded = exclude_ids if isinstance(exclude_ids, (set, frozenset)) else set(exclude_ids)
        if limit is None:
            limit = self.open_container_limit(pipeline)
        found = self._open_with_room(size, owner, pipeline.id.id, excluded, limit)
        if found is not None:
            return found  # no await on the way: no other allocation ran in between
        async with self._allocation_lock:  # concurrent allocations must not overshoot the limit
            found = self._open_with_room(size, owner, pipeline.id.id, excluded, limit)  # one may have, meanwhile
            if found is not None:
                return found
            return (await self.allocate_container(pipeline.type, pipeline.factor, owner, pipeline)).containerID

    def open_with_room(self, size: int, owner: str, pipeline_id: str, excluded: AbstractSet[int]) -> tuple[int | None, bool]:
        """EC allocation: (an OPEN container of ``owner`` on the pipeline with room for ``size``, or None;
        whether the pipeline has an OPEN container of ``owner`` at all)."""
        open_containers = [c for c in self.state_manager.open_container_records(pipeline_id, owner) if c.container_id not in excluded]
        room = self.config.container_size - size
        for c in open_containers:
            if self._used_bytes(c.container_id, c.used_bytes) <= room:
                return c.container_id, True
        return None, bool(open_containers)

    def open_container_limit(self, pipeline: hdds_pb2.Pipeline) -> int:
        """How many OPEN containers an owner keeps on the pipeline (Ozone's openContainerLimit)."""
        return self.node_manager.open_container_limit(m.uuid for m in pipeline.members)

    def _open_with_room(self, size: int, owner: str, pipeline_id: str, excluded: AbstractSet[int], limit: int) -> int | None:
        """Round robin over ``owner``'s OPEN containers on the pipeline with room for ``size``, as Ozone's
        getMatchingContainer: the first with room after the one last chosen (in id order, wrapping around), so a
        choice looks at one container when the next has room, not at every open one; None when a new container is
        due: fewer than ``limit`` are open (Ozone fills up to the limit), or none has room."""
        ids = self.state_manager.open_container_ids(pipeline_id, owner)
        count = len(ids)
        if (count - sum(1 for c in ids if c in excluded) if excluded else count) < limit:
            return None
        room = self.config.container_size - size
        key = (pipeline_id, owner)
        start = bisect_right(ids, self._last_chosen.get(key, -1))
        record_of = self.state_manager.record_of
        for k in range(count):
            cid = ids[(start + k) % count]
            if cid in excluded:
                continue
            record = record_of(cid)
            if record is not None and self._used_bytes(cid, record.used_bytes) <= room:
                self._last_chosen[key] = cid
                return cid
        return None

    # ---- closing (leader) ----
    async def close_container(self, container_id: int, force: bool = False) -> None:
        """FINALIZE an OPEN container (-> CLOSING) and send close commands to its datanodes."""
        self.scm_context.check_leader()
        info = self.state_manager.get_container(container_id)
        if info.state == OPEN:
            await self.state_manager.update_container_state(container_id, FINALIZE, self.clock.wall_ms())
            info = self.state_manager.get_container(container_id)
            log.info("container #%d is CLOSING", container_id)
        if info.state in (CLOSING, QUASI_CLOSED) or force:
            self.send_close_commands(container_id, force=force)
        elif info.state not in (CLOSED,):
            raise SCMException(
                ResultCodes.UNEXPECTED_CONTAINER_STATE,
                f"container #{container_id} is {enum_name(hdds_pb2.LifeCycleState, info.state)}; cannot close it",
            )

    def send_close_commands(self, container_id: int, force: bool = False, only: Iterable[str] | None = None) -> int:
        info = self.state_manager.get_container(container_id)
        targets = set(only) if only is not None else set()
        if only is None:
            targets.update(r.datanode_uuid for r in self.get_replicas(container_id))
            p = self.pipeline_manager.find(info.pipelineID.id) if info.HasField("pipelineID") else None
            if p is not None:
                targets.update(m.uuid for m in p.members)
        sent = 0
        for dn in sorted(targets):
            if self.node_manager.get_node(dn) is None:
                continue
            self.node_manager.add_command(
                dn,
                scm_datanode_pb2.SCMCommandProto(
                    commandType=CommandType.closeContainerCommand,
                    closeContainerCommandProto=scm_datanode_pb2.CloseContainerCommandProto(
                        containerID=container_id, pipelineID=info.pipelineID, force=force
                    ),
                ),
            )
            sent += 1
        return sent

    async def close_containers_of_pipeline(self, pipeline_id: str) -> None:
        for info in self.state_manager.open_containers_of_pipeline(pipeline_id):
            await self.close_container(info.containerID)

    # ---- report handlers (every SCM) ----
    async def process_container_report(self, dn_uuid: str, report: ContainerReport) -> None:
        """Full report: the DN's replica set is exactly what it lists (missing ones are removed)."""
        self.reports_processed += 1
        now = self.clock.wall_ms()
        dn = self._intern(dn_uuid)
        self.first_full_report_ms.setdefault(dn, now)
        # A datanode's first report has nothing to take away, so only a later one collects ids.
        seen: set[int] | None = set() if self._by_node.get(dn) else None
        protos = report.reports
        pending = iter(protos)  # one message object at a time (a slice would make 2,000 for the GC)
        for start in range(0, len(protos), REPORT_YIELD_EVERY):
            if start:
                # A datanode's full report can list 100k replicas: without a turn for the event loop
                # in between, this SCM's Raft heartbeats stop for seconds and the followers elect
                # another leader (seen at 1M containers in bench/scale.py).
                await asyncio.sleep(0)
            await self._record_replicas(dn, itertools.islice(pending, REPORT_YIELD_EVERY), now, seen)
        if seen is not None:
            for cid in self.containers_on(dn) - seen:
                self.remove_replica(cid, dn)

    async def process_incremental_report(
        self, dn_uuid: str, report: scm_datanode_pb2.IncrementalContainerReportProto
    ) -> None:
        self.incremental_reports_processed += 1
        await self._record_replicas(self._intern(dn_uuid), report.report, self.clock.wall_ms(), None)

    async def _record_replicas(
        self, dn: str, protos: Iterable[ReplicaReport], now_ms: int, seen: set[int] | None
    ) -> None:
        """Record reported replicas (soft state, every SCM), and on the leader take the lifecycle
        step a replica calls for. One call per replica: this loop is most of a full report's cost.
        Nothing to do for an unknown container, a deleted replica, a CLOSED container, or an OPEN
        replica of an OPEN container (:meth:`_update_container_state` does nothing for those).
        ``seen`` collects every reported id when given (a full report's stale replicas are removed)."""
        records = self.state_manager.records()
        put = self._put_replica
        for proto in protos:
            cid = proto.containerID
            if seen is not None:
                seen.add(cid)
            info = records.get(cid)
            if info is None:
                log.debug("datanode %s reported unknown container #%d; ignoring", dn, cid)
                continue
            rstate = proto.state
            if rstate == R_DELETED:
                self.remove_replica(cid, dn)
                continue
            put(
                cid, dn, rstate, proto.blockCommitSequenceId, proto.keyCount, proto.used,
                proto.originNodeId, proto.isEmpty, proto.replicaIndex, now_ms, info,
            )  # fmt: skip
            state = info.state
            if state == CLOSED or (state == OPEN and rstate == R_OPEN):
                continue
            await self._leader_update(dn, proto, state)
            records = self.state_manager.records()  # a checkpoint install may have replaced it

    async def _leader_update(self, dn_uuid: str, proto: ReplicaReport, state: int) -> None:
        if not self.scm_context.is_leader():
            return  # followers record replicas; lifecycle transitions are the leader's (Raft) job
        cid = proto.containerID
        try:
            await self._update_container_state(cid, state, proto, dn_uuid)
        except NotLeaderException:
            log.info("lost leadership while handling a report for container #%d", cid)
        except SCMException as exc:
            log.warning("container #%d: report from %s not applied: %s", cid, dn_uuid, exc)

    async def _update_container_state(
        self, cid: int, state: int, replica: ReplicaReport, dn_uuid: str
    ) -> None:
        if state == OPEN and replica.state != R_OPEN:
            await self.close_container(cid)
            state = self.state_manager.get_container(cid).state
        if state == CLOSING:
            if replica.state == R_CLOSED:
                await self._persist_usage(cid)
                await self.state_manager.update_container_state(cid, CLOSE, self.clock.wall_ms())
                log.info("container #%d is CLOSED", cid)
            elif replica.state == R_QUASI_CLOSED:
                await self._persist_usage(cid)
                await self.state_manager.update_container_state(cid, QUASI_CLOSE, self.clock.wall_ms())
                log.info("container #%d is QUASI_CLOSED", cid)
        elif state == QUASI_CLOSED and replica.state == R_CLOSED:
            await self._persist_usage(cid)
            await self.state_manager.update_container_state(cid, FORCE_CLOSE, self.clock.wall_ms())
            log.info("container #%d is CLOSED (force close of a quasi-closed container)", cid)
        elif state == DELETED and self.node_manager.get_node(dn_uuid) is not None:
            self.node_manager.add_command(
                dn_uuid,
                scm_datanode_pb2.SCMCommandProto(
                    commandType=CommandType.deleteContainerCommand,
                    deleteContainerCommandProto=scm_datanode_pb2.DeleteContainerCommandProto(containerID=cid, force=True),
                ),
            )

    async def _persist_usage(self, container_id: int) -> None:
        """Leader: snapshot usage/BCSID from reports into the replicated info (as args)."""
        stored = self.state_manager.get_container(container_id)
        view = self.get_container(container_id)
        if (view.usedBytes, view.numberOfKeys, view.sequenceId) != (
            stored.usedBytes,
            stored.numberOfKeys,
            stored.sequenceId,
        ):
            await self.state_manager.update_container_info(view)

    async def process_container_action(self, dn_uuid: str, action: scm_datanode_pb2.ContainerAction) -> None:
        if not self.scm_context.is_leader():
            return
        info = self.state_manager.find(action.containerID)
        if info is None or info.state != OPEN:
            return
        log.info(
            "datanode %s asks to close container #%d (%s)",
            dn_uuid,
            action.containerID,
            enum_name(scm_datanode_pb2.ContainerAction.Reason, action.reason),
        )
        await self.close_container(action.containerID)

    # ---- node events ----
    async def on_node_dead(self, dn_uuid: str) -> None:
        """Ozone DeadNodeHandler: the dead node's replicas are gone (on every SCM).

        Except for a node IN_MAINTENANCE (as Ozone): it is expected to be offline, and its
        replicas keep counting as maintenance copies until maintenance ends or expires.
        """
        node = self.node_manager.get_node(dn_uuid)
        if node is not None and node.op_state == hdds_pb2.IN_MAINTENANCE:
            log.info("datanode %s is DEAD while in maintenance; keeping its replicas", dn_uuid)
            return
        for cid in sorted(self.containers_on(dn_uuid)):
            self.remove_replica(cid, dn_uuid)

    async def on_node_stale(self, dn_uuid: str) -> None:
        return None

    async def on_node_healthy(self, dn_uuid: str) -> None:
        return None

    def containers_by_state(self) -> dict[str, int]:
        return self.state_manager.counts_by_state()

    def replica_info(self, container_id: int) -> list[hdds_pb2.ContainerReplicaInfo]:
        out = []
        for r in self.get_replicas(container_id):
            node = self.node_manager.get_node(r.datanode_uuid)
            details = node.details if node is not None else hdds_pb2.DatanodeDetailsProto(uuid=r.datanode_uuid)
            out.append(hdds_pb2.ContainerReplicaInfo(datanode=details, replica=r.to_proto(), lastReportedMs=r.last_report_ms))
        return out

    def replica_map_view(self) -> dict[int, StoredReplicas]:
        """A point-in-time view of every container's replicas (a shallow copy, O(containers)).

        Consistent without copying the replicas: a report never mutates a stored replica or tuple,
        it replaces the container's tuple (``update_container_replica``/``remove_replica``), so the
        tuples this dict holds stay as they were when it was taken (the audit export's capture)."""
        return dict(self._replicas)

    def all_replicas(self) -> dict[int, list[ContainerReplica]]:
        return {cid: self.get_replicas(cid) for cid in sorted(self._replicas)}
