"""The apply part (:mod:`scm_server.raft.apply`) without a server: a fake state machine and an
in-memory log stand in for the driver's collaborators."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from scm_server.raft.apply import Applier
from scm_server.raft.core.types import Entry, EntryType, StateRole
from scm_server.raft.errors import LogFailedError, NotLeaderError, RaftStoppedError, RaftTimeoutError
from scm_server.raft.retry_cache import encode_envelope
from scm_server.raft.statemachine import AppliedEntry, ApplyRejected
from scm_server.raft.view import CoreView


class FakeSM:
    def __init__(self) -> None:
        self.batches: list[list[AppliedEntry]] = []
        self.notified: list[tuple[int, int]] = []
        self.short = False  # answer one result too few (a broken state machine)

    async def apply(self, entries: Sequence[AppliedEntry]) -> list[bytes | ApplyRejected]:
        self.batches.append(list(entries))
        out: list[bytes | ApplyRejected] = [
            ApplyRejected("NOPE", "rejected") if e.data.startswith(b"reject") else b"ok:" + e.data for e in entries
        ]
        return out[:-1] if self.short else out

    def notify_term_index_updated(self, term: int, index: int) -> None:
        self.notified.append((term, index))


class FakeLog:
    def __init__(self, entries: Sequence[Entry] = ()) -> None:
        self.ents = list(entries)

    def first_index(self) -> int:
        return self.ents[0].index if self.ents else 1

    def last_index(self) -> int:
        return self.ents[-1].index if self.ents else 0

    def entries(self, lo: int, hi: int) -> list[Entry]:
        return [e for e in self.ents if lo <= e.index < hi]


def call(index: int, data: bytes, *, term: int = 1, client: bytes = b"c1", call_id: int = 0, ts: float = 100.0) -> Entry:
    return Entry(term, index, EntryType.NORMAL, encode_envelope(client, call_id or index, ts, data))


def make(view: CoreView | None = None, **kw: float) -> tuple[Applier, FakeSM, CoreView]:
    view = view or CoreView("s1", role=StateRole.LEADER, leader="s1", term=1)
    sm = FakeSM()
    opts: dict[str, float] = {
        "max_apply_batch": 2,
        "retry_cache_expiry": 60.0,
        "max_pending_proposals": 16,
        "request_timeout": 5.0,
    }
    opts.update(kw)
    applier = Applier(
        view,
        sm,
        max_apply_batch=int(opts["max_apply_batch"]),
        retry_cache_expiry=opts["retry_cache_expiry"],
        max_pending_proposals=int(opts["max_pending_proposals"]),
        request_timeout=opts["request_timeout"],
    )
    return applier, sm, view


async def test_committed_entries_reach_the_state_machine_in_order_in_bounded_batches() -> None:
    applier, sm, view = make()
    entries = [call(i, b"w%d" % i) for i in range(1, 6)]
    assert await applier.apply(entries) is True  # entries of the current term
    assert [[e.index for e in b] for b in sm.batches] == [[1, 2], [3, 4], [5]]
    assert [e.data for b in sm.batches for e in b] == [b"w1", b"w2", b"w3", b"w4", b"w5"]  # envelope removed
    assert view.applied == 5
    assert sm.notified == []  # the last entry went to the state machine itself


async def test_no_op_and_conf_entries_move_the_applied_index_through_a_notification() -> None:
    applier, sm, view = make(CoreView("s1", term=2))
    noop = Entry(1, 1, EntryType.NORMAL, b"")
    conf = Entry(1, 2, EntryType.CONF_CHANGE, b"cc")
    assert await applier.apply([noop, conf]) is False  # term 1 entries, the current term is 2
    assert sm.batches == []
    assert sm.notified == [(1, 2)]
    assert view.applied == 2


async def test_a_proposal_gets_the_result_applied_at_its_index_in_its_term() -> None:
    applier, _, _ = make()
    ok = applier.expect(1, 1, (b"c1", 1))
    rejected = applier.expect(2, 1, (b"c1", 2))
    assert applier.pending_count == 2
    assert applier.inflight((b"c1", 1)) is ok
    await applier.apply([call(1, b"a"), call(2, b"reject-me")])
    assert ok.result() == b"ok:a"
    assert rejected.exception() == ApplyRejected("NOPE", "rejected")
    assert applier.pending_count == 0 and applier.inflight((b"c1", 1)) is None


async def test_a_proposal_whose_index_another_leader_took_fails_with_the_leader_hint() -> None:
    applier, _, view = make()
    fut = applier.expect(1, 1, None)
    view.leader = "s2"
    await applier.apply([call(1, b"theirs", term=2)])
    exc = fut.exception()
    assert isinstance(exc, NotLeaderError) and exc.leader_id == "s2"


async def test_the_retry_cache_answers_a_call_applied_before_with_its_result_or_rejection() -> None:
    applier, _, _ = make()
    await applier.apply([call(1, b"a", call_id=7), call(2, b"reject", call_id=8)])
    assert applier.cached((b"c1", 7)) == b"ok:a"
    with pytest.raises(ApplyRejected):
        applier.cached((b"c1", 8))
    assert applier.cached((b"c1", 9)) is None


async def test_entries_already_in_the_state_machine_are_recorded_not_applied_again() -> None:
    applier, sm, view = make()
    log = FakeLog([call(1, b"a", call_id=1), call(2, b"b", call_id=2), call(3, b"c", call_id=3)])
    applier.start(log, sm_index=2, applied=1)  # the state machine is ahead of the commit it restarts with
    assert view.applied == 1
    with pytest.raises(ApplyRejected, match="RESULT_UNAVAILABLE"):  # applied before the restart: result unknown
        applier.cached((b"c1", 1))
    await applier.apply(log.ents[1:])
    assert [e.index for b in sm.batches for e in b] == [3]
    with pytest.raises(ApplyRejected, match="RESULT_UNAVAILABLE"):
        applier.cached((b"c1", 2))
    assert applier.cached((b"c1", 3)) == b"ok:c"


async def test_a_call_in_the_log_but_not_applied_is_found_until_it_applies() -> None:
    applier, _, _ = make()
    log = FakeLog([call(1, b"a", call_id=1)])
    applier.start(log, sm_index=0, applied=0)
    assert applier.logged_unapplied((b"c1", 1), log) == 1
    await applier.apply(log.ents)
    assert applier.logged_unapplied((b"c1", 1), log) is None


async def test_a_logged_call_overwritten_by_another_entry_is_forgotten() -> None:
    applier, _, _ = make()
    log = FakeLog([call(1, b"a", call_id=1)])
    applier.track_unapplied(log.ents)
    log.ents = [call(1, b"other", client=b"c2", call_id=5, term=2)]  # a new leader's entry at that index
    assert applier.logged_unapplied((b"c1", 1), log) is None


async def test_retry_cache_entries_expire_on_the_leaders_clock_in_the_log() -> None:
    applier, _, _ = make(retry_cache_expiry=10.0)
    await applier.apply([call(1, b"a", call_id=1, ts=100.0)])
    await applier.apply([call(2, b"b", call_id=2, ts=105.0)])
    assert applier.cached((b"c1", 1)) == b"ok:a"
    await applier.apply([call(3, b"c", call_id=3, ts=111.0)])
    assert applier.cached((b"c1", 1)) is None and applier.cached((b"c1", 2)) == b"ok:b"


async def test_a_state_machine_answering_too_few_results_is_fatal() -> None:
    applier, sm, _ = make()
    sm.short = True
    with pytest.raises(LogFailedError):
        await applier.apply([call(1, b"a")])


async def test_waiting_for_an_index_ends_when_it_applies_or_with_the_failure() -> None:
    applier, _, _ = make()
    waiter = asyncio.create_task(applier.wait_applied(2))
    await asyncio.sleep(0)
    await applier.apply([call(1, b"a")])
    assert not waiter.done()
    await applier.apply([call(2, b"b")])
    await asyncio.wait_for(waiter, 1)
    await applier.wait_applied(1)  # already applied: returns at once

    stuck = asyncio.create_task(applier.wait_applied(9))
    pending = applier.expect(3, 1, (b"c1", 3))
    await asyncio.sleep(0)
    applier.fail_all(RaftStoppedError("stopped"))
    with pytest.raises(RaftStoppedError):
        await stuck
    assert isinstance(pending.exception(), RaftStoppedError)
    assert applier.inflight((b"c1", 3)) is None


async def test_a_proposal_not_committed_in_time_times_out_and_is_forgotten() -> None:
    applier, _, _ = make()
    fut = applier.expect(1, 1, (b"c1", 1))
    with pytest.raises(RaftTimeoutError, match="outcome is unknown"):
        await applier.await_result(fut, 0.01, 1)
    assert applier.pending_count == 0 and applier.inflight((b"c1", 1)) is None
    assert not fut.done()  # shared by other waiters: never cancelled


async def test_a_snapshot_install_fails_the_proposals_it_covers() -> None:
    applier, _, view = make()
    covered = applier.expect(3, 1, None)
    after = applier.expect(6, 1, None)
    applier.snapshot_installed(sm_index=5, snapshot_index=4)
    assert isinstance(covered.exception(), NotLeaderError)
    assert not after.done()
    assert view.applied == 4 and applier.sm_applied == 5
