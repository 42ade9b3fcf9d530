"""Regression scenarios for the Raft pitfalls real implementations fell into, each proven to catch its bug.

Every scenario is a deterministic script over the simulated cluster (:mod:`.cluster`): it
steers messages one by one into the situation a real bug report describes, with every
invariant of :mod:`.invariants` checked after every step. Each scenario runs twice:

* on the real core (``test_scenario_holds``): no invariant may fail, and the scenario's own
  expectations (who leads, what commits, what is refused) hold;
* on a deliberately broken variant (``test_scenario_catches_its_bug``): the core is
  monkeypatched (or the simulated driver/disk is told to misbehave) to reintroduce the bug,
  and the test asserts that the checker *does* report a violation, naming the broken rule.

The table scenario -> bug it guards -> broken variant -> how it fails is in README.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pytest

from scm_server.raft.core import quorum
from scm_server.raft.core.confchange import conf_state_after, validate_conf_change
from scm_server.raft.core.raft import Raft
from scm_server.raft.core.storage import MemoryStorage
from scm_server.raft.core.types import (
    NONE,
    ConfChange,
    ConfChangeType,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Message,
    MessageType,
    ProposalDroppedError,
    StateRole,
)

from .cluster import STATS, Cluster, SimOptions, address_of
from .invariants import InvariantViolation, LivenessViolation

MT = MessageType
VOTES = (MT.VOTE, MT.VOTE_RESP, MT.PRE_VOTE, MT.PRE_VOTE_RESP)
REPL = (MT.APPEND, MT.APPEND_RESP, MT.HEARTBEAT, MT.HEARTBEAT_RESP, MT.SNAPSHOT)


# ---------------------------------------------------------------------------------------------
# scripting helpers


def mk(n: int, extra: dict[str, Any], **opts: Any) -> Cluster:
    extra = dict(extra)
    mutant = extra.pop("_mutant", False)
    c = Cluster(0, n, options=SimOptions(**{**opts, **extra}))
    c.mutant = mutant  # type: ignore[attr-defined]
    return c


def sel(
    types: Iterable[MessageType] | None = None,
    frm: str | None = None,
    to: str | None = None,
    among: Iterable[str] | None = None,
) -> Callable[[Message], bool]:
    tset = frozenset(types) if types is not None else None
    group = frozenset(among) if among is not None else None

    def pred(m: Message) -> bool:
        return (
            (tset is None or m.type in tset)
            and (frm is None or m.frm == frm)
            and (to is None or m.to == to)
            and (group is None or (m.frm in group and m.to in group))
        )

    return pred


def expect(cond: bool, what: str, c: Cluster, symptom: bool = False) -> None:
    """A scenario-specific expectation; failing it is reported like any invariant violation.

    ``symptom=True`` marks an expectation that merely observes the bug itself (e.g. "n1 did not
    commit"); on a broken variant those are skipped, so that the generic invariant checker has
    to catch the *consequence* on its own.
    """
    if symptom and getattr(c, "mutant", False):
        return
    if not cond:
        raise InvariantViolation(f"{what}\n{c.describe_failure()}")


def role(c: Cluster, nid: str) -> StateRole:
    return c.nodes[nid].role


def elect(c: Cluster, nid: str) -> None:
    c.campaign(nid)
    c.stabilize()
    expect(role(c, nid) == StateRole.LEADER, f"{nid} should have won the election", c)


def hold_copy(c: Cluster, pred: Callable[[Message], bool]) -> Message:
    """Duplicate the first in-flight message matching pred and hold the copy back on the wire."""
    i = next((i for i, e in enumerate(c.net.in_flight) if pred(e.msg)), None)
    if i is None:
        raise InvariantViolation(f"no such message in flight\n{c.describe_failure()}")
    c.duplicate_index(i)
    c.delay_index(len(c.net.in_flight) - 1, 1_000_000)
    return c.net.in_flight[-1].msg


def release(c: Cluster, msg: Message) -> None:
    """Deliver a held-back copy now (a stale message arriving late)."""
    i = next(i for i, e in enumerate(c.net.in_flight) if e.msg is msg and e.not_before > c.step_no)
    c.net.in_flight[i].not_before = 0
    c.deliver_index(i)


def tick_until_leader(c: Cluster, among: list[str], rounds: int = 100) -> str:
    for _ in range(rounds):
        for nid in among:
            c.tick(nid)
        c.stabilize()
        for nid in among:
            if role(c, nid) == StateRole.LEADER:
                return nid
    raise LivenessViolation(f"no leader among {among} after {rounds} rounds\n{c.describe_failure()}")


# ---------------------------------------------------------------------------------------------
# scenarios (each takes harness-level option overrides; core mutations are monkeypatched)


def figure8(extra: dict[str, Any]) -> None:
    """Raft paper Figure 8: an entry of an older term, replicated to a majority by a later leader,
    must not be committed by counting; a still later leader may legitimately overwrite it."""
    c = mk(5, extra, pre_vote=False, check_quorum=False, max_size_per_msg=1)
    # (a) n1 leads term 2; its no-op (index 2) reaches n2 only
    c.campaign("n1")
    c.deliver_where(sel(VOTES))
    expect(role(c, "n1") == StateRole.LEADER and c.nodes["n1"].hs.term == 2, "n1 leads term 2", c)
    c.deliver_where(sel(REPL, among={"n1", "n2"}))
    c.drop_where(lambda m: True)
    # (b) n1 crashes; n5 wins term 3 with n3 and n4; its no-op stays local
    c.crash("n1")
    c.campaign("n5")
    c.deliver_where(sel(VOTES))
    expect(role(c, "n5") == StateRole.LEADER and c.nodes["n5"].hs.term == 3, "n5 leads term 3", c)
    c.drop_where(lambda m: True)
    c.crash("n5")
    # (c) n1 restarts and wins term 4; it replicates index 2 (term 2) to n3 -> on a majority
    c.restart("n1")
    for _ in range(2):
        c.campaign("n1")
        c.deliver_where(sel(VOTES))
    expect(role(c, "n1") == StateRole.LEADER and c.nodes["n1"].hs.term == 4, "n1 leads term 4", c)
    c.deliver_where(sel(REPL, among={"n1", "n2"}))
    for _ in range(4):  # n3 rejects the append of index 3, accepts index 2, never sees index 3
        c.deliver_where(lambda m: (m.type == MT.APPEND and m.to == "n3" and all(e.index < 3 for e in m.entries))
                        or (m.type == MT.APPEND and m.to == "n3" and c.nodes["n3"].storage.last_index() < 2), limit=1)
        c.deliver_where(sel((MT.APPEND_RESP,), frm="n3"), limit=1)
    expect(c.nodes["n3"].storage.last_index() == 2, "n3 holds index 2 only", c)
    expect(c.nodes["n1"].hs.commit == 1, "n1 must not commit index 2 (term 2) by counting replicas", c, True)
    c.drop_where(lambda m: True)
    # (d) n1 crashes; n5 returns and wins term 5 with n3 and n4, overwriting index 2
    c.crash("n1")
    c.restart("n5")
    for _ in range(2):
        c.campaign("n5")
        c.deliver_where(sel(VOTES))
    expect(role(c, "n5") == StateRole.LEADER and c.nodes["n5"].hs.term == 5, "n5 leads term 5", c)
    c.heal_all()
    c.converge()
    c.final_checks()


def broken_commit_by_counting(mp: pytest.MonkeyPatch) -> None:
    def maybe_commit(self: Raft) -> bool:
        prs = self.prs
        mci = quorum.committed_index(self.conf.voters, lambda v: prs[v].match if v in prs else 0)
        if mci <= self.log.committed:
            return False
        self.log.commit_to(mci)  # BUG: no "log[mci].term == current term" check
        self._after_leader_commit()
        return True

    mp.setattr(Raft, "maybe_commit", maybe_commit)


def vote_persisted(extra: dict[str, Any]) -> None:
    """A voter crashes right after granting its vote; after restart it must not vote again in that term."""
    c = mk(3, extra, pre_vote=False, check_quorum=False)
    c.campaign("n1")
    c.deliver_where(sel((MT.VOTE,), to="n3"))  # n3 grants; the grant is on the wire
    c.crash("n3", lose_unsynced=True)
    c.restart("n3")
    c.campaign("n2")  # also term 2
    c.deliver_where(sel((MT.VOTE,), frm="n2", to="n3"))
    c.stabilize()
    expect(c.nodes["n3"].hs.vote == "n1", "n3 still remembers its vote for n1", c)
    c.heal_all()
    c.converge()


def vote_cleared_same_term(extra: dict[str, Any]) -> None:
    """CCF#8094: a candidate that steps down in the same term (a leader appeared) keeps its vote."""
    c = mk(3, extra, pre_vote=False, check_quorum=False)
    c.campaign("n1")
    c.campaign("n2")  # both candidates in term 2
    c.deliver_where(sel((MT.VOTE,), frm="n1", to="n3"))
    c.deliver_where(sel((MT.VOTE_RESP,), frm="n3", to="n1"))
    expect(role(c, "n1") == StateRole.LEADER, "n1 leads term 2", c)
    c.deliver_where(sel((MT.APPEND,), frm="n1", to="n2"))  # candidate n2 steps down, same term
    expect(role(c, "n2") == StateRole.FOLLOWER and c.nodes["n2"].hs.vote == "n2", "n2 keeps its vote", c)
    # a late vote request of the same term must be refused
    c.deliver_where(sel((MT.VOTE,), frm="n1", to="n2"))
    c.heal_all()
    c.converge()


def broken_clear_vote_on_step_down(mp: pytest.MonkeyPatch) -> None:
    orig = Raft.become_follower

    def become_follower(self: Raft, term: int, lead: str) -> None:
        orig(self, term, lead)
        self.vote = NONE  # BUG: cleared without a term change

    mp.setattr(Raft, "become_follower", become_follower)


def unsynced_ack(extra: dict[str, Any]) -> None:
    """etcd#14370: an entry acknowledged before it is durable is lost by a crash of a majority."""
    c = mk(3, extra)
    elect(c, "n1")
    c.propose("n1")
    value = c.nodes["n1"].proposals and next(iter(c.nodes["n1"].proposals.values())).data
    c.deliver_where(sel((MT.APPEND, MT.APPEND_RESP), among={"n1", "n2"}))
    expect(value in c.acked_values, "n1 acknowledged the write", c)
    c.drop_where(lambda m: True)
    c.crash("n1", lose_unsynced=True)
    c.crash("n2", lose_unsynced=True)
    c.restart("n2")
    c.await_progress(nodes=["n2", "n3"])
    c.heal_all()
    c.converge()
    c.final_checks()


def stale_read_paused_leader(extra: dict[str, Any]) -> None:
    """etcd#20418 / redisraft#19: a leader paused (SIGSTOP) past its term serves a ReadIndex after resume."""
    c = mk(3, extra)
    elect(c, "n1")
    c.propose("n1")
    c.stabilize()
    c.pause("n1")
    new = tick_until_leader(c, ["n2", "n3"])
    c.propose(new)
    c.stabilize()
    c.resume("n1")
    expect(role(c, "n1") == StateRole.LEADER, "n1 still believes it leads", c)
    c.read("n1")
    c.stabilize()
    c.heal_all()
    c.converge()


def stale_read_partitioned_leader(extra: dict[str, Any]) -> None:
    """etcd#741: a leader cut off by a partition answers a read from its stale state."""
    c = mk(3, extra)
    elect(c, "n1")
    c.propose("n1")
    c.stabilize()
    c.isolate("n1")
    new = tick_until_leader(c, ["n2", "n3"])
    c.propose(new)
    c.stabilize()
    c.read("n1")
    c.stabilize()
    for _ in range(3):
        c.tick("n1")  # fewer than election_tick: check-quorum has not fired yet
        c.stabilize()
    c.heal_all()
    c.converge()


def broken_read_without_heartbeat(mp: pytest.MonkeyPatch) -> None:
    def send_read_index_response(self: Raft, m: Message) -> None:
        self._respond_read_index(m, self.log.committed)  # BUG: no heartbeat round confirms leadership

    mp.setattr(Raft, "_send_read_index_response", send_read_index_response)


def read_before_noop_commit(extra: dict[str, Any]) -> None:
    """etcd#3879 / committedEntryInCurrentTerm: a new leader's commit index may be stale until its
    no-op commits, so a ReadIndex must wait for it."""
    c = mk(3, extra, check_quorum=False)
    elect(c, "n1")
    c.propose("n1")
    c.deliver_where(sel((MT.APPEND,), frm="n1", to="n2"), limit=1)
    c.deliver_where(sel((MT.APPEND_RESP,), frm="n2", to="n1"), limit=1)  # committed and acked at n1 only
    c.drop_where(lambda m: True)
    c.isolate("n1")
    c.campaign("n2")
    c.deliver_where(sel(VOTES))
    expect(role(c, "n2") == StateRole.LEADER, "n2 leads", c)
    expect(c.nodes["n2"].hs.commit < c.checker.read_frontier, "n2 does not know the latest commit yet", c)
    c.read("n2")
    c.deliver_where(sel((MT.HEARTBEAT, MT.HEARTBEAT_RESP)))  # leadership confirmed before the no-op commits
    c.stabilize()
    expect(c.checker.reads_served == 1, "the read is served once the no-op committed", c)
    c.heal_all()
    c.converge()


def broken_read_before_noop(mp: pytest.MonkeyPatch) -> None:
    def leader_read_index(self: Raft, m: Message) -> None:
        self._send_read_index_response(m)  # BUG: no committed_entry_in_current_term() wait

    mp.setattr(Raft, "_leader_read_index", leader_read_index)


def one_conf_change_at_a_time(extra: dict[str, Any]) -> None:
    """At most one uncommitted configuration: a second change is refused until the first commits."""
    c = mk(3, extra)
    elect(c, "n1")
    first = c.add_learner("n1", "n4")
    second = c.add_learner("n1", "n5")
    expect(first is not None, "the first change is accepted", c)
    expect(second is None, "the second change is refused while the first is uncommitted", c)
    c.stabilize()
    c.heal_all()
    c.converge()


def broken_two_pending_confs(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(Raft, "has_pending_conf", lambda self: False)  # BUG: no one-at-a-time rule


def noop_barrier(extra: dict[str, Any]) -> None:
    """Ongaro's single-server change bug (raft-dev 2015): a new leader must commit its no-op before it
    changes the configuration, or two leaders' configurations can have disjoint majorities."""
    c = mk(4, extra, pre_vote=False, check_quorum=False)
    elect(c, "n1")  # term 2, no-op committed by all four
    idx = c.propose_conf("n1", ConfChange(ConfChangeType.ADD_NODE, "n5", address_of("n5")))
    expect(idx is not None, "n1 starts adding n5", c)
    c.deliver_where(sel(REPL, among={"n1", "n5"}))  # only n5 gets C+n5
    c.drop_where(lambda m: True)
    expect(c.nodes["n5"].storage.last_index() == idx, "n5 holds C+n5", c)
    c.partition([["n1", "n5"], ["n2", "n3", "n4"]])
    c.campaign("n2")
    c.deliver_where(sel(VOTES))
    expect(role(c, "n2") == StateRole.LEADER, "n2 leads term 3", c)
    removal = c.remove("n2", "n1")
    expect(removal is None, "n2 refuses a configuration change before its no-op commits", c, True)
    c.deliver_where(sel(REPL, among={"n2", "n3"}))
    c.drop_where(lambda m: True)
    c.partition([["n1", "n4", "n5"], ["n2", "n3"]])
    c.crash("n1", lose_unsynced=False)  # n1 restarts as a follower that still holds C+n5
    c.restart("n1")
    for _ in range(2):
        c.campaign("n1")
        c.deliver_where(sel(VOTES))
    expect(role(c, "n1") == StateRole.LEADER, "n1 wins term 4 under C+n5 (nothing of term 3 committed)", c)
    c.heal_all()
    c.converge()
    c.final_checks()


def broken_conf_change_before_noop(mp: pytest.MonkeyPatch) -> None:
    def propose_conf_change(self: Raft, cc: ConfChange) -> int:
        self._check_can_propose()  # BUG: no "no-op of this term committed" barrier
        if self.has_pending_conf():
            raise ProposalDroppedError("pending")
        why = validate_conf_change(self.conf, cc, self.id)
        if why is not None:
            raise ProposalDroppedError(why)
        index = self.log.last_index() + 1
        self._append_entries([Entry(term=self.term, index=index, type=EntryType.CONF_CHANGE, data=cc.encode())])
        return index

    mp.setattr(Raft, "propose_conf_change", propose_conf_change)


def remove_leader(extra: dict[str, Any]) -> None:
    """Thesis §4.2.2: a leader removing itself keeps replicating without counting itself until the
    change commits, then steps down; the rest elect a leader and make progress."""
    c = mk(3, extra)
    elect(c, "n1")
    idx = c.remove("n1", "n1")
    assert idx is not None, "the leader may propose its own removal"
    c.deliver_where(sel((MT.APPEND, MT.APPEND_RESP), among={"n1", "n2"}))
    expect(c.nodes["n1"].hs.commit < idx, "n2's ack alone is not a majority of {n2, n3}", c, True)
    c.stabilize()
    expect(c.nodes["n1"].retired, "the removed leader stepped down and left once the change committed", c)
    c.await_progress(nodes=["n2", "n3"])
    c.heal_all()
    c.converge()


def broken_removed_leader_counts_itself(mp: pytest.MonkeyPatch) -> None:
    def maybe_commit(self: Raft) -> bool:
        prs = self.prs
        voters = tuple(sorted(set(self.conf.voters) | {self.id}))  # BUG: a non-voting leader counts itself
        own = self.log.stable_last_index()
        mci = quorum.committed_index(voters, lambda v: prs[v].match if v in prs else own if v == self.id else 0)
        if mci <= self.log.committed or self.log.term_or_zero(mci) != self.term:
            return False
        self.log.commit_to(mci)
        self._after_leader_commit()
        return True

    mp.setattr(Raft, "maybe_commit", maybe_commit)


def conf_after_restart(extra: dict[str, Any]) -> None:
    """PySyncObj#133 / jraft#1: after a restart the configuration is the snapshot's, then every conf
    entry in the log (here: a promotion that happened after the snapshot)."""
    c = mk(3, extra)
    elect(c, "n1")
    c.add_learner("n1", "n4")
    c.stabilize()
    c.propose("n1")
    c.stabilize()
    expect(c.compact("n2"), "n2 snapshots with n4 as a learner", c)
    expect(c.promote("n1", "n4") is not None, "n4 is promoted", c)
    c.stabilize()
    c.crash("n2", lose_unsynced=False)  # the commit index covering the promotion is durable
    c.restart("n2")
    c.crash("n1", lose_unsynced=False)
    c.restart("n1")
    conf = c.nodes["n2"].raw.status().conf_state  # type: ignore[union-attr]
    expect("n4" in conf.voters, "n2 restarted with n4 as a voter", c)
    c.heal_all()
    c.converge()


def broken_conf_from_snapshot_only(mp: pytest.MonkeyPatch) -> None:
    def initial_state(self: MemoryStorage) -> tuple[HardState, ConfState]:
        return self.hard_state, self.snapshot().metadata.conf_state  # BUG: ignores conf entries in the log

    mp.setattr(MemoryStorage, "initial_state", initial_state)


def conf_rollback_on_truncate(extra: dict[str, Any]) -> None:
    """An uncommitted conf entry that gets truncated must roll the configuration back."""
    c = mk(3, extra)
    elect(c, "n1")
    expect(c.add_learner("n1", "n4") is not None, "n1 appends C+n4 locally", c)
    c.drop_where(lambda m: True)
    c.isolate("n1")
    tick_until_leader(c, ["n2", "n3"])
    c.await_progress(nodes=["n2", "n3"])
    c.heal()
    c.await_progress(nodes=["n2", "n3"])
    cs = c.nodes["n1"].raw.status().conf_state  # type: ignore[union-attr]
    expect("n4" not in cs.members(), "n1 rolled C+n4 back", c)
    c.heal_all()
    c.converge()


def broken_no_conf_rollback(mp: pytest.MonkeyPatch) -> None:
    def on_entries_appended(self: Raft, ents: Any, first_written: int) -> None:
        hist = self.conf_history  # BUG: truncated conf entries are not rolled back
        cur = hist[-1][1] if hist else self.conf_base[1]
        changed = False
        for e in ents:
            if e.type == EntryType.CONF_CHANGE and e.index >= first_written:
                cur = conf_state_after(cur, ConfChange.decode(e.data))
                hist.append((e.index, cur))
                changed = True
        if changed:
            self._switch_to_config(cur)

    mp.setattr(Raft, "_on_entries_appended", on_entries_appended)


def snapshot_divergent_suffix(extra: dict[str, Any]) -> None:
    """hashicorp/raft#704: a follower whose entry at the snapshot index has another term must discard
    its whole log on InstallSnapshot, not keep the conflicting suffix."""
    c = mk(5, extra, pre_vote=False, check_quorum=False)
    elect(c, "n1")  # term 2
    for _ in range(10):
        c.propose("n1")  # indexes 3..12, term 2: only n3 will get them
    c.deliver_where(sel((MT.APPEND, MT.APPEND_RESP), among={"n1", "n3"}))
    c.drop_where(lambda m: True)
    c.crash("n1")
    c.isolate("n3")
    c.campaign("n2")
    c.deliver_where(sel(VOTES))
    expect(role(c, "n2") == StateRole.LEADER, "n2 leads term 3", c)
    for _ in range(8):
        c.propose("n2")
        c.stabilize()
    expect(c.compact("n2"), "n2 compacts its log", c)
    snap_index = c.nodes["n2"].storage.snapshot().metadata.index
    expect(snap_index <= c.nodes["n3"].storage.last_index(), "n3's stale log reaches past the snapshot", c)
    c.heal()
    c.await_progress(nodes=["n2", "n3", "n4", "n5"])
    c.heal_all()
    c.converge()
    c.final_checks()


def broken_keep_suffix_without_term_check(mp: pytest.MonkeyPatch) -> None:
    orig = Raft._restore

    def restore(self: Raft, snap: Any) -> bool:
        sm = snap.metadata
        if sm.index <= self.log.committed:
            return False
        if sm.index <= self.log.last_index():  # BUG: keeps the suffix without comparing terms
            self.log.commit_to(sm.index)
            return False
        return orig(self, snap)

    mp.setattr(Raft, "_restore", restore)


def two_snapshots_back_to_back(extra: dict[str, Any]) -> None:
    """etcd#18055: two snapshots close together (here: a newer one overtakes an older one on the wire);
    the older must be ignored (at or below the commit index)."""
    c = mk(3, extra)
    elect(c, "n1")
    c.isolate("n3")
    for _ in range(5):
        c.propose("n1")
        c.stabilize()
    c.compact("n1")
    c.heal()
    # n3 needs a snapshot: let the leader send it, hold it back, and send a newer one
    for _ in range(30):
        c.tick("n1")
        c.deliver_where(lambda m: (m.type != MT.SNAPSHOT and m.to != "n3") or m.type == MT.HEARTBEAT_RESP
                        or (m.to == "n3" and m.type in (MT.HEARTBEAT, MT.APPEND)))
        if any(e.msg.type == MT.SNAPSHOT for e in c.net.in_flight):
            break
    old = [i for i, e in enumerate(c.net.in_flight) if e.msg.type == MT.SNAPSHOT]
    expect(len(old) == 1, "one snapshot is on its way to n3", c)
    c.duplicate_index(old[0])  # keep a copy of the old snapshot on the wire
    c.deliver_index(old[0])  # n3 installs it
    for _ in range(5):
        c.propose("n1")
    c.stabilize()
    c.compact("n1")
    c.stabilize()
    expect(c.nodes["n3"].hs.commit > c.nodes["n3"].storage.snapshot().metadata.index,
           "n3 moved past the first snapshot", c)
    c.deliver_where(sel((MT.SNAPSHOT,)))  # the stale copy arrives late
    c.heal_all()
    c.converge()


def broken_restore_any_snapshot(mp: pytest.MonkeyPatch) -> None:
    from scm_server.raft.core.types import Snapshot

    def restore(self: Raft, snap: Snapshot) -> bool:
        sm = snap.metadata  # BUG: no "snapshot index <= commit index -> ignore" check
        if self.log.match_term(sm.index, sm.term) and sm.index > self.log.committed:
            self.log.commit_to(sm.index)
            return False
        self.log.restore(snap)
        self.conf_base = (sm.index, sm.conf_state)
        self.conf_history = []
        self._switch_to_config(sm.conf_state)
        return True

    mp.setattr(Raft, "_restore", restore)


def slow_follower_after_compaction(extra: dict[str, Any]) -> None:
    """etcd-io/raft#31: a follower that falls behind the leader's compaction point while appends
    were in flight catches up (via a snapshot) within bounded time."""
    c = mk(3, extra, max_inflight_msgs=2)
    elect(c, "n1")
    c.propose("n1")
    c.stabilize()
    for _ in range(6):
        c.propose("n1")  # in flight to n3, which never gets them
    c.drop_where(sel(to="n3"))
    c.isolate("n3")
    c.await_progress(nodes=["n1", "n2"])
    c.compact("n1")
    c.compact("n2")
    c.heal()
    c.await_progress(nodes=["n1", "n2", "n3"], max_rounds=60)
    lead = c.leader()
    assert lead is not None
    for _ in range(60):
        if c.nodes["n3"].sm.live.index >= lead.sm.live.index:
            break
        c.tick_all()
        c.stabilize()
    expect(c.nodes["n3"].sm.live.index >= lead.sm.live.index, "n3 caught up after the compaction", c)


def broken_never_send_snapshot(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(Raft, "_send_snapshot", lambda self, to, pr: False)  # BUG: compacted past a slow follower


def non_monotonic_commit(extra: dict[str, Any]) -> None:
    """PySyncObj#166: a delayed heartbeat with an older commit index must not move commit back."""
    c = mk(3, extra, heartbeat_tick=1)
    elect(c, "n1")
    c.propose("n1")
    c.tick("n1")  # heartbeat carries the commit index known before the proposal committed
    stale = hold_copy(c, sel((MT.HEARTBEAT,), to="n2"))
    c.stabilize()
    before = c.nodes["n2"].hs.commit
    expect(before > stale.commit, "n2 learnt a newer commit index", c)
    release(c, stale)
    expect(c.nodes["n2"].hs.commit == before, "n2's commit index did not move", c)
    c.heal_all()
    c.converge()


def broken_commit_follows_leader(mp: pytest.MonkeyPatch) -> None:
    from scm_server.raft.core.log import RaftLog

    def commit_to(self: RaftLog, to: int) -> None:
        if to <= self.last_index():
            self.committed = to  # BUG: not monotonic

    mp.setattr(RaftLog, "commit_to", commit_to)


def erase_non_conflicting(extra: dict[str, Any]) -> None:
    """raftos#26: a stale APPEND whose entries all match must not truncate the entries after them."""
    c = mk(3, extra, max_size_per_msg=1)
    elect(c, "n1")
    c.propose("n1")
    stale = hold_copy(c, sel((MT.APPEND,), to="n2"))
    c.propose("n1")
    c.deliver_where(sel((MT.APPEND,), to="n2"))
    last = c.nodes["n2"].storage.last_index()
    expect(last > stale.entries[-1].index, "n2 holds entries after the stale append's", c)
    release(c, stale)
    expect(c.nodes["n2"].storage.last_index() == last, "n2 kept its later entries", c)
    c.heal_all()
    c.converge()


def broken_truncate_without_conflict(mp: pytest.MonkeyPatch) -> None:
    from scm_server.raft.core.log import RaftLog

    def maybe_append(self: RaftLog, index: int, log_term: int, committed: int, ents: Any) -> Any:
        if not self.match_term(index, log_term):
            return None
        lastnewi = index + len(ents)
        if ents:  # BUG: rewrites from the first entry even when nothing conflicts
            self.unstable.truncate_and_append(ents)
        self.commit_to(min(committed, lastnewi))
        return lastnewi, (ents[0].index if ents else 0)

    mp.setattr(RaftLog, "maybe_append", maybe_append)


def prevote_checkquorum_rejoin(extra: dict[str, Any]) -> None:
    """etcd#9586 / raft-rs#84: a node that cannot hear the leader must not depose it while the rest
    of the cluster still hears it (pre-vote + leader lease: voters ignore it)."""
    c = mk(3, extra)
    elect(c, "n1")
    term = c.nodes["n1"].hs.term
    c.cut("n1", "n3")
    c.cut("n3", "n1")
    for _ in range(80):
        c.tick_all()
        c.stabilize()
    expect(role(c, "n1") == StateRole.LEADER and c.nodes["n1"].hs.term == term,
           f"leader stickiness: n1 should still lead term {term}", c)
    c.await_progress()
    c.heal_all()
    c.converge()


def broken_prevote_without_lease(mp: pytest.MonkeyPatch) -> None:
    orig = Raft.step

    def step(self: Raft, m: Message) -> None:
        if m.type in (MT.PRE_VOTE, MT.VOTE):
            saved = self.election_elapsed
            self.election_elapsed = self.election_timeout  # BUG: the leader lease is not honoured
            orig(self, m)
            if self.election_elapsed == self.election_timeout:
                self.election_elapsed = saved
            return
        orig(self, m)

    mp.setattr(Raft, "step", step)


def bridge_liveness(extra: dict[str, Any]) -> None:
    """openraft#2080: a connected majority {a, b, bridge} must elect a leader although the old leader
    still reaches the bridge (check-quorum makes it step down, so its heartbeats stop)."""
    c = mk(5, extra)
    elect(c, "n1")
    c.propose("n1")
    c.stabilize()
    # old leader n1 - bridge n2 - {n3, n4}; n5 isolated
    for a, b in [("n1", "n3"), ("n1", "n4"), ("n1", "n5"), ("n5", "n2"), ("n5", "n3"), ("n5", "n4")]:
        c.cut(a, b)
        c.cut(b, a)
    c.await_progress(max_rounds=80)
    lead = c.leader()
    expect(lead is not None and lead.id in ("n2", "n3", "n4"), "the connected majority elected a leader", c)
    # Jepsen's bridge and majorities-ring keep a leader with a majority too
    c.heal()
    c.bridge(["n1", "n2", "n3", "n4", "n5"])
    c.await_progress(max_rounds=80)
    c.majorities_ring(["n1", "n2", "n3", "n4", "n5"])
    c.await_progress(max_rounds=80)
    c.heal_all()
    c.converge()


def broken_leader_never_steps_down(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(Raft, "quorum_active", lambda self: True)  # BUG: check-quorum never fires


def timeout_now_idempotent(extra: dict[str, Any]) -> None:
    """RATIS-1818: a duplicated TimeoutNow must not start a second election (term + 2)."""
    c = mk(3, extra)
    elect(c, "n1")
    term = c.nodes["n1"].hs.term
    c.transfer("n1", "n2")
    tn = [i for i, e in enumerate(c.net.in_flight) if e.msg.type == MT.TIMEOUT_NOW]
    expect(len(tn) == 1, "the leader sent TimeoutNow to its up-to-date follower", c)
    c.duplicate_index(tn[0])
    c.deliver_index(tn[0])
    c.deliver_where(sel((MT.TIMEOUT_NOW,)))  # the duplicate arrives while n2 campaigns
    c.stabilize()
    expect(role(c, "n2") == StateRole.LEADER and c.nodes["n2"].hs.term == term + 1,
           f"n2 should lead term {term + 1} after one transfer election", c)
    c.heal_all()
    c.converge()


def broken_timeout_now_not_idempotent(mp: pytest.MonkeyPatch) -> None:
    orig = Raft.step

    def step(self: Raft, m: Message) -> None:
        if m.type == MT.TIMEOUT_NOW and self.role != StateRole.LEADER:
            self.hup(transfer=True)  # BUG: no term check, so a duplicate starts another election
            return
        orig(self, m)

    mp.setattr(Raft, "step", step)


def persist_before_send(extra: dict[str, Any]) -> None:
    """RATIS-980 / Figure 2: a vote (or ack) leaves only after the write it depends on; a crash while the
    disk is slow loses the unsent vote, never a sent one."""
    c = mk(3, extra, pre_vote=False, check_quorum=False)
    c.stall_disk("n3", 50)
    c.campaign("n1")
    c.deliver_where(sel((MT.VOTE,), frm="n1", to="n3"))  # n3 decides to grant; its disk is slow
    c.deliver_where(sel((MT.VOTE_RESP,)))
    c.crash("n3", lose_unsynced=True)  # the write never happened
    c.restart("n3")
    c.campaign("n2")
    c.deliver_where(sel((MT.VOTE,), frm="n2", to="n3"))
    c.stabilize()
    c.heal_all()
    c.converge()


def election_needs_majority(extra: dict[str, Any]) -> None:
    """With an even number of voters, half of the votes is not a majority (no split-brain on a tie)."""
    c = mk(4, extra, pre_vote=False, check_quorum=False)
    c.campaign("n1")
    c.drop_where(sel((MT.VOTE,), to="n3"))
    c.drop_where(sel((MT.VOTE,), to="n4"))
    c.deliver_where(sel((MT.VOTE, MT.VOTE_RESP)))  # n1 has its own vote and n2's: 2 of 4
    expect(role(c, "n1") == StateRole.CANDIDATE, "2 of 4 votes do not elect n1", c, True)
    c.heal_all()
    c.converge()


def broken_half_is_majority(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(quorum, "majority", lambda n: (n + 1) // 2)  # BUG: a tie counts as a majority


# ---------------------------------------------------------------------------------------------
# the table


@dataclass(frozen=True)
class Case:
    name: str
    scenario: Callable[[dict[str, Any]], None]
    mutate: Callable[[pytest.MonkeyPatch], None] | None  # core mutation
    harness: dict[str, Any]  # harness-level mutation (SimOptions overrides)
    expect: str  # regex the violation report must match


CASES = [
    Case("figure8_previous_term_commit", figure8, broken_commit_by_counting, {}, "leader completeness"),
    Case("vote_persisted_before_reply", vote_persisted, None, {"drop_vote_on_persist": True}, "double vote"),
    Case("vote_not_cleared_same_term", vote_cleared_same_term, broken_clear_vote_on_step_down, {},
         "changed its vote without a term change"),
    Case("unsynced_log_not_acked", unsynced_ack, None, {"ignore_must_sync": True}, "hold it durably"),
    Case("stale_read_paused_leader", stale_read_paused_leader, broken_read_without_heartbeat, {}, "stale read"),
    Case("stale_read_partitioned_leader", stale_read_partitioned_leader, broken_read_without_heartbeat, {},
         "stale read"),
    Case("read_waits_for_noop_commit", read_before_noop_commit, broken_read_before_noop, {}, "stale read"),
    Case("one_uncommitted_conf", one_conf_change_at_a_time, broken_two_pending_confs, {},
         "uncommitted configuration entries"),
    Case("conf_change_after_noop_barrier", noop_barrier, broken_conf_change_before_noop, {},
         "leader completeness"),
    Case("remove_leader", remove_leader, broken_removed_leader_counts_itself, {},
         "hold it durably|is not a majority"),
    Case("conf_after_snapshot_restart", conf_after_restart, broken_conf_from_snapshot_only, {},
         "configuration"),
    Case("conf_rollback_on_truncate", conf_rollback_on_truncate, broken_no_conf_rollback, {}, "configuration"),
    Case("snapshot_divergent_suffix", snapshot_divergent_suffix, broken_keep_suffix_without_term_check, {},
         "state machine safety|truncated committed|log matching"),
    Case("two_snapshots_back_to_back", two_snapshots_back_to_back, broken_restore_any_snapshot, {},
         "restored a snapshot"),
    Case("slow_follower_after_compaction", slow_follower_after_compaction, broken_never_send_snapshot, {},
         "caught up|within"),
    Case("stale_message_commit_monotonic", non_monotonic_commit, broken_commit_follows_leader, {},
         "commit index went backwards"),
    Case("stale_message_no_erase", erase_non_conflicting, broken_truncate_without_conflict, {},
         "erased non-conflicting"),
    Case("prevote_checkquorum_rejoin", prevote_checkquorum_rejoin, broken_prevote_without_lease, {},
         "leader stickiness"),
    Case("bridge_partition_liveness", bridge_liveness, broken_leader_never_steps_down, {}, "within"),
    Case("timeout_now_idempotent", timeout_now_idempotent, broken_timeout_now_not_idempotent, {},
         "after one transfer election"),
    Case("persist_before_send", persist_before_send, None, {"send_before_persist": True}, "double vote"),
    Case("election_needs_majority", election_needs_majority, broken_half_is_majority, {},
         "became leader of term 2 with votes from only"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_scenario_holds(case: Case) -> None:
    case.scenario({})


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_scenario_catches_its_bug(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    if case.mutate is not None:
        case.mutate(monkeypatch)
    with pytest.raises(InvariantViolation, match=case.expect):
        case.scenario({**case.harness, "_mutant": True})
    STATS["violations_expected"] += 1


def test_violation_report_names_seed_and_recent_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure report is reproducible: it names the seed and step and lists the last events."""
    broken_clear_vote_on_step_down(monkeypatch)
    reports = []
    for _ in range(2):
        with pytest.raises(InvariantViolation) as exc_info:
            vote_cleared_same_term({"_mutant": True})
        reports.append(str(exc_info.value))
    text = reports[0]
    assert "SIM_SEED=0" in text and "step=" in text
    assert "last events:" in text and "deliver APPEND n1->n2" in text
    assert "n2: up role=" in text and "n3: up role=FOLLOWER" in text
    assert reports[0] == reports[1]  # the same run fails at the same step with the same history
    STATS["violations_expected"] += 1
