"""KvModel's get/put/append: hand-made legal and illegal histories, and a brute-force cross-check.

Each history says in a comment why it is or is not linearizable. ``append`` concatenates to the
key's string value, a key never written being empty for append; ``KvModel(initial="")`` is the
Jepsen-style store where a get of a fresh key returns "" (default: absent, None).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scm_server.verify import UNKNOWN, KvModel, Operation, Verdict, check_operations
from scm_server.verify.models import KvInput, kv_append, kv_cas, kv_get, kv_put

from .oracle import brute_force_linearizable

INF = math.inf


def op(client: int, inp: KvInput, call: float, out: Any, ret: float) -> Operation:
    return Operation(client, inp, call, out, ret)


def verdict(ops: list[Operation], initial: str | None = None) -> Verdict:
    return check_operations(KvModel(initial=initial), ops, timeout=10).verdict


def test_appends_from_an_initially_empty_value() -> None:
    ops = [op(0, kv_append("k", "x"), 0, None, 1), op(0, kv_append("k", "y"), 2, None, 3), op(1, kv_get("k"), 4, "xy", 5)]
    assert verdict(ops) is Verdict.OK
    assert verdict(ops, initial="") is Verdict.OK
    # the appends completed in order x, y: "yx" is no order of them
    ops[2] = op(1, kv_get("k"), 4, "yx", 5)
    assert verdict(ops) is Verdict.ILLEGAL


def test_a_fresh_key_reads_as_its_initial_value() -> None:
    assert verdict([op(0, kv_get("k"), 0, None, 1)]) is Verdict.OK
    assert verdict([op(0, kv_get("k"), 0, "", 1)]) is Verdict.ILLEGAL
    assert verdict([op(0, kv_get("k"), 0, "", 1)], initial="") is Verdict.OK
    assert verdict([op(0, kv_get("k"), 0, None, 1)], initial="") is Verdict.ILLEGAL


def test_concurrent_appends_in_either_order_but_one_order_for_all_readers() -> None:
    ops = [
        op(0, kv_append("k", "a"), 0, None, 10),
        op(1, kv_append("k", "b"), 0, None, 10),
        op(2, kv_get("k"), 11, "ba", 12),
    ]
    assert verdict(ops) is Verdict.OK  # b took effect first
    # two readers after both appends returned disagree on the order: no single order explains both
    ops.append(op(3, kv_get("k"), 13, "ab", 14))
    assert verdict(ops) is Verdict.ILLEGAL


def test_a_read_during_appends_sees_a_prefix() -> None:
    ops = [
        op(0, kv_append("k", "a"), 0, None, 1),
        op(0, kv_append("k", "b"), 2, None, 6),
        op(1, kv_get("k"), 3, "a", 4),  # concurrent with the append of b: may miss it
        op(2, kv_get("k"), 7, "ab", 8),
    ]
    assert verdict(ops) is Verdict.OK
    ops[2] = op(1, kv_get("k"), 3, "b", 4)  # "b" without the completed "a": lost append
    assert verdict(ops) is Verdict.ILLEGAL


def test_a_lost_append_is_illegal() -> None:
    ops = [op(0, kv_append("k", "x"), 0, None, 1), op(1, kv_append("k", "y"), 2, None, 3), op(2, kv_get("k"), 4, "x", 5)]
    assert verdict(ops) is Verdict.ILLEGAL


def test_an_indeterminate_append_may_or_may_not_have_happened() -> None:
    base = [op(0, kv_append("k", "x"), 0, None, 1), op(1, kv_append("k", "y"), 2, UNKNOWN, INF)]
    assert verdict([*base, op(2, kv_get("k"), 3, "x", 4)]) is Verdict.OK
    assert verdict([*base, op(2, kv_get("k"), 3, "xy", 4)]) is Verdict.OK
    # ...but once seen it cannot disappear, and it cannot come before what completed before it
    assert verdict([*base, op(2, kv_get("k"), 3, "xy", 4), op(2, kv_get("k"), 5, "x", 6)]) is Verdict.ILLEGAL
    assert verdict([*base, op(2, kv_get("k"), 3, "yx", 4)]) is Verdict.ILLEGAL


def test_put_replaces_what_appends_built() -> None:
    ops = [
        op(0, kv_append("k", "x"), 0, None, 1),
        op(0, kv_put("k", "p"), 2, None, 3),
        op(0, kv_append("k", "z"), 4, None, 5),
        op(1, kv_get("k"), 6, "pz", 7),
    ]
    assert verdict(ops) is Verdict.OK
    ops[3] = op(1, kv_get("k"), 6, "xpz", 7)
    assert verdict(ops) is Verdict.ILLEGAL


def test_keys_are_independent_and_the_bad_one_is_named() -> None:
    ops = [
        op(0, kv_append("a", "1"), 0, None, 1),
        op(1, kv_append("b", "1"), 0, None, 1),
        op(0, kv_get("a"), 2, "1", 3),
        op(1, kv_get("b"), 2, "11", 3),  # one append, read twice
    ]
    res = check_operations(KvModel(), ops)
    assert res.verdict is Verdict.ILLEGAL
    bad = res.failing_partition()
    assert bad is not None and bad.key == "b"


def test_append_to_a_number_is_refused_with_a_clear_error() -> None:
    ops = [op(0, kv_put("k", 5), 0, None, 1), op(0, kv_append("k", "x"), 2, None, 3)]
    with pytest.raises(ValueError, match=r"append\('k', 'x'\) to the value 5: append needs string values"):
        check_operations(KvModel(), ops)


# ------------------------------------------------------------------------ brute-force oracle


@st.composite
def append_histories(draw: st.DrawFn) -> list[Operation]:
    n = draw(st.integers(1, 6))
    ops = []
    reads = st.sampled_from([None, "", "a", "b", "ab", "ba", "aa", "c", "ac", "ca"])
    for c in range(n):
        call = draw(st.integers(0, 8))
        kind = draw(st.sampled_from(["get", "append", "append", "put", "cas"]))
        indeterminate = kind != "get" and draw(st.integers(0, 5)) == 0
        ret = INF if indeterminate else call + draw(st.integers(0, 4))
        if kind == "get":
            inp, out = kv_get("k"), draw(reads)
        elif kind == "append":
            inp, out = kv_append("k", draw(st.sampled_from(["a", "b"]))), (UNKNOWN if indeterminate else None)
        elif kind == "put":
            inp, out = kv_put("k", draw(st.sampled_from(["c", ""]))), (UNKNOWN if indeterminate else None)
        else:
            inp = kv_cas("k", draw(st.sampled_from([None, "a", "c"])), draw(st.sampled_from(["b", "c"])))
            out = UNKNOWN if indeterminate else draw(st.booleans())
        ops.append(Operation(c, inp, float(call), out, float(ret)))
    return ops


@settings(max_examples=300, deadline=None)
@given(append_histories(), st.sampled_from([None, ""]))
def test_agrees_with_brute_force(ops: list[Operation], initial: str | None) -> None:
    model = KvModel(initial=initial)
    expected = brute_force_linearizable(ops, model)
    got = check_operations(model, ops, timeout=10).verdict
    assert got is (Verdict.OK if expected else Verdict.ILLEGAL)
