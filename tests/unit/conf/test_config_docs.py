"""docs/operations.md shows the config keys as ``scm_server/conf/`` declares them.

The key tables between the markers are generated (scripts/config_docs.py, ``make config-docs``); the first test
fails when they differ from what the declarations generate and names the command that fixes it. The hand-written
text around them mentions defaults too (the endpoint table's ``key (9860)``, the edges' table's
``| key | default |``); the second test checks each such mention of a declared key against its declaration.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path
from types import SimpleNamespace

from scm_server.conf import defaults

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "config_docs.py"


config_docs = SimpleNamespace(**runpy.run_path(str(SCRIPT), run_name="config_docs"))


def test_the_generated_key_tables_match_the_declarations() -> None:
    text = config_docs.DOC.read_text()
    assert text.count(config_docs.BEGIN) == 1 and text.count(config_docs.END) == 1
    assert config_docs.updated(text) == text, f"docs/operations.md's key tables are stale; run: {config_docs.FIX}"


def test_every_declared_key_is_in_the_generated_tables() -> None:
    block = config_docs.render()
    missing = [r.key for r in defaults.all_keys() if f"| `{r.key}` |" not in block]
    assert missing == []


def test_a_stale_table_is_detected_and_rewritten() -> None:
    fresh = config_docs.DOC.read_text()
    stale = fresh.replace("| `ozone.scm.container.size` | size | `5GB` |", "| `ozone.scm.container.size` | size | `4GB` |")
    assert stale != fresh
    assert config_docs.updated(stale) == fresh
    written: list[str] = []
    doc = type("Doc", (), {
        "read_text": lambda self: stale, "write_text": lambda self, t: written.append(t),
        "relative_to": lambda self, root: "docs/operations.md",
    })()
    assert config_docs.main(["--check"], doc) == 1 and written == []
    assert config_docs.main([], doc) == 0 and written == [fresh]


_MENTION = re.compile(r"`([a-z][a-z0-9.-]+)` \(([0-9][^),]*)\)")  # the endpoint table: `ozone.scm.client.port` (9860)
_ROW = re.compile(r"^\| `([a-z][a-z0-9.-]+)` \| ([^|]+) \|", re.M)  # a one-key row: | `key` | default ... |


def test_hand_written_defaults_agree_with_the_declarations() -> None:
    text = config_docs.DOC.read_text()
    start, end = text.index(config_docs.BEGIN), text.index(config_docs.END)
    hand = text[:start] + text[end:]
    declared = {r.key: r.default for r in defaults.all_keys() if r.default is not None}
    checked, wrong = 0, []
    for key, value in [*_MENTION.findall(hand), *_ROW.findall(hand)]:
        if key in declared:
            checked += 1
            if value.strip().split(" ")[0].strip("`") != declared[key]:
                wrong.append((key, value.strip(), declared[key]))
    assert wrong == []
    assert checked >= 10  # the endpoint table's ports and http address, the edges' single-key rows
