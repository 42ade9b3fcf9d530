"""Apply of the Raft driver: committed entries to the state machine, with the retry cache.

Where it sits: :class:`~scm_server.raft.server.RaftServer` owns one :class:`Applier`. The server's
``submit`` asks it whether a client call was already answered (:meth:`Applier.cached`), is in flight
(:meth:`Applier.inflight`) or sits unapplied in the log (:meth:`Applier.logged_unapplied`), and
registers each proposal it makes (:meth:`Applier.expect`); the driver loop hands it every Ready's new
entries (:meth:`Applier.track_unapplied`) and committed entries (:meth:`Applier.apply`). It calls the
state machine (:class:`ApplyStateMachine`) and reads the log (:class:`LogReader`); it never touches
the core, the transport or the disk's write path.

Rules:

* every replica applies every committed NORMAL entry in log order, in batches of at most
  ``max_apply_batch``; no apply-time decision depends on the retry cache (whose contents differ after
  a snapshot install), so replicas never diverge;
* the retry cache is filled on apply on every replica: a retried ``(client_id, call_id)`` returns its
  original result without proposing again, also after a leader change; expiry follows the leaders'
  timestamps in the entries, never a replica's clock; on restart it is refilled from the log
  (results unknown: RESULT_UNAVAILABLE);
* a proposal waiting at index i resolves with the result applied at i when the term matches, and
  with not-leader otherwise (another leader's entry took the index); an entry at or below
  ``sm_applied`` is already in the state machine (restart replay, a checkpoint ahead of the log) and
  is only recorded;
* the state machine returning a different number of results than entries is fatal (LogFailedError).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from scm_server.raft.core.types import Entry, EntryType
from scm_server.raft.errors import LogFailedError, RaftTimeoutError
from scm_server.raft.retry_cache import ENVELOPE_MAGIC, Envelope, RetryCache, decode_envelope
from scm_server.raft.statemachine import AppliedEntry, ApplyRejected
from scm_server.raft.view import CoreView, wait_shared

__all__ = ["Applier", "ApplyStateMachine", "CallKey", "LogReader"]

_T = TypeVar("_T")
CallKey = tuple[bytes, int]  # (client_id, call_id)


class LogReader(Protocol):
    """The part of the durable log the applier reads."""

    def first_index(self) -> int: ...

    def last_index(self) -> int: ...

    def entries(self, lo: int, hi: int) -> list[Entry]: ...


class ApplyStateMachine(Protocol):
    """The state machine's apply side (see :class:`~scm_server.raft.statemachine.StateMachine`)."""

    async def apply(self, entries: Sequence[AppliedEntry]) -> list[bytes | ApplyRejected]: ...

    def notify_term_index_updated(self, term: int, index: int) -> None: ...


@dataclass(slots=True)
class _Pending:
    term: int
    future: asyncio.Future[bytes]
    key: CallKey | None


def _fail(fut: asyncio.Future[_T], exc: Exception) -> None:
    if not fut.done():
        fut.set_exception(exc)
        fut.exception()  # mark retrieved: callers may have timed out already


class Applier:
    def __init__(
        self,
        view: CoreView,
        sm: ApplyStateMachine,
        *,
        max_apply_batch: int,
        retry_cache_expiry: float,
        max_pending_proposals: int,
        request_timeout: float,
    ) -> None:
        self._view = view
        self._sm = sm
        self._max_batch = max_apply_batch
        self._max_pending = max_pending_proposals
        self._request_timeout = request_timeout
        self.retry_cache = RetryCache(retry_cache_expiry)
        self.sm_applied = 0  # entries <= this are already in the state machine (restart/snapshot)
        self._pending: dict[int, _Pending] = {}  # log index -> the proposal waiting there
        self._inflight_calls: dict[CallKey, asyncio.Future[bytes]] = {}
        self._unapplied_calls: dict[CallKey, int] = {}  # client call -> log index, not applied yet
        self._applied_waiters: list[tuple[int, asyncio.Future[None]]] = []

    # ------------------------------------------------------------------ start
    def start(self, log_reader: LogReader, sm_index: int, applied: int) -> None:
        """The state machine is at ``sm_index`` and the log applied up to ``applied``: refill the retry
        cache from the entries still in the log up to ``applied`` (results unknown)."""
        self.sm_applied = sm_index
        self._view.applied = applied
        lo = log_reader.first_index()
        for e in log_reader.entries(lo, applied + 1) if applied >= lo else ():
            if e.type == EntryType.NORMAL and e.data:
                env = decode_envelope(e.data)
                self.retry_cache.advance_time(env.timestamp)
                if env.client_id:
                    self.retry_cache.record(
                        env, e.index, ApplyRejected("RESULT_UNAVAILABLE", "the call was applied before a restart")
                    )
        if log_reader.last_index() > applied:
            self.track_unapplied(log_reader.entries(max(applied + 1, lo), log_reader.last_index() + 1))

    # ------------------------------------------------------------------ client calls
    def cached(self, key: CallKey) -> bytes | None:
        """The result of a call already applied (raises its rejection), or None."""
        hit = self.retry_cache.get(*key)
        if isinstance(hit, ApplyRejected):
            raise hit
        return hit

    def inflight(self, key: CallKey) -> asyncio.Future[bytes] | None:
        """The future of a proposal of this call still waiting to commit on this leader."""
        return self._inflight_calls.get(key)

    def logged_unapplied(self, key: CallKey, log_reader: LogReader) -> int | None:
        """Index of an unapplied copy of this client call in our log, if there is one."""
        index = self._unapplied_calls.get(key)
        if index is None:
            return None
        if index > self._view.applied and log_reader.first_index() <= index <= log_reader.last_index():
            env = decode_envelope(log_reader.entries(index, index + 1)[0].data)
            if (env.client_id, env.call_id) == key:
                return index
        del self._unapplied_calls[key]  # stale: applied, or overwritten by a conflicting entry
        return None

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def expect(self, index: int, term: int, key: CallKey | None) -> asyncio.Future[bytes]:
        """A proposal was appended at ``index`` in ``term``: the future its result arrives in."""
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[index] = _Pending(term, fut, key)
        if key is not None:
            self._inflight_calls[key] = fut
        return fut

    async def await_result(self, fut: asyncio.Future[bytes], timeout: float | None, index: int | None = None) -> bytes:
        """Wait for a proposal's result; on timeout the proposal at ``index`` is forgotten."""
        t = timeout if timeout is not None else self._request_timeout
        # a timer instead of asyncio.wait_for: no extra Task per request on the hot path
        try:
            return await wait_shared(fut, t)
        except TimeoutError:
            if index is not None:
                p = self._pending.pop(index, None)
                if p is not None and p.key is not None:
                    self._inflight_calls.pop(p.key, None)
            raise RaftTimeoutError(
                f"request not committed within {t:.1f}s on {self._view.node_id}; its outcome is unknown "
                "(retry with the same client_id/call_id for exactly-once)"
            ) from None

    async def wait_applied(self, index: int, timeout: float | None = None) -> None:
        """Return once the state machine has applied ``index``."""
        if self._view.applied >= index:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._applied_waiters.append((index, fut))
        try:
            await wait_shared(fut, timeout if timeout is not None else self._request_timeout)
        except TimeoutError:
            raise RaftTimeoutError(f"{self._view.node_id} did not apply index {index} in time") from None

    # ------------------------------------------------------------------ the log
    def track_unapplied(self, entries: Sequence[Entry]) -> None:
        """Remember which client calls sit in the log but are not applied yet (see ``logged_unapplied``)."""
        unapplied = self._unapplied_calls
        for e in entries:
            if e.type == EntryType.NORMAL and e.data and e.data[0] == ENVELOPE_MAGIC:
                env = decode_envelope(e.data)
                if env.client_id:
                    unapplied[(env.client_id, env.call_id)] = e.index
        if len(unapplied) > 2 * self._max_pending + 1024:
            applied = self._view.applied  # drop keys left behind by truncated entries
            for key in [k for k, i in unapplied.items() if i <= applied]:
                del unapplied[key]

    async def apply(self, entries: Sequence[Entry]) -> bool:
        """Apply committed entries in order; whether one of them is of the current term."""
        sm = self._sm
        cache = self.retry_cache
        batch: list[AppliedEntry] = []
        envs: list[Envelope] = []
        unapplied = self._unapplied_calls
        max_batch = self._max_batch
        term = self._view.term
        sm_last = 0  # index of the last entry handed to the state machine

        async def flush() -> None:
            nonlocal sm_last
            if not batch:
                return
            results = await sm.apply(batch)
            if len(results) != len(batch):
                raise LogFailedError(f"state machine returned {len(results)} results for {len(batch)} entries")
            for ae, env, res in zip(batch, envs, results, strict=True):
                cache.record(env, ae.index, res)
                self._resolve(ae.index, ae.term, res)
            sm_last = batch[-1].index
            batch.clear()
            envs.clear()

        own_term_applied = False
        for e in entries:
            if e.index <= self.sm_applied:
                # already in the state machine (restart replay or a checkpoint ahead of the log)
                if e.type == EntryType.NORMAL and e.data:
                    env = decode_envelope(e.data)
                    cache.advance_time(env.timestamp)
                    if env.client_id:
                        unapplied.pop((env.client_id, env.call_id), None)
                        if cache.get(env.client_id, env.call_id) is None:
                            cache.record(env, e.index, ApplyRejected("RESULT_UNAVAILABLE", "applied before a restart"))
                self._resolve_other(e)
                continue
            if e.term == term:
                own_term_applied = True
            if e.type != EntryType.NORMAL or not e.data:
                self._resolve_other(e)
                continue
            env = decode_envelope(e.data)
            cache.advance_time(env.timestamp)
            if env.client_id and unapplied:
                key = (env.client_id, env.call_id)
                if unapplied.get(key) == e.index:
                    del unapplied[key]
            batch.append(AppliedEntry(e.term, e.index, env.payload))
            envs.append(env)
            if len(batch) >= max_batch:
                await flush()
        await flush()
        last = entries[-1]
        if last.index > sm_last and last.index > self.sm_applied:
            sm.notify_term_index_updated(last.term, last.index)
        self._set_applied(last.index)
        return own_term_applied

    def snapshot_installed(self, sm_index: int, snapshot_index: int) -> None:
        """The state machine is at ``sm_index`` after installing the snapshot at ``snapshot_index``: the
        proposals at or below it can no longer be matched with their results."""
        self.sm_applied = sm_index
        self._view.applied = max(self._view.applied, snapshot_index)
        for idx in [i for i in self._pending if i <= snapshot_index]:
            p = self._pending.pop(idx)
            if not p.future.done():
                p.future.set_exception(self._view.not_leader())

    def _set_applied(self, index: int) -> None:
        view = self._view
        view.applied = max(view.applied, index)
        if self._applied_waiters:
            still = []
            for idx, fut in self._applied_waiters:
                if idx <= view.applied:
                    if not fut.done():
                        fut.set_result(None)
                else:
                    still.append((idx, fut))
            self._applied_waiters = still

    def _resolve(self, index: int, term: int, result: bytes | ApplyRejected) -> None:
        p = self._pending.pop(index, None)
        if p is None:
            return
        if p.key is not None:
            self._inflight_calls.pop(p.key, None)
        if p.future.done():
            return
        if p.term != term:
            p.future.set_exception(self._view.not_leader())
        elif isinstance(result, ApplyRejected):
            p.future.set_exception(result)
        else:
            p.future.set_result(result)

    def _resolve_other(self, e: Entry) -> None:
        """A no-op or conf entry (or an already-applied one) landed where a proposal may wait."""
        if e.index in self._pending:
            p = self._pending.pop(e.index)
            if p.key is not None:
                self._inflight_calls.pop(p.key, None)
            if not p.future.done():
                p.future.set_exception(self._view.not_leader())

    # ------------------------------------------------------------------ failures
    def fail_pending(self, exc: Exception) -> None:
        """Every waiting proposal fails with ``exc`` (this leader stepped down, or the server stops)."""
        pending, self._pending = self._pending, {}
        self._inflight_calls.clear()
        for p in pending.values():
            _fail(p.future, exc)

    def fail_all(self, exc: Exception) -> None:
        """Every waiting proposal and every wait for an applied index fails with ``exc``."""
        self.fail_pending(exc)
        for _, wfut in self._applied_waiters:
            _fail(wfut, exc)
        self._applied_waiters = []
