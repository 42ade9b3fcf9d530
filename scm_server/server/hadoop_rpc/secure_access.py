"""Who is served each call of Ozone's SCM protocols over Hadoop RPC, insecure and under Kerberos. Pure.

docs/ozone-compatibility.md's two access columns are derived here from the rules the translators enforce, never
written by hand:

* **insecure** (``ozone.security.enabled=false``, SIMPLE authentication): the block, datanode, location and
  reconfigure calls are served to whoever connects (SIMPLE authenticates nobody, so no per-call check can hold);
  ``GetContainerToken`` answers Ozone's empty token (tokens are off); every SCMSecurityProtocol call is refused
  (no CA) and every SCMSecretKeyProtocol call answers ``SECRET_KEY_NOT_ENABLED``.
* **secure** (``ozone.security.enabled=true``, ``hadoop.security.authentication=kerberos``): the callers
  admitted, from :data:`.authorization.ADMIN_COMMANDS` (administrators; read-only administrators where Ozone's
  ``checkAdminAccess`` is a read) and :data:`.authorization.RECONFIGURE_ADMIN_METHODS` (administrators), the certificate calls' principal roles
  (:data:`.security_translator.ISSUED_TO`: the datanode, OM or SCM service principal, for its own host),
  the administrator-only calls of the security and secret-key translators, and the client principal each
  secret-key protocol name admits under service-level authorization (:data:`.authorization.SERVICES`).

Every protocol's ACL key (``hdds.security.client.*.protocol.acl``, default ``*``) applies on top of this, as in
Ozone. ``tests/unit/hadoop_rpc/test_secure_access.py`` calls each translator as each listed caller and fails
when the code refuses a caller the table says is served, or serves one it says is refused.
"""

from __future__ import annotations

import dataclasses
import enum

from scm_server.security.core.identity import Role
from scm_server.server.hadoop_rpc import authorization, secret_key_translator, security_translator


class Caller(enum.Enum):
    """A kind of authenticated caller; the value is how the table names it."""

    ANYONE = "any principal"
    ADMINISTRATOR = "administrators"
    READONLY_ADMINISTRATOR = "read-only administrators"
    DATANODE = "the datanode principal, own host"
    OM = "the OM principal, own host"
    SCM = "the SCM principal"


ROLE_CALLER = {Role.DATANODE: Caller.DATANODE, Role.OM: Caller.OM, Role.SCM: Caller.SCM}

# the client principal key of a protocol name (authorization.SERVICES) -> the caller it names
PRINCIPAL_KEY_CALLER = {
    "hdds.datanode.kerberos.principal": "the datanode principal",
    "ozone.om.kerberos.principal": "the OM principal",
    "hdds.scm.kerberos.principal": "the SCM principal",
}

SERVED = "served"
NO_CA = "refused: no CA (`ozone.security.enabled=false`)"
NO_SECRET_KEYS = "refused: `SECRET_KEY_NOT_ENABLED` (`ozone.security.enabled=false`)"
UNAUTHENTICATED = "refused: needs a Kerberos principal"


@dataclasses.dataclass(frozen=True)
class Access:
    """One served call: what an insecure SCM answers, and which callers a Kerberized SCM serves."""

    insecure: str
    callers: tuple[Caller, ...]
    by_protocol_name: str = ""  # the secret-key protocols: the principal each name admits under service ACLs

    def secure(self) -> str:
        text = ", ".join(c.value for c in self.callers)
        return f"{text}; {self.by_protocol_name}" if self.by_protocol_name else text


def _admins(read_only: bool) -> tuple[Caller, ...]:
    """Administrators; the SCM's own principal is always one (Ozone adds the user the SCM runs as)."""
    if read_only:
        return Caller.ADMINISTRATOR, Caller.READONLY_ADMINISTRATOR, Caller.SCM
    return Caller.ADMINISTRATOR, Caller.SCM


def _secret_key_names() -> str:
    """Which principal each SCMSecretKeyProtocol name admits with ``hadoop.security.authorization=true``."""
    parts = []
    for name in secret_key_translator.PROTOCOLS:
        key = authorization.SERVICES[name].client_principal_key
        assert key is not None, name
        parts.append(f"`{name.rsplit('.', 1)[-1]}`: {PRINCIPAL_KEY_CALLER[key]}")
    return f"with `{authorization.AUTHORIZATION_KEY}`: " + ", ".join(parts)


def access(protocol_key: str, command: str) -> Access:
    """The access of a served ``command`` of the protocol whose conformance key is ``protocol_key``."""
    if protocol_key in ("block", "datanode"):
        return Access(SERVED, (Caller.ANYONE,))
    if protocol_key == "reconfigure":
        admin_only = command in authorization.RECONFIGURE_ADMIN_METHODS
        return Access(SERVED, _admins(False) if admin_only else (Caller.ANYONE,))
    if protocol_key == "location":
        read_only = authorization.ADMIN_COMMANDS.get(command)
        return Access(SERVED, (Caller.ANYONE,) if read_only is None else _admins(read_only))
    if protocol_key == "security":
        if command in security_translator.ISSUED_TO:
            return Access(NO_CA, tuple(ROLE_CALLER[r] for r in security_translator.ISSUED_TO[command]))
        if command in security_translator.ADMINISTRATORS_ONLY:
            return Access(NO_CA, _admins(False))
        return Access(NO_CA, (Caller.ANYONE,))
    if protocol_key == "secretkey":
        callers = _admins(False) if command in secret_key_translator.ADMINISTRATORS_ONLY else (Caller.ANYONE,)
        return Access(NO_SECRET_KEYS, callers, _secret_key_names())
    raise KeyError(f"no access rules for protocol {protocol_key!r}")
