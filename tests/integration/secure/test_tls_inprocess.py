"""The TLS edge on real loopback sockets, in one process: dynamic server credentials (a renewed
certificate is served on the next handshake, open connections keep working), channels re-created
when a client's certificate changes, and a revoked peer's open client stream (the Raft ``Deliver``
shape) cut at its next message."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import grpc.aio
import pytest

from scm_server.proto import raft_pb2, raft_pb2_grpc
from scm_server.security.cert_client import presented_chain
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids
from scm_server.security.keystore import Material
from scm_server.security.tls import (
    CallAuthenticator,
    ChannelCache,
    ReloadableMaterial,
    SCMTransportSecurity,
    StaticClientSecurity,
)

pytestmark = pytest.mark.processes  # whole-SCM scenarios: make test-slow

EC = pki.KeySpec("EC", 256, "SHA256withECDSA")
CLUSTER = "CID-0b5c4c2e-0000-4000-8000-000000000abc"


def _now() -> datetime:
    return datetime.now(UTC)


class PKI:
    def __init__(self) -> None:
        self.root_key = pki.generate_key(EC)
        self.root = pki.build_root_ca(self.root_key, ids.root_ca_subject("127.0.0.1", "r", CLUSTER), serial=1,
                                      now=_now(), lifetime=timedelta(days=2), spec=EC)
        self.serial = 1

    def scm(self, scm_id: str) -> Material:
        self.serial += 1
        key = pki.generate_key(EC)
        cert = pki.issue_certificate(ids.scm_subject("127.0.0.1", scm_id, CLUSTER), key.public_key(), issuer=self.root,
                                     issuer_key=self.root_key, serial=self.serial, now=_now(),
                                     lifetime=timedelta(days=1), profile=pki.Profile.SUB_CA, spec=EC)
        return Material(key, (cert,), (self.root,))

    def datanode(self, issuer: Material) -> Material:
        self.serial += 1
        key = pki.generate_key(EC)
        cert = pki.issue_certificate(ids.datanode_subject("127.0.0.1", "dn-1", CLUSTER), key.public_key(),
                                     issuer=issuer.certificate, issuer_key=issuer.key, serial=self.serial, now=_now(),
                                     lifetime=timedelta(hours=1), profile=pki.Profile.END_ENTITY, spec=EC)
        return Material(key, (cert, issuer.certificate), (self.root,))


class Peer(raft_pb2_grpc.RaftPeerServicer):
    def __init__(self) -> None:
        self.received = 0

    async def Deliver(self, request_iterator: AsyncIterator[raft_pb2.MessageBatch], context: Any) -> raft_pb2.DeliverAck:
        async for _ in request_iterator:
            self.received += 1
        return raft_pb2.DeliverAck()

    async def RequestVote(self, request: Any, context: Any) -> raft_pb2.DeliverAck:
        return raft_pb2.DeliverAck()


async def _serve(p: PKI, revoked: set[str]) -> tuple[grpc.aio.Server, int, ReloadableMaterial, Peer]:
    material = ReloadableMaterial(p.scm("server"))
    auth = CallAuthenticator(cluster_id=lambda: CLUSTER, is_revoked=lambda s: s in revoked, administrators=("admin",))
    security = SCMTransportSecurity(material, auth)
    server = grpc.aio.server(interceptors=list(security.server_interceptors()))
    peer = Peer()
    raft_pb2_grpc.add_RaftPeerServicer_to_server(peer, server)
    port = server.add_secure_port("127.0.0.1:0", security.server_credentials())
    await server.start()
    return server, port, material, peer


async def test_revoked_peer_stream_is_cut_at_its_next_message() -> None:
    p = PKI()
    revoked: set[str] = set()
    server, port, _, peer = await _serve(p, revoked)
    client = p.scm("client-scm")
    heartbeat = 0.05  # the stream carries one batch per tick, like Raft's heartbeats
    try:
        sent = 0
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", StaticClientSecurity(client).channel_credentials()) as ch:
            async def batches() -> AsyncIterator[raft_pb2.MessageBatch]:
                nonlocal sent
                for _ in range(400):
                    if sent == 10:
                        revoked.add(client.serial_id)  # the revocation is applied while the stream is open
                    sent += 1
                    yield raft_pb2.MessageBatch(from_address="x")
                    await asyncio.sleep(heartbeat)

            with pytest.raises(grpc.aio.AioRpcError) as info:
                await raft_pb2_grpc.RaftPeerStub(ch).Deliver(batches(), timeout=30)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert f"certificate serial {client.serial_id}" in (info.value.details() or "") and "revoked" in (info.value.details() or "")
        assert peer.received == 10  # nothing of the revoked peer was handed to the servicer after the revocation
        assert sent <= 12  # cut within one heartbeat of the revocation
        # a new connection with that certificate is refused at its first call, an unrevoked SCM is served
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", StaticClientSecurity(client).channel_credentials()) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await raft_pb2_grpc.RaftPeerStub(ch).RequestVote(raft_pb2.MessageProto(), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        other = p.scm("other-scm")
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", StaticClientSecurity(other).channel_credentials()) as ch:
            await raft_pb2_grpc.RaftPeerStub(ch).RequestVote(raft_pb2.MessageProto(), timeout=5)
    finally:
        await server.stop(0)


async def test_revoking_the_issuer_cuts_the_certificates_it_issued() -> None:
    p = PKI()
    revoked: set[str] = set()
    server, port, _, _ = await _serve(p, revoked)
    issuer = p.scm("dn-issuer")
    dn = p.datanode(issuer)
    try:
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", StaticClientSecurity(dn).channel_credentials()) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as info:  # a datanode is not a Raft peer
                await raft_pb2_grpc.RaftPeerStub(ch).RequestVote(raft_pb2.MessageProto(), timeout=5)
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED and "for SCMs only" in (info.value.details() or "")
            revoked.add(issuer.serial_id)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await raft_pb2_grpc.RaftPeerStub(ch).RequestVote(raft_pb2.MessageProto(), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert f"its issuer, serial {issuer.serial_id}" in (info.value.details() or "")
    finally:
        await server.stop(0)


async def test_renewed_server_certificate_is_served_without_restart() -> None:
    p = PKI()
    server, port, material, _ = await _serve(p, set())
    client = StaticClientSecurity(p.scm("client"))
    addr = f"127.0.0.1:{port}"
    try:
        first = (await asyncio.to_thread(presented_chain, addr))[0]
        assert first.serial_number == material.current.certificate.serial_number
        async with grpc.aio.secure_channel(addr, client.channel_credentials()) as old:
            await raft_pb2_grpc.RaftPeerStub(old).RequestVote(raft_pb2.MessageProto(), timeout=5)
            material.update(p.scm("server"))  # the renewal
            served = (await asyncio.to_thread(presented_chain, addr))[0]
            assert served.serial_number == material.current.certificate.serial_number != first.serial_number
            # the connection opened before the renewal keeps working
            await raft_pb2_grpc.RaftPeerStub(old).RequestVote(raft_pb2.MessageProto(), timeout=5)
        async with grpc.aio.secure_channel(addr, client.channel_credentials()) as new:
            await raft_pb2_grpc.RaftPeerStub(new).RequestVote(raft_pb2.MessageProto(), timeout=5)
    finally:
        await server.stop(0)


async def test_channel_cache_follows_the_client_certificate_generation() -> None:
    p = PKI()
    server, port, _, _ = await _serve(p, set())
    client = ReloadableMaterial(p.scm("client"))
    cache = ChannelCache(client)
    addr = f"127.0.0.1:{port}"
    try:
        ch1 = cache.get(addr)
        assert cache.get(addr) is ch1
        await raft_pb2_grpc.RaftPeerStub(ch1).RequestVote(raft_pb2.MessageProto(), timeout=5)
        client.update(p.scm("client"))
        ch2 = cache.get(addr)
        assert ch2 is not ch1
        await raft_pb2_grpc.RaftPeerStub(ch2).RequestVote(raft_pb2.MessageProto(), timeout=5)
    finally:
        await cache.close()
        await server.stop(0)
