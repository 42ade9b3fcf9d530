"""Renewal and the CA server driven by an injected clock (issue 7: "tests drive this with an
injected clock"): an in-process SCM (the stub HA applies replicated calls at once) with security,
its certificate server issuing, revoking and building CRLs, its sub-CA renewed exactly when the
clock enters ``hdds.x509.renew.grace.duration``, and a datanode's certificate renewed over a real
mutually authenticated socket to the in-process admin service."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
import pytest_asyncio

from scm_server.ca.scm_security import SCMSecurity
from scm_server.clock import FakeClock
from scm_server.conf import OzoneConfiguration
from scm_server.conf.security import SecurityConfig
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.metadata import SCMStorageConfig
from scm_server.proto import scm_security_pb2
from scm_server.scm import StorageContainerManager
from scm_server.security import init as sec_init
from scm_server.security.cert_client import NodeCertificateClient, SecurityProtocolClient
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids
from scm_server.security.keystore import KeyStore
from scm_server.security.tls import Denied, _Peer
from scm_server.server import endpoints
from scm_server.server.grpc_services import RpcMetrics
from scm_server.server.security_services import SecurityAdminService, SecurityProtocolService

from .pki_helpers import secure_scm_conf

EC = pki.KeySpec("EC", 256, "SHA256withECDSA")


def _conf(tmp: Path) -> OzoneConfiguration:
    return secure_scm_conf(tmp, b"d" * 40, **{"ozone.scm.security.enrollment.loopback.allowed": "true"})


class Harness:
    def __init__(self, conf: OzoneConfiguration, scm: Any, security: SCMSecurity, clock: FakeClock) -> None:
        self.conf, self.scm, self.security, self.clock = conf, scm, security, clock

    @property
    def ca(self) -> Any:
        return self.security.ca


@pytest_asyncio.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    conf = _conf(tmp_path)
    cluster_id, scm_id = "CID-" + str(uuid.uuid4()), str(uuid.uuid4())
    serial = sec_init.initialize_primordial(
        SecurityConfig.from_conf(conf), metadata_dir=tmp_path / "meta", cluster_id=cluster_id, scm_id=scm_id,
        hostname="127.0.0.1",
    )
    storage = SCMStorageConfig(tmp_path / "meta")
    storage.set_scm_cert_serial_id(serial)
    storage.initialize(cluster_id=cluster_id, scm_id=scm_id, primary_scm_node_id=scm_id, scm_ha=False)
    security = SCMSecurity.load(conf, storage)
    assert security is not None
    clock = FakeClock(start_wall_ms=int(datetime.now(UTC).timestamp() * 1000))
    scm = await StorageContainerManager.create(conf, clock=clock, storage_config=storage)
    security.attach(scm)
    await scm.start()
    try:
        yield Harness(conf, scm, security, clock)
    finally:
        await scm.stop()


async def test_sub_ca_renews_exactly_within_the_grace_period(harness: Harness) -> None:
    h = harness
    cert = h.security.material.current.certificate
    gen = h.security.material.generation
    grace = h.security.config.renew_grace_duration  # P28D, Ozone's default
    start = datetime.fromtimestamp(h.clock.wall_ms() / 1000, UTC)
    h.clock.advance((cert.not_valid_after_utc - grace - start).total_seconds() - 60)
    assert not h.security.renewal_due()
    assert await h.security.renew_if_due() is False
    h.clock.advance(120)  # now inside the grace period
    assert h.security.renewal_due()
    assert await h.security.renew_if_due() is True
    renewed = h.security.material.current.certificate
    assert h.security.material.generation == gen + 1
    assert renewed.serial_number == 3  # the next CertificateId (1 root, 2 the first sub-CA)
    assert renewed.subject == cert.subject and renewed.issuer == cert.issuer  # signed by the root it holds
    assert pki.key_matches(renewed, h.security.material.current.key) is not False
    assert renewed.public_key() != cert.public_key()
    now = datetime.fromtimestamp(h.clock.wall_ms() / 1000, UTC)
    assert renewed.not_valid_after_utc == now + timedelta(days=365)
    assert h.security.storage.scm_cert_serial_id == "3"
    assert SCMStorageConfig(h.security.storage.storage_dir).scm_cert_serial_id == "3"  # VERSION on disk
    assert sec_init.sub_ca_store(h.security.metadata_dir, h.security.config).load().certificate == renewed
    assert h.ca.store.is_scm_certificate("3")  # recorded in validSCMCerts through the replicated store
    assert await h.security.renew_if_due() is False


async def test_revocation_rules_and_crls(harness: Harness) -> None:
    h = harness
    ca = h.ca
    key = pki.generate_key(EC)
    cid = h.security.cluster_id
    csr = pki.build_csr(key, ids.client_subject("bob"), EC)
    admin = ids.Identity(ids.Role.CLIENT, "admin", "", cid, 99, datetime.now(UTC))
    resp = await ca.sign_client_certificate(pki.csr_pem(csr), admin)
    serial = resp.serialId
    assert await ca.record_pending() == 2  # what the leader's recorder does: the root and this sub-CA
    assert ca.store.is_scm_certificate("1") and ca.store.is_scm_certificate("2")
    with pytest.raises(SCMException, match="root CA"):
        await ca.revoke(["1"], 0, external=False, by="admin")
    with pytest.raises(SCMException) as info:
        await ca.revoke(["424242"], 0, external=False, by="admin")
    assert info.value.result is ResultCodes.CERTIFICATE_NOT_FOUND and "--external" in info.value.message
    with pytest.raises(SCMException, match="reason"):
        await ca.revoke([serial], 77, external=False, by="admin")
    records = await ca.revoke([serial], 1, external=False, by="admin")
    assert records[0].nodeType == "CLIENT" and records[0].revokedBy == "admin" and ca.store.is_revoked(serial)
    again = await ca.revoke([serial], 4, external=False, by="admin")  # idempotent: the first record stays
    assert again[0].reason == 1
    with pytest.raises(SCMException, match="range of SCM's own serials") as info:
        # not issued yet by the CertificateId sequence: revoking it would pre-revoke a future certificate
        await ca.revoke(["424242"], 0, external=True, by="admin")
    assert info.value.result is ResultCodes.INVALID_REQUEST and not ca.store.is_revoked("424242")
    external = await ca.revoke(["98765432109876543210"], 0, external=True, by="admin")
    assert external[0].external
    crls = ca.crls()
    assert len(crls) == 2  # the sub-CA's and, because this SCM holds it, the root's
    sub_crl = next(c for c in crls if c.issuer == h.security.material.current.certificate.subject)
    assert sub_crl.get_revoked_certificate_by_serial_number(int(serial)) is not None
    assert sub_crl.get_revoked_certificate_by_serial_number(98765432109876543210) is None  # not its certificate
    infos, ext = ca.list_infos(None, True, "", 100)
    assert [i.certificate.serialId for i in infos] == [serial] and [r.serialId for r in ext] == ["98765432109876543210"]


async def test_datanode_enrols_and_renews_over_real_sockets(harness: Harness, tmp_path: Path) -> None:
    h = harness
    get = h.conf.get_str
    metrics = RpcMetrics(None)
    security_port = grpc.aio.server()
    security_port.add_generic_rpc_handlers(
        (SecurityProtocolService(h.scm, endpoints.Protocol.SECURITY, get, metrics, h.security).generic_handler(),)
    )
    sport = security_port.add_secure_port("127.0.0.1:0", h.security.material.server_credentials(require_client_auth=False))
    assert h.security.transport is not None
    client_port = grpc.aio.server(interceptors=list(h.security.transport.server_interceptors()))
    client_port.add_generic_rpc_handlers(
        (SecurityAdminService(h.scm, endpoints.Protocol.CLIENT, get, metrics, h.security).generic_handler(),)
    )
    cport = client_port.add_secure_port("127.0.0.1:0", h.security.transport.server_credentials())
    await security_port.start()
    await client_port.start()
    try:
        secret = (tmp_path / "dn.secret").read_text().encode()
        protocol = SecurityProtocolClient([f"127.0.0.1:{sport}"], role="datanode", secret=secret, rounds=2)
        trusted = await protocol.establish_trust()  # no root file: learned and proven with the secret
        assert trusted.proven and trusted.roots == h.security.material.current.roots
        dn = NodeCertificateClient(
            store=KeyStore(tmp_path / "dn1" / "dn"), role="datanode",
            details=scm_security_pb2.NodeCertDetailsProto(clusterId=trusted.info.clusterId, uuid="dn-uuid-1",
                                                          hostName="127.0.0.1"),
            protocol=protocol, spec=EC, renew_grace=timedelta(days=28),
            now=lambda: datetime.fromtimestamp(h.clock.wall_ms() / 1000, UTC),
            renew_addresses=[f"127.0.0.1:{cport}"],
        )
        material = await dn.ensure()
        first = material.current.certificate
        assert ids.identity_of(first).role is ids.Role.DATANODE and ids.identity_of(first).owner_id == "dn-uuid-1"
        assert pki.verify_end_entity(first, material.current.chain[1:], material.current.roots, datetime.now(UTC))
        assert not dn.renewal_due() and await dn.renew_if_due() is False
        h.clock.advance(340 * 86400)  # within 28 days of the 365-day certificate's end
        assert dn.renewal_due()
        gen = material.generation
        assert await dn.renew_if_due() is True
        assert material.generation == gen + 1 and dn.renewals == 1
        renewed = material.current.certificate
        assert renewed.subject == first.subject and renewed.serial_number > first.serial_number
        assert KeyStore(tmp_path / "dn1" / "dn").load().certificate == renewed  # kept on disk
        # a second datanode asking with a wrong secret is refused and nothing is stored
        before = len(h.ca.store.list_certificates())
        bad = SecurityProtocolClient([f"127.0.0.1:{sport}"], roots=trusted.roots, role="datanode", secret=b"x" * 32, rounds=1)
        with pytest.raises(SCMException) as info:
            await bad.enroll_node(pki.build_csr(pki.generate_key(EC), ids.datanode_subject("h", "u", trusted.info.clusterId), EC),
                                  scm_security_pb2.NodeCertDetailsProto(clusterId=trusted.info.clusterId, uuid="u", hostName="h"))
        assert info.value.result is ResultCodes.UNAUTHENTICATED
        assert len(h.ca.store.list_certificates()) == before
    finally:
        await client_port.stop(0)
        await security_port.stop(0)


async def test_peer_expiry_is_judged_by_the_scms_clock(harness: Harness) -> None:
    """Every call's certificate check (CallAuthenticator.check_peer) reads the clock the facade keeps, not a
    second, real wall clock: a datanode certificate is refused exactly when that clock passes its notAfter."""
    h = harness
    sub = h.security.material.current
    start = datetime.fromtimestamp(h.clock.wall_ms() / 1000, UTC)
    dn = pki.issue_certificate(ids.datanode_subject("127.0.0.1", "dn-1", h.security.cluster_id),
                               pki.generate_key(EC).public_key(), issuer=sub.certificate, issuer_key=sub.key,
                               serial=1000, now=start, lifetime=timedelta(days=30), profile=pki.Profile.END_ENTITY,
                               spec=EC)
    peer = _Peer(ids.identity_of(dn), ("1000", str(sub.certificate.serial_number)), dn.not_valid_after_utc.timestamp(),
                 (dn, sub.certificate))
    auth = h.security.authenticator
    h.clock.advance((dn.not_valid_after_utc - start).total_seconds() - 1)
    auth.check_peer(peer)  # one second left
    h.clock.advance(1)
    with pytest.raises(Denied, match="certificate serial 1000 of datanode:dn-1 has expired"):
        auth.check_peer(peer)
