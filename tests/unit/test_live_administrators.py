"""LiveAdministrators: the administrators an edge checks, replaced at run time by `ozone admin reconfig`."""

from __future__ import annotations

from scm_server.security.core.principals import is_administrator
from scm_server.server.administrators import LiveAdministrators


def test_replace_swaps_the_names_and_keeps_the_scms_own_user() -> None:
    admins = LiveAdministrators(["alice"], always=["scm"])
    assert set(admins) == {"alice", "scm"} and "alice" in admins and len(admins) == 2
    admins.replace(["bob", "scm"])
    assert list(admins) == ["bob", "scm"] and "alice" not in admins


def test_a_check_holding_it_follows_the_replacement() -> None:
    """The security and secret-key translators check callers with ``is_administrator(user, administrators)``
    over the collection they were given: the same object, replaced, changes their answer."""
    admins = LiveAdministrators(["alice"])
    assert is_administrator("alice@EXAMPLE.COM", admins) and not is_administrator("bob@EXAMPLE.COM", admins)
    admins.replace(["bob"])
    assert is_administrator("bob@EXAMPLE.COM", admins) and not is_administrator("alice@EXAMPLE.COM", admins)
    admins.replace(["*"])
    assert is_administrator("carol", admins)
