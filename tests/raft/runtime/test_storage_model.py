"""Property test: LevelDBStorage behaves like the core's MemoryStorage (the reference model) for
random sequences of appends with conflicts, hard-state updates, snapshots, compaction and
reopening, and reads back the same log after every reopen."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from scm_server.raft.core.storage import MemoryStorage
from scm_server.raft.core.types import ConfState, Entry, HardState, Snapshot, SnapshotMetadata
from scm_server.raft.storage import LevelDBStorage

ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 6), st.integers(1, 5), st.integers(0, 2)),
        st.tuples(st.just("compact"), st.integers(0, 10), st.just(0), st.just(0)),
        st.tuples(st.just("snapshot"), st.integers(1, 8), st.just(0), st.just(0)),
        st.tuples(st.just("reopen"), st.just(0), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=25,
)


def same(a: LevelDBStorage, m: MemoryStorage) -> None:
    assert (a.first_index(), a.last_index()) == (m.first_index(), m.last_index())
    assert a.entries(a.first_index(), a.last_index() + 1) == m.entries(m.first_index(), m.last_index() + 1)
    assert a.term(a.first_index() - 1) == m.term(m.first_index() - 1)
    assert a.hard_state() == m.hard_state


@settings(max_examples=60, deadline=None)
@given(ops)
def test_leveldb_storage_matches_memory_storage(script: list[tuple[str, int, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d)
        a = LevelDBStorage(path)
        m = MemoryStorage()
        term = 1
        try:
            for kind, x, n, bump in script:
                if kind == "append":
                    # start somewhere in [first, last + 1] (a conflict if below last + 1)
                    first = max(m.first_index(), m.last_index() + 1 - x)
                    term += bump
                    ents = [Entry(term=term, index=first + i, data=b"%d-%d" % (term, first + i)) for i in range(n)]
                    hs = HardState(term=term, vote="v", commit=min(m.hard_state.commit, first - 1))
                    a.save(hs, ents)
                    m.append(ents)
                    m.set_hard_state(hs)
                elif kind == "compact":
                    idx = m.first_index() - 1 + x
                    if m.first_index() <= idx <= m.last_index():
                        a.compact(idx)
                        m.compact(idx)
                elif kind == "snapshot":
                    # install a snapshot from a "leader" beyond our log (replaces everything)
                    idx = m.last_index() + x
                    snap = Snapshot(SnapshotMetadata(index=idx, term=term, conf_state=ConfState(voters=("v",))))
                    hs = HardState(term=term, vote="v", commit=idx)
                    a.save(hs, [], snap)
                    m.apply_snapshot(snap)
                    m.set_hard_state(hs)
                else:
                    a.close()
                    a = LevelDBStorage(path)
                same(a, m)
        finally:
            a.close()
