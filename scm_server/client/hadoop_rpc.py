"""A Python Hadoop RPC client (SIMPLE authentication) for SCM's Ozone protocols, over :mod:`scm_server.hadoop_ipc`.

:class:`HadoopRpcConnection` is one connection to one SCM for one protocol: calls are multiplexed by call id
(many in flight, answered in any order), an ERROR answer raises :class:`RemoteError` naming Hadoop's
exception class, a FATAL answer or a lost connection fails every call in flight with :class:`ConnectionLost`.

:class:`BlockLocationClient` speaks ScmBlockLocationProtocol to an HA ring as Ozone's failover proxy does: a
``ServerNotLeaderException`` naming a leader sends the call there, one without a hint or a connection failure
tries the next SCM; every retry of a call keeps its (clientId, callId) and counts ``retryCount``, so an SCM that
already ran it answers from its retry cache. Used by benchmarks and tests.

:class:`LocationClient` is StorageContainerLocationProtocol with the same failover (``ozone-scm admin``'s commands that
Ozone's CLI has and our gRPC admin service does not); :func:`reconfigure_call` one ReconfigureProtocol call.

:class:`HadoopDatanodeClient` is a datanode's StorageContainerDatanodeProtocol to one SCM, with the gRPC
datanode client's interface (the simulator's ``--protocol hadoop-rpc``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections.abc import Sequence
from typing import TypeVar

from google.protobuf import message as pb_message

from scm_server import hadoop_ipc as codec
from scm_server import ozone_wire
from scm_server.client.errors import SCMUnavailableError
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.proto import scm_datanode_pb2
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import ScmServerDatanodeHeartbeatProtocol_pb2 as wire_dn
from scm_server.proto.ozone import ScmServerProtocol_pb2 as wire_block
from scm_server.proto.ozone import hdds_pb2 as wire

LOG = logging.getLogger(__name__)
M = TypeVar("M", bound=pb_message.Message)

BLOCK_PROTOCOL = "org.apache.hadoop.hdds.scm.protocol.ScmBlockLocationProtocol"


class RemoteError(Exception):
    """The server answered ERROR: ``exception_class`` is the Java class Hadoop's client would rebuild."""

    def __init__(self, exception_class: str, message: str, code: int) -> None:
        super().__init__(f"{exception_class}: {message}")
        self.exception_class = exception_class
        self.message = message
        self.code = code


class ConnectionLost(Exception):
    """The connection failed, was closed, or the server sent a FATAL answer (then ``fatal`` is set)."""

    def __init__(self, message: str, fatal: codec.Response | None = None) -> None:
        super().__init__(message)
        self.fatal = fatal


class HadoopRpcConnection:
    def __init__(self, address: str, protocol: str, *, client_id: bytes | None = None, user: str = "") -> None:
        self.address = address
        self.protocol = protocol
        self.client_id = client_id if client_id is not None else os.urandom(codec.CLIENT_ID_LENGTH)
        self.user = user
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[codec.Response]] = {}
        self._lost: ConnectionLost | None = None

    @property
    def open(self) -> bool:
        return self._writer is not None and self._lost is None

    async def connect(self, timeout: float = 5.0) -> None:
        host, _, port = self.address.rpartition(":")
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout)
        writer.write(codec.encode_preamble() + codec.encode_context(self.client_id, self.protocol, self.user))
        self._writer = writer
        self._reader_task = asyncio.create_task(self._read(reader), name=f"hadoop-rpc-read {self.address}")

    async def _read(self, reader: asyncio.StreamReader) -> None:
        decoder = codec.ResponseDecoder()
        reason = ConnectionLost(f"{self.address} closed the connection")
        try:
            while True:
                data = await reader.read(1 << 16)
                if not data:
                    break
                for response in decoder.feed(data):
                    if response.header.status == codec.Status.FATAL:
                        reason = ConnectionLost(
                            f"{self.address}: FATAL {response.header.exceptionClassName}: {response.header.errorMsg}",
                            response,
                        )
                        return
                    future = self._pending.pop(response.call_id, None)
                    if future is not None and not future.done():
                        future.set_result(response)
        except (OSError, codec.FrameError) as exc:
            reason = ConnectionLost(f"{self.address}: {exc}")
        finally:
            self._lost = reason
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(reason)
            self._pending.clear()

    async def call(
        self, method: str, request: pb_message.Message | bytes, *, call_id: int, retry_count: int = -1,
        version: int = 1, timeout: float = 30.0,
    ) -> bytes:
        """The response body of one call; RemoteError on an ERROR answer, ConnectionLost otherwise."""
        if self._writer is None:
            raise ConnectionLost(f"{self.address}: not connected")
        if self._lost is not None:
            raise self._lost
        future: asyncio.Future[codec.Response] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        try:
            self._writer.write(codec.encode_call(call_id, self.client_id, self.protocol, method, request,
                                                 version=version, retry_count=retry_count))
            response = await asyncio.wait_for(future, timeout)
        except TimeoutError as exc:
            raise ConnectionLost(f"{self.address}: no answer to call {call_id} within {timeout}s") from exc
        finally:
            self._pending.pop(call_id, None)
        header = response.header
        if header.status == codec.Status.ERROR:
            raise RemoteError(header.exceptionClassName, header.errorMsg, header.errorDetail)
        return response.body or b""

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(BaseException):
                await self._reader_task


class _FailoverClient:
    """One of SCM's protocols over Hadoop RPC, failing over between ``addresses`` (``host:port``) as Ozone's
    failover proxy does (the protocol named by ``PROTOCOL``)."""

    PROTOCOL = ""

    def __init__(self, addresses: Sequence[str], *, attempts: int = 30, retry_interval: float = 0.1,
                 call_timeout: float = 30.0) -> None:
        if not addresses:
            raise ValueError(f"{type(self).__name__} needs at least one SCM address")
        self.addresses = list(addresses)
        self.attempts = attempts
        self.retry_interval = retry_interval
        self.call_timeout = call_timeout
        self.client_id = os.urandom(codec.CLIENT_ID_LENGTH)  # one client id across connections, as Hadoop's
        self._call_ids = itertools.count()
        self._current = 0
        self._connections: dict[str, HadoopRpcConnection] = {}
        self._connecting = asyncio.Lock()
        self.failovers = 0

    async def __aenter__(self) -> _FailoverClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        conns, self._connections = self._connections, {}
        for conn in conns.values():
            await conn.close()

    @property
    def current(self) -> str:
        return self.addresses[self._current]

    async def _connection(self, address: str) -> HadoopRpcConnection:
        # One connection per SCM: concurrent first calls wait for the one being opened instead of each opening
        # its own (the extra connections' reader tasks were left pending, never closed).
        async with self._connecting:
            conn = self._connections.get(address)
            if conn is None or not conn.open:
                if conn is not None:
                    await conn.close()
                conn = HadoopRpcConnection(address, self.PROTOCOL, client_id=self.client_id)
                await conn.connect()
                self._connections[address] = conn
            return conn

    def _fail_over(self, to: str | None) -> None:
        self.failovers += 1
        if to is not None and to in self.addresses:
            self._current = self.addresses.index(to)
        else:
            self._current = (self._current + 1) % len(self.addresses)

    async def _submit(self, method: str, request: pb_message.Message) -> bytes:
        """One call, retried (same call id) across SCMs until one that leads answers it; its answer's bytes."""
        call_id = next(self._call_ids) & 0x7FFFFFFF
        last: Exception | None = None
        for attempt in range(self.attempts):
            address = self.current
            try:
                conn = await self._connection(address)
                body = await conn.call(method, request, call_id=call_id, retry_count=attempt - 1,
                                       timeout=self.call_timeout)
            except RemoteError as exc:
                if exc.exception_class == codec.RETRIABLE_NO_FAILOVER:  # a leader not ready yet: the same SCM again
                    last = exc
                    LOG.debug("%s: %s", address, exc.message)
                    await asyncio.sleep(self.retry_interval)
                    continue
                if exc.exception_class != codec.SERVER_NOT_LEADER:
                    raise
                last = exc
                hint = codec.suggested_leader(exc.message)
                LOG.debug("%s is not the leader (hint %s)", address, hint)
                self._fail_over(hint)
                if hint is None or hint not in self.addresses:
                    await asyncio.sleep(self.retry_interval)
                continue
            except (ConnectionLost, OSError, TimeoutError) as exc:
                last = exc
                LOG.debug("%s: %s", address, exc)
                self._fail_over(None)
                await asyncio.sleep(self.retry_interval)
                continue
            return body
        raise ConnectionLost(f"no SCM of {self.addresses} answered after {self.attempts} attempts: {last}")


class BlockLocationClient(_FailoverClient):
    """ScmBlockLocationProtocol over Hadoop RPC, failing over between ``addresses`` (``host:port``)."""

    PROTOCOL = BLOCK_PROTOCOL

    async def __aenter__(self) -> BlockLocationClient:
        return self

    async def send(self, request: wire_block.SCMBlockLocationRequest) -> wire_block.SCMBlockLocationResponse:
        """One call, retried (same call id) across SCMs until one that leads answers it."""
        response = wire_block.SCMBlockLocationResponse()
        response.ParseFromString(await self._submit("send", request))
        return response

    async def allocate_blocks(
        self, size: int, num_blocks: int, owner: str, *, factor: int = wire.THREE, rtype: int = wire.RATIS,
        ec: wire.ECReplicationConfig | None = None,
    ) -> wire_block.SCMBlockLocationResponse:
        """AllocateScmBlock; with ``ec`` (Ozone's client sends no factor then) an EC allocation."""
        request = wire_block.AllocateScmBlockRequestProto(size=size, numBlocks=num_blocks, owner=owner, type=rtype)  # type: ignore[arg-type]
        if ec is not None:
            request.type = wire.EC
            request.ecReplicationConfig.CopyFrom(ec)
        else:
            request.factor = factor  # type: ignore[assignment]
        return await self.send(wire_block.SCMBlockLocationRequest(
            cmdType=wire_block.AllocateScmBlock, allocateScmBlockRequest=request,
        ))

    async def get_scm_info(self) -> wire_block.SCMBlockLocationResponse:
        return await self.send(wire_block.SCMBlockLocationRequest(
            cmdType=wire_block.GetScmInfo, getScmInfoRequest=wire.GetScmInfoRequestProto()))


LOCATION_PROTOCOL = "org.apache.hadoop.hdds.scm.protocol.StorageContainerLocationProtocol"
RECONFIGURE_PROTOCOL = "org.apache.hadoop.hdds.protocol.ReconfigureProtocol"


class LocationClient(_FailoverClient):
    """StorageContainerLocationProtocol over Hadoop RPC (what ``ozone admin`` sends), failing over to the
    leader; an SCM's refusal (an ``SCMException``) raises :class:`SCMException` with its result code."""

    PROTOCOL = LOCATION_PROTOCOL

    async def __aenter__(self) -> LocationClient:
        return self

    async def submit(self, request: wire_loc.ScmContainerLocationRequest) -> wire_loc.ScmContainerLocationResponse:
        try:
            body = await self._submit("submitRequest", request)
        except RemoteError as exc:
            raise _scm_exception(exc) from exc
        response = wire_loc.ScmContainerLocationResponse()
        response.ParseFromString(body)
        return response


async def reconfigure_call(address: str, method: str, request: pb_message.Message, response_cls: type[M],
                           timeout: float = 30.0) -> M:
    """One ReconfigureProtocol call to the SCM at ``address`` (each SCM answers for itself: no failover)."""
    conn = HadoopRpcConnection(address, RECONFIGURE_PROTOCOL)
    try:
        await conn.connect()
        body = await conn.call(method, request, call_id=0, timeout=timeout)
    except RemoteError as exc:
        raise _scm_exception(exc) from exc
    finally:
        await conn.close()
    response = response_cls()
    response.ParseFromString(body)
    return response


DATANODE_PROTOCOL = "org.apache.hadoop.ozone.protocol.StorageContainerDatanodeProtocol"
SCM_EXCEPTION = "org.apache.hadoop.hdds.scm.exceptions.SCMException"


class HadoopDatanodeClient:
    """A datanode's StorageContainerDatanodeProtocol to one SCM over Hadoop RPC, with the interface of the gRPC
    ``DatanodeProtocolClient`` (our messages in and out, converted by name to Ozone's on the wire), so the
    simulator can speak either transport. An unreachable SCM raises SCMUnavailableError; an SCM's refusal the
    SCMException it names."""

    def __init__(self, address: str, timeout: float = 10.0) -> None:
        self.address = address
        self.timeout = timeout
        self._conn: HadoopRpcConnection | None = None
        self._connecting = asyncio.Lock()
        self._call_ids = itertools.count()

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def _connection(self) -> HadoopRpcConnection:
        # Datanodes of one simulator share this client: concurrent first calls wait for the connection being
        # opened instead of each opening one (the others' reader tasks were left pending, never closed).
        async with self._connecting:
            if self._conn is None or not self._conn.open:
                if self._conn is not None:
                    await self._conn.close()
                self._conn = HadoopRpcConnection(self.address, DATANODE_PROTOCOL)
                await self._conn.connect(timeout=self.timeout)
            return self._conn

    async def _submit(self, request: wire_dn.SCMDatanodeRequest) -> wire_dn.SCMDatanodeResponse:
        try:
            conn = await self._connection()
            body = await conn.call(
                "submitRequest", request, call_id=next(self._call_ids) & 0x7FFFFFFF, timeout=self.timeout
            )
        except RemoteError as exc:
            raise _scm_exception(exc) from exc
        except (ConnectionLost, OSError, TimeoutError) as exc:
            raise SCMUnavailableError(self.address, str(exc) or type(exc).__name__) from exc
        return wire_dn.SCMDatanodeResponse.FromString(body)

    async def get_version(self) -> scm_datanode_pb2.SCMVersionResponseProto:
        resp = await self._submit(wire_dn.SCMDatanodeRequest(
            cmdType=wire_dn.GetVersion, getVersionRequest=wire_dn.SCMVersionRequestProto()))
        return ozone_wire.by_name(resp.getVersionResponse, scm_datanode_pb2.SCMVersionResponseProto)

    async def register(
        self, request: scm_datanode_pb2.SCMRegisterRequestProto
    ) -> scm_datanode_pb2.SCMRegisteredResponseProto:
        resp = await self._submit(wire_dn.SCMDatanodeRequest(
            cmdType=wire_dn.Register, registerRequest=ozone_wire.register_request_to_wire(request)))
        return ozone_wire.by_name(resp.registerResponse, scm_datanode_pb2.SCMRegisteredResponseProto)

    async def send_heartbeat(
        self, request: scm_datanode_pb2.SCMHeartbeatRequestProto
    ) -> scm_datanode_pb2.SCMHeartbeatResponseProto:
        resp = await self._submit(wire_dn.SCMDatanodeRequest(
            cmdType=wire_dn.SendHeartbeat,
            sendHeartbeatRequest=ozone_wire.by_name(request, wire_dn.SCMHeartbeatRequestProto)))
        return ozone_wire.heartbeat_response_from_wire(resp.sendHeartbeatResponse)


def _scm_exception(exc: RemoteError) -> Exception:
    """The SCMException an SCM's ERROR answer names (``RESULT: message``), else a generic one."""
    if exc.exception_class == SCM_EXCEPTION:
        head, _, rest = exc.message.partition(": ")
        try:
            return SCMException(ResultCodes(head), rest)
        except ValueError:
            return SCMException(ResultCodes.INTERNAL_ERROR, exc.message)  # Ozone's text without our code
    return SCMException(ResultCodes.INTERNAL_ERROR, f"{exc.exception_class}: {exc.message}")
