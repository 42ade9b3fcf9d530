"""Ozone's placement rules as properties over random clusters: every policy, excluded and favored nodes, space,
the rack rules, the fallback with too few racks, pipeline limits, and leader choice."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scm_server.conf import groups
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.node.node_manager import DatanodeInfo
from scm_server.pipeline.placement import (
    CONTAINER_POLICIES,
    DefaultLeaderChoosePolicy,
    MinLeaderCountChoosePolicy,
    PipelinePlacementPolicy,
    SCMContainerPlacementCapacity,
    SCMContainerPlacementRackAware,
    SCMContainerPlacementRackScatter,
    container_policy,
    leader_choose_policy,
)
from scm_server.proto import hdds_pb2, scm_datanode_pb2

GB = 1 << 30


def node(uuid: str, rack: str, *, health: int = hdds_pb2.HEALTHY, op: int = hdds_pb2.IN_SERVICE,
         remaining: int = 100 * GB, capacity: int = 100 * GB, spare: int = 0) -> DatanodeInfo:
    return DatanodeInfo(
        details=hdds_pb2.DatanodeDetailsProto(uuid=uuid, hostName=uuid, networkLocation=rack),
        health=health, op_state=op, op_state_expiry_epoch_s=0, last_heartbeat_mono=0, last_heartbeat_wall_ms=0,
        storage_reports=[scm_datanode_pb2.StorageReportProto(
            storageUuid=f"{uuid}-v", storageLocation="/d", capacity=capacity, remaining=remaining,
            freeSpaceToSpare=spare)],
    )


@st.composite
def clusters(draw: st.DrawFn) -> list[DatanodeInfo]:
    """1..6 racks, 1..20 nodes, some not HEALTHY/IN_SERVICE, some short of space."""
    racks = draw(st.integers(min_value=1, max_value=6))
    count = draw(st.integers(min_value=1, max_value=20))
    nodes = []
    for i in range(count):
        rack = f"/rack{draw(st.integers(min_value=1, max_value=racks))}"
        health = draw(st.sampled_from([hdds_pb2.HEALTHY] * 4 + [hdds_pb2.STALE, hdds_pb2.DEAD]))
        op = draw(st.sampled_from([hdds_pb2.IN_SERVICE] * 4 + [hdds_pb2.DECOMMISSIONING, hdds_pb2.IN_MAINTENANCE]))
        remaining = draw(st.sampled_from([100 * GB] * 4 + [1 * GB]))
        nodes.append(node(f"dn{i:02d}", rack, health=health, op=op, remaining=remaining))
    return nodes


POLICY_NAMES = sorted(CONTAINER_POLICIES)


@settings(max_examples=150, deadline=None)
@given(clusters(), st.sampled_from(POLICY_NAMES), st.integers(min_value=1, max_value=5), st.data())
def test_every_policy_keeps_ozones_common_rules(
    nodes: list[DatanodeInfo], policy_name: str, required: int, data: st.DataObject
) -> None:
    uuids = [n.uuid for n in nodes]
    excluded = set(data.draw(st.lists(st.sampled_from(uuids), max_size=3)))
    used = data.draw(st.lists(st.sampled_from(nodes), max_size=2, unique_by=lambda n: n.uuid))
    favored = data.draw(st.lists(st.sampled_from(uuids), max_size=2))
    policy = container_policy(policy_name, random.Random(data.draw(st.integers(0, 1000))))
    skip = excluded | {n.uuid for n in used}
    healthy = [n for n in nodes if n.is_healthy_in_service() and n.uuid not in skip]
    roomy = [n for n in healthy if n.remaining_bytes() > 5 * GB]
    try:
        chosen = policy.choose_datanodes(nodes, required, used=used, excluded=excluded, favored=favored,
                                         data_size=5 * GB)
    except SCMException as exc:
        if len(healthy) < required:
            assert exc.result is ResultCodes.FAILED_TO_FIND_HEALTHY_NODES
        else:
            assert len(roomy) < required and exc.result is ResultCodes.FAILED_TO_FIND_NODES_WITH_SPACE
        return
    assert len(healthy) >= required and len(roomy) >= required
    assert len(chosen) == required and len({n.uuid for n in chosen}) == required
    for n in chosen:
        assert n.is_healthy_in_service()
        assert n.uuid not in excluded and n.uuid not in {u.uuid for u in used}
        assert n.remaining_bytes() > 5 * GB
    fitting_favored = [u for u in favored if u in {n.uuid for n in roomy}]
    if fitting_favored and policy_name in (groups.RANDOM, groups.CAPACITY):
        assert fitting_favored[0] in {n.uuid for n in chosen}  # favored first when the rule allows any node


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=2, max_value=6), st.integers(min_value=1, max_value=4), st.integers(0, 10_000))
def test_rack_aware_puts_three_replicas_on_two_racks_hdfs_style(racks: int, per_rack: int, seed: int) -> None:
    nodes = [node(f"r{r}n{i}", f"/rack{r}") for r in range(racks) for i in range(per_rack)]
    if len(nodes) < 3:
        return
    chosen = SCMContainerPlacementRackAware(random.Random(seed)).choose_datanodes(nodes, 3)
    counts = Counter(n.rack for n in chosen)
    assert len(counts) >= 2  # at least two racks whenever two exist
    if per_rack >= 2:
        # HDFS's rule: the first on one rack, the second and third together on another
        assert sorted(counts.values()) == [1, 2] and chosen[1].rack == chosen[2].rack != chosen[0].rack
    assert SCMContainerPlacementRackAware.is_policy_satisfied([n.rack for n in chosen], 3, racks)


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=1, max_value=9), st.integers(min_value=1, max_value=3), st.integers(1, 9),
       st.integers(0, 10_000))
def test_rack_scatter_spreads_over_as_many_racks_as_exist(racks: int, per_rack: int, required: int, seed: int) -> None:
    nodes = [node(f"r{r}n{i}", f"/rack{r}") for r in range(racks) for i in range(per_rack)]
    if len(nodes) < required:
        with pytest.raises(SCMException):
            SCMContainerPlacementRackScatter(random.Random(seed)).choose_datanodes(nodes, required)
        return
    chosen = SCMContainerPlacementRackScatter(random.Random(seed)).choose_datanodes(nodes, required)
    counts = Counter(n.rack for n in chosen)
    assert len(counts) == min(required, racks)
    assert max(counts.values()) - min(counts.values()) <= 1  # as even as the racks allow
    assert SCMContainerPlacementRackScatter.is_policy_satisfied([n.rack for n in chosen], required, racks)


def test_rack_aware_falls_back_to_one_rack_when_only_one_exists() -> None:
    nodes = [node(f"n{i}", "/rack1") for i in range(4)]
    chosen = SCMContainerPlacementRackAware(random.Random(1)).choose_datanodes(nodes, 3)
    assert len(chosen) == 3 and {n.rack for n in chosen} == {"/rack1"}
    assert SCMContainerPlacementRackAware.is_policy_satisfied(["/rack1"] * 3, 3, 1)
    assert not SCMContainerPlacementRackAware.is_policy_satisfied(["/rack1"] * 3, 3, 2)


def test_rack_aware_with_used_replicas_adds_the_missing_rack() -> None:
    nodes = [node("a1", "/r1"), node("a2", "/r1"), node("a3", "/r1"), node("b1", "/r2"), node("b2", "/r2")]
    for seed in range(20):
        chosen = SCMContainerPlacementRackAware(random.Random(seed)).choose_datanodes(
            nodes, 1, used=[nodes[0], nodes[1]])
        assert [n.rack for n in chosen] == ["/r2"]


def test_rack_scatter_policy_check_counts_racks_and_balance() -> None:
    check = SCMContainerPlacementRackScatter.is_policy_satisfied
    assert check(["/r1", "/r2", "/r3", "/r4", "/r5"], 5, 5)
    assert not check(["/r1", "/r1", "/r3", "/r4", "/r5"], 5, 5)
    assert check(["/r1", "/r1", "/r2", "/r2", "/r3"], 5, 3)
    assert not check(["/r1", "/r1", "/r1", "/r2", "/r3"], 5, 3)  # one rack holds more than ceil(5/3)


def test_replicas_to_copy_to_fix_misreplication_takes_the_excess_of_the_fullest_racks() -> None:
    scatter = SCMContainerPlacementRackScatter(random.Random(1))
    # rs-3-2 with three replicas on /r1 and two on /r2, five racks in the cluster: two of /r1's and one of
    # /r2's must go (each rack may keep ceil(5/5) = 1), the first copyable ones in the order given
    replicas = [("/r1", True), ("/r1", True), ("/r1", True), ("/r2", True), ("/r2", True)]
    assert scatter.replicas_to_copy_to_fix_misreplication(replicas, 5) == [0, 1, 3]
    # three racks: /r1 keeps ceil(5/3) = 2, then /r2 keeps ceil(3/2) = 2: one copy, from /r1
    assert scatter.replicas_to_copy_to_fix_misreplication(replicas, 3) == [0]
    # a replica that cannot be copied (not CLOSED, or its node unhealthy) is never chosen
    pinned = [("/r1", False), ("/r1", True), ("/r1", False), ("/r2", True), ("/r3", True)]
    assert scatter.replicas_to_copy_to_fix_misreplication(pinned, 3) == [1]
    # already spread: nothing to copy
    assert scatter.replicas_to_copy_to_fix_misreplication([("/r1", True), ("/r2", True), ("/r3", True)], 3) == []
    # RackAware asks for two racks only; Random for one
    aware = SCMContainerPlacementRackAware(random.Random(1))
    assert aware.replicas_to_copy_to_fix_misreplication([("/r1", True)] * 3, 4) == [0]
    assert container_policy(groups.RANDOM).replicas_to_copy_to_fix_misreplication([("/r1", True)] * 3, 4) == []


def test_replicas_to_remove_to_fix_overreplication_empties_the_crowded_rack() -> None:
    remove = SCMContainerPlacementRackScatter.replicas_to_remove_to_fix_overreplication
    # index 2 on /r1 (with index 1) and on /r5 (alone): the /r1 copy goes
    replicas = [(1, "/r1"), (2, "/r1"), (3, "/r2"), (4, "/r3"), (5, "/r4"), (2, "/r5")]
    assert remove(replicas) == [1]
    # the most copied index first; each extra copy from the rack holding most replicas at that moment (ties:
    # the later replica): index 1 loses its /r2 copy, then one of /r1's; index 2 then keeps its /r2 copy
    triple = [(1, "/r1"), (1, "/r1"), (1, "/r2"), (2, "/r2"), (2, "/r3")]
    assert remove(triple) == [2, 1, 4]
    assert remove([(1, "/r1"), (2, "/r2")]) == []


def test_capacity_prefers_the_emptier_of_two() -> None:
    full = node("full", "/r1", remaining=10 * GB)
    empty = node("empty", "/r1", remaining=90 * GB)
    picks = Counter(SCMContainerPlacementCapacity(random.Random(s)).choose_datanodes([full, empty], 1)[0].uuid
                    for s in range(20))
    assert picks == {"empty": 20}


def test_the_space_a_datanode_spares_counts_against_it() -> None:
    spared = node("spared", "/r1", remaining=10 * GB, spare=6 * GB)
    with pytest.raises(SCMException) as err:
        SCMContainerPlacementRackAware().choose_datanodes([spared], 1, data_size=5 * GB)
    assert err.value.result is ResultCodes.FAILED_TO_FIND_NODES_WITH_SPACE
    assert "space requirement of 5368709120 bytes" in str(err.value)


@settings(max_examples=150, deadline=None)
@given(clusters(), st.integers(min_value=1, max_value=3), st.integers(0, 10_000), st.data())
def test_pipeline_placement_rules(nodes: list[DatanodeInfo], count: int, seed: int, data: st.DataObject) -> None:
    uuids = [n.uuid for n in nodes]
    load = {u: data.draw(st.integers(0, 3)) for u in uuids}
    excluded = set(data.draw(st.lists(st.sampled_from(uuids), max_size=2)))
    favored = data.draw(st.lists(st.sampled_from(uuids), max_size=1))
    viable = [n for n in nodes if n.is_healthy_in_service() and n.uuid not in excluded and load[n.uuid] < 2
              and n.remaining_bytes() > 5 * GB]
    try:
        chosen = PipelinePlacementPolicy(random.Random(seed)).choose_datanodes(
            nodes, count, lambda u: load[u], lambda _u: 2, excluded, favored=favored, data_size=5 * GB)
    except SCMException as exc:
        assert len(viable) < count
        assert exc.result in (ResultCodes.FAILED_TO_FIND_SUITABLE_NODE, ResultCodes.FAILED_TO_FIND_NODES_WITH_SPACE)
        return
    assert len(chosen) == count and len({n.uuid for n in chosen}) == count
    assert all(n in viable for n in chosen)
    if favored and any(n.uuid == favored[0] for n in viable):
        assert chosen[0].uuid == favored[0]  # the favored node anchors
    if count >= 2 and len({n.rack for n in viable}) >= 2:
        assert len({n.rack for n in chosen}) >= 2  # a second rack whenever the viable nodes offer one


def test_pipeline_third_member_joins_the_anchors_rack() -> None:
    nodes = [node("a1", "/r1"), node("a2", "/r1"), node("b1", "/r2"), node("b2", "/r2")]
    load = {"a1": 0, "a2": 1, "b1": 1, "b2": 1}
    chosen = PipelinePlacementPolicy(random.Random(0)).choose_datanodes(nodes, 3, lambda u: load[u], lambda _u: 2)
    assert chosen[0].uuid == "a1" and chosen[1].rack == "/r2" and chosen[2].uuid == "a2"


def test_leader_choice() -> None:
    counts = {"a": 2, "b": 0, "c": 0}
    assert MinLeaderCountChoosePolicy().choose_leader(["a", "b", "c"], counts.__getitem__) == "b"
    assert DefaultLeaderChoosePolicy().choose_leader(["a", "b", "c"], counts.__getitem__) is None
    assert isinstance(leader_choose_policy(groups.DEFAULT_LEADER), DefaultLeaderChoosePolicy)
    assert isinstance(leader_choose_policy(groups.MIN_LEADER_COUNT), MinLeaderCountChoosePolicy)
