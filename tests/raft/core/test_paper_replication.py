"""Raft paper §5.3 (log replication) and §5.4 (safety), including Figures 7 and 8."""

from __future__ import annotations

import pytest

from scm_server.raft.core.types import Entry, EntryType, StateRole

from .cluster import Cluster
from .util import MT, ents, msg, node_with_log, of_type, persist

V3 = ("1", "2", "3")
NOQ = {"pre_vote": False, "check_quorum": False}


def _leader(voters: tuple[str, ...] = V3, terms: tuple[int, ...] = (), term: int = 0, **cfg: object):
    """Node 1 as leader of `voters` at term+1 with log `terms` (+ its no-op), Ready handled."""
    node, st = node_with_log("1", voters, terms, term=term, **NOQ, **cfg)
    node.campaign()
    r = node.raft
    for v in voters[1:]:
        r.step(msg(MT.VOTE_RESP, v, "1", r.term))
    assert r.role == StateRole.LEADER
    persist(node, st)
    return node, st


def test_leader_replicates_a_proposal_to_every_follower() -> None:
    """§5.3: the leader appends the command to its log, then issues AppendEntries in parallel."""
    node, st = _leader()
    r = node.raft
    li = r.log.last_index()
    for v in ("2", "3"):
        r.step(msg(MT.APPEND_RESP, v, "1", r.term, index=li))
    persist(node, st)
    idx = node.propose(b"some data")
    assert idx == li + 1
    apps = of_type(r.read_messages(), MT.APPEND)
    assert sorted(m.to for m in apps) == ["2", "3"]
    for m in apps:
        assert (m.index, m.log_term) == (li, 1)
        assert m.entries == (Entry(term=1, index=li + 1, data=b"some data"),)
        assert m.commit == li


def test_leader_commits_after_majority_and_tells_followers() -> None:
    """§5.3: an entry is committed once the leader replicated it on a majority; later AppendEntries
    carry the commit index, and the leader applies it."""
    node, st = _leader()
    r = node.raft
    for v in ("2", "3"):  # both followers acknowledged the no-op: they are in REPLICATE now
        r.step(msg(MT.APPEND_RESP, v, "1", r.term, index=1))
    rd = node.ready()
    assert [e.data for e in rd.committed_entries] == [b""]
    node.advance(rd)
    idx = node.propose(b"x")
    persist(node, st)
    assert r.log.committed == 1
    r.step(msg(MT.APPEND_RESP, "2", "1", r.term, index=idx))
    assert r.log.committed == idx
    apps = of_type(r.read_messages(), MT.APPEND)
    assert {m.to for m in apps} == {"2", "3"} and all(m.commit == idx for m in apps)
    rd = node.ready()
    assert [e.data for e in rd.committed_entries] == [b"x"]
    node.advance(rd)


@pytest.mark.parametrize(
    "size,acceptors,committed",
    [
        (1, set(), True),
        (3, set(), False),
        (3, {"2"}, True),
        (3, {"2", "3"}, True),
        (5, set(), False),
        (5, {"2"}, False),
        (5, {"2", "3"}, True),
        (5, {"2", "3", "4", "5"}, True),
    ],
)
def test_leader_acknowledges_commit_only_with_a_majority(size: int, acceptors: set[str], committed: bool) -> None:
    """§5.3: committed = replicated on a majority (the leader counts itself once its own write is durable)."""
    voters = tuple(str(i) for i in range(1, size + 1))
    node, st = _leader(voters)
    r = node.raft
    idx = node.propose(b"x")
    persist(node, st)
    for a in sorted(acceptors):
        r.step(msg(MT.APPEND_RESP, a, "1", r.term, index=idx))
    assert (r.log.committed >= idx) == committed


def test_leader_counts_itself_only_after_its_own_write_is_durable() -> None:
    """The leader's own acknowledgement comes from advance(), i.e. after the driver persisted the entry."""
    node, st = _leader(("1", "2"))
    r = node.raft
    idx = node.propose(b"x")
    r.step(msg(MT.APPEND_RESP, "2", "1", r.term, index=idx))
    assert r.log.committed < idx  # follower acked, but our copy is not durable yet
    persist(node, st)
    assert r.log.committed == idx


def test_committing_an_entry_commits_all_preceding_entries() -> None:
    """§5.3: committing a leader's entry also commits all preceding entries, including earlier terms'."""
    node, st = _leader(terms=(1, 2), term=2)
    r = node.raft
    idx = node.propose(b"some data")
    persist(node, st)
    for v in ("2", "3"):
        r.step(msg(MT.APPEND_RESP, v, "1", r.term, index=idx))
    rd = node.ready()
    assert [(e.index, e.term) for e in rd.committed_entries] == [(1, 1), (2, 2), (3, 3), (4, 3)]
    node.advance(rd)


def test_follower_commits_what_the_leader_committed() -> None:
    """§5.3: once a follower learns an entry is committed, it applies it (only once it is durable locally)."""
    node, st = node_with_log("1", V3, term=1, **NOQ)
    r = node.raft
    new = tuple(Entry(term=1, index=i, data=b"d%d" % i) for i in (1, 2, 3))
    r.step(msg(MT.APPEND, "2", "1", 1, index=0, log_term=0, entries=new, commit=2))
    assert r.log.committed == 2
    rd = node.ready()
    assert rd.committed_entries == ()  # not durable yet: they are in this very Ready
    assert rd.entries == new
    st.append(rd.entries)
    node.advance(rd)
    rd = node.ready()
    assert [e.index for e in rd.committed_entries] == [1, 2]


@pytest.mark.parametrize(
    "index,log_term,reject,hint",
    [(0, 0, False, 0), (1, 1, False, 0), (2, 2, False, 0), (2, 1, True, 1), (3, 3, True, 2)],
)
def test_follower_checks_log_matching(index: int, log_term: int, reject: bool, hint: int) -> None:
    """§5.3: a follower refuses new entries unless it has the entry at prevLogIndex with prevLogTerm;
    the rejection carries a hint (index, term) for a fast back-off."""
    node, _ = node_with_log("1", V3, (1, 2), term=2, **NOQ)
    r = node.raft
    r.step(msg(MT.APPEND, "2", "1", 2, index=index, log_term=log_term))
    resp = of_type(r.read_messages(), MT.APPEND_RESP)[-1]
    assert resp.reject == reject
    if reject:
        assert resp.reject_hint == hint


@pytest.mark.parametrize(
    "index,log_term,new,want",
    [
        (2, 2, [(3, 3)], [1, 2, 3]),
        (1, 1, [(2, 3), (3, 4)], [1, 3, 4]),
        (0, 0, [(1, 1)], [1, 2]),  # no conflict: the rest of the log is kept
        (0, 0, [(1, 3)], [3]),
    ],
)
def test_follower_truncates_only_on_a_real_conflict(
    index: int, log_term: int, new: list[tuple[int, int]], want: list[int]
) -> None:
    """§5.3: a conflicting entry and all that follow it are deleted; entries that match are kept
    (raftos#26: never erase a non-conflicting suffix because of a stale/short AppendEntries)."""
    node, st = node_with_log("1", V3, (1, 2), term=2, **NOQ)
    r = node.raft
    entries = tuple(Entry(term=t, index=i) for i, t in new)
    r.step(msg(MT.APPEND, "2", "1", 4, index=index, log_term=log_term, entries=entries))
    persist(node, st)
    assert [st.term(i) for i in range(1, st.last_index() + 1)] == want


FIG7_LEADER = (1, 1, 1, 4, 4, 5, 5, 6, 6, 6)
FIG7_FOLLOWERS = {
    "a": (1, 1, 1, 4, 4, 5, 5, 6, 6),
    "b": (1, 1, 1, 4),
    "c": (1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 6),
    "d": (1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 7, 7),
    "e": (1, 1, 1, 4, 4, 4, 4),
    "f": (1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3),
}


@pytest.mark.parametrize("case", sorted(FIG7_FOLLOWERS))
def test_figure7_leader_brings_every_follower_log_in_line(case: str) -> None:
    """§5.3 / Figure 7: whatever the follower's log (missing, extra or conflicting entries), the leader
    of term 8 makes it identical to its own, backing off quickly with the follower's hints."""
    leader, lst = node_with_log("1", V3, FIG7_LEADER, term=7, **NOQ)
    follower, fst = node_with_log("2", V3, FIG7_FOLLOWERS[case], term=7, **NOQ)
    c = Cluster()
    c.add("1", leader, lst)
    c.add("2", follower, fst)
    leader.campaign()
    c.deliver(c.process("1"))
    leader.raft.step(msg(MT.VOTE_RESP, "3", "1", 8))  # node 3 (absent) votes for the leader
    assert leader.raft.role == StateRole.LEADER
    c.deliver(c.process("1"))
    c.tick("1")  # a heartbeat round in case the follower needed one more probe
    lterms = [lst.term(i) for i in range(1, lst.last_index() + 1)]
    fterms = [fst.term(i) for i in range(1, fst.last_index() + 1)]
    assert lterms == [*FIG7_LEADER, 8]
    assert fterms == lterms
    rejections = [m for m in c.delivered if m.type == MT.APPEND_RESP and m.reject]
    assert len(rejections) <= 2  # fast back-off, not one round trip per entry
    assert leader.raft.log.committed == 11


def test_leader_backs_off_next_index_on_rejection() -> None:
    """§5.3: after a rejection the leader decrements nextIndex and retries."""
    node, _st = _leader(terms=(1, 1, 1), term=1)
    r = node.raft
    pr = r.prs["2"]
    assert pr.next == 4  # PROBE: the first APPEND (prev=3, [no-op 4]) is outstanding
    r.step(msg(MT.APPEND_RESP, "2", "1", r.term, index=3, reject=True, reject_hint=1, log_term=1))
    assert pr.next == 2
    app = of_type(r.read_messages(), MT.APPEND)[-1]
    assert (app.to, app.index, app.log_term) == ("2", 1, 1)


@pytest.mark.parametrize("terms,want_term,want_index", [((), 0, 0), ((1,), 1, 1), ((1, 2), 2, 2)])
def test_candidate_sends_its_last_log_position_in_vote_requests(
    terms: tuple[int, ...], want_term: int, want_index: int
) -> None:
    """§5.4.1: RequestVote includes the candidate's last log index and term."""
    node, _ = node_with_log("1", V3, terms, **NOQ)
    node.campaign()
    votes = of_type(node.raft.read_messages(), MT.VOTE)
    assert len(votes) == 2
    assert all((m.log_term, m.index) == (want_term, want_index) for m in votes)


@pytest.mark.parametrize(
    "terms,log_term,index,reject",
    [
        ((1, 1), 1, 1, True),  # same last term, shorter log
        ((1, 1), 1, 2, False),
        ((1, 1), 1, 3, False),
        ((1, 1), 2, 1, False),  # higher last term wins even if shorter
        ((2,), 1, 5, True),  # lower last term loses even if longer
        ((2,), 2, 1, False),
        ((2,), 3, 1, False),
    ],
)
def test_voter_denies_candidates_with_less_up_to_date_logs(
    terms: tuple[int, ...], log_term: int, index: int, reject: bool
) -> None:
    """§5.4.1: a voter denies its vote if its own log is more up-to-date than the candidate's."""
    node, _ = node_with_log("1", V3, terms, term=3, **NOQ)
    r = node.raft
    r.step(msg(MT.VOTE, "2", "1", 4, log_term=log_term, index=index))
    resp = of_type(r.read_messages(), MT.VOTE_RESP)[-1]
    assert resp.reject == reject


@pytest.mark.parametrize("index,committed", [(1, False), (2, False), (3, True)])
def test_leader_only_commits_by_counting_entries_of_its_term(index: int, committed: bool) -> None:
    """§5.4.2: only entries of the leader's current term are committed by counting replicas."""
    node, _st = _leader(terms=(1, 2), term=2)  # leader of term 3; no-op at index 3
    r = node.raft
    for v in ("2", "3"):
        r.step(msg(MT.APPEND_RESP, v, "1", r.term, index=index))
    assert (r.log.committed == 3) == committed
    if not committed:
        assert r.log.committed == 0


# ---------------------------------------------------------------- Figure 8, played out


def _figure8_cluster():
    """State of Figure 8 (b)->(c): S1 (term 2 entry at index 2) restarts; S5 holds a term-3 entry at 2."""
    v5 = ("1", "2", "3", "4", "5")
    c = Cluster()
    specs = {
        "1": ((1, 2), 3, ""),
        "2": ((1, 2), 2, ""),
        "3": ((1,), 3, "5"),
        "4": ((1,), 3, "5"),
        "5": ((1, 3), 3, "5"),
    }
    for nid, (terms, term, vote) in specs.items():
        cfg = dict(NOQ)
        if nid == "1":
            cfg["max_size_per_msg"] = 1  # one entry per APPEND so we can stop between them
        node, st = node_with_log(nid, v5, terms, term=term, vote=vote, commit=1, applied=0, **cfg)
        c.add(nid, node, st)
    return c


def _run_figure8_c():
    """S5 is down; S1 is elected in term 4 (S2, S3 vote) and replicates to S2 and S3 only.
    Delivery stops right after the moment the term-2 entry sits on a majority (S1, S2, S3)."""
    c = _figure8_cluster()
    c.isolate("5")
    c.cut("1", "4")
    s1 = c.nodes["1"]
    s1.campaign()
    queue = c.process("1")
    reached = False
    while queue:
        c.step_one(queue)
        r1 = s1.raft
        on_majority = sum(1 for nid in ("1", "2", "3") if c.storages[nid].last_index() >= 2 and c.storages[nid].term(2) == 2)
        # the Figure 8 invariant: while the term-4 entry is not on a majority, index 2 is NOT committed
        has_t4 = sum(1 for st in c.storages.values() if st.last_index() >= 3 and st.term(3) == 4)
        if has_t4 < 3:
            assert r1.log.committed < 2, "term-2 entry committed by counting replicas (Figure 8 bug)"
        if r1.role == StateRole.LEADER and r1.prs["3"].match == 2 and r1.prs["2"].match >= 2 and on_majority == 3:
            reached = True
            break
    assert reached, "scenario did not reach Figure 8 (c)"
    assert s1.raft.term == 4
    return c, queue


def test_figure8_old_term_entry_on_majority_is_not_committed_and_can_be_overwritten() -> None:
    """Figure 8 (c)->(d): the term-2 entry is on S1, S2, S3 but uncommitted; if S1 crashes, S5 wins
    term 5 (votes from S3, S4) and overwrites it. Nobody ever applied it, so safety holds."""
    c, _ = _run_figure8_c()
    assert c.nodes["1"].raft.log.committed < 2
    # S1 crashes; S5 comes back
    del c.nodes["1"]
    c.heal()
    s5 = c.nodes["5"]
    c.campaign("5")  # term 4: S3 already voted (for S1) in term 4 -> lost
    if s5.raft.role != StateRole.LEADER:
        c.campaign("5")  # term 5: S3 and S4 grant (last term 3 > 2)
    assert s5.raft.role == StateRole.LEADER
    c.settle()
    assert c.storages["3"].term(2) == 3  # the old term-2 entry was overwritten ...
    for nid in ("2", "3", "4", "5"):
        assert all(not (e.index == 2 and e.term == 2) for e in c.applied[nid])  # ... and never applied


def test_figure8_old_term_entry_commits_only_through_a_current_term_entry() -> None:
    """Figure 8 (e): once S1 replicates an entry of its own term (its no-op) to a majority, that entry
    commits and the term-2 entry before it commits indirectly; S5 can then no longer win."""
    c, queue = _run_figure8_c()
    s1 = c.nodes["1"]
    c.deliver(queue)
    c.tick("1")
    assert s1.raft.log.committed >= 3
    assert [(e.index, e.term) for e in c.applied["1"]][:3] == [(1, 1), (2, 2), (3, 4)]
    del c.nodes["1"]
    c.heal()
    for _ in range(3):
        c.campaign("5")
        assert c.nodes["5"].raft.role != StateRole.LEADER  # S2 and S3 hold a term-4 entry: they refuse


def test_stale_term_responses_are_ignored_and_match_never_decreases() -> None:
    """Responses from older terms are ignored; a late, smaller acknowledgement never lowers matchIndex."""
    node, _st = _leader(terms=(1, 1, 1), term=1)
    r = node.raft
    r.step(msg(MT.APPEND_RESP, "2", "1", r.term, index=4))
    assert r.prs["2"].match == 4
    r.step(msg(MT.APPEND_RESP, "2", "1", r.term, index=2))
    assert r.prs["2"].match == 4
    r.step(msg(MT.APPEND_RESP, "3", "1", r.term - 1, index=4))
    assert r.prs["3"].match == 0


def test_follower_commit_never_decreases() -> None:
    node, _st = node_with_log("1", V3, (1, 1, 1), term=1, commit=3, **NOQ)
    r = node.raft
    r.step(msg(MT.HEARTBEAT, "2", "1", 1, commit=1))
    r.step(msg(MT.APPEND, "2", "1", 1, index=1, log_term=1, commit=1))
    assert r.log.committed == 3


def test_noop_entry_is_appended_on_election() -> None:
    _node, st = _leader(terms=(1, 1), term=1)
    e = st.entries(3, 4)[0]
    assert (e.index, e.term, e.type, e.data) == (3, 2, EntryType.NORMAL, b"")
    assert ents(1)[0].index == 1
