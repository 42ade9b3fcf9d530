"""Under-replicated with every node already holding a copy (some unhealthy): make room.

Found by the convergence property test: CLOSED on dn0/dn3, UNHEALTHY on dn1/dn2, factor THREE,
four nodes. No target is free, so the check must delete one unhealthy copy first (Ozone's
RatisUnderReplicationHandler), otherwise the container stays UNDER_REPLICATED forever.
"""

from __future__ import annotations

import random

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


def test_unhealthy_copy_is_deleted_when_no_target_is_free() -> None:
    nodes = [
        DatanodeInfo(
            details=hdds_pb2.DatanodeDetailsProto(uuid=f"dn{i}", networkLocation="/r0"),
            health=hdds_pb2.HEALTHY,
            op_state=hdds_pb2.IN_SERVICE,
            op_state_expiry_epoch_s=0,
            last_heartbeat_mono=0,
            last_heartbeat_wall_ms=0,
        )
        for i in range(4)
    ]
    states = {"dn0": R.CLOSED, "dn1": R.UNHEALTHY, "dn2": R.UNHEALTHY, "dn3": R.CLOSED}
    info = hdds_pb2.ContainerInfoProto(
        containerID=1, state=hdds_pb2.CLOSED, numberOfKeys=5, replicationFactor=hdds_pb2.THREE, replicationType=hdds_pb2.RATIS
    )
    view = ContainerView(
        info=info,
        replicas=[ReplicaView(datanode=d, state=s, rack="/r0", key_count=5) for d, s in sorted(states.items())],
        pipeline_state=None,
    )
    cluster = ClusterView(nodes=nodes, load=lambda _u: 0, placement=ContainerPlacementRackAware(random.Random(1)))
    result = check_container(view, cluster)
    assert result.health is ContainerHealthState.UNDER_REPLICATED
    assert [(c.kind, c.datanode) for c in result.commands] == [("delete", "dn1")]
