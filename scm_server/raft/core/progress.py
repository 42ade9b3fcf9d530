"""The leader's view of each follower: how much of the log it has, and how fast to send more.

A follower is in one of three states (etcd's names):

* PROBE: we do not know where its log ends; send one APPEND at a time and wait for the answer
  (a rejection moves ``next`` back, using the follower's hint for a fast back-off);
* REPLICATE: its log matches ours up to ``match``; stream APPENDs optimistically, at most
  ``max_inflight_msgs`` unacknowledged ones (:class:`Inflights`);
* SNAPSHOT: it needs entries we compacted; a snapshot is on its way and nothing else is sent
  until the driver reports the outcome (or an APPEND_RESP shows it caught up).

``match`` never goes backwards (monotonic), whatever order responses arrive in.
"""

from __future__ import annotations

import enum
from collections import deque


class ProgressState(enum.IntEnum):
    PROBE = 0
    REPLICATE = 1
    SNAPSHOT = 2


class Inflights:
    """Last indexes of the APPENDs sent to one follower and not acknowledged yet (a bounded window)."""

    __slots__ = ("_q", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._q: deque[int] = deque()

    def add(self, last_index: int) -> None:
        self._q.append(last_index)

    def free_le(self, index: int) -> None:
        q = self._q
        while q and q[0] <= index:
            q.popleft()

    def free_first_one(self) -> None:
        if self._q:
            self._q.popleft()

    def full(self) -> bool:
        return len(self._q) >= self.size

    def count(self) -> int:
        return len(self._q)

    def reset(self) -> None:
        self._q.clear()


class PeerProgress:
    __slots__ = (
        "inflights",
        "is_learner",
        "match",
        "msg_app_flow_paused",
        "next",
        "pending_snapshot",
        "recent_active",
        "state",
    )

    def __init__(self, match: int, next_index: int, max_inflight: int, is_learner: bool) -> None:
        self.match = match
        self.next = next_index
        self.state = ProgressState.PROBE
        self.pending_snapshot = 0
        self.recent_active = True  # a newly added peer gets one election timeout before check-quorum counts it out
        self.msg_app_flow_paused = False  # PROBE: an APPEND is outstanding, wait for its answer
        self.inflights = Inflights(max_inflight)
        self.is_learner = is_learner

    def _reset_state(self, state: ProgressState) -> None:
        self.msg_app_flow_paused = False
        self.pending_snapshot = 0
        self.state = state
        self.inflights.reset()

    def become_probe(self) -> None:
        if self.state == ProgressState.SNAPSHOT:
            pending = self.pending_snapshot
            self._reset_state(ProgressState.PROBE)
            self.next = max(self.match + 1, pending + 1)
        else:
            self._reset_state(ProgressState.PROBE)
            self.next = self.match + 1

    def become_replicate(self) -> None:
        self._reset_state(ProgressState.REPLICATE)
        self.next = self.match + 1

    def become_snapshot(self, snapshot_index: int) -> None:
        self._reset_state(ProgressState.SNAPSHOT)
        self.pending_snapshot = snapshot_index

    def maybe_update(self, n: int) -> bool:
        """A follower acknowledged entries up to n; False if the answer is stale (n <= match)."""
        updated = False
        if self.match < n:
            self.match = n
            updated = True
            self.msg_app_flow_paused = False
        if self.next < n + 1:
            self.next = n + 1
        return updated

    def maybe_decr_to(self, rejected: int, match_hint: int) -> bool:
        """A follower rejected the APPEND at ``rejected``; back off ``next``. False if the rejection is stale."""
        if self.state == ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, match_hint + 1), self.match + 1)
        self.msg_app_flow_paused = False
        return True

    def sent_entries(self, count: int, last_index: int) -> None:
        """Record that an APPEND with ``count`` entries ending at ``last_index`` went out."""
        if self.state == ProgressState.REPLICATE:
            if count:
                self.next = last_index + 1
                self.inflights.add(last_index)
        elif self.state == ProgressState.PROBE and count:
            self.msg_app_flow_paused = True

    def is_paused(self) -> bool:
        if self.state == ProgressState.PROBE:
            return self.msg_app_flow_paused
        if self.state == ProgressState.REPLICATE:
            return self.inflights.full()
        return True

    def describe(self) -> str:
        text = f"{self.state.name} match={self.match} next={self.next}"
        if self.is_learner:
            text += " learner"
        if self.state == ProgressState.SNAPSHOT:
            text += f" pending_snap={self.pending_snapshot}"
        if not self.recent_active:
            text += " inactive"
        if self.state == ProgressState.REPLICATE and self.inflights.count():
            text += f" inflight={self.inflights.count()}"
            if self.inflights.full():
                text += "[full]"
        if self.state == ProgressState.PROBE and self.msg_app_flow_paused:
            text += " paused"
        return text
