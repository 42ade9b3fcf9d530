"""SCMSecretKeyProtocol over Hadoop RPC against a real in-process SCM (stub HA, so it is the leader), over
loopback with our Hadoop RPC client; time is a FakeClock and the keys come from a seeded entropy source.
GetContainerToken through the location translator, checked with the datanode's verifier."""

from __future__ import annotations

import itertools
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from scm_server import hadoop_ipc as codec
from scm_server.ca.secret_key_manager import SecretKeyManager
from scm_server.client.hadoop_rpc import HadoopRpcConnection, RemoteError
from scm_server.clock import FakeClock
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import ScmSecretKeyProtocol_pb2 as wire_sk
from scm_server.scm import StorageContainerManager
from scm_server.security.core import secret_keys as sk
from scm_server.server.hadoop_rpc import location_translator
from scm_server.server.hadoop_rpc.container_token import ContainerTokens
from scm_server.server.hadoop_rpc.location_translator import LocationTranslator
from scm_server.server.hadoop_rpc.secret_key_translator import (
    PROTOCOLS,
    SecretKeyService,
    SecretKeyTranslator,
    translators,
)
from scm_server.server.hadoop_rpc.server import HadoopRpcServer
from tests.unit.scm_state_harness import make_scm

SETTINGS = sk.Settings(rotate=timedelta(days=1), expiry=timedelta(days=9))
DAY = 86_400.0
Req = wire_sk.SCMSecretKeyRequest
Resp = wire_sk.SCMSecretKeyResponse


def seeded(seed: int) -> sk.Entropy:
    rng = random.Random(seed)
    return lambda n: rng.randbytes(n)


def manager_of(scm: StorageContainerManager, clock: FakeClock, seed: int = 1) -> SecretKeyManager:
    return SecretKeyManager(scm.secret_key_state, SETTINGS, context=scm.scm_context, clock=clock,
                            entropy=seeded(seed), check_interval=timedelta(minutes=10),
                            token_lifetime=timedelta(days=1))


@dataclass
class Ring:
    scm: StorageContainerManager
    clock: FakeClock
    manager: SecretKeyManager
    port: int
    conns: list[HadoopRpcConnection]

    async def connect(self, protocol: str = PROTOCOLS[0], user: str = "dn") -> HadoopRpcConnection:
        conn = HadoopRpcConnection(f"127.0.0.1:{self.port}", protocol, user=user)
        await conn.connect()
        self.conns.append(conn)
        return conn


CALL_IDS = itertools.count(1)


async def ask(conn: HadoopRpcConnection, cmd: int, **fields: Any) -> Resp:
    req = Req(cmdType=cmd, traceID="t1", **fields)  # type: ignore[arg-type]
    resp = Resp.FromString(await conn.call("submitRequest", req, call_id=next(CALL_IDS)))
    assert resp.IsInitialized() and resp.cmdType == cmd and resp.traceID == "t1"
    return resp


@pytest.fixture
async def ring(tmp_path: Path) -> AsyncIterator[Ring]:
    clock = FakeClock(start_wall_ms=1_800_000_000_000)
    scm = await make_scm(tmp_path, clock)
    manager = manager_of(scm, clock)
    service = SecretKeyService(manager, None, administrators=("admin",), require_authentication=False)
    tokens = ContainerTokens(manager, clock, ("admin",), require_authentication=False)
    server = HadoopRpcServer([*translators(service), LocationTranslator(scm, {}.get, "scm-1", "127.0.0.1", container_tokens=tokens)])
    port = await server.start("127.0.0.1", 0)
    r = Ring(scm, clock, manager, port, [])
    yield r
    for conn in r.conns:
        await conn.close()
    await server.stop()
    await scm.stop()


async def test_not_initialized_then_served_under_all_three_names(ring: Ring) -> None:
    conn = await ring.connect()
    before = await ask(conn, wire_sk.GetCurrentSecretKey)
    assert not before.success and before.status == wire_sk.SECRET_KEY_NOT_INITIALIZED
    assert before.message == "Secret key initialization is not finished yet."
    assert await ring.manager.check_and_rotate()  # the first key
    current = ring.manager.current_key()
    for protocol in PROTOCOLS:
        c = await ring.connect(protocol)
        resp = await ask(c, wire_sk.GetCurrentSecretKey)
        assert resp.success and resp.status == wire_sk.OK
        assert sk.SecretKey.from_proto(resp.currentSecretKeyResponseProto.secretKey) == current
    # replicated into scm.db: the table holds exactly the key served
    stored = dict(ring.scm.metadata_store.secret_keys.items())
    assert list(stored) == [str(current.id)] and sk.SecretKey.from_proto(stored[str(current.id)]) == current


async def test_get_by_id_unknown_id_and_all_keys(ring: Ring) -> None:
    conn = await ring.connect()
    await ring.manager.check_and_rotate()
    first = ring.manager.current_key()
    ring.clock.advance(DAY)
    assert await ring.manager.check_and_rotate()
    second = ring.manager.current_key()
    assert second != first
    got = await ask(conn, wire_sk.GetSecretKey, getSecretKeyRequest={"secretKeyId": sk.uuid_to_proto(first.id)})
    assert got.success and sk.SecretKey.from_proto(got.getSecretKeyResponseProto.secretKey) == first
    unknown = sk.generate(0, SETTINGS, seeded(99)).id
    missing = await ask(conn, wire_sk.GetSecretKey, getSecretKeyRequest={"secretKeyId": sk.uuid_to_proto(unknown)})
    # Ozone's answer for an unknown id: success, and no key in the response
    assert missing.success and missing.HasField("getSecretKeyResponseProto")
    assert not missing.getSecretKeyResponseProto.HasField("secretKey")
    every = await ask(conn, wire_sk.GetAllSecretKeys)
    assert [sk.SecretKey.from_proto(k) for k in every.secretKeysListResponseProto.secretKeys] == [first, second]


async def test_rotation_follows_the_clock_and_drops_expired_keys(ring: Ring) -> None:
    await ring.manager.check_and_rotate()
    first = ring.manager.current_key()
    ring.clock.advance(DAY - 1)
    assert not await ring.manager.check_and_rotate()
    assert ring.manager.current_key() == first
    for _ in range(10):
        ring.clock.advance(DAY)
        assert await ring.manager.check_and_rotate()
    ids = {str(k.id) for k in ring.manager.all_keys()}
    assert str(first.id) not in ids and len(ids) <= 10
    assert set(dict(ring.scm.metadata_store.secret_keys.items())) == ids  # dropped from scm.db too


async def test_check_and_rotate_is_for_administrators(ring: Ring) -> None:
    await ring.manager.check_and_rotate()
    first = ring.manager.current_key()
    intruder = await ring.connect(PROTOCOLS[2], user="dn/host1@EXAMPLE.COM")
    refused = await ask(intruder, wire_sk.CheckAndRotate, checkAndRotateRequest={"force": True})
    assert not refused.success and refused.status == wire_sk.INTERNAL_ERROR
    assert "Access denied for user dn/host1@EXAMPLE.COM" in refused.message
    assert ring.manager.current_key() == first  # nothing changed
    admin = await ring.connect(PROTOCOLS[2], user="admin/host@EXAMPLE.COM")
    not_due = await ask(admin, wire_sk.CheckAndRotate, checkAndRotateRequest={"force": False})
    assert not_due.success and not not_due.checkAndRotateResponseProto.status
    forced = await ask(admin, wire_sk.CheckAndRotate, checkAndRotateRequest={"force": True})
    assert forced.success and forced.checkAndRotateResponseProto.status
    assert ring.manager.current_key() != first


async def test_unauthenticated_callers_refused_when_authentication_is_required(ring: Ring) -> None:
    await ring.manager.check_and_rotate()
    service = SecretKeyService(ring.manager, None, administrators=("admin",), require_authentication=True)
    call = codec.Call(call_id=1, client_id=b"c" * 16, retry_count=0, protocol=PROTOCOLS[0], method="submitRequest",
                      client_version=1, body=Req(cmdType=wire_sk.GetCurrentSecretKey).SerializeToString(),
                      user="dn/host1@EXAMPLE.COM", authenticated=False)
    refused = Resp.FromString(await SecretKeyTranslator(PROTOCOLS[0], service).call("submitRequest", call))
    assert not refused.success and "is not authenticated" in refused.message
    assert not refused.HasField("currentSecretKeyResponseProto")
    trusted = Resp.FromString(await service.answer(call._replace(authenticated=True)))
    assert trusted.success and trusted.currentSecretKeyResponseProto.secretKey.encoded


async def test_disabled_answers_not_enabled(ring: Ring) -> None:
    service = SecretKeyService(None, None)
    call = codec.Call(call_id=1, client_id=b"c" * 16, retry_count=0, protocol=PROTOCOLS[1], method="submitRequest",
                      client_version=1, body=Req(cmdType=wire_sk.GetAllSecretKeys).SerializeToString(), user="om")
    resp = Resp.FromString(await service.answer(call))
    assert not resp.success and resp.status == wire_sk.SECRET_KEY_NOT_ENABLED
    assert resp.message == "Secret keys are not enabled."


async def test_keys_survive_a_restart(tmp_path: Path) -> None:
    clock = FakeClock(start_wall_ms=1_800_000_000_000)
    scm = await make_scm(tmp_path, clock)
    manager = manager_of(scm, clock)
    await manager.check_and_rotate()
    clock.advance(DAY)
    await manager.check_and_rotate()
    held = manager.all_keys()
    current = manager.current_key()
    await scm.stop()
    scm.metadata_store.stop()
    from scm_server.metadata import SCMMetadataStore

    store = SCMMetadataStore(tmp_path, sync=False)
    again = await StorageContainerManager.create(scm.conf, clock=clock, metadata_store=store)
    try:
        assert again.secret_key_state.all_keys() == held
        assert again.secret_key_state.current_key() == current
    finally:
        await again.stop()


async def container_token(conn: HadoopRpcConnection, container_id: int) -> wire_loc.ScmContainerLocationResponse:
    req = wire_loc.ScmContainerLocationRequest(cmdType=wire_loc.GetContainerToken,
                                               containerTokenRequest={"containerID": {"id": container_id}})
    return wire_loc.ScmContainerLocationResponse.FromString(
        await conn.call("submitRequest", req, call_id=next(CALL_IDS)))


async def test_container_token_for_an_administrator_verifies_with_the_served_keys(ring: Ring) -> None:
    await ring.manager.check_and_rotate()
    admin = await ring.connect(location_translator.PROTOCOL, user="admin")
    token = (await container_token(admin, 7)).containerTokenResponse.token
    assert token.kind == "HDDS_CONTAINER_TOKEN" and token.service == "#7"
    # the datanode's view of the keys: GetSecretKey over the datanode protocol name
    dn = await ring.connect(PROTOCOLS[0])

    keys: dict[Any, sk.SecretKey] = {}
    for k in (await ask(dn, wire_sk.GetAllSecretKeys)).secretKeysListResponseProto.secretKeys:
        key = sk.SecretKey.from_proto(k)
        keys[key.id] = key
    now = ring.clock.wall_ms()
    ident = sk.verify_container_token(token, 7, keys.get, now)
    assert ident.ownerId == "admin" and ident.expiryDate == now + 86_400_000
    # after the key set rotated on past the token's key, the token fails with Ozone's message
    ring.clock.advance(DAY + 1)
    with pytest.raises(sk.TokenInvalid, match="Expired token for user: admin"):
        sk.verify_container_token(token, 7, keys.get, ring.clock.wall_ms())


async def test_container_token_refused_to_a_non_administrator(ring: Ring) -> None:
    await ring.manager.check_and_rotate()
    om = await ring.connect(location_translator.PROTOCOL, user="om/host@EXAMPLE.COM")
    with pytest.raises(RemoteError) as err:
        await container_token(om, 7)
    assert err.value.exception_class == codec.ACCESS_CONTROL
    assert "Access denied for user om/host@EXAMPLE.COM" in err.value.message


async def test_container_token_empty_when_tokens_are_off(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    server = HadoopRpcServer([LocationTranslator(scm, {}.get, "scm-1", "127.0.0.1")])
    port = await server.start("127.0.0.1", 0)
    conn = HadoopRpcConnection(f"127.0.0.1:{port}", location_translator.PROTOCOL, user="anyone")
    await conn.connect()
    try:
        token = (await container_token(conn, 7)).containerTokenResponse.token
        assert token.identifier == b"" and token.password == b"" and token.kind == ""
    finally:
        await conn.close()
        await server.stop()
        await scm.stop()
