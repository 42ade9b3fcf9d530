"""ARCHITECTURE.md lists the layers as ``.importlinter``'s contracts name them (what ``make lint`` checks).

The list between the markers is generated (scripts/operator_docs.py, ``make operator-docs``); the test fails when it
differs from what the contracts generate and names the command that fixes it.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
docs = SimpleNamespace(**runpy.run_path(str(ROOT / "scripts" / "operator_docs.py"), run_name="operator_docs"))


def test_the_list_of_layers_matches_the_contracts() -> None:
    text = docs.LAYERS_DOC.read_text()
    assert text.count(docs.LAYERS_BEGIN) == 1 and text.count(docs.LAYERS_END) == 1
    ini = docs.CONTRACTS.read_text()
    assert docs.updated_layers(text, ini) == text, f"ARCHITECTURE.md's layers are stale; run: {docs.FIX}"


def test_every_contract_has_a_line_with_its_name() -> None:
    ini = docs.CONTRACTS.read_text()
    found = docs.contracts(ini)
    assert len(found) == ini.count("[importlinter:contract:") and len(found) > 20
    listed = docs.render_layers(ini)
    for cid, name, kind in found:
        assert f"- {name} (`{cid}`, {kind})\n" in listed


def test_a_renamed_contract_makes_the_list_stale() -> None:
    fresh = docs.LAYERS_DOC.read_text()
    ini = docs.CONTRACTS.read_text()
    renamed = ini.replace("name = Raft depends on nothing else in scm_server", "name = Raft stands alone", 1)
    assert renamed != ini and docs.updated_layers(fresh, renamed) != fresh
    assert "- Raft stands alone (`raft-independent`, forbidden)" in docs.updated_layers(fresh, renamed)
