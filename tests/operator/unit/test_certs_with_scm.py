"""The operator's certificates are what the SCM accepts in its CA mode ``operator``: checked with the SCM's own
validation (``load_operator_sub_ca``), identity parsing and authorization table, so the two cannot drift apart."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from ozone_scm_operator import builders, certs
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.reconciler import new_serial
from ozone_scm_operator.spec import parse_spec
from scm_server.conf import OzoneConfiguration
from scm_server.conf.security import CAMode, SecurityConfig
from scm_server.security.core import authz
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids
from scm_server.security.core import requests as reqs
from scm_server.security.core.identity import Role, identity_of
from scm_server.security.init import load_operator_sub_ca

REF = ClusterRef(name="scm", namespace="ozone", uid="u")
NOW = datetime.datetime.now(datetime.UTC)


def _write_secret(secret: dict, directory: Path) -> None:  # type: ignore[type-arg]
    directory.mkdir(parents=True, exist_ok=True)
    for k, v in secret["data"].items():
        (directory / k).write_bytes(base64.b64decode(v))


def test_member_certificate_passes_the_scm_checks(tmp_path: Path) -> None:
    spec, _ = parse_spec({"security": {"enabled": True}})
    root = certs.create_root_ca(ec.generate_private_key(ec.SECP256R1()), cluster="scm", namespace="ozone", now=NOW,
                                duration=datetime.timedelta(days=3650), serial=new_serial())
    pair = certs.issue_member_certificate(root, ec.generate_private_key(ec.SECP256R1()), ref=REF, member="scm-1",
                                          now=NOW, duration=datetime.timedelta(days=30), serial=new_serial())
    tls = tmp_path / "tls"
    _write_secret(certs.member_tls_secret(REF, "scm-1", pair, root.certificate), tls)
    # the ozone-site.xml the operator writes, with its paths moved under tmp_path
    cm = builders.build_configmap(REF, spec, ["scm-0", "scm-1"], "scm-0")
    conf = OzoneConfiguration()
    for p in ET.fromstring(cm["data"]["ozone-site.xml"]).iter("property"):
        conf.set(p.findtext("name") or "", (p.findtext("value") or "").replace("/var/run/ozone-scm/tls", str(tls)))
    config = SecurityConfig.from_conf(conf)
    assert config.ca_mode is CAMode.OPERATOR and config.tls
    material = load_operator_sub_ca(config, cluster_id="CID-x", now=NOW)
    ident = identity_of(material.certificate)
    assert ident.role is Role.SCM and ident.owner_id == "scm-1"
    # the operator's client certificate is an administrator under that configuration
    client = certs.issue_client_certificate(root, ec.generate_private_key(ec.SECP256R1()), ref=REF, now=NOW,
                                            duration=datetime.timedelta(days=30), serial=new_serial())
    who = identity_of(client.certificate)
    assert who.role is Role.CLIENT and who.common_name == "ozone-scm-operator"
    admins = [a for a in conf.get_str("ozone.administrators", "").split(",") if a]
    for method in ("TransferLeadership", "RemoveSCM", "GetScmRatisRoles", "GetScmInfo", "GetTableDigests"):
        decision = authz.authorize(who, f"/hadoop.hdds.scm.ha.InterSCMProtocolService/{method}", admins)
        assert decision.allowed, (method, decision)
    # and may revoke a removed member's certificate (the scale-down step), which a plain client may not
    revoke = f"/{authz.SECURITY_ADMIN}/RevokeCertificates"
    assert authz.authorize(who, revoke, admins).allowed
    other = certs._issue(root, ec.generate_private_key(ec.SECP256R1()), common_name="mallory", owner="", dns_names=(),
                         ca=False, now=NOW, duration=datetime.timedelta(days=1), serial=new_serial())
    assert not authz.authorize(identity_of(other.certificate), revoke, admins).allowed


def test_user_administrators_are_kept_next_to_the_operator() -> None:
    spec, _ = parse_spec({"security": {"enabled": True}, "ozoneSite": {"ozone.administrators": "alice,bob"}})
    assert builders.static_properties(spec)["ozone.administrators"] == "alice,bob,ozone-scm-operator"


def test_serials_are_in_the_external_range() -> None:
    assert all(new_serial() >= certs.EXTERNAL_SERIAL_FLOOR for _ in range(100))
    try:
        certs.create_root_ca(ec.generate_private_key(ec.SECP256R1()), cluster="c", namespace="n", now=NOW,
                             duration=datetime.timedelta(days=1), serial=5)
    except ValueError as exc:
        assert "below 2^63" in str(exc)
    else:
        raise AssertionError("a small serial was accepted")


def test_chain_in_tls_crt_is_member_then_root() -> None:
    root = certs.create_root_ca(ec.generate_private_key(ec.SECP256R1()), cluster="scm", namespace="ozone", now=NOW,
                                duration=datetime.timedelta(days=3650), serial=new_serial())
    pair = certs.issue_member_certificate(root, ec.generate_private_key(ec.SECP256R1()), ref=REF, member="scm-0",
                                          now=NOW, duration=datetime.timedelta(days=30), serial=new_serial())
    chain = x509.load_pem_x509_certificates(base64.b64decode(certs.member_tls_secret(REF, "scm-0", pair, root.certificate)["data"]["tls.crt"]))
    assert chain == [pair.certificate, root.certificate]


def test_ca_mode_scm_csr_is_what_scm_signs_at_init_and_the_secret_holds_the_chain() -> None:
    """CA mode scm: the operator's CSR passes SCM's own client-request check, its key hash is the one SCM looks the
    signed certificate up by, and the client Secret built from SCM's answer carries key, chain and root."""
    key = ec.generate_private_key(ec.SECP256R1())
    csr = certs.client_csr(key)
    approved = reqs.approve_client_request(csr, cluster_id="CID-x")
    assert approved.owner_id == "ozone-scm-operator"
    assert certs.public_key_sha256(key) == pki.public_key_sha256(key.public_key())
    csr_secret = certs.admin_csr_secret(REF, csr)
    assert csr_secret["metadata"]["annotations"]["ozone-scm.io/public-key-sha256"] == certs.public_key_sha256(key)
    assert x509.load_pem_x509_csr(base64.b64decode(csr_secret["data"]["operator.csr"])) == csr
    spec = pki.KeySpec("EC", 256, "SHA256withECDSA")
    root_key = pki.generate_key(spec)
    root = pki.build_root_ca(root_key, ids.root_ca_subject("scm-0.h", "sid", "CID-x"), serial=1, now=NOW,
                             lifetime=datetime.timedelta(days=3650), spec=spec)
    signed = pki.issue_certificate(approved.subject, approved.public_key, issuer=root, issuer_key=root_key,
                                   serial=new_serial(), now=NOW, lifetime=datetime.timedelta(days=365),
                                   profile=approved.profile, spec=spec)
    body = certs.client_tls_secret_from_scm(REF, key, [signed], root)
    assert body["metadata"]["name"] == "scm-operator-client" and body["type"] == "Opaque"
    ann = body["metadata"]["annotations"]
    assert ann["ozone-scm.io/public-key-sha256"] == certs.public_key_sha256(key)
    assert int(ann["ozone-scm.io/certificate-serial"], 16) == signed.serial_number
    chain = x509.load_pem_x509_certificates(base64.b64decode(body["data"]["tls.crt"]))
    assert chain == [signed, root] and x509.load_pem_x509_certificate(base64.b64decode(body["data"]["ca.crt"])) == root
    who = identity_of(signed)
    assert who.role is Role.CLIENT and who.common_name == "ozone-scm-operator"
    # the key-only Secret it replaces has the same name and type (a Secret's type cannot change)
    first = certs.client_key_secret(REF, key)
    assert (first["metadata"]["name"], first["type"]) == (body["metadata"]["name"], body["type"])
    # a certificate for another key, or from another root, is refused
    other = ec.generate_private_key(ec.SECP256R1())
    with pytest.raises(ValueError, match="not for the operator's key"):
        certs.client_tls_secret_from_scm(REF, other, [signed], root)
    foreign_key = pki.generate_key(spec)
    foreign = pki.build_root_ca(foreign_key, ids.root_ca_subject("x", "y", "CID-x"), serial=1, now=NOW,
                                lifetime=datetime.timedelta(days=10), spec=spec)
    with pytest.raises(Exception):  # noqa: B017 (cryptography raises InvalidSignature or ValueError)
        certs.client_tls_secret_from_scm(REF, key, [signed], foreign)


def test_member_certificates_carry_the_scm_role_names_and_legacy_ones_are_refused_with_the_fix(tmp_path: Path) -> None:
    """The operator's spelling of the role SANs is SCM's; a member certificate issued before them (no role
    names) is refused by the SCM with a one-line error naming the operator as the fix, and the Secret
    of a role-bound certificate is annotated so the planner knows which ones to re-issue."""
    assert certs.SCM_ROLE_NAME == ids.SCM_ROLE_NAME
    assert certs.role_uri("scm", "scm-1") == ids.role_uri(Role.SCM, "", "scm-1")
    root = certs.create_root_ca(ec.generate_private_key(ec.SECP256R1()), cluster="scm", namespace="ozone", now=NOW,
                                duration=datetime.timedelta(days=3650), serial=new_serial())
    pair = certs.issue_member_certificate(root, ec.generate_private_key(ec.SECP256R1()), ref=REF, member="scm-1",
                                          now=NOW, duration=datetime.timedelta(days=30), serial=new_serial())
    assert ids.has_scm_role_name(pair.certificate)
    assert ids.role_claim(pair.certificate) == ids.RoleClaim(Role.SCM, "", "scm-1")
    secret = certs.member_tls_secret(REF, "scm-1", pair, root.certificate)
    assert secret["metadata"]["annotations"][certs.naming.ANN_ROLE_BOUND] == "true"
    # an old operator's certificate: the same, without the role SANs
    legacy = certs._issue(root, ec.generate_private_key(ec.SECP256R1()), common_name="scm-sub@scm-1.x", owner="scm-1",
                          dns_names=["scm-1.x"], ca=True, now=NOW, duration=datetime.timedelta(days=30),
                          serial=new_serial())
    assert certs.naming.ANN_ROLE_BOUND not in certs.member_tls_secret(REF, "scm-1", legacy, root.certificate)[
        "metadata"]["annotations"]
    tls = tmp_path / "tls"
    _write_secret(certs.member_tls_secret(REF, "scm-1", legacy, root.certificate), tls)
    config = SecurityConfig(security_enabled=True, grpc_tls_enabled=True,
                            subca_certificate_file=str(tls / "tls.crt"), subca_private_key_file=str(tls / "tls.key"),
                            rootca_certificate_file=str(tls / "ca.crt"), key_algorithm="EC", key_length=256,
                            signature_algorithm="SHA256withECDSA")
    with pytest.raises(Exception, match=r"predates role-bound identities.*re-issue"):
        load_operator_sub_ca(config, cluster_id="CID-x", now=NOW)
    # during an upgrade (ozone.scm.security.role.check=false) the SCM still takes it
    load_operator_sub_ca(dataclasses.replace(config, scm_role_check=False), cluster_id="CID-x", now=NOW)
