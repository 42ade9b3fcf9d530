"""A deterministic simulated Raft cluster: N pure RawNodes, simulated disks, one seeded RNG.

Why it exists: the pure core has no I/O, so the whole distributed system (nodes, disks,
network, clients, failures) can be simulated in one thread and replayed exactly from a seed.
This module is the driver that a real server would be (:mod:`scm_server.raft.server`), with
its effects replaced by models that can fail in controlled ways:

* :class:`SimDisk` keeps what survives a crash. A Ready written with ``must_sync=False`` goes
  to a pending list and may be lost (a random prefix of the pending writes survives, like a
  write-ahead log without fsync); a synced write flushes everything before it.
* :class:`SimStateMachine` applies committed entries into a running digest and keeps a durable
  copy that is flushed at random moments (Ozone's SCM flushes its transaction buffer on a
  timer), so restarts replay entries from the state machine's durable applied index.
* :class:`Cluster` handles each Ready in the order required by ``core/types.py`` (persist,
  then send, then apply, then advance), reports every fact to the :class:`~.invariants.Checker`
  and offers one method per action (tick, deliver, drop, duplicate, delay, propose, read,
  crash, restart, pause, partitions, membership changes, leader transfer, compaction). A
  method call is one simulation *step*; the invariants are checked after every step.

The random walk (:mod:`.walk`), the Hypothesis state machine and the scripted regression
scenarios all drive this same class.
"""

from __future__ import annotations

import contextlib
import functools
import random
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from scm_server.raft.core.confchange import conf_state_after
from scm_server.raft.core.rawnode import Config, RawNode, ReadOnlyOption
from scm_server.raft.core.storage import CompactedError, MemoryStorage, UnavailableError
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
    NodeId,
    ProposalDroppedError,
    Ready,
    Snapshot,
    SnapshotMetadata,
    StateRole,
)

from .invariants import Checker, InvariantViolation, LivenessViolation, ReadRequest, conf_key
from .network import Network

# Steps run in this process, for the session summary (conftest.py prints it).
STATS: dict[str, int] = {"steps": 0, "clusters": 0, "violations_expected": 0}

BOOT_INDEX = 1  # initial members are bootstrapped with a snapshot at index 1, term 1


def address_of(nid: NodeId) -> str:
    """Address strings travel in the configuration; the simulation never dials them."""
    return f"{nid}.sim.invalid:9894"


def clone_storage(src: MemoryStorage) -> MemoryStorage:
    """A fresh MemoryStorage holding the same snapshot, entries and hard state (public API only)."""
    dst = MemoryStorage()
    snap = src.snapshot()
    if not snap.is_empty():
        dst.apply_snapshot(snap)
    lo = max(src.first_index(), dst.first_index())
    hi = src.last_index()
    if hi >= lo:
        dst.append(src.entries(lo, hi + 1))
    dst.set_hard_state(src.hard_state)
    return dst


def derived_conf(st: MemoryStorage) -> ConfState:
    """The configuration a log implies: the snapshot's, then every conf entry in the log, in order.

    Computed here (not with ``MemoryStorage.initial_state``) so the check stays independent of
    the storage under test.
    """
    cs = st.snapshot().metadata.conf_state
    lo, hi = st.first_index(), st.last_index()
    if hi >= lo:
        for e in st.entries(lo, hi + 1):
            if e.type == EntryType.CONF_CHANGE:
                cs = conf_state_after(cs, ConfChange.decode(e.data))
    return cs


def storage_term(st: MemoryStorage, index: int) -> int | None:
    try:
        return st.term(index)
    except (CompactedError, UnavailableError):
        return None


# ---------------------------------------------------------------------------------------------
# the disk


@dataclass(slots=True)
class _Write:
    hard_state: HardState | None
    entries: tuple[Entry, ...]
    snapshot: Snapshot | None


class SimDisk:
    """Durable storage of one node: synced writes survive a crash, unsynced ones may not."""

    def __init__(self, durable: MemoryStorage) -> None:
        self.durable = durable
        self.pending: list[_Write] = []

    @staticmethod
    def apply_write(st: MemoryStorage, w: _Write) -> None:
        # one atomic write: snapshot, then entries, then hard state
        if w.snapshot is not None:
            st.apply_snapshot(w.snapshot)
        if w.entries:
            st.append(w.entries)
        if w.hard_state is not None:
            st.set_hard_state(w.hard_state)

    def write(self, w: _Write, sync: bool) -> None:
        self.pending.append(w)
        if sync:
            self.flush()

    def flush(self) -> None:
        for w in self.pending:
            self.apply_write(self.durable, w)
        self.pending.clear()

    def crash(self, rng: random.Random) -> int:
        """Power loss: a random prefix of the unsynced writes reached the disk. Returns how many were lost."""
        keep = rng.randrange(len(self.pending) + 1) if self.pending else 0
        lost = len(self.pending) - keep
        for w in self.pending[:keep]:
            self.apply_write(self.durable, w)
        self.pending.clear()
        return lost


# ---------------------------------------------------------------------------------------------
# the state machine


@dataclass(slots=True)
class SMState:
    index: int = 0
    term: int = 0
    digest: int = 0
    conf: ConfState = field(default_factory=ConfState)


class SimStateMachine:
    """Applies committed entries into a digest chain; its durable copy lags (flushed at random)."""

    def __init__(self, state: SMState) -> None:
        self.live = SMState(state.index, state.term, state.digest, state.conf)
        self.durable = SMState(state.index, state.term, state.digest, state.conf)
        self.values: dict[int, bytes] = {}  # index -> data of NORMAL entries applied (for final checks)

    def apply(self, e: Entry) -> None:
        s = self.live
        if e.index != s.index + 1:
            raise InvariantViolation(f"applied index {e.index} after {s.index}: committed entries must be contiguous")
        s.index = e.index
        s.term = e.term
        s.digest = zlib.crc32(e.data, zlib.crc32(f"{e.index}/{e.term}/{int(e.type)}".encode(), s.digest))
        if e.type == EntryType.CONF_CHANGE:
            s.conf = conf_state_after(s.conf, ConfChange.decode(e.data))
        elif e.data:
            self.values[e.index] = e.data

    def snapshot_data(self) -> bytes:
        return f"{self.live.index}/{self.live.term}/{self.live.digest}".encode()

    def restore(self, snap: Snapshot) -> None:
        meta = snap.metadata
        index, term, digest = (int(x) for x in snap.data.decode().split("/"))
        if index != meta.index or term != meta.term:
            raise InvariantViolation(f"snapshot data is for {index}/{term} but its metadata says {meta.index}/{meta.term}")
        self.live = SMState(index, term, digest, meta.conf_state)

    def flush(self) -> None:
        s = self.live
        self.durable = SMState(s.index, s.term, s.digest, s.conf)

    def crash(self) -> None:
        d = self.durable
        self.live = SMState(d.index, d.term, d.digest, d.conf)
        for i in [i for i in self.values if i > d.index]:
            del self.values[i]


# ---------------------------------------------------------------------------------------------
# a node


@dataclass(slots=True)
class Pending:
    term: int
    data: bytes


class SimNode:
    def __init__(self, nid: NodeId, durable: MemoryStorage, sm_state: SMState) -> None:
        self.id = nid
        self.disk = SimDisk(durable)
        self.sm = SimStateMachine(sm_state)
        self.storage: MemoryStorage = clone_storage(durable)
        self.raw: RawNode | None = None
        self.paused = False
        self.retired = False
        self.stalled_until = 0  # slow disk: Readies are not handled before this step
        self.incarnation = 0
        self.hs = HardState()
        self.role = StateRole.FOLLOWER
        self.leader: NodeId = NONE
        self.conf_indexes: list[int] = []  # indexes of CONF_CHANGE entries in the live log
        self.proposals: dict[int, Pending] = {}
        self.reads: dict[bytes, ReadRequest] = {}
        self.ready_reads: list[ReadRequest] = []
        self.pending_ready: Ready | None = None  # send_before_persist mutation: sent, not yet written

    @property
    def up(self) -> bool:
        return self.raw is not None and not self.retired

    @property
    def active(self) -> bool:
        return self.raw is not None and not self.retired and not self.paused

    def rebuild_conf_indexes(self) -> None:
        st = self.storage
        lo, hi = st.first_index(), st.last_index()
        ents = st.entries(lo, hi + 1) if hi >= lo else []
        self.conf_indexes = [e.index for e in ents if e.type == EntryType.CONF_CHANGE]


# ---------------------------------------------------------------------------------------------
# the cluster


@dataclass(frozen=True)
class SimOptions:
    election_tick: int = 10
    heartbeat_tick: int = 2
    pre_vote: bool = True
    check_quorum: bool = True
    max_size_per_msg: int = 256
    max_inflight_msgs: int = 4
    max_uncommitted_entries: int = 64
    sm_flush_prob: float = 0.3  # chance the state machine flushes after an apply batch
    read_only_option: ReadOnlyOption = ReadOnlyOption.SAFE
    # harness-level deliberately broken variants (mutations, see README.md)
    drop_vote_on_persist: bool = False  # the disk forgets hard_state.vote
    ignore_must_sync: bool = False  # every write stays unsynced (acked before durable)
    send_before_persist: bool = False  # a stalled disk does not hold back the Ready's messages


class Cluster:
    """N simulated nodes driven by one seeded ``random.Random``; every public action is a step."""

    def __init__(
        self,
        seed: int,
        n: int = 3,
        *,
        options: SimOptions | None = None,
        raw_node_cls: type[RawNode] = RawNode,
        check: bool = True,
        event_window: int = 60,
        trace: bool = False,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.opts = options or SimOptions()
        self.raw_node_cls = raw_node_cls
        self.net = Network()
        self.events: deque[tuple[int, str, Any]] = deque(maxlen=event_window)
        self.checker = Checker(context=self.describe_failure)
        self.check = check
        self.trace = trace
        self.trace_digest = 0  # with trace=True: a CRC of every event, to compare two runs of one seed
        self.step_no = 0
        self.nodes: dict[NodeId, SimNode] = {}
        self._value_seq = 0
        self._read_seq = 0
        self._next_id = n + 1
        self.acked_values: list[bytes] = []
        self._in_ready: set[NodeId] = set()
        self._deferred_reports: list[tuple[NodeId, NodeId, bool]] = []
        STATS["clusters"] += 1
        ids = [f"n{i}" for i in range(1, n + 1)]
        conf = ConfState(voters=tuple(ids), addresses=tuple((i, address_of(i)) for i in ids))
        sm_state = SMState(BOOT_INDEX, 1, 0, conf)
        for nid in ids:
            st = MemoryStorage()
            snap_data = f"{BOOT_INDEX}/1/0".encode()
            st.apply_snapshot(Snapshot(SnapshotMetadata(index=BOOT_INDEX, term=1, conf_state=conf), snap_data))
            st.set_hard_state(HardState(term=1, vote=NONE, commit=BOOT_INDEX))
            node = SimNode(nid, st, sm_state)
            self.nodes[nid] = node
            self._start(node)

    # ---- bookkeeping ----

    def event(self, kind: str, detail: Any = None) -> None:
        self.events.append((self.step_no, kind, detail))
        if self.trace:
            self.trace_digest = zlib.crc32(f"{self.step_no} {kind} {_fmt(detail)}".encode(), self.trace_digest)

    def describe_failure(self) -> str:
        lines = [f"seed={self.seed} step={self.step_no}  (reproduce with SIM_SEED={self.seed})", "last events:"]
        for step, kind, detail in self.events:
            lines.append(f"  [{step}] {kind} {_fmt(detail)}")
        lines.append("nodes:")
        for node in self.nodes.values():
            state = "retired" if node.retired else "down" if node.raw is None else "paused" if node.paused else "up"
            lines.append(
                f"  {node.id}: {state} role={node.role.name} term={node.hs.term} vote={node.hs.vote!r} "
                f"commit={node.hs.commit} applied={node.sm.live.index} log=[{node.storage.first_index()}.."
                f"{node.storage.last_index()}] leader={node.leader!r}"
            )
        return "\n".join(lines)

    @contextlib.contextmanager
    def report_exceptions(self) -> Iterator[None]:
        """Turn an unexpected exception (from the core or the harness) into a report with the seed."""
        try:
            yield
        except InvariantViolation:
            raise
        except Exception as exc:
            raise InvariantViolation(f"unexpected {exc!r}\n{self.describe_failure()}") from exc

    def _step_done(self) -> None:
        self.step_no += 1
        STATS["steps"] += 1

    def node_ids(self) -> list[NodeId]:
        return list(self.nodes)

    def up_ids(self) -> list[NodeId]:
        return [nid for nid, n in self.nodes.items() if n.up]

    def active_ids(self) -> list[NodeId]:
        return [nid for nid, n in self.nodes.items() if n.active]

    def leaders(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.up and n.role == StateRole.LEADER]

    def leader(self) -> SimNode | None:
        """The up leader with the highest term, if any."""
        best = None
        for n in self.leaders():
            if best is None or n.hs.term > best.hs.term:
                best = n
        return best

    # ---- lifecycle ----

    def _start(self, node: SimNode) -> None:
        o = self.opts
        cfg = Config(
            id=node.id,
            election_tick=o.election_tick,
            heartbeat_tick=o.heartbeat_tick,
            pre_vote=o.pre_vote,
            check_quorum=o.check_quorum,
            max_size_per_msg=o.max_size_per_msg,
            max_inflight_msgs=o.max_inflight_msgs,
            max_uncommitted_entries=o.max_uncommitted_entries,
            read_only_option=o.read_only_option,
            applied=self._restart_applied(node),
        )
        node.incarnation += 1
        node.raw = self.raw_node_cls(cfg, node.storage, random.Random(self.rng.randrange(1 << 30)))
        node.hs = node.storage.hard_state
        node.role = StateRole.FOLLOWER
        node.leader = NONE
        node.proposals.clear()
        node.reads.clear()
        node.ready_reads.clear()
        node.rebuild_conf_indexes()
        if self.check:
            self._check_conf(node)
        self._drain(node)

    @staticmethod
    def _restart_applied(node: SimNode) -> int:
        """The applied index handed to the core at (re)start, as the runtime computes it.

        The state machine persists its applied index with its state, but a commit-index-only
        hard state is written unsynced (``must_sync=False``), so after a power loss the state
        machine can be *ahead* of the durable commit index. The core refuses ``applied > commit``;
        the driver (``scm_server/raft/server.py``) starts it at ``min(sm index, commit)`` and skips
        re-delivered entries the state machine already holds. The simulation does the same and
        checks the skipped entries against what was applied before.
        """
        st = node.storage
        if node.sm.live.index < st.first_index() - 1:
            raise InvariantViolation(
                f"{node.id}: state machine at {node.sm.live.index} is behind the compacted log (first index "
                f"{st.first_index()}): it could not catch up from the local log"
            )
        return max(min(node.sm.live.index, st.hard_state.commit), st.first_index() - 1)

    def _check_conf(self, node: SimNode) -> None:
        """The core's effective configuration equals the one derived from its log."""
        assert node.raw is not None
        want = derived_conf(node.storage)
        got = node.raw.status().conf_state
        if conf_key(got) != conf_key(want) or dict(got.addresses) != dict(want.addresses):
            self.checker.fail(
                f"{node.id}: effective configuration {got} differs from the one its log implies {want} "
                "(latest config = last config entry in the log, else the snapshot's)"
            )

    # ---- Ready handling (the driver) ----

    def _drain(self, node: SimNode) -> None:
        raw = node.raw
        if raw is None or node.paused or node.retired:
            return
        if node.stalled_until > self.step_no:
            if self.opts.send_before_persist and node.pending_ready is None and raw.has_ready():
                # deliberately broken driver: messages go out while the write is still pending
                node.pending_ready = raw.ready()
                for m in node.pending_ready.messages:
                    self._send(m)
            return
        if node.pending_ready is not None:
            rd, node.pending_ready = node.pending_ready, None
            self._in_ready.add(node.id)
            try:
                self._handle_ready(node, rd, sent=True)
            finally:
                self._in_ready.discard(node.id)
            if node.raw is not raw or node.retired:
                return
        for _ in range(1000):
            if not raw.has_ready():
                return
            self._in_ready.add(node.id)
            try:
                self._handle_ready(node, raw.ready())
            finally:
                self._in_ready.discard(node.id)
            if node.raw is not raw or node.retired:
                return
            self._flush_deferred_reports(node)
        raise InvariantViolation(f"{node.id} kept producing Readies (1000 in a row)\n{self.describe_failure()}")

    def _handle_ready(self, node: SimNode, rd: Ready, sent: bool = False) -> None:
        raw = node.raw
        assert raw is not None
        chk = self.checker
        check = self.check
        nid = node.id
        st = node.storage
        prev_commit = node.hs.commit
        was_leader = node.role == StateRole.LEADER
        prev_term = node.hs.term
        # 1. persist: snapshot, entries and hard state in one write, synced when must_sync
        if rd.snapshot is not None:
            if check:
                chk.on_snapshot_restore(nid, rd.snapshot, prev_commit)
            st.apply_snapshot(rd.snapshot)
            node.conf_indexes = []
            self.event("restore", (nid, rd.snapshot.metadata.index, rd.snapshot.metadata.term))
        truncated = False
        voters_before = self._voters(node) if check and was_leader else ()
        if rd.entries:
            ents = rd.entries
            truncated = ents[0].index <= st.last_index()
            if check and truncated and was_leader and rd.soft_state is None:
                chk.fail(f"leader append-only: leader {nid} (term {prev_term}) rewrote its log from {ents[0].index}")
            if check:
                chk.on_append(nid, ents, lambda i: storage_term(st, i), st.last_index(), st.first_index())
            st.append(ents)
            first = ents[0].index
            ci = node.conf_indexes
            while ci and ci[-1] >= first:
                ci.pop()
            ci.extend(e.index for e in ents if e.type == EntryType.CONF_CHANGE)
        if rd.hard_state is not None:
            hs = rd.hard_state
            if check:
                chk.on_hard_state(nid, node.hs, hs)
            node.hs = hs
            st.set_hard_state(hs)
        persisted_hs = rd.hard_state
        if persisted_hs is not None and self.opts.drop_vote_on_persist:
            persisted_hs = HardState(persisted_hs.term, NONE, persisted_hs.commit)
        if persisted_hs is not None or rd.entries or rd.snapshot is not None:
            sync = rd.must_sync and not self.opts.ignore_must_sync
            before = node.disk.durable.hard_state
            node.disk.write(_Write(persisted_hs, rd.entries, rd.snapshot), sync)
            if check and sync:
                chk.on_durable_hard_state(nid, before, node.disk.durable.hard_state)
        if rd.soft_state is not None:
            node.role = rd.soft_state.role
            node.leader = rd.soft_state.leader
            if node.role == StateRole.LEADER:
                self.event("leader", (nid, node.hs.term))
                if check:
                    chk.on_leader(nid, node.hs.term, lambda i: storage_term(st, i), st.first_index() - 1)
                    chk.check_election_quorum(nid, node.hs.term, self._voters(node))
        if rd.conf_state is not None:
            self.event("conf", (nid, rd.conf_state.voters, rd.conf_state.learners))
            if check:
                want = derived_conf(st)
                if conf_key(want) != conf_key(rd.conf_state):
                    chk.fail(f"{nid}: Ready.conf_state {rd.conf_state} differs from its log's {want}")
        if check and node.hs.commit > prev_commit:
            chk.on_commit(nid, node.hs.commit, storage_term(st, node.hs.commit))
            if node.role == StateRole.LEADER or (was_leader and node.hs.term == prev_term):
                self._check_durable_quorum(node, node.hs.commit, voters_before)
            for other in self.leaders():
                if other is not node:
                    ost = other.storage
                    chk.check_leader_has_committed(
                        other.id, other.hs.term, functools.partial(storage_term, ost), ost.first_index() - 1
                    )
        # 2. send
        if not sent:
            for m in rd.messages:
                self._send(m)
        # 3. apply
        sm = node.sm
        if rd.snapshot is not None:
            sm.restore(rd.snapshot)
            sm.flush()  # an installed snapshot is the state machine's new durable state
            for i in [i for i in sm.values if i > rd.snapshot.metadata.index]:
                del sm.values[i]
            node.proposals = {i: p for i, p in node.proposals.items() if i > rd.snapshot.metadata.index}
        if rd.committed_entries:
            props = node.proposals
            for e in rd.committed_entries:
                if e.index > st.last_index() or storage_term(st, e.index) not in (e.term, None):
                    chk.fail(f"{nid} was told to apply entry {e.index} (term {e.term}) that is not in its log")
                if e.index > node.hs.commit:
                    chk.fail(f"{nid} was told to apply {e.index} beyond its commit index {node.hs.commit}")
                if e.index <= sm.live.index:
                    # re-delivered after a restart: the state machine already holds it
                    if check:
                        chk.on_apply(nid, e)
                    continue
                sm.apply(e)
                if check:
                    chk.on_apply(nid, e)
                p = props.pop(e.index, None)
                if p is not None and p.term == e.term and p.data == e.data:
                    if check:
                        chk.on_ack(nid, e.index, e.term, e.data)
                    self.acked_values.append(e.data)
                    self.event("ack", (nid, e.index, e.data))
            if self.rng.random() < self.opts.sm_flush_prob:
                sm.flush()
            for e in rd.committed_entries:
                if e.type == EntryType.CONF_CHANGE:
                    cc = ConfChange.decode(e.data)
                    if cc.type == ConfChangeType.REMOVE_NODE and cc.node_id == nid:
                        # A removed member shuts itself down once it applied its own removal (as SCM does).
                        node.retired = True
                        self.event("retired", nid)
        # reads
        for rs in rd.read_states:
            req = node.reads.pop(rs.request_ctx, None)
            if req is not None:
                req.index = rs.index
                node.ready_reads.append(req)
        # 4. advance
        raw.advance(rd)
        if node.ready_reads:
            self._serve_reads(node)
        if check and node.role == StateRole.LEADER:
            chk.check_uncommitted_configs(nid, node.conf_indexes)
        if check and truncated and node.raw is raw and not node.retired:
            self._check_conf(node)  # a truncated conf entry must roll the configuration back

    def _voters(self, node: SimNode) -> tuple[str, ...]:
        """Voters of the configuration the node's log implies (snapshot conf + its conf entries)."""
        st = node.storage
        cs = st.snapshot().metadata.conf_state
        for i in node.conf_indexes:
            cs = conf_state_after(cs, ConfChange.decode(st.entries(i, i + 1)[0].data))
        return cs.voters

    def _check_durable_quorum(self, leader: SimNode, commit: int, voters_before: tuple[str, ...]) -> None:
        """A leader commits index c only once a majority of its voters hold entry c *durably*.

        The leader may have switched configuration within the same Ready (a change proposed while
        its disk was slow), so a majority of the configuration before or after it is accepted.
        """
        term = storage_term(leader.storage, commit)
        if term is None:
            return
        holders: list[str] = []
        for v in set(voters_before) | set(self._voters(leader)):
            n = self.nodes.get(v)
            if n is None:
                continue
            d = n.disk.durable
            if commit <= d.snapshot().metadata.index or storage_term(d, commit) == term:
                holders.append(v)
        for voters in {voters_before, self._voters(leader)}:
            if voters and sum(1 for v in voters if v in holders) * 2 > len(voters):
                return
        self.checker.fail(
            f"leader {leader.id} (term {leader.hs.term}) committed index {commit} (term {term}) but only "
            f"{sorted(holders)} of voters {self._voters(leader)} hold it durably"
        )

    def _serve_reads(self, node: SimNode) -> None:
        applied = node.sm.live.index
        keep = []
        for req in node.ready_reads:
            if req.index <= applied:
                if self.check:
                    self.checker.read_served(req, applied)
                self.event("read-served", (node.id, req.ctx, req.index, applied))
            else:
                keep.append(req)
        node.ready_reads = keep

    def _send(self, m: Message) -> None:
        if self.check:
            self.checker.on_send(m)
        dst = self.nodes.get(m.to)
        if dst is None or dst.raw is None or dst.retired or not self.net.connected(m.frm, m.to):
            self.net.sent += 1
            self.net.dropped += 1
            if m.type == MessageType.SNAPSHOT:
                self._snapshot_done(m, False)
            return
        self.net.send(m, self.step_no)

    def _snapshot_done(self, m: Message, ok: bool) -> None:
        """The transport reports the end of a snapshot send to the sender (report_snapshot).

        If the sender is in the middle of handling a Ready (the send failed at once), the report
        waits until that Ready is advanced: the core must not be re-entered between ready() and
        advance().
        """
        src = self.nodes.get(m.frm)
        if src is None or src.raw is None or src.retired:
            return
        if src.id in self._in_ready:
            self._deferred_reports.append((src.id, m.to, ok))
            return
        src.raw.report_snapshot(m.to, ok)
        self.event("report-snapshot", (m.frm, m.to, ok))
        self._drain(src)

    def _flush_deferred_reports(self, node: SimNode) -> None:
        if not self._deferred_reports:
            return
        mine = [r for r in self._deferred_reports if r[0] == node.id]
        self._deferred_reports = [r for r in self._deferred_reports if r[0] != node.id]
        for _, to, ok in mine:
            if node.raw is not None and not node.retired:
                node.raw.report_snapshot(to, ok)
                self.event("report-snapshot", (node.id, to, ok))

    # ---- actions (each is one step) ----

    def tick(self, nid: NodeId) -> None:
        node = self.nodes[nid]
        if node.active:
            node.raw.tick()  # type: ignore[union-attr]
            self.event("tick", nid)
            self._drain(node)
        self._after()

    def tick_all(self, times: int = 1) -> None:
        for _ in range(times):
            for nid in self.node_ids():
                self.tick(nid)

    def deliver_index(self, i: int) -> None:
        env_msg = self.net.in_flight[i].msg
        dst = self.nodes.get(env_msg.to)
        if dst is not None and dst.paused:
            self._after()  # a paused process reads nothing: the message waits on the wire
            return
        msg = self.net.take(i)
        if msg is None:
            self.event("lost", env_msg)
            if env_msg.type == MessageType.SNAPSHOT:
                self._snapshot_done(env_msg, False)
        else:
            self._deliver(msg)
        self._after()

    def _deliver(self, msg: Message) -> None:
        node = self.nodes.get(msg.to)
        if node is None or not node.up:
            if msg.type == MessageType.SNAPSHOT:
                self._snapshot_done(msg, False)
            return
        self.event("deliver", msg)
        assert node.raw is not None
        node.raw.step(msg)
        self._drain(node)
        if msg.type == MessageType.SNAPSHOT:
            self._snapshot_done(msg, True)

    def deliver_one(self, reorder: bool = False) -> bool:
        i = self.net.pick(self.rng, self.step_no, set(self.active_ids()), reorder)
        if i is None:
            self._after()
            return False
        self.deliver_index(i)
        return True

    def deliver_where(self, pred: Callable[[Message], bool], limit: int = 10_000) -> int:
        """Deliver (in order) every in-flight message matching pred, including ones they cause."""
        n = 0
        while n < limit:
            active = set(self.active_ids())
            idx = next(
                (
                    i for i, env in enumerate(self.net.in_flight)
                    if env.msg.to in active and env.not_before <= self.step_no and pred(env.msg)
                ),
                None,
            )
            if idx is None:
                return n
            self.deliver_index(idx)
            n += 1
        return n

    def drop_where(self, pred: Callable[[Message], bool]) -> int:
        n = 0
        i = 0
        while i < len(self.net.in_flight):
            m = self.net.in_flight[i].msg
            if pred(m):
                self.net.drop(i)
                self.event("drop", m)
                if m.type == MessageType.SNAPSHOT:
                    self._snapshot_done(m, False)
                n += 1
            else:
                i += 1
        self._after()
        return n

    def drop_index(self, i: int) -> None:
        m = self.net.drop(i)
        self.event("drop", m)
        if m.type == MessageType.SNAPSHOT:
            self._snapshot_done(m, False)
        self._after()

    def duplicate_index(self, i: int) -> None:
        self.event("dup", self.net.duplicate(i))
        self._after()

    def delay_index(self, i: int, steps: int) -> None:
        self.event("delay", (self.net.delay(i, self.step_no + steps), steps))
        self._after()

    def stabilize(self, limit: int = 20_000) -> int:
        """Deliver messages (FIFO) until none is deliverable; returns how many were delivered."""
        n = 0
        while n < limit and self.deliver_one():
            n += 1
        return n

    def new_value(self) -> bytes:
        self._value_seq += 1
        return b"v%d" % self._value_seq

    def propose(self, nid: NodeId, data: bytes | None = None) -> int | None:
        node = self.nodes[nid]
        idx = None
        if node.active:
            data = data if data is not None else self.new_value()
            try:
                idx = node.raw.propose(data)  # type: ignore[union-attr]
            except ProposalDroppedError:
                self.event("propose-dropped", (nid, data))
            else:
                node.proposals[idx] = Pending(node.hs.term, data)
                self.event("propose", (nid, idx, data))
            self._drain(node)
        self._after()
        return idx

    def propose_conf(self, nid: NodeId, cc: ConfChange) -> int | None:
        node = self.nodes[nid]
        idx = None
        if node.active:
            try:
                idx = node.raw.propose_conf_change(cc)  # type: ignore[union-attr]
            except ProposalDroppedError as exc:
                self.event("conf-dropped", (nid, cc, str(exc)))
            else:
                self.event("propose-conf", (nid, idx, cc))
                if cc.type != ConfChangeType.REMOVE_NODE and cc.node_id not in self.nodes:
                    self._add_empty_node(cc.node_id)
            self._drain(node)
        self._after()
        return idx

    def _add_empty_node(self, nid: NodeId) -> None:
        node = SimNode(nid, MemoryStorage(), SMState())
        self.nodes[nid] = node
        self._start(node)

    def fresh_id(self) -> NodeId:
        nid = f"n{self._next_id}"
        self._next_id += 1
        return nid

    def add_learner(self, leader: NodeId, nid: NodeId | None = None) -> int | None:
        nid = nid or self.fresh_id()
        return self.propose_conf(leader, ConfChange(ConfChangeType.ADD_LEARNER, nid, address_of(nid)))

    def promote(self, leader: NodeId, nid: NodeId) -> int | None:
        return self.propose_conf(leader, ConfChange(ConfChangeType.ADD_NODE, nid, address_of(nid)))

    def remove(self, leader: NodeId, nid: NodeId) -> int | None:
        return self.propose_conf(leader, ConfChange(ConfChangeType.REMOVE_NODE, nid))

    def read(self, nid: NodeId) -> bytes | None:
        node = self.nodes[nid]
        ctx = None
        if node.active:
            self._read_seq += 1
            ctx = b"r%d" % self._read_seq
            node.reads[ctx] = self.checker.read_invoked(ctx, nid, self.step_no)
            node.raw.read_index(ctx)  # type: ignore[union-attr]
            self.event("read", (nid, ctx))
            self._drain(node)
        self._after()
        return ctx

    def report_unreachable(self, nid: NodeId, peer: NodeId) -> None:
        """The transport tells ``nid`` that sending to ``peer`` failed."""
        node = self.nodes[nid]
        if node.active:
            node.raw.report_unreachable(peer)  # type: ignore[union-attr]
            self.event("unreachable", (nid, peer))
            self._drain(node)
        self._after()

    def forget_leader(self, nid: NodeId) -> None:
        node = self.nodes[nid]
        if node.active:
            node.raw.forget_leader()  # type: ignore[union-attr]
            self.event("forget-leader", nid)
            self._drain(node)
        self._after()

    def campaign(self, nid: NodeId) -> None:
        node = self.nodes[nid]
        if node.active:
            node.raw.campaign()  # type: ignore[union-attr]
            self.event("campaign", nid)
            self._drain(node)
        self._after()

    def transfer(self, leader: NodeId, target: NodeId) -> None:
        node = self.nodes[leader]
        if node.active:
            node.raw.transfer_leader(target)  # type: ignore[union-attr]
            self.event("transfer", (leader, target))
            self._drain(node)
        self._after()

    def crash(self, nid: NodeId, lose_unsynced: bool | None = None) -> None:
        """Power loss: volatile state is gone, and unsynced writes are lost (all if lose_unsynced,
        none if False, a random suffix if None)."""
        node = self.nodes[nid]
        if node.raw is not None and not node.retired:
            if lose_unsynced is None:
                lost = node.disk.crash(self.rng)
            else:
                lost = len(node.disk.pending) if lose_unsynced else 0
                if not lose_unsynced:
                    node.disk.flush()
                node.disk.pending.clear()
            node.pending_ready = None
            node.sm.crash()
            node.raw = None
            node.paused = False
            node.stalled_until = 0
            node.role = StateRole.FOLLOWER
            for m in self.net.drop_to(nid):
                if m.type == MessageType.SNAPSHOT:
                    self._snapshot_done(m, False)  # the transport sees the stream break
            self.event("crash", (nid, f"lost {lost} unsynced writes"))
        self._after()

    def restart(self, nid: NodeId) -> None:
        node = self.nodes[nid]
        if node.raw is None and not node.retired:
            node.storage = clone_storage(node.disk.durable)
            hs = node.storage.hard_state
            self.event("restart", (nid, f"sm applied={node.sm.live.index} hs={hs}"))
            self._start(node)
        self._after()

    def pause(self, nid: NodeId) -> None:
        node = self.nodes[nid]
        if node.up:
            node.paused = True
            self.event("pause", nid)
        self._after()

    def resume(self, nid: NodeId) -> None:
        node = self.nodes[nid]
        if node.paused:
            node.paused = False
            self.event("resume", nid)
            self._drain(node)
        self._after()

    def stall_disk(self, nid: NodeId, steps: int) -> None:
        node = self.nodes[nid]
        if node.up:
            node.stalled_until = self.step_no + steps
            self.event("stall-disk", (nid, steps))
        self._after()

    def unstall_all(self) -> None:
        for node in self.nodes.values():
            node.stalled_until = 0
            self._drain(node)

    def partition(self, groups: Sequence[Sequence[NodeId]]) -> None:
        self.net.partition(groups)
        self.event("partition", groups)
        self._after()

    def cut(self, src: NodeId, dst: NodeId) -> None:
        self.net.cut(src, dst)
        self.event("cut", (src, dst))
        self._after()

    def isolate(self, nid: NodeId) -> None:
        self.net.isolate(nid, [o for o in self.nodes if o != nid])
        self.event("isolate", nid)
        self._after()

    def bridge(self, nodes: Sequence[NodeId]) -> None:
        self.net.bridge(nodes)
        self.event("bridge", nodes)
        self._after()

    def majorities_ring(self, nodes: Sequence[NodeId]) -> None:
        self.net.majorities_ring(nodes)
        self.event("majorities-ring", nodes)
        self._after()

    def heal(self) -> None:
        self.net.heal()
        self.event("heal")
        self._after()

    def compact(self, nid: NodeId, keep: int = 0) -> bool:
        """Take a snapshot at the node's applied index and compact its log, keeping ``keep`` entries."""
        node = self.nodes[nid]
        done = False
        if node.up and node.stalled_until <= self.step_no:
            sm = node.sm
            st = node.storage
            idx = sm.live.index
            if idx > st.snapshot().metadata.index and idx <= st.last_index():
                node.disk.flush()
                sm.flush()
                data = sm.snapshot_data()
                st.create_snapshot(idx, sm.live.conf, data)
                node.disk.durable.create_snapshot(idx, sm.live.conf, data)
                upto = idx - keep
                if upto > st.first_index() - 1:
                    st.compact(upto)
                    node.disk.durable.compact(upto)
                    node.conf_indexes = [i for i in node.conf_indexes if i > upto]
                self.event("compact", (nid, idx, upto))
                done = True
        self._after()
        return done

    # ---- after every step ----

    def _after(self) -> None:
        if self.check:
            for node in self.leaders():
                if node.active and node.raw is not None:
                    status = node.raw.status()
                    matches = {p: pr.match for p, pr in status.progress.items() if p != node.id}
                    self.checker.check_progress(node.id, node.hs.term, matches)
                    self._check_matches_truthful(node, matches)
        self._step_done()

    def _check_matches_truthful(self, leader: SimNode, matches: dict[NodeId, int]) -> None:
        for peer, m in matches.items():
            if m <= 0:
                continue
            f = self.nodes.get(peer)
            if f is None or f.raw is None or f.hs.term != leader.hs.term:
                continue
            fst = f.storage
            if m <= fst.first_index() - 1:
                continue
            want = storage_term(leader.storage, m)
            got = storage_term(fst, m)
            if want is not None and got != want:
                self.checker.fail(
                    f"leader {leader.id} (term {leader.hs.term}) believes {peer} matches up to {m} (term {want}), "
                    f"but {peer} has term {got} there (log {fst.first_index()}..{fst.last_index()})"
                )

    # ---- liveness ----

    def heal_all(self) -> None:
        """Undo every fault: heal the network, resume paused nodes, restart crashed ones, unstall disks."""
        self.net.heal()
        for node in self.nodes.values():
            if node.retired:
                continue
            node.stalled_until = 0
            if node.paused:
                node.paused = False
            if node.raw is None:
                self.restart(node.id)
            self._drain(node)
        self.event("heal-all")
        self._after()

    def converge(self, max_rounds: int = 300) -> SimNode:
        """After heal_all: within bounded rounds a leader exists and a fresh write commits everywhere.

        A round ticks every node once and delivers every message. Returns the leader.
        """
        value = self.new_value()
        proposed_at: tuple[NodeId, int, int] | None = None
        for _ in range(max_rounds):
            for nid in self.node_ids():
                if self.nodes[nid].active:
                    self.tick(nid)
            self.stabilize()
            lead = self.leader()
            if lead is None:
                continue
            if proposed_at is None or proposed_at[0] != lead.id or proposed_at[1] != lead.incarnation:
                idx = self.propose(lead.id, value)
                if idx is not None:
                    proposed_at = (lead.id, lead.incarnation, idx)
                continue
            idx = proposed_at[2]
            conf = lead.storage.initial_state()[1]
            if lead.sm.live.index >= idx and all(
                m in self.nodes and self.nodes[m].up and self.nodes[m].sm.live.index >= idx for m in conf.members()
            ):
                return lead
        raise LivenessViolation(
            f"no leader committed a write to all members within {max_rounds} rounds after healing\n"
            f"{self.describe_failure()}"
        )

    def await_progress(self, max_rounds: int = 100, nodes: Sequence[NodeId] | None = None) -> SimNode:
        """Under the current faults: within bounded rounds some leader acknowledges a fresh write.

        A round ticks every active node (or those in ``nodes``) once and delivers every message.
        """
        value = self.new_value()
        acked_before = len(self.acked_values)
        tried: set[tuple[NodeId, int, int]] = set()
        for _ in range(max_rounds):
            for nid in nodes or self.node_ids():
                if self.nodes[nid].active:
                    self.tick(nid)
            self.stabilize()
            if value in self.acked_values[acked_before:]:
                lead = self.leader()
                assert lead is not None
                return lead
            for lead in self.leaders():
                key = (lead.id, lead.incarnation, lead.hs.term)
                if key not in tried and lead.active:
                    tried.add(key)
                    self.propose(lead.id, value)
        raise LivenessViolation(
            f"no write was acknowledged within {max_rounds} rounds under the current faults\n{self.describe_failure()}"
        )

    def final_checks(self) -> None:
        for node in self.nodes.values():
            if node.up:
                self.checker.check_acked_in(node.id, node.sm.live.index, node.sm.values.get)


def _fmt(detail: Any) -> str:
    if isinstance(detail, Message):
        m = detail
        text = f"{m.type.name} {m.frm}->{m.to} t{m.term}"
        if m.type in (MessageType.APPEND, MessageType.APPEND_RESP):
            text += f" idx={m.index} lt={m.log_term} commit={m.commit}"
            if m.entries:
                text += f" ents={m.entries[0].index}..{m.entries[-1].index}"
            if m.reject:
                text += f" REJECT hint={m.reject_hint}"
        elif m.type in (MessageType.VOTE_RESP, MessageType.PRE_VOTE_RESP):
            text += " reject" if m.reject else " granted"
        elif m.type == MessageType.SNAPSHOT and m.snapshot is not None:
            text += f" snap={m.snapshot.metadata.index}/{m.snapshot.metadata.term}"
        elif m.type in (MessageType.HEARTBEAT, MessageType.HEARTBEAT_RESP) and m.context:
            text += f" ctx={m.context!r}"
        return text
    if isinstance(detail, tuple) and len(detail) == 2 and isinstance(detail[0], Message):
        return f"{_fmt(detail[0])} +{detail[1]}"
    return "" if detail is None else str(detail)


def ids(nodes: Iterable[SimNode]) -> list[NodeId]:
    return [n.id for n in nodes]
