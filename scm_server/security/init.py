"""What ``scm --init`` and ``scm --bootstrap`` do when ``ozone.security.enabled=true`` (Ozone's
``HASecurityUtils.initializeSecurity``), and how an SCM finds its CA material at start.

Who calls it: :mod:`scm_server.ha.bootstrap` (init/bootstrap) and the SCM daemon (loading). It
writes only under this SCM's metadata directory (the keystore); it never copies a root key.

CA modes (decided by which keys are set, see :class:`~scm_server.conf.security.CAMode`):

* ``scm`` (Ozone's default): ``--init`` on the primordial SCM creates a self-signed root CA
  (serial 1, ``<metadata>/scm/ca``) and its own sub-CA signed by it (serial 2,
  ``<metadata>/scm/sub-ca``). ``--bootstrap`` elsewhere generates a key pair and a CSR and has the
  leader sign it (root CA if the leader holds it, else the leader's sub-CA; HDDS-8286).
* ``external-root`` (Ozone's ``hdds.x509.rootca.{certificate,private.key}.file``): as ``scm`` but
  ``--init`` uses the given root instead of creating one; the root key stays in its file.
* ``operator`` (ours, HDDS-16035): ``hdds.x509.subca.{certificate,private.key}.file`` hold a sub-CA
  issued outside SCM (by the Kubernetes operator, which keeps the root key);
  ``hdds.x509.rootca.certificate.file`` is the trust anchor. ``--init`` and ``--bootstrap`` only
  validate the files (chain to the root, key matches, cluster, serial range): no SCM needs another
  to join, and no root key exists in the cluster.

Both commands are idempotent, and a crash half-way is completed on the next run: a bootstrapping
SCM that already holds a sub-CA certificate for this cluster keeps it (and its scmUuid) instead of
asking for a second one, which the signer would refuse as a duplicate node id.

At ``--init`` the primordial also signs the CSRs listed in ``ozone.scm.security.admin.csr.files``
(administrators' client certificates in CA mode ``scm``). Those are signed before Raft exists, so
they get random 128-bit serials (outside the ``CertificateId`` sequence) and wait under
``<metadata>/scm/init-issued/`` until the primordial's first leadership records them in
``validCerts``; anyone can then fetch theirs over the security protocol by public key
(``ozone-scm cert fetch``). Nobody copies a private key out of an SCM.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509

from scm_server.conf import OzoneConfiguration, SCMNodeDetails, ports
from scm_server.conf.security import CAMode, SecurityConfig
from scm_server.exceptions import ConfigError, SCMError
from scm_server.proto import scm_security_pb2
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids
from scm_server.security.core import requests as reqs
from scm_server.security.core.member_names import member_names
from scm_server.security.keystore import (
    KeyStore,
    Material,
    atomic_write,
    load_certificate_file,
    load_private_key_file,
    read_secret,
    split_chain,
)

LOG = logging.getLogger(__name__)

EXTERNAL_SERIAL_FLOOR = pki.EXTERNAL_SERIAL_FLOOR
ROOT_CA_SERIAL = 1
PRIMORDIAL_SUB_CA_SERIAL = 2
INIT_ISSUED_DIR = "init-issued"
RETIRED_MEMBERS_FILE = "retired-members.json"
_UUID_RE = re.compile(r"^[0-9a-fA-F-]{36}$")

KeyGenerator = Callable[[pki.KeySpec], pki.PrivateKey]


class SecurityInitError(SCMError):
    """Security cannot be initialised; the message says why and what to do."""


def key_spec(config: SecurityConfig) -> pki.KeySpec:
    return pki.KeySpec(config.key_algorithm.upper(), config.key_length, config.signature_algorithm)


def scm_dir(metadata_dir: Path) -> Path:
    return Path(metadata_dir) / "scm"


def sub_ca_dir(metadata_dir: Path) -> Path:
    return scm_dir(metadata_dir) / "sub-ca"


def root_ca_dir(metadata_dir: Path) -> Path:
    return scm_dir(metadata_dir) / "ca"


def sub_ca_store(metadata_dir: Path, config: SecurityConfig) -> KeyStore:
    return KeyStore(sub_ca_dir(metadata_dir), config)


def root_ca_store(metadata_dir: Path, config: SecurityConfig) -> KeyStore:
    return KeyStore(root_ca_dir(metadata_dir), config)


def init_issued_dir(metadata_dir: Path) -> Path:
    return scm_dir(metadata_dir) / INIT_ISSUED_DIR


def retired_members_path(metadata_dir: Path) -> Path:
    return scm_dir(metadata_dir) / RETIRED_MEMBERS_FILE


@dataclasses.dataclass(frozen=True)
class RetiredMembers:
    """SCMs a quorum recovery removed from the ring: their SCM certificates are revoked by the recovered
    ring's leader (``scm --recover`` writes this note, the leader removes it once it has revoked them)."""

    scm_ids: tuple[str, ...]
    node_ids: tuple[str, ...]


def note_retired_members(metadata_dir: Path, scm_ids: Sequence[str], node_ids: Sequence[str]) -> Path:
    path = retired_members_path(metadata_dir)
    earlier = load_retired_members(metadata_dir)  # a second recovery before the first note was acted on
    scms = list(dict.fromkeys([*(earlier.scm_ids if earlier else ()), *scm_ids]))
    nodes = list(dict.fromkeys([*(earlier.node_ids if earlier else ()), *node_ids]))
    atomic_write(path, json.dumps({"scmIds": scms, "nodeIds": nodes}, indent=2).encode("ascii"))
    return path


def load_retired_members(metadata_dir: Path) -> RetiredMembers | None:
    path = retired_members_path(metadata_dir)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        LOG.error("%s is unreadable (%s): the removed members' certificates are not revoked; revoke them with "
                  "`admin cert revoke` and delete the file", path, exc)
        return None
    return RetiredMembers(tuple(str(x) for x in raw.get("scmIds", [])), tuple(str(x) for x in raw.get("nodeIds", [])))


def clear_retired_members(metadata_dir: Path) -> None:
    retired_members_path(metadata_dir).unlink(missing_ok=True)


def _now() -> datetime:
    return datetime.now(UTC)


# ---------------------------------------------------------------------------------------------
# loading (daemon start and reloads)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SCMCAMaterial:
    material: Material  # this SCM's sub-CA: key, chain, trusted roots
    root_key: pki.PrivateKey | None  # held only by the primordial (scm mode) or with an external root key


def _configured_root(config: SecurityConfig) -> list[x509.Certificate]:
    if not config.rootca_certificate_file:
        return []
    return load_certificate_file(config.rootca_certificate_file, "hdds.x509.rootca.certificate.file")


def load_operator_sub_ca(config: SecurityConfig, *, cluster_id: str | None, now: datetime) -> Material:
    """CA mode operator: the externally issued sub-CA files, validated against the trust anchor."""
    assert config.subca_certificate_file and config.subca_private_key_file
    certs = load_certificate_file(config.subca_certificate_file, "hdds.x509.subca.certificate.file")
    key = load_private_key_file(config.subca_private_key_file, "hdds.x509.subca.private.key.file")
    roots = _configured_root(config)
    chain, embedded = split_chain(certs)
    if not chain:
        raise ConfigError("hdds.x509.subca.certificate.file holds no sub-CA certificate (only self-signed ones)")
    for extra in embedded:  # trust comes only from the configured anchor, never from the file itself
        if extra not in roots:
            raise ConfigError(
                f"hdds.x509.subca.certificate.file carries a root CA certificate ({pki.describe(extra)}) that is not "
                "the one in hdds.x509.rootca.certificate.file; the sub-CA does not chain to the trust anchor"
            )
    sub = chain[0]
    if not pki.key_matches(sub, key):
        raise ConfigError(
            f"hdds.x509.subca.private.key.file={config.subca_private_key_file} does not match the certificate in "
            f"hdds.x509.subca.certificate.file={config.subca_certificate_file}"
        )
    if not pki.is_ca(sub):
        raise ConfigError(
            f"hdds.x509.subca.certificate.file: {pki.describe(sub)} is not a CA certificate (BasicConstraints CA=true "
            "is needed: the SCM signs datanode certificates with it)"
        )
    try:
        pki.verify_ca_chain(list(chain), roots, now)
    except pki.PKIError as exc:
        raise ConfigError(f"hdds.x509.subca.certificate.file does not chain to hdds.x509.rootca.certificate.file: {exc}") from exc
    for cert in (*chain, *roots):
        _check_external_serial(cert, "hdds.x509.subca.certificate.file / hdds.x509.rootca.certificate.file")
    try:
        ident = ids.identity_of(sub)
    except pki.PKIError as exc:
        raise ConfigError(f"hdds.x509.subca.certificate.file: {exc}") from exc
    if ident.role is not ids.Role.SCM:
        raise ConfigError(f"hdds.x509.subca.certificate.file: {pki.describe(sub)} is a {ident.role.value} certificate, "
                          "not an SCM's")
    if cluster_id and ident.cluster_id and ident.cluster_id != cluster_id:
        raise ConfigError(
            f"hdds.x509.subca.certificate.file names cluster {ident.cluster_id} (O=) but this SCM is in {cluster_id}"
        )
    if config.scm_role_check and not ids.has_scm_role_name(sub):
        raise ConfigError(legacy_certificate_error(sub, "hdds.x509.subca.certificate.file", operator=True))
    return Material(key, tuple(chain), tuple(roots))


def legacy_certificate_error(cert: x509.Certificate, where: str, *, operator: bool = False) -> str:
    """The one-line error for an SCM certificate issued before role-bound identities."""
    fix = (
        "have the Kubernetes operator re-issue it (an operator of this version does so for every member "
        "certificate without it)"
        if operator
        else "start the SCM holding the root CA key first (it re-issues its own at start), or set "
        "ozone.scm.security.role.check=false on every SCM and client until each SCM has renewed it at start"
    )
    return (
        f"{where}: the SCM certificate {pki.describe(cert)} predates role-bound identities: it lacks the SCM role "
        f"name {ids.SCM_ROLE_NAME} that every client now verifies, so no client would accept this SCM; {fix} "
        "(docs/security.md, \"Identities and roles\")"
    )


def reissue_with_role_names(
    store: KeyStore, material: Material, root_key: pki.PrivateKey, config: SecurityConfig, now: datetime
) -> Material:
    """Re-sign this SCM's sub-CA (same key, subject and host names) with the root key it holds, adding the
    role SANs. The serial is random in the external range (no Raft yet at start), as for ``--init``'s
    client certificates."""
    old = material.certificate
    ident = ids.identity_of(old)
    root = next(r for r in material.roots if pki.key_matches(r, root_key))
    hosts = _host_names(old) or ((ids.hostname_of(ident.common_name),) if ids.hostname_of(ident.common_name) else ())
    subject = ids.role_bound(pki.SubjectInfo(ident.common_name, ident.owner_id, ident.cluster_id, hosts), ids.Role.SCM)
    new = pki.issue_certificate(
        subject, old.public_key(), issuer=root, issuer_key=root_key,  # type: ignore[arg-type]
        serial=pki.EXTERNAL_SERIAL_FLOOR + secrets.randbits(62), now=now,
        lifetime=max(old.not_valid_after_utc - now, timedelta(days=1)), profile=pki.Profile.SUB_CA,
        spec=key_spec(config),
    )
    store.save(material.key, [new], [root])
    LOG.warning("re-issued this SCM's sub-CA %s with its role names as %s", pki.describe(old), pki.describe(new))
    return Material(material.key, (new,), material.roots)


def _host_names(cert: x509.Certificate) -> tuple[str, ...]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    return tuple(str(v) for v in san.get_values_for_type(x509.IPAddress)) + tuple(
        n for n in san.get_values_for_type(x509.DNSName) if not ids.is_reserved_name(n)
    )


def _check_external_serial(cert: x509.Certificate, what: str) -> None:
    if cert.serial_number < EXTERNAL_SERIAL_FLOOR:
        raise ConfigError(
            f"{what}: {pki.describe(cert)} has a serial in the range SCM uses for its own certificates; externally "
            "issued certificates need random serials of at least 64 bits (RFC 5280 style, e.g. "
            "x509.random_serial_number() or openssl's default)"
        )


def load_scm_material(
    config: SecurityConfig, metadata_dir: Path, cluster_id: str | None, *, now: datetime
) -> SCMCAMaterial:
    """This SCM's CA material as it starts (clear errors naming the files or keys to fix). ``now`` is the
    caller's clock (the daemon's): an external sub-CA is checked for expiry at it, a re-issue is stamped with it."""
    if config.ca_mode is CAMode.OPERATOR:
        return SCMCAMaterial(load_operator_sub_ca(config, cluster_id=cluster_id, now=now), None)
    store = sub_ca_store(metadata_dir, config)
    if not store.exists():
        raise ConfigError(
            f"security is enabled but this SCM has no sub-CA certificate under {store.base}; run "
            "`ozone-scm scm --init` (primordial) or `ozone-scm scm --bootstrap` with ozone.security.enabled=true"
        )
    material = store.load(extra_roots=_configured_root(config))
    if not material.roots:
        raise ConfigError(f"no root CA certificate under {store.certs_dir} and hdds.x509.rootca.certificate.file unset")
    root_key: pki.PrivateKey | None = None
    if config.ca_mode is CAMode.EXTERNAL_ROOT and config.rootca_private_key_file:
        root_key = load_private_key_file(config.rootca_private_key_file, "hdds.x509.rootca.private.key.file")
    else:
        rstore = root_ca_store(metadata_dir, config)
        if rstore.exists():
            root_key = rstore.load(root_ca=True).key
    if root_key is not None and not any(pki.key_matches(r, root_key) for r in material.roots):
        raise ConfigError("the root CA private key held by this SCM does not match its root CA certificate")
    ident = ids.identity_of(material.certificate)
    if cluster_id and ident.cluster_id and ident.cluster_id != cluster_id:
        raise ConfigError(
            f"the sub-CA certificate under {store.base} is for cluster {ident.cluster_id}, but VERSION says {cluster_id}"
        )
    if config.scm_role_check and not ids.has_scm_role_name(material.certificate):
        if root_key is None:
            raise ConfigError(legacy_certificate_error(material.certificate, str(store.certificate_path)))
        material = reissue_with_role_names(store, material, root_key, config, now)
    return SCMCAMaterial(material, root_key)


# ---------------------------------------------------------------------------------------------
# scm --init (primordial)
# ---------------------------------------------------------------------------------------------


def initialize_primordial(
    config: SecurityConfig,
    *,
    metadata_dir: Path,
    cluster_id: str,
    scm_id: str,
    hostname: str,
    now: datetime | None = None,
    key_generator: KeyGenerator = pki.generate_key,
    member_hosts: Mapping[str, str] | None = None,
) -> str:
    """Create (or validate) the primordial SCM's CA material; returns its ``scmCertSerialId``. ``member_hosts``:
    the configured SCMs (node id -> host), whose names no administrator's certificate signed here may carry."""
    now = now or _now()
    if config.ca_mode is CAMode.OPERATOR:
        material = load_operator_sub_ca(config, cluster_id=cluster_id, now=now)
        if config.admin_csr_files:
            LOG.warning("CA mode operator: ignoring ozone.scm.security.admin.csr.files (the operator signs admins)")
        LOG.info("security: using the externally issued sub-CA %s", pki.describe(material.certificate))
        return material.serial_id
    spec = key_spec(config)
    store = sub_ca_store(metadata_dir, config)
    if store.exists():
        existing = store.load(extra_roots=_configured_root(config))
        ident = ids.identity_of(existing.certificate)
        if ident.cluster_id == cluster_id and ident.owner_id == scm_id:
            LOG.info("security already initialised: sub-CA %s", pki.describe(existing.certificate))
            return existing.serial_id
        LOG.warning("replacing a sub-CA left by an earlier, unfinished --init (%s)", pki.describe(existing.certificate))
    if config.ca_mode is CAMode.EXTERNAL_ROOT:
        assert config.rootca_certificate_file and config.rootca_private_key_file
        roots = load_certificate_file(config.rootca_certificate_file, "hdds.x509.rootca.certificate.file")
        root = roots[0]
        root_key = load_private_key_file(config.rootca_private_key_file, "hdds.x509.rootca.private.key.file")
        if not pki.key_matches(root, root_key):
            raise ConfigError("hdds.x509.rootca.private.key.file does not match hdds.x509.rootca.certificate.file")
        if not pki.is_ca(root) or not pki.is_self_signed(root):
            raise ConfigError(f"hdds.x509.rootca.certificate.file: {pki.describe(root)} is not a self-signed CA certificate")
        _check_external_serial(root, "hdds.x509.rootca.certificate.file")
        try:
            pki.check_validity(root, now, "root CA certificate")
        except pki.PKIError as exc:
            raise ConfigError(f"hdds.x509.rootca.certificate.file: {exc}") from exc
    else:
        rstore = root_ca_store(metadata_dir, config)
        root_key = key_generator(spec)
        root = pki.build_root_ca(
            root_key,
            ids.root_ca_subject(hostname, scm_id, cluster_id),
            serial=ROOT_CA_SERIAL,
            now=now,
            lifetime=config.max_duration,
            spec=spec,
        )
        rstore.save(root_key, [root], [root])
    sub_key = key_generator(spec)
    sub = pki.issue_certificate(
        ids.scm_subject(hostname, scm_id, cluster_id),
        sub_key.public_key(),
        issuer=root,
        issuer_key=root_key,
        serial=PRIMORDIAL_SUB_CA_SERIAL,
        now=now,
        lifetime=config.default_duration,
        profile=pki.Profile.SUB_CA,
        spec=spec,
    )
    store.save(sub_key, [sub], [root])
    LOG.info("security initialised: root CA %s, sub-CA %s", pki.describe(root), pki.describe(sub))
    sign_init_csrs(config, metadata_dir=metadata_dir, cluster_id=cluster_id, issuer=sub, issuer_key=sub_key, now=now,
                   member_hosts=member_hosts)
    return str(sub.serial_number)


def sign_init_csrs(
    config: SecurityConfig,
    *,
    metadata_dir: Path,
    cluster_id: str,
    issuer: x509.Certificate,
    issuer_key: pki.PrivateKey,
    now: datetime,
    member_hosts: Mapping[str, str] | None = None,
) -> list[x509.Certificate]:
    """Sign ``ozone.scm.security.admin.csr.files`` (client certificates of administrators), none named as an SCM
    (``member_hosts``, node id -> host, and the names of the issuing sub-CA)."""
    out = []
    spec = key_spec(config)
    owner = ids.identity_of(issuer).owner_id
    policy = reqs.HostPolicy(
        allow_loopback=config.enrollment_loopback_allowed,
        members=member_names(member_hosts or {}, [(owner, issuer)]),
    )
    for path in config.admin_csr_files:
        try:
            csr = pki.load_csr(Path(path).read_bytes())
        except OSError as exc:
            raise ConfigError(f"ozone.scm.security.admin.csr.files: cannot read {path}: {exc}") from exc
        except pki.PKIError as exc:
            raise ConfigError(f"ozone.scm.security.admin.csr.files: {path}: {exc}") from exc
        try:
            approved = reqs.approve_client_request(csr, cluster_id=cluster_id, policy=policy)
        except reqs.RequestRejected as exc:
            raise ConfigError(f"ozone.scm.security.admin.csr.files: {path}: {exc}") from exc
        serial = EXTERNAL_SERIAL_FLOOR + secrets.randbits(126)
        cert = pki.issue_certificate(
            approved.subject,
            approved.public_key,
            issuer=issuer,
            issuer_key=issuer_key,
            serial=serial,
            now=now,
            lifetime=config.default_duration,
            profile=approved.profile,
            spec=spec,
        )
        atomic_write(init_issued_dir(metadata_dir) / f"{serial}.crt", pki.cert_pem(cert).encode("ascii"))
        LOG.info("signed the client certificate of %s (serial %d) from %s", approved.owner_id, serial, path)
        out.append(cert)
    return out


def pending_init_certificates(metadata_dir: Path) -> list[x509.Certificate]:
    d = init_issued_dir(metadata_dir)
    if not d.is_dir():
        return []
    return [pki.load_certificate(p.read_bytes(), str(p)) for p in sorted(d.glob("*.crt"))]


# ---------------------------------------------------------------------------------------------
# scm --bootstrap
# ---------------------------------------------------------------------------------------------


def security_addresses(conf: OzoneConfiguration, nodes: Sequence[SCMNodeDetails]) -> list[str]:
    """``host:ozone.scm.security.service.grpc.port`` of the given SCMs (per-node suffix honoured): the security
    protocol over gRPC (TLS)."""
    out = []
    for n in nodes:
        key = ports.SECURITY_GRPC.port_key
        port = conf.get_int_for_node(key, n.service_id, n.node_id) or ports.SECURITY_GRPC.default_port
        out.append(f"{n.host}:{port}")
    return out


def trust_roots_for(config: SecurityConfig, metadata_dir: Path) -> list[x509.Certificate]:
    """Roots this node already trusts: the configured anchor, else what an earlier bootstrap stored."""
    roots = _configured_root(config)
    if roots:
        return roots
    store = sub_ca_store(metadata_dir, config)
    return [pki.load_certificate(p.read_bytes(), str(p)) for p in store.root_paths()]


def enrollment_secret(config: SecurityConfig, role: str) -> bytes | None:
    path = config.enrollment_secret_file(role)
    if path is None:
        return None
    return read_secret(path, f"ozone.scm.security.enrollment.{role}.secret.file")


@dataclasses.dataclass(frozen=True)
class SecureScmInfo:
    cluster_id: str
    scm_id: str
    answered_by: str


def fetch_scm_info_secure(
    conf: OzoneConfiguration,
    config: SecurityConfig,
    peers: Sequence[SCMNodeDetails],
    metadata_dir: Path,
    rounds: int,
) -> SecureScmInfo | None:
    """GetScmInfo through the peers' security ports (trust established as in cert_client); ``conf`` gives
    the peers' security ports, ``config`` the command's parsed security configuration."""
    from scm_server.security.cert_client import SecurityProtocolClient

    client = SecurityProtocolClient(
        security_addresses(conf, peers),
        roots=trust_roots_for(config, metadata_dir),
        role="scm",
        secret=enrollment_secret(config, "scm"),
        rounds=rounds,
        rpc_timeout=3.0,
        scm_role_check=config.scm_role_check,
    )
    try:
        trusted = asyncio.run(client.establish_trust())
    except SCMError as exc:
        LOG.warning("could not reach any SCM security service: %s", exc)
        return None
    return SecureScmInfo(trusted.info.clusterId, trusted.info.scmId, trusted.address)


def existing_bootstrap_identity(metadata_dir: Path, config: SecurityConfig, cluster_id: str) -> str | None:
    """The scmUuid of a sub-CA an interrupted bootstrap already obtained for this cluster."""
    if config.ca_mode is CAMode.OPERATOR:
        return None
    store = sub_ca_store(metadata_dir, config)
    if not store.exists():
        return None
    try:
        material = store.load()
    except ConfigError:
        return None
    ident = ids.identity_of(material.certificate)
    if ident.cluster_id == cluster_id and _UUID_RE.match(ident.owner_id):
        return ident.owner_id
    return None


def initialize_bootstrap(
    conf: OzoneConfiguration,
    config: SecurityConfig,
    *,
    metadata_dir: Path,
    cluster_id: str,
    scm_id: str,
    node: SCMNodeDetails,
    peers: Sequence[SCMNodeDetails],
    rounds: int = 10,
    key_generator: KeyGenerator = pki.generate_key,
    now: Callable[[], datetime] = _now,
) -> str:
    """A bootstrapping SCM's sub-CA: validate operator files, or CSR -> leader. Returns the serial.
    ``conf`` gives the peers' security ports, ``config`` the command's parsed security configuration;
    ``now`` is read when a chain is checked (after the leader answered, which can take a while)."""
    if config.ca_mode is CAMode.OPERATOR:
        material = load_operator_sub_ca(config, cluster_id=cluster_id, now=now())
        LOG.info("security: using the externally issued sub-CA %s", pki.describe(material.certificate))
        return material.serial_id
    store = sub_ca_store(metadata_dir, config)
    if store.exists():
        material = store.load(extra_roots=_configured_root(config))
        ident = ids.identity_of(material.certificate)
        if ident.cluster_id == cluster_id:
            LOG.info("security already initialised: sub-CA %s", pki.describe(material.certificate))
            return material.serial_id
        raise SecurityInitError(
            f"the sub-CA under {store.base} belongs to cluster {ident.cluster_id}, not {cluster_id}; wipe this SCM's "
            "metadata directories and bootstrap again"
        )
    from scm_server.security.cert_client import SecurityProtocolClient, parse_issued

    spec = key_spec(config)
    key = key_generator(spec)
    csr = pki.build_csr(key, ids.scm_subject(node.host, scm_id, cluster_id), spec, request_ca=True)
    secret = enrollment_secret(config, "scm")
    if secret is None:
        raise SecurityInitError(
            "scm --bootstrap with security needs the SCM enrolment secret: set "
            "ozone.scm.security.enrollment.scm.secret.file (the same secret as on the running SCMs)"
        )
    client = SecurityProtocolClient(
        security_addresses(conf, peers),
        roots=trust_roots_for(config, metadata_dir),
        role="scm",
        secret=secret,
        rounds=rounds,
        scm_role_check=config.scm_role_check,
    )
    details = scm_security_pb2.ScmNodeDetailsProto(
        clusterId=cluster_id, hostName=node.host, scmNodeId=node.node_id, scmId=scm_id
    )
    try:
        response = asyncio.run(client.enroll_scm(csr, details))
    except SCMError as exc:
        raise SecurityInitError(f"the leader refused or did not sign this SCM's sub-CA certificate: {exc}") from exc
    chain, root = parse_issued(response)
    if not pki.key_matches(chain[0], key):
        raise SecurityInitError("the leader returned a certificate for another key")
    pki.verify_ca_chain(chain, [root], now())
    store.save(key, chain, [root])
    LOG.info("security: sub-CA %s signed by %s", pki.describe(chain[0]), chain[0].issuer.rfc4514_string())
    return str(chain[0].serial_number)
