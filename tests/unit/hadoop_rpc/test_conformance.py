"""docs/ozone-compatibility.md's call tables are generated from the translators and cover every cmdType.

The tables between the ``compat-docs`` markers come from :mod:`scm_server.server.hadoop_rpc.conformance`
(scripts/compat_docs.py, ``make compat-docs``). These tests fail when a cmdType of Ozone's protos has no row,
when a translator serves a command the registry still refuses (or stops serving one), when an Ozone proto with
commands is not listed at all, and when the committed document drifts from what the source generates.
"""

from __future__ import annotations

import dataclasses
import pkgutil
import runpy
from pathlib import Path
from types import SimpleNamespace

import pytest

import scm_server.proto.ozone as ozone_protos
from scm_server.server.hadoop_rpc import conformance
from scm_server.server.hadoop_rpc.location_translator import OZONE_UNKNOWN

ROOT = Path(__file__).resolve().parents[3]
compat_docs = SimpleNamespace(**runpy.run_path(str(ROOT / "scripts" / "compat_docs.py"), run_name="compat_docs"))


def test_every_cmdtype_of_every_protocol_has_one_row() -> None:
    for protocol in conformance.protocols():
        listed = conformance.commands(protocol)
        if listed is None:
            continue
        rows = conformance.table_rows(protocol)
        assert [(r.command, r.number) for r in rows] == listed, protocol.key
        assert all(r.note and r.checked for r in rows), protocol.key


def test_every_ozone_proto_with_commands_is_a_listed_protocol() -> None:
    """A wire proto added to proto/ozone whose request carries a ``Type`` enum (a new protocol) needs its table."""
    listed = {p.module for p in conformance.protocols()}
    with_commands = set()
    for info in pkgutil.iter_modules(ozone_protos.__path__):
        if not info.name.endswith("_pb2"):
            continue
        name = f"{ozone_protos.__name__}.{info.name}"
        module = __import__(name, fromlist=["DESCRIPTOR"])
        if "Type" in module.DESCRIPTOR.enum_types_by_name:
            with_commands.add(name)
    assert with_commands, "no Ozone proto found: run make proto"
    assert with_commands <= listed, f"protocols without a conformance table: {sorted(with_commands - listed)}"


def test_served_sets_are_the_translators() -> None:
    by_key = {p.key: p for p in conformance.protocols()}
    location = by_key["location"]
    assert {"TransferLeadership", "DecommissionScm", "DatanodeUsageInfo", "GetMetrics"} <= location.served
    assert not location.served & OZONE_UNKNOWN
    for key in ("block", "datanode"):  # every cmdType of these two is served
        assert by_key[key].served == {name for name, _ in conformance.commands(by_key[key]) or []}, key


@pytest.mark.parametrize("change", ["missing", "stale", "bogus", "unlisted"])
def test_a_gap_in_the_registry_is_an_error_naming_the_command(change: str) -> None:
    location = next(p for p in conformance.protocols() if p.key == "location")
    refusals = dict(location.refusals)
    notes = dict(location.notes)
    served = set(location.served)
    if change == "missing":  # a cmdType neither served nor refused
        del refusals["DeleteContainer"]
        expected = "DeleteContainer has no row"
    elif change == "stale":  # the translator serves what the registry still refuses
        served.add("DeleteContainer")
        notes["DeleteContainer"] = conformance.Note("x", "U")
        expected = "DeleteContainer is served: drop its Refusal"
    elif change == "bogus":  # a row for a command the proto does not have
        refusals["NoSuchCommand"] = conformance.Refusal("refused", "x", "U")
        expected = "NoSuchCommand is not a command"
    else:  # served without a note
        del notes["GetMetrics"]
        expected = "GetMetrics is served but has no Note"
    broken = dataclasses.replace(location, served=frozenset(served), notes=notes, refusals=refusals)
    with pytest.raises(conformance.ConformanceError, match=expected):
        conformance.table_rows(broken)


def test_the_committed_tables_match_the_translators() -> None:
    text = compat_docs.DOC.read_text()
    for key in compat_docs.blocks():
        assert text.count(compat_docs.begin(key)) == 1 and text.count(compat_docs.end(key)) == 1, key
    assert compat_docs.updated(text) == text, f"docs/ozone-compatibility.md's call tables are stale; run: {compat_docs.FIX}"


def test_a_drifted_table_is_detected(tmp_path: Path) -> None:
    fresh = compat_docs.DOC.read_text()
    stale = fresh.replace("| `TransferLeadership` (38) | served |", "| `TransferLeadership` (38) | not yet |")
    assert stale != fresh
    doc = tmp_path / "ozone-compatibility.md"
    doc.write_text(stale)
    assert compat_docs.main(["--check"], doc=doc) == 1
    assert doc.read_text() == stale  # --check writes nothing
    assert compat_docs.main([], doc=doc) == 0
    assert doc.read_text() == fresh
