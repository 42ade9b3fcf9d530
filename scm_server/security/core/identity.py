"""Who a certificate names: roles, Ozone's subject conventions, and the identity of a TLS peer (pure).

Who calls it: the CA server (subjects of what it issues), the TLS interceptor (the identity of
the peer of every call, from its certificate), the CLI (``admin cert list``). It must not do I/O.

Subjects follow Ozone: ``CN=<prefix>@<hostname>, OU=<owner id>, O=<cluster id>`` with the
prefixes ``scm-root@`` (root CA), ``scm-sub@`` (an SCM's sub-CA), ``dn@`` (datanode), ``om@`` (OM).
A client (administrator, the Kubernetes operator) is ``CN=<user name>``. The role is read from the
certificate itself: a CA certificate is an SCM (or the self-signed root), ``dn@``/``om@`` name
datanodes/OMs, anything else is a user. The owner id is the SCM's scmUuid, the datanode's uuid, the
OM's id; an externally issued sub-CA may leave OU empty.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from datetime import datetime

from cryptography import x509
from cryptography.x509.oid import NameOID

from scm_server.security.core.certificates import PKIError, SubjectInfo, is_ca, is_self_signed

SCM_ROOT_CA_PREFIX = "scm-root@"
SCM_SUB_CA_PREFIX = "scm-sub@"
DATANODE_PREFIX = "dn@"
OM_PREFIX = "om@"
_USER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

# Synthetic DNS names under this suffix (``.invalid`` never resolves, RFC 6761) name roles, not hosts.
# Only the CA puts them into certificates, and only into the certificates of the role they name; a
# requested host name inside this space is refused.
RESERVED_DNS_SUFFIX = "ozone-scm.invalid"


class Role(enum.Enum):
    ROOT_CA = "ROOT_CA"
    SCM = "SCM"
    OM = "OM"
    DATANODE = "DATANODE"
    CLIENT = "CLIENT"


@dataclasses.dataclass(frozen=True)
class Identity:
    """The authenticated peer of a call, as its certificate says."""

    role: Role
    common_name: str
    owner_id: str
    cluster_id: str
    serial: int
    not_after: datetime
    issuer: str = ""

    @property
    def name(self) -> str:
        """A user name for CLIENT identities; ``<role>:<owner or cn>`` for services (messages, audit)."""
        if self.role is Role.CLIENT:
            return self.common_name
        return f"{self.role.value.lower()}:{self.owner_id or self.common_name}"

    @property
    def serial_id(self) -> str:
        return str(self.serial)


def _attr(name: x509.Name, oid: x509.ObjectIdentifier) -> str:
    values = name.get_attributes_for_oid(oid)
    if not values:
        return ""
    value = values[0].value
    return value if isinstance(value, str) else value.decode("utf-8", errors="replace")


def role_of(cert: x509.Certificate) -> Role:
    cn = _attr(cert.subject, NameOID.COMMON_NAME)
    if is_ca(cert):
        return Role.ROOT_CA if is_self_signed(cert) else Role.SCM
    if cn.startswith(DATANODE_PREFIX):
        return Role.DATANODE
    if cn.startswith(OM_PREFIX):
        return Role.OM
    return Role.CLIENT


def identity_of(cert: x509.Certificate) -> Identity:
    return Identity(
        role=role_of(cert),
        common_name=_attr(cert.subject, NameOID.COMMON_NAME),
        owner_id=_attr(cert.subject, NameOID.ORGANIZATIONAL_UNIT_NAME),
        cluster_id=_attr(cert.subject, NameOID.ORGANIZATION_NAME),
        serial=cert.serial_number,
        not_after=cert.not_valid_after_utc,
        issuer=cert.issuer.rfc4514_string(),
    )


def hostname_of(common_name: str) -> str:
    return common_name.split("@", 1)[1] if "@" in common_name else ""


def root_ca_subject(hostname: str, scm_id: str, cluster_id: str) -> SubjectInfo:
    return SubjectInfo(f"{SCM_ROOT_CA_PREFIX}{hostname}", scm_id, cluster_id, (hostname,))


def scm_subject(hostname: str, scm_id: str, cluster_id: str) -> SubjectInfo:
    return SubjectInfo(f"{SCM_SUB_CA_PREFIX}{hostname}", scm_id, cluster_id, (hostname,))


def datanode_subject(hostname: str, uuid: str, cluster_id: str, ip: str = "") -> SubjectInfo:
    hosts = (hostname, ip) if ip and ip != hostname else (hostname,)
    return SubjectInfo(f"{DATANODE_PREFIX}{hostname}", uuid, cluster_id, hosts)


def om_subject(hostname: str, om_id: str, cluster_id: str, ip: str = "") -> SubjectInfo:
    hosts = (hostname, ip) if ip and ip != hostname else (hostname,)
    return SubjectInfo(f"{OM_PREFIX}{hostname}", om_id, cluster_id, hosts)


def client_subject(user: str, cluster_id: str = "") -> SubjectInfo:
    check_user_name(user)
    return SubjectInfo(user, "", cluster_id, ())


def is_reserved_name(host: str) -> bool:
    """True if ``host`` falls in the name space the CA keeps for role identities."""
    name = host.strip().rstrip(".").lower()
    return name == RESERVED_DNS_SUFFIX or name.endswith("." + RESERVED_DNS_SUFFIX)


def check_user_name(user: str) -> None:
    if not _USER_RE.match(user):
        raise PKIError(
            f"{user!r} is not a valid user name for a client certificate: letters, digits, '.', '_' and '-', "
            "at most 64 characters, no '@' (names with '@' are reserved for services)"
        )
