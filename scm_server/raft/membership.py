"""Membership changes of the Raft driver: add a member (learner, catch up, promote), remove one.

Where it sits: :class:`~scm_server.raft.server.RaftServer` owns one :class:`MembershipChanges` and
forwards ``add_member``/``remove_member`` to it (SCM's AddSCM and RemoveSCM, the admin service's
AddMember/RemoveMember). The part proposes the configuration change through the core it is given
(:class:`ConfChangeNode`), then waits until the driver loop has applied it; the loop itself writes
the new configuration into the view, the transport and the state machine when the entry commits.

Rules:

* add = ADD_LEARNER, then wait until the learner's match index reached the leader's last index, twice
  in a row (the target captured at each check, as Ratis does since RATIS-1960), then ADD_NODE; a
  member already a voter is not changed, one already a learner is only promoted;
* only a leader proposes; a proposal the core drops (one change at a time) is retried each tick until
  the deadline, unless leadership was lost;
* a change succeeded only when the index it was proposed at applied in the term it was proposed in:
  a leader that lost its term before committing sees its entry overwritten by the next leader's, and
  answers not-leader instead of success (after a compaction, the configuration in force decides);
* remove may remove the leader itself: it steps down once the change commits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from scm_server.raft.core.rawnode import Status
from scm_server.raft.core.storage import CompactedError
from scm_server.raft.core.types import ConfChange, ConfChangeType, ConfState, ProposalDroppedError
from scm_server.raft.errors import RaftTimeoutError
from scm_server.raft.view import ChangeSignal, CoreView

__all__ = ["ConfChangeNode", "MembershipChanges", "conf_change_in_effect"]


class ConfChangeNode(Protocol):
    """What membership changes need of the core."""

    def propose_conf_change(self, cc: ConfChange) -> int: ...

    def status(self) -> Status: ...


def conf_change_in_effect(cc: ConfChange, conf: ConfState) -> bool:
    """Does ``conf`` show the effect of ``cc``?"""
    if cc.type == ConfChangeType.ADD_NODE:
        return cc.node_id in conf.voters
    if cc.type == ConfChangeType.ADD_LEARNER:
        return cc.node_id in conf.learners or cc.node_id in conf.voters
    return cc.node_id not in conf.voters and cc.node_id not in conf.learners


class MembershipChanges:
    def __init__(
        self,
        view: CoreView,
        changes: ChangeSignal,
        tick_interval: float,
        *,
        node: Callable[[], ConfChangeNode],
        wake: Callable[[], None],
        wait_until: Callable[[Callable[[], bool], float, str], Awaitable[None]],
        log_term: Callable[[int], int],
    ) -> None:
        """``node()`` gives the running core (raises when the driver stopped or failed); ``wake`` asks the
        loop for a Ready; ``wait_until(pred, deadline, what)`` waits on the view (deadline on the event
        loop's clock); ``log_term(index)`` is the term of a log entry (CompactedError when purged)."""
        self._view = view
        self._changes = changes
        self._tick = tick_interval
        self._node = node
        self._wake = wake
        self._wait_until = wait_until
        self._log_term = log_term

    def _leader_node(self) -> ConfChangeNode:
        node = self._node()
        if not self._view.is_leader:
            raise self._view.not_leader()
        return node

    async def add_member(self, node_id: str, address: str, timeout: float = 60.0) -> None:
        """Add ``node_id`` as a learner, wait until it caught up, then promote it to voter."""
        self._leader_node()
        view = self._view
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if node_id in view.conf.voters:
            return
        if node_id not in view.conf.learners:
            await self.propose(ConfChange(ConfChangeType.ADD_LEARNER, node_id, address), deadline)
        checks = 0
        while checks < 2:
            st = self._leader_node().status()
            target = st.last_index  # captured at check time (RATIS-1960)
            pr = st.progress.get(node_id)
            if pr is not None and pr.match >= target:
                checks += 1
                if checks >= 2:
                    break
            if loop.time() >= deadline:
                raise RaftTimeoutError(
                    f"learner {node_id} at {address} did not catch up (match "
                    f"{pr.match if pr else 0} < {target}) within {timeout:.0f}s; is it running and reachable?"
                )
            await self._changes.wait(self._tick)
        await self.propose(ConfChange(ConfChangeType.ADD_NODE, node_id, address), deadline)

    async def remove_member(self, node_id: str, timeout: float = 30.0) -> None:
        """Remove ``node_id`` (the leader may remove itself: it steps down once the change commits)."""
        self._leader_node()
        if node_id not in self._view.conf.members():
            return
        loop = asyncio.get_running_loop()
        await self.propose(ConfChange(ConfChangeType.REMOVE_NODE, node_id, ""), loop.time() + timeout)

    async def propose(self, cc: ConfChange, deadline: float) -> None:
        """Propose ``cc`` and return once it applied in the term it was proposed in."""
        view = self._view
        loop = asyncio.get_running_loop()
        while True:
            node = self._leader_node()
            try:
                index = node.propose_conf_change(cc)
                term = view.term
                break
            except ProposalDroppedError as exc:
                if not view.is_leader:
                    raise view.not_leader() from exc
                if loop.time() >= deadline:
                    raise RaftTimeoutError(f"conf change {cc.type.name} {cc.node_id} refused until the deadline: {exc}") from exc
                await self._changes.wait(self._tick)
        self._wake()
        await self._wait_until(lambda: view.applied >= index, deadline, f"conf change at index {index} to apply")
        # The index was applied, but it holds our entry only if its term is still the one we proposed in: a
        # leader that lost its term before committing sees its uncommitted entry overwritten by the next
        # leader's, and the change never happened.
        try:
            applied_term = self._log_term(index)
        except CompactedError:
            # compacted into a snapshot right after applying: judge by the configuration now in force
            if not conf_change_in_effect(cc, view.conf):
                raise view.not_leader() from None
            return
        if applied_term != term:
            raise view.not_leader()
