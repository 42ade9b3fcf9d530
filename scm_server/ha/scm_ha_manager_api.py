"""SCMHAManager protocol: what the SCM facade and the managers need from the HA layer.

Two implementations: the Raft-backed ``scm_server.ha.scm_ha_manager.SCMHAManagerImpl`` (HA helper)
and :class:`~scm_server.ha.scm_ha_manager_stub.SCMHAManagerStub` (single non-Raft SCM).

Wiring (done by ``StorageContainerManager.create``):

1. the facade opens scm.db, builds the :class:`SCMHADBTransactionBuffer`, the dispatcher, the
   SCMContext, the SCMServiceManager and every manager (each replicated state manager gets the
   ha_manager, whose ``submit_request`` it awaits);
2. it registers the state managers with the dispatcher;
3. it calls ``ha_manager.attach(scm)`` with itself (an :class:`SCMHAHost`), which gives the HA
   layer the buffer, dispatcher, context, store and the leader-change / reload hooks;
4. ``await scm.start()`` calls ``await ha_manager.start()`` (Raft: replay entries after the
   persisted #TRANSACTIONINFO, join the ring) and then starts the services.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from prometheus_client.registry import Collector

from scm_server.conf import SCMNodeDetails
from scm_server.ha.dispatcher import SCMStateMachineDispatcher
from scm_server.ha.scm_context import SCMContext
from scm_server.ha.scm_service import SCMServiceManager
from scm_server.ha.transaction_buffer import SCMHADBTransactionBuffer
from scm_server.metadata import SCMMetadataStore, SCMStorageConfig
from scm_server.proto import scm_ratis_pb2


class RingMembership(Protocol):
    """The ring's members as Raft applied them last (the Raft core's ``ConfState``, named here so that the
    managers importing this module stay off Raft)."""

    def members(self) -> tuple[str, ...]: ...

    def address_of(self, node_id: str) -> str:
        """The member's Raft address ("" when it is not a member)."""
        ...


@runtime_checkable
class SCMHAHost(Protocol):
    """What the SCM facade exposes to its HA manager."""

    @property
    def metadata_store(self) -> SCMMetadataStore: ...

    @property
    def transaction_buffer(self) -> SCMHADBTransactionBuffer: ...

    @property
    def dispatcher(self) -> SCMStateMachineDispatcher: ...

    @property
    def scm_context(self) -> SCMContext: ...

    @property
    def service_manager(self) -> SCMServiceManager: ...

    @property
    def storage_config(self) -> SCMStorageConfig: ...

    def on_become_leader(self, term: int) -> None:
        """Ozone notifyLeaderChanged(self): context update, invalidate ID batches, flush, services."""
        ...

    def on_leader_ready(self) -> None:
        """Ozone notifyLeaderReady: all entries of earlier terms applied; services may run."""
        ...

    def on_step_down(self, term: int) -> None:
        """Ozone notifyNotLeader: pause services, stop issuing commands."""
        ...

    def reinitialize(self) -> None:
        """Reload every manager from scm.db (after a checkpoint install)."""
        ...

    @property
    def sequence_batch_size(self) -> int:
        """How many sequence ids one Raft write reserves (a backup's manifest records it)."""
        ...

    def on_backup_served(self, wall_time_s: float) -> None:
        """A whole backup stream went out at ``wall_time_s`` (the backup-age metric counts from here)."""
        ...

    def set_state_machine_ready_hook(self, ready: Callable[[], bool]) -> None:
        """StateMachineReadyRule (HA only): the host stays in safemode until ``ready()`` (this member caught up
        with the leader); the Raft HA manager hands its check over at attach."""
        ...


@runtime_checkable
class SCMHAManager(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def attach(self, scm: SCMHAHost) -> None: ...

    @property
    def transaction_buffer(self) -> SCMHADBTransactionBuffer: ...

    async def submit_request(
        self, request: scm_ratis_pb2.SCMRatisRequestProto
    ) -> scm_ratis_pb2.SCMRatisResponseProto:
        """Replicate and apply ``request``; return the local apply result (leader only)."""
        ...

    def is_leader(self) -> bool: ...

    def get_leader(self) -> tuple[str, str] | None:
        """(leader SCM id, leader address) if known."""
        ...

    def leader_peer_id(self) -> str | None:
        """The Raft peer id of the current leader, if known."""
        ...

    def node_of_peer(self, peer_id: str) -> SCMNodeDetails | None:
        """The configured SCM a Raft peer id names, if any."""
        ...

    def leader_node(self) -> SCMNodeDetails | None:
        """The configured SCM that leads now, if known."""
        ...

    def ring_membership(self) -> RingMembership | None:
        """The ring's membership as this member applied it last (its members and their Raft addresses); None
        without Raft, or before Raft started."""
        ...

    def metrics_collector(self) -> Collector | None:
        """The HA layer's own figures for the SCM's /prom (Raft's, under Apache Ratis's names); None without
        Raft."""
        ...

    def raft_role(self) -> str | None:
        """This member's Raft role (``LEADER``, ``FOLLOWER``, ``CANDIDATE``, ...); None without Raft, or before
        Raft started."""
        ...

    def set_decommission_hook(self, hook: Callable[[str, str], Awaitable[None]]) -> None:
        """Called with (scm id, node id) on the leader after an SCM was removed from the ring (the CA runtime
        revokes its certificates)."""
        ...

    def dn_reports_ready(self) -> bool:
        """This member has caught up with the leader, so it may take datanode reports (HDDS-14989)."""
        ...

    def check_dn_reports_allowed(self) -> None:
        """Raise a retriable error (the datanode keeps its reports) until :meth:`dn_reports_ready`."""
        ...

    def leader_lease_remaining(self) -> float:
        """Seconds left of this leader's lease (negative: expired)."""
        ...

    async def transfer_leadership(self, target: str | None) -> str:
        """Move Raft leadership to the member ``target`` (any other member when None); the new leader's id.
        SCMException (INVALID_REQUEST, TIMEOUT) or NotLeaderException when it cannot."""
        ...

    async def add_scm(self, scm_id: str, ratis_address: str, node_id: str = "") -> str:
        """Add the SCM ``scm_id`` whose Raft listens at ``ratis_address`` to the ring; a one-line outcome."""
        ...

    async def remove_scm(self, scm_id: str) -> str:
        """Remove the member ``scm_id`` from the ring (never the leader); a one-line outcome."""
        ...

    def peer_roles(self) -> list[str]:
        """GetScmInfo.peerRoles as Ozone 2.2.0 answers them: ``host:port:ROLE:peerId:ip``, five fields with the IP
        address of the member's host last (``ozone admin scm roles --table`` needs all five)."""
        ...
