"""Client of ``SCMSecurityAdminProtocolService`` (certificates: list, info, revoke, renew, sign).

Used by ``ozone-scm admin cert ...`` and by the Kubernetes operator. It rides on the client port
(``ozone.scm.client.grpc.port``) with the caller's client certificate (mutual TLS) and inherits
:class:`~scm_server.client.scm_client.SCMClient`'s failover: reads are answered by any SCM
(followers hold the same replicated tables), revocation/renewal/signing follow the NotLeader hint
to the leader.
"""

from __future__ import annotations

from collections.abc import Sequence

from scm_server.client.scm_client import SCMClient
from scm_server.proto import scm_security_pb2, scm_security_pb2_grpc

NODE_TYPES = {
    "scm": scm_security_pb2.SCM,
    "om": scm_security_pb2.OM,
    "datanode": scm_security_pb2.DATANODE,
    "client": scm_security_pb2.CLIENT,
    "root": scm_security_pb2.ROOT_CA,
}


class SCMSecurityClient(SCMClient):
    async def __aenter__(self) -> SCMSecurityClient:
        return self

    def _security(self, address: str) -> scm_security_pb2_grpc.SCMSecurityAdminProtocolServiceStub:
        return scm_security_pb2_grpc.SCMSecurityAdminProtocolServiceStub(self._channel(address))

    async def list_certificates(
        self, role: str | None = None, revoked: bool = False, start: str = "", count: int = 1000
    ) -> scm_security_pb2.SCMListCertificateResponseProto:
        req = scm_security_pb2.SCMListCertificateRequestProto(revoked=revoked, startSerialId=start, count=count)
        if role is not None:
            req.role = NODE_TYPES[role]
        return await self._call(lambda a, t, md: self._security(a).ListCertificate(req, timeout=t, metadata=md))

    async def certificate_info(self, serial: str) -> scm_security_pb2.CertificateInfoProto:
        req = scm_security_pb2.SCMGetCertificateInfoRequestProto(serialId=serial)
        return await self._call(lambda a, t, md: self._security(a).GetCertificateInfo(req, timeout=t, metadata=md))

    async def revoke(
        self, serials: Sequence[str], reason: int = 0, external: bool = False
    ) -> scm_security_pb2.SCMRevokeCertificatesResponseProto:
        req = scm_security_pb2.SCMRevokeCertificatesRequestProto(serialIds=list(serials), reason=reason, external=external)
        return await self._call(lambda a, t, md: self._security(a).RevokeCertificates(req, timeout=t, metadata=md))

    async def renew(self, csr_pem: str) -> scm_security_pb2.SCMGetCertResponseProto:
        req = scm_security_pb2.SCMRenewCertificateRequestProto(CSR=csr_pem)
        return await self._call(lambda a, t, md: self._security(a).RenewCertificate(req, timeout=t, metadata=md))

    async def sign(self, csr_pem: str) -> scm_security_pb2.SCMGetCertResponseProto:
        req = scm_security_pb2.SCMSignCertificateRequestProto(CSR=csr_pem)
        return await self._call(lambda a, t, md: self._security(a).SignCertificate(req, timeout=t, metadata=md))
