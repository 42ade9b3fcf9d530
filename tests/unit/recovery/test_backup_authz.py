"""The Backup RPC is admin only (ozone.administrators, and the SCMs): a datanode or a plain user is refused."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scm_server.security.core import authz
from scm_server.security.core import identity as ids

METHOD = "/hadoop.hdds.scm.ha.InterSCMProtocolService/Backup"


@pytest.mark.parametrize(
    ("role", "cn", "allowed"),
    [
        (ids.Role.CLIENT, "admin", True),
        (ids.Role.CLIENT, "bob", False),
        (ids.Role.SCM, "scm-sub@h", True),  # SCMs are superusers, as in Ozone
        (ids.Role.DATANODE, "dn@h", False),
    ],
)
def test_backup_is_admin_only(role: ids.Role, cn: str, allowed: bool) -> None:
    assert authz.POLICY[authz.INTER_SCM]["Backup"] is authz.Access.ADMIN
    who = ids.Identity(role, cn, "owner", "CID-x", 9, datetime(2026, 1, 1, tzinfo=UTC))
    decision = authz.authorize(who, METHOD, ("admin",))
    assert decision.allowed is allowed, decision.reason
