"""Leader-loss and lease policy of the Raft driver: the wall-clock lease, and early campaigns.

Where it sits: :class:`~scm_server.raft.server.RaftServer` owns one :class:`LeadershipPolicy` and
tells it what the transport saw (messages heard, a peer unreachable, a peer's stream ended) and
when it became leader; the policy answers :meth:`LeadershipPolicy.lease_remaining` and, on a
follower that lost its leader's stream, forgets that leader and campaigns early through the
:class:`ElectionNode` it is given. Stepping down when the leader loses its followers stays in the
core (check-quorum counts ticks); this policy adds what ticks cannot see: a frozen process, and a
leader whose connections were closed by its kernel. It does no I/O; its clock and its timer are
injected (the event loop's ``call_later`` by default).

Rules:

* lease: a leader may act alone while a majority of voters (itself included) spoke to it in its term
  within the last election timeout, on the monotonic clock (which keeps running while the process is
  frozen). ``lease_remaining = t_k + election_timeout - now``, ``t_k`` the k-th most recent time a
  peer spoke (k = majority - 1, a peer counted at least from ``leader_since``, when a majority voted
  for it), a peer whose connection was lost counted as never.
* early campaign: when the leader's stream to a follower ends, the follower forgets the leader and,
  with pre-vote on, campaigns after a random delay in ``[low, low + 0.3 s]``,
  ``low = max(2 heartbeats, 0.2 s)``, unless a leader is heard from again; at most three times,
  then the election timer is left to it. Without pre-vote, or when the election timer fires as
  soon, nothing is scheduled.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from scm_server.raft.core.rawnode import Status
from scm_server.raft.core.types import Message, StateRole
from scm_server.raft.view import CoreView

__all__ = ["ElectionNode", "ElectionTiming", "LeadershipPolicy"]

log = logging.getLogger(__name__)

# Early campaigns after the leader's stream to us ended (see LeadershipPolicy.stream_ended): the first waits a
# random delay in [low, low + _EARLY_CAMPAIGN_SPREAD], where low is two heartbeat intervals but at
# least _EARLY_CAMPAIGN_MIN_DELAY (time for a live leader to reconnect and be heard again); at most
# _EARLY_CAMPAIGNS of them, then the ordinary election timer is left to it.
_EARLY_CAMPAIGN_MIN_DELAY = 0.2
_EARLY_CAMPAIGN_SPREAD = 0.3
_EARLY_CAMPAIGNS = 3
_LOST = float("-inf")  # a peer's last-heard time while its connection is known to be lost


class ElectionNode(Protocol):
    """What the policy needs of the core: its status, and the two election moves."""

    def status(self) -> Status: ...

    def forget_leader(self) -> None: ...

    def campaign(self) -> None: ...


@dataclass(frozen=True)
class ElectionTiming:
    tick_interval: float
    election_tick: int
    heartbeat_tick: int
    pre_vote: bool

    @property
    def election_timeout(self) -> float:
        return self.election_tick * self.tick_interval


def _monotonic() -> float:
    return time.monotonic()  # looked up at each call, so a test may move the process's clock


def _call_later(delay: float, callback: Callable[..., None], *args: Any) -> object:
    return asyncio.get_running_loop().call_later(delay, callback, *args)


class LeadershipPolicy:
    def __init__(
        self,
        view: CoreView,
        timing: ElectionTiming,
        node: Callable[[], ElectionNode | None],
        wake: Callable[[], None],
        rng: random.Random,
        *,
        clock: Callable[[], float] = _monotonic,
        call_later: Callable[..., object] = _call_later,
    ) -> None:
        """``node`` returns the core while the driver runs (None otherwise); ``wake`` asks the driver's
        loop for a Ready; ``clock`` is monotonic seconds; ``call_later(delay, fn, *args)`` a timer."""
        self._view = view
        self._timing = timing
        self._node = node
        self._wake = wake
        self._rng = rng
        self._clock = clock
        self._call_later = call_later
        # when each peer last spoke to us in our term, as leader
        self._heard: dict[str, float] = {}
        self._leader_since = 0.0
        # the leader's stream to us ended: how often, and the campaigns it led to
        self.leader_streams_lost = 0
        self.early_campaigns = 0
        self.early_checks_pending = 0  # early-campaign timers not fired yet

    # ------------------------------------------------------------------ the lease
    def heard(self, messages: Iterable[Message]) -> None:
        """Peers spoke to us: those speaking in our term count towards the lease."""
        now = self._clock()
        term = self._view.term
        heard = self._heard
        for m in messages:
            if m.term == term:
                heard[m.frm] = now

    def became_leader(self) -> None:
        """A majority just voted for us: the lease starts now."""
        self._leader_since = self._clock()

    def peer_lost(self, peer: str) -> None:
        """Leader: the connection to ``peer`` failed or its stream to us ended. It no longer counts
        towards the lease until it speaks again: a follower that saw the same connection end may
        campaign early (see stream_ended), before a whole election timeout."""
        if self._view.role == StateRole.LEADER and peer in self._heard:
            self._heard[peer] = _LOST

    def lease_remaining(self) -> float:
        """Seconds this leader may still act alone (hand out IDs from memory, answer reads): a majority of
        voters (itself included) spoke to it in its term within the last election timeout, on the
        monotonic clock, which keeps running while the process is frozen. A leader thawed after a
        SIGSTOP or a long pause therefore knows at once that it may have been replaced, before it hears
        of the new term; the core's check-quorum only counts ticks, and ticks stop during a freeze.
        Negative when expired; 0.0 when not the leader."""
        view = self._view
        if view.role != StateRole.LEADER:
            return 0.0
        lease = self._timing.election_timeout
        voters = [v for v in view.conf.voters if v != view.node_id]
        need = (len(voters) + 1) // 2 + 1 - 1  # a majority of all voters, minus ourselves
        if need <= 0:
            return lease
        since = self._leader_since  # a majority voted for us then; a peer whose connection ended has not spoken since
        heard = self._heard
        times = sorted((_LOST if heard.get(v) == _LOST else max(heard.get(v, 0.0), since) for v in voters), reverse=True)
        return times[need - 1] + lease - self._clock()

    def last_contact(self) -> dict[str, float]:
        """Leader: seconds since each peer last spoke to it in its term (see ``RaftStatus.last_contact``)."""
        view = self._view
        if view.role != StateRole.LEADER:
            return {}
        now = self._clock()
        since = self._leader_since
        return {peer: now - t for peer, t in self._heard.items() if t != _LOST and t >= since and peer != view.node_id}

    # ------------------------------------------------------------------ early campaigns
    def stream_ended(self, peer: str) -> None:
        """The ``peer``'s message stream to us ended; if it is our leader, campaign soon.

        A killed process's connections are closed by its kernel at once (a Pod killed on Kubernetes,
        SIGKILL here), so the end of the leader's stream is an early sign that the leader is gone,
        well before a whole election timeout without heartbeats. A follower then forgets its leader
        (the core's forget_leader, etcd's ForgetLeader: a leaderless follower grants pre-votes at
        once instead of waiting for the leader's lease to run out) and campaigns after a short random
        delay unless a leader is heard from again; both remaining followers do so, each with its own
        delay, which keeps their pre-votes apart. This never disrupts a live leader: if the stream
        only reconnects, the leader's next heartbeat (a heartbeat interval later, shorter than the
        shortest delay) makes it our leader again and nothing happens; and a pre-vote wins only when
        a majority has forgotten the leader or stopped hearing it, as in any pre-vote election.

        On the leader, a follower whose stream ended stops counting towards the lease (lease_remaining)
        until it speaks again, so the lease never outlives what such an early campaign assumes.
        """
        node = self._node()
        if node is None or not peer:
            return
        self.peer_lost(peer)
        if self._view.role != StateRole.FOLLOWER or node.status().leader != peer:
            return
        self.leader_streams_lost += 1
        log.info(
            "%s: the stream from leader %s ended at term %d; forgetting it, and campaigning soon unless it "
            "is heard from again",
            self._view.node_id,
            peer,
            self._view.term,
        )
        node.forget_leader()
        self._wake()
        self._schedule_early_campaign(1)

    def _schedule_early_campaign(self, attempt: int) -> None:
        timing = self._timing
        low = max(2 * timing.heartbeat_tick * timing.tick_interval, _EARLY_CAMPAIGN_MIN_DELAY)
        if not timing.pre_vote or low >= timing.election_timeout:
            # without pre-vote a campaign bumps the term even when it cannot win, which can unseat a
            # live leader; and when the election timer fires as soon, it is the better judge
            return
        self.early_checks_pending += 1
        delay = self._rng.uniform(low, low + _EARLY_CAMPAIGN_SPREAD)
        self._call_later(delay, self._early_campaign, attempt)

    def _early_campaign(self, attempt: int) -> None:
        self.early_checks_pending -= 1
        node = self._node()
        if node is None:
            return
        st = node.status()
        if st.leader or st.role == StateRole.LEADER:
            return  # a leader is known again (the old one reconnected, or an election finished)
        self.early_campaigns += 1
        log.info(
            "%s: no leader heard since the leader's stream ended; campaigning (attempt %d)",
            self._view.node_id,
            attempt,
        )
        node.campaign()
        self._wake()
        if attempt < _EARLY_CAMPAIGNS:
            self._schedule_early_campaign(attempt + 1)
