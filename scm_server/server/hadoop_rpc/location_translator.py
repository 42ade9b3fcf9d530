"""StorageContainerLocationProtocol over Hadoop RPC: what ``ozone admin`` (and the OM) asks SCM.

One method, ``submitRequest``, carries a ``ScmContainerLocationRequest``; the translator dispatches on its
``cmdType`` to the same facade and call rules (:mod:`scm_server.server.call_guard`: who answers, the retry
cache, the client's ids on the replicated write) as the gRPC ``StorageContainerLocationProtocolService``,
and answers a ``ScmContainerLocationResponse`` (status ``OK``). As Ozone's
``StorageContainerLocationProtocolServerSideTranslatorPB`` does:

* a failure (an ``SCMException``: container not found, safe mode, ...) is an RPC ERROR naming
  ``org.apache.hadoop.hdds.scm.exceptions.SCMException`` with the message (Ozone wraps it in a
  ``ServiceException``; the Java client unwraps it as the same exception class);
* only the leader answers, except the admin commands that act on every SCM (``StartReplicationManager``,
  ``StopReplicationManager``, ``ForceExitSafeMode``), the follower-readable ones (``InSafeMode``,
  ``GetSafeModeRuleStatuses``: each SCM's own view, as ``ozone admin safemode status`` asks every SCM) and
  ``GetScmInfo`` (every SCM answers it on the gRPC path too); a follower answers
  ``ServerNotLeaderException`` suggesting the leader's Hadoop RPC client port (:mod:`.leadership`);
* a cmdType not served here is an RPC ERROR (``SCMException``) naming the command and listing those served.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from google.protobuf import message as pb_message

from scm_server import ozone_wire
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.ha.client_call import client_call
from scm_server.hadoop_ipc import Call, ErrorCode
from scm_server.proto import hdds_pb2
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import hdds_pb2 as wire
from scm_server.server import call_guard, endpoints
from scm_server.server.hadoop_rpc import convert
from scm_server.server.hadoop_rpc.leadership import Leadership
from scm_server.server.hadoop_rpc.server import RpcCallError

PROTOCOL = "org.apache.hadoop.hdds.scm.protocol.StorageContainerLocationProtocol"
VERSION = 1
SCM_EXCEPTION = "org.apache.hadoop.hdds.scm.exceptions.SCMException"
IO_EXCEPTION = "java.io.IOException"
LOG = logging.getLogger(__name__)
GRPC_SERVICE = "StorageContainerLocationProtocolService"  # the call rules are shared with the gRPC servicer

Type = wire_loc.Type
Response = wire_loc.ScmContainerLocationResponse
Request = wire_loc.ScmContainerLocationRequest

# Ozone's StorageContainerLocationProtocol.ADMIN_COMMAND_TYPE and FOLLOWER_READABLE_COMMAND_TYPES, plus
# GetScmInfo (answered by every SCM on both of our transports): these need no leader.
ANY_SCM = frozenset(
    {"StartReplicationManager", "StopReplicationManager", "ForceExitSafeMode", "InSafeMode",
     "GetSafeModeRuleStatuses", "GetScmInfo"}
)

Handler = Callable[[Request, Response], Awaitable[None]]


async def _maybe(value: Any) -> Any:
    return await value if hasattr(value, "__await__") else value


def replica_to_wire(info: hdds_pb2.ContainerReplicaInfo) -> wire.SCMContainerReplicaProto:
    """A replica as ``ozone admin container info`` lists it: Ozone's SCMContainerReplicaProto."""
    r = info.replica
    out = wire.SCMContainerReplicaProto(
        containerID=r.containerID,
        state=hdds_pb2.ContainerReplicaProto.State.Name(r.state),
        datanodeDetails=ozone_wire.datanode_to_wire(info.datanode),
        placeOfBirth=r.originNodeId or info.datanode.uuid,
        sequenceID=r.blockCommitSequenceId,
        keyCount=r.keyCount,
        bytesUsed=r.used,
    )
    if r.HasField("replicaIndex"):
        out.replicaIndex = r.replicaIndex
    if r.HasField("dataChecksum"):
        out.dataChecksum = r.dataChecksum
    return out


def report_to_wire(report: hdds_pb2.ReplicationManagerReportProto) -> wire.ReplicationManagerReportProto:
    """Our replication manager report in Ozone's shape (KeyIntValue counters, ContainerID samples)."""
    out = wire.ReplicationManagerReportProto(timestamp=report.timestamp)
    for counter in report.stat:
        out.stat.add(key=counter.key, value=counter.count)
    for sample in report.statSample:
        out.statSample.add(key=sample.key, container=[wire.ContainerID(id=c) for c in sample.containerIds])
    return out


def _enum(value: int, source: Any, target: Any, what: str) -> int:
    mapped = ozone_wire.enum_by_name(value, source, target)
    if mapped is None:
        raise SCMException(ResultCodes.INVALID_REQUEST, f"{what} {source.Name(value)} is not known to this SCM")
    return mapped


class LocationTranslator:
    """Serves ``submitRequest`` of StorageContainerLocationProtocol for one SCM."""

    protocol = PROTOCOL
    version = VERSION
    methods = frozenset({"submitRequest"})

    def __init__(self, scm: Any, get: endpoints.Getter, self_name: str, hostname: str) -> None:
        self.scm = scm
        self.leadership = Leadership(scm, get, endpoints.Protocol.CLIENT_HADOOP, self_name, hostname)
        self.responses = call_guard.ResponseCache()
        self.handlers: dict[str, Handler] = {
            "AllocateContainer": self._allocate_container,
            "GetContainer": self._get_container,
            "GetContainerWithPipeline": self._get_container_with_pipeline,
            "GetContainerWithPipelineBatch": self._get_container_with_pipeline_batch,
            "GetExistContainerWithPipelinesInBatch": self._get_exist_container_with_pipelines_in_batch,
            "GetContainerReplicas": self._get_container_replicas,
            "ListContainer": self._list_container,
            "GetContainerCount": self._get_container_count,
            "CloseContainer": self._close_container,
            "QueryNode": self._query_node,
            "SingleNodeQuery": self._single_node,
            "AllocatePipeline": self._allocate_pipeline,
            "ListPipelines": self._list_pipelines,
            "GetPipeline": self._get_pipeline,
            "ActivatePipeline": self._activate_pipeline,
            "DeactivatePipeline": self._deactivate_pipeline,
            "ClosePipeline": self._close_pipeline,
            "GetScmInfo": self._get_scm_info,
            "InSafeMode": self._in_safe_mode,
            "ForceExitSafeMode": self._force_exit_safe_mode,
            "GetSafeModeRuleStatuses": self._safe_mode_rules,
            "StartReplicationManager": self._start_rm,
            "StopReplicationManager": self._stop_rm,
            "GetReplicationManagerStatus": self._rm_status,
            "GetReplicationManagerReport": self._rm_report,
            "DecommissionNodes": self._decommission,
            "RecommissionNodes": self._recommission,
            "StartMaintenanceNodes": self._maintenance,
        }

    @property
    def supported(self) -> list[str]:
        return sorted(self.handlers, key=Type.Value)

    async def call(self, method: str, call: Call) -> bytes:
        request = Request()
        try:
            request.ParseFromString(call.body)
        except pb_message.DecodeError as exc:
            raise RpcCallError(IO_EXCEPTION, f"malformed ScmContainerLocationRequest: {exc}",
                               ErrorCode.ERROR_RPC_SERVER) from exc
        missing = request.FindInitializationErrors()  # type: ignore[attr-defined]
        if missing:
            raise RpcCallError(IO_EXCEPTION, f"ScmContainerLocationRequest lacks required field(s) {', '.join(missing)}",
                               ErrorCode.ERROR_RPC_SERVER)
        command = Type.Name(request.cmdType)
        handler = self.handlers.get(command)
        if handler is None:
            raise RpcCallError(
                SCM_EXCEPTION,
                f"{command} is not supported by this SCM over Hadoop RPC yet (StorageContainerLocationProtocol "
                f"serves {', '.join(self.supported)})",
            )
        try:
            if command not in ANY_SCM:
                self.leadership.require_leader()
            key = self._cache_key(call, command)
            if key is None:
                return await self._answer(handler, request)
            scope = client_call(key[0], key[1]) if (GRPC_SERVICE, command) in call_guard.RAFT_CLIENT_CALLS else None
            if scope is None:
                return await self.responses.run(key, lambda: self._answer(handler, request))

            async def in_scope() -> bytes:
                assert scope is not None
                with scope:
                    return await self._answer(handler, request)

            return await self.responses.run(key, in_scope)
        except NotLeaderException as exc:
            raise self.leadership.error(exc) from exc
        except SCMException as exc:
            raise RpcCallError(SCM_EXCEPTION, str(exc)) from exc  # the text starts with the result code
        except ValueError as exc:  # a value our model cannot hold (ozone_wire.by_name names the field)
            raise RpcCallError(IO_EXCEPTION, f"{command}: {exc}") from exc

    async def _answer(self, handler: Handler, request: Request) -> bytes:
        response = Response(cmdType=request.cmdType, status=Response.OK)
        if request.HasField("traceID"):
            response.traceID = request.traceID
        await handler(request, response)
        ozone_wire.fill_required(response)
        return response.SerializeToString()

    @staticmethod
    def _cache_key(call: Call, command: str) -> tuple[str, int, str] | None:
        if (GRPC_SERVICE, command) not in call_guard.NON_IDEMPOTENT or not call.client_id:
            return None
        return f"hrpc:{call.client_id.hex()}", call.call_id, f"{PROTOCOL}/{command}"

    # ---- containers ----

    async def _allocate_container(self, request: Request, response: Response) -> None:
        req = request.containerRequest
        if not request.HasField("containerRequest"):
            raise SCMException(ResultCodes.INVALID_REQUEST, "AllocateContainer without containerRequest")
        rtype = _enum(req.replicationType, wire.ReplicationType, hdds_pb2.ReplicationType, "replication type")
        ec = (
            ozone_wire.by_name(req.ecReplicationConfig, hdds_pb2.ECReplicationConfig)
            if req.HasField("ecReplicationConfig") else None
        )
        factor = (
            _enum(req.replicationFactor, wire.ReplicationFactor, hdds_pb2.ReplicationFactor, "replication factor")
            if req.HasField("replicationFactor") else hdds_pb2.THREE
        )
        cwp = await self.scm.allocate_container(rtype, factor, req.owner, ec)
        response.containerResponse.errorCode = wire_loc.ContainerResponseProto.success
        response.containerResponse.containerWithPipeline.CopyFrom(ozone_wire.by_name(cwp, wire.ContainerWithPipeline))

    async def _get_container(self, request: Request, response: Response) -> None:
        info = await _maybe(self.scm.get_container(request.getContainerRequest.containerID))
        response.getContainerResponse.containerInfo.CopyFrom(ozone_wire.by_name(info, wire.ContainerInfoProto))

    async def _get_container_with_pipeline(self, request: Request, response: Response) -> None:
        cwp, _ = await _maybe(self.scm.get_container_with_pipeline(request.getContainerWithPipelineRequest.containerID))
        response.getContainerWithPipelineResponse.containerWithPipeline.CopyFrom(
            ozone_wire.by_name(cwp, wire.ContainerWithPipeline)
        )

    async def _get_container_with_pipeline_batch(self, request: Request, response: Response) -> None:
        """What Ozone's OM asks when it refreshes the pipelines of a key's blocks (`key get`): every id
        answered in order, and, as in Ozone, one id that fails fails the whole call."""
        out = response.getContainerWithPipelineBatchResponse
        out.SetInParent()
        for cid in request.getContainerWithPipelineBatchRequest.containerIDs:
            cwp, _ = await _maybe(self.scm.get_container_with_pipeline(cid))
            out.containerWithPipelines.append(ozone_wire.by_name(cwp, wire.ContainerWithPipeline))

    async def _get_exist_container_with_pipelines_in_batch(self, request: Request, response: Response) -> None:
        """The lenient batch: as in Ozone, an id that cannot be answered is left out, the others answered."""
        out = response.getExistContainerWithPipelinesInBatchResponse
        out.SetInParent()
        for cid in request.getExistContainerWithPipelinesInBatchRequest.containerIDs:
            try:
                cwp, _ = await _maybe(self.scm.get_container_with_pipeline(cid))
            except SCMException as exc:
                LOG.info("GetExistContainerWithPipelinesInBatch leaves out container %d: %s", cid, exc)
                continue
            out.containerWithPipelines.append(ozone_wire.by_name(cwp, wire.ContainerWithPipeline))

    async def _get_container_replicas(self, request: Request, response: Response) -> None:
        _, replicas = await _maybe(self.scm.get_container_with_pipeline(request.getContainerReplicasRequest.containerID))
        response.getContainerReplicasResponse.SetInParent()
        response.getContainerReplicasResponse.containerReplica.extend(replica_to_wire(r) for r in replicas)

    def _list_filters(self, req: Any) -> tuple[int | None, int | None, int | None]:
        state = _enum(req.state, wire.LifeCycleState, hdds_pb2.LifeCycleState, "state") if req.HasField("state") else None
        rtype = (
            _enum(req.type, wire.ReplicationType, hdds_pb2.ReplicationType, "replication type")
            if req.HasField("type") else None
        )
        factor = (
            _enum(req.factor, wire.ReplicationFactor, hdds_pb2.ReplicationFactor, "replication factor")
            if req.HasField("factor") else None
        )
        return state, rtype, factor

    async def _list_container(self, request: Request, response: Response) -> None:
        req = request.scmListContainerRequest
        state, rtype, factor = self._list_filters(req)
        ec = (
            ozone_wire.by_name(req.ecReplicationConfig, hdds_pb2.ECReplicationConfig)
            if req.HasField("ecReplicationConfig") else None
        )
        containers, total = await _maybe(
            self.scm.list_containers(req.startContainerID, req.count, state, rtype, factor, ec)
        )
        out = response.scmListContainerResponse
        out.SetInParent()
        out.containers.extend(ozone_wire.by_name(c, wire.ContainerInfoProto) for c in containers)
        out.containerCount = total

    async def _get_container_count(self, request: Request, response: Response) -> None:
        req = request.getContainerCountRequest
        state = _enum(req.state, wire.LifeCycleState, hdds_pb2.LifeCycleState, "state") if req.HasField("state") else None
        _, total = await _maybe(self.scm.list_containers(0, 0, state))
        response.getContainerCountResponse.containerCount = total

    async def _close_container(self, request: Request, response: Response) -> None:
        await self.scm.close_container(request.scmCloseContainerRequest.containerID)
        response.scmCloseContainerResponse.status = wire_loc.SCMCloseContainerResponseProto.OK

    # ---- nodes ----

    async def _query_node(self, request: Request, response: Response) -> None:
        req = request.nodeQueryRequest
        state = _enum(req.state, wire.NodeState, hdds_pb2.NodeState, "node state") if req.HasField("state") else None
        op_state = (
            _enum(req.opState, wire.NodeOperationalState, hdds_pb2.NodeOperationalState, "operational state")
            if req.HasField("opState") else None
        )
        nodes = await _maybe(self.scm.query_nodes(state, op_state))
        response.nodeQueryResponse.SetInParent()
        response.nodeQueryResponse.datanodes.extend(ozone_wire.by_name(n, wire.Node) for n in nodes)

    async def _single_node(self, request: Request, response: Response) -> None:
        """`ozone admin datanode list --node-id`: one datanode by its 128-bit uuid."""
        wanted = ozone_wire.uuid_text(request.singleNodeQueryRequest.uuid)
        for node in await _maybe(self.scm.query_nodes()):
            if node.nodeID.uuid == wanted:
                response.singleNodeQueryResponse.datanode.CopyFrom(ozone_wire.by_name(node, wire.Node))
                return
        raise SCMException(ResultCodes.NO_SUCH_DATANODE, f"no datanode {wanted} is registered")

    async def _decommission(self, request: Request, response: Response) -> None:
        req = request.decommissionNodesRequest
        errors = await self.scm.decommission_nodes(list(req.hosts), req.force)
        response.decommissionNodesResponse.SetInParent()
        response.decommissionNodesResponse.failedHosts.extend(
            wire_loc.DatanodeAdminErrorResponseProto(host=e.host, error=e.error) for e in errors
        )

    async def _recommission(self, request: Request, response: Response) -> None:
        errors = await self.scm.recommission_nodes(list(request.recommissionNodesRequest.hosts))
        response.recommissionNodesResponse.SetInParent()
        response.recommissionNodesResponse.failedHosts.extend(
            wire_loc.DatanodeAdminErrorResponseProto(host=e.host, error=e.error) for e in errors
        )

    async def _maintenance(self, request: Request, response: Response) -> None:
        req = request.startMaintenanceNodesRequest
        errors = await self.scm.start_maintenance_nodes(list(req.hosts), req.endInHours)
        response.startMaintenanceNodesResponse.SetInParent()
        response.startMaintenanceNodesResponse.failedHosts.extend(
            wire_loc.DatanodeAdminErrorResponseProto(host=e.host, error=e.error) for e in errors
        )

    # ---- pipelines ----

    async def _allocate_pipeline(self, request: Request, response: Response) -> None:
        req = request.pipelineRequest
        if not request.HasField("pipelineRequest"):
            raise SCMException(ResultCodes.INVALID_REQUEST, "AllocatePipeline without pipelineRequest")
        rtype = _enum(req.replicationType, wire.ReplicationType, hdds_pb2.ReplicationType, "replication type")
        factor = (
            _enum(req.replicationFactor, wire.ReplicationFactor, hdds_pb2.ReplicationFactor, "replication factor")
            if req.HasField("replicationFactor") else hdds_pb2.THREE
        )
        pipeline = await self.scm.create_pipeline(rtype, factor)
        response.pipelineResponse.errorCode = wire_loc.PipelineResponseProto.success
        response.pipelineResponse.pipeline.CopyFrom(ozone_wire.pipeline_to_wire(pipeline))

    async def _list_pipelines(self, request: Request, response: Response) -> None:
        pipelines = await _maybe(self.scm.list_pipelines())
        response.listPipelineResponse.SetInParent()
        response.listPipelineResponse.pipelines.extend(ozone_wire.pipeline_to_wire(p) for p in pipelines)

    async def _get_pipeline(self, request: Request, response: Response) -> None:
        wanted = ozone_wire.pipeline_id_from_wire(request.getPipelineRequest.pipelineID).id
        for p in await _maybe(self.scm.list_pipelines()):
            if p.id.id == wanted:
                response.getPipelineResponse.pipeline.CopyFrom(ozone_wire.pipeline_to_wire(p))
                return
        raise SCMException(ResultCodes.PIPELINE_NOT_FOUND, f"pipeline {wanted} not found")

    @staticmethod
    def _pipeline_id(message: Any, command: str) -> str:
        pid = ozone_wire.pipeline_id_from_wire(message.pipelineID).id
        if not pid:
            raise SCMException(ResultCodes.INVALID_REQUEST, f"{command} without a pipelineID")
        return pid

    async def _activate_pipeline(self, request: Request, response: Response) -> None:
        await self.scm.activate_pipeline(self._pipeline_id(request.activatePipelineRequest, "ActivatePipeline"))
        response.activatePipelineResponse.SetInParent()

    async def _deactivate_pipeline(self, request: Request, response: Response) -> None:
        await self.scm.deactivate_pipeline(self._pipeline_id(request.deactivatePipelineRequest, "DeactivatePipeline"))
        response.deactivatePipelineResponse.SetInParent()

    async def _close_pipeline(self, request: Request, response: Response) -> None:
        await self.scm.close_pipeline(self._pipeline_id(request.closePipelineRequest, "ClosePipeline"))
        response.closePipelineResponse.SetInParent()

    # ---- SCM, safe mode, replication manager ----

    async def _get_scm_info(self, request: Request, response: Response) -> None:
        info = await _maybe(self.scm.get_scm_info())
        response.getScmInfoResponse.CopyFrom(convert.scm_info_to_wire(info))

    async def _in_safe_mode(self, request: Request, response: Response) -> None:
        in_safe_mode, _ = await _maybe(self.scm.in_safe_mode())
        response.inSafeModeResponse.inSafeMode = bool(in_safe_mode)

    async def _force_exit_safe_mode(self, request: Request, response: Response) -> None:
        response.forceExitSafeModeResponse.exitedSafeMode = bool(await _maybe(self.scm.force_exit_safe_mode()))

    async def _safe_mode_rules(self, request: Request, response: Response) -> None:
        statuses = await _maybe(self.scm.safe_mode_rule_statuses())
        response.getSafeModeRuleStatusesResponse.SetInParent()
        response.getSafeModeRuleStatusesResponse.safeModeRuleStatusesProto.extend(
            wire_loc.SafeModeRuleStatusProto(ruleName=s.ruleName, validate=s.validate, statusText=s.statusText)
            for s in statuses
        )

    async def _start_rm(self, request: Request, response: Response) -> None:
        await _maybe(self.scm.start_replication_manager())
        response.startReplicationManagerResponse.SetInParent()

    async def _stop_rm(self, request: Request, response: Response) -> None:
        await _maybe(self.scm.stop_replication_manager())
        response.stopReplicationManagerResponse.SetInParent()

    async def _rm_status(self, request: Request, response: Response) -> None:
        running = await _maybe(self.scm.replication_manager_status())
        response.replicationManagerStatusResponse.isRunning = bool(running)

    async def _rm_report(self, request: Request, response: Response) -> None:
        report = await _maybe(self.scm.replication_manager_report())
        response.getReplicationManagerReportResponse.report.CopyFrom(report_to_wire(report))
