"""Issue 19, "a certificate proves a role": attacks with what a compromised datanode or SCM holds, over
real sockets against the shared secure quorum (conftest.py) and a fake SCM on loopback.

* A datanode certificate naming 127.0.0.1 — exactly what the CA issues for a datanode that asks for that
  host — serves a fake SCM: every client of an SCM port (admin/client, certificate admin, block,
  datanode, inter-SCM, Raft peer and admin, the security port) refuses it at the handshake, because it
  verifies the SCM role name only the CA writes into SCM certificates. The same fake serving an SCM's
  certificate is accepted (the harness can tell the difference).
* An SCM's certificate sending Raft messages (RequestVote, Deliver, TimeoutNow, InstallSnapshot) or an
  AddSCM as another member is refused; as itself it is accepted.
* Point 10: a TimeoutNow for an unknown node, a Raft message of a type peers never send, and malformed
  frames to GetTableDigests and RaftAdmin.Status answer NOT_FOUND / INVALID_ARGUMENT without a server
  traceback.
* ``local up --secure`` serves the page and /prom over HTTPS (not plain HTTP), and ``local restart``
  waits on the HTTPS health URL the member's configuration serves.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from cryptography import x509

from scm_server.client.errors import SCMUnavailableError
from scm_server.client.ha_admin import HAAdminClient
from scm_server.client.scm_client import SCMClient, SCMClientConfig
from scm_server.proto import (
    raft_pb2,
    raft_pb2_grpc,
    scm_client_pb2,
    scm_client_pb2_grpc,
    scm_ha_pb2,
    scm_ha_pb2_grpc,
)
from scm_server.raft import transport as raft_transport
from scm_server.raft.core.types import MessageType
from scm_server.security.cert_client import SecurityProtocolClient
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids
from scm_server.security.keystore import Material
from scm_server.security.tls import (
    CallAuthenticator,
    ReloadableMaterial,
    SCMTransportSecurity,
    StaticClientSecurity,
    make_channel,
)

from .conftest import SecureQuorum
from .test_attacks import EC, SERVICES, expect_refused

pytestmark = [pytest.mark.processes, pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]


def _now() -> datetime:
    return datetime.now(UTC)


def _datanode_certificate(q: SecureQuorum) -> tuple[list[x509.Certificate], pki.PrivateKey]:
    """A datanode certificate for host and IP 127.0.0.1, built by the CA's own subject rules and signed with
    SCM 1's real sub-CA key: what the leader issues a datanode (or anyone with the datanode secret) asking
    for that host."""
    sub, sub_key = q.sub_ca(0)
    cluster = ids.identity_of(sub).cluster_id
    key = pki.generate_key(EC)
    cert = pki.issue_certificate(
        ids.datanode_subject("127.0.0.1", str(uuid.uuid4()), cluster, "127.0.0.1"), key.public_key(), issuer=sub,
        issuer_key=sub_key, serial=(1 << 100) + uuid.uuid4().int % (1 << 60), now=_now(),
        lifetime=timedelta(hours=1), profile=pki.Profile.END_ENTITY, spec=EC,
    )
    return [cert, sub], key


class _FakeSCM:
    """A TLS server on loopback answering every method with an empty message, with the given identity."""

    def __init__(self, chain: list[x509.Certificate], key: pki.PrivateKey) -> None:
        self.chain, self.key = chain, key
        self.server: grpc.aio.Server | None = None
        self.address = ""
        self.calls = 0

    async def __aenter__(self) -> _FakeSCM:
        fake = self

        class AnyMethod(grpc.GenericRpcHandler):
            def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
                async def answer(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
                    fake.calls += 1
                    return b""

                return grpc.unary_unary_rpc_method_handler(answer)

        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers((AnyMethod(),))
        creds = grpc.ssl_server_credentials([(pki.private_key_pem(self.key), pki.certs_pem(self.chain).encode())])
        port = self.server.add_secure_port("127.0.0.1:0", creds)
        self.address = f"127.0.0.1:{port}"
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        await self.server.stop(None)


def _scm_transport(q: SecureQuorum, index: int) -> SCMTransportSecurity:
    sub, key = q.sub_ca(index)
    material = ReloadableMaterial(Material(key, (sub,), (q.root,)))
    auth = CallAuthenticator(cluster_id=lambda: None, is_revoked=lambda _s: False, administrators=())
    return SCMTransportSecurity(material, auth)


def _clients(q: SecureQuorum) -> dict[str, Callable[[str], Awaitable[Any]]]:
    """Every client of an SCM port, each as ``call(address)`` through the factory that client uses."""
    admin = q.cluster.client_security
    dn = q.sim.datanodes[0].certificates
    assert admin is not None and dn is not None

    def via(security: Any, probe: Callable[[grpc.aio.Channel], Awaitable[Any]]) -> Callable[[str], Awaitable[Any]]:
        async def call(address: str) -> Any:
            async with make_channel(address, security) as ch:
                return await probe(ch)

        return call

    out: dict[str, Callable[[str], Awaitable[Any]]] = {
        f"{name} (admin)": via(admin, probe) for name, (_addr, probe) in SERVICES.items()
    }
    out["datanode (the datanode's own client)"] = via(dn.material, SERVICES["datanode"][1])
    out["inter-scm (an SCM's channel)"] = via(q.cluster.client_security, SERVICES["inter-scm"][1])

    async def raft_peer(address: str) -> Any:
        async with raft_transport.make_channel(address, _scm_transport(q, 1)) as ch:
            return await raft_pb2_grpc.RaftPeerStub(ch).RequestVote(raft_pb2.MessageProto(type=3, term=0), timeout=5)

    out["raft peer (an SCM's Raft transport)"] = raft_peer

    async def security_port(address: str) -> Any:
        client = SecurityProtocolClient([address], roots=[q.root], rounds=1, rpc_timeout=5)
        return await client.scm_info(address)

    out["security port (enrolment client)"] = security_port

    async def ha_admin(address: str) -> Any:
        # as the operator called SCMs by Pod IP before: a host-name override from the caller is replaced
        async with HAAdminClient([address], rounds=1, timeout=5, security=admin,
                                 channel_options=[("grpc.ssl_target_name_override", "127.0.0.1")]) as c:
            return await c.scm_info()

    out["HAAdminClient (admin CLI, operator probes)"] = ha_admin

    async def scm_client(address: str) -> Any:
        config = SCMClientConfig(max_retries=0, retry_interval=0.1, rpc_timeout=5)
        async with SCMClient([address], config, security=admin, local_read=True) as c:
            return await c.in_safe_mode()

    out["SCMClient (admin CLI)"] = scm_client
    return out


async def test_a_datanode_certificate_posing_as_an_scm_is_refused_by_every_scm_client(quorum: SecureQuorum) -> None:
    q = quorum
    dn_chain, dn_key = _datanode_certificate(q)
    assert ids.identity_of(dn_chain[0]).role is ids.Role.DATANODE and not ids.reserved_names_of(dn_chain[0])
    clients = _clients(q)
    # the harness can tell: the same fake serving an SCM's certificate is accepted by every client
    sub, sub_key = q.sub_ca(1)
    async with _FakeSCM([sub], sub_key) as real:
        for call in clients.values():
            await call(real.address)
        assert real.calls == len(clients)
    async with _FakeSCM(dn_chain, dn_key) as fake:
        for name, call in clients.items():
            with pytest.raises(Exception) as info:
                await call(fake.address)
            err = info.value
            if isinstance(err, grpc.aio.AioRpcError):
                assert err.code() is grpc.StatusCode.UNAVAILABLE, f"{name}: {err.code()} {err.details()}"
            else:
                assert isinstance(err, SCMUnavailableError), f"{name}: {err!r}"
                assert f"does not carry the SCM role name {ids.SCM_ROLE_NAME}" in str(err)
            assert fake.calls == 0, f"{name} sent a request to the datanode posing as an SCM"


# ----------------------------------------------------------------------------- Raft senders


def _peer_id(q: SecureQuorum, index: int) -> str:
    return ids.identity_of(q.sub_ca(index)[0]).owner_id


def _as_scm(q: SecureQuorum, index: int) -> StaticClientSecurity:
    sub, key = q.sub_ca(index)
    return StaticClientSecurity(Material(key, (sub,), (q.root,)))


def _vote(frm: str, to: str, **kw: Any) -> raft_pb2.MessageProto:
    p = raft_pb2.MessageProto(type=int(MessageType.VOTE), to=to, term=0, **kw)
    setattr(p, "from", frm)
    return p


async def test_raft_and_inter_scm_senders_must_be_the_certificates_own_node(quorum: SecureQuorum) -> None:
    q = quorum
    scm1, scm2, scm3 = (_peer_id(q, i) for i in range(3))
    target = f"127.0.0.1:{q.cluster.scms[0].ratis_port}"
    as_scm2 = _as_scm(q, 1)

    def request_vote(frm: str) -> Callable[[grpc.aio.Channel], Awaitable[Any]]:
        return lambda ch: raft_pb2_grpc.RaftPeerStub(ch).RequestVote(_vote(frm, scm1), timeout=5)

    # as itself: accepted (a term-0 vote is ignored by the core)
    async with make_channel(target, as_scm2) as ch:
        await request_vote(scm2)(ch)
    err = await expect_refused(target, as_scm2, request_vote(scm3), (grpc.StatusCode.PERMISSION_DENIED,))
    assert scm3 in (err.details() or "") and scm2 in (err.details() or "")
    # an id that is no member's: a current member's certificate may not invent one either
    await expect_refused(target, as_scm2, request_vote("not-a-member"), (grpc.StatusCode.PERMISSION_DENIED,))

    async def deliver_as(frm: str) -> Callable[[grpc.aio.Channel], Awaitable[Any]]:
        async def batches() -> AsyncIterator[raft_pb2.MessageBatch]:
            m = raft_pb2.MessageProto(type=int(MessageType.HEARTBEAT_RESP), to=scm1, term=0)
            setattr(m, "from", frm)
            yield raft_pb2.MessageBatch(messages=[m])

        return lambda ch: raft_pb2_grpc.RaftPeerStub(ch).Deliver(batches(), timeout=5)

    await expect_refused(target, as_scm2, await deliver_as(scm3), (grpc.StatusCode.PERMISSION_DENIED,))

    timeout_now = raft_pb2.MessageProto(type=int(MessageType.TIMEOUT_NOW), to=scm1, term=0)
    setattr(timeout_now, "from", scm3)
    await expect_refused(target, as_scm2, lambda ch: raft_pb2_grpc.RaftPeerStub(ch).TimeoutNow(timeout_now, timeout=5),
                         (grpc.StatusCode.PERMISSION_DENIED,))

    async def snapshot() -> AsyncIterator[raft_pb2.SnapshotChunk]:
        m = raft_pb2.MessageProto(type=int(MessageType.SNAPSHOT), to=scm1, term=0)
        setattr(m, "from", scm3)
        yield raft_pb2.SnapshotChunk(message=m, done=True)

    await expect_refused(target, as_scm2, lambda ch: raft_pb2_grpc.RaftPeerStub(ch).InstallSnapshot(snapshot(), timeout=5),
                         (grpc.StatusCode.PERMISSION_DENIED,))

    # inter-SCM: an SCM adds only itself
    cluster = ids.identity_of(q.sub_ca(0)[0]).cluster_id
    add = scm_ha_pb2.AddScmRequestProto(clusterId=cluster, scmId=str(uuid.uuid4()), ratisAddr="127.0.0.1:1",
                                        nodeId="scm9")
    err = await expect_refused(
        f"127.0.0.1:{q.cluster.scms[0].grpc_port}", as_scm2,
        lambda ch: scm_ha_pb2_grpc.InterSCMProtocolServiceStub(ch).AddSCM(add, timeout=10),
        (grpc.StatusCode.PERMISSION_DENIED,),
    )
    assert "only its own SCM" in (err.details() or "")
    # the ring is untouched and still serves
    roles = await q.cluster.roles()
    assert len(roles.peers) == 3


# ----------------------------------------------------------------------------- point 10


def _tracebacks(q: SecureQuorum) -> int:
    return sum(s.log_path.read_text(errors="replace").count("Traceback") for s in q.cluster.scms)


async def test_bad_raft_and_digest_frames_get_clear_errors_and_no_server_traceback(quorum: SecureQuorum) -> None:
    q = quorum
    scm1, scm2 = _peer_id(q, 0), _peer_id(q, 1)
    raft = f"127.0.0.1:{q.cluster.scms[0].ratis_port}"
    inter = f"127.0.0.1:{q.cluster.scms[0].grpc_port}"
    before = _tracebacks(q)
    as_scm2 = _as_scm(q, 1)

    unknown = raft_pb2.MessageProto(type=int(MessageType.TIMEOUT_NOW), to="no-such-node", term=0)
    setattr(unknown, "from", scm2)
    err = await expect_refused(raft, as_scm2, lambda ch: raft_pb2_grpc.RaftPeerStub(ch).TimeoutNow(unknown, timeout=5),
                               (grpc.StatusCode.NOT_FOUND,))
    assert "no-such-node" in (err.details() or "")
    for bad_type in (99, int(MessageType.UNREACHABLE)):
        odd = raft_pb2.MessageProto(type=bad_type, to=scm1, term=0)
        setattr(odd, "from", scm2)
        await expect_refused(raft, as_scm2, lambda ch, m=odd: raft_pb2_grpc.RaftPeerStub(ch).TimeoutNow(m, timeout=5),
                             (grpc.StatusCode.INVALID_ARGUMENT,))

    garbage = b"\xff\xff\xff\xff\x0f"
    for address, method in ((inter, "/hadoop.hdds.scm.ha.InterSCMProtocolService/GetTableDigests"),
                            (raft, "/scm.raft.RaftAdmin/Status"),
                            (raft, "/scm.raft.RaftPeer/RequestVote")):
        async with make_channel(address, q.cluster.client_security if "RaftPeer" not in method else as_scm2) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await ch.unary_unary(method)(garbage, timeout=5)
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT, f"{method}: {info.value.code()} {info.value.details()}"
        assert "malformed" in (info.value.details() or "")
    # the well-formed calls still work
    async with make_channel(raft, q.cluster.client_security) as ch:
        status = await raft_pb2_grpc.RaftAdminStub(ch).Status(raft_pb2.StatusRequest(), timeout=5)
    assert status.term > 0
    async with make_channel(q.cluster.scms[0].client_address, q.cluster.client_security) as ch:
        await scm_client_pb2_grpc.StorageContainerLocationProtocolServiceStub(ch).InSafeMode(scm_client_pb2.Empty(), timeout=5)
    assert _tracebacks(q) == before


# ----------------------------------------------------------------------------- HTTPS by default (local up)


def _ozone(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scm_server.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.timeout(400)
async def test_local_up_secure_serves_https_and_restart_follows_the_policy(tmp_path: Path) -> None:
    data = tmp_path / "D"
    try:
        up = await asyncio.to_thread(_ozone, "local", "up", "--secure", "--datanodes", "1", "--data-dir", str(data))
        assert up.returncode == 0, up.stderr + up.stdout
        state = json.loads((data / "cluster.json").read_text())
        ca = ssl.create_default_context(cafile=str(data / "admin" / "ca.crt"))
        for s in state["scms"]:
            url = s["http"]
            assert url.startswith("https://"), url
            with urllib.request.urlopen(url + "/prom", timeout=10, context=ca) as resp:
                assert resp.status == 200 and b"scm_" in resp.read()
            plain = "http://" + url.removeprefix("https://")
            with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
                urllib.request.urlopen(plain + "/health", timeout=5)
        restart = await asyncio.to_thread(_ozone, "local", "restart", "--scm", "scm2", "--data-dir", str(data),
                                          timeout=200)
        assert restart.returncode == 0, restart.stderr + restart.stdout
        url = state["scms"][1]["http"]
        with urllib.request.urlopen(url + "/health", timeout=10, context=ca) as resp:
            assert resp.status == 200
    finally:
        if (data / "cluster.json").exists():
            await asyncio.to_thread(_ozone, "local", "down", "--data-dir", str(data))
