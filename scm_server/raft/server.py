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
                                                a leader's commit-only appends are held, outbox.py)
        apply rd.committed_entries in batches  (state machine; resolve submit futures by index+term)
        core.advance(rd)
        snapshot + log purge every snapshot_threshold applied entries

The loop composes parts, each in its own module with a narrow interface, none importing this one:

    view.py           CoreView: the loop's volatile view of the core, read by every part
    apply.py          Applier: committed entries -> state machine, retry cache, waiting proposals
    membership.py     MembershipChanges: add (learner, catch up, promote) and remove members
    leadership.py     LeadershipPolicy: the wall-clock lease, early campaigns when the leader's stream ends
    persist.py        LogWriter: one Ready in one LevelDB batch, on the loop or in the writer thread
    reads.py          ReadIndexBatcher: linearizable reads, concurrent readers sharing one ReadIndex round
    outbox.py         Outbox: a Ready's messages to the transport, a leader's commit-only appends held
    snapshots.py      Snapshots: take + purge, receive, install (chunked or from the leader)
    admin_service.py  RaftAdminService: the RaftAdmin gRPC service over this server

What stays here: lifecycle (start, stop, the fatal path), the client API (submit, leader transfer),
the transport's callbacks, and the Ready loop (persist, send, apply, advance).

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
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import grpc
import grpc.aio

from scm_server.exceptions import ConfigError, StorageError
from scm_server.grpc_decode import DecodeGuard
from scm_server.proto import raft_pb2_grpc
from scm_server.raft import faults as faults_mod
from scm_server.raft.admin_service import RaftAdminService, status_to_proto
from scm_server.raft.apply import Applier
from scm_server.raft.core.rawnode import Config, RawNode
from scm_server.raft.core.types import (
    ConfState,
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
from scm_server.raft.leadership import ElectionTiming, LeadershipPolicy
from scm_server.raft.membership import MembershipChanges
from scm_server.raft.metrics import RaftMetrics
from scm_server.raft.outbox import Outbox
from scm_server.raft.persist import LogWriter
from scm_server.raft.reads import ReadIndexBatcher
from scm_server.raft.retry_cache import RetryCache, encode_envelope
from scm_server.raft.snapshots import Snapshots
from scm_server.raft.statemachine import ApplyRejected, StateMachine
from scm_server.raft.storage import LevelDBStorage
from scm_server.raft.transport import (
    SERVER_OPTIONS,
    RaftTransport,
    TlsConfig,
    TransportSecurity,
    add_port,
)
from scm_server.raft.view import ChangeSignal, CoreView, RaftStatus

__all__ = [
    "NotLeaderError",
    "RaftServer",
    "RaftServerConfig",
    "RaftStatus",
    "TlsConfig",
    "status_to_proto",
]

log = logging.getLogger(__name__)

_EARLY_TYPES = frozenset({MessageType.APPEND, MessageType.HEARTBEAT})


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
        self._changes = ChangeSignal()
        self._running = False
        self._stopped = asyncio.Event()
        self.failure: BaseException | None = None
        self._view = CoreView(config.node_id)  # volatile view of the core, updated from Readys
        self._leader_ready = False
        # the parts (see the module docstring); snapshots need the log, so they come with start()
        self._applier = Applier(
            self._view,
            state_machine,
            max_apply_batch=config.max_apply_batch,
            retry_cache_expiry=config.retry_cache_expiry,
            max_pending_proposals=config.max_pending_proposals,
            request_timeout=config.request_timeout,
        )
        self._membership = MembershipChanges(
            self._view,
            self._changes,
            config.tick_interval,
            node=self._check_running,
            wake=self._wakeup.set,
            wait_until=self._wait_until,
            log_term=self._log_term,
        )
        self._leadership = LeadershipPolicy(
            self._view,
            ElectionTiming(config.tick_interval, config.election_tick, config.heartbeat_tick, config.pre_vote),
            self._running_node,
            self._wakeup.set,
            self._rng,
        )
        self.retry_cache: RetryCache = self._applier.retry_cache  # exactly-once answers (filled on apply)
        self._reads = ReadIndexBatcher(
            self._view,
            self._running_node,
            self._wakeup.set,
            self._applier.wait_applied,
            request_timeout=config.request_timeout,
            retry_every=config.tick_interval * config.election_tick,
        )
        self._snapshots: Snapshots | None = None
        self._outbox: Outbox | None = None  # the transport's, with the log's
        self._log_writer: LogWriter | None = None
        self.metrics = RaftMetrics()  # log writes, syncs, client writes and reads (Ratis's figures' counterparts)
        self.port = 0
        self.ticks = 0  # ticks driven so far (observability / tests)
        self._stop_task: asyncio.Task[None] | None = None

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
        self._log_writer = LogWriter(self._view, storage, self._writer, self.metrics)
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
        view = self._view
        view.term = hs.term
        view.commit = hs.commit
        view.conf = conf
        self._snapshots = Snapshots(
            cfg.node_id,
            storage,
            self.sm,
            mode=cfg.install_snapshot_mode,
            threshold=cfg.snapshot_threshold,
            purge_gap=cfg.log_purge_gap,
            locate_leader=self._snapshot_leader,
            running=lambda: self._running,
        )
        self._applier.start(storage, sm_index, applied)
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
        self._outbox = Outbox(view, self.transport)
        if conf.members():
            self.sm.notify_configuration_changed(conf)  # the configuration this member starts with
        # authentication first, then frames parsed inside the call (malformed ones answer INVALID_ARGUMENT)
        interceptors = [*(cfg.tls.server_interceptors() if cfg.tls is not None else ()), DecodeGuard()]
        server = grpc.aio.server(options=SERVER_OPTIONS, interceptors=interceptors)
        raft_pb2_grpc.add_RaftPeerServicer_to_server(self.transport.servicer(), server)
        raft_pb2_grpc.add_RaftAdminServicer_to_server(RaftAdminService(self), server)
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
        self._changes.bump()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

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

    def _fail_all(self, exc: Exception) -> None:
        self._reads.fail_all(exc)
        self._applier.fail_all(exc)

    # ------------------------------------------------------------------ introspection
    @property
    def node_id(self) -> str:
        return self.config.node_id

    @property
    def is_leader(self) -> bool:
        return self._view.is_leader

    @property
    def is_leader_ready(self) -> bool:
        return self._view.is_leader and self._leader_ready

    @property
    def term(self) -> int:
        return self._view.term

    @property
    def leader_id(self) -> str:
        return self._view.leader

    @property
    def applied_index(self) -> int:
        return self._view.applied

    @property
    def conf(self) -> ConfState:
        return self._view.conf

    def leader_address(self) -> str:
        return self._view.leader_address()

    def lease_remaining(self) -> float:
        """Seconds this leader may still act alone; negative when expired, 0.0 when not the leader
        (:meth:`~scm_server.raft.leadership.LeadershipPolicy.lease_remaining`)."""
        return self._leadership.lease_remaining()

    @property
    def leader_streams_lost(self) -> int:
        """How often the leader's stream to this follower ended (see :meth:`peer_stream_ended`)."""
        return self._leadership.leader_streams_lost

    @property
    def early_campaigns(self) -> int:
        """Campaigns started early because the leader's stream ended and no leader was heard since."""
        return self._leadership.early_campaigns

    @property
    def early_campaign_checks_pending(self) -> int:
        """Early-campaign timers not fired yet (tests wait for 0 before checking that none campaigned)."""
        return self._leadership.early_checks_pending

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
            applied_index=self._view.applied,
            last_index=st.last_index,
            first_index=storage.first_index(),
            snapshot_index=storage.snapshot_metadata().index,
            conf=st.conf_state,
            peers={nid: pr.match for nid, pr in st.progress.items()},
            last_contact=self._leadership.last_contact() if st.progress else {},
        )

    def _require_node(self) -> RawNode:
        if self._node is None:
            raise RaftStoppedError(f"Raft server {self.config.node_id} is not started")
        return self._node

    def _running_node(self) -> RawNode | None:
        return self._node if self._running else None

    def _check_running(self) -> RawNode:
        if self.failure is not None:
            raise LogFailedError(f"Raft server {self.config.node_id} stopped after a fatal error: {self.failure}")
        if not self._running:
            raise RaftStoppedError(f"Raft server {self.config.node_id} is not running")
        return self._require_node()

    def _log_term(self, index: int) -> int:
        storage = self.storage
        assert storage is not None
        return storage.term(index)

    # ------------------------------------------------------------------ waiting helpers
    async def _wait_until(self, pred: Callable[[], bool], deadline: float, what: str) -> None:
        loop = asyncio.get_running_loop()
        while not pred():
            if self.failure is not None or not self._running:
                self._check_running()
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise RaftTimeoutError(f"timed out waiting for {what} on {self.config.node_id}")
            await self._changes.wait(min(remaining, self.config.tick_interval * 2))

    async def wait_applied(self, index: int, timeout: float | None = None) -> None:
        """Return once the state machine has applied ``index``."""
        await self._applier.wait_applied(index, timeout)

    # ------------------------------------------------------------------ client API
    async def submit(
        self, data: bytes, *, client_id: bytes = b"", call_id: int = 0, timeout: float | None = None
    ) -> bytes:
        """Replicate ``data`` and return the state machine's result (exactly once per (client_id, call_id))."""
        node = self._check_running()
        applier = self._applier
        key = (client_id, call_id) if client_id else None
        if key is not None:
            cached = applier.cached(key)
            if cached is not None:
                return cached
            inflight = applier.inflight(key)
            if inflight is not None:
                return await applier.await_result(inflight, timeout)
            assert self.storage is not None
            logged = applier.logged_unapplied(key, self.storage)
            if logged is not None and self._view.is_leader:
                # The call is already in our log (proposed by an earlier leader, not applied yet).
                # A leader's log entries all commit under it, so wait for that copy instead of
                # proposing a second one (which would apply the call twice).
                await applier.wait_applied(logged, timeout)
                cached = applier.cached(key)
                if cached is not None:
                    return cached
                node = self._check_running()  # that copy was replaced (we lost leadership): propose
        if not self._view.is_leader:
            raise self._view.not_leader()
        if applier.pending_count >= self.config.max_pending_proposals:
            raise ProposalQueueFullError(
                f"{applier.pending_count} proposals are already waiting to commit on {self.config.node_id} "
                f"(max_pending_proposals={self.config.max_pending_proposals}); back off and retry, or raise "
                "max_pending_proposals"
            )
        payload = encode_envelope(client_id, call_id, time.time(), data)
        started = time.perf_counter()
        try:
            index = node.propose(payload)
        except ProposalDroppedError as exc:
            self.metrics.failed_client_writes += 1
            raise self._map_dropped(exc) from exc
        fut = applier.expect(index, self._view.term, key)
        self._wakeup.set()
        try:
            result = await applier.await_result(fut, timeout, index)
        except ApplyRejected:  # committed and applied: the state machine's answer is a refusal
            self.metrics.client_writes.add(time.perf_counter() - started)
            raise
        except BaseException:
            self.metrics.failed_client_writes += 1
            raise
        self.metrics.client_writes.add(time.perf_counter() - started)
        return result

    def _map_dropped(self, exc: ProposalDroppedError) -> Exception:
        text = str(exc)
        if not self._view.is_leader or "transfer" in text or "not leader" in text.lower():
            return self._view.not_leader(f"proposal dropped: {text}")
        if "full" in text.lower() or "uncommitted" in text.lower():
            return ProposalQueueFullError(
                f"proposal dropped by the Raft core: {text} (max_pending_proposals="
                f"{self.config.max_pending_proposals}); back off and retry"
            )
        return self._view.not_leader(f"proposal dropped: {text}")

    async def read_index(self, timeout: float | None = None) -> int:
        """Linearizable read barrier (ReadIndex): returns once applied >= the confirmed read index.

        Concurrent readers are batched: everyone who arrives before the next request is issued
        shares one ReadIndex round (one heartbeat quorum), like etcd's linearizable read loop."""
        self._check_running()
        started = time.perf_counter()
        index = await self._reads.read(timeout)
        self.metrics.client_reads.add(time.perf_counter() - started)
        return index

    async def transfer_leadership(self, target_id: str | None, timeout: float = 10.0) -> str:
        node = self._check_running()
        view = self._view
        if not view.is_leader:
            raise view.not_leader()
        me = self.config.node_id
        if target_id is None:
            st = node.status()
            candidates = [(pr.match, nid) for nid, pr in st.progress.items() if nid != me and nid in st.conf_state.voters]
            if not candidates:
                raise ConfigError("no other voter to transfer leadership to")
            target_id = max(candidates)[1]
        if target_id == me:
            return me
        if target_id not in view.conf.voters:
            raise ConfigError(f"cannot transfer leadership to {target_id}: it is not a voter in {view.conf.voters}")
        node.transfer_leader(target_id)
        self._wakeup.set()
        loop = asyncio.get_running_loop()
        await self._wait_until(lambda: view.leader == target_id, loop.time() + timeout, f"leader {target_id}")
        return target_id

    async def add_member(self, node_id: str, address: str, timeout: float = 60.0) -> None:
        """Add ``node_id`` as a learner, wait until it caught up, then promote it to voter."""
        await self._membership.add_member(node_id, address, timeout)

    async def remove_member(self, node_id: str, timeout: float = 30.0) -> None:
        """Remove ``node_id`` (the leader may remove itself: it steps down once the change commits)."""
        await self._membership.remove_member(node_id, timeout)

    async def trigger_snapshot(self) -> int:
        """Take a snapshot now (admin/tests); returns the snapshot index."""
        self._check_running()
        assert self._snapshots is not None
        return await self._snapshots.take(self._view.applied)

    # ------------------------------------------------------------------ transport handler
    def on_messages(self, messages: list[Message]) -> None:
        node = self._node
        if node is None or not self._running:
            return
        self._leadership.heard(messages)
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
        assert self._snapshots is not None
        await self._snapshots.receive(message.snapshot.metadata, chunks)
        self.on_messages([message])

    def snapshot_data(self) -> AsyncIterator[bytes] | None:
        assert self._snapshots is not None
        return self._snapshots.data()

    def report_unreachable(self, peer: str) -> None:
        node = self._node
        if node is not None and self._running:
            self._leadership.peer_lost(peer)
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
        """The ``peer``'s message stream to us ended: if it was our leader, campaign soon instead of after
        an election timeout; as leader, that peer stops counting towards the lease
        (:meth:`~scm_server.raft.leadership.LeadershipPolicy.stream_ended`)."""
        self._leadership.stream_ended(peer)

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
        snapshots = self._snapshots
        assert snapshots is not None
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
                if snapshots.due(self._view.applied):
                    await snapshots.take(self._view.applied)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            await self._fatal(exc)

    async def _handle_ready(self, rd: Ready) -> None:
        storage = self.storage
        transport = self.transport
        snapshots, outbox, log_writer = self._snapshots, self._outbox, self._log_writer
        assert storage is not None and transport is not None
        assert snapshots is not None and outbox is not None and log_writer is not None
        view = self._view
        if rd.hard_state is not None:
            view.term = rd.hard_state.term
        if rd.soft_state is not None:
            self._on_soft_state(rd.soft_state.leader, rd.soft_state.role)
        snap = rd.snapshot if rd.snapshot is not None and not rd.snapshot.is_empty() else None
        sm_index = await snapshots.install(snap) if snap is not None else 0
        messages = rd.messages
        if rd.conf_state is not None:
            transport.update_peers(dict(rd.conf_state.addresses))  # before sending to new members
        if messages and view.is_leader and snap is None:
            # Thesis §10.2.1: a leader may send AppendEntries/heartbeats in parallel with its own
            # write, because the core counts the leader's own match only once its log is durable.
            # Only when this Ready changes neither term nor vote (those must be durable first).
            hs, durable = rd.hard_state, storage.hard_state()
            if hs is None or (hs.term == durable.term and hs.vote == durable.vote):
                early = [m for m in messages if m.type in _EARLY_TYPES]
                if early:
                    outbox.send(early)
                    messages = tuple(m for m in messages if m.type not in _EARLY_TYPES)
        if rd.hard_state is not None or rd.entries or snap is not None:
            await log_writer.save(rd, snap)
            if rd.entries:
                self._applier.track_unapplied(rd.entries)
            if rd.hard_state is not None:
                view.commit = rd.hard_state.commit
        if snap is not None:
            self._after_snapshot_installed(snap, sm_index)
        if rd.conf_state is not None:
            view.conf = rd.conf_state
            self.sm.notify_configuration_changed(rd.conf_state)
            self._changes.bump()
        if messages:
            outbox.send(messages)
        if rd.committed_entries:
            await self._apply(rd)
        if rd.read_states:
            self._reads.confirmed(rd.read_states)

    def _on_soft_state(self, leader: str, role: StateRole) -> None:
        view = self._view
        old_leader, old_role = view.leader, view.role
        view.leader, view.role = leader, role
        if old_role == StateRole.LEADER and role != StateRole.LEADER:
            self._leader_ready = False
            self._applier.fail_pending(NotLeaderError(leader, view.conf.address_of(leader) if leader else ""))
            self.sm.notify_not_leader()
        if role == StateRole.LEADER and old_role != StateRole.LEADER:
            self._leader_ready = False
            self._leadership.became_leader()
        if leader != old_leader and leader:
            self.sm.notify_leader_changed(leader, view.term)
        self._changes.bump()

    async def _apply(self, rd: Ready) -> None:
        own_term_applied = await self._applier.apply(rd.committed_entries)
        if own_term_applied and self._view.is_leader and not self._leader_ready:
            self._leader_ready = True
            self.sm.notify_leader_ready()
        self._changes.bump()

    def _after_snapshot_installed(self, snap: Snapshot, sm_index: int) -> None:
        meta = snap.metadata
        assert self._snapshots is not None
        self._snapshots.installed(meta)
        self._view.conf = meta.conf_state
        self._applier.snapshot_installed(sm_index, meta.index)  # proposals at or below it can no longer match
        self._changes.bump()

    def _snapshot_leader(self, meta: SnapshotMetadata) -> tuple[str, str]:
        """The leader to download a checkpoint from, and its address (notification install mode)."""
        leader = self._require_node().status().leader or self._view.leader
        return leader, self._view.conf.address_of(leader) or meta.conf_state.address_of(leader)
