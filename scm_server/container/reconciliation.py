"""Whether a container may be reconciled (``ozone admin container reconcile``), as Ozone's
ReconciliationEligibilityHandler decides, and the commands that start it.

Eligible: the container is CLOSED or QUASI_CLOSED; it has replicas, each CLOSED, QUASI_CLOSED or UNHEALTHY; it
is a RATIS container of more than one replica. Then each replica's datanode is told to reconcile with the others (Ozone's ReconcileContainerEventHandler:
one ``reconcileContainerCommand`` per replica, naming the other replicas' datanodes as peers).

Pure: the facade passes the container and its replicas in, and queues the commands this module builds.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from scm_server.exceptions import ResultCodes
from scm_server.proto import hdds_pb2, scm_datanode_pb2

ELIGIBLE_CONTAINER_STATES = frozenset({hdds_pb2.CLOSED, hdds_pb2.QUASI_CLOSED})
R = hdds_pb2.ContainerReplicaProto
ELIGIBLE_REPLICA_STATES = frozenset({R.CLOSED, R.QUASI_CLOSED, R.UNHEALTHY})


class Eligibility(enum.Enum):
    """Ozone's ReconciliationEligibilityHandler.Result."""

    OK = enum.auto()
    CONTAINER_NOT_FOUND = enum.auto()
    INELIGIBLE_CONTAINER_STATE = enum.auto()
    INELIGIBLE_REPLICA_STATES = enum.auto()
    INELIGIBLE_REPLICATION_TYPE = enum.auto()
    NOT_ENOUGH_REQUIRED_NODES = enum.auto()
    NO_REPLICAS_FOUND = enum.auto()


# the SCM result code each refusal travels as (Ozone's SCMClientProtocolServer.reconcileContainer)
REFUSAL_CODES = {
    Eligibility.CONTAINER_NOT_FOUND: ResultCodes.CONTAINER_NOT_FOUND,
    Eligibility.INELIGIBLE_CONTAINER_STATE: ResultCodes.UNEXPECTED_CONTAINER_STATE,
    Eligibility.INELIGIBLE_REPLICA_STATES: ResultCodes.UNSUPPORTED_OPERATION,
    Eligibility.INELIGIBLE_REPLICATION_TYPE: ResultCodes.UNSUPPORTED_OPERATION,
    Eligibility.NOT_ENOUGH_REQUIRED_NODES: ResultCodes.UNSUPPORTED_OPERATION,
    Eligibility.NO_REPLICAS_FOUND: ResultCodes.UNSUPPORTED_OPERATION,
}


@dataclass(frozen=True)
class EligibilityResult:
    result: Eligibility
    message: str


def eligibility(
    container_id: int, info: hdds_pb2.ContainerInfoProto | None, replica_states: Sequence[int]
) -> EligibilityResult:
    """Ozone's checks, in its order, with its messages (``info`` None: the container does not exist)."""
    if info is None:
        return EligibilityResult(Eligibility.CONTAINER_NOT_FOUND,
                                 f"Container #{container_id} not found for reconciliation.")
    state = hdds_pb2.LifeCycleState.Name(info.state)
    if info.state not in ELIGIBLE_CONTAINER_STATES:
        return EligibilityResult(Eligibility.INELIGIBLE_CONTAINER_STATE,
                                 f"Cannot reconcile container {container_id} in state {state}.")
    if not replica_states:
        return EligibilityResult(Eligibility.NO_REPLICAS_FOUND,
                                 f"Cannot reconcile container {container_id} because no replicas could be found.")
    if any(s not in ELIGIBLE_REPLICA_STATES for s in replica_states):
        listed = ", ".join(R.State.Name(s) for s in replica_states)  # type: ignore[arg-type]
        return EligibilityResult(Eligibility.INELIGIBLE_REPLICA_STATES,
                                 f"Cannot reconcile container #{container_id} in state {state} with replica "
                                 f"states: {listed}")
    if info.replicationType != hdds_pb2.RATIS:
        rtype = hdds_pb2.ReplicationType.Name(info.replicationType)
        return EligibilityResult(Eligibility.INELIGIBLE_REPLICATION_TYPE,
                                 f"Cannot reconcile container #{container_id} with replication type {rtype}. "
                                 "Reconciliation is currently only supported for Ratis containers.")
    required = 3 if info.replicationFactor == hdds_pb2.THREE else 1
    if required <= 1:
        return EligibilityResult(Eligibility.NOT_ENOUGH_REQUIRED_NODES,
                                 f"Cannot reconcile container #{container_id} with {required} required nodes. "
                                 "Reconciliation is only supported for containers with more than 1 required node.")
    return EligibilityResult(Eligibility.OK, f"Container #{container_id} is eligible for reconciliation.")


def reconcile_commands(
    container_id: int, holders: Sequence[hdds_pb2.DatanodeDetailsProto]
) -> list[tuple[str, scm_datanode_pb2.SCMCommandProto]]:
    """(datanode uuid, command) per replica: reconcile with every other replica's datanode."""
    out = []
    for holder in holders:
        command = scm_datanode_pb2.SCMCommandProto(
            commandType=scm_datanode_pb2.SCMCommandProto.reconcileContainerCommand,
            reconcileContainerCommandProto=scm_datanode_pb2.ReconcileContainerCommandProto(
                containerID=container_id, peers=[p for p in holders if p.uuid != holder.uuid]
            ),
        )
        out.append((holder.uuid, command))
    return out
