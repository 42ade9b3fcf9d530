"""EC replica counting and the ReplicationManager's EC decisions (pure: ec_health).

The property test plays the ReplicationManager against a model cluster: whatever indexes are lost
(as long as ``data`` distinct indexes survive on live nodes), carrying out the planned commands
(reconstruct: each target gets its missing index; replicate: the target gets the index; delete:
the replica goes) reaches d+p distinct indexes on distinct in-service live nodes, with no index
twice, in a bounded number of passes.
"""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from scm_server.container.replication.ec_health import count_ec_replicas
from scm_server.container.replication.health import (
    CheckResult,
    ClusterView,
    ContainerHealthState,
    ContainerView,
    PendingView,
    ReplicaView,
    check_container,
)
from scm_server.node.node_manager import DatanodeInfo
from scm_server.pipeline.placement import ContainerPlacementRackAware, max_replicas_per_rack
from scm_server.proto import hdds_pb2

R = hdds_pb2.ContainerReplicaProto


def node(uuid: str, rack: str = "/r0", health: int = hdds_pb2.HEALTHY, op: int = hdds_pb2.IN_SERVICE) -> DatanodeInfo:
    return DatanodeInfo(
        details=hdds_pb2.DatanodeDetailsProto(uuid=uuid, networkLocation=rack),
        health=health,
        op_state=op,
        op_state_expiry_epoch_s=0,
        last_heartbeat_mono=0,
        last_heartbeat_wall_ms=0,
    )


def ec_info(data: int = 3, parity: int = 2, keys: int = 4) -> hdds_pb2.ContainerInfoProto:
    return hdds_pb2.ContainerInfoProto(
        containerID=7,
        state=hdds_pb2.CLOSED,
        numberOfKeys=keys,
        replicationType=hdds_pb2.EC,
        ecReplicationConfig=hdds_pb2.ECReplicationConfig(data=data, parity=parity, codec="rs", ecChunkSize=1048576),
    )


def replica(n: DatanodeInfo, index: int, state: int = R.CLOSED) -> ReplicaView:
    return ReplicaView(
        datanode=n.uuid, state=state, rack=n.rack, health=n.health, op_state=n.op_state, key_count=4, replica_index=index
    )


def cluster_of(nodes: list[DatanodeInfo]) -> ClusterView:
    return ClusterView(nodes=nodes, load=lambda _u: 0, placement=ContainerPlacementRackAware(random.Random(3)))


def test_all_indexes_on_in_service_nodes_is_healthy() -> None:
    nodes = [node(f"dn{i}") for i in range(5)]
    view = ContainerView(ec_info(), [replica(n, i + 1) for i, n in enumerate(nodes)], None)
    result = check_container(view, cluster_of(nodes))
    assert result.health is ContainerHealthState.HEALTHY
    assert result.commands == []


def test_lost_indexes_are_reconstructed_by_one_command_to_a_target() -> None:
    nodes = [node(f"dn{i}", rack=f"/r{i % 3}") for i in range(8)]
    replicas = [replica(nodes[0], 1), replica(nodes[1], 2), replica(nodes[2], 4)]  # 3 and 5 lost
    result = check_container(ContainerView(ec_info(), replicas, None), cluster_of(nodes))
    assert result.health is ContainerHealthState.UNDER_REPLICATED
    [cmd] = result.commands
    assert cmd.kind == "reconstruct"
    assert cmd.missing_indexes == (3, 5)
    assert len(cmd.targets) == 2 and cmd.datanode == cmd.targets[0]
    assert not set(cmd.targets) & {"dn0", "dn1", "dn2"}
    assert sorted(i for _, i in cmd.indexed_sources) == [1, 2, 4]


def test_fewer_than_data_indexes_is_missing_without_commands() -> None:
    nodes = [node(f"dn{i}") for i in range(6)]
    result = check_container(ContainerView(ec_info(), [replica(nodes[0], 1), replica(nodes[1], 5)], None), cluster_of(nodes))
    assert result.health is ContainerHealthState.MISSING
    assert result.commands == []


def test_index_only_on_a_decommissioning_node_is_replicated_not_reconstructed() -> None:
    nodes = [node(f"dn{i}") for i in range(5)] + [node("spare")]
    nodes[4] = node("dn4", op=hdds_pb2.DECOMMISSIONING)
    replicas = [replica(n, i + 1) for i, n in enumerate(nodes[:5])]
    result = check_container(ContainerView(ec_info(), replicas, None), cluster_of(nodes))
    assert result.health is ContainerHealthState.UNDER_REPLICATED
    assert [(c.kind, c.datanode, c.sources, c.replica_index) for c in result.commands] == [
        ("replicate", "spare", ("dn4",), 5)
    ]


def test_maintenance_keeps_indexes_while_redundancy_allows() -> None:
    nodes = [node(f"dn{i}") for i in range(5)] + [node("spare1"), node("spare2")]
    nodes[3] = node("dn3", op=hdds_pb2.IN_MAINTENANCE, health=hdds_pb2.DEAD)
    nodes[4] = node("dn4", op=hdds_pb2.IN_MAINTENANCE)
    replicas = [replica(n, i + 1) for i, n in enumerate(nodes[:5])]
    # rs-3-2 with remaining redundancy 1: one index may sit in maintenance, the second is copied
    result = check_container(ContainerView(ec_info(), replicas, None), cluster_of(nodes))
    assert result.health is ContainerHealthState.UNDER_REPLICATED
    # dn3 is offline (maintenance keeps its replica), so the index copied is dn4's, the readable one
    assert [(c.kind, c.sources, c.replica_index) for c in result.commands] == [("replicate", ("dn4",), 5)]
    one_in_maintenance = [r if r.datanode != "dn3" else replica(node("dn3"), 4) for r in replicas]
    assert check_container(ContainerView(ec_info(), one_in_maintenance, None), cluster_of(nodes)).health is (
        ContainerHealthState.HEALTHY
    )


def test_duplicate_index_is_deleted_with_its_index() -> None:
    nodes = [node(f"dn{i}") for i in range(6)]
    replicas = [replica(n, i + 1) for i, n in enumerate(nodes[:5])] + [replica(nodes[5], 2)]
    result = check_container(ContainerView(ec_info(), replicas, None), cluster_of(nodes))
    assert result.health is ContainerHealthState.OVER_REPLICATED
    assert [(c.kind, c.datanode, c.replica_index) for c in result.commands] == [("delete", "dn5", 2)]


def test_pending_add_of_an_index_stops_a_second_reconstruction() -> None:
    nodes = [node(f"dn{i}") for i in range(7)]
    replicas = [replica(n, i + 1) for i, n in enumerate(nodes[:4])]  # index 5 lost
    pending = PendingView(adds=frozenset({"dn6"}), add_indexes=frozenset({5}))
    result = check_container(ContainerView(ec_info(), replicas, None, pending), cluster_of(nodes))
    assert result.health is ContainerHealthState.HEALTHY
    assert result.commands == []


def test_unhealthy_replica_does_not_count_and_is_removed_once_every_index_is_healthy() -> None:
    nodes = [node(f"dn{i}") for i in range(7)]
    replicas = [replica(n, i + 1) for i, n in enumerate(nodes[:4])] + [replica(nodes[4], 5, R.UNHEALTHY)]
    under = check_container(ContainerView(ec_info(), replicas, None), cluster_of(nodes))
    assert under.states == {ContainerHealthState.UNDER_REPLICATED, ContainerHealthState.UNHEALTHY}
    assert [c.missing_indexes for c in under.commands] == [(5,)]
    fixed = [*replicas, replica(nodes[5], 5)]
    result = check_container(ContainerView(ec_info(), fixed, None), cluster_of(nodes))
    assert [(c.kind, c.datanode, c.replica_index) for c in result.commands] == [("delete", "dn4", 5)]


def test_count_ignores_indexes_outside_the_layout() -> None:
    nodes = [node(f"dn{i}") for i in range(3)]
    view = ContainerView(ec_info(2, 1), [replica(nodes[0], 1), replica(nodes[1], 9), replica(nodes[2], 0)], None)
    count = count_ec_replicas(view, view.replicas, 1)
    assert set(count.in_service) == {1}
    assert count.missing_indexes() == (2, 3)
    assert count.is_unrecoverable()


LAYOUTS = [(3, 2), (6, 3), (2, 1)]


@settings(max_examples=60, deadline=None)
@given(
    layout=st.sampled_from(LAYOUTS),
    spare=st.integers(min_value=0, max_value=4),
    racks=st.integers(min_value=1, max_value=4),
    data=st.data(),
)
def test_any_recoverable_loss_converges_to_every_index_on_distinct_live_nodes(
    layout: tuple[int, int], spare: int, racks: int, data: st.DataObject
) -> None:
    d, p = layout
    width = d + p
    total = width + spare
    nodes = {f"dn{i}": node(f"dn{i}", rack=f"/r{i % racks}") for i in range(total)}
    holders = {f"dn{i}": i + 1 for i in range(width)}  # datanode -> index
    lost = data.draw(st.sets(st.sampled_from(sorted(holders)), max_size=p), label="dead datanodes")
    leaving = data.draw(
        st.sets(st.sampled_from(sorted(set(holders) - lost)), max_size=1), label="decommissioning datanodes"
    )
    for dn in lost:
        nodes[dn] = node(dn, rack=nodes[dn].rack, health=hdds_pb2.DEAD)
    for dn in leaving:
        nodes[dn] = node(dn, rack=nodes[dn].rack, op=hdds_pb2.DECOMMISSIONING)
    held = {dn: i for dn, i in holders.items() if dn not in lost}

    live_in_service = [n for n in nodes.values() if n.is_healthy_in_service()]
    for _ in range(8):  # a move takes two passes: the copy to another rack, then the crowded copy's delete
        info = ec_info(d, p)
        view = ContainerView(info, [replica(nodes[dn], i) for dn, i in sorted(held.items())], None)
        result = check_container(view, cluster_of(list(nodes.values())))
        for cmd in result.commands:
            if cmd.kind == "reconstruct":
                assert set(cmd.targets).isdisjoint(held)
                assert len({i for _, i in cmd.indexed_sources}) >= d
                held.update(zip(cmd.targets, cmd.missing_indexes, strict=True))
            elif cmd.kind == "replicate":
                assert cmd.datanode not in held
                held[cmd.datanode] = cmd.replica_index
            elif cmd.kind == "delete":
                assert held.pop(cmd.datanode) == cmd.replica_index
        if not result.commands:
            break
    assert result.commands == []  # a fixed point within the passes
    in_service = {dn: i for dn, i in held.items() if nodes[dn].is_healthy_in_service()}
    if len(live_in_service) >= width:
        assert sorted(in_service.values()) == list(range(1, width + 1))
        assert result.health in (ContainerHealthState.HEALTHY, ContainerHealthState.MIS_REPLICATED)
        if result.health is ContainerHealthState.MIS_REPLICATED:
            # RackScatter could not do better: no free in-service node on a rack below its share
            live_racks = {n.rack for n in nodes.values() if n.health != hdds_pb2.DEAD}
            share = max_replicas_per_rack(width, min(width, len(live_racks)))
            per_rack = Counter(nodes[dn].rack for dn in held)
            free = [n for n in live_in_service if n.uuid not in held]
            assert all(per_rack[n.rack] >= share for n in free)
    else:  # not enough in-service nodes for d+p distinct ones: never two indexes on one node
        assert len(held) == len(set(held))
        assert result.health is not ContainerHealthState.OVER_REPLICATED


def test_replicas_on_too_few_racks_are_mis_replicated_and_one_moves() -> None:
    # five racks; rs-3-2's five replicas sit on /r0 (indexes 1-3) and /r1 (4, 5); /r2../r4 have free nodes
    nodes = [node(f"dn{i}", rack=f"/r{0 if i < 3 else 1}") for i in range(5)]
    nodes += [node(f"free{r}", rack=f"/r{r}") for r in (2, 3, 4)]
    racks = {n.uuid: n.rack for n in nodes}
    held = {f"dn{i}": i + 1 for i in range(5)}

    def check(pending: PendingView | None = None) -> CheckResult:
        view = ContainerView(
            ec_info(), [replica(n, held[n.uuid]) for n in nodes if n.uuid in held], None, pending or PendingView()
        )
        return check_container(view, cluster_of(nodes))

    mis = check()
    assert mis.states == {ContainerHealthState.MIS_REPLICATED}
    # /r0 keeps one of its three, /r1 one of its two: three copies, each to a free node on a rack of its own
    assert [(c.kind, c.sources, c.replica_index) for c in mis.commands] == [
        ("replicate", ("dn0",), 1), ("replicate", ("dn1",), 2), ("replicate", ("dn3",), 4)
    ]
    assert {racks[c.datanode] for c in mis.commands} == {"/r2", "/r3", "/r4"}
    # while those copies are pending nothing more is planned
    waiting = check(PendingView(adds=frozenset(c.datanode for c in mis.commands), add_indexes=frozenset({1, 2, 4})))
    assert waiting.health is ContainerHealthState.MIS_REPLICATED and waiting.commands == []
    assert "waiting for pending work" in waiting.reason  # the copies alone (8 replicas) do not fix it yet
    # the copies land: each index is now twice, and the copy on the crowded rack is the one deleted
    for c in mis.commands:
        held[c.datanode] = c.replica_index
    over = check()
    assert over.health is ContainerHealthState.OVER_REPLICATED
    assert sorted((c.kind, c.datanode, c.replica_index) for c in over.commands) == [
        ("delete", "dn0", 1), ("delete", "dn1", 2), ("delete", "dn3", 4)
    ]
    for c in over.commands:
        del held[c.datanode]
    healthy = check()
    assert healthy.health is ContainerHealthState.HEALTHY and healthy.commands == []
    assert len({racks[dn] for dn in held}) == 5


def test_one_rack_cluster_or_no_free_rack_is_not_moved() -> None:
    one_rack = [node(f"dn{i}") for i in range(6)]
    view = ContainerView(ec_info(), [replica(n, i + 1) for i, n in enumerate(one_rack[:5])], None)
    assert check_container(view, cluster_of(one_rack)).health is ContainerHealthState.HEALTHY
    # two racks, every node already holding an index: 3 + 2 is the best spread (ceil(5/2) = 3 per rack)
    two_racks = [node(f"dn{i}", rack=f"/r{i % 2}") for i in range(5)]
    view = ContainerView(ec_info(), [replica(n, i + 1) for i, n in enumerate(two_racks)], None)
    assert check_container(view, cluster_of(two_racks)).health is ContainerHealthState.HEALTHY
    # four on one of two racks breaks the per-rack share, but no free node exists to move to
    crowded = [node(f"dn{i}", rack="/r0" if i < 4 else "/r1") for i in range(5)]
    view = ContainerView(ec_info(), [replica(n, i + 1) for i, n in enumerate(crowded)], None)
    result = check_container(view, cluster_of(crowded))
    assert result.health is ContainerHealthState.MIS_REPLICATED and result.commands == []
    assert "no target on another rack" in result.reason
