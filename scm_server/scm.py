"""StorageContainerManager: the SCM facade that the gRPC services, the web UI and the CLI call.

It wires the managers together (Ozone's StorageContainerManager): scm.db (SCMMetadataStore) ->
SCMHADBTransactionBuffer -> replicated state managers (ContainerStateManager,
PipelineStateManager, DeletedBlockLogStateManager, SequenceIdStateManager) registered with the
SCMStateMachineDispatcher -> the managers (SCMNodeManager, PipelineManager, ContainerManager,
BlockManager, DeletedBlockLog, SCMSafeModeManager, ReplicationManager, NodeDecommissionManager)
-> background services under the SCMServiceManager. The HA manager (Raft or the stub) is
attached last and drives ``on_become_leader`` / ``on_leader_ready`` / ``on_step_down`` /
``reinitialize``.

Datanode reports update soft state on every SCM; replicated writes and datanode commands come
only from the leader (commands stamped with its term). Every method raises SCMException
(ResultCodes) or NotLeaderException; the edges translate them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from scm_server.block.block_manager import BlockManager, checked_ec_config
from scm_server.block.deleted_block_log import (
    DeletedBlockLog,
    DeletedBlockLogStateManager,
    SCMBlockDeletingService,
)
from scm_server.clock import Clock, SystemClock
from scm_server.conf import OzoneConfiguration, SCMConfigurations
from scm_server.conf.groups import PipelineConfig, ReplicationManagerConfig, SafeModeConfig
from scm_server.conf.reconfiguration import (
    RECONFIGURABLE,
    AdministratorsConfig,
    PropertyChange,
    reconfigured_group,
)
from scm_server.container.balancer.container_balancer import ContainerBalancer
from scm_server.container.container_manager import ContainerManager
from scm_server.container.container_state_manager import ContainerStateManager
from scm_server.container.reconciliation import REFUSAL_CODES, Eligibility, eligibility, reconcile_commands
from scm_server.container.replication.replication_manager import ReplicationManager
from scm_server.container.report_handlers import (
    ContainerActionsHandler,
    ContainerReportHandler,
    IncrementalContainerReportHandler,
)
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.ha.audit_barrier import AuditBarrierStateManager
from scm_server.ha.dispatcher import SCMStateMachineDispatcher
from scm_server.ha.replicate import RequestType
from scm_server.ha.scm_context import SCMContext
from scm_server.ha.scm_ha_manager_api import SCMHAManager
from scm_server.ha.scm_ha_manager_stub import SCMHAManagerStub
from scm_server.ha.scm_service import Event, SCMServiceManager
from scm_server.ha.secret_key_state import SecretKeyState
from scm_server.ha.sequence_id_generator import SequenceIdGenerator, SequenceIdStateManager
from scm_server.ha.stateful_service_state_manager import (
    CertificateStore,
    FinalizationStateManager,
    StatefulServiceStateManager,
)
from scm_server.ha.transaction_buffer import SCMHADBTransactionBuffer
from scm_server.metadata import SCMMetadataStore, SCMStorageConfig
from scm_server.metadata.enums import enum_name
from scm_server.node.decommission import DatanodeAdminMonitor, NodeDecommissionManager, Replication
from scm_server.node.decommission_metrics import BEAN_NAME as DECOMMISSION_BEAN
from scm_server.node.decommission_metrics import NodeDecommissionProgress, node_decommission_bean, query_beans
from scm_server.node.node_manager import (
    DECOMMISSIONING,
    ENTERING_MAINTENANCE,
    HEALTHY,
    IN_SERVICE,
    DatanodeInfo,
    SCMNodeManager,
)
from scm_server.node.topology_mapping import resolver_from_config
from scm_server.node.usage_info import DatanodeUsageInfo, most_or_least_used, usage_of
from scm_server.ozone_beans import beans_of
from scm_server.ozone_metrics import Bean
from scm_server.pipeline.pipeline_manager import BackgroundPipelineCreator, PipelineManager
from scm_server.pipeline.pipeline_state_manager import CLOSED as PIPELINE_CLOSED
from scm_server.pipeline.pipeline_state_manager import PipelineStateManager
from scm_server.pipeline.placement import PipelinePlacementPolicy, container_policy, leader_choose_policy
from scm_server.proto import hdds_pb2, scm_client_pb2, scm_datanode_pb2
from scm_server.protocols import (
    BalancerStartRequest,
    BalancerStatusInfo,
    BlockAllocation,
    ContainerReport,
    DeletedBlocksSummary,
)
from scm_server.safemode.safe_mode_manager import SCMSafeModeManager
from scm_server.upgrade.finalization import FinalizationManager

log = logging.getLogger(__name__)

SOFTWARE_VERSION = 1
CommandType = scm_datanode_pb2.SCMCommandProto.Type
RegisteredError = scm_datanode_pb2.SCMRegisteredResponseProto.ErrorCode


class StorageContainerManager:
    """One SCM. Build with ``await StorageContainerManager.create(conf, ...)``."""

    def __init__(
        self,
        conf: OzoneConfiguration,
        configs: SCMConfigurations,
        storage_config: SCMStorageConfig,
        metadata_store: SCMMetadataStore,
        ha_manager: SCMHAManager,
        clock: Clock,
        node_id: str | None,
    ) -> None:
        self.conf = conf
        self.config = configs
        # ozone.administrators / ozone.readonly.administrators as last applied; the edges that check
        # administrators register here to follow a run-time reconfiguration
        self.administrators = AdministratorsConfig.from_conf(conf)
        self.administrator_listeners: list[Callable[[AdministratorsConfig], None]] = []
        self.storage_config = storage_config
        self.metadata_store = metadata_store
        self.ha_manager = ha_manager
        self.clock = clock
        self.node_id = node_id or configs.ha.node_id
        self._transaction_buffer = SCMHADBTransactionBuffer(metadata_store)
        self._dispatcher = SCMStateMachineDispatcher()
        non_ratis = isinstance(ha_manager, SCMHAManagerStub)
        self._scm_context = SCMContext.non_ratis() if non_ratis else SCMContext.ratis_follower()
        self._scm_context.set_leader_hint(ha_manager.get_leader)
        self._service_manager = SCMServiceManager()
        buf = self._transaction_buffer

        # Replicated state managers.
        self.sequence_id_state_manager = SequenceIdStateManager(metadata_store, buf, ha_manager)
        self.sequence_id_generator = SequenceIdGenerator(
            self.sequence_id_state_manager, configs.scm.sequence_id_batch_size
        )
        self.pipeline_state_manager = PipelineStateManager(metadata_store, buf, ha_manager)
        self.container_state_manager = ContainerStateManager(metadata_store, buf, ha_manager)
        self.deleted_block_log_state_manager = DeletedBlockLogStateManager(metadata_store, buf, ha_manager)
        self._dispatcher.register(RequestType.SEQUENCE_ID, self.sequence_id_state_manager)
        self._dispatcher.register(RequestType.PIPELINE, self.pipeline_state_manager)
        self._dispatcher.register(RequestType.CONTAINER, self.container_state_manager)
        self._dispatcher.register(RequestType.BLOCK, self.deleted_block_log_state_manager)
        self.stateful_service_state_manager = StatefulServiceStateManager(metadata_store, buf, ha_manager)
        self.finalization_state_manager = FinalizationStateManager(
            metadata_store, buf, ha_manager, initial_layout_version=storage_config.layout_version
        )
        self.certificate_store = CertificateStore(metadata_store, buf, ha_manager)
        self._dispatcher.register(RequestType.STATEFUL_SERVICE_CONFIG, self.stateful_service_state_manager)
        self._dispatcher.register(RequestType.FINALIZE, self.finalization_state_manager)
        self._dispatcher.register(RequestType.CERT_STORE, self.certificate_store)
        self.secret_key_state = SecretKeyState(metadata_store, buf, ha_manager)
        self._dispatcher.register(RequestType.SECRET_KEY, self.secret_key_state)
        # A no-op marker entry at which every SCM captures an audit snapshot (docs/audit.md).
        self.audit_barrier_state_manager = AuditBarrierStateManager(ha_manager)
        self._dispatcher.register(RequestType.AUDIT_BARRIER, self.audit_barrier_state_manager)

        # Managers.
        ctx = self._scm_context
        self.node_manager = SCMNodeManager(configs.node, configs.pipeline, ctx, clock)
        self.location_resolver = resolver_from_config(configs.topology)
        self.pipeline_manager = PipelineManager(
            self.pipeline_state_manager, self.node_manager, ctx, clock, configs.pipeline,
            placement=PipelinePlacementPolicy(),
            leader_policy=leader_choose_policy(configs.placement.leader_choose_policy),
            container_size=configs.scm.container_size,
            ec_placement=container_policy(configs.placement.ec_container_placement),
        )
        self.container_manager = ContainerManager(
            self.container_state_manager,
            self.pipeline_manager,
            self.node_manager,
            self.sequence_id_generator,
            ctx,
            clock,
            configs.scm,
        )
        self.container_report_handler = ContainerReportHandler(self.container_manager)
        self.incremental_container_report_handler = IncrementalContainerReportHandler(self.container_manager)
        self.container_actions_handler = ContainerActionsHandler(self.container_manager)
        self.node_manager.add_listener(self.pipeline_manager)
        self.node_manager.add_listener(self.container_manager)
        self.deleted_block_log = DeletedBlockLog(
            self.deleted_block_log_state_manager,
            self.sequence_id_generator,
            self.node_manager,
            lambda cid: {r.datanode_uuid for r in self.container_manager.get_replicas(cid)},
            ctx,
            clock,
            configs.block,
        )
        self.block_manager = BlockManager(
            self.container_manager,
            self.pipeline_manager,
            self.sequence_id_generator,
            self.deleted_block_log,
            ctx,
            configs.scm,
        )
        self.safe_mode_manager = SCMSafeModeManager(
            configs.safemode, self.node_manager, self.container_manager, self.pipeline_manager, ctx, self._service_manager,
            clock=clock,
        )
        self.replication_manager = ReplicationManager(
            configs.replication,
            self.container_manager,
            self.pipeline_manager,
            self.node_manager,
            ctx,
            clock,
            placement=container_policy(configs.placement.container_placement),
            wait_time_after_safe_mode=configs.safemode.wait_time_after_exit,
            ec_placement=container_policy(configs.placement.ec_container_placement),
        )
        # After the container manager (which drops a dead node's replicas): a health change
        # wakes the ReplicationManager so its report does not lag node state by an interval.
        self.node_manager.add_listener(self.replication_manager)
        self.decommission_manager = NodeDecommissionManager(
            self.node_manager,
            self.container_manager.containers_on,
            self._replication_of,
            self._close_pipelines_of,
            ctx,
            clock,
            configs.replication,
        )
        self.container_balancer = ContainerBalancer(
            configs.balancer,
            self.stateful_service_state_manager,
            self.container_manager,
            self.node_manager,
            self.replication_manager,
            ctx,
            clock,
            wait_time_after_safe_mode=configs.safemode.wait_time_after_exit,
        )
        self.finalization_manager = FinalizationManager(
            self.finalization_state_manager, self.pipeline_manager, self.node_manager, ctx, self._write_layout_version
        )
        self.node_manager.on_healthy_readonly(self._close_pipelines_of_readonly)
        self.pipeline_creator = BackgroundPipelineCreator(
            self.pipeline_manager, ctx, clock, configs.pipeline, configs.safemode.pipeline_creation
        )
        self.block_deleting_service = SCMBlockDeletingService(self.deleted_block_log, ctx, clock, configs.block)
        self.block_deleting_service.wait_time = configs.safemode.wait_time_after_exit
        self.datanode_admin_monitor = DatanodeAdminMonitor(
            self.decommission_manager, ctx, clock, configs.node.admin_monitor_interval
        )
        for service in (
            self.replication_manager,
            self.container_balancer,
            self.pipeline_creator,
            self.block_deleting_service,
            self.datanode_admin_monitor,
        ):
            self._service_manager.register(service)
        self.last_backup_served: float | None = None  # scm_backup_last_served_timestamp_seconds
        self.metrics_registry = CollectorRegistry(auto_describe=False)
        self.metrics_registry.register(SCMCollector(self))
        ha_metrics = ha_manager.metrics_collector()
        if ha_metrics is not None:
            self.metrics_registry.register(ha_metrics)
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        ha_manager.attach(self)

    # ---- construction ----
    @classmethod
    async def create(
        cls,
        conf: OzoneConfiguration,
        *,
        ha_manager: SCMHAManager | None = None,
        clock: Clock | None = None,
        node_id: str | None = None,
        metadata_store: SCMMetadataStore | None = None,
        storage_config: SCMStorageConfig | None = None,
    ) -> StorageContainerManager:
        """Open scm.db, build the managers and attach the HA manager (the stub if None).

        The storage must be initialised (``ozone-scm scm --init`` / ``--bootstrap`` wrote VERSION).
        """
        configs = SCMConfigurations.from_conf(conf)
        storage = storage_config or SCMStorageConfig(configs.scm.scm_db_dir)
        if not storage.is_initialized:
            raise SCMException(
                ResultCodes.SCM_NOT_INITIALIZED,
                f"SCM storage at {storage.version_file} is not initialized; run `ozone-scm scm --init` "
                "(primordial SCM) or `ozone-scm scm --bootstrap` first",
            )
        store = metadata_store or SCMMetadataStore(configs.scm.scm_db_dir)
        return cls(conf, configs, storage, store, ha_manager or SCMHAManagerStub(store), clock or SystemClock(), node_id)

    # ---- SCMHAHost ----
    @property
    def transaction_buffer(self) -> SCMHADBTransactionBuffer:
        return self._transaction_buffer

    @property
    def dispatcher(self) -> SCMStateMachineDispatcher:
        return self._dispatcher

    @property
    def scm_context(self) -> SCMContext:
        return self._scm_context

    @property
    def service_manager(self) -> SCMServiceManager:
        return self._service_manager

    def on_become_leader(self, term: int) -> None:
        log.info("SCM %s became leader at term %d", self.storage_config.scm_id, term)
        self._scm_context.update_leader_and_term(True, term)
        self.sequence_id_generator.invalidate_batch()
        self._transaction_buffer.flush_if_needed()
        self.node_manager.clear_command_queues()
        self.deleted_block_log.on_become_leader()
        self.replication_manager.on_become_leader()
        self._service_manager.notify_status_changed()

    def on_leader_ready(self) -> None:
        self._scm_context.set_leader_ready()
        self._service_manager.notify_status_changed()
        self.finalization_manager.on_leader_ready()

    def on_step_down(self, term: int) -> None:
        log.info("SCM %s is no longer leader (term %d)", self.storage_config.scm_id, term)
        self._scm_context.update_leader_and_term(False, term)
        self.sequence_id_generator.invalidate_batch()
        self.node_manager.clear_command_queues()
        self.finalization_manager.on_step_down()
        self._service_manager.notify_status_changed()

    @property
    def sequence_batch_size(self) -> int:
        return self.sequence_id_generator.batch_size

    def on_backup_served(self, wall_time_s: float) -> None:
        self.last_backup_served = wall_time_s

    def set_state_machine_ready_hook(self, ready: Callable[[], bool]) -> None:
        self.safe_mode_manager.set_state_machine_ready_hook(ready)

    def reinitialize(self) -> None:
        """Reload every replicated manager from scm.db (after a checkpoint install)."""
        self._transaction_buffer.init()
        self.sequence_id_generator.reinitialize()
        self.pipeline_manager.reinitialize()
        self.container_manager.reinitialize()
        self.deleted_block_log.reinitialize()
        self.stateful_service_state_manager.reinitialize()
        self.finalization_state_manager.reinitialize()
        self.certificate_store.reinitialize()
        self.secret_key_state.reinitialize()
        for cid in list(self.container_manager.all_replicas()):
            if not self.container_manager.exists(cid):
                self.container_manager.forget_container(cid)
        log.info("SCM reloaded from scm.db at %s", self._transaction_buffer.latest_trx_info())

    # ---- lifecycle ----
    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        await self.ha_manager.start()
        await self._service_manager.start()
        self.safe_mode_manager.validate()
        self._tasks.append(asyncio.get_running_loop().create_task(self._health_loop(), name="scm-node-health"))
        self._tasks.append(asyncio.get_running_loop().create_task(self._safemode_log_loop(), name="scm-safemode-log"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        await self.finalization_manager.stop()
        await self._service_manager.stop()
        if self._started:
            await self.ha_manager.stop()
        self._started = False
        self.metadata_store.close()

    async def _health_loop(self) -> None:
        interval = self.config.node.heartbeat_thread_interval.total_seconds()
        while True:
            await asyncio.sleep(interval)
            try:
                await self.run_health_check()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("node health check failed; retrying next interval")

    async def _safemode_log_loop(self) -> None:
        """While in safemode, the status and each rule's progress every hdds.scm.safemode.log.interval (read
        again before every wait: a reconfigured interval applies from the next line on)."""
        while True:
            await asyncio.sleep(self.safe_mode_manager.config.log_interval.total_seconds())
            if self.safe_mode_manager.in_safe_mode():
                log.info("%s", self.safe_mode_manager.status_line())

    async def run_health_check(self) -> None:
        """One pass of the node health check + safemode refresh (the background loop calls this)."""
        await self.node_manager.check_node_health()
        self.safe_mode_manager.validate()

    # ---- helpers ----
    def _replication_of(self, container_id: int) -> Replication:
        info = self.container_manager.get_container(container_id)
        good = [
            r
            for r in self.container_manager.get_replicas(container_id)
            if r.state in (hdds_pb2.ContainerReplicaProto.CLOSED, hdds_pb2.ContainerReplicaProto.QUASI_CLOSED)
            or (info.state == hdds_pb2.OPEN and r.state == hdds_pb2.ContainerReplicaProto.OPEN)
        ]
        if info.replicationType == hdds_pb2.EC:
            ec = info.ecReplicationConfig
            width = ec.data + ec.parity
            holders = {r.datanode_uuid: r.replica_index for r in good if 1 <= r.replica_index <= width}
            return Replication(width, holders, ec_data=ec.data)
        required = 1 if info.replicationFactor == hdds_pb2.ONE else 3
        return Replication(required, {r.datanode_uuid: 0 for r in good})

    def _write_layout_version(self, layout_version: int) -> None:
        """A finalized layout feature is recorded in VERSION too (Ozone's source of truth for the MLV)."""
        self.storage_config.layout_version = layout_version
        self.storage_config.persist()

    async def _close_pipelines_of_readonly(self, dn_uuid: str) -> None:
        """Ozone's HealthyReadOnlyNodeHandler: the leader closes the pipelines of a node that turned
        HEALTHY_READONLY (their open containers close with them, so the node can finalize)."""
        if self._scm_context.is_leader():
            await self._safely(self._close_pipelines_of(dn_uuid))

    async def _close_pipelines_of(self, dn_uuid: str) -> None:
        for p in self.pipeline_manager.pipelines_of(dn_uuid):
            if p.state != PIPELINE_CLOSED:
                await self.pipeline_manager.close_pipeline(p.id.id)

    # ---- call guard (scm_server.server.call_guard) ----
    def require_leader(self) -> None:
        """Leader-only client/admin calls: NotLeaderException with the leader's hint on a follower, and
        without a hint on a leader whose lease expired (it was frozen or cut off from its peers: a new
        leader may exist that it has not heard of yet, so it must not hand out IDs from memory)."""
        self._scm_context.check_leader()
        if self._scm_context.is_ratis():
            left = self.ha_manager.leader_lease_remaining()
            if left <= 0:
                raise NotLeaderException(
                    f"SCM {self.node_id or self.storage_config.scm_id} has not heard from a majority of its peers "
                    f"for longer than the election timeout ({-left:.1f}s past its leader lease); another SCM may "
                    "lead now",
                )

    def is_leader_ready(self) -> bool:
        return self._scm_context.is_leader_ready()

    def dn_reports_ready(self) -> bool:
        return self.ha_manager.dn_reports_ready()

    def node_id_of_peer(self, peer_id: str) -> str:
        node = self.ha_manager.node_of_peer(peer_id)
        return node.node_id if node is not None and node.node_id else peer_id

    def leader_peer_id(self) -> str | None:
        return self.ha_manager.leader_peer_id()

    def leader_node_id(self) -> str | None:
        leader = self.ha_manager.leader_peer_id()
        node = self.ha_manager.node_of_peer(leader) if leader else None
        return node.node_id if node is not None else None

    def answer_label(self) -> tuple[str, str, str]:
        """(who answers, its Raft role, the leader it follows) for a per-SCM view."""
        who = self.node_id or self.storage_config.scm_id or ""
        if not self._scm_context.is_ratis():
            return who, "LEADER", self.storage_config.scm_id or ""
        role = self.ha_manager.raft_role() or ("LEADER" if self._scm_context.is_leader() else "FOLLOWER")
        leader = self.ha_manager.get_leader()
        return who, role, leader[0] if leader else ""

    def _check_not_safe_mode(self, what: str) -> None:
        if self.safe_mode_manager.in_safe_mode():
            raise SCMException(ResultCodes.SAFE_MODE_EXCEPTION, f"SCM is in safe mode; {what} is not allowed")

    # ---- datanode protocol ----
    def get_version(self) -> scm_datanode_pb2.SCMVersionResponseProto:
        return scm_datanode_pb2.SCMVersionResponseProto(
            softwareVersion=SOFTWARE_VERSION,
            keys=[
                hdds_pb2.KeyValue(key="clusterID", value=self.storage_config.cluster_id or ""),
                hdds_pb2.KeyValue(key="scmUuid", value=self.storage_config.scm_id or ""),
            ],
        )

    def _check_dn_traffic_allowed(self) -> None:
        """HA (HDDS-14989): refuse datanode calls (a retriable error: the datanode keeps its reports)
        until this SCM has caught up with the leader's commit index; Ozone does not even start the
        datanode server until then. The stub (non-Raft) never refuses."""
        self.ha_manager.check_dn_reports_allowed()

    async def register_datanode(
        self, request: scm_datanode_pb2.SCMRegisterRequestProto
    ) -> scm_datanode_pb2.SCMRegisteredResponseProto:
        self._check_dn_traffic_allowed()
        details = request.datanodeDetails
        cluster_id = self.storage_config.cluster_id or ""
        if request.HasField("clusterID") and request.clusterID and request.clusterID != cluster_id:
            log.warning("refused datanode %s: cluster id %s != %s", details.uuid, request.clusterID, cluster_id)
            return scm_datanode_pb2.SCMRegisteredResponseProto(
                errorCode=RegisteredError.errorNodeNotPermitted,
                datanodeUUID=details.uuid,
                clusterID=cluster_id,
                errorMessage=(
                    f"datanode belongs to cluster {request.clusterID} but this SCM serves {cluster_id}; "
                    "point the datanode at the right SCM or wipe its metadata to join this cluster"
                ),
            )
        layout = request.dataNodeLayoutVersion if request.HasField("dataNodeLayoutVersion") else None
        software = self.finalization_state_manager.software_layout_version
        if layout is not None and layout.softwareLayoutVersion != software:
            log.warning("refused datanode %s: software layout version %d != SCM's %d", details.uuid,
                        layout.softwareLayoutVersion, software)
            return scm_datanode_pb2.SCMRegisteredResponseProto(
                errorCode=RegisteredError.errorNodeNotPermitted,
                datanodeUUID=details.uuid,
                clusterID=cluster_id,
                errorMessage=(
                    f"datanode software layout version {layout.softwareLayoutVersion} is not this SCM's "
                    f"({software}): run the datanode on the same Ozone release as SCM (HDDS layout "
                    f"{software} is Ozone 2.2.0's)"
                ),
            )
        details = hdds_pb2.DatanodeDetailsProto()
        details.CopyFrom(request.datanodeDetails)
        details.networkLocation = await self.location_resolver.resolve(details)
        info = self.node_manager.register(details, layout)
        self.node_manager.process_node_report(details.uuid, request.nodeReport)
        await self._safely(self.container_report_handler.on_message(details.uuid, request.containerReport))
        await self._safely(self.pipeline_manager.process_pipeline_report(details.uuid, request.pipelineReports))
        self.safe_mode_manager.validate()
        self._service_manager.notify_event_triggered(Event.NEW_NODE_HANDLER_TRIGGERED)
        return scm_datanode_pb2.SCMRegisteredResponseProto(
            errorCode=RegisteredError.success,
            datanodeUUID=details.uuid,
            clusterID=cluster_id,
            hostname=info.details.hostName,
            ipAddress=info.details.ipAddress,
            networkName=info.details.networkName,
            networkLocation=info.rack,
        )

    async def _safely(self, coro: Any) -> None:
        """Report processing must never fail a heartbeat: log and go on."""
        try:
            await coro
        except NotLeaderException:
            log.info("leadership changed while processing a report")
        except SCMException as exc:
            log.warning("report processing: %s", exc)

    async def process_heartbeat(
        self, request: scm_datanode_pb2.SCMHeartbeatRequestProto, container_report: ContainerReport | None = None
    ) -> scm_datanode_pb2.SCMHeartbeatResponseProto:
        """One heartbeat and the reports it carries. ``container_report``: the heartbeat's full container report
        when an edge passes it apart from ``request`` (as decoded from Ozone's message), read instead of
        ``request.containerReport``."""
        self._check_dn_traffic_allowed()
        dn = request.datanodeDetails
        layout = request.dataNodeLayoutVersion if request.HasField("dataNodeLayoutVersion") else None
        response = scm_datanode_pb2.SCMHeartbeatResponseProto(datanodeUUID=dn.uuid)
        if self._scm_context.is_leader():
            response.term = self._scm_context.term
        if not await self.node_manager.process_heartbeat(dn, layout):
            reregister = scm_datanode_pb2.SCMCommandProto(
                commandType=CommandType.reregisterCommand,
                cmdId=self.node_manager.next_command_id(),
                reregisterCommandProto=scm_datanode_pb2.ReregisterCommandProto(),
            )
            if self._scm_context.is_leader():
                reregister.term = self._scm_context.term
            response.commands.append(reregister)
            return response
        uuid = dn.uuid
        if request.HasField("nodeReport"):
            self.node_manager.process_node_report(uuid, request.nodeReport)
        if container_report is not None:
            await self._safely(self.container_report_handler.on_message(uuid, container_report))
        elif request.HasField("containerReport"):
            await self._safely(self.container_report_handler.on_message(uuid, request.containerReport))
        for icr in request.incrementalContainerReport:
            await self._safely(self.incremental_container_report_handler.on_message(uuid, icr))
        if request.HasField("pipelineReports"):
            await self._safely(self.pipeline_manager.process_pipeline_report(uuid, request.pipelineReports))
        for report in request.commandStatusReports:
            for status in report.cmdStatus:
                await self._safely(self.deleted_block_log.process_command_status(uuid, status))
        if request.HasField("pipelineActions"):
            for action in request.pipelineActions.pipelineActions:
                await self._safely(self.pipeline_manager.process_pipeline_action(uuid, action))
        if request.HasField("containerActions"):
            await self._safely(self.container_actions_handler.on_message(uuid, request.containerActions))
        if request.HasField("commandQueueReport"):
            self.node_manager.process_command_queue_report(uuid, request.commandQueueReport)
        self.safe_mode_manager.validate()
        response.commands.extend(self.node_manager.take_commands(uuid))
        return response

    # ---- block protocol ----
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
    ) -> list[BlockAllocation]:
        """Ozone's allocateBlock: (containerID, localID, shared read-only pipeline) per block; each edge writes
        its own answer from them (see :class:`scm_server.protocols.BlockAllocation`). ``ec``: an EC layout, with
        ``replication_type`` EC (the factor is then not read)."""
        return await self.block_manager.allocate_block(
            size, num_blocks, replication_type, replication_factor, owner, exclude_list, ec=ec
        )

    async def delete_key_blocks(
        self, key_blocks: list[scm_client_pb2.KeyBlocks]
    ) -> list[scm_client_pb2.DeleteKeyBlocksResultProto]:
        return await self.block_manager.delete_key_blocks(key_blocks)

    def get_scm_info(self) -> scm_client_pb2.GetScmInfoResponseProto:
        return scm_client_pb2.GetScmInfoResponseProto(
            clusterId=self.storage_config.cluster_id or "",
            scmId=self.storage_config.scm_id or "",
            peerRoles=self.ha_manager.peer_roles(),
        )

    # ---- admin: containers ----
    async def allocate_container(
        self, rtype: int, rfactor: int, owner: str, ec: hdds_pb2.ECReplicationConfig | None = None
    ) -> hdds_pb2.ContainerWithPipeline:
        self._scm_context.check_leader()  # before safemode: a follower sends the client to the leader
        self._check_not_safe_mode("container allocation")
        if rtype == hdds_pb2.EC:
            ec = checked_ec_config(ec)
        info = await self.container_manager.allocate_container(rtype, rfactor, owner, ec=ec)
        return hdds_pb2.ContainerWithPipeline(
            containerInfo=self.container_manager.get_container(info.containerID),
            pipeline=self.pipeline_manager.get_pipeline(info.pipelineID.id),
        )

    def get_container(self, container_id: int) -> hdds_pb2.ContainerInfoProto:
        return self.container_manager.get_container(container_id)

    def get_container_with_pipeline(
        self, container_id: int
    ) -> tuple[hdds_pb2.ContainerWithPipeline, list[hdds_pb2.ContainerReplicaInfo]]:
        info = self.container_manager.get_container(container_id)
        replicas = self.container_manager.replica_info(container_id)
        info, pipeline = self._with_pipeline(info, lambda: replicas)
        return hdds_pb2.ContainerWithPipeline(containerInfo=info, pipeline=pipeline), replicas

    def container_and_pipeline(self, container_id: int) -> tuple[hdds_pb2.ContainerInfoProto, hdds_pb2.Pipeline]:
        """:meth:`get_container_with_pipeline` as its two parts, without the replicas beside it: their details
        (each datanode's) are built only when the pipeline is described from them, and an open pipeline is the
        pipeline manager's stored message itself (read it, never change it), not a copy."""
        info = self.container_manager.get_container(container_id)
        return self._with_pipeline(info, lambda: self.container_manager.replica_info(container_id))

    def containers_encoded_with_pipelines(
        self, container_ids: Sequence[int]
    ) -> list[tuple[bytes, str | None, hdds_pb2.Pipeline]]:
        """:meth:`container_and_pipeline` of each id, the container serialized from the container manager's kept
        form (as :meth:`list_containers_encoded`), with its pipeline id: a batch of unchanged containers on open
        pipelines builds no container message. A container whose pipeline is gone, or an EC one, is described as
        :meth:`container_and_pipeline` describes it. An unknown id fails the whole call (CONTAINER_NOT_FOUND)."""
        find = self.pipeline_manager.find
        out = []
        for cid, (data, pipeline_id) in zip(container_ids, self.container_manager.encoded(container_ids), strict=True):
            pipeline = find(pipeline_id) if pipeline_id is not None else None
            if pipeline is None or pipeline.type == hdds_pb2.EC:
                _, pipeline = self.container_and_pipeline(cid)
            out.append((data, pipeline_id, pipeline))
        return out

    def _with_pipeline(
        self, info: hdds_pb2.ContainerInfoProto, replicas_of: Callable[[], list[hdds_pb2.ContainerReplicaInfo]]
    ) -> tuple[hdds_pb2.ContainerInfoProto, hdds_pb2.Pipeline]:
        pipeline = self.pipeline_manager.find(info.pipelineID.id) if info.HasField("pipelineID") else None
        is_ec = info.replicationType == hdds_pb2.EC
        if pipeline is None or (is_ec and info.state != hdds_pb2.OPEN):
            replicas = replicas_of()
            # The pipeline is gone (closed/removed), or the EC container is no longer written: describe where
            # the replicas are, like Ozone's createPipelineForRead (for EC, each member with the index it holds,
            # so a reader finds a rebuilt index on its new datanode).
            if is_ec:
                replicas = sorted(replicas, key=lambda r: (r.replica.replicaIndex, r.datanode.uuid))
            pipeline = hdds_pb2.Pipeline(
                id=info.pipelineID if info.HasField("pipelineID") else hdds_pb2.PipelineID(id=""),
                members=[r.datanode for r in replicas],
                state=hdds_pb2.PIPELINE_CLOSED,
                type=info.replicationType,
            )
            if is_ec:
                pipeline.ecReplicationConfig.CopyFrom(info.ecReplicationConfig)
                pipeline.memberReplicaIndexes.extend(r.replica.replicaIndex for r in replicas)
            else:
                pipeline.factor = info.replicationFactor
        return info, pipeline

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
    ) -> tuple[list[hdds_pb2.ContainerInfoProto], int]:
        """Containers with id >= start_id matching the filters: (first ``count``, total matching)."""
        if count < 0:
            raise SCMException(ResultCodes.INVALID_REQUEST, f"count must be >= 0, got {count}")
        page, total = self.container_manager.state_manager.list_containers(
            start_id, count, state, rtype, rfactor, suppressed, ec=ec
        )
        return self.container_manager.with_reported_usage(page), total

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
    ) -> tuple[list[tuple[bytes, str | None]], int]:
        """:meth:`list_containers` with each container serialized (and its pipeline id beside it), from the
        container manager's kept forms: a page of 1,000 builds no message when nothing changed since the last."""
        if count < 0:
            raise SCMException(ResultCodes.INVALID_REQUEST, f"count must be >= 0, got {count}")
        ids, total = self.container_manager.state_manager.list_container_ids(
            start_id, count, state, rtype, rfactor, suppressed, ec=ec
        )
        return self.container_manager.encoded(ids), total

    async def suppress_containers(self, container_ids: list[int], suppress: bool) -> list[int]:
        """``ozone admin container report --suppress|--unsuppress``: mark containers (replicated, as Ozone's
        updateContainerInfo) so the replication manager counts them by state but checks and repairs nothing;
        returns the ids that could not be marked (unknown ones), the others are done."""
        self._scm_context.check_leader()
        failed = []
        for cid in container_ids:
            if not self.container_manager.exists(cid):
                failed.append(cid)
                continue
            info = self.container_manager.get_container(cid)
            if info.suppressed == suppress:
                continue
            info.suppressed = suppress
            try:
                await self.container_state_manager.update_container_info(info)
            except SCMException as exc:  # e.g. its state changed meanwhile: that one is reported failed
                log.warning("container #%d not %s: %s", cid, "suppressed" if suppress else "unsuppressed", exc)
                failed.append(cid)
        return failed

    def reconcile_container(self, container_id: int) -> None:
        """``ozone admin container reconcile``: Ozone's eligibility rules (refused with its result codes and
        messages), then one ``reconcileContainerCommand`` per replica's datanode naming the other replicas'
        datanodes as peers (leader only; stamped with its term)."""
        self._scm_context.check_leader()
        exists = self.container_manager.exists(container_id)
        info = self.container_manager.get_container(container_id) if exists else None
        replicas = self.container_manager.get_replicas(container_id) if exists else []
        result = eligibility(container_id, info, [r.state for r in replicas])
        if result.result is not Eligibility.OK:
            raise SCMException(REFUSAL_CODES[result.result], result.message)
        holders = [n.details for r in replicas if (n := self.node_manager.get_node(r.datanode_uuid)) is not None]
        for uuid, command in reconcile_commands(container_id, holders):
            self.node_manager.add_command(uuid, command)
        log.info("reconciling container %d on %d datanodes", container_id, len(holders))

    async def close_container(self, container_id: int) -> None:
        self._scm_context.check_leader()
        info = self.container_manager.get_container(container_id)
        if info.state not in (hdds_pb2.OPEN, hdds_pb2.CLOSING, hdds_pb2.QUASI_CLOSED):
            raise SCMException(
                ResultCodes.UNEXPECTED_CONTAINER_STATE,
                f"cannot close container #{container_id}: it is {enum_name(hdds_pb2.LifeCycleState, info.state)}",
            )
        await self.container_manager.close_container(container_id)

    # ---- admin: pipelines ----
    def list_pipelines(self) -> list[hdds_pb2.Pipeline]:
        return self.pipeline_manager.get_pipelines()

    async def create_pipeline(
        self, rtype: int, rfactor: int, ec: hdds_pb2.ECReplicationConfig | None = None
    ) -> hdds_pb2.Pipeline:
        self._scm_context.check_leader()
        if rtype == hdds_pb2.EC:
            ec = checked_ec_config(ec)
        return await self.pipeline_manager.create_pipeline(rtype, rfactor, ec=ec)

    async def close_pipeline(self, pipeline_id: str) -> None:
        await self.pipeline_manager.close_pipeline(pipeline_id)

    async def activate_pipeline(self, pipeline_id: str) -> None:
        await self.pipeline_manager.activate_pipeline(pipeline_id)

    async def deactivate_pipeline(self, pipeline_id: str) -> None:
        await self.pipeline_manager.deactivate_pipeline(pipeline_id)

    # ---- admin: safemode ----
    def in_safe_mode(self) -> tuple[bool, bool]:
        return self.safe_mode_manager.in_safe_mode(), self.safe_mode_manager.pre_check_complete()

    def force_exit_safe_mode(self) -> bool:
        return self.safe_mode_manager.force_exit()

    def safe_mode_rule_statuses(self) -> list[hdds_pb2.SafeModeRuleStatus]:
        return self.safe_mode_manager.rule_statuses()

    # ---- admin: replication manager ----
    def start_replication_manager(self) -> None:
        self.replication_manager.enabled = True
        self.replication_manager.trigger()

    def stop_replication_manager(self) -> None:
        self.replication_manager.enabled = False

    def replication_manager_status(self) -> bool:
        return self.replication_manager.is_running()

    def replication_manager_report(self) -> hdds_pb2.ReplicationManagerReportProto:
        return self.replication_manager.last_report

    # ---- admin: datanodes ----
    def query_nodes(self, state: int | None = None, op_state: int | None = None) -> list[hdds_pb2.Node]:
        return [
            self.node_manager.to_node_proto(
                n,
                container_count=self.container_manager.container_count_on(n.uuid),
                pipeline_count=self.pipeline_manager.pipeline_count_of(n.uuid),
            )
            for n in self.node_manager.get_nodes(state, op_state)
        ]

    async def decommission_nodes(self, hosts: list[str], force: bool = False) -> list[scm_client_pb2.DatanodeAdminError]:
        return await self.decommission_manager.decommission(hosts, force)

    async def start_maintenance_nodes(
        self, hosts: list[str], end_hours: int = 0
    ) -> list[scm_client_pb2.DatanodeAdminError]:
        return await self.decommission_manager.start_maintenance(hosts, end_hours)

    async def recommission_nodes(self, hosts: list[str]) -> list[scm_client_pb2.DatanodeAdminError]:
        return await self.decommission_manager.recommission(hosts)

    def datanode_usage_info(self, address: str = "", uuid: str = "") -> list[DatanodeUsageInfo]:
        """``ozone admin datanode usageinfo --uuid|--address``: the named datanode (by uuid), or every datanode
        at the address (IP address or host name), as Ozone's ``getDatanodeUsageInfo(address, uuid)``."""
        if uuid:
            nodes = [self.node_manager.get_node(uuid)]
            if nodes[0] is None:
                raise SCMException(ResultCodes.NO_SUCH_DATANODE, f"no datanode {uuid} is registered")
        elif address:
            nodes = [n for n in self.node_manager.all_nodes() if address in (n.details.ipAddress, n.details.hostName)]
        else:
            raise SCMException(ResultCodes.INVALID_REQUEST, "Could not get datanode with the specified parameters.")
        return [self._usage_of(n) for n in nodes if n is not None]

    def most_or_least_used_datanodes(self, most_used: bool, count: int) -> list[DatanodeUsageInfo]:
        """``ozone admin datanode usageinfo --most-used|--least-used --count N``: healthy in-service datanodes
        ranked by utilization (Ozone's ``getMostOrLeastUsedDatanodes``)."""
        if count < 1:
            raise SCMException(
                ResultCodes.INVALID_REQUEST, "The specified parameter count must be an integer greater than zero."
            )
        usages = [self._usage_of(n) for n in self.node_manager.get_nodes(HEALTHY, IN_SERVICE)]
        return most_or_least_used(usages, most_used, count)

    def _usage_of(self, node: DatanodeInfo) -> DatanodeUsageInfo:
        return usage_of(
            node, self.container_manager.container_count_on(node.uuid), self.pipeline_manager.pipeline_count_of(node.uuid)
        )

    def containers_on_decom_node(self, dn_uuid: str) -> dict[str, list[int]]:
        """``ozone admin datanode status decommission``: the containers still holding a decommissioning (or
        entering-maintenance) datanode back, as Ozone's ``getContainersPendingReplication``: ``UnClosed`` (not
        CLOSED or QUASI_CLOSED yet) and ``UnderReplicated`` (too few replicas on other healthy in-service
        datanodes). A datanode not leaving has none (an empty answer, as Ozone's monitor tracks only those)."""
        node = self.node_manager.get_node(dn_uuid)
        if node is None:
            raise SCMException(
                ResultCodes.NO_SUCH_DATANODE, "Failed to get containers list. Unable to find required node"
            )
        if node.op_state not in (DECOMMISSIONING, ENTERING_MAINTENANCE):
            return {}
        progress = self._decommission_progress(node)
        return {"UnderReplicated": list(progress.under_replicated), "UnClosed": list(progress.unclosed)}

    def _decommission_progress(self, node: DatanodeInfo) -> NodeDecommissionProgress:
        maintenance = node.op_state == ENTERING_MAINTENANCE
        under, unclosed, sufficient = [], [], 0
        for cid in sorted(self.container_manager.containers_on(node.uuid)):
            if not self.container_manager.exists(cid):
                continue
            if self.container_manager.get_container(cid).state not in (hdds_pb2.CLOSED, hdds_pb2.QUASI_CLOSED):
                unclosed.append(cid)
            elif self.decommission_manager.replicated_elsewhere(cid, node.uuid, maintenance):
                sufficient += 1
            else:
                under.append(cid)
        return NodeDecommissionProgress(
            host=node.host,
            pipelines_waiting_to_close=self.pipeline_manager.pipeline_count_of(node.uuid),
            under_replicated=tuple(under),
            unclosed=tuple(unclosed),
            sufficiently_replicated=sufficient,
            start_time_ms=node.op_state_since_ms,
        )

    def decommission_bean(self) -> dict[str, object]:
        """Ozone's NodeDecommissionMetrics bean as the JMX servlet writes it (totals, then one record per node)."""
        leaving = [
            n for n in self.node_manager.all_nodes() if n.op_state in (DECOMMISSIONING, ENTERING_MAINTENANCE)
        ]
        return node_decommission_bean([self._decommission_progress(n) for n in leaving])

    def get_metrics(self, query: str) -> str:
        """Ozone's ``getMetrics``: the JMX beans matching ``query`` as the JMX servlet's JSON: the
        NodeDecommissionMetrics bean (what ``ozone admin datanode status decommission`` reads) and every Ozone
        bean /jmx serves (:meth:`ozone_beans`)."""
        others = [b.as_jmx() for b in self.ozone_beans() if b.name != DECOMMISSION_BEAN]
        return query_beans(query, [self.decommission_bean(), *others])

    def ozone_beans(self, hostname: str = "", ports: dict[str, int] | None = None) -> list[Bean]:
        """Ozone's SCM beans with this SCM's values (/jmx, and /prom under the names Ozone's sink writes)."""
        return beans_of(self, hostname or self.node_id or "", ports or {})

    # ---- admin: the SCM ring ----
    async def transfer_leadership(self, new_leader_id: str) -> str:
        """``ozone admin scm transfer``: Raft leadership to the member ``new_leader_id`` (any other member when
        empty, as Ozone picks the first peer that is not the leader); returns the new leader's id."""
        return await self.ha_manager.transfer_leadership(new_leader_id or None)

    async def add_scm(self, cluster_id: str, scm_id: str, ratis_address: str) -> str:
        """Ozone's ``addSCM`` (block protocol): the SCM ``scm_id`` whose Raft listens at ``ratis_address`` joins
        the ring, if it belongs to this cluster."""
        ours = self.storage_config.cluster_id or ""
        if cluster_id != ours:
            raise SCMException(
                ResultCodes.INVALID_CLUSTER_ID,
                f"SCM {scm_id} with addr {ratis_address} has cluster Id {cluster_id} but leader SCM cluster id is {ours}",
            )
        return await self.ha_manager.add_scm(scm_id, ratis_address)

    async def decommission_scm(self, scm_id: str) -> str:
        """``ozone admin scm decommission``: remove the member ``scm_id`` from the ring (never the leader)."""
        return await self.ha_manager.remove_scm(scm_id)

    # ---- admin: deleted blocks, upgrades ----
    def deleted_blocks_summary(self) -> DeletedBlocksSummary:
        """``ozone admin scm deletedBlocksTxn summary``: the deleted-block log's transactions and blocks."""
        transactions = self.deleted_block_log_state_manager.transactions()
        return DeletedBlocksSummary(len(transactions), sum(len(t.localID) for t in transactions))

    async def finalize_upgrade(self, client_id: str) -> tuple[str, list[str]]:
        """``ozone admin scm finalizeupgrade`` (leader): ``ALREADY_FINALIZED`` when the metadata layout is the
        software's, else ``STARTING_FINALIZATION`` once finalization has started (it goes on in the background;
        see :mod:`scm_server.upgrade.finalization`)."""
        self.require_leader()
        answer = await self.finalization_manager.finalize(client_id)
        return answer.status.value, list(answer.messages)

    def upgrade_finalization_progress(self, client_id: str, takeover: bool, readonly: bool) -> tuple[str, list[str]]:
        """``finalizationstatus`` (readonly: this SCM's status, ``FINALIZATION_DONE`` on a cluster that needed no
        finalization, as Ozone's SCM prints) or the finalizing client's poll (its queued messages)."""
        answer = self.finalization_manager.report(client_id, takeover, readonly)
        return answer.status.value, list(answer.messages)

    # ---- admin: the container balancer ----
    async def start_container_balancer(self, request: BalancerStartRequest) -> str:
        """``ozone admin containerbalancer start``: record a run through Raft (the options over the
        ``hdds.container.balancer.*`` keys); SCMException with the reason when it cannot start."""
        self.require_leader()
        return await self.container_balancer.start_balancer(request)

    async def stop_container_balancer(self) -> None:
        """``ozone admin containerbalancer stop``: record that the run stops (SCMException when none runs)."""
        self.require_leader()
        await self.container_balancer.stop_balancer()

    def container_balancer_status(self) -> bool:
        return self.container_balancer.is_balancer_running()

    def container_balancer_status_info(self) -> BalancerStatusInfo:
        """``ozone admin containerbalancer status -v``: the recorded run and the iterations this leader ran."""
        record = self.container_balancer.record()
        running = record is not None and record.shouldRun
        return BalancerStatusInfo(running, record, tuple(self.container_balancer.history))

    # ---- run-time reconfiguration (Ozone's ReconfigurationHandler) ----
    def reconfigurable_properties(self) -> list[str]:
        """The keys this SCM applies without a restart (``ozone admin reconfig properties``), sorted."""
        return sorted(RECONFIGURABLE)

    def reconfigure_property(self, change: PropertyChange) -> None:
        """Apply one changed key to the running managers; ConfigError (nothing changed) when its group refuses
        the value. A removed key goes back to its default. The administrators go to the listeners the edges
        registered (:attr:`administrator_listeners`: the Hadoop RPC administrator checks)."""
        group = reconfigured_group(self.conf, change)
        if isinstance(group, ReplicationManagerConfig):
            self.replication_manager.config = group
            self.replication_manager.interval = group.interval
            self.decommission_manager.config = group
            self.config = dataclasses.replace(self.config, replication=group)  # a new interval: after the current wait
        elif isinstance(group, PipelineConfig):
            ec_only = dataclasses.replace(self.pipeline_manager.config, ec_pipeline_minimum=group.ec_pipeline_minimum,
                                          ec_pipeline_per_volume_factor=group.ec_pipeline_per_volume_factor)
            self.pipeline_manager.config = ec_only  # read at the next EC block allocation
            self.config = dataclasses.replace(self.config, pipeline=ec_only)
        elif isinstance(group, SafeModeConfig):
            self.safe_mode_manager.config = dataclasses.replace(self.safe_mode_manager.config,
                                                                log_interval=group.log_interval)
            self.config = dataclasses.replace(self.config, safemode=self.safe_mode_manager.config)
        elif isinstance(group, AdministratorsConfig):
            for listener in self.administrator_listeners:
                listener(group)
            self.administrators = group
        else:
            self.deleted_block_log.config = group
            self.config = dataclasses.replace(self.config, block=group)
        self.conf.set_site_value(change.prop, change.new_value)
        log.info("reconfigured %s: %r -> %r", change.prop, change.old_value, change.new_value)

    # ---- web ----
    def status_summary(self) -> dict[str, Any]:
        """Everything the web status page shows, as plain data."""
        nodes = []
        for n in self.node_manager.all_nodes():
            nodes.append(
                {
                    "uuid": n.uuid,
                    "hostname": n.details.hostName,
                    "ip": n.details.ipAddress,
                    "rack": n.rack,
                    "health": enum_name(hdds_pb2.NodeState, n.health),
                    "op_state": enum_name(hdds_pb2.NodeOperationalState, n.op_state),
                    "last_heartbeat_ms": n.last_heartbeat_wall_ms,
                    "containers": self.container_manager.container_count_on(n.uuid),
                    "pipelines": self.pipeline_manager.pipeline_count_of(n.uuid),
                }
            )
        pipelines = [
            {
                "id": p.id.id,
                "state": enum_name(hdds_pb2.PipelineState, p.state),
                "type": enum_name(hdds_pb2.ReplicationType, p.type),
                "factor": enum_name(hdds_pb2.ReplicationFactor, p.factor),
                "members": [m.uuid for m in p.members],
                "leader": p.leaderID,
            }
            for p in self.pipeline_manager.get_pipelines()
        ]
        report = self.replication_manager.last_report
        in_safe_mode, pre_check = self.in_safe_mode()
        leader = self.ha_manager.get_leader()
        return {
            "cluster_id": self.storage_config.cluster_id,
            "scm_id": self.storage_config.scm_id,
            "node_id": self.node_id,
            "nodes": nodes,
            "pipelines": pipelines,
            "containers_by_state": self.container_manager.containers_by_state(),
            "container_count": len(self.container_state_manager),
            "safemode": {
                "in_safe_mode": in_safe_mode,
                "pre_check_complete": pre_check,
                "forced": self.safe_mode_manager.forced,
                "rules": [
                    {"name": r.ruleName, "validated": r.validate, "status": r.statusText}
                    for r in self.safe_mode_rule_statuses()
                ],
            },
            "replication_manager": {
                "running": self.replication_manager_status(),
                "timestamp": report.timestamp,
                "stats": {c.key: c.count for c in report.stat},
                "samples": {s.key: list(s.containerIds) for s in report.statSample},
            },
            "ha": {
                "is_leader": self._scm_context.is_leader(),
                "is_leader_ready": self._scm_context.is_leader_ready(),
                "term": self._scm_context.term,
                "ratis": self._scm_context.is_ratis(),
                "leader": {"id": leader[0], "address": leader[1]} if leader else None,
                "peer_roles": self.ha_manager.peer_roles(),
                "applied": {
                    "term": self._transaction_buffer.latest_trx_info().term,
                    "index": self._transaction_buffer.latest_trx_info().index,
                },
            },
            "blocks_allocated": self.block_manager.blocks_allocated,
            "deleted_block_transactions": self.deleted_block_log.num_of_transactions(),
        }


def _leader_known(ha_manager: SCMHAManager) -> bool:
    """Whether this SCM knows a leader: a Raft member between elections, or one partitioned from the
    majority (a candidate), does not. The non-Raft stub is its own leader."""
    if ha_manager.ring_membership() is None:
        return True
    return bool(ha_manager.leader_peer_id())


class SCMCollector(Collector):
    def __init__(self, scm: StorageContainerManager) -> None:
        self._scm = scm

    def collect(self) -> Iterator[Metric]:
        scm = self._scm
        g = GaugeMetricFamily("scm_containers", "Containers by LifeCycleState", labels=["state"])
        for state, count in scm.container_manager.containers_by_state().items():
            g.add_metric([state], count)
        yield g
        g = GaugeMetricFamily("scm_pipelines", "Pipelines by state", labels=["state"])
        for state, count in scm.pipeline_manager.counts_by_state().items():
            g.add_metric([state], count)
        yield g
        g = GaugeMetricFamily("scm_nodes", "Datanodes by health and operational state", labels=["health", "op_state"])
        counts: dict[tuple[str, str], int] = {}
        for n in scm.node_manager.all_nodes():
            key = (enum_name(hdds_pb2.NodeState, n.health), enum_name(hdds_pb2.NodeOperationalState, n.op_state))
            counts[key] = counts.get(key, 0) + 1
        for (health, op), count in sorted(counts.items()):
            g.add_metric([health, op], count)
        yield g
        yield GaugeMetricFamily("scm_safemode", "1 while SCM is in safe mode", value=int(scm.safe_mode_manager.in_safe_mode()))
        yield GaugeMetricFamily("scm_is_leader", "1 if this SCM is the leader", value=int(scm.scm_context.is_leader()))
        yield GaugeMetricFamily("scm_term", "Current Raft term (-1 without Raft)", value=scm.scm_context.term)
        yield GaugeMetricFamily(
            "scm_raft_leader_known",
            "1 if this SCM knows a current Raft leader (itself or a peer); 1 without Raft",
            value=int(_leader_known(scm.ha_manager)),
        )
        served = scm.last_backup_served
        if served is not None:
            yield GaugeMetricFamily(
                "scm_backup_last_served_timestamp_seconds",
                "Unix time this SCM (as leader) last served a complete backup (admin scm backup); absent until one",
                value=served,
            )
        g = GaugeMetricFamily("scm_replication_manager_containers", "Last ReplicationManager report", labels=["state"])
        for c in scm.replication_manager.last_report.stat:
            g.add_metric([c.key], c.count)
        yield g
        yield GaugeMetricFamily("scm_container_replicas", "Replicas known from reports", value=scm.container_manager.replica_count())
        yield GaugeMetricFamily(
            "scm_deleted_block_transactions", "Pending deleted-block transactions", value=scm.deleted_block_log.num_of_transactions()
        )
        tx = scm.transaction_buffer.latest_trx_info()
        yield GaugeMetricFamily("scm_applied_index", "Last applied replicated-request index", value=tx.index)
        yield CounterMetricFamily("scm_blocks_allocated", "Blocks allocated", value=scm.block_manager.blocks_allocated)
        yield CounterMetricFamily("scm_heartbeats", "Datanode heartbeats processed", value=scm.node_manager.heartbeats_processed)
        yield CounterMetricFamily(
            "scm_container_reports", "Full container reports processed", value=scm.container_manager.reports_processed
        )
        yield CounterMetricFamily(
            "scm_incremental_container_reports",
            "Incremental container reports processed",
            value=scm.container_manager.incremental_reports_processed,
        )
        cmds = CounterMetricFamily("scm_datanode_commands", "Commands queued for datanodes", labels=["type"])
        for name, count in sorted(scm.node_manager.commands_sent.items()):
            cmds.add_metric([name], count)
        yield cmds
        yield CounterMetricFamily("scm_replication_manager_runs", "ReplicationManager passes", value=scm.replication_manager.runs)
        yield CounterMetricFamily(
            "scm_sequence_id_batches", "Sequence-id batches allocated", value=scm.sequence_id_generator.batch_allocations
        )


def build_registry(scm: StorageContainerManager) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SCMCollector(scm))
    return registry
