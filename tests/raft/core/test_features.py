"""Beyond the paper: pre-vote, check-quorum, ReadIndex, transfer, learners, conf changes, snapshots,
flow control and the proposal queue bound."""

from __future__ import annotations

import pytest

from scm_server.raft.core.config import Config, RaftConfigError, ReadOnlyOption
from scm_server.raft.core.rawnode import RawNode
from scm_server.raft.core.storage import CompactedError, MemoryStorage
from scm_server.raft.core.types import (
    ConfChange,
    ConfChangeType,
    ConfState,
    Entry,
    EntryType,
    ProposalDroppedError,
    Snapshot,
    SnapshotMetadata,
    StateRole,
)

from .cluster import Cluster, FixedRandom
from .util import MT, msg, node_with_log, of_type, persist

V3 = ("1", "2", "3")


def _leader(**cfg: object) -> tuple[RawNode, MemoryStorage]:
    node, st = node_with_log("1", V3, **cfg)
    node.campaign()
    r = node.raft
    if r.role == StateRole.PRE_CANDIDATE:
        r.step(msg(MT.PRE_VOTE_RESP, "2", "1", r.term + 1))
    r.step(msg(MT.VOTE_RESP, "2", "1", r.term))
    assert r.role == StateRole.LEADER
    persist(node, st)
    return node, st


def _commit_noop(node: RawNode, st: MemoryStorage) -> None:
    r = node.raft
    for v in r.conf.voters:
        if v != r.id:
            r.step(msg(MT.APPEND_RESP, v, r.id, r.term, index=r.log.last_index()))
    persist(node, st)
    assert r.committed_entry_in_current_term()


# ---- pre-vote / check-quorum


def test_lost_pre_vote_does_not_increase_anyones_term() -> None:
    node, _ = node_with_log("1", V3, (1,), term=1, check_quorum=False)
    r = node.raft
    node.campaign()
    assert r.role == StateRole.PRE_CANDIDATE and r.term == 1
    r.step(msg(MT.PRE_VOTE_RESP, "2", "1", 1, reject=True))
    r.step(msg(MT.PRE_VOTE_RESP, "3", "1", 1, reject=True))
    assert r.role == StateRole.FOLLOWER and r.term == 1
    voter, _ = node_with_log("2", V3, (1, 1), term=1, check_quorum=False)
    voter.raft.step(msg(MT.PRE_VOTE, "1", "2", 2, index=1, log_term=1))
    assert voter.raft.term == 1  # a pre-vote request never changes the voter's term
    assert of_type(voter.raft.read_messages(), MT.PRE_VOTE_RESP)[0].reject


def test_voter_with_live_leader_ignores_votes_unless_transfer() -> None:
    node, _ = node_with_log("2", V3, (1,), term=1)
    r = node.raft
    r.step(msg(MT.HEARTBEAT, "1", "2", 1))
    r.read_messages()
    r.step(msg(MT.VOTE, "3", "2", 2, index=1, log_term=1))
    assert r.term == 1 and r.read_messages() == []
    r.step(msg(MT.VOTE, "3", "2", 2, index=1, log_term=1, context=b"transfer"))
    assert r.term == 2 and r.vote == "3"


def test_check_quorum_leader_steps_down_without_quorum() -> None:
    node, _ = _leader()
    r = node.raft
    for _ in range(2 * r.election_timeout):
        node.tick()
    assert r.role == StateRole.FOLLOWER


def test_lease_based_reads_require_check_quorum() -> None:
    with pytest.raises(RaftConfigError, match="requires check_quorum"):
        Config(id="1", check_quorum=False, read_only_option=ReadOnlyOption.LEASE_BASED).validate()


# ---- ReadIndex


def test_read_index_needs_current_term_commit_and_heartbeat_quorum() -> None:
    node, _st = _leader()
    r = node.raft
    node.read_index(b"ctx1")
    assert not r.read_states and not of_type(r.read_messages(), MT.HEARTBEAT)
    for v in ("2", "3"):
        r.step(msg(MT.APPEND_RESP, v, "1", r.term, index=1))
    assert r.log.committed == 1
    hbs = [m for m in r.read_messages() if m.type == MT.HEARTBEAT and m.context == b"ctx1"]
    assert len(hbs) == 2
    r.step(msg(MT.HEARTBEAT_RESP, "2", "1", r.term, context=b"ctx1"))
    rd = node.ready()
    assert [(s.index, s.request_ctx) for s in rd.read_states] == [(1, b"ctx1")]
    node.advance(rd)


def test_lease_based_read_answers_without_heartbeat_round() -> None:
    node, st = _leader(read_only_option=ReadOnlyOption.LEASE_BASED)
    _commit_noop(node, st)
    node.read_index(b"x")
    assert [s.index for s in node.raft.read_states] == [1]


def test_follower_read_is_forwarded_to_leader() -> None:
    c = Cluster.of(3)
    c.campaign("1")
    c.nodes["2"].read_index(b"r")
    c.deliver(c.process("2"))
    assert any(m.type == MT.READ_INDEX_RESP for m in c.delivered)
    assert [(s.index, s.request_ctx) for s in c.read_states["2"]] == [(1, b"r")]


# ---- leader transfer


def test_timeout_now_is_idempotent() -> None:
    node, _ = node_with_log("2", V3, (1,), term=1)
    r = node.raft
    r.step(msg(MT.TIMEOUT_NOW, "1", "2", 1))
    assert r.role == StateRole.CANDIDATE and r.term == 2
    r.step(msg(MT.TIMEOUT_NOW, "1", "2", 1))  # duplicate, stale term
    assert r.term == 2
    votes = of_type(r.read_messages(), MT.VOTE)
    assert len(votes) == 2 and all(v.context == b"transfer" for v in votes)


def test_transfer_refuses_proposals_and_aborts_after_election_timeout() -> None:
    node, st = _leader()
    _commit_noop(node, st)
    node.transfer_leader("3")
    with pytest.raises(ProposalDroppedError, match="transfer"):
        node.propose(b"x")
    r = node.raft
    for _ in range(r.election_timeout):
        r.prs["2"].recent_active = r.prs["3"].recent_active = True
        node.tick()
    assert r.lead_transferee == "" and r.role == StateRole.LEADER
    node.propose(b"x")


# ---- membership


def test_conf_change_waits_for_noop_and_one_at_a_time() -> None:
    node, st = _leader()
    with pytest.raises(ProposalDroppedError, match="no-op"):
        node.propose_conf_change(ConfChange(ConfChangeType.ADD_LEARNER, "4"))
    _commit_noop(node, st)
    node.propose_conf_change(ConfChange(ConfChangeType.ADD_LEARNER, "4"))
    assert node.raft.conf.learners == ("4",)  # effective on append
    with pytest.raises(ProposalDroppedError, match="one change at a time"):
        node.propose_conf_change(ConfChange(ConfChangeType.ADD_NODE, "5"))


def test_learner_is_not_counted_in_commit_quorum() -> None:
    node, st = node_with_log("1", ("1", "2"), learners=("3", "4"), check_quorum=False)
    node.campaign()
    r = node.raft
    if r.role != StateRole.LEADER:
        r.step(msg(MT.PRE_VOTE_RESP, "2", "1", r.term + 1))
        r.step(msg(MT.VOTE_RESP, "2", "1", r.term))
    persist(node, st)
    for learner in ("3", "4"):
        r.step(msg(MT.APPEND_RESP, learner, "1", r.term, index=r.log.last_index()))
    assert r.log.committed == 0
    r.step(msg(MT.APPEND_RESP, "2", "1", r.term, index=r.log.last_index()))
    assert r.log.committed == r.log.last_index()


def test_learner_never_campaigns() -> None:
    node, _ = node_with_log("3", ("1", "2"), learners=("3",))
    for _ in range(100):
        node.tick()
    assert node.raft.role == StateRole.FOLLOWER and node.raft.term == 0


def test_truncated_conf_entry_rolls_back_configuration() -> None:
    node, _st = node_with_log("2", V3, (1,), term=1, commit=1)
    r = node.raft
    cc = Entry(term=1, index=2, type=EntryType.CONF_CHANGE, data=ConfChange(ConfChangeType.ADD_NODE, "4").encode())
    r.step(msg(MT.APPEND, "1", "2", 1, index=1, log_term=1, entries=(cc,)))
    assert r.conf.voters == ("1", "2", "3", "4")
    r.step(msg(MT.APPEND, "3", "2", 2, index=1, log_term=1, entries=(Entry(term=2, index=2),)))
    assert r.conf.voters == V3


def test_restart_rebuilds_uncommitted_configuration_history() -> None:
    node, st = node_with_log("2", V3, (1,), term=1, commit=1)
    cc = Entry(term=1, index=2, type=EntryType.CONF_CHANGE, data=ConfChange(ConfChangeType.REMOVE_NODE, "3").encode())
    node.raft.step(msg(MT.APPEND, "1", "2", 1, index=1, log_term=1, entries=(cc,)))
    persist(node, st)
    again = RawNode(Config(id="2"), st, FixedRandom())
    assert again.raft.conf.voters == ("1", "2")
    assert again.raft.has_pending_conf()
    again.raft.step(msg(MT.APPEND, "3", "2", 2, index=1, log_term=1, entries=(Entry(term=2, index=2),)))
    assert again.raft.conf.voters == V3


# ---- snapshots


def _snap(index: int, term: int) -> Snapshot:
    return Snapshot(SnapshotMetadata(index=index, term=term, conf_state=ConfState(voters=V3)))


def test_snapshot_at_or_below_commit_is_ignored() -> None:
    node, _ = node_with_log("2", V3, (1, 1, 1), term=1, commit=3)
    r = node.raft
    r.step(msg(MT.SNAPSHOT, "1", "2", 1, snapshot=_snap(2, 1)))
    assert r.log.unstable.snapshot is None
    assert of_type(r.read_messages(), MT.APPEND_RESP)[-1].index == 3


def test_snapshot_matching_local_entry_keeps_suffix() -> None:
    node, _ = node_with_log("2", V3, (1, 1, 1, 1), term=1, commit=1)
    r = node.raft
    r.step(msg(MT.SNAPSHOT, "1", "2", 1, snapshot=_snap(3, 1)))
    assert r.log.unstable.snapshot is None
    assert r.log.committed == 3 and r.log.last_index() == 4


def test_snapshot_with_conflicting_log_restores() -> None:
    node, st = node_with_log("2", V3, (1, 1, 1, 1), term=2, commit=1)
    r = node.raft
    r.step(msg(MT.SNAPSHOT, "1", "2", 2, snapshot=_snap(3, 2)))
    rd = node.ready()
    assert rd.snapshot is not None and rd.snapshot.metadata.index == 3 and rd.committed_entries == ()
    st.apply_snapshot(rd.snapshot)
    node.advance(rd)
    assert r.log.last_index() == 3 and r.log.applied == 3


# ---- flow control and proposal bound


def test_inflight_window_limits_pipelining_and_batches_by_size() -> None:
    node, st = _leader(max_inflight_msgs=2, max_size_per_msg=40)
    _commit_noop(node, st)
    r = node.raft
    r.read_messages()
    for i in range(6):
        node.propose(b"%02d" % i)  # 2 + 16 bytes each: two per APPEND
        r.flush()
    apps = [m for m in r.read_messages() if m.type == MT.APPEND and m.to == "2"]
    assert len(apps) == 2 and all(len(m.entries) <= 2 for m in apps)
    assert r.prs["2"].is_paused()
    r.step(msg(MT.APPEND_RESP, "2", "1", r.term, index=apps[0].entries[-1].index))
    more = [m for m in r.read_messages() if m.type == MT.APPEND and m.to == "2"]
    assert more and more[0].index == apps[-1].entries[-1].index


def test_proposal_queue_bound_has_a_clear_error() -> None:
    node, _st = _leader(max_uncommitted_entries=3)
    node.propose(b"a")
    node.propose(b"b")
    with pytest.raises(ProposalDroppedError) as err:
        node.propose(b"c")
    assert str(err.value) == (
        "proposal queue full: 3 uncommitted entries (max_uncommitted_entries=3); retry later"
    )


def test_follower_refuses_proposals() -> None:
    node, _ = node_with_log("2", V3)
    with pytest.raises(ProposalDroppedError, match="not the leader"):
        node.propose(b"x")


def test_ready_must_be_advanced_before_the_next() -> None:
    node, _ = _leader()
    node.propose(b"x")
    node.ready()
    with pytest.raises(RuntimeError, match="advance"):
        node.ready()


# ---- MemoryStorage


def test_memory_storage_append_truncates_and_compacts() -> None:
    st = MemoryStorage()
    st.append([Entry(1, 1), Entry(1, 2), Entry(1, 3)])
    st.append([Entry(2, 2)])
    assert st.last_index() == 2 and st.term(2) == 2
    st.append([Entry(2, 3), Entry(2, 4)])
    st.compact(2)
    assert st.first_index() == 3 and st.term(2) == 2
    with pytest.raises(CompactedError):
        st.entries(2, 4)
    assert [e.index for e in st.entries(3, 5, max_size=1)] == [3]
    cs, snap = ConfState(voters=("1",)), None
    snap = st.create_snapshot(4, cs, b"data")
    assert snap.metadata.term == 2
    assert st.initial_state()[1] == cs


# ---- driver-facing contract


def test_messages_travel_in_the_ready_that_persists_their_state() -> None:
    """A candidate's VOTE requests come in the same Ready as its (term, vote=self); a follower's
    APPEND_RESP comes with the entries it acknowledges (the driver persists before sending)."""
    node, _ = node_with_log("1", V3, (1,), term=1, pre_vote=False)
    node.campaign()
    rd = node.ready()
    assert rd.hard_state is not None and (rd.hard_state.term, rd.hard_state.vote) == (2, "1") and rd.must_sync
    assert {m.type for m in rd.messages} == {MT.VOTE}
    node.advance(rd)
    f, _ = node_with_log("2", V3, (1,), term=1)
    f.step(msg(MT.APPEND, "1", "2", 1, index=1, log_term=1, entries=(Entry(1, 2, data=b"x"),)))
    rd = f.ready()
    assert [e.index for e in rd.entries] == [2] and rd.must_sync
    assert [(m.type, m.index) for m in rd.messages] == [(MT.APPEND_RESP, 2)]


def test_restart_recovers_term_vote_and_log() -> None:
    node, st = node_with_log("2", V3, (1,), term=1)
    node.step(msg(MT.VOTE, "3", "2", 5, index=1, log_term=1))
    persist(node, st)
    again = RawNode(Config(id="2"), st, FixedRandom())
    s = again.status()
    assert (s.term, s.vote, s.role) == (5, "3", StateRole.FOLLOWER)
    again.step(msg(MT.VOTE, "1", "2", 5, index=1, log_term=1))
    assert of_type(again.raft.read_messages(), MT.VOTE_RESP)[0].reject


def test_snapshot_report_failure_and_unreachable_move_peer_to_probe() -> None:
    node, _st = _leader()
    r = node.raft
    r.prs["2"].become_snapshot(10)
    node.report_snapshot("2", ok=False)
    pr = r.prs["2"]
    assert pr.state.name == "PROBE" and pr.msg_app_flow_paused  # wait for a heartbeat answer
    r.read_messages()
    r.step(msg(MT.HEARTBEAT_RESP, "2", "1", r.term))
    probes = [m for m in of_type(r.read_messages(), MT.APPEND) if m.to == "2"]
    assert len(probes) == 1 and probes[0].index == 0  # probing again from the start of its log
    assert pr.msg_app_flow_paused  # one probe at a time
    r.step(msg(MT.APPEND_RESP, "3", "1", r.term, index=r.log.last_index()))
    assert r.prs["3"].state.name == "REPLICATE"
    node.report_unreachable("3")
    assert r.prs["3"].state.name == "PROBE"


def test_status_reports_progress_on_the_leader_only() -> None:
    node, _st = _leader()
    s = node.status()
    assert s.role == StateRole.LEADER and set(s.progress) == set(V3)
    assert s.progress["1"].match == s.last_index
    f, _ = node_with_log("2", V3)
    assert f.status().progress == {}
