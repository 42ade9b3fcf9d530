"""The Raft admin/client gRPC service (proto/raft.proto, service ``RaftAdmin``) on the Raft port.

Where it sits: :class:`~scm_server.raft.server.RaftServer` registers :class:`RaftAdminService` on its
gRPC server, over itself as the :class:`AdminTarget`. The service only translates: a request becomes
one call on the target, the answer or the error becomes a reply (a not-leader error carries the
leader hint; every other error a code and a message, :func:`error_proto`). It keeps no state and
decides nothing; the demo KV service (:mod:`~scm_server.raft.kv`) shares :func:`error_proto`.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from scm_server.exceptions import ConfigError
from scm_server.proto import raft_pb2, raft_pb2_grpc
from scm_server.raft.errors import (
    LogFailedError,
    NotLeaderError,
    ProposalQueueFullError,
    RaftStoppedError,
    RaftTimeoutError,
)
from scm_server.raft.faults import FaultRule, NetworkFaults
from scm_server.raft.statemachine import ApplyRejected
from scm_server.raft.transport import conf_to_proto
from scm_server.raft.view import RaftStatus

__all__ = ["AdminTarget", "RaftAdminService", "error_proto", "not_leader_proto", "status_to_proto"]


class AdminTarget(Protocol):
    """What the admin service calls: the driver's client and membership API."""

    @property
    def leader_id(self) -> str: ...

    @property
    def network_faults(self) -> NetworkFaults | None: ...

    async def submit(
        self, data: bytes, *, client_id: bytes = b"", call_id: int = 0, timeout: float | None = None
    ) -> bytes: ...

    async def read_index(self, timeout: float | None = None) -> int: ...

    def status(self) -> RaftStatus: ...

    async def transfer_leadership(self, target_id: str | None, timeout: float = 10.0) -> str: ...

    async def add_member(self, node_id: str, address: str, timeout: float = 60.0) -> None: ...

    async def remove_member(self, node_id: str, timeout: float = 30.0) -> None: ...


def not_leader_proto(exc: NotLeaderError) -> raft_pb2.NotLeaderProto:
    return raft_pb2.NotLeaderProto(leader_id=exc.leader_id, leader_address=exc.leader_address)


def error_proto(exc: BaseException) -> raft_pb2.ErrorProto:
    """An error as the wire's code and message (the client maps the code back to its error type)."""
    if isinstance(exc, ApplyRejected):
        return raft_pb2.ErrorProto(code=f"REJECTED:{exc.code}", message=exc.message)
    if isinstance(exc, ProposalQueueFullError):
        return raft_pb2.ErrorProto(code="QUEUE_FULL", message=str(exc))
    if isinstance(exc, RaftTimeoutError):
        return raft_pb2.ErrorProto(code="TIMEOUT", message=str(exc))
    if isinstance(exc, RaftStoppedError | LogFailedError):
        return raft_pb2.ErrorProto(code="STOPPED", message=str(exc))
    if isinstance(exc, ConfigError):
        return raft_pb2.ErrorProto(code="INVALID", message=str(exc))
    return raft_pb2.ErrorProto(code="INTERNAL", message=f"{type(exc).__name__}: {exc}")


def status_to_proto(st: RaftStatus) -> raft_pb2.StatusReply:
    return raft_pb2.StatusReply(
        node_id=st.node_id,
        role=st.role,
        term=st.term,
        leader_id=st.leader_id,
        leader_address=st.leader_address,
        commit_index=st.commit_index,
        applied_index=st.applied_index,
        last_index=st.last_index,
        conf=conf_to_proto(st.conf),
        peers=[raft_pb2.PeerProgressProto(node_id=n, match_index=m) for n, m in sorted(st.peers.items())],
        snapshot_index=st.snapshot_index,
        first_index=st.first_index,
    )


class RaftAdminService(raft_pb2_grpc.RaftAdminServicer):
    def __init__(self, target: AdminTarget) -> None:
        self.s = target

    async def Submit(self, request: raft_pb2.SubmitRequest, context: Any) -> raft_pb2.SubmitReply:
        try:
            result = await self.s.submit(
                request.data, client_id=request.client_id, call_id=request.call_id, timeout=request.timeout or None
            )
        except NotLeaderError as exc:
            return raft_pb2.SubmitReply(ok=False, not_leader=not_leader_proto(exc))
        except Exception as exc:
            return raft_pb2.SubmitReply(ok=False, error=error_proto(exc))
        return raft_pb2.SubmitReply(ok=True, result=result)

    async def ReadIndex(self, request: raft_pb2.ReadIndexRequest, context: Any) -> raft_pb2.ReadIndexReply:
        try:
            index = await self.s.read_index(request.timeout or None)
        except NotLeaderError as exc:
            return raft_pb2.ReadIndexReply(ok=False, not_leader=not_leader_proto(exc))
        except Exception as exc:
            return raft_pb2.ReadIndexReply(ok=False, error=error_proto(exc))
        return raft_pb2.ReadIndexReply(ok=True, index=index)

    async def Status(self, request: raft_pb2.StatusRequest, context: Any) -> raft_pb2.StatusReply:
        return status_to_proto(self.s.status())

    async def _admin(self, coro: Awaitable[str | None]) -> raft_pb2.AdminReply:
        try:
            result = await coro
        except NotLeaderError as exc:
            return raft_pb2.AdminReply(ok=False, not_leader=not_leader_proto(exc))
        except Exception as exc:
            return raft_pb2.AdminReply(ok=False, error=error_proto(exc))
        return raft_pb2.AdminReply(ok=True, leader_id=result if isinstance(result, str) else self.s.leader_id)

    async def TransferLeadership(self, request: raft_pb2.TransferLeadershipRequest, context: Any) -> raft_pb2.AdminReply:
        return await self._admin(self.s.transfer_leadership(request.target_id or None, request.timeout or 10.0))

    async def AddMember(self, request: raft_pb2.MemberRequest, context: Any) -> raft_pb2.AdminReply:
        return await self._admin(self.s.add_member(request.node_id, request.address, request.timeout or 60.0))

    async def RemoveMember(self, request: raft_pb2.MemberRequest, context: Any) -> raft_pb2.AdminReply:
        return await self._admin(self.s.remove_member(request.node_id, request.timeout or 30.0))

    async def SetFaults(self, request: raft_pb2.SetFaultsRequest, context: Any) -> raft_pb2.AdminReply:
        nf = self.s.network_faults
        if nf is None:
            return raft_pb2.AdminReply(
                ok=False,
                error=raft_pb2.ErrorProto(
                    code="DISABLED", message="fault injection is disabled; start the server with enable_fault_injection"
                ),
            )
        rules = [
            FaultRule(
                peer=r.peer or "*",
                drop=r.drop,
                delay=r.delay,
                jitter=r.jitter,
                cut_outbound=r.cut_outbound,
                cut_inbound=r.cut_inbound,
            )
            for r in request.rules
        ]
        nf.set_rules(rules, request.seed or None)
        return raft_pb2.AdminReply(ok=True, leader_id=self.s.leader_id)

    async def ClearFaults(self, request: raft_pb2.StatusRequest, context: Any) -> raft_pb2.AdminReply:
        nf = self.s.network_faults
        if nf is None:
            return raft_pb2.AdminReply(
                ok=False, error=raft_pb2.ErrorProto(code="DISABLED", message="fault injection is disabled")
            )
        nf.clear()
        return raft_pb2.AdminReply(ok=True, leader_id=self.s.leader_id)
