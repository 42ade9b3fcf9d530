"""The rules of the field-by-field `ozone admin` comparison (tests/ozone_interop/admin_compare.py), without a ring:
the table of allowed differences in docs/ozone-compatibility.md parses, a malformed table fails naming the row,
and the comparison finds a missing field, a different state and a different exit code while numbers, UUIDs,
addresses and times do not count."""

from __future__ import annotations

import json

import pytest

from tests.ozone_interop.admin_compare import (
    Allowed,
    AllowedTableError,
    Difference,
    allowance,
    compare_answers,
    load_allowed,
    parse_allowed,
    reduce_text,
    report,
)


def answer(stdout: str = "", rc: int = 0, stderr: str = "") -> dict[str, object]:
    return {"rc": rc, "stdout": stdout, "stderr": stderr}


def table(*rows: str) -> str:
    return "\n".join(["intro", "<!-- admin-compare:allowed:begin x -->", "| commands | where | why |", "|---|---|---|",
                      *rows, "<!-- admin-compare:allowed:end -->", "after"])


def test_the_documented_table_parses_into_rules_with_reasons() -> None:
    allowed = load_allowed()
    assert allowed, "docs/ozone-compatibility.md allows no difference: the table was not found"
    assert all(a.reason for a in allowed)


def test_an_escaped_bar_is_part_of_the_expression() -> None:
    (rule,) = parse_allowed(table(r"| `a\|b` | `line:x\|line:y` | because |"))
    assert rule == Allowed("a|b", "line:x|line:y", "because")
    assert rule.covers(Difference("b", "line:y", "present", "missing"))
    assert not rule.covers(Difference("c", "line:y", "present", "missing"))


@pytest.mark.parametrize("row, words", [
    ("| `a` | `b` |", "expected 3 cells"),
    ("| `a` | `b` | |", "needs its reason"),
    ("| a | `b` | why |", "commands cell must be one regular expression in backticks"),
    ("| `a` | `(b` | why |", "where cell is not a regular expression"),
])
def test_a_malformed_row_fails_naming_it(row: str, words: str) -> None:
    with pytest.raises(AllowedTableError, match=words) as err:
        parse_allowed(table(row))
    assert row in str(err.value)


def test_a_missing_table_fails_loudly() -> None:
    with pytest.raises(AllowedTableError, match="admin-compare:allowed:begin"):
        parse_allowed("no table here")


def test_numbers_uuids_addresses_and_times_reduce_to_their_kind() -> None:
    line = "Datanode: 0b4e6c1e-61e4-4bd8-9d9a-a0bb7b0cbd55 (127.0.0.1:9858) used 42 at 2026-12-06 02:41:07"
    assert reduce_text(line) == "Datanode: <uuid> (<addr>) used <n> at <time>"


def test_json_answers_differ_on_fields_and_states_not_on_run_values() -> None:
    first, second = "0b4e6c1e-61e4-4bd8-9d9a-a0bb7b0cbd55", "5d0e0f3a-1c1b-4f7e-8a55-0d2b6a3c9e10"
    ozone = answer(json.dumps([{"id": 1, "state": "OPEN", "owner": "om", "leader": first}]))
    same = answer(json.dumps([{"id": 7, "state": "OPEN", "owner": "om", "leader": second}]))
    assert compare_answers("container list", ozone, same, is_json=True) == []
    other = answer(json.dumps([{"id": 7, "state": "CLOSED", "owner": "om"}]))
    diffs = compare_answers("container list", ozone, other, is_json=True)
    assert {(d.where, d.ozone, d.ours) for d in diffs} == {("[].state", "OPEN", "CLOSED"),
                                                           ("[].leader", "<uuid>", "missing")}


def test_text_answers_differ_by_line_and_exit_codes_count() -> None:
    diffs = compare_answers("safemode status", answer("SCM is out of safe mode.\n"),
                            answer("SCM is in safe mode.\n", rc=1), is_json=False)
    assert Difference("safemode status", "exit", "0", "1") in diffs
    assert Difference("safemode status", "line:SCM is in safe mode.", "missing", "present") in diffs


def test_the_report_marks_new_differences_and_unused_rules() -> None:
    rules = [Allowed("a", "exit", "known"), Allowed("z", "exit", "never seen")]
    diffs = [Difference("a", "exit", "0", "1"), Difference("b", "exit", "0", "1")]
    assert allowance(rules, diffs[0]) is rules[0] and allowance(rules, diffs[1]) is None
    text = report(diffs, rules, commands=2)
    assert "2 differences, 1 not allowed" in text
    assert "  NEW      b | exit" in text and "  allowed  a | exit" in text
    assert "not seen this run (allowed): z | exit" in text


def test_a_failover_retry_notice_of_the_cli_is_not_an_answer() -> None:
    notice = ("RemoteException: SCM Server, while invoking StorageContainerLocationProtocolPB over scm1. "
              "Retrying in 2000ms after 0 failover attempt(s).")
    ozone = answer("Transfer leadership successfully to random node.\n", stderr=notice + "\n")
    ours = answer("Transfer leadership successfully to random node.\n")
    assert compare_answers("scm transfer -r", ozone, ours, is_json=False) == []
