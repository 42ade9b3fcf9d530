"""Quorum recovery and restore through the Raft storage, deterministically: the rewrite is written
by LevelDBStorage, then a RawNode (the pure core, fixed randomness, driven by hand: no clock, no
network) is started on the reopened storage and must honour it: it is the only voter, elects
itself, and commits and applies every entry the survivor held."""

from __future__ import annotations

from pathlib import Path

import pytest

from scm_server.exceptions import StorageError
from scm_server.raft.core.config import Config
from scm_server.raft.core.rawnode import RawNode
from scm_server.raft.core.recovery import RecoveryError, force_new_cluster, restored_start
from scm_server.raft.core.types import (
    ConfChange,
    ConfChangeType,
    ConfState,
    Entry,
    EntryType,
    HardState,
    StateRole,
)
from scm_server.raft.storage import LevelDBStorage

from ..core.cluster import FixedRandom

MEMBERS = [("a", "h:1"), ("b", "h:2"), ("c", "h:3")]


def _survivor(path: Path, *, extra: int = 5, commit_behind: int = 2) -> LevelDBStorage:
    """A 3-member log (bootstrap conf entries 1-3) plus ``extra`` normal entries in term 2, of which
    the last ``commit_behind`` were never known committed here."""
    st = LevelDBStorage(path, fsync=False)
    st.bootstrap(MEMBERS)
    ents = [Entry(term=2, index=3 + i, data=f"op{i}".encode()) for i in range(1, extra + 1)]
    st.save(HardState(term=2, vote="b", commit=3 + extra - commit_behind), ents)
    return st


def _drive(node: RawNode, st: LevelDBStorage, ticks: int) -> list[Entry]:
    """Tick and run the Ready cycle (persist through the storage, as the driver does); returns the
    committed entries handed to the state machine."""
    applied: list[Entry] = []
    for _ in range(ticks):
        node.tick()
        while node.has_ready():
            rd = node.ready()
            st.save(rd.hard_state, rd.entries, rd.snapshot)
            applied.extend(rd.committed_entries)
            node.advance(rd)
    return applied


def test_force_new_cluster_pure() -> None:
    conf = ConfState(voters=("a", "b", "c"), learners=("d",), addresses=(("a", "x"), ("b", "y"), ("c", "z"), ("d", "w")))
    hs, ents, after = force_new_cluster(HardState(term=7, vote="b", commit=10), conf, 12, 6, "a")
    assert [ConfChange.decode(e.data) for e in ents] == [
        ConfChange(ConfChangeType.REMOVE_NODE, n) for n in ("b", "c", "d")
    ]
    assert [e.index for e in ents] == [13, 14, 15] and {e.term for e in ents} == {7}
    assert all(e.type == EntryType.CONF_CHANGE for e in ents)
    assert hs == HardState(term=7, vote="b", commit=15)
    assert after == ConfState(voters=("a",), addresses=(("a", "x"),))
    with pytest.raises(RecoveryError, match="not a voter"):
        force_new_cluster(HardState(term=7), conf, 12, 6, "d")


def test_restored_start_pure() -> None:
    hs, meta = restored_start(40, 3, "n", "h:9", 1003)
    assert hs == HardState(term=1003, commit=40)
    assert (meta.index, meta.term, meta.conf_state.voters, meta.conf_state.addresses) == (40, 3, ("n",), (("n", "h:9"),))
    with pytest.raises(RecoveryError):
        restored_start(40, 3, "n", "h:9", 2)


def test_survivor_elects_itself_and_keeps_every_entry(tmp_path: Path) -> None:
    st = _survivor(tmp_path / "a")
    before = [e.data for e in st.entries(4, st.last_index() + 1)]
    after = st.force_new_cluster("a")
    assert after.voters == ("a",)
    st.close()
    # restart: the core reads the configuration back from the stored conf entries
    st = LevelDBStorage(tmp_path / "a", fsync=False)
    assert st.conf_state().voters == ("a",)
    assert st.hard_state().commit == st.last_index() == 10
    node = RawNode(Config(id="a", election_tick=10, heartbeat_tick=1, pre_vote=True, check_quorum=True, applied=3), st, FixedRandom())
    applied = _drive(node, st, 30)
    assert node.status().role == StateRole.LEADER
    assert node.status().conf_state.voters == ("a",)
    # every entry the survivor held (including the two never known committed) is applied, in order
    data = [e.data for e in applied if e.type == EntryType.NORMAL and e.data]
    assert data == before
    # and the new leader commits a new proposal alone
    node.propose(b"after")
    applied = _drive(node, st, 2)
    assert [e.data for e in applied if e.data] == [b"after"]
    st.close()


def test_force_new_cluster_without_the_rewrite_has_no_quorum(tmp_path: Path) -> None:
    """The control: the same survivor restarted WITHOUT the rewrite never becomes leader."""
    st = _survivor(tmp_path / "a")
    st.close()
    st = LevelDBStorage(tmp_path / "a", fsync=False)
    node = RawNode(Config(id="a", election_tick=10, heartbeat_tick=1, pre_vote=True, check_quorum=True, applied=3), st, FixedRandom())
    _drive(node, st, 60)
    assert node.status().role != StateRole.LEADER
    st.close()


def test_restore_at_starts_a_one_member_ring(tmp_path: Path) -> None:
    st = LevelDBStorage(tmp_path / "r", fsync=False)
    hs, meta = restored_start(40, 3, "n", "h:9", 1003)
    st.restore_at(hs, meta)
    st.close()
    st = LevelDBStorage(tmp_path / "r", fsync=False)
    assert (st.first_index(), st.last_index(), st.term(40)) == (41, 40, 3)
    assert st.conf_state().voters == ("n",)
    assert st.snapshot_metadata().index == 40
    node = RawNode(Config(id="n", election_tick=10, heartbeat_tick=1, pre_vote=True, check_quorum=True, applied=40), st, FixedRandom())
    _drive(node, st, 30)
    assert node.status().role == StateRole.LEADER and node.status().term > 1003
    with pytest.raises(StorageError, match="not empty"):
        st.restore_at(hs, meta)
    st.close()
