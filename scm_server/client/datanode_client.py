"""Datanode-side client of StorageContainerDatanodeProtocol (one SCM, no failover).

Datanodes talk to *every* SCM, each through its own endpoint state machine
(SEARCHING_SCM -> REGISTER -> HEARTBEAT), so unlike ``SCMClient`` there is no failover
here: each endpoint sticks to its SCM and reports its own failures.
"""

from __future__ import annotations

import grpc
import grpc.aio

from scm_server import grpc_options
from scm_server.client.errors import SCMUnavailableError
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.grpc_errors import from_grpc_error
from scm_server.proto import scm_datanode_pb2, scm_datanode_pb2_grpc
from scm_server.security.tls import ChannelCache, ChannelSecurity

DATANODE_LIVENESS_S = 5.0


class DatanodeProtocolClient:
    """``security``: the datanode's own certificate under mutual TLS; the channel is re-created when it
    is renewed (the generation moves)."""

    def __init__(self, address: str, timeout: float = 10.0, security: ChannelSecurity | None = None) -> None:
        self.address = address
        self.timeout = timeout
        # Liveness PINGs with a generous timeout: a datanode talks to every SCM on its own, so it needs to
        # notice a vanished SCM (a Pod on a new IP), not to fail over fast; big reports must not trip it.
        self._channels = ChannelCache(security, grpc_options.channel_options(DATANODE_LIVENESS_S))

    @property
    def _stub(self) -> scm_datanode_pb2_grpc.StorageContainerDatanodeProtocolServiceStub:
        return scm_datanode_pb2_grpc.StorageContainerDatanodeProtocolServiceStub(self._channels.get(self.address))

    async def close(self) -> None:
        await self._channels.close()

    def _error(self, err: grpc.aio.AioRpcError) -> Exception:
        exc = from_grpc_error(err.code(), err.details() or "", err.trailing_metadata())
        if exc is not None:
            return exc
        if err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return SCMUnavailableError(self.address, err.details() or err.code().name)
        return SCMException(ResultCodes.INTERNAL_ERROR, f"{self.address}: {err.code().name}: {err.details()}")

    async def get_version(self) -> scm_datanode_pb2.SCMVersionResponseProto:
        try:
            return await self._stub.GetVersion(scm_datanode_pb2.SCMVersionRequestProto(), timeout=self.timeout)
        except grpc.aio.AioRpcError as err:
            raise self._error(err) from err

    async def register(
        self, request: scm_datanode_pb2.SCMRegisterRequestProto
    ) -> scm_datanode_pb2.SCMRegisteredResponseProto:
        try:
            return await self._stub.Register(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as err:
            raise self._error(err) from err

    async def send_heartbeat(
        self, request: scm_datanode_pb2.SCMHeartbeatRequestProto
    ) -> scm_datanode_pb2.SCMHeartbeatResponseProto:
        try:
            return await self._stub.SendHeartbeat(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as err:
            raise self._error(err) from err
