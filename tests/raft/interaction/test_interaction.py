"""Runs every scripted scenario in testdata/ and compares with its golden transcript.

``RAFT_REWRITE=1 .venv/bin/python -m pytest tests/raft/interaction`` rewrites the expected
output in place; review the diff (it is the specification) before committing it.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from .harness import run_file

TESTDATA = Path(__file__).parent / "testdata"
FILES = sorted(TESTDATA.glob("*.txt"))


def test_there_are_scenarios() -> None:
    assert len(FILES) >= 12


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario(path: Path) -> None:
    text = path.read_text()
    rewritten, mismatches = run_file(text)
    if os.environ.get("RAFT_REWRITE") == "1":
        if rewritten != text:
            path.write_text(rewritten)
        return
    if mismatches:
        diff = "\n".join(
            difflib.unified_diff(text.splitlines(), rewritten.splitlines(), "expected", "actual", lineterm="")
        )
        pytest.fail(f"{path.name}: {len(mismatches)} block(s) differ (RAFT_REWRITE=1 to regenerate)\n{diff}")
