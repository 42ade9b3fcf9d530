"""LevelDBStorage: round trip, conflicting appends, compaction, snapshots and load-time checks."""

from __future__ import annotations

import logging
from pathlib import Path

import plyvel
import pytest

from scm_server.exceptions import StorageError
from scm_server.raft import faults
from scm_server.raft.core.storage import CompactedError, UnavailableError
from scm_server.raft.core.types import (
    ConfChange,
    ConfChangeType,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Snapshot,
    SnapshotMetadata,
)
from scm_server.raft.storage import LevelDBStorage, encode_entry


def ents(lo: int, hi: int, term: int = 1) -> list[Entry]:
    return [Entry(term=term, index=i, data=f"e{i}".encode()) for i in range(lo, hi + 1)]


def test_round_trip_survives_reopen(tmp_path: Path) -> None:
    s = LevelDBStorage(tmp_path)
    assert s.is_empty() and s.first_index() == 1 and s.last_index() == 0
    s.save(HardState(term=3, vote="n2", commit=4), ents(1, 5, term=3), sync=True)
    s.close()
    s = LevelDBStorage(tmp_path)
    hs, conf = s.initial_state()
    assert hs == HardState(term=3, vote="n2", commit=4)
    assert conf == ConfState()
    assert s.entries(1, 6) == ents(1, 5, term=3)
    assert s.term(5) == 3 and s.last_index() == 5
    assert s.entries(2, 4) == ents(2, 3, term=3)
    with pytest.raises(UnavailableError):
        s.entries(1, 7)
    s.close()


def test_entries_max_size_returns_at_least_one(tmp_path: Path) -> None:
    s = LevelDBStorage(tmp_path)
    s.save(None, [Entry(term=1, index=i, data=b"x" * 100) for i in range(1, 11)])
    assert len(s.entries(1, 11, max_size=1)) == 1
    assert 1 < len(s.entries(1, 11, max_size=400)) < 10
    s.close()


def test_conflicting_append_truncates_suffix_durably(tmp_path: Path) -> None:
    s = LevelDBStorage(tmp_path)
    s.save(HardState(term=1, commit=2), ents(1, 6, term=1))
    s.save(HardState(term=2, commit=2), ents(4, 4, term=2))  # conflict at 4: 5 and 6 must go
    assert s.last_index() == 4 and s.term(4) == 2
    s.close()
    s = LevelDBStorage(tmp_path)
    assert s.last_index() == 4
    assert [e.term for e in s.entries(1, 5)] == [1, 1, 1, 2]
    s.close()


def test_append_with_a_gap_is_refused(tmp_path: Path) -> None:
    s = LevelDBStorage(tmp_path)
    s.save(None, ents(1, 3))
    with pytest.raises(StorageError, match="gap"):
        s.save(None, ents(5, 6))
    s.close()


def test_conf_state_from_log_and_rollback(tmp_path: Path) -> None:
    s = LevelDBStorage(tmp_path)
    s.bootstrap([("n1", "127.0.0.1:1"), ("n2", "127.0.0.1:2")])
    hs, conf = s.initial_state()
    assert hs.commit == 2 and conf.voters == ("n1", "n2")
    add = Entry(2, 3, EntryType.CONF_CHANGE, ConfChange(ConfChangeType.ADD_LEARNER, "n3", "127.0.0.1:3").encode())
    s.save(None, [add])
    assert s.conf_state().learners == ("n3",)
    assert s.conf_state().address_of("n3") == "127.0.0.1:3"
    s.save(None, [Entry(3, 3, EntryType.NORMAL, b"")])  # truncation rolls the uncommitted config back
    assert s.conf_state().learners == ()
    s.close()
    s = LevelDBStorage(tmp_path)
    assert s.initial_state()[1].voters == ("n1", "n2") and s.initial_state()[1].learners == ()
    with pytest.raises(StorageError, match="already initialized"):
        s.bootstrap([("n1", "127.0.0.1:1")])
    s.close()


def test_snapshot_and_compaction_keep_gap(tmp_path: Path) -> None:
    s = LevelDBStorage(tmp_path)
    s.bootstrap([("n1", "a:1")])
    s.save(HardState(term=1, commit=100), ents(2, 100))
    snap = s.create_snapshot(90)
    assert snap.metadata.index == 90 and snap.metadata.conf_state.voters == ("n1",)
    s.compact(80)
    assert s.first_index() == 81 and s.term(80) == 1
    with pytest.raises(CompactedError):
        s.entries(80, 82)
    with pytest.raises(CompactedError):
        s.term(79)
    s.close()
    s = LevelDBStorage(tmp_path)
    assert s.first_index() == 81 and s.last_index() == 100
    assert s.snapshot().metadata.index == 90
    assert s.initial_state()[1].voters == ("n1",)  # config survives compaction of its entry
    assert s.entries(81, 101) == ents(81, 100)
    s.close()


def test_apply_snapshot_replaces_log(tmp_path: Path) -> None:
    s = LevelDBStorage(tmp_path)
    s.save(HardState(term=1, commit=3), ents(1, 5))
    conf = ConfState(voters=("a", "b"), addresses=(("a", "h:1"), ("b", "h:2")))
    snap = Snapshot(metadata=SnapshotMetadata(index=50, term=4, conf_state=conf))
    s.save(HardState(term=4, commit=50), [], snap)
    assert s.first_index() == 51 and s.last_index() == 50 and s.term(50) == 4
    s.save(None, ents(51, 52, term=4))
    s.close()
    s = LevelDBStorage(tmp_path)
    assert s.first_index() == 51 and s.last_index() == 52
    assert s.initial_state()[1] == conf
    with pytest.raises(StorageError, match="not newer"):
        s.apply_snapshot(Snapshot(metadata=SnapshotMetadata(index=40, term=4, conf_state=conf)))
    s.close()


def _corrupt(path: Path, index: int, value: bytes | None) -> None:
    db = plyvel.DB(str(path / "raft-log"))
    key = b"l:" + index.to_bytes(8, "big")
    if value is None:
        db.delete(key)
    else:
        db.put(key, value)
    db.close()


def test_torn_uncommitted_tail_is_truncated_with_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    s = LevelDBStorage(tmp_path)
    s.save(HardState(term=1, commit=5), ents(1, 10))
    s.close()
    good = encode_entry(Entry(1, 8, EntryType.NORMAL, b"e8"))
    _corrupt(tmp_path, 8, good[:-1] + bytes([good[-1] ^ 0xFF]))  # CRC mismatch above commit
    with caplog.at_level(logging.WARNING):
        s = LevelDBStorage(tmp_path)
    assert s.last_index() == 7
    assert "truncating the uncommitted tail from index 8" in caplog.text
    s.close()
    s = LevelDBStorage(tmp_path)  # the truncation was persisted: entries 9, 10 are gone too
    assert s.last_index() == 7
    s.save(None, ents(8, 8, term=2))
    assert s.last_index() == 8
    s.close()


def test_gap_in_uncommitted_tail_is_truncated(tmp_path: Path) -> None:
    s = LevelDBStorage(tmp_path)
    s.save(HardState(term=1, commit=3), ents(1, 8))
    s.close()
    _corrupt(tmp_path, 6, None)  # entries 7 and 8 now sit beyond a missing one
    s = LevelDBStorage(tmp_path)
    assert s.last_index() == 5
    s.close()


def test_short_record_is_torn(tmp_path: Path) -> None:
    s = LevelDBStorage(tmp_path)
    s.save(HardState(term=1, commit=2), ents(1, 4))
    s.close()
    _corrupt(tmp_path, 4, b"\x00\x01")
    s = LevelDBStorage(tmp_path)
    assert s.last_index() == 3
    s.close()


@pytest.mark.parametrize("damage", ["crc", "missing", "wrong-index"])
def test_committed_corruption_raises_with_index_and_fix(tmp_path: Path, damage: str) -> None:
    s = LevelDBStorage(tmp_path)
    s.save(HardState(term=1, commit=6), ents(1, 8))
    s.close()
    if damage == "crc":
        good = encode_entry(Entry(1, 4, EntryType.NORMAL, b"e4"))
        _corrupt(tmp_path, 4, good[:-1] + b"?")
    elif damage == "missing":
        _corrupt(tmp_path, 4, None)
    else:
        _corrupt(tmp_path, 4, encode_entry(Entry(1, 5, EntryType.NORMAL, b"e5")))
    with pytest.raises(StorageError) as info:
        LevelDBStorage(tmp_path)
    msg = str(info.value)
    assert "committed index 4" in msg and "re-add the member" in msg


def test_missing_committed_tail_raises(tmp_path: Path) -> None:
    s = LevelDBStorage(tmp_path)
    s.save(HardState(term=1, commit=5), ents(1, 5))
    s.close()
    _corrupt(tmp_path, 5, None)
    with pytest.raises(StorageError, match="committed index 5"):
        LevelDBStorage(tmp_path)


def test_corrupt_hard_state_raises(tmp_path: Path) -> None:
    s = LevelDBStorage(tmp_path)
    s.save(HardState(term=1, commit=1), ents(1, 1))
    s.close()
    db = plyvel.DB(str(tmp_path / "raft-log"))
    raw = db.get(b"m:hs")
    db.put(b"m:hs", raw[:-1] + b"X")
    db.close()
    with pytest.raises(StorageError, match="hard state record is corrupt"):
        LevelDBStorage(tmp_path)


def test_second_open_of_same_dir_fails_clearly(tmp_path: Path) -> None:
    s = LevelDBStorage(tmp_path)
    with pytest.raises(StorageError, match="another process"):
        LevelDBStorage(tmp_path)
    s.close()


def test_in_process_failpoint_before_save_leaves_storage_unchanged(tmp_path: Path) -> None:
    s = LevelDBStorage(tmp_path)
    s.save(HardState(term=1, commit=1), ents(1, 2))
    faults.arm("before_save")
    try:
        with pytest.raises(faults.FailpointError):
            s.save(HardState(term=1, commit=2), ents(3, 4))
    finally:
        faults.clear()
    assert s.last_index() == 2  # the mirror was not touched either
    s.close()
    s = LevelDBStorage(tmp_path)
    assert s.last_index() == 2 and s.hard_state().commit == 1
    s.close()


def test_snapshot_file_round_trip_and_tmp_cleanup(tmp_path: Path) -> None:
    s = LevelDBStorage(tmp_path)
    path = s.write_snapshot_file(2, 10, [b"abc", b"def"])
    assert b"".join(s.read_snapshot_file(path, chunk_size=2)) == b"abcdef"
    w = s.open_snapshot_writer(2, 11)
    w.write(b"partial")
    s.close()
    assert w.tmp.exists()
    s = LevelDBStorage(tmp_path)  # a crash mid-receive leaves a .tmp; reopening removes it
    assert not w.tmp.exists() and path.exists()
    s.close()
