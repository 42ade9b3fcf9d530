"""docs/kubernetes.md lists the operator's steps as ``planner/actions.py`` declares them.

The table between the markers is generated (scripts/operator_docs.py, ``make operator-docs``); the test fails when
it differs from what the step classes generate and names the command that fixes it.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from types import SimpleNamespace

from ozone_scm_operator.planner import actions

ROOT = Path(__file__).resolve().parents[3]
operator_docs = SimpleNamespace(**runpy.run_path(str(ROOT / "scripts" / "operator_docs.py"), run_name="operator_docs"))


def test_the_table_of_steps_matches_the_classes() -> None:
    text = operator_docs.DOC.read_text()
    assert text.count(operator_docs.BEGIN) == 1 and text.count(operator_docs.END) == 1
    assert operator_docs.updated(text) == text, f"docs/kubernetes.md's steps are stale; run: {operator_docs.FIX}"


def test_every_step_has_a_row_and_a_description() -> None:
    table = operator_docs.render()
    assert len(actions.ACTIONS) == len(set(actions.ACTIONS)) == table.count("\n") - 2
    for cls in actions.ACTIONS:
        assert cls.kind == cls.__name__ and cls.__doc__
        assert f"| `{cls.kind}` |" in table


def test_a_stale_table_is_detected() -> None:
    fresh = operator_docs.DOC.read_text()
    stale = fresh.replace("| `DeletePod` |", "| `RemovePod` |")
    assert stale != fresh and operator_docs.updated(stale) == fresh
