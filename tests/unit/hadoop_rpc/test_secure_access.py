"""The access columns of docs/ozone-compatibility.md hold: each translator, called as each kind of caller, serves
exactly the callers its row names and refuses the others.

The rows come from :mod:`scm_server.server.hadoop_rpc.secure_access` (derived from the authorization rules); the
translators here are the real ones, built as the daemon builds them with Kerberos on (an :class:`Authorizer`,
administrators, the service principals' primaries) or with security off, over a backend that raises
:class:`Reached` on first use: a call that reaches the backend was let through by every check before it. A call
is *refused* when it ends in an access refusal without reaching the backend (an RPC error naming Hadoop's
AccessControlException or AuthorizationException, or the security and secret-key protocols' ``success=false``).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from google.protobuf.message import Message

from scm_server import hadoop_ipc as codec
from scm_server.hadoop_ipc import Call
from scm_server.proto.ozone import ReconfigureProtocol_pb2 as wire_reconf
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import ScmSecretKeyProtocol_pb2 as wire_sk
from scm_server.proto.ozone import ScmServerDatanodeHeartbeatProtocol_pb2 as wire_dn
from scm_server.proto.ozone import ScmServerProtocol_pb2 as wire_block
from scm_server.proto.ozone import ScmServerSecurityProtocol_pb2 as wire_sec
from scm_server.proto.ozone import hdds_pb2 as wire
from scm_server.security.core.identity import Role
from scm_server.server.hadoop_rpc import authorization as authz
from scm_server.server.hadoop_rpc import conformance, secret_key_translator, secure_access
from scm_server.server.hadoop_rpc.block_translator import BlockLocationTranslator
from scm_server.server.hadoop_rpc.container_token import ContainerTokens
from scm_server.server.hadoop_rpc.datanode_translator import DatanodeTranslator
from scm_server.server.hadoop_rpc.location_translator import LocationTranslator
from scm_server.server.hadoop_rpc.reconfigure_translator import ReconfigureTranslator
from scm_server.server.hadoop_rpc.secret_key_translator import SecretKeyService
from scm_server.server.hadoop_rpc.secure_access import Caller
from scm_server.server.hadoop_rpc.security_translator import SecurityTranslator
from scm_server.server.hadoop_rpc.server import RpcCallError

REALM = "EXAMPLE.COM"
DN_HOST, OM_HOST, SCM_HOST = "dn1.example.com", "om1.example.com", "scm2.example.com"
PRINCIPAL = {
    Caller.ANYONE: f"alice@{REALM}",
    Caller.ADMINISTRATOR: f"admin@{REALM}",
    Caller.READONLY_ADMINISTRATOR: f"reader@{REALM}",
    Caller.DATANODE: f"dn/{DN_HOST}@{REALM}",
    Caller.OM: f"om/{OM_HOST}@{REALM}",
    Caller.SCM: f"scm/{SCM_HOST}@{REALM}",
}
CLIENT_PRINCIPALS = {"hdds.datanode.kerberos.principal": f"dn/_HOST@{REALM}",
                     "ozone.om.kerberos.principal": f"om/_HOST@{REALM}",
                     "hdds.scm.kerberos.principal": f"scm/_HOST@{REALM}"}
REFUSALS = (codec.ACCESS_CONTROL, codec.AUTHORIZATION)


class Reached(Exception):
    """The call got past every check and used the SCM behind the translator."""


class Backend:
    """Stands for the facade, the CA and the secret-key manager: it leads (so the leader check lets calls
    through to their own checks), and any other use of it raises :class:`Reached`."""

    def require_leader(self) -> None:
        return None

    def is_leader_ready(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        raise Reached(name)


def authorizer(service_authorization: bool = False) -> authz.Authorizer:
    settings = authz.AuthorizationSettings(
        service_authorization=service_authorization, acls={}, client_principals=CLIENT_PRINCIPALS,
        administrators=("admin",), administrator_groups=(), readonly_administrators=("reader",),
        readonly_administrator_groups=(), auth_to_local=authz.AuthToLocal(None, REALM), starter_user="scm",
    )
    return authz.Authorizer(settings, lambda _short: ())


def translators(secure: bool) -> dict[str, Any]:
    """The translators of one SCM, by conformance key, as the daemon builds them (Kerberos on, or security off)."""
    backend: Any = Backend()
    get: Any = lambda _key: None  # noqa: E731
    if secure:
        check = authorizer()
        admins = ("admin", check.settings.starter_user)  # ozone.administrators and the SCM's own user, as the daemon
        tokens = ContainerTokens(manager=backend, clock=backend, administrators=admins)
        location = LocationTranslator(backend, get, "scm1", "scm1.example.com", authorizer=check,
                                      container_tokens=tokens)
        security = SecurityTranslator(backend, backend, administrators=admins,
                                      primaries={Role.DATANODE: "dn", Role.OM: "om", Role.SCM: "scm"})
        secret_keys = SecretKeyService(backend, None, administrators=admins, require_authentication=True)
    else:
        location = LocationTranslator(backend, get, "scm1", "scm1.example.com")
        security = SecurityTranslator(None, None)
        secret_keys = SecretKeyService(None, None, require_authentication=False)
    return {"block": BlockLocationTranslator(backend, get, "scm1", "scm1.example.com"),
            "datanode": DatanodeTranslator(backend), "location": location, "security": security,
            "secretkey": secret_key_translator.translators(secret_keys)[0],
            "reconfigure": ReconfigureTranslator(backend, authorizer=check if secure else None)}


def request(key: str, command: str, caller: Caller) -> tuple[str, Message]:
    """(method, request) of ``command``, carrying what its checks read (the host a certificate is asked for)."""
    if key == "block":
        return "send", wire_block.SCMBlockLocationRequest(cmdType=wire_block.Type.Value(command), traceID="t")
    if key == "datanode":
        return "submitRequest", wire_dn.SCMDatanodeRequest(cmdType=wire_dn.Type.Value(command), traceID="t")
    if key == "location":
        loc = wire_loc.ScmContainerLocationRequest(cmdType=wire_loc.Type.Value(command), traceID="t")
        if command == "GetContainerToken":
            loc.containerTokenRequest.containerID.id = 7
        elif command == "AllocateContainer":
            loc.containerRequest.CopyFrom(wire_loc.ContainerRequestProto(
                replicationFactor=wire.THREE, replicationType=wire.RATIS, owner="o"))
        elif command == "AllocatePipeline":
            loc.pipelineRequest.CopyFrom(wire_loc.PipelineRequestProto(
                replicationType=wire.RATIS, replicationFactor=wire.THREE))
        return "submitRequest", loc
    if key == "secretkey":
        return "submitRequest", wire_sk.SCMSecretKeyRequest(cmdType=wire_sk.Type.Value(command), traceID="t")
    if key == "reconfigure":
        return command, getattr(wire_reconf, command[0].upper() + command[1:] + "RequestProto")()
    sec = wire_sec.SCMSecurityRequest(cmdType=wire_sec.Type.Value(command), traceID="t")
    host = {Caller.OM: OM_HOST, Caller.SCM: SCM_HOST}.get(caller, DN_HOST)
    if command == "GetSCMCertificate":
        sec.getSCMCertificateRequest.CSR = "csr"
        sec.getSCMCertificateRequest.scmDetails.CopyFrom(wire.ScmNodeDetailsProto(
            scmNodeId="8a2c6f4e-0d1b-4c3e-9f5a-7b6d2e1c0a94", clusterId="c", hostName=host))
    elif command == "GetDataNodeCertificate":
        sec.getDataNodeCertRequest.CSR = "csr"
        sec.getDataNodeCertRequest.datanodeDetails.CopyFrom(wire.DatanodeDetailsProto(
            uuid="u", ipAddress="10.0.0.1", hostName=host))
    elif command == "GetOMCertificate":
        sec.getOMCertRequest.CSR = "csr"
        sec.getOMCertRequest.omDetails.CopyFrom(wire.OzoneManagerDetailsProto(
            uuid="u", ipAddress="10.0.0.1", hostName=host))
    elif command == "GetCert":
        sec.getCertRequest.CSR = "csr"
        sec.getCertRequest.nodeDetails.CopyFrom(wire.NodeDetailsProto(
            uuid="u", hostName=host, clusterId="c", nodeType=wire.OM if caller is Caller.OM else wire.DATANODE))
    elif command == "GetCertificate":
        sec.getCertificateRequest.certSerialId = "1"
    elif command == "ListCertificate":
        sec.listCertificateRequest.CopyFrom(wire_sec.SCMListCertificateRequestProto(
            role=wire.DATANODE, startCertId=0, count=1, isRevoked=False))
    missing = sec.FindInitializationErrors()
    assert not missing, (command, missing)
    return "submitRequest", sec


def verdict(translator: Any, key: str, command: str, caller: Caller, *, authenticated: bool) -> str:
    """``served`` (the call got past its checks) or ``refused: <why>``."""
    method, body = request(key, command, caller)
    user = PRINCIPAL[caller] if authenticated else "alice"
    call = Call(call_id=1, client_id=b"c" * 16, retry_count=0, protocol=translator.protocol, method=method,
                client_version=1, body=body.SerializeToString(), user=user, authenticated=authenticated)
    try:
        answer = asyncio.run(translator.call(method, call))
    except Reached:
        return "served"
    except RpcCallError as exc:
        if exc.exception_class in REFUSALS:
            return f"refused: {exc.message}"
        raise
    if key in ("security", "secretkey"):
        response: Any = (wire_sec.SCMSecurityResponse if key == "security" else wire_sk.SCMSecretKeyResponse)()
        response.ParseFromString(answer)
        if not response.success:
            return f"refused: {response.message}"
    return "served"


def served_rows() -> list[tuple[str, str, secure_access.Access]]:
    return [(p.key, r.command, secure_access.access(p.key, r.command))
            for p in conformance.protocols() for r in conformance.table_rows(p) if r.status == "served"]


def test_every_served_call_of_every_protocol_has_both_columns() -> None:
    for protocol in conformance.protocols():
        for row in conformance.table_rows(protocol):
            assert row.insecure and row.secure, (protocol.key, row.command)
            if row.status == "served":
                rule = secure_access.access(protocol.key, row.command)
                assert rule.callers, (protocol.key, row.command)
                assert (row.insecure, row.secure) == (rule.insecure, rule.secure())
    keys = {p.key for p in conformance.protocols()}
    assert keys == {"block", "datanode", "location", "security", "secretkey", "reconfigure"}


@pytest.mark.parametrize(("key", "command", "rule"), served_rows(), ids=lambda v: v if isinstance(v, str) else "")
def test_kerberos_serves_exactly_the_callers_the_table_names(key: str, command: str, rule: secure_access.Access) -> None:
    translator = translators(secure=True)[key]
    for caller in Caller:
        got = verdict(translator, key, command, caller, authenticated=True)
        expected = "served" if Caller.ANYONE in rule.callers or caller in rule.callers else "refused"
        assert got.startswith(expected), (key, command, caller.name, got)


@pytest.mark.parametrize(("key", "command", "rule"), served_rows(), ids=lambda v: v if isinstance(v, str) else "")
def test_an_insecure_scm_answers_as_the_table_says(key: str, command: str, rule: secure_access.Access) -> None:
    got = verdict(translators(secure=False)[key], key, command, Caller.ANYONE, authenticated=False)
    assert got.startswith("served" if rule.insecure == secure_access.SERVED else "refused"), (key, command, got)


def test_each_secret_key_protocol_name_admits_its_own_principal_under_service_authorization() -> None:
    check = authorizer(service_authorization=True)
    own = {secret_key_translator.PROTOCOL_DATANODE: f"dn/{DN_HOST}@{REALM}",
           secret_key_translator.PROTOCOL_OM: f"om/{OM_HOST}@{REALM}",
           secret_key_translator.PROTOCOL_SCM: f"scm/scm1.example.com@{REALM}"}
    text = secure_access.access("secretkey", "GetSecretKey").by_protocol_name
    for name, principal in own.items():
        assert f"`{name.rsplit('.', 1)[-1]}`: the {principal.split('/')[0].replace('dn', 'datanode').upper()}" \
            .lower() in text.lower(), (name, text)
        host = principal.split("/")[1].split("@")[0]
        assert check.connection(principal, name, host) is None, name
        for other in set(own.values()) - {principal} | {f"alice@{REALM}"}:
            refusal = check.connection(other, name, host)
            assert refusal is not None and refusal.exception_class == codec.AUTHORIZATION, (name, other)


def test_a_translator_that_stops_checking_is_caught() -> None:
    """With the location translator's admin check gone, alice is served an admin command the table refuses her."""
    location = cast(LocationTranslator, translators(secure=True)["location"])
    assert verdict(location, "location", "ForceExitSafeMode", Caller.ANYONE, authenticated=True).startswith("refused")
    location.authorizer = None
    assert verdict(location, "location", "ForceExitSafeMode", Caller.ANYONE, authenticated=True) == "served"
