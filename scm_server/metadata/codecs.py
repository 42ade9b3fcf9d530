"""Key and value codecs for the scm.db column families.

Keys are encoded so that LevelDB's byte order matches Ozone's iteration order (big-endian
longs, UTF-8 strings). Values are protobuf messages wherever Ozone has one. A value that cannot
be decoded raises :class:`~scm_server.exceptions.StorageError` naming the table and key, so a
corrupt DB is reported instead of silently producing a half-built object.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from scm_server.exceptions import StorageError

T = TypeVar("T")
M = TypeVar("M", bound=Message)
T_co = TypeVar("T_co", covariant=True)


class Codec(Protocol[T]):
    @property
    def name(self) -> str: ...

    def encode(self, value: T) -> bytes: ...

    def decode(self, data: bytes) -> T: ...

    def to_json(self, value: T) -> Any: ...


class LongCodec:
    """Signed 64-bit big-endian (Ozone's LongCodec); non-negative IDs sort numerically."""

    name = "long"

    def encode(self, value: int) -> bytes:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"LongCodec expects int, got {type(value).__name__}")
        return struct.pack(">q", value)

    def decode(self, data: bytes) -> int:
        if len(data) != 8:
            raise ValueError(f"expected 8 bytes for a long, got {len(data)}")
        return int(struct.unpack(">q", data)[0])

    def to_json(self, value: int) -> Any:
        return value


class StringCodec:
    name = "string"

    def encode(self, value: str) -> bytes:
        if not isinstance(value, str):
            raise TypeError(f"StringCodec expects str, got {type(value).__name__}")
        return value.encode("utf-8")

    def decode(self, data: bytes) -> str:
        return data.decode("utf-8")

    def to_json(self, value: str) -> Any:
        return value


class BytesCodec:
    name = "bytes"

    def encode(self, value: bytes) -> bytes:
        if not isinstance(value, bytes | bytearray):
            raise TypeError(f"BytesCodec expects bytes, got {type(value).__name__}")
        return bytes(value)

    def decode(self, data: bytes) -> bytes:
        return bytes(data)

    def to_json(self, value: bytes) -> Any:
        return value.hex()


@dataclass(frozen=True)
class ProtoCodec(Generic[M]):
    """A protobuf message value. ``decode`` rejects bytes that do not parse or miss required fields."""

    message_type: type[M]

    @property
    def name(self) -> str:
        return str(self.message_type.DESCRIPTOR.full_name)

    def encode(self, value: M) -> bytes:
        if not isinstance(value, self.message_type):
            raise TypeError(f"expected {self.name}, got {type(value).__name__}")
        return value.SerializeToString()

    def decode(self, data: bytes) -> M:
        msg = self.message_type()
        msg.ParseFromString(data)  # raises DecodeError on garbage
        if not msg.IsInitialized():
            missing = msg.FindInitializationErrors()  # type: ignore[attr-defined]
            raise DecodeError(f"{self.name} is missing required fields {missing}")
        return msg

    def to_json(self, value: M) -> Any:
        return json_format.MessageToDict(value, preserving_proto_field_name=True)


def decode_or_raise(codec: Codec[T], data: bytes, table: str, what: str, raw_key: bytes) -> T:
    try:
        return codec.decode(data)
    except (DecodeError, ValueError, UnicodeDecodeError, TypeError) as exc:
        raise StorageError(
            f"scm.db table {table!r}: cannot decode {what} ({codec.name}) for key {raw_key!r}: {exc}. "
            "The database is corrupt; restore it from a checkpoint or re-bootstrap this SCM"
        ) from exc


def json_line(key: Any, value: Any) -> str:
    return json.dumps({"key": key, "value": value}, sort_keys=True)
