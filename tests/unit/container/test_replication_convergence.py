"""Property test of the pure health check: executing its commands converges to HEALTHY and never
loses the last good copy, on random clusters and replica sets."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from scm_server.container.replication.health import (
    ClusterView,
    ContainerHealthState,
    ContainerView,
    ReplicaView,
    check_container,
)
from scm_server.node.node_manager import DatanodeInfo
from scm_server.pipeline.placement import ContainerPlacementRackAware
from scm_server.proto import hdds_pb2

R = hdds_pb2.ContainerReplicaProto


def node(uuid: str, rack: str) -> DatanodeInfo:
    return DatanodeInfo(
        details=hdds_pb2.DatanodeDetailsProto(uuid=uuid, networkLocation=rack),
        health=hdds_pb2.HEALTHY,
        op_state=hdds_pb2.IN_SERVICE,
        op_state_expiry_epoch_s=0,
        last_heartbeat_mono=0,
        last_heartbeat_wall_ms=0,
    )


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[DatanodeInfo], dict[str, int], int]:
    n = draw(st.integers(4, 9))
    racks = draw(st.integers(1, 3))
    nodes = [node(f"dn{i}", f"/r{i % racks}") for i in range(n)]
    holders = draw(st.lists(st.sampled_from([x.uuid for x in nodes]), min_size=1, max_size=n, unique=True))
    states = {h: draw(st.sampled_from([R.CLOSED, R.CLOSED, R.CLOSED, R.UNHEALTHY])) for h in holders}
    if all(s == R.UNHEALTHY for s in states.values()):
        states[holders[0]] = R.CLOSED  # at least one good copy to start from
    factor = draw(st.sampled_from([hdds_pb2.ONE, hdds_pb2.THREE]))
    return nodes, states, factor


@settings(max_examples=80, deadline=None)
@given(case=clusters(), seed=st.integers(0, 1000))
def test_commands_converge_to_healthy_without_losing_data(
    case: tuple[list[DatanodeInfo], dict[str, int], int], seed: int
) -> None:
    nodes, states, factor = case
    by_id = {n.uuid: n for n in nodes}
    info = hdds_pb2.ContainerInfoProto(
        containerID=1, state=hdds_pb2.CLOSED, numberOfKeys=5, replicationFactor=factor, replicationType=hdds_pb2.RATIS  # type: ignore[arg-type]
    )
    cluster = ClusterView(
        nodes=nodes,
        load=lambda u: sum(1 for h in states if h == u),
        placement=ContainerPlacementRackAware(random.Random(seed)),
    )
    required = 1 if factor == hdds_pb2.ONE else 3
    for _round in range(8):
        view = ContainerView(
            info=info,
            replicas=[ReplicaView(datanode=d, state=s, rack=by_id[d].rack, key_count=5) for d, s in sorted(states.items())],
            pipeline_state=None,
        )
        result = check_container(view, cluster)
        if result.health is ContainerHealthState.HEALTHY:
            break
        assert result.commands, f"{result.health} with no way forward: {states}"
        good_before = {d for d, s in states.items() if s == R.CLOSED}
        for cmd in result.commands:
            if cmd.kind == "replicate":
                assert cmd.datanode not in states, "replicated onto a node that already has a replica"
                assert set(cmd.sources) <= good_before, "copied from a bad replica"
                states[cmd.datanode] = R.CLOSED
            elif cmd.kind == "delete":
                states.pop(cmd.datanode)
        good_after = {d for d, s in states.items() if s == R.CLOSED}
        assert good_after, "deleted the last good replica"
        assert len(good_after) >= min(len(good_before), required), "deleted good replicas below the requirement"
    else:
        raise AssertionError(f"did not converge: {states}")
    good = [d for d, s in states.items() if s == R.CLOSED]
    assert len(good) == required and len(states) == required
    racks = {by_id[d].rack for d in good}
    assert len(racks) >= min(2, len({n.rack for n in nodes}), required)
