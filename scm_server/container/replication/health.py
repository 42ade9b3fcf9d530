"""Container health classification: a pure decision per container (Ozone's RM check chain).

:func:`check_container` takes a :class:`ContainerView` (container info, replicas with their
datanode's health/op state/rack, pipeline state, pending ops) and the candidate target nodes, and
returns a :class:`CheckResult`: the health states (one primary, Ozone's ContainerHealthState
names) plus the commands and lifecycle event the leader should issue. No I/O, no clock; the
ReplicationManager executes the result.

Handlers folded in, in Ozone's order: OpenContainerHandler (OPEN_UNHEALTHY /
OPEN_WITHOUT_PIPELINE -> close), ClosingContainerHandler (re-send close), QuasiClosedContainerHandler
(force close when a majority of unique origins is QUASI_CLOSED, else QUASI_CLOSED_STUCK),
MismatchedReplicasHandler (close replicas of a CLOSED container that are not closed),
EmptyContainerHandler (EMPTY -> DELETE), DeletingContainerHandler (delete replicas / CLEANUP),
RatisReplicationCheckHandler (UNDER/OVER_REPLICATED, MISSING), rack placement (MIS_REPLICATED),
ClosedWithUnhealthyReplicasHandler (UNHEALTHY; delete bad replicas once enough good ones exist).
"""

from __future__ import annotations

from collections import Counter

from scm_server.container.container_manager import (
    R_CLOSED,
    R_CLOSING,
    R_INVALID,
    R_OPEN,
    R_QUASI_CLOSED,
    R_UNHEALTHY,
)
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
)
from scm_server.container.replication.ec_health import check_closed_ec
from scm_server.container.replication.views import (
    PRIMARY_ORDER,
    CheckResult,
    ClusterView,
    ContainerHealthState,
    ContainerView,
    PendingView,
    PlannedCommand,
    ReplicaView,
)
from scm_server.node.node_manager import DEAD, IN_MAINTENANCE
from scm_server.proto import hdds_pb2


def _matches(container_state: int, replica_state: int) -> bool:
    if container_state == CLOSED:
        return replica_state == R_CLOSED
    if container_state == QUASI_CLOSED:
        return replica_state in (R_QUASI_CLOSED, R_CLOSED)
    return replica_state not in (R_UNHEALTHY, R_INVALID)


def check_container(view: ContainerView, cluster: ClusterView) -> CheckResult:
    """Classify one container. Replica counting follows Ozone (RatisContainerReplicaCount,
    DeadNodeHandler):

    * replicas on DEAD nodes are gone (DeadNodeHandler removes them; any still listed are
      ignored here), except on IN_MAINTENANCE nodes, which are expected to be offline and keep
      counting as maintenance copies;
    * the rest are counted by the node's operational state only: IN_SERVICE copies count
      towards the replication factor, DECOMMISSIONING/DECOMMISSIONED never do, maintenance
      copies cover up to ``replication factor - maintenance_replica_minimum``. A STALE node's
      copy still counts (it may come back; Ozone waits for DEAD) but is never a source.
    """
    info = view.info
    replicas = [r for r in view.replicas if r.health != DEAD or r.op_state == IN_MAINTENANCE]
    state = info.state

    if state == OPEN:
        return _check_open(view, replicas)
    if state == CLOSING:
        if not replicas:
            return CheckResult({ContainerHealthState.MISSING}, reason="CLOSING container has no replicas")
        cmds = [
            PlannedCommand("close", r.datanode)
            for r in replicas
            if r.state in (R_OPEN, R_CLOSING) and r.usable_source
        ]
        return CheckResult({ContainerHealthState.HEALTHY}, cmds, reason="re-sending close to open replicas")
    if state == DELETING:
        if not replicas:
            return CheckResult({ContainerHealthState.HEALTHY}, lifecycle_event=CLEANUP, reason="all replicas deleted")
        cmds = [
            PlannedCommand("delete", r.datanode, force=True)
            for r in replicas
            if r.datanode not in view.pending.deletes and r.usable_source
        ]
        return CheckResult({ContainerHealthState.HEALTHY}, cmds, reason="deleting replicas")
    if state == DELETED:
        return CheckResult({ContainerHealthState.HEALTHY})
    if view.is_ec:
        return check_closed_ec(view, replicas, cluster)
    return _check_closed(view, replicas, cluster)


def _check_open(view: ContainerView, replicas: list[ReplicaView]) -> CheckResult:
    if view.pipeline_state != hdds_pb2.PIPELINE_OPEN:
        return CheckResult(
            {ContainerHealthState.OPEN_WITHOUT_PIPELINE},
            lifecycle_event=FINALIZE,
            reason="OPEN container whose pipeline is not OPEN",
        )
    if any(r.state not in (R_OPEN, R_CLOSING) for r in replicas):
        return CheckResult(
            {ContainerHealthState.OPEN_UNHEALTHY},
            lifecycle_event=FINALIZE,
            reason="OPEN container with a replica that is not open",
        )
    return CheckResult({ContainerHealthState.HEALTHY})


def _check_closed(view: ContainerView, replicas: list[ReplicaView], cluster: ClusterView) -> CheckResult:
    info = view.info
    required = view.required
    result = CheckResult(set())
    if not replicas:
        result.states.add(ContainerHealthState.MISSING)
        result.reason = "no replicas reported"
        return result

    # EmptyContainerHandler
    if (
        info.state == CLOSED
        and info.numberOfKeys == 0
        and all(r.is_empty and r.key_count == 0 and r.state == R_CLOSED for r in replicas)
    ):
        result.states.add(ContainerHealthState.EMPTY)
        result.lifecycle_event = DELETE
        result.commands = [PlannedCommand("delete", r.datanode) for r in replicas if r.datanode not in view.pending.deletes]
        result.reason = "CLOSED container with only empty replicas"
        return result

    good = [r for r in replicas if _matches(info.state, r.state)]
    bad = [r for r in replicas if r.state in (R_UNHEALTHY, R_INVALID)]
    classified = {r.datanode for r in good} | {r.datanode for r in bad}
    mismatched = [r for r in replicas if r.datanode not in classified]

    # MismatchedReplicasHandler: replicas of a CLOSED container still open/closing/quasi-closed
    if info.state == CLOSED:
        for r in mismatched:
            if r.usable_source and r.sequence_id >= info.sequenceId:
                result.commands.append(PlannedCommand("close", r.datanode, force=r.state == R_QUASI_CLOSED))
                good.append(r)  # same data: counts towards replication
    else:
        good.extend(r for r in mismatched if r.state in (R_OPEN, R_CLOSING))

    # QuasiClosedContainerHandler
    if info.state == QUASI_CLOSED:
        qc = [r for r in good if r.state == R_QUASI_CLOSED]
        best = max((r.sequence_id for r in qc), default=0)
        origins = {r.origin or r.datanode for r in qc if r.sequence_id == best}
        if qc and len(origins) > required // 2:
            result.commands.extend(
                PlannedCommand("close", r.datanode, force=True) for r in qc if r.sequence_id == best and r.usable_source
            )
            result.reason = "quasi-closed replicas from a majority of origins: force close"
        else:
            result.states.add(ContainerHealthState.QUASI_CLOSED_STUCK)
            result.reason = f"quasi-closed replicas from only {len(origins)} origin(s); need > {required // 2}"

    in_service = [r for r in good if r.in_service]
    maint = [r for r in good if r.maintenance]
    needed = required
    if maint:
        needed = max(min(cluster.maintenance_replica_minimum, required), required - len(maint))

    if not good:
        result.states.add(ContainerHealthState.UNHEALTHY)
        result.reason = "all replicas are unhealthy"
        return result

    pending_adds = len(view.pending.adds)
    pending_deletes = len(view.pending.deletes)
    holders = {r.datanode for r in replicas} | set(view.pending.adds)

    if len(in_service) < needed:
        result.states.add(ContainerHealthState.UNDER_REPLICATED)
        if bad:
            result.states.add(ContainerHealthState.UNHEALTHY)
        missing = needed - len(in_service) - pending_adds
        sources = tuple(sorted(r.datanode for r in good if r.usable_source))
        if missing > 0 and sources:
            targets = cluster.placement.choose_targets(
                cluster.nodes, [r.rack for r in good if not r.decommission], missing, cluster.load, holders
            )
            result.commands.extend(PlannedCommand("replicate", t.uuid, sources=sources) for t in targets)
            if not targets:
                # Every candidate node already holds a copy: free one holding an unhealthy copy
                # (Ozone's RatisUnderReplicationHandler removes an unhealthy replica to make room).
                room = [r for r in bad if r.datanode not in view.pending.deletes]
                result.commands.extend(PlannedCommand("delete", r.datanode, force=True) for r in room[:1])
        result.reason = result.reason or f"{len(in_service)} in-service replicas, {needed} needed"
        return result

    if bad:
        # ClosedWithUnhealthyReplicasHandler: enough good replicas, remove the bad ones.
        result.states.add(ContainerHealthState.UNHEALTHY)
        result.commands.extend(
            PlannedCommand("delete", r.datanode, force=True) for r in bad if r.datanode not in view.pending.deletes
        )
        result.reason = result.reason or "enough healthy replicas; deleting unhealthy ones"
        return result

    excess = len(in_service) - required - pending_deletes
    if excess > 0 and not maint and not any(r.decommission for r in good):
        result.states.add(ContainerHealthState.OVER_REPLICATED)
        result.commands.extend(
            PlannedCommand("delete", d)
            for d in _choose_deletions([r for r in in_service if r.datanode not in view.pending.deletes], excess, cluster)
        )
        result.reason = result.reason or f"{len(in_service)} replicas, {required} required"
        return result
    if len(in_service) > required:
        result.states.add(ContainerHealthState.OVER_REPLICATED)
        return result

    racks = [r.rack for r in in_service]
    if not cluster.placement.is_policy_satisfied(racks, required, cluster.rack_count):
        result.states.add(ContainerHealthState.MIS_REPLICATED)
        sources = tuple(sorted(r.datanode for r in in_service if r.usable_source))
        if pending_adds == 0 and sources:
            other_rack_nodes = [n for n in cluster.nodes if n.rack not in set(racks)]
            targets = cluster.placement.choose_targets(other_rack_nodes, racks, 1, cluster.load, holders)
            result.commands.extend(PlannedCommand("replicate", t.uuid, sources=sources) for t in targets)
        result.reason = result.reason or f"replicas on {len(set(racks))} rack(s); placement wants more"
        return result

    if not result.states:
        result.states.add(ContainerHealthState.HEALTHY)
    return result


def _choose_deletions(candidates: list[ReplicaView], excess: int, cluster: ClusterView) -> list[str]:
    """Delete from the most crowded racks first, never dropping below two racks if we have them."""
    remaining = list(candidates)
    chosen: list[str] = []
    for _ in range(excess):
        if not remaining:
            break
        rack_count = Counter(r.rack for r in remaining)
        ordered = sorted(remaining, key=lambda r: (-rack_count[r.rack], r.datanode))
        pick = None
        for r in ordered:
            rest = [x.rack for x in remaining if x is not r]
            if cluster.placement.is_policy_satisfied(rest, len(rest), cluster.rack_count) or len(set(rest)) >= len(
                set(x.rack for x in remaining)
            ):
                pick = r
                break
        pick = pick or ordered[0]
        chosen.append(pick.datanode)
        remaining.remove(pick)
    return chosen


__all__ = [  # the views are re-exported: callers import the check and its values from here
    "PRIMARY_ORDER",
    "CheckResult",
    "ClusterView",
    "ContainerHealthState",
    "ContainerView",
    "PendingView",
    "PlannedCommand",
    "ReplicaView",
    "check_container",
]
