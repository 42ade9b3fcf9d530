"""Every relative link in the repository's front pages and docs points at a file or folder that exists.

README.md, ARCHITECTURE.md, docs/*.md and the chart's and kind tier's READMEs are read as Markdown; a link
``[text](target)`` that is not a URL (``scheme://``, ``mailto:``) or an anchor on the same page must name a path,
relative to the page, that exists in the repository (an anchor after the path is not checked).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md")),
         ROOT / "charts" / "ozone-scm-operator" / "README.md", ROOT / "tests" / "e2e" / "kind" / "README.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]+`")


def relative_links(text: str) -> list[str]:
    """The link targets of ``text`` (outside code blocks and code spans) that name a path in the repository."""
    return [t for t in LINK.findall(CODE_SPAN.sub("", FENCE.sub("", text)))
            if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_the_link_reader_finds_paths_and_skips_urls_anchors_and_code() -> None:
    text = ("[a](docs/x.md) [b](https://e.org) [c](#top) [d](sub/y.md#part)\n```\n[e](nowhere.md)\n```\n"
            "`RULE:[n:format](regex)s/a/b/`\n")
    assert relative_links(text) == ["docs/x.md", "sub/y.md#part"]


def test_every_relative_link_resolves() -> None:
    broken = []
    checked = 0
    for page in PAGES:
        for target in relative_links(page.read_text()):
            checked += 1
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert checked >= 10, "the front pages link to the docs"
    assert not broken, "links to nothing:\n" + "\n".join(broken)
