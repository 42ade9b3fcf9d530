"""Settings of one Raft node in the pure core, and the injected source of randomness.

Re-exported by :mod:`scm_server.raft.core.rawnode` (the public entry point); kept apart so
that :mod:`~.raft` can use them without importing the wrapper.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from scm_server.raft.core.types import NodeId


class RaftConfigError(ValueError):
    """A Raft setting is invalid; the message names the setting and the fix."""


class ReadOnlyOption(enum.Enum):
    SAFE = "safe"  # ReadIndex: confirm leadership with a heartbeat round per request
    LEASE_BASED = "lease_based"  # trust the check-quorum lease (requires check_quorum and bounded clock drift)


class RandomSource(Protocol):
    """Where randomized election timeouts come from (``random.Random`` fits; tests inject fixed ones)."""

    def randrange(self, start: int, stop: int) -> int: ...


@dataclass(frozen=True, slots=True)
class Config:
    id: NodeId
    election_tick: int = 10  # a follower waits a randomized [election_tick, 2*election_tick) ticks
    heartbeat_tick: int = 1
    pre_vote: bool = True
    check_quorum: bool = True
    read_only_option: ReadOnlyOption = ReadOnlyOption.SAFE
    max_size_per_msg: int = 1 << 20  # bytes of entries per APPEND
    max_inflight_msgs: int = 256  # per follower, optimistic pipelining
    max_uncommitted_entries: int = 4096  # proposal queue bound -> ProposalDroppedError
    applied: int = 0  # last applied index at restart (from the state machine's persisted index)
    max_committed_size_per_ready: int = 16 << 20  # bytes of committed entries handed out per Ready

    def validate(self) -> None:
        if not self.id:
            raise RaftConfigError("Config.id is empty: every Raft node needs a non-empty id")
        if self.heartbeat_tick <= 0:
            raise RaftConfigError(f"heartbeat_tick={self.heartbeat_tick} must be > 0")
        if self.election_tick <= self.heartbeat_tick:
            raise RaftConfigError(
                f"election_tick={self.election_tick} must be greater than heartbeat_tick={self.heartbeat_tick}"
                " (use about 10x)"
            )
        if self.max_inflight_msgs <= 0:
            raise RaftConfigError(f"max_inflight_msgs={self.max_inflight_msgs} must be > 0")
        if self.max_size_per_msg <= 0:
            raise RaftConfigError(f"max_size_per_msg={self.max_size_per_msg} must be > 0")
        if self.max_uncommitted_entries <= 0:
            raise RaftConfigError(f"max_uncommitted_entries={self.max_uncommitted_entries} must be > 0")
        if self.applied < 0:
            raise RaftConfigError(f"applied={self.applied} must be >= 0")
        if self.read_only_option == ReadOnlyOption.LEASE_BASED and not self.check_quorum:
            raise RaftConfigError(
                "read_only_option=LEASE_BASED requires check_quorum=True (a leader must step down"
                " when it loses its quorum before its lease can be trusted)"
            )
