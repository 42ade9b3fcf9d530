"""Who may call what over Hadoop RPC with Kerberos: auth_to_local, service ACLs, client principals, admins."""

from __future__ import annotations

import re
from collections.abc import Collection

import pytest

from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.server.hadoop_rpc import authorization as authz
from scm_server.server.hadoop_rpc.authorization import (
    AuthorizationSettings,
    Authorizer,
    AuthToLocal,
    NoMatchingRule,
)

R = "EXAMPLE.COM"
LOCATION = "org.apache.hadoop.hdds.scm.protocol.StorageContainerLocationProtocol"
SECRET_KEY_OM = "org.apache.hadoop.hdds.protocol.SecretKeyProtocolOm"
GROUPS = {"alice": {"users"}, "carol": {"ops", "users"}, "dave": {"auditors"}}


def groups_of(short: str) -> Collection[str]:
    return GROUPS.get(short, set())


def authorizer(**kw: object) -> Authorizer:
    fields: dict[str, object] = dict(
        service_authorization=True, acls={}, client_principals={}, administrators=("admin",),
        administrator_groups=(), readonly_administrators=(), readonly_administrator_groups=(),
        auth_to_local=AuthToLocal(None, R), starter_user="scm",
    )
    fields.update(kw)
    return Authorizer(AuthorizationSettings(**fields), groups_of)  # type: ignore[arg-type]


@pytest.mark.parametrize(("principal", "short"), [
    (f"alice@{R}", "alice"), (f"dn/dn-1.example.com@{R}", "dn"), ("bob", "bob"),
])
def test_the_default_rule_maps_the_default_realm_to_the_first_component(principal: str, short: str) -> None:
    assert AuthToLocal(None, R).short_name(principal) == short


def test_no_rule_for_another_realm_is_refused() -> None:
    with pytest.raises(NoMatchingRule, match=re.escape("No rules applied to alice@OTHER.ORG")):
        AuthToLocal("DEFAULT", R).short_name("alice@OTHER.ORG")


def test_rules_apply_in_order_with_match_substitution_and_lowercase() -> None:
    rules = AuthToLocal(
        rf"""RULE:[2:$1@$0](dn@{R})s/.*/hdds/
             RULE:[1:$1@$0](.*@OTHER\.ORG)s/@.*//L
             RULE:[2:$1-$2@$0](om-.*@{R})s/@.*//g
             DEFAULT""",
        R,
    )
    assert rules.short_name(f"dn/host-1@{R}") == "hdds"
    assert rules.short_name("Alice@OTHER.ORG") == "alice"
    assert rules.short_name(f"om/om-1@{R}") == "om-om-1"
    assert rules.short_name(f"scm/host@{R}") == "scm"


def test_a_rule_leaving_a_non_simple_name_is_refused_and_a_bad_rule_is_one_line() -> None:
    with pytest.raises(NoMatchingRule, match=re.escape("Non-simple name alice@EXAMPLE.COM")):
        AuthToLocal("RULE:[1:$1@$0]", R).short_name(f"alice@{R}")
    with pytest.raises(ValueError, match=re.escape("hadoop.security.auth_to_local: cannot parse 'RULES:[1:$1]'")):
        AuthToLocal("RULES:[1:$1]", R)


def test_acl_strings_as_hadoop_reads_them() -> None:
    assert authz.AccessControlList.parse("*").allows("anyone", ())
    acl = authz.AccessControlList.parse("alice,bob ops")
    assert acl.allows("bob", ()) and acl.allows("carol", {"ops"}) and not acl.allows("dave", {"auditors"})
    assert not authz.AccessControlList.parse(" ").allows("alice", {"users"})


def test_service_authorization_off_allows_every_connection() -> None:
    assert authorizer(service_authorization=False, acls={authz.SERVICES[LOCATION].acl_key: "nobody"}).connection(
        f"alice@{R}", LOCATION) is None


def test_a_service_acl_refuses_a_user_it_does_not_list_naming_user_and_protocol() -> None:
    key = authz.SERVICES[LOCATION].acl_key
    assert key == "hdds.security.client.scm.container.protocol.acl"
    check = authorizer(acls={key: "admin ops", key + ".blocked": "eve"})
    refusal = check.connection(f"alice@{R}", LOCATION)
    assert refusal is not None and refusal.exception_class == authz.AUTHORIZATION_EXCEPTION
    assert refusal.message == (f"User alice@{R} (auth:KERBEROS) is not authorized for protocol interface "
                               f"{LOCATION}: denied by configured ACL")
    assert check.connection(f"carol@{R}", LOCATION) is None  # by group
    assert check.connection(f"admin@{R}", LOCATION) is None
    blocked = authorizer(acls={key + ".blocked": "alice"})
    assert blocked.connection(f"alice@{R}", LOCATION) is not None and blocked.connection(f"bob@{R}", LOCATION) is None


def test_the_om_only_protocol_admits_the_oms_principal_only_with_host_expansion() -> None:
    check = authorizer(client_principals={"ozone.om.kerberos.principal": f"om/_HOST@{R}"})
    assert check.client_principal_needs_host(SECRET_KEY_OM)
    assert not check.client_principal_needs_host(LOCATION)
    refusal = check.connection(f"dn/dn-1.example.com@{R}", SECRET_KEY_OM, "dn-1.example.com")
    assert refusal is not None
    assert refusal.message.endswith(f"this service is only accessible by om/dn-1.example.com@{R}")
    assert check.connection(f"om/om-1.example.com@{R}", SECRET_KEY_OM, "OM-1.example.com") is None


def test_an_unknown_protocol_is_refused_when_authorization_is_on() -> None:
    refusal = authorizer().connection(f"alice@{R}", "org.example.Nope")
    assert refusal is not None and refusal.message == "Unknown protocol: org.example.Nope"


def test_admin_commands_need_an_administrator_and_name_the_principal() -> None:
    check = authorizer(administrator_groups=("ops",), readonly_administrators=("dave",))
    refusal = check.command(f"dn/dn-1@{R}", "ForceExitSafeMode")
    assert refusal is not None and refusal.exception_class == authz.ACCESS_CONTROL_EXCEPTION
    assert refusal.message == f"Access denied for user dn/dn-1@{R}. SCM superuser privilege is required."
    assert check.command(f"admin@{R}", "ForceExitSafeMode") is None
    assert check.command(f"carol@{R}", "DecommissionNodes") is None  # ozone.administrators.groups
    assert check.command(f"scm/host@{R}", "ClosePipeline") is None  # the SCM's own principal
    assert check.command(f"alice@{R}", "GetScmInfo") is None  # not an admin command
    assert check.command(f"dave@{R}", "GetContainer") is None  # read-only admin, read command
    assert check.command(f"dave@{R}", "CloseContainer") is not None
    assert authorizer(administrators=("*",)).command(f"alice@{R}", "StopReplicationManager") is None
    assert check.command("alice@OTHER.ORG", "ForceExitSafeMode") is not None  # no short name: not an admin


def test_every_admin_command_is_a_location_protocol_command() -> None:
    assert set(authz.ADMIN_COMMANDS) <= set(wire_loc.Type.keys())


def test_host_expansion_lowercases_and_leaves_other_forms() -> None:
    assert authz.server_principal(f"scm/_HOST@{R}", "SCM-0.Example.com") == f"scm/scm-0.example.com@{R}"
    assert authz.server_principal(f"scm/fixed@{R}", "x") == f"scm/fixed@{R}"


def test_administrators_reconfigured_at_run_time_apply_to_the_next_check() -> None:
    """``ozone admin reconfig`` hands new ozone.administrators / ozone.readonly.administrators to the running
    authorizer: the next command is checked against them; the SCM's own user stays an administrator."""
    a = authorizer()
    alice, dave = f"alice@{R}", f"dave@{R}"
    assert a.command(alice, "StartReplicationManager") is not None
    a.set_administrators(("alice",), ("dave",))
    assert a.command(alice, "StartReplicationManager") is None
    assert a.command(f"admin@{R}", "StartReplicationManager") is not None  # no longer listed
    assert a.command(dave, "GetContainer") is None and a.command(dave, "StartReplicationManager") is not None
    assert a.command(f"scm/host@{R}", "StartReplicationManager") is None  # the starter user
