"""The pure X.509 builders: Ozone's hierarchy, profiles, chains verified by openssl and cryptography,
CRLs honoured by openssl, renewal timing, bad input."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography import x509

from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids

from .pki_helpers import CLUSTER, EC, NOW, SCM1, make_pki


def _write(path: Path, *certs: x509.Certificate) -> str:
    path.write_text(pki.certs_pem(certs))
    return str(path)


def openssl_verify(tmp: Path, leaf: x509.Certificate, root: x509.Certificate, *untrusted: x509.Certificate,
                   crl: x509.CertificateRevocationList | None = None) -> subprocess.CompletedProcess[str]:
    args = ["openssl", "verify", "-attime", str(int(NOW.timestamp())), "-CAfile", _write(tmp / "root.pem", root)]
    if untrusted:
        args += ["-untrusted", _write(tmp / "chain.pem", *untrusted)]
    if crl is not None:
        (tmp / "crl.pem").write_text(pki.crl_pem(crl))
        args += ["-crl_check", "-CRLfile", str(tmp / "crl.pem")]
    args.append(_write(tmp / "leaf.pem", leaf))
    return subprocess.run(args, capture_output=True, text=True, timeout=30)


def test_root_and_sub_ca_follow_ozone_serials_subjects_and_profiles() -> None:
    p = make_pki()
    assert p.root.serial_number == 1 and p.sub.serial_number == 2
    assert pki.is_self_signed(p.root) and pki.is_ca(p.root)
    assert pki.is_ca(p.sub) and not pki.is_self_signed(p.sub)
    assert ids.role_of(p.root) is ids.Role.ROOT_CA and ids.role_of(p.sub) is ids.Role.SCM
    ident = ids.identity_of(p.sub)
    assert ident.common_name == "scm-sub@127.0.0.1" and ident.owner_id == SCM1 and ident.cluster_id == CLUSTER
    assert p.sub.not_valid_after_utc <= p.root.not_valid_after_utc
    # back-dated for clock skew between SCMs
    assert p.sub.not_valid_before_utc == NOW - pki.NOT_BEFORE_SKEW
    assert pki.verify_ca_chain([p.sub], [p.root], NOW) == p.root


def test_chain_root_sub_ca_datanode_verifies_with_openssl_and_cryptography(tmp_path: Path) -> None:
    p = make_pki()
    dn, _ = p.datanode()
    result = openssl_verify(tmp_path, dn, p.root, p.sub)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout
    chain = pki.verify_end_entity(dn, [p.sub], [p.root], NOW)
    assert [c.serial_number for c in chain] == [3, 2, 1]
    assert ids.identity_of(dn).role is ids.Role.DATANODE
    # the sub-CA itself verifies against the root with openssl too
    assert openssl_verify(tmp_path, p.sub, p.root).returncode == 0


def test_rsa_default_spec_builds_a_working_chain(tmp_path: Path) -> None:
    spec = pki.KeySpec()  # Ozone defaults: RSA 2048, SHA256withRSA
    p = make_pki(spec)
    assert p.root.signature_hash_algorithm is not None and p.root.signature_hash_algorithm.name == "sha256"
    assert openssl_verify(tmp_path, p.sub, p.root).returncode == 0


def test_a_chain_from_another_cluster_or_self_signed_does_not_verify(tmp_path: Path) -> None:
    p, other = make_pki(), make_pki()
    dn, _ = other.datanode()
    assert openssl_verify(tmp_path, dn, p.root, other.sub).returncode != 0
    with pytest.raises(pki.PKIError, match="does not verify"):
        pki.verify_end_entity(dn, [other.sub], [p.root], NOW)
    with pytest.raises(pki.PKIError, match="not signed by the root CA"):
        pki.verify_ca_chain([other.sub], [p.root], NOW)


def test_sub_ca_signed_by_another_sub_ca_chains_when_no_root_key_is_held(tmp_path: Path) -> None:
    """HDDS-8286: the leader's sub-CA signs a new SCM's sub-CA; datanode certs under it still verify."""
    p = make_pki()
    key2 = pki.generate_key(EC)
    sub2 = pki.issue_certificate(ids.scm_subject("10.0.0.2", SCM1, CLUSTER), key2.public_key(), issuer=p.sub,
                                 issuer_key=p.sub_key, serial=5, now=NOW, lifetime=timedelta(days=400),
                                 profile=pki.Profile.SUB_CA, spec=EC)
    assert sub2.not_valid_after_utc == p.sub.not_valid_after_utc  # clamped to the issuer
    assert pki.verify_ca_chain([sub2, p.sub], [p.root], NOW) == p.root
    dn = pki.issue_certificate(ids.datanode_subject("dn2", "u2", CLUSTER), pki.generate_key(EC).public_key(),
                               issuer=sub2, issuer_key=key2, serial=6, now=NOW, lifetime=timedelta(days=10),
                               profile=pki.Profile.END_ENTITY, spec=EC)
    assert openssl_verify(tmp_path, dn, p.root, sub2, p.sub).returncode == 0


def test_end_entity_certificate_cannot_sign() -> None:
    p = make_pki()
    dn, dn_key = p.datanode()
    with pytest.raises(pki.PKIError, match="not a CA"):
        pki.issue_certificate(ids.datanode_subject("x", "y", CLUSTER), pki.generate_key(EC).public_key(), issuer=dn,
                              issuer_key=dn_key, serial=9, now=NOW, lifetime=timedelta(days=1),
                              profile=pki.Profile.END_ENTITY, spec=EC)


def test_mismatched_issuer_key_and_expired_issuer_are_refused() -> None:
    p = make_pki()
    with pytest.raises(pki.PKIError, match="does not match"):
        pki.issue_certificate(ids.datanode_subject("x", "y", CLUSTER), pki.generate_key(EC).public_key(),
                              issuer=p.sub, issuer_key=p.root_key, serial=9, now=NOW, lifetime=timedelta(days=1),
                              profile=pki.Profile.END_ENTITY, spec=EC)
    with pytest.raises(pki.PKIError, match="expired"):
        pki.issue_certificate(ids.datanode_subject("x", "y", CLUSTER), pki.generate_key(EC).public_key(),
                              issuer=p.sub, issuer_key=p.sub_key, serial=9, now=NOW + timedelta(days=400),
                              lifetime=timedelta(days=1), profile=pki.Profile.END_ENTITY, spec=EC)


def test_expired_leaf_fails_openssl_and_the_chain_check(tmp_path: Path) -> None:
    p = make_pki(now=NOW - timedelta(days=60))
    dn, _ = p.datanode(now=NOW - timedelta(days=40), lifetime=timedelta(days=30))
    result = openssl_verify(tmp_path, dn, p.root, p.sub)
    assert result.returncode != 0 and "expired" in (result.stdout + result.stderr)
    with pytest.raises(pki.PKIError):
        pki.verify_end_entity(dn, [p.sub], [p.root], NOW)


def test_crl_lists_revoked_serials_and_openssl_refuses_them(tmp_path: Path) -> None:
    p = make_pki()
    dn, _ = p.datanode(serial=7)
    good, _ = p.datanode(uuid="dn-2", serial=8)
    crl = pki.build_crl(p.sub, p.sub_key, [pki.RevokedEntry(7, NOW - timedelta(minutes=1), 1)], now=NOW,
                        next_update=timedelta(days=1), number=3, spec=EC)
    assert crl.is_signature_valid(p.sub.public_key())  # type: ignore[arg-type]
    entry = crl.get_revoked_certificate_by_serial_number(7)
    assert entry is not None
    assert entry.extensions.get_extension_for_class(x509.CRLReason).value.reason is x509.ReasonFlags.key_compromise
    refused = openssl_verify(tmp_path, dn, p.root, p.sub, crl=crl)
    assert refused.returncode != 0 and "revoked" in (refused.stdout + refused.stderr)
    accepted = openssl_verify(tmp_path, good, p.root, p.sub, crl=crl)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert pki.load_crl(pki.crl_pem(crl)).extensions.get_extension_for_class(x509.CRLNumber).value.crl_number == 3


def test_renewal_is_due_within_the_grace_period() -> None:
    p = make_pki()
    dn, _ = p.datanode(lifetime=timedelta(days=30))
    grace = timedelta(days=7)
    assert not pki.needs_renewal(dn, NOW, grace)
    assert not pki.needs_renewal(dn, NOW + timedelta(days=22, hours=23), grace)
    assert pki.needs_renewal(dn, NOW + timedelta(days=23), grace)


def test_pem_round_trips_and_clear_errors_for_garbage() -> None:
    p = make_pki()
    assert pki.load_certificates(pki.certs_pem([p.sub, p.root])) == [p.sub, p.root]
    key = pki.load_private_key(pki.private_key_pem(p.sub_key))
    assert pki.key_matches(p.sub, key) and not pki.key_matches(p.root, key)
    assert pki.public_key_sha256(p.sub) == pki.public_key_sha256(key.public_key())
    with pytest.raises(pki.PKIError, match=r"not a PEM certificate|no PEM certificate"):
        pki.load_certificates("hello")
    with pytest.raises(pki.PKIError, match="private key"):
        pki.load_private_key(b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    with pytest.raises(pki.PKIError, match="malformed CSR"):
        pki.load_csr("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n")
    assert len(pki.split_pem_certificates(pki.certs_pem([p.sub, p.root]))) == 2


@pytest.mark.parametrize("bad", ["", "a b", "-x", "x" * 300, "host/evil"])
def test_bad_host_names_are_refused(bad: str) -> None:
    with pytest.raises(pki.PKIError):
        pki.general_name(bad)


def test_naive_now_and_bad_serial_and_weak_key_are_refused() -> None:
    from datetime import datetime

    from cryptography.hazmat.primitives.asymmetric import rsa

    key = pki.generate_key(EC)
    with pytest.raises(pki.PKIError, match="timezone"):
        pki.build_root_ca(key, ids.root_ca_subject("h", SCM1, CLUSTER), serial=1, now=datetime(2026, 1, 1),
                          lifetime=timedelta(days=1), spec=EC)
    with pytest.raises(pki.PKIError, match="serial"):
        pki.build_root_ca(key, ids.root_ca_subject("h", SCM1, CLUSTER), serial=0, now=NOW,
                          lifetime=timedelta(days=1), spec=EC)
    with pytest.raises(pki.PKIError, match="too weak"):
        pki.check_key_strength(rsa.generate_private_key(65537, 1024).public_key())
    assert pki.reason_code("keyCompromise") == 1 and pki.reason_name(1) == "keyCompromise"
    with pytest.raises(pki.PKIError, match="unknown revocation reason"):
        pki.reason_code("bored")
