"""The read side of Raft's durable log, as the pure core sees it, plus an in-memory implementation.

The core never writes to storage: it hands the driver a :class:`~.types.Ready` holding what
to persist, and reads back through the :class:`Storage` protocol below (entries that already
left the core's unstable buffer, terms, the snapshot). ``scm_server.raft.storage.LevelDBStorage``
(the durable one, owned by the runtime) implements the same protocol; :class:`MemoryStorage`
is the pure stand-in used by unit, interaction and simulation tests, and shows the write
side that a durable store mirrors.

Layout of :class:`MemoryStorage`: ``_ents[0]`` is a dummy entry that carries the index and
term of the latest snapshot (or 0/0), so ``term(snapshot_index)`` is always answerable and
``first_index() == _ents[0].index + 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from scm_server.raft.core.confchange import conf_state_after
from scm_server.raft.core.types import (
    ConfChange,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Snapshot,
    SnapshotMetadata,
)


class CompactedError(Exception):
    """The requested index is at or below the snapshot index: those entries were compacted away."""


class UnavailableError(Exception):
    """The requested index is beyond the last index of the log."""


class SnapshotTemporarilyUnavailableError(Exception):
    """No snapshot can be produced right now (e.g. one is being taken); the leader retries later."""


class SnapshotOutOfDateError(Exception):
    """A snapshot at or below the current snapshot index was offered to ``apply_snapshot``/``create_snapshot``."""


def entry_size(entry: Entry) -> int:
    """Bytes an entry counts for against ``max_size`` limits (payload plus a small fixed header)."""
    return len(entry.data) + 16


def limit_size(entries: list[Entry], max_size: int | None) -> list[Entry]:
    """Keep the longest prefix whose total size is <= max_size, but always at least one entry."""
    if max_size is None or not entries:
        return entries
    total = entry_size(entries[0])
    for i in range(1, len(entries)):
        total += entry_size(entries[i])
        if total > max_size:
            return entries[:i]
    return entries


class Storage(Protocol):
    """What the core reads from stable storage. All methods are synchronous and cheap."""

    def initial_state(self) -> tuple[HardState, ConfState]:
        """The persisted hard state and the latest configuration (snapshot conf, then conf entries in the log)."""
        ...

    def entries(self, lo: int, hi: int, max_size: int | None = None) -> list[Entry]:
        """Entries [lo, hi), at least one if any, at most max_size bytes; CompactedError if lo <= snapshot index."""
        ...

    def term(self, index: int) -> int:
        """Term of the entry at index (the snapshot index is allowed); CompactedError / UnavailableError."""
        ...

    def first_index(self) -> int:
        """Snapshot index + 1."""
        ...

    def last_index(self) -> int:
        """Index of the last entry (the snapshot index when the log is empty)."""
        ...

    def snapshot(self) -> Snapshot:
        """The latest snapshot; SnapshotTemporarilyUnavailableError if none can be served now."""
        ...


class MemoryStorage:
    """A pure, in-memory :class:`Storage` with the write side the driver uses (tests and simulation)."""

    __slots__ = ("_ents", "_hard_state", "_snapshot")

    def __init__(self, conf_state: ConfState | None = None) -> None:
        """A fresh log; ``conf_state`` is the initial configuration of a new group (held at index 0)."""
        self._hard_state = HardState()
        self._snapshot = Snapshot(metadata=SnapshotMetadata(conf_state=conf_state or ConfState()))
        self._ents: list[Entry] = [Entry(term=0, index=0)]

    # ---- read side (Storage protocol) ----

    def initial_state(self) -> tuple[HardState, ConfState]:
        cs = self._snapshot.metadata.conf_state
        for e in self._ents[1:]:
            if e.type == EntryType.CONF_CHANGE:
                cs = conf_state_after(cs, ConfChange.decode(e.data))
        return self._hard_state, cs

    def entries(self, lo: int, hi: int, max_size: int | None = None) -> list[Entry]:
        offset = self._ents[0].index
        if lo <= offset:
            raise CompactedError(f"entries from {lo} requested but the log is compacted up to {offset}")
        if hi > self.last_index() + 1:
            raise UnavailableError(f"entries up to {hi - 1} requested but the last index is {self.last_index()}")
        ents = self._ents
        if max_size is None:
            return ents[lo - offset : hi - offset]
        # walk instead of slicing the whole range: a far-behind follower must not cost O(log)
        end = lo - offset + 1
        total = entry_size(ents[lo - offset])
        stop = hi - offset
        while end < stop:
            total += entry_size(ents[end])
            if total > max_size:
                break
            end += 1
        return ents[lo - offset : end]

    def term(self, index: int) -> int:
        offset = self._ents[0].index
        if index < offset:
            raise CompactedError(f"term of {index} requested but the log is compacted up to {offset}")
        if index - offset >= len(self._ents):
            raise UnavailableError(f"term of {index} requested but the last index is {self.last_index()}")
        return self._ents[index - offset].term

    def first_index(self) -> int:
        return self._ents[0].index + 1

    def last_index(self) -> int:
        return self._ents[0].index + len(self._ents) - 1

    def snapshot(self) -> Snapshot:
        return self._snapshot

    # ---- write side (what the driver does with a Ready) ----

    @property
    def hard_state(self) -> HardState:
        return self._hard_state

    def set_hard_state(self, hs: HardState) -> None:
        self._hard_state = hs

    def append(self, entries: Sequence[Entry]) -> None:
        """Append entries, truncating any existing suffix from ``entries[0].index`` (a conflict)."""
        if not entries:
            return
        first = self.first_index()
        if entries[-1].index < first:
            return  # everything is already compacted
        if entries[0].index < first:
            entries = entries[first - entries[0].index :]
        offset = entries[0].index - self._ents[0].index
        if offset > len(self._ents):
            raise UnavailableError(
                f"cannot append entries from {entries[0].index}: the log ends at {self.last_index()} (gap)"
            )
        del self._ents[offset:]
        self._ents.extend(entries)

    def apply_snapshot(self, snap: Snapshot) -> None:
        """Replace the whole log with a snapshot received from the leader."""
        if snap.metadata.index <= self._snapshot.metadata.index:
            raise SnapshotOutOfDateError(
                f"snapshot at {snap.metadata.index} is not newer than the current one at {self._snapshot.metadata.index}"
            )
        self._snapshot = snap
        self._ents = [Entry(term=snap.metadata.term, index=snap.metadata.index)]

    def create_snapshot(self, index: int, conf_state: ConfState, data: bytes) -> Snapshot:
        """Record a snapshot of the state machine at ``index`` (which must be applied already)."""
        if index <= self._snapshot.metadata.index:
            raise SnapshotOutOfDateError(
                f"snapshot at {index} is not newer than the current one at {self._snapshot.metadata.index}"
            )
        if index > self.last_index():
            raise UnavailableError(f"snapshot at {index} is beyond the last index {self.last_index()}")
        meta = SnapshotMetadata(index=index, term=self.term(index), conf_state=conf_state)
        self._snapshot = Snapshot(metadata=meta, data=data)
        return self._snapshot

    def compact(self, compact_index: int) -> None:
        """Drop entries <= compact_index; the term of compact_index stays answerable."""
        offset = self._ents[0].index
        if compact_index <= offset:
            raise CompactedError(f"cannot compact to {compact_index}: already compacted up to {offset}")
        if compact_index > self.last_index():
            raise UnavailableError(f"cannot compact to {compact_index}: the last index is {self.last_index()}")
        i = compact_index - offset
        head = Entry(term=self._ents[i].term, index=self._ents[i].index)
        self._ents = [head, *self._ents[i + 1 :]]
