"""The Raft driver's log writer: one Ready's hard state, entries and snapshot in one LevelDB batch.

Where it sits: :class:`~scm_server.raft.server.RaftServer`'s Ready loop calls :meth:`LogWriter.save`
for every Ready that carries something durable, before it sends the messages that depend on it. The
writer decides only where the write runs:

* a Ready that moves nothing but the commit index is a tiny unsynced write, on the event loop;
* a follower writes a small Ready (at most ``INLINE_WRITE_ENTRIES`` entries and ``INLINE_WRITE_BYTES``
  bytes) on the event loop while its disk syncs fast: it has nothing to send before the write is
  durable, and handing a small write to the writer thread and back costs more CPU (two thread
  switches and a wakeup of the loop) than a fast sync blocks the loop;
* everything else (a leader's writes, catch-up batches, snapshots, and every write while the moving
  average of recent syncs exceeds ``INLINE_WRITE_MAX_SECONDS``, as on a network volume) goes to the
  single writer thread (group commit: one Ready = one fsync), so the loop keeps serving meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from time import perf_counter

from scm_server.raft.core.types import Ready, Snapshot
from scm_server.raft.metrics import RaftMetrics
from scm_server.raft.storage import LevelDBStorage, PreparedSave
from scm_server.raft.view import CoreView

__all__ = ["INLINE_WRITE_BYTES", "INLINE_WRITE_ENTRIES", "INLINE_WRITE_MAX_SECONDS", "LogWriter"]

INLINE_WRITE_ENTRIES = 64
INLINE_WRITE_BYTES = 256 << 10
INLINE_WRITE_MAX_SECONDS = 0.001


class LogWriter:
    def __init__(self, view: CoreView, storage: LevelDBStorage, writer: Executor,
                 metrics: RaftMetrics | None = None, timer: Callable[[], float] | None = None) -> None:
        """``writer`` is the single thread synced writes run in; ``metrics`` counts and times the writes;
        ``timer`` (seconds, read in the thread that writes; default ``time.perf_counter``) times them."""
        self._view = view
        self._storage = storage
        self._writer = writer
        self._metrics = metrics if metrics is not None else RaftMetrics()
        self._timer = timer if timer is not None else perf_counter
        self.write_seconds = 0.0  # moving average of synced log writes

    async def save(self, rd: Ready, snap: Snapshot | None) -> None:
        """Make ``rd``'s hard state and entries, and ``snap``, durable (synced when ``rd.must_sync``)."""
        storage = self._storage
        p = storage.prepare_save(rd.hard_state, rd.entries, snap, rd.must_sync)
        if not (rd.must_sync or rd.entries or snap is not None):
            storage.write_prepared(p)  # only the commit index moved: a tiny unsynced write, inline
        elif self._inline(rd):
            self._timed_write(p)
        else:
            await asyncio.get_running_loop().run_in_executor(self._writer, self._timed_write, p)
        storage.commit_prepared(p)

    def _inline(self, rd: Ready) -> bool:
        """Whether a follower writes this Ready on the loop."""
        if (
            self._view.is_leader
            or rd.snapshot is not None
            or len(rd.entries) > INLINE_WRITE_ENTRIES
            or self.write_seconds > INLINE_WRITE_MAX_SECONDS
        ):
            return False
        return sum(len(e.data) for e in rd.entries) <= INLINE_WRITE_BYTES

    def _timed_write(self, p: PreparedSave) -> None:
        """Write (and sync) one Ready, keeping a moving average of how long that takes."""
        t0 = self._timer()
        self._storage.write_prepared(p)
        seconds = self._timer() - t0
        self.write_seconds += (seconds - self.write_seconds) * 0.2
        self._metrics.logged(len(p.entries), p.sync and self._storage.fsync, seconds)
