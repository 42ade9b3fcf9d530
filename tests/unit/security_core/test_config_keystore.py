"""SecurityConfig (Ozone's keys and defaults, one clear error per bad combination) and the keystore
(Ozone's layout, 0600 keys, the key/certificate pair switching together, interrupted switches)."""

from __future__ import annotations

import dataclasses
import os
from datetime import timedelta
from pathlib import Path

import pytest

from scm_server.conf import OzoneConfiguration
from scm_server.conf.security import CAMode, HttpPolicy, SecurityConfig
from scm_server.exceptions import ConfigError
from scm_server.security.core import certificates as pki
from scm_server.security.keystore import KeyStore, file_signature, read_secret
from scm_server.security.tls import FileClientSecurity

from .pki_helpers import EC, make_pki


def conf(**values: str) -> SecurityConfig:
    return SecurityConfig.from_conf(OzoneConfiguration({k.replace("_", "."): v for k, v in values.items()}))


def test_defaults_are_ozones() -> None:
    c = SecurityConfig.from_conf(OzoneConfiguration())
    assert not c.security_enabled and not c.grpc_tls_enabled and not c.tls
    assert (c.key_algorithm, c.key_length, c.signature_algorithm) == ("RSA", 2048, "SHA256withRSA")
    assert c.default_duration == timedelta(days=365) and c.max_duration == timedelta(days=1865)
    assert c.renew_grace_duration == timedelta(days=28)
    assert (c.x509_dir_name, c.x509_file_name, c.private_key_file_name) == ("certs", "certificate.crt", "private.pem")
    assert c.security_service_port == 19961 and c.https is HttpPolicy.HTTP_ONLY and c.ca_mode is CAMode.SCM
    # the dataclass defaults and the parsed defaults agree
    declared = SecurityConfig()
    for f in dataclasses.fields(SecurityConfig):
        assert getattr(c, f.name) == getattr(declared, f.name), f.name


def _c(values: dict[str, str]) -> SecurityConfig:
    return SecurityConfig.from_conf(OzoneConfiguration(values))


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"hdds.grpc.tls.enabled": "true"}, "needs ozone.security.enabled=true"),
        ({"hdds.key.algo": "DSA"}, "use RSA or EC"),
        ({"hdds.key.len": "1024"}, "at least 2048"),
        ({"hdds.key.algo": "EC", "hdds.key.len": "200"}, "256, 384 or 521"),
        ({"hdds.key.algo": "EC", "hdds.key.len": "256"}, "does not fit hdds.key.algo=EC"),
        ({"hdds.x509.default.duration": "P2000D"}, "exceeds hdds.x509.max.duration"),
        ({"hdds.x509.renew.grace.duration": "P400D"}, "must be shorter than"),
        ({"hdds.x509.subca.certificate.file": "/x"}, "go together"),
        ({"hdds.x509.subca.certificate.file": "/x", "hdds.x509.subca.private.key.file": "/y"}, "trust anchor"),
        ({"hdds.x509.subca.certificate.file": "/x", "hdds.x509.subca.private.key.file": "/y",
          "hdds.x509.rootca.certificate.file": "/r", "hdds.x509.rootca.private.key.file": "/k"}, "cannot be combined"),
        ({"hdds.x509.rootca.private.key.file": "/k"}, "without hdds.x509.rootca.certificate.file"),
        ({"hdds.x509.client.certificate.file": "/c"}, "go together"),
        ({"ozone.http.policy": "HTTPS"}, "HTTP_ONLY, HTTPS_ONLY or HTTP_AND_HTTPS"),
        ({"ozone.http.policy": "HTTPS_ONLY"}, "needs ozone.security.enabled=true"),
        ({"hdds.x509.renew.check.interval": "0s"}, "must be positive"),
    ],
)
def test_bad_combinations_name_the_keys(values: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _c(values)


def test_ca_modes_and_secrets() -> None:
    assert _c({"hdds.x509.rootca.certificate.file": "/r", "hdds.x509.rootca.private.key.file": "/k"}).ca_mode is CAMode.EXTERNAL_ROOT
    op = _c({"hdds.x509.subca.certificate.file": "/x", "hdds.x509.subca.private.key.file": "/y",
             "hdds.x509.rootca.certificate.file": "/r", "ozone.scm.security.enrollment.datanode.secret.file": "/s"})
    assert op.ca_mode is CAMode.OPERATOR
    assert op.enrollment_secret_file("datanode") == Path("/s") and op.enrollment_secret_file("scm") is None
    admins = _c({"ozone.administrators": "alice, bob"})
    assert admins.is_administrator("bob") and not admins.is_administrator("carol")
    assert _c({"ozone.administrators": "*"}).is_administrator("anyone")


def test_keystore_layout_modes_and_roundtrip(tmp_path: Path) -> None:
    p = make_pki()
    store = KeyStore(tmp_path / "scm" / "sub-ca")
    assert not store.exists()
    store.save(p.sub_key, [p.sub], [p.root])
    assert store.private_key_path == tmp_path / "scm" / "sub-ca" / "keys" / "private.pem"
    assert store.certificate_path == tmp_path / "scm" / "sub-ca" / "certs" / "certificate.crt"
    assert (store.certs_dir / "ROOTCA-1.crt").exists() and store.public_key_path.exists()
    assert os.stat(store.private_key_path).st_mode & 0o777 == 0o600
    m = store.load()
    assert m.certificate == p.sub and m.roots == (p.root,) and pki.key_matches(m.certificate, m.key)
    with pytest.raises(pki.PKIError, match="does not match"):
        store.save(p.root_key, [p.sub], [p.root])


def test_keystore_completes_or_discards_an_interrupted_switch(tmp_path: Path) -> None:
    p = make_pki()
    store = KeyStore(tmp_path / "dn")
    dn, dn_key = p.datanode(serial=3)
    store.save(dn_key, [dn, p.sub], [p.root])
    renewed, renewed_key = p.datanode(serial=4)
    # crash after the new key was renamed but before the certificate: the new pair is completed
    (store.certificate_path.with_name("certificate.crt.new")).write_text(pki.certs_pem([renewed, p.sub]))
    store.private_key_path.write_bytes(pki.private_key_pem(renewed_key))
    assert store.load().certificate.serial_number == 4
    # a half-written new key (no matching certificate) is discarded: the old pair stays
    store.private_key_path.with_name("private.pem.new").write_bytes(pki.private_key_pem(pki.generate_key(EC)))
    assert store.load().certificate.serial_number == 4
    assert not store.private_key_path.with_name("private.pem.new").exists()


def test_keystore_errors_are_one_clear_line(tmp_path: Path) -> None:
    p = make_pki()
    store = KeyStore(tmp_path / "x")
    store.save(p.sub_key, [p.sub], [p.root])
    store.certificate_path.write_text("garbage")
    with pytest.raises(ConfigError, match=r"certificate\.crt"):
        store.load()
    store.save(p.sub_key, [p.sub], [p.root])
    store.private_key_path.write_bytes(pki.private_key_pem(p.root_key))
    with pytest.raises(ConfigError, match="does not match"):
        store.load()


def test_secret_file_must_be_long_enough(tmp_path: Path) -> None:
    f = tmp_path / "s"
    f.write_text("short\n")
    with pytest.raises(ConfigError, match="at least 16"):
        read_secret(f, "k")
    with pytest.raises(ConfigError, match="does not exist"):
        read_secret(tmp_path / "none", "k")
    f.write_text("x" * 40 + "\n")
    assert read_secret(f, "k") == b"x" * 40


def test_file_client_security_follows_renewed_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = make_pki()
    admin, admin_key = p.client("admin", serial=5)
    cert, key, root = tmp_path / "a.crt", tmp_path / "a.key", tmp_path / "ca.crt"
    cert.write_text(pki.cert_pem(admin))
    key.write_bytes(pki.private_key_pem(admin_key))
    root.write_text(pki.cert_pem(p.root))
    sec = FileClientSecurity(cert, key, root)
    monkeypatch.setattr(FileClientSecurity, "CHECK_INTERVAL", 0.0)
    gen = sec.generation
    assert sec.generation == gen  # nothing changed
    renewed, renewed_key = p.client("admin", serial=6)
    key.write_bytes(pki.private_key_pem(renewed_key))
    cert.write_text(pki.cert_pem(renewed))
    os.utime(cert, ns=(1, file_signature(cert)[0][1] + 10))
    assert sec.generation == gen + 1 and sec.material.certificate.serial_number == 6
    key.write_bytes(pki.private_key_pem(pki.generate_key(EC)))  # a half-done swap: kept the old material
    assert sec.generation == gen + 1 and sec.material.certificate.serial_number == 6
    with pytest.raises(ConfigError, match="does not match"):
        FileClientSecurity(cert, key, root)
