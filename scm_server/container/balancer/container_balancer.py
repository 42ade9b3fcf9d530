"""The ContainerBalancer service: runs the planner's iterations on the leader and moves containers for real.

``ozone admin containerbalancer start`` (``StartContainerBalancer``) merges its options over the
``hdds.container.balancer.*`` defaults, checks them, and records the result with ``shouldRun=true`` in the
replicated ``statefulServiceConfig`` table under ``ContainerBalancer``, as Ozone does. The service, a background
SCM service that runs only on the ready leader out of safemode, acts on that record step by step:

1. start an iteration: the view (healthy, in-service datanodes' usage from their node reports; CLOSED RATIS
   containers with all their replicas, none in flight) goes to :func:`core.plan_iteration`; each move's first
   command, a replicate command to the target with the source as the copy's origin, goes through the
   ReplicationManager's command path (its per-datanode limits and pending ops, so its own passes do not act twice);
2. follow the moves: once the target reports the replica, delete the source's (only while the replicas left
   after it, less the deletions already pending, still reach the replication factor); a move is completed when the
   source's replica is gone, timed out past ``move.replication.timeout`` (copy) or ``move.timeout`` (whole move);
3. close the iteration when no move is in flight: its figures are kept for ``containerbalancer status -v``; the
   next iteration's index is recorded through Raft; the next starts ``balancing.iteration.interval`` after this one
   started. After the last iteration, or when the view is balanced or nothing more can move, ``shouldRun=false``
   is recorded and the balancer stops.

Leadership: in-flight moves belong to the leader that issued them. A new leader reads the record, and when
``shouldRun`` is set it resumes from the recorded iteration index (Ozone's behaviour after a failover); moves
the old leader left half done are finished or undone by the ReplicationManager like any over-replicated container.
``containerbalancer stop`` records ``shouldRun=false``; the moves in flight are left to complete on their own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from scm_server.clock import Clock
from scm_server.conf import ContainerBalancerConfig
from scm_server.container.balancer.core import (
    BalancerLimits,
    ContainerReplicas,
    Move,
    NodeUsage,
    plan_iteration,
    unbalanced_bytes,
)
from scm_server.container.container_manager import ContainerManager
from scm_server.container.replication.health import PlannedCommand
from scm_server.container.replication.replication_manager import ReplicationManager
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha.scm_context import SCMContext
from scm_server.ha.scm_service import BackgroundSCMService
from scm_server.ha.stateful_service_state_manager import StatefulServiceStateManager
from scm_server.node.node_manager import SCMNodeManager
from scm_server.node.usage_info import usage_of
from scm_server.proto import hdds_pb2
from scm_server.protocols import BalancerIterationStatus, BalancerStartRequest

log = logging.getLogger(__name__)

SERVICE_NAME = "ContainerBalancer"  # the statefulServiceConfig key, as Ozone's
STEP_INTERVAL = timedelta(seconds=3)  # how often the leader follows its moves (and starts a due iteration)
GB = 1 << 30
_MINUTE_MS = 60_000

NOT_RUNNING = "Expect ContainerBalancer as running state, but running state is actually STOPPED"
ALREADY_RUNNING = "Expect ContainerBalancer as not running state, but running state is actually RUNNING"
IN_SAFE_MODE = "ContainerBalancer cannot start while SCM is in safe mode; wait for safemode to exit"


def _csv(values: tuple[str, ...] | list[str]) -> str:
    return ",".join(v.strip() for v in values if v.strip())


def initial_configuration(
    defaults: ContainerBalancerConfig, request: BalancerStartRequest, started_at_ms: int
) -> hdds_pb2.ContainerBalancerConfigurationProto:
    """The record a start writes: the keys' values, each option of the request given over its key's."""
    c = hdds_pb2.ContainerBalancerConfigurationProto(shouldRun=True, nextIterationIndex=0, startedAtMs=started_at_ms)
    threshold = defaults.threshold if request.threshold is None else request.threshold
    c.utilizationThreshold = repr(float(threshold))
    c.datanodesInvolvedMaxPercentagePerIteration = (
        defaults.datanodes_involved_max_percentage if request.max_datanodes_percentage is None
        else request.max_datanodes_percentage
    )
    c.sizeMovedMaxPerIteration = (
        defaults.size_moved_max_per_iteration if request.max_size_to_move_per_iteration_gb is None
        else request.max_size_to_move_per_iteration_gb * GB
    )
    c.sizeEnteringTargetMax = (
        defaults.size_entering_target_max if request.max_size_entering_target_gb is None
        else request.max_size_entering_target_gb * GB
    )
    c.sizeLeavingSourceMax = (
        defaults.size_leaving_source_max if request.max_size_leaving_source_gb is None
        else request.max_size_leaving_source_gb * GB
    )
    c.iterations = defaults.iterations if request.iterations is None else request.iterations
    c.balancingIterationInterval = (
        int(defaults.balancing_iteration_interval.total_seconds() * 1000) if request.balancing_interval_minutes is None
        else request.balancing_interval_minutes * _MINUTE_MS
    )
    c.moveTimeout = (
        int(defaults.move_timeout.total_seconds() * 1000) if request.move_timeout_minutes is None
        else request.move_timeout_minutes * _MINUTE_MS
    )
    c.moveReplicationTimeout = (
        int(defaults.move_replication_timeout.total_seconds() * 1000)
        if request.move_replication_timeout_minutes is None
        else request.move_replication_timeout_minutes * _MINUTE_MS
    )
    c.moveNetworkTopologyEnable = (
        defaults.move_network_topology_enable if request.network_topology_enable is None
        else request.network_topology_enable
    )
    c.triggerDuBeforeMoveEnable = defaults.trigger_du_before_move_enable
    c.includeNonStandardContainers = defaults.include_non_standard_containers
    c.includeDatanodes = request.include_nodes if request.include_nodes is not None else _csv(defaults.include_datanodes)
    c.excludeDatanodes = request.exclude_nodes if request.exclude_nodes is not None else _csv(defaults.exclude_datanodes)
    c.includeContainers = (
        request.include_containers if request.include_containers is not None else _csv(defaults.include_containers)
    )
    c.excludeContainers = (
        request.exclude_containers if request.exclude_containers is not None else _csv(defaults.exclude_containers)
    )
    return c


def _ids(text: str) -> set[int] | None:
    """Container ids of a comma-separated list; None when one is not a number."""
    ids = set()
    for part in text.split(","):
        if part.strip():
            if not part.strip().isdigit():
                return None
            ids.add(int(part.strip()))
    return ids


def configuration_error(c: hdds_pb2.ContainerBalancerConfigurationProto) -> str | None:
    """Why the record cannot run (one line naming the option and the key), or None."""
    try:
        threshold = float(c.utilizationThreshold)
    except ValueError:
        return f"threshold {c.utilizationThreshold!r} is not a number; give a percentage such as 10"
    if not 0.0 <= threshold < 100.0:
        return (f"threshold {threshold:g} must be a percentage in [0, 100) "
                "(--threshold, hdds.container.balancer.utilization.threshold)")
    if not 0 <= c.datanodesInvolvedMaxPercentagePerIteration <= 100:
        return (f"max datanodes percentage to involve per iteration {c.datanodesInvolvedMaxPercentagePerIteration} "
                "must be in [0, 100] (--max-datanodes-percentage-to-involve-per-iteration, "
                "hdds.container.balancer.datanodes.involved.max.percentage.per.iteration)")
    if c.iterations == 0 or c.iterations < -1:
        return (f"iterations {c.iterations} must be positive, or -1 to run until the cluster is balanced "
                "(--iterations, hdds.container.balancer.iterations)")
    for value, name, option, key in (
        (c.sizeMovedMaxPerIteration, "max size to move per iteration", "--max-size-to-move-per-iteration-in-gb",
         "size.moved.max.per.iteration"),
        (c.sizeEnteringTargetMax, "max size entering target", "--max-size-entering-target-in-gb",
         "size.entering.target.max"),
        (c.sizeLeavingSourceMax, "max size leaving source", "--max-size-leaving-source-in-gb",
         "size.leaving.source.max"),
    ):
        if value <= 0:
            return f"{name} must be positive ({option}, hdds.container.balancer.{key})"
    if c.moveReplicationTimeout <= 0 or c.moveTimeout <= 0:
        return ("move timeout and move replication timeout must be positive (--move-timeout-minutes, "
                "--move-replication-timeout-minutes)")
    if c.moveReplicationTimeout >= c.moveTimeout:
        return (f"move replication timeout ({c.moveReplicationTimeout // _MINUTE_MS}m) must be less than the move "
                f"timeout ({c.moveTimeout // _MINUTE_MS}m) (hdds.container.balancer.move.replication.timeout, "
                "hdds.container.balancer.move.timeout)")
    if c.balancingIterationInterval <= c.moveTimeout:
        return (f"balancing iteration interval ({c.balancingIterationInterval // _MINUTE_MS}m) must be more than "
                f"the move timeout ({c.moveTimeout // _MINUTE_MS}m) (--balancing-iteration-interval-minutes, "
                "hdds.container.balancer.balancing.iteration.interval)")
    for text, what in ((c.includeContainers, "include containers"), (c.excludeContainers, "exclude containers")):
        if _ids(text) is None:
            return f"{what} {text!r} must be container ids separated by commas (e.g. 1,4,5)"
    return None


def limits_of(c: hdds_pb2.ContainerBalancerConfigurationProto) -> BalancerLimits:
    return BalancerLimits(
        threshold=float(c.utilizationThreshold) / 100.0,
        max_datanodes_ratio=c.datanodesInvolvedMaxPercentagePerIteration / 100.0,
        max_size_per_iteration=c.sizeMovedMaxPerIteration,
        max_size_entering_target=c.sizeEnteringTargetMax,
        max_size_leaving_source=c.sizeLeavingSourceMax,
    )


@dataclass
class _InFlight:
    move: Move
    factor: int
    started: float  # monotonic
    deleting: bool = False


@dataclass
class _Iteration:
    number: int
    started: float
    started_wall_ms: int
    moves: list[Move]
    scheduled: int = 0
    completed: int = 0
    failed: int = 0
    timeout: int = 0
    moved_bytes: int = 0
    entering: dict[str, int] = field(default_factory=dict)
    leaving: dict[str, int] = field(default_factory=dict)


@dataclass
class BalancerMetrics:
    """Ozone's ContainerBalancerMetrics, counted by this SCM since it started."""

    iterations: int = 0
    moves_scheduled: int = 0
    moves_completed: int = 0
    moves_failed: int = 0
    moves_timeout: int = 0
    moved_bytes: int = 0
    datanodes_unbalanced: int = 0
    unbalanced_bytes: int = 0  # summed over the iterations' starts, as Ozone's DataSizeUnbalancedGB grows
    last: BalancerIterationStatus | None = None
    datanodes_involved_last: int = 0


class ContainerBalancer(BackgroundSCMService):
    """See the module docstring. ``step`` is one pass; the background loop calls it every ``STEP_INTERVAL``."""

    def __init__(
        self,
        defaults: ContainerBalancerConfig,
        stateful: StatefulServiceStateManager,
        container_manager: ContainerManager,
        node_manager: SCMNodeManager,
        replication_manager: ReplicationManager,
        scm_context: SCMContext,
        clock: Clock,
        wait_time_after_safe_mode: timedelta = timedelta(0),
        step_interval: timedelta = STEP_INTERVAL,
    ) -> None:
        super().__init__(
            SERVICE_NAME,
            scm_context=scm_context,
            clock=clock,
            interval=step_interval,
            run_once=self.step,
            wait_time=wait_time_after_safe_mode,
        )
        self.defaults = defaults
        self.stateful = stateful
        self.container_manager = container_manager
        self.node_manager = node_manager
        self.replication_manager = replication_manager
        self.scm_context = scm_context
        self.clock = clock
        self.metrics = BalancerMetrics()
        self.history: list[BalancerIterationStatus] = []  # this run's iterations (status -v)
        self._term: int | None = None
        self._in_flight: dict[int, _InFlight] = {}
        self._iteration: _Iteration | None = None
        self._next_iteration_at = 0.0

    # ---- the record ----
    def record(self) -> hdds_pb2.ContainerBalancerConfigurationProto | None:
        data = self.stateful.read_configuration(SERVICE_NAME)
        if data is None:
            return None
        return hdds_pb2.ContainerBalancerConfigurationProto.FromString(data)

    def is_balancer_running(self) -> bool:
        """Ozone's ``getBalancerStatus``: whether a run is recorded as one that should run."""
        c = self.record()
        return c is not None and c.shouldRun

    async def _save(self, c: hdds_pb2.ContainerBalancerConfigurationProto) -> None:
        await self.stateful.save_configuration(SERVICE_NAME, c.SerializeToString())

    # ---- admin ----
    async def start_balancer(self, request: BalancerStartRequest) -> str:
        """Record a run (raises SCMException with the reason when it cannot start); returns the answer's text."""
        if self.scm_context.is_in_safe_mode():
            raise SCMException(ResultCodes.SAFE_MODE_EXCEPTION, IN_SAFE_MODE)
        if self.is_balancer_running():
            raise SCMException(ResultCodes.INTERNAL_ERROR, ALREADY_RUNNING)
        record = initial_configuration(self.defaults, request, self.clock.wall_ms())
        error = configuration_error(record)
        if error is not None:
            raise SCMException(ResultCodes.INVALID_REQUEST, error)
        await self._save(record)
        self.history = []
        self._iteration = None
        self._next_iteration_at = 0.0
        log.info("ContainerBalancer started: threshold %s%%, %d iterations", record.utilizationThreshold,
                 record.iterations)
        self.trigger()
        return "Container Balancer started successfully."

    async def stop_balancer(self) -> None:
        record = self.record()
        if record is None:
            # never started on this ring: nothing persisted, nothing to stop; Ozone 2.2's SCM answers this stop
            # without an error (and `containerbalancer stop` prints "Container Balancer stopped.")
            log.info("ContainerBalancer: stop asked, but no run was ever recorded; nothing to stop")
            return
        if not record.shouldRun:
            raise SCMException(ResultCodes.INTERNAL_ERROR, NOT_RUNNING)
        record.shouldRun = False
        await self._save(record)
        self._forget_run("stopped by an administrator")

    def _forget_run(self, why: str) -> None:
        if self._in_flight or self._iteration is not None:
            log.info("ContainerBalancer: %d moves in flight left to complete on their own (%s)",
                     len(self._in_flight), why)
        self._in_flight.clear()
        self._iteration = None

    # ---- the pass ----
    async def step(self) -> None:
        if not self.scm_context.is_leader():
            return
        if self._term != self.scm_context.term:
            if self._term is not None:
                self._forget_run(f"leadership changed to term {self.scm_context.term}")
            self._term = self.scm_context.term
            self._next_iteration_at = 0.0
        record = self.record()
        if record is None or not record.shouldRun:
            self._forget_run("the balancer is not running")
            return
        now = self.clock.monotonic()
        self._follow_moves(now, record)
        if self._in_flight:
            return
        if self._iteration is not None:
            await self._close_iteration(record, now)
            return
        if now >= self._next_iteration_at:
            await self._start_iteration(record, now)

    def _view(self, record: hdds_pb2.ContainerBalancerConfigurationProto) -> tuple[list[NodeUsage], list[ContainerReplicas]]:
        include = {h for h in record.includeDatanodes.split(",") if h.strip()}
        exclude = {h for h in record.excludeDatanodes.split(",") if h.strip()}
        nodes = []
        for n in self.node_manager.get_nodes(hdds_pb2.HEALTHY, hdds_pb2.IN_SERVICE):
            names = {n.details.hostName, n.details.ipAddress}
            if (include and not names & include) or names & exclude:
                continue
            usage = usage_of(n, 0, 0)
            if usage.capacity > 0:
                nodes.append(NodeUsage(n.uuid, usage.capacity, usage.capacity - usage.remaining, n.rack))
        included_ids = _ids(record.includeContainers) or set()
        excluded_ids = _ids(record.excludeContainers) or set()
        containers = []
        cm = self.container_manager
        pending = self.replication_manager.pending_ops
        for cid in cm.state_manager.container_ids():
            info = cm.get_container(cid)
            if info.state != hdds_pb2.CLOSED or info.replicationType != hdds_pb2.RATIS:
                continue
            replicas = cm.get_replicas(cid)
            factor = int(info.replicationFactor)
            view = pending.view(cid)
            movable = (
                (not included_ids or cid in included_ids)
                and cid not in excluded_ids
                and not view.adds and not view.deletes
                and len(replicas) == factor
                and all(r.state == hdds_pb2.ContainerReplicaProto.CLOSED for r in replicas)
            )
            size = max((r.used_bytes for r in replicas), default=0)
            containers.append(
                ContainerReplicas(cid, size, factor, frozenset(r.datanode_uuid for r in replicas), movable)
            )
        return nodes, containers

    async def _start_iteration(self, record: hdds_pb2.ContainerBalancerConfigurationProto, now: float) -> None:
        nodes, containers = self._view(record)
        limits = limits_of(record)
        plan = plan_iteration(nodes, containers, limits)
        self.metrics.datanodes_unbalanced = len(plan.over_utilized) + len(plan.under_utilized)
        self.metrics.unbalanced_bytes += unbalanced_bytes(nodes, limits.threshold)
        number = record.nextIterationIndex + 1
        if plan.balanced or not plan.moves:
            why = "the cluster is balanced" if plan.balanced else "no container can move within the limits"
            log.info("ContainerBalancer iteration %d: %s; stopping", number, why)
            self._record_status(_Iteration(number, now, self.clock.wall_ms(), []), now,
                                "ITERATION_COMPLETED" if plan.balanced else "CAN_NOT_BALANCE_ANY_MORE")
            record.shouldRun = False
            await self._save(record)
            return
        iteration = _Iteration(number, now, self.clock.wall_ms(), list(plan.moves))
        self.metrics.datanodes_involved_last = len(plan.datanodes_involved)
        for move in plan.moves:
            factor = int(self.container_manager.get_container(move.container_id).replicationFactor)
            sent = self.replication_manager.send_command(
                move.container_id, PlannedCommand("replicate", move.target, sources=(move.source,))
            )
            if not sent:
                iteration.failed += 1
                continue
            iteration.scheduled += 1
            iteration.entering[move.target] = iteration.entering.get(move.target, 0) + move.size
            iteration.leaving[move.source] = iteration.leaving.get(move.source, 0) + move.size
            self._in_flight[move.container_id] = _InFlight(move, factor, now)
        log.info("ContainerBalancer iteration %d: %d moves scheduled (%d bytes), %d over- and %d under-utilized "
                 "datanodes", number, iteration.scheduled, plan.size_scheduled, len(plan.over_utilized),
                 len(plan.under_utilized))
        self._iteration = iteration
        self._next_iteration_at = now + record.balancingIterationInterval / 1000.0

    def _follow_moves(self, now: float, record: hdds_pb2.ContainerBalancerConfigurationProto) -> None:
        it = self._iteration
        for cid, f in list(self._in_flight.items()):
            holders = {r.datanode_uuid for r in self.container_manager.get_replicas(cid)}
            m = f.move
            done = m.target in holders and m.source not in holders
            if done:
                del self._in_flight[cid]
                if it is not None:
                    it.completed += 1
                    it.moved_bytes += m.size
                continue
            if not f.deleting and m.target in holders:
                deletions = self.replication_manager.pending_ops.view(cid).deletes
                if len(holders) - len(deletions) - 1 >= f.factor:
                    # forced, as Ozone's MoveManager sends it: a datanode refuses to delete a replica holding data
                    # otherwise ("Non-force deletion of non-empty container is not allowed")
                    f.deleting = self.replication_manager.send_command(
                        cid, PlannedCommand("delete", m.source, force=True))
                continue
            limit = record.moveTimeout if f.deleting else record.moveReplicationTimeout
            if (now - f.started) * 1000 > limit:
                del self._in_flight[cid]
                log.info("ContainerBalancer: move of container #%d from %s to %s timed out", cid, m.source, m.target)
                if it is not None:
                    it.timeout += 1
            elif m.target not in holders and m.source not in holders:
                del self._in_flight[cid]  # both replicas gone (the container was deleted)
                if it is not None:
                    it.failed += 1

    def _record_status(self, it: _Iteration, now: float, result: str) -> None:
        status = BalancerIterationStatus(
            iteration_number=it.number,
            iteration_result=result,
            size_scheduled_for_move=sum(it.entering.values()),
            data_size_moved=it.moved_bytes,
            moves_scheduled=it.scheduled,
            moves_completed=it.completed,
            moves_failed=it.failed,
            moves_timeout=it.timeout,
            size_entering_nodes=dict(sorted(it.entering.items())),
            size_leaving_nodes=dict(sorted(it.leaving.items())),
            duration_seconds=int(now - it.started),
        )
        self.history.append(status)
        m = self.metrics
        m.iterations += 1
        m.moves_scheduled += it.scheduled
        m.moves_completed += it.completed
        m.moves_failed += it.failed
        m.moves_timeout += it.timeout
        m.moved_bytes += it.moved_bytes
        m.last = status

    async def _close_iteration(self, record: hdds_pb2.ContainerBalancerConfigurationProto, now: float) -> None:
        it = self._iteration
        assert it is not None
        self._iteration = None
        self._record_status(it, now, "ITERATION_COMPLETED")
        record.nextIterationIndex = it.number
        if record.iterations != -1 and record.nextIterationIndex >= record.iterations:
            record.shouldRun = False
            log.info("ContainerBalancer: iteration %d of %d done; stopping", it.number, record.iterations)
        await self._save(record)


__all__ = [
    "SERVICE_NAME",
    "ContainerBalancer",
    "configuration_error",
    "initial_configuration",
]
