"""Linearizability checker: Wing & Gong's search with Lowe's memoisation, as in Porcupine.

Where it sits: tests record client histories (``scm_server.verify.history``) against a
real Raft cluster (the demo KV server, or SCM HA) and hand them to :func:`check_operations`
with a :class:`~scm_server.verify.models.Model`. A verdict of ``ILLEGAL`` means the
system returned results that no sequential execution respecting real-time order could
produce (a stale read, a lost write, a CAS anomaly, ...).

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
partitions (one per key for a key-value store) that are checked separately.

Indeterminate operations (Jepsen ``:info``, client timeouts) have their return time at
``+inf`` and the output :data:`UNKNOWN`; models accept any output for them, so the search
may place them anywhere after their call, including after everything else, i.e. "it never
happened". Indeterminate operations that cannot change state (reads) are dropped.

A deadline turns an exhausting search into ``Verdict.UNKNOWN`` instead of hanging a test.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scm_server.verify.models import Model


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


class Verdict(enum.Enum):
    OK = "ok"  # linearizable
    ILLEGAL = "illegal"  # not linearizable
    UNKNOWN = "unknown"  # the check hit its deadline


@dataclass(slots=True)
class PartitionResult:
    """The outcome of checking one partition (e.g. one key)."""

    ops: list[Operation]
    verdict: Verdict
    elapsed: float
    # For ILLEGAL partitions: the longest linearizable prefix found (indexes into ``ops``,
    # in linearization order) and the operation whose return could not be passed.
    best_linearization: list[int] = field(default_factory=list)
    stuck_op: int | None = None
    explored: int = 0  # number of model steps tried


@dataclass(slots=True)
class CheckResult:
    """Verdict over the whole history, plus per-partition details for reports."""

    verdict: Verdict
    partitions: list[PartitionResult]
    elapsed: float
    ops_checked: int

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.OK

    def failing_partition(self) -> PartitionResult | None:
        for p in self.partitions:
            if p.verdict is not Verdict.OK:
                return p
        return None

    def summary(self) -> str:
        explored = sum(p.explored for p in self.partitions)
        return (
            f"{self.verdict.value}: {self.ops_checked} ops in {len(self.partitions)} partitions, "
            f"{explored} model steps, {self.elapsed:.3f}s"
        )


_DEADLINE_CHECK_EVERY = 4096


def _check_single(
    step: Callable[[Any, Any, Any], tuple[bool, Any]],
    init_state: Any,
    ops: Sequence[Operation],
    deadline: float,
    forced: Sequence[bool] | None = None,
) -> PartitionResult:
    """Porcupine's ``checkSingle`` plus one sound pruning rule ("forced moves").

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
    started = time.monotonic()
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

    linearized = 0
    cache: set[tuple[int, Any]] = set()
    calls: list[tuple[int, Any]] = []  # (call node, state before it)
    best: list[int] = []
    stuck: int | None = None
    state = init_state
    explored = 0
    countdown = _DEADLINE_CHECK_EVERY
    entry = nxt[head]
    phase = 1  # 1: looking for a legal forced candidate; 2: trying the other candidates
    while nxt[head] != tail:
        countdown -= 1
        if countdown == 0:
            countdown = _DEADLINE_CHECK_EVERY
            if time.monotonic() > deadline:
                return PartitionResult(list(ops), Verdict.UNKNOWN, time.monotonic() - started, explored=explored)
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
                key = (new_lin, new_state)
                if key not in cache:
                    cache.add(key)
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
                return PartitionResult(
                    list(ops),
                    Verdict.ILLEGAL,
                    time.monotonic() - started,
                    best_linearization=best,
                    stuck_op=stuck,
                    explored=explored,
                )
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
    return PartitionResult(list(ops), Verdict.OK, time.monotonic() - started, explored=explored)


def check_operations(
    model: Model, ops: Sequence[Operation], timeout: float | None = None, *, optimize: bool = True
) -> CheckResult:
    """Check a history of operations against a sequential ``model``.

    ``timeout`` (seconds, over all partitions) bounds the search; when it runs out the
    verdict is ``UNKNOWN`` (unless some partition was already found ``ILLEGAL``).
    ``optimize=False`` runs Porcupine's plain search (no forced moves), for cross-checking.
    """
    started = time.monotonic()
    deadline = math.inf if timeout is None else started + timeout
    kept = [op for op in ops if not (op.indeterminate and model.is_read_only(op.input))]
    partitions = model.partition(kept)
    results: list[PartitionResult] = []
    verdict = Verdict.OK
    for part in partitions:
        if not part:
            continue
        forced = [model.preserves_state(op.input, op.output) for op in part] if optimize else None
        res = _check_single(model.step, model.init(), part, deadline, forced)
        results.append(res)
        if res.verdict is Verdict.ILLEGAL:
            verdict = Verdict.ILLEGAL
            break  # one counterexample is enough
        if res.verdict is Verdict.UNKNOWN:
            verdict = Verdict.UNKNOWN
            break
    return CheckResult(verdict, results, time.monotonic() - started, len(kept))
