"""The pure Hadoop IPC codec: preamble, frames, headers, events and answers, fed byte by byte or whole."""

from __future__ import annotations

import struct

import pytest
from google.protobuf.internal.encoder import _VarintBytes
from hypothesis import given, settings
from hypothesis import strategies as st

from scm_server import hadoop_ipc as codec
from scm_server.hadoop_ipc import ErrorCode
from scm_server.proto.ozone import RpcHeader_pb2

CLIENT = bytes(range(16))
PROTO = "org.apache.hadoop.hdds.scm.protocol.ScmBlockLocationProtocol"


def opening(protocol: str = PROTO) -> bytes:
    return codec.encode_preamble() + codec.encode_context(CLIENT, protocol, "alice")


def feed_all(decoder: codec.ConnectionDecoder, data: bytes, chunk: int | None = None) -> list[codec.Event]:
    if chunk is None:
        return decoder.feed(data)
    events: list[codec.Event] = []
    for i in range(0, len(data), chunk):
        events += decoder.feed(data[i : i + chunk])
    return events


@given(st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_varint_round_trip(value: int) -> None:
    encoded = codec.encode_varint(value)
    assert codec.decode_varint(encoded + b"tail", 0) == (value, len(encoded))
    assert encoded == _VarintBytes(value)  # protobuf's own bytes (one, two and more bytes take other paths)


@pytest.mark.parametrize("value", [0, 1, 0x7F, 0x80, 0x3FFF, 0x4000, 0x1FFFFF, (1 << 64) - 1])
def test_varint_edges_are_protobufs_bytes(value: int) -> None:
    assert codec.encode_varint(value) == _VarintBytes(value)


def test_varint_refuses_negative_and_overlong() -> None:
    with pytest.raises(ValueError):
        codec.encode_varint(-1)
    with pytest.raises(codec.FrameError, match="longer than 10 bytes"):
        codec.decode_varint(b"\xff" * 11, 0)
    with pytest.raises(codec.FrameError, match="past the end"):
        codec.decode_varint(b"\x80", 0)


@settings(max_examples=60)
@given(
    calls=st.lists(
        st.tuples(st.integers(0, 2**31 - 1), st.binary(max_size=300), st.integers(-1, 5)), min_size=1, max_size=6
    ),
    chunk=st.integers(1, 64),
)
def test_calls_decode_whatever_the_chunking(calls: list[tuple[int, bytes, int]], chunk: int) -> None:
    stream = opening()
    for call_id, body, retry in calls:
        stream += codec.encode_call(call_id, CLIENT, PROTO, "send", body, retry_count=retry)
        stream += codec.encode_ping(CLIENT)
    events = feed_all(codec.ConnectionDecoder(), stream, chunk)
    assert isinstance(events[0], codec.Preamble) and events[0].auth_protocol == codec.AUTH_SIMPLE
    assert events[1] == codec.ConnectionContext(PROTO, "alice", "")
    got = [e for e in events[2:] if isinstance(e, codec.Call)]
    assert [(c.call_id, c.body, c.retry_count) for c in got] == calls
    assert all(c.client_id == CLIENT and c.protocol == PROTO and c.method == "send" and c.client_version == 1 for c in got)
    # the caller of each call is the connection's effective user (not authenticated: SIMPLE)
    assert all(c.user == "alice" and not c.authenticated for c in got)
    assert sum(isinstance(e, codec.Ping) for e in events) == len(calls)


def test_oversized_frame_is_fatal_as_soon_as_its_length_arrives() -> None:
    decoder = codec.ConnectionDecoder(max_frame=1024)
    decoder.feed(opening())
    events = decoder.feed(struct.pack(">i", 1025))  # no body at all yet: refused before buffering
    assert len(events) == 1 and isinstance(events[0], codec.Fatal)
    assert events[0].code == ErrorCode.FATAL_INVALID_RPC_HEADER and "1025" in events[0].message
    assert decoder.closed and decoder.feed(b"more") == []


def test_negative_frame_length_is_fatal() -> None:
    decoder = codec.ConnectionDecoder()
    decoder.feed(opening())
    (event,) = decoder.feed(struct.pack(">i", -5))
    assert isinstance(event, codec.Fatal) and "-5" in event.message


@pytest.mark.parametrize(
    ("preamble", "code", "cls", "text"),
    [
        (b"hrpc\x08\x00\x00", ErrorCode.FATAL_VERSION_MISMATCH, codec.VERSION_MISMATCH, "version 8"),
        (b"hrpc\x09\x00\xdf", ErrorCode.FATAL_UNAUTHORIZED, codec.ACCESS_CONTROL, "SASL"),
        (b"hrpc\x09\x00\x51", ErrorCode.FATAL_UNAUTHORIZED, codec.ACCESS_CONTROL, "auth protocol 81"),
        (b"\x00\x01garbage", ErrorCode.FATAL_INVALID_RPC_HEADER, codec.IPC_EXCEPTION, "preamble"),
    ],
)
def test_bad_preambles_are_fatal(preamble: bytes, code: int, cls: str, text: str) -> None:
    (event,) = codec.ConnectionDecoder().feed(preamble)
    assert isinstance(event, codec.Fatal)
    assert (event.code, event.exception_class) == (code, cls) and text in event.message


def test_garbage_is_refused_from_its_first_bytes() -> None:
    (event,) = codec.ConnectionDecoder().feed(b"\x16\x03")  # a TLS hello, say
    assert isinstance(event, codec.Fatal)


def test_http_request_is_recognised() -> None:
    assert codec.ConnectionDecoder().feed(b"GET / HTTP/1.1\r\n") == [codec.HttpRequest()]


@settings(max_examples=200)
@given(st.binary(min_size=1, max_size=200))
def test_any_garbage_frame_ends_in_fatal_or_waits_never_raises(garbage: bytes) -> None:
    decoder = codec.ConnectionDecoder(max_frame=4096)
    decoder.feed(opening())
    events = decoder.feed(struct.pack(">i", len(garbage)) + garbage)
    assert all(isinstance(e, (codec.Fatal, codec.Call, codec.Ping, codec.CloseRequested)) for e in events)


def test_call_before_context_is_fatal() -> None:
    decoder = codec.ConnectionDecoder()
    events = decoder.feed(codec.encode_preamble() + codec.encode_call(1, CLIENT, PROTO, "send", b""))
    assert isinstance(events[-1], codec.Fatal) and "before the connection context" in events[-1].message
    assert events[-1].call_id == 1


def test_sasl_negotiation_after_simple_preamble_is_refused() -> None:
    header = codec.encode_request_header(codec.SASL_CALL_ID, b"")
    frame = codec.delimited(header)
    events = codec.ConnectionDecoder().feed(codec.encode_preamble() + struct.pack(">i", len(frame)) + frame)
    assert isinstance(events[-1], codec.Fatal) and events[-1].code == ErrorCode.FATAL_UNAUTHORIZED


def test_wrong_rpc_kind_and_client_id_length_are_fatal() -> None:
    header = codec.encode_request_header(7, CLIENT)
    header.rpcKind = RpcHeader_pb2.RPC_WRITABLE
    frame = codec.delimited(header)
    decoder = codec.ConnectionDecoder()
    decoder.feed(opening())
    (event,) = decoder.feed(struct.pack(">i", len(frame)) + frame)
    assert isinstance(event, codec.Fatal) and "RPC_WRITABLE" in event.message and event.call_id == 7

    decoder = codec.ConnectionDecoder()
    decoder.feed(opening())
    (event,) = decoder.feed(codec.encode_call(3, b"short", PROTO, "send", b""))
    assert isinstance(event, codec.Fatal) and "clientId has 5 bytes" in event.message


def test_truncated_request_and_trailing_bytes_are_fatal() -> None:
    good = codec.encode_call(9, CLIENT, PROTO, "send", b"abcdef")
    body = good[4:]
    for frame, text in ((body[:-3], "claims"), (body + b"xx", "follow the request")):
        decoder = codec.ConnectionDecoder()
        decoder.feed(opening())
        (event,) = decoder.feed(struct.pack(">i", len(frame)) + frame)
        assert isinstance(event, codec.Fatal) and text in event.message and event.call_id == 9
        assert event.code == ErrorCode.FATAL_DESERIALIZING_REQUEST


def test_close_connection_request() -> None:
    header = codec.encode_request_header(0, CLIENT)
    header.rpcOp = codec.RpcRequestHeader.RPC_CLOSE_CONNECTION
    frame = codec.delimited(header)
    decoder = codec.ConnectionDecoder()
    decoder.feed(opening())
    assert decoder.feed(struct.pack(">i", len(frame)) + frame) == [codec.CloseRequested()]
    assert decoder.closed


def test_answers_decode_on_the_client_side() -> None:
    call = codec.Call(5, CLIENT, 2, PROTO, "send", 1, b"")
    fatal = codec.Fatal(codec.INVALID_CALL_ID, ErrorCode.FATAL_UNKNOWN, codec.IPC_EXCEPTION, "bye")
    stream = (
        codec.encode_success(call, b"\x08\x01")
        + codec.encode_error(call, "java.io.IOException", "nope")
        + codec.encode_fatal(fatal)
    )
    ok, err, fat = codec.ResponseDecoder().feed(stream)
    assert ok.call_id == 5 and ok.header.status == codec.Status.SUCCESS and ok.body == b"\x08\x01"
    assert ok.header.clientId == CLIENT and ok.header.retryCount == 2 and ok.header.serverIpcVersionNum == 9
    assert err.header.status == codec.Status.ERROR and err.body is None
    assert (err.header.exceptionClassName, err.header.errorMsg) == ("java.io.IOException", "nope")
    assert err.header.errorDetail == ErrorCode.ERROR_APPLICATION
    assert fat.call_id == -1 and fat.header.status == codec.Status.FATAL and fat.header.errorMsg == "bye"


@settings(max_examples=300)
@given(
    call_id=st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1),
    client_id=st.sampled_from([b"", CLIENT, bytes(16)]),
    retry=st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1),
    body=st.binary(max_size=300),
)
def test_a_success_answer_is_the_bytes_protobuf_writes_for_its_header(
    call_id: int, client_id: bytes, retry: int, body: bytes
) -> None:
    """encode_success writes the RpcResponseHeaderProto by hand: the same bytes as the message serialized."""
    call = codec.Call(call_id, client_id, retry, PROTO, "send", 1, b"")
    header = RpcHeader_pb2.RpcResponseHeaderProto(
        callId=call_id & 0xFFFFFFFF, status=RpcHeader_pb2.RpcResponseHeaderProto.SUCCESS,
        serverIpcVersionNum=codec.VERSION, retryCount=retry)
    if client_id:
        header.clientId = client_id
    assert codec.encode_success(call, body) == codec.frame(codec.delimited(header) + codec.delimited(body))
    (response,) = codec.ResponseDecoder().feed(codec.encode_success(call, body))
    assert (response.call_id, response.body) == (call_id, body)
