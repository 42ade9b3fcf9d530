"""SCMSecurityProtocol over Hadoop RPC: certificate reads, and certificates for Kerberos-authenticated
datanodes and OMs.

One method, ``submitRequest``, carries an ``SCMSecurityRequest``; as Ozone's
``SCMSecurityProtocolServerSideTranslatorPB`` answers, every outcome is a successful RPC whose
``SCMSecurityResponse`` has ``status`` and, on failure, ``success=false`` and ``message``.

Served (public material; every SCM answers from its replicated certificate store, no leader needed):
``GetCACertificate`` (this SCM's CA certificate, with the root when this SCM is not the root holder),
``GetRootCACertificate``, ``GetAllRootCaCertificates``, ``ListCACertificate`` (the SCMs' CA certificates),
``GetCertificate`` (by serial, decimal as Ozone writes it), ``ListCertificate`` (by role, from a serial).

Issued (on the leader, by its sub-CA, recorded through Raft as the gRPC enrolment path does):
``GetDataNodeCertificate``, ``GetOMCertificate`` and ``GetCert`` (node type DATANODE or OM), only to a caller
whose connection is **authenticated** (Kerberos): the role and the host come from the caller's principal
(:mod:`scm_server.security.core.principals`: ``dn/<host>@REALM`` gets a datanode certificate for ``<host>``,
the OM's principal an OM certificate), never from the CSR; the CA writes the subject and names itself. A new
request from the holder of a valid certificate for the same id and host renews it (Ozone's clients renew by
asking again). An unauthenticated caller (SIMPLE authentication: the user is merely stated) is refused with
``UNABLE_TO_ISSUE_CERTIFICATE``. ``GetSCMCertificate`` gives a joining SCM its sub-CA, as Ozone's bootstrapping SCM
asks the leader: only to the SCM principal (``hdds.scm.kerberos.principal``) for its own host, the one SCM configured
there (:meth:`scm_server.ca.ca_server.SCMCertificateServer.issue_scm_to_principal`); asking again renews.
``RemoveExpiredCertificates`` (the leader drops expired datanode, OM and client certificates
from ``validCerts``, through Raft) is an authenticated administrator's call (``ozone.administrators``);
``RevokeCertificates`` is refused (use ``ozone-scm admin cert`` over the authenticated gRPC admin port); the CRL calls (``GetCrls``, ``GetLatestCrlId``)
answer ``INTERNAL_ERROR`` as Ozone 2.2.0 itself does ("Unsupported").

On an SCM without ``ozone.security.enabled`` there is no CA: every call answers ``success=false`` saying so.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.hadoop_ipc import Call
from scm_server.proto import scm_security_pb2
from scm_server.proto.ozone import ScmServerSecurityProtocol_pb2 as wire_sec
from scm_server.proto.ozone import hdds_pb2 as wire
from scm_server.security.core import principals
from scm_server.security.core.identity import Role
from scm_server.security.core.requests import RequestRejected
from scm_server.security.core.secret_keys import uuid_from_proto
from scm_server.server.hadoop_rpc.leadership import Leadership
from scm_server.server.hadoop_rpc.server import parse_request

if TYPE_CHECKING:
    from cryptography import x509

    from scm_server.ca.ca_server import SCMCertificateServer
    from scm_server.ca.scm_security import SCMSecurity

PROTOCOL = "org.apache.hadoop.hdds.protocol.SCMSecurityProtocol"
VERSION = 1

Type = wire_sec.Type
Request = wire_sec.SCMSecurityRequest
Response = wire_sec.SCMSecurityResponse

ISSUANCE = ("GetDataNodeCertificate", "GetOMCertificate", "GetSCMCertificate", "GetCert")
MUTATIONS = ("RevokeCertificates", "RemoveExpiredCertificates")
NODE_ROLES = {wire.DATANODE: Role.DATANODE, wire.OM: Role.OM}
# the certificates issued to Kerberos-authenticated callers, and the roles (principals) each call may bind
ISSUED_TO: dict[str, tuple[Role, ...]] = {
    "GetDataNodeCertificate": (Role.DATANODE,),
    "GetOMCertificate": (Role.OM,),
    "GetSCMCertificate": (Role.SCM,),
    "GetCert": tuple(NODE_ROLES.values()),
}
# served to Kerberos-authenticated administrators (ozone.administrators) only
ADMINISTRATORS_ONLY = ("RemoveExpiredCertificates",)
# served to Kerberos-authenticated callers only
SERVED_AUTHENTICATED = (*ISSUED_TO, *ADMINISTRATORS_ONLY)
# What a refusal of the CA (an SCMException's result code) answers on this protocol
STATUS_OF = {
    ResultCodes.INVALID_CSR.value: wire_sec.INVALID_CSR,
}
CRL = ("GetCrls", "GetLatestCrlId")
SERVED = ("GetCertificate", "GetCACertificate", "ListCertificate", "GetRootCACertificate", "ListCACertificate",
          "GetAllRootCaCertificates")

NO_AUTH = "with SIMPLE authentication a caller merely states who it is"


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


class CertificateIssuer(Protocol):
    """What the translator asks of the leader's CA (:meth:`scm_server.ca.ca_server.SCMCertificateServer.issue_to_principal`)."""

    async def issue_to_principal(
        self, role: Role, csr_pem: str, *, principal: str, owner_id: str, hostname: str, ip: str = ""
    ) -> scm_security_pb2.SCMGetCertResponseProto: ...

    async def issue_scm_to_principal(
        self, csr_pem: str, *, principal: str, scm_id: str, claimed_cluster_id: str, hostname: str
    ) -> scm_security_pb2.SCMGetCertResponseProto: ...

    async def remove_expired_certificates(self, by: str) -> list[str]: ...


class SecurityIssuer:
    """:class:`CertificateIssuer` over the running SCM's :class:`scm_server.ca.scm_security.SCMSecurity` (its CA
    is attached after the translator is built)."""

    def __init__(self, security: Any) -> None:
        self.security = security

    async def issue_to_principal(
        self, role: Role, csr_pem: str, *, principal: str, owner_id: str, hostname: str, ip: str = ""
    ) -> scm_security_pb2.SCMGetCertResponseProto:
        ca = self.security.ca
        if ca is None:
            raise SCMException(ResultCodes.INTERNAL_ERROR, "the certificate server is not attached yet")
        answer: scm_security_pb2.SCMGetCertResponseProto = await ca.issue_to_principal(
            role, csr_pem, principal=principal, owner_id=owner_id, hostname=hostname, ip=ip)
        return answer

    async def issue_scm_to_principal(
        self, csr_pem: str, *, principal: str, scm_id: str, claimed_cluster_id: str, hostname: str
    ) -> scm_security_pb2.SCMGetCertResponseProto:
        ca = self.security.ca
        if ca is None:
            raise SCMException(ResultCodes.INTERNAL_ERROR, "the certificate server is not attached yet")
        answer: scm_security_pb2.SCMGetCertResponseProto = await ca.issue_scm_to_principal(
            csr_pem, principal=principal, scm_id=scm_id, claimed_cluster_id=claimed_cluster_id, hostname=hostname)
        return answer

    async def remove_expired_certificates(self, by: str) -> list[str]:
        ca = self.security.ca
        if ca is None:
            raise SCMException(ResultCodes.INTERNAL_ERROR, "the certificate server is not attached yet")
        removed: list[str] = await ca.remove_expired_certificates(by)
        return removed


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

    def __init__(
        self,
        reader: CertificateReader | None,
        issuer: CertificateIssuer | None = None,
        *,
        primaries: Mapping[Role, str] | None = None,
        leadership: Leadership | None = None,
        administrators: Collection[str] = (),
    ) -> None:
        self.reader = reader
        self.issuer = issuer
        # the primaries of the service principals (hdds.datanode.kerberos.principal, ozone.om.kerberos.principal,
        # hdds.scm.kerberos.principal)
        self.primaries = dict(primaries or {Role.DATANODE: "dn", Role.OM: "OM", Role.SCM: "scm"})
        self.leadership = leadership
        self.administrators = administrators  # a LiveAdministrators follows ozone admin reconfig

    async def call(self, method: str, call: Call) -> bytes:
        request = parse_request(call.body, Request())
        command = Type.Name(request.cmdType)
        response = Response(cmdType=request.cmdType, status=wire_sec.OK, success=True)
        if request.HasField("traceID"):
            response.traceID = request.traceID
        try:
            if command in ISSUANCE and call.authenticated:
                await self._issue(call, command, request, response)
            elif command in ADMINISTRATORS_ONLY and call.authenticated:
                await self._remove_expired(call, response)
            else:
                self._answer(command, request, response)
        except _Refusal as refusal:
            response.ClearField("getCertResponseProto")
            response.success = False
            response.status = refusal.status  # type: ignore[assignment]
            response.message = refusal.message
        return response.SerializeToString()

    async def _issue(self, call: Call, command: str, request: Request, response: Response) -> None:
        """A certificate for the authenticated caller ``call.user`` (see the module's docstring)."""
        if self.issuer is None or self.reader is None:
            raise _Refusal(wire_sec.UNABLE_TO_ISSUE_CERTIFICATE, (
                f"{command}: ozone.security.enabled is false on this SCM, so it has no certificate authority"))
        cluster = ""
        if command == "GetSCMCertificate":
            if not request.HasField("getSCMCertificateRequest"):
                raise _Refusal(wire_sec.INVALID_CSR, "GetSCMCertificate without getSCMCertificateRequest")
            scm = request.getSCMCertificateRequest.scmDetails
            # Ozone's scmNodeId here is the joining SCM's scmId (its UUID), as its HASecurityUtils sends it
            role, owner, host, ip, csr = Role.SCM, scm.scmNodeId, scm.hostName, "", request.getSCMCertificateRequest.CSR
            cluster = scm.clusterId
        elif command == "GetDataNodeCertificate":
            if not request.HasField("getDataNodeCertRequest"):
                raise _Refusal(wire_sec.INVALID_CSR, "GetDataNodeCertificate without getDataNodeCertRequest")
            dn = request.getDataNodeCertRequest.datanodeDetails
            owner = dn.uuid or (str(uuid_from_proto(dn.uuid128)) if dn.HasField("uuid128") else "")
            role, host, ip, csr = Role.DATANODE, dn.hostName, dn.ipAddress, request.getDataNodeCertRequest.CSR
        elif command == "GetOMCertificate":
            if not request.HasField("getOMCertRequest"):
                raise _Refusal(wire_sec.INVALID_CSR, "GetOMCertificate without getOMCertRequest")
            om = request.getOMCertRequest.omDetails
            role, owner, host, ip, csr = Role.OM, om.uuid, om.hostName, om.ipAddress, request.getOMCertRequest.CSR
        else:  # GetCert
            if not request.HasField("getCertRequest"):
                raise _Refusal(wire_sec.INVALID_CSR, "GetCert without getCertRequest")
            node = request.getCertRequest.nodeDetails
            if node.nodeType not in NODE_ROLES:
                raise _Refusal(wire_sec.UNABLE_TO_ISSUE_CERTIFICATE, (
                    f"GetCert for node type {wire.NodeType.Name(node.nodeType)} refused over Hadoop RPC: DATANODE and "
                    "OM certificates are issued here"))
            role, owner, host, ip, csr = NODE_ROLES[node.nodeType], node.uuid, node.hostName, "", request.getCertRequest.CSR
        if role not in ISSUED_TO[command]:
            raise _Refusal(wire_sec.UNABLE_TO_ISSUE_CERTIFICATE, f"{command} does not issue {role.value} certificates")
        try:
            principals.bind(call.user, role, host, self.primaries)
        except RequestRejected as exc:
            raise _Refusal(wire_sec.UNABLE_TO_ISSUE_CERTIFICATE, f"{command} refused: {exc}") from exc
        try:
            if role is Role.SCM:
                answer = await self.issuer.issue_scm_to_principal(csr, principal=call.user, scm_id=owner,
                                                                  claimed_cluster_id=cluster, hostname=host)
            else:
                answer = await self.issuer.issue_to_principal(role, csr, principal=call.user, owner_id=owner,
                                                              hostname=host, ip=ip)
        except NotLeaderException as exc:
            if self.leadership is None:
                raise
            raise self.leadership.error(exc) from exc
        except SCMException as exc:
            raise _Refusal(STATUS_OF.get(exc.result.value, wire_sec.UNABLE_TO_ISSUE_CERTIFICATE),
                           f"{command} refused: {exc}") from exc
        cert = response.getCertResponseProto
        cert.responseCode = wire_sec.SCMGetCertResponseProto.success
        cert.x509Certificate = answer.x509Certificate
        cert.x509CACertificate = answer.x509CACertificate
        cert.x509RootCACertificate = answer.x509RootCACertificate

    async def _remove_expired(self, call: Call, response: Response) -> None:
        if self.issuer is None or self.reader is None:
            raise _Refusal(wire_sec.INTERNAL_ERROR, (
                "RemoveExpiredCertificates: ozone.security.enabled is false on this SCM, so it has no certificates"))
        if not principals.is_administrator(call.user, self.administrators):
            raise _Refusal(wire_sec.INTERNAL_ERROR, (
                f"Access denied for user {call.user or '(no user)'}. SCM superuser privilege is required "
                "(ozone.administrators)"))
        try:
            removed = await self.issuer.remove_expired_certificates(call.user)
        except NotLeaderException as exc:
            if self.leadership is None:
                raise
            raise self.leadership.error(exc) from exc
        except SCMException as exc:
            raise _Refusal(wire_sec.INTERNAL_ERROR, f"RemoveExpiredCertificates: {exc}") from exc
        response.removeExpiredCertificatesResponseProto.SetInParent()
        response.removeExpiredCertificatesResponseProto.removedExpiredCertificates.extend(removed)

    def _answer(self, command: str, request: Request, response: Response) -> None:
        if command in ISSUANCE:
            raise _Refusal(wire_sec.UNABLE_TO_ISSUE_CERTIFICATE, (
                f"{command} refused: the caller is not authenticated ({NO_AUTH}), and a certificate issued to an "
                "unauthenticated caller would bind a role to whoever asked. Certificates are issued over Hadoop RPC "
                "to Kerberos-authenticated datanode, OM and SCM principals; enrol through the gRPC security service "
                "(ozone.scm.security.service.grpc.port) otherwise"))
        if command == "RevokeCertificates":
            raise _Refusal(wire_sec.INTERNAL_ERROR, (
                "RevokeCertificates is not served over Hadoop RPC; use `ozone-scm admin cert revoke` over the "
                "authenticated gRPC admin port"))
        if command in MUTATIONS:
            raise _Refusal(wire_sec.INTERNAL_ERROR, (
                f"{command} refused: the caller is not authenticated ({NO_AUTH}); an authenticated administrator "
                "may call it, or use `ozone-scm admin cert` over the authenticated gRPC admin port"))
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
