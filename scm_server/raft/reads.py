"""Linearizable reads of the Raft driver: ReadIndex rounds shared by concurrent readers.

Where it sits: :class:`~scm_server.raft.server.RaftServer` owns one :class:`ReadIndexBatcher`,
forwards ``read_index`` to it, and hands it every Ready's ``read_states``
(:meth:`ReadIndexBatcher.confirmed`). Everyone who asks before the next round is issued shares that
round (one heartbeat quorum), as etcd's linearizable read loop does; a round not confirmed within an
election timeout (a dropped request, a leader change) is asked again with the same context, until
``request_timeout``. A read returns once the state machine applied the confirmed index. The batcher
asks the core through :class:`ReadIndexNode` and waits for the applied index through the function it
is given; it does no I/O.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from scm_server.raft.core.types import ReadState
from scm_server.raft.errors import NotLeaderError, RaftTimeoutError
from scm_server.raft.view import CoreView, wait_shared

__all__ = ["ReadIndexBatcher", "ReadIndexNode"]


class ReadIndexNode(Protocol):
    def read_index(self, request_ctx: bytes) -> None: ...


def _no_leader() -> NotLeaderError:
    return NotLeaderError("", "", "no leader is known; cannot serve a linearizable read")


class ReadIndexBatcher:
    def __init__(
        self,
        view: CoreView,
        node: Callable[[], ReadIndexNode | None],
        wake: Callable[[], None],
        wait_applied: Callable[[int, float], Awaitable[None]],
        *,
        request_timeout: float,
        retry_every: float,
    ) -> None:
        """``node()`` gives the core while the driver runs (None otherwise); ``wake`` asks the loop for a
        Ready; ``wait_applied(index, timeout)`` returns once the state machine applied ``index``."""
        self._view = view
        self._node = node
        self._wake = wake
        self._wait_applied = wait_applied
        self._request_timeout = request_timeout
        self._retry_every = retry_every
        self._reads: dict[bytes, asyncio.Future[int]] = {}  # request context -> the round's readers
        self._collecting: asyncio.Future[int] | None = None  # the round not issued yet
        self._ids = itertools.count(1)

    async def read(self, timeout: float | None = None) -> int:
        """Linearizable read barrier (ReadIndex): returns once applied >= the confirmed read index."""
        if not self._view.leader:
            raise _no_leader()
        loop = asyncio.get_running_loop()
        t = timeout if timeout is not None else self._request_timeout
        deadline = loop.time() + t
        batch = self._collecting
        if batch is None:
            batch = loop.create_future()
            self._collecting = batch
            loop.call_soon(self._issue, batch)
        try:
            index = await wait_shared(batch, t)
        except TimeoutError:
            raise RaftTimeoutError(f"read index not confirmed within {t:.1f}s on {self._view.node_id}") from None
        await self._wait_applied(index, max(deadline - loop.time(), 0.001))
        return index

    def confirmed(self, read_states: Iterable[ReadState]) -> None:
        """The core confirmed these rounds: their readers may read once the index is applied."""
        for rs in read_states:
            fut = self._reads.pop(rs.request_ctx, None)
            if fut is not None and not fut.done():
                fut.set_result(rs.index)

    def fail_all(self, exc: Exception) -> None:
        for fut in self._reads.values():
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()
        self._reads.clear()

    def _issue(self, batch: asyncio.Future[int]) -> None:
        if self._collecting is batch:
            self._collecting = None
        if batch.done():
            return
        ctx = f"{self._view.node_id}/{next(self._ids)}".encode()
        self._reads[ctx] = batch
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._request_timeout

        def ask() -> None:
            node = self._node()
            if batch.done() or node is None:
                self._reads.pop(ctx, None)
                return
            if loop.time() > give_up:
                self._reads.pop(ctx, None)
                batch.set_exception(TimeoutError())
                batch.exception()
                return
            if not self._view.leader:
                self._reads.pop(ctx, None)
                batch.set_exception(_no_leader())
                batch.exception()
                return
            node.read_index(ctx)  # again after a drop (e.g. leader change): same ctx
            self._wake()
            loop.call_later(self._retry_every, ask)

        ask()
