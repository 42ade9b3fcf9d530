"""CA mode operator: root CA, member sub-CA and client certificates, their Secrets, renewal."""

from __future__ import annotations

import base64
import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from ozone_scm_operator import certs, naming
from ozone_scm_operator.builders import ClusterRef

REF = ClusterRef(name="scm", namespace="ozone", uid="u-1")
NOW = datetime.datetime(2026, 3, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)


@pytest.fixture(scope="module")
def root() -> certs.KeyPair:
    return certs.create_root_ca(ec.generate_private_key(ec.SECP256R1()), cluster="scm", namespace="ozone", now=NOW,
                                duration=3650 * DAY, serial=(1 << 63) + 1)


def test_root_ca(root: certs.KeyPair) -> None:
    bc = root.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert bc.ca and root.certificate.issuer == root.certificate.subject
    assert root.not_after == NOW + 3650 * DAY
    again = certs.load_pair(root.cert_pem, root.key_pem)
    assert again.fingerprint == root.fingerprint


def test_member_certificate_chains_to_the_root(root: certs.KeyPair) -> None:
    pair = certs.issue_member_certificate(root, ec.generate_private_key(ec.SECP256R1()), ref=REF, member="scm-1",
                                          now=NOW, duration=30 * DAY, serial=(1 << 63) + 0x1F)
    certs.verify_issued_by(pair.certificate, root.certificate)
    bc = pair.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert bc.ca and bc.path_length == 0  # a sub-CA, as every SCM holds in Ozone
    san = pair.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "scm-1.scm-headless.ozone.svc.cluster.local" in san.get_values_for_type(x509.DNSName)
    assert pair.serial_hex == format((1 << 63) + 0x1F, "x") and pair.not_after == NOW + 30 * DAY
    other = certs.create_root_ca(ec.generate_private_key(ec.SECP256R1()), cluster="x", namespace="y", now=NOW,
                                 duration=DAY, serial=(1 << 63) + 2)
    with pytest.raises(Exception):  # noqa: B017 - cryptography raises InvalidSignature or ValueError
        certs.verify_issued_by(pair.certificate, other.certificate)


def test_certificates_never_outlive_the_root(root: certs.KeyPair) -> None:
    pair = certs.issue_member_certificate(root, ec.generate_private_key(ec.SECP256R1()), ref=REF, member="scm-1",
                                          now=NOW, duration=100000 * DAY, serial=(1 << 63) + 3)
    assert pair.not_after == root.not_after


def test_secrets(root: certs.KeyPair) -> None:
    pair = certs.issue_member_certificate(root, ec.generate_private_key(ec.SECP256R1()), ref=REF, member="scm-1",
                                          now=NOW, duration=30 * DAY, serial=(1 << 63) + 5)
    s = certs.member_tls_secret(REF, "scm-1", pair, root.certificate)
    assert s["metadata"]["name"] == "scm-1-tls" and s["type"] == "kubernetes.io/tls"
    assert base64.b64decode(s["data"]["ca.crt"]) == root.cert_pem
    assert s["metadata"]["annotations"][naming.ANN_ROOT_FINGERPRINT] == root.fingerprint
    assert s["metadata"]["annotations"][naming.ANN_CERT_SERIAL] == format((1 << 63) + 5, "x")
    rs = certs.root_ca_secret(REF, root)
    assert "ownerReferences" not in rs["metadata"]  # never garbage-collected with the cluster
    assert certs.load_pair(base64.b64decode(rs["data"]["ca.crt"]), base64.b64decode(rs["data"]["ca.key"])).fingerprint == root.fingerprint
    client = certs.issue_client_certificate(root, ec.generate_private_key(ec.SECP256R1()), ref=REF, now=NOW,
                                            duration=DAY, serial=(1 << 63) + 6)
    assert not client.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_renewal_window() -> None:
    week = 7 * DAY
    assert certs.needs_renewal(None, NOW, week)
    assert certs.needs_renewal(NOW + 6 * DAY, NOW, week)
    assert not certs.needs_renewal(NOW + 8 * DAY, NOW, week)


def test_mismatched_root_key_is_refused(root: certs.KeyPair) -> None:
    other = ec.generate_private_key(ec.SECP256R1())
    with pytest.raises(ValueError, match="does not match"):
        certs.load_pair(root.cert_pem, certs.KeyPair(root.certificate, other).key_pem)
