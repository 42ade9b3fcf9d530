"""What the pure replication checks see and say: containers, replicas, pending work, the cluster,
and the result (health states, commands, a lifecycle event). Values only; shared by the Ratis
checks (:mod:`health`), the EC checks (:mod:`ec_health`), the ReplicationManager and the audit.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from scm_server.node.node_manager import (
    DEAD,
    DECOMMISSIONED,
    DECOMMISSIONING,
    ENTERING_MAINTENANCE,
    HEALTHY,
    HEALTHY_READONLY,
    IN_MAINTENANCE,
    IN_SERVICE,
    DatanodeInfo,
)
from scm_server.pipeline.placement import ContainerPlacementPolicy, SCMContainerPlacementRackScatter
from scm_server.proto import hdds_pb2


class ContainerHealthState(enum.Enum):
    HEALTHY = "HEALTHY"
    UNDER_REPLICATED = "UNDER_REPLICATED"
    MIS_REPLICATED = "MIS_REPLICATED"
    OVER_REPLICATED = "OVER_REPLICATED"
    MISSING = "MISSING"
    UNHEALTHY = "UNHEALTHY"
    EMPTY = "EMPTY"
    OPEN_UNHEALTHY = "OPEN_UNHEALTHY"
    QUASI_CLOSED_STUCK = "QUASI_CLOSED_STUCK"
    OPEN_WITHOUT_PIPELINE = "OPEN_WITHOUT_PIPELINE"


# Which state is reported as "the" health of a container carrying several.
PRIMARY_ORDER = (
    ContainerHealthState.MISSING,
    ContainerHealthState.EMPTY,
    ContainerHealthState.OPEN_WITHOUT_PIPELINE,
    ContainerHealthState.OPEN_UNHEALTHY,
    ContainerHealthState.QUASI_CLOSED_STUCK,
    ContainerHealthState.UNDER_REPLICATED,
    ContainerHealthState.UNHEALTHY,
    ContainerHealthState.MIS_REPLICATED,
    ContainerHealthState.OVER_REPLICATED,
    ContainerHealthState.HEALTHY,
)


@dataclass(frozen=True)
class ReplicaView:
    datanode: str
    state: int
    rack: str
    health: int = HEALTHY
    op_state: int = IN_SERVICE
    sequence_id: int = 0
    key_count: int = 0
    is_empty: bool = False
    origin: str = ""
    replica_index: int = 0  # EC: which of the d+p stripes' positions this replica holds (1..d+p)

    @property
    def usable_source(self) -> bool:
        """HEALTHY or HEALTHY_READONLY (a node waiting to finalize its layout still serves its replicas)."""
        return self.health in (HEALTHY, HEALTHY_READONLY)

    @property
    def in_service(self) -> bool:
        return self.op_state == IN_SERVICE

    @property
    def decommission(self) -> bool:
        return self.op_state in (DECOMMISSIONING, DECOMMISSIONED)

    @property
    def maintenance(self) -> bool:
        return self.op_state in (ENTERING_MAINTENANCE, IN_MAINTENANCE)


@dataclass(frozen=True)
class PendingView:
    adds: frozenset[str] = frozenset()
    deletes: frozenset[str] = frozenset()
    add_indexes: frozenset[int] = frozenset()  # EC: the replica indexes the pending adds will create


@dataclass
class ContainerView:
    info: hdds_pb2.ContainerInfoProto
    replicas: list[ReplicaView]
    pipeline_state: int | None  # None = pipeline gone
    pending: PendingView = field(default_factory=PendingView)

    @property
    def is_ec(self) -> bool:
        return self.info.replicationType == hdds_pb2.EC

    @property
    def required(self) -> int:
        if self.is_ec:
            ec = self.info.ecReplicationConfig
            return ec.data + ec.parity
        return 1 if self.info.replicationFactor == hdds_pb2.ONE else 3


@dataclass(frozen=True)
class PlannedCommand:
    """One command for the leader to send. ``datanode`` receives it; for ``reconstruct`` it is the
    planned coordinator, one of ``targets`` (the ReplicationManager may pick another target when
    this one is busy, as Ozone does)."""

    kind: str  # "replicate" | "delete" | "close" | "reconstruct"
    datanode: str
    sources: tuple[str, ...] = ()
    force: bool = False
    replica_index: int = 0  # EC: the index replicated or deleted
    targets: tuple[str, ...] = ()  # reconstruct: one target per missing index, in order
    missing_indexes: tuple[int, ...] = ()  # reconstruct
    indexed_sources: tuple[tuple[str, int], ...] = ()  # reconstruct: (datanode, replica index)


@dataclass
class CheckResult:
    states: set[ContainerHealthState]
    commands: list[PlannedCommand] = field(default_factory=list)
    lifecycle_event: int | None = None
    reason: str = ""

    @property
    def health(self) -> ContainerHealthState:
        for s in PRIMARY_ORDER:
            if s in self.states:
                return s
        return ContainerHealthState.HEALTHY


@dataclass
class ClusterView:
    nodes: Sequence[DatanodeInfo]
    load: Callable[[str], int]
    placement: ContainerPlacementPolicy  # Ratis replicas (ozone.scm.container.placement.impl)
    maintenance_replica_minimum: int = 2
    maintenance_remaining_redundancy: int = 1  # EC: parity that must stay in service during maintenance
    # EC replicas (ozone.scm.container.placement.ec.impl)
    ec_placement: ContainerPlacementPolicy = field(default_factory=SCMContainerPlacementRackScatter)

    @functools.cached_property
    def rack_count(self) -> int:
        """Racks with a live node; computed once per pass (the view is built per pass)."""
        return len({n.rack for n in self.nodes if n.health != DEAD})

    @functools.cached_property
    def racks_by_uuid(self) -> dict[str, str]:
        """Each datanode's rack; built once per pass, when a check first asks."""
        return {n.uuid: n.rack for n in self.nodes}
