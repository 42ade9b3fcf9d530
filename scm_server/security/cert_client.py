"""The enrolling side of the security protocol: establish trust, enrol, fetch certificates (edge).

Who calls it: ``scm --bootstrap`` (an SCM's sub-CA), the datanode simulator (datanode
certificates), the CLI's ``cert`` commands (CA certificates, a certificate signed for your key,
CRLs) and ``local up --secure``. It must not decide what gets signed (the leader does) and never
sends an enrolment secret: it sends HMACs (:mod:`scm_server.security.core.enrollment`).

Trust in the root CA comes from one of two places:

* ``hdds.x509.rootca.certificate.file`` (or roots already stored by this component): the security
  port's TLS certificate is verified against it from the first byte;
* nothing (CA mode ``scm``: only the primordial SCM has the root): the chain the security port
  presents is read without verification, its self-signed root is used for the TLS channel, and the
  SCM must then prove, with an HMAC over our nonce and that root, that it knows our enrolment
  secret. Only then is the root trusted (kubeadm's token-based discovery, in spirit).

Calls go to any SCM's security port; issuing calls are leader-only, so a NotLeader answer is
followed to the leader's security address (bounded rounds with backoff, as ``AddSCM``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc
import grpc.aio
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.grpc_errors import from_grpc_error
from scm_server.proto import scm_security_pb2, scm_security_pb2_grpc
from scm_server.security.core import certificates as pki
from scm_server.security.core import enrollment
from scm_server.security.tls import scm_channel_options

LOG = logging.getLogger(__name__)
T = TypeVar("T")

CHANNEL_OPTIONS = [("grpc.enable_retries", 0), ("grpc.max_receive_message_length", 64 << 20)]
ROLE_NODE_TYPES = {
    "scm": scm_security_pb2.SCM,
    "datanode": scm_security_pb2.DATANODE,
    "om": scm_security_pb2.OM,
}


class EnrollmentError(SCMException):
    def __init__(self, message: str, result: ResultCodes = ResultCodes.UNAUTHENTICATED) -> None:
        super().__init__(result, message)


def presented_chain(address: str, timeout: float = 5.0) -> list[x509.Certificate]:
    """The certificates a TLS server presents, read WITHOUT verifying them (trust comes later)."""
    host, _, port = address.rpartition(":")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as raw, ctx.wrap_socket(
        raw, server_hostname=host.strip("[]")
    ) as tls:
        getter = getattr(tls, "get_unverified_chain", None)  # public from Python 3.13
        sslobj: Any = getattr(tls, "_sslobj", None)
        chain = getter() if callable(getter) else sslobj.get_unverified_chain()
        der = [c.public_bytes(ssl._ssl.ENCODING_DER) if not isinstance(c, bytes) else c for c in chain]  # type: ignore[attr-defined]
    return [x509.load_der_x509_certificate(d) for d in der]


@dataclasses.dataclass(frozen=True)
class TrustedInfo:
    roots: tuple[x509.Certificate, ...]
    info: scm_security_pb2.SCMSecurityInfoResponseProto
    address: str
    proven: bool  # the SCM proved knowledge of our enrolment secret


class SecurityProtocolClient:
    """Calls on the SCMs' security ports (server-authenticated TLS, no client certificate)."""

    def __init__(
        self,
        addresses: Sequence[str],
        *,
        roots: Sequence[x509.Certificate] = (),
        role: str = "datanode",
        secret: bytes | None = None,
        rounds: int = 10,
        rpc_timeout: float = 10.0,
        backoff_start: float = 0.5,
        backoff_max: float = 4.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        channel_options: Sequence[tuple[str, Any]] = (),
        scm_role_check: bool = True,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        if not addresses:
            raise ValueError("no SCM security address: configure ozone.scm.security.service.grpc.port / the SCM nodes")
        # the security port's certificate must prove the SCM role (tls.scm_channel_options), whatever address is
        # dialled (a host name, 127.0.0.1, a Pod IP)
        self.scm_role_check = scm_role_check
        self.channel_options = scm_channel_options([*CHANNEL_OPTIONS, *channel_options], role_check=scm_role_check)
        self.addresses = list(dict.fromkeys(addresses))
        self.roots = tuple(roots)
        self.role = role
        self.secret = secret
        self.rounds = rounds
        self.rpc_timeout = rpc_timeout
        self.backoff_start = backoff_start
        self.backoff_max = backoff_max
        self._sleep = sleep
        self._clock_ms = clock_ms
        self.rate_limited = 0  # enrolment attempts the SCM refused for its rate limit (retried)
        self.info: scm_security_pb2.SCMSecurityInfoResponseProto | None = None

    def _channel(self, address: str) -> grpc.aio.Channel:
        creds = grpc.ssl_channel_credentials(root_certificates=pki.certs_pem(self.roots).encode("ascii"))
        return grpc.aio.secure_channel(address, creds, options=self.channel_options)

    # ---- trust ----
    async def establish_trust(self) -> TrustedInfo:
        """GetScmInfo from any SCM; learn (and prove) the root CA if we have none."""
        errors: list[str] = []
        delay = self.backoff_start
        for attempt in range(1, self.rounds + 1):
            for address in self.addresses:
                try:
                    return await self._trust_one(address)
                except EnrollmentError:
                    raise
                except (OSError, grpc.aio.AioRpcError, SCMException, pki.PKIError) as exc:
                    errors.append(f"{address}: {_describe(exc)}")
            if attempt < self.rounds:
                LOG.info("no SCM security service answered (attempt %d/%d); retrying in %.1fs", attempt, self.rounds, delay)
                await self._sleep(delay)
                delay = min(delay * 2, self.backoff_max)
        raise SCMException(
            ResultCodes.TIMEOUT,
            f"no SCM security service ({', '.join(self.addresses)}) answered after {self.rounds} rounds; "
            f"last error: {errors[-1] if errors else 'none'}",
        )

    async def _trust_one(self, address: str) -> TrustedInfo:
        nonce = os.urandom(32)
        learned = False
        if not self.roots:
            if self.secret is None:
                raise EnrollmentError(
                    "no root CA certificate to trust the SCMs with and no enrolment secret to verify one: set "
                    "hdds.x509.rootca.certificate.file, or the enrolment secret file of this role"
                )
            chain = await asyncio.to_thread(presented_chain, address, self.rpc_timeout)
            roots = [c for c in chain if pki.is_self_signed(c)]
            if not roots:
                raise pki.PKIError(f"the security service at {address} presents no root CA certificate")
            self.roots = (roots[-1],)
            learned = True
        req = scm_security_pb2.SCMSecurityInfoRequestProto(nonce=nonce)
        if self.role in ROLE_NODE_TYPES:
            req.role = ROLE_NODE_TYPES[self.role]
        try:
            async with self._channel(address) as ch:
                info = await scm_security_pb2_grpc.SCMSecurityProtocolServiceStub(ch).GetScmInfo(
                    req, timeout=self.rpc_timeout
                )
        except BaseException:
            if learned:
                self.roots = ()
            raise
        root_pem = info.rootCACertificate
        proven = False
        if self.secret is not None and info.proof:
            stated_root = pki.load_certificate(root_pem) if root_pem else self.roots[0]
            root_der = stated_root.public_bytes(serialization.Encoding.DER)
            proven = enrollment.verify_ca_proof(self.secret, nonce, root_der, info.proof)
            if proven and stated_root not in self.roots:
                proven = False  # the proof must be about the root the TLS channel was verified with
        if learned and not proven:
            self.roots = ()
            raise EnrollmentError(
                f"the SCM at {address} could not prove it knows the {self.role} enrolment secret; refusing to trust "
                f"the root CA it presented (sha256 {pki.fingerprint(roots[-1])})"
            )
        self.info = info
        return TrustedInfo(self.roots, info, address, proven)

    # ---- calls that must reach the leader ----
    async def _on_leader(self, call: Callable[[scm_security_pb2_grpc.SCMSecurityProtocolServiceStub], Awaitable[T]]) -> T:
        if not self.roots:
            await self.establish_trust()
        return await call_on_leader(
            self.addresses,
            self._channel,
            lambda ch: call(scm_security_pb2_grpc.SCMSecurityProtocolServiceStub(ch)),
            rounds=self.rounds,
            sleep=self._sleep,
            backoff_start=self.backoff_start,
            backoff_max=self.backoff_max,
        )

    def _proof(
        self, csr: x509.CertificateSigningRequest, *, cluster_id: str, node_id: str, owner_id: str, host: str, ip: str
    ) -> tuple[bytes, int, bytes]:
        """(proof, time ms, nonce) for one attempt: the proof covers every field of the request, this
        moment and a fresh nonce (the SCM accepts each nonce once), so every attempt makes a new one."""
        if self.secret is None:
            raise EnrollmentError(f"no {self.role} enrolment secret configured (ozone.scm.security.enrollment.{self.role}.secret.file)")
        time_ms = self._clock_ms()
        nonce = os.urandom(32)
        claims = enrollment.EnrollmentClaims(
            self.role, cluster_id, node_id, owner_id, host, ip, csr.public_bytes(serialization.Encoding.DER), time_ms, nonce
        )
        return enrollment.enrollment_proof(self.secret, claims), time_ms, nonce

    async def _enroll(self, call: Callable[[scm_security_pb2_grpc.SCMSecurityProtocolServiceStub], Awaitable[T]]) -> T:
        """On the leader; an answer that the enrolment rate limit is exhausted is retried with backoff."""
        delay = self.backoff_start
        for attempt in range(1, self.rounds + 1):
            try:
                return await self._on_leader(call)
            except SCMException as exc:
                if exc.result is not ResultCodes.RATE_LIMITED or attempt == self.rounds:
                    raise
                self.rate_limited += 1
                LOG.info("enrolment rate-limited by the SCM (%s); retrying in %.1fs", exc.message, delay)
                await self._sleep(delay)
                delay = min(delay * 2, self.backoff_max)
        raise AssertionError("unreachable")

    async def enroll_scm(
        self, csr: x509.CertificateSigningRequest, details: scm_security_pb2.ScmNodeDetailsProto
    ) -> scm_security_pb2.SCMGetCertResponseProto:
        def request() -> scm_security_pb2.SCMGetSCMCertRequestProto:
            proof, time_ms, nonce = self._proof(
                csr, cluster_id=details.clusterId, node_id=details.scmNodeId, owner_id=details.scmId,
                host=details.hostName, ip="",
            )
            return scm_security_pb2.SCMGetSCMCertRequestProto(
                scmDetails=details, CSR=pki.csr_pem(csr), enrollmentProof=proof, enrollmentTimeMs=time_ms,
                enrollmentNonce=nonce,
            )

        return await self._enroll(lambda s: s.GetSCMCertificate(request(), timeout=self.rpc_timeout))

    async def enroll_node(
        self, csr: x509.CertificateSigningRequest, details: scm_security_pb2.NodeCertDetailsProto
    ) -> scm_security_pb2.SCMGetCertResponseProto:
        def request() -> scm_security_pb2.SCMGetNodeCertRequestProto:
            proof, time_ms, nonce = self._proof(
                csr, cluster_id=details.clusterId, node_id="", owner_id=details.uuid, host=details.hostName,
                ip=details.ipAddress,
            )
            return scm_security_pb2.SCMGetNodeCertRequestProto(
                details=details, CSR=pki.csr_pem(csr), enrollmentProof=proof, enrollmentTimeMs=time_ms,
                enrollmentNonce=nonce,
            )

        if self.role == "om":
            return await self._enroll(lambda s: s.GetOMCertificate(request(), timeout=self.rpc_timeout))
        return await self._enroll(lambda s: s.GetDataNodeCertificate(request(), timeout=self.rpc_timeout))

    # ---- public reads (any SCM) ----
    async def _any(self, call: Callable[[scm_security_pb2_grpc.SCMSecurityProtocolServiceStub], Awaitable[T]]) -> T:
        if not self.roots:
            await self.establish_trust()
        last: Exception | None = None
        for address in self.addresses:
            try:
                async with self._channel(address) as ch:
                    return await call(scm_security_pb2_grpc.SCMSecurityProtocolServiceStub(ch))
            except grpc.aio.AioRpcError as err:
                exc = from_grpc_error(err.code(), err.details() or "", err.trailing_metadata())
                if exc is not None:
                    raise exc from err
                last = SCMException(ResultCodes.TIMEOUT, f"{address}: {err.code().name} {err.details()}")
        assert last is not None
        raise last

    async def scm_info(self, address: str) -> scm_security_pb2.SCMSecurityInfoResponseProto:
        if not self.roots:
            await self.establish_trust()
        async with self._channel(address) as ch:
            return await scm_security_pb2_grpc.SCMSecurityProtocolServiceStub(ch).GetScmInfo(
                scm_security_pb2.SCMSecurityInfoRequestProto(), timeout=self.rpc_timeout
            )

    async def ca_certificates(self) -> scm_security_pb2.SCMListCACertificateResponseProto:
        return await self._any(lambda s: s.ListCACertificate(scm_security_pb2.SCMListCACertificateRequestProto(),
                                                             timeout=self.rpc_timeout))

    async def certificate_for_key(self, public_key_sha256: str) -> scm_security_pb2.SCMGetCertificateResponseProto:
        req = scm_security_pb2.SCMGetCertificateRequestProto(publicKeySha256=public_key_sha256)
        return await self._any(lambda s: s.GetCertificate(req, timeout=self.rpc_timeout))

    async def certificate(self, serial: str) -> scm_security_pb2.SCMGetCertificateResponseProto:
        req = scm_security_pb2.SCMGetCertificateRequestProto(serialId=serial)
        return await self._any(lambda s: s.GetCertificate(req, timeout=self.rpc_timeout))

    async def crls_from(self, address: str) -> scm_security_pb2.SCMGetCrlResponseProto:
        if not self.roots:
            await self.establish_trust()
        async with self._channel(address) as ch:
            return await scm_security_pb2_grpc.SCMSecurityProtocolServiceStub(ch).GetCrl(
                scm_security_pb2.SCMGetCrlRequestProto(), timeout=self.rpc_timeout
            )


async def call_on_leader(
    addresses: list[str],
    open_channel: Callable[[str], grpc.aio.Channel],
    call: Callable[[grpc.aio.Channel], Awaitable[T]],
    *,
    rounds: int = 10,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    backoff_start: float = 0.5,
    backoff_max: float = 4.0,
) -> T:
    """Call on whichever of ``addresses`` leads: NotLeader hints are followed at once (and added to
    ``addresses``), unreachable SCMs skipped, the whole list retried ``rounds`` times with a capped
    backoff; any other SCM error is raised as the SCMException it is."""
    errors: list[str] = []
    delay = backoff_start
    for attempt in range(1, rounds + 1):
        queue = list(addresses)
        tried: set[str] = set()
        while queue:
            address = queue.pop(0)
            if address in tried:
                continue
            tried.add(address)
            try:
                async with open_channel(address) as ch:
                    return await call(ch)
            except grpc.aio.AioRpcError as err:
                exc = from_grpc_error(err.code(), err.details() or "", err.trailing_metadata())
                if isinstance(exc, NotLeaderException):
                    errors.append(f"{address}: not the leader")
                    if exc.leader_address and exc.leader_address not in tried:
                        if exc.leader_address not in addresses:
                            addresses.append(exc.leader_address)
                        queue.insert(0, exc.leader_address)
                    continue
                if exc is not None:
                    raise exc from err
                errors.append(f"{address}: {err.code().name} {err.details()}")
        if attempt < rounds:
            await sleep(delay)
            delay = min(delay * 2, backoff_max)
    raise SCMException(
        ResultCodes.TIMEOUT,
        f"no SCM leader answered on {', '.join(addresses)} after {rounds} rounds; "
        f"last error: {errors[-1] if errors else 'none'}",
    )


def parse_issued(response: scm_security_pb2.SCMGetCertResponseProto) -> tuple[list[x509.Certificate], x509.Certificate]:
    """(issued certificate + issuer chain, root) from an enrolment/renewal answer."""
    chain = pki.load_certificates(response.x509Certificate, "issued certificate")
    root = pki.load_certificate(response.x509RootCACertificate, "root CA certificate")
    return chain, root


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name} {exc.details()}"
    return str(exc) or type(exc).__name__


# ---------------------------------------------------------------------------------------------
# a datanode's (or OM's) certificate: enrol once, keep it on disk, renew it in time
# ---------------------------------------------------------------------------------------------


class NodeCertificateClient:
    """Ozone's ``DefaultCertificateClient`` for a datanode/OM: the key and certificate live in
    ``store`` (``<dir>/dn/keys``, ``<dir>/dn/certs``); a missing one is enrolled with the leader
    (CSR + enrolment proof over the security port); :meth:`renew_if_due` replaces it within
    ``hdds.x509.renew.grace.duration`` of its expiry, over mutual TLS with the current one, and bumps
    the material's generation so every channel reconnects with the new certificate."""

    def __init__(
        self,
        *,
        store: Any,
        role: str,
        details: scm_security_pb2.NodeCertDetailsProto,
        protocol: SecurityProtocolClient,
        spec: pki.KeySpec,
        renew_grace: Any,
        now: Callable[[], Any],
        renew_addresses: Sequence[str] = (),
        key_generator: Callable[[pki.KeySpec], pki.PrivateKey] = pki.generate_key,
    ) -> None:
        self.store = store
        self.role = role
        self.details = details
        self.protocol = protocol
        self.spec = spec
        self.renew_grace = renew_grace
        self.now = now
        self.renew_addresses = list(renew_addresses)
        self.key_generator = key_generator
        self.material: Any = None  # a ReloadableMaterial once ensured
        self.renewals = 0

    def _subject(self) -> pki.SubjectInfo:
        from scm_server.security.core import identity as ids

        d = self.details
        make = ids.datanode_subject if self.role == "datanode" else ids.om_subject
        return make(d.hostName, d.uuid, d.clusterId, d.ipAddress)

    async def ensure(self) -> Any:
        """Load the stored certificate or enrol a new one; returns the ReloadableMaterial."""
        from scm_server.security.keystore import Material
        from scm_server.security.tls import ReloadableMaterial

        if self.material is not None:
            return self.material
        if self.store.exists():
            loaded = await asyncio.to_thread(self.store.load, self.protocol.roots)
            if self.protocol.roots == () and loaded.roots:
                self.protocol.roots = loaded.roots
            self.material = ReloadableMaterial(loaded, scm_role_check=self.protocol.scm_role_check)
            return self.material
        key = await asyncio.to_thread(self.key_generator, self.spec)
        csr = pki.build_csr(key, self._subject(), self.spec)
        response = await self.protocol.enroll_node(csr, self.details)
        chain, root = parse_issued(response)
        if not pki.key_matches(chain[0], key):
            raise EnrollmentError("the SCM returned a certificate for another key", ResultCodes.INTERNAL_ERROR)
        await asyncio.to_thread(self.store.save, key, chain, [root])
        self.material = ReloadableMaterial(Material(key, tuple(c for c in chain if not pki.is_self_signed(c)), (root,)),
                                           scm_role_check=self.protocol.scm_role_check)
        LOG.info("%s %s enrolled: certificate serial %d", self.role, self.details.hostName, chain[0].serial_number)
        return self.material

    def renewal_due(self) -> bool:
        return self.material is not None and pki.needs_renewal(
            self.material.current.certificate, self.now(), self.renew_grace
        )

    async def renew_if_due(self) -> bool:
        if not self.renewal_due():
            return False
        from scm_server.security.keystore import Material
        from scm_server.security.tls import make_channel

        current = self.material.current
        key = await asyncio.to_thread(self.key_generator, self.spec)
        csr = pki.build_csr(key, self._subject(), self.spec)
        req = scm_security_pb2.SCMRenewCertificateRequestProto(CSR=pki.csr_pem(csr))
        if not self.renew_addresses:
            raise SCMException(ResultCodes.INVALID_REQUEST, f"{self.details.hostName}: no SCM client address to renew at")
        response = await call_on_leader(
            self.renew_addresses,
            lambda address: make_channel(address, self.material, CHANNEL_OPTIONS),
            lambda ch: scm_security_pb2_grpc.SCMSecurityAdminProtocolServiceStub(ch).RenewCertificate(req, timeout=30),
            rounds=3,
        )
        chain, root = parse_issued(response)
        if not pki.key_matches(chain[0], key):
            raise EnrollmentError("the SCM returned a certificate for another key", ResultCodes.INTERNAL_ERROR)
        await asyncio.to_thread(self.store.save, key, chain, [root])
        roots = current.roots if root in current.roots else (*current.roots, root)
        self.material.update(Material(key, tuple(c for c in chain if not pki.is_self_signed(c)), roots))
        self.renewals += 1
        LOG.info("%s %s renewed: certificate serial %d", self.role, self.details.hostName, chain[0].serial_number)
        return True
