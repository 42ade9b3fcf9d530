"""Peer-to-peer transport of the Raft driver on grpc.aio (proto/raft.proto, service ``RaftPeer``).

Where it sits: the driver (:mod:`scm_server.raft.server`) hands every Ready's messages to
:meth:`RaftTransport.send` AFTER the Ready was persisted; inbound messages are handed to the
driver's :class:`TransportHandler`, which steps them into the core.

Design (etcd rafthttp / Ratis ``appendEntries`` stream, adapted):

* One long-lived client stream per destination (``Deliver``) carries batched core messages:
  AppendEntries with many entries, heartbeats and every response. Messages queued while a write is
  in flight go out together in the next batch, so there is no per-message RPC nor asyncio task.
  Responses flow back on the destination's own stream to us.
* Votes, pre-votes and TimeoutNow are unary calls (``RequestVote``/``TimeoutNow``) so an election
  never waits behind a large append batch.
* InstallSnapshot is a client stream of chunks: the SNAPSHOT message first, then the state
  machine's data in chunked mode (nothing more in notification mode); the driver reports the
  outcome to the core (``report_snapshot``).
* Channels are created from unresolved "host:port" strings (gRPC re-resolves DNS on reconnect,
  HDDS-15514) and re-created with exponential backoff after a failure; a failed send reports the
  peer unreachable so the leader falls back to probing. Messages are never retried: Raft tolerates
  loss, and retrying stale messages only adds load.
* TLS: with a :class:`TransportSecurity` (the static, file-based :class:`TlsConfig`, or the SCM's
  reloadable certificates), the server requires client certificates (mutual TLS), runs the
  security's interceptors on every call, and the channels present ours; a peer's channel is
  re-created when the security's ``generation`` moves (a renewed certificate), and nothing is sent
  to a peer the security no longer allows (a revoked SCM). Otherwise plain insecure channels.
* Fault injection (tests): :class:`~scm_server.raft.faults.NetworkFaults` decides per outbound
  message drop/delay/cut and per inbound batch whether the source is cut.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc
import grpc.aio

from scm_server.proto import raft_pb2, raft_pb2_grpc
from scm_server.raft.core.types import (
    ConfState,
    Entry,
    EntryType,
    Message,
    MessageType,
    Snapshot,
    SnapshotMetadata,
)
from scm_server.raft.faults import NetworkFaults

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 << 20
SNAPSHOT_CHUNK_BYTES = 1 << 20
_BATCH_MAX_MESSAGES = 512
_BATCH_MAX_BYTES = 4 << 20  # stay far below MAX_MESSAGE_BYTES even with max_size_per_msg appends
_QUEUE_LIMIT = 8192  # messages waiting per peer before the oldest are dropped
_UNARY_TYPES = frozenset({MessageType.VOTE, MessageType.PRE_VOTE, MessageType.TIMEOUT_NOW})
_ETYPES = {int(t): t for t in EntryType}
_MTYPES = {int(t): t for t in MessageType}
_LOCAL_TYPES = frozenset({MessageType.SNAP_STATUS, MessageType.UNREACHABLE})  # reports of the local driver only

# A peer that died or moved to a new IP (a restarted Pod; its old address may swallow packets) must
# be noticed: the Deliver stream only writes, so without PINGs a connection to a vanished address
# stays "up" until TCP gives up (keepalive_timeout alone has no effect without ping_timeout). The
# timeout is generous (5 s) because PING answers wait for a busy event loop (large entries) and a
# dropped stream costs a reconnect; Raft's own heartbeats decide elections. A failed stream
# re-creates the channel (a fresh DNS resolution); the channel's own reconnects re-resolve too
# (gRPC's default waits 30 s between resolutions).
CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.dns_min_time_between_resolutions_ms", 500),
    ("grpc.keepalive_time_ms", 2_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.ping_timeout_ms", 5_000),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.http2.min_time_between_pings_ms", 2_000),
]
SERVER_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 500),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.so_reuseport", 0),
]


# ---------------------------------------------------------------------------- TLS
class TransportSecurity(Protocol):
    """What the transport needs for mutual TLS (implemented by :class:`TlsConfig` and, without
    Raft importing it, by the SCM's ``scm_server.security.tls.SCMTransportSecurity``)."""

    @property
    def generation(self) -> int:
        """Changes when the credentials change; channels are then re-created."""
        ...

    def server_credentials(self) -> grpc.ServerCredentials: ...

    def channel_credentials(self) -> grpc.ChannelCredentials: ...

    def server_interceptors(self) -> Sequence[grpc.aio.ServerInterceptor]: ...

    def peer_allowed(self, node_id: str) -> bool: ...

    def channel_options(self) -> Sequence[tuple[str, Any]]:
        """Extra options of the channels to peers (e.g. the TLS name the peers' certificates must carry)."""
        ...

    def sender_denied(self, node_id: str) -> str | None:
        """Called inside an inbound call: why the authenticated peer may not send as Raft member ``node_id``
        (None: it may). The SCM ties the sender to its certificate's node."""
        ...


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """PEM files for mutual TLS between Raft peers (and their clients)."""

    cert_file: Path
    key_file: Path
    ca_file: Path

    @property
    def generation(self) -> int:
        return 0

    def _read(self) -> tuple[bytes, bytes, bytes]:
        return (Path(self.cert_file).read_bytes(), Path(self.key_file).read_bytes(), Path(self.ca_file).read_bytes())

    def server_credentials(self) -> grpc.ServerCredentials:
        cert, key, ca = self._read()
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        cert, key, ca = self._read()
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)

    def server_interceptors(self) -> Sequence[grpc.aio.ServerInterceptor]:
        return ()

    def peer_allowed(self, node_id: str) -> bool:
        return True

    def channel_options(self) -> Sequence[tuple[str, Any]]:
        return ()

    def sender_denied(self, node_id: str) -> str | None:
        return None


def make_channel(address: str, tls: TransportSecurity | None = None) -> grpc.aio.Channel:
    """A channel to an unresolved host:port (never a pre-resolved IP: gRPC re-resolves on reconnect)."""
    if tls is not None:
        return grpc.aio.secure_channel(
            address, tls.channel_credentials(), options=[*CHANNEL_OPTIONS, *tls.channel_options()]
        )
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


def add_port(server: grpc.aio.Server, address: str, tls: TransportSecurity | None = None) -> int:
    if tls is not None:
        return server.add_secure_port(address, tls.server_credentials())
    return server.add_insecure_port(address)


# ---------------------------------------------------------------------------- conversions
def conf_to_proto(conf: ConfState) -> raft_pb2.ConfStateProto:
    return raft_pb2.ConfStateProto(
        voters=list(conf.voters),
        learners=list(conf.learners),
        addresses=[raft_pb2.PeerAddressProto(node_id=n, address=a) for n, a in conf.addresses],
    )


def conf_from_proto(p: raft_pb2.ConfStateProto) -> ConfState:
    return ConfState(
        voters=tuple(p.voters),
        learners=tuple(p.learners),
        addresses=tuple((a.node_id, a.address) for a in p.addresses),
    )


def meta_to_proto(meta: SnapshotMetadata) -> raft_pb2.SnapshotMetadataProto:
    return raft_pb2.SnapshotMetadataProto(index=meta.index, term=meta.term, conf_state=conf_to_proto(meta.conf_state))


def meta_from_proto(p: raft_pb2.SnapshotMetadataProto) -> SnapshotMetadata:
    return SnapshotMetadata(index=p.index, term=p.term, conf_state=conf_from_proto(p.conf_state))


def message_to_proto(m: Message) -> raft_pb2.MessageProto:
    EP = raft_pb2.EntryProto
    p = raft_pb2.MessageProto(
        type=int(m.type),
        to=m.to,
        term=m.term,
        log_term=m.log_term,
        index=m.index,
        entries=[EP(term=e.term, index=e.index, type=int(e.type), data=e.data) for e in m.entries],
        commit=m.commit,
        reject=m.reject,
        reject_hint=m.reject_hint,
        context=m.context,
        pre_vote=m.type in (MessageType.PRE_VOTE, MessageType.PRE_VOTE_RESP),
    )
    setattr(p, "from", m.frm)
    if m.snapshot is not None:
        p.snapshot.CopyFrom(meta_to_proto(m.snapshot.metadata))
    return p


def message_from_proto(p: raft_pb2.MessageProto) -> Message:
    etypes = _ETYPES
    return Message(
        type=_MTYPES[p.type],
        to=p.to,
        frm=getattr(p, "from"),
        term=p.term,
        log_term=p.log_term,
        index=p.index,
        entries=tuple(Entry(term=e.term, index=e.index, type=etypes[e.type], data=e.data) for e in p.entries),
        commit=p.commit,
        snapshot=Snapshot(metadata=meta_from_proto(p.snapshot)) if p.HasField("snapshot") else None,
        reject=p.reject,
        reject_hint=p.reject_hint,
        context=p.context,
    )


# ---------------------------------------------------------------------------- handler
class TransportHandler(Protocol):
    """What the transport needs from the driver."""

    def on_messages(self, messages: list[Message]) -> None: ...

    async def on_snapshot(self, message: Message, chunks: AsyncIterator[bytes]) -> None:
        """Receive an InstallSnapshot (message + data chunks); raise to reject it."""
        ...

    def snapshot_data(self) -> AsyncIterator[bytes] | None:
        """Leader side: the data stream of the latest snapshot (chunked mode), or None (notify mode)."""
        ...

    def report_unreachable(self, peer: str) -> None: ...

    def report_snapshot(self, peer: str, ok: bool) -> None: ...

    def peer_stream_ended(self, peer: str) -> None:
        """The inbound Deliver stream from ``peer`` ended (closed, reset, or its process died)."""
        ...


# ---------------------------------------------------------------------------- outbound
class _Peer:
    """Outbound path to one destination: a queue drained into a long-lived Deliver stream."""

    def __init__(self, transport: RaftTransport, node_id: str, address: str) -> None:
        self.transport = transport
        self.node_id = node_id
        self.address = address
        self.queue: collections.deque[Message] = collections.deque()
        self.wakeup = asyncio.Event()
        self.channel: grpc.aio.Channel | None = None
        self.stub: raft_pb2_grpc.RaftPeerStub | None = None
        self.snapshot_task: asyncio.Task[None] | None = None
        self.closed = False
        self.generation = 0
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"raft-peer-{node_id}")

    def enqueue(self, m: Message) -> None:
        if self.closed:
            return
        q = self.queue
        if len(q) >= _QUEUE_LIMIT:
            q.popleft()  # drop the oldest: Raft retransmits what matters
        q.append(m)
        self.wakeup.set()

    def _ensure_channel(self) -> raft_pb2_grpc.RaftPeerStub:
        tls = self.transport.tls
        if self.stub is None:
            self.generation = tls.generation if tls is not None else 0
            self.channel = make_channel(self.address, tls)
            self.stub = raft_pb2_grpc.RaftPeerStub(self.channel)
        return self.stub

    def credentials_changed(self) -> bool:
        tls = self.transport.tls
        return tls is not None and self.stub is not None and tls.generation != self.generation

    async def _reset_channel(self) -> None:
        ch, self.channel, self.stub = self.channel, None, None
        if ch is not None:
            with contextlib.suppress(Exception):
                await ch.close(grace=None)

    async def _run(self) -> None:
        backoff = 0.05
        while not self.closed:
            call: Any = None
            try:
                stub = self._ensure_channel()
                call = stub.Deliver()
                while not self.closed:
                    if not self.queue:
                        self.wakeup.clear()
                        await self.wakeup.wait()
                        continue
                    if self.credentials_changed():
                        raise _CredentialsChanged()
                    batch = raft_pb2.MessageBatch(from_address=self.transport.address)
                    msgs = batch.messages
                    q = self.queue
                    n = size = 0
                    while q and n < _BATCH_MAX_MESSAGES and size < _BATCH_MAX_BYTES:
                        p = message_to_proto(q.popleft())
                        if p.entries:
                            size += p.ByteSize()
                        msgs.append(p)
                        n += 1
                    await call.write(batch)
                    backoff = 0.05
            except asyncio.CancelledError:
                if call is not None:
                    call.cancel()
                raise
            except _CredentialsChanged:
                # renewed certificate: reconnect with it at once, keep what is queued
                if call is not None:
                    call.cancel()
                await self._reset_channel()
                continue
            except Exception as exc:
                if self.closed:
                    break
                log.debug("raft stream to %s (%s) failed: %s", self.node_id, self.address, exc)
                if call is not None:
                    call.cancel()
                self.queue.clear()
                self.transport.handler.report_unreachable(self.node_id)
                await self._reset_channel()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                self.queue.clear()  # queued while disconnected: stale by now

    def send_unary(self, m: Message) -> None:
        async def go() -> None:
            try:
                stub = self._ensure_channel()
                p = message_to_proto(m)
                timeout = self.transport.unary_timeout
                if m.type == MessageType.TIMEOUT_NOW:
                    await stub.TimeoutNow(p, timeout=timeout)
                else:
                    await stub.RequestVote(p, timeout=timeout)
            except Exception as exc:
                log.debug("raft %s to %s failed: %s", m.type.name, self.node_id, exc)

        self.transport._spawn(go())

    def send_snapshot(self, m: Message) -> None:
        if self.snapshot_task is not None and not self.snapshot_task.done():
            return  # one snapshot at a time per follower; the core re-sends if needed
        self.snapshot_task = self.transport._spawn(self._send_snapshot(m))

    async def _send_snapshot(self, m: Message) -> None:
        transport = self.transport
        ok = False
        try:
            stub = self._ensure_channel()
            data = transport.handler.snapshot_data()

            async def chunks() -> AsyncIterator[raft_pb2.SnapshotChunk]:
                yield raft_pb2.SnapshotChunk(message=message_to_proto(m), done=data is None)
                if data is None:
                    return
                offset = 0
                async for piece in data:
                    for i in range(0, len(piece), SNAPSHOT_CHUNK_BYTES):
                        part = piece[i : i + SNAPSHOT_CHUNK_BYTES]
                        yield raft_pb2.SnapshotChunk(offset=offset, data=part, crc32=zlib.crc32(part))
                        offset += len(part)
                yield raft_pb2.SnapshotChunk(offset=offset, done=True)

            reply = await stub.InstallSnapshot(chunks(), timeout=transport.snapshot_timeout)
            ok = reply.accepted
            if not ok:
                log.warning("follower %s rejected snapshot %d: %s", self.node_id, m.snapshot.metadata.index if m.snapshot else 0, reply.error)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("sending snapshot to %s failed: %s", self.node_id, exc)
        transport.handler.report_snapshot(self.node_id, ok)

    async def close(self) -> None:
        self.closed = True
        self.wakeup.set()
        self.task.cancel()
        if self.snapshot_task is not None:
            self.snapshot_task.cancel()
        with contextlib.suppress(BaseException):
            await self.task
        await self._reset_channel()


class _CredentialsChanged(Exception):
    """The transport security's generation moved: re-create the channel."""


class RaftTransport:
    """Sends core messages to peers and feeds inbound ones to the handler (see module docstring)."""

    def __init__(
        self,
        node_id: str,
        handler: TransportHandler,
        *,
        tls: TransportSecurity | None = None,
        faults: NetworkFaults | None = None,
        address: str = "",
        unary_timeout: float = 5.0,
        snapshot_timeout: float = 600.0,
    ) -> None:
        self.node_id = node_id
        self.handler = handler
        self.tls = tls
        self.faults = faults
        self.unary_timeout = unary_timeout
        self.snapshot_timeout = snapshot_timeout
        self._peers: dict[str, _Peer] = {}
        self._configured: dict[str, str] = {}
        self.address = address
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- peers
    def update_peers(self, addresses: dict[str, str]) -> None:
        """Set the destinations (node id -> host:port), excluding ourselves; re-create changed ones."""
        self._configured = dict(addresses)
        wanted = {n: a for n, a in addresses.items() if n != self.node_id and a}
        for nid in list(self._peers):
            if nid not in wanted or wanted[nid] != self._peers[nid].address:
                peer = self._peers.pop(nid)
                self._spawn(peer.close())
        for nid, addr in wanted.items():
            if nid not in self._peers:
                self._peers[nid] = _Peer(self, nid, addr)

    def peer_address(self, node_id: str) -> str:
        p = self._peers.get(node_id)
        return p.address if p is not None else ""

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ---- outbound
    def send(self, messages: Sequence[Message]) -> None:
        faults = self.faults
        tls = self.tls
        loop: asyncio.AbstractEventLoop | None = None
        for m in messages:
            peer = self._peers.get(m.to)
            if peer is None or (tls is not None and not tls.peer_allowed(m.to)):
                self._dropped(m)
                continue
            if faults is not None and faults.active:
                delay = faults.outbound(m.to)
                if delay is None:
                    self._dropped(m)
                    continue
                if delay > 0:
                    loop = loop or asyncio.get_running_loop()
                    loop.call_later(delay, self._dispatch, peer, m)
                    continue
            self._dispatch(peer, m)

    def _dropped(self, m: Message) -> None:
        """A message that will never be sent. The core keeps a follower in SNAPSHOT state until the
        snapshot's outcome is reported, so a dropped snapshot must be reported as failed."""
        if m.type == MessageType.SNAPSHOT:
            self.handler.report_snapshot(m.to, False)

    def _dispatch(self, peer: _Peer, m: Message) -> None:
        if peer.closed:
            self._dropped(m)
            return
        t = m.type
        if t in _UNARY_TYPES:
            peer.send_unary(m)
        elif t == MessageType.SNAPSHOT:
            peer.send_snapshot(m)
        else:
            peer.enqueue(m)

    # ---- inbound
    def _accept(self, frm: str) -> bool:
        f = self.faults
        return f is None or not f.active or f.inbound_allowed(frm)

    def learn_address(self, node_id: str, address: str) -> None:
        """A sender outside our configuration told us its address: open a path back so we can answer
        it (we are a member not configured yet and the leader is adding us, or the sender is a
        leader that removed itself and keeps leading until that change commits)."""
        if (
            address
            and node_id
            and node_id != self.node_id
            and node_id not in self._configured
            and node_id not in self._peers
            and not self._closed
        ):
            self._peers[node_id] = _Peer(self, node_id, address)

    def deliver_inbound(self, msgs: list[Message]) -> None:
        accepted = [m for m in msgs if m.to == self.node_id and self._accept(m.frm)]
        if accepted:
            self.handler.on_messages(accepted)

    def servicer(self) -> raft_pb2_grpc.RaftPeerServicer:
        return _PeerServicer(self)

    async def close(self) -> None:
        self._closed = True
        peers, self._peers = list(self._peers.values()), {}
        for p in peers:
            await p.close()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(BaseException):
                await t


class BadFrame(ValueError):
    """An inbound frame that is not a valid Raft message (unknown type, missing sender)."""


def _inbound(p: raft_pb2.MessageProto) -> Message:
    if p.type not in _MTYPES or _MTYPES[p.type] in _LOCAL_TYPES:
        raise BadFrame(f"Raft message type {p.type} is not one peers send")
    if any(e.type not in _ETYPES for e in p.entries):
        raise BadFrame("a Raft entry of unknown type")
    if not getattr(p, "from"):
        raise BadFrame("a Raft message without its sender ('from')")
    return message_from_proto(p)


class _PeerServicer(raft_pb2_grpc.RaftPeerServicer):
    def __init__(self, transport: RaftTransport) -> None:
        self.t = transport

    async def _admit(self, context: grpc.aio.ServicerContext, senders: set[str], frm: str) -> None:
        """Refuse (PERMISSION_DENIED) a message whose sender is not the node the caller's certificate names."""
        tls = self.t.tls
        if tls is None or frm in senders:
            return
        denial = tls.sender_denied(frm)
        if denial is not None:
            log.warning("refused Raft messages sent as %s: %s", frm, denial)
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, denial)
        senders.add(frm)

    async def _parse(self, context: grpc.aio.ServicerContext, p: raft_pb2.MessageProto) -> Message:
        try:
            return _inbound(p)
        except BadFrame as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed Raft message: {exc}")
            raise AssertionError("abort returned") from exc  # pragma: no cover - abort always raises

    async def Deliver(
        self, request_iterator: AsyncIterator[raft_pb2.MessageBatch], context: grpc.aio.ServicerContext
    ) -> raft_pb2.DeliverAck:
        deliver = self.t.deliver_inbound
        sender = ""
        senders: set[str] = set()
        try:
            async for batch in request_iterator:
                msgs = [await self._parse(context, p) for p in batch.messages]
                for m in msgs:
                    await self._admit(context, senders, m.frm)
                if msgs:
                    sender = msgs[0].frm
                    if batch.from_address:
                        self.t.learn_address(sender, batch.from_address)
                deliver(msgs)
        finally:
            # however it ended (the sender closed it, its connection was reset, its process was
            # killed): the driver may take a leader's lost stream as a sign the leader is gone
            if sender and not self.t.closed:
                self.t.handler.peer_stream_ended(sender)
        return raft_pb2.DeliverAck()

    async def RequestVote(
        self, request: raft_pb2.MessageProto, context: grpc.aio.ServicerContext
    ) -> raft_pb2.DeliverAck:
        m = await self._parse(context, request)
        if m.type not in (MessageType.VOTE, MessageType.PRE_VOTE):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"RequestVote carries a {m.type.name} message")
        await self._admit(context, set(), m.frm)
        self.t.deliver_inbound([m])
        return raft_pb2.DeliverAck()

    async def TimeoutNow(
        self, request: raft_pb2.MessageProto, context: grpc.aio.ServicerContext
    ) -> raft_pb2.DeliverAck:
        m = await self._parse(context, request)
        if m.type != MessageType.TIMEOUT_NOW:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"TimeoutNow carries a {m.type.name} message")
        await self._admit(context, set(), m.frm)
        if m.to != self.t.node_id:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"TimeoutNow for node {m.to!r}, but this is node {self.t.node_id!r}"
            )
        self.t.deliver_inbound([m])
        return raft_pb2.DeliverAck()

    async def InstallSnapshot(
        self, request_iterator: AsyncIterator[raft_pb2.SnapshotChunk], context: grpc.aio.ServicerContext
    ) -> raft_pb2.InstallSnapshotReply:
        it = request_iterator.__aiter__()
        try:
            first = await it.__anext__()
        except StopAsyncIteration:
            return raft_pb2.InstallSnapshotReply(accepted=False, error="empty InstallSnapshot stream")
        msg = await self._parse(context, first.message)
        await self._admit(context, set(), msg.frm)
        if msg.to != self.t.node_id or not self.t._accept(msg.frm):
            return raft_pb2.InstallSnapshotReply(accepted=False, error="not accepted by fault injection or wrong node")
        done = first.done

        async def chunks() -> AsyncIterator[bytes]:
            nonlocal done
            expected = 0
            while not done:
                try:
                    c = await it.__anext__()
                except StopAsyncIteration:
                    raise ValueError("InstallSnapshot stream ended before the final chunk") from None
                if c.data:
                    if c.offset != expected:
                        raise ValueError(f"snapshot chunk at offset {c.offset}, expected {expected}")
                    if zlib.crc32(c.data) != c.crc32:
                        raise ValueError(f"snapshot chunk at offset {c.offset} fails its CRC32 check")
                    expected += len(c.data)
                    yield c.data
                done = c.done

        try:
            await self.t.handler.on_snapshot(msg, chunks())
        except Exception as exc:
            log.warning("rejecting snapshot from %s: %s", msg.frm, exc)
            return raft_pb2.InstallSnapshotReply(accepted=False, error=str(exc))
        return raft_pb2.InstallSnapshotReply(accepted=True)


OnMessages = Callable[[list[Message]], None]
