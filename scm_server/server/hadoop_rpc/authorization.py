"""Who may call what over Hadoop RPC with Kerberos, as Ozone's SCM decides it (pure: no I/O, no clock).

The caller is always the SASL-authenticated Kerberos principal (``Call.user``, full ``name[/host]@REALM``).
Three checks, in Ozone's order:

1. **Service-level authorization** (``hadoop.security.authorization``, default false), when the connection
   context names its protocol, as Hadoop's ``ServiceAuthorizationManager`` with Ozone's ``SCMPolicyProvider``:
   each protocol has an ACL key (``hdds.security.client.*.protocol.acl``, default ``*``) and a blocked ACL
   (the key + ``.blocked``, default nobody); an ACL is ``users groups`` (comma-separated each, ``*`` for all)
   matched against the caller's short name and groups. Protocols whose Ozone interface names a client
   principal (the secret-key protocols: ``SecretKeyProtocolOm`` only the OM's ``ozone.om.kerberos.principal``,
   ``SecretKeyProtocolDatanode`` only ``hdds.datanode.kerberos.principal``, ``SecretKeyProtocolScm`` only
   ``hdds.scm.kerberos.principal``; ``_HOST`` there is the caller's host) admit that principal only. A refusal
   is FATAL ``AuthorizationException``: "User P (auth:KERBEROS) is not authorized for protocol interface X:
   denied by configured ACL" (or ": this service is only accessible by Q").
2. **Administrators** (``ozone.administrators``, ``ozone.administrators.groups``; ``ozone.readonly.*`` for the
   read-only admin calls), per call, for the StorageContainerLocationProtocol commands Ozone's
   ``SCMClientProtocolServer`` guards with ``checkAdminAccess`` (:data:`ADMIN_COMMANDS`). The SCM's own
   principal is always an administrator (Ozone adds the user the SCM runs as). A refusal is the call's ERROR
   ``AccessControlException``: "Access denied for user P. SCM superuser privilege is required." The same check
   guards ReconfigureProtocol's ``startReconfigure``, ``getReconfigureStatus`` and ``listReconfigureProperties``
   (:data:`RECONFIGURE_ADMIN_METHODS`; administrators only), as Ozone's ReconfigurationHandler does.
3. **Short names** come from ``hadoop.security.auth_to_local`` (:class:`AuthToLocal`: ``DEFAULT`` and
   ``RULE:[n:format](match)s/from/to/[g][/L]`` rules, Hadoop's ``hadoop`` mechanism: a principal no rule
   maps is refused).

A datanode or OM principal is therefore refused every admin command unless an operator lists it in
``ozone.administrators`` (Ozone's rule), and the OM-only and datanode-only secret-key protocols admit only
their own principals.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Collection, Mapping

AUTHORIZATION_KEY = "hadoop.security.authorization"
AUTH_TO_LOCAL_KEY = "hadoop.security.auth_to_local"
ADMINISTRATORS_KEY = "ozone.administrators"
ADMINISTRATORS_GROUPS_KEY = "ozone.administrators.groups"
READONLY_ADMINISTRATORS_KEY = "ozone.readonly.administrators"
READONLY_ADMINISTRATORS_GROUPS_KEY = "ozone.readonly.administrators.groups"
WILDCARD = "*"


@dataclasses.dataclass(frozen=True)
class Service:
    """One protocol of Ozone's ``SCMPolicyProvider``: its ACL key and, where Ozone's interface names one, the
    key of the only client principal it admits."""

    protocol: str  # the Hadoop protocol name (the Java interface's name)
    acl_key: str
    client_principal_key: str | None = None


SERVICES: Mapping[str, Service] = {
    s.protocol: s
    for s in (
        Service("org.apache.hadoop.ozone.protocol.StorageContainerDatanodeProtocol",
                "hdds.security.client.datanode.container.protocol.acl"),
        Service("org.apache.hadoop.hdds.scm.protocol.StorageContainerLocationProtocol",
                "hdds.security.client.scm.container.protocol.acl"),
        Service("org.apache.hadoop.hdds.scm.protocol.ScmBlockLocationProtocol",
                "hdds.security.client.scm.block.protocol.acl"),
        Service("org.apache.hadoop.hdds.protocol.SCMSecurityProtocol",
                "hdds.security.client.scm.certificate.protocol.acl"),
        Service("org.apache.hadoop.hdds.protocol.SecretKeyProtocolOm",
                "hdds.security.client.scm.secretkey.om.protocol.acl", "ozone.om.kerberos.principal"),
        Service("org.apache.hadoop.hdds.protocol.SecretKeyProtocolScm",
                "hdds.security.client.scm.secretkey.scm.protocol.acl", "hdds.scm.kerberos.principal"),
        Service("org.apache.hadoop.hdds.protocol.SecretKeyProtocolDatanode",
                "hdds.security.client.scm.secretkey.datanode.protocol.acl", "hdds.datanode.kerberos.principal"),
    )
}

# StorageContainerLocationProtocol commands Ozone's SCMClientProtocolServer guards with checkAdminAccess, and
# whether a read-only administrator may call them (checkAdminAccess(user, isRead)).
ADMIN_COMMANDS: Mapping[str, bool] = {
    "AllocateContainer": False, "GetContainer": True, "DeleteContainer": False, "DecommissionNodes": False,
    "RecommissionNodes": False, "StartMaintenanceNodes": False, "CloseContainer": False,
    "AllocatePipeline": False, "ActivatePipeline": False, "DeactivatePipeline": False, "ClosePipeline": False,
    "TransferLeadership": False, "ForceExitSafeMode": False, "StartReplicationManager": False,
    "StopReplicationManager": False, "FinalizeScmUpgrade": False, "QueryUpgradeFinalizationProgress": True,
    "StartContainerBalancer": False, "StopContainerBalancer": False, "DatanodeUsageInfo": True,
    "GetContainerToken": True, "DecommissionScm": False, "ReconcileContainer": False, "SuppressContainer": False,
}

# ReconfigureProtocol methods Ozone's ReconfigurationHandler guards with the SCM's checkAdminAccess (administrators
# only: a read-only administrator is refused too); getServerName is answered to any caller.
RECONFIGURE_ADMIN_METHODS = frozenset({"startReconfigure", "getReconfigureStatus", "listReconfigureProperties"})


# ---- principals and auth_to_local ----

@dataclasses.dataclass(frozen=True)
class KerberosName:
    """``service[/host][@realm]`` split as Hadoop's ``KerberosName`` does."""

    service: str
    host: str | None
    realm: str | None

    @classmethod
    def parse(cls, name: str) -> KerberosName:
        m = re.fullmatch(r"([^/@]+)(/([^/@]+))?(@([^/@]+))?", name)
        if m is None:
            raise ValueError(f"{name!r} is not a Kerberos principal: write name[/host]@REALM")
        return cls(m.group(1), m.group(3), m.group(5))

    @property
    def components(self) -> list[str]:
        return [self.service] if self.host is None else [self.service, self.host]

    def __str__(self) -> str:
        out = self.service if self.host is None else f"{self.service}/{self.host}"
        return out if self.realm is None else f"{out}@{self.realm}"


class NoMatchingRule(ValueError):
    """No auth_to_local rule maps the principal to a short name."""


_RULE = re.compile(
    r"\s*((DEFAULT)|(RULE:\[(\d*):([^\]]*)](\(([^)]*)\))?(s/([^/]*)/([^/]*)/(g)?)?))/?(L)?"
)
_PARAM = re.compile(r"([^$]*)(\$(\d*))?")
_JAVA_GROUP = re.compile(r"\$(\d+)")


@dataclasses.dataclass(frozen=True)
class _Rule:
    text: str
    default: bool = False
    components: int = 0
    fmt: str = ""
    match: re.Pattern[str] | None = None
    sub_from: re.Pattern[str] | None = None
    sub_to: str = ""
    repeat: bool = False
    lower: bool = False

    def apply(self, params: list[str], default_realm: str | None) -> str | None:
        result: str | None = None
        if self.default:
            if default_realm is not None and params[0] == default_realm:
                result = params[1]
        elif len(params) - 1 == self.components:
            base = _replace_parameters(self.fmt, params, self.text)
            if self.match is None or self.match.fullmatch(base):
                if self.sub_from is None:
                    result = base
                else:
                    result = self.sub_from.sub(self.sub_to, base, count=0 if self.repeat else 1)
        if result is not None and re.search(r"[/@]", result):
            raise NoMatchingRule(f"Non-simple name {result} after auth_to_local rule {self.text}")
        if result is not None and self.lower:
            result = result.lower()
        return result


def _replace_parameters(fmt: str, params: list[str], rule: str) -> str:
    out = []
    for m in _PARAM.finditer(fmt):
        out.append(m.group(1))
        if m.group(3):
            index = int(m.group(3))
            if index >= len(params):
                raise NoMatchingRule(f"index {index} from {fmt} is outside the principal's fields (rule {rule})")
            out.append(params[index])
        if m.end() == len(fmt):
            break
    return "".join(out)


class AuthToLocal:
    """``hadoop.security.auth_to_local`` (default ``DEFAULT``): principal -> short name, Hadoop's rules in order.
    ``default_realm`` is the realm ``DEFAULT`` maps (krb5.conf's default realm; the edge passes the realm of
    the SCM's own principal)."""

    def __init__(self, rules: str | None, default_realm: str | None) -> None:
        self.default_realm = default_realm
        self.rules = self._parse(rules if rules is not None and rules.strip() else "DEFAULT")

    @staticmethod
    def _parse(text: str) -> tuple[_Rule, ...]:
        rules: list[_Rule] = []
        rest = text.strip()
        while rest:
            m = _RULE.match(rest)
            if m is None or m.end() == 0:
                raise ValueError(
                    f"{AUTH_TO_LOCAL_KEY}: cannot parse {rest.split()[0]!r}: write DEFAULT or "
                    "RULE:[n:format](regex)s/from/to/[g][/L] rules, one per line"
                )
            whole = m.group(0).strip()
            if m.group(2):
                rules.append(_Rule(whole, default=True, lower=bool(m.group(12))))
            else:
                try:
                    rules.append(_Rule(
                        whole, components=int(m.group(4) or 0), fmt=m.group(5),
                        match=re.compile(m.group(7)) if m.group(7) is not None else None,
                        sub_from=re.compile(m.group(9)) if m.group(8) else None,
                        sub_to=_JAVA_GROUP.sub(r"\\g<\1>", m.group(10) or ""),
                        repeat=bool(m.group(11)), lower=bool(m.group(12)),
                    ))
                except re.error as exc:
                    raise ValueError(f"{AUTH_TO_LOCAL_KEY}: bad regular expression in {whole}: {exc}") from exc
            rest = rest[m.end():].strip()
        return tuple(rules)

    def short_name(self, principal: str) -> str:
        name = KerberosName.parse(principal)
        if name.realm is None:  # a bare user name (SIMPLE) is its own short name
            return name.service if name.host is None else str(name)
        params = [name.realm, *name.components]
        for rule in self.rules:
            result = rule.apply(params, self.default_realm)
            if result is not None:
                return result
        raise NoMatchingRule(f"No rules applied to {principal}")


# ---- ACLs ----

@dataclasses.dataclass(frozen=True)
class AccessControlList:
    """Hadoop's ACL string: ``*`` (everyone), or ``user1,user2 group1,group2`` (either part may be empty;
    a lone space is nobody)."""

    everyone: bool
    users: frozenset[str]
    groups: frozenset[str]

    @classmethod
    def parse(cls, text: str) -> AccessControlList:
        if text.strip() == WILDCARD:
            return cls(True, frozenset(), frozenset())
        users_part, _, groups_part = text.partition(" ")
        return cls(
            False,
            frozenset(u.strip() for u in users_part.split(",") if u.strip()),
            frozenset(g.strip() for g in groups_part.split(",") if g.strip()),
        )

    def allows(self, short_name: str, groups: Collection[str]) -> bool:
        return self.everyone or short_name in self.users or not self.groups.isdisjoint(groups)


@dataclasses.dataclass(frozen=True)
class Refusal:
    exception_class: str
    message: str


AUTHORIZATION_EXCEPTION = "org.apache.hadoop.security.authorize.AuthorizationException"
ACCESS_CONTROL_EXCEPTION = "org.apache.hadoop.security.AccessControlException"


@dataclasses.dataclass(frozen=True)
class AuthorizationSettings:
    """What the checks read from the configuration (parsed by the edge, :mod:`.kerberos`)."""

    service_authorization: bool  # hadoop.security.authorization
    acls: Mapping[str, str]  # acl key (and key + '.blocked') -> value, for the keys that are set
    client_principals: Mapping[str, str]  # client principal key -> configured principal (with _HOST)
    administrators: tuple[str, ...]
    administrator_groups: tuple[str, ...]
    readonly_administrators: tuple[str, ...]
    readonly_administrator_groups: tuple[str, ...]
    auth_to_local: AuthToLocal
    starter_user: str  # the short name of the SCM's own principal: always an administrator


class Authorizer:
    """The three checks over :class:`AuthorizationSettings`; ``groups_of`` gives a short name's groups (the
    edge resolves them as Hadoop's default shell group mapping does, from the OS)."""

    def __init__(self, settings: AuthorizationSettings, groups_of: Callable[[str], Collection[str]]) -> None:
        self.settings = settings
        self.groups_of = groups_of
        self._acls = {
            s.protocol: (
                AccessControlList.parse(settings.acls.get(s.acl_key, WILDCARD)),
                AccessControlList.parse(settings.acls.get(s.acl_key + ".blocked", " ")),
            )
            for s in SERVICES.values()
        }
        self.admins = frozenset(settings.administrators) | {settings.starter_user}
        self.readonly_admins = frozenset(settings.readonly_administrators)

    def set_administrators(self, administrators: Collection[str], readonly_administrators: Collection[str]) -> None:
        """``ozone.administrators`` / ``ozone.readonly.administrators`` changed at run time (``ozone admin
        reconfig``): checked from the next call on; the SCM's own user stays an administrator."""
        self.admins = frozenset(administrators) | {self.settings.starter_user}
        self.readonly_admins = frozenset(readonly_administrators)

    def client_principal_needs_host(self, protocol: str) -> bool:
        """Whether :meth:`connection` needs the caller's canonical host name (a ``_HOST`` client principal)."""
        service = SERVICES.get(protocol)
        if not self.settings.service_authorization or service is None or service.client_principal_key is None:
            return False
        return "/_HOST@" in self.settings.client_principals.get(service.client_principal_key, "")

    def connection(self, principal: str, protocol: str, client_host: str | None = None) -> Refusal | None:
        """Service-level authorization of a connection for ``protocol`` (None: allowed)."""
        if not self.settings.service_authorization:
            return None
        service = SERVICES.get(protocol)
        if service is None:
            return Refusal(AUTHORIZATION_EXCEPTION, f"Unknown protocol: {protocol}")
        who = f"User {principal} (auth:KERBEROS) is not authorized for protocol interface {protocol}"
        expected = None
        if service.client_principal_key is not None:
            configured = self.settings.client_principals.get(service.client_principal_key)
            if configured:
                expected = server_principal(configured, client_host) if client_host else configured
        if expected is not None and expected != principal:
            return Refusal(AUTHORIZATION_EXCEPTION, f"{who}: this service is only accessible by {expected}")
        try:
            short = self.settings.auth_to_local.short_name(principal)
        except NoMatchingRule as exc:
            return Refusal(AUTHORIZATION_EXCEPTION, f"{who}: {exc}")
        groups = self.groups_of(short)
        allowed, blocked = self._acls[protocol]
        if not allowed.allows(short, groups) or blocked.allows(short, groups):
            return Refusal(AUTHORIZATION_EXCEPTION, f"{who}: denied by configured ACL")
        return None

    def is_admin(self, principal: str, read_only: bool = False) -> bool:
        try:
            short = self.settings.auth_to_local.short_name(principal)
        except NoMatchingRule:
            return False
        if WILDCARD in self.admins or short in self.admins:
            return True
        groups = set(self.groups_of(short))
        if not groups.isdisjoint(self.settings.administrator_groups):
            return True
        if not read_only:
            return False
        return (
            WILDCARD in self.readonly_admins or short in self.readonly_admins
            or not groups.isdisjoint(self.settings.readonly_administrator_groups)
        )

    def command(self, principal: str, command: str) -> Refusal | None:
        """The admin check of one StorageContainerLocationProtocol command (None: allowed)."""
        read_only = ADMIN_COMMANDS.get(command)
        if read_only is None:
            return None
        return self.administrator(principal, read_only)

    def reconfigure(self, principal: str, method: str) -> Refusal | None:
        """The admin check of one ReconfigureProtocol method (None: allowed)."""
        return self.administrator(principal, False) if method in RECONFIGURE_ADMIN_METHODS else None

    def administrator(self, principal: str, read_only: bool) -> Refusal | None:
        """Ozone's ``checkAdminAccess(user, isRead)``: None for an administrator, else its refusal."""
        if self.is_admin(principal, read_only):
            return None
        return Refusal(
            ACCESS_CONTROL_EXCEPTION, f"Access denied for user {principal}. SCM superuser privilege is required."
        )


def server_principal(configured: str, hostname: str) -> str:
    """Hadoop's ``_HOST`` expansion: ``name/_HOST@REALM`` with ``hostname`` lowercased (other forms as given)."""
    name = KerberosName.parse(configured)
    if name.host != "_HOST":
        return configured
    realm = f"@{name.realm}" if name.realm is not None else ""
    return f"{name.service}/{hostname.lower()}{realm}"
