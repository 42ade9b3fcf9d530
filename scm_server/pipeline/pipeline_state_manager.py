"""PipelineStateManager: the replicated pipeline table (Ozone's ``PipelineStateManagerImpl``).

Mutations are ``@replicate(RequestType.PIPELINE)``; their bodies run on every SCM at apply time,
update the in-memory map and write the ``pipelines`` table through the transaction buffer.
Reads are local. Pipeline states: PIPELINE_ALLOCATED -> PIPELINE_OPEN <-> PIPELINE_DORMANT,
any -> PIPELINE_CLOSED; CLOSED is final (a closed pipeline is only removed).
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet

from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha.replicate import RequestType, replicate
from scm_server.ha.scm_ha_manager_api import SCMHAManager
from scm_server.ha.state_manager import ReplicatedStateManager
from scm_server.ha.transaction_buffer import SCMHADBTransactionBuffer
from scm_server.metadata import SCMMetadataStore
from scm_server.metadata.enums import enum_name
from scm_server.proto import hdds_pb2

ALLOCATED = hdds_pb2.PIPELINE_ALLOCATED
OPEN = hdds_pb2.PIPELINE_OPEN
DORMANT = hdds_pb2.PIPELINE_DORMANT
CLOSED = hdds_pb2.PIPELINE_CLOSED

_ALLOWED: dict[int, set[int]] = {
    ALLOCATED: {OPEN, CLOSED},
    OPEN: {DORMANT, CLOSED},
    DORMANT: {OPEN, CLOSED},
    CLOSED: set(),
}


class PipelineStateManager(ReplicatedStateManager):
    def __init__(
        self, store: SCMMetadataStore, buffer: SCMHADBTransactionBuffer, ha_manager: SCMHAManager | None
    ) -> None:
        self._pipelines: dict[str, hdds_pb2.Pipeline] = {}
        self._sorted: list[hdds_pb2.Pipeline] | None = None
        # get_pipelines answers by filter, until the next mutation: block allocation asks for the
        # OPEN pipelines of one replication config once per block.
        self._filtered: dict[tuple[int | None, int | None, frozenset[int] | None], list[hdds_pb2.Pipeline]] = {}
        # pipelines per datanode (as a member, as the suggested leader) by filter, until the next mutation: the
        # placement of one new pipeline asks for every candidate datanode's count
        self._members: dict[tuple[int | None, frozenset[int]], dict[str, int]] = {}
        self._leaders: dict[tuple[int | None, frozenset[int]], dict[str, int]] = {}
        self._member_sets: dict[tuple[int | None, int | None, frozenset[int]], set[frozenset[str]]] = {}
        super().__init__(store, buffer, ha_manager)

    def reinitialize(self) -> None:
        self._pipelines = dict(self._store.pipelines.items())
        self._changed()

    def _changed(self) -> None:
        self._sorted = None
        self._filtered.clear()
        self._members.clear()
        self._leaders.clear()
        self._member_sets.clear()

    def _all_sorted(self) -> list[hdds_pb2.Pipeline]:
        if self._sorted is None:  # rebuilt lazily after a mutation
            self._sorted = [p for _, p in sorted(self._pipelines.items())]
        return self._sorted

    # ---- reads ----
    def get_pipeline(self, pipeline_id: str) -> hdds_pb2.Pipeline:
        p = self._pipelines.get(pipeline_id)
        if p is None:
            raise SCMException(ResultCodes.PIPELINE_NOT_FOUND, f"pipeline {pipeline_id} not found")
        return p

    def find(self, pipeline_id: str) -> hdds_pb2.Pipeline | None:
        return self._pipelines.get(pipeline_id)

    def get_pipelines(
        self, rtype: int | None = None, rfactor: int | None = None, states: set[int] | None = None
    ) -> list[hdds_pb2.Pipeline]:
        """The pipelines matching the filters, in id order (a new list; the protos are shared, read-only)."""
        key = (rtype, rfactor, None if states is None else frozenset(states))
        hit = self._filtered.get(key)
        if hit is None:
            hit = self._filtered[key] = [
                p
                for p in self._all_sorted()
                if (rtype is None or p.type == rtype)
                and (rfactor is None or p.factor == rfactor)
                and (states is None or p.state in states)
            ]
        return list(hit)

    def member_counts(self, rfactor: int | None, states: AbstractSet[int]) -> Mapping[str, int]:
        """Datanode uuid -> how many pipelines of ``rfactor`` (any if None) in ``states`` it is a member of (a datanode
        named twice in one pipeline counted once). Kept until the next mutation: read it, never change it."""
        key = (rfactor, frozenset(states))
        hit = self._members.get(key)
        if hit is None:
            hit = self._members[key] = {}
            for p in self.get_pipelines(None, rfactor, set(states)):
                for uuid in {m.uuid for m in p.members}:
                    hit[uuid] = hit.get(uuid, 0) + 1
        return hit

    def leader_counts(self, rfactor: int | None, states: AbstractSet[int]) -> Mapping[str, int]:
        """Datanode uuid -> how many pipelines of ``rfactor`` in ``states`` name it as their suggested leader (kept
        until the next mutation, as :meth:`member_counts`)."""
        key = (rfactor, frozenset(states))
        hit = self._leaders.get(key)
        if hit is None:
            hit = self._leaders[key] = {}
            for p in self.get_pipelines(None, rfactor, set(states)):
                if p.leaderID:
                    hit[p.leaderID] = hit.get(p.leaderID, 0) + 1
        return hit

    def member_sets(self, rtype: int | None, rfactor: int | None, states: AbstractSet[int]) -> AbstractSet[frozenset[str]]:
        """The sets of members of the pipelines matching the filters (whether a new pipeline would repeat one: a set
        lookup instead of a scan); kept until the next mutation, as :meth:`member_counts`."""
        key = (rtype, rfactor, frozenset(states))
        hit = self._member_sets.get(key)
        if hit is None:
            hit = self._member_sets[key] = {
                frozenset(m.uuid for m in p.members) for p in self.get_pipelines(rtype, rfactor, set(states))
            }
        return hit

    def __len__(self) -> int:
        return len(self._pipelines)

    # ---- replicated mutations ----
    @replicate(RequestType.PIPELINE)
    def add_pipeline(self, pipeline: hdds_pb2.Pipeline) -> None:
        pid = pipeline.id.id
        existing = self._pipelines.get(pid)
        if existing is not None:
            if existing == pipeline:
                return  # idempotent replay
            raise SCMException(ResultCodes.DUPLICATED_PIPELINE_ID, f"pipeline {pid} already exists")
        if not pipeline.members:
            raise SCMException(ResultCodes.INVALID_REQUEST, f"pipeline {pid} has no members")
        stored = hdds_pb2.Pipeline()
        stored.CopyFrom(pipeline)
        self._pipelines[pid] = stored
        self._changed()
        self._buffer.add_to_buffer(self._store.pipelines, pid, stored)

    @replicate(RequestType.PIPELINE)
    def remove_pipeline(self, pipeline_id: str) -> None:
        if pipeline_id not in self._pipelines:
            raise SCMException(ResultCodes.PIPELINE_NOT_FOUND, f"pipeline {pipeline_id} not found")
        del self._pipelines[pipeline_id]
        self._changed()
        self._buffer.remove_from_buffer(self._store.pipelines, pipeline_id)

    @replicate(RequestType.PIPELINE)
    def update_pipeline_state(self, pipeline_id: str, state: int) -> None:
        p = self.get_pipeline(pipeline_id)
        if p.state == state:
            return
        if state not in _ALLOWED.get(p.state, set()):
            raise SCMException(
                ResultCodes.INVALID_PIPELINE_STATE,
                f"pipeline {pipeline_id}: cannot go from {enum_name(hdds_pb2.PipelineState, p.state)} to "
                f"{enum_name(hdds_pb2.PipelineState, state)}",
            )
        updated = hdds_pb2.Pipeline()
        updated.CopyFrom(p)
        updated.state = state  # type: ignore[assignment]
        self._pipelines[pipeline_id] = updated
        self._changed()
        self._buffer.add_to_buffer(self._store.pipelines, pipeline_id, updated)
