"""The SCM's certificate authority: issuing, recording and revoking certificates (Ozone's
``DefaultCAServer`` + the certificate half of ``SCMSecurityProtocolServer``).

Who calls it: the security gRPC servicers (:mod:`scm_server.server.security_services`), the
leader-only recorder service, the decommission hook of the HA manager, the renewal loop. What it
must not do: sign anything on a follower (every issuing call checks leadership first: serials come
from the replicated ``CertificateId`` sequence, batch size 1, and issued certificates are stored
through Raft, so a signature is only ever handed out once its record is committed), or sign what
the pure request checks (:mod:`scm_server.security.core.requests`) refused.

Signers, as in Ozone: a bootstrapping SCM's sub-CA is signed by the root CA when this SCM holds
the root key (the primordial SCM in CA mode ``scm``, or an external root given with its key), else
by this (leader) SCM's own sub-CA (HDDS-8286). Datanode, OM and client certificates are signed by
the leader's sub-CA. In CA mode ``operator`` no SCM holds the root key: sub-CAs come from outside.

Recording: ``validSCMCerts`` holds the root CA certificate and every SCM's sub-CA certificate,
``validCerts`` everything else. SCM certificates this SCM did not issue itself (the primordial's
own at ``--init``, externally issued sub-CAs, renewed ones swapped in by an operator) are recorded
by the leader the first time an SCM presents them on a mutually authenticated call.

Revocation (Ozone removed it in HDDS-10889; HDDS-8399 asked for it back): ``revoke`` parses the
serials once into their canonical form (:mod:`scm_server.security.core.serials`) and replicates
:class:`~hdds_pb2.RevokedCertificateProto` records; decommissioning an SCM revokes its sub-CA
certificates; CRLs are built on request for the CAs whose keys this SCM holds.

Enrolment checks: the proof covers the whole request and a time window, and a nonce is
accepted once (:mod:`scm_server.security.core.enrollment`); datanode/OM host names and IPs are
validated and a uuid that is enrolled cannot be enrolled again (:mod:`scm_server.security.core.requests`).
No datanode, OM or client certificate (issued, signed for an administrator or renewed) may carry a name of
the ring's members (:mod:`scm_server.security.core.member_names`, :meth:`SCMCertificateServer.host_policy`).
Duplicate checks and the supersession of a renewed certificate run under the issuing lock against
the replicated tables, so concurrent requests for one identity yield one certificate.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from scm_server.clock import Clock
from scm_server.conf import SCMNodeDetails
from scm_server.conf.security import SecurityConfig
from scm_server.exceptions import ConfigError, ResultCodes, SCMException
from scm_server.ha.scm_context import SCMContext
from scm_server.ha.stateful_service_state_manager import CertificateStore
from scm_server.proto import hdds_pb2, scm_security_pb2
from scm_server.security.core import certificates as pki
from scm_server.security.core import enrollment
from scm_server.security.core import member_names as members
from scm_server.security.core import requests as reqs
from scm_server.security.core import serials as serial_ids
from scm_server.security.core.identity import Identity, Role, hostname_of, identity_of
from scm_server.security.core.ratelimit import RateLimiter
from scm_server.security.keystore import read_secret
from scm_server.security.tls import ReloadableMaterial

LOG = logging.getLogger(__name__)

CRL_NEXT_UPDATE = timedelta(days=1)
ROLE_OF_NODE_TYPE = {r.value: r for r in Role}


def certificate_record(
    cert: x509.Certificate, role: Role, *, owner_id: str = "", node_id: str = "", issuer_serial: str = ""
) -> hdds_pb2.CertificateProto:
    return hdds_pb2.CertificateProto(
        serialId=str(cert.serial_number),
        x509Certificate=pki.cert_pem(cert),
        nodeType=role.value,
        ownerId=owner_id,
        nodeId=node_id,
        issuerSerialId=issuer_serial,
    )


def _rejected(exc: reqs.RequestRejected) -> SCMException:
    try:
        code = ResultCodes(exc.code)
    except ValueError:
        code = ResultCodes.INVALID_REQUEST
    return SCMException(code, str(exc))


class SCMCertificateServer:
    def __init__(
        self,
        *,
        config: SecurityConfig,
        material: ReloadableMaterial,
        root_key: pki.PrivateKey | None,
        cluster_id: str,
        scm_id: str,
        node_id: str | None,
        nodes: Sequence[SCMNodeDetails],
        store: CertificateStore,
        next_serial: Callable[[], Awaitable[int]],
        context: SCMContext,
        clock: Clock,
        is_member: Callable[[str], bool] = lambda _scm_id: False,
        current_nodes: Callable[[], Sequence[SCMNodeDetails]] | None = None,
        registered_host: Callable[[str], str | None] = lambda _uuid: None,
    ) -> None:
        self.config = config
        self.material = material
        self.root_key = root_key
        self.cluster_id = cluster_id
        self.scm_id = scm_id
        self.node_id = node_id
        self.nodes = tuple(nodes)
        self.store = store
        self._next_serial = next_serial
        self.context = context
        self.clock = clock
        self.is_member = is_member
        self._current_nodes = current_nodes
        self.registered_host = registered_host
        self.rate_limiter = RateLimiter(
            per_source_rate=config.enrollment_rate_per_source,
            per_source_burst=config.enrollment_rate_per_source_burst,
            total_rate=config.enrollment_rate_total,
            total_burst=config.enrollment_rate_total_burst,
        )
        self.replay_guard = enrollment.ReplayGuard(int(config.enrollment_proof_window.total_seconds() * 1000))
        self.spec = pki.KeySpec(config.key_algorithm.upper(), config.key_length, config.signature_algorithm)
        self._lock = asyncio.Lock()
        self._sightings: dict[str, x509.Certificate] = {}  # SCM certificates seen on calls, to record
        self._parsed_scm: dict[str, x509.Certificate] = {}  # serial -> recorded SCM certificate (parsed once)
        self.issued_count = 0

    # ---- helpers ----
    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock.wall_ms() / 1000.0, UTC)

    @property
    def root(self) -> x509.Certificate:
        return self.material.current.roots[0]

    @property
    def holds_root_key(self) -> bool:
        return self.root_key is not None

    def configured_hosts(self) -> dict[str, str]:
        """The SCMs of this service as configured NOW: the site file is re-read for every SCM
        enrolment, so adding a node to the (mounted) configuration is enough for it to bootstrap."""
        nodes = self.nodes
        if self._current_nodes is not None:
            try:
                nodes = tuple(self._current_nodes())
            except (ConfigError, OSError) as exc:
                LOG.warning("cannot re-read the SCM node list (using the one loaded at start): %s", exc)
        return {n.node_id: n.host for n in nodes}

    def member_names(self, configured: dict[str, str] | None = None) -> members.MemberNames:
        """The names of the ring's members, which no datanode, OM or client certificate may carry: the configured
        hosts (the site file re-read) and the names in every valid (not revoked, not expired) SCM certificate, the
        recorded ones and this SCM's own."""
        now = self.now()
        certs: dict[str, x509.Certificate] = {}
        for proto in self.store.list_certificates(scm_certs=True):
            if proto.nodeType != Role.SCM.value or self.store.is_revoked(proto.serialId):
                continue
            cert = self._parsed_scm.get(proto.serialId)
            if cert is None:
                try:
                    cert = pki.load_certificate(proto.x509Certificate)
                except pki.PKIError:
                    continue
                self._parsed_scm[proto.serialId] = cert
            certs[proto.serialId] = cert
        m = self.material.current
        for cert in (m.certificate, *m.chain):
            if pki.is_ca(cert) and not pki.is_self_signed(cert):
                certs.setdefault(str(cert.serial_number), cert)
        valid: list[tuple[str, x509.Certificate]] = []
        for serial, cert in sorted(certs.items()):
            if cert.not_valid_after_utc <= now or self.store.is_revoked(serial):
                continue
            try:
                ident = identity_of(cert)
            except pki.PKIError:
                continue  # not an identity any port accepts
            valid.append((self.node_id_of(ident) or ident.owner_id or f"serial {serial}", cert))
        return members.member_names(self.configured_hosts() if configured is None else configured, valid)

    def host_policy(self) -> reqs.HostPolicy:
        """What names a datanode, OM or client certificate may carry (docs/security.md, "Enrolment")."""
        configured = self.configured_hosts()
        return reqs.HostPolicy(
            allow_loopback=self.config.enrollment_loopback_allowed,
            scm_hosts=frozenset(configured.values()),
            members=self.member_names(configured),
        )

    def node_id_of_host(self, host: str) -> str:
        """The configured node at ``host``, if exactly one is there (several SCMs may share a host)."""
        matches = [n.node_id for n in self.nodes if n.host == host]
        return matches[0] if len(matches) == 1 else ""

    def node_id_of(self, ident: Identity) -> str:
        """Node id of an SCM certificate: OU when it names a configured node (operator-issued sub-CAs),
        this SCM's own id for its own certificate, else the unique node at the CN's host."""
        node_ids = {n.node_id for n in self.nodes}
        if ident.owner_id in node_ids:
            return ident.owner_id
        if ident.owner_id and ident.owner_id == self.scm_id:
            return self.node_id or ""
        return self.node_id_of_host(hostname_of(ident.common_name))

    def _secret(self, role: str) -> bytes:
        path = self.config.enrollment_secret_file(role)
        key = f"ozone.scm.security.enrollment.{role}.secret.file"
        if path is None:
            raise SCMException(
                ResultCodes.UNAUTHENTICATED,
                f"enrolment of {role} certificates is disabled on this SCM: {key} is not set",
            )
        try:
            return read_secret(path, key)
        except ConfigError as exc:
            raise SCMException(ResultCodes.UNAUTHENTICATED, f"enrolment of {role} certificates is unavailable: {exc}") from exc

    def admit_enrollment(self, source: str) -> None:
        """Rate limit of the anonymous enrolment calls, before anything of the request is looked at."""
        decision = self.rate_limiter.acquire(source, int(self.clock.monotonic() * 1000))
        if not decision.allowed:
            raise SCMException(ResultCodes.RATE_LIMITED, decision.message)

    def secret_or_none(self, role: str) -> bytes | None:
        try:
            return self._secret(role)
        except SCMException:
            return None

    def _check_proof(
        self,
        role: str,
        csr: x509.CertificateSigningRequest,
        proof: bytes,
        *,
        cluster_id: str,
        node_id: str,
        owner_id: str,
        host: str,
        ip: str,
        time_ms: int,
        nonce: bytes,
    ) -> None:
        """The proof must cover exactly this request, be recent, and not have been used before."""
        secret = self._secret(role)
        claims = enrollment.EnrollmentClaims(
            role, cluster_id, node_id, owner_id, host, ip, csr.public_bytes(serialization.Encoding.DER), time_ms, nonce
        )
        now_ms = self.clock.wall_ms()
        try:
            enrollment.check_enrollment(
                secret, claims, proof, now_ms=now_ms,
                window_ms=int(self.config.enrollment_proof_window.total_seconds() * 1000),
                secret_key=f"ozone.scm.security.enrollment.{role}.secret.file",
            )
            self.replay_guard.check_and_remember(claims, now_ms)
        except enrollment.EnrollmentRefused as exc:
            code = ResultCodes.RATE_LIMITED if exc.busy else ResultCodes.UNAUTHENTICATED
            raise SCMException(code, str(exc)) from exc

    @staticmethod
    def _load_csr(pem: str) -> x509.CertificateSigningRequest:
        try:
            return pki.load_csr(pem)
        except pki.PKIError as exc:
            raise SCMException(ResultCodes.INVALID_CSR, str(exc)) from exc

    def issued_records(self) -> list[reqs.IssuedRecord]:
        out = []
        for proto in self.store.list_certificates(scm_certs=True):
            try:
                cert = pki.load_certificate(proto.x509Certificate)
            except pki.PKIError:
                continue
            out.append(
                reqs.IssuedRecord(
                    proto.serialId,
                    ROLE_OF_NODE_TYPE.get(proto.nodeType, Role.SCM),
                    proto.ownerId,
                    proto.nodeId,
                    cert.not_valid_after_utc,
                    self.store.is_revoked(proto.serialId),
                )
            )
        return out

    def node_records(self, role: Role, owner_id: str) -> list[reqs.IssuedRecord]:
        """The recorded certificates of one datanode/OM id (from the store's index: nothing parsed)."""
        out = []
        for serial in self.store.serials_of(role.value, owner_id):
            not_after = self.store.not_after_ms(serial)
            if not_after is None:
                continue
            out.append(
                reqs.IssuedRecord(
                    serial, role, owner_id, "", datetime.fromtimestamp(not_after / 1000.0, UTC), self.store.is_revoked(serial)
                )
            )
        return out

    def _signer(self, *, sub_ca: bool) -> tuple[x509.Certificate, pki.PrivateKey, list[x509.Certificate]]:
        """(issuer certificate, its key, the chain to send after the issued certificate)."""
        m = self.material.current
        if sub_ca and self.root_key is not None:
            return self.root, self.root_key, []
        return m.certificate, m.key, list(m.chain)

    async def _issue(
        self,
        approved: reqs.Approved,
        *,
        sub_ca: bool,
        lifetime: timedelta | None = None,
        check: Callable[[], object] | None = None,
        after: Callable[[x509.Certificate], Awaitable[None]] | None = None,
    ) -> tuple[x509.Certificate, list[x509.Certificate]]:
        """Sign and record. ``check`` runs under the issuing lock before a serial is taken (against
        the tables as every earlier issuance left them); ``after`` runs under it once the record is
        stored (a renewal supersedes the certificate it replaces there)."""
        self.context.check_leader()
        issuer, issuer_key, chain = self._signer(sub_ca=sub_ca)
        async with self._lock:  # one serial at a time (batch size 1 anyway)
            if check is not None:
                try:
                    check()
                except reqs.RequestRejected as exc:
                    raise _rejected(exc) from exc
            serial = await self._next_serial()
            try:
                cert = pki.issue_certificate(
                    approved.subject,
                    approved.public_key,
                    issuer=issuer,
                    issuer_key=issuer_key,
                    serial=serial,
                    now=self.now(),
                    lifetime=lifetime or self.config.default_duration,
                    profile=approved.profile,
                    spec=self.spec,
                )
            except pki.PKIError as exc:
                raise SCMException(ResultCodes.INTERNAL_ERROR, f"cannot sign: {exc}") from exc
            record = certificate_record(
                cert,
                approved.role,
                owner_id=approved.owner_id,
                node_id=approved.node_id,
                issuer_serial=str(issuer.serial_number),
            )
            await self.store.store_valid_certificate(record, approved.role is Role.SCM)
            if after is not None:
                await after(cert)
        self.issued_count += 1
        LOG.info(
            "issued %s certificate serial %d to %s (signed by %s)",
            approved.role.value,
            serial,
            approved.subject.common_name,
            pki.describe(issuer),
        )
        return cert, chain

    def _response(self, cert: x509.Certificate, chain: list[x509.Certificate]) -> scm_security_pb2.SCMGetCertResponseProto:
        issuer = chain[0] if chain else self.root
        return scm_security_pb2.SCMGetCertResponseProto(
            responseCode=scm_security_pb2.SCMGetCertResponseProto.success,
            x509Certificate=pki.certs_pem([cert, *chain]),
            x509CACertificate=pki.cert_pem(issuer),
            x509RootCACertificate=pki.cert_pem(self.root),
            serialId=str(cert.serial_number),
        )

    # ---- enrolment ----
    async def issue_scm_certificate(
        self, request: scm_security_pb2.SCMGetSCMCertRequestProto
    ) -> scm_security_pb2.SCMGetCertResponseProto:
        """A bootstrapping SCM's sub-CA (Ozone's getSCMCertificate)."""
        self.context.check_leader()
        csr = self._load_csr(request.CSR)
        d = request.scmDetails
        self._check_proof(
            "scm", csr, request.enrollmentProof, cluster_id=d.clusterId, node_id=d.scmNodeId, owner_id=d.scmId,
            host=d.hostName, ip="", time_ms=request.enrollmentTimeMs, nonce=request.enrollmentNonce,
        )
        hosts = self.configured_hosts()

        def approve() -> reqs.Approved:
            return reqs.approve_scm_request(
                csr,
                cluster_id=self.cluster_id,
                claimed_cluster_id=d.clusterId,
                node_id=d.scmNodeId,
                scm_id=d.scmId,
                hostname=d.hostName,
                configured_hosts=hosts,
                issued=self.issued_records(),
                now=self.now(),
            )

        try:
            approved = approve()
        except reqs.RequestRejected as exc:
            raise _rejected(exc) from exc
        # the duplicate node-id check again under the issuing lock: concurrent requests yield one sub-CA
        cert, chain = await self._issue(approved, sub_ca=True, check=approve)
        return self._response(cert, chain)

    async def issue_node_certificate(
        self, role: Role, request: scm_security_pb2.SCMGetNodeCertRequestProto
    ) -> scm_security_pb2.SCMGetCertResponseProto:
        """A datanode's or OM's certificate (Ozone's getDataNodeCertificate / getOMCertificate)."""
        self.context.check_leader()
        csr = self._load_csr(request.CSR)
        d = request.details
        self._check_proof(
            role.value.lower(), csr, request.enrollmentProof, cluster_id=d.clusterId, node_id="", owner_id=d.uuid,
            host=d.hostName, ip=d.ipAddress, time_ms=request.enrollmentTimeMs, nonce=request.enrollmentNonce,
        )
        policy = self.host_policy()
        try:
            approved = reqs.approve_node_request(
                csr,
                role=role,
                cluster_id=self.cluster_id,
                claimed_cluster_id=d.clusterId,
                owner_id=d.uuid,
                hostname=d.hostName,
                ip=d.ipAddress,
                policy=policy,
            )
        except reqs.RequestRejected as exc:
            raise _rejected(exc) from exc

        def not_enrolled() -> None:
            registered = self.registered_host(d.uuid) if role is Role.DATANODE else None
            reqs.check_not_enrolled(
                role, d.uuid, d.hostName, issued=self.node_records(role, d.uuid), registered_host=registered,
                now=self.now(),
            )

        cert, chain = await self._issue(approved, sub_ca=False, check=not_enrolled)
        return self._response(cert, chain)

    def _host_of(self, serial: str) -> str | None:
        proto = self.store.get_certificate(serial)
        if proto is None:
            return None
        try:
            names = pki.load_certificate(proto.x509Certificate).subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)
        except pki.PKIError:
            return None
        cn = names[0].value if names else ""
        return hostname_of(cn if isinstance(cn, str) else cn.decode("utf-8", "replace")) or None

    async def issue_to_principal(
        self, role: Role, csr_pem: str, *, principal: str, owner_id: str, hostname: str, ip: str = ""
    ) -> scm_security_pb2.SCMGetCertResponseProto:
        """A datanode's or OM's certificate for an authenticated Kerberos ``principal`` (SCMSecurityProtocol over
        Hadoop RPC); the caller already bound ``role`` and ``hostname`` from the principal
        (:func:`scm_server.security.core.principals.bind`). No enrolment proof: Kerberos authenticated the caller.
        The subject, key usage and names are the CA's (``dn@<host>``/``om@<host>``, the host and IP checked as on
        the gRPC path), whatever the CSR asks; a CSR naming ``O=null, OU=null`` (Ozone's datanode before it
        registered) is accepted. A new request for an id that holds a valid certificate *for the same host* is
        Ozone's renewal: the new certificate supersedes the old ones (revoked, reason superseded, after
        ``hdds.x509.renew.overlap.duration``); for another host it is refused."""
        self.context.check_leader()
        csr = self._load_csr(csr_pem)
        what = "datanode" if role is Role.DATANODE else "OM"
        try:
            approved = reqs.approve_node_request(
                csr, role=role, cluster_id=self.cluster_id, claimed_cluster_id=self.cluster_id, owner_id=owner_id,
                hostname=hostname, ip=ip, policy=self.host_policy(), accept_unset_cluster=True,
            )
        except reqs.RequestRejected as exc:
            raise _rejected(exc) from exc
        superseded: list[str] = []

        def same_holder() -> None:
            superseded.clear()
            now = self.now()
            for rec in self.node_records(role, owner_id):
                if rec.revoked or rec.not_after <= now:
                    continue
                held = self._host_of(rec.serial)
                if held is None or held.rstrip(".").lower() != hostname.rstrip(".").lower():
                    raise reqs.RequestRejected(
                        "PERMISSION_DENIED",
                        f"{what} {owner_id} holds certificate serial {rec.serial} for host {held or '(unknown)'}; "
                        f"{principal} (host {hostname}) may not take that id over",
                    )
                superseded.append(rec.serial)
            registered = self.registered_host(owner_id) if role is Role.DATANODE else None
            if registered is not None and registered.rstrip(".").lower() != hostname.rstrip(".").lower():
                raise reqs.RequestRejected(
                    "PERMISSION_DENIED",
                    f"datanode {owner_id} is registered from host {registered}, not {hostname} ({principal})",
                )

        async def supersede(new: x509.Certificate) -> None:
            if not superseded:
                return
            effective = self.clock.wall_ms() + int(self.config.renew_overlap_duration.total_seconds() * 1000)
            records = []
            for serial in superseded:
                proto = self.store.get_certificate(serial)
                records.append(hdds_pb2.RevokedCertificateProto(
                    serialId=serial, revocationTimeMs=effective, reason=4,  # superseded
                    nodeType=role.value, ownerId=owner_id,
                    issuerSerialId=proto.issuerSerialId if proto is not None else "",
                    revokedBy=f"renewal by {principal}", external=False, supersededBy=str(new.serial_number),
                ))
            await self.store.revoke_certificates(records)
            LOG.info("%s certificate(s) %s of %s superseded by serial %d (renewed by %s)", what,
                     " ".join(superseded), owner_id, new.serial_number, principal)

        LOG.info("%s asks for a %s certificate for %s (%s) over Hadoop RPC", principal, what, hostname, owner_id)
        cert, chain = await self._issue(approved, sub_ca=False, check=same_holder, after=supersede)
        return self._response(cert, chain)

    async def issue_scm_to_principal(
        self, csr_pem: str, *, principal: str, scm_id: str, claimed_cluster_id: str, hostname: str
    ) -> scm_security_pb2.SCMGetCertResponseProto:
        """A joining SCM's sub-CA for an authenticated Kerberos ``principal`` (Ozone's ``getSCMCertificate`` over
        SCMSecurityProtocol); the caller already bound the SCM principal to ``hostname``
        (:func:`scm_server.security.core.principals.bind`). No enrolment proof: Kerberos authenticated the caller.
        The node is the one SCM configured at ``hostname`` (``ozone.scm.address.<serviceId>.<nodeId>``, the site
        file re-read); the rest is the gRPC enrolment's approval: the cluster id, a UUID ``scm_id``, no other live
        SCM holding a certificate for that node. Asking again with the same ``scm_id`` is Ozone's ``renew``: a new
        sub-CA, the old one left to expire (it still issued live certificates). The leader cannot sign its own
        without the root key."""
        self.context.check_leader()
        csr = self._load_csr(csr_pem)
        hosts = self.configured_hosts()
        at_host = sorted(n for n, h in hosts.items() if h.rstrip(".").lower() == hostname.rstrip(".").lower())
        if len(at_host) != 1:
            where = f"SCMs {', '.join(at_host)} are" if at_host else "no SCM is"
            raise SCMException(ResultCodes.PERMISSION_DENIED, (
                f"{principal} asks for an SCM certificate for host {hostname!r}, but {where} configured there; an SCM "
                "gets one over Hadoop RPC only as the one SCM configured at its host (ozone.scm.address.<serviceId>."
                "<nodeId>), else at `ozone-scm scm --bootstrap` over the gRPC security service"))
        node_id = at_host[0]
        if scm_id == self.scm_id and self.root_key is None:
            raise SCMException(ResultCodes.INVALID_REQUEST, (
                "the leader cannot sign its own sub-CA without the root key; it hands leadership over first"))

        def approve() -> reqs.Approved:
            return reqs.approve_scm_request(
                csr, cluster_id=self.cluster_id, claimed_cluster_id=claimed_cluster_id, node_id=node_id,
                scm_id=scm_id, hostname=hosts[node_id], configured_hosts=hosts, issued=self.issued_records(),
                now=self.now(),
            )

        try:
            approved = approve()
        except reqs.RequestRejected as exc:
            raise _rejected(exc) from exc
        LOG.info("%s asks for the sub-CA of SCM %s (%s, node %s) over Hadoop RPC", principal, scm_id, hostname, node_id)
        cert, chain = await self._issue(approved, sub_ca=True, check=approve)
        return self._response(cert, chain)

    async def remove_expired_certificates(self, by: str) -> list[str]:
        """Leader: drop the expired datanode, OM and client certificates from ``validCerts`` (Ozone's
        RemoveExpiredCertificates, an administrator's call); returns their PEMs."""
        self.context.check_leader()
        removed: list[str] = await self.store.remove_all_expired_certificates(self.clock.wall_ms())
        LOG.info("%s removed %d expired certificate(s)", by, len(removed))
        return removed

    async def sign_client_certificate(self, csr_pem: str, caller: Identity) -> scm_security_pb2.SCMGetCertResponseProto:
        """An administrator asks for a client certificate (a new admin, a tool)."""
        csr = self._load_csr(csr_pem)
        try:
            approved = reqs.approve_client_request(csr, cluster_id=self.cluster_id, policy=self.host_policy())
        except reqs.RequestRejected as exc:
            raise _rejected(exc) from exc
        LOG.info("%s asks for a client certificate for %s", caller.name, approved.owner_id)
        cert, chain = await self._issue(approved, sub_ca=False)
        return self._response(cert, chain)

    async def renew(
        self, csr_pem: str, caller: Identity, current: x509.Certificate
    ) -> scm_security_pb2.SCMGetCertResponseProto:
        """A new certificate for the caller's own identity (same subject, new key).

        A revoked (or already superseded) certificate cannot renew. An end-entity certificate (datanode,
        OM, client) is superseded by its renewal: revoked (reason superseded) from
        ``hdds.x509.renew.overlap.duration`` after, through Raft and under the issuing lock, so of
        concurrent renewals of one certificate exactly one succeeds. An SCM's sub-CA is not revoked by
        its renewal: it is still the issuer of live certificates; it expires."""
        csr = self._load_csr(csr_pem)
        try:
            approved = reqs.approve_renewal(
                csr, current=current, identity=caller, cluster_id=self.cluster_id,
                policy=None if caller.role is Role.SCM else self.host_policy(),
            )
        except reqs.RequestRejected as exc:
            raise _rejected(exc) from exc
        if caller.role is Role.SCM:
            node_id = self.node_id_of(caller)
            approved = reqs.Approved(approved.subject, approved.public_key, approved.profile, Role.SCM,
                                     approved.owner_id, node_id)
            if caller.owner_id == self.scm_id and self.root_key is None:
                raise SCMException(
                    ResultCodes.INVALID_REQUEST,
                    "the leader cannot renew its own sub-CA without the root key; it hands leadership over first",
                )
        serial = str(current.serial_number)
        supersedes = caller.role is not Role.SCM

        def renewable() -> None:
            record = self.store.revocation(serial)
            reqs.check_renewable(
                serial,
                revoked=record is not None,
                superseded_by=record.supersededBy if record is not None else "",
            )

        async def supersede(new: x509.Certificate) -> None:
            if not supersedes:
                return
            proto = self.store.get_certificate(serial)
            effective = self.clock.wall_ms() + int(self.config.renew_overlap_duration.total_seconds() * 1000)
            await self.store.revoke_certificates([
                hdds_pb2.RevokedCertificateProto(
                    serialId=serial,
                    revocationTimeMs=effective,
                    reason=4,  # superseded
                    nodeType=proto.nodeType if proto is not None else caller.role.value,
                    ownerId=proto.ownerId if proto is not None else caller.owner_id,
                    issuerSerialId=proto.issuerSerialId if proto is not None else "",
                    revokedBy=f"renewal by {caller.name}",
                    external=proto is None,
                    supersededBy=str(new.serial_number),
                )
            ])
            LOG.info("certificate serial %s of %s superseded by serial %d (no longer accepted after %.0fs)",
                     serial, caller.name, new.serial_number, self.config.renew_overlap_duration.total_seconds())

        cert, chain = await self._issue(approved, sub_ca=caller.role is Role.SCM, check=renewable, after=supersede)
        return self._response(cert, chain)

    # ---- recording of SCM certificates seen on calls ----
    def saw_certificate(self, cert: x509.Certificate) -> None:
        """Called by the call authenticator the first time a peer certificate is seen."""
        if identity_of(cert).role is Role.SCM and not self.store.is_scm_certificate(str(cert.serial_number)):
            self._sightings[str(cert.serial_number)] = cert

    def note_own_certificates(self) -> None:
        m = self.material.current
        for cert in (*m.chain, *m.roots):
            if not self.store.is_scm_certificate(str(cert.serial_number)):
                self._sightings[str(cert.serial_number)] = cert

    async def record_pending(self) -> int:
        """Leader: store the SCM certificates seen but not yet in validSCMCerts. Returns how many."""
        if not self.context.is_leader():
            return 0
        self.note_own_certificates()
        recorded = 0
        for serial, cert in list(self._sightings.items()):
            if self.store.is_scm_certificate(serial):
                self._sightings.pop(serial, None)
                continue
            ident = identity_of(cert)
            role = ident.role
            node_id = self.node_id_of(ident)
            issuer = next(
                (c for c in (*self.material.current.chain, *self.material.current.roots) if c.subject == cert.issuer),
                None,
            )
            record = certificate_record(
                cert,
                role,
                owner_id=ident.owner_id,
                node_id=node_id,
                issuer_serial=str(issuer.serial_number) if issuer is not None and role is not Role.ROOT_CA else "",
            )
            await self.store.store_valid_certificate(record, True)
            self._sightings.pop(serial, None)
            recorded += 1
            LOG.info("recorded %s certificate serial %s (%s) in validSCMCerts", role.value, serial, ident.common_name)
        return recorded

    # ---- revocation ----
    def _lookup(self, serial: str) -> hdds_pb2.CertificateProto | None:
        return self.store.get_certificate(serial)

    async def revoke(
        self, serials: Sequence[str], reason: int, *, external: bool, by: str
    ) -> list[hdds_pb2.RevokedCertificateProto]:
        self.context.check_leader()
        if not serials:
            raise SCMException(ResultCodes.INVALID_REQUEST, "no serial id given: `admin cert revoke <serial>`")
        if reason not in pki.REASONS:
            raise SCMException(ResultCodes.INVALID_REQUEST, f"unknown revocation reason code {reason}")
        records = []
        now_ms = self.clock.wall_ms()
        canonical: list[str] = []
        for typed in serials:
            try:
                serial = serial_ids.canonical_serial(typed)
            except serial_ids.SerialError as exc:
                raise SCMException(ResultCodes.INVALID_REQUEST, str(exc)) from exc
            if serial not in canonical:
                canonical.append(serial)
        for serial in canonical:
            proto = self._lookup(serial)
            if proto is None and not external:
                raise SCMException(
                    ResultCodes.CERTIFICATE_NOT_FOUND,
                    f"no certificate with serial {serial} was issued or recorded by this cluster's SCMs; pass "
                    "--external to revoke a certificate issued outside SCM (e.g. an operator-issued admin certificate)",
                )
            if proto is None and int(serial) < pki.EXTERNAL_SERIAL_FLOOR:
                # SCM's CertificateId sequence has not reached this serial yet: revoking it now would revoke, in
                # advance, the certificate SCM issues under it later
                raise SCMException(
                    ResultCodes.INVALID_REQUEST,
                    f"serial {serial} is in the range of SCM's own serials (below 2^63) and SCM has not issued it; "
                    "certificates issued outside SCM carry random serials of at least 2^63: check the serial",
                )
            if proto is not None and proto.nodeType == Role.ROOT_CA.value:
                raise SCMException(ResultCodes.INVALID_REQUEST, f"serial {serial} is the root CA; it cannot be revoked")
            if proto is not None and proto.nodeType == Role.SCM.value and (
                (proto.ownerId and self.is_member(proto.ownerId)) or (proto.nodeId and self.is_member(proto.nodeId))
            ):
                raise SCMException(
                    ResultCodes.INVALID_REQUEST,
                    f"serial {serial} is the sub-CA of SCM {proto.ownerId}, which is still a member of the ring; "
                    "decommission it (`ozone-scm admin scm decommission --nodeid ...`), which also revokes it",
                )
            records.append(_revocation_record(serial, proto, reason, now_ms, by))
        async with self._lock:  # no renewal of this lineage runs between the walk and the write
            records += self._successors(records, reason, now_ms, by)
            await self.store.revoke_certificates(records)
        return [self.store.revocation(r.serialId) or r for r in records]

    def _successors(
        self, records: list[hdds_pb2.RevokedCertificateProto], reason: int, now_ms: int, by: str
    ) -> list[hdds_pb2.RevokedCertificateProto]:
        """Revoking a certificate also revokes what was renewed from it (its successors, transitively):
        whoever held the revoked key may have renewed it before the revocation."""
        out: list[hdds_pb2.RevokedCertificateProto] = []
        seen = {r.serialId for r in records}
        for record in records:
            current = self.store.revocation(record.serialId)
            for _ in range(10_000):
                successor = current.supersededBy if current is not None else ""
                if not successor or successor in seen:
                    break
                seen.add(successor)
                proto = self.store.get_certificate(successor)
                existing = self.store.revocation(successor)
                if existing is None or existing.supersededBy:
                    out.append(_revocation_record(
                        successor, proto, reason, now_ms, f"{by} (renewed from revoked serial {record.serialId})"))
                current = existing
        return out

    async def revoke_scm(self, scm_id: str, node_id: str, by: str) -> list[str]:
        """Decommission: revoke every still-valid sub-CA certificate of that SCM."""
        serials = [
            p.serialId
            for p in self.store.list_certificates(scm_certs=True)
            if p.nodeType == Role.SCM.value
            and ((scm_id and p.ownerId == scm_id) or (node_id and p.nodeId == node_id))
            and not self.store.is_revoked(p.serialId)
        ]
        if not serials:
            return []
        now_ms = self.clock.wall_ms()
        records = []
        for s in serials:
            p = self.store.get_certificate(s)
            records.append(
                hdds_pb2.RevokedCertificateProto(
                    serialId=s,
                    revocationTimeMs=now_ms,
                    reason=5,  # cessationOfOperation
                    nodeType=Role.SCM.value,
                    ownerId=p.ownerId if p is not None else scm_id,
                    issuerSerialId=p.issuerSerialId if p is not None else "",
                    revokedBy=by,
                )
            )
        await self.store.revoke_certificates(records)
        LOG.info("revoked the sub-CA certificate(s) %s of decommissioned SCM %s", serials, scm_id)
        return serials

    def scm_revoked(self, scm_id: str) -> bool:
        """True if every recorded certificate of ``scm_id`` is revoked (and there is one)."""
        mine = [p.serialId for p in self.store.list_certificates(scm_certs=True) if p.ownerId == scm_id]
        return bool(mine) and all(self.store.is_revoked(s) for s in mine)

    # ---- CRLs and listings ----
    def crls(self) -> list[x509.CertificateRevocationList]:
        """One CRL per CA key this SCM holds (its sub-CA; the root if held)."""
        now = self.now()
        revoked = self.store.revocations()
        number = len(revoked)
        out = []
        m = self.material.current
        signers: list[tuple[x509.Certificate, pki.PrivateKey]] = [(m.certificate, m.key)]
        if self.root_key is not None:
            signers.append((self.root, self.root_key))
        for issuer, key in signers:
            entries = [
                pki.RevokedEntry(int(r.serialId), datetime.fromtimestamp(r.revocationTimeMs / 1000.0, UTC), r.reason)
                for r in revoked
                if r.issuerSerialId == str(issuer.serial_number)
            ]
            out.append(pki.build_crl(issuer, key, entries, now=now, next_update=CRL_NEXT_UPDATE, number=number,
                                     spec=self.spec))
        return out

    def info(self, proto: hdds_pb2.CertificateProto, scm_cert: bool) -> scm_security_pb2.CertificateInfoProto:
        out = scm_security_pb2.CertificateInfoProto(certificate=proto, scmCertificate=scm_cert)
        try:
            cert = pki.load_certificate(proto.x509Certificate)
        except pki.PKIError:
            return out
        out.subject = cert.subject.rfc4514_string()
        out.issuer = cert.issuer.rfc4514_string()
        out.notBeforeMs = int(cert.not_valid_before_utc.timestamp() * 1000)
        out.notAfterMs = int(cert.not_valid_after_utc.timestamp() * 1000)
        out.isCA = pki.is_ca(cert)
        rev = self.store.revocation(proto.serialId)
        if rev is not None:
            out.revocation.CopyFrom(rev)
        return out

    def list_infos(
        self, role: str | None, revoked_only: bool, start: str, count: int
    ) -> tuple[list[scm_security_pb2.CertificateInfoProto], list[hdds_pb2.RevokedCertificateProto]]:
        infos = []
        for scm_cert in (True, False):
            for proto in self.store.list_certificates(scm_certs=scm_cert):
                if role and proto.nodeType != role:
                    continue
                if revoked_only and not self.store.is_revoked(proto.serialId):
                    continue
                infos.append(self.info(proto, scm_cert))
        infos.sort(key=lambda i: int(i.certificate.serialId))
        if start:
            infos = [i for i in infos if int(i.certificate.serialId) >= int(start)]
        external = [r for r in self.store.revocations() if r.external] if (revoked_only or not role) else []
        return infos[:count], external


def _revocation_record(
    serial: str, proto: hdds_pb2.CertificateProto | None, reason: int, now_ms: int, by: str
) -> hdds_pb2.RevokedCertificateProto:
    """The revocation of ``serial``; ``proto`` is its stored certificate record, or None for one SCM never issued."""
    return hdds_pb2.RevokedCertificateProto(
        serialId=serial,
        revocationTimeMs=now_ms,
        reason=reason,
        nodeType=proto.nodeType if proto is not None else "",
        ownerId=proto.ownerId if proto is not None else "",
        issuerSerialId=proto.issuerSerialId if proto is not None else "",
        revokedBy=by,
        external=proto is None,
    )
