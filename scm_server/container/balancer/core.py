"""ContainerBalancer's decisions, pure: which containers move where in one iteration (Ozone's ContainerBalancerTask).

Given the datanodes' usage and the containers with their replicas, :func:`plan_iteration` picks moves, each one
container from a source datanode to a target datanode, deterministically (the same view gives the same plan,
whatever order it arrives in). No I/O, no clock, no randomness: the service (``container_balancer.py``) gathers
the view from the managers and issues the commands.

Words as Ozone uses them: a datanode's *utilization* is used / capacity; the cluster's *average* is the sum of used
over the sum of capacity of the datanodes taking part; with the *threshold* ``t`` (a fraction here; Ozone's key
``hdds.container.balancer.utilization.threshold`` holds a percentage), a datanode is *over-utilized* above
``average + t``, *under-utilized* below ``average - t``, and the cluster is *balanced* when none is either.

The rules every move keeps (the property tests check each):

* the container is movable (the caller says so: CLOSED, all its replicas there, no replication or move in
  flight, not excluded) and moves at most once per iteration;
* the source holds a replica, the target does not: a replica is never placed where one already is, and the
  replica count stays the same once the move completes (replicate to the target first, then delete from the
  source), so it never drops below the replication factor;
* the replicas' racks: the set after the move spans no fewer racks than before (no rack violation);
* it fixes an imbalance: the source is over-utilized or the target is under-utilized;
* it does not overshoot: after the move the target is at most the upper limit and the source at least the lower
  limit, and the move lowers the spread. With ``u`` utilizations, ``c`` capacities and ``m`` the average,
  ``Phi = sum(c_i * (u_i - m)**2)`` changes by ``s * ((u_t' - u_s') + (u_t - u_s))`` for a move of ``s`` bytes
  from source ``s`` to target ``t`` (primes: after the move), so a move is taken only when
  ``u_t' - u_s' < u_s - u_t``: whatever the target ends above the source is less than the gap the move closes.
  Every move lowers ``Phi``, so repeated iterations never come back to a placement: balancing converges;
* the iteration's limits: bytes moved in total (``size.moved.max.per.iteration``), bytes entering one target
  (``size.entering.target.max``), bytes leaving one source (``size.leaving.source.max``), and datanodes involved
  (``datanodes.involved.max.percentage.per.iteration`` of the datanodes taking part, rounded down, as Ozone does).

The greedy order: the most utilized source first (by its projected utilization as moves accumulate), its
containers largest first (then by id), the least utilized target first (then by uuid).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class NodeUsage:
    """A datanode taking part in balancing: its id, rack and space."""

    uuid: str
    capacity: int
    used: int
    rack: str = "/default-rack"

    @property
    def utilization(self) -> float:
        return self.used / self.capacity if self.capacity > 0 else 0.0


@dataclass(frozen=True)
class ContainerReplicas:
    """A container as the balancer sees it: its size, replication factor and where its replicas are."""

    container_id: int
    size: int
    replication_factor: int
    replicas: frozenset[str]
    movable: bool = True  # CLOSED, fully replicated, nothing in flight, not excluded (the caller decides)


@dataclass(frozen=True)
class BalancerLimits:
    """One iteration's parameters (Ozone's ``hdds.container.balancer.*`` values, threshold as a fraction)."""

    threshold: float = 0.10
    max_datanodes_ratio: float = 0.20
    max_size_per_iteration: int = 500 << 30
    max_size_entering_target: int = 26 << 30
    max_size_leaving_source: int = 26 << 30


@dataclass(frozen=True)
class Move:
    container_id: int
    source: str
    target: str
    size: int


@dataclass(frozen=True)
class IterationPlan:
    """What one iteration will do: the moves (in order), and the view's classification before them."""

    moves: tuple[Move, ...]
    average: float
    over_utilized: tuple[str, ...]
    under_utilized: tuple[str, ...]
    datanodes_involved: tuple[str, ...] = field(default=())

    @property
    def balanced(self) -> bool:
        return not self.over_utilized and not self.under_utilized

    @property
    def size_scheduled(self) -> int:
        return sum(m.size for m in self.moves)


def average_utilization(nodes: Iterable[NodeUsage]) -> float:
    nodes = list(nodes)
    capacity = sum(n.capacity for n in nodes)
    return sum(n.used for n in nodes) / capacity if capacity > 0 else 0.0


def classify(nodes: Sequence[NodeUsage], threshold: float) -> tuple[float, tuple[str, ...], tuple[str, ...]]:
    """(average, over-utilized uuids, under-utilized uuids), each sorted by uuid."""
    avg = average_utilization(nodes)
    over = tuple(sorted(n.uuid for n in nodes if n.utilization > avg + threshold))
    under = tuple(sorted(n.uuid for n in nodes if n.utilization < avg - threshold))
    return avg, over, under


def unbalanced_bytes(nodes: Sequence[NodeUsage], threshold: float) -> int:
    """The data out of balance, as Ozone's balancer measures it at an iteration's start: the bytes the
    over-utilized datanodes hold above the upper limit or the under-utilized ones lack below the lower limit,
    whichever is more."""
    avg = average_utilization(nodes)
    upper, lower = avg + threshold, avg - threshold
    over = sum(n.capacity * (n.utilization - upper) for n in nodes if n.utilization > upper)
    under = sum(n.capacity * (lower - n.utilization) for n in nodes if n.utilization < lower)
    return int(max(over, under))


def phi(nodes: Sequence[NodeUsage]) -> float:
    """The capacity-weighted spread of utilizations around the average that every move lowers."""
    avg = average_utilization(nodes)
    return sum(n.capacity * (n.utilization - avg) ** 2 for n in nodes)


def _racks(replicas: Iterable[str], rack_of: dict[str, str]) -> int:
    return len({rack_of.get(r, "") for r in replicas})


def plan_iteration(
    nodes: Sequence[NodeUsage], containers: Sequence[ContainerReplicas], limits: BalancerLimits
) -> IterationPlan:
    """The moves of one iteration over this view (see the module's rules)."""
    by_uuid = {n.uuid: n for n in sorted(nodes, key=lambda n: n.uuid)}
    avg, over, under = classify(list(by_uuid.values()), limits.threshold)
    upper, lower = avg + limits.threshold, avg - limits.threshold
    rack_of = {u: n.rack for u, n in by_uuid.items()}
    used = {u: n.used for u, n in by_uuid.items()}
    capacity = {u: n.capacity for u, n in by_uuid.items() if n.capacity > 0}
    where: dict[int, frozenset[str]] = {}
    on_node: dict[str, list[ContainerReplicas]] = {u: [] for u in by_uuid}
    for c in sorted(containers, key=lambda c: (-c.size, c.container_id)):
        where[c.container_id] = c.replicas
        if not c.movable or len(c.replicas) < c.replication_factor or c.size <= 0:
            continue
        for r in c.replicas:
            if r in on_node:
                on_node[r].append(c)
    max_involved = int(limits.max_datanodes_ratio * len(by_uuid))
    involved: set[str] = set()
    entering: dict[str, int] = {}
    leaving: dict[str, int] = {}
    moved: set[int] = set()
    total = 0
    moves: list[Move] = []

    def util(u: str) -> float:
        return used[u] / capacity[u]

    def feasible(c: ContainerReplicas, source: str, target: str) -> bool:
        if target in where[c.container_id] or source not in where[c.container_id]:
            return False
        if total + c.size > limits.max_size_per_iteration:
            return False
        if leaving.get(source, 0) + c.size > limits.max_size_leaving_source:
            return False
        if entering.get(target, 0) + c.size > limits.max_size_entering_target:
            return False
        if len(involved | {source, target}) > max_involved:
            return False
        if not (util(source) > upper or util(target) < lower):
            return False  # neither end is unbalanced: nothing to fix
        source_after = (used[source] - c.size) / capacity[source]
        target_after = (used[target] + c.size) / capacity[target]
        if target_after > upper or source_after < lower:
            return False
        if target_after - source_after >= util(source) - util(target):
            return False  # would not lower Phi: the overshoot is as large as the gap it closes
        after = (where[c.container_id] - {source}) | {target}
        return _racks(after, rack_of) >= _racks(where[c.container_id], rack_of)

    # Every limit only tightens as moves accumulate, and every node's utilization moves only away from what would
    # make a move possible (a source's falls, a target's rises): a (container, source) pair that finds no target
    # finds none later in the iteration, unless a new target appears. So each source keeps a cursor into its
    # containers, and a source with none left is done, unless it receives a container (its utilization rises):
    # then it is looked at afresh; and every source is, when a source falls below the average (a new target). The plan
    # is the one the plain greedy search gives (the property tests compare them), found in one pass over each
    # source's containers instead of one per move.
    cursor: dict[str, int] = {}
    done: set[str] = set()
    while True:
        chosen: Move | None = None
        sources = sorted((u for u in capacity if util(u) > avg and u not in done), key=lambda u: (-util(u), u))
        targets = sorted((u for u in capacity if util(u) < avg), key=lambda u: (util(u), u))
        for source in sources:
            candidates = targets if util(source) > upper else [t for t in targets if util(t) < lower]
            with_source = len(involved | {source})
            if with_source > max_involved:
                candidates = []
            elif with_source == max_involved:  # (feasible's datanode limit, once per source)
                candidates = [t for t in candidates if t in involved]
            held = on_node[source]
            i = cursor.get(source, 0) if candidates else len(held)
            while i < len(held):
                c = held[i]
                room = min(limits.max_size_per_iteration - total, limits.max_size_leaving_source - leaving.get(source, 0))
                if c.container_id not in moved and c.size <= room:  # (feasible's own size checks, once per container)
                    target = next((t for t in candidates if feasible(c, source, t)), None)
                    if target is not None:
                        chosen = Move(c.container_id, source, target, c.size)
                        break
                i += 1
            cursor[source] = i + 1 if chosen is not None else i
            if chosen is not None:
                break
            done.add(source)
        if chosen is None:
            break
        cursor.pop(chosen.target, None)
        done.discard(chosen.target)
        moves.append(chosen)
        moved.add(chosen.container_id)
        involved |= {chosen.source, chosen.target}
        total += chosen.size
        leaving[chosen.source] = leaving.get(chosen.source, 0) + chosen.size
        entering[chosen.target] = entering.get(chosen.target, 0) + chosen.size
        used[chosen.source] -= chosen.size
        used[chosen.target] += chosen.size
        where[chosen.container_id] = (where[chosen.container_id] - {chosen.source}) | {chosen.target}
        if util(chosen.source) < avg:
            # the source fell below the average: a new target, which may take containers the other sources could
            # place nowhere before; they are looked at afresh
            cursor.clear()
            done.clear()
    return IterationPlan(tuple(moves), avg, over, under, tuple(sorted(involved)))


def apply_moves(
    nodes: Sequence[NodeUsage], containers: Sequence[ContainerReplicas], moves: Iterable[Move]
) -> tuple[list[NodeUsage], list[ContainerReplicas]]:
    """The view once ``moves`` completed (each: a replica added on the target, then removed from the source)."""
    used = {n.uuid: n.used for n in nodes}
    where = {c.container_id: c.replicas for c in containers}
    for m in moves:
        used[m.source] -= m.size
        used[m.target] += m.size
        where[m.container_id] = (where[m.container_id] - {m.source}) | {m.target}
    return (
        [replace(n, used=used[n.uuid]) for n in nodes],
        [replace(c, replicas=where[c.container_id]) for c in containers],
    )
