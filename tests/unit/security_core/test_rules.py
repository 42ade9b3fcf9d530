"""Pure security rules: identities from certificates, the authorization table, CSR validation
(every refusal named in issue 7), and the enrolment proofs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from scm_server.security.core import authz, enrollment
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids
from scm_server.security.core import requests as reqs

from .pki_helpers import CLUSTER, EC, NOW, SCM1, make_pki

SCM2 = "0b5c4c2e-0000-4000-8000-000000000002"
HOSTS = {"scm1": "10.0.0.1", "scm2": "10.0.0.2"}


def csr_for(subject: pki.SubjectInfo, *, request_ca: bool = False) -> x509.CertificateSigningRequest:
    return pki.build_csr(pki.generate_key(EC), subject, EC, request_ca=request_ca)


# ---------------------------------------------------------------- identities and authorization


def test_identity_roles_from_certificates() -> None:
    p = make_pki()
    dn, _ = p.datanode(uuid="dn-uuid")
    admin, _ = p.client("alice")
    assert ids.identity_of(dn).role is ids.Role.DATANODE and ids.identity_of(dn).owner_id == "dn-uuid"
    assert ids.identity_of(admin).role is ids.Role.CLIENT and ids.identity_of(admin).name == "alice"
    assert ids.identity_of(p.sub).name == f"scm:{SCM1}"


def _ident(role: ids.Role, cn: str = "x") -> ids.Identity:
    return ids.Identity(role, cn, "owner", CLUSTER, 9, NOW)


@pytest.mark.parametrize(
    ("role", "cn", "method", "allowed"),
    [
        (ids.Role.SCM, "scm-sub@h", "/scm.raft.RaftPeer/Deliver", True),
        (ids.Role.DATANODE, "dn@h", "/scm.raft.RaftPeer/Deliver", False),
        (ids.Role.CLIENT, "admin", "/scm.raft.RaftPeer/Deliver", False),
        (ids.Role.SCM, "scm-sub@h", "/hadoop.hdds.scm.ha.InterSCMProtocolService/AddSCM", True),
        (ids.Role.CLIENT, "admin", "/hadoop.hdds.scm.ha.InterSCMProtocolService/AddSCM", False),
        (ids.Role.CLIENT, "admin", "/hadoop.hdds.scm.ha.InterSCMProtocolService/TransferLeadership", True),
        (ids.Role.CLIENT, "bob", "/hadoop.hdds.scm.ha.InterSCMProtocolService/TransferLeadership", False),
        (ids.Role.CLIENT, "bob", "/hadoop.hdds.scm.ha.InterSCMProtocolService/GetScmRatisRoles", True),
        (ids.Role.DATANODE, "dn@h", "/hadoop.hdds.StorageContainerDatanodeProtocolService/SendHeartbeat", True),
        (ids.Role.CLIENT, "bob", "/hadoop.hdds.StorageContainerDatanodeProtocolService/SendHeartbeat", False),
        (ids.Role.CLIENT, "admin", "/hadoop.hdds.StorageContainerDatanodeProtocolService/SendHeartbeat", True),
        (ids.Role.CLIENT, "bob", "/hadoop.hdds.StorageContainerLocationProtocolService/ForceExitSafeMode", False),
        (ids.Role.CLIENT, "admin", "/hadoop.hdds.StorageContainerLocationProtocolService/ForceExitSafeMode", True),
        (ids.Role.DATANODE, "admin", "/hadoop.hdds.StorageContainerLocationProtocolService/ForceExitSafeMode", False),
        (ids.Role.CLIENT, "bob", "/hadoop.hdds.StorageContainerLocationProtocolService/InSafeMode", True),
        (ids.Role.DATANODE, "dn@h", "/hadoop.hdds.ScmBlockLocationProtocolService/AllocateScmBlock", False),
        (ids.Role.OM, "om@h", "/hadoop.hdds.ScmBlockLocationProtocolService/AllocateScmBlock", True),
        (ids.Role.CLIENT, "bob", "/hadoop.hdds.security.SCMSecurityAdminProtocolService/RevokeCertificates", False),
        (ids.Role.CLIENT, "admin", "/hadoop.hdds.security.SCMSecurityAdminProtocolService/RevokeCertificates", True),
        (ids.Role.CLIENT, "bob", "/some.New/Method", False),  # unlisted: admin only
        (ids.Role.ROOT_CA, "scm-root@h", "/hadoop.hdds.StorageContainerLocationProtocolService/InSafeMode", False),
    ],
)
def test_authorization_table(role: ids.Role, cn: str, method: str, allowed: bool) -> None:
    decision = authz.authorize(_ident(role, cn), method, ("admin",))
    assert decision.allowed is allowed, decision.reason
    if not allowed:
        assert decision.reason


def test_denial_message_names_the_user_and_the_key() -> None:
    d = authz.authorize(_ident(ids.Role.CLIENT, "bob"), "/hadoop.hdds.StorageContainerLocationProtocolService/ForceExitSafeMode", ())
    assert "bob" in d.reason and "ozone.administrators" in d.reason
    assert authz.authorize(_ident(ids.Role.CLIENT, "bob"), "/x.Y/ForceExitSafeMode", ("*",)).allowed


# ---------------------------------------------------------------- SCM (sub-CA) requests


def _scm(csr: x509.CertificateSigningRequest, **kw: object) -> reqs.Approved:
    args: dict[str, object] = dict(cluster_id=CLUSTER, claimed_cluster_id=CLUSTER, node_id="scm2", scm_id=SCM2,
                                   hostname="10.0.0.2", configured_hosts=HOSTS, issued=(), now=NOW)
    args.update(kw)
    return reqs.approve_scm_request(csr, **args)  # type: ignore[arg-type]


def test_scm_request_is_approved_as_a_sub_ca_with_the_configured_host() -> None:
    approved = _scm(csr_for(ids.scm_subject("10.0.0.2", SCM2, CLUSTER), request_ca=True))
    assert approved.profile is pki.Profile.SUB_CA and approved.role is ids.Role.SCM
    assert approved.subject.common_name == "scm-sub@10.0.0.2" and approved.subject.owner_id == SCM2


@pytest.mark.parametrize(
    ("kw", "code", "match"),
    [
        ({"claimed_cluster_id": "CID-other"}, "INVALID_CLUSTER_ID", "ClusterId mismatch"),
        ({"node_id": "scm9"}, "PERMISSION_DENIED", "not a configured SCM"),
        ({"hostname": "10.9.9.9"}, "PERMISSION_DENIED", "configured at"),
        ({"scm_id": "not-a-uuid"}, "INVALID_REQUEST", "not a UUID"),
    ],
)
def test_scm_request_refusals(kw: dict[str, object], code: str, match: str) -> None:
    host = str(kw.get("hostname", "10.0.0.2"))
    with pytest.raises(reqs.RequestRejected, match=match) as info:
        _scm(csr_for(ids.scm_subject(host, SCM2, CLUSTER), request_ca=True), **kw)
    assert info.value.code == code


def test_scm_request_with_csr_of_another_cluster_is_refused() -> None:
    with pytest.raises(reqs.RequestRejected, match="names cluster") as info:
        _scm(csr_for(ids.scm_subject("10.0.0.2", SCM2, "CID-other")))
    assert info.value.code == "INVALID_CLUSTER_ID"


def test_duplicate_scm_node_id_is_refused_unless_revoked_or_expired_or_same_scm() -> None:
    live = reqs.IssuedRecord("5", ids.Role.SCM, "0b5c4c2e-0000-4000-8000-0000000000ff", "scm2", NOW + timedelta(days=9), False)
    csr = csr_for(ids.scm_subject("10.0.0.2", SCM2, CLUSTER), request_ca=True)
    with pytest.raises(reqs.RequestRejected, match="already holds certificate serial 5") as info:
        _scm(csr, issued=[live])
    assert info.value.code == "PERMISSION_DENIED"
    for ok in (
        reqs.IssuedRecord("5", ids.Role.SCM, live.owner_id, "scm2", live.not_after, True),  # revoked
        reqs.IssuedRecord("5", ids.Role.SCM, live.owner_id, "scm2", NOW - timedelta(seconds=1), False),  # expired
        reqs.IssuedRecord("5", ids.Role.SCM, SCM2, "scm2", live.not_after, False),  # same SCM retrying
    ):
        assert _scm(csr, issued=[ok]).role is ids.Role.SCM


def test_malformed_or_forged_csr_is_refused() -> None:
    good = csr_for(ids.scm_subject("10.0.0.2", SCM2, CLUSTER))
    der = bytearray(good.public_bytes(__import__("cryptography").hazmat.primitives.serialization.Encoding.DER))
    der[-5] ^= 0xFF  # break the signature
    forged = x509.load_der_x509_csr(bytes(der))
    with pytest.raises(reqs.RequestRejected, match="signature") as info:
        _scm(forged)
    assert info.value.code == "INVALID_CSR"


# ---------------------------------------------------------------- datanode / client requests


def test_datanode_request_becomes_an_end_entity_named_after_the_node() -> None:
    approved = reqs.approve_node_request(
        csr_for(ids.datanode_subject("dn1", "u-1", CLUSTER)), role=ids.Role.DATANODE, cluster_id=CLUSTER,
        claimed_cluster_id=CLUSTER, owner_id="u-1", hostname="dn1", ip="10.0.0.1",
    )
    assert approved.profile is pki.Profile.END_ENTITY
    assert approved.subject.common_name == "dn@dn1" and approved.subject.hostnames == ("dn1", "10.0.0.1")


def test_datanode_asking_for_ca_rights_is_refused() -> None:
    with pytest.raises(reqs.RequestRejected, match="may not ask for CA rights") as info:
        reqs.approve_node_request(
            csr_for(ids.datanode_subject("dn1", "u-1", CLUSTER), request_ca=True), role=ids.Role.DATANODE,
            cluster_id=CLUSTER, claimed_cluster_id=CLUSTER, owner_id="u-1", hostname="dn1",
        )
    assert info.value.code == "PERMISSION_DENIED"


def test_datanode_cannot_become_an_admin_whatever_it_asks() -> None:
    """A datanode's CSR with CN=admin still gets CN=dn@<host>: the signer names it, not the CSR."""
    approved = reqs.approve_node_request(
        csr_for(pki.SubjectInfo("admin", "", CLUSTER)), role=ids.Role.DATANODE, cluster_id=CLUSTER,
        claimed_cluster_id=CLUSTER, owner_id="u-1", hostname="dn1",
    )
    assert approved.subject.common_name == "dn@dn1"
    assert not authz.is_admin(ids.Identity(ids.Role.DATANODE, "admin", "u", CLUSTER, 3, NOW), ("admin",))


def test_client_request_names_a_user_and_refuses_service_names_and_ca() -> None:
    assert reqs.approve_client_request(csr_for(pki.SubjectInfo("alice")), cluster_id=CLUSTER).owner_id == "alice"
    with pytest.raises(reqs.RequestRejected, match="not a valid user name"):
        reqs.approve_client_request(csr_for(pki.SubjectInfo("dn@evil")), cluster_id=CLUSTER)
    with pytest.raises(reqs.RequestRejected, match="CA rights"):
        reqs.approve_client_request(csr_for(pki.SubjectInfo("alice"), request_ca=True), cluster_id=CLUSTER)


def test_renewal_keeps_the_subject_and_host_names() -> None:
    p = make_pki()
    dn, _ = p.datanode(uuid="u-9", host="127.0.0.1")
    approved = reqs.approve_renewal(csr_for(pki.SubjectInfo("whatever")), current=dn,
                                    identity=ids.identity_of(dn), cluster_id=CLUSTER)
    assert approved.subject.to_name() == dn.subject and approved.subject.hostnames == ("127.0.0.1",)
    assert approved.profile is pki.Profile.END_ENTITY
    renewed_scm = reqs.approve_renewal(csr_for(pki.SubjectInfo("x"), request_ca=True), current=p.sub,
                                       identity=ids.identity_of(p.sub), cluster_id=CLUSTER)
    assert renewed_scm.profile is pki.Profile.SUB_CA
    with pytest.raises(reqs.RequestRejected, match="CA rights"):
        reqs.approve_renewal(csr_for(pki.SubjectInfo("x"), request_ca=True), current=dn,
                             identity=ids.identity_of(dn), cluster_id=CLUSTER)


# ---------------------------------------------------------------- enrolment proofs


def test_enrollment_proof_is_bound_to_role_secret_and_csr() -> None:
    import dataclasses

    secret = b"s" * 32
    claims = enrollment.EnrollmentClaims("datanode", "CID", "", "u1", "dn1", "", b"csr-der", 1, b"n" * 16)
    proof = enrollment.enrollment_proof(secret, claims)
    assert enrollment.verify_enrollment_proof(secret, claims, proof)
    assert not enrollment.verify_enrollment_proof(secret, dataclasses.replace(claims, role="scm"), proof)
    assert not enrollment.verify_enrollment_proof(b"t" * 32, claims, proof)
    assert not enrollment.verify_enrollment_proof(secret, dataclasses.replace(claims, csr_der=b"other-csr"), proof)
    ca = enrollment.ca_proof(secret, b"nonce", b"root")
    assert enrollment.verify_ca_proof(secret, b"nonce", b"root", ca)
    assert not enrollment.verify_ca_proof(secret, b"nonce", b"fake-root", ca)
    with pytest.raises(ValueError, match="at least 16"):
        enrollment.check_secret(b"short\n", "f")
    assert enrollment.check_secret(b"  " + secret + b"\n", "f") == secret


def test_csr_subject_attribute_helper_reads_common_name() -> None:
    csr = csr_for(pki.SubjectInfo("alice", "ou", CLUSTER))
    assert csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
