"""``scm --init`` security steps for each CA mode, at the file level (no network): what is created,
what is validated, and the clear errors for externally supplied material."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography import x509

from scm_server.conf import OzoneConfiguration
from scm_server.conf.security import SecurityConfig
from scm_server.exceptions import ConfigError
from scm_server.security import init as sec_init
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids
from scm_server.security.keystore import Material

from .pki_helpers import CLUSTER, EC, NOW

SCM_ID = str(uuid.uuid4())
BIG = (1 << 63) + 12345


def _conf(tmp: Path, **extra: str) -> OzoneConfiguration:
    values = {
        "ozone.metadata.dirs": str(tmp / "meta"),
        "ozone.security.enabled": "true",
        "hdds.grpc.tls.enabled": "true",
        "hdds.key.algo": "EC",
        "hdds.key.len": "256",
        "hdds.x509.signature.algorithm": "SHA256withECDSA",
    }
    values.update(extra)
    return OzoneConfiguration(values)


def _init(conf: OzoneConfiguration, tmp: Path, scm_id: str = SCM_ID) -> str:
    return sec_init.initialize_primordial(
        SecurityConfig.from_conf(conf), metadata_dir=tmp / "meta", cluster_id=CLUSTER, scm_id=scm_id,
        hostname="scm1.example.com", now=NOW,
    )


def test_scm_mode_creates_root_serial_1_and_sub_ca_serial_2_and_is_idempotent(tmp_path: Path) -> None:
    conf = _conf(tmp_path)
    assert _init(conf, tmp_path) == "2"
    config = SecurityConfig.from_conf(conf)
    loaded = sec_init.load_scm_material(config, tmp_path / "meta", CLUSTER, now=NOW)
    root, sub = loaded.material.roots[0], loaded.material.certificate
    assert root.serial_number == 1 and sub.serial_number == 2
    assert ids.identity_of(root).common_name == "scm-root@scm1.example.com"
    assert ids.identity_of(sub).owner_id == SCM_ID and ids.identity_of(sub).cluster_id == CLUSTER
    assert loaded.root_key is not None and pki.key_matches(root, loaded.root_key)
    san = sub.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["scm1.example.com", ids.SCM_ROLE_NAME]
    assert san.get_values_for_type(x509.UniformResourceIdentifier) == [f"ozone-scm://{CLUSTER}/scm/{SCM_ID}"]
    # root lifetime = hdds.x509.max.duration, sub-CA = hdds.x509.default.duration
    assert root.not_valid_after_utc == NOW + timedelta(days=1865)
    assert sub.not_valid_after_utc == NOW + timedelta(days=365)
    assert _init(conf, tmp_path) == "2"  # re-running --init changes nothing
    assert sec_init.load_scm_material(config, tmp_path / "meta", CLUSTER, now=NOW).material.certificate == sub
    with pytest.raises(ConfigError, match="is for cluster"):
        sec_init.load_scm_material(config, tmp_path / "meta", "CID-" + str(uuid.uuid4()), now=NOW)


def test_admin_csrs_are_signed_at_init_with_random_external_serials(tmp_path: Path) -> None:
    key = pki.generate_key(EC)
    csr = tmp_path / "alice.csr"
    csr.write_text(pki.csr_pem(pki.build_csr(key, ids.client_subject("alice"), EC)))
    conf = _conf(tmp_path, **{"ozone.scm.security.admin.csr.files": str(csr)})
    _init(conf, tmp_path)
    pending = sec_init.pending_init_certificates(tmp_path / "meta")
    assert len(pending) == 1
    cert = pending[0]
    assert cert.serial_number >= 1 << 63 and pki.key_matches(cert, key)
    assert ids.identity_of(cert).role is ids.Role.CLIENT and ids.identity_of(cert).common_name == "alice"
    bad = tmp_path / "bad.csr"
    bad.write_text(pki.csr_pem(pki.build_csr(key, pki.SubjectInfo("dn@host"), EC)))
    with pytest.raises(ConfigError, match="not a valid user name"):
        _init(_conf(tmp_path / "b", **{"ozone.scm.security.admin.csr.files": str(bad)}), tmp_path / "b")


def _external_root(tmp: Path, serial: int = BIG) -> tuple[Path, Path, pki.PrivateKey, x509.Certificate]:
    key = pki.generate_key(EC)
    root = pki.build_root_ca(key, pki.SubjectInfo("corp-root"), serial=serial, now=NOW - timedelta(days=1),
                             lifetime=timedelta(days=3000), spec=EC)
    cert_file, key_file = tmp / "root.crt", tmp / "root.key"
    cert_file.write_text(pki.cert_pem(root))
    key_file.write_bytes(pki.private_key_pem(key))
    return cert_file, key_file, key, root


def test_external_root_is_used_and_its_key_stays_in_its_file(tmp_path: Path) -> None:
    cert_file, key_file, _key, root = _external_root(tmp_path)
    conf = _conf(tmp_path, **{"hdds.x509.rootca.certificate.file": str(cert_file),
                              "hdds.x509.rootca.private.key.file": str(key_file)})
    _init(conf, tmp_path)
    loaded = sec_init.load_scm_material(SecurityConfig.from_conf(conf), tmp_path / "meta", CLUSTER, now=NOW)
    assert loaded.material.certificate.issuer == root.subject and loaded.material.roots[0] == root
    assert loaded.root_key is not None and pki.key_matches(root, loaded.root_key)
    assert not sec_init.root_ca_store(tmp_path / "meta", SecurityConfig()).exists()  # nothing copied


@pytest.mark.parametrize(("problem", "match"), [("key", "does not match"), ("serial", "range SCM uses")])
def test_external_root_errors(tmp_path: Path, problem: str, match: str) -> None:
    cert_file, key_file, _, _ = _external_root(tmp_path, serial=5 if problem == "serial" else BIG)
    if problem == "key":
        key_file.write_bytes(pki.private_key_pem(pki.generate_key(EC)))
    conf = _conf(tmp_path, **{"hdds.x509.rootca.certificate.file": str(cert_file),
                              "hdds.x509.rootca.private.key.file": str(key_file)})
    with pytest.raises(ConfigError, match=match):
        _init(conf, tmp_path)


def _operator_files(tmp: Path, *, root_key: pki.PrivateKey, root: x509.Certificate, serial: int = BIG + 1,
                    ca: bool = True, lifetime: timedelta = timedelta(days=30), cluster: str = "") -> tuple[Path, Path]:
    key = pki.generate_key(EC)
    subject = ids.role_bound(pki.SubjectInfo("scm-sub@scm2", "scm2", cluster, ("scm2",)), ids.Role.SCM if ca else
                             ids.Role.DATANODE)
    cert = pki.issue_certificate(subject, key.public_key(),
                                 issuer=root, issuer_key=root_key, serial=serial, now=NOW, lifetime=lifetime,
                                 profile=pki.Profile.SUB_CA if ca else pki.Profile.END_ENTITY, spec=EC)
    cert_file, key_file = tmp / "subca.crt", tmp / "subca.key"
    cert_file.write_text(pki.certs_pem([cert, root]))
    key_file.write_bytes(pki.private_key_pem(key))
    return cert_file, key_file


def _operator_conf(tmp: Path, root_file: Path, cert_file: Path, key_file: Path) -> OzoneConfiguration:
    return _conf(tmp, **{"hdds.x509.rootca.certificate.file": str(root_file),
                         "hdds.x509.subca.certificate.file": str(cert_file),
                         "hdds.x509.subca.private.key.file": str(key_file)})


def test_operator_mode_validates_the_external_sub_ca_and_needs_no_root_key(tmp_path: Path) -> None:
    root_file, _, root_key, root = _external_root(tmp_path)
    cert_file, key_file = _operator_files(tmp_path, root_key=root_key, root=root)
    conf = _operator_conf(tmp_path, root_file, cert_file, key_file)
    serial = sec_init.initialize_primordial(
        SecurityConfig.from_conf(conf), metadata_dir=tmp_path / "meta", cluster_id=CLUSTER, scm_id=SCM_ID,
        hostname="scm2", now=NOW,
    )
    assert serial == str(BIG + 1)
    loaded = sec_init.load_scm_material(SecurityConfig.from_conf(conf), tmp_path / "meta", CLUSTER, now=NOW)
    assert loaded.root_key is None and isinstance(loaded.material, Material)
    assert not sec_init.sub_ca_store(tmp_path / "meta", SecurityConfig()).exists()  # served from the given files


@pytest.mark.parametrize(
    ("problem", "match"),
    [
        ("other-root", "not the one in hdds.x509.rootca.certificate.file"),
        ("key", "does not match"),
        ("not-ca", "is not a CA certificate"),
        ("small-serial", "range SCM uses"),
        ("expired", "expired"),
        ("cluster", "names cluster"),
    ],
)
def test_operator_mode_errors(tmp_path: Path, problem: str, match: str) -> None:
    root_file, _, root_key, root = _external_root(tmp_path)
    issuer_key, issuer = root_key, root
    if problem == "other-root":
        other = tmp_path / "other"
        other.mkdir()
        _, _, issuer_key, issuer = _external_root(other)
    cert_file, key_file = _operator_files(
        tmp_path, root_key=issuer_key, root=issuer, ca=problem != "not-ca",
        serial=7 if problem == "small-serial" else BIG + 1,
        lifetime=timedelta(seconds=1) if problem == "expired" else timedelta(days=30),
        cluster="CID-" + str(uuid.uuid4()) if problem == "cluster" else "",
    )
    if problem == "key":
        key_file.write_bytes(pki.private_key_pem(pki.generate_key(EC)))
    conf = _operator_conf(tmp_path, root_file, cert_file, key_file)
    with pytest.raises(ConfigError, match=match):
        sec_init.load_operator_sub_ca(SecurityConfig.from_conf(conf), cluster_id=CLUSTER, now=NOW + timedelta(minutes=1))


def test_daemon_without_material_gets_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="run `ozone-scm scm --init`"):
        sec_init.load_scm_material(SecurityConfig.from_conf(_conf(tmp_path)), tmp_path / "meta", CLUSTER, now=NOW)


def test_interrupted_bootstrap_keeps_its_identity(tmp_path: Path) -> None:
    """A sub-CA already obtained for this cluster is reused with its scmUuid (no duplicate request)."""
    from .pki_helpers import make_pki

    p = make_pki()
    scm_id = str(uuid.uuid4())
    key = pki.generate_key(EC)
    cert = pki.issue_certificate(ids.scm_subject("scm2", scm_id, CLUSTER), key.public_key(), issuer=p.root,
                                 issuer_key=p.root_key, serial=3, now=NOW, lifetime=timedelta(days=5),
                                 profile=pki.Profile.SUB_CA, spec=EC)
    sec_init.sub_ca_store(tmp_path / "meta", SecurityConfig()).save(key, [cert], [p.root])
    assert sec_init.existing_bootstrap_identity(tmp_path / "meta", SecurityConfig(), CLUSTER) == scm_id
    assert sec_init.existing_bootstrap_identity(tmp_path / "meta", SecurityConfig(), "CID-" + str(uuid.uuid4())) is None
