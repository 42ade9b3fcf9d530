"""Hadoop's own IPC client (RPC.getProxy + ProtobufRpcEngine2, from the Hadoop client jars inside PySpark) calling
SCMSecretKeyProtocol under Ozone's three protocol names on a real secure 3-SCM ring of ours: every name answers the
leader's current key (the one our own client reads), an unknown id answers no key, and the JVM's user (not an
administrator) may not rotate. Part of ``make interop-test``; the Java side is built by scripts/build_interop_java.sh.
"""

from __future__ import annotations

import getpass
import itertools
import re
from pathlib import Path

import pytest

from scm_server.client.hadoop_rpc import HadoopRpcConnection
from scm_server.local.quorum import HALocalCluster
from scm_server.proto.ozone import ScmSecretKeyProtocol_pb2 as wire_sk
from scm_server.security.core import secret_keys as sk
from scm_server.server.hadoop_rpc.secret_key_translator import PROTOCOL_OM
from tests.integration.ha.harness import TEST_SETTINGS, wait_until
from tests.interop.test_hadoop_rpc_interop import build_java, java

pytestmark = [pytest.mark.interop, pytest.mark.timeout(600)]

SETTINGS = {
    **TEST_SETTINGS,
    "hdds.scm.safemode.min.datanode": "0",
    "hdds.block.token.enabled": "true",
    "hdds.block.token.expiry.time": "1h",
    "hdds.secret.key.rotate.duration": "1h",
    "hdds.secret.key.expiry.duration": "3h",
}
IDS = itertools.count(1)


async def current(address: str) -> sk.SecretKey | None:
    conn = HadoopRpcConnection(address, PROTOCOL_OM, user="om")
    await conn.connect()
    try:
        req = wire_sk.SCMSecretKeyRequest(cmdType=wire_sk.GetCurrentSecretKey)
        resp = wire_sk.SCMSecretKeyResponse.FromString(await conn.call("submitRequest", req, call_id=next(IDS)))
    finally:
        await conn.close()
    return sk.SecretKey.from_proto(resp.currentSecretKeyResponseProto.secretKey) if resp.success else None


async def test_hadoops_client_reads_the_secret_keys(tmp_path: Path) -> None:
    classpath = build_java()
    cluster = HALocalCluster(tmp_path / "c", 3, settings=SETTINGS, secure=True)
    try:
        cluster.start_quorum()
        leader = await cluster.wait_leader(timeout=90)
        address = cluster.hadoop_addresses("security")[leader]
        key = await wait_until(lambda: current(address), 60, "the leader's first secret key")
        lines = java(classpath, "secretkeys", address)
        facts = {" ".join(line.split()[:2]): line for line in lines}
        expected = (f"id={key.id} algorithm=HmacSHA256 bytes=32 created={key.creation_ms} "
                    f"expires={key.expiry_ms}")
        for name in ("datanode", "om", "scm"):
            line = facts[f"{name} GetCurrentSecretKey"]
            assert line == f"{name} GetCurrentSecretKey OK success=true trace=j-GetCurrentSecretKey {expected}", line
        assert facts["datanode GetSecretKey"].endswith(f"OK success=true trace=j-GetSecretKey {expected}")
        assert facts["unknown GetSecretKey"].endswith("OK success=true trace=j-GetSecretKey absent")
        assert facts["om GetAllSecretKeys"].endswith("count=1")
        rotate = facts["scm CheckAndRotate"]
        assert re.search(rf"INTERNAL_ERROR success=false .*Access denied for user {re.escape(getpass.getuser())}", rotate)
        assert await current(address) == key  # nothing rotated
    finally:
        cluster.stop_all()
