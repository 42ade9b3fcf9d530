"""Issue 7's bad input and attacks, against every gRPC service of a running secure quorum, over real
sockets: each gets a clear error, the connection or call is refused, nothing is stored, and the SCMs
keep serving.

Credentials tried on every mutually authenticated port (datanode, block, client/admin, inter-SCM,
Raft): none, self-signed, from another cluster's root, expired (signed by this cluster's sub-CA),
a certificate presented with a key that does not match it, and a revoked one. Certificate requests
on the security port: wrong cluster id, unknown SCM node id, duplicate node id, malformed CSR, a
datanode asking for CA rights, a wrong enrolment secret, a datanode secret used for an SCM. A
non-administrator calling ``safemode exit``, ``scm transfer`` and ``cert revoke``.
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import grpc.aio
import pytest
from cryptography import x509
from ha.harness import cli

from scm_server import call_metadata
from scm_server.proto import (
    raft_pb2,
    raft_pb2_grpc,
    scm_client_pb2,
    scm_client_pb2_grpc,
    scm_datanode_pb2,
    scm_datanode_pb2_grpc,
    scm_ha_pb2,
    scm_ha_pb2_grpc,
    scm_security_pb2,
    scm_security_pb2_grpc,
)
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids
from scm_server.security.keystore import Material
from scm_server.security.tls import StaticClientSecurity, make_channel

from .conftest import SecureQuorum
from .enrol_helpers import proof_fields

pytestmark = [pytest.mark.processes, pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]

Probe = Callable[[grpc.aio.Channel], Awaitable[Any]]

# one read call per mutually authenticated service; the address picker gets (quorum, scm index)
SERVICES: dict[str, tuple[Callable[[SecureQuorum, int], str], Probe]] = {
    "datanode": (
        lambda q, i: q.cluster.scms[i].datanode_address,
        lambda ch: scm_datanode_pb2_grpc.StorageContainerDatanodeProtocolServiceStub(ch).GetVersion(
            scm_datanode_pb2.SCMVersionRequestProto(), timeout=5),
    ),
    "block": (
        lambda q, i: q.cluster.scms[i].block_address,
        lambda ch: scm_client_pb2_grpc.ScmBlockLocationProtocolServiceStub(ch).GetScmInfo(
            scm_client_pb2.GetScmInfoRequestProto(), timeout=5),
    ),
    "client": (
        lambda q, i: q.cluster.scms[i].client_address,
        # a per-SCM read (x-scm-read: local): every SCM answers it itself, followers included
        lambda ch: scm_client_pb2_grpc.StorageContainerLocationProtocolServiceStub(ch).InSafeMode(
            scm_client_pb2.Empty(), timeout=5, metadata=((call_metadata.READ_KEY, call_metadata.READ_LOCAL),)),
    ),
    "cert-admin": (
        lambda q, i: q.cluster.scms[i].client_address,
        lambda ch: scm_security_pb2_grpc.SCMSecurityAdminProtocolServiceStub(ch).ListCertificate(
            scm_security_pb2.SCMListCertificateRequestProto(count=1), timeout=5),
    ),
    "inter-scm": (
        lambda q, i: f"127.0.0.1:{q.cluster.scms[i].grpc_port}",
        lambda ch: scm_ha_pb2_grpc.InterSCMProtocolServiceStub(ch).GetScmInfo(
            scm_ha_pb2.ScmInfoRequestProto(), timeout=5),
    ),
    "raft": (
        lambda q, i: f"127.0.0.1:{q.cluster.scms[i].ratis_port}",
        lambda ch: raft_pb2_grpc.RaftAdminStub(ch).Status(raft_pb2.StatusRequest(), timeout=5),
    ),
}

EC = pki.KeySpec("EC", 256, "SHA256withECDSA")


def _now() -> datetime:
    return datetime.now(UTC)


def _creds(chain: list[x509.Certificate], key: pki.PrivateKey, root: x509.Certificate) -> StaticClientSecurity:
    return StaticClientSecurity(Material(key, tuple(chain), (root,)))


async def call(address: str, security: Any, probe: Probe) -> Any:
    if security is None:
        return await probe(make_channel(address, None))
    if isinstance(security, grpc.ChannelCredentials):
        async with grpc.aio.secure_channel(address, security) as ch:
            return await probe(ch)
    async with make_channel(address, security) as ch:
        return await probe(ch)


async def expect_refused(address: str, security: Any, probe: Probe, codes: tuple[grpc.StatusCode, ...]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call(address, security, probe)
    assert info.value.code() in codes, f"{address}: {info.value.code()} {info.value.details()}"
    return info.value


def _self_signed_admin() -> StaticClientSecurity:
    key = pki.generate_key(EC)
    cert = pki.build_root_ca(key, pki.SubjectInfo("admin"), serial=7, now=_now(), lifetime=timedelta(days=1), spec=EC)
    return StaticClientSecurity(Material(key, (cert,), (cert,)))


def _other_cluster_admin(cluster_id: str) -> StaticClientSecurity:
    """A complete, valid PKI of another cluster (same naming, same cluster id even): its root is not ours."""
    rkey = pki.generate_key(EC)
    root = pki.build_root_ca(rkey, ids.root_ca_subject("127.0.0.1", str(uuid.uuid4()), cluster_id), serial=1,
                             now=_now(), lifetime=timedelta(days=30), spec=EC)
    key = pki.generate_key(EC)
    cert = pki.issue_certificate(ids.client_subject("admin", cluster_id), key.public_key(), issuer=root,
                                 issuer_key=rkey, serial=9, now=_now(), lifetime=timedelta(days=1),
                                 profile=pki.Profile.END_ENTITY, spec=EC)
    return StaticClientSecurity(Material(key, (cert,), (root,)))


def _expired_admin(q: SecureQuorum) -> tuple[list[x509.Certificate], pki.PrivateKey]:
    """A client certificate for "admin" signed with SCM 2's real sub-CA key (as an attacker who stole
    it might), valid for one minute right after the sub-CA's notBefore, so long expired now."""
    from cryptography.hazmat.primitives import hashes

    sub, sub_key = q.sub_ca(1)
    key = pki.generate_key(EC)
    start = sub.not_valid_before_utc + timedelta(seconds=1)
    assert _now() > start + timedelta(minutes=1)
    cert = (
        x509.CertificateBuilder().subject_name(ids.client_subject("admin").to_name()).issuer_name(sub.subject)
        .public_key(key.public_key()).serial_number((1 << 100) + secrets.randbits(64))
        .not_valid_before(start).not_valid_after(start + timedelta(minutes=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(sub_key, hashes.SHA256())
    )
    return [cert, sub], key


async def _admin_ok(q: SecureQuorum) -> None:
    """The SCMs keep serving the legitimate administrator on every service."""
    for addr, probe in SERVICES.values():
        for i in range(3):
            await call(addr(q, i), q.cluster.client_security, probe)


async def _cert_count(q: SecureQuorum) -> int:
    resp = await call(q.cluster.scms[0].client_address, q.cluster.client_security, lambda ch: scm_security_pb2_grpc.
                      SCMSecurityAdminProtocolServiceStub(ch).ListCertificate(scm_security_pb2.SCMListCertificateRequestProto(), timeout=10))
    return len(resp.certificates)


# ----------------------------------------------------------------------------- handshake refusals


@pytest.mark.parametrize("service", sorted(SERVICES))
async def test_peers_without_a_cluster_certificate_are_refused_at_the_handshake(quorum: SecureQuorum, service: str) -> None:
    q = quorum
    addr_of, probe = SERVICES[service]
    root_pem = pki.cert_pem(q.root).encode()
    cluster_id = (await call(q.cluster.scms[0].client_address, q.cluster.client_security,
                             lambda ch: scm_client_pb2_grpc.StorageContainerLocationProtocolServiceStub(ch).GetScmInfo(
                                 scm_client_pb2.GetScmInfoRequestProto(), timeout=5))).clusterId
    expired_chain, expired_key = _expired_admin(q)
    admin = q.cluster.client_security
    assert admin is not None
    wrong_key = StaticClientSecurity(Material(pki.generate_key(pki.KeySpec()), admin.material.chain, admin.material.roots))
    attempts = {
        "no client certificate": grpc.ssl_channel_credentials(root_pem),
        "plaintext": None,
        "self-signed": _self_signed_admin(),
        "another cluster's root": _other_cluster_admin(cluster_id),
        "expired": _creds(expired_chain, expired_key, q.root),
        "key does not match": wrong_key,
    }
    before = await _cert_count(q)
    for what, security in attempts.items():
        for i in range(3):
            try:
                await expect_refused(addr_of(q, i), security, probe, (grpc.StatusCode.UNAVAILABLE,))
            except AssertionError as exc:
                raise AssertionError(f"{service} / {what}: {exc}") from exc
    await _admin_ok(q)
    assert await _cert_count(q) == before  # nothing stored


# ----------------------------------------------------------------------------- revocation


async def _new_client(q: SecureQuorum, user: str) -> StaticClientSecurity:
    """An administrator signs a client certificate for ``user`` (SignCertificate over mutual TLS)."""
    key = pki.generate_key(EC)
    csr = pki.build_csr(key, ids.client_subject(user), EC)
    resp = await call(q.cluster.client_addresses[0], q.cluster.client_security, lambda ch: _on_leader_sign(ch, csr))
    chain = pki.load_certificates(resp.x509Certificate)
    return StaticClientSecurity(Material(key, tuple(chain), (q.root,)))


async def _on_leader_sign(ch: grpc.aio.Channel, csr: x509.CertificateSigningRequest) -> Any:
    return await scm_security_pb2_grpc.SCMSecurityAdminProtocolServiceStub(ch).SignCertificate(
        scm_security_pb2.SCMSignCertificateRequestProto(CSR=pki.csr_pem(csr)), timeout=10)


async def _leader_client_address(q: SecureQuorum) -> str:
    leader = await q.cluster.wait_leader(timeout=30)
    return q.cluster.scms[leader].client_address


async def test_revoked_certificate_is_refused_by_every_scm_on_every_service(quorum: SecureQuorum) -> None:
    q = quorum
    leader_addr = await _leader_client_address(q)
    admin = q.cluster.client_security
    key = pki.generate_key(EC)
    csr = pki.build_csr(key, ids.client_subject("mallory"), EC)
    signed = await call(leader_addr, admin, lambda ch: _on_leader_sign(ch, csr))
    mallory = StaticClientSecurity(Material(key, tuple(pki.load_certificates(signed.x509Certificate)), (q.root,)))
    # mallory is a member: reads work everywhere (and her channel stays open across the revocation)
    channels = {name: [make_channel(addr(q, i), mallory) for i in range(3)] for name, (addr, _) in SERVICES.items()}
    try:
        for name, (_, probe) in SERVICES.items():
            if name in ("datanode",):
                continue  # the datanode protocol is for datanodes (and admins)
            for ch in channels[name]:
                await probe(ch)
        out = cli(q.cluster, "admin", "cert", "revoke", signed.serialId, "--reason", "keyCompromise")
        assert out.returncode == 0, out.stderr
        assert f"Revoked certificate {signed.serialId} (keyCompromise)" in out.stdout
        # existing connections and new ones, every SCM, every service: refused within a heartbeat
        for name, (addr, probe) in SERVICES.items():
            for i, ch in enumerate(channels[name]):
                async def refused(ch: grpc.aio.Channel = ch, probe: Probe = probe) -> bool:
                    try:
                        await probe(ch)
                    except grpc.aio.AioRpcError as e:
                        return e.code() == grpc.StatusCode.UNAUTHENTICATED and "revoked" in (e.details() or "")
                    return False

                deadline = asyncio.get_running_loop().time() + 5
                while not await refused():
                    assert asyncio.get_running_loop().time() < deadline, f"{name} on scm{i + 1} still serves a revoked cert"
                    await asyncio.sleep(0.05)
                err = await expect_refused(addr(q, i), mallory, probe, (grpc.StatusCode.UNAUTHENTICATED,))
                assert f"certificate serial {signed.serialId}" in (err.details() or "")
    finally:
        for chs in channels.values():
            for ch in chs:
                await ch.close()
    await _admin_ok(q)
    listed = cli(q.cluster, "admin", "cert", "list", "--revoked", "--json")
    assert listed.returncode == 0 and signed.serialId in listed.stdout


async def test_revoked_datanode_is_cut_off_within_a_heartbeat(quorum: SecureQuorum) -> None:
    q = quorum
    dn = q.sim.add_datanode()
    dn.start()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while sum(ep.heartbeats for ep in dn.endpoints) < 6:
        assert loop.time() < deadline, [ep.last_error for ep in dn.endpoints]
        await asyncio.sleep(0.1)
    assert dn.certificates is not None
    serial = dn.certificates.material.current.serial_id
    out = cli(q.cluster, "admin", "cert", "revoke", serial)
    assert out.returncode == 0, out.stderr
    revoked_at = loop.time()
    while not all("revoked" in ep.last_error for ep in dn.endpoints):
        assert loop.time() - revoked_at < 5, [ep.last_error for ep in dn.endpoints]
        await asyncio.sleep(0.05)
    print(f"\nrevoked datanode refused by every SCM {loop.time() - revoked_at:.2f}s after the revoke "
          f"(heartbeat interval {q.sim.heartbeat_interval}s)")
    counts = [ep.heartbeats for ep in dn.endpoints]
    await asyncio.sleep(3 * q.sim.heartbeat_interval)
    assert [ep.heartbeats for ep in dn.endpoints] == counts  # no heartbeat got through since
    await dn.stop()
    await _admin_ok(q)


async def test_datanode_can_only_report_as_itself(quorum: SecureQuorum) -> None:
    q = quorum
    a, b = q.sim.datanodes[0], q.sim.datanodes[1]
    assert a.certificates is not None
    req = scm_datanode_pb2.SCMHeartbeatRequestProto(datanodeDetails=b.details())
    err = await expect_refused(
        q.cluster.scms[0].datanode_address, a.certificates.material,
        lambda ch: scm_datanode_pb2_grpc.StorageContainerDatanodeProtocolServiceStub(ch).SendHeartbeat(req, timeout=5),
        (grpc.StatusCode.PERMISSION_DENIED,),
    )
    assert "cannot report as datanode" in (err.details() or "")
    # and a datanode is not an administrator nor a block client
    await expect_refused(
        q.cluster.scms[0].client_address, a.certificates.material,
        lambda ch: scm_client_pb2_grpc.StorageContainerLocationProtocolServiceStub(ch).ForceExitSafeMode(
            scm_client_pb2.Empty(), timeout=5),
        (grpc.StatusCode.PERMISSION_DENIED,),
    )
    await expect_refused(
        q.cluster.scms[0].block_address, a.certificates.material,
        lambda ch: scm_client_pb2_grpc.ScmBlockLocationProtocolServiceStub(ch).AllocateScmBlock(
            scm_client_pb2.AllocateScmBlockRequestProto(size=1, numBlocks=1, type=1, factor=3, owner="x"), timeout=5),
        (grpc.StatusCode.PERMISSION_DENIED,),
    )


# ----------------------------------------------------------------------------- non-administrators


async def test_non_admin_cannot_exit_safemode_transfer_or_revoke(quorum: SecureQuorum, tmp_path: Any) -> None:
    q = quorum
    bob = await _new_client(q, "bob")
    for i in range(3):
        err = await expect_refused(
            q.cluster.scms[i].client_address, bob,
            lambda ch: scm_client_pb2_grpc.StorageContainerLocationProtocolServiceStub(ch).ForceExitSafeMode(
                scm_client_pb2.Empty(), timeout=5),
            (grpc.StatusCode.PERMISSION_DENIED,),
        )
        assert "Access denied for bob" in (err.details() or "") and "ozone.administrators" in (err.details() or "")
        await expect_refused(
            f"127.0.0.1:{q.cluster.scms[i].grpc_port}", bob,
            lambda ch: scm_ha_pb2_grpc.InterSCMProtocolServiceStub(ch).TransferLeadership(
                scm_ha_pb2.TransferLeadershipRequestProto(newLeaderId=""), timeout=5),
            (grpc.StatusCode.PERMISSION_DENIED,),
        )
        await expect_refused(
            q.cluster.scms[i].client_address, bob,
            lambda ch: scm_security_pb2_grpc.SCMSecurityAdminProtocolServiceStub(ch).RevokeCertificates(
                scm_security_pb2.SCMRevokeCertificatesRequestProto(serialIds=["2"]), timeout=5),
            (grpc.StatusCode.PERMISSION_DENIED,),
        )
        # reads are fine for any member
        await call(q.cluster.scms[i].client_address, bob, SERVICES["client"][1])
    # the same through the CLI, with bob's client configuration: one clear line, no traceback
    conf = tmp_path / "bob"
    conf.mkdir()
    (conf / "bob.crt").write_text(pki.certs_pem(bob.material.chain))
    (conf / "bob.key").write_bytes(bob.material.key_pem())
    site = (q.cluster.secure.admin_conf_dir / "ozone-site.xml").read_text()  # type: ignore[union-attr]
    site = site.replace(str(q.cluster.secure.admin_cert), str(conf / "bob.crt")).replace(  # type: ignore[union-attr]
        str(q.cluster.secure.admin_key), str(conf / "bob.key"))  # type: ignore[union-attr]
    (conf / "ozone-site.xml").write_text(site)
    for args in (["admin", "safemode", "exit"], ["admin", "scm", "transfer", "-r"], ["admin", "cert", "revoke", "2"]):
        out = _cli_with(q, conf, *args)
        assert out.returncode != 0
        assert "Access denied for bob" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
    # the admin still can: exit safemode (idempotent here) and list
    assert cli(q.cluster, "admin", "safemode", "exit").returncode == 0


def _cli_with(q: SecureQuorum, conf: Any, *args: str) -> Any:
    import subprocess

    return subprocess.run([q.cluster.python, "-m", "scm_server.cli.main", "--conf", str(conf), *args],
                          capture_output=True, text=True, timeout=60, env=q.cluster._env())


# ----------------------------------------------------------------------------- certificate requests


def _secret(q: SecureQuorum, role: str) -> bytes:
    return q.cluster.secure.secret_file(role).read_text().strip().encode()  # type: ignore[union-attr]


async def _security_call(q: SecureQuorum, probe: Probe) -> Any:
    """On the leader's security port (TLS verified against the root, no client certificate)."""
    leader = await q.cluster.wait_leader(timeout=30)
    addr = q.cluster.security_addresses[leader]
    async with grpc.aio.secure_channel(addr, grpc.ssl_channel_credentials(pki.cert_pem(q.root).encode())) as ch:
        return await probe(scm_security_pb2_grpc.SCMSecurityProtocolServiceStub(ch))  # type: ignore[arg-type]


def _proof(secret: bytes, role: str, csr: x509.CertificateSigningRequest, details: Any) -> dict[str, Any]:
    return proof_fields(secret, role, csr, details)


async def test_certificate_requests_that_must_be_refused(quorum: SecureQuorum) -> None:
    q = quorum
    info = await _security_call(q, lambda s: s.GetScmInfo(scm_security_pb2.SCMSecurityInfoRequestProto(), timeout=5))
    cid = info.clusterId
    scm_secret, dn_secret = _secret(q, "scm"), _secret(q, "datanode")
    before = await _cert_count(q)

    def scm_request(node_id: str, cluster: str, host: str = "127.0.0.1", secret: bytes = scm_secret, role: str = "scm",
                    csr_cluster: str | None = None, csr_pem: str | None = None) -> scm_security_pb2.SCMGetSCMCertRequestProto:
        scm_id = str(uuid.uuid4())
        csr = pki.build_csr(pki.generate_key(EC), ids.scm_subject(host, scm_id, csr_cluster or cluster), EC, request_ca=True)
        details = scm_security_pb2.ScmNodeDetailsProto(clusterId=cluster, hostName=host, scmNodeId=node_id, scmId=scm_id)
        return scm_security_pb2.SCMGetSCMCertRequestProto(
            scmDetails=details, CSR=csr_pem or pki.csr_pem(csr), **_proof(secret, role, csr, details),
        )

    cases: list[tuple[str, Any, grpc.StatusCode, str]] = [
        ("wrong cluster id", lambda s: s.GetSCMCertificate(scm_request("scm2", "CID-" + str(uuid.uuid4())), timeout=10),
         grpc.StatusCode.PERMISSION_DENIED, "ClusterId mismatch"),
        ("unknown SCM node id", lambda s: s.GetSCMCertificate(scm_request("scm9", cid), timeout=10),
         grpc.StatusCode.PERMISSION_DENIED, "not a configured SCM"),
        ("duplicate node id", lambda s: s.GetSCMCertificate(scm_request("scm2", cid), timeout=10),
         grpc.StatusCode.PERMISSION_DENIED, "already holds certificate"),
        ("wrong enrolment secret", lambda s: s.GetSCMCertificate(scm_request("scm2", cid, secret=b"x" * 32), timeout=10),
         grpc.StatusCode.UNAUTHENTICATED, "enrolment proof does not match"),
        ("datanode secret for an SCM", lambda s: s.GetSCMCertificate(scm_request("scm2", cid, secret=dn_secret, role="datanode"),
                                                                     timeout=10),
         grpc.StatusCode.UNAUTHENTICATED, "enrolment proof does not match"),
        ("malformed CSR", lambda s: s.GetSCMCertificate(scm_request("scm2", cid, csr_pem="-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"),
                                                        timeout=10),
         grpc.StatusCode.INVALID_ARGUMENT, "malformed CSR"),
    ]
    dn_key = pki.generate_key(EC)
    ca_csr = pki.build_csr(dn_key, ids.datanode_subject("evil-dn", "u-evil", cid), EC, request_ca=True)
    evil = scm_security_pb2.NodeCertDetailsProto(clusterId=cid, uuid="u-evil", hostName="evil-dn")
    cases.append((
        "datanode asking for CA rights",
        lambda s: s.GetDataNodeCertificate(scm_security_pb2.SCMGetNodeCertRequestProto(
            details=evil, CSR=pki.csr_pem(ca_csr), **_proof(dn_secret, "datanode", ca_csr, evil)), timeout=10),
        grpc.StatusCode.PERMISSION_DENIED, "may not ask for CA rights",
    ))
    admin_csr = pki.build_csr(dn_key, pki.SubjectInfo("admin", "", cid), EC)
    for what, probe, code, message in cases:
        with pytest.raises(grpc.aio.AioRpcError) as info_:
            await _security_call(q, probe)
        err = info_.value
        assert err.code() == code, f"{what}: {err.code()} {err.details()}"
        assert message in (err.details() or ""), f"{what}: {err.details()}"
    # a datanode asking for CN=admin gets a datanode certificate named after its host, never an admin
    sneaky = scm_security_pb2.NodeCertDetailsProto(clusterId=cid, uuid="u-sneaky", hostName="sneaky-dn")
    resp = await _security_call(q, lambda s: s.GetDataNodeCertificate(scm_security_pb2.SCMGetNodeCertRequestProto(
        details=sneaky, CSR=pki.csr_pem(admin_csr), **_proof(dn_secret, "datanode", admin_csr, sneaky)), timeout=10))
    cert = pki.load_certificate(resp.x509Certificate)
    assert ids.identity_of(cert).role is ids.Role.DATANODE and ids.identity_of(cert).common_name == "dn@sneaky-dn"
    assert not pki.is_ca(cert)
    assert await _cert_count(q) == before + 1  # only that one was stored
    await _admin_ok(q)


async def test_web_page_and_prom_over_https(quorum: SecureQuorum) -> None:
    """ozone.http.policy=HTTP_AND_HTTPS: the same pages over TLS with the SCM's certificate; /logLevel only for the
    administrator's client certificate."""
    import ssl
    import urllib.error
    import urllib.request

    ctx = ssl.create_default_context(cadata=pki.cert_pem(quorum.root))
    for port in quorum.https_ports:
        url = f"https://127.0.0.1:{port}"
        with urllib.request.urlopen(url + "/prom", timeout=10, context=ctx) as resp:
            assert resp.status == 200 and b"scm_is_leader" in resp.read()
        with urllib.request.urlopen(url + "/", timeout=10, context=ctx) as resp:
            assert resp.status == 200
    plain = ssl.create_default_context()  # without the cluster's root the certificate is not trusted
    with pytest.raises(OSError):
        urllib.request.urlopen(f"https://127.0.0.1:{quorum.https_ports[0]}/prom", timeout=10, context=plain)
    # /logLevel: administrators only, by their client certificate (the HTTPS port asks for one, needs none)
    level_url = f"https://127.0.0.1:{quorum.https_ports[0]}/logLevel?log=scm_server.web.tls.check&level=DEBUG"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(level_url, timeout=10, context=ctx)
    assert refused.value.code == 403 and b"ozone.administrators" in refused.value.read()
    secure = quorum.cluster.secure
    assert secure is not None
    admin_ctx = ssl.create_default_context(cadata=pki.cert_pem(quorum.root))
    admin_ctx.load_cert_chain(str(secure.admin_cert), str(secure.admin_key))
    with urllib.request.urlopen(level_url, timeout=10, context=admin_ctx) as resp:
        assert resp.status == 200 and b"Effective Level: <b>DEBUG</b>" in resp.read()


# ----------------------------------------------------------------------------- the audit export (issue 8)


async def test_audit_export_over_mutual_tls_is_for_administrators_only(quorum: SecureQuorum, tmp_path: Any) -> None:
    """The replication audit's export works on a secure cluster with the admin's certificate (every
    SCM at one barrier), and is refused to a member who is not an administrator and to plaintext."""
    import json

    from scm_server.proto import scm_audit_pb2, scm_audit_pb2_grpc

    q = quorum
    out = tmp_path / "export"
    done = await asyncio.to_thread(cli, q.cluster, "admin", "audit", "export", "--all-scms", "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert sorted(r["node_id"] for r in results) == ["scm1", "scm2", "scm3"]
    assert {r["consistency"] for r in results} == {"barrier"} and len({r["applied_index"] for r in results}) == 1
    # the quorum's 3 simulated datanodes, plus those earlier tests of this module enrolled on the shared quorum
    assert all(r["rows"]["datanodes"] >= 3 for r in results), [r["rows"] for r in results]
    assert len({r["rows"]["containers"] for r in results}) == 1, [r["rows"] for r in results]
    assert all((out / r["node_id"] / "manifest.json").is_file() for r in results)

    bob = await _new_client(q, "bob")
    async def barrier(ch: grpc.aio.Channel) -> Any:
        return await scm_audit_pb2_grpc.SCMAuditProtocolServiceStub(ch).CreateAuditBarrier(
            scm_audit_pb2.AuditBarrierRequestProto(ttlSeconds=5), timeout=5)

    async def first_chunk(ch: grpc.aio.Channel) -> Any:
        async for chunk in scm_audit_pb2_grpc.SCMAuditProtocolServiceStub(ch).ExportSnapshot(
                scm_audit_pb2.AuditExportRequestProto(pageSize=10), timeout=5):
            return chunk
        return None

    for i in range(3):
        address = q.cluster.scms[i].client_address
        for probe in (barrier, first_chunk):
            err = await expect_refused(address, bob, probe, (grpc.StatusCode.PERMISSION_DENIED,))
            assert "Access denied for bob" in (err.details() or "")
            await expect_refused(address, None, probe, (grpc.StatusCode.UNAVAILABLE,))
