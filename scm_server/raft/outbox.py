"""The Raft driver's outbox: a Ready's messages to the transport, a leader's commit-only appends held.

Where it sits: :class:`~scm_server.raft.server.RaftServer`'s Ready loop hands every batch of messages
it may send to :meth:`Outbox.send` (after the Ready is durable, or before it for a leader's appends
and heartbeats in the same term and vote). The outbox forwards them to the :class:`MessageSender`
(the transport) unchanged, with one exception on a leader:

When the commit index moves, the core sends every follower an append without entries just to carry
it. At one client that append and its response were a third of all messages per write (each costs a
gRPC stream write on one side and a read on the other). Every append carries the commit index, so
such an append is held until the next append to that peer replaces it (in steady traffic, the next
write's append, under a millisecond later) or until ``hold_seconds`` pass, so an idle follower learns
the commit at once. Holding or dropping a message is safe in Raft (the core never relies on delivery;
the simulation delays, drops and reorders every message type). A member that is no longer leader
releases what it held at its next send.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from scm_server.raft.core.types import Message, MessageType
from scm_server.raft.view import CoreView

__all__ = ["HOLD_SECONDS", "MessageSender", "Outbox"]

# How long a leader holds a commit-only append when no later append replaces it: longer than the
# gap between one client's writes, short enough that idle followers apply at once.
HOLD_SECONDS = 0.005


class MessageSender(Protocol):
    def send(self, messages: Sequence[Message]) -> None: ...


class _Timer(Protocol):
    def cancel(self) -> None: ...


def _call_later(delay: float, callback: Callable[[], None]) -> _Timer:
    return asyncio.get_running_loop().call_later(delay, callback)


class Outbox:
    def __init__(
        self,
        view: CoreView,
        sender: MessageSender,
        *,
        hold_seconds: float = HOLD_SECONDS,
        call_later: Callable[[float, Callable[[], None]], Any] = _call_later,
    ) -> None:
        """``call_later(delay, fn)`` starts a timer and returns something with ``cancel()``."""
        self._view = view
        self._sender = sender
        self._hold_seconds = hold_seconds
        self._call_later = call_later
        self._held: dict[str, Message] = {}  # peer -> its held commit-only append
        self._timer: _Timer | None = None

    def send(self, messages: Sequence[Message]) -> None:
        held = self._held
        if not self._view.is_leader:
            if held:
                self.release()
            self._sender.send(messages)
            return
        out: list[Message] = []
        for m in messages:
            if m.type == MessageType.APPEND:
                if not m.entries:
                    held[m.to] = m
                    continue
                held.pop(m.to, None)
            out.append(m)
        if out:
            self._sender.send(out)
        timer = self._timer
        if held and timer is None:
            self._timer = self._call_later(self._hold_seconds, self.release)
        elif not held and timer is not None:
            timer.cancel()
            self._timer = None

    def release(self) -> None:
        """Send every held append now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._held:
            held = list(self._held.values())
            self._held.clear()
            self._sender.send(held)
