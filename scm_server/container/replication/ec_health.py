"""Erasure-coded container health: a pure decision per CLOSED EC container.

An EC container of ``rs-3-2`` lives as five replicas, each holding one position of every stripe:
its *replica index* 1..d+p. It is healthy when every index sits on an in-service live datanode;
any ``data`` distinct indexes are enough to rebuild the others. Counting follows Ozone's
``ECContainerReplicaCount``:

* replicas on DEAD datanodes are gone (the caller drops them; IN_MAINTENANCE ones are kept), and
  UNHEALTHY or INVALID replicas never count;
* an index counts as present when an in-service replica holds it (less the replicas a pending
  delete will remove) or a pending add will create it;
* an index only on DECOMMISSIONING/DECOMMISSIONED nodes must be copied elsewhere (a replicate
  command, not a reconstruction: the data is still there to read);
* indexes only on maintenance nodes may stay there while the container keeps
  ``hdds.scm.replication.maintenance.remaining.redundancy`` parity in service; beyond that they
  are copied too;
* any other index absent is *missing*: with ``data`` distinct indexes available as sources, one
  reconstruct command (Ozone's ``ReconstructECContainersCommand``) rebuilds all missing indexes,
  one target each; fewer than ``data`` is MISSING (unrecoverable).

Then, as in Ozone's handler order: under-replication first (ECUnderReplicationHandler), then
unhealthy replicas of a container with every index healthy are deleted, then over-replication:
an index on more than one in-service node loses the extra copies to delete-container commands
carrying the index, taken from the racks holding the most replicas (ECOverReplicationHandler);
last, the rack spread: replicas on fewer racks than the EC placement policy
(``ozone.scm.container.placement.ec.impl``) requires are MIS_REPLICATED, and one copy per crowded
replica goes to a new rack, whose duplicate index the over-replication step then removes from the
crowded rack (ECMisReplicationCheckHandler, ECMisReplicationHandler).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from scm_server.container.container_manager import (
    R_CLOSED,
    R_CLOSING,
    R_INVALID,
    R_OPEN,
    R_QUASI_CLOSED,
    R_UNHEALTHY,
)
from scm_server.container.container_state_manager import CLOSED, DELETE
from scm_server.container.replication.views import (
    CheckResult,
    ClusterView,
    ContainerHealthState,
    ContainerView,
    PlannedCommand,
    ReplicaView,
)
from scm_server.pipeline.placement import max_replicas_per_rack

# the order sources are preferred in: an in-service replica, then one leaving, then one in maintenance
_IN_SERVICE, _DECOMMISSION, _MAINTENANCE = 0, 1, 2


@dataclass(frozen=True)
class ECReplicaCount:
    """Which replica indexes of one EC container are where (Ozone's ECContainerReplicaCount)."""

    data: int
    parity: int
    in_service: dict[int, tuple[ReplicaView, ...]]  # index -> good in-service replicas, pending deletes left out
    decommission: dict[int, tuple[ReplicaView, ...]]
    maintenance: dict[int, tuple[ReplicaView, ...]]
    pending_add_indexes: frozenset[int]
    maintenance_redundancy: int

    @property
    def all_indexes(self) -> range:
        return range(1, self.data + self.parity + 1)

    def _covered(self) -> set[int]:
        return set(self.in_service) | set(self.pending_add_indexes)

    def missing_indexes(self) -> tuple[int, ...]:
        """Indexes on no live node at all: only a reconstruction brings them back."""
        held = self._covered() | set(self.decommission) | set(self.maintenance)
        return tuple(i for i in self.all_indexes if i not in held)

    def decommission_only_indexes(self) -> tuple[int, ...]:
        covered = self._covered()
        return tuple(sorted(i for i in self.decommission if i not in covered))

    def maintenance_copies_needed(self) -> tuple[int, ...]:
        """Indexes only on maintenance nodes that must be copied so that ``maintenance_redundancy``
        parity stays in service (Ozone: ``additionalMaintenanceCopiesNeeded``); indexes readable now
        (on a node still heartbeating) first."""
        covered = self._covered() | set(self.decommission)
        only = sorted(
            (i for i in self.maintenance if i not in covered),
            key=lambda i: (not any(r.usable_source for r in self.maintenance[i]), i),
        )
        allowed = max(0, self.parity - min(self.parity, self.maintenance_redundancy))
        return tuple(only[: max(0, len(only) - allowed)])

    def available_indexes(self) -> set[int]:
        return set(self.in_service) | set(self.decommission) | set(self.maintenance)

    def is_unrecoverable(self) -> bool:
        return len(self.available_indexes()) < self.data

    def over_replicated_indexes(self) -> tuple[int, ...]:
        return tuple(sorted(i for i, rs in self.in_service.items() if len(rs) > 1))

    def is_sufficiently_replicated(self) -> bool:
        return not (self.missing_indexes() or self.decommission_only_indexes() or self.maintenance_copies_needed())


def _good(container_state: int, replica: ReplicaView) -> bool:
    """Every replica but an UNHEALTHY or INVALID one holds its index's data: a CLOSED container's replicas
    still OPEN, CLOSING or QUASI_CLOSED (Ozone's datanodes quasi-close EC replicas whose pipeline is gone)
    count, and are told to close."""
    return replica.state not in (R_UNHEALTHY, R_INVALID)


def count_ec_replicas(view: ContainerView, replicas: Sequence[ReplicaView], maintenance_redundancy: int) -> ECReplicaCount:
    """Group the good replicas of ``view`` by index and operational state; ``replicas`` are those
    the caller kept (no DEAD node unless IN_MAINTENANCE). A replica index outside 1..d+p is ignored."""
    ec = view.info.ecReplicationConfig
    width = ec.data + ec.parity
    groups: list[dict[int, list[ReplicaView]]] = [defaultdict(list), defaultdict(list), defaultdict(list)]
    for r in replicas:
        if not 1 <= r.replica_index <= width or not _good(view.info.state, r):
            continue
        if r.in_service:
            if r.datanode in view.pending.deletes:
                continue
            groups[_IN_SERVICE][r.replica_index].append(r)
        elif r.decommission:
            groups[_DECOMMISSION][r.replica_index].append(r)
        elif r.maintenance:
            groups[_MAINTENANCE][r.replica_index].append(r)
    frozen = [{i: tuple(sorted(rs, key=lambda r: r.datanode)) for i, rs in g.items()} for g in groups]
    return ECReplicaCount(
        data=ec.data,
        parity=ec.parity,
        in_service=frozen[_IN_SERVICE],
        decommission=frozen[_DECOMMISSION],
        maintenance=frozen[_MAINTENANCE],
        pending_add_indexes=frozenset(i for i in view.pending.add_indexes if 1 <= i <= width),
        maintenance_redundancy=maintenance_redundancy,
    )


def _source_for(count: ECReplicaCount, index: int) -> ReplicaView | None:
    """One replica of ``index`` that can be read now (a live, not stale, node), preferring in-service."""
    for group in (count.in_service, count.decommission, count.maintenance):
        for r in group.get(index, ()):
            if r.usable_source:
                return r
    return None


def check_closed_ec(view: ContainerView, replicas: Sequence[ReplicaView], cluster: ClusterView) -> CheckResult:
    """Classify one EC container that is neither OPEN, CLOSING, DELETING nor DELETED; ``replicas``
    exclude DEAD nodes (IN_MAINTENANCE ones kept), as :func:`health.check_container` passes them."""
    info = view.info
    result = CheckResult(set())
    if not replicas:
        result.states.add(ContainerHealthState.MISSING)
        result.reason = "no replicas reported"
        return result

    # EmptyContainerHandler: a CLOSED container without keys whose replicas are all empty
    if (
        info.state == CLOSED
        and info.numberOfKeys == 0
        and all(r.is_empty and r.key_count == 0 and r.state == R_CLOSED for r in replicas)
    ):
        result.states.add(ContainerHealthState.EMPTY)
        result.lifecycle_event = DELETE
        result.commands = [
            PlannedCommand("delete", r.datanode, replica_index=r.replica_index)
            for r in replicas
            if r.datanode not in view.pending.deletes
        ]
        result.reason = "CLOSED container with only empty replicas"
        return result

    # Mismatched replicas of a CLOSED container: close them (they hold the same data; a quasi-closed one
    # only closes when forced)
    if info.state == CLOSED:
        result.commands.extend(
            PlannedCommand("close", r.datanode, force=r.state == R_QUASI_CLOSED)
            for r in replicas
            if r.state in (R_OPEN, R_CLOSING, R_QUASI_CLOSED) and r.usable_source
        )

    count = count_ec_replicas(view, replicas, cluster.maintenance_remaining_redundancy)
    if count.is_unrecoverable():
        result.states.add(ContainerHealthState.MISSING)
        result.reason = (
            f"only {len(count.available_indexes())} of the {count.data} data indexes needed are available; "
            "the container cannot be reconstructed"
        )
        return result

    bad = [r for r in replicas if r.state in (R_UNHEALTHY, R_INVALID) and r.datanode not in view.pending.deletes]
    if not count.is_sufficiently_replicated():
        result.states.add(ContainerHealthState.UNDER_REPLICATED)
        if bad:
            result.states.add(ContainerHealthState.UNHEALTHY)
        result.commands.extend(_under_replication_commands(view, replicas, count, cluster))
        result.reason = _under_reason(count)
        return result

    if bad:
        result.states.add(ContainerHealthState.UNHEALTHY)
        result.commands.extend(
            PlannedCommand("delete", r.datanode, force=True, replica_index=r.replica_index) for r in bad
        )
        result.reason = "every index is healthy; deleting unhealthy replicas"
        return result

    over = count.over_replicated_indexes()
    if over:
        result.states.add(ContainerHealthState.OVER_REPLICATED)
        # ECOverReplicationHandler: the extra copies go from the racks holding the most replicas
        in_service = [r for i in sorted(count.in_service) for r in count.in_service[i]]
        victims = cluster.ec_placement.replicas_to_remove_to_fix_overreplication(
            [(r.replica_index, r.rack) for r in in_service]
        )
        result.commands.extend(
            PlannedCommand("delete", r.datanode, force=True, replica_index=r.replica_index)
            for r in (in_service[p] for p in sorted(victims))
        )
        result.reason = f"index(es) {', '.join(map(str, over))} on more than one in-service datanode"
        return result

    staying = [r for i in sorted(count.in_service) for r in count.in_service[i]]
    if _check_mis_replication(view, staying, cluster, result):
        return result

    result.states.add(ContainerHealthState.HEALTHY)
    return result


def _check_mis_replication(
    view: ContainerView, replicas: Sequence[ReplicaView], cluster: ClusterView, result: CheckResult
) -> bool:
    """Ozone's ECMisReplicationCheckHandler and ECMisReplicationHandler, for a container neither under- nor
    over-replicated.

    ``replicas`` are its in-service ones, those that stay (a decommissioning or maintenance copy is leaving,
    and the over-replication step weighs racks by in-service replicas too, so the two agree on which copy
    is crowded). Their racks must satisfy the EC placement policy (RackScatter: ``min(d+p, racks)`` racks,
    none holding more than its share). If not, MIS_REPLICATED; with no work pending on the container, the
    replicas the policy picks (copyable: CLOSED, on a healthy in-service node) are copied, index and all, to
    targets the policy chooses on racks below their share; the over-replication check then deletes the copy
    on the crowded rack, so the replica moves. Pending work, whether or not it fixes the spread, is waited
    for."""
    width = view.required
    racks = [r.rack for r in replicas]
    if cluster.ec_placement.is_policy_satisfied(racks, width, cluster.rack_count):
        return False
    result.states.add(ContainerHealthState.MIS_REPLICATED)
    pending = view.pending
    if pending.adds or pending.deletes:
        after = [r.rack for r in replicas if r.datanode not in pending.deletes]
        after += [cluster.racks_by_uuid[u] for u in sorted(pending.adds) if u in cluster.racks_by_uuid]
        fixed = cluster.ec_placement.is_policy_satisfied(after, width, cluster.rack_count)
        wait = "the pending copies fix the spread" if fixed else "waiting for pending work before moving a replica"
        result.reason = f"replicas on {len(set(racks))} rack(s); {wait}"
        return True
    ordered = sorted(replicas, key=lambda r: (r.replica_index, r.datanode))
    copy = cluster.ec_placement.replicas_to_copy_to_fix_misreplication(
        [(r.rack, r.state == R_CLOSED and r.usable_source and r.in_service) for r in ordered], cluster.rack_count
    )
    moving = [ordered[p] for p in copy]
    staying = [r for r in ordered if r not in moving]
    chosen = cluster.ec_placement.choose_targets(
        cluster.nodes, [r.rack for r in staying], len(moving), cluster.load, {r.datanode for r in view.replicas}
    )
    # a target helps only on a rack still below its share (the policy falls back to any node when no rack
    # fits; a copy there would be deleted again by the over-replication step)
    share = max_replicas_per_rack(width, cluster.ec_placement.required_rack_count(width, cluster.rack_count))
    per_rack = Counter(r.rack for r in staying)
    targets = []
    for target in chosen:
        if per_rack[target.rack] < share:
            per_rack[target.rack] += 1
            targets.append(target)
    result.commands.extend(
        PlannedCommand("replicate", target.uuid, sources=(source.datanode,), replica_index=source.replica_index)
        for source, target in zip(moving, targets, strict=False)
    )
    spread = f"replicas on {len(set(racks))} rack(s) of {cluster.rack_count}"
    if targets:
        result.reason = f"{spread}; moving index(es) {_indexes(r.replica_index for r in moving[: len(targets)])}"
    else:
        result.reason = f"{spread}; no target on another rack"
    return True


def _under_reason(count: ECReplicaCount) -> str:
    parts = []
    if count.missing_indexes():
        parts.append(f"missing index(es) {_indexes(count.missing_indexes())}")
    if count.decommission_only_indexes():
        parts.append(f"index(es) {_indexes(count.decommission_only_indexes())} only on decommissioning nodes")
    if count.maintenance_copies_needed():
        parts.append(f"index(es) {_indexes(count.maintenance_copies_needed())} only on maintenance nodes")
    return "; ".join(parts)


def _indexes(values: Iterable[int]) -> str:
    return ", ".join(str(i) for i in values)


def _under_replication_commands(
    view: ContainerView, replicas: Sequence[ReplicaView], count: ECReplicaCount, cluster: ClusterView
) -> list[PlannedCommand]:
    """Ozone's ECUnderReplicationHandler: reconstruct the missing indexes, then copy the indexes
    that only decommissioning or maintenance nodes hold. Targets never hold a replica of the
    container already, nor are about to."""
    commands: list[PlannedCommand] = []
    excluded = {r.datanode for r in replicas} | set(view.pending.adds)
    used_racks = [r.rack for rs in count.in_service.values() for r in rs]

    def targets_for(n: int) -> list[str]:
        chosen = cluster.ec_placement.choose_targets(cluster.nodes, used_racks, n, cluster.load, excluded)
        for node in chosen:
            excluded.add(node.uuid)
            used_racks.append(node.rack)
        return [node.uuid for node in chosen]

    missing = count.missing_indexes()
    if missing:
        sources = [(i, _source_for(count, i)) for i in sorted(count.available_indexes())]
        readable = tuple((r.datanode, i) for i, r in sources if r is not None)
        if len(readable) >= count.data:
            targets = targets_for(len(missing))
            if targets:  # fewer targets than missing indexes: rebuild what we can now (Ozone does too)
                commands.append(
                    PlannedCommand(
                        "reconstruct",
                        targets[0],
                        targets=tuple(targets),
                        missing_indexes=tuple(missing[: len(targets)]),
                        indexed_sources=readable,
                    )
                )
    for index in count.decommission_only_indexes() + count.maintenance_copies_needed():
        source = _source_for(count, index)
        if source is None:
            continue
        for target in targets_for(1):
            commands.append(PlannedCommand("replicate", target, sources=(source.datanode,), replica_index=index))
    return commands


__all__ = ["ECReplicaCount", "check_closed_ec", "count_ec_replicas"]
