"""The snapshot part (:mod:`scm_server.raft.snapshots`) without a server: a real LevelDB log in a
temporary directory, a fake state machine, and an injected sleep for the retry backoff."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from scm_server.exceptions import StorageError
from scm_server.raft.core.types import ConfState, Entry, HardState, Snapshot, SnapshotMetadata
from scm_server.raft.snapshots import InstallMode, Snapshots
from scm_server.raft.statemachine import BaseStateMachine
from scm_server.raft.storage import LevelDBStorage

CONF = ConfState(voters=("s1", "s2"), addresses=(("s1", "h1:1"), ("s2", "h2:1")))


class FakeSM(BaseStateMachine):
    def __init__(self) -> None:
        self.index = 0
        self.failures = 0  # downloads that fail before one succeeds
        self.downloads: list[tuple[str, str, int]] = []
        self.events: list[str] = []
        self.data = b""

    def last_applied(self) -> tuple[int, int]:
        return 1, self.index

    async def take_snapshot(self) -> tuple[int, int]:
        return 1, self.index

    async def snapshot_chunks(self) -> AsyncIterator[bytes]:
        for chunk in (b"state-", b"of-", b"the-machine"):
            yield chunk

    async def install_snapshot_data(self, meta: SnapshotMetadata, chunks: AsyncIterator[bytes]) -> None:
        self.data = b"".join([c async for c in chunks])
        self.index = meta.index

    async def install_snapshot_from_leader(
        self, leader_id: str, leader_address: str, meta: SnapshotMetadata
    ) -> tuple[int, int]:
        self.downloads.append((leader_id, leader_address, meta.index))
        if self.failures:
            self.failures -= 1
            raise ConnectionError("leader went away")
        self.index = meta.index + 2  # a checkpoint a little ahead of the announced snapshot
        return meta.term, self.index

    async def pause(self) -> None:
        self.events.append("pause")

    async def reinitialize(self) -> None:
        self.events.append("reinitialize")


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[LevelDBStorage]:
    st = LevelDBStorage(tmp_path / "raft", fsync=False)
    st.save(HardState(term=1, commit=50), [Entry(1, i, data=b"e%d" % i) for i in range(1, 51)])
    yield st
    st.close()


def make(
    storage: LevelDBStorage, sm: FakeSM, mode: InstallMode = "notify", *, running: bool = True
) -> tuple[Snapshots, list[float], list[str]]:
    slept: list[float] = []
    leaders = iter(["s2", "", "s2", "s2", "s2"])  # who the driver believes leads at each attempt
    located: list[str] = []

    def locate(meta: SnapshotMetadata) -> tuple[str, str]:
        leader = next(leaders)
        located.append(leader)
        return leader, meta.conf_state.address_of(leader)

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    snaps = Snapshots(
        "s1", storage, sm, mode=mode, threshold=10, purge_gap=5, locate_leader=locate, running=lambda: running,
        sleep=sleep,
    )  # fmt: skip
    return snaps, slept, located


async def test_a_snapshot_is_taken_where_the_state_machine_is_durable_and_the_log_purged_behind_it(
    storage: LevelDBStorage,
) -> None:
    sm = FakeSM()
    snaps, _, _ = make(storage, sm)
    assert not snaps.due(9) and snaps.due(10)
    sm.index = 30  # flushed up to 30, although 40 are applied
    assert await snaps.take(applied=40) == 30
    assert storage.snapshot_metadata().index == 30 and snaps.last_index == 30
    assert storage.first_index() == 26  # purge_gap entries kept behind the snapshot
    assert not snaps.due(39) and snaps.due(40)


async def test_nothing_new_to_snapshot_only_moves_the_next_due_point(storage: LevelDBStorage) -> None:
    sm = FakeSM()
    snaps, _, _ = make(storage, sm)
    sm.index = 30
    await snaps.take(applied=30)
    assert await snaps.take(applied=35) == 30  # the state machine flushed nothing newer
    assert snaps.last_index == 35 and storage.first_index() == 26


async def test_notify_mode_downloads_from_the_leader_with_backoff_until_it_succeeds(storage: LevelDBStorage) -> None:
    sm = FakeSM()
    sm.failures = 3
    snaps, slept, located = make(storage, sm)
    meta = SnapshotMetadata(index=80, term=3, conf_state=CONF)
    assert await snaps.install(Snapshot(meta)) == 82
    assert slept == [0.2, 0.4, 0.8]
    assert located == ["s2", "", "s2", "s2"]  # the leader is asked for again at every attempt
    assert sm.downloads[-1] == ("s2", "h2:1", 80)
    assert sm.events == ["pause", "reinitialize"]
    snaps.installed(meta)
    assert snaps.last_index == 80


async def test_notify_mode_refuses_a_checkpoint_older_than_the_snapshot(storage: LevelDBStorage) -> None:
    class Stale(FakeSM):
        async def install_snapshot_from_leader(
            self, leader_id: str, leader_address: str, meta: SnapshotMetadata
        ) -> tuple[int, int]:
            return meta.term, meta.index - 1

    snaps, _, _ = make(storage, Stale(), running=False)  # a stopping driver does not retry
    with pytest.raises(StorageError, match="older than the snapshot index"):
        await snaps.install(Snapshot(SnapshotMetadata(index=80, term=3, conf_state=CONF)))


async def test_chunked_mode_keeps_the_received_data_and_installs_it(storage: LevelDBStorage) -> None:
    leader_sm, follower_sm = FakeSM(), FakeSM()
    leader, _, _ = make(storage, leader_sm, "chunked")
    follower, _, _ = make(storage, follower_sm, "chunked")
    data = leader.data()
    assert data is not None
    meta = SnapshotMetadata(index=60, term=2, conf_state=CONF)
    await follower.receive(meta, data)
    assert list(storage.snapshot_dir.glob("snapshot-*.data"))  # kept until the Ready installs it
    assert await follower.install(Snapshot(meta)) == 60
    assert follower_sm.data == b"state-of-the-machine"
    assert not list(storage.snapshot_dir.glob("snapshot-*.data"))  # removed once installed


async def test_chunked_mode_without_the_data_is_an_error(storage: LevelDBStorage) -> None:
    snaps, _, _ = make(storage, FakeSM(), "chunked")
    with pytest.raises(StorageError, match="was not received"):
        await snaps.install(Snapshot(SnapshotMetadata(index=60, term=2, conf_state=CONF)))


async def test_notify_mode_sends_no_data_and_drains_what_arrives(storage: LevelDBStorage) -> None:
    snaps, _, _ = make(storage, FakeSM())
    assert snaps.data() is None
    seen: list[bytes] = []

    async def chunks() -> AsyncIterator[bytes]:
        for c in (b"a", b"b"):
            seen.append(c)
            yield c

    await snaps.receive(SnapshotMetadata(index=60, term=2, conf_state=CONF), chunks())
    assert seen == [b"a", b"b"]
