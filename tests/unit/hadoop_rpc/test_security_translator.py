"""SCMSecurityProtocol over Hadoop RPC: the reads answer from the certificate reader, issuance and mutations
are refused with reasons, an SCM without security says it has no CA; over loopback sockets."""

from __future__ import annotations

from typing import Any

import pytest

from scm_server.client.hadoop_rpc import HadoopRpcConnection, RemoteError
from scm_server.proto.ozone import ScmServerSecurityProtocol_pb2 as wire_sec
from scm_server.proto.ozone import hdds_pb2 as wire
from scm_server.server.hadoop_rpc.security_translator import (
    ISSUANCE,
    PROTOCOL,
    NotFound,
    SecurityReader,
    SecurityTranslator,
)
from scm_server.server.hadoop_rpc.server import HadoopRpcServer
from tests.unit.security_core.test_renewal_clock import harness  # noqa: F401  (the in-process secure SCM fixture)

Req = wire_sec.SCMSecurityRequest
Resp = wire_sec.SCMSecurityResponse


class FakeReader:
    def __init__(self, root_holder: bool = False) -> None:
        self.root_holder = root_holder
        self.asked: list[tuple[str | None, str, int]] = []

    def ca_certificate(self) -> str:
        return "PEM-SCM1"

    def root_certificate(self) -> str:
        return "PEM-ROOT"

    def root_certificates(self) -> list[str]:
        return ["PEM-ROOT", "PEM-ROOT-NEXT"]

    def is_root_holder(self) -> bool:
        return self.root_holder

    def scm_certificates(self) -> list[str]:
        return ["PEM-SCM1", "PEM-SCM2"]

    def certificate(self, serial: str) -> str:
        if serial == "x":
            raise ValueError("serial id 'x' is not decimal")
        if serial != "12":
            raise NotFound(f"no certificate with serial {serial} is recorded")
        return "PEM-12"

    def list_certificates(self, role: str | None, start: str, count: int) -> list[str]:
        self.asked.append((role, start, count))
        return ["PEM-12", "PEM-13"][:count]


async def connect(reader: Any) -> tuple[HadoopRpcServer, HadoopRpcConnection]:
    server = HadoopRpcServer([SecurityTranslator(reader)])
    port = await server.start("127.0.0.1", 0)
    conn = HadoopRpcConnection(f"127.0.0.1:{port}", PROTOCOL)
    await conn.connect()
    return server, conn


@pytest.fixture
async def sec() -> Any:
    reader = FakeReader()
    server, conn = await connect(reader)
    ids = iter(range(1, 1000))

    async def call(cmd: int, **fields: Any) -> Resp:
        req = Req(cmdType=cmd, traceID="tr", **fields)  # type: ignore[arg-type]
        resp = Resp.FromString(await conn.call("submitRequest", req, call_id=next(ids)))
        assert resp.IsInitialized() and resp.cmdType == cmd and resp.traceID == "tr"
        return resp

    yield call, reader
    await conn.close()
    await server.stop()


async def test_reads(sec: Any) -> None:
    call, reader = sec
    ca = await call(wire_sec.GetCACertificate, getCACertificateRequest={})
    assert ca.success and ca.status == wire_sec.OK
    assert (ca.getCertResponseProto.x509Certificate, ca.getCertResponseProto.x509CACertificate,
            ca.getCertResponseProto.x509RootCACertificate) == ("PEM-SCM1", "PEM-SCM1", "PEM-ROOT")
    root = await call(wire_sec.GetRootCACertificate)
    assert root.getCertResponseProto.x509Certificate == "PEM-ROOT"
    roots = await call(wire_sec.GetAllRootCaCertificates, getAllRootCaCertificatesRequestProto={})
    assert list(roots.allRootCaCertificatesResponseProto.allX509RootCaCertificates) == ["PEM-ROOT", "PEM-ROOT-NEXT"]
    cas = await call(wire_sec.ListCACertificate, listCACertificateRequestProto={})
    assert list(cas.listCertificateResponseProto.certificates) == ["PEM-SCM1", "PEM-SCM2"]
    one = await call(wire_sec.GetCertificate, getCertificateRequest={"certSerialId": "12"})
    assert one.success and one.getCertResponseProto.x509Certificate == "PEM-12"
    listed = await call(wire_sec.ListCertificate, listCertificateRequest={"role": wire.DATANODE, "startCertId": 5,
                                                                          "count": 1})
    assert list(listed.listCertificateResponseProto.certificates) == ["PEM-12"]
    assert reader.asked == [("DATANODE", "5", 1)]


async def test_missing_and_malformed_serials(sec: Any) -> None:
    call, _ = sec
    missing = await call(wire_sec.GetCertificate, getCertificateRequest={"certSerialId": "99"})
    assert not missing.success and missing.status == wire_sec.CERTIFICATE_NOT_FOUND and "99" in missing.message
    assert not missing.HasField("getCertResponseProto")
    bad = await call(wire_sec.GetCertificate, getCertificateRequest={"certSerialId": "x"})
    assert not bad.success and bad.status == wire_sec.GET_CERTIFICATE_FAILED and "decimal" in bad.message


@pytest.mark.parametrize("command", ISSUANCE)
async def test_issuance_is_refused_naming_simple_auth(sec: Any, command: str) -> None:
    call, _ = sec
    fields = {
        "GetDataNodeCertificate": {"getDataNodeCertRequest": {"datanodeDetails": {"ipAddress": "1", "hostName": "h"},
                                                              "CSR": "csr"}},
        "GetOMCertificate": {"getOMCertRequest": {"omDetails": {"uuid": "u", "ipAddress": "1", "hostName": "h"},
                                                  "CSR": "csr"}},
        "GetSCMCertificate": {"getSCMCertificateRequest": {"scmDetails": {"scmNodeId": "n", "clusterId": "c",
                                                                           "hostName": "h"}, "CSR": "csr"}},
        "GetCert": {"getCertRequest": {"nodeDetails": {"uuid": "u", "clusterId": "c", "hostName": "h",
                                                       "nodeType": wire.OM},
                                       "CSR": "csr"}},
    }[command]
    resp = await call(wire_sec.Type.Value(command), **fields)
    assert not resp.success and resp.status == wire_sec.UNABLE_TO_ISSUE_CERTIFICATE
    assert command in resp.message and "SIMPLE" in resp.message and "the caller is not authenticated" in resp.message
    assert not resp.HasField("getCertResponseProto")


async def test_mutations_and_crls_are_refused(sec: Any) -> None:
    call, _ = sec
    revoke = await call(wire_sec.RevokeCertificates, revokeCertificatesRequest={"certIds": ["12"]})
    assert not revoke.success and "RevokeCertificates is not served over Hadoop RPC" in revoke.message
    expired = await call(wire_sec.RemoveExpiredCertificates, removeExpiredCertificatesRequestProto={})
    assert not expired.success and "SIMPLE" in expired.message
    crls = await call(wire_sec.GetCrls, getCrlsRequest={"crlId": [1]})
    assert not crls.success and crls.status == wire_sec.INTERNAL_ERROR and "Unsupported" in crls.message


async def test_without_security_every_read_says_there_is_no_ca() -> None:
    server, conn = await connect(None)
    try:
        req = Req(cmdType=wire_sec.GetCACertificate, getCACertificateRequest={})
        resp = Resp.FromString(await conn.call("submitRequest", req, call_id=1))
        assert not resp.success and "ozone.security.enabled is false" in resp.message
        with pytest.raises(RemoteError) as err:
            await conn.call("submitRequest", b"\x08", call_id=2)  # cmdType cut short
        assert "malformed SCMSecurityRequest" in err.value.message
    finally:
        await conn.close()
        await server.stop()


async def test_reads_from_a_real_ca(harness: Any) -> None:  # noqa: F811  (an in-process secure SCM)
    """SecurityReader over the running SCM's SCMSecurity: what Ozone's clients read is this SCM's real material."""
    from scm_server.security.core import certificates as pki

    h = harness
    server, conn = await connect(SecurityReader(h.security))
    try:
        ids = iter(range(1, 100))

        async def call(cmd: int, **fields: Any) -> Resp:
            req = Req(cmdType=cmd, **fields)  # type: ignore[arg-type]
            resp = Resp.FromString(await conn.call("submitRequest", req, call_id=next(ids)))
            assert resp.success and resp.status == wire_sec.OK, resp.message
            return resp

        own = pki.cert_pem(h.security.material.current.certificate)
        root = pki.cert_pem(h.ca.root)
        ca = (await call(wire_sec.GetCACertificate, getCACertificateRequest={})).getCertResponseProto
        assert ca.x509Certificate == own and ca.x509CACertificate == own
        assert (await call(wire_sec.GetRootCACertificate)).getCertResponseProto.x509Certificate == root
        roots = await call(wire_sec.GetAllRootCaCertificates, getAllRootCaCertificatesRequestProto={})
        assert root in roots.allRootCaCertificatesResponseProto.allX509RootCaCertificates
        cas = await call(wire_sec.ListCACertificate, listCACertificateRequestProto={})
        assert own in cas.listCertificateResponseProto.certificates
        serial = str(h.security.material.current.certificate.serial_number)
        one = await call(wire_sec.GetCertificate, getCertificateRequest={"certSerialId": serial})
        assert one.getCertResponseProto.x509Certificate == own
        listed = await call(wire_sec.ListCertificate, listCertificateRequest={"role": wire.SCM, "count": 10})
        assert own in listed.listCertificateResponseProto.certificates
        missing = Resp.FromString(await conn.call("submitRequest", Req(
            cmdType=wire_sec.GetCertificate, getCertificateRequest={"certSerialId": "987654"}), call_id=99))
        assert missing.status == wire_sec.CERTIFICATE_NOT_FOUND
    finally:
        await conn.close()
        await server.stop()
