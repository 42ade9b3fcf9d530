"""The facade's values under Ozone's bean and attribute names (see :mod:`scm_server.ozone_metrics` for the shape).

Called by :meth:`StorageContainerManager.ozone_beans` on every /jmx and /prom request; it only reads the managers'
in-memory state (no I/O, no Raft call). Each attribute served carries a value this SCM really has; what Ozone's SCM
serves and ours has no value for is listed, with why, in :data:`scm_server.ozone_metrics.NOT_SERVED`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from scm_server import __version__
from scm_server.container.replication.health import ContainerHealthState
from scm_server.container.replication.replication_manager import PendingOpType
from scm_server.node.decommission_metrics import BEAN_NAME as DECOMMISSION_BEAN
from scm_server.node.usage_info import usage_of
from scm_server.ozone_metrics import SCM_SERVICE, Bean, Value
from scm_server.proto import hdds_pb2
from scm_server.safemode.safe_mode_manager import (
    DataNodeSafeModeRule,
    ECContainerSafeModeRule,
    HealthyPipelineSafeModeRule,
    OneReplicaPipelineSafeModeRule,
    RatisContainerSafeModeRule,
)

if TYPE_CHECKING:
    from scm_server.block.deleted_block_log import DeletedBlockLog
    from scm_server.conf import SCMConfigurations
    from scm_server.container.balancer.container_balancer import ContainerBalancer
    from scm_server.container.container_manager import ContainerManager
    from scm_server.container.replication.replication_manager import ReplicationManager
    from scm_server.ha.scm_context import SCMContext
    from scm_server.ha.scm_ha_manager_api import SCMHAManager
    from scm_server.ha.stateful_service_state_manager import FinalizationStateManager
    from scm_server.metadata import SCMStorageConfig
    from scm_server.node.node_manager import SCMNodeManager
    from scm_server.pipeline.pipeline_manager import PipelineManager
    from scm_server.safemode.safe_mode_manager import SCMSafeModeManager


@runtime_checkable
class BeanSource(Protocol):
    """What the beans read of an SCM: its managers and a few of the facade's answers. The facade satisfies it;
    this module never imports the facade."""

    config: SCMConfigurations
    container_balancer: ContainerBalancer
    container_manager: ContainerManager
    deleted_block_log: DeletedBlockLog
    finalization_state_manager: FinalizationStateManager
    ha_manager: SCMHAManager
    node_id: str | None
    node_manager: SCMNodeManager
    pipeline_manager: PipelineManager
    replication_manager: ReplicationManager
    safe_mode_manager: SCMSafeModeManager
    storage_config: SCMStorageConfig

    @property
    def scm_context(self) -> SCMContext: ...

    def in_safe_mode(self) -> tuple[bool, bool]: ...

    def safe_mode_rule_statuses(self) -> list[hdds_pb2.SafeModeRuleStatus]: ...

    def decommission_bean(self) -> dict[str, object]: ...

# Ozone's op-state and health words in SCMNodeMetrics' attribute names (InServiceHealthyNodes, ...)
_OP_WORDS = {
    hdds_pb2.IN_SERVICE: "InService",
    hdds_pb2.DECOMMISSIONING: "Decommissioning",
    hdds_pb2.DECOMMISSIONED: "Decommissioned",
    hdds_pb2.ENTERING_MAINTENANCE: "EnteringMaintenance",
    hdds_pb2.IN_MAINTENANCE: "InMaintenance",
}
_HEALTH_WORDS = {
    hdds_pb2.HEALTHY: "Healthy",
    hdds_pb2.STALE: "Stale",
    hdds_pb2.DEAD: "Dead",
    hdds_pb2.HEALTHY_READONLY: "HealthyReadonly",
}
_MAINTENANCE = (hdds_pb2.ENTERING_MAINTENANCE, hdds_pb2.IN_MAINTENANCE)
_DECOMMISSION = (hdds_pb2.DECOMMISSIONING, hdds_pb2.DECOMMISSIONED)

# ReplicationManagerMetrics' attribute for each container health state of our report
_HEALTH_ATTRS = {
    ContainerHealthState.HEALTHY: "HealthyContainers",
    ContainerHealthState.UNDER_REPLICATED: "UnderReplicatedContainers",
    ContainerHealthState.MIS_REPLICATED: "MisReplicatedContainers",
    ContainerHealthState.OVER_REPLICATED: "OverReplicatedContainers",
    ContainerHealthState.MISSING: "MissingContainers",
    ContainerHealthState.UNHEALTHY: "UnhealthyContainers",
    ContainerHealthState.EMPTY: "EmptyContainers",
    ContainerHealthState.OPEN_UNHEALTHY: "OpenUnhealthyContainers",
    ContainerHealthState.QUASI_CLOSED_STUCK: "StuckQuasiClosedContainers",
    ContainerHealthState.OPEN_WITHOUT_PIPELINE: "OpenContainersWithoutPipeline",
}
# LifeCycleState name -> the word both ReplicationManagerMetrics and SCMContainerMetrics use
_STATE_ATTRS = {
    "OPEN": "OpenContainers",
    "CLOSING": "ClosingContainers",
    "QUASI_CLOSED": "QuasiClosedContainers",
    "CLOSED": "ClosedContainers",
    "DELETING": "DeletingContainers",
    "DELETED": "DeletedContainers",
    "RECOVERING": "RecoveringContainers",
}


def tabular(pairs: Iterable[tuple[str, Value]]) -> list[dict[str, object]]:
    """A Java map as Hadoop's JMX servlet writes an MXBean's map: a list of ``{"key": k, "value": v}``."""
    return [{"key": k, "value": v} for k, v in pairs]


def _node_beans(scm: BeanSource, hostname: str) -> list[Bean]:
    nodes = scm.node_manager.all_nodes()
    counts: Counter[tuple[int, int]] = Counter((n.op_state, n.health) for n in nodes)
    attrs: dict[str, Value] = {"AllNodes": len(nodes)}
    for op, op_word in _OP_WORDS.items():
        for health, health_word in _HEALTH_WORDS.items():
            attrs[f"{op_word}{health_word}Nodes"] = counts.get((op, health), 0)
    usages = [(n, usage_of(n, 0, 0)) for n in nodes]

    def space(ops: tuple[int, ...] | None) -> tuple[int, int, int]:
        picked = [
            u for n, u in usages
            if n.health == hdds_pb2.HEALTHY and (n.op_state == hdds_pb2.IN_SERVICE if ops is None else n.op_state in ops)
        ]
        return sum(u.capacity for u in picked), sum(u.used for u in picked), sum(u.remaining for u in picked)

    for prefix, ops in (("", None), ("Maintenance", _MAINTENANCE), ("Decommissioned", _DECOMMISSION)):
        capacity, used, remaining = space(ops)
        attrs[f"{prefix}DiskCapacity"] = capacity
        attrs[f"{prefix}DiskUsed"] = used
        attrs[f"{prefix}DiskRemaining"] = remaining
    attrs["TotalOzoneCapacity"] = sum(u.capacity for _, u in usages)
    attrs["TotalOzoneUsed"] = sum(u.used for _, u in usages)
    attrs["NumHBProcessed"] = scm.node_manager.heartbeats_processed
    node_count = tabular(
        (hdds_pb2.NodeOperationalState.Name(op), tabular(
            (hdds_pb2.NodeState.Name(h), counts.get((op, h), 0)) for h in _HEALTH_WORDS
        ))
        for op in _OP_WORDS
    )
    return [
        Bean(f"{SCM_SERVICE},name=SCMNodeMetrics", "SCMNodeManager", attrs, {"Context": "SCM", "Hostname": hostname}),
        Bean("Hadoop:service=SCMNodeManager,name=SCMNodeManagerInfo", None, {"NodeCount": node_count}),
    ]


def _container_beans(scm: BeanSource, hostname: str) -> list[Bean]:
    by_state = scm.container_manager.containers_by_state()
    state_attrs: dict[str, Value] = {attr: by_state.get(state, 0) for state, attr in _STATE_ATTRS.items()}
    container_metrics = {k: v for k, v in state_attrs.items() if k != "RecoveringContainers"}
    container_metrics["TotalContainers"] = sum(by_state.values())
    rm = scm.replication_manager
    stats = {c.key: c.count for c in rm.last_report.stat}
    rm_attrs: dict[str, Value] = dict(state_attrs)
    rm_attrs.update({attr: stats.get(state.value, 0) for state, attr in _HEALTH_ATTRS.items()})
    rm_attrs["InflightReplication"] = rm.pending_ops.total(PendingOpType.ADD)
    rm_attrs["InflightDeletion"] = rm.pending_ops.total(PendingOpType.DELETE)
    rm_attrs["ReplicationCmdsSentTotal"] = rm.commands_issued.get("replicate", 0)
    rm_attrs["DeletionCmdsSentTotal"] = rm.commands_issued.get("delete", 0)
    rm_attrs["PendingReplicationLimitReachedTotal"] = rm.commands_throttled
    rm_attrs["EcReconstructionCmdsSentTotal"] = rm.commands_issued.get("reconstruct", 0)
    rm_attrs["ReplicateContainerCmdsDeferredTotal"] = rm.commands_deferred.get("replicate", 0)
    rm_attrs["DeleteContainerCmdsDeferredTotal"] = rm.commands_deferred.get("delete", 0)
    rm_attrs["EcReconstructionCmdsDeferredTotal"] = rm.commands_deferred.get("reconstruct", 0)
    cm = scm.container_manager
    return [
        Bean(f"{SCM_SERVICE},name=ReplicationManagerMetrics", "ReplicationManagerMetrics", rm_attrs,
             {"Hostname": hostname}),
        Bean(f"{SCM_SERVICE},name=SCMContainerMetrics", "SCMContainerMetrics", container_metrics,
             {"Hostname": hostname}),
        Bean(f"{SCM_SERVICE},name=SCMContainerManagerMetrics", "SCMContainerManagerMetrics", {
            "NumContainerReportsProcessedSuccessful": cm.reports_processed,
            "NumICRReportsProcessedSuccessful": cm.incremental_reports_processed,
        }, {"Context": "SCM", "Hostname": hostname}),
    ]


def _safe_mode_bean(scm: BeanSource, hostname: str) -> Bean:
    attrs: dict[str, Value] = {"ScmInSafeMode": scm.safe_mode_manager.in_safe_mode()}
    names = {
        DataNodeSafeModeRule: ("CurrentRegisteredDatanodesCount", "NumRequiredDatanodesThreshold"),
        RatisContainerSafeModeRule: (
            "CurrentContainersWithOneReplicaReportedCount", "NumContainerWithOneReplicaReportedThreshold",
        ),
        HealthyPipelineSafeModeRule: ("CurrentHealthyPipelinesCount", "NumHealthyPipelinesThreshold"),
        OneReplicaPipelineSafeModeRule: (
            "CurrentPipelinesWithAtleastOneReplicaReportedCount", "NumPipelinesWithAtleastOneReplicaReportedThreshold",
        ),
        ECContainerSafeModeRule: (
            "CurrentContainersWithECDataReplicaReportedCount", "NumContainerWithECDataReplicaReportedThreshold",
        ),
    }
    refresh = {RatisContainerSafeModeRule: "LastRatisContainerSafeModeRuleRefreshDurationMs",
               ECContainerSafeModeRule: "LastEcContainerSafeModeRuleRefreshDurationMs"}
    refreshes = 0
    for rule in scm.safe_mode_manager.rules:
        pair = names.get(type(rule))
        if pair is not None:
            current, threshold = rule.figures()
            attrs[pair[0]], attrs[pair[1]] = current, threshold
        if type(rule) in refresh:
            attrs[refresh[type(rule)]] = rule.last_refresh_ms
            refreshes += rule.refreshes
    attrs["NumContainerSafeModeRuleRefreshes"] = refreshes
    attrs["ScmSafeModeExitDurationMs"] = scm.safe_mode_manager.exit_duration_ms
    return Bean(f"{SCM_SERVICE},name=SafeModeMetrics", "SafeModeMetrics", attrs, {"Hostname": hostname})


def _pipeline_beans(scm: BeanSource, hostname: str) -> list[Bean]:
    pm = scm.pipeline_manager
    return [
        Bean("Hadoop:service=SCMPipelineManager,name=SCMPipelineManagerInfo", None, {
            "PipelineInfo": tabular(sorted(pm.counts_by_state().items())),
        }),
        Bean(f"{SCM_SERVICE},name=SCMPipelineMetrics", "SCMPipelineMetrics", {
            "NumPipelineCreated": pm.created_count,
        }, {"Hostname": hostname}),
    ]


def _runtime_beans(scm: BeanSource, hostname: str, ports: dict[str, int]) -> list[Bean]:
    in_safe_mode, _ = scm.in_safe_mode()
    fsm = scm.finalization_state_manager
    rules = {r.ruleName: [r.validate, r.statusText] for r in scm.safe_mode_rule_statuses()}
    runtime: dict[str, Value] = {
        "ClusterId": scm.storage_config.cluster_id or "",
        "ScmId": scm.storage_config.scm_id or "",
        "Hostname": hostname,
        "InSafeMode": in_safe_mode,
        "SoftwareVersion": __version__,
        "Version": __version__,
        "StartedTimeInMillis": scm.container_manager.started_wall_ms,
        "PrimordialNode": scm.config.ha.primordial_node_id or "",
        "ScmRatisRoles": list(scm.ha_manager.peer_roles()),
        "ContainerStateCount": tabular(sorted(scm.container_manager.containers_by_state().items())),
        "SafeModeRuleStatus": tabular(sorted(rules.items())),
    }
    runtime.update({k: v for k, v in (("ClientRpcPort", ports.get("client", 0)),
                                       ("DatanodeRpcPort", ports.get("datanode", 0))) if v})
    ha_state = scm.scm_context.is_leader()
    dl = scm.deleted_block_log
    return [
        Bean(f"{SCM_SERVICE},name=StorageContainerManagerInfo,component=ServerRuntime", None, runtime),
        Bean("Hadoop:service=LayoutVersionManager,name=HDDSLayoutVersionManager", None, {
            "MetadataLayoutVersion": fsm.metadata_layout_version,
            "SoftwareLayoutVersion": fsm.software_layout_version,
        }),
        Bean(f"{SCM_SERVICE},name=SCMHAMetrics", "SCMHAMetrics", {"SCMHALeaderState": int(ha_state)},
             {"Hostname": hostname, "NodeId": scm.node_id or ""}),
        Bean(f"{SCM_SERVICE},name=SCMBlockDeletingService", "SCMBlockDeletingService", {
            "NumBlockDeletionCommandSent": dl.commands_sent,
            "NumBlockDeletionTransactionCompleted": dl.transactions_committed,
        }, {"Hostname": hostname}),
    ]


def _balancer_bean(scm: BeanSource, hostname: str) -> Bean:
    m = scm.container_balancer.metrics
    last = m.last
    attrs: dict[str, Value] = {
        "NumIterations": m.iterations,
        "NumContainerMovesScheduled": m.moves_scheduled,
        "NumContainerMovesCompleted": m.moves_completed,
        "NumContainerMovesFailed": m.moves_failed,
        "NumContainerMovesTimeout": m.moves_timeout,
        "DataSizeMovedGB": m.moved_bytes >> 30,
        "NumDatanodesUnbalanced": m.datanodes_unbalanced,
        "DataSizeUnbalancedGB": m.unbalanced_bytes >> 30,
        "NumDatanodesInvolvedInLatestIteration": m.datanodes_involved_last,
        "NumContainerMovesScheduledInLatestIteration": last.moves_scheduled if last else 0,
        "NumContainerMovesCompletedInLatestIteration": last.moves_completed if last else 0,
        "NumContainerMovesFailedInLatestIteration": last.moves_failed if last else 0,
        "NumContainerMovesTimeoutInLatestIteration": last.moves_timeout if last else 0,
        "DataSizeMovedBytesInLatestIteration": last.data_size_moved if last else 0,
        "DataSizeMovedGBInLatestIteration": (last.data_size_moved >> 30) if last else 0,
    }
    return Bean(f"{SCM_SERVICE},name=ContainerBalancerMetrics", "ContainerBalancerMetrics", attrs,
                {"Context": "SCM", "Hostname": hostname})


def beans_of(scm: BeanSource, hostname: str, ports: dict[str, int]) -> list[Bean]:
    """Every Ozone bean this SCM serves, with its values now. ``ports``: the Hadoop RPC ports it listens on, by
    Ozone's protocol (``client``, ``datanode``), for the ServerRuntime bean."""
    beans = [
        *_node_beans(scm, hostname),
        *_container_beans(scm, hostname),
        _safe_mode_bean(scm, hostname),
        *_pipeline_beans(scm, hostname),
        *_runtime_beans(scm, hostname, ports),
        _balancer_bean(scm, hostname),
    ]
    leaving = scm.decommission_bean()
    tags = {k[len("tag."):]: str(v) for k, v in leaving.items() if k.startswith("tag.")}
    beans.append(Bean(DECOMMISSION_BEAN, "NodeDecommissionMetrics",
                      {k: v for k, v in leaving.items() if k not in ("name", "modelerType") and not k.startswith("tag.")},
                      {"Hostname": hostname, **tags}))
    return beans


__all__ = ["beans_of", "tabular"]
