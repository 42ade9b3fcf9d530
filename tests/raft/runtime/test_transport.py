"""RaftTransport on grpc.aio between two in-process endpoints: batching, order, fault injection
(drop, delay, one-way cut, inbound cut), reconnect after the peer restarts, chunked snapshots."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc.aio
import pytest

from scm_server.proto import raft_pb2_grpc
from scm_server.raft.core.types import ConfState, Entry, Message, MessageType, Snapshot, SnapshotMetadata
from scm_server.raft.faults import FaultRule, NetworkFaults
from scm_server.raft.transport import RaftTransport, message_from_proto, message_to_proto

from .cluster import free_port, wait_for


@dataclass
class Handler:
    received: list[Message] = field(default_factory=list)
    snapshots: list[tuple[Message, bytes]] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)
    snap_reports: list[tuple[str, bool]] = field(default_factory=list)
    streams_ended: list[str] = field(default_factory=list)
    data: list[bytes] | None = None

    def on_messages(self, messages: list[Message]) -> None:
        self.received.extend(messages)

    async def on_snapshot(self, message: Message, chunks: AsyncIterator[bytes]) -> None:
        buf = b"".join([c async for c in chunks])
        self.snapshots.append((message, buf))

    def snapshot_data(self) -> AsyncIterator[bytes] | None:
        if self.data is None:
            return None
        parts = self.data

        async def gen() -> AsyncIterator[bytes]:
            for p in parts:
                yield p

        return gen()

    def report_unreachable(self, peer: str) -> None:
        self.unreachable.append(peer)

    def report_snapshot(self, peer: str, ok: bool) -> None:
        self.snap_reports.append((peer, ok))

    def peer_stream_ended(self, peer: str) -> None:
        self.streams_ended.append(peer)


class Endpoint:
    def __init__(self, node_id: str, port: int, faults: NetworkFaults | None = None) -> None:
        self.node_id = node_id
        self.port = port
        self.address = f"127.0.0.1:{port}"
        self.handler = Handler()
        self.transport = RaftTransport(node_id, self.handler, faults=faults, address=self.address)
        self.server: grpc.aio.Server | None = None

    async def serve(self) -> None:
        self.server = grpc.aio.server()
        raft_pb2_grpc.add_RaftPeerServicer_to_server(self.transport.servicer(), self.server)
        self.server.add_insecure_port(self.address)
        await self.server.start()

    async def stop_server(self) -> None:
        if self.server is not None:
            await self.server.stop(grace=None)
            self.server = None

    async def close(self) -> None:
        await self.transport.close()
        await self.stop_server()


@pytest.fixture
async def pair() -> AsyncIterator[tuple[Endpoint, Endpoint]]:
    a = Endpoint("a", free_port(), NetworkFaults(seed=7))
    b = Endpoint("b", free_port(), NetworkFaults(seed=7))
    await a.serve()
    await b.serve()
    peers = {"a": a.address, "b": b.address}
    a.transport.update_peers(peers)
    b.transport.update_peers(peers)
    yield a, b
    await a.close()
    await b.close()


def app(frm: str, to: str, i: int) -> Message:
    return Message(
        MessageType.APPEND, to, frm, term=3, log_term=2, index=i, commit=i,
        entries=(Entry(term=3, index=i + 1, data=b"x%d" % i),),
    )  # fmt: skip


def test_message_proto_round_trip() -> None:
    conf = ConfState(voters=("a", "b"), learners=("c",), addresses=(("a", "h:1"), ("b", "h:2"), ("c", "h:3")))
    m = Message(
        MessageType.SNAPSHOT, "b", "a", 4, log_term=3, index=9, commit=8, reject=True, reject_hint=5,
        context=b"ctx", snapshot=Snapshot(SnapshotMetadata(index=9, term=3, conf_state=conf)),
        entries=(Entry(1, 1), Entry(2, 2, data=b"d")),
    )  # fmt: skip
    assert message_from_proto(message_to_proto(m)) == m


async def test_batched_in_order_delivery(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    a.transport.send([app("a", "b", i) for i in range(500)])
    await wait_for(lambda: _n(b, 500), 10, "500 messages")
    assert [m.index for m in b.handler.received] == list(range(500))
    assert b.handler.received[3].entries[0].data == b"x3"


async def test_votes_and_responses_flow_both_ways(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    a.transport.send([Message(MessageType.PRE_VOTE, "b", "a", 5, log_term=4, index=10)])
    b.transport.send([Message(MessageType.PRE_VOTE_RESP, "a", "b", 5)])
    await wait_for(lambda: _n(b, 1), 10, "pre-vote")
    await wait_for(lambda: _n(a, 1), 10, "pre-vote response")
    assert b.handler.received[0].type == MessageType.PRE_VOTE


async def test_drop_probability_is_seeded(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    assert a.transport.faults is not None
    a.transport.faults.set_rules([FaultRule(peer="b", drop=0.5)], seed=42)
    a.transport.send([app("a", "b", i) for i in range(400)])
    a.transport.send([Message(MessageType.HEARTBEAT, "b", "a", 3, context=b"end")])
    a.transport.faults.clear()
    a.transport.send([Message(MessageType.HEARTBEAT, "b", "a", 3, context=b"marker")])
    await wait_for(lambda: _has(b, b"marker"), 10, "marker")
    got = sum(1 for m in b.handler.received if m.type == MessageType.APPEND)
    assert 120 < got < 280, got
    faults = NetworkFaults(seed=42)  # same seed, same decisions
    faults.set_rules([FaultRule(peer="b", drop=0.5)])
    assert sum(1 for _ in range(400) if faults.outbound("b") is not None) == got


async def test_one_way_cut_and_inbound_cut(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    assert a.transport.faults is not None and b.transport.faults is not None
    a.transport.faults.set_rules([FaultRule(peer="b", cut_outbound=True)])
    a.transport.send([app("a", "b", 1)])
    b.transport.send([app("b", "a", 2)])
    await wait_for(lambda: _n(a, 1), 10, "b -> a still works")
    # b never got a's message: a later marker from a (after the cut is lifted) arrives first
    a.transport.faults.clear()
    a.transport.send([Message(MessageType.HEARTBEAT, "b", "a", 3, context=b"marker")])
    await wait_for(lambda: _has(b, b"marker"), 10, "marker")
    assert [m.type for m in b.handler.received] == [MessageType.HEARTBEAT]
    # inbound cut on b: a's messages are discarded at b, b -> a keeps working
    b.transport.faults.set_rules([FaultRule(peer="a", cut_inbound=True)])
    a.transport.send([Message(MessageType.HEARTBEAT, "b", "a", 3, context=b"lost")])
    b.transport.send([Message(MessageType.HEARTBEAT_RESP, "a", "b", 3, context=b"back")])
    await wait_for(lambda: _has(a, b"back"), 10, "b -> a during inbound cut")
    b.transport.faults.clear()
    a.transport.send([Message(MessageType.HEARTBEAT, "b", "a", 3, context=b"marker2")])
    await wait_for(lambda: _has(b, b"marker2"), 10, "marker2")
    assert not _has_now(b, b"lost")


async def test_added_delay(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    assert a.transport.faults is not None
    a.transport.faults.set_rules([FaultRule(peer="*", delay=0.3)])
    t0 = time.monotonic()
    a.transport.send([Message(MessageType.HEARTBEAT, "b", "a", 3, context=b"slow")])
    await wait_for(lambda: _has(b, b"slow"), 10, "delayed message")
    assert time.monotonic() - t0 >= 0.3


async def test_reconnect_after_peer_restart(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    a.transport.send([app("a", "b", 1)])
    await wait_for(lambda: _n(b, 1), 10, "first message")
    await b.stop_server()

    async def reported() -> bool:
        a.transport.send([Message(MessageType.HEARTBEAT, "b", "a", 3)])
        return "b" in a.handler.unreachable

    await wait_for(reported, 10, "b reported unreachable")
    await b.serve()  # same port, new server

    async def flows() -> bool:
        a.transport.send([Message(MessageType.HEARTBEAT, "b", "a", 3, context=b"again")])
        return _has_now(b, b"again")

    await wait_for(flows, 15, "traffic after the restart", interval=0.1)


async def test_receiver_learns_when_a_senders_stream_ends(pair: tuple[Endpoint, Endpoint]) -> None:
    """The end of an inbound stream is reported with its sender (the driver uses it to notice a dead
    leader early); a stream that is still open is not."""
    a, b = pair
    a.transport.send([app("a", "b", 1)])
    b.transport.send([Message(MessageType.APPEND_RESP, "a", "b", 3, index=2)])
    await wait_for(lambda: _n(b, 1), 10, "a's message at b")
    await wait_for(lambda: _n(a, 1), 10, "b's message at a")
    assert b.handler.streams_ended == [] and a.handler.streams_ended == []
    await a.transport.close()  # a's outbound stream to b ends; b's stream to a stays open
    await wait_for(lambda: _val(b.handler.streams_ended == ["a"]), 10, "b to learn that a's stream ended")
    assert a.handler.streams_ended == []


async def test_chunked_snapshot_transfer(pair: tuple[Endpoint, Endpoint]) -> None:
    a, b = pair
    payload = [bytes([i]) * 700_000 for i in range(5)]  # spans several 1 MiB chunks
    a.handler.data = payload
    snap = Snapshot(SnapshotMetadata(index=40, term=3, conf_state=ConfState(voters=("a", "b"))))
    a.transport.send([Message(MessageType.SNAPSHOT, "b", "a", 3, snapshot=snap)])
    await wait_for(lambda: _val(bool(a.handler.snap_reports)), 20, "snapshot report")
    assert a.handler.snap_reports == [("b", True)]
    (msg, data), = b.handler.snapshots
    assert msg.snapshot is not None and msg.snapshot.metadata.index == 40
    assert data == b"".join(payload)


async def _val(v: bool) -> bool:
    return v


async def _n(e: Endpoint, n: int) -> bool:
    return len(e.handler.received) >= n


def _has_now(e: Endpoint, ctx: bytes) -> bool:
    return any(m.context == ctx for m in e.handler.received)


async def _has(e: Endpoint, ctx: bytes) -> bool:
    return _has_now(e, ctx)





async def test_dropped_snapshot_is_reported_as_failed(pair: tuple[Endpoint, Endpoint]) -> None:
    """The core keeps a follower in SNAPSHOT state until told the outcome: a snapshot lost to a
    partition must be reported, or that follower would never be sent anything again."""
    a, _ = pair
    assert a.transport.faults is not None
    a.transport.faults.set_rules([FaultRule(peer="b", cut_outbound=True)])
    snap = Snapshot(SnapshotMetadata(index=9, term=2, conf_state=ConfState(voters=("a", "b"))))
    a.transport.send([Message(MessageType.SNAPSHOT, "b", "a", 2, snapshot=snap)])
    a.transport.send([Message(MessageType.SNAPSHOT, "zz", "a", 2, snapshot=snap)])  # unknown peer
    assert a.handler.snap_reports == [("b", False), ("zz", False)]
