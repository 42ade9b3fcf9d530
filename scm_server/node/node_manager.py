"""SCMNodeManager: datanode registry, health from heartbeat age, operational state, command queues.

All of it is *soft state*, rebuilt on every SCM from datanode registrations and heartbeats (DNs
report to every SCM); nothing here is replicated through Raft.

Health (Ozone NodeStateManager)::

    HEALTHY --(no heartbeat for ozone.scm.stale.node.interval)--> STALE
    STALE   --(no heartbeat for ozone.scm.dead.node.interval)---> DEAD
    STALE/DEAD --(heartbeat)--> HEALTHY, or HEALTHY_READONLY while its layout is not SCM's
    HEALTHY <--(layout match / mismatch)--> HEALTHY_READONLY

A datanode is HEALTHY_READONLY while its metadata or software layout version differs from SCM's, once SCM's
own finalization has reached MLV_EQUALS_SLV (before that SCM's layout may still change, so nothing is
compared). A HEALTHY_READONLY node serves reads and keeps its replicas, but no new pipeline uses it; the
leader tells it to finalize (``finalizeNewLayoutVersionCommand``) on each heartbeat until it reports SCM's
layout. Registration of a datanode whose *software* layout differs from SCM's is refused, as in Ozone.

The health check runs every ``ozone.scm.heartbeat.thread.interval`` (``check_node_health``) and
tells listeners (pipeline and container managers) about stale, dead and recovered nodes.

Operational state (IN_SERVICE, DECOMMISSIONING, DECOMMISSIONED, ENTERING_MAINTENANCE,
IN_MAINTENANCE) is not replicated either (HDDS-5090): the leader changes it and pushes a
SetNodeOperationalState command; the DN persists it and echoes ``persistedOpState`` in each
heartbeat; followers adopt the echoed value, the leader re-sends the command on a mismatch.

Commands are queued per datanode, only on the leader, stamped with the leader's term, and
returned in the next heartbeat response.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from scm_server.clock import Clock
from scm_server.conf import NodeManagerConfig, PipelineConfig
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha.scm_context import SCMContext
from scm_server.metadata.enums import enum_name
from scm_server.proto import hdds_pb2, scm_datanode_pb2

log = logging.getLogger(__name__)

NodeState = hdds_pb2.NodeState
NodeOperationalState = hdds_pb2.NodeOperationalState
CommandType = scm_datanode_pb2.SCMCommandProto.Type

DEFAULT_RACK = "/default-rack"
HEALTHY = hdds_pb2.HEALTHY
STALE = hdds_pb2.STALE
DEAD = hdds_pb2.DEAD
IN_SERVICE = hdds_pb2.IN_SERVICE
DECOMMISSIONING = hdds_pb2.DECOMMISSIONING
DECOMMISSIONED = hdds_pb2.DECOMMISSIONED
ENTERING_MAINTENANCE = hdds_pb2.ENTERING_MAINTENANCE
IN_MAINTENANCE = hdds_pb2.IN_MAINTENANCE
HEALTHY_READONLY = hdds_pb2.HEALTHY_READONLY


@dataclass(frozen=True)
class ScmLayout:
    """SCM's layout versions as datanodes are compared with them, and whether they are compared yet
    (``should_tell_datanodes_to_finalize`` of the finalization checkpoint)."""

    metadata: int
    software: int
    compare: bool = True

    def matches(self, metadata: int, software: int) -> bool:
        return metadata == self.metadata and software == self.software

    def mismatches(self, metadata: int, software: int) -> bool:
        return self.compare and not self.matches(metadata, software)


def rack_of(details: hdds_pb2.DatanodeDetailsProto) -> str:
    return details.networkLocation or DEFAULT_RACK


class NodeEventListener(Protocol):
    """Reactions to health changes (Ozone's StaleNodeHandler / DeadNodeHandler / NewNodeHandler)."""

    async def on_node_stale(self, dn_uuid: str) -> None: ...

    async def on_node_dead(self, dn_uuid: str) -> None: ...

    async def on_node_healthy(self, dn_uuid: str) -> None: ...


@dataclass
class DatanodeInfo:
    details: hdds_pb2.DatanodeDetailsProto
    health: int
    op_state: int
    op_state_expiry_epoch_s: int
    last_heartbeat_mono: float
    last_heartbeat_wall_ms: int
    storage_reports: list[scm_datanode_pb2.StorageReportProto] = field(default_factory=list)
    commands: list[scm_datanode_pb2.SCMCommandProto] = field(default_factory=list)
    command_queue_report: dict[int, int] = field(default_factory=dict)
    layout_version: int = 0  # the datanode's metadata layout version
    software_layout_version: int = 0
    # wall-clock ms when this SCM saw the operational state change (the decommission start time Ozone reports)
    op_state_since_ms: int = 0
    _volumes_of: list[scm_datanode_pb2.StorageReportProto] | None = field(default=None, repr=False, compare=False)
    _healthy_volumes: int = field(default=1, repr=False, compare=False)

    @property
    def uuid(self) -> str:
        return self.details.uuid

    @property
    def rack(self) -> str:
        return rack_of(self.details)

    @property
    def host(self) -> str:
        return self.details.hostName

    def healthy_volumes(self) -> int:
        """Volumes not reported failed (at least 1). Asked for every member of the pipeline of every
        allocated block (the open-container limit), so it is counted once per node report: the node
        manager replaces ``storage_reports`` with a new list on each report, never mutates it."""
        reports = self.storage_reports
        if self._volumes_of is not reports:
            self._healthy_volumes = max(1, sum(1 for r in reports if not r.failed))
            self._volumes_of = reports
        return self._healthy_volumes

    def remaining_bytes(self) -> int:
        return sum(r.remaining for r in self.storage_reports if not r.failed)

    def is_healthy_in_service(self) -> bool:
        """HEALTHY and IN_SERVICE: what a new pipeline may use (never HEALTHY_READONLY)."""
        return self.health == HEALTHY and self.op_state == IN_SERVICE

    def is_healthy(self) -> bool:
        """HEALTHY or HEALTHY_READONLY: heartbeating, its replicas readable (Ozone's NodeStatus.isHealthy)."""
        return self.health in (HEALTHY, HEALTHY_READONLY)

    def status(self) -> hdds_pb2.NodeStatus:
        return hdds_pb2.NodeStatus(
            operationalState=self.op_state,  # type: ignore[arg-type]
            health=self.health,  # type: ignore[arg-type]
            opStateExpiryEpochSeconds=self.op_state_expiry_epoch_s,
        )


class SCMNodeManager:
    def __init__(
        self,
        config: NodeManagerConfig,
        pipeline_config: PipelineConfig,
        scm_context: SCMContext,
        clock: Clock,
    ) -> None:
        self.config = config
        self.pipeline_config = pipeline_config
        self.scm_context = scm_context
        self.clock = clock
        self._nodes: dict[str, DatanodeInfo] = {}
        self._sorted_nodes: list[DatanodeInfo] | None = None  # by uuid, until a datanode registers first
        self._listeners: list[NodeEventListener] = []
        self._cmd_ids = itertools.count(clock.wall_ms() * 1000)
        self.heartbeats_processed = 0
        self.commands_sent: dict[str, int] = {}
        self.scm_layout = ScmLayout(0, 0, compare=False)  # set by the finalization manager before any datanode
        self._readonly_handlers: list[Callable[[str], Awaitable[None]]] = []

    def set_scm_layout(self, layout: ScmLayout) -> None:
        self.scm_layout = layout

    def on_healthy_readonly(self, handler: Callable[[str], Awaitable[None]]) -> None:
        """Called (from the health check) for each node that turns HEALTHY_READONLY (Ozone's
        HealthyReadOnlyNodeHandler closes its pipelines)."""
        self._readonly_handlers.append(handler)

    def force_nodes_to_healthy_readonly(self) -> None:
        """When SCM's finalization reaches MLV_EQUALS_SLV every HEALTHY node becomes HEALTHY_READONLY until its
        heartbeat shows SCM's new layout (pipeline creation is still frozen at that moment)."""
        for info in self._nodes.values():
            if info.health == HEALTHY:
                info.health = HEALTHY_READONLY
                log.info("datanode %s is HEALTHY_READONLY until it finalizes its layout", info.uuid)

    def _first_health(self, metadata: int, software: int) -> int:
        return HEALTHY_READONLY if self.scm_layout.mismatches(metadata, software) else HEALTHY

    # ---- registry ----
    def add_listener(self, listener: NodeEventListener) -> None:
        self._listeners.append(listener)

    def register(
        self, details: hdds_pb2.DatanodeDetailsProto, layout: scm_datanode_pb2.LayoutVersionProto | None = None
    ) -> DatanodeInfo:
        """Register (or re-register) a datanode; adopts the op state the DN persisted. A datanode that sends
        no layout is taken to be at SCM's (Ozone's register without a layout does the same)."""
        if not details.uuid:
            raise SCMException(ResultCodes.INVALID_REQUEST, "datanode registration without a uuid")
        now, wall = self.clock.monotonic(), self.clock.wall_ms()
        op_state = details.persistedOpState if details.HasField("persistedOpState") else IN_SERVICE
        if layout is None:
            metadata, software = self.scm_layout.metadata, self.scm_layout.software
        else:
            metadata, software = layout.metadataLayoutVersion, layout.softwareLayoutVersion
        health = self._first_health(metadata, software)
        info = self._nodes.get(details.uuid)
        if info is None:
            info = DatanodeInfo(
                details=hdds_pb2.DatanodeDetailsProto(),
                health=health,
                op_state=op_state,
                op_state_expiry_epoch_s=details.persistedOpStateExpiry,
                last_heartbeat_mono=now,
                last_heartbeat_wall_ms=wall,
                layout_version=metadata,
                software_layout_version=software,
                op_state_since_ms=wall,
            )
            self._nodes[details.uuid] = info
            self._sorted_nodes = None
            log.info("registered datanode %s (%s, rack %s)", details.uuid, details.hostName, rack_of(details))
        else:
            info.health = health
            info.layout_version, info.software_layout_version = metadata, software
            info.last_heartbeat_mono = now
            info.last_heartbeat_wall_ms = wall
            if info.op_state != op_state:
                info.op_state_since_ms = wall
            info.op_state = op_state
            info.op_state_expiry_epoch_s = details.persistedOpStateExpiry
        info.details.CopyFrom(details)
        # Ozone's SCMNodeManager names every datanode in the network topology by its uuid, whatever it sent
        info.details.networkName = details.uuid
        return info

    def get_node(self, dn_uuid: str) -> DatanodeInfo | None:
        return self._nodes.get(dn_uuid)

    def require_node(self, dn_uuid: str) -> DatanodeInfo:
        info = self._nodes.get(dn_uuid)
        if info is None:
            raise SCMException(ResultCodes.NO_SUCH_DATANODE, f"datanode {dn_uuid} is not registered")
        return info

    def find_node(self, host_or_uuid: str) -> DatanodeInfo | None:
        """The one datanode named by uuid, hostname, ip or host:port; None if none or several match."""
        matches = self.find_nodes(host_or_uuid)
        return matches[0] if len(matches) == 1 else None

    def find_nodes(self, host_or_uuid: str) -> list[DatanodeInfo]:
        """Every datanode that ``host_or_uuid`` names, as `ozone admin datanode` accepts it: a uuid,
        a hostname or IP address (all datanodes on that host), or ``host:port`` (the ones on that host
        with that port among their ports)."""
        if host_or_uuid in self._nodes:
            return [self._nodes[host_or_uuid]]
        host, port = host_or_uuid, None
        if host_or_uuid.count(":") == 1:
            host, _, port_text = host_or_uuid.partition(":")
            port = port_text
        matches = [n for n in self.all_nodes() if host in (n.details.hostName, n.details.ipAddress)]
        if port is not None:
            matches = [n for n in matches if any(str(p.value) == port for p in n.details.ports)]
        return matches

    def all_nodes(self) -> list[DatanodeInfo]:
        """Every registered datanode by uuid (a new list; the order is kept until a new datanode registers)."""
        if self._sorted_nodes is None:
            self._sorted_nodes = sorted(self._nodes.values(), key=lambda n: n.uuid)
        return list(self._sorted_nodes)

    def get_nodes(self, health: int | None = None, op_state: int | None = None) -> list[DatanodeInfo]:
        return [
            n
            for n in self.all_nodes()
            if (health is None or n.health == health) and (op_state is None or n.op_state == op_state)
        ]

    def healthy_in_service_nodes(self) -> list[DatanodeInfo]:
        return [n for n in self.all_nodes() if n.is_healthy_in_service()]

    def node_count(self, health: int | None = None) -> int:
        return len(self.get_nodes(health=health))

    def racks(self) -> set[str]:
        return {n.rack for n in self._nodes.values()}

    # ---- heartbeats ----
    async def process_heartbeat(
        self, details: hdds_pb2.DatanodeDetailsProto, layout: scm_datanode_pb2.LayoutVersionProto | None = None
    ) -> bool:
        """Record a heartbeat. Returns False if the node is unknown (it must re-register)."""
        info = self._nodes.get(details.uuid)
        if info is None:
            return False
        self.heartbeats_processed += 1
        info.last_heartbeat_mono = self.clock.monotonic()
        info.last_heartbeat_wall_ms = self.clock.wall_ms()
        if layout is not None:
            info.layout_version = layout.metadataLayoutVersion
            info.software_layout_version = layout.softwareLayoutVersion
        if info.health in (STALE, DEAD):
            previous = info.health
            info.health = self._first_health(info.layout_version, info.software_layout_version)
            log.info("datanode %s is %s again (was %s)", info.uuid, enum_name(NodeState, info.health),
                     enum_name(NodeState, previous))
            if info.health == HEALTHY:
                for listener in self._listeners:
                    await listener.on_node_healthy(info.uuid)
        self._reconcile_op_state(info, details)
        if layout is not None:
            self._send_finalize_if_needed(info)
        return True

    def _send_finalize_if_needed(self, info: DatanodeInfo) -> None:
        """Ozone's sendFinalizeToDatanodeIfNeeded: once SCM's layout no longer changes, a datanode behind it
        is told (by the leader, at most one command queued at a time) to finalize to its software layout."""
        scm = self.scm_layout
        if info.software_layout_version > scm.software:
            log.error("datanode %s has software layout version %d, newer than this SCM's %d", info.uuid,
                      info.software_layout_version, scm.software)
        if not scm.compare or info.layout_version >= scm.metadata or not self.scm_context.is_leader():
            return
        if self.queued_commands(info.uuid, CommandType.finalizeNewLayoutVersionCommand):
            return
        target = scm_datanode_pb2.LayoutVersionProto(
            metadataLayoutVersion=info.software_layout_version, softwareLayoutVersion=info.software_layout_version)
        self.add_command(info.uuid, scm_datanode_pb2.SCMCommandProto(
            commandType=CommandType.finalizeNewLayoutVersionCommand,
            finalizeNewLayoutVersionCommandProto=scm_datanode_pb2.FinalizeNewLayoutVersionCommandProto(
                finalizeNewLayoutVersion=True, dataNodeLayoutVersion=target),
        ))

    def _reconcile_op_state(self, info: DatanodeInfo, details: hdds_pb2.DatanodeDetailsProto) -> None:
        if not details.HasField("persistedOpState"):
            return
        reported, expiry = details.persistedOpState, details.persistedOpStateExpiry
        if reported == info.op_state and expiry == info.op_state_expiry_epoch_s:
            return
        if self.scm_context.is_leader():
            # The leader's view wins: tell the DN again (it may have missed the command).
            if not any(c.commandType == CommandType.setNodeOperationalStateCommand for c in info.commands):
                self._queue_set_op_state(info)
        else:
            if reported != info.op_state:
                info.op_state_since_ms = self.clock.wall_ms()
            info.op_state, info.op_state_expiry_epoch_s = reported, expiry

    def process_node_report(self, dn_uuid: str, report: scm_datanode_pb2.NodeReportProto) -> None:
        info = self._nodes.get(dn_uuid)
        if info is not None:
            info.storage_reports = list(report.storageReport)

    def process_command_queue_report(self, dn_uuid: str, report: scm_datanode_pb2.CommandQueueReportProto) -> None:
        info = self._nodes.get(dn_uuid)
        if info is not None:
            info.command_queue_report = dict(zip(report.command, report.count, strict=False))

    async def check_node_health(self) -> list[tuple[str, int, int]]:
        """One pass of the health-check task; returns [(uuid, old, new)] transitions."""
        now = self.clock.monotonic()
        stale_s = self.config.stale_node_interval.total_seconds()
        dead_s = self.config.dead_node_interval.total_seconds()
        transitions: list[tuple[str, int, int]] = []
        for info in self.all_nodes():
            age = now - info.last_heartbeat_mono
            layout = self.scm_layout
            if info.health == HEALTHY and layout.mismatches(info.layout_version, info.software_layout_version):
                transitions.append((info.uuid, HEALTHY, HEALTHY_READONLY))
                info.health = HEALTHY_READONLY
                log.info("datanode %s is HEALTHY_READONLY: its layout (%d, software %d) is not SCM's (%d, %d)",
                         info.uuid, info.layout_version, info.software_layout_version, layout.metadata, layout.software)
                for handler in self._readonly_handlers:
                    await handler(info.uuid)
            elif info.health == HEALTHY_READONLY and layout.matches(info.layout_version, info.software_layout_version):
                transitions.append((info.uuid, HEALTHY_READONLY, HEALTHY))
                info.health = HEALTHY
                log.info("datanode %s is HEALTHY: its layout is SCM's (%d)", info.uuid, layout.metadata)
                for listener in self._listeners:
                    await listener.on_node_healthy(info.uuid)
            if info.health in (HEALTHY, HEALTHY_READONLY) and age >= stale_s:
                transitions.append((info.uuid, info.health, STALE))
                info.health = STALE
                log.warning("datanode %s is STALE (no heartbeat for %.0fs)", info.uuid, age)
                for listener in self._listeners:
                    await listener.on_node_stale(info.uuid)
            if info.health == STALE and age >= dead_s:
                transitions.append((info.uuid, STALE, DEAD))
                info.health = DEAD
                info.commands.clear()
                log.warning("datanode %s is DEAD (no heartbeat for %.0fs)", info.uuid, age)
                for listener in self._listeners:
                    await listener.on_node_dead(info.uuid)
        return transitions

    # ---- commands ----
    def next_command_id(self) -> int:
        return next(self._cmd_ids)

    def add_command(self, dn_uuid: str, command: scm_datanode_pb2.SCMCommandProto) -> scm_datanode_pb2.SCMCommandProto:
        """Queue a command for a datanode, stamped with the leader term (NotLeader on a follower)."""
        term = self.scm_context.get_term_of_leader()
        info = self.require_node(dn_uuid)
        if not command.HasField("cmdId"):
            command.cmdId = self.next_command_id()
        command.term = term
        info.commands.append(command)
        name = enum_name(CommandType, command.commandType)
        self.commands_sent[name] = self.commands_sent.get(name, 0) + 1
        return command

    def queued_commands(self, dn_uuid: str, command_type: int | None = None) -> list[scm_datanode_pb2.SCMCommandProto]:
        info = self._nodes.get(dn_uuid)
        if info is None:
            return []
        return [c for c in info.commands if command_type is None or c.commandType == command_type]

    def queued_count(self, dn_uuid: str, command_type: int) -> int:
        """Commands of a type queued here plus those the DN reported still queued (Ozone throttling)."""
        info = self._nodes.get(dn_uuid)
        if info is None:
            return 0
        return len(self.queued_commands(dn_uuid, command_type)) + info.command_queue_report.get(command_type, 0)

    def take_commands(self, dn_uuid: str) -> list[scm_datanode_pb2.SCMCommandProto]:
        info = self._nodes.get(dn_uuid)
        if info is None:
            return []
        commands, info.commands = info.commands, []
        if not self.scm_context.is_leader():
            return []  # stale: queued in a term we no longer lead
        return commands

    def clear_command_queues(self) -> None:
        for info in self._nodes.values():
            info.commands.clear()

    # ---- operational state ----
    def _queue_set_op_state(self, info: DatanodeInfo) -> None:
        cmd = scm_datanode_pb2.SCMCommandProto(
            commandType=CommandType.setNodeOperationalStateCommand,
            setNodeOperationalStateCommandProto=scm_datanode_pb2.SetNodeOperationalStateCommandProto(
                nodeOperationalState=info.op_state,  # type: ignore[arg-type]
                stateExpiryEpochSeconds=info.op_state_expiry_epoch_s,
            ),
        )
        self.add_command(info.uuid, cmd)

    def set_node_operational_state(self, dn_uuid: str, op_state: int, expiry_epoch_s: int = 0) -> None:
        """Leader only: change the op state and push it to the datanode."""
        self.scm_context.check_leader()
        info = self.require_node(dn_uuid)
        if info.op_state != op_state:
            log.info(
                "datanode %s operational state %s -> %s",
                dn_uuid,
                enum_name(NodeOperationalState, info.op_state),
                enum_name(NodeOperationalState, op_state),
            )
            info.op_state_since_ms = self.clock.wall_ms()
        info.op_state = op_state
        info.op_state_expiry_epoch_s = expiry_epoch_s
        self._queue_set_op_state(info)

    # ---- capacity helpers used by pipelines / containers ----
    def pipeline_limit(self, dn_uuid: str) -> int:
        """ozone.scm.datanode.pipeline.limit, or when it is 0, ozone.scm.pipeline.per.metadata.disk times the
        datanode's healthy volumes (our datanode reports carry no separate metadata volumes)."""
        cfg = self.pipeline_config
        if cfg.datanode_pipeline_limit > 0:
            return cfg.datanode_pipeline_limit
        info = self._nodes.get(dn_uuid)
        return cfg.pipeline_per_metadata_disk * (info.healthy_volumes() if info else 1)

    def open_container_limit(self, dn_uuids: Iterable[str]) -> int:
        """min over members of ceil(owner.container.count * healthyVolumes / pipelineLimit) (Ozone)."""
        # The formula grows with the volume count, so the least-volumed member decides (once per
        # allocated block: kept to a dict lookup per member).
        fewest: int | None = None
        for uuid in dn_uuids:
            info = self._nodes.get(uuid)
            volumes = info.healthy_volumes() if info else 1
            if fewest is None or volumes < fewest:
                fewest = volumes
        if fewest is None:
            return 1
        cfg = self.pipeline_config
        limit = cfg.datanode_pipeline_limit or cfg.pipeline_per_metadata_disk * fewest
        return max(1, -(-cfg.owner_container_count * fewest // limit))

    def to_node_proto(self, info: DatanodeInfo, container_count: int = 0, pipeline_count: int = 0) -> hdds_pb2.Node:
        details = hdds_pb2.DatanodeDetailsProto()
        details.CopyFrom(info.details)
        details.persistedOpState = info.op_state  # type: ignore[assignment]
        details.persistedOpStateExpiry = info.op_state_expiry_epoch_s
        return hdds_pb2.Node(
            nodeID=details,
            nodeStates=[info.health],  # type: ignore[list-item]
            nodeOperationalStates=[info.op_state],  # type: ignore[list-item]
            lastHeartbeatMs=info.last_heartbeat_wall_ms,
            containerCount=container_count,
            pipelineCount=pipeline_count,
            totalVolumeCount=len(info.storage_reports),
            healthyVolumeCount=sum(1 for r in info.storage_reports if not r.failed),
            failedVolumes=[r.storageLocation for r in info.storage_reports if r.failed],
        )
