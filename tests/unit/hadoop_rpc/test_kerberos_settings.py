"""The Kerberos keys of the Hadoop RPC listeners: parsed up front, each mistake one line naming the key."""

from __future__ import annotations

import pytest

from scm_server.conf import OzoneConfiguration
from scm_server.exceptions import ConfigError
from scm_server.hadoop_sasl import Qop
from scm_server.server.hadoop_rpc.kerberos import KerberosSettings, canonical_hostname

KERBEROS = {
    "hadoop.security.authentication": "kerberos",
    "hdds.scm.kerberos.principal": "scm/_HOST@EXAMPLE.COM",
    "hdds.scm.kerberos.keytab.file": "/etc/security/keytabs/scm.keytab",
}


def settings_of(**extra: str) -> KerberosSettings | None:
    c = OzoneConfiguration()
    for k, v in {**KERBEROS, **extra}.items():
        c.set(k, v)
    return KerberosSettings.from_conf(c, "localhost")


def test_simple_is_the_default_and_reads_nothing_else() -> None:
    assert KerberosSettings.from_conf(OzoneConfiguration(), "localhost") is None
    c = OzoneConfiguration()
    c.set("hadoop.security.authentication", "SIMPLE")
    c.set("hadoop.rpc.protection", "garbage")  # not read without Kerberos
    assert KerberosSettings.from_conf(c, "localhost") is None


def test_the_principal_host_is_expanded_and_the_defaults_apply() -> None:
    s = settings_of()
    assert s is not None
    assert s.principal == f"scm/{canonical_hostname('localhost')}@EXAMPLE.COM"
    assert s.qops == (Qop.AUTHENTICATION,)
    assert not s.authorization.service_authorization
    assert s.authorization.starter_user == "scm"


def test_the_authorization_keys_are_read() -> None:
    s = settings_of(**{
        "hadoop.rpc.protection": "privacy,integrity", "hadoop.security.authorization": "true",
        "hdds.security.client.scm.container.protocol.acl": "admin ops",
        "ozone.om.kerberos.principal": "om/_HOST@EXAMPLE.COM", "ozone.administrators": "admin, carol",
        "ozone.administrators.groups": "ops", "ozone.readonly.administrators": "dave",
    })
    assert s is not None
    a = s.authorization
    assert s.qops == (Qop.PRIVACY, Qop.INTEGRITY) and a.service_authorization
    assert a.acls == {"hdds.security.client.scm.container.protocol.acl": "admin ops"}
    assert a.client_principals == {"ozone.om.kerberos.principal": "om/_HOST@EXAMPLE.COM",
                                   "hdds.scm.kerberos.principal": "scm/_HOST@EXAMPLE.COM"}  # SecretKeyProtocolScm
    assert (a.administrators, a.administrator_groups, a.readonly_administrators) == (("admin", "carol"), ("ops",),
                                                                                      ("dave",))


@pytest.mark.parametrize(("extra", "expected"), [
    ({"hadoop.security.authentication": "ldap"}, "hadoop.security.authentication=ldap: give simple or kerberos"),
    ({"hdds.scm.kerberos.keytab.file": ""}, "hdds.scm.kerberos.keytab.file not set"),
    ({"hdds.scm.kerberos.principal": "", "hdds.scm.kerberos.keytab.file": ""},
     "hdds.scm.kerberos.principal and hdds.scm.kerberos.keytab.file not set"),
    ({"hdds.scm.kerberos.principal": "scm@EXAMPLE.COM"}, "write service/host@REALM"),
    ({"hdds.scm.kerberos.principal": "scm/a/b@R"}, "is not a Kerberos principal"),
    ({"hadoop.rpc.protection": "secret"}, "hadoop.rpc.protection='secret'"),
    ({"hadoop.security.auth_to_local": "RULES:[1:$1]"}, "hadoop.security.auth_to_local: cannot parse"),
    ({"hadoop.security.auth_to_local": "RULE:[1:$1@$0](x@Y)s/@.*//"}, "maps no short name for the SCM's own"),
])
def test_each_mistake_is_one_line_naming_the_key(extra: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        settings_of(**extra)
    assert expected in str(error.value) and "\n" not in str(error.value)
