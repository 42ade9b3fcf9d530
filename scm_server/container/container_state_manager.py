"""ContainerStateManager: the replicated container table (Ozone's ``ContainerStateManagerImpl``).

Container lifecycle (SCM side)::

    OPEN --FINALIZE--> CLOSING --CLOSE--------------------------> CLOSED --DELETE--+
                          |                                         ^               |
                          +--QUASI_CLOSE--> QUASI_CLOSED --FORCE_CLOSE              v
                                                 |                              DELETING --CLEANUP--> DELETED
                                                 +------------DELETE-------------^

i.e. the transition table

    ============  ===========  ============
    from          event        to
    ============  ===========  ============
    OPEN          FINALIZE     CLOSING
    CLOSING       QUASI_CLOSE  QUASI_CLOSED
    CLOSING       CLOSE        CLOSED
    QUASI_CLOSED  FORCE_CLOSE  CLOSED
    QUASI_CLOSED  DELETE       DELETING
    CLOSED        DELETE       DELETING
    DELETING      CLEANUP      DELETED
    ============  ===========  ============

An event whose target state the container has already reached or passed is a no-op (idempotent:
e.g. FINALIZE on CLOSED, CLOSE on CLOSED, replays after restart). Any other event is a logical
rejection: SCMException(UNEXPECTED_CONTAINER_STATE), state untouched. RECOVERING has no SCM
transitions.

Mutations are ``@replicate(RequestType.CONTAINER)`` (Ozone's four rules apply; see
:mod:`scm_server.ha.replicate`). Anything time-dependent (``stateEnterTime``) is chosen by the
leader and passed in. Replica locations are NOT here: they are soft state in ContainerManager.
"""

from __future__ import annotations

import bisect
import heapq
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha.replicate import RequestType, replicate
from scm_server.ha.scm_ha_manager_api import SCMHAManager
from scm_server.ha.state_manager import ReplicatedStateManager
from scm_server.ha.transaction_buffer import SCMHADBTransactionBuffer
from scm_server.metadata import SCMMetadataStore
from scm_server.metadata.enums import enum_name
from scm_server.proto import hdds_pb2

LifeCycleState = hdds_pb2.LifeCycleState
LifeCycleEvent = hdds_pb2.LifeCycleEvent

OPEN = hdds_pb2.OPEN
CLOSING = hdds_pb2.CLOSING
QUASI_CLOSED = hdds_pb2.QUASI_CLOSED
CLOSED = hdds_pb2.CLOSED
DELETING = hdds_pb2.DELETING
DELETED = hdds_pb2.DELETED
RECOVERING = hdds_pb2.RECOVERING

FINALIZE = hdds_pb2.FINALIZE
QUASI_CLOSE = hdds_pb2.QUASI_CLOSE
CLOSE = hdds_pb2.CLOSE
FORCE_CLOSE = hdds_pb2.FORCE_CLOSE
DELETE = hdds_pb2.DELETE
CLEANUP = hdds_pb2.CLEANUP

TRANSITIONS: dict[tuple[int, int], int] = {
    (OPEN, FINALIZE): CLOSING,
    (CLOSING, QUASI_CLOSE): QUASI_CLOSED,
    (CLOSING, CLOSE): CLOSED,
    (QUASI_CLOSED, FORCE_CLOSE): CLOSED,
    (QUASI_CLOSED, DELETE): DELETING,
    (CLOSED, DELETE): DELETING,
    (DELETING, CLEANUP): DELETED,
}
EVENT_TARGET: dict[int, int] = {
    FINALIZE: CLOSING,
    QUASI_CLOSE: QUASI_CLOSED,
    CLOSE: CLOSED,
    FORCE_CLOSE: CLOSED,
    DELETE: DELETING,
    CLEANUP: DELETED,
}
# Progress order of the SCM lifecycle (RECOVERING is outside it).
_ORDER: dict[int, int] = {OPEN: 0, CLOSING: 1, QUASI_CLOSED: 2, CLOSED: 3, DELETING: 4, DELETED: 5}


def next_state(state: int, event: int) -> int | None:
    """The state after ``event``; ``None`` means a no-op (already there or past it).

    Raises SCMException(UNEXPECTED_CONTAINER_STATE) for an invalid transition. Pure function.
    """
    if (state, event) in TRANSITIONS:
        return TRANSITIONS[(state, event)]
    target = EVENT_TARGET.get(event)
    if target is None:
        raise SCMException(ResultCodes.INVALID_REQUEST, f"unknown LifeCycleEvent {event}")
    if state in _ORDER and _ORDER[state] >= _ORDER[target]:
        return None
    raise SCMException(
        ResultCodes.UNEXPECTED_CONTAINER_STATE,
        f"invalid event {enum_name(LifeCycleEvent, event)} for container in state {enum_name(LifeCycleState, state)}",
    )


ECLayout = tuple[int, int, str, int]
_EC_LAYOUTS: dict[ECLayout, ECLayout] = {}


def ec_layout(ec: hdds_pb2.ECReplicationConfig) -> ECLayout:
    """An EC replication config as a tuple, one shared tuple per distinct layout (codec in lower case,
    as Ozone writes it; it reads either case)."""
    key = (ec.data, ec.parity, ec.codec.lower(), ec.ecChunkSize)
    return _EC_LAYOUTS.setdefault(key, key)


@dataclass(slots=True)
class ContainerInfo:
    """The in-memory form of one container row (Ozone's ContainerInfo).

    A ``__slots__`` record instead of a ContainerInfoProto per container: a upb message costs
    ~600 B in memory, this ~200 B, and the pipeline id / owner strings are shared. Readers get a
    fresh ContainerInfoProto from :meth:`to_proto` (so they can never mutate the table); scm.db
    stores exactly that proto.
    """

    container_id: int
    state: int
    pipeline_id: str | None
    used_bytes: int
    number_of_keys: int
    state_enter_time: int
    owner: str
    delete_transaction_id: int
    sequence_id: int
    replication_factor: int
    replication_type: int
    ec: ECLayout | None = None  # EC containers: (data, parity, codec, ecChunkSize), shared between containers
    suppressed: bool = False

    @classmethod
    def from_proto(cls, info: hdds_pb2.ContainerInfoProto, strings: dict[str, str]) -> ContainerInfo:
        pipeline_id = info.pipelineID.id if info.HasField("pipelineID") else None
        return cls(
            container_id=info.containerID,
            state=info.state,
            pipeline_id=None if pipeline_id is None else strings.setdefault(pipeline_id, pipeline_id),
            used_bytes=info.usedBytes,
            number_of_keys=info.numberOfKeys,
            state_enter_time=info.stateEnterTime,
            owner=strings.setdefault(info.owner, info.owner),
            delete_transaction_id=info.deleteTransactionId,
            sequence_id=info.sequenceId,
            replication_factor=info.replicationFactor,
            replication_type=info.replicationType,
            ec=ec_layout(info.ecReplicationConfig) if info.HasField("ecReplicationConfig") else None,
            suppressed=info.suppressed,
        )

    def to_proto(self) -> hdds_pb2.ContainerInfoProto:
        proto = hdds_pb2.ContainerInfoProto(
            containerID=self.container_id,
            state=self.state,  # type: ignore[arg-type]
            usedBytes=self.used_bytes,
            numberOfKeys=self.number_of_keys,
            stateEnterTime=self.state_enter_time,
            owner=self.owner,
            deleteTransactionId=self.delete_transaction_id,
            sequenceId=self.sequence_id,
            replicationFactor=self.replication_factor,  # type: ignore[arg-type]
            replicationType=self.replication_type,  # type: ignore[arg-type]
        )
        if self.pipeline_id is not None:
            proto.pipelineID.id = self.pipeline_id
        if self.ec is not None:
            data, parity, codec, chunk = self.ec
            proto.ecReplicationConfig.data = data
            proto.ecReplicationConfig.parity = parity
            proto.ecReplicationConfig.codec = codec
            proto.ecReplicationConfig.ecChunkSize = chunk
        if self.suppressed:
            proto.suppressed = True
        return proto


class ContainerStateManager(ReplicatedStateManager):
    """The container table plus in-memory indexes kept in step with it on every apply.

    Indexes (Ozone's ContainerStateMap keeps the same kind): ids per LifeCycleState, OPEN ids per
    pipeline and per (pipeline, owner), and a lazily re-sorted id list. They make allocation
    and ``get_matching_container`` cost O(open containers of the candidate pipeline/owner) and
    state counts O(1), instead of scanning every container on each call.
    """

    def __init__(
        self, store: SCMMetadataStore, buffer: SCMHADBTransactionBuffer, ha_manager: SCMHAManager | None
    ) -> None:
        self._containers: dict[int, ContainerInfo] = {}
        self._strings: dict[str, str] = {}  # interned pipeline ids and owners
        self._by_state: dict[int, set[int]] = defaultdict(set)
        self._open_by_pipeline: dict[str, set[int]] = defaultdict(set)
        self._open_by_owner: dict[tuple[str, str], set[int]] = defaultdict(set)
        # each (pipeline, owner)'s OPEN ids in order, built on the first read after that key changed: block
        # allocation asks for them once per block
        self._open_sorted: dict[tuple[str, str], tuple[int, ...]] = {}
        self._sorted_ids: list[int] = []
        self._sorted_dirty = False
        self.index_touches = 0  # containers looked at by index reads (a complexity probe for tests)
        self.removals = 0  # containers dropped from memory (removed, or a reload): readers caching ids rescan
        super().__init__(store, buffer, ha_manager)

    def reinitialize(self) -> None:
        self.removals += 1
        self._containers = {}
        self._by_state = defaultdict(set)
        self._open_by_pipeline = defaultdict(set)
        self._open_by_owner = defaultdict(set)
        self._open_sorted = {}
        self._sorted_ids = []
        self._sorted_dirty = False
        strings = self._strings
        for info in self._store.containers.values():
            self._put_memory(ContainerInfo.from_proto(info, strings))

    @staticmethod
    def _open_keys(info: ContainerInfo) -> tuple[str, str] | None:
        if info.state != OPEN or info.pipeline_id is None:
            return None
        return info.pipeline_id, info.owner

    def _unindex(self, info: ContainerInfo) -> None:
        cid = info.container_id
        self._discard(self._by_state, info.state, cid)
        keys = self._open_keys(info)
        if keys is not None:
            self._discard(self._open_by_pipeline, keys[0], cid)
            self._discard(self._open_by_owner, keys, cid)
            self._open_sorted.pop(keys, None)

    @staticmethod
    def _discard(index: dict[Any, set[int]], key: Any, cid: int) -> None:
        members = index.get(key)
        if members is not None:
            members.discard(cid)
            if not members:
                del index[key]

    def _put_memory(self, info: ContainerInfo) -> None:
        cid = info.container_id
        old = self._containers.get(cid)
        if old is not None:
            self._unindex(old)
        elif self._sorted_ids and cid < self._sorted_ids[-1]:
            self._sorted_dirty = True  # out-of-order id (replay, reload): re-sort on next ordered read
            self._sorted_ids.append(cid)
        else:
            self._sorted_ids.append(cid)
        self._containers[cid] = info
        self._by_state[info.state].add(cid)
        keys = self._open_keys(info)
        if keys is not None:
            self._open_by_pipeline[keys[0]].add(cid)
            self._open_by_owner[keys].add(cid)
            self._open_sorted.pop(keys, None)

    def _remove_memory(self, container_id: int) -> None:
        old = self._containers.pop(container_id, None)
        if old is not None:
            self.removals += 1
            self._unindex(old)
            self._sorted_dirty = True  # dropped from the id list on the next ordered read

    def _ordered_ids(self) -> list[int]:
        if self._sorted_dirty:
            self._sorted_ids = sorted({c for c in self._sorted_ids if c in self._containers})
            self._sorted_dirty = False
        return self._sorted_ids

    # ---- reads ----
    def contains(self, container_id: int) -> bool:
        return container_id in self._containers

    def _record(self, container_id: int) -> ContainerInfo:
        info = self._containers.get(container_id)
        if info is None:
            raise SCMException(ResultCodes.CONTAINER_NOT_FOUND, f"Container #{container_id} not found")
        return info

    def get_container(self, container_id: int) -> hdds_pb2.ContainerInfoProto:
        """The container as a fresh ContainerInfoProto (the caller may keep or modify it)."""
        return self._record(container_id).to_proto()

    def find(self, container_id: int) -> hdds_pb2.ContainerInfoProto | None:
        info = self._containers.get(container_id)
        return None if info is None else info.to_proto()

    def record_of(self, container_id: int) -> ContainerInfo | None:
        """The stored record itself, or None: a read-only view (never modify it; mutations go through
        the replicated methods)."""
        return self._containers.get(container_id)

    def records(self) -> Mapping[int, ContainerInfo]:
        """Every stored record by container id, for the report loop (one dict lookup a replica).
        Read-only; a checkpoint install replaces the mapping, so never keep it across an await."""
        return self._containers

    def container_ids(self) -> list[int]:
        return list(self._ordered_ids())

    def get_containers(self, state: int | None = None) -> list[hdds_pb2.ContainerInfoProto]:
        """Containers in id order, all or those in ``state`` (O(containers in that state))."""
        if state is None:
            return [self._containers[c].to_proto() for c in self._ordered_ids()]
        return [self._containers[c].to_proto() for c in sorted(self._by_state.get(state, ()))]

    def container_ids_in_state(self, state: int) -> set[int]:
        return set(self._by_state.get(state, ()))

    def ids_with_keys(self, states: tuple[int, ...], rtype: int) -> list[int]:
        """Ids of containers in ``states`` with numberOfKeys > 0 and this replication type, O(containers
        in those states) with no proto built (the safemode container rule at 1M containers)."""
        records = self._containers
        return [
            cid
            for state in states
            for cid in self._by_state.get(state, ())
            if records[cid].number_of_keys > 0 and records[cid].replication_type == rtype
        ]

    def list_containers(
        self,
        start_id: int,
        count: int,
        state: int | None = None,
        rtype: int | None = None,
        rfactor: int | None = None,
        suppressed: bool | None = None,
        *,
        ec: hdds_pb2.ECReplicationConfig | None = None,
    ) -> tuple[list[hdds_pb2.ContainerInfoProto], int]:
        """Ids >= ``start_id`` matching the filters: (first ``count`` in id order, total matching);
        ``ec`` keeps EC containers of that layout only (the factor filter does not apply to EC).

        Without type/factor/suppressed filters the page costs O(log n + count) (all states) or
        O(containers in ``state``); with them, one pass over the candidates.
        """
        ids, total = self.list_container_ids(start_id, count, state, rtype, rfactor, suppressed, ec=ec)
        return [self._containers[c].to_proto() for c in ids], total

    def list_container_ids(
        self,
        start_id: int,
        count: int,
        state: int | None = None,
        rtype: int | None = None,
        rfactor: int | None = None,
        suppressed: bool | None = None,
        *,
        ec: hdds_pb2.ECReplicationConfig | None = None,
    ) -> tuple[list[int], int]:
        """:meth:`list_containers`' page as ids, no message built."""
        layout = ec_layout(ec) if ec is not None else None
        if layout is not None:
            rtype, rfactor = hdds_pb2.EC, None
        if rtype == hdds_pb2.EC:
            rfactor = None
        if rtype is None and rfactor is None and suppressed is None:
            if state is None:
                ids = self._ordered_ids()
                i = bisect.bisect_left(ids, start_id)
                return ids[i : i + count], len(ids) - i
            candidates = [c for c in self._by_state.get(state, ()) if c >= start_id]
            return heapq.nsmallest(count, candidates), len(candidates)
        pool = self._ordered_ids() if state is None else sorted(self._by_state.get(state, ()))
        start = bisect.bisect_left(pool, start_id)
        matching = [
            c
            for c in pool[start:]
            if (rtype is None or self._containers[c].replication_type == rtype)
            and (rfactor is None or self._containers[c].replication_factor == rfactor)
            and (layout is None or self._containers[c].ec == layout)
            and (suppressed is None or self._containers[c].suppressed == suppressed)
        ]
        return matching[:count], len(matching)

    def open_containers_of_pipeline(self, pipeline_id: str) -> list[hdds_pb2.ContainerInfoProto]:
        ids = self._open_by_pipeline.get(pipeline_id, ())
        self.index_touches += len(ids)
        return [self._containers[c].to_proto() for c in sorted(ids)]

    def open_container_count(self, pipeline_id: str) -> int:
        """OPEN containers on a pipeline, O(1)."""
        return len(self._open_by_pipeline.get(pipeline_id, ()))

    def open_container_records(self, pipeline_id: str, owner: str) -> list[ContainerInfo]:
        """OPEN containers of ``owner`` on a pipeline as the stored records, in id order.

        Read-only views for the allocation hot path (no proto built per candidate); never
        modify them, mutations go through the replicated methods.
        """
        ids = self._open_by_owner.get((pipeline_id, owner), ())
        self.index_touches += len(ids)
        return [self._containers[c] for c in sorted(ids)]

    def open_container_ids(self, pipeline_id: str, owner: str) -> tuple[int, ...]:
        """The ids of ``owner``'s OPEN containers on a pipeline, in order; kept until one of them changes (the
        allocation hot path reads them once per block: sorting them each time cost more than the choice itself)."""
        key = (pipeline_id, owner)
        ids = self._open_sorted.get(key)
        if ids is None:
            members = self._open_by_owner.get(key, ())
            self.index_touches += len(members)
            ids = self._open_sorted[key] = tuple(sorted(members))
        return ids

    def open_containers_of(self, pipeline_id: str, owner: str) -> list[hdds_pb2.ContainerInfoProto]:
        """OPEN containers of ``owner`` on a pipeline, in id order: O(k log k) for those k only."""
        ids = self._open_by_owner.get((pipeline_id, owner), ())
        self.index_touches += len(ids)
        return [self._containers[c].to_proto() for c in sorted(ids)]

    def __len__(self) -> int:
        return len(self._containers)

    def counts_by_state(self) -> dict[str, int]:
        counts = {enum_name(LifeCycleState, s): 0 for s in (OPEN, CLOSING, QUASI_CLOSED, CLOSED, DELETING, DELETED)}
        for state, ids in self._by_state.items():
            counts[enum_name(LifeCycleState, state)] = len(ids)
        return counts

    # ---- replicated mutations ----
    @replicate(RequestType.CONTAINER, client_call=True)
    def add_container(self, info: hdds_pb2.ContainerInfoProto) -> int:
        """Store a new container; returns its id (a client's retry of the call gets the first id)."""
        record = ContainerInfo.from_proto(info, self._strings)
        existing = self._containers.get(record.container_id)
        if existing is not None:
            if existing == record:
                return record.container_id  # idempotent replay
            raise SCMException(ResultCodes.CONTAINER_EXISTS, f"container #{info.containerID} already exists")
        if record.container_id <= 0:
            raise SCMException(ResultCodes.INVALID_REQUEST, f"invalid container id {info.containerID}")
        self._store_record(record)
        return record.container_id

    def _store_record(self, record: ContainerInfo) -> None:
        self._put_memory(record)
        self._buffer.add_to_buffer(self._store.containers, record.container_id, record.to_proto())

    @replicate(RequestType.CONTAINER)
    def update_container_state(self, container_id: int, event: int, state_enter_time: int = 0) -> None:
        info = self._record(container_id)
        new_state = next_state(info.state, event)
        if new_state is None:
            return
        self._store_record(
            replace(info, state=new_state, state_enter_time=state_enter_time or info.state_enter_time)
        )

    @replicate(RequestType.CONTAINER)
    def update_container_info(self, info: hdds_pb2.ContainerInfoProto) -> None:
        """Replace the stored info (same id, same state): usage/BCSID snapshot chosen by the leader."""
        current = self._record(info.containerID)
        if current.state != info.state:
            raise SCMException(
                ResultCodes.UNEXPECTED_CONTAINER_STATE,
                f"container #{info.containerID}: update_container_info may not change state "
                f"({enum_name(LifeCycleState, current.state)} -> {enum_name(LifeCycleState, info.state)}); "
                "use update_container_state",
            )
        self._store_record(ContainerInfo.from_proto(info, self._strings))

    @replicate(RequestType.CONTAINER)
    def remove_container(self, container_id: int) -> None:
        self._record(container_id)
        self._remove_memory(container_id)
        self._buffer.remove_from_buffer(self._store.containers, container_id)
