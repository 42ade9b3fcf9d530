"""Snapshots of the Raft driver: take (and purge the log behind), receive, install.

Where it sits: :class:`~scm_server.raft.server.RaftServer` creates one :class:`Snapshots` when it opens
its log, asks :meth:`Snapshots.due` after every Ready and :meth:`Snapshots.take` when it is, hands it
the chunks of an inbound InstallSnapshot (:meth:`Snapshots.receive`) and a Ready's snapshot to install
(:meth:`Snapshots.install`, before the Ready is persisted). It talks to the durable log
(:class:`~scm_server.raft.storage.LevelDBStorage`) and the state machine's snapshot hooks
(:class:`~scm_server.raft.statemachine.StateMachine`), never to the core, the transport or the client API.

Two install modes:

* ``chunked``: the leader streams the state machine's data through Raft; the data lands in a file
  next to the log (:meth:`receive`) and is handed to ``install_snapshot_data``.
* ``notify`` (what SCM uses): the state machine downloads a checkpoint from the leader itself
  (``install_snapshot_from_leader``), then ``pause`` and ``reinitialize``. A failed download is retried
  with backoff (0.2 s doubling to 5 s) against the leader known at each attempt, for as long as the
  driver runs; the Ready waits meanwhile, so nothing after the snapshot is applied out of order.

Taking a snapshot = the state machine flushes and reports the index now durable (at most the applied
index and the last log index); the log keeps ``purge_gap`` entries behind it for slow followers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Literal

from scm_server.exceptions import StorageError
from scm_server.raft.core.types import Snapshot, SnapshotMetadata
from scm_server.raft.statemachine import StateMachine
from scm_server.raft.storage import LevelDBStorage

__all__ = ["Snapshots"]

log = logging.getLogger(__name__)

InstallMode = Literal["notify", "chunked"]


class Snapshots:
    def __init__(
        self,
        node_id: str,
        storage: LevelDBStorage,
        sm: StateMachine,
        *,
        mode: InstallMode,
        threshold: int,
        purge_gap: int,
        locate_leader: Callable[[SnapshotMetadata], tuple[str, str]],
        running: Callable[[], bool],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """``locate_leader(meta)`` gives the (id, address) of the leader to download from in notify mode;
        ``running()`` says whether the driver still runs (a failed download is retried only then)."""
        self._node_id = node_id
        self._storage = storage
        self._sm = sm
        self.mode = mode
        self._threshold = threshold
        self._purge_gap = purge_gap
        self._locate_leader = locate_leader
        self._running = running
        self._sleep = sleep
        self.last_index = storage.snapshot_metadata().index  # where the last snapshot was taken or installed
        self._received: dict[tuple[int, int], Path] = {}  # chunked: (term, index) -> data file

    # ------------------------------------------------------------------ take
    def due(self, applied: int) -> bool:
        """Whether ``threshold`` entries were applied since the last snapshot."""
        return applied - self.last_index >= self._threshold

    async def take(self, applied: int) -> int:
        """Snapshot what the state machine has made durable, purge the log behind it; the snapshot index."""
        storage = self._storage
        term, index = await self._sm.take_snapshot()
        index = min(index, applied, storage.last_index())
        if index <= storage.snapshot_metadata().index or index < storage.first_index() - 1:
            self.last_index = applied
            return storage.snapshot_metadata().index
        storage.create_snapshot(index)
        self.last_index = index
        compact_to = index - self._purge_gap
        if compact_to > storage.first_index() - 1:
            storage.compact(compact_to)
        log.info("%s: snapshot at index %d (term %d), log starts at %d", self._node_id, index, term, storage.first_index())
        return index

    # ------------------------------------------------------------------ send and receive
    def data(self) -> AsyncIterator[bytes] | None:
        """The data a leader streams after the SNAPSHOT message (chunked mode; nothing in notify mode)."""
        if self.mode == "chunked":
            return self._sm.snapshot_chunks()
        return None

    async def receive(self, meta: SnapshotMetadata, chunks: AsyncIterator[bytes]) -> None:
        """An inbound InstallSnapshot's data: kept in a file (chunked mode) or drained (notify mode)."""
        if self.mode != "chunked":
            async for _ in chunks:
                pass
            return
        writer = self._storage.open_snapshot_writer(meta.term, meta.index)
        try:
            async for chunk in chunks:
                writer.write(chunk)
        except BaseException:
            writer.abort()
            raise
        path = await asyncio.get_running_loop().run_in_executor(None, writer.finish)
        self._received[(meta.term, meta.index)] = path

    # ------------------------------------------------------------------ install
    async def install(self, snap: Snapshot) -> int:
        """Bring the state machine to the snapshot; the index it is at afterwards (>= the snapshot's)."""
        meta = snap.metadata
        log.info(
            "%s: installing snapshot at index %d term %d (%s mode)", self._node_id, meta.index, meta.term, self.mode
        )
        if self.mode == "chunked":
            installed = await self._install_chunks(meta)
        else:
            installed = await self._install_from_leader(meta)
        return max(installed, meta.index)

    def installed(self, meta: SnapshotMetadata) -> None:
        """The Ready carrying the snapshot is durable: the next snapshot counts from it."""
        self.last_index = meta.index

    async def _install_chunks(self, meta: SnapshotMetadata) -> int:
        storage = self._storage
        path = self._received.pop((meta.term, meta.index), None)
        if path is None:
            path = storage.snapshot_file(meta.term, meta.index)
            if not path.exists():
                raise StorageError(f"snapshot data for index {meta.index} term {meta.term} was not received")

        async def chunks() -> AsyncIterator[bytes]:
            for c in storage.read_snapshot_file(path):
                yield c

        await self._sm.install_snapshot_data(meta, chunks())
        installed = self._sm.last_applied()[1]
        storage.remove_snapshot_files()
        return installed

    async def _install_from_leader(self, meta: SnapshotMetadata) -> int:
        """Notification mode: the state machine downloads a checkpoint from the leader, retried with
        backoff against the current leader while the driver runs."""
        backoff = 0.2
        attempt = 0
        while True:
            attempt += 1
            leader, address = self._locate_leader(meta)
            try:
                _, installed = await self._sm.install_snapshot_from_leader(leader, address, meta)
                if installed < meta.index:
                    raise StorageError(
                        f"the state machine installed a checkpoint at index {installed}, older than the "
                        f"snapshot index {meta.index} the leader announced"
                    )
                await self._sm.pause()
                await self._sm.reinitialize()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not self._running():
                    raise
                log.warning(
                    "%s: installing the checkpoint for snapshot %d from leader %s (%s) failed (attempt %d): %s;"
                    " retrying in %.1fs",
                    self._node_id, meta.index, leader or "?", address or "?", attempt, exc, backoff,
                )  # fmt: skip
                await self._sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            return installed
