"""The Raft log as the core sees it: stable storage plus an *unstable* tail (etcd's raftLog).

Entries the core appended (leader proposals, entries from the leader's APPENDs) and a snapshot
received from the leader live in :class:`Unstable` until the driver persists them (they go
out in ``Ready.entries`` / ``Ready.snapshot``) and calls ``advance``; then they are read from
:class:`~.storage.Storage`. Reads consult the unstable tail first.

Indexes tracked here: ``committed`` (known committed, may run ahead of what is durable
locally), ``applying`` (handed to the application in a Ready), ``applied``. Committed entries
are only handed out once they are durable locally (``stable_last_index``).
"""

from __future__ import annotations

from scm_server.raft.core.storage import (
    CompactedError,
    Storage,
    UnavailableError,
    limit_size,
)
from scm_server.raft.core.types import Entry, Snapshot


class Unstable:
    __slots__ = ("entries", "offset", "snapshot")

    def __init__(self, offset: int) -> None:
        self.snapshot: Snapshot | None = None
        self.entries: list[Entry] = []
        self.offset = offset  # index of entries[0]

    def maybe_first_index(self) -> int | None:
        if self.snapshot is not None:
            return self.snapshot.metadata.index + 1
        return None

    def maybe_last_index(self) -> int | None:
        if self.entries:
            return self.offset + len(self.entries) - 1
        if self.snapshot is not None:
            return self.snapshot.metadata.index
        return None

    def maybe_term(self, i: int) -> int | None:
        if i < self.offset:
            if self.snapshot is not None and self.snapshot.metadata.index == i:
                return self.snapshot.metadata.term
            return None
        k = i - self.offset
        if k >= len(self.entries):
            return None
        return self.entries[k].term

    def stable_to(self, i: int, t: int) -> None:
        """Entries up to (i, t) are durable: drop them, unless they were replaced meanwhile."""
        if i < self.offset:
            return
        gt = self.maybe_term(i)
        if gt is None or gt != t:
            return  # truncated and replaced since the Ready was handed out; they come again
        del self.entries[: i + 1 - self.offset]
        self.offset = i + 1

    def stable_snap_to(self, i: int) -> None:
        if self.snapshot is not None and self.snapshot.metadata.index == i:
            self.snapshot = None

    def restore(self, s: Snapshot) -> None:
        self.offset = s.metadata.index + 1
        self.entries = []
        self.snapshot = s

    def truncate_and_append(self, ents: list[Entry] | tuple[Entry, ...]) -> None:
        after = ents[0].index
        end = self.offset + len(self.entries)
        if after == end:
            self.entries.extend(ents)
        elif after <= self.offset:
            # the new entries replace everything unstable (and a stable suffix from `after`)
            self.offset = after
            self.entries = list(ents)
        elif after > end:
            raise RuntimeError(f"cannot append entries from {after}: the unstable log ends at {end - 1} (gap)")
        else:
            del self.entries[after - self.offset :]
            self.entries.extend(ents)

    def slice(self, lo: int, hi: int) -> list[Entry]:
        return self.entries[lo - self.offset : hi - self.offset]


class RaftLog:
    __slots__ = ("applied", "applying", "committed", "max_committed_size", "storage", "unstable")

    def __init__(self, storage: Storage, max_committed_size: int) -> None:
        self.storage = storage
        first = storage.first_index()
        last = storage.last_index()
        self.unstable = Unstable(last + 1)
        self.committed = first - 1
        self.applying = first - 1
        self.applied = first - 1
        self.max_committed_size = max_committed_size

    # ---- indexes and terms ----

    def first_index(self) -> int:
        i = self.unstable.maybe_first_index()
        return i if i is not None else self.storage.first_index()

    def last_index(self) -> int:
        i = self.unstable.maybe_last_index()
        return i if i is not None else self.storage.last_index()

    def stable_last_index(self) -> int:
        """Last index that is durable locally and still part of the log (not about to be replaced)."""
        if self.unstable.snapshot is not None:
            return 0
        return min(self.storage.last_index(), self.unstable.offset - 1)

    def term(self, i: int) -> int:
        """Term of entry i; 0 outside [first_index-1, last_index]; CompactedError/UnavailableError from storage."""
        t = self.unstable.maybe_term(i)
        if t is not None:
            return t
        if i < self.first_index() - 1 or i > self.last_index():
            return 0
        return self.storage.term(i)

    def term_or_zero(self, i: int) -> int:
        try:
            return self.term(i)
        except (CompactedError, UnavailableError):
            return 0

    def last_term(self) -> int:
        return self.term_or_zero(self.last_index())

    def match_term(self, i: int, t: int) -> bool:
        try:
            return self.term(i) == t
        except (CompactedError, UnavailableError):
            return False

    def is_up_to_date(self, lasti: int, term: int) -> bool:
        """Is a candidate's log (last index, last term) at least as up to date as ours (§5.4.1)?"""
        lt = self.last_term()
        return term > lt or (term == lt and lasti >= self.last_index())

    # ---- appending ----

    def find_conflict(self, ents: tuple[Entry, ...] | list[Entry]) -> int:
        """Index of the first entry whose term differs from ours (or that we do not have); 0 if none."""
        for e in ents:
            if not self.match_term(e.index, e.term):
                return e.index
        return 0

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """Largest (i, term(i)) with i <= index and term(i) <= term: where a rejected leader should probe next."""
        while index > 0:
            try:
                t = self.term(index)
            except (CompactedError, UnavailableError):
                return index, 0
            if t <= term:
                return index, t
            index -= 1
        return 0, 0

    def maybe_append(
        self, index: int, log_term: int, committed: int, ents: tuple[Entry, ...]
    ) -> tuple[int, int] | None:
        """Follower side of APPEND: (last new index, first written index or 0), or None on a log mismatch."""
        if not self.match_term(index, log_term):
            return None
        lastnewi = index + len(ents)
        ci = self.find_conflict(ents)
        if ci:
            if ci <= self.committed:
                raise RuntimeError(
                    f"log corruption: entry {ci} conflicts with a committed entry (committed={self.committed})"
                )
            self.unstable.truncate_and_append(ents[ci - index - 1 :])
        self.commit_to(min(committed, lastnewi))
        return lastnewi, ci

    def append(self, ents: list[Entry]) -> int:
        if not ents:
            return self.last_index()
        if ents[0].index - 1 < self.committed:
            raise RuntimeError(f"cannot overwrite committed entry {ents[0].index} (committed={self.committed})")
        self.unstable.truncate_and_append(ents)
        return self.last_index()

    # ---- reading ----

    def slice(self, lo: int, hi: int, max_size: int | None) -> list[Entry]:
        """Entries [lo, hi) limited to max_size bytes (at least one); CompactedError if lo is compacted."""
        if lo >= hi:
            return []
        fi = self.first_index()
        if lo < fi:
            raise CompactedError(f"entries from {lo} requested but the first index is {fi}")
        li = self.last_index()
        if hi > li + 1:
            raise UnavailableError(f"entries up to {hi - 1} requested but the last index is {li}")
        off = self.unstable.offset
        if hi <= off:
            return self.storage.entries(lo, hi, max_size)
        if lo >= off:
            return limit_size(self.unstable.slice(lo, hi), max_size)
        stored = self.storage.entries(lo, off, max_size)
        if len(stored) < off - lo:
            return stored  # already limited by size
        return limit_size(stored + self.unstable.slice(off, hi), max_size)

    def entries_from(self, lo: int, max_size: int | None) -> list[Entry]:
        return self.slice(lo, self.last_index() + 1, max_size)

    def snapshot(self) -> Snapshot:
        if self.unstable.snapshot is not None:
            return self.unstable.snapshot
        return self.storage.snapshot()

    # ---- commit / apply ----

    def commit_to(self, to: int) -> None:
        if to > self.committed:
            if to > self.last_index():
                raise RuntimeError(
                    f"commit index {to} is out of range [last index {self.last_index()}]: the log was lost or corrupted"
                )
            self.committed = to

    def _max_appliable(self) -> int:
        return min(self.committed, self.stable_last_index())

    def has_next_committed_ents(self) -> bool:
        if self.unstable.snapshot is not None:
            return False
        return self._max_appliable() > max(self.applying, self.first_index() - 1)

    def next_committed_ents(self) -> list[Entry]:
        """Committed, locally durable entries not handed out yet."""
        if self.unstable.snapshot is not None:
            return []
        lo = max(self.applying, self.first_index() - 1) + 1
        hi = self._max_appliable() + 1
        if lo >= hi:
            return []
        return self.slice(lo, hi, self.max_committed_size)

    def applied_to(self, i: int) -> None:
        if i == 0 or i < self.applied:
            return
        self.applied = i
        if self.applying < i:
            self.applying = i

    def restore(self, s: Snapshot) -> None:
        self.committed = s.metadata.index
        self.unstable.restore(s)
