"""Durable Raft log on LevelDB (plyvel): the core's ``Storage`` read side plus the write side.

Where it sits: the pure core (:mod:`scm_server.raft.core`) reads the log through the ``Storage``
protocol (``entries``/``term``/``first_index``/...); the asyncio driver
(:mod:`scm_server.raft.server`) writes every ``Ready`` through :meth:`LevelDBStorage.save` — hard
state, new entries (truncating a conflicting suffix) and an installed snapshot's metadata in ONE
LevelDB write batch, synced when the Ready says so, BEFORE any message of that Ready is sent.
One Ready = one batch = one fsync: group commit.

Layout (one LevelDB under ``<storage_dir>/raft-log``, keys -> values):

* ``m:version`` -> ``b"1"``
* ``m:hs``      -> CRC32 + (term, commit, vote) of the hard state
* ``m:start``   -> CRC32 + (index, term, conf) of the log start: entries ``<= index`` are compacted
* ``s:meta``    -> CRC32 + (index, term, conf) of the latest snapshot
* ``l:`` + 8-byte big-endian index -> CRC32 + (term, index, type) + data, one per entry

The whole retained log is mirrored in memory (SCM's log is small: a snapshot every
``snapshot_threshold`` entries and a purge gap behind it), so core reads never touch the disk.

Load-time checks (etcd ``wal/repair`` approach): every entry's CRC, its index against its key,
contiguity, and non-decreasing terms. A bad or missing entry ABOVE the durable commit index is a
torn tail from a crash: it and everything after it are dropped with a warning (that suffix was
never acknowledged). A bad entry AT OR BELOW the commit index is real corruption and raises
:class:`StorageError` naming the index and the fix.

Concurrency: :meth:`write_prepared` (the I/O) may run in the driver's single writer thread;
:meth:`prepare_save` and :meth:`commit_prepared` (the in-memory mirror) run on the event loop
thread, so the core never reads a half-updated mirror.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import plyvel

from scm_server.exceptions import StorageError
from scm_server.raft import faults
from scm_server.raft.core.confchange import conf_state_after
from scm_server.raft.core.recovery import force_new_cluster
from scm_server.raft.core.storage import (
    CompactedError,
    SnapshotTemporarilyUnavailableError,
    UnavailableError,
    limit_size,
)
from scm_server.raft.core.types import (
    NONE,
    ConfChange,
    ConfChangeType,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Snapshot,
    SnapshotMetadata,
)

log = logging.getLogger(__name__)

_VERSION_KEY = b"m:version"
_HS_KEY = b"m:hs"
_START_KEY = b"m:start"
_SNAP_KEY = b"s:meta"
_LOG_PREFIX = b"l:"
_ENTRY_HEADER = struct.Struct(">QQB")  # term, index, type
_CRC = struct.Struct(">I")
_U64 = struct.Struct(">Q")


def _log_key(index: int) -> bytes:
    return _LOG_PREFIX + _U64.pack(index)


def encode_entry(entry: Entry) -> bytes:
    body = _ENTRY_HEADER.pack(entry.term, entry.index, int(entry.type)) + entry.data
    return _CRC.pack(zlib.crc32(body)) + body


def decode_entry(value: bytes) -> Entry | None:
    """Decode a stored entry; None if it is torn or its checksum does not match."""
    if len(value) < _CRC.size + _ENTRY_HEADER.size:
        return None
    (crc,) = _CRC.unpack_from(value)
    body = value[_CRC.size :]
    if zlib.crc32(body) != crc:
        return None
    term, index, etype = _ENTRY_HEADER.unpack_from(body)
    try:
        kind = EntryType(etype)
    except ValueError:
        return None
    return Entry(term=term, index=index, type=kind, data=bytes(body[_ENTRY_HEADER.size :]))


def _seal(payload: bytes) -> bytes:
    return _CRC.pack(zlib.crc32(payload)) + payload


def _unseal(value: bytes, what: str, path: Path) -> bytes:
    if len(value) < _CRC.size or zlib.crc32(value[_CRC.size :]) != _CRC.unpack_from(value)[0]:
        raise StorageError(
            f"Raft storage {path}: the {what} record is corrupt (checksum mismatch). The log cannot be "
            "trusted: stop this member, move its storage directory aside and re-add it to the group "
            "so it is rebuilt from the leader."
        )
    return value[_CRC.size :]


def conf_to_json(conf: ConfState) -> dict[str, object]:
    return {
        "voters": list(conf.voters),
        "learners": list(conf.learners),
        "addresses": [[n, a] for n, a in conf.addresses],
    }


def conf_from_json(obj: dict[str, object]) -> ConfState:
    voters = obj.get("voters", [])
    learners = obj.get("learners", [])
    addresses = obj.get("addresses", [])
    assert isinstance(voters, list) and isinstance(learners, list) and isinstance(addresses, list)
    return ConfState(
        voters=tuple(str(v) for v in voters),
        learners=tuple(str(v) for v in learners),
        addresses=tuple((str(n), str(a)) for n, a in addresses),
    )


def _encode_point(index: int, term: int, conf: ConfState) -> bytes:
    return _seal(_U64.pack(index) + _U64.pack(term) + json.dumps(conf_to_json(conf)).encode())


def _decode_point(value: bytes, what: str, path: Path) -> tuple[int, int, ConfState]:
    payload = _unseal(value, what, path)
    index = _U64.unpack_from(payload, 0)[0]
    term = _U64.unpack_from(payload, 8)[0]
    return index, term, conf_from_json(json.loads(payload[16:].decode()))


def _encode_hs(hs: HardState) -> bytes:
    return _seal(_U64.pack(hs.term) + _U64.pack(hs.commit) + hs.vote.encode())


def _decode_hs(value: bytes, path: Path) -> HardState:
    payload = _unseal(value, "hard state", path)
    return HardState(
        term=_U64.unpack_from(payload, 0)[0],
        commit=_U64.unpack_from(payload, 8)[0],
        vote=payload[16:].decode(),
    )


@dataclass(slots=True)
class PreparedSave:
    """One Ready's worth of writes: built on the loop thread, written by the writer thread."""

    puts: list[tuple[bytes, bytes]] = field(default_factory=list)
    deletes: list[bytes] = field(default_factory=list)
    hard_state: HardState | None = None
    entries: tuple[Entry, ...] = ()
    snapshot: Snapshot | None = None
    sync: bool = False

    def is_empty(self) -> bool:
        return not self.puts and not self.deletes


class SnapshotFileWriter:
    """Receives snapshot data into ``<final>.tmp``; :meth:`finish` fsyncs, renames and fsyncs the dir."""

    def __init__(self, final: Path, *, fsync: bool) -> None:
        self.final = final
        self.tmp = final.with_suffix(".tmp")
        self._fsync = fsync
        faults.failpoint("before_snapshot_write")
        self._file = open(self.tmp, "wb")  # noqa: SIM115 - closed in finish()/abort()
        self.size = 0

    def write(self, chunk: bytes) -> None:
        self._file.write(chunk)
        self.size += len(chunk)

    def finish(self) -> Path:
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())
        self._file.close()
        faults.failpoint("after_snapshot_write")
        faults.failpoint("before_snapshot_rename")
        os.replace(self.tmp, self.final)
        if self._fsync:
            dfd = os.open(self.final.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        faults.failpoint("after_snapshot_rename")
        return self.final

    def abort(self) -> None:
        self._file.close()
        self.tmp.unlink(missing_ok=True)


class LevelDBStorage:
    """Durable Raft storage; implements ``scm_server.raft.core.storage.Storage``."""

    def __init__(self, storage_dir: Path | str, *, fsync: bool = True) -> None:
        self.dir = Path(storage_dir)
        self.fsync = fsync
        self.db_path = self.dir / "raft-log"
        self.snapshot_dir = self.dir / "snapshots"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.snapshot_dir.mkdir(exist_ok=True)
        try:
            self._db = plyvel.DB(str(self.db_path), create_if_missing=True)
        except plyvel.Error as exc:
            raise StorageError(
                f"cannot open the Raft log at {self.db_path}: {exc}. Is another process using this "
                "storage directory? Stop it, or point this server at its own directory."
            ) from exc
        self._closed = False
        self._hs = HardState()
        self._start_index = 0
        self._start_term = 0
        self._start_conf = ConfState()
        self._snap_meta = SnapshotMetadata()
        self._ents: list[Entry] = []
        self._conf_points: list[tuple[int, ConfState]] = []  # (index, conf after that conf entry)
        try:
            self._load()
        except BaseException:
            self._db.close()
            self._closed = True
            raise
        self._cleanup_snapshot_files()

    # ---------------------------------------------------------------- load
    def _load(self) -> None:
        db = self._db
        if db.get(_VERSION_KEY) is None:
            db.put(_VERSION_KEY, b"1", sync=True)
        raw = db.get(_HS_KEY)
        if raw is not None:
            self._hs = _decode_hs(raw, self.db_path)
        raw = db.get(_START_KEY)
        if raw is not None:
            self._start_index, self._start_term, self._start_conf = _decode_point(raw, "log start", self.db_path)
        raw = db.get(_SNAP_KEY)
        if raw is not None:
            index, term, conf = _decode_point(raw, "snapshot metadata", self.db_path)
            self._snap_meta = SnapshotMetadata(index=index, term=term, conf_state=conf)
        expected = self._start_index + 1
        prev_term = self._start_term
        bad_at: int | None = None
        reason = ""
        garbage: list[bytes] = []
        for key, value in db.iterator(prefix=_LOG_PREFIX):
            index = _U64.unpack_from(key, len(_LOG_PREFIX))[0]
            if index < expected and bad_at is None and index <= self._start_index:
                garbage.append(key)  # left over below the log start
                continue
            if bad_at is not None:
                garbage.append(key)
                continue
            entry = decode_entry(value)
            if index != expected:
                bad_at, reason = expected, f"entry {expected} is missing (next stored entry is {index})"
            elif entry is None:
                bad_at, reason = index, f"entry {index} is torn or fails its CRC32 check"
            elif entry.index != index:
                bad_at, reason = index, f"entry stored under index {index} claims index {entry.index}"
            elif entry.term < prev_term:
                bad_at, reason = index, f"entry {index} has term {entry.term} below its predecessor's {prev_term}"
            if bad_at is not None:
                garbage.append(key)
                continue
            assert entry is not None
            self._ents.append(entry)
            prev_term = entry.term
            expected += 1
        last = self._start_index + len(self._ents)
        if bad_at is None and last < self._hs.commit:
            bad_at, reason = last + 1, f"entry {last + 1} is missing (the log ends at {last})"
        if bad_at is not None:
            if bad_at <= self._hs.commit:
                raise StorageError(
                    f"Raft log {self.db_path} is corrupt at committed index {bad_at}: {reason}; the durable "
                    f"commit index is {self._hs.commit}, so acknowledged data is damaged. Do not restart this "
                    "member on this log: move its storage directory aside and re-add the member so it "
                    "catches up from the leader (or restore it from a snapshot)."
                )
            log.warning(
                "Raft log %s: %s; truncating the uncommitted tail from index %d (commit index %d): it was "
                "never acknowledged",
                self.db_path,
                reason,
                bad_at,
                self._hs.commit,
            )
        if garbage:
            with db.write_batch(sync=True) as wb:
                for key in garbage:
                    wb.delete(key)
        self._rebuild_conf_points()

    def _rebuild_conf_points(self) -> None:
        self._conf_points = []
        conf = self._start_conf
        for e in self._ents:
            if e.type == EntryType.CONF_CHANGE:
                conf = conf_state_after(conf, ConfChange.decode(e.data))
                self._conf_points.append((e.index, conf))

    def _cleanup_snapshot_files(self) -> None:
        for path in self.snapshot_dir.glob("*.tmp"):
            path.unlink(missing_ok=True)

    # ---------------------------------------------------------------- read side (core.storage.Storage)
    def initial_state(self) -> tuple[HardState, ConfState]:
        return self._hs, self.conf_state()

    def conf_state(self) -> ConfState:
        return self._conf_points[-1][1] if self._conf_points else self._start_conf

    def conf_at(self, index: int) -> ConfState:
        """The configuration in effect after the entry at ``index`` (index >= log start)."""
        conf = self._start_conf
        for idx, c in self._conf_points:
            if idx > index:
                break
            conf = c
        return conf

    def hard_state(self) -> HardState:
        return self._hs

    def entries(self, lo: int, hi: int, max_size: int | None = None) -> list[Entry]:
        if lo <= self._start_index:
            raise CompactedError(f"entries from {lo} are compacted (log starts after {self._start_index})")
        last = self.last_index()
        if hi > last + 1:
            raise UnavailableError(f"entries up to {hi - 1} requested, last index is {last}")
        if lo >= hi:
            return []
        off = self._start_index + 1
        return limit_size(self._ents[lo - off : hi - off], max_size)

    def term(self, index: int) -> int:
        if index == self._start_index:
            return self._start_term
        if index < self._start_index:
            raise CompactedError(f"term of {index} is compacted (log starts after {self._start_index})")
        if index > self.last_index():
            raise UnavailableError(f"term of {index} is unavailable (last index is {self.last_index()})")
        return self._ents[index - self._start_index - 1].term

    def first_index(self) -> int:
        return self._start_index + 1

    def last_index(self) -> int:
        return self._start_index + len(self._ents)

    def snapshot(self) -> Snapshot:
        if self._snap_meta.index == 0 and self._start_index > 0:
            raise SnapshotTemporarilyUnavailableError("the log was compacted without a snapshot")
        return Snapshot(metadata=self._snap_meta)

    def snapshot_metadata(self) -> SnapshotMetadata:
        return self._snap_meta

    # ---------------------------------------------------------------- write side
    def prepare_save(
        self,
        hard_state: HardState | None,
        entries: Sequence[Entry],
        snapshot: Snapshot | None = None,
        sync: bool = True,
    ) -> PreparedSave:
        """Build the single write batch for one Ready (no I/O, no mutation)."""
        p = PreparedSave(hard_state=hard_state, entries=tuple(entries), snapshot=snapshot, sync=sync)
        start, last = self._start_index, self.last_index()
        if snapshot is not None and not snapshot.is_empty():
            meta = snapshot.metadata
            if meta.index <= self._snap_meta.index and self._snap_meta.index > 0:
                raise StorageError(
                    f"refusing to install snapshot at index {meta.index}: it is not newer than the stored "
                    f"snapshot at {self._snap_meta.index}"
                )
            for idx in range(start + 1, last + 1):
                p.deletes.append(_log_key(idx))
            point = _encode_point(meta.index, meta.term, meta.conf_state)
            p.puts.append((_SNAP_KEY, point))
            p.puts.append((_START_KEY, point))
            start, last = meta.index, meta.index
        if entries:
            first = entries[0].index
            if first <= start:
                raise StorageError(
                    f"cannot append entries from {first}: the log is compacted through {start} (driver bug)"
                )
            if first > last + 1:
                raise StorageError(
                    f"cannot append entries from {first}: the log ends at {last}, which would leave a gap "
                    "(driver bug)"
                )
            for e in entries:
                p.puts.append((_log_key(e.index), encode_entry(e)))
            new_last = entries[-1].index
            for idx in range(new_last + 1, last + 1):
                p.deletes.append(_log_key(idx))
        if hard_state is not None:
            p.puts.append((_HS_KEY, _encode_hs(hard_state)))
        return p

    def write_prepared(self, p: PreparedSave) -> None:
        """Write the batch (thread-safe with respect to the in-memory mirror: touches only LevelDB)."""
        if p.is_empty():
            return
        faults.failpoint("before_save")
        try:
            wb = self._db.write_batch(sync=p.sync and self.fsync)
            for key in p.deletes:
                wb.delete(key)
            for key, value in p.puts:
                wb.put(key, value)
            wb.write()
        except plyvel.Error as exc:
            raise StorageError(f"writing the Raft log at {self.db_path} failed: {exc}") from exc
        faults.failpoint("after_save")

    def commit_prepared(self, p: PreparedSave) -> None:
        """Apply a written batch to the in-memory mirror."""
        if p.snapshot is not None and not p.snapshot.is_empty():
            meta = p.snapshot.metadata
            self._snap_meta = meta
            self._start_index, self._start_term, self._start_conf = meta.index, meta.term, meta.conf_state
            self._ents = []
            self._conf_points = []
        if p.entries:
            first = p.entries[0].index
            keep = first - self._start_index - 1
            if keep < len(self._ents):
                del self._ents[keep:]
                self._conf_points = [(i, c) for i, c in self._conf_points if i < first]
            self._ents.extend(p.entries)
            conf = self.conf_state()
            for e in p.entries:
                if e.type == EntryType.CONF_CHANGE:
                    conf = conf_state_after(conf, ConfChange.decode(e.data))
                    self._conf_points.append((e.index, conf))
        if p.hard_state is not None:
            self._hs = p.hard_state

    def save(
        self,
        hard_state: HardState | None,
        entries: Sequence[Entry],
        snapshot: Snapshot | None = None,
        sync: bool = True,
    ) -> None:
        """Persist one Ready in ONE write batch (synced when ``sync``), then update the mirror."""
        p = self.prepare_save(hard_state, entries, snapshot, sync)
        self.write_prepared(p)
        self.commit_prepared(p)

    # MemoryStorage-compatible write side
    def set_hard_state(self, hs: HardState) -> None:
        self.save(hs, ())

    def append(self, entries: Sequence[Entry]) -> None:
        self.save(None, entries)

    def apply_snapshot(self, snap: Snapshot) -> None:
        self.save(None, (), snap)

    def create_snapshot(self, index: int, conf_state: ConfState | None = None, data: bytes = b"") -> Snapshot:
        """Record that the state machine's state at ``index`` is durable (a snapshot point)."""
        if index <= self._snap_meta.index:
            raise StorageError(
                f"snapshot at index {index} is not newer than the stored snapshot at {self._snap_meta.index}"
            )
        if index > self.last_index() or index < self._start_index:
            raise StorageError(
                f"cannot snapshot at index {index}: the log holds {self._start_index + 1}..{self.last_index()}"
            )
        conf = conf_state if conf_state is not None else self.conf_at(index)
        meta = SnapshotMetadata(index=index, term=self.term(index), conf_state=conf)
        faults.failpoint("before_snapshot_write")
        try:
            self._db.put(_SNAP_KEY, _encode_point(meta.index, meta.term, conf), sync=self.fsync)
        except plyvel.Error as exc:
            raise StorageError(f"writing snapshot metadata to {self.db_path} failed: {exc}") from exc
        faults.failpoint("after_snapshot_write")
        self._snap_meta = meta
        return Snapshot(metadata=meta, data=data)

    def compact(self, compact_index: int) -> None:
        """Drop entries ``<= compact_index`` (the term of ``compact_index`` is kept as the log start)."""
        if compact_index <= self._start_index:
            return
        if compact_index > self.last_index():
            raise StorageError(
                f"cannot compact through {compact_index}: the log ends at {self.last_index()}"
            )
        term = self.term(compact_index)
        conf = self.conf_at(compact_index)
        faults.failpoint("before_purge")
        try:
            with self._db.write_batch(sync=self.fsync) as wb:
                wb.put(_START_KEY, _encode_point(compact_index, term, conf))
                for idx in range(self._start_index + 1, compact_index + 1):
                    wb.delete(_log_key(idx))
        except plyvel.Error as exc:
            raise StorageError(f"purging the Raft log at {self.db_path} failed: {exc}") from exc
        faults.failpoint("after_purge")
        drop = compact_index - self._start_index
        del self._ents[:drop]
        self._start_index, self._start_term, self._start_conf = compact_index, term, conf
        self._conf_points = [(i, c) for i, c in self._conf_points if i > compact_index]

    # ---------------------------------------------------------------- snapshot data files (chunked mode)
    def snapshot_file(self, term: int, index: int) -> Path:
        return self.snapshot_dir / f"snapshot-{term:020d}-{index:020d}.data"

    def open_snapshot_writer(self, term: int, index: int) -> SnapshotFileWriter:
        return SnapshotFileWriter(self.snapshot_file(term, index), fsync=self.fsync)

    def write_snapshot_file(self, term: int, index: int, chunks: Iterable[bytes]) -> Path:
        """Store received snapshot data durably: temp file, fsync, rename, fsync dir."""
        writer = self.open_snapshot_writer(term, index)
        try:
            for chunk in chunks:
                writer.write(chunk)
        except BaseException:
            writer.abort()
            raise
        return writer.finish()

    def read_snapshot_file(self, path: Path, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        with open(path, "rb") as f:
            while chunk := f.read(chunk_size):
                yield chunk

    def remove_snapshot_files(self, keep: Path | None = None) -> None:
        for path in self.snapshot_dir.glob("snapshot-*.data"):
            if keep is None or path != keep:
                path.unlink(missing_ok=True)

    # ---------------------------------------------------------------- bootstrap / lifecycle
    def is_empty(self) -> bool:
        return self.last_index() == 0 and self._hs == HardState() and self._snap_meta.index == 0

    def bootstrap(self, members: Sequence[tuple[str, str]]) -> None:
        """Write the primordial configuration: one ADD_NODE entry per member (term 1), all committed.

        Every member bootstrapped with the same member list writes byte-identical entries, so the
        logs match (etcd's initial-cluster bootstrap)."""
        if not self.is_empty():
            raise StorageError(
                f"Raft storage {self.dir} is already initialized (last index {self.last_index()}, term "
                f"{self._hs.term}); refusing to initialize it again. Remove the directory to start over."
            )
        ordered = sorted(members)
        ents = [
            Entry(term=1, index=i + 1, type=EntryType.CONF_CHANGE, data=ConfChange(ConfChangeType.ADD_NODE, nid, addr).encode())
            for i, (nid, addr) in enumerate(ordered)
        ]
        self.save(HardState(term=1, vote=NONE, commit=len(ents)), ents, None, sync=True)

    def force_new_cluster(self, keep: str) -> ConfState:
        """etcd's ``--force-new-cluster`` on a stopped survivor (:func:`core.recovery.force_new_cluster`):
        REMOVE_NODE entries for every other member plus the hard state, in one synced batch. Returns
        the configuration the core will start with."""
        hs, entries, after = force_new_cluster(
            self._hs, self.conf_state(), self.last_index(), self.term(self.last_index()), keep
        )
        self.save(hs, entries, None, sync=True)
        return after

    def restore_at(self, hard_state: HardState, meta: SnapshotMetadata) -> None:
        """Start an EMPTY log at a snapshot point (a ring restored from a backup): log start,
        snapshot metadata and hard state in one synced batch (:func:`core.recovery.restored_start`)."""
        if not self.is_empty():
            raise StorageError(
                f"Raft storage {self.dir} is not empty (last index {self.last_index()}); a restore needs an "
                "empty Raft directory"
            )
        point = _encode_point(meta.index, meta.term, meta.conf_state)
        try:
            with self._db.write_batch(sync=True) as wb:
                wb.put(_SNAP_KEY, point)
                wb.put(_START_KEY, point)
                wb.put(_HS_KEY, _encode_hs(hard_state))
        except plyvel.Error as exc:
            raise StorageError(f"writing the restore point to {self.db_path} failed: {exc}") from exc
        self._snap_meta = meta
        self._start_index, self._start_term, self._start_conf = meta.index, meta.term, meta.conf_state
        self._ents = []
        self._conf_points = []
        self._hs = hard_state

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._db.close()
