"""Hadoop IPC (version 9) framing as a pure state machine: bytes in, events out, bytes to send.

No I/O, clock or asyncio here (checked by the ``hadoop-rpc-codec-is-pure`` import contract); the
server's asyncio edge (:mod:`scm_server.server.hadoop_rpc.server`) feeds what it reads into a
:class:`ConnectionDecoder` and writes what the ``encode_*`` functions return; the client
(:mod:`scm_server.client.hadoop_rpc`) uses the ``encode_call`` / :class:`ResponseDecoder` side. Both
also share how a follower names the leader (:func:`not_leader_message`, :func:`suggested_leader`).

The wire, as Hadoop's ``ipc.Client`` speaks it::

    preamble   "hrpc" | version (1 byte, 9) | service class (1 byte) | auth protocol (1 byte: 0 SIMPLE, -33 SASL)
    frame      length (4 bytes, big-endian, of what follows) | varint-delimited messages
    context    frame: RpcRequestHeaderProto(callId -3) | IpcConnectionContextProto      (once, first)
    call       frame: RpcRequestHeaderProto(callId >= 0) | RequestHeaderProto | request
    ping       frame: RpcRequestHeaderProto(callId -4)                                  (ignored)
    response   frame: RpcResponseHeaderProto | response (SUCCESS only)

With Kerberos (a :class:`~scm_server.hadoop_sasl.SaslServer` given to the decoder) the preamble names SASL
(-33) and the SASL exchange comes first, on call id -33 (:mod:`scm_server.hadoop_sasl`); the connection
context follows it. Under integrity or privacy every later frame, both ways, travels inside a frame of
call id -33 carrying an RpcSaslProto WRAP whose token unwraps to a stream of the frames above
(:meth:`ConnectionDecoder.seal` wraps an answer). A SIMPLE client of a Kerberos server is refused as
Hadoop refuses it.

A frame longer than the configured maximum is refused when its length arrives, before any of it
is buffered. Whatever the decoder cannot accept becomes a :class:`Fatal` event: the edge sends
:func:`encode_fatal` and closes the connection.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import struct
from typing import NamedTuple

from google.protobuf import message as pb_message

from scm_server import hadoop_sasl
from scm_server.proto.ozone import IpcConnectionContext_pb2, ProtobufRpcEngine_pb2, RpcHeader_pb2

MAGIC = b"hrpc"
VERSION = 9
PREAMBLE_LENGTH = 7
AUTH_SIMPLE = 0
AUTH_SASL = 0xDF  # -33 as a signed byte

CONNECTION_CONTEXT_CALL_ID = -3
PING_CALL_ID = -4
SASL_CALL_ID = -33
INVALID_CALL_ID = -1  # the call id of a fatal answer sent before a call id is known

DEFAULT_MAX_FRAME = 64 << 20  # Hadoop's ipc.maximum.data.length default
CLIENT_ID_LENGTH = 16

_LENGTH = struct.Struct(">i")

RpcRequestHeader = RpcHeader_pb2.RpcRequestHeaderProto
RpcResponseHeader = RpcHeader_pb2.RpcResponseHeaderProto
Status = RpcResponseHeader.RpcStatusProto
ErrorCode = RpcResponseHeader.RpcErrorCodeProto

# the enum values read on every call, as plain ints (an attribute of protobuf's enum wrapper is a Python
# __getattr__ each time)
_RPC_PROTOCOL_BUFFER = RpcHeader_pb2.RpcKindProto.Value("RPC_PROTOCOL_BUFFER")
_RPC_FINAL_PACKET = RpcRequestHeader.OperationProto.Value("RPC_FINAL_PACKET")
_RPC_CLOSE_CONNECTION = RpcRequestHeader.OperationProto.Value("RPC_CLOSE_CONNECTION")
_SUCCESS = Status.Value("SUCCESS")
_FATAL_INVALID_RPC_HEADER = ErrorCode.Value("FATAL_INVALID_RPC_HEADER")
_FATAL_DESERIALIZING_REQUEST = ErrorCode.Value("FATAL_DESERIALIZING_REQUEST")

# Exception classes a Hadoop client maps errors to (it rebuilds them by name from the answer).
IPC_EXCEPTION = "org.apache.hadoop.ipc.IpcException"
VERSION_MISMATCH = "org.apache.hadoop.ipc.RPC$VersionMismatch"
ACCESS_CONTROL = "org.apache.hadoop.security.AccessControlException"
AUTHORIZATION = "org.apache.hadoop.security.authorize.AuthorizationException"
NO_SUCH_PROTOCOL = "org.apache.hadoop.ipc.RpcNoSuchProtocolException"
NO_SUCH_METHOD = "org.apache.hadoop.ipc.RpcNoSuchMethodException"
SERVER_EXCEPTION = "org.apache.hadoop.ipc.RpcServerException"

# What a plain HTTP client sent to this port gets before the connection is closed.
HTTP_ANSWER = (
    b"HTTP/1.1 404 Not Found\r\nContent-type: text/plain\r\nConnection: close\r\n\r\n"
    b"This is a Hadoop IPC port of Ozone SCM (ozone-scm); it does not speak HTTP.\r\n"
)

# The HTTP/2 connection preface, which a gRPC client sends first; what the Hadoop IPC server answers and logs then.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
GRPC_ON_HADOOP_PORT = (
    "an HTTP/2 (gRPC) client reached a Hadoop IPC port: Ozone's port keys (ozone.scm.client.port 9860, "
    "ozone.scm.datanode.port 9861, ozone.scm.block.client.port 9863, ozone.scm.security.service.port 9961) serve "
    "Hadoop RPC; this SCM's gRPC services are on ozone.scm.<x>.grpc.port (default 19860, 19861, 19863, 19961)"
)


# ---- varints ----

def encode_varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative ``value``."""
    if value < 0x80:
        if value < 0:
            raise ValueError(f"varint of a negative number: {value}")
        return _ONE_BYTE[value]
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    out = []
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_ONE_BYTE = [bytes((i,)) for i in range(0x80)]


class FrameError(Exception):
    """A frame's content cannot be read; carries the Hadoop error code to answer with."""

    def __init__(self, code: int, message: str, call_id: int = INVALID_CALL_ID) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.call_id = call_id


def decode_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(value, position after it); FrameError when the bytes end or the varint is longer than 10 bytes."""
    if pos < len(data) and data[pos] < 0x80:  # one byte: every header's and most requests' length
        return data[pos], pos + 1
    result = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise FrameError(ErrorCode.FATAL_DESERIALIZING_REQUEST, "a varint length runs past the end of the frame")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise FrameError(ErrorCode.FATAL_DESERIALIZING_REQUEST, "a varint length is longer than 10 bytes")


def delimited(message: pb_message.Message | bytes) -> bytes:
    body = message if isinstance(message, bytes) else message.SerializeToString()
    return encode_varint(len(body)) + body


def read_delimited(data: bytes | memoryview, pos: int, what: str) -> tuple[bytes, int]:
    """The bytes of one varint-delimited message and the position after it."""
    size, pos = decode_varint(data, pos)
    end = pos + size
    if end > len(data):
        raise FrameError(
            ErrorCode.FATAL_DESERIALIZING_REQUEST,
            f"{what} claims {size} bytes but only {len(data) - pos} remain in the frame",
        )
    return bytes(data[pos:end]), end


def parse(cls: type[pb_message.Message], raw: bytes, what: str, code: int, call_id: int = INVALID_CALL_ID) -> pb_message.Message:
    msg = cls()
    try:
        msg.ParseFromString(raw)
    except pb_message.DecodeError as exc:
        raise FrameError(code, f"malformed {what}: {exc}", call_id) from exc
    if msg.IsInitialized():  # in C; the walk naming what is missing only when something is
        return msg
    missing = msg.FindInitializationErrors()  # type: ignore[attr-defined]
    if missing:
        raise FrameError(code, f"{what} lacks required field(s) {', '.join(missing)}", call_id)
    return msg


# ---- events ----

@dataclasses.dataclass(frozen=True)
class Preamble:
    version: int
    service_class: int
    auth_protocol: int


@dataclasses.dataclass(frozen=True)
class ConnectionContext:
    protocol: str
    effective_user: str
    real_user: str


class Call(NamedTuple):
    """One call: who (client id, call id, retry count), what (protocol, method, version) and its body.

    ``user`` is the caller every authorization check judges: the SASL-authenticated principal on a
    secure connection, else the effective user of the connection context (empty before one arrived).
    ``authenticated`` says which of the two it is. A named tuple, not a frozen dataclass: one is made
    for every call, and a frozen dataclass sets each field through ``object.__setattr__``.
    """

    call_id: int
    client_id: bytes
    retry_count: int
    protocol: str
    method: str
    client_version: int
    body: bytes
    user: str = ""
    authenticated: bool = False


@dataclasses.dataclass(frozen=True)
class Ping:
    pass


@dataclasses.dataclass(frozen=True)
class CloseRequested:
    """The client asked to close the connection (RPC_CLOSE_CONNECTION)."""


@dataclasses.dataclass(frozen=True)
class HttpRequest:
    """The first bytes were an HTTP request, not the preamble."""


@dataclasses.dataclass(frozen=True)
class Fatal:
    """The connection must end: answer with :func:`encode_fatal` (callId, errorDetail, class, message) and close.
    ``reason`` and ``principal`` are for the server's log only (a failed SASL exchange: the GSS library's
    words and who tried)."""

    call_id: int
    code: int
    exception_class: str
    message: str
    reason: str = ""
    principal: str = ""


@dataclasses.dataclass(frozen=True)
class SaslReply:
    """A SASL answer frame to write as it is (never wrapped)."""

    data: bytes


@dataclasses.dataclass(frozen=True)
class Authenticated:
    """SASL succeeded: every later call on the connection is ``principal``'s, with ``qop`` protection."""

    principal: str
    qop: hadoop_sasl.Qop


Event = Preamble | ConnectionContext | Call | Ping | CloseRequested | HttpRequest | Fatal | SaslReply | Authenticated


class _State(enum.Enum):
    PREAMBLE = "preamble"
    SASL = "sasl"
    CONTEXT = "context"
    CALLS = "calls"
    CLOSED = "closed"


class _Framer:
    """Length-prefixed frames out of a byte stream (the socket's, or the unwrapped stream of WRAP tokens)."""

    def __init__(self, max_frame: int) -> None:
        self.max_frame = max_frame
        self.buf = bytearray()
        self._need: int | None = None  # body length of the frame being read

    def take(self) -> bytes | None:
        """The next whole frame's body, or None until more bytes arrive; FrameError for a length out of range."""
        if self._need is None:
            if len(self.buf) < _LENGTH.size:
                return None
            (length,) = _LENGTH.unpack_from(self.buf)
            if length < 0 or length > self.max_frame:
                raise FrameError(
                    ErrorCode.FATAL_INVALID_RPC_HEADER,
                    f"frame length {length} is outside 0..{self.max_frame} (ipc.maximum.data.length)",
                )
            del self.buf[: _LENGTH.size]
            self._need = length
        if len(self.buf) < self._need:
            return None
        frame = bytes(self.buf[: self._need])
        del self.buf[: self._need]
        self._need = None
        return frame


_TERMINAL = (Fatal, CloseRequested, HttpRequest)


class ConnectionDecoder:
    """Incremental decoder of one connection. :meth:`feed` takes any slice of the byte stream and
    returns the complete events in it; after a :class:`Fatal`, :class:`CloseRequested` or
    :class:`HttpRequest` it returns nothing more (the edge closes the connection).

    With ``sasl`` (Kerberos) the client must authenticate first; its principal is then the caller
    (``Call.user``, ``authenticated=True``) of every call, and answers go out through :meth:`seal`."""

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME, sasl: hadoop_sasl.SaslServer | None = None) -> None:
        if max_frame < 1:
            raise ValueError(f"max_frame must be positive, got {max_frame}")
        self.max_frame = max_frame
        self._state = _State.PREAMBLE
        self._buf = bytearray()
        self._outer = _Framer(max_frame)
        self._inner = _Framer(max_frame)  # the unwrapped stream under integrity/privacy
        self._sasl = sasl
        self._layer: hadoop_sasl.SecurityLayer | None = None
        self.principal = ""  # the SASL-authenticated caller ('' before SASL or without it)
        self.context: ConnectionContext | None = None

    @property
    def closed(self) -> bool:
        return self._state is _State.CLOSED

    @property
    def awaiting_preamble(self) -> bool:
        return self._state is _State.PREAMBLE

    def seal(self, frame: bytes) -> bytes:
        """An answer frame as it must leave: wrapped in an RpcSaslProto WRAP under integrity/privacy."""
        if self._layer is None:
            return frame
        token = self._layer.wrap(frame)
        message = hadoop_sasl.RpcSasl(state=hadoop_sasl.SaslState.WRAP, token=token)
        return _frame(delimited(_response_header(SASL_CALL_ID, Status.SUCCESS, b"", -1)), delimited(message))

    def feed(self, data: bytes) -> list[Event]:
        if self._state is _State.CLOSED:
            return []
        events: list[Event] = []
        if self._state is _State.PREAMBLE:
            self._buf += data
            event = self._preamble()
            if event is None:
                return events
            events.append(event)
            if isinstance(event, _TERMINAL):
                self._close()
                return events
            data = bytes(self._buf)
            self._buf.clear()
        self._outer.buf += data
        while self._state is not _State.CLOSED:
            try:
                frame = self._outer.take()
                if frame is None:
                    break
                got = self._frame(frame)
            except FrameError as exc:
                got = [Fatal(exc.call_id, exc.code, IPC_EXCEPTION, exc.message)]
            for event in got:
                events.append(event)
                if isinstance(event, _TERMINAL):
                    self._close()
                    break
        return events

    def _close(self) -> None:
        self._state = _State.CLOSED
        self._buf.clear()
        self._outer.buf.clear()
        self._inner.buf.clear()

    def _preamble(self) -> Event | None:
        if len(self._buf) < PREAMBLE_LENGTH:
            head = bytes(self._buf[:4])
            if not any(p.startswith(head) for p in (MAGIC, b"GET ", HTTP2_PREFACE[:4])):
                return self._bad_preamble()
            return None
        head = bytes(self._buf[:PREAMBLE_LENGTH])
        if head[:4] != MAGIC:
            return self._bad_preamble()
        version, service_class, auth = head[4], head[5], head[6]
        del self._buf[:PREAMBLE_LENGTH]
        if version != VERSION:
            return Fatal(
                INVALID_CALL_ID, ErrorCode.FATAL_VERSION_MISMATCH, VERSION_MISMATCH,
                f"Hadoop IPC version {version} is not served: this SCM speaks version {VERSION}",
            )
        if auth == AUTH_SIMPLE and self._sasl is not None:
            return Fatal(
                INVALID_CALL_ID, ErrorCode.FATAL_UNAUTHORIZED, ACCESS_CONTROL,
                f"SIMPLE authentication is not enabled.  Available:[{hadoop_sasl.KERBEROS}]",
                reason="a SIMPLE client of a server with hadoop.security.authentication=kerberos",
            )
        if auth == AUTH_SASL and self._sasl is not None:
            self._state = _State.SASL
            return Preamble(version, service_class, auth)
        if auth != AUTH_SIMPLE:
            what = "SASL (Kerberos or token)" if auth == AUTH_SASL else f"auth protocol {auth}"
            return Fatal(
                INVALID_CALL_ID, ErrorCode.FATAL_UNAUTHORIZED, ACCESS_CONTROL,
                f"{what} authentication is not served: this SCM accepts SIMPLE authentication only "
                "(hadoop.security.authentication=simple)",
            )
        self._state = _State.CONTEXT
        return Preamble(version, service_class, auth)

    def _bad_preamble(self) -> Event:
        head = bytes(self._buf[:4])
        if head.startswith(b"GET ") or head.startswith(b"POST") or head.startswith(b"HEAD"):
            return HttpRequest()
        if head == HTTP2_PREFACE[:4]:
            return Fatal(INVALID_CALL_ID, ErrorCode.FATAL_INVALID_RPC_HEADER, IPC_EXCEPTION, GRPC_ON_HADOOP_PORT)
        return Fatal(
            INVALID_CALL_ID, ErrorCode.FATAL_INVALID_RPC_HEADER, IPC_EXCEPTION,
            f"the connection did not start with the Hadoop IPC preamble 'hrpc' (got {head!r})",
        )

    def _frame(self, frame: bytes) -> list[Event]:
        """One frame off the socket: SASL during the exchange, WRAP tokens under integrity/privacy, else
        the frame itself."""
        header, pos = self._header(frame)
        call_id = header.callId
        try:
            if self._state is _State.SASL:
                return self._during_sasl(header, frame, pos)
            if self._sasl is not None and (self._layer is not None or call_id == SASL_CALL_ID):
                return self._after_sasl(header, frame, pos)
            event = self._after_header(header, frame, pos)
            return [] if event is None else [event]
        except FrameError as exc:
            if exc.call_id == INVALID_CALL_ID:  # the answer names the call once its id is known
                exc.call_id = call_id
            raise

    @staticmethod
    def _header(frame: bytes) -> tuple[RpcRequestHeader, int]:
        raw, pos = read_delimited(frame, 0, "RpcRequestHeaderProto")
        header = parse(RpcRequestHeader, raw, "RpcRequestHeaderProto", _FATAL_INVALID_RPC_HEADER)
        assert isinstance(header, RpcRequestHeader)
        return header, pos

    def _sasl_message(self, frame: bytes, pos: int) -> hadoop_sasl.RpcSasl:
        raw, _ = read_delimited(frame, pos, "RpcSaslProto")
        message = parse(hadoop_sasl.RpcSasl, raw, "RpcSaslProto", ErrorCode.FATAL_DESERIALIZING_REQUEST, SASL_CALL_ID)
        assert isinstance(message, hadoop_sasl.RpcSasl)
        return message

    def _during_sasl(self, header: RpcRequestHeader, frame: bytes, pos: int) -> list[Event]:
        call_id = header.callId
        if call_id == PING_CALL_ID:
            return [Ping()]
        if call_id == CONNECTION_CONTEXT_CALL_ID:
            raise FrameError(ErrorCode.FATAL_INVALID_RPC_HEADER, "Connection header sent during SASL negotiation")
        if call_id >= 0:
            raise FrameError(ErrorCode.FATAL_INVALID_RPC_HEADER, "Connection context not established")
        if call_id != SASL_CALL_ID:
            raise FrameError(ErrorCode.FATAL_INVALID_RPC_HEADER, f"Unknown out of band call #{call_id}")
        assert self._sasl is not None
        message = self._sasl_message(frame, pos)
        try:
            reply, established = self._sasl.receive(message)
        except hadoop_sasl.SaslRefused as exc:
            return [Fatal(SASL_CALL_ID, ErrorCode.FATAL_UNAUTHORIZED, exc.exception_class, exc.message,
                          reason=exc.reason, principal=exc.principal)]
        events: list[Event] = []
        if reply is not None:
            events.append(SaslReply(encode_sasl_reply(reply)))
        if established is not None:
            self._layer = established.layer
            self.principal = established.principal
            self._state = _State.CONTEXT
            events.append(Authenticated(established.principal, established.qop))
        return events

    def _after_sasl(self, header: RpcRequestHeader, frame: bytes, pos: int) -> list[Event]:
        call_id = header.callId
        if call_id != SASL_CALL_ID:  # only under integrity/privacy (see _frame)
            raise FrameError(
                ErrorCode.FATAL_INVALID_RPC_HEADER,
                f"call {call_id} arrived unwrapped, but this connection negotiated SASL "
                f"{self._layer.qop.hadoop_name if self._layer else ''}: every frame must arrive wrapped",
            )
        message = self._sasl_message(frame, pos)
        if message.state != hadoop_sasl.SaslState.WRAP:
            raise FrameError(ErrorCode.FATAL_INVALID_RPC_HEADER, "Negotiation is already complete")
        if self._layer is None:
            raise FrameError(ErrorCode.FATAL_INVALID_RPC_HEADER, "Server is not wrapping data")
        try:
            self._inner.buf += self._layer.unwrap(message.token)
        except hadoop_sasl.GssError as exc:
            return [Fatal(SASL_CALL_ID, ErrorCode.FATAL_UNAUTHORIZED, hadoop_sasl.SASL_EXCEPTION,
                          "a SASL-wrapped frame did not verify", reason=str(exc), principal=self.principal)]
        events: list[Event] = []
        while (inner := self._inner.take()) is not None:
            inner_header, inner_pos = self._header(inner)
            try:
                if inner_header.callId == SASL_CALL_ID:
                    raise FrameError(ErrorCode.FATAL_INVALID_RPC_HEADER, "Negotiation is already complete")
                event = self._after_header(inner_header, inner, inner_pos)
            except FrameError as exc:
                if exc.call_id == INVALID_CALL_ID:
                    exc.call_id = inner_header.callId
                raise
            if event is not None:
                events.append(event)
                if isinstance(event, _TERMINAL):
                    break
        return events

    def _after_header(self, header: RpcRequestHeader, frame: bytes, pos: int) -> Event | None:
        call_id = header.callId
        if header.rpcKind != _RPC_PROTOCOL_BUFFER and header.HasField("rpcKind"):
            raise FrameError(
                ErrorCode.FATAL_INVALID_RPC_HEADER,
                f"rpc kind {RpcHeader_pb2.RpcKindProto.Name(header.rpcKind)} is not served "
                "(only RPC_PROTOCOL_BUFFER)",
                call_id,
            )
        op = header.rpcOp
        if op == _RPC_CLOSE_CONNECTION:
            return CloseRequested()
        if op != _RPC_FINAL_PACKET:
            raise FrameError(ErrorCode.FATAL_INVALID_RPC_HEADER, "continuation packets are not served", call_id)
        if len(header.clientId) not in (0, CLIENT_ID_LENGTH):
            raise FrameError(
                ErrorCode.FATAL_INVALID_RPC_HEADER,
                f"clientId has {len(header.clientId)} bytes; Hadoop clients send {CLIENT_ID_LENGTH}",
                call_id,
            )
        if self._state is _State.CONTEXT:
            if call_id != CONNECTION_CONTEXT_CALL_ID:
                if call_id == SASL_CALL_ID:
                    raise FrameError(
                        ErrorCode.FATAL_UNAUTHORIZED, "SASL negotiation is not served: SIMPLE authentication only",
                        call_id,
                    )
                raise FrameError(
                    ErrorCode.FATAL_INVALID_RPC_HEADER,
                    f"call {call_id} arrived before the connection context (call id {CONNECTION_CONTEXT_CALL_ID})",
                    call_id,
                )
            raw, pos = read_delimited(frame, pos, "IpcConnectionContextProto")
            ctx = parse(
                IpcConnectionContext_pb2.IpcConnectionContextProto, raw, "IpcConnectionContextProto",
                ErrorCode.FATAL_DESERIALIZING_REQUEST, call_id,
            )
            assert isinstance(ctx, IpcConnectionContext_pb2.IpcConnectionContextProto)
            effective = ctx.userInfo.effectiveUser
            if self.principal and effective and effective != self.principal:
                # Hadoop would make a proxy user and check hadoop.proxyuser.*; no one may impersonate here
                return Fatal(
                    call_id, ErrorCode.FATAL_UNAUTHORIZED, AUTHORIZATION,
                    f"User: {self.principal} is not allowed to impersonate {effective}",
                    reason="the connection context names another user", principal=self.principal,
                )
            self._state = _State.CALLS
            self.context = ConnectionContext(ctx.protocol, effective, ctx.userInfo.realUser)
            return self.context
        if call_id == PING_CALL_ID:
            return Ping()
        if call_id < 0:
            raise FrameError(
                ErrorCode.FATAL_INVALID_RPC_HEADER,
                f"call id {call_id} is not served (the connection context was already sent)",
                call_id,
            )
        raw, pos = read_delimited(frame, pos, "RequestHeaderProto")
        req = parse(
            ProtobufRpcEngine_pb2.RequestHeaderProto, raw, "RequestHeaderProto", _FATAL_DESERIALIZING_REQUEST, call_id,
        )
        assert isinstance(req, ProtobufRpcEngine_pb2.RequestHeaderProto)
        body, pos = read_delimited(frame, pos, f"the request of {req.methodName}")
        if pos != len(frame):
            raise FrameError(
                ErrorCode.FATAL_DESERIALIZING_REQUEST,
                f"{len(frame) - pos} bytes follow the request of {req.methodName} in its frame",
                call_id,
            )
        return Call(
            call_id=call_id,
            client_id=header.clientId,
            retry_count=header.retryCount,
            protocol=req.declaringClassProtocolName,
            method=req.methodName,
            client_version=req.clientProtocolVersion,
            body=body,
            user=self.principal or (self.context.effective_user if self.context is not None else ""),
            authenticated=bool(self.principal),
        )


# ---- encoders ----

def _frame(*parts: bytes) -> bytes:
    payload = b"".join(parts)
    return _LENGTH.pack(len(payload)) + payload


def _response_header(call_id: int, status: int, client_id: bytes, retry_count: int) -> RpcResponseHeader:
    header = RpcResponseHeader(
        callId=call_id & 0xFFFFFFFF,  # uint32 on the wire: a negative id travels as its two's complement
        status=status,  # type: ignore[arg-type]
        serverIpcVersionNum=VERSION,
        retryCount=retry_count,
    )
    if client_id:
        header.clientId = client_id
    return header


def encode_success(call: Call, response: pb_message.Message | bytes) -> bytes:
    """The SUCCESS answer of ``call`` carrying ``response`` (a message, or one already serialized).

    Its ``RpcResponseHeaderProto`` is written directly, field by field in field order as protobuf writes it
    (callId, status SUCCESS, serverIpcVersionNum, clientId when the call had one, retryCount zigzag-encoded as
    the sint32 it is): the same bytes (a test holds it to protobuf's serialization), without a message built
    and serialized for every answer."""
    client_id = call.client_id
    retry = call.retry_count
    header = b"".join((
        b"\x08", encode_varint(call.call_id & 0xFFFFFFFF), _SUCCESS_STATUS_AND_VERSION,
        (b":" + encode_varint(len(client_id)) + client_id) if client_id else b"",
        b"@", encode_varint((retry << 1) ^ (retry >> 31) if -0x80000000 <= retry < 0x80000000 else _bad_retry(retry)),
    ))
    body = response if isinstance(response, bytes) else response.SerializeToString()
    payload = b"".join((encode_varint(len(header)), header, encode_varint(len(body)), body))
    return _LENGTH.pack(len(payload)) + payload


_SUCCESS_STATUS_AND_VERSION = bytes((0x10, _SUCCESS, 0x18, VERSION))  # status = SUCCESS, serverIpcVersionNum


def _bad_retry(retry: int) -> int:
    raise ValueError(f"retryCount {retry} is not a sint32")


def encode_error(call: Call, exception_class: str, message: str, code: int = ErrorCode.ERROR_APPLICATION) -> bytes:
    """An ERROR answer: the call failed, the connection stays open."""
    header = _response_header(call.call_id, Status.ERROR, call.client_id, call.retry_count)
    header.exceptionClassName = exception_class
    header.errorMsg = message
    header.errorDetail = code  # type: ignore[assignment]
    return _frame(delimited(header))


def encode_sasl_reply(message: hadoop_sasl.RpcSasl) -> bytes:
    """The server's SASL answer frame (call id -33, SUCCESS header, the RpcSaslProto)."""
    return _frame(delimited(_response_header(SASL_CALL_ID, Status.SUCCESS, b"", -1)), delimited(message))


def encode_fatal(fatal: Fatal) -> bytes:
    """A FATAL answer: sent last, then the connection is closed."""
    header = _response_header(fatal.call_id, Status.FATAL, b"", -1)
    header.exceptionClassName = fatal.exception_class
    header.errorMsg = fatal.message
    header.errorDetail = fatal.code  # type: ignore[assignment]
    return _frame(delimited(header))


# ---- the client side (the Python client and the tests) ----

def encode_preamble(auth_protocol: int = AUTH_SIMPLE, service_class: int = 0, version: int = VERSION) -> bytes:
    return MAGIC + bytes([version, service_class, auth_protocol])


def encode_request_header(call_id: int, client_id: bytes, retry_count: int = -1) -> RpcRequestHeader:
    return RpcRequestHeader(
        rpcKind=RpcHeader_pb2.RPC_PROTOCOL_BUFFER,
        rpcOp=RpcRequestHeader.RPC_FINAL_PACKET,
        callId=call_id,
        clientId=client_id,
        retryCount=retry_count,
    )


def encode_context(client_id: bytes, protocol: str, user: str = "") -> bytes:
    ctx = IpcConnectionContext_pb2.IpcConnectionContextProto(protocol=protocol)
    if user:
        ctx.userInfo.effectiveUser = user
    return _frame(delimited(encode_request_header(CONNECTION_CONTEXT_CALL_ID, client_id)), delimited(ctx))


def encode_sasl_request(message: hadoop_sasl.RpcSasl) -> bytes:
    """A client's SASL frame (call id -33, empty client id, as Hadoop's SaslRpcClient sends it)."""
    return _frame(delimited(encode_request_header(SASL_CALL_ID, b"")), delimited(message))


def frame(payload: bytes) -> bytes:
    """``payload`` with its 4-byte big-endian length in front."""
    return _frame(payload)


def encode_ping(client_id: bytes) -> bytes:
    return _frame(delimited(encode_request_header(PING_CALL_ID, client_id)))


def encode_call(
    call_id: int, client_id: bytes, protocol: str, method: str, request: pb_message.Message | bytes,
    *, version: int = 1, retry_count: int = -1,
) -> bytes:
    req = ProtobufRpcEngine_pb2.RequestHeaderProto(
        methodName=method, declaringClassProtocolName=protocol, clientProtocolVersion=version
    )
    return _frame(delimited(encode_request_header(call_id, client_id, retry_count)), delimited(req), delimited(request))


@dataclasses.dataclass(frozen=True)
class Response:
    header: RpcResponseHeader
    body: bytes | None

    @property
    def call_id(self) -> int:
        cid = self.header.callId
        return cid - (1 << 32) if cid >= 1 << 31 else cid


class ResponseDecoder:
    """The client's incremental decoder of answers (frames of a response header and an optional body)."""

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Response]:
        self._buf += data
        out: list[Response] = []
        while len(self._buf) >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(self._buf)
            if length < 0 or length > self.max_frame:
                raise FrameError(ErrorCode.FATAL_INVALID_RPC_HEADER, f"answer frame length {length} is out of range")
            if len(self._buf) < _LENGTH.size + length:
                break
            frame = bytes(self._buf[_LENGTH.size : _LENGTH.size + length])
            del self._buf[: _LENGTH.size + length]
            raw, pos = read_delimited(frame, 0, "RpcResponseHeaderProto")
            header = parse(RpcResponseHeader, raw, "RpcResponseHeaderProto", ErrorCode.FATAL_DESERIALIZING_REQUEST)
            assert isinstance(header, RpcResponseHeader)
            body = None
            if pos < len(frame):
                body, pos = read_delimited(frame, pos, "the response")
            out.append(Response(header, body))
        return out


# ---- who leads: Ozone's ServerNotLeaderException text, both directions ----

SERVER_NOT_LEADER = "org.apache.hadoop.hdds.ratis.ServerNotLeaderException"
_NOT_LEADER_TEXT = re.compile(r".* Server:(.*?) is not the leader[.]+.*", re.DOTALL)
_SUGGESTED = re.compile(r".*Suggested leader is Server:([^:]*)(:[0-9]+).*", re.DOTALL)


def not_leader_message(role: str, self_name: str, hostname: str, leader: str | None) -> str:
    """What Ozone's SCM says when it is not the leader; ``leader`` is ``host:port`` or None."""
    head = f"{role} Server:{self_name}({hostname}) is not the leader."
    if leader:
        return f"{head} Suggested leader is Server:{leader}."
    return f"{head} Could not determine the leader node."


# A leader elected but not ready yet (it has not applied its own term's first entry): Ozone's SCM wraps Ratis's
# LeaderNotReadyException into RetriableWithNoFailoverException (RatisUtil.checkRatisException), which Ozone's
# failover proxy (SCMHAUtils.getRetryAction) answers by retrying the same SCM after its retry interval.
RETRIABLE_NO_FAILOVER = "org.apache.hadoop.hdds.scm.ha.RetriableWithNoFailoverException"
LEADER_NOT_READY = "org.apache.ratis.protocol.exceptions.LeaderNotReadyException"


def leader_not_ready_message(self_name: str) -> str:
    """The wrapper's message as Ozone's server sends it: the wrapped Ratis exception's ``toString()``."""
    return f"{LEADER_NOT_READY}: {self_name} is in LEADER state but not ready yet."


def suggested_leader(message: str) -> str | None:
    """The ``host:port`` a ServerNotLeaderException message suggests, parsed as Ozone's client does; None
    when the message names no leader."""
    if not _NOT_LEADER_TEXT.fullmatch(message):
        return None
    m = _SUGGESTED.fullmatch(message)
    if m is None or not m.group(1) or not m.group(2):
        return None
    return m.group(1) + m.group(2)
