"""The log writer (:mod:`scm_server.raft.persist`) over a real LevelDB log: what is written, and
where each write runs (the event loop's thread or the writer thread)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from scm_server.raft.core.types import Entry, HardState, Ready, StateRole
from scm_server.raft.persist import INLINE_WRITE_ENTRIES, LogWriter
from scm_server.raft.storage import LevelDBStorage, PreparedSave
from scm_server.raft.view import CoreView


class Disk(LevelDBStorage):
    """A LevelDB log that records on which thread each write ran, and can sync slowly."""

    sync_seconds = 0.0

    def write_prepared(self, p: PreparedSave) -> None:
        on_loop = threading.current_thread() is threading.main_thread()
        self.writes.append((len(p.entries), on_loop))
        if p.sync:
            time.sleep(self.sync_seconds)
        super().write_prepared(p)

    writes: list[tuple[int, bool]]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Disk]:
    d = Disk(tmp_path / "raft", fsync=False)
    d.writes = []
    yield d
    d.close()


@pytest.fixture
def thread() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=1) as t:
        yield t


def ready(first: int, n: int, *, term: int = 1, commit: int = 0, size: int = 10) -> Ready:
    entries = tuple(Entry(term, first + i, data=b"x" * size) for i in range(n))
    return Ready(hard_state=HardState(term=term, commit=commit), entries=entries, must_sync=bool(entries))


async def test_a_follower_writes_small_readys_on_the_loop_and_large_ones_in_the_thread(
    disk: Disk, thread: ThreadPoolExecutor
) -> None:
    writer = LogWriter(CoreView("s1", role=StateRole.FOLLOWER), disk, thread)
    await writer.save(ready(1, 3), None)
    await writer.save(ready(4, INLINE_WRITE_ENTRIES + 1), None)
    await writer.save(ready(69, 1, size=300 << 10), None)  # few entries, but many bytes
    assert disk.writes == [(3, True), (INLINE_WRITE_ENTRIES + 1, False), (1, False)]
    assert disk.last_index() == 69 and disk.hard_state() == HardState(term=1)


async def test_a_leader_always_syncs_in_the_writer_thread(disk: Disk, thread: ThreadPoolExecutor) -> None:
    writer = LogWriter(CoreView("s1", role=StateRole.LEADER), disk, thread)
    await writer.save(ready(1, 1), None)
    assert disk.writes == [(1, False)]


async def test_a_commit_only_ready_is_a_small_unsynced_write_on_the_loop(
    disk: Disk, thread: ThreadPoolExecutor
) -> None:
    writer = LogWriter(CoreView("s1", role=StateRole.LEADER), disk, thread)
    await writer.save(ready(1, 2), None)
    await writer.save(Ready(hard_state=HardState(term=1, commit=2)), None)
    assert disk.writes == [(2, False), (0, True)]
    assert disk.hard_state().commit == 2


async def test_while_syncs_are_slow_a_follower_moves_its_writes_to_the_thread(
    disk: Disk, thread: ThreadPoolExecutor
) -> None:
    writer = LogWriter(CoreView("s1", role=StateRole.FOLLOWER), disk, thread)
    disk.sync_seconds = 0.01  # a network volume: one sync moves the average past 1 ms
    for i in range(3):
        await writer.save(ready(1 + i, 1), None)
    assert disk.writes[0] == (1, True)  # no slow sync seen yet
    assert writer.write_seconds > 0.001
    assert disk.writes[1:] == [(1, False), (1, False)]
