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
* with Kerberos, the commands Ozone guards with ``checkAdminAccess`` are refused to a caller who is not an
  administrator (:mod:`.authorization`): an RPC ERROR ``AccessControlException`` naming the principal,
  before anything runs;
* a cmdType not served here is an RPC ERROR (``SCMException``) naming the command and listing those served;
  one Ozone 2.2.0 does not serve either (``DeleteContainer``) gets Ozone's own answer
  (``IllegalArgumentException: Unknown command type``).

Which cmdType is served and why the others are not is the generated conformance table
(:mod:`.conformance`, docs/ozone-compatibility.md).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from scm_server import ozone_wire
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.ha.client_call import client_call
from scm_server.hadoop_ipc import Call
from scm_server.proto import hdds_pb2
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import hdds_pb2 as wire
from scm_server.protocols import BalancerStartRequest, StorageContainerLocationProtocol
from scm_server.server import call_guard, endpoints
from scm_server.server.hadoop_rpc import container_token, convert
from scm_server.server.hadoop_rpc.authorization import Authorizer
from scm_server.server.hadoop_rpc.leadership import Leadership
from scm_server.server.hadoop_rpc.server import IO_EXCEPTION, RpcCallError, parse_request

PROTOCOL = call_guard.LOCATION.hadoop_protocol  # org.apache.hadoop.hdds.scm.protocol.StorageContainerLocationProtocol
VERSION = 1
SCM_EXCEPTION = "org.apache.hadoop.hdds.scm.exceptions.SCMException"
LOG = logging.getLogger(__name__)
# cmdTypes of the proto that Ozone 2.2.0's SCM does not serve either (no case in its translator)
OZONE_UNKNOWN = frozenset({"DeleteContainer"})

Type = wire_loc.Type
_COMMANDS = {number: name for name, number in Type.items()}  # cmdType -> name, without the enum wrapper's calls
Response = wire_loc.ScmContainerLocationResponse
Request = wire_loc.ScmContainerLocationRequest

# A handler fills the response's fields; or returns one of them already serialized (field key included), which the
# answer carries after the others.
Handler = Callable[[Request, Response], Awaitable[bytes | None]]
# the fields of ScmContainerLocationResponse that the container reads write as bytes
_LIST_FIELD = Response.DESCRIPTOR.fields_by_name["scmListContainerResponse"].number
_BATCH_FIELD = Response.DESCRIPTOR.fields_by_name["getContainerWithPipelineBatchResponse"].number
_EXIST_BATCH_FIELD = Response.DESCRIPTOR.fields_by_name["getExistContainerWithPipelinesInBatchResponse"].number


class LocationTranslator:
    """Serves ``submitRequest`` of StorageContainerLocationProtocol for one SCM."""

    protocol = PROTOCOL
    version = VERSION
    methods = frozenset({"submitRequest"})

    def __init__(
        self,
        scm: StorageContainerLocationProtocol,
        get: endpoints.Getter,
        self_name: str,
        hostname: str,
        *,
        authorizer: Authorizer | None = None,
        container_tokens: container_token.ContainerTokens | None = None,
    ) -> None:
        self.scm = scm
        self.authorizer = authorizer  # None: no Kerberos, no admin check
        self.container_tokens = container_tokens
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
            "GetClosedContainerCount": self._get_closed_container_count,
            "ListContainerIDs": self._list_container_ids,
            "DatanodeUsageInfo": self._datanode_usage_info,
            "GetContainersOnDecomNode": self._containers_on_decom_node,
            "GetMetrics": self._get_metrics,
            "ReconcileContainer": self._reconcile_container,
            "SuppressContainer": self._suppress_container,
            "TransferLeadership": self._transfer_leadership,
            "DecommissionScm": self._decommission_scm,
            "GetFailedDeletedBlocksTransaction": self._failed_deleted_blocks,
            "ResetDeletedBlockRetryCount": self._reset_deleted_block_retry_count,
            "GetDeletedBlocksTransactionSummary": self._deleted_blocks_summary,
            "FinalizeScmUpgrade": self._finalize_upgrade,
            "QueryUpgradeFinalizationProgress": self._finalization_progress,
            "StartContainerBalancer": self._start_balancer,
            "StopContainerBalancer": self._stop_balancer,
            "GetContainerBalancerStatus": self._balancer_status,
            "GetContainerBalancerStatusInfo": self._balancer_status_info,
            "GetContainerToken": self._no_caller,  # answered in call(), which knows the caller
        }

    @property
    def supported(self) -> list[str]:
        return sorted(self.handlers, key=Type.Value)

    async def call(self, method: str, call: Call) -> bytes:
        request = parse_request(call.body, Request())
        command = _COMMANDS.get(request.cmdType) or Type.Name(request.cmdType)
        handler = self.handlers.get(command)
        if command in OZONE_UNKNOWN:  # Ozone's translator has no case for it and throws this out of the call
            raise RpcCallError("java.lang.IllegalArgumentException", f"Unknown command type: {command}")
        if handler is None:
            raise RpcCallError(
                SCM_EXCEPTION,
                f"{command} is not supported by this SCM over Hadoop RPC yet (StorageContainerLocationProtocol "
                f"serves {', '.join(self.supported)})",
            )
        if self.authorizer is not None and call.authenticated:
            refusal = self.authorizer.command(call.user, command)
            if refusal is not None:
                LOG.warning("refused %s to %s: %s", command, call.user, refusal.message)
                raise RpcCallError(refusal.exception_class, refusal.message)
        if command == "GetContainerToken":
            handler = self._container_token_of(call)
        try:
            if call_guard.hadoop_access_of(PROTOCOL, command) is not call_guard.Access.ANY:
                self.leadership.require_leader()
            key = self._cache_key(call, command)
            if key is None:
                return await self._answer(handler, request)
            scope = client_call(key[0], key[1]) if (PROTOCOL, command) in call_guard.HADOOP_RAFT_CLIENT_CALLS else None
            answer: bytes  # the retry cache gives back what the call answered
            if scope is None:
                answer = await self.responses.run(key, lambda: self._answer(handler, request))
                return answer

            async def in_scope() -> bytes:
                assert scope is not None
                with scope:
                    return await self._answer(handler, request)

            answer = await self.responses.run(key, in_scope)
            return answer
        except NotLeaderException as exc:
            raise self.leadership.error(exc) from exc
        except SCMException as exc:
            raise RpcCallError(SCM_EXCEPTION, str(exc)) from exc  # the text starts with the result code
        except ValueError as exc:  # a value our model cannot hold (ozone_wire.by_name names the field)
            raise RpcCallError(IO_EXCEPTION, f"{command}: {exc}") from exc

    def _container_token_of(self, call: Call) -> Handler:
        async def handler(request: Request, response: Response) -> None:
            if not request.HasField("containerTokenRequest"):
                raise SCMException(ResultCodes.INVALID_REQUEST, "GetContainerToken without containerTokenRequest")
            token = container_token.answer(self.container_tokens, call.user, call.authenticated,
                                           request.containerTokenRequest.containerID.id,
                                           admitted=self.authorizer is not None and call.authenticated)
            response.containerTokenResponse.token.CopyFrom(token)

        return handler

    @staticmethod
    async def _no_caller(request: Request, response: Response) -> None:
        raise SCMException(ResultCodes.INTERNAL_ERROR, "GetContainerToken needs its caller")

    async def _answer(self, handler: Handler, request: Request) -> bytes:
        response = Response(cmdType=request.cmdType, status=Response.OK)
        if request.HasField("traceID"):
            response.traceID = request.traceID
        written = await handler(request, response)
        if not response.IsInitialized():  # a check in C; the walk in Python only when a required value is unset
            ozone_wire.fill_required(response)
        data = response.SerializeToString()
        return data + written if written else data

    @staticmethod
    def _cache_key(call: Call, command: str) -> tuple[str, int, str] | None:
        return call_guard.hadoop_cache_key(call.client_id, call.call_id, PROTOCOL, command)

    # ---- containers ----

    async def _allocate_container(self, request: Request, response: Response) -> None:
        req = request.containerRequest
        if not request.HasField("containerRequest"):
            raise SCMException(ResultCodes.INVALID_REQUEST, "AllocateContainer without containerRequest")
        rtype = convert.enum_from_wire(req.replicationType, wire.ReplicationType, hdds_pb2.ReplicationType, "replication type")
        ec = (
            ozone_wire.by_name(req.ecReplicationConfig, hdds_pb2.ECReplicationConfig)
            if req.HasField("ecReplicationConfig") else None
        )
        factor = (
            convert.enum_from_wire(req.replicationFactor, wire.ReplicationFactor, hdds_pb2.ReplicationFactor, "replication factor")
            if req.HasField("replicationFactor") else hdds_pb2.THREE
        )
        cwp = await self.scm.allocate_container(rtype, factor, req.owner, ec)
        response.containerResponse.errorCode = wire_loc.ContainerResponseProto.success
        response.containerResponse.containerWithPipeline.CopyFrom(ozone_wire.by_name(cwp, wire.ContainerWithPipeline))

    async def _get_container(self, request: Request, response: Response) -> None:
        info = self.scm.get_container(request.getContainerRequest.containerID)
        response.getContainerResponse.containerInfo.MergeFromString(ozone_wire.container_info_bytes(info))

    async def _get_container_with_pipeline(self, request: Request, response: Response) -> None:
        pair = self.scm.container_and_pipeline(request.getContainerWithPipelineRequest.containerID)
        response.getContainerWithPipelineResponse.MergeFromString(convert.containers_with_pipelines_bytes([pair]))

    async def _get_container_with_pipeline_batch(self, request: Request, response: Response) -> bytes:
        """What Ozone's OM asks when it refreshes the pipelines of a key's blocks (`key get`): every id
        answered in order, and, as in Ozone, one id that fails fails the whole call. Written as bytes."""
        triples = self.scm.containers_encoded_with_pipelines(list(request.getContainerWithPipelineBatchRequest.containerIDs))
        return convert.field_bytes(_BATCH_FIELD, convert.encoded_containers_with_pipelines_bytes(triples))

    async def _get_exist_container_with_pipelines_in_batch(self, request: Request, response: Response) -> bytes:
        """The lenient batch: as in Ozone, an id that cannot be answered is left out, the others answered."""
        pairs = []
        for cid in request.getExistContainerWithPipelinesInBatchRequest.containerIDs:
            try:
                pairs.append(self.scm.container_and_pipeline(cid))
            except SCMException as exc:
                LOG.info("GetExistContainerWithPipelinesInBatch leaves out container %d: %s", cid, exc)
        return convert.field_bytes(_EXIST_BATCH_FIELD, convert.containers_with_pipelines_bytes(pairs))

    async def _get_container_replicas(self, request: Request, response: Response) -> None:
        _, replicas = self.scm.get_container_with_pipeline(request.getContainerReplicasRequest.containerID)
        response.getContainerReplicasResponse.SetInParent()
        response.getContainerReplicasResponse.containerReplica.extend(convert.replica_to_wire(r) for r in replicas)

    def _list_filters(self, req: Any) -> tuple[int | None, int | None, int | None]:
        state = convert.enum_from_wire(req.state, wire.LifeCycleState, hdds_pb2.LifeCycleState, "state") if req.HasField("state") else None
        rtype = (
            convert.enum_from_wire(req.type, wire.ReplicationType, hdds_pb2.ReplicationType, "replication type")
            if req.HasField("type") else None
        )
        factor = (
            convert.enum_from_wire(req.factor, wire.ReplicationFactor, hdds_pb2.ReplicationFactor, "replication factor")
            if req.HasField("factor") else None
        )
        return state, rtype, factor

    async def _list_container(self, request: Request, response: Response) -> bytes:
        """The page written as bytes from the containers' kept forms (:func:`ozone_wire.container_list_bytes`):
        no message is built per container."""
        req = request.scmListContainerRequest
        state, rtype, factor = self._list_filters(req)
        ec = (
            ozone_wire.by_name(req.ecReplicationConfig, hdds_pb2.ECReplicationConfig)
            if req.HasField("ecReplicationConfig") else None
        )
        suppressed = req.suppressed if req.HasField("suppressed") else None
        page, total = self.scm.list_containers_encoded(
            req.startContainerID, req.count, state, rtype, factor, suppressed, ec=ec
        )
        return convert.field_bytes(_LIST_FIELD, ozone_wire.container_list_bytes(page, total))

    async def _get_container_count(self, request: Request, response: Response) -> None:
        req = request.getContainerCountRequest
        state = convert.enum_from_wire(req.state, wire.LifeCycleState, hdds_pb2.LifeCycleState, "state") if req.HasField("state") else None
        _, total = self.scm.list_containers(0, 0, state)
        response.getContainerCountResponse.containerCount = total

    async def _get_closed_container_count(self, request: Request, response: Response) -> None:
        """As Ozone: the number of CLOSED containers (the request's state field is not read)."""
        _, total = self.scm.list_containers(0, 0, hdds_pb2.CLOSED)
        response.getContainerCountResponse.containerCount = total

    async def _list_container_ids(self, request: Request, response: Response) -> None:
        """Container ids from ``startContainerID`` (inclusive), at most ``count``, optionally in one state."""
        req = request.scmListContainerIDsRequest
        state = convert.enum_from_wire(req.state, wire.LifeCycleState, hdds_pb2.LifeCycleState, "state") if req.HasField("state") else None
        containers, _ = self.scm.list_containers(req.startContainerID.id, req.count, state)
        response.scmListContainerIDsResponse.SetInParent()
        response.scmListContainerIDsResponse.containerIDs.extend(wire.ContainerID(id=c.containerID) for c in containers)

    async def _suppress_container(self, request: Request, response: Response) -> None:
        """As Ozone: each id marked (or unmarked, ``suppress=false``); the ids that could not be, listed."""
        req = request.suppressContainerRequest
        failed = await self.scm.suppress_containers(list(req.containerIDs), req.suppress)
        response.suppressContainerResponse.SetInParent()
        response.suppressContainerResponse.failedContainerIDs.extend(failed)

    async def _reconcile_container(self, request: Request, response: Response) -> None:
        self.scm.reconcile_container(request.reconcileContainerRequest.containerID)
        response.reconcileContainerResponse.SetInParent()

    async def _close_container(self, request: Request, response: Response) -> None:
        await self.scm.close_container(request.scmCloseContainerRequest.containerID)
        response.scmCloseContainerResponse.status = wire_loc.SCMCloseContainerResponseProto.OK

    # ---- nodes ----

    async def _query_node(self, request: Request, response: Response) -> None:
        req = request.nodeQueryRequest
        if req.scope == wire.QueryScope.POOL:  # Ozone: IllegalArgumentException("Not Supported yet")
            raise RpcCallError("java.lang.IllegalArgumentException", "Not Supported yet")
        state = convert.enum_from_wire(req.state, wire.NodeState, hdds_pb2.NodeState, "node state") if req.HasField("state") else None
        op_state = (
            convert.enum_from_wire(req.opState, wire.NodeOperationalState, hdds_pb2.NodeOperationalState, "operational state")
            if req.HasField("opState") else None
        )
        nodes = self.scm.query_nodes(state, op_state)
        response.nodeQueryResponse.SetInParent()
        response.nodeQueryResponse.datanodes.extend(ozone_wire.by_name(n, wire.Node) for n in nodes)

    async def _single_node(self, request: Request, response: Response) -> None:
        """`ozone admin datanode list --node-id`: one datanode by its 128-bit uuid."""
        wanted = ozone_wire.uuid_text(request.singleNodeQueryRequest.uuid)
        for node in self.scm.query_nodes():
            if node.nodeID.uuid == wanted:
                response.singleNodeQueryResponse.datanode.CopyFrom(ozone_wire.by_name(node, wire.Node))
                return
        raise SCMException(ResultCodes.NO_SUCH_DATANODE, f"no datanode {wanted} is registered")

    async def _decommission(self, request: Request, response: Response) -> None:
        req = request.decommissionNodesRequest
        errors = await self.scm.decommission_nodes(list(req.hosts), req.force)
        response.decommissionNodesResponse.SetInParent()
        response.decommissionNodesResponse.failedHosts.extend(convert.admin_errors_to_wire(errors))

    async def _recommission(self, request: Request, response: Response) -> None:
        errors = await self.scm.recommission_nodes(list(request.recommissionNodesRequest.hosts))
        response.recommissionNodesResponse.SetInParent()
        response.recommissionNodesResponse.failedHosts.extend(convert.admin_errors_to_wire(errors))

    async def _maintenance(self, request: Request, response: Response) -> None:
        req = request.startMaintenanceNodesRequest
        errors = await self.scm.start_maintenance_nodes(list(req.hosts), req.endInHours)
        response.startMaintenanceNodesResponse.SetInParent()
        response.startMaintenanceNodesResponse.failedHosts.extend(convert.admin_errors_to_wire(errors))

    async def _datanode_usage_info(self, request: Request, response: Response) -> None:
        """By uuid or address when either is given, else the ``count`` most (or least) used, as Ozone."""
        req = request.DatanodeUsageInfoRequest
        if req.HasField("uuid") or req.HasField("ipaddress"):
            usages = self.scm.datanode_usage_info(req.ipaddress, req.uuid)
        else:
            usages = self.scm.most_or_least_used_datanodes(req.mostUsed, req.count)
        response.DatanodeUsageInfoResponse.SetInParent()
        response.DatanodeUsageInfoResponse.info.extend(convert.usage_to_wire(u) for u in usages)

    async def _containers_on_decom_node(self, request: Request, response: Response) -> None:
        details = request.getContainersOnDecomNodeRequest.datanodeDetails
        uuid = ozone_wire.uuid_text(details.uuid128) if details.HasField("uuid128") else details.uuid
        pending = self.scm.containers_on_decom_node(uuid)
        out = response.getContainersOnDecomNodeResponse
        out.SetInParent()
        for name, ids in pending.items():
            out.containersOnDecomNode.add(name=name, id=[wire.ContainerID(id=c) for c in ids])

    async def _get_metrics(self, request: Request, response: Response) -> None:
        metrics = self.scm.get_metrics(request.getMetricsRequest.query)
        response.getMetricsResponse.metricsJson = metrics

    # ---- pipelines ----

    async def _allocate_pipeline(self, request: Request, response: Response) -> None:
        req = request.pipelineRequest
        if not request.HasField("pipelineRequest"):
            raise SCMException(ResultCodes.INVALID_REQUEST, "AllocatePipeline without pipelineRequest")
        rtype = convert.enum_from_wire(req.replicationType, wire.ReplicationType, hdds_pb2.ReplicationType, "replication type")
        factor = (
            convert.enum_from_wire(req.replicationFactor, wire.ReplicationFactor, hdds_pb2.ReplicationFactor, "replication factor")
            if req.HasField("replicationFactor") else hdds_pb2.THREE
        )
        pipeline = await self.scm.create_pipeline(rtype, factor)
        response.pipelineResponse.errorCode = wire_loc.PipelineResponseProto.success
        response.pipelineResponse.pipeline.CopyFrom(ozone_wire.pipeline_to_wire(pipeline, all_ports=True))

    async def _list_pipelines(self, request: Request, response: Response) -> None:
        pipelines = self.scm.list_pipelines()
        response.listPipelineResponse.SetInParent()
        response.listPipelineResponse.pipelines.extend(ozone_wire.pipeline_to_wire(p, all_ports=True) for p in pipelines)

    async def _get_pipeline(self, request: Request, response: Response) -> None:
        wanted = ozone_wire.pipeline_id_from_wire(request.getPipelineRequest.pipelineID).id
        for p in self.scm.list_pipelines():
            if p.id.id == wanted:
                response.getPipelineResponse.pipeline.CopyFrom(ozone_wire.pipeline_to_wire(p, all_ports=True))
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
        info = self.scm.get_scm_info()
        response.getScmInfoResponse.CopyFrom(convert.scm_info_to_wire(info))

    async def _in_safe_mode(self, request: Request, response: Response) -> None:
        in_safe_mode, _ = self.scm.in_safe_mode()
        response.inSafeModeResponse.inSafeMode = bool(in_safe_mode)

    async def _force_exit_safe_mode(self, request: Request, response: Response) -> None:
        # Ozone's SCM answers true whether it left safe mode now or had left it before (`ozone admin safemode
        # exit` prints "SCM exit safe mode successfully." either way); ours tells the two apart, this answer not
        self.scm.force_exit_safe_mode()
        response.forceExitSafeModeResponse.exitedSafeMode = True

    async def _safe_mode_rules(self, request: Request, response: Response) -> None:
        statuses = self.scm.safe_mode_rule_statuses()
        response.getSafeModeRuleStatusesResponse.SetInParent()
        response.getSafeModeRuleStatusesResponse.safeModeRuleStatusesProto.extend(
            wire_loc.SafeModeRuleStatusProto(ruleName=s.ruleName, validate=s.validate, statusText=s.statusText)
            for s in statuses
        )

    async def _start_rm(self, request: Request, response: Response) -> None:
        self.scm.start_replication_manager()
        response.startReplicationManagerResponse.SetInParent()

    async def _stop_rm(self, request: Request, response: Response) -> None:
        self.scm.stop_replication_manager()
        response.stopReplicationManagerResponse.SetInParent()

    async def _rm_status(self, request: Request, response: Response) -> None:
        running = self.scm.replication_manager_status()
        response.replicationManagerStatusResponse.isRunning = bool(running)

    async def _rm_report(self, request: Request, response: Response) -> None:
        report = self.scm.replication_manager_report()
        response.getReplicationManagerReportResponse.report.CopyFrom(convert.report_to_wire(report))

    # ---- the SCM ring ----

    async def _transfer_leadership(self, request: Request, response: Response) -> None:
        await self.scm.transfer_leadership(request.transferScmLeadershipRequest.newLeaderId)
        response.transferScmLeadershipResponse.SetInParent()

    async def _decommission_scm(self, request: Request, response: Response) -> None:
        """As Ozone: a refusal is ``success=false`` with the reason, not an RPC error."""
        out = response.decommissionScmResponse
        try:
            await self.scm.decommission_scm(request.decommissionScmRequest.scmId)
        except SCMException as exc:
            out.success = False
            out.errorMsg = exc.message
            return
        out.success = True

    # ---- deleted blocks ----

    async def _failed_deleted_blocks(self, request: Request, response: Response) -> None:
        """Deprecated in Ozone 2.2.0, which answers an empty list (transactions are no longer failed for good)."""
        response.getFailedDeletedBlocksTxnResponse.SetInParent()

    async def _reset_deleted_block_retry_count(self, request: Request, response: Response) -> None:
        """Deprecated in Ozone 2.2.0, which resets nothing and answers 0."""
        response.resetDeletedBlockRetryCountResponse.resetCount = 0

    async def _deleted_blocks_summary(self, request: Request, response: Response) -> None:
        summary = self.scm.deleted_blocks_summary()
        out = response.getDeletedBlocksTxnSummaryResponse.summary
        out.totalTransactionCount = summary.transactions
        out.totalBlockCount = summary.blocks

    # ---- upgrade finalization ----

    async def _finalize_upgrade(self, request: Request, response: Response) -> None:
        status, messages = await self.scm.finalize_upgrade(request.finalizeScmUpgradeRequest.upgradeClientId)
        out = response.finalizeScmUpgradeResponse.status
        out.status = wire.UpgradeFinalizationStatus.Status.Value(status)
        out.messages.extend(messages)

    async def _finalization_progress(self, request: Request, response: Response) -> None:
        query = request.queryUpgradeFinalizationProgressRequest
        status, messages = self.scm.upgrade_finalization_progress(query.upgradeClientId, query.takeover, query.readonly)
        out = response.queryUpgradeFinalizationProgressResponse.status
        out.status = wire.UpgradeFinalizationStatus.Status.Value(status)
        out.messages.extend(messages)

    # ---- the container balancer ----

    async def _start_balancer(self, request: Request, response: Response) -> None:
        """Ozone answers a balancer that cannot start (running already, safe mode, a bad option) with
        ``start=false`` and the reason, not an exception."""
        r = request.startContainerBalancerRequest
        opt = r.HasField
        options = BalancerStartRequest(
            threshold=r.threshold if opt("threshold") else None,
            iterations=r.iterations if opt("iterations") else None,
            max_datanodes_percentage=(
                r.maxDatanodesPercentageToInvolvePerIteration if opt("maxDatanodesPercentageToInvolvePerIteration")
                else None
            ),
            max_size_to_move_per_iteration_gb=(
                r.maxSizeToMovePerIterationInGB if opt("maxSizeToMovePerIterationInGB") else None
            ),
            max_size_entering_target_gb=r.maxSizeEnteringTargetInGB if opt("maxSizeEnteringTargetInGB") else None,
            max_size_leaving_source_gb=r.maxSizeLeavingSourceInGB if opt("maxSizeLeavingSourceInGB") else None,
            balancing_interval_minutes=r.balancingInterval if opt("balancingInterval") else None,
            move_timeout_minutes=r.moveTimeout if opt("moveTimeout") else None,
            move_replication_timeout_minutes=r.moveReplicationTimeout if opt("moveReplicationTimeout") else None,
            network_topology_enable=r.networkTopologyEnable if opt("networkTopologyEnable") else None,
            include_nodes=r.includeNodes if opt("includeNodes") else None,
            exclude_nodes=r.excludeNodes if opt("excludeNodes") else None,
            include_containers=r.includeContainers if opt("includeContainers") else None,
            exclude_containers=r.excludeContainers if opt("excludeContainers") else None,
        )
        out = response.startContainerBalancerResponse
        try:
            out.message = await self.scm.start_container_balancer(options)
            out.start = True
        except NotLeaderException:
            raise
        except SCMException as exc:
            out.start = False
            out.message = exc.message

    async def _stop_balancer(self, request: Request, response: Response) -> None:
        """Stopping a balancer that is not running fails with Ozone's message, as an SCMException: Ozone sends it
        as a plain IOException, which its client's failover policy retries on every SCM until its retries run
        out; an SCMException fails the command at once with the same text."""
        try:
            await self.scm.stop_container_balancer()
        except NotLeaderException:
            raise
        except SCMException as exc:
            raise RpcCallError(SCM_EXCEPTION, exc.message) from exc
        response.stopContainerBalancerResponse.SetInParent()

    async def _balancer_status(self, request: Request, response: Response) -> None:
        response.containerBalancerStatusResponse.isRunning = self.scm.container_balancer_status()

    async def _balancer_status_info(self, request: Request, response: Response) -> None:
        """``isRunning`` and, while a run is recorded as running, its start, configuration and iterations (Ozone
        answers no status info when no balancer task runs)."""
        info = self.scm.container_balancer_status_info()
        out = response.containerBalancerStatusInfoResponse
        out.isRunning = info.running
        if not info.running or info.configuration is None:
            return
        status = out.containerBalancerStatusInfo
        status.startedAt = info.configuration.startedAtMs // 1000
        status.configuration.CopyFrom(ozone_wire.by_name(info.configuration, wire.ContainerBalancerConfigurationProto))
        for it in info.iterations:
            row = status.iterationsStatusInfo.add(
                iterationNumber=it.iteration_number,
                iterationResult=it.iteration_result,
                sizeScheduledForMove=it.size_scheduled_for_move,
                dataSizeMoved=it.data_size_moved,
                containerMovesScheduled=it.moves_scheduled,
                containerMovesCompleted=it.moves_completed,
                containerMovesFailed=it.moves_failed,
                containerMovesTimeout=it.moves_timeout,
                iterationDuration=it.duration_seconds,
            )
            for uuid, size in it.size_entering_nodes.items():
                row.sizeEnteringNodes.add(uuid=uuid, dataVolume=size)
            for uuid, size in it.size_leaving_nodes.items():
                row.sizeLeavingNodes.add(uuid=uuid, dataVolume=size)
