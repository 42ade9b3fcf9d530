"""Pending ReadIndex requests on a leader (the SAFE read-only option, thesis §6.4).

A read request is recorded with the commit index at the moment it arrived, then the leader
sends a heartbeat round carrying the request's context. Once a quorum of voters answered a
heartbeat with that context, leadership at that moment is confirmed and the request — and
every request queued before it — can be answered with its recorded index.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scm_server.raft.core.types import Message, NodeId


@dataclass(slots=True)
class ReadIndexStatus:
    req: Message
    index: int
    acks: set[NodeId] = field(default_factory=set)


class ReadOnly:
    __slots__ = ("pending", "queue")

    def __init__(self) -> None:
        self.pending: dict[bytes, ReadIndexStatus] = {}
        self.queue: list[bytes] = []

    def add_request(self, index: int, req: Message) -> None:
        ctx = req.context
        if ctx in self.pending:
            return
        self.pending[ctx] = ReadIndexStatus(req=req, index=index)
        self.queue.append(ctx)

    def recv_ack(self, node: NodeId, ctx: bytes) -> set[NodeId] | None:
        rs = self.pending.get(ctx)
        if rs is None:
            return None
        rs.acks.add(node)
        return rs.acks

    def advance(self, ctx: bytes) -> list[ReadIndexStatus]:
        """Pop and return every request up to and including ``ctx``."""
        if ctx not in self.pending:
            return []
        k = self.queue.index(ctx)
        done = self.queue[: k + 1]
        del self.queue[: k + 1]
        return [self.pending.pop(c) for c in done]

    def last_pending_ctx(self) -> bytes:
        return self.queue[-1] if self.queue else b""
