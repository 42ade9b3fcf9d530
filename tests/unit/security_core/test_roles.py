"""Issue 19, "a certificate proves a role": the role SANs only the CA writes, how a certificate's role is read,
the Raft sender binding, renewal re-deriving role SANs, and certificates issued before role names (pure parts,
plus the start-time re-issue of a legacy sub-CA by the root holder)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography import x509

from scm_server.conf import OzoneConfiguration
from scm_server.conf.security import SecurityConfig
from scm_server.exceptions import ConfigError
from scm_server.security import init as sec_init
from scm_server.security.core import authz
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids
from scm_server.security.core import requests as reqs
from scm_server.security.core.identity import Role

from .pki_helpers import CLUSTER, EC, NOW, SCM1, make_pki


def _sans(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return san.get_values_for_type(x509.DNSName), san.get_values_for_type(x509.UniformResourceIdentifier)


def _issue(p: object, subject: pki.SubjectInfo, *, ca: bool) -> x509.Certificate:
    key = pki.generate_key(EC)
    return pki.issue_certificate(
        subject, key.public_key(), issuer=p.sub, issuer_key=p.sub_key, serial=77, now=NOW,  # type: ignore[attr-defined]
        lifetime=timedelta(days=1), profile=pki.Profile.SUB_CA if ca else pki.Profile.END_ENTITY, spec=EC,
    )


def test_every_issued_certificate_names_its_role_and_only_scms_carry_the_reserved_name() -> None:
    p = make_pki()
    dns, uris = _sans(p.sub)
    assert dns == [ids.SCM_ROLE_NAME]  # the host 127.0.0.1 is an IP SAN
    assert uris == [f"ozone-scm://{CLUSTER}/scm/{SCM1}"]
    assert ids.role_claim(p.sub) == ids.RoleClaim(Role.SCM, CLUSTER, SCM1) and ids.has_scm_role_name(p.sub)
    dn, _ = p.datanode("dn-7", host="127.0.0.1")
    assert ids.identity_of(dn).role is Role.DATANODE and ids.role_claim(dn) == ids.RoleClaim(Role.DATANODE, CLUSTER, "dn-7")
    assert not ids.reserved_names_of(dn) and not ids.has_scm_role_name(dn)
    admin, _ = p.client("alice")
    assert ids.role_claim(admin) == ids.RoleClaim(Role.CLIENT, CLUSTER, "alice")
    assert not ids.reserved_names_of(admin)
    om = _issue(p, ids.om_subject("om.example.com", "om-1", CLUSTER), ca=False)
    assert ids.identity_of(om).role is Role.OM


def test_a_csr_never_carries_role_sans_and_the_signer_adds_them() -> None:
    key = pki.generate_key(EC)
    csr = pki.build_csr(key, ids.datanode_subject("dn1.example.com", "dn-1", CLUSTER), EC)
    san = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["dn1.example.com"]
    assert san.get_values_for_type(x509.UniformResourceIdentifier) == []
    approved = reqs.approve_node_request(csr, role=Role.DATANODE, cluster_id=CLUSTER, claimed_cluster_id=CLUSTER,
                                         owner_id="dn-1", hostname="dn1.example.com")
    assert approved.subject.uris == (f"ozone-scm://{CLUSTER}/datanode/dn-1",) and approved.subject.role_names == ()


def test_the_role_is_read_from_the_role_uri_not_the_common_name() -> None:
    p = make_pki()
    # a client whose CN looks like a datanode's: the role URI decides
    odd = _issue(p, ids.role_bound(pki.SubjectInfo("dn@host", "", CLUSTER), Role.CLIENT), ca=False)
    assert ids.identity_of(odd).role is Role.CLIENT


@pytest.mark.parametrize(
    "subject, ca, match",
    [
        (pki.SubjectInfo("x", "", CLUSTER, uris=(ids.role_uri(Role.SCM, CLUSTER, "s"),)), False,
         "claims role SCM but is not a CA"),
        (pki.SubjectInfo("x", "", CLUSTER, uris=(ids.role_uri(Role.DATANODE, CLUSTER, "d"),)), True,
         "claims role DATANODE but is a CA"),
        (pki.SubjectInfo("x", "", CLUSTER, uris=(ids.role_uri(Role.DATANODE, CLUSTER, "d"),
                                                 ids.role_uri(Role.CLIENT, CLUSTER, "x"))), False, "several roles"),
        (pki.SubjectInfo("x", "", CLUSTER, role_names=(ids.SCM_ROLE_NAME,),
                         uris=(ids.role_uri(Role.DATANODE, CLUSTER, "d"),)), False, "carries the reserved name"),
        (pki.SubjectInfo("x", "", CLUSTER, role_names=(ids.SCM_ROLE_NAME,)), False, "but no role URI"),
        (pki.SubjectInfo("x", "", CLUSTER, uris=(ids.role_uri(Role.CLIENT, "CID-other", "x"),)), False,
         "names cluster"),
        (pki.SubjectInfo("x", "", CLUSTER, uris=("ozone-scm://c/admin/x",)), False, "malformed role URI"),
    ],
)
def test_certificates_that_contradict_their_role_are_unusable(subject: pki.SubjectInfo, ca: bool, match: str) -> None:
    cert = _issue(make_pki(), subject, ca=ca)
    with pytest.raises(pki.PKIError, match=match):
        ids.identity_of(cert)


def test_certificates_issued_before_role_uris_keep_the_old_reading() -> None:
    p = make_pki()
    legacy_dn = _issue(p, pki.SubjectInfo("dn@h", "dn-1", CLUSTER, ("h",)), ca=False)
    legacy_scm = _issue(p, pki.SubjectInfo("scm-sub@h", "s", CLUSTER, ("h",)), ca=True)
    assert ids.role_claim(legacy_dn) is None and ids.identity_of(legacy_dn).role is Role.DATANODE
    assert ids.identity_of(legacy_scm).role is Role.SCM and not ids.has_scm_role_name(legacy_scm)


def test_role_uris_round_trip_and_other_schemes_are_not_claims() -> None:
    uri = ids.role_uri(Role.CLIENT, CLUSTER, "a b/c")
    assert ids.parse_role_uri(uri) == ids.RoleClaim(Role.CLIENT, CLUSTER, "a b/c")
    assert ids.parse_role_uri("https://example.com/x") is None
    assert ids.is_reserved_name("SCM.Ozone-SCM.invalid.") and not ids.is_reserved_name("scm.example.com")


def test_renewal_rederives_the_role_sans_and_drops_reserved_names_from_hosts() -> None:
    p = make_pki()
    legacy = _issue(p, pki.SubjectInfo("scm-sub@h.example.com", SCM1, CLUSTER, ("h.example.com",)), ca=True)
    key = pki.generate_key(EC)
    csr = pki.build_csr(key, pki.SubjectInfo("scm-sub@h.example.com"), EC, request_ca=True)
    approved = reqs.approve_renewal(csr, current=legacy, identity=ids.identity_of(legacy), cluster_id=CLUSTER)
    assert approved.subject.hostnames == ("h.example.com",)
    assert approved.subject.role_names == (ids.SCM_ROLE_NAME,)
    assert approved.subject.uris == (ids.role_uri(Role.SCM, CLUSTER, SCM1),)
    # renewing a role-bound certificate does not turn its role name into a host name
    again = reqs.approve_renewal(csr, current=p.sub, identity=ids.identity_of(p.sub), cluster_id=CLUSTER)
    assert ids.SCM_ROLE_NAME not in again.subject.hostnames


def _scm(owner: str, serial: int = 5) -> ids.Identity:
    return ids.Identity(Role.SCM, "scm-sub@h", owner, CLUSTER, serial, NOW)


def test_a_raft_sender_must_be_the_certificates_own_node() -> None:
    members = {"uuid-1": "uuid-1", "uuid-2": "uuid-2", "scm-1": "uuid-1", "scm-2": "uuid-2"}
    # CA mode scm: OU = scmUuid = the Raft peer id
    assert authz.sender_denial(_scm("uuid-2"), "uuid-2", members) is None
    denial = authz.sender_denial(_scm("uuid-2"), "uuid-1", members)
    assert denial is not None and "uuid-1" in denial and "uuid-2" in denial
    # CA mode operator: OU = node id, resolved to its peer id
    assert authz.sender_denial(_scm("scm-2"), "uuid-2", members) is None
    assert authz.sender_denial(_scm("scm-2"), "uuid-1", members) is not None
    # an SCM being added (no member yet) may send as its own new id, never as a member's
    assert authz.sender_denial(_scm("scm-3"), "uuid-3", members) is None
    assert authz.sender_denial(_scm("scm-3"), "uuid-1", members) is not None
    # a member may not invent an id either; other roles and owner-less certificates never send Raft messages
    assert authz.sender_denial(_scm("uuid-2"), "uuid-9", members) is not None
    assert authz.sender_denial(dataclasses.replace(_scm("dn-1"), role=Role.DATANODE), "dn-1", members) is not None
    assert "names no node" in (authz.sender_denial(_scm(""), "uuid-1", members) or "")


def _conf(tmp: Path, **extra: str) -> OzoneConfiguration:
    return OzoneConfiguration({
        "ozone.metadata.dirs": str(tmp / "meta"), "ozone.security.enabled": "true", "hdds.grpc.tls.enabled": "true",
        "hdds.key.algo": "EC", "hdds.key.len": "256", "hdds.x509.signature.algorithm": "SHA256withECDSA", **extra,
    })


def _make_legacy(tmp: Path, config: SecurityConfig, scm_id: str) -> x509.Certificate:
    """Replace the --init sub-CA with one issued the old way (no role SANs), same key and subject."""
    store = sec_init.sub_ca_store(tmp / "meta", config)
    m = store.load()
    root_key = sec_init.root_ca_store(tmp / "meta", config).load(root_ca=True).key
    old = pki.issue_certificate(
        pki.SubjectInfo("scm-sub@scm1.example.com", scm_id, CLUSTER, ("scm1.example.com",)), m.key.public_key(),
        issuer=m.roots[0], issuer_key=root_key, serial=2, now=NOW, lifetime=timedelta(days=365),
        profile=pki.Profile.SUB_CA, spec=EC,
    )
    store.save(m.key, [old], list(m.roots))
    return old


def test_a_legacy_sub_ca_is_reissued_at_start_by_the_root_holder_and_refused_elsewhere(tmp_path: Path) -> None:
    scm_id = str(uuid.uuid4())
    conf = _conf(tmp_path)
    sec_init.initialize_primordial(
        SecurityConfig.from_conf(conf), metadata_dir=tmp_path / "meta", cluster_id=CLUSTER, scm_id=scm_id,
        hostname="scm1.example.com", now=NOW,
    )
    config = SecurityConfig.from_conf(conf)
    old = _make_legacy(tmp_path, config, scm_id)
    # with the upgrade switch off the SCM starts on it (and renews it at its first check)
    off = dataclasses.replace(config, scm_role_check=False)
    assert sec_init.load_scm_material(off, tmp_path / "meta", CLUSTER, now=NOW).material.certificate == old
    # the root holder re-issues it: same key and subject, now with the role SANs, stored for the next start
    loaded = sec_init.load_scm_material(config, tmp_path / "meta", CLUSTER, now=NOW)
    new = loaded.material.certificate
    assert ids.has_scm_role_name(new) and new.subject == old.subject and new.public_key() == old.public_key()
    assert new.serial_number >= pki.EXTERNAL_SERIAL_FLOOR
    assert new.not_valid_after_utc == old.not_valid_after_utc  # the rest of its lifetime, counted from the given now
    assert _sans(new)[0] == ["scm1.example.com", ids.SCM_ROLE_NAME]
    assert sec_init.sub_ca_store(tmp_path / "meta", config).load().certificate == new
    # without the root key: a one-line error naming the cause and the fix
    _make_legacy(tmp_path, config, scm_id)
    root_dir = sec_init.root_ca_store(tmp_path / "meta", config).base
    root_dir.rename(root_dir.with_name("moved"))
    with pytest.raises(ConfigError, match="predates role-bound identities") as info:
        sec_init.load_scm_material(config, tmp_path / "meta", CLUSTER, now=NOW)
    message = str(info.value)
    assert "\n" not in message and ids.SCM_ROLE_NAME in message and "ozone.scm.security.role.check=false" in message
