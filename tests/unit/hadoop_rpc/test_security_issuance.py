"""Certificates for Kerberos-authenticated datanodes and OMs over SCMSecurityProtocol, against a real in-process
secure SCM's CA: the role and host come from the principal, never from the CSR; the attacks of issue 30 (the
OM's principal asking for a datanode certificate, a datanode principal asking for another host or another
datanode's id, a CSR forging its role) are refused and store nothing; renewal by asking again supersedes."""

from __future__ import annotations

import itertools
import re
import uuid
from typing import Any

import pytest

from scm_server import hadoop_ipc as codec
from scm_server.proto.ozone import ScmServerSecurityProtocol_pb2 as wire_sec
from scm_server.proto.ozone import hdds_pb2 as wire
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids
from scm_server.security.core import principals
from scm_server.security.core.requests import RequestRejected
from scm_server.server.hadoop_rpc.security_translator import (
    PROTOCOL,
    SecurityIssuer,
    SecurityReader,
    SecurityTranslator,
)
from tests.unit.security_core.test_renewal_clock import harness  # noqa: F401  (the in-process secure SCM fixture)

EC = pki.KeySpec("EC", 256, "SHA256withECDSA")
Req = wire_sec.SCMSecurityRequest
Resp = wire_sec.SCMSecurityResponse
IDS = itertools.count(1)
REALM = "EXAMPLE.COM"


def csr(cn: str = "dn@dn1.example.com", *, cluster: str = "null", owner: str = "null", hosts: tuple[str, ...] = (),
        request_ca: bool = False) -> tuple[str, pki.PrivateKey]:
    """A CSR as Ozone's datanode writes it before it registered (O=null, OU=null), or with what the test forges."""
    key = pki.generate_key(EC)
    subject = pki.SubjectInfo(cn, owner, cluster, hosts)
    return pki.csr_pem(pki.build_csr(key, subject, EC, request_ca=request_ca)), key


async def ask(h: Any, user: str, cmd: int, *, authenticated: bool = True, **fields: Any) -> Resp:
    translator = SecurityTranslator(SecurityReader(h.security), SecurityIssuer(h.security), administrators=("admin",))
    body = Req(cmdType=cmd, traceID="t", **fields).SerializeToString()  # type: ignore[arg-type]
    call = codec.Call(call_id=next(IDS), client_id=b"c" * 16, retry_count=0, protocol=PROTOCOL,
                      method="submitRequest", client_version=1, body=body, user=user, authenticated=authenticated)
    return Resp.FromString(await translator.call("submitRequest", call))


def dn_request(host: str, dn_uuid: str, csr_pem: str) -> dict[str, Any]:
    return {"getDataNodeCertRequest": {"datanodeDetails": {"uuid": dn_uuid, "ipAddress": "10.0.0.7", "hostName": host},
                                       "CSR": csr_pem}}


def valid_serials(h: Any) -> set[str]:
    return {p.serialId for p in h.ca.store.list_certificates(scm_certs=False)}


def test_principal_binding_is_pure_and_strict() -> None:
    primaries = {ids.Role.DATANODE: "dn", ids.Role.OM: "om"}
    assert principals.bind(f"dn/dn1.example.com@{REALM}", ids.Role.DATANODE, "DN1.example.com.", primaries).instance
    for name, role, host, reason in (
        (f"om/om1@{REALM}", ids.Role.DATANODE, "om1", "it is a OM principal"),
        (f"dn/dn1@{REALM}", ids.Role.OM, "dn1", "it is a DATANODE principal"),
        (f"dn/dn1@{REALM}", ids.Role.DATANODE, "dn2", "for its own host (dn1) only"),
        (f"alice@{REALM}", ids.Role.DATANODE, "dn1", "it is not a service principal"),
        (f"dn@{REALM}", ids.Role.DATANODE, "dn1", "names no host"),
        ("dn/a/b@R", ids.Role.DATANODE, "a", "is not a Kerberos principal"),
        (f"scm/scm1@{REALM}", ids.Role.SCM, "scm1", "not issued to Kerberos principals"),
    ):
        with pytest.raises(RequestRejected, match=re.escape(reason)):
            principals.bind(name, role, host, primaries)


async def test_a_datanode_principal_gets_a_datanode_certificate_for_its_own_host(harness: Any) -> None:  # noqa: F811
    h = harness
    dn_uuid = str(uuid.uuid4())
    # the CSR forges its role: CN of an OM, O/OU Ozone's "null"; the certificate says what the principal proves
    pem, key = csr("om@dn1.example.com")
    resp = await ask(h, f"dn/dn1.example.com@{REALM}", wire_sec.GetDataNodeCertificate,
                     **dn_request("dn1.example.com", dn_uuid, pem))
    assert resp.success and resp.status == wire_sec.OK, resp.message
    got = resp.getCertResponseProto
    chain = pki.load_certificates(got.x509Certificate)
    cert = chain[0]
    who = ids.identity_of(cert)
    assert who.role is ids.Role.DATANODE and who.owner_id == dn_uuid and who.cluster_id == h.scm.storage_config.cluster_id
    assert who.common_name == "dn@dn1.example.com"
    assert pki.key_matches(cert, key) is not False
    assert not pki.is_ca(cert)
    assert got.x509RootCACertificate == pki.cert_pem(h.ca.root)
    pki.verify_end_entity(cert, chain[1:], [h.ca.root], now=cert.not_valid_before_utc)  # chains to the root
    assert str(cert.serial_number) in valid_serials(h)  # recorded through the replicated store


@pytest.mark.parametrize("user, host, reason", [
    (f"om/om1.example.com@{REALM}", "om1.example.com", "may not get a datanode certificate"),  # the OM's principal
    (f"dn/dn1.example.com@{REALM}", "dn2.example.com", "for its own host (dn1.example.com) only"),  # another host
    (f"alice@{REALM}", "dn1.example.com", "not a service principal"),
])
async def test_refusals_store_nothing(harness: Any, user: str, host: str, reason: str) -> None:  # noqa: F811
    h = harness
    before = valid_serials(h)
    pem, _ = csr(f"dn@{host}")
    resp = await ask(h, user, wire_sec.GetDataNodeCertificate, **dn_request(host, str(uuid.uuid4()), pem))
    assert not resp.success and resp.status == wire_sec.UNABLE_TO_ISSUE_CERTIFICATE
    assert reason in resp.message and "GetDataNodeCertificate refused" in resp.message
    assert not resp.HasField("getCertResponseProto")
    assert valid_serials(h) == before


async def test_a_csr_asking_for_ca_rights_or_another_cluster_is_refused(harness: Any) -> None:  # noqa: F811
    h = harness
    before = valid_serials(h)
    user = f"dn/dn1.example.com@{REALM}"
    pem, _ = csr(request_ca=True)
    ca = await ask(h, user, wire_sec.GetDataNodeCertificate, **dn_request("dn1.example.com", str(uuid.uuid4()), pem))
    assert not ca.success and "may not ask for CA rights" in ca.message
    pem, _ = csr(cluster="CID-other", owner="scm-x")
    other = await ask(h, user, wire_sec.GetDataNodeCertificate, **dn_request("dn1.example.com", str(uuid.uuid4()), pem))
    assert not other.success and "CID-other" in other.message
    assert valid_serials(h) == before


async def test_asking_again_renews_and_another_host_cannot_take_the_id(harness: Any) -> None:  # noqa: F811
    h = harness
    dn_uuid = str(uuid.uuid4())
    user = f"dn/dn1.example.com@{REALM}"
    first = await ask(h, user, wire_sec.GetDataNodeCertificate, **dn_request("dn1.example.com", dn_uuid, csr()[0]))
    old = pki.load_certificates(first.getCertResponseProto.x509Certificate)[0]
    # another datanode's principal may not take that datanode's id over
    thief = await ask(h, f"dn/dn9.example.com@{REALM}", wire_sec.GetDataNodeCertificate,
                      **dn_request("dn9.example.com", dn_uuid, csr("dn@dn9.example.com")[0]))
    assert not thief.success and f"holds certificate serial {old.serial_number} for host dn1.example.com" in thief.message
    # Ozone's renewal: the holder asks again with a new key
    pem, key = csr()
    again = await ask(h, user, wire_sec.GetDataNodeCertificate, **dn_request("dn1.example.com", dn_uuid, pem))
    assert again.success, again.message
    new = pki.load_certificates(again.getCertResponseProto.x509Certificate)[0]
    assert new.serial_number != old.serial_number and pki.key_matches(new, key) is not False
    record = h.ca.store.revocation(str(old.serial_number))
    assert record is not None and record.supersededBy == str(new.serial_number)


async def test_om_certificates_and_get_cert(harness: Any) -> None:  # noqa: F811
    h = harness
    om_user = f"OM/om1.example.com@{REALM}"  # Ozone's default ozone.om.kerberos.principal is OM/_HOST@REALM
    om = await ask(h, om_user, wire_sec.GetOMCertificate, getOMCertRequest={
        "omDetails": {"uuid": "om-1", "ipAddress": "10.0.0.9", "hostName": "om1.example.com"},
        "CSR": csr("om@om1.example.com")[0]})
    assert om.success, om.message
    assert ids.identity_of(pki.load_certificates(om.getCertResponseProto.x509Certificate)[0]).role is ids.Role.OM
    generic = await ask(h, f"dn/dn3.example.com@{REALM}", wire_sec.GetCert, getCertRequest={
        "nodeDetails": {"uuid": str(uuid.uuid4()), "clusterId": "c", "hostName": "dn3.example.com",
                        "nodeType": wire.DATANODE}, "CSR": csr("dn@dn3.example.com")[0]})
    assert generic.success, generic.message
    assert ids.identity_of(pki.load_certificates(generic.getCertResponseProto.x509Certificate)[0]).role is ids.Role.DATANODE
    for cmd, fields in (
        (wire_sec.GetCert, {"getCertRequest": {"nodeDetails": {"uuid": "s", "clusterId": "c", "hostName": "scm9",
                                                                "nodeType": wire.SCM}, "CSR": csr()[0]}}),
        (wire_sec.GetSCMCertificate, {"getSCMCertificateRequest": {"scmDetails": {
            "scmNodeId": "n", "clusterId": "c", "hostName": "scm9"}, "CSR": csr()[0]}}),
    ):
        refused = await ask(h, f"scm/scm9@{REALM}", cmd, **fields)
        assert not refused.success and refused.status == wire_sec.UNABLE_TO_ISSUE_CERTIFICATE, refused.message


async def test_unauthenticated_callers_get_no_certificate(harness: Any) -> None:  # noqa: F811
    h = harness
    before = valid_serials(h)
    resp = await ask(h, f"dn/dn1.example.com@{REALM}", wire_sec.GetDataNodeCertificate, authenticated=False,
                     **dn_request("dn1.example.com", str(uuid.uuid4()), csr()[0]))
    assert not resp.success and "the caller is not authenticated" in resp.message
    assert valid_serials(h) == before


async def test_remove_expired_certificates_is_an_administrators_call(harness: Any) -> None:  # noqa: F811
    h = harness
    issued = await ask(h, f"dn/dn5.example.com@{REALM}", wire_sec.GetDataNodeCertificate,
                       **dn_request("dn5.example.com", str(uuid.uuid4()), csr("dn@dn5.example.com")[0]))
    cert = pki.load_certificates(issued.getCertResponseProto.x509Certificate)[0]
    serial = str(cert.serial_number)
    fresh = await ask(h, "admin", wire_sec.RemoveExpiredCertificates, removeExpiredCertificatesRequestProto={})
    assert fresh.success and list(fresh.removeExpiredCertificatesResponseProto.removedExpiredCertificates) == []
    # a year and a day later the datanode certificate has expired; SCM certificates stay whatever their age
    h.clock.advance((cert.not_valid_after_utc - cert.not_valid_before_utc).total_seconds() + 86_400)
    denied = await ask(h, f"dn/dn5.example.com@{REALM}", wire_sec.RemoveExpiredCertificates,
                       removeExpiredCertificatesRequestProto={})
    assert not denied.success and "Access denied for user dn/dn5.example.com@EXAMPLE.COM" in denied.message
    assert serial in valid_serials(h)
    unauthenticated = await ask(h, "admin", wire_sec.RemoveExpiredCertificates, authenticated=False,
                                removeExpiredCertificatesRequestProto={})
    assert not unauthenticated.success and serial in valid_serials(h)
    scm_certs = {p.serialId for p in h.ca.store.list_certificates(scm_certs=True)}
    done = await ask(h, "admin/host@EXAMPLE.COM", wire_sec.RemoveExpiredCertificates,
                     removeExpiredCertificatesRequestProto={})
    assert done.success, done.message
    assert pki.cert_pem(cert) in done.removeExpiredCertificatesResponseProto.removedExpiredCertificates
    assert serial not in valid_serials(h) and h.ca.store.get_certificate(serial) is None
    assert {p.serialId for p in h.ca.store.list_certificates(scm_certs=True)} == scm_certs


def scm_request(h: Any, host: str, scm_id: str, *, renew: bool = False) -> dict[str, Any]:
    """GetSCMCertificate as Ozone's bootstrapping SCM sends it: its scmId as `scmNodeId`, a CA request for its host."""
    cluster = h.security.cluster_id
    key = pki.generate_key(EC)
    request = pki.csr_pem(pki.build_csr(key, ids.scm_subject(host, scm_id, cluster), EC, request_ca=True))
    return {"getSCMCertificateRequest": {"scmDetails": {"scmNodeId": scm_id, "clusterId": cluster, "hostName": host},
                                         "CSR": request, "renew": renew}}


async def test_a_joining_scm_principal_gets_its_sub_ca_over_hadoop_rpc(harness: Any,  # noqa: F811
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The SCM principal for the host of a configured SCM gets a sub-CA signed by the root (Ozone's
    getSCMCertificate); another role's principal, another host, an unconfigured host and a second scmId for the
    same node are refused and store nothing; the same scmId asking again (renew) gets a new sub-CA."""
    h = harness
    monkeypatch.setattr(h.ca, "configured_hosts", lambda: {"scm1": "127.0.0.1", "scm2": "scm2.example.com"})
    scm2 = str(uuid.uuid4())
    issued = await ask(h, f"scm/scm2.example.com@{REALM}", wire_sec.GetSCMCertificate,
                       **scm_request(h, "scm2.example.com", scm2))
    assert issued.success, issued.message
    chain = pki.load_certificates(issued.getCertResponseProto.x509Certificate)
    sub_ca = chain[0]
    assert pki.is_ca(sub_ca)
    who = ids.identity_of(sub_ca)
    assert (who.role, who.owner_id, who.cluster_id) == (ids.Role.SCM, scm2, h.security.cluster_id)
    root = pki.load_certificate(issued.getCertResponseProto.x509RootCACertificate)
    assert sub_ca.issuer == root.subject
    assert h.ca.store.is_scm_certificate(str(sub_ca.serial_number))

    def scm_serials() -> set[str]:
        return {p.serialId for p in h.ca.store.list_certificates(scm_certs=True)}

    before = scm_serials()
    for user, fields, reason in (
        (f"dn/scm2.example.com@{REALM}", scm_request(h, "scm2.example.com", scm2), "it is a DATANODE principal"),
        (f"scm/scm3.example.com@{REALM}", scm_request(h, "scm2.example.com", scm2), "for its own host"),
        (f"scm/scm9.example.com@{REALM}", scm_request(h, "scm9.example.com", str(uuid.uuid4())),
         "no SCM is configured there"),
        (f"scm/scm2.example.com@{REALM}", scm_request(h, "scm2.example.com", str(uuid.uuid4())),
         f"already holds certificate serial {sub_ca.serial_number}"),
    ):
        refused = await ask(h, user, wire_sec.GetSCMCertificate, **fields)
        assert not refused.success and refused.status == wire_sec.UNABLE_TO_ISSUE_CERTIFICATE, refused
        assert reason in refused.message, refused.message
    assert scm_serials() == before
    refused = await ask(h, f"scm/scm2.example.com@{REALM}", wire_sec.GetSCMCertificate, authenticated=False,
                        **scm_request(h, "scm2.example.com", scm2))
    assert not refused.success and "the caller is not authenticated" in refused.message
    renewed = await ask(h, f"scm/scm2.example.com@{REALM}", wire_sec.GetSCMCertificate,
                        **scm_request(h, "scm2.example.com", scm2, renew=True))
    assert renewed.success, renewed.message
    again = pki.load_certificates(renewed.getCertResponseProto.x509Certificate)[0]
    assert again.serial_number != sub_ca.serial_number and ids.identity_of(again).owner_id == scm2
    assert not h.ca.store.is_revoked(str(sub_ca.serial_number))  # a sub-CA is not superseded: it expires
