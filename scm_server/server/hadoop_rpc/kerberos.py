"""Kerberos on the Hadoop RPC listeners: the keys, the acceptor credentials, and GSSAPI through PyPI ``gssapi``.

The edge of :mod:`scm_server.hadoop_sasl` (the pure SASL exchange) and of :mod:`.authorization` (the pure
checks): this module reads Hadoop's and Ozone's keys, expands ``_HOST``, loads the keytab once at start-up
(a wrong keytab or principal stops the daemon with one line) and gives each connection a fresh GSS acceptor
context over MIT Kerberos.

Keys (Hadoop's and Ozone's names): ``hadoop.security.authentication`` (``simple`` or ``kerberos``),
``hdds.scm.kerberos.principal`` (``_HOST`` is this SCM's canonical host name, lowercased),
``hdds.scm.kerberos.keytab.file``, ``hadoop.rpc.protection`` (authentication, integrity, privacy; a list
offers each), ``hadoop.security.authorization`` and the ACL keys of :mod:`.authorization`,
``ozone.administrators[.groups]``, ``ozone.readonly.administrators[.groups]``,
``hadoop.security.auth_to_local``. The Kerberos library itself reads ``KRB5_CONFIG`` (krb5.conf: the realm
and its KDCs) and keeps its replay cache where MIT Kerberos keeps it (``KRB5RCACHEDIR``).
"""

from __future__ import annotations

import dataclasses
import grp
import logging
import os
import pwd
import socket
from collections.abc import Collection
from pathlib import Path

import gssapi
import gssapi.exceptions

from scm_server import hadoop_sasl
from scm_server.conf import OzoneConfiguration
from scm_server.exceptions import ConfigError
from scm_server.server.hadoop_rpc import authorization as authz

LOG = logging.getLogger(__name__)

AUTHENTICATION_KEY = "hadoop.security.authentication"
PRINCIPAL_KEY = "hdds.scm.kerberos.principal"
KEYTAB_KEY = "hdds.scm.kerberos.keytab.file"


@dataclasses.dataclass(frozen=True)
class KerberosSettings:
    principal: str  # with _HOST expanded
    keytab: Path
    qops: tuple[hadoop_sasl.Qop, ...]
    authorization: authz.AuthorizationSettings

    @classmethod
    def from_conf(cls, conf: OzoneConfiguration, hostname: str) -> KerberosSettings | None:
        """The settings when ``hadoop.security.authentication=kerberos``, None when ``simple`` (the default);
        ConfigError (one line) for anything else or a missing principal or keytab."""
        mode = (conf.get_str(AUTHENTICATION_KEY) or "simple").strip().lower()
        if mode == "simple":
            return None
        if mode != "kerberos":
            raise ConfigError(f"{AUTHENTICATION_KEY}={mode}: give simple or kerberos")
        configured = (conf.get_str(PRINCIPAL_KEY) or "").strip()
        keytab = (conf.get_str(KEYTAB_KEY) or "").strip()
        if not configured or not keytab:
            raise ConfigError(
                f"{AUTHENTICATION_KEY}=kerberos needs {PRINCIPAL_KEY} (e.g. scm/_HOST@EXAMPLE.COM) and "
                f"{KEYTAB_KEY} (the keytab holding its key); {_missing(configured, keytab)} not set"
            )
        try:
            name = authz.KerberosName.parse(configured)
        except ValueError as exc:
            raise ConfigError(f"{PRINCIPAL_KEY}={configured}: {exc}") from exc
        if name.host is None or name.realm is None:
            raise ConfigError(f"{PRINCIPAL_KEY}={configured}: write service/host@REALM (host may be _HOST)")
        principal = authz.server_principal(configured, canonical_hostname(hostname))
        try:
            qops = hadoop_sasl.parse_protection(conf.get_str(hadoop_sasl.PROTECTION_KEY))
            rules = authz.AuthToLocal(conf.get_str(authz.AUTH_TO_LOCAL_KEY), name.realm)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        try:
            starter = rules.short_name(principal)
        except authz.NoMatchingRule as exc:
            raise ConfigError(
                f"{authz.AUTH_TO_LOCAL_KEY} maps no short name for the SCM's own principal {principal} ({exc}): "
                "add a rule for it, or DEFAULT"
            ) from exc
        acl_keys = [k for s in authz.SERVICES.values() for k in (s.acl_key, s.acl_key + ".blocked")]
        settings = authz.AuthorizationSettings(
            service_authorization=bool(conf.get_bool(authz.AUTHORIZATION_KEY, False)),
            acls={k: v for k in acl_keys if (v := conf.get_str(k)) is not None},
            client_principals={
                key: value.strip()
                for s in authz.SERVICES.values()
                if (key := s.client_principal_key) is not None and (value := conf.get_str(key))
            },
            administrators=tuple(conf.get_trimmed_list(authz.ADMINISTRATORS_KEY)),
            administrator_groups=tuple(conf.get_trimmed_list(authz.ADMINISTRATORS_GROUPS_KEY)),
            readonly_administrators=tuple(conf.get_trimmed_list(authz.READONLY_ADMINISTRATORS_KEY)),
            readonly_administrator_groups=tuple(conf.get_trimmed_list(authz.READONLY_ADMINISTRATORS_GROUPS_KEY)),
            auth_to_local=rules,
            starter_user=starter,
        )
        return cls(principal, Path(keytab), qops, settings)


def _missing(principal: str, keytab: str) -> str:
    return " and ".join(k for k, v in ((PRINCIPAL_KEY, principal), (KEYTAB_KEY, keytab)) if not v)


def canonical_hostname(host: str) -> str:
    """The canonical name of ``host`` (as Hadoop's ``_HOST`` uses it), lowercased; the name itself when it
    does not resolve."""
    try:
        return socket.getfqdn(host).lower()
    except OSError:
        return host.lower()


def os_groups(short_name: str) -> Collection[str]:
    """The groups of a local user (Hadoop's default shell group mapping); none for an unknown user."""
    try:
        gid = pwd.getpwnam(short_name).pw_gid
        return frozenset(grp.getgrgid(g).gr_name for g in os.getgrouplist(short_name, gid))
    except (KeyError, OSError):
        return frozenset()


class GssapiAcceptor:
    """:class:`~scm_server.hadoop_sasl.GssAcceptor` over ``gssapi.SecurityContext`` (MIT Kerberos)."""

    def __init__(self, credentials: gssapi.Credentials) -> None:
        self._ctx = gssapi.SecurityContext(creds=credentials, usage="accept")

    @property
    def complete(self) -> bool:
        return bool(self._ctx.complete)

    @property
    def initiator(self) -> str:
        return str(self._ctx.initiator_name)

    def step(self, token: bytes) -> bytes | None:
        try:
            out = self._ctx.step(token)
            # gssapi's step() keeps a failure (returning the error token meant for the peer) and raises it at the
            # next use of the context: read one property here so that the failure surfaces from this step
            _ = self._ctx.complete
        except gssapi.exceptions.GSSError as exc:
            raise hadoop_sasl.GssError(_gss_reason(exc)) from exc
        return bytes(out) if out is not None else None

    def wrap(self, data: bytes, encrypt: bool) -> bytes:
        try:
            return bytes(self._ctx.wrap(data, encrypt).message)
        except gssapi.exceptions.GSSError as exc:
            raise hadoop_sasl.GssError(_gss_reason(exc)) from exc

    def unwrap(self, data: bytes) -> tuple[bytes, bool]:
        try:
            result = self._ctx.unwrap(data)
        except gssapi.exceptions.GSSError as exc:
            raise hadoop_sasl.GssError(_gss_reason(exc)) from exc
        return bytes(result.message), bool(result.encrypted)


def _gss_reason(exc: gssapi.exceptions.GSSError) -> str:
    return " ".join(str(exc).split())


class RpcSecurity:
    """Everything a Hadoop RPC listener needs for Kerberos: a SASL exchange per connection and the checks."""

    def __init__(self, settings: KerberosSettings, credentials: gssapi.Credentials) -> None:
        self.settings = settings
        self.credentials = credentials
        name = authz.KerberosName.parse(settings.principal)
        self.offer = hadoop_sasl.SaslOffer(protocol=name.service, server_id=name.host or "")
        self.authorizer = authz.Authorizer(settings.authorization, os_groups)

    @classmethod
    def load(cls, settings: KerberosSettings) -> RpcSecurity:
        """Acquire the acceptor credentials from the keytab now: ConfigError (one line naming the keys) when the
        keytab is missing, unreadable or lacks the principal's key."""
        keytab = settings.keytab
        fix = f"check {KEYTAB_KEY} and {PRINCIPAL_KEY} (klist -kt {keytab} lists its principals)"
        if not keytab.is_file() or not os.access(keytab, os.R_OK):
            raise ConfigError(f"{KEYTAB_KEY}={keytab}: no readable keytab there; {fix}")
        try:
            name = gssapi.Name(settings.principal, gssapi.NameType.kerberos_principal)
            # MIT Kerberos opens the keytab and looks the principal's key up here, so a wrong keytab fails now
            creds = gssapi.Credentials(name=name, usage="accept", store={"keytab": str(keytab)})
        except gssapi.exceptions.GSSError as exc:
            raise ConfigError(
                f"{PRINCIPAL_KEY}={settings.principal} cannot accept Kerberos connections with {keytab}: "
                f"{_gss_reason(exc)}; {fix}"
            ) from exc
        return cls(settings, creds)

    def new_sasl(self) -> hadoop_sasl.SaslServer:
        return hadoop_sasl.SaslServer(self.offer, lambda: GssapiAcceptor(self.credentials), self.settings.qops)
