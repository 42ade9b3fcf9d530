"""Demo replicated key-value + compare-and-set store on the Raft runtime, and its server process.

Why it exists: it is the smallest real state machine that exercises everything SCM needs from the
Raft module (batched apply with the applied (term, index) written atomically with the data, logical
rejections, snapshots in both install modes, exactly-once retries), and it is what the
verification helper drives with real processes (chaos + linearizability checking) and what
``bench/raft_bench.py`` measures.

CLI (stable; used by tests/raft and bench/raft_bench.py)::

    python -m scm_server.raft.kv --id n1 --listen 127.0.0.1:PORT \\
        --peers n1=127.0.0.1:P1,n2=127.0.0.1:P2,n3=127.0.0.1:P3 --data-dir DIR \\
        [--init] [--fsync | --no-fsync] [--fault-injection]
        [--tick 0.1] [--election-tick 10] [--heartbeat-tick 1]
        [--snapshot-threshold 1000] [--purge-gap 1000] [--install-mode notify|chunked]
        [--max-pending 4096] [--request-timeout 30] [--log-level WARNING]
        [--tls-cert PEM --tls-key PEM --tls-ca PEM]

* ``--listen`` is this member's Raft address; the KV service (``scm.raft.KvService``: Put, Get,
  Cas, Checkpoint) and the admin service (``scm.raft.RaftAdmin``: Status, TransferLeadership,
  AddMember, RemoveMember, SetFaults, ClearFaults, Submit, ReadIndex) share that one gRPC port.
* ``--init``: if DIR holds no Raft state yet, initialize a new group whose voters are ``--peers``
  (every member of a new group is started with the same ``--peers`` and ``--init``). Restarting
  with ``--init`` on existing state is harmless (the flag is ignored).
* Without ``--init`` on an empty DIR the member starts with no configuration: it never campaigns
  and waits until a leader adds it (``RaftAdmin.AddMember`` on the leader).
* Port 0 in ``--listen`` binds a free port. When the server is up it prints one line to stdout:
  ``KV_READY id=<id> port=<port> pid=<pid>``.
* SIGTERM/SIGINT stop it cleanly (exit 0); a fatal Raft/log failure exits with code 3.

Data: ``DIR/raft`` (the Raft log) and ``DIR/kv`` (this state machine's LevelDB: ``d:<key>`` ->
value and ``m:applied`` -> (term, index), written in the same batch as the data).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import struct
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import plyvel

from scm_server.exceptions import StorageError
from scm_server.proto import raft_pb2, raft_pb2_grpc
from scm_server.raft.admin_service import error_proto
from scm_server.raft.core.types import SnapshotMetadata
from scm_server.raft.errors import NotLeaderError
from scm_server.raft.server import RaftServer, RaftServerConfig
from scm_server.raft.statemachine import AppliedEntry, ApplyRejected, BaseStateMachine
from scm_server.raft.transport import TlsConfig, make_channel

log = logging.getLogger(__name__)

_APPLIED_KEY = b"m:applied"
_DATA = b"d:"
_TI = struct.Struct(">QQ")
_LEN = struct.Struct(">I")
OP_STREAM_PUT, OP_STREAM_GET, OP_STREAM_CAS = 1, 2, 3  # KvOp.op
OP_PUT = 0x50  # "P"
OP_CAS = 0x43  # "C"
CHUNK_BYTES = 1 << 20


# ---------------------------------------------------------------------------- commands
def encode_put(key: bytes, value: bytes) -> bytes:
    return bytes([OP_PUT]) + _LEN.pack(len(key)) + key + value


def encode_cas(key: bytes, expected: bytes | None, new: bytes) -> bytes:
    exp = expected or b""
    return (
        bytes([OP_CAS, 1 if expected is None else 0])
        + _LEN.pack(len(key))
        + key
        + _LEN.pack(len(exp))
        + exp
        + new
    )


def _found(value: bytes | None) -> bytes:
    return b"\x00" if value is None else b"\x01" + value


def decode_found(result: bytes) -> bytes | None:
    return None if not result or result[0] == 0 else result[1:]


def _records(items: Any) -> AsyncIterator[bytes]:
    async def gen() -> AsyncIterator[bytes]:
        buf = bytearray()
        for k, v in items:
            buf += _LEN.pack(len(k)) + k + _LEN.pack(len(v)) + v
            if len(buf) >= CHUNK_BYTES:
                yield bytes(buf)
                buf.clear()
        if buf:
            yield bytes(buf)

    return gen()


# ---------------------------------------------------------------------------- state machine
class KvStateMachine(BaseStateMachine):
    """LevelDB-backed KV/CAS state machine (see module docstring)."""

    def __init__(self, data_dir: Path, *, fsync: bool = True, tls: TlsConfig | None = None) -> None:
        self.path = Path(data_dir)
        self.tls = tls
        self.path.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        try:
            self.db = plyvel.DB(str(self.path), create_if_missing=True)
        except plyvel.Error as exc:
            raise StorageError(f"cannot open the KV store at {self.path}: {exc}") from exc
        raw = self.db.get(_APPLIED_KEY)
        self._applied = _TI.unpack(raw) if raw else (0, 0)
        self.leader_events: list[str] = []
        self.leader_address = ""

    def close(self) -> None:
        self.db.close()

    def last_applied(self) -> tuple[int, int]:
        return self._applied

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self.db.get(_DATA + key)
        return value

    async def apply(self, entries: Sequence[AppliedEntry]) -> list[bytes | ApplyRejected]:
        overlay: dict[bytes, bytes] = {}
        results: list[bytes | ApplyRejected] = []
        db = self.db
        wb = db.write_batch()
        for e in entries:
            data = e.data
            op = data[0] if data else 0
            if op == OP_PUT:
                (klen,) = _LEN.unpack_from(data, 1)
                key = data[5 : 5 + klen]
                value = data[5 + klen :]
                prev = overlay.get(key)
                if prev is None:
                    prev = db.get(_DATA + key)
                overlay[key] = value
                wb.put(_DATA + key, value)
                results.append(_found(prev))
            elif op == OP_CAS:
                absent = data[1] == 1
                (klen,) = _LEN.unpack_from(data, 2)
                key = data[6 : 6 + klen]
                pos = 6 + klen
                (elen,) = _LEN.unpack_from(data, pos)
                expected = data[pos + 4 : pos + 4 + elen]
                new = data[pos + 4 + elen :]
                cur = overlay.get(key)
                if cur is None:
                    cur = db.get(_DATA + key)
                if (absent and cur is None) or (not absent and cur is not None and cur == expected):
                    overlay[key] = new
                    wb.put(_DATA + key, new)
                    results.append(b"\x01")
                else:
                    results.append(b"\x00" + _found(cur))
            else:
                results.append(ApplyRejected("INVALID_REQUEST", f"unknown KV operation {op:#x} at index {e.index}"))
        last = entries[-1]
        wb.put(_APPLIED_KEY, _TI.pack(last.term, last.index))
        wb.write()
        self._applied = (last.term, last.index)
        return results

    def notify_term_index_updated(self, term: int, index: int) -> None:
        if index > self._applied[1]:
            self.db.put(_APPLIED_KEY, _TI.pack(term, index))
            self._applied = (term, index)

    async def take_snapshot(self) -> tuple[int, int]:
        self.db.put(_APPLIED_KEY, _TI.pack(*self._applied), sync=self.fsync)
        return self._applied

    async def snapshot_chunks(self) -> AsyncIterator[bytes]:
        await self.take_snapshot()
        snap = self.db.snapshot()
        try:
            async for chunk in _records(snap.iterator()):
                yield chunk
        finally:
            snap.close()

    async def install_snapshot_data(self, meta: SnapshotMetadata, chunks: AsyncIterator[bytes]) -> None:
        items: dict[bytes, bytes] = {}
        buf = b""
        async for chunk in chunks:
            buf += chunk
            pos = 0
            while True:
                if len(buf) - pos < 4:
                    break
                (klen,) = _LEN.unpack_from(buf, pos)
                if len(buf) - pos < 8 + klen:
                    break
                (vlen,) = _LEN.unpack_from(buf, pos + 4 + klen)
                end = pos + 8 + klen + vlen
                if len(buf) < end:
                    break
                items[buf[pos + 4 : pos + 4 + klen]] = buf[pos + 8 + klen : end]
                pos = end
            buf = buf[pos:]
        if buf:
            raise ValueError(f"snapshot data ends with {len(buf)} bytes of a partial record")
        raw = items.get(_APPLIED_KEY)
        applied = _TI.unpack(raw) if raw else (meta.term, meta.index)
        if applied[1] < meta.index:
            raise ValueError(f"snapshot data is at index {applied[1]}, older than the announced {meta.index}")
        with self.db.write_batch(sync=self.fsync) as wb:
            for k, _ in self.db.iterator():
                if k not in items:
                    wb.delete(k)
            for k, v in items.items():
                wb.put(k, v)
        self._applied = applied

    async def install_snapshot_from_leader(
        self, leader_id: str, leader_address: str, meta: SnapshotMetadata
    ) -> tuple[int, int]:
        """Notification mode: download a checkpoint from the leader's KV service and install it."""
        if not leader_address:
            raise ValueError(f"no address known for leader {leader_id!r}; cannot fetch a checkpoint")
        channel = make_channel(leader_address, self.tls)
        try:
            stub = raft_pb2_grpc.KvServiceStub(channel)

            async def chunks() -> AsyncIterator[bytes]:
                async for c in stub.Checkpoint(raft_pb2.CheckpointRequest(min_index=meta.index), timeout=300):
                    if c.data:
                        yield c.data

            await self.install_snapshot_data(meta, chunks())
        finally:
            await channel.close()
        return self._applied

    def notify_leader_changed(self, leader_id: str, term: int) -> None:
        self.leader_events.append(f"leader {leader_id} term {term}")

    def notify_leader_ready(self) -> None:
        self.leader_events.append("ready")

    def notify_log_failed(self, exc: BaseException) -> None:
        log.critical("KV state machine: Raft log failed: %s", exc)


# ---------------------------------------------------------------------------- gRPC service
def _not_leader(exc: NotLeaderError) -> raft_pb2.NotLeaderProto:
    return raft_pb2.NotLeaderProto(leader_id=exc.leader_id, leader_address=exc.leader_address)


class KvServicer(raft_pb2_grpc.KvServiceServicer):
    def __init__(self, raft: RaftServer, sm: KvStateMachine) -> None:
        self.raft = raft
        self.sm = sm

    async def _submit(self, data: bytes, request: raft_pb2.KvRequest) -> tuple[bytes | None, raft_pb2.KvReply | None]:
        try:
            result = await self.raft.submit(
                data, client_id=request.client_id, call_id=request.call_id, timeout=request.timeout or None
            )
        except NotLeaderError as exc:
            return None, raft_pb2.KvReply(ok=False, not_leader=_not_leader(exc))
        except Exception as exc:
            return None, raft_pb2.KvReply(ok=False, error=error_proto(exc))
        return result, None

    async def Put(self, request: raft_pb2.KvRequest, context: Any) -> raft_pb2.KvReply:
        result, err = await self._submit(encode_put(request.key, request.value), request)
        if err is not None:
            return err
        assert result is not None
        prev = decode_found(result)
        return raft_pb2.KvReply(ok=True, found=prev is not None, value=prev or b"")

    async def Cas(self, request: raft_pb2.KvRequest, context: Any) -> raft_pb2.KvReply:
        expected = None if request.expect_absent else request.expected
        result, err = await self._submit(encode_cas(request.key, expected, request.value), request)
        if err is not None:
            return err
        assert result is not None
        if result[:1] == b"\x01":
            return raft_pb2.KvReply(ok=True)
        cur = decode_found(result[1:])
        return raft_pb2.KvReply(
            ok=False,
            found=cur is not None,
            value=cur or b"",
            error=raft_pb2.ErrorProto(code="CAS_MISMATCH", message="current value differs from the expected one"),
        )

    async def Get(self, request: raft_pb2.KvRequest, context: Any) -> raft_pb2.KvReply:
        try:
            index = await self.raft.read_index(request.timeout or None)
        except NotLeaderError as exc:
            return raft_pb2.KvReply(ok=False, not_leader=_not_leader(exc))
        except Exception as exc:
            return raft_pb2.KvReply(ok=False, error=error_proto(exc))
        value = self.sm.get(request.key)
        return raft_pb2.KvReply(ok=True, found=value is not None, value=value or b"", index=index)

    async def Stream(
        self, request_iterator: AsyncIterator[raft_pb2.KvOpBatch], context: Any
    ) -> AsyncIterator[raft_pb2.KvResultBatch]:
        """Multiplexed operations: each op runs concurrently; replies are batched per write."""
        loop = asyncio.get_running_loop()
        results: list[raft_pb2.KvOpResult] = []
        ready = asyncio.Event()
        tasks: set[asyncio.Task[None]] = set()
        reading = True
        handlers = {OP_STREAM_PUT: self.Put, OP_STREAM_GET: self.Get, OP_STREAM_CAS: self.Cas}

        async def run(op: raft_pb2.KvOp) -> None:
            handler = handlers.get(op.op)
            if handler is None:
                reply = raft_pb2.KvReply(error=raft_pb2.ErrorProto(code="INVALID", message=f"unknown op {op.op}"))
            else:
                reply = await handler(op.request, context)
            results.append(raft_pb2.KvOpResult(request_id=op.request_id, reply=reply))
            ready.set()

        async def reader() -> None:
            nonlocal reading
            try:
                async for batch in request_iterator:
                    for op in batch.ops:
                        t = loop.create_task(run(op))
                        tasks.add(t)
                        t.add_done_callback(tasks.discard)
            finally:
                reading = False
                ready.set()

        reader_task = loop.create_task(reader())
        try:
            while reading or tasks or results:
                await ready.wait()
                ready.clear()
                if results:
                    out = list(results)
                    results.clear()
                    yield raft_pb2.KvResultBatch(results=out)
        finally:
            reader_task.cancel()
            for t in list(tasks):
                t.cancel()

    async def Checkpoint(
        self, request: raft_pb2.CheckpointRequest, context: Any
    ) -> AsyncIterator[raft_pb2.CheckpointChunk]:
        term, index = await self.sm.take_snapshot()
        async for data in self.sm.snapshot_chunks():
            yield raft_pb2.CheckpointChunk(data=data, term=term, index=index)


# ---------------------------------------------------------------------------- process
def parse_peers(text: str) -> dict[str, str]:
    peers: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        nid, sep, addr = item.partition("=")
        if not sep or not nid or ":" not in addr:
            raise SystemExit(f"--peers: {item!r} is not id=host:port")
        peers[nid] = addr
    return peers


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m scm_server.raft.kv", description="Replicated KV demo server")
    p.add_argument("--id", required=True, help="this member's Raft id")
    p.add_argument("--listen", required=True, help="host:port of this member (Raft + KV + admin)")
    p.add_argument("--peers", default="", help="id=host:port,... of the initial group (with --init)")
    p.add_argument("--data-dir", required=True, type=Path)
    p.add_argument("--init", action="store_true", help="initialize a new group from --peers if DIR is empty")
    p.add_argument("--fsync", dest="fsync", action="store_true", default=True)
    p.add_argument("--no-fsync", dest="fsync", action="store_false")
    p.add_argument("--fault-injection", action="store_true", help="enable RaftAdmin.SetFaults (tests only)")
    p.add_argument("--tick", type=float, default=0.1, help="tick interval in seconds")
    p.add_argument("--election-tick", type=int, default=10)
    p.add_argument("--heartbeat-tick", type=int, default=1)
    p.add_argument("--snapshot-threshold", type=int, default=1000)
    p.add_argument("--purge-gap", type=int, default=1000)
    p.add_argument("--install-mode", choices=("notify", "chunked"), default="notify")
    p.add_argument("--max-pending", type=int, default=4096)
    p.add_argument("--request-timeout", type=float, default=30.0)
    p.add_argument("--log-level", default="WARNING")
    p.add_argument("--tls-cert", type=Path, help="PEM certificate (enables mutual TLS with --tls-key/--tls-ca)")
    p.add_argument("--tls-key", type=Path)
    p.add_argument("--tls-ca", type=Path)
    return p


async def serve(args: argparse.Namespace) -> int:
    data_dir: Path = args.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    peers = parse_peers(args.peers)
    listen: str = args.listen
    host, _, port_text = listen.rpartition(":")
    if port_text == "0":
        from scm_server.ports import free_port

        listen = f"{host}:{free_port(host)}"
        if args.id in peers:
            peers[args.id] = listen
    raft_dir = data_dir / "raft"
    if args.init:
        from scm_server.raft.storage import LevelDBStorage

        st = LevelDBStorage(raft_dir, fsync=args.fsync)
        empty = st.is_empty()
        st.close()
        if empty:
            members = peers or {args.id: listen}
            if args.id not in members:
                raise SystemExit(f"--init: --peers does not list this member {args.id}")
            RaftServer.initialize_group(raft_dir, args.id, members[args.id], members)
    tls = None
    if args.tls_cert or args.tls_key or args.tls_ca:
        if not (args.tls_cert and args.tls_key and args.tls_ca):
            raise SystemExit("--tls-cert, --tls-key and --tls-ca go together")
        tls = TlsConfig(cert_file=args.tls_cert, key_file=args.tls_key, ca_file=args.tls_ca)
    sm = KvStateMachine(data_dir / "kv", fsync=args.fsync, tls=tls)
    config = RaftServerConfig(
        node_id=args.id,
        address=listen,
        storage_dir=raft_dir,
        tick_interval=args.tick,
        election_tick=args.election_tick,
        heartbeat_tick=args.heartbeat_tick,
        snapshot_threshold=args.snapshot_threshold,
        log_purge_gap=args.purge_gap,
        install_snapshot_mode=args.install_mode,
        request_timeout=args.request_timeout,
        max_pending_proposals=args.max_pending,
        fsync=args.fsync,
        enable_fault_injection=args.fault_injection,
        tls=tls,
    )
    server = RaftServer(config, sm)
    server.add_service(lambda s: raft_pb2_grpc.add_KvServiceServicer_to_server(KvServicer(server, sm), s))
    await server.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"KV_READY id={args.id} port={server.port} pid={os.getpid()}", flush=True)
    stop_task = loop.create_task(stop.wait())
    dead_task = loop.create_task(server.wait_stopped())
    await asyncio.wait({stop_task, dead_task}, return_when=asyncio.FIRST_COMPLETED)
    stop_task.cancel()
    dead_task.cancel()
    failed = server.failure is not None
    await server.stop()
    sm.close()
    return 3 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
        format=f"%(asctime)s {args.id} %(levelname)s %(name)s: %(message)s",
    )
    profile_to = os.environ.get("KV_PROFILE")  # debugging aid: write cProfile stats here on exit
    if profile_to:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
        try:
            return asyncio.run(serve(args))
        finally:
            prof.disable()
            prof.dump_stats(f"{profile_to}.{args.id}")
    try:
        return asyncio.run(serve(args))
    except grpc.RpcError as exc:  # pragma: no cover - startup failures
        print(f"kv server {args.id} failed: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
