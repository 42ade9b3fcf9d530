"""Async clients for the demo KV service and the Raft admin service (proto/raft.proto).

:class:`KvClient` fails over between members the way SCM clients do (``SCMClientConfig``: bounded
retries with an interval): a ``NotLeader`` reply with a hint goes straight to the hinted leader; an
UNAVAILABLE/DEADLINE_EXCEEDED transport error or a hint-less NotLeader moves to the next address;
after ``max_attempts`` the call raises :class:`KvUnavailableError`, whose outcome is UNKNOWN (the
write may or may not have been applied: a linearizability checker must treat it as indeterminate).
Every write carries ``(client_id, call_id)`` and retries reuse the call id, so the server's retry
cache applies it at most once.

By default operations travel on one multiplexed bidirectional stream per member
(``KvService.Stream``, batched writes, replies matched by request id), which costs a fraction of a
unary call per operation in grpc.aio; ``streaming=False`` uses the unary RPCs.

:class:`RaftAdminClient` wraps ``RaftAdmin`` (roles/status, leader transfer, membership, fault
injection) for tests, tools and benchmarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from scm_server.proto import raft_pb2, raft_pb2_grpc
from scm_server.raft.errors import RaftError
from scm_server.raft.transport import TlsConfig, make_channel

_RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}


class KvError(RaftError):
    """A KV call failed definitively (the operation did not take effect)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class KvUnavailableError(RaftError):
    """No member completed the call within the retry budget; its outcome is UNKNOWN."""


class _Retry(Exception):
    """A transport-level failure of one attempt: try the next member."""


_OPS = {"Put": 1, "Get": 2, "Cas": 3}


class _StreamConn:
    """One multiplexed ``KvService.Stream`` to a member: ops are queued, written in batches, and
    their replies matched by request id. Any stream failure fails every outstanding op with
    :class:`_Retry` (the caller retries with the same call id elsewhere)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._call: Any = raft_pb2_grpc.KvServiceStub(channel).Stream()
        self._queue: list[raft_pb2.KvOp] = []
        self._wake = asyncio.Event()
        self._pending: dict[int, asyncio.Future[raft_pb2.KvReply]] = {}
        self._ids = itertools.count(1)
        self.broken: BaseException | None = None
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._writer()), loop.create_task(self._reader())]

    async def request(self, method: str, req: raft_pb2.KvRequest, timeout: float) -> raft_pb2.KvReply:
        if self.broken is not None:
            raise _Retry(str(self.broken))
        loop = asyncio.get_running_loop()
        rid = next(self._ids)
        fut: asyncio.Future[raft_pb2.KvReply] = loop.create_future()
        self._pending[rid] = fut
        self._queue.append(raft_pb2.KvOp(request_id=rid, op=_OPS[method], request=req))
        self._wake.set()

        def expire() -> None:
            if not fut.done():
                fut.set_exception(_Retry(f"no reply within {timeout:.1f}s"))

        timer = loop.call_later(timeout, expire)
        try:
            return await fut
        finally:
            timer.cancel()
            self._pending.pop(rid, None)

    async def _writer(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._queue:
                    ops, self._queue = self._queue[:512], self._queue[512:]
                    await self._call.write(raft_pb2.KvOpBatch(ops=ops))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(exc)

    async def _reader(self) -> None:
        try:
            async for batch in self._call:
                for r in batch.results:
                    fut = self._pending.get(r.request_id)
                    if fut is not None and not fut.done():
                        fut.set_result(r.reply)
            self._fail(_Retry("the member closed the stream"))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if self.broken is None:
            self.broken = exc
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(_Retry(f"stream failed: {exc}"))

    async def close(self) -> None:
        self._fail(_Retry("closed"))
        self._call.cancel()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(BaseException):
                await t


class _Members:
    """Addresses, their channels, and where we believe the leader is."""

    def __init__(self, addresses: Sequence[str], tls: TlsConfig | None) -> None:
        if not addresses:
            raise ValueError("at least one member address is required")
        self.addresses = list(addresses)
        self.tls = tls
        self.current = 0
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._streams: dict[str, _StreamConn] = {}

    def stream(self, address: str) -> _StreamConn:
        conn = self._streams.get(address)
        if conn is None or conn.broken is not None:
            if conn is not None:
                asyncio.get_running_loop().create_task(conn.close())
            conn = _StreamConn(self.channel(address))
            self._streams[address] = conn
        return conn

    def channel(self, address: str) -> grpc.aio.Channel:
        ch = self._channels.get(address)
        if ch is None:
            ch = make_channel(address, self.tls)
            self._channels[address] = ch
        return ch

    @property
    def address(self) -> str:
        return self.addresses[self.current % len(self.addresses)]

    def rotate(self) -> None:
        self.current = (self.current + 1) % len(self.addresses)

    def point_to(self, address: str) -> None:
        if address not in self.addresses:
            self.addresses.append(address)
        self.current = self.addresses.index(address)

    async def close(self) -> None:
        for conn in self._streams.values():
            await conn.close()
        self._streams.clear()
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()


class KvClient:
    """Exactly-once KV/CAS client with leader failover (see module docstring)."""

    def __init__(
        self,
        addresses: Sequence[str],
        *,
        client_id: bytes | None = None,
        rpc_timeout: float = 5.0,
        max_attempts: int = 30,
        retry_interval: float = 0.1,
        tls: TlsConfig | None = None,
        streaming: bool = True,
    ) -> None:
        self.members = _Members(addresses, tls)
        self.streaming = streaming
        self.client_id = client_id or uuid.uuid4().bytes
        self.rpc_timeout = rpc_timeout
        self.max_attempts = max_attempts
        self.retry_interval = retry_interval
        self._call_ids = itertools.count(1)

    def next_call_id(self) -> int:
        return next(self._call_ids)

    async def close(self) -> None:
        await self.members.close()

    async def __aenter__(self) -> KvClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, method: str, request: raft_pb2.KvRequest) -> raft_pb2.KvReply:
        members = self.members
        last_error = "no attempt made"
        for attempt in range(self.max_attempts):
            address = members.address
            try:
                if self.streaming:
                    reply = await members.stream(address).request(method, request, self.rpc_timeout)
                else:
                    stub = raft_pb2_grpc.KvServiceStub(members.channel(address))
                    reply = await getattr(stub, method)(request, timeout=self.rpc_timeout)
            except _Retry as exc:
                last_error = f"{address}: {exc}"
                members.rotate()
                await asyncio.sleep(self.retry_interval * min(attempt + 1, 5))
                continue
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in _RETRYABLE:
                    raise KvError(exc.code().name, exc.details() or "") from exc
                last_error = f"{address}: {exc.code().name}"
                members.rotate()
                await asyncio.sleep(self.retry_interval * min(attempt + 1, 5))
                continue
            if reply.HasField("not_leader"):
                hint = reply.not_leader.leader_address
                last_error = f"{address}: not leader (hint {reply.not_leader.leader_id or '-'})"
                if hint and hint != address:
                    members.point_to(hint)
                else:
                    members.rotate()
                    await asyncio.sleep(self.retry_interval * min(attempt + 1, 5))
                continue
            if reply.HasField("error") and reply.error.code == "REJECTED:RESULT_UNAVAILABLE":
                raise KvUnavailableError(
                    f"{method} was applied before the serving member restarted, but its result is no longer "
                    "known; treat its outcome as unknown"
                )
            if reply.HasField("error") and reply.error.code in ("TIMEOUT", "QUEUE_FULL", "STOPPED"):
                last_error = f"{address}: {reply.error.code} {reply.error.message}"
                if reply.error.code == "STOPPED":
                    members.rotate()
                await asyncio.sleep(self.retry_interval * min(attempt + 1, 5))
                continue
            return reply
        raise KvUnavailableError(
            f"{method} did not complete after {self.max_attempts} attempts (last: {last_error}); "
            "its outcome is unknown"
        )

    def _request(self, **kw: Any) -> raft_pb2.KvRequest:
        return raft_pb2.KvRequest(client_id=self.client_id, call_id=self.next_call_id(), **kw)

    async def put(self, key: bytes, value: bytes) -> bytes | None:
        """Write key=value; returns the previous value (None if the key was absent)."""
        reply = await self._call("Put", self._request(key=key, value=value))
        if not reply.ok:
            raise KvError(reply.error.code or "FAILED", reply.error.message)
        return reply.value if reply.found else None

    async def get(self, key: bytes) -> bytes | None:
        """Linearizable read (ReadIndex on the serving member)."""
        reply = await self._call("Get", raft_pb2.KvRequest(key=key))
        if not reply.ok:
            raise KvError(reply.error.code or "FAILED", reply.error.message)
        return reply.value if reply.found else None

    async def cas(self, key: bytes, expected: bytes | None, new: bytes) -> bool:
        """Set key to ``new`` iff its value is ``expected`` (None = absent). False on mismatch."""
        req = self._request(key=key, value=new, expected=expected or b"", expect_absent=expected is None)
        reply = await self._call("Cas", req)
        if reply.ok:
            return True
        if reply.error.code == "CAS_MISMATCH":
            return False
        raise KvError(reply.error.code or "FAILED", reply.error.message)


@dataclass(frozen=True)
class RaftNodeStatus:
    node_id: str
    role: str
    term: int
    leader_id: str
    leader_address: str
    commit_index: int
    applied_index: int
    last_index: int
    first_index: int
    snapshot_index: int
    voters: tuple[str, ...]
    learners: tuple[str, ...]
    peers: dict[str, int]


class RaftAdminClient:
    """Admin calls against one member (``RaftAdmin`` service on its Raft port)."""

    def __init__(self, address: str, *, tls: TlsConfig | None = None, timeout: float = 5.0) -> None:
        self.address = address
        self.timeout = timeout
        self._channel = make_channel(address, tls)
        self._stub = raft_pb2_grpc.RaftAdminStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> RaftAdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def status(self) -> RaftNodeStatus:
        r = await self._stub.Status(raft_pb2.StatusRequest(), timeout=self.timeout)
        return RaftNodeStatus(
            node_id=r.node_id,
            role=r.role,
            term=r.term,
            leader_id=r.leader_id,
            leader_address=r.leader_address,
            commit_index=r.commit_index,
            applied_index=r.applied_index,
            last_index=r.last_index,
            first_index=r.first_index,
            snapshot_index=r.snapshot_index,
            voters=tuple(r.conf.voters),
            learners=tuple(r.conf.learners),
            peers={p.node_id: p.match_index for p in r.peers},
        )

    @staticmethod
    def _check(reply: raft_pb2.AdminReply, what: str) -> str:
        if reply.ok:
            return reply.leader_id
        if reply.HasField("not_leader"):
            raise KvError("NOT_LEADER", f"{what}: not leader (leader {reply.not_leader.leader_id or 'unknown'})")
        raise KvError(reply.error.code, f"{what}: {reply.error.message}")

    async def transfer_leadership(self, target_id: str = "", timeout: float = 10.0) -> str:
        r = await self._stub.TransferLeadership(
            raft_pb2.TransferLeadershipRequest(target_id=target_id, timeout=timeout), timeout=timeout + self.timeout
        )
        return self._check(r, "transfer leadership")

    async def add_member(self, node_id: str, address: str, timeout: float = 60.0) -> None:
        r = await self._stub.AddMember(
            raft_pb2.MemberRequest(node_id=node_id, address=address, timeout=timeout), timeout=timeout + self.timeout
        )
        self._check(r, f"add member {node_id}")

    async def remove_member(self, node_id: str, timeout: float = 30.0) -> None:
        r = await self._stub.RemoveMember(
            raft_pb2.MemberRequest(node_id=node_id, timeout=timeout), timeout=timeout + self.timeout
        )
        self._check(r, f"remove member {node_id}")

    async def set_faults(self, rules: Sequence[dict[str, Any]], seed: int = 0) -> None:
        """rules: dicts with keys of ``FaultRule`` (peer, drop, delay, jitter, cut_outbound, cut_inbound)."""
        req = raft_pb2.SetFaultsRequest(rules=[raft_pb2.FaultRule(**r) for r in rules], seed=seed)
        self._check(await self._stub.SetFaults(req, timeout=self.timeout), "set faults")

    async def clear_faults(self) -> None:
        self._check(await self._stub.ClearFaults(raft_pb2.StatusRequest(), timeout=self.timeout), "clear faults")

    async def submit(self, data: bytes, client_id: bytes = b"", call_id: int = 0, timeout: float = 10.0) -> bytes:
        r = await self._stub.Submit(
            raft_pb2.SubmitRequest(data=data, client_id=client_id, call_id=call_id, timeout=timeout),
            timeout=timeout + self.timeout,
        )
        if r.ok:
            return r.result
        if r.HasField("not_leader"):
            raise KvError("NOT_LEADER", f"not leader (leader {r.not_leader.leader_id or 'unknown'})")
        raise KvError(r.error.code, r.error.message)
