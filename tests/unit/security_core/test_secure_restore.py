"""The secure part of ``scm --restore`` (pure checks, then the files written) and the rule that a retired
SCM's sub-CA (revoked for cessationOfOperation) still vouches for what the ring recorded, but for nothing a
taken key signs later."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from scm_server.ca.ca_server import certificate_record
from scm_server.conf import OzoneConfiguration
from scm_server.conf.security import SecurityConfig
from scm_server.security import init as sec_init
from scm_server.security import restore as sec_restore
from scm_server.security.core import certificates as pki
from scm_server.security.core.identity import Role, identity_of
from scm_server.security.tls import CallAuthenticator, _Peer

from .pki_helpers import CLUSTER, EC, NOW, SCM1, make_pki

CONFIG = SecurityConfig.from_conf(OzoneConfiguration({"ozone.security.enabled": "true", "hdds.key.algo": "EC",
                                                      "hdds.key.len": "256",
                                                      "hdds.x509.signature.algorithm": "SHA256withECDSA"}))


def _backup_with_keys(tmp: Path, root_pem: bytes, key_pem: bytes, mode: int = 0o600) -> Path:
    backup = tmp / "backup"
    (backup / "keys").mkdir(parents=True)
    (backup / sec_restore.BACKUP_ROOT_CERT).write_bytes(root_pem)
    key = backup / sec_restore.BACKUP_ROOT_KEY
    key.write_bytes(key_pem)
    key.chmod(mode)
    return backup


def _records(p):  # type: ignore[no-untyped-def]
    return [certificate_record(p.root, Role.ROOT_CA, owner_id=SCM1),
            certificate_record(p.sub, Role.SCM, owner_id=SCM1, issuer_serial="1")]


def test_plan_needs_the_root_key_and_checks_it(tmp_path: Path) -> None:
    p = make_pki()
    records = _records(p)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(sec_restore.SecureRestoreError, match=r"holds no keys/root-ca-private.pem.*--include-keys"):
        sec_restore.plan_secure_restore(CONFIG, backup=empty, cluster_id=CLUSTER, scm_certs=records,
                                        root_cert_file=None, root_key_file=None, now=NOW)
    root_pem = pki.cert_pem(p.root).encode()
    loose = _backup_with_keys(tmp_path / "loose", root_pem, pki.private_key_pem(p.root_key), 0o644)
    with pytest.raises(sec_restore.SecureRestoreError, match=r"readable by others.*chmod 600"):
        sec_restore.plan_secure_restore(CONFIG, backup=loose, cluster_id=CLUSTER, scm_certs=records,
                                        root_cert_file=None, root_key_file=None, now=NOW)
    wrong = _backup_with_keys(tmp_path / "wrong", root_pem, pki.private_key_pem(p.sub_key))
    with pytest.raises(sec_restore.SecureRestoreError, match="does not match the root CA certificate"):
        sec_restore.plan_secure_restore(CONFIG, backup=wrong, cluster_id=CLUSTER, scm_certs=records,
                                        root_cert_file=None, root_key_file=None, now=NOW)
    other = make_pki()
    foreign = _backup_with_keys(tmp_path / "foreign", pki.cert_pem(other.root).encode(),
                                pki.private_key_pem(other.root_key))
    with pytest.raises(sec_restore.SecureRestoreError, match="is not the root of cluster"):
        sec_restore.plan_secure_restore(CONFIG, backup=foreign, cluster_id=CLUSTER, scm_certs=records,
                                        root_cert_file=None, root_key_file=None, now=NOW)
    good = _backup_with_keys(tmp_path / "good", root_pem, pki.private_key_pem(p.root_key))
    plan = sec_restore.plan_secure_restore(CONFIG, backup=good, cluster_id=CLUSTER, scm_certs=records,
                                           root_cert_file=None, root_key_file=None, now=NOW)
    assert plan.root == p.root and plan.install_root_key
    # the root given apart from the backup (a backup without keys)
    cert_file, key_file = tmp_path / "ca.crt", tmp_path / "ca.key"
    cert_file.write_bytes(root_pem)
    key_file.write_bytes(pki.private_key_pem(p.root_key))
    key_file.chmod(0o600)
    given = sec_restore.plan_secure_restore(CONFIG, backup=empty, cluster_id=CLUSTER, scm_certs=records,
                                            root_cert_file=cert_file, root_key_file=key_file, now=NOW)
    assert given.root == p.root
    # a backup of a ring without security records no root
    with pytest.raises(sec_restore.SecureRestoreError, match="not taken from a secure ring"):
        sec_restore.plan_secure_restore(CONFIG, backup=empty, cluster_id=CLUSTER, scm_certs=[],
                                        root_cert_file=cert_file, root_key_file=key_file, now=NOW)
    # the new sub-CA: under the same root, a serial outside the CertificateId sequence, the root key kept
    meta = tmp_path / "meta"
    serial = sec_restore.install_secure_restore(CONFIG, plan, metadata_dir=meta, cluster_id=CLUSTER,
                                                scm_id="0b5c4c2e-0000-4000-8000-000000000009", hostname="127.0.0.1",
                                                now=NOW + timedelta(minutes=1))
    loaded = sec_init.sub_ca_store(meta, CONFIG).load()
    assert str(loaded.certificate.serial_number) == serial and int(serial) >= pki.EXTERNAL_SERIAL_FLOOR
    pki.verify_ca_chain(list(loaded.chain), [p.root], NOW + timedelta(minutes=2))
    assert identity_of(loaded.certificate).owner_id.endswith("9")
    assert sec_init.root_ca_store(meta, CONFIG).load(root_ca=True).key is not None


def test_old_scm_certificates_are_retired() -> None:
    p = make_pki()
    records = _records(p)
    out = sec_restore.retired_scm_revocations(records, set(), now_ms=5, by="restore")
    assert [r.serialId for r in out] == ["2"] and out[0].reason == 5  # the root is never revoked
    assert sec_restore.retired_scm_revocations(records, {"2"}, now_ms=5, by="restore") == []


def _peer(chain):  # type: ignore[no-untyped-def]
    leaf = chain[0]
    return _Peer(identity_of(leaf), tuple(str(c.serial_number) for c in chain), leaf.not_valid_after_utc.timestamp(),
                 tuple(chain))


def test_a_retired_issuer_vouches_only_for_recorded_certificates() -> None:
    p = make_pki()
    dn, _ = p.datanode(serial=3)
    recorded = {pki.fingerprint(c) for c in (dn, p.sub)}
    revoked = {"2": 5}
    auth = CallAuthenticator(cluster_id=lambda: CLUSTER, is_revoked=lambda s: s in revoked, administrators=(),
                             clock=lambda: NOW.timestamp())  # the fixture PKI's time, not today's
    auth.set_retired_issuer_check(lambda s: revoked.get(s) == 5, lambda c: pki.fingerprint(c) in recorded)
    auth.check_peer(_peer([dn, p.sub]))  # issued by scm1 before it was retired: still accepted
    # a certificate minted later with the retired key is not recorded: refused
    forged = pki.issue_certificate(
        pki.SubjectInfo("mallory"), pki.generate_key(EC).public_key(), issuer=p.sub, issuer_key=p.sub_key, serial=99,
        now=NOW, lifetime=timedelta(days=1), profile=pki.Profile.END_ENTITY, spec=EC,
    )
    with pytest.raises(Exception, match="its issuer, serial 2"):
        auth.check_peer(_peer([forged, p.sub]))
    # the retired SCM itself no longer passes
    with pytest.raises(Exception, match=r"serial 2 .* has been revoked"):
        auth.check_peer(_peer([p.sub]))
    # an issuer revoked for keyCompromise cuts everything it issued
    revoked["2"] = 1
    with pytest.raises(Exception, match="its issuer, serial 2"):
        auth.check_peer(_peer([dn, p.sub]))
