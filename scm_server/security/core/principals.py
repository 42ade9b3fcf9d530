"""Kerberos principals as certificate roles: who may get which certificate over Hadoop RPC. Pure.

On a Kerberized connection the caller is its authenticated principal, ``primary/instance@REALM`` (``dn/dn1.example.com@
EXAMPLE.COM``). The role a certificate binds is taken from that principal, never from the CSR or the request's
details: the principal's *primary* is compared with the primary of the service principals Ozone configures
(``hdds.datanode.kerberos.principal``, default ``dn/_HOST@REALM``; ``ozone.om.kerberos.principal``, default
``OM/_HOST@REALM``), and its *instance* is the one host that principal may get a certificate for (Ozone's ``_HOST``
is each service's own host name). The realm is the KDC's business: the SASL layer authenticated it.

Stricter than Ozone 2.2.0, whose ``SCMSecurityProtocolServer`` signs any authenticated caller's request for any
node type (``KERBEROS_TRUSTED``) and leaves the rest to ``hdds.security.client.scm.certificate.protocol.acl``
(default ``*``): here a datanode's principal cannot obtain an OM certificate, nor a certificate for another host.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

from scm_server.security.core.identity import Role
from scm_server.security.core.requests import RequestRejected


@dataclasses.dataclass(frozen=True)
class Principal:
    primary: str
    instance: str  # "" for a user principal (alice@REALM)
    realm: str  # "" when the name carries none

    @property
    def name(self) -> str:
        text = f"{self.primary}/{self.instance}" if self.instance else self.primary
        return f"{text}@{self.realm}" if self.realm else text


def parse(name: str) -> Principal:
    """``primary[/instance][@REALM]``; a ValueError naming what is wrong otherwise."""
    text = name.strip()
    body, _, realm = text.partition("@")
    primary, slash, instance = body.partition("/")
    if not primary or (slash and not instance) or "/" in instance or "@" in realm:
        raise ValueError(f"{name!r} is not a Kerberos principal (primary[/instance][@REALM], e.g. dn/host@EXAMPLE.COM)")
    return Principal(primary, instance, realm)


def service_primary(pattern: str) -> str:
    """The primary of a configured service principal pattern: ``dn/_HOST@REALM`` -> ``dn``."""
    return parse(pattern).primary


def short_name(name: str) -> str:
    """``om/host@REALM`` -> ``om`` (Hadoop's default auth_to_local rule for the local realm)."""
    return name.split("@", 1)[0].split("/", 1)[0]


def is_administrator(user: str, administrators: Collection[str]) -> bool:
    """``ozone.administrators`` lists users by short name (or ``*``); a full principal is accepted too."""
    return bool(user) and ("*" in administrators or user in administrators or short_name(user) in administrators)


def _same_host(a: str, b: str) -> bool:
    return a.strip().rstrip(".").lower() == b.strip().rstrip(".").lower()


def bind(principal_name: str, requested: Role, host: str, primaries: Mapping[Role, str]) -> Principal:
    """Check that the authenticated ``principal_name`` may get a ``requested`` certificate for ``host``:
    its primary is the configured service primary of that role and its instance is ``host``. Raises
    :class:`RequestRejected` with a one-line reason (``PERMISSION_DENIED``) otherwise."""
    what = {Role.DATANODE: "datanode", Role.OM: "OM"}.get(requested, requested.value)
    try:
        principal = parse(principal_name)
    except ValueError as exc:
        raise RequestRejected("PERMISSION_DENIED", f"a {what} certificate needs a service principal: {exc}") from exc
    expected = primaries.get(requested)
    if expected is None:
        raise RequestRejected("PERMISSION_DENIED", f"{requested.value} certificates are not issued to Kerberos principals")
    if principal.primary != expected:
        holder = next((r for r, p in primaries.items() if p == principal.primary), None)
        role_text = f"a {holder.value} principal" if holder is not None else "not a service principal"
        raise RequestRejected(
            "PERMISSION_DENIED",
            f"{principal.name} may not get a {what} certificate: it is {role_text}, and {what} certificates go to "
            f"{expected}/<host> principals only",
        )
    if not principal.instance:
        raise RequestRejected("PERMISSION_DENIED", f"{principal.name} names no host; a {what} certificate goes to "
                                                   f"{expected}/<host> principals")
    if not _same_host(principal.instance, host):
        raise RequestRejected(
            "PERMISSION_DENIED",
            f"{principal.name} may not get a {what} certificate for host {host!r}: a {what} principal gets one for "
            f"its own host ({principal.instance}) only",
        )
    return principal
