"""Hand-made histories for the linearizability checker, plus a brute-force cross-check.

Each history is small enough to reason about by hand; the comment says why it is or is
not linearizable. The hypothesis test compares the Wing-Gong/Lowe search with a
brute-force enumeration of every real-time-respecting order on random small histories.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scm_server.verify import (
    UNKNOWN,
    HistoryRecorder,
    KvModel,
    Operation,
    RegisterModel,
    Verdict,
    check_operations,
    check_unique_ids,
    load_history,
    write_report,
)
from scm_server.verify.history import to_operations
from scm_server.verify.models import RegisterInput, cas, kv_cas, kv_get, kv_put, read, write

from .oracle import brute_force_linearizable

INF = math.inf


def op(client: int, inp: Any, call: float, out: Any, ret: float) -> Operation:
    return Operation(client, inp, call, out, ret)


def verdict(ops: list[Operation], model: Any = None) -> Verdict:
    return check_operations(model or RegisterModel(), ops, timeout=10).verdict


# ----------------------------------------------------------------------------- registers


def test_sequential_write_then_read_is_linearizable() -> None:
    assert verdict([op(0, write(1), 0, None, 1), op(1, read(), 2, 1, 3)]) is Verdict.OK


def test_read_of_initial_value_is_none() -> None:
    assert verdict([op(0, read(), 0, None, 1)]) is Verdict.OK
    assert verdict([op(0, read(), 0, 0, 1)]) is Verdict.ILLEGAL


def test_stale_read_is_illegal() -> None:
    # write 1, then write 2 completes, then a read that starts afterwards returns 1
    ops = [op(0, write(1), 0, None, 1), op(0, write(2), 2, None, 3), op(1, read(), 4, 1, 5)]
    assert verdict(ops) is Verdict.ILLEGAL


def test_lost_write_is_illegal() -> None:
    ops = [op(0, write(1), 0, None, 1), op(1, read(), 2, None, 3)]
    assert verdict(ops) is Verdict.ILLEGAL


def test_concurrent_read_may_see_either_value_but_not_go_back() -> None:
    # a long write(1) overlaps two reads: None then 1 is fine ...
    ok = [op(0, write(1), 0, None, 10), op(1, read(), 1, None, 2), op(1, read(), 3, 1, 4)]
    assert verdict(ok) is Verdict.OK
    # ... but 1 then None means the value went back in time
    bad = [op(0, write(1), 0, None, 10), op(1, read(), 1, 1, 2), op(1, read(), 3, None, 4)]
    assert verdict(bad) is Verdict.ILLEGAL


def test_two_concurrent_cas_from_same_value_cannot_both_succeed() -> None:
    ops = [
        op(0, write(0), 0, None, 1),
        op(1, cas(0, 1), 2, True, 5),
        op(2, cas(0, 2), 2, True, 5),
    ]
    assert verdict(ops) is Verdict.ILLEGAL
    ops[2] = op(2, cas(0, 2), 2, False, 5)  # one of them failing is fine
    assert verdict(ops) is Verdict.OK


def test_cas_success_from_wrong_value_is_illegal() -> None:
    ops = [op(0, write(3), 0, None, 1), op(1, cas(0, 1), 2, True, 3)]
    assert verdict(ops) is Verdict.ILLEGAL


def test_cas_failure_when_value_matched_is_illegal_unless_a_concurrent_write_explains_it() -> None:
    base = [op(0, write(0), 0, None, 1), op(1, cas(0, 1), 2, False, 3)]
    assert verdict(base) is Verdict.ILLEGAL
    with_concurrent_write = [*base, op(2, write(5), 1.5, None, 2.5)]
    assert verdict(with_concurrent_write) is Verdict.OK


def test_cas_success_then_read_sees_new_value() -> None:
    ops = [op(0, write(0), 0, None, 1), op(1, cas(0, 7), 2, True, 3), op(2, read(), 4, 7, 5)]
    assert verdict(ops) is Verdict.OK
    ops[2] = op(2, read(), 4, 0, 5)
    assert verdict(ops) is Verdict.ILLEGAL


# ----------------------------------------------------------------- indeterminate operations


def test_indeterminate_write_may_have_taken_effect() -> None:
    ops = [op(0, write(1), 0, UNKNOWN, INF), op(1, read(), 5, 1, 6)]
    assert verdict(ops) is Verdict.OK


def test_indeterminate_write_may_not_have_taken_effect() -> None:
    ops = [op(0, write(1), 0, UNKNOWN, INF), op(1, read(), 5, None, 6), op(1, read(), 7, None, 8)]
    assert verdict(ops) is Verdict.OK


def test_indeterminate_write_may_take_effect_late() -> None:
    # return at +infinity: it may take effect after later operations
    ops = [op(0, write(1), 0, UNKNOWN, INF), op(1, read(), 5, None, 6), op(1, read(), 7, 1, 8)]
    assert verdict(ops) is Verdict.OK


def test_indeterminate_write_cannot_be_undone() -> None:
    # once a read saw it, a later read cannot see the older value again
    ops = [op(0, write(1), 0, UNKNOWN, INF), op(1, read(), 5, 1, 6), op(1, read(), 7, None, 8)]
    assert verdict(ops) is Verdict.ILLEGAL


def test_indeterminate_write_cannot_take_effect_before_its_call() -> None:
    ops = [op(1, read(), 0, 1, 1), op(0, write(1), 2, UNKNOWN, INF)]
    assert verdict(ops) is Verdict.ILLEGAL


def test_indeterminate_write_must_be_applied_to_explain_a_read() -> None:
    # the only way to read 2 is the indeterminate write(2); it then must order after write(1)
    ops = [
        op(0, write(1), 0, None, 1),
        op(1, write(2), 2, UNKNOWN, INF),
        op(2, read(), 3, 2, 4),
        op(2, read(), 5, 1, 6),  # reading 1 after 2 has been seen: impossible
    ]
    assert verdict(ops) is Verdict.ILLEGAL
    assert verdict(ops[:3]) is Verdict.OK


def test_indeterminate_cas_may_or_may_not_apply() -> None:
    applied = [op(0, write(0), 0, None, 1), op(1, cas(0, 9), 2, UNKNOWN, INF), op(2, read(), 5, 9, 6)]
    assert verdict(applied) is Verdict.OK
    not_applied = [op(0, write(0), 0, None, 1), op(1, cas(0, 9), 2, UNKNOWN, INF), op(2, read(), 5, 0, 6)]
    assert verdict(not_applied) is Verdict.OK
    # the cas can only apply if the register held 0; here it held 3, so 9 is unexplainable
    impossible = [op(0, write(3), 0, None, 1), op(1, cas(0, 9), 2, UNKNOWN, INF), op(2, read(), 5, 9, 6)]
    assert verdict(impossible) is Verdict.ILLEGAL


def test_indeterminate_reads_are_dropped() -> None:
    ops = [op(0, write(1), 0, None, 1), op(1, read(), 2, UNKNOWN, INF)]
    res = check_operations(RegisterModel(), ops)
    assert res.ok and res.ops_checked == 1


# --------------------------------------------------------------------------- key-value model


def test_kv_partitions_by_key_and_finds_the_bad_key() -> None:
    ops = [
        op(0, kv_put("a", 1), 0, None, 1),
        op(1, kv_put("b", 1), 0, None, 1),
        op(0, kv_get("a"), 2, 1, 3),
        op(1, kv_get("b"), 2, None, 3),  # lost write on key b
        op(2, kv_cas("a", 1, 2), 4, True, 5),
        op(2, kv_get("a"), 6, 2, 7),
    ]
    res = check_operations(KvModel(), ops)
    assert res.verdict is Verdict.ILLEGAL
    bad = res.failing_partition()
    assert bad is not None and {o.input.key for o in bad.ops} == {"b"}
    ops[3] = op(1, kv_get("b"), 2, 1, 3)
    res = check_operations(KvModel(), ops)
    assert res.ok and len(res.partitions) == 2


def test_kv_cas_on_absent_key() -> None:
    ops = [op(0, kv_cas("k", None, "x"), 0, True, 1), op(1, kv_cas("k", None, "y"), 2, False, 3)]
    assert verdict(ops, KvModel()) is Verdict.OK
    ops[1] = op(1, kv_cas("k", None, "y"), 2, True, 3)
    assert verdict(ops, KvModel()) is Verdict.ILLEGAL


def test_timeout_gives_unknown() -> None:
    # 40 fully concurrent indeterminate writes followed by an impossible read: the search
    # has to rule out every subset and order before it can say ILLEGAL.
    ops = [op(i, write(i), 0, UNKNOWN, INF) for i in range(40)]
    ops.append(op(99, read(), 1, 1000, 2))
    res = check_operations(RegisterModel(), ops, timeout=0.2)
    assert res.verdict is Verdict.UNKNOWN
    assert res.elapsed < 5


def test_large_linearizable_history_is_fast() -> None:
    # 3000 ops from 10 clients with overlapping windows, generated from a real sequential
    # execution (each op takes effect at a point inside its window).
    ops: list[Operation] = []
    value = None
    t = 0.0
    for n in range(3000):
        c = n % 10
        t += 1.0
        kind = n % 3
        if kind == 0:
            value = n
            ops.append(op(c, write(n), t - 4.5, None, t + 4.5))
        elif kind == 1:
            ops.append(op(c, read(), t - 4.5, value, t + 4.5))
        else:
            ok = value == n - 2
            res = ok
            if ok:
                value = -n
            ops.append(op(c, cas(n - 2, -n), t - 4.5, res, t + 4.5))
    res = check_operations(RegisterModel(), ops, timeout=60)
    assert res.ok, res.summary()
    assert res.elapsed < 30, res.summary()


# ------------------------------------------------------------------------ brute-force oracle


@st.composite
def small_histories(draw: st.DrawFn) -> list[Operation]:
    n = draw(st.integers(1, 6))
    ops = []
    for c in range(n):
        call = draw(st.integers(0, 8))
        kind = draw(st.sampled_from(["read", "write", "cas"]))
        indeterminate = draw(st.integers(0, 5)) == 0
        ret = INF if indeterminate else call + draw(st.integers(0, 4))
        vals = st.sampled_from([None, 1, 2])
        if kind == "read":
            inp = RegisterInput("read")
            out = UNKNOWN if indeterminate else draw(vals)
        elif kind == "write":
            inp = RegisterInput("write", draw(st.sampled_from([1, 2])))
            out = UNKNOWN if indeterminate else None
        else:
            inp = RegisterInput("cas", draw(st.sampled_from([1, 2])), draw(vals))
            out = UNKNOWN if indeterminate else draw(st.booleans())
        ops.append(Operation(c, inp, float(call), out, float(ret)))
    return ops


@settings(max_examples=400, deadline=None)
@given(small_histories())
def test_agrees_with_brute_force(ops: list[Operation]) -> None:
    expected = brute_force_linearizable(ops, RegisterModel())
    got = check_operations(RegisterModel(), ops, timeout=10).verdict
    assert got is (Verdict.OK if expected else Verdict.ILLEGAL)


# ---------------------------------------------------------------- recorder, ids, rendering


def test_recorder_maps_statuses_and_round_trips(tmp_path: Path) -> None:
    clock = iter(float(x) for x in range(100))
    rec = HistoryRecorder(clock=lambda: next(clock))
    rec.invoke(0, kv_put("k", 1)).ok(None)  # [0, 1]
    rec.invoke(1, kv_put("k", 2)).fail("NotLeader before sending")  # dropped
    rec.invoke(2, kv_put("k", 3)).info("timeout")  # indeterminate
    rec.invoke(3, kv_get("k")).ok(3)
    try:
        with rec.record(4, kv_put("k", 4)):
            raise TimeoutError("deadline")
    except TimeoutError:
        pass
    rec.invoke(5, kv_get("k"))  # still pending at the end -> indeterminate (and a read: dropped)
    assert rec.counts() == {"ok": 2, "fail": 1, "info": 2, "invoke": 1}
    ops = rec.operations()
    assert [o.client_id for o in ops] == [0, 2, 3, 4, 5]
    assert ops[1].indeterminate and ops[1].ret == INF and ops[3].indeterminate
    assert check_operations(KvModel(), ops).ok
    path = tmp_path / "h.jsonl"
    rec.save(path)
    again = to_operations(load_history(path))
    assert again == ops


def test_recorder_rejects_double_completion() -> None:
    rec = HistoryRecorder()
    h = rec.invoke(0, kv_get("k"))
    h.ok(None)
    try:
        h.info()
    except RuntimeError as exc:
        assert "already completed" in str(exc)
    else:
        raise AssertionError("a second completion must be refused")


def test_unique_ids() -> None:
    ops = [
        op(0, "alloc", 0, 1, 1),
        op(1, "alloc", 2, [2, 3, 4], 3),
        op(2, "alloc", 4, 5, 5),
        op(3, "alloc", 0, UNKNOWN, INF),
    ]
    assert check_unique_ids(ops, require_increasing=True).ok
    dup = [*ops, op(4, "alloc", 6, 3, 7)]
    res = check_unique_ids(dup)
    assert not res.ok and list(res.duplicates) == [3] and "3" in res.describe()
    backwards = [op(0, "alloc", 0, 10, 1), op(1, "alloc", 2, 5, 3)]
    assert check_unique_ids(backwards).ok
    res = check_unique_ids(backwards, require_increasing=True)
    assert not res.ok and len(res.order_violations) == 1


def test_report_names_the_stuck_operation(tmp_path: Path) -> None:
    ops = [op(0, write(1), 0, None, 1), op(0, write(2), 2, None, 3), op(1, read(), 4, 1, 5)]
    res = check_operations(RegisterModel(), ops)
    txt, page = write_report(res, RegisterModel(), tmp_path, "stale")
    text = txt.read_text()
    assert "illegal" in text and "stuck" in text and "read() -> 1" in text
    assert "<html>" in page.read_text() and "stuck" in page.read_text()


@st.composite
def medium_histories(draw: st.DrawFn) -> list[Operation]:
    n = draw(st.integers(6, 16))
    vals = st.sampled_from([None, 1, 2, 3])
    ops = []
    for c in range(n):
        call = draw(st.integers(0, 20))
        kind = draw(st.sampled_from(["read", "read", "write", "cas"]))
        indeterminate = kind != "read" and draw(st.integers(0, 6)) == 0
        ret = INF if indeterminate else call + draw(st.integers(0, 6))
        if kind == "read":
            inp, out = RegisterInput("read"), draw(vals)
        elif kind == "write":
            inp, out = RegisterInput("write", draw(st.sampled_from([1, 2, 3]))), (UNKNOWN if indeterminate else None)
        else:
            inp = RegisterInput("cas", draw(st.sampled_from([1, 2, 3])), draw(vals))
            out = UNKNOWN if indeterminate else draw(st.booleans())
        ops.append(Operation(c, inp, float(call), out, float(ret)))
    return ops


@settings(max_examples=300, deadline=None)
@given(medium_histories())
def test_optimized_search_agrees_with_plain_porcupine_search(ops: list[Operation]) -> None:
    fast = check_operations(RegisterModel(), ops, timeout=20).verdict
    plain = check_operations(RegisterModel(), ops, timeout=20, optimize=False).verdict
    assert fast is plain
