"""The SCM's typed faces: one :class:`typing.Protocol` per Ozone protocol, as the edges call the facade.

Ozone declares one Java interface per protocol (``ScmBlockLocationProtocol``, ``StorageContainerLocationProtocol``,
``StorageContainerDatanodeProtocol``, ``SCMSecurityProtocol``) and each server-side translator holds a typed
implementation of it. Here :class:`scm_server.scm.StorageContainerManager` implements the four, and each edge (the
gRPC servicers, the Hadoop RPC translators) holds the one face it serves, whatever the transport::

    gRPC servicer ─┐
                   ├─> <Protocol> ──implemented by──> StorageContainerManager (scm.py), test fakes
    Hadoop RPC   ──┘

Each face lists only what its edges call, with the facade's real shape: a call that waits on Raft or on another
task is ``async``, a read of memory is plain. The faces share :class:`LeaderRole` (who may answer, as the call
rules of :mod:`scm_server.server.call_guard` ask it); the web server's and the daemon's needs are
:class:`ScmStatusView`. Test fakes are checked against these same classes (mypy, and ``isinstance`` at runtime:
every class here is ``runtime_checkable``).

This module is a leaf of the import graph: it imports the generated messages, the metrics registry's type, Ozone's bean shape (``scm_server.ozone_metrics``,
itself a leaf) and the standard library, nothing else of ``scm_server`` (an import-linter contract keeps it so), so managers, edges and tests may all depend on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

from prometheus_client import CollectorRegistry

from scm_server.ozone_metrics import Bean
from scm_server.proto import hdds_pb2, scm_client_pb2, scm_datanode_pb2


class ReplicaReport(Protocol):
    """One replica as a datanode reports it: what the report handlers read of a ``ContainerReplicaProto``.

    Our message and Ozone's name these fields alike and number the ``state`` values alike, so a full report
    decoded from Ozone's datanode protocol is read as it arrived, with no copy into our message (the Hadoop RPC
    edge checks first that ``used`` and ``keyCount``, signed in Ozone's message and unsigned in ours, are not
    negative)."""

    @property
    def containerID(self) -> int: ...
    @property
    def state(self) -> int: ...
    @property
    def used(self) -> int: ...
    @property
    def keyCount(self) -> int: ...
    @property
    def blockCommitSequenceId(self) -> int: ...
    @property
    def originNodeId(self) -> str: ...
    @property
    def isEmpty(self) -> bool: ...
    @property
    def replicaIndex(self) -> int: ...


class ContainerReport(Protocol):
    """A full container report (``ContainerReportsProto``) of either model: the datanode's every replica."""

    @property
    def reports(self) -> Sequence[ReplicaReport]: ...


class BlockAllocation(NamedTuple):
    """One allocated block: Ozone's ``AllocatedBlock`` (a container block id and its pipeline) before any wire form.

    ``pipeline`` is the pipeline state manager's stored message itself, shared by every block of that pipeline:
    read it, never change it (the state manager replaces a pipeline's message on every change, so the one a block
    got stays what it was when the block was allocated). Each edge writes its own answer from these values.
    """

    container_id: int
    local_id: int
    pipeline: hdds_pb2.Pipeline


@dataclass(frozen=True)
class DatanodeUsageInfo:
    """One datanode's space and load, summed over its healthy volumes."""

    details: hdds_pb2.DatanodeDetailsProto
    capacity: int
    used: int
    remaining: int
    committed: int
    container_count: int
    pipeline_count: int
    free_space_to_spare: int = 0
    reserved: int = 0
    fs_capacity: int = 0  # the volumes' devices as their file systems report them
    fs_available: int = 0

    def utilization(self) -> float:
        if self.capacity <= 0:
            return 0.0
        return (self.capacity - self.remaining) / self.capacity


@dataclass(frozen=True)
class DeletedBlocksSummary:
    """The deleted-block log in Ozone's DeletedBlocksTransactionSummary terms (block sizes are not kept)."""

    transactions: int
    blocks: int


@dataclass(frozen=True)
class BalancerStartRequest:
    """``containerbalancer start``'s options; None: not given (the ``hdds.container.balancer.*`` key's value)."""

    threshold: float | None = None  # percent
    iterations: int | None = None
    max_datanodes_percentage: int | None = None
    max_size_to_move_per_iteration_gb: int | None = None
    max_size_entering_target_gb: int | None = None
    max_size_leaving_source_gb: int | None = None
    balancing_interval_minutes: int | None = None
    move_timeout_minutes: int | None = None
    move_replication_timeout_minutes: int | None = None
    network_topology_enable: bool | None = None
    include_nodes: str | None = None
    exclude_nodes: str | None = None
    include_containers: str | None = None
    exclude_containers: str | None = None


@dataclass(frozen=True)
class BalancerIterationStatus:
    """One finished balancer iteration's figures (Ozone's ContainerBalancerTaskIterationStatusInfo)."""

    iteration_number: int
    iteration_result: str  # ITERATION_COMPLETED, CAN_NOT_BALANCE_ANY_MORE
    size_scheduled_for_move: int
    data_size_moved: int
    moves_scheduled: int
    moves_completed: int
    moves_failed: int
    moves_timeout: int
    size_entering_nodes: dict[str, int]
    size_leaving_nodes: dict[str, int]
    duration_seconds: int


@dataclass(frozen=True)
class BalancerStatusInfo:
    """``containerbalancer status -v``: the recorded run (None when none was ever started) and its iterations."""

    running: bool
    configuration: hdds_pb2.ContainerBalancerConfigurationProto | None
    iterations: tuple[BalancerIterationStatus, ...] = ()


@runtime_checkable
class LeaderRole(Protocol):
    """Who answers: what every edge asks before and around a call, whichever protocol it serves."""

    def require_leader(self) -> None:
        """Raises ``NotLeaderException`` (with the leader's hint when known) unless this SCM leads."""
        ...

    def is_leader_ready(self) -> bool:
        """The leader has applied its own term's first entry (always true without Raft)."""
        ...

    def answer_label(self) -> tuple[str, str, str]:
        """(who answers, its Raft role, the leader it follows), for an answer of this SCM's own view."""
        ...

    def node_id_of_peer(self, peer_id: str) -> str:
        """The configured node id of the SCM a Raft peer id names (``peer_id`` itself when none is configured)."""
        ...


@runtime_checkable
class ScmBlockLocationProtocol(LeaderRole, Protocol):
    """Ozone's ``ScmBlockLocationProtocol``: what the OM asks (blocks, their deletion, the cluster)."""

    async def allocate_block(
        self,
        size: int,
        num_blocks: int,
        replication_type: int,
        replication_factor: int,
        owner: str,
        exclude_list: hdds_pb2.ExcludeListProto | None = None,
        *,
        ec: hdds_pb2.ECReplicationConfig | None = None,
    ) -> list[BlockAllocation]: ...

    async def delete_key_blocks(
        self, key_blocks: list[scm_client_pb2.KeyBlocks]
    ) -> list[scm_client_pb2.DeleteKeyBlocksResultProto]: ...

    def get_scm_info(self) -> scm_client_pb2.GetScmInfoResponseProto: ...

    def query_nodes(self, state: int | None = None, op_state: int | None = None) -> list[hdds_pb2.Node]: ...

    async def add_scm(self, cluster_id: str, scm_id: str, ratis_address: str) -> str: ...


@runtime_checkable
class StorageContainerLocationProtocol(LeaderRole, Protocol):
    """Ozone's ``StorageContainerLocationProtocol``: what ``ozone admin`` and the OM ask of containers,
    pipelines, datanodes, safe mode and the replication manager."""

    async def allocate_container(
        self, rtype: int, rfactor: int, owner: str, ec: hdds_pb2.ECReplicationConfig | None = None
    ) -> hdds_pb2.ContainerWithPipeline: ...

    def get_container(self, container_id: int) -> hdds_pb2.ContainerInfoProto: ...

    def get_container_with_pipeline(
        self, container_id: int
    ) -> tuple[hdds_pb2.ContainerWithPipeline, list[hdds_pb2.ContainerReplicaInfo]]: ...

    def container_and_pipeline(self, container_id: int) -> tuple[hdds_pb2.ContainerInfoProto, hdds_pb2.Pipeline]: ...

    def containers_encoded_with_pipelines(
        self, container_ids: Sequence[int]
    ) -> list[tuple[bytes, str | None, hdds_pb2.Pipeline]]: ...

    def list_containers(
        self,
        start_id: int = 0,
        count: int = 1000,
        state: int | None = None,
        rtype: int | None = None,
        rfactor: int | None = None,
        suppressed: bool | None = None,
        *,
        ec: hdds_pb2.ECReplicationConfig | None = None,
    ) -> tuple[list[hdds_pb2.ContainerInfoProto], int]: ...

    def list_containers_encoded(
        self,
        start_id: int = 0,
        count: int = 1000,
        state: int | None = None,
        rtype: int | None = None,
        rfactor: int | None = None,
        suppressed: bool | None = None,
        *,
        ec: hdds_pb2.ECReplicationConfig | None = None,
    ) -> tuple[list[tuple[bytes, str | None]], int]: ...

    async def suppress_containers(self, container_ids: list[int], suppress: bool) -> list[int]: ...

    def reconcile_container(self, container_id: int) -> None: ...

    async def close_container(self, container_id: int) -> None: ...

    def list_pipelines(self) -> list[hdds_pb2.Pipeline]: ...

    async def create_pipeline(
        self, rtype: int, rfactor: int, ec: hdds_pb2.ECReplicationConfig | None = None
    ) -> hdds_pb2.Pipeline: ...

    async def close_pipeline(self, pipeline_id: str) -> None: ...

    async def activate_pipeline(self, pipeline_id: str) -> None: ...

    async def deactivate_pipeline(self, pipeline_id: str) -> None: ...

    def in_safe_mode(self) -> tuple[bool, bool]: ...

    def force_exit_safe_mode(self) -> bool: ...

    def safe_mode_rule_statuses(self) -> list[hdds_pb2.SafeModeRuleStatus]: ...

    def start_replication_manager(self) -> None: ...

    def stop_replication_manager(self) -> None: ...

    def replication_manager_status(self) -> bool: ...

    def replication_manager_report(self) -> hdds_pb2.ReplicationManagerReportProto: ...

    def query_nodes(self, state: int | None = None, op_state: int | None = None) -> list[hdds_pb2.Node]: ...

    async def decommission_nodes(
        self, hosts: list[str], force: bool = False
    ) -> list[scm_client_pb2.DatanodeAdminError]: ...

    async def start_maintenance_nodes(
        self, hosts: list[str], end_hours: int = 0
    ) -> list[scm_client_pb2.DatanodeAdminError]: ...

    async def recommission_nodes(self, hosts: list[str]) -> list[scm_client_pb2.DatanodeAdminError]: ...

    def datanode_usage_info(self, address: str = "", uuid: str = "") -> list[DatanodeUsageInfo]: ...

    def most_or_least_used_datanodes(self, most_used: bool, count: int) -> list[DatanodeUsageInfo]: ...

    def containers_on_decom_node(self, dn_uuid: str) -> dict[str, list[int]]: ...

    def get_metrics(self, query: str) -> str: ...

    async def transfer_leadership(self, new_leader_id: str) -> str: ...

    async def decommission_scm(self, scm_id: str) -> str: ...

    def deleted_blocks_summary(self) -> DeletedBlocksSummary: ...

    async def finalize_upgrade(self, client_id: str) -> tuple[str, list[str]]:
        """``ozone admin scm finalizeupgrade``: the status Ozone's ``UpgradeFinalization.Status`` names (and messages)."""
        ...

    def upgrade_finalization_progress(self, client_id: str, takeover: bool, readonly: bool) -> tuple[str, list[str]]:
        """``finalizationstatus`` (readonly) or the finalizing client's poll (its queued messages)."""
        ...

    async def start_container_balancer(self, request: BalancerStartRequest) -> str: ...

    async def stop_container_balancer(self) -> None: ...

    def container_balancer_status(self) -> bool: ...

    def container_balancer_status_info(self) -> BalancerStatusInfo: ...

    def get_scm_info(self) -> scm_client_pb2.GetScmInfoResponseProto: ...


@runtime_checkable
class StorageContainerDatanodeProtocol(LeaderRole, Protocol):
    """Ozone's ``StorageContainerDatanodeProtocol``: what every datanode asks every SCM."""

    def get_version(self) -> scm_datanode_pb2.SCMVersionResponseProto: ...

    async def register_datanode(
        self, request: scm_datanode_pb2.SCMRegisterRequestProto
    ) -> scm_datanode_pb2.SCMRegisteredResponseProto: ...

    async def process_heartbeat(
        self, request: scm_datanode_pb2.SCMHeartbeatRequestProto, container_report: ContainerReport | None = None
    ) -> scm_datanode_pb2.SCMHeartbeatResponseProto: ...


@runtime_checkable
class SCMSecurityProtocol(LeaderRole, Protocol):
    """Ozone's ``SCMSecurityProtocol`` as far as its edges ask the facade: where the leader is (the certificate
    work itself is the CA runtime's, :class:`scm_server.ca.scm_security.SCMSecurity`)."""

    def leader_peer_id(self) -> str | None:
        """The Raft peer id of the current leader, if known."""
        ...

    def leader_node_id(self) -> str | None:
        """The configured node id of the current leader, if known."""
        ...


@runtime_checkable
class ScmStatusView(Protocol):
    """What the web server reads: the status page's data, readiness, and the metrics registry for /prom."""

    @property
    def metrics_registry(self) -> CollectorRegistry: ...

    def status_summary(self) -> dict[str, Any]: ...

    def in_safe_mode(self) -> tuple[bool, bool]: ...

    def is_leader_ready(self) -> bool: ...

    def dn_reports_ready(self) -> bool:
        """This member has caught up with the leader (always true without Raft)."""
        ...

    def ozone_beans(self, hostname: str = "", ports: dict[str, int] | None = None) -> list[Bean]:
        """Ozone's SCM beans with this SCM's values (/jmx; /prom under the names Ozone's sink writes)."""
        ...
