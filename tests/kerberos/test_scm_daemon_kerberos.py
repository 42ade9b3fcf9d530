"""A real SCM process with ``hadoop.security.authentication=kerberos``: all four Hadoop RPC listeners serve
Kerberos-authenticated callers (a real MIT KDC on loopback), SIMPLE callers are refused, and a wrong keytab stops
the start with one line. Marker ``kerberos`` (``make kerberos-test``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scm_server import hadoop_ipc as codec
from scm_server.local.cluster import LocalCluster
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import hdds_pb2
from scm_server.server.hadoop_rpc.kerberos import canonical_hostname
from tests.kerberos.kdc import MiniKdc
from tests.kerberos.sasl_client import KerberosClient, ServerFatal

pytestmark = pytest.mark.kerberos

HOST = canonical_hostname("127.0.0.1")
PROTOCOLS = {
    "block": "org.apache.hadoop.hdds.scm.protocol.ScmBlockLocationProtocol",
    "client": "org.apache.hadoop.hdds.scm.protocol.StorageContainerLocationProtocol",
    "datanode": "org.apache.hadoop.ozone.protocol.StorageContainerDatanodeProtocol",
    "security": "org.apache.hadoop.hdds.protocol.SCMSecurityProtocol",
}


def kerberos_settings(kdc: MiniKdc, keytab: Path) -> dict[str, str]:
    return {
        "hadoop.security.authentication": "kerberos",
        "hdds.scm.kerberos.principal": f"scm/_HOST@{kdc.realm}",
        "hdds.scm.kerberos.keytab.file": str(keytab),
        "hadoop.rpc.protection": "privacy",
        "ozone.administrators": "admin",
    }


async def test_every_hadoop_rpc_listener_serves_kerberos_callers(kdc: MiniKdc, tmp_path: Path) -> None:
    keytab = kdc.keytab(f"scm/{HOST}", "scm-daemon")
    alice = kdc.kinit("alice-d", kdc.keytab("alice-d"))
    cluster = LocalCluster(tmp_path / "c", 1, settings=kerberos_settings(kdc, keytab))
    cluster.write_configs()
    cluster.init()
    cluster.start(0, extra_env=kdc.env())
    try:
        cluster.wait_serving(0)
        scm = cluster.scms[0]
        for which, protocol in PROTOCOLS.items():
            client = await KerberosClient.open(scm.hadoop_ports[which])
            assert await client.authenticate(alice) is not None, which
            client.send_context(protocol)
            # a method no protocol has: the authenticated call reaches the protocol's handler and is answered
            answer = await client.call(0, protocol, "noSuchMethod", b"")
            assert answer.header.exceptionClassName == codec.NO_SUCH_METHOD, (which, answer.header)
            if which == "client":
                request = wire_loc.ScmContainerLocationRequest(
                    cmdType=wire_loc.GetScmInfo, traceID="t", getScmInfoRequest=hdds_pb2.GetScmInfoRequestProto())
                info = await client.call(1, protocol, "submitRequest", request)
                assert info.header.status == codec.Status.SUCCESS, info.header
            client.close()
        simple = await KerberosClient.open(scm.hadoop_ports["client"])
        simple.writer.write(codec.encode_preamble() + codec.encode_context(simple.client_id, PROTOCOLS["client"]))
        with pytest.raises(ServerFatal, match="SIMPLE authentication is not enabled"):
            await simple.receive()
    finally:
        cluster.stop_all()


def test_a_wrong_keytab_stops_the_scm_with_one_line(kdc: MiniKdc, tmp_path: Path) -> None:
    other = kdc.keytab("not-the-scm")
    cluster = LocalCluster(tmp_path / "c", 1, settings=kerberos_settings(kdc, other))
    cluster.write_configs()
    cluster.init()
    cluster.start(0, extra_env=kdc.env())
    scm = cluster.scms[0]
    assert scm.proc is not None
    try:
        assert scm.proc.wait(timeout=90) == 2
    finally:
        cluster.stop_all()
    errors = [line for line in scm.log_path.read_text().splitlines() if "ERROR" in line]
    assert len(errors) == 1, errors
    assert f"hdds.scm.kerberos.principal=scm/{HOST}@{kdc.realm} cannot accept" in errors[0]
    assert "hdds.scm.kerberos.keytab.file" in errors[0]
