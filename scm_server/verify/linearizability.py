"""Linearizability checker: Wing & Gong's search with Lowe's memoisation, as in Porcupine.

Where it sits: tests record client histories (``scm_server.verify.history``) against a
real Raft cluster (the demo KV server, or SCM HA) and hand them to :func:`check_operations`
with a model (:class:`SequentialModel`, implemented in :mod:`scm_server.verify.models`); ``ozone-scm debug verify`` does the same for a
recorded file. A verdict of ``ILLEGAL`` means the system returned results that no sequential
execution respecting real-time order could produce (a stale read, a lost write, a CAS anomaly,
...). This module is pure computation: no I/O; the only clock it reads is the monotonic one
for the caller's timeout (``clock`` can be injected).

The algorithm (Porcupine's ``checkSingle``):

1. every operation contributes a *call* and a *return* event; events are sorted by time
   (calls before returns on ties) into a doubly linked list with head/tail sentinels;
2. walk the list from the head; at a call whose model step is legal from the current
   state, mark the operation in the ``linearized`` bitset (a Python int); if the pair
   (bitset, new state) is not in the memo cache, push (call, old state) on a stack,
   *lift* the call and its return out of the list and restart from the head;
3. reaching a return means that operation had to take effect already but could not:
   *backtrack* (pop, restore the state, *unlift*, try the next call);
4. an empty list means every operation was linearized: the history is linearizable.

P-compositionality (Horn & Kroening): a model may split the history into independent
partitions (one per key for a key-value store). Their searches are independent and run
interleaved, in slices of a few milliseconds each, so a slow partition never hides a
quickly provable violation in another: the verdict is ``ILLEGAL`` as soon as any partition
is illegal, ``OK`` when all are linearizable, and ``UNKNOWN`` (with the reason) only when
some partition is undecided when the time or memory budget runs out.

Budgets. ``timeout`` bounds the whole call, including freeing the search's memory, and is
kept to within a few per cent (slices adapt their length to the cost of a model step). The
memo cache is bounded by ``max_memo_bytes`` (an estimate of its footprint, shared by the
partitions being searched); a search that would exceed it stops with ``UNKNOWN`` and says so
instead of growing until the process dies. Cache keys are plain ints (bitset and interned
state id), which the garbage collector does not track, so no collector pause grows with it.

Indeterminate operations (Jepsen ``:info``, client timeouts) have their return time at
``+inf`` and the output :data:`UNKNOWN`; models accept any output for them, so the search
may place them anywhere after their call, including after everything else, i.e. "it never
happened". Indeterminate operations that cannot change state (reads) are dropped.
"""

from __future__ import annotations

import enum
import inspect
import math
import time
from collections.abc import Callable, Generator, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


class _Unknown:
    """Sentinel type of :data:`UNKNOWN` (the output of an indeterminate operation)."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __reduce__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()
"""Output of an operation whose outcome the client never learned (timeout, crash)."""

DEFAULT_MAX_MEMO_BYTES = 1 << 30
"""Default bound of the memo cache (1 GiB, an estimate of its footprint)."""


@dataclass(frozen=True, slots=True)
class Operation:
    """One completed (or indeterminate) client operation.

    ``call`` and ``ret`` are timestamps from one monotonic clock (any unit). An
    indeterminate operation has ``ret == math.inf`` and ``output is UNKNOWN``.
    """

    client_id: Hashable
    input: Any
    call: float
    output: Any
    ret: float

    @property
    def indeterminate(self) -> bool:
        return self.output is UNKNOWN or self.ret == math.inf

    def __post_init__(self) -> None:
        if not self.ret >= self.call:
            raise ValueError(
                f"operation {self.input!r} of client {self.client_id!r} returns at {self.ret} before "
                f"its call at {self.call}: timestamps must come from one monotonic clock"
            )


class SequentialModel(Protocol):
    """What the checker asks of a sequential specification (:mod:`scm_server.verify.models` implements it,
    and imports this module for :data:`UNKNOWN` and :class:`Operation`, so the checker names only this).

    States must be hashable (they key the memo cache) and immutable."""

    def init(self) -> Hashable:
        """The initial state."""
        ...

    def step(self, state: Any, inp: Any, out: Any) -> tuple[bool, Any]:
        """(is ``inp -> out`` legal from ``state``, the state after it)."""
        ...

    def partition(self, ops: Sequence[Operation]) -> list[list[Operation]]:
        """Independent sub-histories, checked interleaved."""
        ...

    def partition_key(self, op: Operation) -> str:
        """A label for the partition an operation belongs to (reports only)."""
        ...

    def is_read_only(self, inp: Any) -> bool:
        """True when the operation cannot change state (indeterminate ones are dropped)."""
        ...

    def preserves_state(self, inp: Any, out: Any) -> bool:
        """True if the operation, with this output, leaves the state unchanged wherever it is legal."""
        ...


class Verdict(enum.Enum):
    OK = "ok"  # linearizable
    ILLEGAL = "illegal"  # not linearizable
    UNKNOWN = "unknown"  # undecided within the time or memory budget (see the reason)


@dataclass(slots=True)
class PartitionResult:
    """The outcome of checking one partition (e.g. one key)."""

    ops: list[Operation]
    verdict: Verdict
    elapsed: float  # time spent searching this partition (its slices only)
    # For ILLEGAL partitions: the longest linearizable prefix found (indexes into ``ops``,
    # in linearization order) and the operation whose return could not be passed.
    best_linearization: list[int] = field(default_factory=list)
    stuck_op: int | None = None
    explored: int = 0  # number of model steps tried
    key: str = ""  # the model's label for the partition (e.g. the key)
    reason: str = ""  # why an UNKNOWN partition is undecided
    memo_entries: int = 0  # configurations memoised when the search ended


@dataclass(slots=True)
class CheckResult:
    """Verdict over the whole history, plus per-partition details for reports."""

    verdict: Verdict
    partitions: list[PartitionResult]
    elapsed: float
    ops_checked: int
    reason: str = ""  # for UNKNOWN: what ran out, and where

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.OK

    def failing_partition(self) -> PartitionResult | None:
        """An illegal partition if there is one, else an undecided one, else None."""
        for wanted in (Verdict.ILLEGAL, Verdict.UNKNOWN):
            for p in self.partitions:
                if p.verdict is wanted:
                    return p
        return None

    def summary(self) -> str:
        explored = sum(p.explored for p in self.partitions)
        text = (
            f"{self.verdict.value}: {self.ops_checked} ops in {len(self.partitions)} partitions, "
            f"{explored} model steps, {self.elapsed:.3f}s"
        )
        return f"{text} ({self.reason})" if self.reason else text


# ------------------------------------------------------------------------------- budgets


@dataclass(slots=True)
class _Budget:
    """What the interleaved searches share: the slice length and the memo byte budget."""

    slice_steps: int
    max_memo_bytes: int
    memo_bytes: int = 0


# Per-entry overhead of a set of ints beyond the int itself: a 16-byte slot at a fill of
# 30-60 %, plus the transient doubling while the table grows.
_SET_SLOT_BYTES = 48
# An interned state: the dict slot and index, plus the object itself (``sys.getsizeof`` is
# shallow, so this is an estimate; states are small values in every model here).
_STATE_BYTES = 120

_TARGET_SLICE = 0.004  # seconds of search per slice before the driver looks at the clock
_MIN_SLICE_STEPS, _MAX_SLICE_STEPS = 64, 1 << 16
# Freeing a search's memo cache takes time too; the driver stops early enough to pay it
# within the timeout (the measured cost per byte of cache, rounded up: docs/performance.md).
_FREE_SECONDS_PER_BYTE = 0.3e-9


class _Stop(Exception):
    """Raised into a search generator to end it early (timeout / another partition illegal)."""


_SearchGen = Generator[None, None, PartitionResult]


def _search(
    step: Callable[[Any, Any, Any], tuple[bool, Any]],
    init_state: Any,
    ops: Sequence[Operation],
    budget: _Budget,
    forced: Sequence[bool] | None = None,
    key: str = "",
    clock: Callable[[], float] = time.monotonic,
) -> _SearchGen:
    """Porcupine's ``checkSingle`` plus one sound pruning rule ("forced moves"), as a generator.

    It yields every ``budget.slice_steps`` loop iterations so the driver can interleave
    partitions and watch the clock, and returns the :class:`PartitionResult`.

    ``forced[i]`` marks operations that leave the state unchanged wherever they are legal
    (a read with a definite result, a CAS that definitely failed). Such an operation that is
    legal now and is a candidate (called before the first pending return) can be moved to
    the front of any valid completion without breaking real-time order or the states of
    the others, so linearizing it first loses nothing: from a configuration C, if C + it
    fails then C fails. The search therefore (1) tries legal forced candidates before any
    other candidate, and (2) when it backtracks over a forced step, it keeps backtracking
    instead of trying alternatives at that configuration (a cached forced successor means
    the same). Without forced flags this is exactly Porcupine's search.
    """
    elapsed = 0.0
    resumed = clock()
    n = len(ops)
    is_forced = list(forced) if forced is not None else [False] * n
    # Event order: by time, calls (kind 0) before returns (kind 1) on ties, then by op id
    # so the order is deterministic.
    events: list[tuple[float, int, int]] = []
    for i, op in enumerate(ops):
        events.append((op.call, 0, i))
        events.append((op.ret, 1, i))
    events.sort()
    size = 2 * n + 2
    head, tail = 0, size - 1
    nxt = list(range(1, size + 1))
    prv = list(range(-1, size - 1))
    match = [-1] * size  # call node -> its return node; -1 for returns and sentinels
    opid = [-1] * size
    call_node = [0] * n
    for pos, (_t, kind, i) in enumerate(events, start=1):
        opid[pos] = i
        if kind == 0:
            call_node[i] = pos
        else:
            match[call_node[i]] = pos
    node_forced = [False] * size
    for i in range(n):
        node_forced[call_node[i]] = is_forced[i]
    inputs = [op.input for op in ops]
    outputs = [op.output for op in ops]

    # The memo cache holds (linearized bitset, state) as one int: bitset | state id << n.
    linearized = 0
    cache: set[int] = set()
    state_ids: dict[Any, int] = {}
    entry_bytes = 28 + 4 * ((n + 32) // 30 + 1) + _SET_SLOT_BYTES
    my_bytes = 0
    calls: list[tuple[int, Any]] = []  # (call node, state before it)
    best: list[int] = []
    stuck: int | None = None
    state = init_state
    explored = 0
    countdown = budget.slice_steps
    entry = nxt[head]
    phase = 1  # 1: looking for a legal forced candidate; 2: trying the other candidates

    def result(verdict: Verdict, reason: str = "") -> PartitionResult:
        nonlocal my_bytes
        budget.memo_bytes -= my_bytes
        my_bytes = 0
        return PartitionResult(
            list(ops), verdict, elapsed + clock() - resumed,
            best_linearization=best if verdict is Verdict.ILLEGAL else [],
            stuck_op=stuck if verdict is Verdict.ILLEGAL else None,
            explored=explored, key=key, reason=reason, memo_entries=len(cache),
        )

    try:
        while nxt[head] != tail:
            countdown -= 1
            if countdown == 0:
                elapsed += clock() - resumed
                yield
                resumed = clock()
                countdown = budget.slice_steps
            ret_node = match[entry]
            backtrack = False
            if ret_node >= 0:
                if node_forced[entry] != (phase == 1):
                    entry = nxt[entry]
                    continue
                i = opid[entry]
                explored += 1
                legal, new_state = step(state, inputs[i], outputs[i])
                if legal:
                    new_lin = linearized | (1 << i)
                    sid = state_ids.get(new_state)
                    if sid is None:
                        sid = state_ids[new_state] = len(state_ids)
                        my_bytes += _STATE_BYTES
                        budget.memo_bytes += _STATE_BYTES
                    mkey = new_lin | (sid << n)
                    if mkey not in cache:
                        if budget.memo_bytes + entry_bytes > budget.max_memo_bytes:
                            return result(Verdict.UNKNOWN, _memo_reason(len(cache), my_bytes, budget))
                        cache.add(mkey)
                        my_bytes += entry_bytes
                        budget.memo_bytes += entry_bytes
                        calls.append((entry, state))
                        state = new_state
                        linearized = new_lin
                        # lift the call and its return out of the list
                        p, q = prv[entry], nxt[entry]
                        nxt[p] = q
                        prv[q] = p
                        p, q = prv[ret_node], nxt[ret_node]
                        nxt[p] = q
                        prv[q] = p
                        entry = nxt[head]
                        phase = 1
                        continue
                    if phase == 1:
                        backtrack = True  # a forced successor already failed: so does this configuration
                if not backtrack:
                    entry = nxt[entry]
                    continue
            elif phase == 1:
                # no legal forced candidate: now try the others from the head
                phase = 2
                entry = nxt[head]
                continue
            else:
                # A return: its operation must have taken effect by now, and no remaining
                # candidate could be linearized from here.
                if len(calls) >= len(best):
                    best = [opid[c] for c, _s in calls]
                    stuck = opid[entry]
            # Backtrack: undo steps until one that was not forced, then try its next sibling.
            while True:
                if not calls:
                    return result(Verdict.ILLEGAL)
                entry, state = calls.pop()
                linearized &= ~(1 << opid[entry])
                ret_node = match[entry]
                # unlift: reinsert the return, then the call (their neighbours are unchanged)
                nxt[prv[ret_node]] = ret_node
                prv[nxt[ret_node]] = ret_node
                nxt[prv[entry]] = entry
                prv[nxt[entry]] = entry
                if not node_forced[entry]:
                    break
            entry = nxt[entry]
            phase = 2
        return result(Verdict.OK)
    except _Stop as stop:
        return result(Verdict.UNKNOWN, f"{stop} ({explored} model steps, {len(cache)} configurations memoised)")
    except MemoryError:
        entries = len(cache)
        cache.clear()
        return result(Verdict.UNKNOWN, f"out of memory after {explored} model steps, {entries} configurations "
                                       "memoised; lower max_memo_bytes (--max-memory) below what this host has")
    finally:
        budget.memo_bytes -= my_bytes


def _memo_reason(entries: int, mine: int, budget: _Budget) -> str:
    mib = 1 << 20
    return (
        f"memo cache full: {entries} configurations (~{mine / mib:.0f} MiB) of this partition, "
        f"~{budget.memo_bytes / mib:.0f} MiB in all, reached the bound of {budget.max_memo_bytes / mib:.0f} MiB "
        "(max_memo_bytes / --max-memory); too many concurrent operations of unknown outcome to search"
    )


def _finish(gen: _SearchGen, ops: Sequence[Operation], key: str, message: str) -> PartitionResult:
    """End a search early; it reports UNKNOWN with ``message`` and frees its cache."""
    if inspect.getgeneratorstate(gen) == inspect.GEN_CREATED:
        gen.close()
        return PartitionResult(list(ops), Verdict.UNKNOWN, 0.0, key=key, reason=f"{message} before its search began")
    try:
        gen.throw(_Stop(message))
    except StopIteration as stop:
        res: PartitionResult = stop.value
        return res
    raise RuntimeError("a search kept running after it was told to stop")


def check_operations(
    model: SequentialModel,
    ops: Sequence[Operation],
    timeout: float | None = None,
    *,
    optimize: bool = True,
    max_memo_bytes: int = DEFAULT_MAX_MEMO_BYTES,
    clock: Callable[[], float] = time.monotonic,
) -> CheckResult:
    """Check a history of operations against a sequential ``model``.

    The model's partitions are searched interleaved (see the module docstring): the verdict
    is ``ILLEGAL`` as soon as one partition is, ``OK`` when all are linearizable, else
    ``UNKNOWN`` with ``reason`` saying which budget ran out. ``timeout`` (seconds) bounds the
    whole call; ``max_memo_bytes`` bounds the memo cache. ``optimize=False`` runs Porcupine's
    plain search (no forced moves), for cross-checking.
    """
    started = clock()
    deadline = math.inf if timeout is None else started + timeout
    kept = [op for op in ops if not (op.indeterminate and model.is_read_only(op.input))]
    budget = _Budget(slice_steps=256, max_memo_bytes=max_memo_bytes)
    parts = [p for p in model.partition(kept) if p]
    results: list[PartitionResult | None] = [None] * len(parts)
    running: dict[int, _SearchGen] = {}
    for idx, part in enumerate(parts):
        forced = [model.preserves_state(op.input, op.output) for op in part] if optimize else None
        running[idx] = _search(
            model.step, model.init(), part, budget, forced, model.partition_key(part[0]), clock
        )

    illegal: int | None = None
    stop_reason = ""
    while running and illegal is None:
        for idx in list(running):
            t0 = clock()
            # Stop early enough to free the caches within the timeout.
            if t0 + budget.memo_bytes * _FREE_SECONDS_PER_BYTE >= deadline:
                stop_reason = f"timed out after {timeout:g}s"
                break
            gen = running[idx]
            try:
                next(gen)
            except StopIteration as done:
                res: PartitionResult = done.value
                results[idx] = res
                del running[idx]
                if res.verdict is Verdict.ILLEGAL:
                    illegal = idx
                    break
                continue
            _adapt_slice(budget, clock() - t0, deadline - t0)
        if stop_reason:
            break
    if illegal is not None:
        bad = results[illegal]
        stop_reason = f"not finished: partition {bad.key!r} is illegal" if bad is not None else "not finished"
    for idx, gen in list(running.items()):
        results[idx] = _finish(gen, parts[idx], model.partition_key(parts[idx][0]), stop_reason)
    done_results = [r for r in results if r is not None]
    if illegal is not None:
        verdict, reason = Verdict.ILLEGAL, ""
    elif all(r.verdict is Verdict.OK for r in done_results):
        verdict, reason = Verdict.OK, ""
    else:
        verdict, reason = Verdict.UNKNOWN, _unknown_reason(done_results)
    return CheckResult(verdict, done_results, clock() - started, len(kept), reason)


def _adapt_slice(budget: _Budget, took: float, left: float) -> None:
    """Aim each slice at a few milliseconds (and at most a fiftieth of the time left)."""
    target = min(_TARGET_SLICE, max(left / 50, 0.0002))
    if took > 2 * target and budget.slice_steps > _MIN_SLICE_STEPS:
        budget.slice_steps = max(_MIN_SLICE_STEPS, budget.slice_steps // 2)
    elif took < target / 2 and budget.slice_steps < _MAX_SLICE_STEPS:
        budget.slice_steps = min(_MAX_SLICE_STEPS, budget.slice_steps * 2)


def _unknown_reason(results: list[PartitionResult]) -> str:
    undecided = [r for r in results if r.verdict is Verdict.UNKNOWN]
    first = undecided[0]
    label = f"partition {first.key!r}" if first.key else "the history"
    more = f" (and {len(undecided) - 1} more undecided)" if len(undecided) > 1 else ""
    decided = len(results) - len(undecided)
    return f"{label}: {first.reason}{more}; {decided} of {len(results)} partitions linearizable"
