"""Typed asyncio client for the SCM's client-facing gRPC protocols, with HA failover.

Everything outside the SCM process (CLI, datanode simulator's admin lookups, benchmarks,
later the Kubernetes operator) talks to SCM through this class. It holds a list of SCM
addresses (admin/client port; that port also serves the block protocol) and one gRPC channel
per address, and retries a call on another SCM when:

* the server answered ``SCM_NOT_LEADER``: go to the hinted leader address if there is one
  (adding it to the list if it is new), otherwise to the next address;
* the transport failed (``UNAVAILABLE``, ``DEADLINE_EXCEEDED`` while connecting): next address.

With mutual TLS (``security``: the CLI's/operator's client certificate, or a component's own) the
channels come from :func:`scm_server.security.tls.make_channel` and are re-created when the
certificate files change (a renewal). Attempts are bounded by ``hdds.scmclient.failover.max.retry`` and spaced by
``hdds.scmclient.failover.retry.interval`` once every address has been tried in a row (a
leader hint is followed at once). Any other server error is re-raised as the
``SCMException`` the server raised; exhausting the budget raises ``SCMUnavailableError`` or
the last ``NotLeaderException``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc
import grpc.aio

from scm_server.client.arguments import validate_arguments
from scm_server.client.config import SCMClientConfig
from scm_server.client.errors import SCMUnavailableError
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.grpc_errors import from_grpc_error
from scm_server.proto import hdds_pb2, scm_client_pb2, scm_client_pb2_grpc
from scm_server.security.tls import ChannelCache, ChannelSecurity

LOG = logging.getLogger(__name__)

T = TypeVar("T")

CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.enable_retries", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]

_TRANSPORT_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


@dataclasses.dataclass(frozen=True)
class SafeModeStatus:
    in_safe_mode: bool
    pre_check_complete: bool


def parse_addresses(value: str | Sequence[str]) -> list[str]:
    """``host:port[,host:port]`` (or a list of those) into a clean list."""
    items = [value] if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in items:
        for part in item.split(","):
            part = part.strip()
            if not part:
                continue
            host, sep, port = part.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"bad SCM address {part!r}: expected host:port, e.g. 127.0.0.1:9860")
            out.append(part)
    if not out:
        raise ValueError("no SCM address given: pass --scm host:port or set ozone.scm.names")
    return out


@validate_arguments  # bad arguments are named before anything is sent (client/arguments.py)
class SCMClient:
    """Async client for StorageContainerLocationProtocol + ScmBlockLocationProtocol."""

    def __init__(
        self,
        addresses: Sequence[str] | str,
        config: SCMClientConfig | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_failover: Callable[[str, str, int], None] | None = None,
        security: ChannelSecurity | None = None,
    ) -> None:
        self.addresses = parse_addresses(addresses)
        self.config = config or SCMClientConfig()
        self._current = 0
        self._resume_after: int | None = None  # where round-robin resumes if a followed leader hint fails
        self._channels = ChannelCache(security, CHANNEL_OPTIONS)
        self._sleep = sleep  # injectable for unit tests of the failover policy
        self._on_failover = on_failover  # (address that failed, reason, attempt): e.g. a CLI notice
        self.failovers = 0

    @property
    def current_address(self) -> str:
        return self.addresses[self._current]

    async def close(self) -> None:
        await self._channels.close()

    async def __aenter__(self) -> SCMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _channel(self, address: str) -> grpc.aio.Channel:
        return self._channels.get(address)

    def _location(self, address: str) -> scm_client_pb2_grpc.StorageContainerLocationProtocolServiceStub:
        return scm_client_pb2_grpc.StorageContainerLocationProtocolServiceStub(self._channel(address))

    def _block(self, address: str) -> scm_client_pb2_grpc.ScmBlockLocationProtocolServiceStub:
        return scm_client_pb2_grpc.ScmBlockLocationProtocolServiceStub(self._channel(address))

    def _failover_to(self, hint: str | None) -> bool:
        """Move to the next SCM; True if we jumped to a leader hint (no back-off needed). When a hinted leader
        fails (a stale hint, or a name this client cannot resolve), continue after the SCM that gave the hint, so
        a follower and a bad hint are never retried in a loop while other SCMs go untried."""
        self.failovers += 1
        if hint and hint != self.current_address:
            if hint not in self.addresses:
                self.addresses.append(hint)
            self._resume_after = self._current
            self._current = self.addresses.index(hint)
            return True
        after = self._current if self._resume_after is None else self._resume_after
        self._resume_after = None
        self._current = (after + 1) % len(self.addresses)
        return False

    async def _call(self, invoke: Callable[[str], Awaitable[T]]) -> T:
        attempts = 0
        since_backoff = 0
        while True:
            address = self.current_address
            try:
                return await invoke(address)
            except grpc.aio.AioRpcError as err:
                exc = from_grpc_error(err.code(), err.details() or "", err.trailing_metadata())
                attempts += 1
                if exc is None:
                    if err.code() not in _TRANSPORT_CODES:
                        raise SCMException(
                            ResultCodes.INTERNAL_ERROR,
                            f"SCM at {address} failed the call: {err.code().name}: {err.details()}",
                        ) from err
                    if attempts > self.config.max_retries:
                        raise SCMUnavailableError(address, err.details() or err.code().name, attempts) from err
                    LOG.debug("SCM %s unreachable (%s); failing over", address, err.details())
                    if self._on_failover is not None:
                        self._on_failover(address, "unreachable", attempts)
                    jumped = self._failover_to(None)
                elif isinstance(exc, NotLeaderException):
                    if attempts > self.config.max_retries:
                        raise exc from err
                    LOG.debug("SCM %s is not the leader (hint %r); failing over", address, exc.leader_address)
                    if self._on_failover is not None:
                        self._on_failover(address, "not the leader", attempts)
                    jumped = self._failover_to(exc.leader_address or None)
                else:
                    raise exc from err
            since_backoff += 1
            if not jumped and since_backoff >= len(self.addresses):
                since_backoff = 0
                await self._sleep(self.config.retry_interval)

    def _timeout(self) -> float:
        return self.config.rpc_timeout

    # ---- ScmBlockLocationProtocol ----

    async def allocate_block(
        self,
        size: int,
        num_blocks: int = 1,
        replication_type: int = hdds_pb2.RATIS,
        replication_factor: int = hdds_pb2.THREE,
        owner: str = "ozone-scm-client",
        exclude_list: hdds_pb2.ExcludeListProto | None = None,
    ) -> list[hdds_pb2.AllocatedBlock]:
        req = scm_client_pb2.AllocateScmBlockRequestProto(
            size=size,
            numBlocks=num_blocks,
            type=replication_type,  # type: ignore[arg-type]
            factor=replication_factor,  # type: ignore[arg-type]
            owner=owner,
        )
        if exclude_list is not None:
            req.excludeList.CopyFrom(exclude_list)

        async def invoke(a: str) -> scm_client_pb2.AllocateScmBlockResponseProto:
            return await self._block(a).AllocateScmBlock(req, timeout=self._timeout())

        return list((await self._call(invoke)).blocks)

    async def delete_key_blocks(
        self, key_blocks: Sequence[scm_client_pb2.KeyBlocks]
    ) -> list[scm_client_pb2.DeleteKeyBlocksResultProto]:
        req = scm_client_pb2.DeleteScmKeyBlocksRequestProto(keyBlocks=list(key_blocks))

        async def invoke(a: str) -> scm_client_pb2.DeleteScmKeyBlocksResponseProto:
            return await self._block(a).DeleteScmKeyBlocks(req, timeout=self._timeout())

        return list((await self._call(invoke)).results)

    async def get_scm_info(self) -> scm_client_pb2.GetScmInfoResponseProto:
        async def invoke(a: str) -> scm_client_pb2.GetScmInfoResponseProto:
            return await self._location(a).GetScmInfo(
                scm_client_pb2.GetScmInfoRequestProto(), timeout=self._timeout()
            )

        return await self._call(invoke)

    # ---- StorageContainerLocationProtocol ----

    async def _loc(self, method: str, request: Any) -> Any:
        async def invoke(a: str) -> Any:
            return await getattr(self._location(a), method)(request, timeout=self._timeout())

        return await self._call(invoke)

    async def allocate_container(
        self,
        replication_type: int = hdds_pb2.RATIS,
        replication_factor: int = hdds_pb2.THREE,
        owner: str = "ozone-scm-client",
    ) -> hdds_pb2.ContainerWithPipeline:
        req = scm_client_pb2.ContainerRequestProto(
            replicationType=replication_type,  # type: ignore[arg-type]
            replicationFactor=replication_factor,  # type: ignore[arg-type]
            owner=owner,
        )
        resp: scm_client_pb2.ContainerResponseProto = await self._loc("AllocateContainer", req)
        return resp.containerWithPipeline

    async def get_container(self, container_id: int) -> hdds_pb2.ContainerInfoProto:
        req = scm_client_pb2.GetContainerRequestProto(containerID=container_id)
        resp: scm_client_pb2.GetContainerResponseProto = await self._loc("GetContainer", req)
        return resp.containerInfo

    async def get_container_with_pipeline(
        self, container_id: int
    ) -> tuple[hdds_pb2.ContainerWithPipeline, list[hdds_pb2.ContainerReplicaInfo]]:
        req = scm_client_pb2.GetContainerRequestProto(containerID=container_id)
        resp: scm_client_pb2.GetContainerWithPipelineResponseProto = await self._loc(
            "GetContainerWithPipeline", req
        )
        return resp.containerWithPipeline, list(resp.replicas)

    async def list_containers(
        self,
        start_id: int = 0,
        count: int = 100,
        state: int | None = None,
        replication_type: int | None = None,
        replication_factor: int | None = None,
    ) -> tuple[list[hdds_pb2.ContainerInfoProto], int]:
        req = scm_client_pb2.SCMListContainerRequestProto(startContainerID=start_id, count=count)
        if state is not None:
            req.state = state  # type: ignore[assignment]
        if replication_type is not None:
            req.type = replication_type  # type: ignore[assignment]
        if replication_factor is not None:
            req.factor = replication_factor  # type: ignore[assignment]
        resp: scm_client_pb2.SCMListContainerResponseProto = await self._loc("ListContainer", req)
        return list(resp.containers), int(resp.containerCount)

    async def close_container(self, container_id: int) -> None:
        await self._loc("CloseContainer", scm_client_pb2.SCMCloseContainerRequestProto(containerID=container_id))

    async def list_pipelines(self) -> list[hdds_pb2.Pipeline]:
        resp: scm_client_pb2.ListPipelineResponseProto = await self._loc(
            "ListPipelines", scm_client_pb2.ListPipelineRequestProto()
        )
        return list(resp.pipelines)

    async def create_pipeline(
        self, replication_type: int = hdds_pb2.RATIS, replication_factor: int = hdds_pb2.THREE
    ) -> hdds_pb2.Pipeline:
        req = scm_client_pb2.PipelineRequestProto(
            replicationType=replication_type,  # type: ignore[arg-type]
            replicationFactor=replication_factor,  # type: ignore[arg-type]
        )
        resp: scm_client_pb2.PipelineResponseProto = await self._loc("AllocatePipeline", req)
        return resp.pipeline

    def _pid(self, pipeline_id: str) -> scm_client_pb2.PipelineIDRequestProto:
        return scm_client_pb2.PipelineIDRequestProto(pipelineID=hdds_pb2.PipelineID(id=pipeline_id))

    async def close_pipeline(self, pipeline_id: str) -> None:
        await self._loc("ClosePipeline", self._pid(pipeline_id))

    async def activate_pipeline(self, pipeline_id: str) -> None:
        await self._loc("ActivatePipeline", self._pid(pipeline_id))

    async def deactivate_pipeline(self, pipeline_id: str) -> None:
        await self._loc("DeactivatePipeline", self._pid(pipeline_id))

    async def in_safe_mode(self) -> SafeModeStatus:
        resp: scm_client_pb2.InSafeModeResponseProto = await self._loc("InSafeMode", scm_client_pb2.Empty())
        return SafeModeStatus(resp.inSafeMode, resp.preCheckComplete)

    async def force_exit_safe_mode(self) -> bool:
        resp: scm_client_pb2.ForceExitSafeModeResponseProto = await self._loc(
            "ForceExitSafeMode", scm_client_pb2.Empty()
        )
        return bool(resp.exitedSafeMode)

    async def safe_mode_rule_statuses(self) -> list[hdds_pb2.SafeModeRuleStatus]:
        resp: scm_client_pb2.GetSafeModeRuleStatusesResponseProto = await self._loc(
            "GetSafeModeRuleStatuses", scm_client_pb2.Empty()
        )
        return list(resp.safeModeRuleStatusesProto)

    async def start_replication_manager(self) -> None:
        await self._loc("StartReplicationManager", scm_client_pb2.Empty())

    async def stop_replication_manager(self) -> None:
        await self._loc("StopReplicationManager", scm_client_pb2.Empty())

    async def replication_manager_status(self) -> bool:
        resp: scm_client_pb2.ReplicationManagerStatusResponseProto = await self._loc(
            "GetReplicationManagerStatus", scm_client_pb2.Empty()
        )
        return bool(resp.isRunning)

    async def replication_manager_report(self) -> hdds_pb2.ReplicationManagerReportProto:
        resp: scm_client_pb2.ReplicationManagerReportResponseProto = await self._loc(
            "GetReplicationManagerReport", scm_client_pb2.Empty()
        )
        return resp.report

    async def query_nodes(self, state: int | None = None, op_state: int | None = None) -> list[hdds_pb2.Node]:
        req = scm_client_pb2.NodeQueryRequestProto()
        if state is not None:
            req.state = state  # type: ignore[assignment]
        if op_state is not None:
            req.opState = op_state  # type: ignore[assignment]
        resp: scm_client_pb2.NodeQueryResponseProto = await self._loc("QueryNode", req)
        return list(resp.datanodes)

    async def decommission_nodes(
        self, hosts: Sequence[str], force: bool = False
    ) -> list[scm_client_pb2.DatanodeAdminError]:
        req = scm_client_pb2.DatanodeAdminRequestProto(hosts=list(hosts), force=force)
        resp: scm_client_pb2.DatanodeAdminResponseProto = await self._loc("DecommissionNodes", req)
        return list(resp.errors)

    async def start_maintenance_nodes(
        self, hosts: Sequence[str], end_hours: int = 0, force: bool = False
    ) -> list[scm_client_pb2.DatanodeAdminError]:
        req = scm_client_pb2.DatanodeAdminRequestProto(hosts=list(hosts), endInHours=end_hours, force=force)
        resp: scm_client_pb2.DatanodeAdminResponseProto = await self._loc("StartMaintenanceNodes", req)
        return list(resp.errors)

    async def recommission_nodes(self, hosts: Sequence[str]) -> list[scm_client_pb2.DatanodeAdminError]:
        req = scm_client_pb2.DatanodeAdminRequestProto(hosts=list(hosts))
        resp: scm_client_pb2.DatanodeAdminResponseProto = await self._loc("RecommissionNodes", req)
        return list(resp.errors)
