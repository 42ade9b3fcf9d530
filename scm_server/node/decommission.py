"""NodeDecommissionManager + DatanodeAdminMonitor: decommission and maintenance of datanodes.

Leader-only (Ozone's NodeDecommissionManager / DatanodeAdminMonitorImpl, simplified):

* ``decommission`` / ``start_maintenance`` move the node to DECOMMISSIONING / ENTERING_MAINTENANCE
  (the leader pushes a SetNodeOperationalState command), and its pipelines are closed so no new
  data lands there;
* the monitor (a background service) completes the transition once every container with a
  replica on the node is sufficiently replicated elsewhere: for decommission, ``required`` copies
  on other IN_SERVICE healthy nodes (the ReplicationManager creates them, since replicas on
  decommissioning nodes do not count); for maintenance,
  ``hdds.scm.replication.maintenance.replica.minimum`` copies elsewhere; an EC container counts
  distinct replica indexes instead of copies (all d+p, or d plus the maintenance remaining redundancy);
* maintenance ends (back to IN_SERVICE) when its end time passes; ``recommission`` returns a
  node to IN_SERVICE at once.

The op state itself is soft state (see SCMNodeManager); after a leader change
``on_become_leader`` re-tracks every node the DNs report as being in a transitional state.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from scm_server.clock import Clock
from scm_server.conf import ReplicationManagerConfig
from scm_server.ha.scm_context import SCMContext
from scm_server.ha.scm_service import BackgroundSCMService
from scm_server.node.node_manager import (
    DECOMMISSIONED,
    DECOMMISSIONING,
    ENTERING_MAINTENANCE,
    HEALTHY,
    IN_MAINTENANCE,
    IN_SERVICE,
    SCMNodeManager,
)
from scm_server.proto import scm_client_pb2

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Replication:
    """What the monitor needs of one container: the copies it wants and who holds a good one."""

    required: int  # replicated: the factor; EC: d+p
    holders: Mapping[str, int]  # datanode uuid -> the replica index it holds (0 for a replicated container)
    ec_data: int = 0  # EC: d, the data indexes; 0 for a replicated container


# container ids on a datanode; a container's Replication
ContainersOn = Callable[[str], set[int]]
ReplicationOf = Callable[[int], Replication]
ClosePipelinesOf = Callable[[str], Awaitable[None]]


class NodeDecommissionManager:
    def __init__(
        self,
        node_manager: SCMNodeManager,
        containers_on: ContainersOn,
        replication_of: ReplicationOf,
        close_pipelines_of: ClosePipelinesOf,
        scm_context: SCMContext,
        clock: Clock,
        config: ReplicationManagerConfig,
    ) -> None:
        self.node_manager = node_manager
        self.containers_on = containers_on
        self.replication_of = replication_of
        self.close_pipelines_of = close_pipelines_of
        self.scm_context = scm_context
        self.clock = clock
        self.config = config

    def _resolve(self, hosts: list[str]) -> tuple[list[str], list[scm_client_pb2.DatanodeAdminError]]:
        """Each host to exactly one datanode; a host that names none or several gets an error and
        is skipped (the others go ahead), as Ozone's ``mapHostnamesToDatanodes`` does. Several
        datanodes on one address are told apart by host:port or by UUID, never guessed."""
        uuids, errors = [], []
        for host in hosts:
            matches = self.node_manager.find_nodes(host)
            if len(matches) == 1:
                uuids.append(matches[0].uuid)
            elif not matches:
                errors.append(scm_client_pb2.DatanodeAdminError(
                    host=host, error="no registered datanode has this hostname, IP address, host:port or UUID"))
            else:
                listed = ", ".join(
                    f"{n.uuid} ({n.details.hostName}:{'/'.join(str(p.value) for p in n.details.ports) or '?'})"
                    for n in matches[:6]
                )
                errors.append(scm_client_pb2.DatanodeAdminError(
                    host=host,
                    error=f"{len(matches)} datanodes match; name one by UUID or host:port ({listed}"
                          f"{', ...' if len(matches) > 6 else ''})"))
        return list(dict.fromkeys(uuids)), errors

    async def decommission(self, hosts: list[str], force: bool = False) -> list[scm_client_pb2.DatanodeAdminError]:
        self.scm_context.check_leader()
        uuids, errors = self._resolve(hosts)
        for uuid in uuids:
            node = self.node_manager.require_node(uuid)
            if node.op_state in (DECOMMISSIONING, DECOMMISSIONED):
                continue
            if node.op_state != IN_SERVICE:
                errors.append(
                    scm_client_pb2.DatanodeAdminError(
                        host=node.host or uuid, error="datanode is in maintenance; recommission it first"
                    )
                )
                continue
            self.node_manager.set_node_operational_state(uuid, DECOMMISSIONING)
            await self.close_pipelines_of(uuid)
        return errors

    async def start_maintenance(self, hosts: list[str], end_hours: int = 0) -> list[scm_client_pb2.DatanodeAdminError]:
        self.scm_context.check_leader()
        uuids, errors = self._resolve(hosts)
        expiry = 0 if end_hours <= 0 else self.clock.wall_ms() // 1000 + end_hours * 3600
        for uuid in uuids:
            node = self.node_manager.require_node(uuid)
            if node.op_state in (DECOMMISSIONING, DECOMMISSIONED):
                errors.append(
                    scm_client_pb2.DatanodeAdminError(host=node.host or uuid, error="datanode is decommissioning")
                )
                continue
            if node.op_state in (ENTERING_MAINTENANCE, IN_MAINTENANCE):
                continue
            self.node_manager.set_node_operational_state(uuid, ENTERING_MAINTENANCE, expiry)
            await self.close_pipelines_of(uuid)
        return errors

    async def recommission(self, hosts: list[str]) -> list[scm_client_pb2.DatanodeAdminError]:
        self.scm_context.check_leader()
        uuids, errors = self._resolve(hosts)
        for uuid in uuids:
            if self.node_manager.require_node(uuid).op_state != IN_SERVICE:
                self.node_manager.set_node_operational_state(uuid, IN_SERVICE)
        return errors

    def replicated_elsewhere(self, cid: int, uuid: str, maintenance: bool) -> bool:
        """Container ``cid`` has enough replicas on healthy in-service datanodes other than ``uuid`` for that
        datanode to leave: a replicated container all of its replication for decommission, the maintenance
        minimum for maintenance; an EC container (Ozone's
        ECContainerReplicaCount.isSufficientlyReplicatedForOffline) all d+p indexes for decommission,
        d + ``hdds.scm.replication.maintenance.remaining.redundancy`` for maintenance, counting distinct
        indexes (two copies of one index are one)."""
        replication = self.replication_of(cid)
        elsewhere = {
            h: index
            for h, index in replication.holders.items()
            if h != uuid
            and (n := self.node_manager.get_node(h)) is not None
            and n.health == HEALTHY
            and n.op_state == IN_SERVICE
        }
        required = replication.required
        if replication.ec_data:
            redundancy = replication.ec_data + self.config.maintenance_remaining_redundancy
            needed = min(redundancy, required) if maintenance else required
            return len(set(elsewhere.values())) >= needed
        needed = min(self.config.maintenance_replica_minimum, required) if maintenance else required
        return len(elsewhere) >= needed

    def _sufficiently_replicated_elsewhere(self, uuid: str, maintenance: bool) -> bool:
        return all(self.replicated_elsewhere(cid, uuid, maintenance) for cid in self.containers_on(uuid))

    async def run_once(self) -> list[tuple[str, int]]:
        """One monitor pass (leader); returns [(uuid, new op state)] completed transitions."""
        if not self.scm_context.is_leader():
            return []
        done: list[tuple[str, int]] = []
        now_s = self.clock.wall_ms() // 1000
        for node in self.node_manager.all_nodes():
            if node.op_state == DECOMMISSIONING and self._sufficiently_replicated_elsewhere(node.uuid, False):
                self.node_manager.set_node_operational_state(node.uuid, DECOMMISSIONED)
                done.append((node.uuid, DECOMMISSIONED))
                log.info("datanode %s is DECOMMISSIONED", node.uuid)
            elif node.op_state == ENTERING_MAINTENANCE and self._sufficiently_replicated_elsewhere(node.uuid, True):
                self.node_manager.set_node_operational_state(node.uuid, IN_MAINTENANCE, node.op_state_expiry_epoch_s)
                done.append((node.uuid, IN_MAINTENANCE))
            elif (
                node.op_state in (ENTERING_MAINTENANCE, IN_MAINTENANCE)
                and node.op_state_expiry_epoch_s
                and now_s >= node.op_state_expiry_epoch_s
            ):
                self.node_manager.set_node_operational_state(node.uuid, IN_SERVICE)
                done.append((node.uuid, IN_SERVICE))
                log.info("maintenance of datanode %s expired; back IN_SERVICE", node.uuid)
        return done


class DatanodeAdminMonitor(BackgroundSCMService):
    """Ozone's DatanodeAdminMonitorImpl as a background service: every ``ozone.scm.datanode.admin.monitor.interval``
    (NodeManagerConfig.admin_monitor_interval) it runs the decommission manager's pass on the leader."""

    def __init__(self, manager: NodeDecommissionManager, scm_context: SCMContext, clock: Clock,
                 interval: timedelta) -> None:
        self.manager = manager
        super().__init__(
            "DatanodeAdminMonitor",
            scm_context=scm_context,
            clock=clock,
            interval=interval,
            run_once=self._run,
            run_in_safe_mode=True,
        )

    async def _run(self) -> None:
        await self.manager.run_once()
