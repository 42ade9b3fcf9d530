"""Hadoop's own IPC client with Kerberos (``UserGroupInformation.loginUserFromKeytab``, ``SaslRpcClient``, the
JDK's GSSAPI; from the Hadoop client jars inside PySpark) against our Hadoop RPC server, under each
``hadoop.rpc.protection``: the SCM answers GetScmInfo to an authenticated user and refuses it an admin command,
and serves the administrator. The Java side is built by scripts/build_interop_java.sh (as ``make interop-test``
does). Marker ``kerberos`` (``make kerberos-test``)."""

from __future__ import annotations

import asyncio
import logging
import subprocess
from pathlib import Path

import pytest

from scm_server.hadoop_sasl import Qop
from scm_server.server.hadoop_rpc.kerberos import KerberosSettings, RpcSecurity, canonical_hostname
from scm_server.server.hadoop_rpc.location_translator import LocationTranslator
from scm_server.server.hadoop_rpc.server import HadoopRpcServer
from tests.kerberos.kdc import MiniKdc
from tests.kerberos.test_hadoop_rpc_kerberos import LOCAL_CONF, conf_of
from tests.unit.edges.fakes import FakeSCM

pytestmark = [pytest.mark.kerberos, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
HOST = canonical_hostname("127.0.0.1")


@pytest.fixture(scope="module")
def classpath() -> str:
    done = subprocess.run(["bash", str(ROOT / "scripts" / "build_interop_java.sh")], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"building the Java client failed:\n{done.stdout}\n{done.stderr}"
    return (ROOT / ".interop-build" / "classpath").read_text().strip()


async def java_calls(kdc: MiniKdc, classpath: str, principal: str, keytab: Path, qop: Qop, port: int) -> list[str]:
    proc = await asyncio.create_subprocess_exec(
        "java", "-Xmx256m", f"-Djava.security.krb5.conf={kdc.root / 'krb5.conf'}", "-cp", classpath,
        "ozonescm.interop.KerberosCalls", principal, str(keytab), qop.hadoop_name, f"127.0.0.1:{port}",
        f"scm/_HOST@{kdc.realm}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode == 0, f"KerberosCalls failed:\n{out.decode()}\n{err.decode()[-4000:]}"
    return out.decode().splitlines()


@pytest.mark.parametrize("qop", list(Qop), ids=lambda q: q.hadoop_name)
async def test_hadoops_own_client_authenticates_with_kerberos(
    kdc: MiniKdc, classpath: str, qop: Qop, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="scm_server.server.hadoop_rpc.server")
    scm_keytab = kdc.keytab(f"scm/{HOST}", f"scm-java-{qop.hadoop_name}")
    user = f"bob{qop.bit}"
    user_keytab = kdc.keytab(user)
    admin_keytab = kdc.keytab(f"admin{qop.bit}")
    conf = conf_of(kdc, scm_keytab, **{"hadoop.rpc.protection": qop.hadoop_name,
                                       "ozone.administrators": f"admin{qop.bit}"})
    settings = KerberosSettings.from_conf(conf, "127.0.0.1")
    assert settings is not None
    security = RpcSecurity.load(settings)
    scm = FakeSCM()
    server = HadoopRpcServer(
        [LocationTranslator(scm, dict(LOCAL_CONF).get, "scm-1-id", "127.0.0.1", authorizer=security.authorizer)],
        security=security,
    )
    port = await server.start("127.0.0.1", 0)
    try:
        lines = await java_calls(kdc, classpath, f"{user}@{kdc.realm}", user_keytab, qop, port)
        assert f"LOGIN {user}@{kdc.realm} KERBEROS" in lines
        assert f"GetScmInfo OK {scm.get_scm_info().clusterId}" in lines
        assert (f"ForceExitSafeMode ERROR org.apache.hadoop.security.AccessControlException Access denied for user "
                f"{user}@{kdc.realm}. SCM superuser privilege is required.") in lines
        assert scm.safe_mode
        lines = await java_calls(kdc, classpath, f"admin{qop.bit}@{kdc.realm}", admin_keytab, qop, port)
        assert "ForceExitSafeMode OK " in lines
        assert not scm.safe_mode
        assert server.stats["fatal"] == 0
        negotiated = [r.getMessage() for r in caplog.records if "authenticated as" in r.getMessage()]
        assert len(negotiated) == 2 and all(m.endswith(f"({qop.hadoop_name})") for m in negotiated), negotiated
    finally:
        await server.stop()


async def test_hadoops_client_offering_authentication_only_gets_nothing_from_a_privacy_server(
    kdc: MiniKdc, classpath: str
) -> None:
    scm_keytab = kdc.keytab(f"scm/{HOST}", "scm-java-privacy-only")
    conf = conf_of(kdc, scm_keytab, **{"hadoop.rpc.protection": "privacy"})
    settings = KerberosSettings.from_conf(conf, "127.0.0.1")
    assert settings is not None
    scm = FakeSCM()
    security = RpcSecurity.load(settings)
    server = HadoopRpcServer([LocationTranslator(scm, dict(LOCAL_CONF).get, "scm-1-id", "127.0.0.1",
                                                 authorizer=security.authorizer)], security=security)
    port = await server.start("127.0.0.1", 0)
    try:
        lines = await java_calls(kdc, classpath, f"carol@{kdc.realm}", kdc.keytab("carol"), Qop.AUTHENTICATION, port)
        for call in ("GetScmInfo", "ForceExitSafeMode"):  # the client refuses on its side, as Java's SASL does
            (line,) = [x for x in lines if x.startswith(f"{call} ")]
            assert line.startswith(f"{call} ERROR javax.security.sasl.SaslException"), line
            assert "No common protection layer between client and server" in line, line
        assert server.stats["calls"] == 0
    finally:
        await server.stop()
