"""A minimal native gRPC client of etcd v3 (``KV.Put`` and ``Maintenance.Status``) for bench/raft_bench.py.

Why it exists: etcd's HTTP/JSON gateway adds a hop (JSON + base64 in the client, the gateway's own
gRPC call inside etcd) that our KV client does not pay, so a gateway figure flatters us. This client
speaks etcd's own gRPC API over grpc.aio, like etcd's Go client (one HTTP/2 connection per member,
every concurrent call multiplexed on it as a stream).

Only the messages the benchmark needs are declared, with etcd's package, service, method names and
field numbers (etcd ``api/etcdserverpb/rpc.proto``, v3.4):

    package etcdserverpb;
    service KV          { rpc Put(PutRequest) returns (PutResponse); }
    service Maintenance { rpc Status(StatusRequest) returns (StatusResponse); }
    message ResponseHeader { uint64 cluster_id = 1; uint64 member_id = 2; int64 revision = 3; uint64 raft_term = 4; }
    message PutRequest     { bytes key = 1; bytes value = 2; int64 lease = 3; bool prev_kv = 4;
                             bool ignore_value = 5; bool ignore_lease = 6; }
    message PutResponse    { ResponseHeader header = 1; }          // prev_kv = 2 (mvccpb.KeyValue) not needed
    message StatusRequest  { }
    message StatusResponse { ResponseHeader header = 1; string version = 2; int64 dbSize = 3; uint64 leader = 4;
                             uint64 raftIndex = 5; uint64 raftTerm = 6; }

The descriptors are built in code (no generated files): protobuf's runtime then does the encoding.
Unknown fields in etcd's replies (prev_kv, raftAppliedIndex, errors, ...) are skipped by protobuf.
Used only by the benchmark; nothing in ``scm_server`` imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto


def _file() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(name="bench_etcd_rpc_subset.proto", package="etcdserverpb", syntax="proto3")

    def message(name: str, *fields: tuple[str, int, int, str]) -> None:
        m = fd.message_type.add(name=name)
        for fname, number, ftype, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=_F.LABEL_OPTIONAL)  # type: ignore[arg-type]
            if type_name:
                f.type_name = type_name

    message(
        "ResponseHeader",
        ("cluster_id", 1, _F.TYPE_UINT64, ""),
        ("member_id", 2, _F.TYPE_UINT64, ""),
        ("revision", 3, _F.TYPE_INT64, ""),
        ("raft_term", 4, _F.TYPE_UINT64, ""),
    )
    message(
        "PutRequest",
        ("key", 1, _F.TYPE_BYTES, ""),
        ("value", 2, _F.TYPE_BYTES, ""),
        ("lease", 3, _F.TYPE_INT64, ""),
        ("prev_kv", 4, _F.TYPE_BOOL, ""),
        ("ignore_value", 5, _F.TYPE_BOOL, ""),
        ("ignore_lease", 6, _F.TYPE_BOOL, ""),
    )
    message("PutResponse", ("header", 1, _F.TYPE_MESSAGE, ".etcdserverpb.ResponseHeader"))
    message("StatusRequest")
    message(
        "StatusResponse",
        ("header", 1, _F.TYPE_MESSAGE, ".etcdserverpb.ResponseHeader"),
        ("version", 2, _F.TYPE_STRING, ""),
        ("dbSize", 3, _F.TYPE_INT64, ""),
        ("leader", 4, _F.TYPE_UINT64, ""),
        ("raftIndex", 5, _F.TYPE_UINT64, ""),
        ("raftTerm", 6, _F.TYPE_UINT64, ""),
    )
    return fd


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file())
PutRequest: Any = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("etcdserverpb.PutRequest"))
PutResponse: Any = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("etcdserverpb.PutResponse"))
StatusRequest: Any = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("etcdserverpb.StatusRequest"))
StatusResponse: Any = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("etcdserverpb.StatusResponse"))

PUT_METHOD = "/etcdserverpb.KV/Put"
STATUS_METHOD = "/etcdserverpb.Maintenance/Status"


@dataclass(frozen=True)
class EtcdStatus:
    member_id: int
    leader: int
    raft_term: int
    raft_index: int
    version: str


class EtcdGrpc:
    """One grpc.aio channel to one etcd member; calls from any number of tasks share it."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.channel = grpc.aio.insecure_channel(address)
        self._put = self.channel.unary_unary(
            PUT_METHOD, request_serializer=PutRequest.SerializeToString, response_deserializer=PutResponse.FromString
        )
        self._status = self.channel.unary_unary(
            STATUS_METHOD,
            request_serializer=StatusRequest.SerializeToString,
            response_deserializer=StatusResponse.FromString,
        )

    async def put(self, key: bytes, value: bytes, timeout: float) -> int:
        """Write key=value; returns the store revision etcd reports for it."""
        reply = await self._put(PutRequest(key=key, value=value), timeout=timeout)
        if not reply.HasField("header") or reply.header.revision <= 0:
            raise RuntimeError(f"etcd Put to {self.address} answered without a revision: {reply}")
        return int(reply.header.revision)

    async def status(self, timeout: float = 1.0) -> EtcdStatus:
        r = await self._status(StatusRequest(), timeout=timeout)
        return EtcdStatus(
            member_id=int(r.header.member_id),
            leader=int(r.leader),
            raft_term=int(r.raftTerm),
            raft_index=int(r.raftIndex),
            version=str(r.version),
        )

    async def close(self) -> None:
        await self.channel.close()
