"""RawNode: the public, single-threaded entry point of the pure Raft core (etcd-io/raft's shape).

The driver (``scm_server.raft.server``, the interaction harness, the simulator) feeds inputs
with ``tick``/``step``/``propose``/... and drains outputs with ``ready()``; it then persists,
sends, applies (in the order documented in :mod:`~.types`) and calls ``advance(rd)``. Exactly
one Ready may be outstanding: call ``advance`` before the next ``ready``. Inputs may arrive
between the two (e.g. while the driver awaits an fsync).

RawNode adds to :class:`~.raft.Raft` only the Ready bookkeeping: what changed since the last
Ready (hard state, soft state, configuration) and what became durable on ``advance``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scm_server.raft.core.config import Config, RaftConfigError, RandomSource, ReadOnlyOption
from scm_server.raft.core.progress import ProgressState
from scm_server.raft.core.raft import Raft
from scm_server.raft.core.storage import Storage
from scm_server.raft.core.types import (
    NONE,
    ConfChange,
    ConfState,
    HardState,
    Message,
    MessageType,
    NodeId,
    Ready,
    SoftState,
    StateRole,
)

__all__ = [
    "Config",
    "Progress",
    "ProgressState",
    "RaftConfigError",
    "RandomSource",
    "RawNode",
    "ReadOnlyOption",
    "Status",
]


@dataclass(frozen=True, slots=True)
class Progress:
    """A copy of the leader's view of one peer (Status.progress)."""

    match: int
    next: int
    state: ProgressState
    recent_active: bool
    is_learner: bool = False
    pending_snapshot: int = 0
    inflight: int = 0


@dataclass(frozen=True, slots=True)
class Status:
    id: NodeId
    term: int = 0
    vote: NodeId = NONE
    commit: int = 0
    applied: int = 0
    role: StateRole = StateRole.FOLLOWER
    leader: NodeId = NONE
    lead_transferee: NodeId = NONE
    conf_state: ConfState = field(default_factory=ConfState)
    progress: dict[NodeId, Progress] = field(default_factory=dict)
    last_index: int = 0
    first_index: int = 1


class RawNode:
    __slots__ = ("_outstanding", "_prev_conf", "_prev_hs", "_prev_soft", "raft")

    def __init__(self, config: Config, storage: Storage, rng: RandomSource) -> None:
        self.raft = Raft(config, storage, rng)
        r = self.raft
        self._prev_hs = r.hard_state()
        self._prev_soft = SoftState(leader=r.lead, role=r.role)
        self._prev_conf = r.conf
        self._outstanding = False

    # ---- inputs

    def tick(self) -> None:
        """Advance the logical clock by one tick (the driver calls it every tick_interval)."""
        self.raft.tick()

    def campaign(self) -> None:
        """Start an election now (pre-vote first when enabled)."""
        self.raft.hup()

    def propose(self, data: bytes) -> int:
        """Append data to the log (leader only); returns its index. Raises ProposalDroppedError."""
        return self.raft.propose(data)

    def propose_conf_change(self, cc: ConfChange) -> int:
        """Propose a single-server membership change; returns its index. Raises ProposalDroppedError."""
        return self.raft.propose_conf_change(cc)

    def step(self, msg: Message) -> None:
        """Feed a message from a peer (or a local SNAP_STATUS/UNREACHABLE report)."""
        if msg.type in (MessageType.SNAP_STATUS, MessageType.UNREACHABLE) and msg.term != 0:
            raise ValueError(f"{msg.type.name} is a local report and must have term 0")
        self.raft.step(msg)

    def read_index(self, request_ctx: bytes) -> None:
        """Request a linearizable read point; the answer comes as Ready.read_states[..].request_ctx."""
        if not request_ctx:
            raise ValueError("read_index needs a non-empty request_ctx (it identifies the read)")
        r = self.raft
        r.step(Message(MessageType.READ_INDEX, r.id, r.id, 0, context=request_ctx))

    def transfer_leader(self, target: NodeId) -> None:
        """Ask the leader (forwarded if we are a follower) to hand leadership to target."""
        r = self.raft
        r.step(Message(MessageType.TRANSFER_LEADER, r.id, target, 0))

    def forget_leader(self) -> None:
        """A follower forgets its leader so it can grant votes before the lease would expire."""
        self.raft.forget_leader()

    def report_unreachable(self, node: NodeId) -> None:
        r = self.raft
        r.step(Message(MessageType.UNREACHABLE, r.id, node, 0))

    def report_snapshot(self, node: NodeId, ok: bool) -> None:
        """The driver finished (ok) or gave up (not ok) sending a snapshot to node."""
        r = self.raft
        r.step(Message(MessageType.SNAP_STATUS, r.id, node, 0, reject=not ok))

    def set_debug_logs(self, enabled: bool) -> None:
        self.raft.debug = enabled

    # ---- outputs

    def has_ready(self) -> bool:
        r = self.raft
        if r.msgs or r.pending_bcast or r.read_states:
            return True
        u = r.log.unstable
        if u.entries or u.snapshot is not None:
            return True
        if r.log.has_next_committed_ents():
            return True
        hs = self._prev_hs
        if r.term != hs.term or r.vote != hs.vote or r.log.committed != hs.commit:
            return True
        ss = self._prev_soft
        if r.lead != ss.leader or r.role != ss.role:
            return True
        return r.conf is not self._prev_conf and r.conf != self._prev_conf

    def ready(self) -> Ready:
        if self._outstanding:
            raise RuntimeError("ready() called again before advance() of the previous Ready")
        r = self.raft
        r.flush()
        log = r.log
        entries = tuple(log.unstable.entries)
        snapshot = log.unstable.snapshot
        committed = tuple(log.next_committed_ents())
        if committed:
            log.applying = committed[-1].index
        hs = r.hard_state()
        hard_state = hs if hs != self._prev_hs else None
        must_sync = bool(entries) or snapshot is not None or (
            hard_state is not None and (hs.term != self._prev_hs.term or hs.vote != self._prev_hs.vote)
        )
        soft = SoftState(leader=r.lead, role=r.role)
        soft_state = soft if soft != self._prev_soft else None
        conf_state = r.conf if r.conf != self._prev_conf else None
        msgs = tuple(r.msgs)
        r.msgs = []
        read_states = tuple(r.read_states)
        r.read_states = []
        self._prev_hs = hs
        self._prev_soft = soft
        self._prev_conf = r.conf
        self._outstanding = True
        return Ready(
            soft_state=soft_state,
            hard_state=hard_state,
            entries=entries,
            snapshot=snapshot,
            committed_entries=committed,
            messages=msgs,
            read_states=read_states,
            must_sync=must_sync,
            conf_state=conf_state,
        )

    def advance(self, rd: Ready) -> None:
        """The Ready was handled: its writes are durable, messages sent, committed entries applied."""
        r = self.raft
        log = r.log
        if rd.snapshot is not None:
            idx = rd.snapshot.metadata.index
            log.unstable.stable_snap_to(idx)
            log.applied_to(idx)
        if rd.entries:
            last = rd.entries[-1]
            log.unstable.stable_to(last.index, last.term)
        if rd.committed_entries:
            log.applied_to(rd.committed_entries[-1].index)
        self._outstanding = False
        r.on_persisted()
        r.prune_conf_history()

    def drain_logs(self) -> list[str]:
        """Narrative log lines since the last call, e.g. "INFO 1 became leader at term 2"."""
        logs = list(self.raft.logs)
        self.raft.logs.clear()
        return logs

    # ---- introspection

    def status(self) -> Status:
        r = self.raft
        progress: dict[NodeId, Progress] = {}
        if r.role == StateRole.LEADER:
            for nid, pr in r.prs.items():
                progress[nid] = Progress(
                    match=pr.match,
                    next=pr.next,
                    state=pr.state,
                    recent_active=pr.recent_active,
                    is_learner=pr.is_learner,
                    pending_snapshot=pr.pending_snapshot,
                    inflight=pr.inflights.count(),
                )
        return Status(
            id=r.id,
            term=r.term,
            vote=r.vote,
            commit=r.log.committed,
            applied=r.log.applied,
            role=r.role,
            leader=r.lead,
            lead_transferee=r.lead_transferee,
            conf_state=r.conf,
            progress=progress,
            last_index=r.log.last_index(),
            first_index=r.log.first_index(),
        )

    def hard_state(self) -> HardState:
        return self.raft.hard_state()
