"""gRPC servicers: the SCM's three protocols, thin adapters over the facade.

    datanodes ── StorageContainerDatanodeProtocolService ──┐
    OM/clients ─ ScmBlockLocationProtocolService ──────────┼─> StorageContainerManager (scm.py)
    admins ───── StorageContainerLocationProtocolService ──┘

Handlers are registered with *raw bytes* in and parse the request themselves, so a malformed
or incomplete protobuf becomes a clear ``INVALID_ARGUMENT`` (``x-scm-result=INVALID_REQUEST``)
instead of gRPC's generic "Exception deserializing request" INTERNAL error. Every
``SCMException`` from the facade becomes a status + trailing metadata (see ``errors``); a
``NotLeaderException`` gets the leader's address *for the protocol that was called*, looked up
from the configuration by the leader's node id. Who may answer which call, exactly-once retries
and expired deadlines are decided by :mod:`scm_server.server.call_guard` before the facade runs.
Nothing here holds SCM state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import grpc
import grpc.aio
from google.protobuf import message as pb_message
from google.protobuf import message_factory
from prometheus_client import CollectorRegistry, Counter, Histogram

from scm_server import call_metadata
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.grpc_errors import RESULT_KEY, to_grpc_error
from scm_server.proto import scm_client_pb2, scm_datanode_pb2
from scm_server.protocols import (
    BlockAllocation,
    LeaderRole,
    ScmBlockLocationProtocol,
    StorageContainerDatanodeProtocol,
    StorageContainerLocationProtocol,
)
from scm_server.security.core.identity import Role
from scm_server.security.tls import current_identity
from scm_server.server import call_guard, endpoints

LOG = logging.getLogger(__name__)
M = TypeVar("M", bound=pb_message.Message)
S = TypeVar("S", bound=LeaderRole)  # the face of the facade a servicer serves (scm_server.protocols)

Handler = Callable[[Any, grpc.aio.ServicerContext], Awaitable[pb_message.Message]]


class RpcMetrics:
    """Per-SCM RPC counters in the SCM's own registry (exposed on /prom)."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        registry = registry if registry is not None else CollectorRegistry()
        self.requests = Counter(
            "scm_rpc_requests", "gRPC requests handled, by service, method and result",
            ["service", "method", "result"], registry=registry,
        )
        self.latency = Histogram(
            "scm_rpc_latency_seconds", "gRPC request handling time", ["service", "method"],
            registry=registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.container_reports = Counter(
            "scm_datanode_full_container_reports", "Full container reports received from datanodes",
            registry=registry,
        )
        self.incremental_reports = Counter(
            "scm_datanode_incremental_container_reports", "Incremental container reports received",
            registry=registry,
        )


class _ServiceBase(Generic[S]):
    """Shared plumbing: request parsing, error mapping, metrics; ``scm`` is the face of the facade served."""

    SERVICE: str = ""
    MODULE: Any = None

    def __init__(
        self,
        scm: S,
        protocol: endpoints.Protocol,
        get: endpoints.Getter,
        metrics: RpcMetrics,
    ) -> None:
        self.scm = scm
        self.protocol = protocol
        self.get = get
        self.metrics = metrics
        self.responses = call_guard.ResponseCache()

    async def _parse_request(
        self, request_cls: type[M], raw: bytes, context: grpc.aio.ServicerContext, method: str
    ) -> M:
        """The request decoded from the raw bytes; a malformed one aborts the call with
        INVALID_ARGUMENT naming the message and the method (``x-scm-result=INVALID_REQUEST``)."""
        request = request_cls()
        try:
            request.ParseFromString(raw)
        except pb_message.DecodeError as exc:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"INVALID_REQUEST: malformed {request_cls.DESCRIPTOR.name} for {self.SERVICE}/{method}: {exc}",
                trailing_metadata=((RESULT_KEY, ResultCodes.INVALID_REQUEST.value),),
            )
        return request

    def _leader_address(self, exc: NotLeaderException) -> str | None:
        if not exc.leader_id:
            return None
        try:
            # The hint may name the leader by Raft peer id (scmUuid); map it to its node id.
            return endpoints.leader_address(self.get, self.protocol, self.scm.node_id_of_peer(exc.leader_id))
        except Exception:  # a misconfigured peer must not hide the NotLeader answer
            LOG.exception("cannot resolve leader %s address", exc.leader_id)
            return None

    def generic_handler(self) -> grpc.GenericRpcHandler:
        service = self.MODULE.DESCRIPTOR.services_by_name[self.SERVICE]
        handlers: dict[str, grpc.RpcMethodHandler] = {}
        for method in service.methods:
            impl: Handler = getattr(self, method.name)
            request_cls = message_factory.GetMessageClass(method.input_type)
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                self._wrap(method.name, impl, request_cls),
                request_deserializer=None,  # raw bytes: we parse, to report bad input clearly
                response_serializer=_serialize,
            )
        return grpc.method_handlers_generic_handler(service.full_name, handlers)

    def _wrap(
        self, name: str, impl: Handler, request_cls: type[pb_message.Message]
    ) -> Callable[[bytes, grpc.aio.ServicerContext], Awaitable[pb_message.Message | bytes]]:
        service = self.SERVICE

        async def handler(raw: bytes, context: grpc.aio.ServicerContext) -> pb_message.Message | bytes:
            started = time.perf_counter()
            result = ResultCodes.INVALID_REQUEST.value  # until the request parses
            try:
                request = await self._parse_request(request_cls, raw, context, name)
                result = "OK"
                try:
                    return await self._guarded(name, impl, request, context)
                except SCMException as exc:
                    result = exc.result.value
                    leader = self._leader_address(exc) if isinstance(exc, NotLeaderException) else None
                    code, details, md = to_grpc_error(exc, leader)
                    await context.abort(code, details, trailing_metadata=md)
                except (grpc.aio.AbortError, grpc.RpcError):
                    raise
                except asyncio.CancelledError:
                    result = "CANCELLED"  # the client went away or the deadline passed: work stopped
                    raise
                except Exception as exc:
                    result = ResultCodes.INTERNAL_ERROR.value
                    LOG.exception("%s/%s failed", service, name)
                    await context.abort(
                        grpc.StatusCode.INTERNAL,
                        f"INTERNAL_ERROR: {type(exc).__name__}: {exc}",
                        trailing_metadata=((RESULT_KEY, ResultCodes.INTERNAL_ERROR.value),),
                    )
                raise AssertionError("context.abort() returned")
            finally:
                self.metrics.requests.labels(service, name, result).inc()
                self.metrics.latency.labels(service, name).observe(time.perf_counter() - started)

        return handler


    async def _guarded(
        self, name: str, impl: Handler, request: Any, context: grpc.aio.ServicerContext
    ) -> pb_message.Message | bytes:
        """Access rule, expired deadline, retry cache (see call_guard), then the facade."""
        service = self.SERVICE
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            raise SCMException(ResultCodes.TIMEOUT, f"{service}/{name}: the call's deadline passed before it ran")
        md = call_metadata.as_dict(context.invocation_metadata())
        access = call_guard.access_of(service, name)
        local = access is call_guard.Access.READ and call_metadata.wants_local_read(md)
        if access is call_guard.Access.LEADER or (access is call_guard.Access.READ and not local):
            self.scm.require_leader()
        key = call_guard.cache_key(md, service, name)
        with call_guard.client_call_scope(md, service, name):
            if key is None:
                response = await impl(request, context)
            else:
                # Kept serialized (a third of the memory of the message, and gRPC sends the bytes as
                # they are): see call_guard.ResponseCache.
                async def serialized() -> bytes:
                    return (await impl(request, context)).SerializeToString()

                response = await self.responses.run(key, serialized)
        if local:
            context.set_trailing_metadata(call_metadata.answer_metadata(*self.scm.answer_label()))
        return response


class DatanodeProtocolService(_ServiceBase[StorageContainerDatanodeProtocol]):
    """StorageContainerDatanodeProtocolService on ozone.scm.datanode.grpc.port."""

    SERVICE = "StorageContainerDatanodeProtocolService"
    MODULE = scm_datanode_pb2

    async def GetVersion(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        return self.scm.get_version()

    async def Register(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        _check_datanode_identity(req.datanodeDetails.uuid)
        if req.containerReport.reports:
            self.metrics.container_reports.inc()
        return await self.scm.register_datanode(req)

    async def SendHeartbeat(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        _check_datanode_identity(req.datanodeDetails.uuid)
        if req.HasField("containerReport"):
            self.metrics.container_reports.inc()
        if req.incrementalContainerReport:
            self.metrics.incremental_reports.inc(len(req.incrementalContainerReport))
        return await self.scm.process_heartbeat(req)


class BlockProtocolService(_ServiceBase[ScmBlockLocationProtocol]):
    """ScmBlockLocationProtocolService on ozone.scm.block.client.grpc.port (and the client port)."""

    SERVICE = "ScmBlockLocationProtocolService"
    MODULE = scm_client_pb2

    async def AllocateScmBlock(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        exclude = req.excludeList if req.HasField("excludeList") else None
        ec = req.ecReplicationConfig if req.HasField("ecReplicationConfig") else None
        blocks = await self.scm.allocate_block(
            req.size, req.numBlocks, req.type, req.factor, req.owner, exclude, ec=ec
        )
        return allocate_response(blocks)

    async def DeleteScmKeyBlocks(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        results = await self.scm.delete_key_blocks(list(req.keyBlocks))
        return scm_client_pb2.DeleteScmKeyBlocksResponseProto(results=list(results))

    async def GetScmInfo(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        return self.scm.get_scm_info()


class LocationProtocolService(_ServiceBase[StorageContainerLocationProtocol]):
    """StorageContainerLocationProtocolService (admin) on ozone.scm.client.grpc.port."""

    SERVICE = "StorageContainerLocationProtocolService"
    MODULE = scm_client_pb2

    async def AllocateContainer(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        cwp = await self.scm.allocate_container(req.replicationType, req.replicationFactor, req.owner)
        return scm_client_pb2.ContainerResponseProto(containerWithPipeline=cwp)

    async def GetContainer(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        info = self.scm.get_container(req.containerID)
        return scm_client_pb2.GetContainerResponseProto(containerInfo=info)

    async def GetContainerWithPipeline(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        cwp, replicas = self.scm.get_container_with_pipeline(req.containerID)
        return scm_client_pb2.GetContainerWithPipelineResponseProto(
            containerWithPipeline=cwp, replicas=list(replicas)
        )

    async def ListContainer(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        containers, total = self.scm.list_containers(
            req.startContainerID if req.HasField("startContainerID") else 0,
            req.count if req.HasField("count") else 100,
            req.state if req.HasField("state") else None,
            req.type if req.HasField("type") else None,
            req.factor if req.HasField("factor") else None,
        )
        return scm_client_pb2.SCMListContainerResponseProto(containers=list(containers), containerCount=total)

    async def CloseContainer(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        await self.scm.close_container(req.containerID)
        return scm_client_pb2.SCMCloseContainerResponseProto()

    async def ListPipelines(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        pipelines = self.scm.list_pipelines()
        return scm_client_pb2.ListPipelineResponseProto(pipelines=list(pipelines))

    async def AllocatePipeline(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        pipeline = await self.scm.create_pipeline(req.replicationType, req.replicationFactor)
        return scm_client_pb2.PipelineResponseProto(pipeline=pipeline)

    async def ClosePipeline(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        await self.scm.close_pipeline(req.pipelineID.id)
        return scm_client_pb2.Empty()

    async def ActivatePipeline(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        await self.scm.activate_pipeline(req.pipelineID.id)
        return scm_client_pb2.Empty()

    async def DeactivatePipeline(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        await self.scm.deactivate_pipeline(req.pipelineID.id)
        return scm_client_pb2.Empty()

    async def InSafeMode(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        in_safe_mode, pre_check = self.scm.in_safe_mode()
        return scm_client_pb2.InSafeModeResponseProto(inSafeMode=in_safe_mode, preCheckComplete=pre_check)

    async def ForceExitSafeMode(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        exited = self.scm.force_exit_safe_mode()
        return scm_client_pb2.ForceExitSafeModeResponseProto(exitedSafeMode=bool(exited))

    async def GetSafeModeRuleStatuses(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        statuses = self.scm.safe_mode_rule_statuses()
        return scm_client_pb2.GetSafeModeRuleStatusesResponseProto(safeModeRuleStatusesProto=list(statuses))

    async def StartReplicationManager(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        self.scm.start_replication_manager()
        return scm_client_pb2.Empty()

    async def StopReplicationManager(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        self.scm.stop_replication_manager()
        return scm_client_pb2.Empty()

    async def GetReplicationManagerStatus(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        running = self.scm.replication_manager_status()
        return scm_client_pb2.ReplicationManagerStatusResponseProto(isRunning=bool(running))

    async def GetReplicationManagerReport(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        report = self.scm.replication_manager_report()
        return scm_client_pb2.ReplicationManagerReportResponseProto(report=report)

    async def QueryNode(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        nodes = self.scm.query_nodes(
            req.state if req.HasField("state") else None,
            req.opState if req.HasField("opState") else None,
        )
        return scm_client_pb2.NodeQueryResponseProto(datanodes=list(nodes))

    async def DecommissionNodes(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        errors = await self.scm.decommission_nodes(list(req.hosts), req.force)
        return scm_client_pb2.DatanodeAdminResponseProto(errors=list(errors))

    async def StartMaintenanceNodes(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        errors = await self.scm.start_maintenance_nodes(list(req.hosts), req.endInHours)
        return scm_client_pb2.DatanodeAdminResponseProto(errors=list(errors))

    async def RecommissionNodes(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        errors = await self.scm.recommission_nodes(list(req.hosts))
        return scm_client_pb2.DatanodeAdminResponseProto(errors=list(errors))

    async def GetScmInfo(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        return self.scm.get_scm_info()


def allocate_response(blocks: list[BlockAllocation]) -> scm_client_pb2.AllocateScmBlockResponseProto:
    """The block protocol's answer, written straight from the allocations: each block's pipeline copied once."""
    response = scm_client_pb2.AllocateScmBlockResponseProto()
    out = response.blocks
    for container_id, local_id, pipeline in blocks:
        block = out.add()
        block.containerBlockID.containerID = container_id
        block.containerBlockID.localID = local_id
        block.pipeline.CopyFrom(pipeline)
    return response


def _serialize(response: pb_message.Message | bytes) -> bytes:
    """The response serializer: an answer from the retry cache is already serialized."""
    return response if isinstance(response, bytes) else response.SerializeToString()


def _check_datanode_identity(uuid: str) -> None:
    """Under mutual TLS a datanode reports only as itself: its uuid is its certificate's OU."""
    ident = current_identity()
    if ident is not None and ident.role is Role.DATANODE and ident.owner_id != uuid:
        raise SCMException(
            ResultCodes.PERMISSION_DENIED,
            f"the certificate of datanode {ident.owner_id} ({ident.common_name}) cannot report as datanode {uuid}",
        )
