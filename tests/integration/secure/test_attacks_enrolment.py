"""Issue 19 (part B), the attacks on enrolment, revocation and renewal, over real sockets against a
secure 3-SCM quorum: every spelling of a serial revokes the one certificate it names and cuts it off
on every port; non-canonical spellings are refused; a live datanode's uuid cannot be taken over; a
proof replayed (as is, later, or with a field changed) is refused; reserved, unspecified and
wildcard host names are refused; an enrolment flood is refused while a legitimate enrolment from
another source succeeds; a 100 MiB anonymous message is refused before it is buffered; parallel
renewals yield one certificate; a revoked certificate's renewals are cut off with it.

The quorum's security ports listen on ``[::]`` so that a second source (``::1``) can enrol while
``127.0.0.1`` floods; the rate limits are lowered so that a few hundred requests exceed them."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
import pytest_asyncio
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from ha.harness import TEST_SETTINGS, cli, start_sim, wait_open_pipeline

from scm_server.local.quorum import HALocalCluster
from scm_server.proto import scm_security_pb2, scm_security_pb2_grpc
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids
from scm_server.security.keystore import Material
from scm_server.security.tls import StaticClientSecurity, make_channel

from .conftest import SecureQuorum
from .enrol_helpers import proof_fields
from .test_attacks import (
    EC,
    SERVICES,
    _admin_ok,
    _cert_count,
    _new_client,
    _now,
    _secret,
    call,
    expect_refused,
)

pytestmark = [pytest.mark.processes, pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]

PER_SOURCE_RATE, PER_SOURCE_BURST = 10, 30
OVERLAP_S = 1.0


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def quorum(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SecureQuorum]:
    base: Path = tmp_path_factory.mktemp("secure-enrol") / "c"
    settings = {
        **TEST_SETTINGS,
        # the gRPC security port (enrolment) and Ozone's Hadoop RPC one (certificate reads), both on every address
        "ozone.scm.security.service.grpc.bind.host": "[::]",
        "ozone.scm.security.service.bind.host": "[::]",
        "ozone.scm.security.enrollment.rate.per.source": str(PER_SOURCE_RATE),
        "ozone.scm.security.enrollment.rate.per.source.burst": str(PER_SOURCE_BURST),
        "ozone.scm.security.enrollment.rate.total": "200",
        "ozone.scm.security.enrollment.rate.total.burst": "400",
        "hdds.x509.renew.overlap.duration": f"{int(OVERLAP_S * 1000)}ms",
    }
    cluster = HALocalCluster(base, 3, settings=settings, secure=True)
    sim = None
    try:
        cluster.start_quorum()
        sim = await start_sim(cluster, 3)
        await cluster.wait_healthy_quorum(timeout=90)
        await wait_open_pipeline(cluster)
        assert cluster.secure is not None
        root = pki.load_certificate(cluster.secure.root_cert.read_bytes())
        yield SecureQuorum(cluster, sim, root, [])
    finally:
        if sim is not None:
            await sim.stop()
        cluster.stop_all()


# ----------------------------------------------------------------------------- helpers


async def _leader(q: SecureQuorum) -> int:
    return await q.cluster.wait_leader(timeout=30)


def _security_channel(q: SecureQuorum, index: int, *, ipv6: bool = False) -> grpc.aio.Channel:
    """TLS to SCM ``index``'s security port (verified against the root), from 127.0.0.1 or from ::1."""
    address = q.cluster.security_addresses[index]
    options: list[tuple[str, Any]] = []
    if ipv6:
        address = f"[::1]:{address.rpartition(':')[2]}"
        options.append(("grpc.ssl_target_name_override", "127.0.0.1"))
    return grpc.aio.secure_channel(address, grpc.ssl_channel_credentials(pki.cert_pem(q.root).encode()), options=options)


async def _on_leader(q: SecureQuorum, probe: Any, *, ipv6: bool = False) -> Any:
    async with _security_channel(q, await _leader(q), ipv6=ipv6) as ch:
        return await probe(scm_security_pb2_grpc.SCMSecurityProtocolServiceStub(ch))


async def _cluster_id(q: SecureQuorum) -> str:
    info = await _on_leader(q, lambda s: s.GetScmInfo(scm_security_pb2.SCMSecurityInfoRequestProto(), timeout=5))
    return str(info.clusterId)


@dataclasses.dataclass
class DnRequest:
    key: pki.PrivateKey
    csr: x509.CertificateSigningRequest
    details: scm_security_pb2.NodeCertDetailsProto

    def proto(self, secret: bytes, **proof: Any) -> scm_security_pb2.SCMGetNodeCertRequestProto:
        return scm_security_pb2.SCMGetNodeCertRequestProto(
            details=self.details, CSR=pki.csr_pem(self.csr), **proof_fields(secret, "datanode", self.csr, self.details, **proof)
        )


def _dn_request(cid: str, host: str, dn_uuid: str | None = None, ip: str = "") -> DnRequest:
    key = pki.generate_key(EC)
    u = dn_uuid or str(uuid.uuid4())
    # the CSR only contributes its key (and O): the leader names the certificate from the details
    csr = pki.build_csr(key, ids.datanode_subject("csr-host", u, cid), EC)
    return DnRequest(key, csr, scm_security_pb2.NodeCertDetailsProto(clusterId=cid, uuid=u, hostName=host, ipAddress=ip))


async def _enrol(q: SecureQuorum, req: scm_security_pb2.SCMGetNodeCertRequestProto, *, ipv6: bool = False) -> Any:
    return await _on_leader(q, lambda s: s.GetDataNodeCertificate(req, timeout=15), ipv6=ipv6)


async def _refused(q: SecureQuorum, req: scm_security_pb2.SCMGetNodeCertRequestProto) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await _enrol(q, req)
    return info.value


async def _wait_cut_off(q: SecureQuorum, security: Any, serial: str, *, services: Any = None) -> None:
    """Every SCM refuses ``security`` on every mutually authenticated service, naming the revoked serial
    (new connections; a revocation applies on every SCM once replicated, so wait with a deadline)."""
    loop = asyncio.get_running_loop()
    for name, (addr, probe) in (services or SERVICES).items():
        for i in range(3):
            deadline = loop.time() + 10
            while True:
                try:
                    await call(addr(q, i), security, probe)
                    detail = "served"
                except grpc.aio.AioRpcError as err:
                    detail = f"{err.code().name} {err.details()}"
                    if err.code() is grpc.StatusCode.UNAUTHENTICATED and "revoked" in (err.details() or ""):
                        assert f"serial {serial}" in detail, detail
                        break
                assert loop.time() < deadline, f"{name} on scm{i + 1} still serves serial {serial}: {detail}"
                await asyncio.sleep(0.05)


async def _member_ok(q: SecureQuorum, security: Any) -> None:
    for name, (addr, probe) in SERVICES.items():
        if name != "datanode":  # the datanode protocol is for datanodes (and admins)
            await call(addr(q, 0), security, probe)


# ----------------------------------------------------------------------------- point 2: revocation


async def _external_client(q: SecureQuorum, user: str) -> StaticClientSecurity:
    """A client certificate issued OUTSIDE SCM (an operator would; here with scm2's sub-CA key, which
    only a test can read): random serial >= 2^63, never recorded by SCM."""
    sub, sub_key = q.sub_ca(1)
    key = pki.generate_key(EC)
    cert = (
        x509.CertificateBuilder().subject_name(ids.client_subject(user).to_name()).issuer_name(sub.subject)
        .public_key(key.public_key()).serial_number((1 << 100) + secrets.randbits(64))
        .not_valid_before(_now() - timedelta(minutes=1)).not_valid_after(_now() + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(sub_key, hashes.SHA256())
    )
    return StaticClientSecurity(Material(key, (cert, sub), (q.root,)))


SPELLINGS = {
    "decimal": lambda n: str(n),
    "hex": lambda n: hex(n),
    "HEX": lambda n: "0X" + format(n, "X"),
    "hex with leading zeros": lambda n: "0x000" + format(n, "x"),
    "openssl colons": lambda n: "0x" + ":".join(f"{b:02x}" for b in n.to_bytes((n.bit_length() + 7) // 8 or 1, "big")),
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
async def test_every_accepted_spelling_revokes_and_cuts_the_certificate_off_everywhere(
    quorum: SecureQuorum, spelling: str
) -> None:
    q = quorum
    for external in (False, True):
        user = f"rev-{spelling.replace(' ', '-')}-{'ext' if external else 'scm'}"
        victim = await _external_client(q, user) if external else await _new_client(q, user)
        serial = victim.material.certificate.serial_number
        await _member_ok(q, victim)
        typed = SPELLINGS[spelling](serial)
        args = ["admin", "cert", "revoke", typed, *(["--external"] if external else [])]
        out = await asyncio.to_thread(cli, q.cluster, *args)
        assert out.returncode == 0, out.stderr
        assert f"Revoked certificate {serial} " in out.stdout, out.stdout  # stored and printed canonically
        await _wait_cut_off(q, victim, str(serial))
    await _admin_ok(q)


async def test_non_canonical_serials_are_refused_with_one_line_and_revoke_nothing(quorum: SecureQuorum) -> None:
    q = quorum
    victim = await _new_client(q, "rev-noncanonical")
    serial = victim.material.certificate.serial_number
    arabic = str(serial).translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))
    for typed in (f"0{serial}", arabic, f"+{serial}", f"{serial}x", f"0x{serial:x}g", "0", " "):
        for extra in ([], ["--external"]):
            out = await asyncio.to_thread(cli, q.cluster, "admin", "cert", "revoke", typed, *extra)
            assert out.returncode != 0, (typed, out.stdout)
            assert "Traceback" not in out.stderr and "0x" in out.stderr, out.stderr
    for args in (["info", f"0{serial}"], ["list", "--start", arabic]):
        out = await asyncio.to_thread(cli, q.cluster, "admin", "cert", *args)
        assert out.returncode != 0 and "Traceback" not in out.stderr and "serial id" in out.stderr, out.stderr
    out = await asyncio.to_thread(cli, q.cluster, "admin", "cert", "info", hex(serial), "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["serialId"] == str(serial), out.stderr
    # the servicer refuses them too (a client that skips the CLI's parsing)
    admin = q.cluster.client_security
    leader_addr = q.cluster.scms[await _leader(q)].client_address
    for typed in (f"0{serial}", arabic, f"{serial}_"):
        err = await expect_refused(
            leader_addr, admin,
            lambda ch, t=typed: scm_security_pb2_grpc.SCMSecurityAdminProtocolServiceStub(ch).RevokeCertificates(
                scm_security_pb2.SCMRevokeCertificatesRequestProto(serialIds=[t], external=True), timeout=10),
            (grpc.StatusCode.INVALID_ARGUMENT,),
        )
        assert f"serial id {typed!r}" in (err.details() or ""), err.details()
    listed = await asyncio.to_thread(cli, q.cluster, "admin", "cert", "list", "--revoked", "--json")
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    revoked = {c["serialId"] for c in data["certificates"]} | {r["serialId"] for r in data["externalRevocations"]}
    assert str(serial) not in revoked and not any(not s.isascii() or s.startswith("0") for s in revoked), revoked
    await _member_ok(q, victim)  # nothing was revoked


# ----------------------------------------------------------------------------- point 3: uuid takeover


async def test_a_live_datanode_uuid_cannot_be_enrolled_again_until_revoked(quorum: SecureQuorum) -> None:
    q = quorum
    cid = await _cluster_id(q)
    secret = _secret(q, "datanode")
    before = await _cert_count(q)
    # a registered, heartbeating datanode of the simulator
    live = q.sim.datanodes[0]
    assert live.certificates is not None
    for host in ("evil-dn", live.hostname):
        err = await _refused(q, _dn_request(cid, host, live.uuid).proto(secret))
        assert err.code() is grpc.StatusCode.PERMISSION_DENIED, err.details()
        assert f"datanode {live.uuid} already holds certificate serial {live.certificates.material.current.serial_id}" in (
            err.details() or "")
        assert "ozone-scm admin cert revoke" in (err.details() or "")
    # a datanode enrolled a moment ago: its uuid is taken
    victim = _dn_request(cid, "victim-dn")
    issued = await _enrol(q, victim.proto(secret))
    err = await _refused(q, _dn_request(cid, "thief-dn", victim.details.uuid).proto(secret))
    assert err.code() is grpc.StatusCode.PERMISSION_DENIED and "already holds" in (err.details() or "")
    assert await _cert_count(q) == before + 1
    # an administrator revokes the old certificate: now the uuid may enrol again
    out = await asyncio.to_thread(cli, q.cluster, "admin", "cert", "revoke", issued.serialId)
    assert out.returncode == 0, out.stderr
    again = await _enrol(q, _dn_request(cid, "victim-dn", victim.details.uuid).proto(secret))
    assert ids.identity_of(pki.load_certificate(again.x509Certificate)).owner_id == victim.details.uuid


async def test_concurrent_enrolments_of_one_uuid_yield_one_certificate(quorum: SecureQuorum) -> None:
    q = quorum
    cid = await _cluster_id(q)
    secret = _secret(q, "datanode")
    u = str(uuid.uuid4())
    requests = [_dn_request(cid, f"racer-{i}", u).proto(secret) for i in range(4)]
    results = await asyncio.gather(*(_enrol(q, r) for r in requests), return_exceptions=True)
    ok = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert len(ok) == 1 and len(refused) == 3, results
    assert all(e.code() is grpc.StatusCode.PERMISSION_DENIED for e in refused)


# ----------------------------------------------------------------------------- point 4: replay


async def test_a_replayed_or_altered_proof_is_refused(quorum: SecureQuorum) -> None:
    q = quorum
    cid = await _cluster_id(q)
    secret = _secret(q, "datanode")
    before = await _cert_count(q)
    good = _dn_request(cid, "replay-dn", ip="10.1.2.3")
    original = good.proto(secret)

    def altered(**details: Any) -> scm_security_pb2.SCMGetNodeCertRequestProto:
        req = scm_security_pb2.SCMGetNodeCertRequestProto()
        req.CopyFrom(original)
        for k, v in details.items():
            if k in ("CSR", "enrollmentTimeMs", "enrollmentNonce"):
                setattr(req, k, v)
            else:
                setattr(req.details, k, v)
        return req

    other_key_csr = pki.build_csr(pki.generate_key(EC), ids.datanode_subject("replay-dn", good.details.uuid, cid), EC)
    changes = {
        "uuid": altered(uuid=str(uuid.uuid4())),
        "host": altered(hostName="other-dn"),
        "ip": altered(ipAddress="10.9.9.9"),
        "key (CSR)": altered(CSR=pki.csr_pem(other_key_csr)),
        "time": altered(enrollmentTimeMs=original.enrollmentTimeMs + 1),
        "nonce": altered(enrollmentNonce=os.urandom(32)),
    }
    for what, req in changes.items():
        err = await _refused(q, req)
        assert err.code() is grpc.StatusCode.UNAUTHENTICATED, f"{what}: {err.code()} {err.details()}"
        assert "does not match" in (err.details() or ""), f"{what}: {err.details()}"
    # the same proof for the OM role (another RPC): refused (no OM secret here, and never the datanode's)
    with pytest.raises(grpc.aio.AioRpcError) as om:
        await _on_leader(q, lambda s: s.GetOMCertificate(original, timeout=10))
    assert om.value.code() is grpc.StatusCode.UNAUTHENTICATED
    # the original is accepted once; sent again (the same bytes), refused
    issued = await _enrol(q, original)
    assert ids.identity_of(pki.load_certificate(issued.x509Certificate)).owner_id == good.details.uuid
    err = await _refused(q, original)
    assert err.code() is grpc.StatusCode.UNAUTHENTICATED and "already used" in (err.details() or ""), err.details()
    # a correctly signed proof made long ago (or far ahead) is refused by its time
    for skew_ms in (-10 * 60_000, 10 * 60_000):
        stale = _dn_request(cid, "stale-dn").proto(secret, time_ms=int(time.time() * 1000) + skew_ms)
        err = await _refused(q, stale)
        assert err.code() is grpc.StatusCode.UNAUTHENTICATED and "clock" in (err.details() or ""), err.details()
    assert await _cert_count(q) == before + 1


# ----------------------------------------------------------------------------- point 5: host names


@pytest.mark.parametrize(
    ("host", "ip", "message"),
    [
        ("0.0.0.0", "", "unspecified"),
        ("::", "", "unspecified"),
        ("dn-x", "0.0.0.0", "unspecified"),
        ("dn-x", "::", "unspecified"),
        ("*.example.com", "", "wildcard"),
        ("*", "", "wildcard"),
        ("scm1.ozone-scm.invalid", "", "reserves for role identities"),
        ("scm.CLUSTER.ozone-scm.invalid.", "", "reserves for role identities"),
    ],
)
async def test_reserved_unspecified_and_wildcard_host_names_are_refused(
    quorum: SecureQuorum, host: str, ip: str, message: str
) -> None:
    q = quorum
    cid = await _cluster_id(q)
    before = await _cert_count(q)
    err = await _refused(q, _dn_request(cid, host, ip=ip).proto(_secret(q, "datanode")))
    assert err.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED), err.details()
    assert message in (err.details() or ""), err.details()
    assert await _cert_count(q) == before


# ----------------------------------------------------------------------------- point 7: renewal


async def _renew(address: str, security: Any) -> Any:
    key = pki.generate_key(EC)
    csr = pki.build_csr(key, pki.SubjectInfo("ignored"), EC)
    async with make_channel(address, security) as ch:
        return await scm_security_pb2_grpc.SCMSecurityAdminProtocolServiceStub(ch).RenewCertificate(
            scm_security_pb2.SCMRenewCertificateRequestProto(CSR=pki.csr_pem(csr)), timeout=15)


async def test_parallel_renewals_yield_one_valid_certificate(quorum: SecureQuorum) -> None:
    q = quorum
    old = await _new_client(q, "renewer")
    old_serial = str(old.material.certificate.serial_number)
    leader_addr = q.cluster.scms[await _leader(q)].client_address
    results = await asyncio.gather(*(_renew(leader_addr, old) for _ in range(5)), return_exceptions=True)
    ok = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert len(ok) == 1 and len(refused) == 4, results
    new_serial = ok[0].serialId
    for err in refused:
        assert err.code() is grpc.StatusCode.PERMISSION_DENIED, err.details()
        assert f"already renewed (its successor is serial {new_serial})" in (err.details() or "")
    # the old certificate stops being accepted once the overlap has passed, on every SCM and port
    await _wait_cut_off(q, old, old_serial)
    with pytest.raises(grpc.aio.AioRpcError):
        await _renew(leader_addr, old)
    info = await asyncio.to_thread(cli, q.cluster, "admin", "cert", "info", old_serial, "--json")
    assert info.returncode == 0 and "superseded" in info.stdout.lower(), info.stdout
    # of the renewer's certificates exactly one is valid: the new one
    listed = await asyncio.to_thread(cli, q.cluster, "admin", "cert", "list", "--type", "client", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = [c for c in json.loads(listed.stdout)["certificates"] if c["ownerId"] == "renewer"]
    assert sorted((c["serialId"], c["status"].split()[0]) for c in rows) == sorted(
        [(old_serial, "REVOKED"), (new_serial, "VALID")]), rows


async def test_a_revoked_certificate_cannot_renew_nor_keep_its_renewals(quorum: SecureQuorum) -> None:
    """Someone who holds a key renews its certificate before the administrator revokes it: revoking the
    original also revokes what was renewed from it, and neither can renew any more."""
    q = quorum
    stolen = await _new_client(q, "stolen")
    original = str(stolen.material.certificate.serial_number)
    leader_addr = q.cluster.scms[await _leader(q)].client_address
    key = pki.generate_key(EC)
    async with make_channel(leader_addr, stolen) as ch:
        renewed = await scm_security_pb2_grpc.SCMSecurityAdminProtocolServiceStub(ch).RenewCertificate(
            scm_security_pb2.SCMRenewCertificateRequestProto(CSR=pki.csr_pem(pki.build_csr(key, pki.SubjectInfo("x"), EC))),
            timeout=15)
    successor = StaticClientSecurity(Material(key, tuple(pki.load_certificates(renewed.x509Certificate)), (q.root,)))
    await _member_ok(q, successor)
    out = await asyncio.to_thread(cli, q.cluster, "admin", "cert", "revoke", original, "--reason", "keyCompromise")
    assert out.returncode == 0, out.stderr
    assert f"Revoked certificate {renewed.serialId} " in out.stdout, out.stdout
    await _wait_cut_off(q, successor, renewed.serialId)
    await _wait_cut_off(q, stolen, original)
    for holder in (stolen, successor):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await _renew(leader_addr, holder)
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED and "revoked" in (info.value.details() or "")
    await _admin_ok(q)


# ----------------------------------------------------------------------------- point 6: bounded work


async def test_an_enrolment_flood_is_refused_while_a_legitimate_enrolment_succeeds(quorum: SecureQuorum) -> None:
    q = quorum
    cid = await _cluster_id(q)
    secret = _secret(q, "datanode")
    before = await _cert_count(q)
    junk = scm_security_pb2.SCMGetNodeCertRequestProto(
        details=scm_security_pb2.NodeCertDetailsProto(clusterId=cid, uuid=str(uuid.uuid4()), hostName="flood"),
        CSR="-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
        enrollmentProof=b"x" * 32, enrollmentTimeMs=1, enrollmentNonce=b"n" * 32,
    )
    codes: dict[str, int] = {}
    first_refusal = asyncio.Event()
    leader = await _leader(q)

    async def flooder(n: int) -> None:
        async with _security_channel(q, leader) as ch:
            stub = scm_security_pb2_grpc.SCMSecurityProtocolServiceStub(ch)
            for _ in range(n):
                try:
                    await stub.GetDataNodeCertificate(junk, timeout=10)
                    codes["OK"] = codes.get("OK", 0) + 1
                except grpc.aio.AioRpcError as err:
                    codes[err.code().name] = codes.get(err.code().name, 0) + 1
                    if err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED:
                        assert "too many enrolment requests from" in (err.details() or ""), err.details()
                        first_refusal.set()

    flood = asyncio.gather(*(flooder(50) for _ in range(6)))  # 300 requests from 127.0.0.1
    try:
        await asyncio.wait_for(first_refusal.wait(), timeout=60)
        # while 127.0.0.1 is refused, a legitimate datanode from another source (::1) enrols
        legit = _dn_request(cid, "legit-dn")
        issued = await _enrol(q, legit.proto(secret), ipv6=True)
        assert ids.identity_of(pki.load_certificate(issued.x509Certificate)).owner_id == legit.details.uuid
        refused_before = codes.get("RESOURCE_EXHAUSTED", 0)
        # and an anonymous certificate lookup by key answers (an index, no parse of every certificate)
        key_sha = pki.public_key_sha256(pki.load_certificate(issued.x509Certificate))
        found = await _on_leader(q, lambda s: s.GetCertificate(
            scm_security_pb2.SCMGetCertificateRequestProto(publicKeySha256=key_sha), timeout=10), ipv6=True)
        assert found.certificate.serialId == issued.serialId
    finally:
        await flood
    assert sum(codes.values()) == 300
    assert codes.get("OK", 0) == 0
    # at most the burst plus what the per-source rate refilled went through to the (refused) proof check
    assert codes.get("RESOURCE_EXHAUSTED", 0) >= 100, codes
    assert refused_before >= 1
    assert await _cert_count(q) == before + 1


async def test_a_100_mib_anonymous_message_is_refused_before_it_is_buffered(quorum: SecureQuorum) -> None:
    q = quorum
    leader = await _leader(q)
    proc = q.cluster.scms[leader].proc
    assert proc is not None

    def rss_kib() -> int:
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    before = rss_kib()
    # an anonymous lookup (not rate-limited) and an enrolment request, 100 MiB each
    lookup = scm_security_pb2.SCMGetCertificateRequestProto(serialId="9" * (100 << 20))
    enrol = scm_security_pb2.SCMGetNodeCertRequestProto(
        details=scm_security_pb2.NodeCertDetailsProto(clusterId="c", uuid="u", hostName="h"),
        CSR="A" * (100 << 20), enrollmentProof=b"x",
    )
    for probe in (lambda s: s.GetCertificate(lookup, timeout=60), lambda s: s.GetDataNodeCertificate(enrol, timeout=60)):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await _on_leader(q, probe)
        assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, info.value.details()
        assert "larger than max" in (info.value.details() or ""), info.value.details()
    after = rss_kib()
    print(f"\nleader RSS {before / 1024:.0f} MiB -> {after / 1024:.0f} MiB after two 100 MiB anonymous requests")
    assert after - before < 20 * 1024, (before, after)  # one buffered copy would be 100 MiB
    # the port still serves
    info2 = await _on_leader(q, lambda s: s.GetScmInfo(scm_security_pb2.SCMSecurityInfoRequestProto(), timeout=5))
    assert info2.clusterId
