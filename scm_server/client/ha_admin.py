"""Client for SCM HA administration (``ozone admin scm roles|transfer|decommission``).

Talks to the SCMs' ``InterSCMProtocolService`` (``ozone.scm.grpc.port``, proto/scm_ha.proto), the
same calls an operator (or the Kubernetes operator) would use; under mutual TLS with the caller's
client certificate (``security``). Given the list of SCM gRPC
addresses it finds the leader by itself: a call answered with SCM_NOT_LEADER is retried on the
hinted leader, an unreachable SCM is skipped, and the whole list is retried a bounded number of
times with a short pause (an election takes about a second with our defaults).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc
import grpc.aio

from scm_server.client.errors import SCMUnavailableError
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.grpc_errors import from_grpc_error
from scm_server.proto import scm_ha_pb2, scm_ha_pb2_grpc
from scm_server.security.tls import ChannelCache, ChannelSecurity

T = TypeVar("T")

CHANNEL_OPTIONS = [("grpc.enable_retries", 0), ("grpc.max_receive_message_length", 64 << 20)]


@dataclasses.dataclass(frozen=True)
class PeerRole:
    host: str
    ratis_port: int
    role: str
    peer_id: str
    node_id: str
    match_index: int | None
    lag: int | None
    client_address: str
    grpc_address: str

    @property
    def line(self) -> str:
        """Ozone's ``host:port:ROLE:peerId`` form."""
        return f"{self.host}:{self.ratis_port}:{self.role}:{self.peer_id}"


@dataclasses.dataclass(frozen=True)
class Roles:
    answered_by: str
    leader_id: str
    term: int
    commit_index: int
    applied_index: int
    peers: list[PeerRole]

    def as_dict(self) -> dict[str, Any]:
        return {
            "answeredBy": self.answered_by,
            "leaderId": self.leader_id,
            "term": self.term,
            "commitIndex": self.commit_index,
            "appliedIndex": self.applied_index,
            "peers": [dataclasses.asdict(p) | {"line": p.line} for p in self.peers],
        }


def roles_from_proto(p: scm_ha_pb2.ScmRatisRolesResponseProto) -> Roles:
    return Roles(
        answered_by=p.answeredBy,
        leader_id=p.leaderId,
        term=p.term,
        commit_index=p.commitIndex,
        applied_index=p.appliedIndex,
        peers=[
            PeerRole(
                host=r.host,
                ratis_port=r.ratisPort,
                role=r.role,
                peer_id=r.peerId,
                node_id=r.nodeId,
                match_index=r.matchIndex if r.HasField("matchIndex") else None,
                lag=r.lag if r.HasField("lag") else None,
                client_address=r.clientAddress,
                grpc_address=r.grpcAddress,
            )
            for r in p.peers
        ],
    )


class HAAdminClient:
    def __init__(
        self,
        addresses: Sequence[str],
        *,
        rounds: int = 10,
        pause: float = 0.3,
        timeout: float = 30.0,
        security: ChannelSecurity | None = None,
        channel_options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        """``channel_options`` are extra gRPC channel arguments, e.g. ``grpc.ssl_target_name_override`` when
        calling one SCM by its IP address under TLS (its certificate names its DNS name)."""
        if not addresses:
            raise ValueError(
                "no SCM gRPC address: configure ozone.scm.nodes.<serviceId> / ozone.scm.grpc.port or pass --grpc"
            )
        self.addresses = list(addresses)
        self.rounds = rounds
        self.pause = pause
        self.timeout = timeout
        self._channels = ChannelCache(security, [*CHANNEL_OPTIONS, *channel_options])

    async def close(self) -> None:
        await self._channels.close()

    async def __aenter__(self) -> HAAdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _stub(self, address: str) -> scm_ha_pb2_grpc.InterSCMProtocolServiceStub:
        return scm_ha_pb2_grpc.InterSCMProtocolServiceStub(self._channels.get(address))

    async def _call(self, invoke: Callable[[scm_ha_pb2_grpc.InterSCMProtocolServiceStub], Awaitable[T]]) -> T:
        """Call on the leader: follow NotLeader hints, skip unreachable SCMs, bounded rounds."""
        last: Exception | None = None
        for _ in range(self.rounds):
            queue = list(self.addresses)
            tried: set[str] = set()
            while queue:
                address = queue.pop(0)
                if address in tried:
                    continue
                tried.add(address)
                try:
                    return await invoke(self._stub(address))
                except grpc.aio.AioRpcError as err:
                    exc = from_grpc_error(err.code(), err.details() or "", err.trailing_metadata())
                    if isinstance(exc, NotLeaderException):
                        last = exc
                        if exc.leader_address and exc.leader_address not in tried:
                            if exc.leader_address not in self.addresses:
                                self.addresses.append(exc.leader_address)
                            queue.insert(0, exc.leader_address)
                        continue
                    if exc is not None:
                        raise exc from err
                    last = SCMUnavailableError(address, f"{err.code().name}: {err.details()}")
            await asyncio.sleep(self.pause)
        if last is None:
            last = SCMUnavailableError(",".join(self.addresses), "no answer")
        raise last

    async def _any(self, invoke: Callable[[scm_ha_pb2_grpc.InterSCMProtocolServiceStub], Awaitable[T]]) -> T:
        """Call on any reachable SCM."""
        last: Exception | None = None
        for address in self.addresses:
            try:
                return await invoke(self._stub(address))
            except grpc.aio.AioRpcError as err:
                exc = from_grpc_error(err.code(), err.details() or "", err.trailing_metadata())
                if exc is not None:
                    raise exc from err
                last = SCMUnavailableError(address, f"{err.code().name}: {err.details()}")
        assert last is not None
        raise last

    async def scm_info(self) -> scm_ha_pb2.ScmInfoResponseProto:
        return await self._any(lambda s: s.GetScmInfo(scm_ha_pb2.ScmInfoRequestProto(), timeout=self.timeout))

    async def roles(self) -> Roles:
        """Roles as the leader sees them (with lag); falls back to any SCM's view."""
        first = await self._any(
            lambda s: s.GetScmRatisRoles(scm_ha_pb2.ScmRatisRolesRequestProto(), timeout=self.timeout)
        )
        if first.leaderId and first.leaderId != first.answeredBy:
            leader = next((p for p in first.peers if p.peerId == first.leaderId and p.grpcAddress), None)
            if leader is not None:
                with contextlib.suppress(grpc.aio.AioRpcError):
                    first = await self._stub(leader.grpcAddress).GetScmRatisRoles(
                        scm_ha_pb2.ScmRatisRolesRequestProto(), timeout=self.timeout
                    )
        return roles_from_proto(first)

    async def transfer(self, new_leader_id: str | None) -> str:
        req = scm_ha_pb2.TransferLeadershipRequestProto(newLeaderId=new_leader_id or "")
        resp = await self._call(lambda s: s.TransferLeadership(req, timeout=self.timeout))
        return str(resp.newLeaderId)

    async def decommission(self, scm_id: str) -> str:
        info = await self.scm_info()
        req = scm_ha_pb2.RemoveScmRequestProto(clusterId=info.clusterId, scmId=scm_id)
        resp = await self._call(lambda s: s.RemoveSCM(req, timeout=self.timeout))
        if not resp.success:
            raise SCMException(ResultCodes.INTERNAL_ERROR, f"decommission of {scm_id} failed: {resp.message}")
        return str(resp.message)

    async def table_digests(self, address: str, min_applied_index: int = 0, wait: float = 10.0) -> scm_ha_pb2.TableDigestsResponseProto:
        req = scm_ha_pb2.TableDigestsRequestProto(minAppliedIndex=min_applied_index, waitSeconds=wait)
        return await self._stub(address).GetTableDigests(req, timeout=wait + self.timeout)


def run_sync(coro_fn: Callable[[HAAdminClient], Awaitable[T]], addresses: Sequence[str], **kwargs: Any) -> T:
    """Run one admin call from synchronous code (the CLI)."""

    async def go() -> T:
        async with HAAdminClient(addresses, **kwargs) as client:
            return await coro_fn(client)

    return asyncio.run(go())
