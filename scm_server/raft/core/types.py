"""Data types of the pure Raft core.

This module is the contract between the pure core (``scm_server.raft.core``), the
durable storage (``scm_server.raft.storage``) and the asyncio driver/transport
(``scm_server.raft.server`` and friends). It imports nothing but the standard library:
no I/O, no clock, no randomness.

The core follows etcd-io/raft's shape: the application feeds it inputs
(``RawNode.step(message)``, ``RawNode.tick()``, ``RawNode.propose(data)``, ...) and
drains its outputs as a :class:`Ready` value, which it must handle in this order:

1. persist ``ready.hard_state`` (if not None), ``ready.entries`` (append, truncating any
   conflicting suffix from ``entries[0].index``) and ``ready.snapshot`` (if not None) in
   one atomic write, synced when ``ready.must_sync``;
2. only then send ``ready.messages`` (a message may depend on the write, e.g. a vote);
3. apply ``ready.committed_entries`` to the state machine, in order;
4. call ``RawNode.advance(ready)``.

Node ids are strings (SCM uses the scmUuid as the Raft peer id). Peer addresses travel in
the configuration (``ConfState.addresses``) so that a configuration is self-describing
after a restart or a snapshot install; the core treats them as opaque strings.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

NodeId = str
NONE: NodeId = ""  # "no node", e.g. no leader known or no vote cast


class EntryType(enum.IntEnum):
    NORMAL = 0  # data is opaque to the core; an empty NORMAL entry is the leader's no-op
    CONF_CHANGE = 1  # data is an encoded ConfChange (see ConfChange.encode/decode)


@dataclass(frozen=True, slots=True)
class Entry:
    term: int
    index: int
    type: EntryType = EntryType.NORMAL
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be durable before any message that depends on it is sent."""

    term: int = 0
    vote: NodeId = NONE
    commit: int = 0


class ConfChangeType(enum.IntEnum):
    ADD_NODE = 0  # add a voter, or promote a learner to voter
    REMOVE_NODE = 1
    ADD_LEARNER = 2  # add a non-voting member that receives the log (catch-up before promotion)


@dataclass(frozen=True, slots=True)
class ConfChange:
    """A single-server membership change."""

    type: ConfChangeType
    node_id: NodeId
    address: str = ""

    def encode(self) -> bytes:
        return f"{int(self.type)}\x00{self.node_id}\x00{self.address}".encode()

    @staticmethod
    def decode(data: bytes) -> ConfChange:
        kind, node_id, address = data.decode().split("\x00", 2)
        return ConfChange(ConfChangeType(int(kind)), node_id, address)


@dataclass(frozen=True, slots=True)
class ConfState:
    voters: tuple[NodeId, ...] = ()
    learners: tuple[NodeId, ...] = ()
    addresses: tuple[tuple[NodeId, str], ...] = ()  # (node id, raft address) for every member

    def address_of(self, node_id: NodeId) -> str:
        for nid, addr in self.addresses:
            if nid == node_id:
                return addr
        return ""

    def members(self) -> tuple[NodeId, ...]:
        return self.voters + self.learners


@dataclass(frozen=True, slots=True)
class SnapshotMetadata:
    index: int = 0
    term: int = 0
    conf_state: ConfState = field(default_factory=ConfState)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A snapshot as the core sees it.

    ``data`` is opaque and may be empty: in the notification install mode (what SCM uses)
    the follower's state machine fetches a checkpoint from the leader itself, so only the
    metadata travels through the core.
    """

    metadata: SnapshotMetadata = field(default_factory=SnapshotMetadata)
    data: bytes = b""

    def is_empty(self) -> bool:
        return self.metadata.index == 0


class MessageType(enum.IntEnum):
    # messages between peers (these cross the network)
    APPEND = 1
    APPEND_RESP = 2
    VOTE = 3
    VOTE_RESP = 4
    PRE_VOTE = 5
    PRE_VOTE_RESP = 6
    HEARTBEAT = 7
    HEARTBEAT_RESP = 8
    SNAPSHOT = 9  # InstallSnapshot (metadata; data attached by the transport in chunked mode)
    TIMEOUT_NOW = 10  # leader transfer: start an election now, skipping pre-vote
    READ_INDEX = 11  # follower forwards a ReadIndex request to the leader
    READ_INDEX_RESP = 12
    TRANSFER_LEADER = 13  # forwarded leadership-transfer request
    PROPOSE = 14  # forwarded proposal (not used by SCM; proposals go to the leader)
    SNAP_STATUS = 15  # local: the application reports a snapshot send finished or failed
    UNREACHABLE = 16  # local: the application reports a peer unreachable


@dataclass(frozen=True, slots=True)
class Message:
    type: MessageType
    to: NodeId
    frm: NodeId
    term: int
    log_term: int = 0  # APPEND: term of the entry at `index`; VOTE: term of the candidate's last entry
    index: int = 0  # APPEND: index preceding `entries`; VOTE: candidate's last index; RESP: match/hint
    entries: tuple[Entry, ...] = ()
    commit: int = 0
    snapshot: Snapshot | None = None
    reject: bool = False
    reject_hint: int = 0  # APPEND_RESP rejection: follower's last index, for fast back-off
    context: bytes = b""  # READ_INDEX request id, campaign-transfer marker, ...


class StateRole(enum.IntEnum):
    FOLLOWER = 0
    PRE_CANDIDATE = 1
    CANDIDATE = 2
    LEADER = 3


@dataclass(frozen=True, slots=True)
class SoftState:
    """Volatile state the application may want to observe (not persisted)."""

    leader: NodeId = NONE
    role: StateRole = StateRole.FOLLOWER


@dataclass(frozen=True, slots=True)
class ReadState:
    """A completed ReadIndex request: reads for `request_ctx` are linearizable once applied >= index."""

    index: int
    request_ctx: bytes


@dataclass(frozen=True, slots=True)
class Ready:
    soft_state: SoftState | None = None  # set when leader or role changed
    hard_state: HardState | None = None  # set when it changed; persist before sending messages
    entries: tuple[Entry, ...] = ()  # to append to stable storage before sending messages
    snapshot: Snapshot | None = None  # to install (restore state machine, persist metadata)
    committed_entries: tuple[Entry, ...] = ()  # to apply, in order
    messages: tuple[Message, ...] = ()  # to send after the write
    read_states: tuple[ReadState, ...] = ()
    must_sync: bool = False  # the write must be synced (fsync) before messages are sent
    conf_state: ConfState | None = None  # the current configuration, when it changed


class ProposalDroppedError(Exception):
    """A proposal was refused: not leader, a leader transfer is in progress, a conf change is
    already pending, or the proposal queue is full. The message says which."""


class StorageUnavailableError(Exception):
    """The requested entries were compacted away (snapshot instead)."""
