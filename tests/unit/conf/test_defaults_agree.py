"""One source per config key: the typed groups' declarations, the raw default table and the parsed defaults agree.

Each field declares its default once, as text (``setting(key, kind, description, "300s")``); the typed default
is parsed from it and :data:`DEFAULTS` is generated from it (``scm_server.conf.defaults``). These tests cover
every group of ``conf/`` (found by walking the modules, so a new group cannot be left out), the port table and
the table-only keys.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from scm_server.conf import defaults, groups, ports, security
from scm_server.conf.groups import _parse
from scm_server.conf.ozone_configuration import DEFAULTS, OzoneConfiguration


def _config_groups() -> list[type[Any]]:
    """Every dataclass in conf/ with at least one keyed field."""
    found = []
    for module in (groups, security):
        for _, obj in inspect.getmembers(module, dataclasses.is_dataclass):
            if obj.__module__ == module.__name__ and any(f.metadata.get("key") for f in dataclasses.fields(obj)):
                found.append(obj)
    return found


def _keyed(group: type[Any]) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(group) if f.metadata.get("key")]


def test_the_registry_lists_every_group_of_conf() -> None:
    assert {g.__name__ for g in _config_groups()} == {g.__name__ for g in defaults.ALL_GROUPS}
    assert len(defaults.ALL_GROUPS) == 11


@pytest.mark.parametrize("group", defaults.ALL_GROUPS, ids=lambda g: g.__name__)
def test_every_field_declares_its_key_kind_and_description(group: type[Any]) -> None:
    missing = [f.metadata["key"] for f in _keyed(group) if len(f.metadata.get("description") or "") < 20]
    assert missing == []


@pytest.mark.parametrize("group", defaults.ALL_GROUPS, ids=lambda g: g.__name__)
def test_the_typed_default_is_the_default_text_parsed(group: type[Any]) -> None:
    differing = {}
    for f in _keyed(group):
        text = f.metadata["default"]
        if text is not None and _parse(f.metadata["key"], f.metadata["kind"], text) != f.default:
            differing[f.metadata["key"]] = (text, f.default)
    assert differing == {}


@pytest.mark.parametrize("group", defaults.ALL_GROUPS, ids=lambda g: g.__name__)
def test_parsing_the_built_in_configuration_gives_the_declared_defaults(group: type[Any]) -> None:
    conf = OzoneConfiguration()
    conf.set("ozone.metadata.dirs", "/data/metadata")  # required by SCMConfig
    parsed = group.from_conf(conf)
    differing = {
        f.metadata["key"]: (getattr(parsed, f.name), f.default)
        for f in _keyed(group)
        if f.name != "metadata_dirs" and getattr(parsed, f.name) != f.default
    }
    assert differing == {}


@pytest.mark.parametrize("group", defaults.TABLE_GROUPS, ids=lambda g: g.__name__)
def test_the_table_holds_each_daemon_group_default_as_declared(group: type[Any]) -> None:
    expected = {f.metadata["key"]: f.metadata["default"] for f in _keyed(group) if f.metadata["default"] is not None}
    assert {k: DEFAULTS.get(k) for k in expected} == expected
    no_default = [f.metadata["key"] for f in _keyed(group) if f.metadata["default"] is None]
    assert [k for k in no_default if k in DEFAULTS] == []


def test_security_defaults_stay_in_their_fields_and_agree_where_a_key_is_shared() -> None:
    in_table = {f.metadata["key"] for f in _keyed(security.SecurityConfig)} & set(DEFAULTS)
    assert in_table == {"ozone.security.enabled", ports.SECURITY_GRPC.port_key}  # shared with SCMConfig / ports
    for f in _keyed(security.SecurityConfig):
        if f.metadata["key"] in in_table:
            assert f.metadata["default"] == DEFAULTS[f.metadata["key"]], f.metadata["key"]


def test_every_table_key_has_one_declaration_and_the_ports_come_from_the_port_table() -> None:
    declared = {row.key for row in defaults.all_keys() if row.in_table and row.default is not None}
    assert set(DEFAULTS) == declared
    assert {k: DEFAULTS[k] for k in ports.DEFAULT_PORTS} == ports.DEFAULT_PORTS
    only = {row.key for row in defaults.TABLE_ONLY}
    fields = {f.metadata["key"] for g in defaults.ALL_GROUPS for f in _keyed(g)}
    assert only & fields == set() and only & set(ports.DEFAULT_PORTS) == set()
    assert all(len(row.description) >= 20 for row in defaults.TABLE_ONLY)


def test_two_default_texts_for_one_key_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = defaults.all_keys()
    clash = dataclasses.replace(next(r for r in rows if r.key == "ozone.scm.client.port"), default="9999")
    monkeypatch.setattr(defaults, "all_keys", lambda: [*rows, clash])
    with pytest.raises(AssertionError, match=r"ozone\.scm\.client\.port"):
        defaults.build_defaults()
