"""Argument codec for replicated calls (Ozone's ScmCodecFactory).

A replicated call travels as ``SCMRatisRequestProto(type, Method(name, [MethodArgument(type,
value)]))``. Supported values: ``None`` ("none"), bool, int ("int64", 8-byte big-endian),
str ("string"), bytes, protobuf messages (by full name, e.g. "hadoop.hdds.ContainerInfoProto")
and lists/tuples of those ("list"). Anything else is a programming error (TypeError) caught at
the caller, never at apply time.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

from scm_server.exceptions import ResultCodes, SCMException
from scm_server.proto import hdds_pb2, scm_datanode_pb2, scm_ratis_pb2  # noqa: F401  (register types)

MethodArgument = scm_ratis_pb2.MethodArgument


def encode_value(value: Any) -> scm_ratis_pb2.MethodArgument:
    if value is None:
        return MethodArgument(type="none", value=b"")
    if isinstance(value, bool):
        return MethodArgument(type="bool", value=b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return MethodArgument(type="int64", value=struct.pack(">q", value))
    if isinstance(value, str):
        return MethodArgument(type="string", value=value.encode("utf-8"))
    if isinstance(value, bytes | bytearray):
        return MethodArgument(type="bytes", value=bytes(value))
    if isinstance(value, Message):
        return MethodArgument(type=value.DESCRIPTOR.full_name, value=value.SerializeToString())
    if isinstance(value, list | tuple):
        lst = scm_ratis_pb2.ListArgument(value=[encode_value(v) for v in value])
        return MethodArgument(type="list", value=lst.SerializeToString())
    raise TypeError(f"cannot encode {type(value).__name__} as a replicated-call argument")


def _message_class(full_name: str) -> type[Message]:
    try:
        desc = descriptor_pool.Default().FindMessageTypeByName(full_name)
    except KeyError:
        raise SCMException(ResultCodes.INVALID_REQUEST, f"unknown argument type {full_name!r}") from None
    return message_factory.GetMessageClass(desc)


def decode_value(arg: scm_ratis_pb2.MethodArgument) -> Any:
    kind = arg.type
    data = arg.value
    try:
        if kind == "none":
            return None
        if kind == "bool":
            return data == b"\x01"
        if kind == "int64":
            return int(struct.unpack(">q", data)[0])
        if kind == "string":
            return data.decode("utf-8")
        if kind == "bytes":
            return bytes(data)
        if kind == "list":
            lst = scm_ratis_pb2.ListArgument()
            lst.ParseFromString(data)
            return [decode_value(v) for v in lst.value]
        msg = _message_class(kind)()
        msg.ParseFromString(data)
        if not msg.IsInitialized():
            raise DecodeError(f"{kind} missing required fields")
        return msg
    except (struct.error, UnicodeDecodeError, DecodeError) as exc:
        raise SCMException(ResultCodes.INVALID_REQUEST, f"cannot decode argument of type {kind!r}: {exc}") from exc


def encode_request(request_type: int, method: str, args: Sequence[Any]) -> scm_ratis_pb2.SCMRatisRequestProto:
    return scm_ratis_pb2.SCMRatisRequestProto(
        type=request_type,  # type: ignore[arg-type]
        method=scm_ratis_pb2.Method(name=method, args=[encode_value(a) for a in args]),
    )


def decode_args(request: scm_ratis_pb2.SCMRatisRequestProto) -> list[Any]:
    return [decode_value(a) for a in request.method.args]


def encode_result(value: Any) -> scm_ratis_pb2.SCMRatisResponseProto:
    if value is None:
        return scm_ratis_pb2.SCMRatisResponseProto()
    arg = encode_value(value)
    return scm_ratis_pb2.SCMRatisResponseProto(type=arg.type, value=arg.value)


def decode_result(response: scm_ratis_pb2.SCMRatisResponseProto) -> Any:
    """Return the result of a replicated call, or raise its logical rejection as SCMException."""
    if response.HasField("errorResult"):
        try:
            code = ResultCodes[response.errorResult]
        except KeyError:
            code = ResultCodes.INTERNAL_ERROR
        raise SCMException(code, response.errorMessage)
    if not response.HasField("type"):
        return None
    return decode_value(MethodArgument(type=response.type, value=response.value))
