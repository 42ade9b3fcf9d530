"""ContainerBalancer's pure planner: examples, and properties over random clusters (hypothesis)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from scm_server.container.balancer.core import (
    BalancerLimits,
    ContainerReplicas,
    Move,
    NodeUsage,
    apply_moves,
    classify,
    phi,
    plan_iteration,
    unbalanced_bytes,
)

GB = 1 << 30
WIDE = BalancerLimits(threshold=0.05, max_datanodes_ratio=1.0, max_size_per_iteration=1 << 50,
                      max_size_entering_target=1 << 50, max_size_leaving_source=1 << 50)


def _cluster(used_by_node: dict[str, list[int]], capacity: int = 100 * GB, racks: int = 1,
             factor: int = 1) -> tuple[list[NodeUsage], list[ContainerReplicas]]:
    """Nodes holding containers of the given sizes (GB); with factor > 1 each container also sits on the next
    factor-1 nodes in name order."""
    names = sorted(used_by_node)
    containers: list[ContainerReplicas] = []
    cid = 0
    for i, name in enumerate(names):
        for size in used_by_node[name]:
            cid += 1
            holders = frozenset(names[(i + k) % len(names)] for k in range(factor))
            containers.append(ContainerReplicas(cid, size * GB, factor, holders))
    used = {n: 0 for n in names}
    for c in containers:
        for r in c.replicas:
            used[r] += c.size
    nodes = [NodeUsage(n, capacity, used[n], f"/rack{i % racks}") for i, n in enumerate(names)]
    return nodes, containers


def test_moves_from_the_over_utilized_to_the_under_utilized_node() -> None:
    nodes, containers = _cluster({"dn1": [10] * 8, "dn2": [10] * 2, "dn3": [10] * 5})
    plan = plan_iteration(nodes, containers, WIDE)
    assert plan.over_utilized == ("dn1",) and plan.under_utilized == ("dn2",)
    # average 0.5, limits 0.45..0.55; dn3 sits at the average (no target); dn1 gives dn2 three containers, the
    # last one leaving both exactly at the average
    assert [(m.source, m.target) for m in plan.moves] == [("dn1", "dn2")] * 3
    after, _ = apply_moves(nodes, containers, plan.moves)
    assert classify(after, WIDE.threshold)[1:] == ((), ())


def test_a_move_may_overshoot_by_less_than_the_gap_it_closes() -> None:
    """0.62 and 0.38 around 0.5 (limits 0.4..0.6): 20 GB lands the target at 0.58 and the source at 0.42, inside
    both limits and a smaller spread (Phi 0.0576 -> 0.0256 per GB of capacity); 30 GB would not be (0.68)."""
    nodes = [NodeUsage("a", 100 * GB, 62 * GB), NodeUsage("b", 100 * GB, 38 * GB)]
    limits = BalancerLimits(threshold=0.10, max_datanodes_ratio=1.0)
    small = [ContainerReplicas(1, 20 * GB, 1, frozenset({"a"}))]
    assert [(m.source, m.target) for m in plan_iteration(nodes, small, limits).moves] == [("a", "b")]
    large = [ContainerReplicas(1, 30 * GB, 1, frozenset({"a"}))]
    assert plan_iteration(nodes, large, limits).moves == ()
    # unequal capacities (average 0.4992, limits 0.3992..0.5992): 20 GB from a (0.61) to b (0.465, the least
    # utilized) would land b at 0.565 and a at 0.41, an overshoot of 0.155 for a gap of 0.145: the spread would
    # grow, so b is passed over for c (0.495 -> 0.515: 0.105 for a gap of 0.115)
    nodes = [NodeUsage("a", 100 * GB, 61 * GB), NodeUsage("b", 200 * GB, 93 * GB),
             NodeUsage("c", 1000 * GB, 495 * GB)]
    plan = plan_iteration(nodes, [ContainerReplicas(1, 20 * GB, 1, frozenset({"a"}))], limits)
    assert [(m.source, m.target) for m in plan.moves] == [("a", "c")]
    assert phi(apply_moves(nodes, [ContainerReplicas(1, 20 * GB, 1, frozenset({"a"}))], plan.moves)[0]) < phi(nodes)


def test_a_balanced_cluster_plans_nothing() -> None:
    nodes, containers = _cluster({"dn1": [10] * 5, "dn2": [10] * 5, "dn3": [10] * 5})
    plan = plan_iteration(nodes, containers, WIDE)
    assert plan.balanced and plan.moves == ()


def test_limits_of_one_iteration() -> None:
    nodes, containers = _cluster({"dn1": [5] * 16, "dn2": [], "dn3": [], "dn4": [5] * 4})
    limits = BalancerLimits(threshold=0.05, max_datanodes_ratio=1.0, max_size_per_iteration=40 * GB,
                            max_size_entering_target=15 * GB, max_size_leaving_source=30 * GB)
    plan = plan_iteration(nodes, containers, limits)
    assert 0 < plan.size_scheduled <= 30 * GB
    for target in {m.target for m in plan.moves}:
        assert sum(m.size for m in plan.moves if m.target == target) <= 15 * GB
    # 20% of 4 datanodes is 0 (rounded down, as Ozone does): nothing may move
    assert plan_iteration(nodes, containers, BalancerLimits(threshold=0.05)).moves == ()
    # half of them: one source and one target
    half = plan_iteration(nodes, containers, BalancerLimits(threshold=0.05, max_datanodes_ratio=0.5,
                                                            max_size_entering_target=1 << 50,
                                                            max_size_leaving_source=1 << 50))
    assert len(half.datanodes_involved) == 2 and half.moves


def test_no_move_reduces_the_racks_a_container_spans() -> None:
    # three racks, replicas on dn1 (/rack0) and dn2 (/rack1); dn4 is on /rack0 too
    nodes = [NodeUsage("dn1", 100, 90, "/rack0"), NodeUsage("dn2", 100, 50, "/rack1"),
             NodeUsage("dn3", 100, 50, "/rack2"), NodeUsage("dn4", 100, 10, "/rack1")]
    containers = [ContainerReplicas(1, 40, 2, frozenset({"dn1", "dn2"}))]
    plan = plan_iteration(nodes, containers, WIDE)
    assert plan.moves == ()  # dn4 would leave both replicas on /rack1
    nodes[3] = NodeUsage("dn4", 100, 10, "/rack3")
    assert [(m.source, m.target) for m in plan_iteration(nodes, containers, WIDE).moves] == [("dn1", "dn4")]


def test_unmovable_and_under_replicated_containers_stay() -> None:
    nodes = [NodeUsage("dn1", 100, 80), NodeUsage("dn2", 100, 0)]
    containers = [ContainerReplicas(1, 40, 1, frozenset({"dn1"}), movable=False),
                  ContainerReplicas(2, 40, 3, frozenset({"dn1"}))]
    assert plan_iteration(nodes, containers, WIDE).moves == ()


# ---------------------------------------------------------------- properties

@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[NodeUsage], list[ContainerReplicas], BalancerLimits]:
    n = draw(st.integers(2, 7))
    factor = draw(st.integers(1, min(3, n)))
    racks = draw(st.integers(1, 3))
    names = [f"dn{i}" for i in range(n)]
    capacity = {name: draw(st.integers(50, 200)) * GB for name in names}
    containers = []
    used = dict.fromkeys(names, 0)
    for cid in range(1, draw(st.integers(0, 30)) + 1):
        holders = draw(st.lists(st.sampled_from(names), min_size=factor, max_size=factor, unique=True))
        size = draw(st.integers(1, 10)) * GB
        if any(used[h] + size > capacity[h] for h in holders):
            continue
        for h in holders:
            used[h] += size
        containers.append(ContainerReplicas(cid, size, factor, frozenset(holders), movable=draw(st.sampled_from([True, True, True, False]))))
    nodes = [NodeUsage(name, capacity[name], used[name], f"/rack{i % racks}") for i, name in enumerate(names)]
    limits = BalancerLimits(
        threshold=draw(st.sampled_from([0.01, 0.05, 0.1, 0.2])),
        max_datanodes_ratio=draw(st.sampled_from([0.2, 0.5, 1.0])),
        max_size_per_iteration=draw(st.integers(1, 100)) * GB,
        max_size_entering_target=draw(st.integers(1, 50)) * GB,
        max_size_leaving_source=draw(st.integers(1, 50)) * GB,
    )
    return nodes, containers, limits


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_a_plan_keeps_every_rule(cluster: tuple[list[NodeUsage], list[ContainerReplicas], BalancerLimits]) -> None:
    nodes, containers, limits = cluster
    plan = plan_iteration(nodes, containers, limits)
    by_id = {c.container_id: c for c in containers}
    rack = {n.uuid: n.rack for n in nodes}
    assert len({m.container_id for m in plan.moves}) == len(plan.moves)  # at most once per iteration
    for move in plan.moves:
        c = by_id[move.container_id]
        assert move.source in c.replicas and move.target not in c.replicas  # never onto a holder
        after = (c.replicas - {move.source}) | {move.target}
        assert len(after) == len(c.replicas) >= c.replication_factor  # never below the factor
        assert len({rack[r] for r in after}) >= len({rack[r] for r in c.replicas})  # no rack violation
    assert plan.size_scheduled <= limits.max_size_per_iteration
    for node in {m.target for m in plan.moves}:
        assert sum(m.size for m in plan.moves if m.target == node) <= limits.max_size_entering_target
    for node in {m.source for m in plan.moves}:
        assert sum(m.size for m in plan.moves if m.source == node) <= limits.max_size_leaving_source
    assert len({m.source for m in plan.moves} | {m.target for m in plan.moves}) <= int(
        limits.max_datanodes_ratio * len(nodes)
    )
    # deterministic: the same view in another order gives the same plan
    shuffled_nodes, shuffled_containers = list(nodes), list(containers)
    random.Random(7).shuffle(shuffled_nodes)
    random.Random(8).shuffle(shuffled_containers)
    assert plan_iteration(shuffled_nodes, shuffled_containers, limits) == plan


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_balancing_converges(cluster: tuple[list[NodeUsage], list[ContainerReplicas], BalancerLimits]) -> None:
    """Iterations, each applied in full, lower the spread every time they move anything, and stop moving."""
    nodes, containers, limits = cluster
    for _ in range(200):
        plan = plan_iteration(nodes, containers, limits)
        if not plan.moves:
            break
        before = phi(nodes)
        nodes, containers = apply_moves(nodes, containers, plan.moves)
        assert phi(nodes) < before
    else:
        raise AssertionError("balancing did not stop moving within 200 iterations")
    # where it stopped, a move the rules allow is left only when one iteration's limits forbid even one move:
    # the first move a plan without limits would make is larger than a size limit, or involving two datanodes is
    # already more than the datanode limit
    wide = BalancerLimits(threshold=limits.threshold, max_datanodes_ratio=1.0, max_size_per_iteration=1 << 50,
                          max_size_entering_target=1 << 50, max_size_leaving_source=1 << 50)
    final = plan_iteration(nodes, containers, wide)
    if final.moves:
        first = final.moves[0]
        assert int(limits.max_datanodes_ratio * len(nodes)) < 2 or first.size > min(
            limits.max_size_per_iteration, limits.max_size_entering_target, limits.max_size_leaving_source)


def _plain_greedy(nodes: list[NodeUsage], containers: list[ContainerReplicas], limits: BalancerLimits) -> list[Move]:
    """The plan by the plain search the planner's cursors shortcut: after every move, from the top, every source
    (most utilized first), its movable containers (largest first), every target (least utilized first)."""
    view, cs = list(nodes), list(containers)
    moves: list[Move] = []
    moved: set[int] = set()
    involved: set[str] = set()
    while True:
        avg = sum(n.used for n in view) / sum(n.capacity for n in view)
        rack = {n.uuid: n.rack for n in view}
        by = {n.uuid: n for n in view}
        u = {n.uuid: n.utilization for n in view}
        best = None
        for src in sorted((x for x in u if u[x] > avg), key=lambda x: (-u[x], x)):
            for c in sorted(cs, key=lambda c: (-c.size, c.container_id)):
                if (c.container_id in moved or not c.movable or src not in c.replicas
                        or len(c.replicas) < c.replication_factor):
                    continue
                for tgt in sorted((x for x in u if u[x] < avg), key=lambda x: (u[x], x)):
                    s_after = (by[src].used - c.size) / by[src].capacity
                    t_after = (by[tgt].used + c.size) / by[tgt].capacity
                    after = (c.replicas - {src}) | {tgt}
                    if (tgt not in c.replicas
                            and sum(m.size for m in moves) + c.size <= limits.max_size_per_iteration
                            and sum(m.size for m in moves if m.source == src) + c.size <= limits.max_size_leaving_source
                            and sum(m.size for m in moves if m.target == tgt) + c.size <= limits.max_size_entering_target
                            and len(involved | {src, tgt}) <= int(limits.max_datanodes_ratio * len(view))
                            and (u[src] > avg + limits.threshold or u[tgt] < avg - limits.threshold)
                            and t_after <= avg + limits.threshold and s_after >= avg - limits.threshold
                            and t_after - s_after < u[src] - u[tgt]
                            and len({rack[r] for r in after}) >= len({rack[r] for r in c.replicas})):
                        best = Move(c.container_id, src, tgt, c.size)
                        break
                if best:
                    break
            if best:
                break
        if best is None:
            return moves
        moves.append(best)
        moved.add(best.container_id)
        involved |= {best.source, best.target}
        view, cs = apply_moves(view, cs, [best])


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_the_planner_finds_the_plain_greedy_plan(
        cluster: tuple[list[NodeUsage], list[ContainerReplicas], BalancerLimits]) -> None:
    nodes, containers, limits = cluster
    if not nodes or sum(n.capacity for n in nodes) == 0:
        return
    assert list(plan_iteration(nodes, containers, limits).moves) == _plain_greedy(nodes, containers, limits)


def test_a_source_that_falls_below_the_average_is_a_new_target_for_the_others() -> None:
    """Found by the property below: dn3 -> dn0, then dn0 -> dn5 leaves dn0 under the average, and dn3, which had
    found no target for its smaller containers before, moves one to dn0 (the plain greedy search does too)."""
    gib = 1 << 30
    nodes = [NodeUsage(u, c, used, r) for u, c, used, r in [
        ('dn0', 139586437120, 45097156608, '/rack0'),
        ('dn1', 93415538688, 91268055040, '/rack1'),
        ('dn2', 53687091200, 52613349376, '/rack2'),
        ('dn3', 80530636800, 79456894976, '/rack0'),
        ('dn4', 183609851904, 5368709120, '/rack1'),
        ('dn5', 204010946560, 0, '/rack2'),
    ]]
    replicas = {
        1: (1, ('dn0', 'dn1', 'dn2')),
        2: (6, ('dn1', 'dn2', 'dn3')),
        3: (1, ('dn0', 'dn1', 'dn2')),
        4: (1, ('dn0', 'dn1', 'dn2')),
        5: (3, ('dn0', 'dn1', 'dn3')),
        6: (1, ('dn0', 'dn1', 'dn2')),
        7: (8, ('dn0', 'dn1', 'dn3')),
        8: (8, ('dn0', 'dn1', 'dn3')),
        9: (4, ('dn1', 'dn2', 'dn3')),
        10: (1, ('dn0', 'dn1', 'dn2')),
        11: (1, ('dn0', 'dn1', 'dn2')),
        12: (1, ('dn1', 'dn2', 'dn3')),
        13: (2, ('dn0', 'dn1', 'dn3')),
        14: (5, ('dn1', 'dn2', 'dn3')),
        15: (4, ('dn0', 'dn1', 'dn2')),
        16: (7, ('dn1', 'dn2', 'dn3')),
        17: (8, ('dn1', 'dn2', 'dn3')),
        18: (8, ('dn0', 'dn1', 'dn3')),
        19: (1, ('dn1', 'dn2', 'dn3')),
        20: (6, ('dn1', 'dn2', 'dn3')),
        21: (1, ('dn0', 'dn1', 'dn2')),
        22: (2, ('dn0', 'dn1', 'dn3')),
        23: (5, ('dn1', 'dn3', 'dn4')),
    }
    containers = [ContainerReplicas(cid, size * gib, 3, frozenset(on), True) for cid, (size, on) in replicas.items()]
    limits = BalancerLimits(threshold=0.01, max_datanodes_ratio=0.5,
                            max_size_per_iteration=9 * gib, max_size_entering_target=7 * gib,
                            max_size_leaving_source=7 * gib)
    moves = list(plan_iteration(nodes, containers, limits).moves)
    assert moves == _plain_greedy(nodes, containers, limits)
    assert [(m.container_id, m.source, m.target) for m in moves] == [(2, "dn3", "dn0"), (13, "dn0", "dn5"),
                                                                      (12, "dn3", "dn0")]


def test_unbalanced_bytes_is_the_larger_side_outside_the_limits() -> None:
    """DataSizeUnbalancedGB's measure: average 50 %, limits 40 % and 60 %: 30 GB above on one datanode, 10 GB
    lacking on each of the two others: the larger side counts."""
    nodes = [NodeUsage("a", 100 * GB, 90 * GB), NodeUsage("b", 100 * GB, 30 * GB), NodeUsage("c", 100 * GB, 30 * GB)]
    # over: 100 GB x (0.9 - 0.6) = 30 GB; under: 2 x 100 GB x (0.4 - 0.3) = 20 GB (within float rounding)
    assert abs(unbalanced_bytes(nodes, 0.10) - 30 * GB) < 1024
    assert unbalanced_bytes(nodes, 0.40) == 0  # every datanode within 40 points of the average
