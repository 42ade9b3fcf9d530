"""The SCMs, as the operator reaches them: only through ``scm_server.client`` (``HAAdminClient``), never SCM internals.

Called by the reconciler. Members are reached by Pod IP on the inter-SCM port (``ozone.scm.grpc.port``, 9895), which
works from anywhere that reaches Pods, without depending on cluster DNS from the operator's own Pod. Under mutual TLS
(security enabled) the operator presents its client certificate (``<cluster>-operator-client``, CN
``ozone-scm-operator``, listed in ``ozone.administrators``) and, like every SCM client, accepts only a certificate that
carries the SCM role name (``scm.ozone-scm.invalid``, checked at the handshake by ``scm_server.security.tls`` whatever
Pod IP is dialled; docs/security.md, "Identities and roles"). Each probe has
a short deadline: an SCM that does not answer quickly is simply not observed this pass.

* ``probe``: one SCM's own view (``GetScmInfo``): cluster ID, scmUuid, the leader it knows, term; and whether it
  is in safemode (``InSafeMode`` on its client port as a per-SCM read, ``local_read``: leadership is never moved to an SCM in safemode, which would
  refuse every block allocation);
* ``ring``: the leader's view of the ring (``GetScmRatisRoles`` answered by the leader: role, lag and last contact
  per peer, and the leader's election timeout and heartbeat interval);
* ``transfer`` and ``decommission``: leadership transfer and RemoveSCM, sent to the members in the given order
  (leader first); the client follows NotLeader hints by itself;
* CA mode scm, the operator's own certificate: ``fetch_client_certificate`` (security port, no client certificate:
  the root CA is trusted only once the SCM proved the scm enrolment secret, then the certificate signed for the
  operator's public key at ``--init`` is read) and ``renew_client_certificate`` (``RenewCertificate``, presented with
  the current one);
* ``revoke``: ``RevokeCertificates`` (``SCMSecurityClient``, client port) for a removed member's certificate.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping, Sequence

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from ozone_scm_operator import naming
from ozone_scm_operator.model import PeerObs, RingObs, SCMObs
from scm_server.client.config import SCMClientConfig
from scm_server.client.ha_admin import HAAdminClient
from scm_server.client.scm_client import SCMClient
from scm_server.client.security_admin import SCMSecurityClient
from scm_server.security.cert_client import SecurityProtocolClient, parse_issued
from scm_server.security.core import certificates as pki
from scm_server.security.keystore import Material
from scm_server.security.tls import StaticClientSecurity

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """A member as the operator calls it: its Pod IP and the DNS name its certificate carries."""

    member: str
    ip: str
    host: str

    @property
    def grpc_address(self) -> str:
        """The inter-SCM service (roles, leadership transfer)."""
        return self._address(naming.PORTS["inter-scm"])

    @property
    def client_address(self) -> str:
        """The admin (location) protocol over gRPC."""
        return self._address(naming.PORTS["client-grpc"])

    @property
    def legacy_client_address(self) -> str:
        """Where a member configured before the port swap serves the admin protocol over gRPC."""
        return self._address(naming.LEGACY_GRPC_CLIENT_PORT)

    @property
    def security_address(self) -> str:
        """The security protocol over gRPC (TLS)."""
        return self._address(naming.PORTS["security-grpc"])

    def _address(self, port: int) -> str:
        host = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"{host}:{port}"


def client_security(cert_chain: Sequence[x509.Certificate], key: ec.EllipticCurvePrivateKey,
                    root: x509.Certificate) -> StaticClientSecurity:
    """The operator's identity under mutual TLS, from its client certificate Secret."""
    return StaticClientSecurity(Material(key, tuple(cert_chain), (root,)))


class SCMAdmin:
    def __init__(self, *, probe_timeout: float = 2.0, admin_timeout: float = 30.0) -> None:
        self.probe_timeout = probe_timeout
        self.admin_timeout = admin_timeout

    def _client(self, ep: Endpoint, security: StaticClientSecurity | None, *, rounds: int, timeout: float) -> HAAdminClient:
        return HAAdminClient([ep.grpc_address], rounds=rounds, timeout=timeout, security=security)

    async def probe(self, ep: Endpoint, security: StaticClientSecurity | None = None) -> SCMObs | None:
        try:
            async with self._client(ep, security, rounds=1, timeout=self.probe_timeout) as c:
                info = await asyncio.wait_for(c.scm_info(), self.probe_timeout + 1)
        except Exception as exc:  # not answering is an observation, not an error
            LOG.debug("SCM %s (%s) did not answer GetScmInfo: %s", ep.member, ep.ip, exc)
            return None
        return SCMObs(
            member=ep.member,
            cluster_id=info.clusterId,
            scm_id=info.scmId,
            leader_id=info.leaderId or None,
            term=info.term,
            in_safe_mode=await self._in_safe_mode(ep, security),
        )

    async def _in_safe_mode(self, ep: Endpoint, security: StaticClientSecurity | None) -> bool | None:
        config = SCMClientConfig(max_retries=0, retry_interval=0.1, rpc_timeout=self.probe_timeout)
        # a member still on a configuration from before the port swap (rolled later) answers on the old port
        for address in (ep.client_address, ep.legacy_client_address):
            try:
                # local_read: this member's own safemode state (a plain read on a follower is redirected to the leader)
                async with SCMClient([address], config, security=security, local_read=True) as c:
                    return (await asyncio.wait_for(c.in_safe_mode(), self.probe_timeout + 1)).in_safe_mode
            except Exception as exc:
                LOG.debug("SCM %s (%s) did not answer InSafeMode at %s: %s", ep.member, ep.ip, address, exc)
        return None

    async def probe_all(
        self, endpoints: Mapping[str, Endpoint], security: StaticClientSecurity | None = None
    ) -> dict[str, SCMObs]:
        """member -> its answer, for the members that answered."""
        names = list(endpoints)
        answers = await asyncio.gather(*(self.probe(endpoints[n], security) for n in names))
        return {n: a for n, a in zip(names, answers, strict=True) if a is not None}

    async def ring(self, leader: Endpoint, security: StaticClientSecurity | None = None) -> RingObs | None:
        try:
            async with self._client(leader, security, rounds=1, timeout=self.probe_timeout) as c:
                roles = await asyncio.wait_for(c.roles(), self.probe_timeout + 1)
        except Exception as exc:
            LOG.debug("the leader %s (%s) did not answer GetScmRatisRoles: %s", leader.member, leader.ip, exc)
            return None
        if not roles.leader_id or roles.answered_by != roles.leader_id:
            return None  # only the leader's view carries lags and is authoritative about membership
        return RingObs(
            leader_scm_id=roles.leader_id,
            term=roles.term,
            commit_index=roles.commit_index,
            peers=tuple(
                PeerObs(scm_id=p.peer_id, role=p.role, lag=p.lag, host=p.host, last_contact=p.last_contact,
                        node_id=p.node_id)
                for p in roles.peers
            ),
            election_timeout=roles.election_timeout,
            heartbeat_interval=roles.heartbeat_interval,
        )

    async def transfer(
        self, endpoints: Sequence[Endpoint], to_scm_id: str, security: StaticClientSecurity | None = None
    ) -> str:
        return await self._first(endpoints, security, lambda c: c.transfer(to_scm_id))

    async def decommission(
        self, endpoints: Sequence[Endpoint], scm_id: str, security: StaticClientSecurity | None = None
    ) -> str:
        return await self._first(endpoints, security, lambda c: c.decommission(scm_id))

    async def fetch_client_certificate(
        self, ep: Endpoint, scm_secret: bytes, public_key_sha256: str
    ) -> tuple[list[x509.Certificate], x509.Certificate]:
        """(certificate then its issuers below the root, root) that SCM signed for the key with this hash, read from
        ``ep``'s security port after it proved the scm enrolment secret for the root it presents."""
        client = SecurityProtocolClient(
            [ep.security_address], role="scm", secret=scm_secret, rounds=1, rpc_timeout=self.admin_timeout,
        )
        trusted = await client.establish_trust()
        if not trusted.proven:
            raise RuntimeError(f"SCM {ep.member} did not prove the scm enrolment secret for its root CA")
        resp = await client.certificate_for_key(public_key_sha256)
        chain = pki.load_certificates(resp.certificate.x509Certificate + resp.chain, "certificate")
        root = trusted.roots[0]
        return [c for c in chain if c != root], root

    async def renew_client_certificate(
        self, endpoints: Sequence[Endpoint], csr_pem: str, security: StaticClientSecurity | None
    ) -> tuple[list[x509.Certificate], x509.Certificate]:
        """``RenewCertificate`` for the operator's own identity (the leader signs; the caller presents the current
        certificate). Returns (certificate then issuers, root)."""
        last: Exception | None = None
        for ep in endpoints:
            config = SCMClientConfig(max_retries=3, retry_interval=0.5, rpc_timeout=self.admin_timeout)
            try:
                async with SCMSecurityClient([ep.client_address], config, security=security) as c:
                    resp = await c.renew(csr_pem)
                chain, root = parse_issued(resp)
                return [c for c in chain if c != root], root
            except Exception as exc:
                LOG.info("certificate renewal through %s failed: %s", ep.member, exc)
                last = exc
        raise last if last is not None else RuntimeError("no SCM to call")

    async def revoke(
        self, endpoints: Sequence[Endpoint], serials: Sequence[str], reason: int,
        security: StaticClientSecurity | None = None,
    ) -> list[str]:
        """``RevokeCertificates`` on the security admin service (client port), as an external revocation: a member
        certificate the operator issued may never have been presented to (so recorded by) SCM. Idempotent: SCM
        keeps the first record of a serial it already revoked (e.g. at decommission). Returns the serials SCM
        reports revoked."""
        if not endpoints:
            raise RuntimeError("no SCM to call")
        last: Exception | None = None
        for ep in endpoints:  # one at a time, leader first
            config = SCMClientConfig(max_retries=3, retry_interval=0.5, rpc_timeout=self.admin_timeout)
            try:
                async with SCMSecurityClient([ep.client_address], config, security=security) as c:
                    resp = await c.revoke(serials, reason, external=True)
                return [r.serialId for r in resp.revoked]
            except Exception as exc:
                LOG.info("certificate revocation through %s failed: %s", ep.member, exc)
                last = exc
        raise last if last is not None else RuntimeError("no SCM to call")

    async def _first(self, endpoints: Sequence[Endpoint], security: StaticClientSecurity | None, call: object) -> str:
        """Try the members in order (leader first) until one carries the call out."""
        assert callable(call)
        last: Exception | None = None
        for ep in endpoints:
            try:
                async with self._client(ep, security, rounds=3, timeout=self.admin_timeout) as c:
                    return str(await call(c))
            except Exception as exc:
                LOG.info("admin call through %s failed: %s", ep.member, exc)
                last = exc
        raise last if last is not None else RuntimeError("no SCM to call")
