"""PipelineManager: pipeline lifecycle on top of the replicated PipelineStateManager.

Leader-only decisions (Ozone's PipelineManagerImpl + RatisPipelineProvider):

* ``create_pipeline`` picks members with :class:`PipelinePlacementPolicy`, chooses the
  pipeline id and timestamp (so apply stays deterministic), replicates ``addPipeline``
  (state ALLOCATED) and sends a CreatePipeline command to each member;
* a pipeline becomes OPEN (replicated) once every member has reported it;
* ``close_pipeline`` replicates CLOSED, closes its open containers and sends ClosePipeline
  commands; a dead node's pipelines are closed and removed (``on_node_dead``), a stale node's
  pipelines are closed (``on_node_stale``);
* EC pipelines (Ozone's ECPipelineProvider) are made on demand by block allocation
  (:meth:`PipelineManager.get_or_create_ec_pipeline`, Ozone's WritableECContainerProvider): d+p
  members chosen by the EC placement policy (``ozone.scm.container.placement.ec.impl``,
  SCMContainerPlacementRackScatter by default: one member per rack while racks last), member i holding replica
  index i, OPEN at once (no Ratis ring to form, no command to the datanodes);
* :class:`BackgroundPipelineCreator` tops pipelines up to ``ozone.scm.datanode.pipeline.limit``
  per node every ``ozone.scm.pipeline.creation.interval`` and scrubs ALLOCATED pipelines that
  never opened within ``ozone.scm.pipeline.allocated.timeout``.

Which datanodes reported which pipeline is soft state kept on every SCM (safemode rules use it).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from scm_server.clock import Clock
from scm_server.conf import PipelineConfig
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha.scm_context import SCMContext
from scm_server.ha.scm_service import BackgroundSCMService, Event
from scm_server.metadata.enums import enum_name
from scm_server.node.node_manager import SCMNodeManager
from scm_server.pipeline.pipeline_state_manager import ALLOCATED, CLOSED, DORMANT, OPEN, PipelineStateManager
from scm_server.pipeline.placement import (
    ContainerPlacementPolicy,
    LeaderChoosePolicy,
    MinLeaderCountChoosePolicy,
    PipelinePlacementPolicy,
    SCMContainerPlacementRackScatter,
)
from scm_server.proto import hdds_pb2, scm_datanode_pb2

log = logging.getLogger(__name__)

RATIS = hdds_pb2.RATIS
EC = hdds_pb2.EC
ONE = hdds_pb2.ONE
THREE = hdds_pb2.THREE
CommandType = scm_datanode_pb2.SCMCommandProto.Type
LIVE = frozenset({ALLOCATED, OPEN, DORMANT})  # the states a pipeline counts against its members' limits in

ContainerCloser = Callable[[str], Awaitable[None]]


def factor_count(rfactor: int) -> int:
    return 3 if rfactor == THREE else 1


def ec_name(ec: hdds_pb2.ECReplicationConfig) -> str:
    """Ozone's name of an EC layout: ``rs-3-2-1024k``."""
    size = f"{ec.ecChunkSize // 1024}k" if ec.ecChunkSize % 1024 == 0 else str(ec.ecChunkSize)
    return f"{ec.codec.lower()}-{ec.data}-{ec.parity}-{size}"


def max_ec_pipelines(
    ec: hdds_pb2.ECReplicationConfig, healthy_volumes: int, per_volume_factor: float, minimum: int
) -> int:
    """Ozone's WritableECContainerProvider limit on OPEN pipelines of one EC layout: a pipeline per
    ``ozone.scm.ec.pipeline.per.volume.factor`` healthy volumes per d+p nodes, at least
    ``ozone.scm.ec.pipeline.minimum``."""
    by_volume = int(per_volume_factor * healthy_volumes / (ec.data + ec.parity)) if per_volume_factor > 0 else 0
    return max(by_volume, minimum)


class PipelineManager:
    def __init__(
        self,
        state_manager: PipelineStateManager,
        node_manager: SCMNodeManager,
        scm_context: SCMContext,
        clock: Clock,
        config: PipelineConfig,
        placement: PipelinePlacementPolicy | None = None,
        leader_policy: LeaderChoosePolicy | None = None,
        container_size: int = 0,
        ec_placement: ContainerPlacementPolicy | None = None,
    ) -> None:
        self.state_manager = state_manager
        self.node_manager = node_manager
        self.scm_context = scm_context
        self.clock = clock
        self.config = config
        self.placement = placement or PipelinePlacementPolicy()
        self.ec_placement: ContainerPlacementPolicy = ec_placement or SCMContainerPlacementRackScatter()
        self.leader_policy: LeaderChoosePolicy = leader_policy or MinLeaderCountChoosePolicy()
        self.container_size = container_size  # the space a member must have for a container (0: not checked)
        self._reported: dict[str, set[str]] = {}
        self._allocated_at: dict[str, float] = {}
        self._closed_at: dict[str, float] = {}
        self._close_containers: ContainerCloser | None = None
        self._opened = asyncio.Condition()
        self._create_lock = asyncio.Lock()
        self.created_count = 0

    def set_container_closer(self, closer: ContainerCloser) -> None:
        """Called with a pipeline id to close its open containers (ContainerManager)."""
        self._close_containers = closer

    def reinitialize(self) -> None:
        self.state_manager.reinitialize()
        self._allocated_at.clear()
        self._closed_at.clear()

    # ---- reads ----
    def get_pipeline(self, pipeline_id: str) -> hdds_pb2.Pipeline:
        return self.state_manager.get_pipeline(pipeline_id)

    def find(self, pipeline_id: str) -> hdds_pb2.Pipeline | None:
        return self.state_manager.find(pipeline_id)

    def get_pipelines(
        self, rtype: int | None = None, rfactor: int | None = None, states: set[int] | None = None
    ) -> list[hdds_pb2.Pipeline]:
        return self.state_manager.get_pipelines(rtype, rfactor, states)

    def open_pipelines(self, rtype: int, rfactor: int, exclude: hdds_pb2.ExcludeListProto | None = None) -> list[hdds_pb2.Pipeline]:
        return self._not_excluded(self.get_pipelines(rtype, rfactor, {OPEN}), exclude)

    @staticmethod
    def _not_excluded(
        pipelines: list[hdds_pb2.Pipeline], exclude: hdds_pb2.ExcludeListProto | None
    ) -> list[hdds_pb2.Pipeline]:
        if exclude is None or not (exclude.pipelineIds or exclude.datanodes):
            return pipelines
        bad_pipelines = {p.id for p in exclude.pipelineIds}
        bad_nodes = set(exclude.datanodes)
        return [
            p for p in pipelines if p.id.id not in bad_pipelines and not any(m.uuid in bad_nodes for m in p.members)
        ]

    def pipeline_count_of(self, dn_uuid: str, rfactor: int | None = None) -> int:
        """Non-closed pipelines the datanode belongs to (of one factor if given); a dict lookup (the counts of every
        datanode are kept by the state manager until the pipelines change)."""
        return self.state_manager.member_counts(rfactor, LIVE).get(dn_uuid, 0)

    def _placement_limits(self, rfactor: int) -> tuple[Callable[[str], int], Callable[[str], int]]:
        """Ozone counts only RATIS/THREE pipelines against ozone.scm.datanode.pipeline.limit;
        a datanode hosts at most one RATIS/ONE pipeline. The load is read from the counts of this moment: the
        placement asks for every candidate's, twice."""
        counts = self.state_manager.member_counts(rfactor, LIVE)
        load = lambda u: counts.get(u, 0)  # noqa: E731
        if rfactor == THREE:
            return load, self.node_manager.pipeline_limit
        return load, (lambda _u: 1)

    def _leader_count(self, dn_uuid: str) -> int:
        """Non-closed RATIS/THREE pipelines whose suggested leader is the datanode (MinLeaderCountChoosePolicy)."""
        return self.state_manager.leader_counts(THREE, LIVE).get(dn_uuid, 0)

    def pipelines_of(self, dn_uuid: str) -> list[hdds_pb2.Pipeline]:
        return [p for p in self.get_pipelines() if any(m.uuid == dn_uuid for m in p.members)]

    def reported_members(self, pipeline_id: str) -> set[str]:
        return set(self._reported.get(pipeline_id, set()))

    def counts_by_state(self) -> dict[str, int]:
        counts = {enum_name(hdds_pb2.PipelineState, s): 0 for s in (ALLOCATED, OPEN, DORMANT, CLOSED)}
        for p in self.get_pipelines():
            counts[enum_name(hdds_pb2.PipelineState, p.state)] += 1
        return counts

    # ---- upgrade finalization ----
    creation_frozen = False

    def freeze_pipeline_creation(self) -> None:
        """While SCM finalizes an upgrade no pipeline is created (they would use nodes at the old layout)."""
        if not self.creation_frozen:
            log.info("pipeline creation is frozen until the upgrade is finalized")
        self.creation_frozen = True

    def resume_pipeline_creation(self) -> None:
        if self.creation_frozen:
            log.info("pipeline creation resumes")
        self.creation_frozen = False

    # ---- leader operations ----
    async def create_pipeline(
        self,
        rtype: int,
        rfactor: int,
        nodes: list[str] | None = None,
        ec: hdds_pb2.ECReplicationConfig | None = None,
        exclude: hdds_pb2.ExcludeListProto | None = None,
    ) -> hdds_pb2.Pipeline:
        self.scm_context.check_leader()
        if self.creation_frozen:
            raise SCMException(
                ResultCodes.FAILED_TO_CREATE_PIPELINE, "Cannot create new pipelines while pipeline creation is frozen."
            )
        if rtype == EC:
            return await self._create_ec_pipeline(ec, nodes, exclude)
        if rtype != RATIS or rfactor not in (ONE, THREE):
            raise SCMException(
                ResultCodes.FAILED_TO_CREATE_PIPELINE,
                f"unsupported replication {enum_name(hdds_pb2.ReplicationType, rtype)}/{rfactor}; use RATIS/ONE or RATIS/THREE",
            )
        count = factor_count(rfactor)
        if nodes is None:
            if rfactor == ONE:
                self._check_a_datanode_without_ratis_one()
            load, limit = self._placement_limits(rfactor)
            chosen = self.placement.choose_datanodes(
                self.node_manager.all_nodes(), count, load, limit, data_size=self.container_size
            )
            member_ids = [n.uuid for n in chosen]
            if count > 1 and self._duplicate_of_existing(member_ids, rfactor):
                raise SCMException(
                    ResultCodes.FAILED_TO_FIND_SUITABLE_NODE,
                    f"a RATIS/{count} pipeline with datanodes {sorted(member_ids)} already exists",
                )
        else:
            member_ids = nodes
        leader = self.leader_policy.choose_leader(member_ids, self._leader_count) if count > 1 else member_ids[0]
        members = [self.node_manager.require_node(u).details for u in member_ids]
        pipeline = hdds_pb2.Pipeline(
            id=hdds_pb2.PipelineID(id=str(uuid.uuid4())),
            members=members,
            state=ALLOCATED,
            type=rtype,  # type: ignore[arg-type]
            factor=rfactor,  # type: ignore[arg-type]
            leaderID=leader or "",
            memberOrders=list(range(len(members))),
            creationTimeStamp=self.clock.wall_ms(),
        )
        if leader:
            pipeline.suggestedLeaderID = leader  # as Ozone's Pipeline keeps its suggestedLeaderId apart
        await self.state_manager.add_pipeline(pipeline)
        self._allocated_at[pipeline.id.id] = self.clock.monotonic()
        self.created_count += 1
        for dn in member_ids:
            self.node_manager.add_command(
                dn,
                scm_datanode_pb2.SCMCommandProto(
                    commandType=CommandType.createPipelineCommand,
                    createPipelineCommandProto=scm_datanode_pb2.CreatePipelineCommandProto(
                        pipelineID=pipeline.id,
                        type=rtype,  # type: ignore[arg-type]
                        factor=rfactor,  # type: ignore[arg-type]
                        datanode=members,
                        # the suggested leader (our leaderID) first in Raft priority, like Ozone; no suggestion
                        # (DefaultLeaderChoosePolicy): equal priorities, Ratis elects
                        priority=[1 if u == leader else 0 for u in member_ids],
                    ),
                ),
            )
        log.info("created pipeline %s RATIS/%d on %s", pipeline.id.id, count, member_ids)
        # Members that already reported it (e.g. a re-created id) may open it at once.
        await self._maybe_open(pipeline.id.id)
        return self.get_pipeline(pipeline.id.id)

    def ec_pipelines(self, ec: hdds_pb2.ECReplicationConfig, states: set[int]) -> list[hdds_pb2.Pipeline]:
        return [p for p in self.get_pipelines(EC, None, states) if p.ecReplicationConfig == ec]

    async def _create_ec_pipeline(
        self,
        ec: hdds_pb2.ECReplicationConfig | None,
        nodes: list[str] | None,
        exclude: hdds_pb2.ExcludeListProto | None,
    ) -> hdds_pb2.Pipeline:
        """Ozone's ECPipelineProvider: d+p members, member i holding replica index i, OPEN at once."""
        if ec is None:
            raise SCMException(
                ResultCodes.FAILED_TO_CREATE_PIPELINE, "an EC pipeline needs its ecReplicationConfig (e.g. rs-3-2-1024k)"
            )
        width = ec.data + ec.parity
        if nodes is None:
            excluded = set(exclude.datanodes) if exclude is not None else set()
            ec_load = {u: 0 for u in (n.uuid for n in self.node_manager.all_nodes())}
            for p in self.get_pipelines(EC, None, {ALLOCATED, OPEN, DORMANT}):
                for m in p.members:
                    ec_load[m.uuid] = ec_load.get(m.uuid, 0) + 1
            chosen = self.ec_placement.choose_targets(
                self.node_manager.all_nodes(), (), width, lambda u: ec_load.get(u, 0), excluded
            )
            if len(chosen) < width:
                healthy = len(self.node_manager.healthy_in_service_nodes())
                raise SCMException(
                    ResultCodes.FAILED_TO_FIND_SUITABLE_NODE,
                    f"EC pipeline {ec_name(ec)} needs {width} healthy in-service datanodes, found {len(chosen)} "
                    f"({healthy} healthy in service, {len(excluded)} excluded by the client)",
                )
            member_ids = [n.uuid for n in chosen]
        else:
            member_ids = nodes
            if len(member_ids) != width:
                raise SCMException(
                    ResultCodes.FAILED_TO_CREATE_PIPELINE,
                    f"EC pipeline {ec_name(ec)} needs exactly {width} datanodes, {len(member_ids)} given",
                )
        members = [self.node_manager.require_node(u).details for u in member_ids]
        pipeline = hdds_pb2.Pipeline(
            id=hdds_pb2.PipelineID(id=str(uuid.uuid4())),
            members=members,
            state=OPEN,
            type=EC,
            leaderID="",
            memberOrders=list(range(width)),
            memberReplicaIndexes=list(range(1, width + 1)),
            ecReplicationConfig=ec,
            creationTimeStamp=self.clock.wall_ms(),
        )
        await self.state_manager.add_pipeline(pipeline)
        self.created_count += 1
        log.info("created pipeline %s EC %s on %s", pipeline.id.id, ec_name(ec), member_ids)
        return self.get_pipeline(pipeline.id.id)

    async def get_or_create_ec_pipeline(
        self,
        ec: hdds_pb2.ECReplicationConfig,
        exclude: hdds_pb2.ExcludeListProto | None,
        pick: Callable[[list[hdds_pb2.Pipeline]], hdds_pb2.Pipeline],
    ) -> hdds_pb2.Pipeline:
        """Ozone's WritableECContainerProvider: while fewer OPEN pipelines of this layout exist than
        :func:`max_ec_pipelines` allows, a new one is made for the caller; otherwise (or when no
        nodes are left for a new one) an existing one not excluded is used."""
        volumes = sum(n.healthy_volumes() for n in self.node_manager.healthy_in_service_nodes())
        limit = max_ec_pipelines(ec, volumes, self.config.ec_pipeline_per_volume_factor, self.config.ec_pipeline_minimum)
        async with self._create_lock:
            existing = self._not_excluded(self.ec_pipelines(ec, {OPEN}), exclude)
            if len(self.ec_pipelines(ec, {OPEN})) < limit:
                try:
                    return await self._create_ec_pipeline(ec, None, exclude)
                except SCMException as exc:
                    if exc.result != ResultCodes.FAILED_TO_FIND_SUITABLE_NODE or not existing:
                        raise
        if not existing:
            raise SCMException(
                ResultCodes.FAILED_TO_FIND_SUITABLE_NODE,
                f"no OPEN EC pipeline {ec_name(ec)} outside the exclude list, and {limit} are open already",
            )
        return pick(existing)

    def _check_a_datanode_without_ratis_one(self) -> None:
        """Ozone's PipelineProvider.pickAllNodesNotUsed for RATIS/ONE, administrator's request or background
        creator alike: only a healthy in-service datanode in no ALLOCATED, OPEN or DORMANT RATIS/ONE pipeline may
        host a new one; refused with Ozone's counts otherwise (Ozone 2.2.0's own ring answers `ozone admin pipeline
        create -t RATIS -f ONE` the same when every datanode has its RATIS/ONE pipeline: docs/ozone-interop.md)."""
        used = {m.uuid for p in self.get_pipelines(RATIS, ONE, {ALLOCATED, OPEN, DORMANT}) for m in p.members}
        healthy = [n for n in self.node_manager.all_nodes() if n.is_healthy_in_service()]
        unused = [n for n in healthy if n.uuid not in used]
        if not unused:
            raise SCMException(
                ResultCodes.FAILED_TO_FIND_SUITABLE_NODE,
                f"Cannot create pipeline RATIS/ONE using {len(unused)} nodes. Used {len(used)} nodes. Healthy nodes "
                f"{len(healthy)}: a datanode hosts one RATIS/ONE pipeline (as in Ozone) and each healthy in-service "
                "datanode has one; close one (`ozone admin pipeline close <id>`) or add a datanode",
            )

    def _duplicate_of_existing(self, member_ids: list[str], rfactor: int) -> bool:
        return frozenset(member_ids) in self.state_manager.member_sets(RATIS, rfactor, LIVE)

    async def open_pipeline(self, pipeline_id: str) -> None:
        self.scm_context.check_leader()
        p = self.get_pipeline(pipeline_id)
        if p.state == ALLOCATED:
            await self.state_manager.update_pipeline_state(pipeline_id, OPEN)
            self._allocated_at.pop(pipeline_id, None)
            log.info("pipeline %s is OPEN", pipeline_id)
            async with self._opened:
                self._opened.notify_all()

    async def wait_pipeline_ready(self, pipeline_id: str, timeout_s: float) -> hdds_pb2.Pipeline:
        """Wait until the pipeline is OPEN (all members reported it); SCMException on timeout."""

        def ready() -> bool:
            p = self.find(pipeline_id)
            return p is None or p.state != ALLOCATED

        try:
            async with self._opened:
                await asyncio.wait_for(self._opened.wait_for(ready), timeout=timeout_s)
        except TimeoutError:
            raise SCMException(
                ResultCodes.FAILED_TO_CREATE_PIPELINE,
                f"pipeline {pipeline_id} did not open within {timeout_s:.1f}s (members have not reported it yet)",
            ) from None
        p = self.get_pipeline(pipeline_id)
        if p.state != OPEN:
            raise SCMException(ResultCodes.INVALID_PIPELINE_STATE, f"pipeline {pipeline_id} is {p.state}, not OPEN")
        return p

    async def get_or_create_open_pipeline(
        self,
        rtype: int,
        rfactor: int,
        exclude: hdds_pb2.ExcludeListProto | None,
        pick: Callable[[list[hdds_pb2.Pipeline]], hdds_pb2.Pipeline],
        wait_s: float,
    ) -> hdds_pb2.Pipeline:
        """An OPEN pipeline not excluded; if none, create one and wait up to ``wait_s`` for it."""
        candidates = self.open_pipelines(rtype, rfactor, exclude)
        if candidates:
            return pick(candidates)
        async with self._create_lock:  # one creation for a burst of callers, not one each
            candidates = self.open_pipelines(rtype, rfactor, exclude)
            if candidates:
                return pick(candidates)
            pending = [
                p
                for p in self._not_excluded(self.get_pipelines(rtype, rfactor, {ALLOCATED}), exclude)
                if p.id.id in self._allocated_at
            ]
            created = pending[0] if pending else await self.create_pipeline(rtype, rfactor)
        if created.state == OPEN:
            return created
        return await self.wait_pipeline_ready(created.id.id, wait_s)

    async def activate_pipeline(self, pipeline_id: str) -> None:
        self.scm_context.check_leader()
        p = self.get_pipeline(pipeline_id)
        if p.state != DORMANT:
            raise SCMException(ResultCodes.INVALID_PIPELINE_STATE, f"pipeline {pipeline_id} is not DORMANT")
        await self.state_manager.update_pipeline_state(pipeline_id, OPEN)

    async def deactivate_pipeline(self, pipeline_id: str) -> None:
        self.scm_context.check_leader()
        p = self.get_pipeline(pipeline_id)
        if p.state != OPEN:
            raise SCMException(ResultCodes.INVALID_PIPELINE_STATE, f"pipeline {pipeline_id} is not OPEN")
        await self.state_manager.update_pipeline_state(pipeline_id, DORMANT)

    async def close_pipeline(self, pipeline_id: str, *, remove: bool = False) -> None:
        """Close (and optionally remove) a pipeline: containers first, then the DNs are told."""
        self.scm_context.check_leader()
        p = self.get_pipeline(pipeline_id)
        if p.state != CLOSED:
            await self.state_manager.update_pipeline_state(pipeline_id, CLOSED)
            self._closed_at[pipeline_id] = self.clock.monotonic()
            log.info("pipeline %s is CLOSED", pipeline_id)
        if self._close_containers is not None:
            await self._close_containers(pipeline_id)
        for member in p.members:
            if self.node_manager.get_node(member.uuid) is not None:
                self.node_manager.add_command(
                    member.uuid,
                    scm_datanode_pb2.SCMCommandProto(
                        commandType=CommandType.closePipelineCommand,
                        closePipelineCommandProto=scm_datanode_pb2.ClosePipelineCommandProto(pipelineID=p.id),
                    ),
                )
        if remove:
            await self.state_manager.remove_pipeline(pipeline_id)
            self._reported.pop(pipeline_id, None)
            self._allocated_at.pop(pipeline_id, None)
            self._closed_at.pop(pipeline_id, None)

    # ---- reports (every SCM) ----
    async def process_pipeline_report(self, dn_uuid: str, report: Any) -> None:
        """``report`` is a PipelineReportsProto; soft tracking everywhere, transitions on the leader."""
        reported_now = set()
        for pr in report.pipelineReport:
            pid = pr.pipelineID.id
            reported_now.add(pid)
            p = self.find(pid)
            if p is None:
                if self.scm_context.is_leader():
                    # Unknown to SCM (e.g. removed while the DN was away): tell the DN to close it.
                    self.node_manager.add_command(
                        dn_uuid,
                        scm_datanode_pb2.SCMCommandProto(
                            commandType=CommandType.closePipelineCommand,
                            closePipelineCommandProto=scm_datanode_pb2.ClosePipelineCommandProto(pipelineID=pr.pipelineID),
                        ),
                    )
                continue
            self._reported.setdefault(pid, set()).add(dn_uuid)
            if p.state == ALLOCATED and self.scm_context.is_leader():
                await self._maybe_open(pid)
        # A full pipeline report replaces what this DN reported before.
        for pid, members in self._reported.items():
            if pid not in reported_now:
                members.discard(dn_uuid)

    async def _maybe_open(self, pipeline_id: str) -> None:
        p = self.find(pipeline_id)
        if p is None or p.state != ALLOCATED:
            return
        if {m.uuid for m in p.members} <= self._reported.get(pipeline_id, set()):
            await self.open_pipeline(pipeline_id)

    async def process_pipeline_action(self, dn_uuid: str, action: scm_datanode_pb2.PipelineAction) -> None:
        if not self.scm_context.is_leader() or not action.HasField("closePipeline"):
            return
        pid = action.closePipeline.pipelineID.id
        if self.find(pid) is not None:
            log.info("datanode %s asked to close pipeline %s: %s", dn_uuid, pid, action.closePipeline.detailedReason)
            await self.close_pipeline(pid)

    # ---- node events ----
    async def on_node_stale(self, dn_uuid: str) -> None:
        if not self.scm_context.is_leader():
            return
        for p in self.pipelines_of(dn_uuid):
            if p.state != CLOSED:
                await self.close_pipeline(p.id.id)

    async def on_node_dead(self, dn_uuid: str) -> None:
        for members in self._reported.values():
            members.discard(dn_uuid)
        if not self.scm_context.is_leader():
            return
        for p in self.pipelines_of(dn_uuid):
            await self.close_pipeline(p.id.id, remove=True)

    async def on_node_healthy(self, dn_uuid: str) -> None:
        return None

    # ---- background work ----
    async def create_pipelines_up_to_limit(self) -> int:
        """Create RATIS/THREE (and RATIS/ONE if auto-create is on) pipelines until placement fails."""
        created = 0
        if self.creation_frozen:
            return created
        factors = [THREE] + ([ONE] if self.config.auto_create_factor_one else [])
        for rfactor in factors:
            nodes = self.node_manager.all_nodes()
            for _ in range(max(1, sum(self.node_manager.pipeline_limit(n.uuid) for n in nodes))):
                try:
                    await self.create_pipeline(RATIS, rfactor)
                except SCMException as exc:
                    if exc.result in (
                        ResultCodes.FAILED_TO_FIND_SUITABLE_NODE,
                        ResultCodes.FAILED_TO_FIND_HEALTHY_NODES,
                        ResultCodes.FAILED_TO_FIND_NODES_WITH_SPACE,
                    ):
                        break
                    raise
                created += 1
        return created

    async def scrub_pipelines(self) -> int:
        """Remove ALLOCATED pipelines older than ozone.scm.pipeline.allocated.timeout and CLOSED ones
        older than ozone.scm.pipeline.destroy.timeout."""
        now = self.clock.monotonic()
        timeout = self.config.allocated_timeout.total_seconds()
        scrubbed = 0
        for p in self.get_pipelines(states={ALLOCATED}):
            started = self._allocated_at.setdefault(p.id.id, now)
            if now - started >= timeout:
                log.warning("pipeline %s stayed ALLOCATED for %.0fs; removing", p.id.id, now - started)
                await self.close_pipeline(p.id.id, remove=True)
                scrubbed += 1
        destroy = self.config.destroy_timeout.total_seconds()
        for p in self.get_pipelines(states={CLOSED}):
            closed_at = self._closed_at.setdefault(p.id.id, now)
            if now - closed_at >= destroy:  # ozone.scm.pipeline.destroy.timeout: let DNs close it first
                await self.state_manager.remove_pipeline(p.id.id)
                self._reported.pop(p.id.id, None)
                self._closed_at.pop(p.id.id, None)
        return scrubbed


class BackgroundPipelineCreator(BackgroundSCMService):
    """Leader-ready service; runs after the safemode pre-check (Ozone lets it run in safemode)."""

    def __init__(
        self,
        pipeline_manager: PipelineManager,
        scm_context: SCMContext,
        clock: Clock,
        config: PipelineConfig,
        create_in_safe_mode: bool = True,
    ) -> None:
        """``create_in_safe_mode`` is hdds.scm.safemode.pipeline.creation."""
        self.pipeline_manager = pipeline_manager
        self.create_in_safe_mode = create_in_safe_mode
        super().__init__(
            "BackgroundPipelineCreator",
            scm_context=scm_context,
            clock=clock,
            interval=config.creation_interval,
            run_once=self.run_once,
            run_in_safe_mode=True,
            trigger_events=frozenset({Event.PRE_CHECK_COMPLETED, Event.NEW_NODE_HANDLER_TRIGGERED}),
        )
        self._scm_context = scm_context

    async def run_once(self) -> None:
        if not self._scm_context.is_pre_check_complete():
            return
        if self._scm_context.is_in_safe_mode() and not self.create_in_safe_mode:
            return
        await self.pipeline_manager.scrub_pipelines()
        await self.pipeline_manager.create_pipelines_up_to_limit()
