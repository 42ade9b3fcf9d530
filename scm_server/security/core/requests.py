"""Validation of certificate requests before anything is signed (pure).

Who calls it: the CA server on the leader, for every enrolment (bootstrapping SCM, datanode, OM),
renewal and admin-signed client certificate. It decides *what* gets signed (subject, SANs,
profile) from validated request details; a CSR only contributes its public key and proves
possession of the private key (its signature). Nothing a CSR asks for in its extensions is copied.
It must not do I/O; the issued-certificate records it checks for duplicates are passed in.

Refusals are :class:`RequestRejected` with an Ozone result code name and a message saying what is
wrong and what to do; the signer turns them into gRPC errors and stores nothing.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping, Sequence
from datetime import datetime

from cryptography import x509
from cryptography.x509.oid import NameOID

from scm_server.security.core.certificates import (
    PKIError,
    Profile,
    PublicKey,
    SubjectInfo,
    check_key_strength,
    general_name,
)
from scm_server.security.core.identity import (
    Identity,
    Role,
    client_subject,
    datanode_subject,
    hostname_of,
    is_reserved_name,
    om_subject,
    role_bound,
    scm_subject,
)
from scm_server.security.core.member_names import MemberNames, canonical_name

_UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class RequestRejected(PKIError):
    """A certificate request that must not be signed. ``code`` is a ResultCodes name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclasses.dataclass(frozen=True)
class IssuedRecord:
    """What the duplicate checks need to know about an already issued certificate."""

    serial: str
    role: Role
    owner_id: str
    node_id: str
    not_after: datetime
    revoked: bool


@dataclasses.dataclass(frozen=True)
class Approved:
    subject: SubjectInfo
    public_key: PublicKey
    profile: Profile
    role: Role
    owner_id: str
    node_id: str = ""


def _csr_attr(csr: x509.CertificateSigningRequest, oid: x509.ObjectIdentifier) -> str:
    values = csr.subject.get_attributes_for_oid(oid)
    if not values:
        return ""
    value = values[0].value
    return value if isinstance(value, str) else value.decode("utf-8", errors="replace")


def requests_ca(csr: x509.CertificateSigningRequest) -> bool:
    try:
        return bool(csr.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def _public_key(csr: x509.CertificateSigningRequest) -> PublicKey:
    if not csr.is_signature_valid:
        raise RequestRejected("INVALID_CSR", "the CSR's signature does not verify (the requester must sign it with its key)")
    key = csr.public_key()
    try:
        check_key_strength(key)  # type: ignore[arg-type]
    except PKIError as exc:
        raise RequestRejected("INVALID_CSR", f"CSR: {exc}") from exc
    return key  # type: ignore[return-value]


def _check_cluster(
    csr: x509.CertificateSigningRequest, claimed: str, cluster_id: str, accept_unset: bool = False
) -> None:
    if accept_unset and _csr_attr(csr, NameOID.ORGANIZATION_NAME).lower() == "null" and (
        _csr_attr(csr, NameOID.ORGANIZATIONAL_UNIT_NAME).lower() == "null"
    ):
        # Ozone's datanode asks before it registered and writes O=null, OU=null (DefaultApprover's special case)
        return
    if claimed != cluster_id:
        raise RequestRejected(
            "INVALID_CLUSTER_ID",
            f"SCM ClusterId mismatch: the request is for cluster {claimed or '(none)'} but this SCM is in {cluster_id}",
        )
    in_csr = _csr_attr(csr, NameOID.ORGANIZATION_NAME)
    if in_csr != cluster_id:
        raise RequestRejected(
            "INVALID_CLUSTER_ID",
            f"the CSR's subject names cluster {in_csr or '(no O attribute)'}, this SCM is in {cluster_id}",
        )


def _check_host(host: str) -> None:
    try:
        general_name(host)
    except PKIError as exc:
        raise RequestRejected("INVALID_REQUEST", str(exc)) from exc


@dataclasses.dataclass(frozen=True)
class HostPolicy:
    """What host names and IPs a datanode or OM may put in its certificate.

    ``allow_loopback``: loopback addresses and ``localhost`` are accepted (a one-machine cluster,
    ``ozone.scm.security.enrollment.loopback.allowed=true``, set by ``ozone-scm local up``);
    ``scm_hosts``: the SCMs' configured host names, which no datanode or OM may claim;
    ``members``: every name of the ring's members and whose it is (:mod:`~scm_server.security.core.member_names`),
    which no certificate of another role may carry (host names, IPs, a client's CN)."""

    allow_loopback: bool = False
    scm_hosts: frozenset[str] = frozenset()
    members: MemberNames = dataclasses.field(default_factory=MemberNames)


def _norm(host: str) -> str:
    return host.strip().rstrip(".").lower()


def check_node_host(value: str, *, field: str, what: str, policy: HostPolicy, ip_only: bool = False) -> None:
    """Refuse a datanode's or OM's host name or IP that is empty, a wildcard, an unspecified, multicast
    or (outside local mode) loopback address, a name in the CA's reserved role space, or an SCM's host."""
    if not value:
        raise RequestRejected("INVALID_REQUEST", f"the {what} request has no {field}; give the node's host name")
    if "*" in value:
        raise RequestRejected("INVALID_REQUEST", f"{field} {value!r}: wildcards are not allowed in a {what} certificate")
    try:
        addr: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(value)
    except ValueError:
        addr = None
    if ip_only and addr is None:
        raise RequestRejected("INVALID_REQUEST", f"{field} {value!r} is not an IP address (e.g. 10.0.0.12)")
    _check_host(value)
    local_hint = (
        "; a one-machine test cluster sets ozone.scm.security.enrollment.loopback.allowed=true on the SCMs"
    )
    if addr is not None:
        mapped = getattr(addr, "ipv4_mapped", None)
        if mapped is not None:
            addr = mapped
        if addr.is_unspecified:
            raise RequestRejected(
                "INVALID_REQUEST", f"{field} {value!r} is the unspecified address; give the node's own address"
            )
        if addr.is_multicast:
            raise RequestRejected("INVALID_REQUEST", f"{field} {value!r} is a multicast address; give the node's own address")
        if addr.is_loopback and not policy.allow_loopback:
            raise RequestRejected(
                "INVALID_REQUEST",
                f"{field} {value!r} is a loopback address; a {what} certificate names an address others reach it at"
                + local_hint,
            )
    else:
        name = _norm(value)
        if is_reserved_name(name):
            raise RequestRejected(
                "PERMISSION_DENIED",
                f"{field} {value!r} is in the name space the CA reserves for role identities; use the node's host name",
            )
        if (name == "localhost" or name.endswith(".localhost")) and not policy.allow_loopback:
            raise RequestRejected(
                "INVALID_REQUEST", f"{field} {value!r} names the loopback interface" + local_hint
            )
    check_not_member_name(value, field=field, what=what, policy=policy)
    scm_hosts = {_norm(h) for h in policy.scm_hosts}
    if _norm(value) in scm_hosts and not (_is_loopback(value) and policy.allow_loopback):
        raise RequestRejected(
            "PERMISSION_DENIED",
            f"{field} {value!r} is the configured host of an SCM of this cluster; a {what} certificate cannot name it",
        )


def _is_loopback(value: str) -> bool:
    name = canonical_name(value)  # an IPv4-mapped IPv6 address as its IPv4 one
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_not_member_name(value: str, *, field: str, what: str, policy: HostPolicy) -> None:
    """Refuse a name of the SCM ring's members (``policy.members``) in a certificate of another role: a client that
    checks host names (a browser, curl, Prometheus) would take that certificate for the SCM's. A loopback name is
    exempt where loopback is allowed (one machine: every SCM and datanode is 127.0.0.1)."""
    whose = policy.members.owner_of(value)
    if whose is None or (policy.allow_loopback and _is_loopback(value)):
        return
    raise RequestRejected(
        "PERMISSION_DENIED",
        f"{field} {value!r} belongs to {whose}: a {what} certificate cannot carry a name of the SCM ring (a client "
        f"that checks host names would take it for that SCM); use the {what}'s own name",
    )


def check_not_enrolled(
    role: Role,
    owner_id: str,
    hostname: str,
    *,
    issued: Sequence[IssuedRecord],
    registered_host: str | None,
    now: datetime,
) -> None:
    """A datanode uuid (OM id) that holds a valid certificate, or is registered with a certificate that
    was never revoked, cannot be enrolled again: its certificate must be revoked first (an admin's
    ``ozone-scm admin cert revoke <serial>``). A registered node that never had one keeps its host."""
    what = "datanode" if role is Role.DATANODE else "OM"
    mine = [r for r in issued if r.role is role and r.owner_id == owner_id]
    for rec in mine:
        if not rec.revoked and rec.not_after > now:
            raise RequestRejected(
                "PERMISSION_DENIED",
                f"{what} {owner_id} already holds certificate serial {rec.serial} (valid until "
                f"{rec.not_after.isoformat()}); a second {what} with the same id is refused. If this is that "
                f"{what} and it lost its key, an administrator revokes the old certificate first: "
                f"`ozone-scm admin cert revoke {rec.serial}`",
            )
    if registered_host is None:
        return
    unrevoked = [r for r in mine if not r.revoked]
    if unrevoked:
        serials = " ".join(r.serial for r in unrevoked)
        raise RequestRejected(
            "PERMISSION_DENIED",
            f"{what} {owner_id} is registered and its expired certificate(s) {serials} were never revoked; an "
            f"administrator revokes them first: `ozone-scm admin cert revoke {serials}`",
        )
    if not mine and _norm(registered_host) != _norm(hostname):
        raise RequestRejected(
            "PERMISSION_DENIED",
            f"{what} {owner_id} is registered at host {registered_host!r}; a certificate for it can only name "
            "that host",
        )


def approve_scm_request(
    csr: x509.CertificateSigningRequest,
    *,
    cluster_id: str,
    claimed_cluster_id: str,
    node_id: str,
    scm_id: str,
    hostname: str,
    configured_hosts: Mapping[str, str],
    issued: Sequence[IssuedRecord],
    now: datetime,
) -> Approved:
    """A bootstrapping SCM's sub-CA request (Ozone's getSCMCertificate).

    The node must be configured on the signer (``ozone.scm.nodes.<svc>`` with its address), the
    cluster id must match, and no other live SCM may hold a certificate for the same node id.
    """
    key = _public_key(csr)
    _check_cluster(csr, claimed_cluster_id, cluster_id)
    if node_id not in configured_hosts:
        known = ", ".join(sorted(configured_hosts)) or "none"
        raise RequestRejected(
            "PERMISSION_DENIED",
            f"SCM node id {node_id!r} is not a configured SCM of this cluster (configured: {known}); add it to "
            "ozone.scm.nodes.<serviceId> and ozone.scm.address.<serviceId>.<nodeId> on the running SCMs first",
        )
    if configured_hosts[node_id] != hostname:
        raise RequestRejected(
            "PERMISSION_DENIED",
            f"SCM node {node_id} asks for a certificate for host {hostname!r} but is configured at "
            f"{configured_hosts[node_id]!r} (ozone.scm.address.<serviceId>.{node_id})",
        )
    _check_host(hostname)
    if not _UUID_RE.match(scm_id):
        raise RequestRejected("INVALID_REQUEST", f"scmId {scm_id!r} is not a UUID")
    for rec in issued:
        if (
            rec.role is Role.SCM
            and rec.node_id == node_id
            and rec.owner_id != scm_id
            and not rec.revoked
            and rec.not_after > now
        ):
            raise RequestRejected(
                "PERMISSION_DENIED",
                f"SCM node {node_id} already holds certificate serial {rec.serial} for scmId {rec.owner_id}; "
                "a second SCM with the same node id is refused. Decommission the old SCM "
                "(`ozone-scm admin scm decommission`, which revokes its certificate) or revoke serial "
                f"{rec.serial} first",
            )
    return Approved(scm_subject(hostname, scm_id, cluster_id), key, Profile.SUB_CA, Role.SCM, scm_id, node_id)


def approve_node_request(
    csr: x509.CertificateSigningRequest,
    *,
    role: Role,
    cluster_id: str,
    claimed_cluster_id: str,
    owner_id: str,
    hostname: str,
    ip: str = "",
    policy: HostPolicy | None = None,
    issued: Sequence[IssuedRecord] = (),
    registered_host: str | None = None,
    now: datetime | None = None,
    accept_unset_cluster: bool = False,
) -> Approved:
    """A datanode's (or OM's) request: never a CA, never an admin; the subject is ``dn@<host>``; the
    host and IP pass :func:`check_node_host`; the id is not already enrolled (:func:`check_not_enrolled`).
    ``accept_unset_cluster``: a CSR naming ``O=null, OU=null`` is accepted too (Ozone's own datanodes)."""
    if role not in (Role.DATANODE, Role.OM):
        raise RequestRejected("INVALID_REQUEST", f"{role.value} certificates are not issued through this call")
    key = _public_key(csr)
    what = "datanode" if role is Role.DATANODE else "OM"
    if requests_ca(csr):
        raise RequestRejected(
            "PERMISSION_DENIED",
            f"a {what} certificate request may not ask for CA rights (BasicConstraints CA=true); only SCMs hold CAs",
        )
    _check_cluster(csr, claimed_cluster_id, cluster_id, accept_unset_cluster)
    if not _ID_RE.match(owner_id):
        raise RequestRejected("INVALID_REQUEST", f"{what} id {owner_id!r} is not valid (letters, digits, '.', '_', '-')")
    policy = policy or HostPolicy()
    check_node_host(hostname, field="host name", what=what, policy=policy)
    if ip:
        check_node_host(ip, field="IP address", what=what, policy=policy, ip_only=True)
    if now is not None:
        check_not_enrolled(role, owner_id, hostname, issued=issued, registered_host=registered_host, now=now)
    subject = datanode_subject(hostname, owner_id, cluster_id, ip) if role is Role.DATANODE else om_subject(
        hostname, owner_id, cluster_id, ip
    )
    return Approved(subject, key, Profile.END_ENTITY, role, owner_id)


def approve_client_request(
    csr: x509.CertificateSigningRequest, *, cluster_id: str, policy: HostPolicy | None = None
) -> Approved:
    """A user's client certificate (signed when an administrator asks, or at ``--init``). The user name (the CN)
    may not be a name of the SCM ring (``policy.members``): a client certificate has no DNS name, so a TLS client
    checking host names reads its CN as one."""
    key = _public_key(csr)
    if requests_ca(csr):
        raise RequestRejected("PERMISSION_DENIED", "a client certificate request may not ask for CA rights")
    user = _csr_attr(csr, NameOID.COMMON_NAME)
    try:
        subject = client_subject(user, cluster_id)
    except PKIError as exc:
        raise RequestRejected("INVALID_CSR", str(exc)) from exc
    check_not_member_name(user, field="user name (CN)", what="client", policy=policy or HostPolicy())
    in_csr = _csr_attr(csr, NameOID.ORGANIZATION_NAME)
    if in_csr and in_csr != cluster_id:
        raise RequestRejected("INVALID_CLUSTER_ID", f"the CSR names cluster {in_csr}, this SCM is in {cluster_id}")
    return Approved(subject, key, Profile.END_ENTITY, Role.CLIENT, user)


def approve_renewal(
    csr: x509.CertificateSigningRequest,
    *,
    current: x509.Certificate,
    identity: Identity,
    cluster_id: str,
    policy: HostPolicy | None = None,
) -> Approved:
    """A renewal for the caller's own identity: same subject and host names, a (new) key from the CSR. A datanode,
    OM or client certificate naming what is now a name of the SCM ring (``policy.members``: an SCM added at a
    host a datanode had) is not renewed with it."""
    key = _public_key(csr)
    if identity.role is Role.ROOT_CA:
        raise RequestRejected("PERMISSION_DENIED", "the root CA is not renewed through SCM")
    if identity.role is not Role.SCM and requests_ca(csr):
        raise RequestRejected("PERMISSION_DENIED", f"a {identity.role.value} renewal may not ask for CA rights")
    if identity.cluster_id and identity.cluster_id != cluster_id:
        raise RequestRejected("INVALID_CLUSTER_ID", f"certificate of cluster {identity.cluster_id}, this SCM is in {cluster_id}")
    hosts: tuple[str, ...] = ()
    try:
        san = current.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        hosts = tuple(str(v) for v in san.get_values_for_type(x509.IPAddress)) + tuple(
            n for n in san.get_values_for_type(x509.DNSName) if not is_reserved_name(n)
        )
    except x509.ExtensionNotFound:
        pass
    if not hosts and identity.role is not Role.CLIENT:
        host = hostname_of(identity.common_name)
        hosts = (host,) if host else ()
    if identity.role is not Role.SCM:
        what = {Role.DATANODE: "datanode", Role.OM: "OM"}.get(identity.role, "client")
        names = (*hosts, identity.common_name) if identity.role is Role.CLIENT else hosts
        for name in names:
            try:
                check_not_member_name(name, field="the name", what=what, policy=policy or HostPolicy())
            except RequestRejected as exc:
                fix = (
                    "an administrator signs a certificate under another user name (`ozone-scm admin cert sign`)"
                    if identity.role is Role.CLIENT
                    else f"enrol again under the {what}'s own name (an administrator revokes serial "
                    f"{current.serial_number} first)"
                )
                raise RequestRejected(
                    exc.code, f"certificate serial {current.serial_number} cannot be renewed: {exc}; {fix}"
                ) from exc
    # the role SANs are re-derived from the role (a certificate issued before them gains them here)
    subject = role_bound(
        SubjectInfo(identity.common_name, identity.owner_id, cluster_id if identity.cluster_id else "", hosts),
        identity.role,
    )
    profile = Profile.SUB_CA if identity.role is Role.SCM else Profile.END_ENTITY
    # recorded owner: a user's name for client certificates (as SignCertificate records them), else OU
    owner = identity.common_name if identity.role is Role.CLIENT else identity.owner_id
    return Approved(subject, key, profile, identity.role, owner)


def check_renewable(serial: str, *, revoked: bool, superseded_by: str) -> None:
    """A certificate renews once: a revoked one never, one already renewed not again."""
    if superseded_by:
        raise RequestRejected(
            "PERMISSION_DENIED",
            f"certificate serial {serial} was already renewed (its successor is serial {superseded_by}); "
            "use the new certificate",
        )
    if revoked:
        raise RequestRejected(
            "PERMISSION_DENIED",
            f"certificate serial {serial} has been revoked and cannot be renewed; enrol again (an administrator's "
            "revocation stands)",
        )
