"""The command blocks of docs/security.md's "A secure Ozone cluster on this SCM", read by the tests that run them
as written (the Kerberos tier runs step 1's `kadmin.local` lines, the secure Ozone tier step 5's `ozone` lines)."""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def documented_block(after: str) -> list[str]:
    """The command lines (comments and blank lines dropped) of the first fenced block after the text ``after``;
    an AssertionError naming the text when the document lacks it."""
    text = DOC.read_text()
    at = text.find(after)
    assert at >= 0, f"docs/security.md no longer has {after!r}"
    start = text.index("```\n", at) + 4
    block = text[start:text.index("```", start)]
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return [line for line in lines if line]
