"""gRPC servicers of the security protocols (proto/scm_security.proto), thin over the CA server.

* ``SCMSecurityProtocolService`` on ``ozone.scm.security.service.grpc.port`` (19961): TLS with this SCM's
  certificate, no client certificate (enrolling parties have none). Enrolment calls are leader-only
  and authenticated by an HMAC of the role's enrolment secret; the rest is public (CA certificates,
  a certificate by serial or by public key, CRLs) or proves the secret (``GetScmInfo``).
* ``SCMSecurityAdminProtocolService`` on the client port, behind mutual TLS and the authorization
  table: listing and info for any member, revocation and client-certificate signing for
  administrators, renewal of the caller's own certificate.

Errors use the shared mapping of :mod:`scm_server.server.grpc_services` (status + ``x-scm-result``;
NotLeader carries the leader's address for the protocol that was called). Nothing here holds state.
"""

from __future__ import annotations

from typing import Any

import grpc
import grpc.aio
from cryptography.hazmat.primitives import serialization
from google.protobuf import message as pb_message

from scm_server.ca.ca_server import SCMCertificateServer
from scm_server.ca.scm_security import SCMSecurity, leaf_of_context
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.proto import hdds_pb2, scm_security_pb2
from scm_server.protocols import SCMSecurityProtocol
from scm_server.security.core import certificates as pki
from scm_server.security.core import enrollment
from scm_server.security.core import serials as serial_ids
from scm_server.security.core.identity import Role
from scm_server.security.tls import current_identity
from scm_server.server import endpoints
from scm_server.server.grpc_services import RpcMetrics, _ServiceBase


def peer_source(context: grpc.aio.ServicerContext) -> str:
    """The caller's IP address (``ipv4:10.0.0.5:41234`` -> ``10.0.0.5``), the key of its rate limit."""
    peer = context.peer() or ""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6" and rest.startswith("["):
        return rest[1 : rest.find("]")] or peer
    if kind == "ipv4":
        return rest.rpartition(":")[0] or peer
    return peer or "unknown"


def _serial(text: str) -> str:
    try:
        return serial_ids.canonical_serial(text)
    except serial_ids.SerialError as exc:
        raise SCMException(ResultCodes.INVALID_REQUEST, str(exc)) from exc


_ROLE_NAMES = {scm_security_pb2.SCM: "scm", scm_security_pb2.DATANODE: "datanode", scm_security_pb2.OM: "om"}


class _SecurityBase(_ServiceBase[SCMSecurityProtocol]):
    MODULE = scm_security_pb2

    def __init__(
        self,
        scm: SCMSecurityProtocol,
        protocol: endpoints.Protocol,
        get: endpoints.Getter,
        metrics: RpcMetrics,
        security: SCMSecurity,
    ) -> None:
        super().__init__(scm, protocol, get, metrics)
        self.security = security

    @property
    def ca(self) -> SCMCertificateServer:
        ca = self.security.ca
        if ca is None:
            raise SCMException(ResultCodes.INTERNAL_ERROR, "the certificate server is not attached yet")
        return ca


class SecurityProtocolService(_SecurityBase):
    """SCMSecurityProtocolService on ozone.scm.security.service.grpc.port."""

    SERVICE = "SCMSecurityProtocolService"

    async def GetScmInfo(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        ca = self.ca
        root = ca.root
        cert = self.security.material.current.certificate
        leader = self.scm.leader_peer_id()
        resp = scm_security_pb2.SCMSecurityInfoResponseProto(
            clusterId=ca.cluster_id,
            scmId=ca.scm_id,
            nodeId=ca.node_id or "",
            leaderId=leader or "",
            rootCACertificate=pki.cert_pem(root),
            certSerialId=str(cert.serial_number),
            certNotAfterMs=int(cert.not_valid_after_utc.timestamp() * 1000),
            holdsRootKey=ca.holds_root_key,
        )
        leader_node = self.scm.leader_node_id()
        if leader_node is not None:
            resp.leaderSecurityAddress = endpoints.leader_address(self.get, endpoints.Protocol.SECURITY, leader_node) or ""
        role = _ROLE_NAMES.get(req.role)
        if req.nonce and role is not None:
            secret = ca.secret_or_none(role)
            if secret is not None:
                resp.proof = enrollment.ca_proof(secret, req.nonce, root.public_bytes(serialization.Encoding.DER))
        return resp

    # enrolment: rate-limited per source and overall before anything of the request is checked
    async def GetSCMCertificate(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        self.ca.admit_enrollment(peer_source(ctx))
        return await self.ca.issue_scm_certificate(req)

    async def GetDataNodeCertificate(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        self.ca.admit_enrollment(peer_source(ctx))
        return await self.ca.issue_node_certificate(Role.DATANODE, req)

    async def GetOMCertificate(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        self.ca.admit_enrollment(peer_source(ctx))
        return await self.ca.issue_node_certificate(Role.OM, req)

    async def ListCACertificate(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        ca = self.ca
        return scm_security_pb2.SCMListCACertificateResponseProto(
            rootCACertificates=[pki.cert_pem(r) for r in self.security.material.current.roots],
            scmCertificates=ca.store.list_certificates(scm_certs=True),
        )

    def _chain_of(self, proto: hdds_pb2.CertificateProto) -> str:
        """PEM of the issuer chain of a stored certificate (not the root), from validSCMCerts."""
        store = self.ca.store
        out: list[str] = []
        serial = proto.issuerSerialId
        for _ in range(16):
            if not serial:
                break
            issuer = store.get_certificate(serial)
            if issuer is None or issuer.nodeType == Role.ROOT_CA.value:
                break
            out.append(issuer.x509Certificate)
            serial = issuer.issuerSerialId
        return "".join(out)

    async def GetCertificate(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        store = self.ca.store
        found: hdds_pb2.CertificateProto | None = None
        if req.serialId:
            found = store.get_certificate(_serial(req.serialId))
        elif req.publicKeySha256:
            found = store.certificate_for_key(req.publicKeySha256[:128])  # the store's index: nothing parsed
        else:
            raise SCMException(ResultCodes.INVALID_REQUEST, "give serialId or publicKeySha256")
        if found is None:
            what = req.serialId or f"the public key {req.publicKeySha256}"
            raise SCMException(
                ResultCodes.CERTIFICATE_NOT_FOUND,
                f"no certificate for {what} is recorded (a certificate signed at --init is recorded once the "
                "primordial SCM has led; retry in a moment)",
            )
        return scm_security_pb2.SCMGetCertificateResponseProto(certificate=found, chain=self._chain_of(found))

    async def GetCrl(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        crls = [pki.crl_pem(c) for c in self.ca.crls()]
        return scm_security_pb2.SCMGetCrlResponseProto(crls=crls, answeredBy=self.ca.scm_id)


class SecurityAdminService(_SecurityBase):
    """SCMSecurityAdminProtocolService on the client port (mutual TLS)."""

    SERVICE = "SCMSecurityAdminProtocolService"

    @staticmethod
    def _caller(what: str) -> Any:
        ident = current_identity()
        if ident is None:
            raise SCMException(
                ResultCodes.UNAUTHENTICATED,
                f"{what} needs an authenticated caller: enable mutual TLS (hdds.grpc.tls.enabled=true)",
            )
        return ident

    async def ListCertificate(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        role = scm_security_pb2.NodeType.Name(req.role) if req.HasField("role") else None
        start = _serial(req.startSerialId) if req.startSerialId else ""
        infos, external = self.ca.list_infos(role, req.revoked, start, req.count or 1000)
        return scm_security_pb2.SCMListCertificateResponseProto(certificates=infos, externalRevocations=external)

    async def GetCertificateInfo(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        ca = self.ca
        serial = _serial(req.serialId)
        proto = ca.store.get_certificate(serial)
        if proto is None:
            rev = ca.store.revocation(serial)
            if rev is not None:  # an external certificate known only by its revocation
                return scm_security_pb2.CertificateInfoProto(
                    certificate=hdds_pb2.CertificateProto(serialId=serial, x509Certificate=""), revocation=rev
                )
            raise SCMException(ResultCodes.CERTIFICATE_NOT_FOUND, f"no certificate with serial {serial} is recorded")
        return ca.info(proto, ca.store.is_scm_certificate(serial))

    async def RevokeCertificates(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        caller = self._caller("certificate revocation")
        revoked = await self.ca.revoke(list(req.serialIds), req.reason, external=req.external, by=caller.name)
        return scm_security_pb2.SCMRevokeCertificatesResponseProto(revoked=revoked)

    async def RenewCertificate(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        caller = self._caller("certificate renewal")
        leaf = leaf_of_context(ctx)
        if leaf is None:
            raise SCMException(ResultCodes.UNAUTHENTICATED, "renewal needs the caller's current certificate (mutual TLS)")
        return await self.ca.renew(req.CSR, caller, leaf)

    async def SignCertificate(self, req: Any, ctx: grpc.aio.ServicerContext) -> pb_message.Message:
        caller = self._caller("signing a client certificate")
        return await self.ca.sign_client_certificate(req.CSR, caller)
