"""A tiny stand-in for the StorageContainerManager facade, for unit tests of the edge layer only.

It has the facade's faces (:mod:`scm_server.protocols`) with their real shapes (what the facade does in memory is
a plain call here too; what waits on Raft is ``async``), checked by mypy and at runtime
(``tests/unit/test_protocols.py``). Its model is small: one OPEN container (#1) on one pipeline (p1), one
datanode (``nodes``), blocks numbered from 1, safe mode until forced out; tests set its fields (``leader``,
``not_ready_for``, ``peers``, ``nodes``, ...) or subclass a method with its real signature.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.ozone_metrics import Bean
from scm_server.proto import hdds_pb2, scm_client_pb2, scm_datanode_pb2
from scm_server.protocols import (
    BalancerStartRequest,
    BalancerStatusInfo,
    BlockAllocation,
    ContainerReport,
    DatanodeUsageInfo,
    DeletedBlocksSummary,
)

PIPELINE = hdds_pb2.Pipeline(id=hdds_pb2.PipelineID(id="p1"), state=hdds_pb2.PIPELINE_OPEN)
REGISTERED = scm_datanode_pb2.SCMRegisteredResponseProto.ErrorCode
DATANODE = hdds_pb2.DatanodeDetailsProto(uuid="u1", hostName="dn1", ipAddress="10.0.0.1")


class FakeSCM:
    def __init__(self, *, leader: bool = True, leader_id: str = "scm2", cluster_id: str = "CID-x") -> None:
        self.leader = leader
        self.leader_id = leader_id
        self.cluster_id = cluster_id
        self.metrics_registry = CollectorRegistry()
        self.safe_mode = True
        self.leader_ready = True  # a leader that applied its own term's first entry
        self.not_ready_for = 0  # leader-ready checks still to refuse (a leader elected moments ago)
        self.peers: dict[str, str] = {}  # Raft peer id -> configured node id
        self.nodes = [hdds_pb2.Node(nodeID=DATANODE, nodeStates=[hdds_pb2.HEALTHY],
                                    nodeOperationalStates=[hdds_pb2.IN_SERVICE])]
        self.caught_up = True  # the datanode-report gate of a Raft member
        self.balancer_running = False
        self.replication_manager_running = True
        self.calls: list[str] = []
        self.next_local_id = 1
        self.containers = {1: hdds_pb2.ContainerInfoProto(containerID=1, state=hdds_pb2.OPEN)}
        self.pipelines = [PIPELINE]
        self.suppressed: set[int] = set()
        self.members = ["scm1", "scm2", "scm3"]

    def _check_leader(self) -> None:
        if not self.leader:
            raise NotLeaderException("follower", self.leader_id, "ratis-address-not-for-clients:1")

    # ---- LeaderRole ----

    def require_leader(self) -> None:
        self._check_leader()

    def is_leader_ready(self) -> bool:
        if self.not_ready_for > 0:
            self.not_ready_for -= 1
            return False
        return self.leader and self.leader_ready

    def answer_label(self) -> tuple[str, str, str]:
        return ("scm-x", "LEADER" if self.leader else "FOLLOWER", "" if self.leader else self.leader_id)

    def node_id_of_peer(self, peer_id: str) -> str:
        return self.peers.get(peer_id, peer_id)

    # ---- SCMSecurityProtocol ----

    def leader_peer_id(self) -> str | None:
        return "scm-x" if self.leader else (self.leader_id or None)

    def leader_node_id(self) -> str | None:
        return self.leader_peer_id()

    # ---- StorageContainerDatanodeProtocol ----

    def get_version(self) -> scm_datanode_pb2.SCMVersionResponseProto:
        return scm_datanode_pb2.SCMVersionResponseProto(
            softwareVersion=1, keys=[hdds_pb2.KeyValue(key="clusterID", value=self.cluster_id)]
        )

    async def register_datanode(
        self, request: scm_datanode_pb2.SCMRegisterRequestProto
    ) -> scm_datanode_pb2.SCMRegisteredResponseProto:
        ok = request.clusterID == self.cluster_id
        return scm_datanode_pb2.SCMRegisteredResponseProto(
            errorCode=REGISTERED.success if ok else REGISTERED.errorNodeNotPermitted, datanodeUUID=request.datanodeDetails.uuid, clusterID=self.cluster_id,
            errorMessage="" if ok else "wrong cluster",
        )

    async def process_heartbeat(
        self, request: scm_datanode_pb2.SCMHeartbeatRequestProto, container_report: ContainerReport | None = None
    ) -> scm_datanode_pb2.SCMHeartbeatResponseProto:
        return scm_datanode_pb2.SCMHeartbeatResponseProto(datanodeUUID=request.datanodeDetails.uuid)

    # ---- ScmBlockLocationProtocol ----

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
        self.calls.append("allocate_block" if ec is None else f"allocate_block EC {ec.codec}-{ec.data}-{ec.parity}")
        self._check_leader()
        if size <= 0 or size > 1 << 30:
            raise SCMException(ResultCodes.INVALID_BLOCK_SIZE, f"block size {size} out of range")
        out = []
        for _ in range(num_blocks):
            out.append(BlockAllocation(1, self.next_local_id, PIPELINE))
            self.next_local_id += 1
        return out

    async def delete_key_blocks(
        self, key_blocks: list[scm_client_pb2.KeyBlocks]
    ) -> list[scm_client_pb2.DeleteKeyBlocksResultProto]:
        self.calls.append("delete_key_blocks")
        self._check_leader()
        result = scm_client_pb2.DeleteScmBlockResult
        return [
            scm_client_pb2.DeleteKeyBlocksResultProto(objectKey=kb.key, blockResults=[
                result(result=result.success if b.containerID in self.containers else result.errorNotFound, blockID=b)
                for b in kb.blocks
            ])
            for kb in key_blocks
        ]

    def get_scm_info(self) -> scm_client_pb2.GetScmInfoResponseProto:
        return scm_client_pb2.GetScmInfoResponseProto(clusterId=self.cluster_id, scmId="scm-x")

    def query_nodes(self, state: int | None = None, op_state: int | None = None) -> list[hdds_pb2.Node]:
        return [
            n for n in self.nodes
            if (state is None or state in n.nodeStates) and (op_state is None or op_state in n.nodeOperationalStates)
        ]

    # ---- StorageContainerLocationProtocol ----

    async def allocate_container(
        self, rtype: int, rfactor: int, owner: str, ec: hdds_pb2.ECReplicationConfig | None = None
    ) -> hdds_pb2.ContainerWithPipeline:
        self._check_leader()
        cid = max(self.containers) + 1
        self.containers[cid] = hdds_pb2.ContainerInfoProto(
            containerID=cid, state=hdds_pb2.OPEN, owner=owner,
            replicationType=hdds_pb2.ReplicationType.ValueType(rtype),
            replicationFactor=hdds_pb2.ReplicationFactor.ValueType(rfactor),
            pipelineID=PIPELINE.id, ecReplicationConfig=ec,
        )
        return hdds_pb2.ContainerWithPipeline(containerInfo=self.containers[cid], pipeline=PIPELINE)

    def get_container(self, container_id: int) -> hdds_pb2.ContainerInfoProto:
        self._check_leader()
        if container_id not in self.containers:
            raise SCMException(ResultCodes.CONTAINER_NOT_FOUND, f"Container #{container_id} not found")
        return self.containers[container_id]

    def get_container_with_pipeline(
        self, container_id: int
    ) -> tuple[hdds_pb2.ContainerWithPipeline, list[hdds_pb2.ContainerReplicaInfo]]:
        info = self.get_container(container_id)
        return hdds_pb2.ContainerWithPipeline(containerInfo=info, pipeline=PIPELINE), []

    def container_and_pipeline(self, container_id: int) -> tuple[hdds_pb2.ContainerInfoProto, hdds_pb2.Pipeline]:
        cwp = self.get_container_with_pipeline(container_id)[0]
        return cwp.containerInfo, cwp.pipeline

    def containers_encoded_with_pipelines(
        self, container_ids: Sequence[int]
    ) -> list[tuple[bytes, str | None, hdds_pb2.Pipeline]]:
        pairs = [self.container_and_pipeline(cid) for cid in container_ids]
        return [(i.SerializeToString(), i.pipelineID.id if i.HasField("pipelineID") else None, p) for i, p in pairs]

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
        page, total = self.list_containers(start_id, count, state, rtype, rfactor, suppressed, ec=ec)
        return [(c.SerializeToString(), c.pipelineID.id if c.HasField("pipelineID") else None) for c in page], total

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
        matching = [
            c for cid, c in sorted(self.containers.items())
            if cid >= start_id and (state is None or c.state == state)
            and (suppressed is None or (cid in self.suppressed) == suppressed)
            and (ec is None or c.ecReplicationConfig == ec)
        ]
        return matching[:count], len(matching)

    async def suppress_containers(self, container_ids: list[int], suppress: bool) -> list[int]:
        failed = [cid for cid in container_ids if cid not in self.containers]
        for cid in container_ids:
            if cid in self.containers:
                (self.suppressed.add if suppress else self.suppressed.discard)(cid)
        return failed

    def reconcile_container(self, container_id: int) -> None:
        self.get_container(container_id)
        self.calls.append(f"reconcile {container_id}")

    async def close_container(self, container_id: int) -> None:
        self.get_container(container_id).state = hdds_pb2.CLOSING

    def list_pipelines(self) -> list[hdds_pb2.Pipeline]:
        return list(self.pipelines)

    async def create_pipeline(
        self, rtype: int, rfactor: int, ec: hdds_pb2.ECReplicationConfig | None = None
    ) -> hdds_pb2.Pipeline:
        self._check_leader()
        pipeline = hdds_pb2.Pipeline(
            id=hdds_pb2.PipelineID(id=f"p{len(self.pipelines) + 1}"), state=hdds_pb2.PIPELINE_ALLOCATED,
            type=hdds_pb2.ReplicationType.ValueType(rtype), factor=hdds_pb2.ReplicationFactor.ValueType(rfactor),
            ecReplicationConfig=ec,
        )
        self.pipelines.append(pipeline)
        return pipeline

    def _pipeline(self, pipeline_id: str) -> hdds_pb2.Pipeline:
        for p in self.pipelines:
            if p.id.id == pipeline_id:
                return p
        raise SCMException(ResultCodes.PIPELINE_NOT_FOUND, f"pipeline {pipeline_id} not found")

    async def close_pipeline(self, pipeline_id: str) -> None:
        self._pipeline(pipeline_id).state = hdds_pb2.PIPELINE_CLOSED

    async def activate_pipeline(self, pipeline_id: str) -> None:
        self._pipeline(pipeline_id).state = hdds_pb2.PIPELINE_OPEN

    async def deactivate_pipeline(self, pipeline_id: str) -> None:
        self._pipeline(pipeline_id).state = hdds_pb2.PIPELINE_DORMANT

    def in_safe_mode(self) -> tuple[bool, bool]:
        return self.safe_mode, True

    def force_exit_safe_mode(self) -> bool:
        self.safe_mode = False
        return True

    def safe_mode_rule_statuses(self) -> list[hdds_pb2.SafeModeRuleStatus]:
        return [hdds_pb2.SafeModeRuleStatus(ruleName="DataNodeSafeModeRule", validate=not self.safe_mode,
                                            statusText="registered datanodes (=1) >= required datanodes (=1)")]

    def start_replication_manager(self) -> None:
        self.replication_manager_running = True

    def stop_replication_manager(self) -> None:
        self.replication_manager_running = False

    def replication_manager_status(self) -> bool:
        return self.replication_manager_running

    def replication_manager_report(self) -> hdds_pb2.ReplicationManagerReportProto:
        return hdds_pb2.ReplicationManagerReportProto(timestamp=1)

    async def decommission_nodes(
        self, hosts: list[str], force: bool = False
    ) -> list[scm_client_pb2.DatanodeAdminError]:
        return self._admin_errors(hosts)

    async def start_maintenance_nodes(
        self, hosts: list[str], end_hours: int = 0
    ) -> list[scm_client_pb2.DatanodeAdminError]:
        return self._admin_errors(hosts)

    async def recommission_nodes(self, hosts: list[str]) -> list[scm_client_pb2.DatanodeAdminError]:
        return self._admin_errors(hosts)

    def _admin_errors(self, hosts: list[str]) -> list[scm_client_pb2.DatanodeAdminError]:
        self._check_leader()
        return [scm_client_pb2.DatanodeAdminError(host=h, error=f"no datanode {h}") for h in hosts if h != "dn1"]

    # ---- ScmStatusView ----

    def _usage(self) -> list[DatanodeUsageInfo]:
        return [DatanodeUsageInfo(n.nodeID, 100, 40, 60, 0, len(self.containers), len(self.pipelines))
                for n in self.nodes]

    def datanode_usage_info(self, address: str = "", uuid: str = "") -> list[DatanodeUsageInfo]:
        return [u for u in self._usage() if u.details.uuid == uuid or address in (u.details.ipAddress, u.details.hostName)]

    def most_or_least_used_datanodes(self, most_used: bool, count: int) -> list[DatanodeUsageInfo]:
        return sorted(self._usage(), key=DatanodeUsageInfo.utilization, reverse=most_used)[:count]

    def containers_on_decom_node(self, dn_uuid: str) -> dict[str, list[int]]:
        return {}  # the fake's one datanode is never decommissioning

    def get_metrics(self, query: str) -> str:
        return '{"beans": []}'

    async def transfer_leadership(self, new_leader_id: str) -> str:
        self._check_leader()
        if new_leader_id not in self.members:
            raise SCMException(ResultCodes.INVALID_REQUEST, f"{new_leader_id} is not a member")
        self.leader_id = new_leader_id
        return new_leader_id

    async def decommission_scm(self, scm_id: str) -> str:
        self._check_leader()
        if scm_id not in self.members:
            raise SCMException(ResultCodes.INVALID_REQUEST, f"{scm_id} is not a member")
        self.members.remove(scm_id)
        return f"removed {scm_id}"

    async def add_scm(self, cluster_id: str, scm_id: str, ratis_address: str) -> str:
        self._check_leader()
        if cluster_id != self.cluster_id:
            raise SCMException(ResultCodes.INVALID_REQUEST, f"cluster id {cluster_id} is not {self.cluster_id}")
        self.members.append(scm_id)
        return f"added {scm_id}"

    def deleted_blocks_summary(self) -> DeletedBlocksSummary:
        return DeletedBlocksSummary(0, 0)

    async def start_container_balancer(self, request: BalancerStartRequest) -> str:
        self._check_leader()
        if self.balancer_running:
            raise SCMException(ResultCodes.INTERNAL_ERROR, "already running")
        self.balancer_running = True
        return "Container Balancer started successfully."

    async def stop_container_balancer(self) -> None:
        self._check_leader()
        if not self.balancer_running:
            raise SCMException(ResultCodes.INTERNAL_ERROR, "not running")
        self.balancer_running = False

    def container_balancer_status(self) -> bool:
        return self.balancer_running

    def container_balancer_status_info(self) -> BalancerStatusInfo:
        return BalancerStatusInfo(self.balancer_running, None)

    async def finalize_upgrade(self, client_id: str) -> tuple[str, list[str]]:
        self._check_leader()
        return "ALREADY_FINALIZED", []

    def upgrade_finalization_progress(self, client_id: str, takeover: bool, readonly: bool) -> tuple[str, list[str]]:
        return "FINALIZATION_DONE", []

    def dn_reports_ready(self) -> bool:
        return self.caught_up

    def ozone_beans(self, hostname: str = "", ports: dict[str, int] | None = None) -> list[Bean]:
        return [Bean("Hadoop:service=StorageContainerManager,name=SCMContainerMetrics", "SCMContainerMetrics",
                     {"TotalContainers": len(self.containers)}, {"Hostname": hostname})]

    def status_summary(self) -> dict[str, object]:
        return {
            "cluster_id": self.cluster_id,
            "nodes": [{"hostname": "dn1", "uuid": "u1", "health": "HEALTHY", "op_state": "IN_SERVICE"}],
            "pipelines": [{"id": "p1", "state": "PIPELINE_OPEN", "members": ["u1"], "leader": "u1"}],
            "containers_by_state": {"OPEN": 1},
            "ha": {"is_leader": self.leader, "term": 3},
        }
