"""RaftServer: the asyncio driver around the pure core (etcd-io/raft ``doc.go`` loop).

Where it sits: SCM's HA layer (and the demo KV in :mod:`scm_server.raft.kv`) owns a RaftServer and
a :class:`~scm_server.raft.statemachine.StateMachine`. The server owns the core
(:class:`~scm_server.raft.core.rawnode.RawNode`), the durable log
(:class:`~scm_server.raft.storage.LevelDBStorage`) and the transport
(:class:`~scm_server.raft.transport.RaftTransport`), and runs one loop:

    tick timer        -> core.tick()
    inbound messages  -> core.step()
    while core.has_ready():
        rd = core.ready()
        persist rd (hard state + entries + snapshot) in ONE LevelDB batch, synced when rd.must_sync,
            in a single dedicated writer thread (group commit: one Ready = one fsync); a follower
            writes a small batch inline instead (it has nothing to send before it is durable)
        send rd.messages                       (after the write: votes/acks depend on it; a leader's
                                                AppendEntries/heartbeats go out in parallel with
                                                its own write when term and vote are unchanged;
                                                a leader's commit-only appends are held, _send)
        apply rd.committed_entries in batches  (state machine; resolve submit futures by index+term)
        core.advance(rd)
        snapshot + log purge every snapshot_threshold applied entries

Client calls (:meth:`RaftServer.submit`) wrap the payload in an envelope carrying
``(client_id, call_id, leader timestamp)``; the retry cache (:mod:`~.retry_cache`) is filled on
apply on every replica, so a retried call returns its original result without re-applying, also
after a leader change. An exception from ``apply`` other than ``ApplyRejected``, or a storage
failure, is fatal: the server notifies ``notify_log_failed`` and stops rather than let replicas
diverge.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import grpc
import grpc.aio

from scm_server.exceptions import ConfigError, StorageError
from scm_server.grpc_decode import DecodeGuard
from scm_server.proto import raft_pb2, raft_pb2_grpc
from scm_server.raft import faults as faults_mod
from scm_server.raft.core.rawnode import Config, RawNode
from scm_server.raft.core.storage import CompactedError
from scm_server.raft.core.types import (
    NONE,
    ConfChange,
    ConfChangeType,
    ConfState,
    Entry,
    EntryType,
    Message,
    MessageType,
    ProposalDroppedError,
    Ready,
    Snapshot,
    SnapshotMetadata,
    StateRole,
)
from scm_server.raft.errors import (
    LogFailedError,
    NotLeaderError,
    ProposalQueueFullError,
    RaftStoppedError,
    RaftTimeoutError,
)
from scm_server.raft.retry_cache import ENVELOPE_MAGIC, Envelope, RetryCache, decode_envelope, encode_envelope
from scm_server.raft.statemachine import AppliedEntry, ApplyRejected, StateMachine
from scm_server.raft.storage import LevelDBStorage, PreparedSave
from scm_server.raft.transport import (
    SERVER_OPTIONS,
    RaftTransport,
    TlsConfig,
    TransportSecurity,
    add_port,
    conf_to_proto,
)

__all__ = [
    "NotLeaderError",
    "RaftServer",
    "RaftServerConfig",
    "RaftStatus",
    "TlsConfig",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_EARLY_TYPES = frozenset({MessageType.APPEND, MessageType.HEARTBEAT})
# A follower writes a small Ready on the event loop thread when its disk syncs fast: it has nothing
# to send before the write is durable, and handing a small write to the writer thread and back costs
# more CPU (two thread switches and a wakeup of the loop) than a fast sync blocks the loop. Larger
# batches (catch-up), and every write while recent syncs took longer than _INLINE_WRITE_MAX_SECONDS
# (a network volume), go to the writer thread, so the loop keeps serving datanodes meanwhile.
_INLINE_WRITE_ENTRIES = 64
_INLINE_WRITE_BYTES = 256 << 10
_INLINE_WRITE_MAX_SECONDS = 0.001
# How long a leader holds a commit-only append when no later append replaces it (see _send): longer
# than the gap between one client's writes, short enough that idle followers apply at once.
_HOLD_SECONDS = 0.005
# Early campaigns after the leader's stream to us ended (see peer_stream_ended): the first waits a
# random delay in [low, low + _EARLY_CAMPAIGN_SPREAD], where low is two heartbeat intervals but at
# least _EARLY_CAMPAIGN_MIN_DELAY (time for a live leader to reconnect and be heard again); at most
# _EARLY_CAMPAIGNS of them, then the ordinary election timer is left to it.
_EARLY_CAMPAIGN_MIN_DELAY = 0.2
_EARLY_CAMPAIGN_SPREAD = 0.3
_EARLY_CAMPAIGNS = 3
_LOST = float("-inf")  # a peer's last-heard time while its connection is known to be lost


@dataclass(frozen=True)
class RaftServerConfig:
    node_id: str
    address: str  # host:port to listen on and advertise
    storage_dir: Path
    tick_interval: float = 0.1
    election_tick: int = 10
    heartbeat_tick: int = 1
    pre_vote: bool = True
    check_quorum: bool = True
    snapshot_threshold: int = 1000  # applied entries since the last snapshot
    log_purge_gap: int = 1000  # entries kept behind a snapshot when purging
    install_snapshot_mode: Literal["notify", "chunked"] = "notify"
    request_timeout: float = 30.0
    max_pending_proposals: int = 4096
    retry_cache_expiry: float = 60.0
    fsync: bool = True
    tls: TransportSecurity | None = None
    enable_fault_injection: bool = False
    listen_address: str = ""  # bind address if different from `address` (e.g. 0.0.0.0:9894)
    max_size_per_msg: int = 1 << 20
    max_inflight_msgs: int = 256
    max_apply_batch: int = 1024
    fault_seed: int = 0

    def validate(self) -> None:
        if not self.node_id:
            raise ConfigError("RaftServerConfig.node_id is empty: every Raft member needs a unique id")
        if ":" not in self.address:
            raise ConfigError(f"RaftServerConfig.address={self.address!r} must be host:port")
        if self.install_snapshot_mode not in ("notify", "chunked"):
            raise ConfigError(
                f"install_snapshot_mode={self.install_snapshot_mode!r}: use 'notify' (the state machine "
                "fetches a checkpoint from the leader) or 'chunked' (data streamed through Raft)"
            )
        if self.snapshot_threshold <= 0 or self.log_purge_gap < 0:
            raise ConfigError("snapshot_threshold must be > 0 and log_purge_gap >= 0")
        if self.max_pending_proposals <= 0:
            raise ConfigError(f"max_pending_proposals={self.max_pending_proposals} must be > 0")
        if self.tick_interval <= 0:
            raise ConfigError(f"tick_interval={self.tick_interval} must be > 0 seconds")


@dataclass(frozen=True)
class RaftStatus:
    node_id: str
    role: str  # LEADER, FOLLOWER, CANDIDATE, PRE_CANDIDATE, LEARNER
    term: int
    leader_id: str
    leader_address: str
    commit_index: int
    applied_index: int
    last_index: int
    first_index: int
    snapshot_index: int
    conf: ConfState
    peers: dict[str, int] = field(default_factory=dict)  # leader only: node id -> match index
    # leader only: node id -> seconds since that peer last spoke to this leader in its term (monotonic clock, so a
    # frozen peer's silence keeps growing); a peer absent here has not spoken in this term or its connection was lost
    last_contact: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class _Pending:
    term: int
    future: asyncio.Future[bytes]
    key: tuple[bytes, int] | None


class RaftServer:
    def __init__(
        self,
        config: RaftServerConfig,
        state_machine: StateMachine,
        rng: random.Random | None = None,
    ) -> None:
        config.validate()
        self.config = config
        self.sm = state_machine
        self._rng = rng or random.Random()
        self._registrars: list[Callable[[grpc.aio.Server], None]] = []
        self.storage: LevelDBStorage | None = None
        self._node: RawNode | None = None
        self.transport: RaftTransport | None = None
        self.network_faults = faults_mod.NetworkFaults(config.fault_seed) if config.enable_fault_injection else None
        self._grpc: grpc.aio.Server | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._wakeup = asyncio.Event()
        self._changed = asyncio.Event()
        self._running = False
        self._stopped = asyncio.Event()
        self.failure: BaseException | None = None
        # volatile view of the core, updated from Readys
        self._role = StateRole.FOLLOWER
        self._leader = NONE
        self._term = 0
        self._commit = 0
        self._conf = ConfState()
        self._applied = 0
        self._sm_applied = 0  # entries <= this are already in the state machine (restart/snapshot)
        self._leader_ready = False
        self._last_snapshot_index = 0
        # leader lease on the wall clock (monotonic): when each peer last spoke to us in our term
        self._heard: dict[str, float] = {}
        self._leader_since = 0.0
        # client bookkeeping
        self._pending: dict[int, _Pending] = {}
        self._inflight_calls: dict[tuple[bytes, int], asyncio.Future[bytes]] = {}
        self.retry_cache = RetryCache(config.retry_cache_expiry)
        self._unapplied_calls: dict[tuple[bytes, int], int] = {}  # client call -> log index, not applied yet
        self._reads: dict[bytes, asyncio.Future[int]] = {}
        self._read_collecting: asyncio.Future[int] | None = None
        self._read_ids = itertools.count(1)
        self._applied_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._received_snapshots: dict[tuple[int, int], Path] = {}
        self.port = 0
        self.ticks = 0  # ticks driven so far (observability / tests)
        # leader: commit-only appends held back per peer until a later append replaces them or the
        # hold timer sends them (see _send)
        self._held: dict[str, Message] = {}
        self._hold_timer: asyncio.TimerHandle | None = None
        self._write_seconds = 0.0  # moving average of synced log writes (see _write_inline)
        self._stop_task: asyncio.Task[None] | None = None
        # the leader's stream to us ended (see peer_stream_ended): how often, and the campaigns it led to
        self.leader_streams_lost = 0
        self.early_campaigns = 0
        self._early_checks_pending = 0

    # ------------------------------------------------------------------ bootstrap
    @staticmethod
    def initialize_group(
        storage_dir: Path, node_id: str, address: str, peers: dict[str, str] | None = None
    ) -> None:
        """Write the primordial configuration: {node_id: address}, or ``peers`` (which must include
        node_id) when every member of a new multi-node group is initialized with the same list."""
        members = dict(peers or {})
        members.setdefault(node_id, address)
        if members.get(node_id) != address:
            raise ConfigError(f"initialize_group: peers give {node_id} address {members[node_id]}, not {address}")
        storage = LevelDBStorage(storage_dir)
        try:
            storage.bootstrap(sorted(members.items()))
        finally:
            storage.close()

    def add_service(self, registrar: Callable[[grpc.aio.Server], None]) -> None:
        """Register another gRPC service on the Raft port (call before :meth:`start`)."""
        self._registrars.append(registrar)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"raft-writer-{cfg.node_id}")
        try:
            await self._start(loop)
        except BaseException:
            if self._grpc is not None:
                await self._grpc.stop(grace=None)
            if self.transport is not None:
                await self.transport.close()
            if self.storage is not None:
                self.storage.close()
            self._writer.shutdown(wait=False)
            raise

    async def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        cfg = self.config
        assert self._writer is not None
        storage = await loop.run_in_executor(self._writer, lambda: LevelDBStorage(cfg.storage_dir, fsync=cfg.fsync))
        self.storage = storage
        hs, conf = storage.initial_state()
        _, sm_index = self.sm.last_applied()
        first = storage.first_index()
        if sm_index < first - 1:
            raise StorageError(
                f"state machine of {cfg.node_id} is at index {sm_index} but the Raft log starts after "
                f"{first - 1} (purged): it cannot catch up from the local log. Restore the state machine "
                "from a checkpoint of the leader, or remove this member's data and re-add it."
            )
        applied = max(min(sm_index, hs.commit), first - 1)
        self._sm_applied = sm_index
        self._applied = applied
        self._term = hs.term
        self._commit = hs.commit
        self._conf = conf
        self._last_snapshot_index = storage.snapshot_metadata().index
        self._rebuild_retry_cache(applied)
        self._node = RawNode(
            Config(
                id=cfg.node_id,
                election_tick=cfg.election_tick,
                heartbeat_tick=cfg.heartbeat_tick,
                pre_vote=cfg.pre_vote,
                check_quorum=cfg.check_quorum,
                max_size_per_msg=cfg.max_size_per_msg,
                max_inflight_msgs=cfg.max_inflight_msgs,
                # the runtime's own bound (max_pending_proposals) answers first, with its message;
                # the core's bound leaves room for no-ops and conf changes
                max_uncommitted_entries=cfg.max_pending_proposals + 64,
                applied=applied,
            ),
            storage,
            self._rng,
        )
        self.transport = RaftTransport(
            cfg.node_id, self, tls=cfg.tls, faults=self.network_faults, address=cfg.address
        )
        self.transport.update_peers(dict(conf.addresses))
        if conf.members():
            self.sm.notify_configuration_changed(conf)  # the configuration this member starts with
        # authentication first, then frames parsed inside the call (malformed ones answer INVALID_ARGUMENT)
        interceptors = [*(cfg.tls.server_interceptors() if cfg.tls is not None else ()), DecodeGuard()]
        server = grpc.aio.server(options=SERVER_OPTIONS, interceptors=interceptors)
        raft_pb2_grpc.add_RaftPeerServicer_to_server(self.transport.servicer(), server)
        raft_pb2_grpc.add_RaftAdminServicer_to_server(_AdminServicer(self), server)
        for registrar in self._registrars:
            registrar(server)
        bind = cfg.listen_address or cfg.address
        try:
            self.port = add_port(server, bind, cfg.tls)
        except RuntimeError as exc:
            raise ConfigError(f"cannot listen on {bind} for Raft: {exc}; is the port in use?") from exc
        self._grpc = server
        await server.start()
        self._running = True
        self._tasks = [
            loop.create_task(self._drive(), name=f"raft-driver-{cfg.node_id}"),
            loop.create_task(self._ticker(), name=f"raft-ticker-{cfg.node_id}"),
        ]
        self._wakeup.set()
        log.info(
            "raft server %s started on %s (term %d, commit %d, applied %d, conf %s)",
            cfg.node_id,
            cfg.address,
            hs.term,
            hs.commit,
            applied,
            conf.voters,
        )

    async def stop(self) -> None:
        """Stop serving and release the log (idempotent; concurrent callers share one stop)."""
        if self._stop_task is None:
            self._stop_task = asyncio.get_running_loop().create_task(self._stop())
        await asyncio.shield(self._stop_task)

    async def _stop(self) -> None:
        self._running = False
        current = asyncio.current_task()
        for t in self._tasks:
            if t is not current:
                t.cancel()
        for t in self._tasks:
            if t is not current:
                with contextlib.suppress(BaseException):
                    await t
        self._fail_all(RaftStoppedError(f"Raft server {self.config.node_id} is stopped"))
        if self.transport is not None:
            await self.transport.close()
        if self._grpc is not None:
            await self._grpc.stop(grace=0.2)
        if self._writer is not None:
            writer = self._writer
            await asyncio.get_running_loop().run_in_executor(None, lambda: writer.shutdown(wait=True))
        if self.storage is not None:
            self.storage.close()
        self._stopped.set()
        self._bump()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    # ------------------------------------------------------------------ introspection
    @property
    def node_id(self) -> str:
        return self.config.node_id

    @property
    def is_leader(self) -> bool:
        return self._role == StateRole.LEADER

    def lease_remaining(self) -> float:
        """Seconds this leader may still act alone (hand out IDs from memory, answer reads): a majority of
        voters (itself included) spoke to it in its term within the last election timeout, on the
        monotonic clock, which keeps running while the process is frozen. A leader thawed after a
        SIGSTOP or a long pause therefore knows at once that it may have been replaced, before it hears
        of the new term; the core's check-quorum only counts ticks, and ticks stop during a freeze.
        Negative when expired; 0.0 when not the leader."""
        if self._role != StateRole.LEADER:
            return 0.0
        lease = self.config.election_tick * self.config.tick_interval
        voters = [v for v in self._conf.voters if v != self.config.node_id]
        need = (len(voters) + 1) // 2 + 1 - 1  # a majority of all voters, minus ourselves
        if need <= 0:
            return lease
        since = self._leader_since  # a majority voted for us then; a peer whose connection ended has not spoken since
        heard = self._heard
        times = sorted((_LOST if heard.get(v) == _LOST else max(heard.get(v, 0.0), since) for v in voters), reverse=True)
        return times[need - 1] + lease - time.monotonic()

    def _peer_lost(self, peer: str) -> None:
        """Leader: the connection to ``peer`` failed or its stream to us ended. It no longer counts
        towards the lease until it speaks again: a follower that saw the same connection end may
        campaign early (see peer_stream_ended), before a whole election timeout."""
        if self._role == StateRole.LEADER and peer in self._heard:
            self._heard[peer] = _LOST

    @property
    def is_leader_ready(self) -> bool:
        return self._role == StateRole.LEADER and self._leader_ready

    @property
    def term(self) -> int:
        return self._term

    @property
    def leader_id(self) -> str:
        return self._leader

    @property
    def applied_index(self) -> int:
        return self._applied

    @property
    def conf(self) -> ConfState:
        return self._conf

    def leader_address(self) -> str:
        return self._conf.address_of(self._leader) if self._leader else ""

    def status(self) -> RaftStatus:
        node = self._require_node()
        st = node.status()
        storage = self.storage
        assert storage is not None
        role = st.role.name
        if self.config.node_id in st.conf_state.learners:
            role = "LEARNER"
        return RaftStatus(
            node_id=self.config.node_id,
            role=role,
            term=st.term,
            leader_id=st.leader,
            leader_address=st.conf_state.address_of(st.leader) if st.leader else "",
            commit_index=st.commit,
            applied_index=self._applied,
            last_index=st.last_index,
            first_index=storage.first_index(),
            snapshot_index=storage.snapshot_metadata().index,
            conf=st.conf_state,
            peers={nid: pr.match for nid, pr in st.progress.items()},
            last_contact=self._last_contact() if st.progress else {},
        )

    def _last_contact(self) -> dict[str, float]:
        """Leader: seconds since each peer last spoke to it in its term (see ``RaftStatus.last_contact``)."""
        if self._role != StateRole.LEADER:
            return {}
        now = time.monotonic()
        since = self._leader_since
        return {peer: now - t for peer, t in self._heard.items() if t != _LOST and t >= since and peer != self.config.node_id}

    def _require_node(self) -> RawNode:
        if self._node is None:
            raise RaftStoppedError(f"Raft server {self.config.node_id} is not started")
        return self._node

    def _not_leader(self) -> NotLeaderError:
        return NotLeaderError(self._leader, self.leader_address())

    def _check_running(self) -> RawNode:
        if self.failure is not None:
            raise LogFailedError(f"Raft server {self.config.node_id} stopped after a fatal error: {self.failure}")
        if not self._running:
            raise RaftStoppedError(f"Raft server {self.config.node_id} is not running")
        return self._require_node()

    # ------------------------------------------------------------------ waiting helpers
    def _bump(self) -> None:
        """Wake everyone waiting for a state change (role, leader, applied index, config)."""
        ev, self._changed = self._changed, asyncio.Event()
        ev.set()

    async def _wait_until(self, pred: Callable[[], bool], deadline: float, what: str) -> None:
        loop = asyncio.get_running_loop()
        while not pred():
            if self.failure is not None or not self._running:
                self._check_running()
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise RaftTimeoutError(f"timed out waiting for {what} on {self.config.node_id}")
            ev = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ev.wait(), min(remaining, self.config.tick_interval * 2))

    async def wait_applied(self, index: int, timeout: float | None = None) -> None:
        """Return once the state machine has applied ``index``."""
        if self._applied >= index:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._applied_waiters.append((index, fut))
        try:
            await _wait_shared(fut, timeout if timeout is not None else self.config.request_timeout)
        except TimeoutError:
            raise RaftTimeoutError(f"{self.config.node_id} did not apply index {index} in time") from None

    # ------------------------------------------------------------------ client API
    async def submit(
        self, data: bytes, *, client_id: bytes = b"", call_id: int = 0, timeout: float | None = None
    ) -> bytes:
        """Replicate ``data`` and return the state machine's result (exactly once per (client_id, call_id))."""
        node = self._check_running()
        key = (client_id, call_id) if client_id else None
        if key is not None:
            cached = self.retry_cache.get(client_id, call_id)
            if cached is not None:
                if isinstance(cached, ApplyRejected):
                    raise cached
                return cached
            inflight = self._inflight_calls.get(key)
            if inflight is not None:
                return await self._await_result(inflight, timeout)
            logged = self._logged_unapplied(key)
            if logged is not None and self._role == StateRole.LEADER:
                # The call is already in our log (proposed by an earlier leader, not applied yet).
                # A leader's log entries all commit under it, so wait for that copy instead of
                # proposing a second one (which would apply the call twice).
                await self.wait_applied(logged, timeout)
                cached = self.retry_cache.get(client_id, call_id)
                if cached is not None:
                    if isinstance(cached, ApplyRejected):
                        raise cached
                    return cached
                node = self._check_running()  # that copy was replaced (we lost leadership): propose
        if self._role != StateRole.LEADER:
            raise self._not_leader()
        if len(self._pending) >= self.config.max_pending_proposals:
            raise ProposalQueueFullError(
                f"{len(self._pending)} proposals are already waiting to commit on {self.config.node_id} "
                f"(max_pending_proposals={self.config.max_pending_proposals}); back off and retry, or raise "
                "max_pending_proposals"
            )
        payload = encode_envelope(client_id, call_id, time.time(), data)
        try:
            index = node.propose(payload)
        except ProposalDroppedError as exc:
            raise self._map_dropped(exc) from exc
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[index] = _Pending(self._term, fut, key)
        if key is not None:
            self._inflight_calls[key] = fut
        self._wakeup.set()
        return await self._await_result(fut, timeout, index)

    async def _await_result(
        self, fut: asyncio.Future[bytes], timeout: float | None, index: int | None = None
    ) -> bytes:
        t = timeout if timeout is not None else self.config.request_timeout
        # a timer instead of asyncio.wait_for: no extra Task per request on the hot path
        try:
            return await _wait_shared(fut, t)
        except TimeoutError:
            if index is not None:
                p = self._pending.pop(index, None)
                if p is not None and p.key is not None:
                    self._inflight_calls.pop(p.key, None)
            raise RaftTimeoutError(
                f"request not committed within {t:.1f}s on {self.config.node_id}; its outcome is unknown "
                "(retry with the same client_id/call_id for exactly-once)"
            ) from None

    def _map_dropped(self, exc: ProposalDroppedError) -> Exception:
        text = str(exc)
        if self._role != StateRole.LEADER or "transfer" in text or "not leader" in text.lower():
            return NotLeaderError(self._leader, self.leader_address(), f"proposal dropped: {text}")
        if "full" in text.lower() or "uncommitted" in text.lower():
            return ProposalQueueFullError(
                f"proposal dropped by the Raft core: {text} (max_pending_proposals="
                f"{self.config.max_pending_proposals}); back off and retry"
            )
        return NotLeaderError(self._leader, self.leader_address(), f"proposal dropped: {text}")

    async def read_index(self, timeout: float | None = None) -> int:
        """Linearizable read barrier (ReadIndex): returns once applied >= the confirmed read index.

        Concurrent readers are batched: everyone who arrives before the next request is issued
        shares one ReadIndex round (one heartbeat quorum), like etcd's linearizable read loop."""
        self._check_running()
        if not self._leader:
            raise NotLeaderError("", "", "no leader is known; cannot serve a linearizable read")
        loop = asyncio.get_running_loop()
        t = timeout if timeout is not None else self.config.request_timeout
        deadline = loop.time() + t
        batch = self._read_collecting
        if batch is None:
            batch = loop.create_future()
            self._read_collecting = batch
            loop.call_soon(self._issue_read_batch, batch)
        try:
            index = await _wait_shared(batch, t)
        except TimeoutError:
            raise RaftTimeoutError(
                f"read index not confirmed within {t:.1f}s on {self.config.node_id}"
            ) from None
        await self.wait_applied(index, max(deadline - loop.time(), 0.001))
        return index

    def _issue_read_batch(self, batch: asyncio.Future[int]) -> None:
        if self._read_collecting is batch:
            self._read_collecting = None
        if batch.done():
            return
        ctx = f"{self.config.node_id}/{next(self._read_ids)}".encode()
        self._reads[ctx] = batch
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.config.request_timeout
        retry_every = self.config.tick_interval * self.config.election_tick

        def ask() -> None:
            if batch.done() or not self._running or self._node is None:
                self._reads.pop(ctx, None)
                return
            if loop.time() > give_up:
                self._reads.pop(ctx, None)
                batch.set_exception(TimeoutError())
                batch.exception()
                return
            if not self._leader:
                self._reads.pop(ctx, None)
                batch.set_exception(NotLeaderError("", "", "no leader is known; cannot serve a linearizable read"))
                batch.exception()
                return
            self._node.read_index(ctx)  # again after a drop (e.g. leader change): same ctx
            self._wakeup.set()
            loop.call_later(retry_every, ask)

        ask()

    async def transfer_leadership(self, target_id: str | None, timeout: float = 10.0) -> str:
        node = self._check_running()
        if self._role != StateRole.LEADER:
            raise self._not_leader()
        me = self.config.node_id
        if target_id is None:
            st = node.status()
            candidates = [(pr.match, nid) for nid, pr in st.progress.items() if nid != me and nid in st.conf_state.voters]
            if not candidates:
                raise ConfigError("no other voter to transfer leadership to")
            target_id = max(candidates)[1]
        if target_id == me:
            return me
        if target_id not in self._conf.voters:
            raise ConfigError(f"cannot transfer leadership to {target_id}: it is not a voter in {self._conf.voters}")
        node.transfer_leader(target_id)
        self._wakeup.set()
        loop = asyncio.get_running_loop()
        await self._wait_until(lambda: self._leader == target_id, loop.time() + timeout, f"leader {target_id}")
        return target_id

    async def _propose_conf_change(self, cc: ConfChange, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        while True:
            node = self._check_running()
            if self._role != StateRole.LEADER:
                raise self._not_leader()
            try:
                index = node.propose_conf_change(cc)
                term = self._term
                break
            except ProposalDroppedError as exc:
                if self._role != StateRole.LEADER:
                    raise self._not_leader() from exc
                if loop.time() >= deadline:
                    raise RaftTimeoutError(f"conf change {cc.type.name} {cc.node_id} refused until the deadline: {exc}") from exc
                ev = self._changed
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ev.wait(), self.config.tick_interval)
        self._wakeup.set()
        await self._wait_until(lambda: self._applied >= index, deadline, f"conf change at index {index} to apply")
        storage = self.storage
        assert storage is not None
        # The index was applied, but it holds our entry only if its term is still the one we proposed in: a
        # leader that lost its term before committing sees its uncommitted entry overwritten by the next
        # leader's, and the change never happened.
        try:
            applied_term = storage.term(index)
        except CompactedError:
            # compacted into a snapshot right after applying: judge by the configuration now in force
            if not _conf_change_in_effect(cc, self._conf):
                raise self._not_leader() from None
            return
        if applied_term != term:
            raise self._not_leader()

    async def add_member(self, node_id: str, address: str, timeout: float = 60.0) -> None:
        """Add ``node_id`` as a learner, wait until it caught up, then promote it to voter."""
        node = self._check_running()
        if self._role != StateRole.LEADER:
            raise self._not_leader()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if node_id in self._conf.voters:
            return
        if node_id not in self._conf.learners:
            await self._propose_conf_change(ConfChange(ConfChangeType.ADD_LEARNER, node_id, address), deadline)
        checks = 0
        while checks < 2:
            node = self._check_running()
            if self._role != StateRole.LEADER:
                raise self._not_leader()
            st = node.status()
            target = st.last_index  # captured at check time (RATIS-1960)
            pr = st.progress.get(node_id)
            if pr is not None and pr.match >= target:
                checks += 1
                if checks >= 2:
                    break
            if loop.time() >= deadline:
                raise RaftTimeoutError(
                    f"learner {node_id} at {address} did not catch up (match "
                    f"{pr.match if pr else 0} < {target}) within {timeout:.0f}s; is it running and reachable?"
                )
            ev = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ev.wait(), self.config.tick_interval)
        await self._propose_conf_change(ConfChange(ConfChangeType.ADD_NODE, node_id, address), deadline)

    async def remove_member(self, node_id: str, timeout: float = 30.0) -> None:
        """Remove ``node_id`` (the leader may remove itself: it steps down once the change commits)."""
        self._check_running()
        if self._role != StateRole.LEADER:
            raise self._not_leader()
        if node_id not in self._conf.members():
            return
        loop = asyncio.get_running_loop()
        await self._propose_conf_change(
            ConfChange(ConfChangeType.REMOVE_NODE, node_id, ""), loop.time() + timeout
        )

    # ------------------------------------------------------------------ transport handler
    def on_messages(self, messages: list[Message]) -> None:
        node = self._node
        if node is None or not self._running:
            return
        now = time.monotonic()
        term = self._term
        heard = self._heard
        for m in messages:
            if m.term == term:
                heard[m.frm] = now
        for m in messages:
            try:
                node.step(m)
            except Exception:
                log.exception("%s: stepping %s from %s failed", self.config.node_id, m.type.name, m.frm)
        self._wakeup.set()

    async def on_snapshot(self, message: Message, chunks: AsyncIterator[bytes]) -> None:
        if self._node is None or not self._running:
            raise RaftStoppedError("not running")
        if message.snapshot is None:
            raise ValueError("InstallSnapshot without snapshot metadata")
        meta = message.snapshot.metadata
        if self.config.install_snapshot_mode == "chunked":
            storage = self.storage
            assert storage is not None
            writer = storage.open_snapshot_writer(meta.term, meta.index)
            try:
                async for chunk in chunks:
                    writer.write(chunk)
            except BaseException:
                writer.abort()
                raise
            loop = asyncio.get_running_loop()
            path = await loop.run_in_executor(None, writer.finish)
            self._received_snapshots[(meta.term, meta.index)] = path
        else:
            async for _ in chunks:
                pass
        self.on_messages([message])

    def snapshot_data(self) -> AsyncIterator[bytes] | None:
        if self.config.install_snapshot_mode == "chunked":
            return self.sm.snapshot_chunks()
        return None

    def report_unreachable(self, peer: str) -> None:
        node = self._node
        if node is not None and self._running:
            self._peer_lost(peer)
            try:
                node.report_unreachable(peer)
            except Exception:
                log.exception("%s: reporting %s unreachable failed", self.config.node_id, peer)
            self._wakeup.set()

    def report_snapshot(self, peer: str, ok: bool) -> None:
        node = self._node
        if node is not None and self._running:
            try:
                node.report_snapshot(peer, ok)
            except Exception:
                log.exception("%s: reporting the snapshot to %s failed", self.config.node_id, peer)
            self._wakeup.set()

    def peer_stream_ended(self, peer: str) -> None:
        """The leader's message stream to us ended: campaign soon instead of after an election timeout.

        A killed process's connections are closed by its kernel at once (a Pod killed on Kubernetes,
        SIGKILL here), so the end of the leader's stream is an early sign that the leader is gone,
        well before a whole election timeout without heartbeats. A follower then forgets its leader
        (the core's forget_leader, etcd's ForgetLeader: a leaderless follower grants pre-votes at
        once instead of waiting for the leader's lease to run out) and campaigns after a short random
        delay unless a leader is heard from again; both remaining followers do so, each with its own
        delay, which keeps their pre-votes apart. This never disrupts a live leader: if the stream
        only reconnects, the leader's next heartbeat (a heartbeat interval later, shorter than the
        shortest delay) makes it our leader again and nothing happens; and a pre-vote wins only when
        a majority has forgotten the leader or stopped hearing it, as in any pre-vote election.

        On the leader, a follower whose stream ended stops counting towards the lease (lease_remaining)
        until it speaks again, so the lease never outlives what such an early campaign assumes.
        """
        node = self._node
        if node is None or not self._running or not peer:
            return
        self._peer_lost(peer)
        if self._role != StateRole.FOLLOWER or node.status().leader != peer:
            return
        self.leader_streams_lost += 1
        log.info(
            "%s: the stream from leader %s ended at term %d; forgetting it, and campaigning soon unless it "
            "is heard from again",
            self.config.node_id,
            peer,
            self._term,
        )
        node.forget_leader()
        self._wakeup.set()
        self._schedule_early_campaign(1)

    def _schedule_early_campaign(self, attempt: int) -> None:
        cfg = self.config
        low = max(2 * cfg.heartbeat_tick * cfg.tick_interval, _EARLY_CAMPAIGN_MIN_DELAY)
        if not cfg.pre_vote or low >= cfg.election_tick * cfg.tick_interval:
            # without pre-vote a campaign bumps the term even when it cannot win, which can unseat a
            # live leader; and when the election timer fires as soon, it is the better judge
            return
        self._early_checks_pending += 1
        delay = self._rng.uniform(low, low + _EARLY_CAMPAIGN_SPREAD)
        asyncio.get_running_loop().call_later(delay, self._early_campaign, attempt)

    def _early_campaign(self, attempt: int) -> None:
        self._early_checks_pending -= 1
        node = self._node
        if node is None or not self._running:
            return
        st = node.status()
        if st.leader or st.role == StateRole.LEADER:
            return  # a leader is known again (the old one reconnected, or an election finished)
        self.early_campaigns += 1
        log.info(
            "%s: no leader heard since the leader's stream ended; campaigning (attempt %d)",
            self.config.node_id,
            attempt,
        )
        node.campaign()
        self._wakeup.set()
        if attempt < _EARLY_CAMPAIGNS:
            self._schedule_early_campaign(attempt + 1)

    @property
    def early_campaign_checks_pending(self) -> int:
        """Early-campaign timers not fired yet (tests wait for 0 before checking that none campaigned)."""
        return self._early_checks_pending

    # ------------------------------------------------------------------ the loop
    async def _ticker(self) -> None:
        interval = self.config.tick_interval
        loop = asyncio.get_running_loop()
        next_at = loop.time() + interval
        while self._running:
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            next_at += interval
            if loop.time() > next_at + interval * 5:
                next_at = loop.time() + interval  # we were paused (SIGSTOP): do not burst ticks
            node = self._node
            if node is None:
                continue
            self.ticks += 1
            try:
                node.tick()
            except Exception as exc:
                await self._fatal(exc)
                return
            self._wakeup.set()

    async def _drive(self) -> None:
        node = self._require_node()
        wakeup = self._wakeup
        try:
            while self._running:
                if not node.has_ready():
                    wakeup.clear()
                    if not node.has_ready():
                        await wakeup.wait()
                        # let the other ready callbacks (more proposals, more responses) run first,
                        # so one Ready carries them all: fewer fsyncs, fewer stream writes
                        await asyncio.sleep(0)
                    continue
                rd = node.ready()
                await self._handle_ready(rd)
                node.advance(rd)
                if self._applied - self._last_snapshot_index >= self.config.snapshot_threshold:
                    await self._take_snapshot()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            await self._fatal(exc)

    async def _handle_ready(self, rd: Ready) -> None:
        storage = self.storage
        transport = self.transport
        assert storage is not None and transport is not None
        if rd.hard_state is not None:
            self._term = rd.hard_state.term
        if rd.soft_state is not None:
            self._on_soft_state(rd.soft_state.leader, rd.soft_state.role)
        snap = rd.snapshot if rd.snapshot is not None and not rd.snapshot.is_empty() else None
        if snap is not None:
            await self._install_snapshot(snap)
        messages = rd.messages
        if rd.conf_state is not None:
            transport.update_peers(dict(rd.conf_state.addresses))  # before sending to new members
        if messages and self._role == StateRole.LEADER and snap is None:
            # Thesis §10.2.1: a leader may send AppendEntries/heartbeats in parallel with its own
            # write, because the core counts the leader's own match only once its log is durable.
            # Only when this Ready changes neither term nor vote (those must be durable first).
            hs, durable = rd.hard_state, storage.hard_state()
            if hs is None or (hs.term == durable.term and hs.vote == durable.vote):
                early = [m for m in messages if m.type in _EARLY_TYPES]
                if early:
                    self._send(early)
                    messages = tuple(m for m in messages if m.type not in _EARLY_TYPES)
        if rd.hard_state is not None or rd.entries or snap is not None:
            p = storage.prepare_save(rd.hard_state, rd.entries, snap, rd.must_sync)
            if not (rd.must_sync or rd.entries or snap is not None):
                storage.write_prepared(p)  # only the commit index moved: a tiny unsynced write, inline
            elif self._write_inline(rd):
                self._timed_write(p)
            else:
                assert self._writer is not None
                await asyncio.get_running_loop().run_in_executor(self._writer, self._timed_write, p)
            storage.commit_prepared(p)
            if rd.entries:
                self._track_unapplied(rd.entries)
            if rd.hard_state is not None:
                self._commit = rd.hard_state.commit
        if snap is not None:
            self._after_snapshot_installed(snap)
        if rd.conf_state is not None:
            self._conf = rd.conf_state
            self.sm.notify_configuration_changed(rd.conf_state)
            self._bump()
        if messages:
            self._send(messages)
        if rd.committed_entries:
            await self._apply(rd.committed_entries)
        for rs in rd.read_states:
            fut = self._reads.pop(rs.request_ctx, None)
            if fut is not None and not fut.done():
                fut.set_result(rs.index)

    def _write_inline(self, rd: Ready) -> bool:
        """Whether a follower writes this Ready on the loop (see _INLINE_WRITE_ENTRIES)."""
        if (
            self._role == StateRole.LEADER
            or rd.snapshot is not None
            or len(rd.entries) > _INLINE_WRITE_ENTRIES
            or self._write_seconds > _INLINE_WRITE_MAX_SECONDS
        ):
            return False
        return sum(len(e.data) for e in rd.entries) <= _INLINE_WRITE_BYTES

    def _timed_write(self, p: PreparedSave) -> None:
        """Write (and sync) one Ready, keeping a moving average of how long that takes."""
        assert self.storage is not None
        t0 = time.perf_counter()
        self.storage.write_prepared(p)
        self._write_seconds += (time.perf_counter() - t0 - self._write_seconds) * 0.2

    def _send(self, messages: Sequence[Message]) -> None:
        """Hand a Ready's messages to the transport, holding back a leader's commit-only appends.

        When the commit index moves, the core sends every follower an append without entries just
        to carry it. At one client that append and its response were a third of all messages per
        write (each costs a gRPC stream write on one side and a read on the other). Every append
        carries the commit index, so such an append is held until the next append to that peer
        replaces it (in steady traffic, the next write's append, under a millisecond later) or
        until _HOLD_SECONDS pass, so an idle follower learns the commit at once. Holding or
        dropping a message is safe in Raft (the core never relies on delivery; the simulation
        delays, drops and reorders every message type).
        """
        transport = self.transport
        assert transport is not None
        held = self._held
        if self._role != StateRole.LEADER:
            if held:
                self._release_held()
            transport.send(messages)
            return
        out: list[Message] = []
        for m in messages:
            if m.type == MessageType.APPEND:
                if not m.entries:
                    held[m.to] = m
                    continue
                held.pop(m.to, None)
            out.append(m)
        if out:
            transport.send(out)
        timer = self._hold_timer
        if held and timer is None:
            self._hold_timer = asyncio.get_running_loop().call_later(_HOLD_SECONDS, self._release_held)
        elif not held and timer is not None:
            timer.cancel()
            self._hold_timer = None

    def _release_held(self) -> None:
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None
        if self._held and self.transport is not None:
            held = list(self._held.values())
            self._held.clear()
            self.transport.send(held)

    def _on_soft_state(self, leader: str, role: StateRole) -> None:
        old_leader, old_role = self._leader, self._role
        self._leader, self._role = leader, role
        if old_role == StateRole.LEADER and role != StateRole.LEADER:
            self._leader_ready = False
            self._fail_pending(NotLeaderError(leader, self._conf.address_of(leader) if leader else ""))
            self.sm.notify_not_leader()
        if role == StateRole.LEADER and old_role != StateRole.LEADER:
            self._leader_ready = False
            self._leader_since = time.monotonic()  # a majority just voted for us
        if leader != old_leader and leader:
            self.sm.notify_leader_changed(leader, self._term)
        self._bump()

    async def _apply(self, entries: Sequence[Entry]) -> None:
        sm = self.sm
        cache = self.retry_cache
        batch: list[AppliedEntry] = []
        envs: list[Envelope] = []
        unapplied = self._unapplied_calls
        max_batch = self.config.max_apply_batch
        sm_last = 0  # index of the last entry handed to the state machine

        async def flush() -> None:
            nonlocal sm_last
            if not batch:
                return
            results = await sm.apply(batch)
            if len(results) != len(batch):
                raise LogFailedError(
                    f"state machine returned {len(results)} results for {len(batch)} entries"
                )
            for ae, env, res in zip(batch, envs, results, strict=True):
                cache.record(env, ae.index, res)
                self._resolve(ae.index, ae.term, res)
            sm_last = batch[-1].index
            batch.clear()
            envs.clear()

        own_term_applied = False
        for e in entries:
            if e.index <= self._sm_applied:
                # already in the state machine (restart replay or a checkpoint ahead of the log)
                if e.type == EntryType.NORMAL and e.data:
                    env = decode_envelope(e.data)
                    cache.advance_time(env.timestamp)
                    if env.client_id:
                        unapplied.pop((env.client_id, env.call_id), None)
                        if cache.get(env.client_id, env.call_id) is None:
                            cache.record(env, e.index, ApplyRejected("RESULT_UNAVAILABLE", "applied before a restart"))
                self._resolve_other(e)
                continue
            if e.term == self._term:
                own_term_applied = True
            if e.type != EntryType.NORMAL or not e.data:
                self._resolve_other(e)
                continue
            env = decode_envelope(e.data)
            cache.advance_time(env.timestamp)
            if env.client_id and unapplied:
                key = (env.client_id, env.call_id)
                if unapplied.get(key) == e.index:
                    del unapplied[key]
            # Every replica applies every committed entry: no apply-time decision depends on the
            # retry cache (whose contents differ after a snapshot install), so replicas never diverge.
            batch.append(AppliedEntry(e.term, e.index, env.payload))
            envs.append(env)
            if len(batch) >= max_batch:
                await flush()
        await flush()
        last = entries[-1]
        if last.index > sm_last and last.index > self._sm_applied:
            sm.notify_term_index_updated(last.term, last.index)
        self._applied = max(self._applied, last.index)
        if self._applied_waiters:
            still = []
            for idx, fut in self._applied_waiters:
                if idx <= self._applied:
                    if not fut.done():
                        fut.set_result(None)
                else:
                    still.append((idx, fut))
            self._applied_waiters = still
        if own_term_applied and self._role == StateRole.LEADER and not self._leader_ready:
            self._leader_ready = True
            sm.notify_leader_ready()
        self._bump()

    def _resolve(self, index: int, term: int, result: bytes | ApplyRejected) -> None:
        p = self._pending.pop(index, None)
        if p is None:
            return
        if p.key is not None:
            self._inflight_calls.pop(p.key, None)
        if p.future.done():
            return
        if p.term != term:
            p.future.set_exception(self._not_leader())
        elif isinstance(result, ApplyRejected):
            p.future.set_exception(result)
        else:
            p.future.set_result(result)

    def _resolve_other(self, e: Entry) -> None:
        """A no-op or conf entry (or an already-applied one) landed where a proposal may wait."""
        if e.index in self._pending:
            p = self._pending.pop(e.index)
            if p.key is not None:
                self._inflight_calls.pop(p.key, None)
            if not p.future.done():
                p.future.set_exception(self._not_leader())

    def _fail_pending(self, exc: Exception) -> None:
        pending, self._pending = self._pending, {}
        self._inflight_calls.clear()
        for p in pending.values():
            if not p.future.done():
                p.future.set_exception(exc)
                p.future.exception()  # mark retrieved: callers may have timed out already

    def _fail_all(self, exc: Exception) -> None:
        self._fail_pending(exc)
        for fut in self._reads.values():
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()
        self._reads.clear()
        for _, wfut in self._applied_waiters:
            if not wfut.done():
                wfut.set_exception(exc)
                wfut.exception()
        self._applied_waiters = []

    def _logged_unapplied(self, key: tuple[bytes, int]) -> int | None:
        """Index of an unapplied copy of this client call in our log, if there is one."""
        index = self._unapplied_calls.get(key)
        if index is None:
            return None
        storage = self.storage
        assert storage is not None
        if index > self._applied and storage.first_index() <= index <= storage.last_index():
            env = decode_envelope(storage.entries(index, index + 1)[0].data)
            if (env.client_id, env.call_id) == key:
                return index
        del self._unapplied_calls[key]  # stale: applied, or overwritten by a conflicting entry
        return None

    def _track_unapplied(self, entries: Sequence[Entry]) -> None:
        """Remember which client calls sit in the log but are not applied yet (see :meth:`submit`)."""
        unapplied = self._unapplied_calls
        for e in entries:
            if e.type == EntryType.NORMAL and e.data and e.data[0] == ENVELOPE_MAGIC:
                env = decode_envelope(e.data)
                if env.client_id:
                    unapplied[(env.client_id, env.call_id)] = e.index
        if len(unapplied) > 2 * self.config.max_pending_proposals + 1024:
            applied = self._applied  # drop keys left behind by truncated entries
            for key in [k for k, i in unapplied.items() if i <= applied]:
                del unapplied[key]

    def _rebuild_retry_cache(self, applied: int) -> None:
        """Refill the retry cache from entries still in the log up to ``applied`` (results unknown)."""
        storage = self.storage
        assert storage is not None
        lo = storage.first_index()
        for e in storage.entries(lo, applied + 1) if applied >= lo else ():
            if e.type == EntryType.NORMAL and e.data:
                env = decode_envelope(e.data)
                self.retry_cache.advance_time(env.timestamp)
                if env.client_id:
                    self.retry_cache.record(
                        env, e.index, ApplyRejected("RESULT_UNAVAILABLE", "the call was applied before a restart")
                    )
        if storage.last_index() > applied:
            self._track_unapplied(storage.entries(max(applied + 1, lo), storage.last_index() + 1))

    # ------------------------------------------------------------------ snapshots
    async def _install_snapshot(self, snap: Snapshot) -> None:
        meta = snap.metadata
        cfg = self.config
        log.info("%s: installing snapshot at index %d term %d (%s mode)", cfg.node_id, meta.index, meta.term, cfg.install_snapshot_mode)
        if cfg.install_snapshot_mode == "chunked":
            path = self._received_snapshots.pop((meta.term, meta.index), None)
            storage = self.storage
            assert storage is not None
            if path is None:
                path = storage.snapshot_file(meta.term, meta.index)
                if not path.exists():
                    raise StorageError(f"snapshot data for index {meta.index} term {meta.term} was not received")

            async def chunks() -> AsyncIterator[bytes]:
                for c in storage.read_snapshot_file(path):
                    yield c

            await self.sm.install_snapshot_data(meta, chunks())
            installed = self.sm.last_applied()[1]
            storage.remove_snapshot_files()
        else:
            installed = await self._install_from_leader(meta)
        self._sm_applied = max(installed, meta.index)

    async def _install_from_leader(self, meta: SnapshotMetadata) -> int:
        """Notification mode: the state machine downloads a checkpoint from the leader. A failed
        download (leader gone, network) is retried with backoff against the current leader; the
        Ready is not advanced meanwhile, so nothing after the snapshot is applied out of order."""
        backoff = 0.2
        attempt = 0
        while True:
            attempt += 1
            node = self._require_node()
            leader = node.status().leader or self._leader
            address = self._conf.address_of(leader) or meta.conf_state.address_of(leader)
            try:
                _, installed = await self.sm.install_snapshot_from_leader(leader, address, meta)
                if installed < meta.index:
                    raise StorageError(
                        f"the state machine installed a checkpoint at index {installed}, older than the "
                        f"snapshot index {meta.index} the leader announced"
                    )
                await self.sm.pause()
                await self.sm.reinitialize()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not self._running:
                    raise
                log.warning(
                    "%s: installing the checkpoint for snapshot %d from leader %s (%s) failed (attempt %d): %s;"
                    " retrying in %.1fs",
                    self.config.node_id, meta.index, leader or "?", address or "?", attempt, exc, backoff,
                )  # fmt: skip
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            return installed

    def _after_snapshot_installed(self, snap: Snapshot) -> None:
        meta = snap.metadata
        self._applied = max(self._applied, meta.index)
        self._last_snapshot_index = meta.index
        self._conf = meta.conf_state
        # every pending proposal at or below the snapshot can no longer be matched
        for idx in [i for i in self._pending if i <= meta.index]:
            p = self._pending.pop(idx)
            if not p.future.done():
                p.future.set_exception(self._not_leader())
        self._bump()

    async def _take_snapshot(self) -> None:
        storage = self.storage
        assert storage is not None
        term, index = await self.sm.take_snapshot()
        index = min(index, self._applied, storage.last_index())
        if index <= storage.snapshot_metadata().index or index < storage.first_index() - 1:
            self._last_snapshot_index = self._applied
            return
        storage.create_snapshot(index)
        self._last_snapshot_index = index
        compact_to = index - self.config.log_purge_gap
        if compact_to > storage.first_index() - 1:
            storage.compact(compact_to)
        log.info("%s: snapshot at index %d (term %d), log starts at %d", self.config.node_id, index, term, storage.first_index())

    async def trigger_snapshot(self) -> int:
        """Take a snapshot now (admin/tests); returns the snapshot index."""
        self._check_running()
        await self._take_snapshot()
        assert self.storage is not None
        return self.storage.snapshot_metadata().index

    # ------------------------------------------------------------------ fatal
    async def _fatal(self, exc: BaseException) -> None:
        if self.failure is not None:
            return
        self.failure = exc
        log.critical("%s: Raft log failed, stopping the server: %r", self.config.node_id, exc, exc_info=exc)
        try:
            self.sm.notify_log_failed(exc)
        except Exception:
            log.exception("%s: the state machine's notify_log_failed raised", self.config.node_id)
        self._fail_all(LogFailedError(f"Raft server {self.config.node_id} failed: {exc}"))
        if self._stop_task is None:
            self._stop_task = asyncio.get_running_loop().create_task(self._stop())


async def _wait_shared(fut: asyncio.Future[_T], timeout: float) -> _T:
    """Await a future shared by many waiters, with a per-waiter timeout that never cancels it."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[_T] = loop.create_future()

    def relay(f: asyncio.Future[_T]) -> None:
        if waiter.done():
            return
        if f.cancelled():
            waiter.cancel()
        elif (exc := f.exception()) is not None:
            waiter.set_exception(exc)
        else:
            waiter.set_result(f.result())

    def expire() -> None:
        if not waiter.done():
            waiter.set_exception(TimeoutError())

    fut.add_done_callback(relay)
    timer = loop.call_later(timeout, expire)
    try:
        return await waiter
    finally:
        timer.cancel()
        fut.remove_done_callback(relay)


# ---------------------------------------------------------------------- admin / client gRPC service
def _conf_change_in_effect(cc: ConfChange, conf: ConfState) -> bool:
    """Does ``conf`` show the effect of ``cc``?"""
    if cc.type == ConfChangeType.ADD_NODE:
        return cc.node_id in conf.voters
    if cc.type == ConfChangeType.ADD_LEARNER:
        return cc.node_id in conf.learners or cc.node_id in conf.voters
    return cc.node_id not in conf.voters and cc.node_id not in conf.learners


def _not_leader_proto(exc: NotLeaderError) -> raft_pb2.NotLeaderProto:
    return raft_pb2.NotLeaderProto(leader_id=exc.leader_id, leader_address=exc.leader_address)


def _error_proto(exc: BaseException) -> raft_pb2.ErrorProto:
    if isinstance(exc, ApplyRejected):
        return raft_pb2.ErrorProto(code=f"REJECTED:{exc.code}", message=exc.message)
    if isinstance(exc, ProposalQueueFullError):
        return raft_pb2.ErrorProto(code="QUEUE_FULL", message=str(exc))
    if isinstance(exc, RaftTimeoutError):
        return raft_pb2.ErrorProto(code="TIMEOUT", message=str(exc))
    if isinstance(exc, RaftStoppedError | LogFailedError):
        return raft_pb2.ErrorProto(code="STOPPED", message=str(exc))
    if isinstance(exc, ConfigError):
        return raft_pb2.ErrorProto(code="INVALID", message=str(exc))
    return raft_pb2.ErrorProto(code="INTERNAL", message=f"{type(exc).__name__}: {exc}")


def status_to_proto(st: RaftStatus) -> raft_pb2.StatusReply:
    return raft_pb2.StatusReply(
        node_id=st.node_id,
        role=st.role,
        term=st.term,
        leader_id=st.leader_id,
        leader_address=st.leader_address,
        commit_index=st.commit_index,
        applied_index=st.applied_index,
        last_index=st.last_index,
        conf=conf_to_proto(st.conf),
        peers=[raft_pb2.PeerProgressProto(node_id=n, match_index=m) for n, m in sorted(st.peers.items())],
        snapshot_index=st.snapshot_index,
        first_index=st.first_index,
    )


class _AdminServicer(raft_pb2_grpc.RaftAdminServicer):
    def __init__(self, server: RaftServer) -> None:
        self.s = server

    async def Submit(self, request: raft_pb2.SubmitRequest, context: Any) -> raft_pb2.SubmitReply:
        try:
            result = await self.s.submit(
                request.data, client_id=request.client_id, call_id=request.call_id, timeout=request.timeout or None
            )
        except NotLeaderError as exc:
            return raft_pb2.SubmitReply(ok=False, not_leader=_not_leader_proto(exc))
        except Exception as exc:
            return raft_pb2.SubmitReply(ok=False, error=_error_proto(exc))
        return raft_pb2.SubmitReply(ok=True, result=result)

    async def ReadIndex(self, request: raft_pb2.ReadIndexRequest, context: Any) -> raft_pb2.ReadIndexReply:
        try:
            index = await self.s.read_index(request.timeout or None)
        except NotLeaderError as exc:
            return raft_pb2.ReadIndexReply(ok=False, not_leader=_not_leader_proto(exc))
        except Exception as exc:
            return raft_pb2.ReadIndexReply(ok=False, error=_error_proto(exc))
        return raft_pb2.ReadIndexReply(ok=True, index=index)

    async def Status(self, request: raft_pb2.StatusRequest, context: Any) -> raft_pb2.StatusReply:
        return status_to_proto(self.s.status())

    async def _admin(self, coro: Any) -> raft_pb2.AdminReply:
        try:
            result = await coro
        except NotLeaderError as exc:
            return raft_pb2.AdminReply(ok=False, not_leader=_not_leader_proto(exc))
        except Exception as exc:
            return raft_pb2.AdminReply(ok=False, error=_error_proto(exc))
        return raft_pb2.AdminReply(ok=True, leader_id=result if isinstance(result, str) else self.s.leader_id)

    async def TransferLeadership(self, request: raft_pb2.TransferLeadershipRequest, context: Any) -> raft_pb2.AdminReply:
        return await self._admin(self.s.transfer_leadership(request.target_id or None, request.timeout or 10.0))

    async def AddMember(self, request: raft_pb2.MemberRequest, context: Any) -> raft_pb2.AdminReply:
        return await self._admin(self.s.add_member(request.node_id, request.address, request.timeout or 60.0))

    async def RemoveMember(self, request: raft_pb2.MemberRequest, context: Any) -> raft_pb2.AdminReply:
        return await self._admin(self.s.remove_member(request.node_id, request.timeout or 30.0))

    async def SetFaults(self, request: raft_pb2.SetFaultsRequest, context: Any) -> raft_pb2.AdminReply:
        nf = self.s.network_faults
        if nf is None:
            return raft_pb2.AdminReply(
                ok=False,
                error=raft_pb2.ErrorProto(
                    code="DISABLED", message="fault injection is disabled; start the server with enable_fault_injection"
                ),
            )
        rules = [
            faults_mod.FaultRule(
                peer=r.peer or "*",
                drop=r.drop,
                delay=r.delay,
                jitter=r.jitter,
                cut_outbound=r.cut_outbound,
                cut_inbound=r.cut_inbound,
            )
            for r in request.rules
        ]
        nf.set_rules(rules, request.seed or None)
        return raft_pb2.AdminReply(ok=True, leader_id=self.s.leader_id)

    async def ClearFaults(self, request: raft_pb2.StatusRequest, context: Any) -> raft_pb2.AdminReply:
        nf = self.s.network_faults
        if nf is None:
            return raft_pb2.AdminReply(
                ok=False, error=raft_pb2.ErrorProto(code="DISABLED", message="fault injection is disabled")
            )
        nf.clear()
        return raft_pb2.AdminReply(ok=True, leader_id=self.s.leader_id)


_ = SnapshotMetadata  # re-exported type used in signatures of state machines
