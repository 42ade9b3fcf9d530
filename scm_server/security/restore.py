"""What ``scm --restore DIR`` does when ``ozone.security.enabled=true``: the restored SCM keeps the old
ring's cluster id and **root CA**, so every datanode, OM and client certificate the old ring issued still
chains to the root every party trusts, and it gets a new sub-CA of its own under that root.

Who calls it: :mod:`scm_server.ha.recovery` (``scm_restore``), in two steps so that nothing is written
before everything is checked:

1. :func:`plan_secure_restore` finds and checks the root CA (CA mode ``scm``: the key and certificate of a
   backup taken with ``--include-keys`` while the root-key holder led, or ``--root-ca-cert`` +
   ``--root-ca-key``; ``external-root``: the configured files; ``operator``: the configured sub-CA files
   and anchor, no root key) against the root recorded in the backup's ``validSCMCerts``: one-line errors
   naming what is missing and how to get it.
2. :func:`install_secure_restore` (after the checkpoint and the Raft log are in place) stores the root (mode
   ``scm``) and a new sub-CA for this SCM signed by it (a random serial of the external range: no Raft exists
   yet, as for ``--init``'s client certificates); the leader records it in ``validSCMCerts`` on its first
   leadership as the primordial does.

:func:`retired_scm_revocations` are the revocation records (cessationOfOperation) of the old ring's SCM
certificates, which the restore writes into the restored tables: no SCM of the old ring passes as an SCM of
the new one, while the certificates they issued (recorded in ``validCerts``) keep working
(:meth:`scm_server.security.tls.CallAuthenticator.vouched_by_retired_issuer`).
"""

from __future__ import annotations

import dataclasses
import secrets
import stat
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from cryptography import x509

from scm_server.conf.security import CAMode, SecurityConfig
from scm_server.exceptions import ConfigError, SCMError
from scm_server.proto import hdds_pb2
from scm_server.security import init as sec_init
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids
from scm_server.security.keystore import load_certificate_file, load_private_key_file

# the key files ``admin scm backup --include-keys`` writes (scm_server.ha.inter_scm_service._key_files)
BACKUP_ROOT_KEY = "keys/root-ca-private.pem"
BACKUP_ROOT_CERT = "keys/root-ca-certificate.crt"
RETIRED_REASON = pki.REASON_NAMES["cessationOfOperation"]


class SecureRestoreError(SCMError):
    """The secure part of a restore cannot proceed; the message says what is missing and how to get it."""


@dataclasses.dataclass(frozen=True)
class SecureRestorePlan:
    mode: CAMode
    root: x509.Certificate
    root_key: pki.PrivateKey | None  # None in CA mode operator (the operator holds it)
    install_root_key: bool  # CA mode scm: the restored SCM becomes the root-key holder
    operator_serial: str = ""  # CA mode operator: the configured sub-CA's serial


def _private_key(path: Path, what: str) -> pki.PrivateKey:
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise SecureRestoreError(f"{what} {path} cannot be read: {exc}") from exc
    if mode & 0o077:
        raise SecureRestoreError(
            f"{what} {path} is readable by others (mode {stat.S_IMODE(mode):o}); `chmod 600 {path}` and keep it private"
        )
    try:
        return load_private_key_file(str(path), what)
    except ConfigError as exc:
        raise SecureRestoreError(str(exc)) from exc


def _root_certificate(path: Path, what: str) -> x509.Certificate:
    try:
        certs = load_certificate_file(str(path), what)
    except ConfigError as exc:
        raise SecureRestoreError(str(exc)) from exc
    roots = [c for c in certs if pki.is_self_signed(c)]
    if not roots or not pki.is_ca(roots[0]):
        raise SecureRestoreError(f"{what} {path} holds no self-signed CA certificate (a root CA)")
    return roots[0]


def recorded_root(scm_certs: Iterable[hdds_pb2.CertificateProto]) -> x509.Certificate | None:
    """The root CA the backed-up ring recorded in ``validSCMCerts``."""
    for proto in scm_certs:
        if proto.nodeType == ids.Role.ROOT_CA.value:
            try:
                return pki.load_certificate(proto.x509Certificate)
            except pki.PKIError:
                continue
    return None


def plan_secure_restore(
    config: SecurityConfig,
    *,
    backup: Path,
    cluster_id: str,
    scm_certs: Iterable[hdds_pb2.CertificateProto],
    root_cert_file: Path | None,
    root_key_file: Path | None,
    now: datetime,
) -> SecureRestorePlan:
    """Check everything the secure part of a restore needs (nothing is written)."""
    expected = recorded_root(scm_certs)
    if config.ca_mode is CAMode.OPERATOR:
        if root_key_file is not None:
            raise SecureRestoreError(
                "CA mode operator keeps the root CA key outside the cluster: drop --root-ca-key, and give this SCM "
                "its sub-CA files (hdds.x509.subca.*) issued by the operator's root"
            )
        try:
            material = sec_init.load_operator_sub_ca(config, cluster_id=cluster_id, now=now)
        except ConfigError as exc:
            raise SecureRestoreError(f"CA mode operator: {exc}") from exc
        root, key, install, source = material.roots[0], None, False, "hdds.x509.rootca.certificate.file"
        serial = material.serial_id
    else:
        serial = ""
        if root_cert_file is not None and root_key_file is not None:
            cert_path, key_path, source = root_cert_file, root_key_file, "--root-ca-cert"
            key_what = "--root-ca-key"
        elif config.ca_mode is CAMode.EXTERNAL_ROOT:
            assert config.rootca_certificate_file and config.rootca_private_key_file
            cert_path, key_path = Path(config.rootca_certificate_file), Path(config.rootca_private_key_file)
            source, key_what = "hdds.x509.rootca.certificate.file", "hdds.x509.rootca.private.key.file"
        else:
            cert_path, key_path = backup / BACKUP_ROOT_CERT, backup / BACKUP_ROOT_KEY
            source, key_what = f"backup's {BACKUP_ROOT_CERT}", f"backup's {BACKUP_ROOT_KEY}"
            if not key_path.is_file() or not cert_path.is_file():
                missing = BACKUP_ROOT_KEY if not key_path.is_file() else BACKUP_ROOT_CERT
                raise SecureRestoreError(
                    f"restoring a secure ring needs its root CA key and certificate, and backup {backup} holds no "
                    f"{missing} (taken without --include-keys, or by a leader that did not hold the root key): take "
                    "one with `admin scm backup --include-keys` while the SCM holding the root key (the primordial) "
                    "is leader, or pass --root-ca-cert FILE --root-ca-key FILE"
                )
        root = _root_certificate(cert_path, source)
        key = _private_key(key_path, key_what)
        if not pki.key_matches(root, key):
            raise SecureRestoreError(
                f"the root CA key ({key_what} {key_path}) does not match the root CA certificate ({source} "
                f"{cert_path}); give the key of that certificate"
            )
        install = config.ca_mode is CAMode.SCM
    if expected is None:
        raise SecureRestoreError(
            f"backup {backup} records no root CA certificate (validSCMCerts): it was not taken from a secure ring; "
            "restore it with ozone.security.enabled=false"
        )
    if pki.fingerprint(root) != pki.fingerprint(expected):
        raise SecureRestoreError(
            f"the root CA from {source} ({pki.describe(root)}) is not the root of cluster {cluster_id} recorded in "
            f"backup {backup} ({pki.describe(expected)}); certificates of the old ring would not chain to it"
        )
    try:
        pki.check_validity(root, now, "root CA certificate")
    except pki.PKIError as exc:
        raise SecureRestoreError(f"{source}: {exc}") from exc
    return SecureRestorePlan(config.ca_mode, root, key, install, serial)


def install_secure_restore(
    config: SecurityConfig,
    plan: SecureRestorePlan,
    *,
    metadata_dir: Path,
    cluster_id: str,
    scm_id: str,
    hostname: str,
    now: datetime,
    key_generator: sec_init.KeyGenerator = pki.generate_key,
) -> str:
    """Store the root (mode scm) and this SCM's new sub-CA under it; returns the ``scmCertSerialId``."""
    if plan.mode is CAMode.OPERATOR:
        return plan.operator_serial
    assert plan.root_key is not None
    spec = sec_init.key_spec(config)
    if plan.install_root_key:
        sec_init.root_ca_store(metadata_dir, config).save(plan.root_key, [plan.root], [plan.root])
    sub_key = key_generator(spec)
    sub = pki.issue_certificate(
        ids.scm_subject(hostname, scm_id, cluster_id),
        sub_key.public_key(),
        issuer=plan.root,
        issuer_key=plan.root_key,
        serial=sec_init.EXTERNAL_SERIAL_FLOOR + secrets.randbits(62),
        now=now,
        lifetime=config.default_duration,
        profile=pki.Profile.SUB_CA,
        spec=spec,
    )
    sec_init.sub_ca_store(metadata_dir, config).save(sub_key, [sub], [plan.root])
    return str(sub.serial_number)


def retired_scm_revocations(
    scm_certs: Iterable[hdds_pb2.CertificateProto],
    revoked: set[str],
    *,
    now_ms: int,
    by: str,
) -> list[hdds_pb2.RevokedCertificateProto]:
    """cessationOfOperation records for every SCM (sub-CA) certificate of the old ring not revoked yet."""
    out = []
    for proto in scm_certs:
        if proto.nodeType != ids.Role.SCM.value or proto.serialId in revoked:
            continue
        out.append(
            hdds_pb2.RevokedCertificateProto(
                serialId=proto.serialId,
                revocationTimeMs=now_ms,
                reason=RETIRED_REASON,
                nodeType=proto.nodeType,
                ownerId=proto.ownerId,
                issuerSerialId=proto.issuerSerialId,
                revokedBy=by,
            )
        )
    return out
