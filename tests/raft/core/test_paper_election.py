"""Raft paper §5.1-§5.2 (basics and leader election): one test per claim, like etcd's raft_paper_test.go."""

from __future__ import annotations

import random

import pytest

from scm_server.raft.core.types import StateRole

from .cluster import Cluster, SeqRandom, new_node
from .util import MT, msg, node_with_log, of_type, persist

V3 = ("1", "2", "3")


def _become(node_role: StateRole, nid: str = "1") -> tuple:
    node, st = node_with_log(nid, V3, pre_vote=False, check_quorum=False)
    r = node.raft
    if node_role == StateRole.CANDIDATE:
        node.campaign()
    elif node_role == StateRole.LEADER:
        node.campaign()
        r.step(msg(MT.VOTE_RESP, "2", nid, r.term))
    assert r.role == node_role
    persist(node, st)
    return node, st


@pytest.mark.parametrize("role", [StateRole.FOLLOWER, StateRole.CANDIDATE, StateRole.LEADER])
def test_server_updates_term_and_reverts_to_follower_on_higher_term(role: StateRole) -> None:
    """§5.1: a server that sees a larger term updates its term; a candidate or leader reverts to follower."""
    node, _ = _become(role)
    r = node.raft
    new_term = r.term + 5
    r.step(msg(MT.APPEND, "2", "1", new_term))
    assert r.term == new_term
    assert r.role == StateRole.FOLLOWER
    assert r.lead == "2"
    assert r.hard_state().term == new_term


def test_stale_term_requests_are_rejected() -> None:
    """§5.1: a request with a stale term is ignored (nothing changes, nothing is sent)."""
    node, _st = node_with_log("1", V3, (1, 2), term=3, pre_vote=False, check_quorum=False)
    r = node.raft
    r.step(msg(MT.APPEND, "2", "1", 2, index=2, log_term=2, entries=()))
    assert r.term == 3 and r.lead == ""
    assert r.read_messages() == []


def test_servers_start_as_followers() -> None:
    """§5.2: when servers start up, they begin as followers."""
    node, _ = new_node("1", V3)
    assert node.raft.role == StateRole.FOLLOWER


def test_leader_sends_heartbeats_every_heartbeat_tick() -> None:
    """§5.2: a leader sends periodic heartbeats to all followers to maintain its authority."""
    node, _st = _become(StateRole.LEADER)
    r = node.raft
    for _ in range(r.heartbeat_timeout):
        node.tick()
    hb = of_type(r.read_messages(), MT.HEARTBEAT)
    assert sorted(m.to for m in hb) == ["2", "3"]
    assert all(m.term == r.term for m in hb)


@pytest.mark.parametrize("role", [StateRole.FOLLOWER, StateRole.CANDIDATE])
def test_election_timeout_starts_a_new_election(role: StateRole) -> None:
    """§5.2: without communication over the election timeout, a server increments its term, votes for
    itself, becomes candidate and sends RequestVote to every other server."""
    node, _ = _become(role)
    r = node.raft
    term = r.term
    for _ in range(r.randomized_election_timeout):
        node.tick()
    assert r.term == term + 1
    assert r.role == StateRole.CANDIDATE
    assert r.vote == "1"
    votes = of_type(r.read_messages(), MT.VOTE)
    assert sorted(m.to for m in votes) == ["2", "3"]
    assert all(m.term == term + 1 for m in votes)


@pytest.mark.parametrize(
    "size,granted,rejected,want",
    [
        (1, set(), set(), StateRole.LEADER),
        (3, {"2"}, set(), StateRole.LEADER),
        (3, {"2", "3"}, set(), StateRole.LEADER),
        (5, {"2", "3"}, set(), StateRole.LEADER),
        (5, {"2"}, set(), StateRole.CANDIDATE),
        (3, set(), set(), StateRole.CANDIDATE),
        (3, set(), {"2", "3"}, StateRole.FOLLOWER),
        (5, {"2"}, {"3", "4"}, StateRole.CANDIDATE),
        (5, {"2"}, {"3", "4", "5"}, StateRole.FOLLOWER),
    ],
)
def test_candidate_wins_with_majority_and_loses_on_majority_rejection(
    size: int, granted: set[str], rejected: set[str], want: StateRole
) -> None:
    """§5.2: a candidate wins with votes from a majority; it returns to follower when a majority refuses."""
    voters = tuple(str(i) for i in range(1, size + 1))
    node, _ = node_with_log("1", voters, pre_vote=False, check_quorum=False)
    node.campaign()
    r = node.raft
    for v in sorted(granted):
        r.step(msg(MT.VOTE_RESP, v, "1", r.term))
    for v in sorted(rejected):
        r.step(msg(MT.VOTE_RESP, v, "1", r.term, reject=True))
    assert r.role == want
    assert r.term == 1


@pytest.mark.parametrize(
    "vote,candidate,reject",
    [("", "2", False), ("", "3", False), ("2", "2", False), ("3", "3", False), ("2", "3", True), ("3", "2", True)],
)
def test_follower_votes_at_most_once_per_term(vote: str, candidate: str, reject: bool) -> None:
    """§5.2: each server votes for at most one candidate in a term, first-come-first-served; the vote
    travels in the same Ready as the hard state that records it (persisted before it is sent)."""
    node, _st = node_with_log("1", V3, term=1, vote=vote, pre_vote=False, check_quorum=False)
    r = node.raft
    r.step(msg(MT.VOTE, candidate, "1", 1))
    rd = node.ready()
    resp = [m for m in rd.messages if m.type == MT.VOTE_RESP]
    assert len(resp) == 1 and resp[0].reject == reject
    if not reject and not vote:
        assert rd.hard_state is not None and rd.hard_state.vote == candidate and rd.must_sync
    node.advance(rd)


def test_vote_is_never_cleared_without_a_term_change() -> None:
    """CCF#8094: a same-term step-down must not erase the vote (double voting)."""
    node, _ = node_with_log("1", V3, term=3, vote="2", pre_vote=False, check_quorum=False)
    r = node.raft
    r.step(msg(MT.APPEND, "2", "1", 3, index=0, log_term=0))
    assert r.vote == "2"
    r.step(msg(MT.VOTE, "3", "1", 3))
    assert of_type(r.read_messages(), MT.VOTE_RESP)[-1].reject
    assert r.vote == "2"


@pytest.mark.parametrize("sender_term", [1, 2])
def test_candidate_reverts_to_follower_on_append_from_leader(sender_term: int) -> None:
    """§5.2: a candidate receiving AppendEntries from a leader with term >= its own becomes follower."""
    node, _ = node_with_log("1", V3, term=0, pre_vote=False, check_quorum=False)
    node.campaign()
    r = node.raft
    assert r.term == 1
    r.step(msg(MT.APPEND, "2", "1", sender_term))
    assert r.role == StateRole.FOLLOWER
    assert r.term == sender_term and r.lead == "2"


def test_election_timeouts_are_randomized_in_range() -> None:
    """§5.2: election timeouts are chosen randomly from [election_tick, 2*election_tick)."""
    rng = random.Random(7)
    from scm_server.raft.core.rawnode import Config, RawNode
    from scm_server.raft.core.storage import MemoryStorage
    from scm_server.raft.core.types import ConfState

    node = RawNode(Config(id="1", election_tick=10), MemoryStorage(ConfState(voters=V3)), rng)
    seen = set()
    for _ in range(200):
        node.raft.become_follower(node.raft.term + 1, "")
        t = node.raft.randomized_election_timeout
        assert 10 <= t < 20
        seen.add(t)
    assert len(seen) > 5  # actually randomized


def test_follower_times_out_exactly_at_its_randomized_timeout() -> None:
    """§5.2: split votes are rare because each server waits its own random timeout."""
    from scm_server.raft.core.rawnode import Config, RawNode
    from scm_server.raft.core.storage import MemoryStorage
    from scm_server.raft.core.types import ConfState

    fired = []
    for offset in (0, 3, 9):
        node = RawNode(
            Config(id="1", pre_vote=False), MemoryStorage(ConfState(voters=V3)), SeqRandom([offset])
        )
        ticks = 0
        while node.raft.role == StateRole.FOLLOWER:
            node.tick()
            ticks += 1
            assert ticks < 100
        fired.append(ticks)
    assert fired == [10, 13, 19]


def test_cluster_elects_exactly_one_leader() -> None:
    """§5.2: election safety in a simple run: one leader, all agree on it and on the term."""
    c = Cluster.of(5)
    c.campaign("3")
    assert c.leader() == "3"
    assert {n.raft.term for n in c.nodes.values()} == {1}
    assert {n.raft.lead for n in c.nodes.values()} == {"3"}
