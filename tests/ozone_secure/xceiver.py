"""A client of Ozone's datanode (XceiverClientProtocolService over gRPC TLS) and of our SCM's GetContainerToken over
Kerberized Hadoop RPC, for the secure tier's token checks.

The datanode's messages come from `xceiver.proto` beside this file, compiled at test time with grpcio-tools (the
project's own protoc) into a temporary directory. A token travels to the datanode as Hadoop's
`Token.encodeToUrlString()`: identifier, password, kind and service written as Hadoop writables (each a vint
length and its bytes), then URL-safe base64 without padding.
"""

from __future__ import annotations

import base64
import importlib
import itertools
import re
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
from grpc_tools import protoc

from scm_server import hadoop_ipc as codec
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import ScmSecretKeyProtocol_pb2 as wire_sk
from scm_server.proto.ozone import hdds_pb2
from scm_server.security.core import secret_keys as sk
from tests.kerberos.sasl_client import KerberosClient

PROTO = Path(__file__).with_name("xceiver.proto")
LOCATION_PROTOCOL = "org.apache.hadoop.hdds.scm.protocol.StorageContainerLocationProtocol"
SECRET_KEY_DATANODE_PROTOCOL = "org.apache.hadoop.hdds.protocol.SecretKeyProtocolDatanode"
SEND = "/hadoop.hdds.datanode.XceiverClientProtocolService/send"
CALL_IDS = itertools.count(1)
_compiled: ModuleType | None = None


def messages() -> ModuleType:
    """The compiled xceiver.proto (once per process)."""
    global _compiled
    if _compiled is None:
        out = Path(tempfile.mkdtemp(prefix="xceiver-proto-"))
        include = str(Path(protoc.__file__).parent / "_proto")
        rc = protoc.main(["protoc", f"-I{PROTO.parent}", f"-I{include}", f"--python_out={out}", PROTO.name])
        if rc != 0:
            raise RuntimeError(f"protoc failed ({rc}) on {PROTO}")
        sys.path.insert(0, str(out))
        try:
            _compiled = importlib.import_module("xceiver_pb2")
        finally:
            sys.path.remove(str(out))
    return _compiled


def _vint(n: int) -> bytes:
    """Hadoop's WritableUtils.writeVInt (lengths here are never negative)."""
    if -112 <= n <= 127:
        return bytes([n & 0xFF])
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([(-112 - len(raw)) & 0xFF]) + raw


def encode_token(token: hdds_pb2.TokenProto) -> str:
    """Hadoop's `Token.encodeToUrlString()` of `token`."""
    kind, service = token.kind.encode(), token.service.encode()
    raw = b"".join(_vint(len(part)) + part for part in (token.identifier, token.password, kind, service))
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


async def container_token(client_port: int, ccache: Path, container_id: int) -> hdds_pb2.TokenProto:
    """GetContainerToken from the SCM at `client_port`, over Kerberos with the tickets in `ccache`."""
    client = await KerberosClient.open(client_port)
    try:
        await client.authenticate(ccache)
        client.send_context(LOCATION_PROTOCOL)
        request = wire_loc.ScmContainerLocationRequest(cmdType=wire_loc.GetContainerToken, traceID="secure-tier")
        request.containerTokenRequest.containerID.id = container_id
        answer = await client.call(next(CALL_IDS), LOCATION_PROTOCOL, "submitRequest", request)
        assert answer.header.status == codec.Status.SUCCESS, answer.header
        assert answer.body is not None
        response = wire_loc.ScmContainerLocationResponse.FromString(answer.body)
        assert response.status == wire_loc.ScmContainerLocationResponse.OK, response
        return response.containerTokenResponse.token
    finally:
        client.close()


async def current_secret_key(security_port: int, ccache: Path) -> sk.SecretKey:
    """GetCurrentSecretKey from the SCM at `security_port` as a datanode asks it (SecretKeyProtocolDatanode, over
    Kerberos with the datanode principal's tickets in `ccache`): the key block and container tokens are signed with
    now."""
    client = await KerberosClient.open(security_port)
    try:
        await client.authenticate(ccache)
        client.send_context(SECRET_KEY_DATANODE_PROTOCOL)
        request = wire_sk.SCMSecretKeyRequest(cmdType=wire_sk.GetCurrentSecretKey, traceID="secure-tier")
        answer = await client.call(next(CALL_IDS), SECRET_KEY_DATANODE_PROTOCOL, "submitRequest", request)
        assert answer.header.status == codec.Status.SUCCESS, answer.header
        assert answer.body is not None
        response = wire_sk.SCMSecretKeyResponse.FromString(answer.body)
        assert response.success, response.message
        return sk.SecretKey.from_proto(response.currentSecretKeyResponseProto.secretKey)
    finally:
        client.close()


def datanode_uuid(datanode_id_file: Path) -> str:
    """The uuid in a datanode's `datanode.id` (Ozone writes it as YAML, in flow style)."""
    m = re.search(r"^\s*uuid:\s*'?([0-9a-f-]{36})'?,?\s*$", datanode_id_file.read_text(), re.M)
    if m is None:
        raise AssertionError(f"no uuid in {datanode_id_file}")
    return m.group(1)


def read_container(port: int, root_ca_pem: bytes, dn_uuid: str, container_id: int,
                   encoded_token: str | None) -> Any:
    """ReadContainer on the datanode's gRPC port over TLS (its certificate checked against our root CA, for the host
    name `localhost` its certificate names); the datanode's answer."""
    pb = messages()
    request = pb.ContainerCommandRequestProto(
        cmdType=pb.ReadContainer, traceID="secure-tier", containerID=container_id, datanodeUuid=dn_uuid,
        readContainer=pb.ReadContainerRequestProto(),
    )
    if encoded_token is not None:
        request.encodedToken = encoded_token
    credentials = grpc.ssl_channel_credentials(root_certificates=root_ca_pem)
    options = [("grpc.ssl_target_name_override", "localhost")]
    with grpc.secure_channel(f"127.0.0.1:{port}", credentials, options=options) as channel:
        send = channel.stream_stream(SEND, request_serializer=pb.ContainerCommandRequestProto.SerializeToString,
                                     response_deserializer=pb.ContainerCommandResponseProto.FromString)
        return next(iter(send(iter([request]), timeout=60)))
