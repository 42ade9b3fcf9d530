"""Typed asyncio client for the SCM's client-facing gRPC protocols, with HA failover.

Everything outside the SCM process (CLI, datanode simulator's admin lookups, benchmarks,
later the Kubernetes operator) talks to SCM through this class. It holds a list of SCM
addresses (admin/client port; that port also serves the block protocol) and one gRPC channel
per address. What to try next after a failure is decided by the pure
:class:`~scm_server.client.failover.FailoverPolicy`; this class does the I/O:

* **Deadlines.** ``hdds.scmclient.rpc.timeout`` (15 min, Ozone's) is the overall deadline of one
  call, retries included. Each attempt first waits for a connection for at most
  ``connect_timeout`` (2 x the liveness time below); while the call is in flight, HTTP/2 PINGs
  check that the SCM is alive and the connection is dropped when one goes unanswered for the
  liveness time (one Raft election timeout, ``ozone.scm.ha.ratis.leader.election.timeout``; see
  :mod:`scm_server.grpc_options`). A frozen leader (SIGSTOP, a long pause) therefore costs about a
  second, not the deadline, while a slow but alive SCM is waited for.
* **Failover.** ``SCM_NOT_LEADER``: go to the hinted leader (unless it is the SCM that just did not
  answer), else the next SCM; a transport failure: the next SCM. Bounded by
  ``hdds.scmclient.failover.max.retry`` and a minimum window of two elections.
* **Exactly-once retries.** Every logical call carries this client's id and a call id (gRPC
  metadata, :mod:`scm_server.call_metadata`); retries keep them, so an SCM that already ran the call
  answers with its first outcome (see :mod:`scm_server.server.call_guard`).
* **Admin commands for every SCM.** ``ForceExitSafeMode``, ``StartReplicationManager`` and
  ``StopReplicationManager`` are sent to every SCM, as Ozone does (its ``ADMIN_COMMAND_TYPE``).
* **Per-SCM views.** With ``local_read=True`` (one address: the CLI's ``--scm ADDR --local``) read
  calls are answered by that SCM from its own state, never failed over, and labelled with who
  answered and its role (:attr:`last_answer`).

With mutual TLS (``security``: the CLI's/operator's client certificate, or a component's own) the
channels come from :func:`scm_server.security.tls.make_channel` and are re-created when the
certificate files change (a renewal). Arguments are checked before anything is sent
(:mod:`scm_server.client.arguments`).

Any other server error is re-raised as the ``SCMException`` the server raised; exhausting the
budget raises ``SCMUnavailableError`` or the last ``NotLeaderException``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc
import grpc.aio

from scm_server import call_metadata, grpc_options
from scm_server.client.arguments import validate_arguments
from scm_server.client.config import SCMClientConfig
from scm_server.client.errors import SCMUnavailableError
from scm_server.client.failover import FailoverPolicy
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.grpc_errors import from_grpc_error
from scm_server.proto import hdds_pb2, scm_client_pb2, scm_client_pb2_grpc
from scm_server.security.tls import ChannelCache, ChannelSecurity

LOG = logging.getLogger(__name__)

T = TypeVar("T")

# Default channel options (liveness from the default 1 s election timeout); SCMClient derives its
# own from its config. Kept for callers that open a channel without a client config.
CHANNEL_OPTIONS = grpc_options.channel_options()

_TRANSPORT_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
# Ozone's StorageContainerLocationProtocol.ADMIN_COMMAND_TYPE: take effect on every SCM.
ADMIN_COMMANDS = frozenset({"ForceExitSafeMode", "StartReplicationManager", "StopReplicationManager"})


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


class _NotConnected(Exception):
    """No connection to the SCM within the connect deadline (it may be frozen or cut off)."""


@validate_arguments  # bad arguments are named before anything is sent (client/arguments.py)
class SCMClient:
    """Async client for StorageContainerLocationProtocol + ScmBlockLocationProtocol."""

    def __init__(
        self,
        addresses: Sequence[str] | str,
        config: SCMClientConfig | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        on_failover: Callable[[str, str, int], None] | None = None,
        security: ChannelSecurity | None = None,
        local_read: bool = False,
        channel_options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        """``channel_options`` are extra gRPC channel arguments. Under TLS the server must carry the SCM role name
        whatever address is dialled (a name override given here is replaced: ``tls.scm_channel_options``)."""
        self.config = config or SCMClientConfig()
        self.local_read = local_read
        parsed = parse_addresses(addresses)
        if local_read and len(parsed) != 1:
            raise ValueError(
                f"a per-SCM view needs exactly one SCM address, got {len(parsed)}: {','.join(parsed)}"
            )
        self._policy = FailoverPolicy(
            parsed,
            self.config.max_retries,
            self.config.retry_interval,
            self.config.min_failover_window,
            self.config.suspect_for,
            stale_hint_for=self.config.election_timeout,
        )
        self._channels = ChannelCache(
            security, [*grpc_options.channel_options(self.config.liveness), *channel_options]
        )
        self._sleep = sleep  # injectable for unit tests of the failover policy
        self._clock = clock
        self._on_failover = on_failover  # (address that failed, reason, attempt): e.g. a CLI notice
        self.client_id = uuid.uuid4().hex
        self._call_ids = itertools.count(1)
        self.last_answer: call_metadata.AnswerLabel | None = None  # who answered the last local read
        self.last_broadcast: list[tuple[str, object]] = []  # (address, result or error) of an admin command

    @property
    def addresses(self) -> list[str]:
        return self._policy.addresses

    @property
    def current_address(self) -> str:
        return self._policy.address

    @property
    def failovers(self) -> int:
        return self._policy.failovers

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

    async def _wait_connected(self, address: str, timeout: float) -> None:
        """Return once the channel is READY (or failed fast: the call then fails at once with
        UNAVAILABLE); raise _NotConnected if it is still connecting after ``timeout``."""
        channel = self._channel(address)
        state = channel.get_state(try_to_connect=True)
        give_up = self._clock() + timeout
        while state not in (grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.TRANSIENT_FAILURE):
            left = give_up - self._clock()
            if left <= 0 or state is grpc.ChannelConnectivity.SHUTDOWN:
                raise _NotConnected(f"no connection within {timeout:.1f}s")
            try:
                await asyncio.wait_for(channel.wait_for_state_change(state), left)
            except TimeoutError:
                raise _NotConnected(f"no connection within {timeout:.1f}s") from None
            state = channel.get_state(try_to_connect=True)

    def _metadata(self) -> call_metadata.Metadata:
        return call_metadata.request_metadata(self.client_id, next(self._call_ids), local_read=self.local_read)

    async def _call(self, invoke: Callable[[str, float, call_metadata.Metadata], Awaitable[T]]) -> T:
        """Run ``invoke(address, timeout, metadata)`` with failover (see the module docstring)."""
        config = self.config
        policy = self._policy
        metadata = self._metadata()  # one call id for every retry of this call
        now = self._clock()
        deadline = now + config.rpc_timeout
        address = policy.begin_call(now)
        error: Exception
        while True:
            remaining = deadline - now
            try:
                await self._wait_connected(address, min(remaining, config.connect_timeout))
                result = await invoke(address, max(remaining, 0.001), metadata)
            except _NotConnected as exc:
                reason, error = f"unreachable ({exc})", SCMUnavailableError(address, str(exc), policy.attempts + 1)
                pause = policy.on_unreachable(address, self._clock())
            except grpc.aio.AioRpcError as err:
                exc2 = from_grpc_error(err.code(), err.details() or "", err.trailing_metadata())
                if exc2 is None:
                    if err.code() not in _TRANSPORT_CODES:
                        raise SCMException(
                            ResultCodes.INTERNAL_ERROR,
                            f"SCM at {address} failed the call: {err.code().name}: {err.details()}",
                        ) from err
                    details = err.details() or err.code().name
                    error = SCMUnavailableError(address, details, policy.attempts + 1)
                    if self._clock() >= deadline:
                        raise SCMUnavailableError(
                            address,
                            f"no answer within hdds.scmclient.rpc.timeout ({config.rpc_timeout:g}s): {details}",
                            policy.attempts + 1,
                        ) from err
                    LOG.debug("SCM %s unreachable (%s); failing over", address, details)
                    reason = "unreachable"
                    pause = policy.on_unreachable(address, self._clock())
                elif isinstance(exc2, NotLeaderException):
                    if self.local_read:
                        raise exc2 from err  # pinned to this SCM: no failover
                    LOG.debug("SCM %s is not the leader (hint %r); failing over", address, exc2.leader_address)
                    reason, error = "not the leader", exc2
                    pause = policy.on_not_leader(address, exc2.leader_address or None, self._clock())
                else:
                    raise exc2 from err
            else:
                policy.on_success(address)
                return result
            now = self._clock()
            if policy.exhausted(now) or now >= deadline:
                raise error
            if self._on_failover is not None:
                self._on_failover(address, reason, policy.attempts)
            if pause > 0:
                await self._sleep(min(pause, max(0.0, deadline - now)))
                now = self._clock()
            address = policy.address

    async def _loc(self, method: str, request: Any) -> Any:
        if method in ADMIN_COMMANDS:
            return await self._broadcast(method, request)

        async def invoke(a: str, timeout: float, metadata: call_metadata.Metadata) -> Any:
            call = getattr(self._location(a), method)(request, timeout=timeout, metadata=metadata)
            response = await call
            if self.local_read:
                self.last_answer = call_metadata.AnswerLabel.from_metadata(
                    a, call_metadata.as_dict(await call.trailing_metadata())
                )
            return response

        return await self._call(invoke)

    async def _broadcast(self, method: str, request: Any) -> Any:
        """An admin command that takes effect on every SCM (Ozone's ADMIN_COMMAND_TYPE): sent to all
        of them concurrently; per-SCM outcomes land in :attr:`last_broadcast`. Returns the first
        answer; raises the first error if no SCM answered."""
        metadata = self._metadata()
        timeout = self.config.rpc_timeout

        async def one(address: str) -> object:
            try:
                await self._wait_connected(address, min(timeout, self.config.connect_timeout))
                return await getattr(self._location(address), method)(request, timeout=timeout, metadata=metadata)
            except _NotConnected as exc:
                return SCMUnavailableError(address, str(exc))
            except grpc.aio.AioRpcError as err:
                exc2 = from_grpc_error(err.code(), err.details() or "", err.trailing_metadata())
                return exc2 or SCMUnavailableError(address, err.details() or err.code().name)

        addresses = list(dict.fromkeys(self.addresses))
        outcomes = await asyncio.gather(*(one(a) for a in addresses))
        self.last_broadcast = list(zip(addresses, outcomes, strict=True))
        answers = [o for o in outcomes if not isinstance(o, BaseException)]
        if not answers:
            first = outcomes[0]
            assert isinstance(first, BaseException)
            raise first
        return answers[0]

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

        async def invoke(a: str, timeout: float, md: call_metadata.Metadata) -> scm_client_pb2.AllocateScmBlockResponseProto:
            return await self._block(a).AllocateScmBlock(req, timeout=timeout, metadata=md)

        return list((await self._call(invoke)).blocks)

    async def delete_key_blocks(
        self, key_blocks: Sequence[scm_client_pb2.KeyBlocks]
    ) -> list[scm_client_pb2.DeleteKeyBlocksResultProto]:
        req = scm_client_pb2.DeleteScmKeyBlocksRequestProto(keyBlocks=list(key_blocks))

        async def invoke(a: str, timeout: float, md: call_metadata.Metadata) -> scm_client_pb2.DeleteScmKeyBlocksResponseProto:
            return await self._block(a).DeleteScmKeyBlocks(req, timeout=timeout, metadata=md)

        return list((await self._call(invoke)).results)

    async def get_scm_info(self) -> scm_client_pb2.GetScmInfoResponseProto:
        resp: scm_client_pb2.GetScmInfoResponseProto = await self._loc(
            "GetScmInfo", scm_client_pb2.GetScmInfoRequestProto()
        )
        return resp

    # ---- StorageContainerLocationProtocol ----

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
        """Force every SCM that answers out of safemode (Ozone sends this admin command to all SCMs);
        True if each of them did. :attr:`last_broadcast` says which SCMs answered."""
        await self._loc("ForceExitSafeMode", scm_client_pb2.Empty())
        answers = [o for _, o in self.last_broadcast if isinstance(o, scm_client_pb2.ForceExitSafeModeResponseProto)]
        return bool(answers) and all(a.exitedSafeMode for a in answers)

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
