"""The leader-loss and lease policy (:mod:`scm_server.raft.leadership`) without a server: a fake
clock, a fake core and a recorded timer stand in for the driver."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from scm_server.raft.core.rawnode import Status
from scm_server.raft.core.types import ConfState, Message, MessageType, StateRole
from scm_server.raft.leadership import ElectionTiming, LeadershipPolicy
from scm_server.raft.view import CoreView

THREE = ConfState(voters=("s1", "s2", "s3"))
TIMING = ElectionTiming(tick_interval=0.1, election_tick=100, heartbeat_tick=1, pre_vote=True)  # 10 s lease


class FakeNode:
    def __init__(self, leader: str = "", role: StateRole = StateRole.FOLLOWER) -> None:
        self.leader, self.role = leader, role
        self.moves: list[str] = []

    def status(self) -> Status:
        return Status(id="s1", leader=self.leader, role=self.role)

    def forget_leader(self) -> None:
        self.moves.append("forget")
        self.leader = ""

    def campaign(self) -> None:
        self.moves.append("campaign")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Timers:
    def __init__(self) -> None:
        self.due: list[tuple[float, Callable[..., None], tuple[Any, ...]]] = []

    def __call__(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        self.due.append((delay, fn, args))

    def fire(self) -> float:
        delay, fn, args = self.due.pop(0)
        fn(*args)
        return delay


def make(
    role: StateRole = StateRole.LEADER, node: FakeNode | None = None, timing: ElectionTiming = TIMING
) -> tuple[LeadershipPolicy, CoreView, Clock, Timers, list[int], FakeNode]:
    view = CoreView("s1", role=role, term=5, conf=THREE)
    clock, timers, wakes = Clock(), Timers(), []
    node = node or FakeNode()
    policy = LeadershipPolicy(
        view, timing, lambda: node, lambda: wakes.append(1), random.Random(7), clock=clock, call_later=timers
    )
    return policy, view, clock, timers, wakes, node


def heartbeat_resp(frm: str, term: int = 5) -> Message:
    return Message(type=MessageType.HEARTBEAT_RESP, frm=frm, to="s1", term=term)


def test_the_lease_runs_from_the_last_time_a_majority_spoke_on_the_clock() -> None:
    policy, _, clock, _, _, _ = make()
    policy.became_leader()
    assert policy.lease_remaining() == 10.0  # a majority voted for it just now
    clock.now += 4
    policy.heard([heartbeat_resp("s2")])
    clock.now += 3
    assert policy.lease_remaining() == 7.0  # s2 spoke 3 s ago: s2 and the leader are a majority
    clock.now += 30  # a frozen process wakes up: the lease is long gone, whatever the core believes
    assert policy.lease_remaining() == -23.0


def test_a_peer_heard_in_an_older_term_does_not_renew_the_lease() -> None:
    policy, _, clock, _, _, _ = make()
    policy.became_leader()
    clock.now += 5
    policy.heard([heartbeat_resp("s2", term=4), heartbeat_resp("s3", term=4)])
    assert policy.lease_remaining() == 5.0


def test_a_peer_whose_connection_was_lost_stops_counting_until_it_speaks_again() -> None:
    policy, _, clock, _, _, _ = make()
    policy.became_leader()
    policy.heard([heartbeat_resp("s2"), heartbeat_resp("s3")])
    policy.peer_lost("s2")
    assert policy.lease_remaining() == 10.0  # s3 still counts
    policy.stream_ended("s3")
    assert policy.lease_remaining() < 0
    clock.now += 1
    policy.heard([heartbeat_resp("s3")])
    assert policy.lease_remaining() == 10.0
    assert policy.last_contact() == {"s3": 0.0}  # s2 lost: absent


def test_no_lease_off_the_leader_and_a_whole_one_alone() -> None:
    follower, *_ = make(role=StateRole.FOLLOWER)
    assert follower.lease_remaining() == 0.0 and follower.last_contact() == {}
    alone, view, *_ = make()
    view.conf = ConfState(voters=("s1",))
    assert alone.lease_remaining() == 10.0


def test_a_follower_that_loses_its_leaders_stream_forgets_it_and_campaigns_after_a_short_random_delay() -> None:
    node = FakeNode(leader="s2")
    policy, _, _, timers, wakes, _ = make(role=StateRole.FOLLOWER, node=node)
    policy.stream_ended("s2")
    assert node.moves == ["forget"] and wakes and policy.leader_streams_lost == 1
    assert policy.early_checks_pending == 1
    delays = []
    while timers.due:
        delays.append(timers.fire())
    assert node.moves == ["forget", "campaign", "campaign", "campaign"]  # at most three, then the election timer
    assert policy.early_campaigns == 3 and policy.early_checks_pending == 0
    assert all(0.2 <= d <= 0.5 for d in delays) and len(set(delays)) == 3


def test_no_early_campaign_once_a_leader_is_heard_again() -> None:
    node = FakeNode(leader="s2")
    policy, _, _, timers, _, _ = make(role=StateRole.FOLLOWER, node=node)
    policy.stream_ended("s2")
    node.leader = "s2"  # its next heartbeat on the reconnected stream
    timers.fire()
    assert node.moves == ["forget"] and policy.early_campaigns == 0 and not timers.due


def test_the_end_of_a_stream_that_is_not_the_leaders_changes_nothing_on_a_follower() -> None:
    node = FakeNode(leader="s2")
    policy, _, _, timers, _, _ = make(role=StateRole.FOLLOWER, node=node)
    policy.stream_ended("s3")
    assert node.moves == [] and not timers.due and policy.leader_streams_lost == 0


def test_without_pre_vote_or_with_a_short_election_timeout_the_election_timer_decides() -> None:
    for timing in (
        ElectionTiming(tick_interval=0.1, election_tick=100, heartbeat_tick=1, pre_vote=False),
        ElectionTiming(tick_interval=0.01, election_tick=10, heartbeat_tick=1, pre_vote=True),  # 0.1 s timeout
    ):
        node = FakeNode(leader="s2")
        policy, _, _, timers, _, _ = make(role=StateRole.FOLLOWER, node=node, timing=timing)
        policy.stream_ended("s2")
        assert node.moves == ["forget"] and not timers.due


def test_a_stopped_driver_neither_forgets_nor_campaigns() -> None:
    view = CoreView("s1", role=StateRole.FOLLOWER, term=5, conf=THREE)
    timers = Timers()
    policy = LeadershipPolicy(view, TIMING, lambda: None, lambda: None, random.Random(1), call_later=timers)
    policy.stream_ended("s2")
    assert policy.leader_streams_lost == 0 and not timers.due
