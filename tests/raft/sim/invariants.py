"""Raft safety invariants, checked incrementally after every simulation step.

Why it exists: the simulator (:mod:`.cluster`) drives the pure core through faults; this module
is the oracle that says whether what happened is allowed. Every check is incremental (a dict
lookup per entry, per vote, per message) so it can run after *every* step of a 100,000-step
run and fail at the first step that breaks a rule, with the seed and the recent events.

The cluster reports facts as they happen (a hard state written, entries appended, a message
sent, an entry applied, a read served) and the checker keeps just enough global history:

* election safety: at most one leader per term, over all history (``leaders``), and every leader
  was granted votes by a majority of the voters of its configuration;
* vote safety: a node grants at most one vote per term, even across crashes, and never clears
  or changes its vote without a term change (``votes``);
* log matching: an (index, term) pair names one entry and one predecessor term everywhere, so
  equal (index, term) means equal prefixes by induction (``entry_ids``);
* no erasure: a node never truncates an entry that does not conflict, and never drops an entry
  that is known to be committed (``applied``);
* leader completeness: a new leader's log holds the latest committed entry, and every current
  leader of a later term holds every newly committed entry;
* state machine safety: every node applies the same entry at each index (``applied``);
* monotonic commit per node incarnation and for the durable hard state; monotonic match index
  per leader term; a follower really holds what its leader believes it matched;
* at most one uncommitted configuration entry in any leader's log;
* hashicorp's transport invariant: in a term, only one node sends APPEND/HEARTBEAT/SNAPSHOT;
* acknowledged writes are committed and never lost; ReadIndex results are linearizable: a read
  returns a state that includes every write acknowledged, and every state returned by a read
  that completed, before the read was invoked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from scm_server.raft.core.types import (
    NONE,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Message,
    MessageType,
    NodeId,
    Snapshot,
)


class InvariantViolation(AssertionError):
    """A Raft safety (or, for liveness checks, progress) property was broken in a simulation."""


class LivenessViolation(InvariantViolation):
    """After all faults healed, the cluster did not elect a leader / commit within the bound."""


_LEADER_MSGS = frozenset({MessageType.APPEND, MessageType.HEARTBEAT, MessageType.SNAPSHOT})


@dataclass(slots=True)
class ReadRequest:
    ctx: bytes
    node: NodeId
    invoked_step: int
    frontier: int  # the applied index every linearizable answer must reach
    index: int = -1  # the read index the core returned


@dataclass
class Checker:
    """Global history of one simulated cluster, and the rules it must satisfy."""

    context: Callable[[], str] = field(default=lambda: "")
    leaders: dict[int, NodeId] = field(default_factory=dict)
    senders: dict[int, NodeId] = field(default_factory=dict)
    votes: dict[tuple[NodeId, int], NodeId] = field(default_factory=dict)
    entry_ids: dict[tuple[int, int], tuple[int, bytes, int]] = field(default_factory=dict)
    applied: dict[int, tuple[int, int, bytes]] = field(default_factory=dict)  # index -> (term, type, data)
    committed_index: int = 0
    committed_term: int = 0
    acked: dict[int, tuple[int, bytes]] = field(default_factory=dict)  # index -> (term, data)
    read_frontier: int = 0
    reads_served: int = 0
    match_seen: dict[tuple[NodeId, int], dict[NodeId, int]] = field(default_factory=dict)
    violations: int = 0

    # ---- plumbing ----

    def fail(self, what: str) -> None:
        self.violations += 1
        raise InvariantViolation(f"{what}\n{self.context()}")

    # ---- votes, terms, leaders ----

    def on_hard_state(self, node: NodeId, prev: HardState, hs: HardState) -> None:
        if hs.term < prev.term:
            self.fail(f"term went backwards on {node}: {prev.term} -> {hs.term}")
        if hs.commit < prev.commit:
            self.fail(f"commit index went backwards on {node}: {prev.commit} -> {hs.commit}")
        if hs.term == prev.term and prev.vote != NONE and hs.vote != prev.vote:
            self.fail(
                f"{node} changed its vote without a term change: term {hs.term} vote {prev.vote!r} -> {hs.vote!r}"
            )
        if hs.vote != NONE:
            self._record_vote(node, hs.term, hs.vote)

    def _record_vote(self, node: NodeId, term: int, candidate: NodeId) -> None:
        key = (node, term)
        had = self.votes.get(key)
        if had is None:
            self.votes[key] = candidate
        elif had != candidate:
            self.fail(f"double vote: {node} voted for {had} and for {candidate} in term {term}")

    def on_durable_hard_state(self, node: NodeId, prev: HardState, hs: HardState) -> None:
        """The hard state that survives a crash must never go backwards either."""
        if hs.term < prev.term or (hs.term == prev.term and prev.vote != NONE and hs.vote != prev.vote):
            self.fail(f"durable term/vote of {node} went backwards: {prev} -> {hs}")
        if hs.commit < prev.commit:
            self.fail(f"durable commit of {node} went backwards: {prev.commit} -> {hs.commit}")

    def on_send(self, msg: Message) -> None:
        t = msg.type
        if t in _LEADER_MSGS:
            had = self.senders.get(msg.term)
            if had is None:
                self.senders[msg.term] = msg.frm
                leader = self.leaders.get(msg.term)
                if leader is not None and leader != msg.frm:
                    self.fail(f"{msg.frm} sent {t.name} in term {msg.term} whose leader is {leader}")
            elif had != msg.frm:
                self.fail(
                    f"transport invariant: both {had} and {msg.frm} sent leader messages in term {msg.term}"
                )
        elif t == MessageType.VOTE_RESP and not msg.reject:
            self._record_vote(msg.frm, msg.term, msg.to)

    def on_leader(self, node: NodeId, term: int, log_term: Callable[[int], int | None], snap_index: int) -> None:
        had = self.leaders.get(term)
        if had is not None and had != node:
            self.fail(f"election safety: two leaders in term {term}: {had} and {node}")
        self.leaders[term] = node
        sender = self.senders.get(term)
        if sender is not None and sender != node:
            self.fail(f"{sender} sent leader messages in term {term} but {node} became its leader")
        self._check_has_committed(node, term, log_term, snap_index, "new leader")

    def check_election_quorum(self, node: NodeId, term: int, voters: tuple[NodeId, ...]) -> None:
        """A leader of term T was granted votes in T by a majority of the voters of its configuration."""
        granted = [v for v in voters if self.votes.get((v, term)) == node]
        if len(granted) * 2 <= len(voters):
            self.fail(
                f"{node} became leader of term {term} with votes from only {granted} of its voters {voters}"
            )

    def _check_has_committed(
        self, node: NodeId, term: int, log_term: Callable[[int], int | None], snap_index: int, who: str
    ) -> None:
        ci, ct = self.committed_index, self.committed_term
        if ci == 0 or ct >= term or ci <= snap_index:
            return
        t = log_term(ci)
        if t != ct:
            self.fail(
                f"leader completeness: {who} {node} (term {term}) has term {t} at committed index {ci}, "
                f"which was committed with term {ct}"
            )

    # ---- the log ----

    def on_append(
        self,
        node: NodeId,
        entries: tuple[Entry, ...],
        old_term: Callable[[int], int | None],
        old_last: int,
        first_index: int,
    ) -> None:
        """Entries about to be written to ``node``'s log (``old_term`` reads the log before the write)."""
        first = entries[0]
        prev_term = old_term(first.index - 1)
        ids = self.entry_ids
        for e in entries:
            key = (e.index, e.term)
            val = (int(e.type), e.data, prev_term if prev_term is not None else -1)
            had = ids.get(key)
            if had is None:
                ids[key] = val
            elif had != val:
                if had[2] == -1 or val[2] == -1:
                    if had[:2] != val[:2]:
                        self.fail(f"log matching: two different entries at index {e.index} term {e.term} ({node})")
                    if had[2] == -1:
                        ids[key] = val
                else:
                    self.fail(
                        f"log matching: entry (index {e.index}, term {e.term}) on {node} differs from one seen before "
                        f"(type/data/prev term {val!r} vs {had!r})"
                    )
            prev_term = e.term
        if first.index > old_last:
            return
        # The write truncates the log from first.index: it must be a real conflict, and it must
        # never remove an entry known to be committed.
        new_last = entries[-1].index
        conflict = None
        for e in entries:
            if e.index > old_last:
                break
            if e.index < first_index:
                continue
            t = old_term(e.index)
            if t != e.term:
                conflict = e.index
                break
        if conflict is None and old_last > new_last:
            self.fail(
                f"{node} erased non-conflicting entries {new_last + 1}..{old_last}: entries "
                f"{first.index}..{new_last} all matched the log"
            )
        if conflict is not None:
            for i in range(max(conflict, first_index), old_last + 1):
                got = self.applied.get(i)
                if got is not None and old_term(i) == got[0]:
                    replaced = i <= new_last and entries[i - first.index].term == got[0]
                    if not replaced:
                        self.fail(f"{node} truncated committed entry {i} (term {got[0]})")

    def on_snapshot_restore(self, node: NodeId, snap: Snapshot, commit: int) -> None:
        idx = snap.metadata.index
        if idx <= commit:
            self.fail(f"{node} restored a snapshot at {idx}, not above its commit index {commit}")
        got = self.applied.get(idx)
        if got is not None and got[0] != snap.metadata.term:
            self.fail(f"snapshot at {idx} has term {snap.metadata.term} but the entry applied there has term {got[0]}")

    def on_commit(self, node: NodeId, commit: int, term_at: int | None) -> None:
        if commit > self.committed_index and term_at is not None:
            self.committed_index = commit
            self.committed_term = term_at

    def check_leader_has_committed(
        self, node: NodeId, term: int, log_term: Callable[[int], int | None], snap_index: int
    ) -> None:
        self._check_has_committed(node, term, log_term, snap_index, "leader")

    def check_uncommitted_configs(self, node: NodeId, conf_indexes: list[int]) -> None:
        ci = self.committed_index
        n = 0
        for i in reversed(conf_indexes):
            if i <= ci:
                break
            n += 1
        if n > 1:
            self.fail(
                f"leader {node} has {n} uncommitted configuration entries (at {[i for i in conf_indexes if i > ci]})"
            )

    def check_progress(self, leader: NodeId, term: int, matches: dict[NodeId, int]) -> None:
        key = (leader, term)
        seen = self.match_seen.get(key)
        if seen is None:
            self.match_seen[key] = dict(matches)
            return
        for peer, m in matches.items():
            before = seen.get(peer, 0)
            if m < before:
                self.fail(f"match index of {peer} at leader {leader} (term {term}) went backwards: {before} -> {m}")
            seen[peer] = m

    # ---- the state machine ----

    def on_apply(self, node: NodeId, e: Entry) -> None:
        got = self.applied.get(e.index)
        val = (e.term, int(e.type), e.data)
        if got is None:
            self.applied[e.index] = val
        elif got != val:
            self.fail(
                f"state machine safety: {node} applied (term {e.term}, {e.data!r}) at index {e.index}, "
                f"another node applied (term {got[0]}, {got[2]!r})"
            )
        if e.index > self.committed_index:
            self.committed_index = e.index
            self.committed_term = e.term

    def on_ack(self, node: NodeId, index: int, term: int, data: bytes) -> None:
        got = self.applied.get(index)
        if got is None or got[0] != term or got[2] != data:
            self.fail(f"{node} acknowledged {data!r} at {index} but the applied entry there is {got!r}")
        self.acked[index] = (term, data)
        if index > self.read_frontier:
            self.read_frontier = index

    def check_acked_in(self, node: NodeId, applied_upto: int, applied_of: Callable[[int], bytes | None]) -> None:
        """Final check: every acknowledged write is in this node's applied sequence."""
        for index, (_term, data) in self.acked.items():
            if index <= applied_upto:
                got = applied_of(index)
                if got is not None and got != data:
                    self.fail(f"acknowledged write {data!r} at {index} is {got!r} on {node}")

    # ---- linearizable reads ----

    def read_invoked(self, ctx: bytes, node: NodeId, step: int) -> ReadRequest:
        return ReadRequest(ctx, node, step, self.read_frontier)

    def read_served(self, req: ReadRequest, served_index: int) -> None:
        if served_index < req.frontier:
            self.fail(
                f"stale read: read {req.ctx!r} on {req.node} (invoked at step {req.invoked_step}, read index "
                f"{req.index}) returned the state at {served_index}, but a write or read that completed "
                f"before it was invoked had reached {req.frontier}"
            )
        self.reads_served += 1
        if served_index > self.read_frontier:
            self.read_frontier = served_index


def conf_key(cs: ConfState) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(sorted(cs.voters)), tuple(sorted(cs.learners))


def is_conf_entry(e: Entry) -> bool:
    return e.type == EntryType.CONF_CHANGE
