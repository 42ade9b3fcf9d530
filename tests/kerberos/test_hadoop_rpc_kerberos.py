"""Kerberos on Hadoop RPC against a real MIT KDC on loopback: a client written to Hadoop's SASL exchange (PyPI
gssapi) authenticates to the asyncio server for each quality of protection, and every refusal is checked
from both sides (the client's answer and, where it matters, the server's log and state).

Run by ``make kerberos-test`` (which installs the Debian packages); marker ``kerberos``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from scm_server import hadoop_ipc as codec
from scm_server.conf import OzoneConfiguration
from scm_server.exceptions import ConfigError
from scm_server.hadoop_ipc import Call
from scm_server.hadoop_sasl import Qop
from scm_server.proto.ozone import ReconfigureProtocol_pb2 as wire_reconf
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.server.hadoop_rpc.kerberos import KerberosSettings, RpcSecurity, canonical_hostname
from scm_server.server.hadoop_rpc.location_translator import PROTOCOL as LOCATION
from scm_server.server.hadoop_rpc.location_translator import LocationTranslator
from scm_server.server.hadoop_rpc.reconfigure_translator import PROTOCOL as RECONFIGURE
from scm_server.server.hadoop_rpc.reconfigure_translator import ReconfigureTranslator
from scm_server.server.hadoop_rpc.server import HadoopRpcServer
from tests.kerberos.kdc import MiniKdc
from tests.kerberos.sasl_client import KerberosClient, NoCommonLayer, ServerFatal
from tests.unit.edges.fakes import FakeSCM
from tests.unit.scm_state_harness import make_scm

pytestmark = pytest.mark.kerberos

SECRET_KEY_OM = "org.apache.hadoop.hdds.protocol.SecretKeyProtocolOm"
HOST = canonical_hostname("localhost")
LOCAL_CONF = {
    "ozone.scm.service.ids": "cluster1",
    "ozone.scm.nodes.cluster1": "scm1",
    "ozone.scm.address.cluster1.scm1": "127.0.0.1",
}


@pytest.fixture(scope="module")
def realm(kdc: MiniKdc) -> dict[str, Path]:
    """The principals every test uses: the SCM's, an administrator, a plain user, a datanode, the OM."""
    scm = kdc.keytab(f"scm/{HOST}", "scm")
    # the SCM's keytab also holds the host's HTTP key, as Hadoop deployments often share one keytab per host:
    # a ticket for that service must still not open the SCM's RPC ports
    kdc.add_principal(f"HTTP/{HOST}")
    kdc.kadmin(f"ktadd -k {scm} HTTP/{HOST}@{kdc.realm}")
    return {
        "scm": scm,
        "admin": kdc.kinit("admin", kdc.keytab("admin")),
        "alice": kdc.kinit("alice", kdc.keytab("alice")),
        "dn": kdc.kinit(f"dn/{HOST}", kdc.keytab(f"dn/{HOST}", "dn"), "dn"),
        "om": kdc.kinit(f"om/{HOST}", kdc.keytab(f"om/{HOST}", "om"), "om"),
    }


def conf_of(kdc: MiniKdc, keytab: Path, **extra: str) -> OzoneConfiguration:
    conf = OzoneConfiguration()
    settings = {
        "hadoop.security.authentication": "kerberos",
        "hdds.scm.kerberos.principal": f"scm/_HOST@{kdc.realm}",
        "hdds.scm.kerberos.keytab.file": str(keytab),
        "ozone.administrators": "admin",
        **LOCAL_CONF,
        **extra,
    }
    for k, v in settings.items():
        conf.set(k, v)
    return conf


class Echo:
    """A protocol handler that answers every call with its caller, as the server saw it."""

    version = 1
    methods = frozenset({"whoami"})

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol
        self.calls: list[Call] = []

    async def call(self, method: str, call: Call) -> bytes:
        self.calls.append(call)
        return f"{call.user}|{call.authenticated}".encode()


async def serve(kdc: MiniKdc, realm: dict[str, Path], **extra: str) -> tuple[HadoopRpcServer, int, FakeSCM, Echo]:
    conf = conf_of(kdc, realm["scm"], **extra)
    settings = KerberosSettings.from_conf(conf, "localhost")
    assert settings is not None
    security = RpcSecurity.load(settings)
    scm = FakeSCM()
    echo = Echo(SECRET_KEY_OM)
    location = LocationTranslator(scm, dict(LOCAL_CONF).get, "scm-1-id", "127.0.0.1", authorizer=security.authorizer)
    server = HadoopRpcServer([location, echo], security=security, idle_timeout=30)
    port = await server.start("127.0.0.1", 0)
    return server, port, scm, echo


@pytest.fixture
async def secured(kdc: MiniKdc, realm: dict[str, Path], request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    extra = getattr(request, "param", {})
    server, port, scm, echo = await serve(kdc, realm, **extra)
    try:
        yield server, port, scm, echo
    finally:
        await server.stop()


def location_request(cmd: str) -> wire_loc.ScmContainerLocationRequest:
    request = wire_loc.ScmContainerLocationRequest(cmdType=wire_loc.Type.Value(cmd), traceID="t")
    if cmd == "GetScmInfo":
        request.getScmInfoRequest.SetInParent()
    elif cmd == "ForceExitSafeMode":
        request.forceExitSafeModeRequest.SetInParent()
    return request


def location_response(resp: codec.Response) -> wire_loc.ScmContainerLocationResponse:
    assert resp.header.status == codec.Status.SUCCESS, resp.header
    out = wire_loc.ScmContainerLocationResponse()
    assert resp.body is not None
    out.ParseFromString(resp.body)
    return out


# ---- a real client authenticates, for each quality of protection ----

@pytest.mark.parametrize("qop", list(Qop), ids=lambda q: q.hadoop_name)
async def test_a_kerberos_client_is_served_as_its_principal_under_each_protection(
    kdc: MiniKdc, realm: dict[str, Path], qop: Qop
) -> None:
    server, port, scm, echo = await serve(kdc, realm, **{"hadoop.rpc.protection": qop.hadoop_name})
    try:
        client = await KerberosClient.open(port)
        assert await client.authenticate(realm["alice"]) is qop
        client.send_context(SECRET_KEY_OM, f"alice@{kdc.realm}")
        answer = await client.call(0, SECRET_KEY_OM, "whoami", b"")
        assert answer.body == f"alice@{kdc.realm}|True".encode()
        info = location_response(await client.call(1, LOCATION, "submitRequest", location_request("GetScmInfo")))
        assert info.getScmInfoResponse.clusterId == scm.get_scm_info().clusterId
        assert [c.user for c in echo.calls] == [f"alice@{kdc.realm}"]
        client.close()
    finally:
        await server.stop()


async def test_a_list_of_protections_lets_the_client_choose(kdc: MiniKdc, realm: dict[str, Path]) -> None:
    server, port, _, _ = await serve(kdc, realm, **{"hadoop.rpc.protection": "privacy,authentication"})
    try:
        first = await KerberosClient.open(port)
        assert await first.authenticate(realm["alice"], (Qop.AUTHENTICATION,)) is Qop.AUTHENTICATION
        second = await KerberosClient.open(port)
        assert await second.authenticate(realm["alice"]) is Qop.PRIVACY
        for c in (first, second):
            c.send_context(SECRET_KEY_OM)
            assert (await c.call(0, SECRET_KEY_OM, "whoami", b"")).body == f"alice@{kdc.realm}|True".encode()
            c.close()
    finally:
        await server.stop()


# ---- refusals ----

async def test_a_simple_client_is_refused_as_hadoop_refuses_it(secured: Any) -> None:
    _, port, _, echo = secured
    client = await KerberosClient.open(port)
    client.writer.write(codec.encode_preamble() + codec.encode_context(client.client_id, SECRET_KEY_OM, "alice"))
    client.send_call(0, SECRET_KEY_OM, "whoami", b"", wrap=False)
    with pytest.raises(ServerFatal) as refused:
        await client.receive()
    assert refused.value.exception_class == "org.apache.hadoop.security.AccessControlException"
    assert refused.value.message == "SIMPLE authentication is not enabled.  Available:[KERBEROS]"
    assert refused.value.header.errorDetail == codec.ErrorCode.FATAL_UNAUTHORIZED
    assert await client.closed_by_server()
    assert echo.calls == []


async def test_a_client_without_a_ticket_cannot_authenticate(
    secured: Any, kdc: MiniKdc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gssapi.exceptions

    _, port, _, echo = secured
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path}/empty-ccache")
    client = await KerberosClient.open(port)
    with pytest.raises(gssapi.exceptions.GSSError, match=r"(?i)credentials|ccache|not found"):
        await client.authenticate(None)
    # what it can still send instead of a ticket is refused by the server, which keeps serving
    forged = await KerberosClient.open(port)
    with pytest.raises(ServerFatal) as refused:
        await forged.authenticate(None, initiate_token=b"\x60\x00not-a-kerberos-token")
    assert refused.value.exception_class == "javax.security.sasl.SaslException"
    assert refused.value.message == "GSS initiate failed"
    assert echo.calls == []


async def test_a_ticket_for_another_service_is_refused_and_logged_once(
    secured: Any, realm: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    _, port, _, echo = secured
    client = await KerberosClient.open(port)
    with caplog.at_level(logging.WARNING, logger="scm_server.server.hadoop_rpc.server"):
        with pytest.raises(ServerFatal) as refused:
            await client.authenticate(realm["alice"], target=f"HTTP@{HOST}")
        assert await client.closed_by_server()
    assert refused.value.exception_class == "javax.security.sasl.SaslException"
    assert refused.value.header.errorDetail == codec.ErrorCode.FATAL_UNAUTHORIZED
    lines = [r.getMessage() for r in caplog.records if "GSS initiate failed" in r.getMessage()]
    assert len(lines) == 1, lines
    assert f"HTTP/{HOST}" in lines[0], lines[0]  # the reason names the ticket's service
    assert echo.calls == []
    # the server keeps serving
    ok = await KerberosClient.open(port)
    await ok.authenticate(realm["alice"])
    ok.send_context(SECRET_KEY_OM)
    assert (await ok.call(0, SECRET_KEY_OM, "whoami", b"")).header.status == codec.Status.SUCCESS


@pytest.mark.parametrize("secured", [{"hadoop.rpc.protection": "privacy"}], indirect=True)
async def test_privacy_required_refuses_a_client_that_offers_authentication_only(
    secured: Any, realm: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    _, port, _, echo = secured
    polite = await KerberosClient.open(port)  # a Hadoop client refuses on its own side, as Java's does
    with pytest.raises(NoCommonLayer):
        await polite.authenticate(realm["alice"], (Qop.AUTHENTICATION,))
    pushy = await KerberosClient.open(port)  # one that picks authentication anyway is refused by the server
    with caplog.at_level(logging.WARNING, logger="scm_server.server.hadoop_rpc.server"), \
            pytest.raises(ServerFatal) as refused:
        await pushy.authenticate(realm["alice"], force_layer=Qop.AUTHENTICATION.bit)
    assert refused.value.exception_class == "javax.security.sasl.SaslException"
    assert refused.value.message == "Client selected unsupported protection: 1"
    logged = [r.getMessage() for r in caplog.records if "unsupported protection" in r.getMessage()]
    assert len(logged) == 1 and "alice@" in logged[0] and "privacy" in logged[0], logged
    assert echo.calls == []


@pytest.mark.parametrize("secured", [{"hadoop.rpc.protection": "integrity"}], indirect=True)
async def test_an_unwrapped_call_on_an_integrity_connection_is_refused(secured: Any, realm: dict[str, Path]) -> None:
    _, port, _, echo = secured
    client = await KerberosClient.open(port)
    assert await client.authenticate(realm["alice"]) is Qop.INTEGRITY
    client.send_context(SECRET_KEY_OM)
    client.send_call(0, SECRET_KEY_OM, "whoami", b"", wrap=False)
    with pytest.raises(ServerFatal) as refused:
        await client.receive()
    assert "every frame must arrive wrapped" in refused.value.message
    assert echo.calls == []


async def test_a_replayed_sasl_token_is_refused(secured: Any, realm: dict[str, Path]) -> None:
    _, port, _, echo = secured
    first = await KerberosClient.open(port)
    await first.authenticate(realm["alice"])
    captured = first.sent_tokens[0]
    replay = await KerberosClient.open(port)
    with pytest.raises(ServerFatal) as refused:
        await replay.authenticate(realm["alice"], initiate_token=captured)
    assert refused.value.message == "GSS initiate failed"
    assert echo.calls == []


async def test_a_datanode_principal_cannot_call_admin_or_om_only_methods(
    kdc: MiniKdc, realm: dict[str, Path]
) -> None:
    server, port, scm, echo = await serve(
        kdc, realm, **{"hadoop.security.authorization": "true", "ozone.om.kerberos.principal": f"om/_HOST@{kdc.realm}"}
    )
    try:
        dn = await KerberosClient.open(port)
        await dn.authenticate(realm["dn"])
        dn.send_context(LOCATION)
        refused = await dn.call(0, LOCATION, "submitRequest", location_request("ForceExitSafeMode"))
        assert refused.header.status == codec.Status.ERROR
        assert refused.header.exceptionClassName == "org.apache.hadoop.security.AccessControlException"
        assert refused.header.errorMsg == (
            f"Access denied for user dn/{HOST}@{kdc.realm}. SCM superuser privilege is required."
        )
        assert scm.safe_mode, "nothing changed"
        # the OM-only secret-key protocol admits the OM's principal only (the connection is refused)
        om_only = await KerberosClient.open(port)
        await om_only.authenticate(realm["dn"])
        om_only.send_context(SECRET_KEY_OM)
        with pytest.raises(ServerFatal) as fatal:
            await om_only.call(0, SECRET_KEY_OM, "whoami", b"")
        assert fatal.value.exception_class == "org.apache.hadoop.security.authorize.AuthorizationException"
        assert fatal.value.message.startswith(f"User dn/{HOST}@{kdc.realm} (auth:KERBEROS) is not authorized for "
                                              f"protocol interface {SECRET_KEY_OM}: this service is only accessible by om/")
        assert echo.calls == []
        om = await KerberosClient.open(port)
        await om.authenticate(realm["om"])
        om.send_context(SECRET_KEY_OM)
        assert (await om.call(0, SECRET_KEY_OM, "whoami", b"")).body == f"om/{HOST}@{kdc.realm}|True".encode()
    finally:
        await server.stop()


async def test_a_non_administrator_is_refused_an_admin_command_and_an_administrator_is_not(
    secured: Any, realm: dict[str, Path], kdc: MiniKdc
) -> None:
    _, port, scm, _ = secured
    alice = await KerberosClient.open(port)
    await alice.authenticate(realm["alice"])
    alice.send_context(LOCATION)
    refused = await alice.call(0, LOCATION, "submitRequest", location_request("ForceExitSafeMode"))
    assert refused.header.exceptionClassName == "org.apache.hadoop.security.AccessControlException"
    assert refused.header.errorMsg == f"Access denied for user alice@{kdc.realm}. SCM superuser privilege is required."
    assert scm.safe_mode
    # a read any authenticated user may make still works on the same connection
    info = location_response(await alice.call(1, LOCATION, "submitRequest", location_request("GetScmInfo")))
    assert info.getScmInfoResponse.clusterId
    admin = await KerberosClient.open(port)
    await admin.authenticate(realm["admin"])
    admin.send_context(LOCATION)
    done = location_response(await admin.call(0, LOCATION, "submitRequest", location_request("ForceExitSafeMode")))
    assert done.status == wire_loc.ScmContainerLocationResponse.OK
    assert not scm.safe_mode


async def test_reconfiguration_is_refused_to_a_plain_user_and_run_for_an_administrator(
    kdc: MiniKdc, realm: dict[str, Path], tmp_path: Path
) -> None:
    """ReconfigureProtocol on a Kerberized SCM, as Ozone's ReconfigurationHandler guards it with the SCM's
    checkAdminAccess: alice is refused startReconfigure, getReconfigureStatus and listReconfigureProperties with
    Ozone's AccessControlException and no task starts (the changed key keeps its old value); getServerName is
    answered to her; the administrator's startReconfigure runs the task, which applies the changed key."""
    limit = "hdds.scm.replication.datanode.replication.limit"
    site = tmp_path / "ozone-site.xml"

    def write(value: str) -> None:
        site.write_text(f"<?xml version=\"1.0\"?><configuration><property><name>{limit}</name>"
                        f"<value>{value}</value></property></configuration>")

    write("20")
    scm = await make_scm(tmp_path / "meta")
    scm.conf.add_site_xml(site)
    settings = KerberosSettings.from_conf(conf_of(kdc, realm["scm"]), "localhost")
    assert settings is not None
    security = RpcSecurity.load(settings)
    translator = ReconfigureTranslator(scm, authorizer=security.authorizer)
    server = HadoopRpcServer([translator], security=security, idle_timeout=30)
    port = await server.start("127.0.0.1", 0)
    try:
        write("25")  # a change for the task to find
        alice = await KerberosClient.open(port)
        await alice.authenticate(realm["alice"])
        alice.send_context(RECONFIGURE)
        for call_id, method in enumerate(("startReconfigure", "getReconfigureStatus", "listReconfigureProperties")):
            request = getattr(wire_reconf, method[0].upper() + method[1:] + "RequestProto")()
            refused = await alice.call(call_id, RECONFIGURE, method, request)
            assert refused.header.status == codec.Status.ERROR, (method, refused.header)
            assert refused.header.exceptionClassName == "org.apache.hadoop.security.AccessControlException", method
            assert refused.header.errorMsg == (
                f"Access denied for user alice@{kdc.realm}. SCM superuser privilege is required."), method
        assert translator.status.start_ms == 0  # no task was started for her
        assert scm.replication_manager.config.datanode_replication_limit == 20  # nothing applied
        name = await alice.call(9, RECONFIGURE, "getServerName", wire_reconf.GetServerNameRequestProto())
        assert name.header.status == codec.Status.SUCCESS, name.header
        assert name.body is not None and wire_reconf.GetServerNameResponseProto.FromString(name.body).name == "SCM"
        alice.close()

        admin = await KerberosClient.open(port)
        await admin.authenticate(realm["admin"])
        admin.send_context(RECONFIGURE)
        started = await admin.call(0, RECONFIGURE, "startReconfigure", wire_reconf.StartReconfigureRequestProto())
        assert started.header.status == codec.Status.SUCCESS, started.header
        await asyncio.wait_for(translator.wait(), 30)
        answer = await admin.call(1, RECONFIGURE, "getReconfigureStatus", wire_reconf.GetReconfigureStatusRequestProto())
        assert answer.header.status == codec.Status.SUCCESS, answer.header
        assert answer.body is not None
        status = wire_reconf.GetReconfigureStatusResponseProto.FromString(answer.body)
        assert status.HasField("endTime"), status
        assert [(c.name, c.oldValue, c.newValue, c.HasField("errorMessage")) for c in status.changes] == [
            (limit, "20", "25", False)]
        assert scm.replication_manager.config.datanode_replication_limit == 25
        admin.close()
    finally:
        await server.stop()
        await scm.stop()


@pytest.mark.parametrize("secured", [{"hadoop.security.authorization": "true",
                                      "hdds.security.client.scm.container.protocol.acl": "admin"}], indirect=True)
async def test_the_service_acl_refuses_a_user_it_does_not_list(secured: Any, realm: dict[str, Path], kdc: MiniKdc) -> None:
    _, port, _, _ = secured
    alice = await KerberosClient.open(port)
    await alice.authenticate(realm["alice"])
    alice.send_context(LOCATION)
    with pytest.raises(ServerFatal) as fatal:
        await alice.call(0, LOCATION, "submitRequest", location_request("GetScmInfo"))
    assert fatal.value.message == (
        f"User alice@{kdc.realm} (auth:KERBEROS) is not authorized for protocol interface {LOCATION}: "
        "denied by configured ACL"
    )
    admin = await KerberosClient.open(port)
    await admin.authenticate(realm["admin"])
    admin.send_context(LOCATION)
    assert location_response(await admin.call(0, LOCATION, "submitRequest", location_request("GetScmInfo")))


# ---- the server's own keytab ----

def test_a_wrong_keytab_stops_the_start_with_one_line(kdc: MiniKdc, realm: dict[str, Path]) -> None:
    other = kdc.keytab("someone-else")
    settings = KerberosSettings.from_conf(conf_of(kdc, other), "localhost")
    assert settings is not None
    with pytest.raises(ConfigError) as missing_key:
        RpcSecurity.load(settings)
    text = str(missing_key.value)
    assert "\n" not in text and "hdds.scm.kerberos.keytab.file" in text and f"scm/{HOST}@{kdc.realm}" in text
    absent = KerberosSettings.from_conf(conf_of(kdc, Path(kdc.root, "absent.keytab")), "localhost")
    assert absent is not None
    with pytest.raises(ConfigError, match="no readable keytab there"):
        RpcSecurity.load(absent)


SKEWED_TOKEN = """
import sys, gssapi
creds = gssapi.Credentials(usage="initiate", store={"ccache": "FILE:" + sys.argv[1]})
ctx = gssapi.SecurityContext(name=gssapi.Name(sys.argv[2], gssapi.NameType.hostbased_service), creds=creds,
                             usage="initiate", flags=gssapi.RequirementFlag.mutual_authentication)
print(ctx.step().hex())
"""


async def test_a_client_clock_beyond_the_kerberos_skew_is_refused_and_logged(
    secured: Any, kdc: MiniKdc, realm: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    _, port, _, echo = secured
    ccache = kdc.kinit("skewed", kdc.keytab("skewed"))
    kdc.service_ticket(ccache, f"scm/{HOST}")  # fetched with a true clock: the skewed client needs no KDC
    env = {**os.environ, **kdc.env(), "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    made = subprocess.run(
        ["faketime", "-f", "+15m", sys.executable, "-c", SKEWED_TOKEN, str(ccache), f"scm@{HOST}"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert made.returncode == 0, made.stderr
    client = await KerberosClient.open(port)
    with caplog.at_level(logging.WARNING, logger="scm_server.server.hadoop_rpc.server"), \
            pytest.raises(ServerFatal) as refused:
        await client.authenticate(ccache, initiate_token=bytes.fromhex(made.stdout.strip()))
    assert (refused.value.exception_class, refused.value.message) == (
        "javax.security.sasl.SaslException", "GSS initiate failed")
    logged = [r.getMessage() for r in caplog.records if "GSS initiate failed" in r.getMessage()]
    assert len(logged) == 1 and "Clock skew too great" in logged[0], logged
    assert echo.calls == []
