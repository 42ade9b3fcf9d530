"""The Raft state machine proper: roles, elections, replication, commit, reads, transfer, membership.

Everything here is a deterministic function of (inputs so far, injected random source): the
driver calls ``tick``/``step``/``propose``... through :class:`~.rawnode.RawNode`, and this
module only mutates its own fields, queues outgoing messages in ``msgs`` and narrative lines
in ``logs``. Nothing leaves the core except through a Ready, so a message that depends on a
state change (a vote, an acknowledgement of appended entries) always travels in the same
Ready as the hard state / entries the driver must persist first.

Rules that the paper leaves implicit and that production Raft implementations have broken (each
has a regression scenario in tests/raft/sim/test_regressions.py), and where they are enforced:

* commit only by counting replicas of an entry of the leader's own term (``maybe_commit``);
* the vote is cleared only when the term increases (``_reset``);
* pre-vote + check-quorum together; a voter that heard from a leader within the election
  timeout ignores (pre)votes unless they carry the leader-transfer context (``step``);
* a configuration takes effect when appended, rolls back when truncated, at most one is
  uncommitted, and a leader accepts changes only after its no-op committed (``_apply_conf_*``);
* truncate only on a real conflict (``RaftLog.maybe_append``), commit and match never decrease.
"""

from __future__ import annotations

import enum
from collections import deque

from scm_server.raft.core import quorum
from scm_server.raft.core.confchange import conf_state_after, describe, validate_conf_change
from scm_server.raft.core.config import Config, RandomSource, ReadOnlyOption
from scm_server.raft.core.log import RaftLog
from scm_server.raft.core.progress import PeerProgress, ProgressState
from scm_server.raft.core.read_only import ReadOnly
from scm_server.raft.core.storage import (
    CompactedError,
    SnapshotTemporarilyUnavailableError,
    Storage,
)
from scm_server.raft.core.types import (
    NONE,
    ConfChange,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Message,
    MessageType,
    NodeId,
    ProposalDroppedError,
    ReadState,
    Snapshot,
    StateRole,
)

CAMPAIGN_TRANSFER = b"transfer"  # VOTE context: the election was started by a leader transfer (TIMEOUT_NOW)

MT = MessageType


class CampaignKind(enum.Enum):
    PRE_ELECTION = "pre-election"
    ELECTION = "election"


class Raft:
    """One node's Raft state. Not thread-safe; drive it from one task."""

    def __init__(self, config: Config, storage: Storage, rng: RandomSource) -> None:
        config.validate()
        self.id: NodeId = config.id
        self.cfg = config
        self.rng = rng
        self.log = RaftLog(storage, config.max_committed_size_per_ready)
        self.term = 0
        self.vote: NodeId = NONE
        self.lead: NodeId = NONE
        self.role = StateRole.FOLLOWER
        self.msgs: list[Message] = []
        self.read_states: list[ReadState] = []
        self.logs: deque[str] = deque(maxlen=10_000)
        self.debug = False
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.election_timeout = config.election_tick
        self.heartbeat_timeout = config.heartbeat_tick
        self.randomized_election_timeout = config.election_tick
        self.lead_transferee: NodeId = NONE
        self.read_only = ReadOnly()
        self.pending_read_index_msgs: list[Message] = []
        self.votes: dict[NodeId, bool] = {}
        self.prs: dict[NodeId, PeerProgress] = {}
        self.pending_bcast = False  # leader: send appends to every peer before the next Ready
        # configuration: `conf_base` is at or below the commit index; `conf_history` holds the
        # configurations of conf entries above it (newest last), so a truncation can roll back.
        self.conf = ConfState()
        self.conf_base: tuple[int, ConfState] = (0, ConfState())
        self.conf_history: list[tuple[int, ConfState]] = []

        hs, cs = storage.initial_state()
        self._restore_conf(cs, hs.commit)
        if hs != HardState():
            self._load_state(hs)
        if config.applied > 0:
            if config.applied > self.log.committed:
                raise RuntimeError(
                    f"applied index {config.applied} is beyond the persisted commit index {self.log.committed}:"
                    " the Raft log and the state machine are out of sync"
                )
            self.log.applied_to(config.applied)
        self.become_follower(self.term, NONE)
        self._info(
            f"{self.id} started: term={self.term} commit={self.log.committed} applied={self.log.applied}"
            f" last_index={self.log.last_index()} last_term={self.log.last_term()} {describe(self.conf)}"
        )

    # ------------------------------------------------------------------ logging

    def _info(self, text: str) -> None:
        self.logs.append("INFO " + text)

    def _debug(self, text: str) -> None:
        if self.debug:
            self.logs.append("DEBUG " + text)

    # ------------------------------------------------------------------ persistence of state

    def _load_state(self, hs: HardState) -> None:
        if hs.commit > self.log.last_index():
            raise RuntimeError(
                f"persisted commit {hs.commit} is beyond the last log index {self.log.last_index()}:"
                " the Raft log is missing entries that were committed"
            )
        # a snapshot index is committed by definition, even if the hard state lags behind it
        self.log.committed = max(hs.commit, self.log.committed)
        self.term = hs.term
        self.vote = hs.vote

    def hard_state(self) -> HardState:
        return HardState(term=self.term, vote=self.vote, commit=self.log.committed)

    # ------------------------------------------------------------------ configuration

    def _restore_conf(self, cs: ConfState, commit: int) -> None:
        """Rebuild the configuration (and its uncommitted history) after a restart."""
        log = self.log
        first, last = log.first_index(), log.last_index()
        lo = max(commit + 1, first)
        uncommitted_conf = lo <= last and any(
            e.type == EntryType.CONF_CHANGE for e in log.slice(lo, last + 1, None)
        )
        if not uncommitted_conf:
            self.conf_base = (first - 1, cs)
            self.conf_history = []
        else:
            try:
                base = log.snapshot().metadata.conf_state
            except SnapshotTemporarilyUnavailableError:
                base = cs
            self.conf_base = (first - 1, base)
            cur = base
            for e in log.slice(first, last + 1, None):
                if e.type == EntryType.CONF_CHANGE:
                    cur = conf_state_after(cur, ConfChange.decode(e.data))
                    if e.index <= commit:
                        self.conf_base = (e.index, cur)
                    else:
                        self.conf_history.append((e.index, cur))
        self.conf = self.conf_history[-1][1] if self.conf_history else self.conf_base[1]

    def conf_index(self) -> int:
        """Index of the entry (or snapshot) that produced the current configuration."""
        return self.conf_history[-1][0] if self.conf_history else self.conf_base[0]

    def has_pending_conf(self) -> bool:
        return bool(self.conf_history) and self.conf_history[-1][0] > self.log.committed

    def prune_conf_history(self) -> None:
        committed = self.log.committed
        while self.conf_history and self.conf_history[0][0] <= committed:
            self.conf_base = self.conf_history.pop(0)

    def _on_entries_appended(self, ents: list[Entry] | tuple[Entry, ...], first_written: int) -> None:
        """Entries from `first_written` on were (re)written: roll back truncated configs, apply new ones."""
        changed = False
        hist = self.conf_history
        if hist and hist[-1][0] >= first_written:
            while hist and hist[-1][0] >= first_written:
                idx, _ = hist.pop()
                self._info(f"{self.id} rolled back the configuration of truncated entry {idx}")
            changed = True
        cur = hist[-1][1] if hist else self.conf_base[1]
        for e in ents:
            if e.type == EntryType.CONF_CHANGE and e.index >= first_written:
                cur = conf_state_after(cur, ConfChange.decode(e.data))
                hist.append((e.index, cur))
                changed = True
        if changed:
            self._switch_to_config(cur)

    def _switch_to_config(self, cs: ConfState) -> None:
        self.conf = cs
        self._info(f"{self.id} switched to configuration {describe(cs)}")
        members = set(cs.voters) | set(cs.learners)
        for nid in list(self.prs):
            if nid not in members:
                del self.prs[nid]
        last = self.log.last_index()
        learners = set(cs.learners)
        for nid in cs.voters + cs.learners:
            pr = self.prs.get(nid)
            if pr is None:
                pr = PeerProgress(0, last + 1, self.cfg.max_inflight_msgs, nid in learners)
                if nid == self.id:
                    pr.match = self.log.stable_last_index()
                self.prs[nid] = pr
            else:
                pr.is_learner = nid in learners
        if self.role != StateRole.LEADER:
            return
        if self.lead_transferee and self.lead_transferee not in cs.voters:
            self._abort_leader_transfer()
        if self.id not in cs.voters:
            self._info(
                f"{self.id} is not a voter in the new configuration; it keeps replicating without counting"
                " itself until that configuration commits"
            )
        self.maybe_commit()
        self.pending_bcast = True

    # ------------------------------------------------------------------ role transitions

    def promotable(self) -> bool:
        return self.id in self.conf.voters

    def _reset_randomized_election_timeout(self) -> None:
        self.randomized_election_timeout = self.election_timeout + self.rng.randrange(0, self.election_timeout)

    def _reset(self, term: int) -> None:
        if self.term != term:
            self.term = term
            self.vote = NONE  # the only place a vote is cleared: when the term increases
        self.lead = NONE
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self._reset_randomized_election_timeout()
        self.lead_transferee = NONE
        self.votes = {}
        last = self.log.last_index()
        learners = set(self.conf.learners)
        mi = self.cfg.max_inflight_msgs
        self.prs = {nid: PeerProgress(0, last + 1, mi, nid in learners) for nid in self.conf.members()}
        own = self.prs.get(self.id)
        if own is not None:
            own.match = self.log.stable_last_index()
        self.read_only = ReadOnly()
        self.pending_read_index_msgs = []
        self.pending_bcast = False

    def become_follower(self, term: int, lead: NodeId) -> None:
        self._reset(term)
        self.lead = lead
        self.role = StateRole.FOLLOWER
        self._info(f"{self.id} became follower at term {self.term}")

    def become_pre_candidate(self) -> None:
        if self.role == StateRole.LEADER:
            raise RuntimeError("invalid transition [leader -> pre-candidate]")
        # no term change and no vote: a pre-election must not disturb anybody's state
        self.votes = {}
        self.lead = NONE  # forget the leader we (no longer) hear from
        self.role = StateRole.PRE_CANDIDATE
        self._info(f"{self.id} became pre-candidate at term {self.term}")

    def become_candidate(self) -> None:
        if self.role == StateRole.LEADER:
            raise RuntimeError("invalid transition [leader -> candidate]")
        self._reset(self.term + 1)
        self.vote = self.id
        self.role = StateRole.CANDIDATE
        self._info(f"{self.id} became candidate at term {self.term}")

    def become_leader(self) -> None:
        if self.role == StateRole.FOLLOWER:
            raise RuntimeError("invalid transition [follower -> leader]")
        self._reset(self.term)
        self.lead = self.id
        self.role = StateRole.LEADER
        own = self.prs.get(self.id)
        if own is not None:
            own.become_replicate()
            own.match = self.log.stable_last_index()
            own.next = self.log.last_index() + 1
        self._info(f"{self.id} became leader at term {self.term}")
        # the no-op: lets the leader commit (and learn the commit index of) earlier terms' entries
        self._append_entries([Entry(term=self.term, index=self.log.last_index() + 1)])

    # ------------------------------------------------------------------ sending

    def _send(
        self,
        mtype: MessageType,
        to: NodeId,
        *,
        term: int | None = None,
        log_term: int = 0,
        index: int = 0,
        entries: tuple[Entry, ...] = (),
        commit: int = 0,
        snapshot: Snapshot | None = None,
        reject: bool = False,
        reject_hint: int = 0,
        context: bytes = b"",
    ) -> None:
        self.msgs.append(
            Message(
                mtype,
                to,
                self.id,
                self.term if term is None else term,
                log_term,
                index,
                entries,
                commit,
                snapshot,
                reject,
                reject_hint,
                context,
            )
        )

    def flush(self) -> None:
        """Emit the appends that proposals and commit advances asked for (batched per Ready)."""
        if self.pending_bcast:
            self.pending_bcast = False
            if self.role == StateRole.LEADER:
                self.bcast_append()

    def read_messages(self) -> list[Message]:
        self.flush()
        msgs = self.msgs
        self.msgs = []
        return msgs

    def send_append(self, to: NodeId, send_if_empty: bool = True) -> bool:
        """Send the entries `to` is missing (or a snapshot, or an empty probe/commit update)."""
        pr = self.prs[to]
        if pr.is_paused():
            return False
        prev = pr.next - 1
        try:
            prev_term = self.log.term(prev)
            ents = self.log.entries_from(pr.next, self.cfg.max_size_per_msg)
        except CompactedError:
            return self._send_snapshot(to, pr)
        if not ents and not send_if_empty:
            return False
        self._send(
            MT.APPEND, to, index=prev, log_term=prev_term, entries=tuple(ents), commit=self.log.committed
        )
        if ents:
            pr.sent_entries(len(ents), ents[-1].index)
        return True

    def _send_snapshot(self, to: NodeId, pr: PeerProgress) -> bool:
        if not pr.recent_active:
            self._debug(f"{self.id} ignores sending a snapshot to {to}: it is not recently active")
            return False
        try:
            snap = self.log.snapshot()
        except SnapshotTemporarilyUnavailableError:
            self._debug(f"{self.id} failed to send a snapshot to {to}: temporarily unavailable")
            return False
        if snap.is_empty():
            raise RuntimeError(f"{to} needs compacted entries but storage has no snapshot")
        m = snap.metadata
        self._info(
            f"{self.id} [first_index: {self.log.first_index()}, commit: {self.log.committed}] sent snapshot"
            f" [index: {m.index}, term: {m.term}] to {to} [{pr.describe()}]"
        )
        pr.become_snapshot(m.index)
        self._send(MT.SNAPSHOT, to, snapshot=snap)
        return True

    def bcast_append(self) -> None:
        for nid in self.prs:
            if nid != self.id:
                self.send_append(nid)

    def bcast_heartbeat(self, ctx: bytes = b"") -> None:
        committed = self.log.committed
        for nid, pr in self.prs.items():
            if nid != self.id:
                self._send(MT.HEARTBEAT, nid, commit=min(pr.match, committed), context=ctx)

    def _send_timeout_now(self, to: NodeId) -> None:
        self._send(MT.TIMEOUT_NOW, to)

    # ------------------------------------------------------------------ leader bookkeeping

    def _append_entries(self, ents: list[Entry]) -> None:
        self.log.append(ents)
        self._on_entries_appended(ents, ents[0].index)
        self.pending_bcast = True

    def maybe_commit(self) -> bool:
        """Advance commit to the highest index on a majority of voters, if that entry is of our term."""
        prs = self.prs
        mci = quorum.committed_index(self.conf.voters, lambda v: prs[v].match if v in prs else 0)
        if mci <= self.log.committed or self.log.term_or_zero(mci) != self.term:
            return False  # Figure 8: never commit an older term's entry by counting replicas
        self.log.commit_to(mci)
        self._after_leader_commit()
        return True

    def _after_leader_commit(self) -> None:
        self.pending_bcast = True
        if self.pending_read_index_msgs and self.committed_entry_in_current_term():
            pending, self.pending_read_index_msgs = self.pending_read_index_msgs, []
            for m in pending:
                self._send_read_index_response(m)
        if self.id not in self.conf.voters and self.log.committed >= self.conf_index():
            self.flush()  # let the followers learn that the configuration committed
            self._info(
                f"{self.id} steps down: the configuration without it (index {self.conf_index()}) is committed"
            )
            # hand over at once to an up-to-date voter instead of waiting for the followers' leases
            last = self.log.last_index()
            successors = sorted(v for v in self.conf.voters if v in self.prs and self.prs[v].match == last)
            if successors:
                self._info(f"{self.id} sends TIMEOUT_NOW to {successors[0]} to hand over leadership")
                self._send_timeout_now(successors[0])
            self.become_follower(self.term, NONE)

    def committed_entry_in_current_term(self) -> bool:
        return self.log.term_or_zero(self.log.committed) == self.term

    def on_persisted(self) -> None:
        """The driver made the local log durable up to stable_last_index (called from advance)."""
        if self.role != StateRole.LEADER:
            return
        own = self.prs.get(self.id)
        if own is not None and own.maybe_update(self.log.stable_last_index()):
            self.maybe_commit()

    def _abort_leader_transfer(self) -> None:
        if self.lead_transferee:
            self._info(f"{self.id} aborts leadership transfer to {self.lead_transferee}")
        self.lead_transferee = NONE

    def quorum_active(self) -> bool:
        active = [nid for nid, pr in self.prs.items() if nid == self.id or pr.recent_active]
        return quorum.has_quorum(self.conf.voters, active)

    # ------------------------------------------------------------------ local inputs

    def tick(self) -> None:
        if self.role == StateRole.LEADER:
            self._tick_heartbeat()
        else:
            self._tick_election()

    def _tick_election(self) -> None:
        self.election_elapsed += 1
        if self.promotable() and self.election_elapsed >= self.randomized_election_timeout:
            self.election_elapsed = 0
            self.hup()

    def _tick_heartbeat(self) -> None:
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.election_elapsed >= self.election_timeout:
            self.election_elapsed = 0
            if self.cfg.check_quorum:
                if not self.quorum_active():
                    self._info(f"{self.id} stepped down to follower since quorum is not active")
                    self.become_follower(self.term, NONE)
                    return
                for nid, pr in self.prs.items():
                    if nid != self.id:
                        pr.recent_active = False
            if self.lead_transferee:
                self._abort_leader_transfer()  # the transfer did not finish within an election timeout
        if self.heartbeat_elapsed >= self.heartbeat_timeout:
            self.heartbeat_elapsed = 0
            ctx = self.read_only.last_pending_ctx() if self.cfg.read_only_option == ReadOnlyOption.SAFE else b""
            self.bcast_heartbeat(ctx)

    def hup(self, transfer: bool = False) -> None:
        if self.role == StateRole.LEADER:
            self._debug(f"{self.id} ignoring campaign: already leader")
            return
        if not self.promotable():
            self._info(f"{self.id} is not a voter and cannot campaign")
            return
        self._info(f"{self.id} is starting a new election at term {self.term}")
        if transfer:
            self.campaign(CampaignKind.ELECTION, transfer=True)
        elif self.cfg.pre_vote:
            self.campaign(CampaignKind.PRE_ELECTION)
        else:
            self.campaign(CampaignKind.ELECTION)

    def campaign(self, kind: CampaignKind, transfer: bool = False) -> None:
        if kind == CampaignKind.PRE_ELECTION:
            self.become_pre_candidate()
            vote_type, term = MT.PRE_VOTE, self.term + 1
        else:
            self.become_candidate()
            vote_type, term = MT.VOTE, self.term
        if self._poll(self.id, vote_type, True) == quorum.VoteResult.WON:
            # a single-voter configuration wins at once
            if kind == CampaignKind.PRE_ELECTION:
                self.campaign(CampaignKind.ELECTION)
            else:
                self.become_leader()
            return
        last_index, last_term = self.log.last_index(), self.log.last_term()
        ctx = CAMPAIGN_TRANSFER if transfer else b""
        for nid in self.conf.voters:
            if nid == self.id:
                continue
            self._info(
                f"{self.id} [logterm: {last_term}, index: {last_index}] sent {vote_type.name} request to {nid}"
                f" at term {term}"
            )
            self._send(vote_type, nid, term=term, index=last_index, log_term=last_term, context=ctx)

    def _poll(self, nid: NodeId, vote_type: MessageType, granted: bool) -> quorum.VoteResult:
        if granted:
            self._info(f"{self.id} received {vote_type.name} vote from {nid} at term {self.term}")
        else:
            self._info(f"{self.id} received {vote_type.name} rejection from {nid} at term {self.term}")
        self.votes.setdefault(nid, granted)
        return quorum.vote_result(self.conf.voters, self.votes)

    def propose(self, data: bytes) -> int:
        self._check_can_propose()
        index = self.log.last_index() + 1
        self._append_entries([Entry(term=self.term, index=index, type=EntryType.NORMAL, data=data)])
        return index

    def propose_conf_change(self, cc: ConfChange) -> int:
        self._check_can_propose(conf_change=True)
        if not self.committed_entry_in_current_term():
            raise ProposalDroppedError(
                f"conf change {cc.type.name} {cc.node_id} refused: leader {self.id} has not committed its"
                f" no-op of term {self.term} yet; retry shortly"
            )
        if self.has_pending_conf():
            raise ProposalDroppedError(
                f"conf change {cc.type.name} {cc.node_id} refused: the configuration change at index"
                f" {self.conf_index()} is not committed yet (one change at a time)"
            )
        self._check_can_propose()
        why = validate_conf_change(self.conf, cc, self.id)
        if why is not None:
            raise ProposalDroppedError(f"conf change {cc.type.name} {cc.node_id} refused: {why}")
        index = self.log.last_index() + 1
        self._append_entries([Entry(term=self.term, index=index, type=EntryType.CONF_CHANGE, data=cc.encode())])
        return index

    def _check_can_propose(self, conf_change: bool = False) -> None:
        if self.role != StateRole.LEADER:
            raise ProposalDroppedError(
                f"node {self.id} is not the leader (leader: {self.lead or 'unknown'}, term {self.term})"
            )
        if self.lead_transferee:
            raise ProposalDroppedError(
                f"leadership transfer from {self.id} to {self.lead_transferee} is in progress; retry on the new leader"
            )
        if conf_change:
            return  # the remaining checks come after the conf-change specific ones
        if self.id not in self.conf.voters:
            raise ProposalDroppedError(f"leader {self.id} is being removed from the configuration")
        uncommitted = self.log.last_index() - self.log.committed
        limit = self.cfg.max_uncommitted_entries
        if uncommitted >= limit:
            raise ProposalDroppedError(
                f"proposal queue full: {uncommitted} uncommitted entries (max_uncommitted_entries={limit});"
                " retry later"
            )

    def forget_leader(self) -> None:
        if self.role != StateRole.FOLLOWER or self.lead == NONE:
            return
        if self.cfg.read_only_option == ReadOnlyOption.LEASE_BASED:
            self._debug(f"{self.id} ignores forget-leader: lease-based reads are enabled")
            return
        self._info(f"{self.id} forgetting leader {self.lead} at term {self.term}")
        self.lead = NONE

    # ------------------------------------------------------------------ messages

    def step(self, m: Message) -> None:
        if m.term == 0:
            pass  # local message (or forwarded READ_INDEX / TRANSFER_LEADER)
        elif m.term > self.term:
            if m.type in (MT.VOTE, MT.PRE_VOTE):
                force = m.context == CAMPAIGN_TRANSFER
                in_lease = (
                    self.cfg.check_quorum and self.lead != NONE and self.election_elapsed < self.election_timeout
                )
                if not force and in_lease:
                    self._info(
                        f"{self.id} [logterm: {self.log.last_term()}, index: {self.log.last_index()}, vote:"
                        f" {self.vote or '0'}] ignored {m.type.name} from {m.frm} [logterm: {m.log_term}, index:"
                        f" {m.index}] at term {self.term}: lease is not expired (remaining ticks:"
                        f" {self.election_timeout - self.election_elapsed})"
                    )
                    return
            if m.type == MT.PRE_VOTE:
                pass  # never change our term because of a pre-vote request
            elif m.type == MT.PRE_VOTE_RESP and not m.reject:
                pass  # our own pre-election's future term; the term bumps when it wins
            else:
                self._info(
                    f"{self.id} [term: {self.term}] received a {m.type.name} with higher term from {m.frm}"
                    f" [term: {m.term}]"
                )
                if m.type in (MT.APPEND, MT.HEARTBEAT, MT.SNAPSHOT):
                    self.become_follower(m.term, m.frm)
                else:
                    self.become_follower(m.term, NONE)
        elif m.term < self.term:
            if (self.cfg.check_quorum or self.cfg.pre_vote) and m.type in (MT.HEARTBEAT, MT.APPEND):
                # a stale leader (e.g. back from a partition) learns our term from this and steps down;
                # without it, with check-quorum/pre-vote, it could block elections forever (etcd#5451)
                self._send(MT.APPEND_RESP, m.frm)
            elif m.type == MT.PRE_VOTE:
                self._info(
                    f"{self.id} [term: {self.term}] rejected PRE_VOTE from {m.frm} [term: {m.term}]: lower term"
                )
                self._send(MT.PRE_VOTE_RESP, m.frm, reject=True)
            else:
                self._debug(f"{self.id} [term: {self.term}] ignored a {m.type.name} from {m.frm} [term: {m.term}]")
            return

        if m.type in (MT.VOTE, MT.PRE_VOTE):
            self._handle_vote_request(m)
        elif self.role == StateRole.LEADER:
            self._step_leader(m)
        elif self.role == StateRole.FOLLOWER:
            self._step_follower(m)
        else:
            self._step_candidate(m)

    def _handle_vote_request(self, m: Message) -> None:
        can_vote = (
            self.vote == m.frm
            or (self.vote == NONE and self.lead == NONE)
            or (m.type == MT.PRE_VOTE and m.term > self.term)
        )
        resp = MT.VOTE_RESP if m.type == MT.VOTE else MT.PRE_VOTE_RESP
        desc = (
            f"{self.id} [logterm: {self.log.last_term()}, index: {self.log.last_index()}, vote: {self.vote or '0'}]"
        )
        if can_vote and self.log.is_up_to_date(m.index, m.log_term):
            self._info(f"{desc} cast {m.type.name} for {m.frm} [logterm: {m.log_term}, index: {m.index}] at term {self.term}")
            # a pre-vote answer carries the future term so the pre-candidate counts it
            self._send(resp, m.frm, term=m.term)
            if m.type == MT.VOTE:
                self.election_elapsed = 0
                self.vote = m.frm
        else:
            self._info(
                f"{desc} rejected {m.type.name} from {m.frm} [logterm: {m.log_term}, index: {m.index}] at term"
                f" {self.term}"
            )
            self._send(resp, m.frm, reject=True)

    # ---- leader

    def _step_leader(self, m: Message) -> None:
        t = m.type
        if t == MT.READ_INDEX:
            self._leader_read_index(m)
            return
        if t == MT.TRANSFER_LEADER:
            self._leader_transfer(m.frm)
            return
        pr = self.prs.get(m.frm)
        if pr is None:
            self._debug(f"{self.id} no progress available for {m.frm}")
            return
        if t == MT.APPEND_RESP:
            self._handle_append_resp(m, pr)
        elif t == MT.HEARTBEAT_RESP:
            pr.recent_active = True
            pr.msg_app_flow_paused = False
            if pr.state == ProgressState.REPLICATE and pr.inflights.full():
                pr.inflights.free_first_one()  # let one APPEND through: detects a window of lost APPENDs
            if pr.match < self.log.last_index() or pr.state == ProgressState.PROBE:
                self.send_append(m.frm)
            if self.cfg.read_only_option == ReadOnlyOption.SAFE and m.context:
                acks = self.read_only.recv_ack(m.frm, m.context)
                if acks is not None and quorum.has_quorum(self.conf.voters, acks):
                    for rs in self.read_only.advance(m.context):
                        self._respond_read_index(rs.req, rs.index)
        elif t == MT.SNAP_STATUS:
            if pr.state != ProgressState.SNAPSHOT:
                return
            if not m.reject:
                pr.become_probe()
                self._info(f"{self.id} snapshot succeeded, resumed sending replication messages to {m.frm} [{pr.describe()}]")
            else:
                pr.pending_snapshot = 0
                pr.become_probe()
                self._info(f"{self.id} snapshot failed, resumed sending replication messages to {m.frm} [{pr.describe()}]")
            # wait for a heartbeat response before probing (the snapshot may still be applying)
            pr.msg_app_flow_paused = True
        elif t == MT.UNREACHABLE:
            if pr.state == ProgressState.REPLICATE:
                pr.become_probe()
            self._debug(f"{self.id} failed to send a message to {m.frm}: unreachable [{pr.describe()}]")

    def _handle_append_resp(self, m: Message, pr: PeerProgress) -> None:
        pr.recent_active = True
        if m.reject:
            self._debug(
                f"{self.id} received APPEND_RESP(rejected, hint: (index {m.reject_hint}, term {m.log_term}))"
                f" from {m.frm} for index {m.index}"
            )
            next_probe = m.reject_hint
            if m.log_term > 0:
                next_probe, _ = self.log.find_conflict_by_term(m.reject_hint, m.log_term)
            if pr.maybe_decr_to(m.index, next_probe):
                self._debug(f"{self.id} decreased progress of {m.frm} to [{pr.describe()}]")
                if pr.state == ProgressState.REPLICATE:
                    pr.become_probe()
                self.send_append(m.frm)
            return
        old_paused = pr.is_paused()
        if pr.maybe_update(m.index) or (pr.match == m.index and pr.state == ProgressState.PROBE):
            if pr.state == ProgressState.PROBE:
                pr.become_replicate()
            elif pr.state == ProgressState.SNAPSHOT and pr.match + 1 >= self.log.first_index():
                # caught up without the snapshot (or it was applied): resume replication (etcd-io/raft#31)
                self._info(f"{self.id} recovered from needing snapshot, resumed sending replication messages to {m.frm} [{pr.describe()}]")
                pr.become_probe()
                pr.become_replicate()
            elif pr.state == ProgressState.REPLICATE:
                pr.inflights.free_le(m.index)
            if not self.maybe_commit() and old_paused and not self.pending_bcast:
                self.send_append(m.frm)  # (a pending broadcast covers this peer anyway)
            if self.role != StateRole.LEADER:
                return  # a removed leader stepped down on commit
            while self.send_append(m.frm, send_if_empty=False):
                pass
            if m.frm == self.lead_transferee and pr.match == self.log.last_index():
                self._info(f"{self.id} sent TIMEOUT_NOW to {m.frm} after its log caught up")
                self._send_timeout_now(m.frm)

    def _leader_transfer(self, target: NodeId) -> None:
        if target not in self.conf.voters:
            self._info(f"{self.id} ignored leadership transfer to {target}: not a voter")
            return
        if self.lead_transferee:
            if self.lead_transferee == target:
                self._info(f"{self.id} leadership transfer to {target} is already in progress; ignored")
                return
            self._abort_leader_transfer()
        if target == self.id:
            self._info(f"{self.id} is already leader; ignored transferring leadership to itself")
            return
        self._info(f"{self.id} starts to transfer leadership to {target}")
        self.election_elapsed = 0  # the transfer must finish within one election timeout
        self.lead_transferee = target
        pr = self.prs[target]
        if pr.match == self.log.last_index():
            self._info(f"{self.id} sends TIMEOUT_NOW to {target} immediately as its log is up to date")
            self._send_timeout_now(target)
        else:
            self.send_append(target)

    def _leader_read_index(self, m: Message) -> None:
        if not self.committed_entry_in_current_term():
            # the commit index of a new leader may be stale until its no-op commits
            self.pending_read_index_msgs.append(m)
            return
        self._send_read_index_response(m)

    def _send_read_index_response(self, m: Message) -> None:
        voters = self.conf.voters
        if voters == (self.id,):
            self._respond_read_index(m, self.log.committed)
        elif self.cfg.read_only_option == ReadOnlyOption.SAFE:
            self.read_only.add_request(self.log.committed, m)
            acks = self.read_only.recv_ack(self.id, m.context)
            if acks is not None and self.id in voters and quorum.has_quorum(voters, acks):
                for rs in self.read_only.advance(m.context):
                    self._respond_read_index(rs.req, rs.index)
                return
            self.bcast_heartbeat(m.context)
        else:
            self._respond_read_index(m, self.log.committed)

    def _respond_read_index(self, req: Message, index: int) -> None:
        if req.frm in (NONE, self.id):
            self.read_states.append(ReadState(index=index, request_ctx=req.context))
        else:
            self._send(MT.READ_INDEX_RESP, req.frm, index=index, context=req.context)

    # ---- candidate

    def _step_candidate(self, m: Message) -> None:
        pre = self.role == StateRole.PRE_CANDIDATE
        my_resp = MT.PRE_VOTE_RESP if pre else MT.VOTE_RESP
        t = m.type
        if t == MT.APPEND:
            self.become_follower(m.term, m.frm)  # a leader exists in our term
            self._handle_append(m)
        elif t == MT.HEARTBEAT:
            self.become_follower(m.term, m.frm)
            self._handle_heartbeat(m)
        elif t == MT.SNAPSHOT:
            self.become_follower(m.term, m.frm)
            self._handle_snapshot(m)
        elif t == my_resp:
            if pre and not m.reject and m.term != self.term + 1:
                return  # a pre-vote granted for another pre-election
            res = self._poll(m.frm, t, not m.reject)
            granted = sum(1 for v in self.conf.voters if self.votes.get(v) is True)
            rejected = sum(1 for v in self.conf.voters if self.votes.get(v) is False)
            self._info(f"{self.id} has received {granted} {t.name} votes and {rejected} vote rejections")
            if res == quorum.VoteResult.WON:
                if pre:
                    self.campaign(CampaignKind.ELECTION)
                else:
                    self.become_leader()
            elif res == quorum.VoteResult.LOST:
                self.become_follower(self.term, NONE)
        elif t == MT.TIMEOUT_NOW:
            self._debug(f"{self.id} ignored TIMEOUT_NOW from {m.frm}: already campaigning")
        elif t in (MT.READ_INDEX, MT.TRANSFER_LEADER):
            self._debug(f"{self.id} no leader at term {self.term}; dropping {t.name}")

    # ---- follower

    def _step_follower(self, m: Message) -> None:
        t = m.type
        if t == MT.APPEND:
            self.election_elapsed = 0
            self.lead = m.frm
            self._handle_append(m)
        elif t == MT.HEARTBEAT:
            self.election_elapsed = 0
            self.lead = m.frm
            self._handle_heartbeat(m)
        elif t == MT.SNAPSHOT:
            self.election_elapsed = 0
            self.lead = m.frm
            self._handle_snapshot(m)
        elif t == MT.TRANSFER_LEADER:
            if self.lead == NONE:
                self._info(f"{self.id} no leader at term {self.term}; dropping leadership transfer")
                return
            self.msgs.append(Message(MT.TRANSFER_LEADER, self.lead, m.frm, 0))
        elif t == MT.TIMEOUT_NOW:
            self._info(
                f"{self.id} [term {self.term}] received TIMEOUT_NOW from {m.frm} and starts an election to get"
                " leadership"
            )
            # skips pre-vote; the VOTEs carry the transfer context so lease checks let them through
            self.hup(transfer=True)
        elif t == MT.READ_INDEX:
            if self.lead == NONE:
                self._info(f"{self.id} no leader at term {self.term}; dropping READ_INDEX")
                return
            self.msgs.append(Message(MT.READ_INDEX, self.lead, m.frm, 0, context=m.context))
        elif t == MT.READ_INDEX_RESP:
            self.read_states.append(ReadState(index=m.index, request_ctx=m.context))

    def _handle_append(self, m: Message) -> None:
        if m.index < self.log.committed:
            self._send(MT.APPEND_RESP, m.frm, index=self.log.committed)
            return
        res = self.log.maybe_append(m.index, m.log_term, m.commit, m.entries)
        if res is not None:
            lastnewi, first_written = res
            if first_written:
                self._on_entries_appended(m.entries, first_written)
            self._send(MT.APPEND_RESP, m.frm, index=lastnewi)
            return
        hint_index = min(m.index, self.log.last_index())
        hint_index, hint_term = self.log.find_conflict_by_term(hint_index, m.log_term)
        self._debug(
            f"{self.id} [logterm: {self.log.term_or_zero(m.index)}, index: {m.index}] rejected APPEND"
            f" [logterm: {m.log_term}, index: {m.index}] from {m.frm}"
        )
        self._send(MT.APPEND_RESP, m.frm, index=m.index, reject=True, reject_hint=hint_index, log_term=hint_term)

    def _handle_heartbeat(self, m: Message) -> None:
        self.log.commit_to(m.commit)
        self._send(MT.HEARTBEAT_RESP, m.frm, context=m.context)

    def _handle_snapshot(self, m: Message) -> None:
        snap = m.snapshot
        if snap is None:
            return
        sm = snap.metadata
        if self._restore(snap):
            self._info(f"{self.id} [commit: {self.log.committed}] restored snapshot [index: {sm.index}, term: {sm.term}]")
            self._send(MT.APPEND_RESP, m.frm, index=self.log.last_index())
        else:
            self._info(f"{self.id} [commit: {self.log.committed}] ignored snapshot [index: {sm.index}, term: {sm.term}]")
            self._send(MT.APPEND_RESP, m.frm, index=self.log.committed)

    def _restore(self, snap: Snapshot) -> bool:
        sm = snap.metadata
        if sm.index <= self.log.committed:
            return False
        if self.log.match_term(sm.index, sm.term):
            # we have the snapshot's last entry: keep the suffix, just learn that it is committed
            self._info(
                f"{self.id} [commit: {self.log.committed}] fast-forwarded commit to snapshot [index: {sm.index},"
                f" term: {sm.term}]"
            )
            self.log.commit_to(sm.index)
            return False
        self.log.restore(snap)
        self.conf_base = (sm.index, sm.conf_state)
        self.conf_history = []
        self._switch_to_config(sm.conf_state)
        return True

    # ------------------------------------------------------------------ introspection

    def describe_state(self) -> str:
        return f"{self.role.name} term={self.term} lead={self.lead or '0'}"
