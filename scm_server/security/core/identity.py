"""Who a certificate names: roles, Ozone's subject conventions, and the identity of a TLS peer (pure).

Who calls it: the CA server (subjects of what it issues), the TLS interceptor (the identity of
the peer of every call, from its certificate), the CLI (``admin cert list``). It must not do I/O.

Subjects follow Ozone: ``CN=<prefix>@<hostname>, OU=<owner id>, O=<cluster id>`` with the
prefixes ``scm-root@`` (root CA), ``scm-sub@`` (an SCM's sub-CA), ``dn@`` (datanode), ``om@`` (OM).
A client (administrator, the Kubernetes operator) is ``CN=<user name>``. The role is read from the
certificate itself (below). The owner id is the SCM's scmUuid, the datanode's uuid, the OM's id; an
externally issued sub-CA may leave OU empty.

**Roles are bound by the CA, not chosen by requesters** (docs/security.md, "Identities and roles"). Every
certificate the CA issues carries a role URI SAN ``ozone-scm://<clusterID>/<role>/<owner>`` (role ``scm``,
``datanode``, ``om`` or ``client``; the cluster may be empty when the issuer does not know it yet, the
Kubernetes operator's first sub-CA). An SCM's certificate also carries the synthetic DNS name
:data:`SCM_ROLE_NAME` (``scm.ozone-scm.invalid``), and no other certificate carries any name in the reserved
space: gRPC Python clients cannot inspect the server's certificate, so they bind the role at the handshake by
verifying that name (``grpc.ssl_target_name_override``) instead of the host they dial. Requests never
contribute SANs (the signer builds them), so a requester cannot claim a role. Certificates issued before
role URIs existed fall back to the old reading: a CA certificate is an SCM (or the self-signed root),
``dn@``/``om@`` name datanodes/OMs, anything else is a user.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import urllib.parse
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
# The name every SCM certificate carries and every SCM client verifies (grpc.ssl_target_name_override).
SCM_ROLE_NAME = f"scm.{RESERVED_DNS_SUFFIX}"
ROLE_URI_SCHEME = "ozone-scm"


class Role(enum.Enum):
    ROOT_CA = "ROOT_CA"
    SCM = "SCM"
    OM = "OM"
    DATANODE = "DATANODE"
    CLIENT = "CLIENT"


_ROLE_PATHS = {"scm": "SCM", "datanode": "DATANODE", "om": "OM", "client": "CLIENT"}


@dataclasses.dataclass(frozen=True)
class RoleClaim:
    """What a role URI SAN says: role, cluster (may be empty), owner (scmUuid / node id, uuid, OM id, user)."""

    role: Role
    cluster_id: str
    owner_id: str


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


def role_uri(role: Role, cluster_id: str, owner_id: str) -> str:
    """``ozone-scm://<cluster>/<role>/<owner>``: the role SAN the CA writes (never the requester)."""
    path = next((k for k, v in _ROLE_PATHS.items() if v == role.value), None)
    if path is None:
        raise PKIError(f"no role URI for {role.value}")
    quote = urllib.parse.quote
    return f"{ROLE_URI_SCHEME}://{quote(cluster_id, safe='')}/{path}/{quote(owner_id, safe='')}"


def parse_role_uri(uri: str) -> RoleClaim | None:
    """The claim of a role URI, or None if ``uri`` is not one (another scheme)."""
    prefix = f"{ROLE_URI_SCHEME}://"
    if not uri.startswith(prefix):
        return None
    cluster, _, rest = uri[len(prefix):].partition("/")
    path, _, owner = rest.partition("/")
    role = _ROLE_PATHS.get(path)
    if role is None or "/" in owner:
        raise PKIError(f"malformed role URI {uri!r}: expected {prefix}<clusterID>/<scm|datanode|om|client>/<owner>")
    unquote = urllib.parse.unquote
    return RoleClaim(Role(role), unquote(cluster), unquote(owner))


def _san(cert: x509.Certificate) -> x509.SubjectAlternativeName | None:
    try:
        return cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None


def role_claims(cert: x509.Certificate) -> list[RoleClaim]:
    san = _san(cert)
    if san is None:
        return []
    out = []
    for uri in san.get_values_for_type(x509.UniformResourceIdentifier):
        claim = parse_role_uri(uri)
        if claim is not None:
            out.append(claim)
    return out


def reserved_names_of(cert: x509.Certificate) -> list[str]:
    """The DNS SANs of ``cert`` inside the reserved role name space."""
    san = _san(cert)
    if san is None:
        return []
    return [n for n in san.get_values_for_type(x509.DNSName) if is_reserved_name(n)]


def has_scm_role_name(cert: x509.Certificate) -> bool:
    """Does ``cert`` carry the SCM role name the clients verify? (Certificates issued before role-bound
    identities do not; they must be renewed or re-issued.)"""
    return SCM_ROLE_NAME in reserved_names_of(cert)


def role_claim(cert: x509.Certificate) -> RoleClaim | None:
    """The one role the CA bound into ``cert``; None for a certificate issued before role URIs.

    Raises PKIError if the certificate contradicts itself (two roles, an SCM role on a non-CA certificate
    or a datanode role on a CA, a reserved DNS name on anything but an SCM), which no CA of ours issues."""
    claims = role_claims(cert)
    names = reserved_names_of(cert)
    if not claims:
        if names:
            raise PKIError(f"certificate serial {cert.serial_number} carries {names[0]} but no role URI")
        return None
    roles = {c.role for c in claims}
    if len(roles) > 1:
        raise PKIError(f"certificate serial {cert.serial_number} claims several roles: "
                       f"{', '.join(sorted(r.value for r in roles))}")
    claim = claims[0]
    ca = is_ca(cert)
    if (claim.role is Role.SCM) != ca:
        raise PKIError(f"certificate serial {cert.serial_number} claims role {claim.role.value} but is "
                       f"{'' if ca else 'not '}a CA certificate")
    if claim.role is not Role.SCM and names:
        raise PKIError(f"certificate serial {cert.serial_number} of role {claim.role.value} carries the reserved "
                       f"name {names[0]}")
    return claim


def role_of(cert: x509.Certificate) -> Role:
    if is_ca(cert) and is_self_signed(cert):
        return Role.ROOT_CA
    claim = role_claim(cert)
    if claim is not None:
        return claim.role
    # issued before role URIs: the old reading (the CN prefixes are set by the CA, never by a requester)
    cn = _attr(cert.subject, NameOID.COMMON_NAME)
    if is_ca(cert):
        return Role.SCM
    if cn.startswith(DATANODE_PREFIX):
        return Role.DATANODE
    if cn.startswith(OM_PREFIX):
        return Role.OM
    return Role.CLIENT


def identity_of(cert: x509.Certificate) -> Identity:
    """The identity ``cert`` proves; PKIError if it contradicts itself (see :func:`role_claim`)."""
    claim = None if (is_ca(cert) and is_self_signed(cert)) else role_claim(cert)
    owner = _attr(cert.subject, NameOID.ORGANIZATIONAL_UNIT_NAME) or (claim.owner_id if claim else "")
    cluster = _attr(cert.subject, NameOID.ORGANIZATION_NAME) or (claim.cluster_id if claim else "")
    if claim is not None and claim.cluster_id and cluster and claim.cluster_id != cluster:
        raise PKIError(f"certificate serial {cert.serial_number} names cluster {cluster} (O=) but its role URI "
                       f"names {claim.cluster_id}")
    return Identity(
        role=role_of(cert),
        common_name=_attr(cert.subject, NameOID.COMMON_NAME),
        owner_id=owner,
        cluster_id=cluster,
        serial=cert.serial_number,
        not_after=cert.not_valid_after_utc,
        issuer=cert.issuer.rfc4514_string(),
    )


def hostname_of(common_name: str) -> str:
    return common_name.split("@", 1)[1] if "@" in common_name else ""


def root_ca_subject(hostname: str, scm_id: str, cluster_id: str) -> SubjectInfo:
    return SubjectInfo(f"{SCM_ROOT_CA_PREFIX}{hostname}", scm_id, cluster_id, (hostname,))


def role_bound(subject: SubjectInfo, role: Role) -> SubjectInfo:
    """``subject`` with the role SANs only the CA adds: the role URI, and for an SCM the SCM role name."""
    owner = subject.common_name if role is Role.CLIENT else subject.owner_id
    return dataclasses.replace(
        subject,
        role_names=(SCM_ROLE_NAME,) if role is Role.SCM else (),
        uris=(role_uri(role, subject.cluster_id, owner),),
    )


def scm_subject(hostname: str, scm_id: str, cluster_id: str) -> SubjectInfo:
    return role_bound(SubjectInfo(f"{SCM_SUB_CA_PREFIX}{hostname}", scm_id, cluster_id, (hostname,)), Role.SCM)


def datanode_subject(hostname: str, uuid: str, cluster_id: str, ip: str = "") -> SubjectInfo:
    hosts = (hostname, ip) if ip and ip != hostname else (hostname,)
    return role_bound(SubjectInfo(f"{DATANODE_PREFIX}{hostname}", uuid, cluster_id, hosts), Role.DATANODE)


def om_subject(hostname: str, om_id: str, cluster_id: str, ip: str = "") -> SubjectInfo:
    hosts = (hostname, ip) if ip and ip != hostname else (hostname,)
    return role_bound(SubjectInfo(f"{OM_PREFIX}{hostname}", om_id, cluster_id, hosts), Role.OM)


def client_subject(user: str, cluster_id: str = "") -> SubjectInfo:
    check_user_name(user)
    return role_bound(SubjectInfo(user, "", cluster_id, ()), Role.CLIENT)


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
