"""RawNode: the public, thread-unsafe entry point of the pure Raft core (etcd-io/raft's shape).

SKELETON: signatures are final; bodies are being implemented.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scm_server.raft.core.config import Config, RaftConfigError, RandomSource, ReadOnlyOption
from scm_server.raft.core.progress import ProgressState
from scm_server.raft.core.storage import Storage
from scm_server.raft.core.types import (
    NONE,
    ConfChange,
    ConfState,
    Message,
    NodeId,
    Ready,
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
    def __init__(self, config: Config, storage: Storage, rng: RandomSource) -> None:
        raise NotImplementedError

    def tick(self) -> None:
        raise NotImplementedError

    def campaign(self) -> None:
        raise NotImplementedError

    def propose(self, data: bytes) -> int:
        raise NotImplementedError

    def propose_conf_change(self, cc: ConfChange) -> int:
        raise NotImplementedError

    def step(self, msg: Message) -> None:
        raise NotImplementedError

    def read_index(self, request_ctx: bytes) -> None:
        raise NotImplementedError

    def transfer_leader(self, target: NodeId) -> None:
        raise NotImplementedError

    def forget_leader(self) -> None:
        raise NotImplementedError

    def report_unreachable(self, node: NodeId) -> None:
        raise NotImplementedError

    def report_snapshot(self, node: NodeId, ok: bool) -> None:
        raise NotImplementedError

    def has_ready(self) -> bool:
        raise NotImplementedError

    def ready(self) -> Ready:
        raise NotImplementedError

    def advance(self, rd: Ready) -> None:
        raise NotImplementedError

    def status(self) -> Status:
        raise NotImplementedError

    def drain_logs(self) -> list[str]:
        """Narrative log lines produced since the last call (e.g. "1 became leader at term 2")."""
        raise NotImplementedError
