"""ReplicationManager: classify every container, fix what can be fixed, publish a report.

A leader-ready SCMService (Ozone's ``ReplicationManager``): every
``hdds.scm.replication.thread.interval`` ``process_all()`` runs the pure
:func:`~scm_server.container.replication.health.check_container` on every container and, on the
leader, executes the result: replicate / delete / close commands (stamped with the leader's
term, with per-datanode limits ``hdds.scm.replication.datanode.replication.limit`` and
``...delete.container.limit``; EC reconstructions weigh
``hdds.scm.replication.datanode.reconstruction.weight`` each, and replications in flight across the
cluster stop at ``hdds.scm.replication.inflight.limit.factor``) and lifecycle events (FINALIZE, DELETE, CLEANUP through Raft).

Issued replicate/delete operations are remembered in :class:`ContainerReplicaPendingOps` until
a report shows the replica appeared/disappeared or ``hdds.scm.replication.event.timeout`` passes,
so the same work is not issued twice.

The report (``ReplicationManagerReportProto``) has a counter per LifeCycleState and per health
state and up to ``hdds.scm.replication.container.sample.limit`` sample ids per health state.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta

from scm_server.clock import Clock
from scm_server.conf import ReplicationManagerConfig
from scm_server.container.container_manager import ContainerManager, ContainerReplica
from scm_server.container.container_state_manager import (
    CLEANUP,
    CLOSED,
    CLOSING,
    DELETE,
    DELETED,
    DELETING,
    FINALIZE,
    OPEN,
    QUASI_CLOSED,
    RECOVERING,
    LifeCycleState,
)
from scm_server.container.replication.health import (
    CheckResult,
    ClusterView,
    ContainerHealthState,
    ContainerView,
    PendingView,
    PlannedCommand,
    ReplicaView,
    check_container,
)
from scm_server.exceptions import NotLeaderException, SCMException
from scm_server.ha.scm_context import SCMContext
from scm_server.ha.scm_service import BackgroundSCMService
from scm_server.metadata.enums import enum_name
from scm_server.node.node_manager import DEAD, HEALTHY, DatanodeInfo, SCMNodeManager
from scm_server.pipeline.pipeline_manager import PipelineManager
from scm_server.pipeline.placement import (
    ContainerPlacementPolicy,
    ContainerPlacementRackAware,
    SCMContainerPlacementRackScatter,
)
from scm_server.proto import hdds_pb2, scm_datanode_pb2

log = logging.getLogger(__name__)
CommandType = scm_datanode_pb2.SCMCommandProto.Type


class PendingOpType(enum.Enum):
    ADD = "ADD"
    DELETE = "DELETE"


@dataclass(frozen=True)
class PendingOp:
    op: PendingOpType
    datanode: str
    deadline: float
    replica_index: int = 0  # EC: the index this op adds or deletes


class ContainerReplicaPendingOps:
    """In-flight replica additions/deletions per container (Ozone's ContainerReplicaPendingOps)."""

    def __init__(self) -> None:
        self._ops: dict[int, list[PendingOp]] = defaultdict(list)
        # (datanode, op) -> in-flight count, kept in step with _ops so the per-datanode limit
        # check is O(1) instead of a scan of every pending op.
        self._per_node: dict[tuple[str, PendingOpType], int] = defaultdict(int)

    def _forget(self, removed: list[PendingOp]) -> None:
        for o in removed:
            key = (o.datanode, o.op)
            self._per_node[key] -= 1
            if self._per_node[key] <= 0:
                del self._per_node[key]

    def add(self, container_id: int, op: PendingOpType, datanode: str, deadline: float, replica_index: int = 0) -> None:
        self._ops[container_id].append(PendingOp(op, datanode, deadline, replica_index))
        self._per_node[(datanode, op)] += 1

    def complete(self, container_id: int, datanode: str, added: bool) -> None:
        ops = self._ops.get(container_id)
        if not ops:
            return
        kind = PendingOpType.ADD if added else PendingOpType.DELETE
        done = [o for o in ops if o.op is kind and o.datanode == datanode]
        if not done:
            return
        self._forget(done)
        self._ops[container_id] = [o for o in ops if not (o.op is kind and o.datanode == datanode)]
        if not self._ops[container_id]:
            del self._ops[container_id]

    def expire(self, now: float) -> int:
        expired = 0
        for cid in list(self._ops):
            keep = [o for o in self._ops[cid] if o.deadline > now]
            self._forget([o for o in self._ops[cid] if o.deadline <= now])
            expired += len(self._ops[cid]) - len(keep)
            if keep:
                self._ops[cid] = keep
            else:
                del self._ops[cid]
        return expired

    def view(self, container_id: int) -> PendingView:
        ops = self._ops.get(container_id, [])
        return PendingView(
            adds=frozenset(o.datanode for o in ops if o.op is PendingOpType.ADD),
            deletes=frozenset(o.datanode for o in ops if o.op is PendingOpType.DELETE),
            add_indexes=frozenset(o.replica_index for o in ops if o.op is PendingOpType.ADD and o.replica_index),
        )

    def snapshot(self) -> dict[int, PendingView]:
        """Every container's in-flight ops as immutable views (the audit export's capture)."""
        return {cid: self.view(cid) for cid in self._ops}

    def total(self, op: PendingOpType) -> int:
        """In-flight ops of one kind on every datanode (Ozone's InflightReplication / InflightDeletion)."""
        return sum(count for (_, kind), count in self._per_node.items() if kind == op)

    def count_for(self, datanode: str, op: PendingOpType) -> int:
        return self._per_node.get((datanode, op), 0)

    def clear(self) -> None:
        self._ops.clear()
        self._per_node.clear()

    def __len__(self) -> int:
        return sum(len(v) for v in self._ops.values())


LIFECYCLE_STATES = (OPEN, CLOSING, QUASI_CLOSED, CLOSED, DELETING, DELETED, RECOVERING)


class ReplicationManagerReport:
    """Counters per LifeCycleState and health state, with sample container ids."""

    def __init__(self, sample_limit: int = 100) -> None:
        self.sample_limit = sample_limit
        self.stats: dict[str, int] = {enum_name(LifeCycleState, s): 0 for s in LIFECYCLE_STATES}
        self.stats.update({h.value: 0 for h in ContainerHealthState})
        self.samples: dict[str, list[int]] = defaultdict(list)

    def increment(self, key: str, container_id: int | None = None) -> None:
        """Count ``key``; sample ``container_id`` under it unless the container is healthy: samples name the
        containers that need attention, as Ozone's report does."""
        self.stats[key] = self.stats.get(key, 0) + 1
        if key == ContainerHealthState.HEALTHY.value:
            return
        if container_id is not None and len(self.samples[key]) < self.sample_limit:
            self.samples[key].append(container_id)

    def to_proto(self, timestamp_ms: int) -> hdds_pb2.ReplicationManagerReportProto:
        Counter = hdds_pb2.ReplicationManagerReportProto.Counter
        Samples = hdds_pb2.ReplicationManagerReportProto.Samples
        return hdds_pb2.ReplicationManagerReportProto(
            timestamp=timestamp_ms,
            stat=[Counter(key=k, count=v) for k, v in self.stats.items()],
            statSample=[Samples(key=k, containerIds=v) for k, v in sorted(self.samples.items()) if v],
        )


def report_counts(report: hdds_pb2.ReplicationManagerReportProto) -> dict[str, int]:
    return {c.key: c.count for c in report.stat}


def build_container_view(
    info: hdds_pb2.ContainerInfoProto,
    replicas: Iterable[ContainerReplica],
    node_of: Callable[[str], DatanodeInfo | None],
    pipeline_state: int | None,
    pending: PendingView,
) -> ContainerView:
    """What :func:`check_container` sees of one container: ``info`` already merged with reported
    usage, each replica with its datanode's rack, health and operational state (an unknown
    datanode counts as DEAD). Shared by the ReplicationManager and the audit export, so both
    classify the same inputs the same way."""
    views = []
    for r in replicas:
        node = node_of(r.datanode_uuid)
        views.append(
            ReplicaView(
                datanode=r.datanode_uuid,
                state=r.state,
                rack=node.rack if node else "/default-rack",
                health=node.health if node else DEAD,
                op_state=node.op_state if node else hdds_pb2.IN_SERVICE,
                sequence_id=r.sequence_id,
                key_count=r.key_count,
                is_empty=r.is_empty,
                origin=r.origin_node_id,
                replica_index=r.replica_index,
            )
        )
    return ContainerView(info=info, replicas=views, pipeline_state=pipeline_state, pending=pending)


class ReplicationManager(BackgroundSCMService):
    def __init__(
        self,
        config: ReplicationManagerConfig,
        container_manager: ContainerManager,
        pipeline_manager: PipelineManager,
        node_manager: SCMNodeManager,
        scm_context: SCMContext,
        clock: Clock,
        placement: ContainerPlacementPolicy | None = None,
        wait_time_after_safe_mode: timedelta | None = None,
        ec_placement: ContainerPlacementPolicy | None = None,
    ) -> None:
        super().__init__(
            "ReplicationManager",
            scm_context=scm_context,
            clock=clock,
            interval=config.interval,
            run_once=self._run_once,
            wait_time=wait_time_after_safe_mode or timedelta(0),
        )
        self.config = config
        self.container_manager = container_manager
        self.pipeline_manager = pipeline_manager
        self.node_manager = node_manager
        self.scm_context = scm_context
        self.clock = clock
        self.placement: ContainerPlacementPolicy = placement or ContainerPlacementRackAware()
        self.ec_placement: ContainerPlacementPolicy = ec_placement or SCMContainerPlacementRackScatter()
        self.pending_ops = ContainerReplicaPendingOps()
        container_manager.add_replica_listener(self.pending_ops.complete)
        self.last_report = ReplicationManagerReport(config.container_sample_limit).to_proto(0)
        self.last_results: dict[int, CheckResult] = {}
        self.commands_issued: dict[str, int] = defaultdict(int)
        self.commands_throttled = 0
        # commands not sent because their datanode was at its queue limit, by kind (Ozone's *CmdsDeferredTotal);
        # commands_throttled counts these and the cluster-wide in-flight limit together
        self.commands_deferred: dict[str, int] = defaultdict(int)
        self._pass_inflight_limit = 0
        self.runs = 0

    async def _run_once(self) -> None:
        await self.process_all()

    async def run_once(self) -> hdds_pb2.ReplicationManagerReportProto:
        """One full pass regardless of service state (tests, admin)."""
        return await self.process_all()

    def is_running(self) -> bool:
        return self.enabled

    def on_become_leader(self) -> None:
        self.pending_ops.clear()

    # ---- node events (NodeEventListener) ----
    async def on_node_stale(self, dn_uuid: str) -> None:
        return None  # a STALE node's replicas still count (Ozone); nothing changes until DEAD

    async def on_node_dead(self, dn_uuid: str) -> None:
        """Ozone's REPLICATION_MANAGER_NOTIFY from DeadNodeHandler: the dead node's replicas are
        gone, so re-check now rather than keep publishing a report (and not repairing) for up to
        ``hdds.scm.replication.thread.interval``. Not for a node IN_MAINTENANCE (replicas kept)."""
        node = self.node_manager.get_node(dn_uuid)
        if node is None or node.op_state != hdds_pb2.IN_MAINTENANCE:
            self.trigger()

    async def on_node_healthy(self, dn_uuid: str) -> None:
        return None

    # ---- views ----
    def _load(self, dn: str) -> int:
        """What steers the choice of targets: replication work queued on the datanode (reconstructions by
        their weight), then the containers it holds."""
        return self.replication_load(dn) + self.container_manager.container_count_on(dn)

    def cluster_view(self) -> ClusterView:
        return ClusterView(
            nodes=self.node_manager.all_nodes(),
            load=self._load,
            placement=self.placement,
            maintenance_replica_minimum=self.config.maintenance_replica_minimum,
            maintenance_remaining_redundancy=self.config.maintenance_remaining_redundancy,
            ec_placement=self.ec_placement,
        )

    def container_view(self, container_id: int) -> ContainerView:
        info = self.container_manager.get_container(container_id)
        pipeline = self.pipeline_manager.find(info.pipelineID.id) if info.HasField("pipelineID") else None
        return build_container_view(
            info,
            self.container_manager.get_replicas(container_id),
            self.node_manager.get_node,
            pipeline.state if pipeline is not None else None,
            self.pending_ops.view(container_id),
        )

    # ---- the pass ----
    async def process_all(self) -> hdds_pb2.ReplicationManagerReportProto:
        self.runs += 1
        self.pending_ops.expire(self.clock.monotonic())
        self._pass_inflight_limit = self.inflight_limit()  # healthy nodes counted once per pass
        report = ReplicationManagerReport(self.config.container_sample_limit)
        cluster = self.cluster_view()
        results: dict[int, CheckResult] = {}
        for n, cid in enumerate(self.container_manager.state_manager.container_ids()):
            if n and n % 500 == 0:
                await asyncio.sleep(0)  # large clusters: let heartbeats in between
            if not self.container_manager.exists(cid):
                continue  # removed while we yielded
            view = self.container_view(cid)  # one ContainerInfoProto per container per pass
            info = view.info
            report.increment(enum_name(LifeCycleState, info.state))
            if info.suppressed:  # counted by state, left out of the health checks and their commands (Ozone's)
                continue
            result = check_container(view, cluster)
            results[cid] = result
            for state in sorted(result.states, key=lambda s: s.value):
                report.increment(state.value, cid)
            if self.scm_context.is_leader():
                try:
                    await self._execute(cid, result)
                except NotLeaderException:
                    log.info("lost leadership during the replication pass; stopping it")
                    break
                except SCMException as exc:
                    log.warning("container #%d: %s", cid, exc)
        self.last_results = results
        self.last_report = report.to_proto(self.clock.wall_ms())
        return self.last_report

    async def _execute(self, container_id: int, result: CheckResult) -> None:
        event = result.lifecycle_event
        if event == FINALIZE:
            await self.container_manager.close_container(container_id)
        elif event in (DELETE, CLEANUP):
            await self.container_manager.state_manager.update_container_state(container_id, event, self.clock.wall_ms())
            if event == CLEANUP:
                log.info("container #%d is DELETED", container_id)
        for cmd in result.commands:
            self._send(container_id, cmd)

    def send_command(self, container_id: int, cmd: PlannedCommand) -> bool:
        """Queue ``cmd`` for its datanode as this manager's own commands go (the datanode's queue limits, the
        pending ops that keep later passes from acting twice); False when it was not queued (a throttled or
        unknown datanode, a close already queued). The ContainerBalancer's moves go this way."""
        return self._send(container_id, cmd)

    def datanode_deadline_ms(self) -> int:
        """The deadline a command sent now carries to its datanode (wall clock, ms): the SCM's own deadline
        (hdds.scm.replication.event.timeout from now) less hdds.scm.replication.event.timeout.datanode.offset, as
        Ozone's ReplicationManager sets it, so the datanode drops the command before the SCM sends it again."""
        timeout = self.config.event_timeout - self.config.event_timeout_datanode_offset
        return self.clock.wall_ms() + int(timeout.total_seconds() * 1000)

    def _send(self, container_id: int, cmd: PlannedCommand) -> bool:
        node = self.node_manager.get_node(cmd.datanode)
        if node is None:
            return False
        deadline_ms = self.datanode_deadline_ms()
        deadline = self.clock.monotonic() + self.config.event_timeout.total_seconds()
        if cmd.kind in ("replicate", "reconstruct") and self._inflight_limit_reached():
            self.commands_throttled += 1
            return False
        if cmd.kind == "replicate":
            if self.replication_load(cmd.datanode) >= self.config.datanode_replication_limit:
                self.commands_throttled += 1
                self.commands_deferred[cmd.kind] += 1
                return False
            sources = [self.node_manager.require_node(s).details for s in cmd.sources if self.node_manager.get_node(s)]
            proto = scm_datanode_pb2.SCMCommandProto(
                commandType=CommandType.replicateContainerCommand,
                deadlineMsSinceEpoch=deadline_ms,
                replicateContainerCommandProto=scm_datanode_pb2.ReplicateContainerCommandProto(
                    containerID=container_id, sources=sources
                ),
            )
            if cmd.replica_index:
                proto.replicateContainerCommandProto.replicaIndex = cmd.replica_index
            self.node_manager.add_command(cmd.datanode, proto)
            self.pending_ops.add(container_id, PendingOpType.ADD, cmd.datanode, deadline, cmd.replica_index)
        elif cmd.kind == "reconstruct":
            if not self._send_reconstruction(container_id, cmd, deadline_ms, deadline):
                self.commands_throttled += 1
                self.commands_deferred[cmd.kind] += 1
                return False
        elif cmd.kind == "delete":
            queued = self.pending_ops.count_for(cmd.datanode, PendingOpType.DELETE) + node.command_queue_report.get(
                CommandType.deleteContainerCommand, 0
            )
            if queued >= self.config.datanode_delete_limit:
                self.commands_throttled += 1
                self.commands_deferred[cmd.kind] += 1
                return False
            proto = scm_datanode_pb2.SCMCommandProto(
                commandType=CommandType.deleteContainerCommand,
                deadlineMsSinceEpoch=deadline_ms,
                deleteContainerCommandProto=scm_datanode_pb2.DeleteContainerCommandProto(
                    containerID=container_id, force=cmd.force
                ),
            )
            if cmd.replica_index:
                proto.deleteContainerCommandProto.replicaIndex = cmd.replica_index
            self.node_manager.add_command(cmd.datanode, proto)
            self.pending_ops.add(container_id, PendingOpType.DELETE, cmd.datanode, deadline, cmd.replica_index)
        elif cmd.kind == "close":
            already = any(
                c.closeContainerCommandProto.containerID == container_id
                for c in self.node_manager.queued_commands(cmd.datanode, CommandType.closeContainerCommand)
            )
            if already:
                return False
            self.container_manager.send_close_commands(container_id, force=cmd.force, only=[cmd.datanode])
        else:  # pragma: no cover - programming error
            raise ValueError(cmd.kind)
        self.commands_issued[cmd.kind] += 1
        return True

    def inflight_limit(self) -> int:
        """Ozone's replication in-flight limit: ``hdds.scm.replication.inflight.limit.factor`` x healthy
        datanodes x ``hdds.scm.replication.datanode.replication.limit``, rounded up; 0 = none."""
        factor = self.config.inflight_limit_factor
        if factor <= 0:
            return 0
        healthy = self.node_manager.node_count(HEALTHY)
        return math.ceil(factor * healthy * self.config.datanode_replication_limit)

    def _inflight_limit_reached(self) -> bool:
        limit = self._pass_inflight_limit
        return limit > 0 and self.pending_ops.total(PendingOpType.ADD) >= limit

    def replication_load(self, dn: str) -> int:
        """Ozone's replication load of a datanode: its queued replicate commands plus its queued
        reconstructions at ``hdds.scm.replication.datanode.reconstruction.weight`` each (what it
        reports queued, plus what we issued and no report has confirmed yet)."""
        node = self.node_manager.get_node(dn)
        queued = node.command_queue_report if node is not None else {}
        weight = self.config.datanode_reconstruction_weight
        return (
            self.pending_ops.count_for(dn, PendingOpType.ADD)
            + queued.get(CommandType.replicateContainerCommand, 0)
            + weight * queued.get(CommandType.reconstructECContainersCommand, 0)
        )

    def _send_reconstruction(self, container_id: int, cmd: PlannedCommand, deadline_ms: int, deadline: float) -> bool:
        """Send one ReconstructECContainersCommand to the least loaded of its targets (the
        coordinator, as Ozone's ReplicationManager picks it); False when every target is at its
        replication limit or the container's EC layout is unknown."""
        info = self.container_manager.get_container(container_id)
        if not info.HasField("ecReplicationConfig"):
            return False
        targets = [self.node_manager.get_node(t) for t in cmd.targets]
        if any(t is None for t in targets):
            return False
        loads = sorted((self.replication_load(t), t) for t in cmd.targets)
        load, coordinator = loads[0]
        if load >= self.config.datanode_replication_limit:
            return False
        sources = []
        for dn, index in cmd.indexed_sources:
            node = self.node_manager.get_node(dn)
            if node is not None:
                sources.append(
                    scm_datanode_pb2.DatanodeDetailsAndReplicaIndexProto(datanodeDetails=node.details, replicaIndex=index)
                )
        proto = scm_datanode_pb2.SCMCommandProto(
            commandType=CommandType.reconstructECContainersCommand,
            deadlineMsSinceEpoch=deadline_ms,
            reconstructECContainersCommandProto=scm_datanode_pb2.ReconstructECContainersCommandProto(
                containerID=container_id,
                sources=sources,
                targets=[t.details for t in targets if t is not None],
                missingContainerIndexes=bytes(cmd.missing_indexes),
                ecReplicationConfig=info.ecReplicationConfig,
            ),
        )
        self.node_manager.add_command(coordinator, proto)
        for target, index in zip(cmd.targets, cmd.missing_indexes, strict=True):
            self.pending_ops.add(container_id, PendingOpType.ADD, target, deadline, index)
        return True


def health_of(report: hdds_pb2.ReplicationManagerReportProto, state: ContainerHealthState) -> int:
    return report_counts(report).get(state.value, 0)


__all__ = [
    "ContainerHealthState",
    "ContainerReplicaPendingOps",
    "PendingOpType",
    "ReplicationManager",
    "ReplicationManagerReport",
    "build_container_view",
    "health_of",
    "report_counts",
]
