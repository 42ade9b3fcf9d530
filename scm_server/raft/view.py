"""The Raft driver's volatile view of its core, and the status it reports.

Where it sits: :class:`~scm_server.raft.server.RaftServer` owns one :class:`CoreView` and updates it
from every Ready (role, leader, term, commit, configuration) and after every apply (applied index);
the driver's parts (apply, membership, leadership, persist, reads, outbox) read it instead of
asking the server, so each part depends on this small value and not on the server. It holds no
I/O and no clock; :class:`ChangeSignal` wakes whoever waits for the view to move, and
:func:`wait_shared` lets many callers wait on one future, each with its own timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import TypeVar

from scm_server.raft.core.types import NONE, ConfState, StateRole
from scm_server.raft.errors import NotLeaderError

__all__ = ["ChangeSignal", "CoreView", "RaftStatus", "wait_shared"]

_T = TypeVar("_T")


@dataclass(slots=True)
class CoreView:
    """What the driver knows of its core between Readys (written by the loop, read by the parts)."""

    node_id: str
    role: StateRole = StateRole.FOLLOWER
    leader: str = NONE
    term: int = 0
    commit: int = 0
    conf: ConfState = field(default_factory=ConfState)
    applied: int = 0  # the last index applied to the state machine (or covered by an installed snapshot)

    @property
    def is_leader(self) -> bool:
        return self.role == StateRole.LEADER

    def leader_address(self) -> str:
        return self.conf.address_of(self.leader) if self.leader else ""

    def not_leader(self, message: str = "") -> NotLeaderError:
        """The error a non-leader answers with, carrying the hint where the leader is."""
        return NotLeaderError(self.leader, self.leader_address(), message)


class ChangeSignal:
    """Wakes every waiter when the view moves (role, leader, applied index, configuration)."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()

    def bump(self) -> None:
        ev, self._changed = self._changed, asyncio.Event()
        ev.set()

    async def wait(self, timeout: float) -> None:
        """Return at the next :meth:`bump`, or after ``timeout`` seconds, whichever comes first."""
        ev = self._changed
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ev.wait(), timeout)


async def wait_shared(fut: asyncio.Future[_T], timeout: float) -> _T:
    """Await a future shared by many waiters, with a per-waiter timeout that never cancels it."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[_T] = loop.create_future()

    def relay(f: asyncio.Future[_T]) -> None:
        if waiter.done():
            return
        if f.cancelled():
            waiter.cancel()
        elif (exc := f.exception()) is not None:
            waiter.set_exception(exc)
        else:
            waiter.set_result(f.result())

    def expire() -> None:
        if not waiter.done():
            waiter.set_exception(TimeoutError())

    fut.add_done_callback(relay)
    timer = loop.call_later(timeout, expire)
    try:
        return await waiter
    finally:
        timer.cancel()
        fut.remove_done_callback(relay)


@dataclass(frozen=True)
class RaftStatus:
    node_id: str
    role: str  # LEADER, FOLLOWER, CANDIDATE, PRE_CANDIDATE, LEARNER
    term: int
    leader_id: str
    leader_address: str
    commit_index: int
    applied_index: int
    last_index: int
    first_index: int
    snapshot_index: int
    conf: ConfState
    peers: dict[str, int] = field(default_factory=dict)  # leader only: node id -> match index
    # leader only: node id -> seconds since that peer last spoke to this leader in its term (monotonic clock, so a
    # frozen peer's silence keeps growing); a peer absent here has not spoken in this term or its connection was lost
    last_contact: dict[str, float] = field(default_factory=dict)
