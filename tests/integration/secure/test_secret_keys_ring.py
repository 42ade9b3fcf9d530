"""Secret keys on a real secure 3-SCM ring (separate processes, real Raft), over Hadoop RPC with our client:
the leader makes the first key once it is ready, followers point at the leader's security port, an
administrator forces a rotation, and after the leader is SIGKILLed the new leader serves the same key set and
the same current key, so a token signed before the failover still verifies after it; a token signed with a
key the ring never made is refused by the datanode's verifier. Timings are printed, never asserted tightly."""

from __future__ import annotations

import itertools
import signal
import time
from pathlib import Path

import pytest
from ha.harness import TEST_SETTINGS, wait_until

from scm_server import hadoop_ipc as codec
from scm_server.client.hadoop_rpc import HadoopRpcConnection, RemoteError
from scm_server.local.quorum import HALocalCluster
from scm_server.local.secure import ADMIN_USER
from scm_server.proto.ozone import ScmSecretKeyProtocol_pb2 as wire_sk
from scm_server.security.core import secret_keys as sk
from scm_server.server.hadoop_rpc.secret_key_translator import PROTOCOL_DATANODE, PROTOCOL_OM, PROTOCOL_SCM

pytestmark = pytest.mark.timeout(300)

SETTINGS = {
    **TEST_SETTINGS,
    "hdds.scm.safemode.min.datanode": "0",
    "hdds.block.token.enabled": "true",
    "hdds.container.token.enabled": "true",
    "hdds.secret.key.rotate.duration": "1h",  # no rotation by time during the test: only forced ones
    "hdds.secret.key.rotate.check.duration": "1s",
    "hdds.block.token.expiry.time": "1h",
    "hdds.secret.key.expiry.duration": "3h",
}
CALL_IDS = itertools.count(1)
Req = wire_sk.SCMSecretKeyRequest
Resp = wire_sk.SCMSecretKeyResponse


async def ask(address: str, protocol: str, cmd: int, user: str = "dn", **fields: object) -> Resp:
    conn = HadoopRpcConnection(address, protocol, user=user)
    await conn.connect()
    try:
        req = Req(cmdType=cmd, **fields)  # type: ignore[arg-type]
        return Resp.FromString(await conn.call("submitRequest", req, call_id=next(CALL_IDS), timeout=10))
    finally:
        await conn.close()


async def all_keys(address: str) -> list[sk.SecretKey]:
    resp = await ask(address, PROTOCOL_DATANODE, wire_sk.GetAllSecretKeys)
    assert resp.success, resp.message
    return [sk.SecretKey.from_proto(k) for k in resp.secretKeysListResponseProto.secretKeys]


async def current(address: str, protocol: str = PROTOCOL_OM) -> sk.SecretKey | None:
    resp = await ask(address, protocol, wire_sk.GetCurrentSecretKey)
    if not resp.success:
        assert resp.status == wire_sk.SECRET_KEY_NOT_INITIALIZED, resp.message
        return None
    return sk.SecretKey.from_proto(resp.currentSecretKeyResponseProto.secretKey)


async def test_secret_keys_survive_leader_sigkill(tmp_path: Path) -> None:
    cluster = HALocalCluster(tmp_path / "c", 3, settings=SETTINGS, secure=True)
    try:
        cluster.start_quorum()
        leader = await cluster.wait_leader(timeout=90)
        security = cluster.hadoop_addresses("security")
        first = await wait_until(lambda: current(security[leader]), 60, "the leader's first secret key")
        # followers send the caller to the leader's security port
        for i in range(3):
            if i == leader:
                continue
            with pytest.raises(RemoteError) as err:
                await ask(security[i], PROTOCOL_DATANODE, wire_sk.GetCurrentSecretKey)
            assert err.value.exception_class == codec.SERVER_NOT_LEADER
            assert f"Suggested leader is Server:{security[leader]}" in err.value.message
        # a datanode may not rotate; the administrator forces a rotation
        refused = await ask(security[leader], PROTOCOL_SCM, wire_sk.CheckAndRotate, user="dn/host@EXAMPLE.COM",
                            checkAndRotateRequest={"force": True})
        assert not refused.success and "Access denied" in refused.message
        rotated = await ask(security[leader], PROTOCOL_SCM, wire_sk.CheckAndRotate, user=ADMIN_USER,
                            checkAndRotateRequest={"force": True})
        assert rotated.success and rotated.checkAndRotateResponseProto.status, rotated.message
        second = await current(security[leader])
        assert second is not None and second.id != first.id
        held = await all_keys(security[leader])
        assert [k.id for k in held] == [first.id, second.id]
        # the OM signs with the current key (here: the same HMAC over a container token identifier)
        token = sk.container_token(second, "om", 5, int(time.time() * 1000) + 3_600_000)

        started = time.monotonic()
        cluster.kill(leader, signal.SIGKILL)
        new_leader = await cluster.wait_leader(timeout=60, exclude=leader)
        after = await wait_until(lambda: current(security[new_leader]), 60, "the new leader's current secret key")
        print(f"failover: a new leader serves the secret keys {time.monotonic() - started:.1f}s after SIGKILL")
        assert after == second  # the same current key, bytes included
        assert await all_keys(security[new_leader]) == held
        lookup = {k.id: k for k in await all_keys(security[new_leader])}.get
        assert sk.verify_container_token(token, 5, lookup, int(time.time() * 1000)).ownerId == "om"
        # a token signed with a key the ring never made: the datanode's verifier refuses it
        stranger = sk.generate(int(time.time() * 1000), sk.Settings(), lambda n: bytes(range(n)))
        forged = sk.container_token(stranger, "om", 5, int(time.time() * 1000) + 3_600_000)
        missing = await ask(security[new_leader], PROTOCOL_DATANODE, wire_sk.GetSecretKey,
                            getSecretKeyRequest={"secretKeyId": sk.uuid_to_proto(stranger.id)})
        assert missing.success and not missing.getSecretKeyResponseProto.HasField("secretKey")
        with pytest.raises(sk.TokenInvalid, match=f"Can't find the signing secret key {stranger.id}"):
            sk.verify_container_token(forged, 5, lookup, int(time.time() * 1000))
        # the killed SCM comes back and catches up; the ring still holds exactly those keys
        cluster.start_node(leader)
        cluster.wait_serving(leader, 90)
        assert await all_keys(security[new_leader]) == held
    finally:
        cluster.stop_all()
