"""SCMSecurityProtocol over Hadoop RPC: the certificate *reads* only.

One method, ``submitRequest``, carries an ``SCMSecurityRequest``; as Ozone's
``SCMSecurityProtocolServerSideTranslatorPB`` answers, every outcome is a successful RPC whose
``SCMSecurityResponse`` has ``status`` and, on failure, ``success=false`` and ``message``.

Served (public material; every SCM answers from its replicated certificate store, no leader needed):
``GetCACertificate`` (this SCM's CA certificate, with the root when this SCM is not the root holder),
``GetRootCACertificate``, ``GetAllRootCaCertificates``, ``ListCACertificate`` (the SCMs' CA certificates),
``GetCertificate`` (by serial, decimal as Ozone writes it), ``ListCertificate`` (by role, from a serial).

Refused: **certificate issuance** (``GetDataNodeCertificate``, ``GetOMCertificate``, ``GetSCMCertificate``,
``GetCert``) with ``UNABLE_TO_ISSUE_CERTIFICATE``: Hadoop RPC is served with SIMPLE authentication only,
where the caller merely *states* a user name, so nobody on this transport is authenticated and a certificate
issued here would bind a role to whoever asked; enrolment stays on the gRPC security service (enrolment
secret, ``ozone.scm.security.service.grpc.port``) until Kerberos (SASL GSSAPI) is served. The mutations
(``RevokeCertificates``, ``RemoveExpiredCertificates``) are refused for the same reason; the CRL calls
(``GetCrls``, ``GetLatestCrlId``) answer ``INTERNAL_ERROR`` as Ozone 2.2.0 itself does ("Unsupported").

On an SCM without ``ozone.security.enabled`` there is no CA: every call answers ``success=false`` saying so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from google.protobuf import message as pb_message

from scm_server.hadoop_ipc import Call, ErrorCode
from scm_server.proto.ozone import ScmServerSecurityProtocol_pb2 as wire_sec
from scm_server.proto.ozone import hdds_pb2 as wire
from scm_server.server.hadoop_rpc.server import RpcCallError

if TYPE_CHECKING:
    from cryptography import x509

    from scm_server.ca.ca_server import SCMCertificateServer
    from scm_server.ca.scm_security import SCMSecurity

PROTOCOL = "org.apache.hadoop.hdds.protocol.SCMSecurityProtocol"
VERSION = 1
IO_EXCEPTION = "java.io.IOException"

Type = wire_sec.Type
Request = wire_sec.SCMSecurityRequest
Response = wire_sec.SCMSecurityResponse

ISSUANCE = ("GetDataNodeCertificate", "GetOMCertificate", "GetSCMCertificate", "GetCert")
MUTATIONS = ("RevokeCertificates", "RemoveExpiredCertificates")
CRL = ("GetCrls", "GetLatestCrlId")
SERVED = ("GetCertificate", "GetCACertificate", "ListCertificate", "GetRootCACertificate", "ListCACertificate",
          "GetAllRootCaCertificates")

NO_AUTH = (
    "this SCM serves Hadoop RPC with SIMPLE authentication only, where a caller merely states who it is, so "
    "nobody here is authenticated"
)


class NotFound(Exception):
    """No certificate with that serial is recorded."""


class CertificateReader(Protocol):
    """What the translator reads (PEM text), from this SCM's CA and its replicated certificate store."""

    def ca_certificate(self) -> str: ...  # this SCM's own (CA) certificate
    def root_certificate(self) -> str: ...  # the current root CA certificate
    def root_certificates(self) -> list[str]: ...  # every root CA certificate trusted now (rotation)
    def is_root_holder(self) -> bool: ...
    def scm_certificates(self) -> list[str]: ...  # the SCMs' CA certificates
    def certificate(self, serial: str) -> str: ...  # NotFound, or ValueError for a malformed serial
    def list_certificates(self, role: str | None, start: str, count: int) -> list[str]: ...


class SecurityReader:
    """:class:`CertificateReader` over the running SCM's :class:`scm_server.ca.scm_security.SCMSecurity`
    (reads only: nothing here signs, stores or revokes)."""

    def __init__(self, security: SCMSecurity) -> None:
        self.security = security

    @property
    def _ca(self) -> SCMCertificateServer:
        ca = self.security.ca
        if ca is None:
            raise LookupError("the certificate server is not attached yet")
        return ca

    @staticmethod
    def _pem(cert: x509.Certificate) -> str:
        from scm_server.security.core import certificates as pki

        return str(pki.cert_pem(cert))

    def ca_certificate(self) -> str:
        return self._pem(self.security.material.current.certificate)

    def root_certificate(self) -> str:
        return self._pem(self._ca.root)

    def root_certificates(self) -> list[str]:
        return [self._pem(r) for r in self.security.material.current.roots]

    def is_root_holder(self) -> bool:
        return bool(self._ca.holds_root_key)

    def scm_certificates(self) -> list[str]:
        return [p.x509Certificate for p in self._ca.store.list_certificates(scm_certs=True)]

    def certificate(self, serial: str) -> str:
        from scm_server.security.core import serials

        try:
            canonical = serials.canonical_serial(serial)
        except serials.SerialError as exc:
            raise ValueError(str(exc)) from exc
        found = self._ca.store.get_certificate(canonical)
        if found is None:
            raise NotFound(f"no certificate with serial {serial} is recorded")
        return str(found.x509Certificate)

    def list_certificates(self, role: str | None, start: str, count: int) -> list[str]:
        infos, _ = self._ca.list_infos(role, False, start, count)
        return [i.certificate.x509Certificate for i in infos]


class SecurityTranslator:
    """Serves ``submitRequest`` of SCMSecurityProtocol for one SCM; ``reader`` is None without security."""

    protocol = PROTOCOL
    version = VERSION
    methods = frozenset({"submitRequest"})

    def __init__(self, reader: CertificateReader | None) -> None:
        self.reader = reader

    async def call(self, method: str, call: Call) -> bytes:
        request = Request()
        try:
            request.ParseFromString(call.body)
        except pb_message.DecodeError as exc:
            raise RpcCallError(IO_EXCEPTION, f"malformed SCMSecurityRequest: {exc}", ErrorCode.ERROR_RPC_SERVER) from exc
        missing = request.FindInitializationErrors()  # type: ignore[attr-defined]
        if missing:
            raise RpcCallError(IO_EXCEPTION, f"SCMSecurityRequest lacks required field(s) {', '.join(missing)}",
                               ErrorCode.ERROR_RPC_SERVER)
        command = Type.Name(request.cmdType)
        response = Response(cmdType=request.cmdType, status=wire_sec.OK, success=True)
        if request.HasField("traceID"):
            response.traceID = request.traceID
        try:
            self._answer(command, request, response)
        except _Refusal as refusal:
            response.ClearField("getCertResponseProto")
            response.success = False
            response.status = refusal.status  # type: ignore[assignment]
            response.message = refusal.message
        return response.SerializeToString()

    def _answer(self, command: str, request: Request, response: Response) -> None:
        if command in ISSUANCE:
            raise _Refusal(wire_sec.UNABLE_TO_ISSUE_CERTIFICATE, (
                f"{command} refused: {NO_AUTH}, and a certificate issued to an unauthenticated caller would "
                "bind a role to whoever asked. Enrol through the gRPC security service "
                "(ozone.scm.security.service.grpc.port) until Kerberos is served over Hadoop RPC"))
        if command in MUTATIONS:
            raise _Refusal(wire_sec.INTERNAL_ERROR, (
                f"{command} refused: {NO_AUTH}; use `ozone-scm admin cert` over the authenticated gRPC admin port"))
        if command in CRL:
            raise _Refusal(wire_sec.INTERNAL_ERROR, f"{command}: Unsupported operation (as in Ozone 2.2.0)")
        if command not in SERVED:
            raise _Refusal(wire_sec.INTERNAL_ERROR, f"{command} is not supported by this SCM over Hadoop RPC "
                                                    f"(SCMSecurityProtocol serves {', '.join(SERVED)})")
        reader = self.reader
        if reader is None:
            raise _Refusal(wire_sec.INTERNAL_ERROR, (
                f"{command}: ozone.security.enabled is false on this SCM, so it has no certificate authority "
                "and no certificates"))
        try:
            self._read(reader, command, request, response)
        except NotFound as exc:
            raise _Refusal(wire_sec.CERTIFICATE_NOT_FOUND, f"{command}: {exc}") from exc
        except ValueError as exc:
            raise _Refusal(wire_sec.GET_CERTIFICATE_FAILED, f"{command}: {exc}") from exc
        except LookupError as exc:
            raise _Refusal(wire_sec.INTERNAL_ERROR, f"{command}: {exc}") from exc

    @staticmethod
    def _read(reader: CertificateReader, command: str, request: Request, response: Response) -> None:
        cert = response.getCertResponseProto
        success = wire_sec.SCMGetCertResponseProto.success
        if command == "GetCertificate":
            if not request.HasField("getCertificateRequest"):
                raise ValueError("GetCertificate without getCertificateRequest")
            cert.responseCode = success
            cert.x509Certificate = reader.certificate(request.getCertificateRequest.certSerialId)
        elif command == "GetCACertificate":
            pem = reader.ca_certificate()
            cert.responseCode = success
            cert.x509Certificate = pem
            cert.x509CACertificate = pem
            if not reader.is_root_holder():  # Ozone adds the root when this SCM's CA is a sub-CA
                cert.x509RootCACertificate = reader.root_certificate()
        elif command == "GetRootCACertificate":
            root = reader.root_certificate()
            cert.responseCode = success
            cert.x509Certificate = root
            cert.x509RootCACertificate = root
        elif command == "GetAllRootCaCertificates":
            response.allRootCaCertificatesResponseProto.SetInParent()
            response.allRootCaCertificatesResponseProto.allX509RootCaCertificates.extend(reader.root_certificates())
        elif command == "ListCACertificate":
            out = response.listCertificateResponseProto
            out.responseCode = wire_sec.SCMListCertificateResponseProto.success
            out.certificates.extend(reader.scm_certificates())
        else:  # ListCertificate
            req = request.listCertificateRequest
            if not request.HasField("listCertificateRequest"):
                raise ValueError("ListCertificate without listCertificateRequest")
            role = wire.NodeType.Name(req.role) if req.HasField("role") else None
            start = str(req.startCertId) if req.HasField("startCertId") and req.startCertId > 0 else ""
            out = response.listCertificateResponseProto
            out.responseCode = wire_sec.SCMListCertificateResponseProto.success
            out.certificates.extend(reader.list_certificates(role, start, req.count))


class _Refusal(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
