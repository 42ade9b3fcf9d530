"""SCMHAManagerImpl: SCM's Raft-replicated HA manager (Ozone's ``SCMHAManagerImpl`` + ``SCMRatisServerImpl``).

Where it sits: ``StorageContainerManager.create`` builds the managers and the transaction
buffer, then calls :meth:`attach` with itself (an ``SCMHAHost``); ``scm.start()`` calls
:meth:`start`. From then on every ``@replicate`` state-manager call on the leader awaits
:meth:`submit_request`, which proposes the encoded ``SCMRatisRequestProto`` to our
:class:`~scm_server.raft.server.RaftServer` with this SCM's client id and a monotonically
increasing call id (exactly-once through the Raft retry cache) and returns the response of the
local apply (:class:`~scm_server.ha.scm_state_machine.SCMStateMachine`).

It also owns:

* the inter-SCM gRPC service (``ozone.scm.grpc.port``): checkpoint download, GetScmInfo, AddSCM,
  RemoveSCM, roles, transfer and table digests (:mod:`scm_server.ha.inter_scm_service`);
* joining the ring on the first start of a bootstrapped SCM: its Raft storage has no
  configuration, so it asks the leader (``AddSCM``: cluster id check, then learner -> catch up by
  log or checkpoint -> voter), trying every configured SCM and following NotLeader hints, with a
  bounded number of rounds and backoff; names are re-resolved on every attempt (HDDS-15514);
* the datanode-report gate (see :mod:`scm_server.ha.scm_state_machine`): a monitor task asks the
  leader for its commit index once per (re)join and re-evaluates the gate every tick;
* leader hints: a follower answers client calls with NotLeaderException carrying the leader's
  peer id and its *client* address (``ozone.scm.client.grpc.port``), found by matching the leader's Raft
  address against the configured SCMs; :meth:`leader_node` gives the edges every port.

Security (``security``: the SCM's :class:`~scm_server.ca.scm_security.SCMSecurity`, held as a
:class:`RaftSecurity`, since the CA runtime sits above HA):
the Raft server and the inter-SCM server demand client certificates and run its per-call
interceptor, every outbound inter-SCM call presents this SCM's certificate, and after a successful
RemoveSCM the decommission hook revokes the removed SCM's sub-CA certificates.

Raft timing defaults (``ozone.scm.ha.ratis.*``, docs/ha.md): tick 100 ms, election timeout 1 s
randomised to [1 s, 2 s) (Ozone: 5 s fixed), pre-vote + check-quorum, snapshot every 1000
entries, log purge ON keeping 10000 entries behind the snapshot (Ozone leaves purge off and the
log grows, HDDS-3212).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import grpc
import grpc.aio

from scm_server import grpc_options
from scm_server.clock import Clock, SystemClock
from scm_server.conf import OzoneConfiguration, SCMNodeDetails
from scm_server.exceptions import ConfigError, NotLeaderException, ResultCodes, SCMException
from scm_server.grpc_decode import DecodeGuard
from scm_server.ha.bootstrap import LocalSCM, raft_group_id, resolve_local_scm
from scm_server.ha.inter_scm_client import DownloadedCheckpoint, add_scm, download_checkpoint, get_roles
from scm_server.ha.inter_scm_service import InterSCMService
from scm_server.ha.peer_addresses import PeerAddresses, host_of, peer_role, resolve_host
from scm_server.ha.ratis_metrics import RatisNames, ratis_group_label
from scm_server.ha.scm_ha_manager_api import SCMHAHost
from scm_server.ha.scm_state_machine import SCMStateMachine, Terminate, terminate_process
from scm_server.ha.transaction_buffer import SCMHADBTransactionBuffer
from scm_server.metadata.storage_config import SCMStorageConfig
from scm_server.proto import scm_ha_pb2, scm_ha_pb2_grpc, scm_ratis_pb2
from scm_server.raft.core.storage import CompactedError, UnavailableError
from scm_server.raft.core.types import ConfState, SnapshotMetadata
from scm_server.raft.errors import NotLeaderError, ProposalQueueFullError, RaftStoppedError, RaftTimeoutError
from scm_server.raft.server import RaftServer, RaftServerConfig
from scm_server.raft.statemachine import ApplyRejected
from scm_server.security.tls import ReloadableMaterial, SCMTransportSecurity

LOG = logging.getLogger(__name__)

# Our defaults (Ozone's in brackets): faster failover, purge on.
DEFAULT_TICK = "100ms"
DEFAULT_ELECTION_TIMEOUT = "1s"  # [5s]
DEFAULT_LOG_PURGE_GAP = 10000  # [1000000, purge disabled]
ELECTION_TIMEOUT_KEY = "ozone.scm.ha.ratis.leader.election.timeout"


def _duration_seconds(conf: OzoneConfiguration, key: str, default: str) -> float:
    value = conf.get_duration(key) if conf.get_str(key) is not None else None
    if value is None:
        from scm_server.conf import parse_duration

        value = parse_duration(key, default)
    return value.total_seconds()


RATIS_BIND_HOST_KEY = "ozone.scm.ratis.bind.host"
GRPC_BIND_HOST_KEY = "ozone.scm.grpc.bind.host"


def bind_address(conf: OzoneConfiguration, local: LocalSCM, key: str, advertised: str) -> str:
    """Where to listen: ``<key>[.<svc>.<node>]`` (e.g. ``0.0.0.0``) with the advertised port, else the
    advertised ``host:port`` itself. Lets an SCM whose configured address is not a local interface
    (a Kubernetes Service name, a NAT address) still listen, as the client/block/datanode ports can."""
    node = local.node
    host = conf.get_for_node(key, node.service_id, node.node_id) if node is not None else conf.get_str(key)
    if not host or not host.strip():
        return advertised
    return f"{host.strip()}:{advertised.rpartition(':')[2]}"


def raft_config_from_conf(conf: OzoneConfiguration, local: LocalSCM, scm_id: str, storage_dir: Path) -> RaftServerConfig:
    """Build the RaftServerConfig from ``ozone.scm.ha.ratis.*`` keys (documented in docs/ha.md)."""
    tick = _duration_seconds(conf, "ozone.scm.ha.ratis.tick.interval", DEFAULT_TICK)
    # Ozone ships 5s; our default (in scm_server.conf) is 1s, for sub-2s failover.
    election = _duration_seconds(conf, ELECTION_TIMEOUT_KEY, DEFAULT_ELECTION_TIMEOUT)
    if tick <= 0 or election < 2 * tick:
        raise ConfigError(
            f"{ELECTION_TIMEOUT_KEY}={election}s must be at least two ticks (ozone.scm.ha.ratis.tick.interval="
            f"{tick}s); e.g. {ELECTION_TIMEOUT_KEY}=1s"
        )
    purge_enabled = conf.get_bool("ozone.scm.ha.ratis.log.purge.enabled", True)
    purge_gap = conf.get_int("ozone.scm.ha.ratis.log.purge.gap", DEFAULT_LOG_PURGE_GAP) or 0
    snapshot_threshold = conf.get_int("ozone.scm.ha.ratis.snapshot.threshold", 1000) or 1000
    request_timeout = _duration_seconds(conf, "ozone.scm.ha.ratis.request.timeout", "30s")
    return RaftServerConfig(
        node_id=scm_id,
        address=local.ratis_address,
        storage_dir=storage_dir,
        tick_interval=tick,
        election_tick=max(2, round(election / tick)),
        heartbeat_tick=1,
        snapshot_threshold=snapshot_threshold,
        log_purge_gap=purge_gap if purge_enabled else 1 << 62,
        install_snapshot_mode="notify",
        request_timeout=request_timeout,
        fsync=bool(conf.get_bool("ozone.scm.ha.ratis.fsync", True)),
        enable_fault_injection=bool(conf.get_bool("ozone.scm.ha.ratis.fault.injection.enabled", False)),
        listen_address=bind_address(conf, local, RATIS_BIND_HOST_KEY, local.ratis_address),
    )


class RaftSecurity(Protocol):
    """What the HA manager takes of this SCM's security: the Raft and inter-SCM servers' mutual TLS, and what its
    own outbound channels present."""

    @property
    def transport(self) -> SCMTransportSecurity | None: ...

    @property
    def channel_security(self) -> ReloadableMaterial | None: ...


class SCMHAManagerImpl:
    """The Raft-backed :class:`~scm_server.ha.scm_ha_manager_api.SCMHAManager`."""

    def __init__(
        self,
        conf: OzoneConfiguration,
        storage_config: SCMStorageConfig,
        metadata_store: Any = None,
        *,
        terminate: Terminate = terminate_process,
        join_attempts: int = 30,
        security: RaftSecurity | None = None,
        clock: Clock | None = None,
        resolve: Callable[[str], str] = resolve_host,
        **_: Any,
    ) -> None:
        if storage_config.cluster_id is None or storage_config.scm_id is None:
            raise SCMException(
                ResultCodes.SCM_NOT_INITIALIZED,
                "SCM storage is not initialized; run `ozone-scm scm --init` (primordial) or "
                "`ozone-scm scm --bootstrap` first",
            )
        self.conf = conf
        self.storage_config = storage_config
        self.metadata_store = metadata_store
        self.local = resolve_local_scm(conf)
        self.cluster_id: str = storage_config.cluster_id
        self.peer_id: str = storage_config.scm_id
        self.node_id = self.local.node_id
        self.state_machine = SCMStateMachine(self, terminate)
        self.security = security
        transport = security.transport if security is not None else None
        self.channel_security = security.channel_security if security is not None else None
        self.raft_config = raft_config_from_conf(conf, self.local, self.peer_id, self.local.raft_group_dir(self.cluster_id))
        if transport is not None:
            self.raft_config = dataclasses.replace(self.raft_config, tls=transport)
        self._transport_security = transport
        self._decommission_hook: Callable[[str, str], Awaitable[None]] | None = None
        self.raft: RaftServer | None = None
        self._host: SCMHAHost | None = None
        self._client_id = uuid.uuid4().bytes
        self._call_ids = itertools.count(1)
        self._grpc: grpc.aio.Server | None = None
        self.grpc_port = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._join_attempts = join_attempts
        self._target_leader: str | None = None  # leader whose commit index we captured
        self._running = False
        # the IP address each peer's host resolves to, the last field of GetScmInfo's peerRoles
        self.peer_addresses = PeerAddresses(clock or SystemClock(), resolve)
        self._address_refresh: asyncio.Task[None] | None = None

    # ---- wiring ----
    def attach(self, scm: SCMHAHost) -> None:
        self._host = scm
        scm.scm_context.set_leader_hint(self.get_leader)
        # StateMachineReadyRule (safemode, HA only): out of safemode only once caught up.
        scm.set_state_machine_ready_hook(self.is_state_machine_ready)

    @property
    def host(self) -> SCMHAHost:
        if self._host is None:
            raise RuntimeError("SCMHAManagerImpl used before attach(scm)")
        return self._host

    @property
    def transaction_buffer(self) -> SCMHADBTransactionBuffer:
        return self.host.transaction_buffer

    def checkpoint_work_dir(self) -> str:
        path = self.local.snapshot_dir
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    # ---- lifecycle ----
    async def start(self) -> None:
        host = self.host
        del host
        await self._start_inter_scm_server()
        self.raft = RaftServer(self.raft_config, self.state_machine)
        try:
            await self.raft.start()
        except ConfigError as exc:
            if "cannot listen" not in str(exc):
                raise
            raise ConfigError(
                f"{exc} (ozone.scm.ratis.port; if the host is not a local address, set {RATIS_BIND_HOST_KEY}=0.0.0.0 "
                "to listen on every interface)"
            ) from exc
        self._running = True
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._monitor(), name=f"scm-ha-monitor-{self.node_id}"))
        if not self.raft.conf.members():
            await self._join_ring()
        self._refresh_addresses_soon()  # the peers' IP addresses looked up before anyone asks for the roles

    async def stop(self) -> None:
        self._running = False
        if self._address_refresh is not None:
            self._tasks.append(self._address_refresh)
            self._address_refresh = None
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        self._tasks = []
        if self.raft is not None:
            await self.raft.stop()
        if self._host is not None:
            try:
                self._host.transaction_buffer.flush_if_needed()
            except Exception:  # stopping anyway; but a lost flush must be visible
                LOG.exception("flushing the SCM transaction buffer at stop failed")
        if self._grpc is not None:
            await self._grpc.stop(grace=0.5)
            self._grpc = None

    async def _start_inter_scm_server(self) -> None:
        listen = bind_address(self.conf, self.local, GRPC_BIND_HOST_KEY, self.local.grpc_address)
        transport = self._transport_security
        server = grpc.aio.server(
            options=grpc_options.server_options(max_message_bytes=64 << 20),
            # authentication first, then frames parsed inside the call (malformed ones answer INVALID_ARGUMENT)
            interceptors=[*(transport.server_interceptors() if transport is not None else ()), DecodeGuard()],
        )
        scm_ha_pb2_grpc.add_InterSCMProtocolServiceServicer_to_server(InterSCMService(self), server)
        try:
            if transport is not None:
                self.grpc_port = server.add_secure_port(listen, transport.server_credentials())
            else:
                self.grpc_port = server.add_insecure_port(listen)
        except RuntimeError as exc:
            self.grpc_port = 0
            LOG.debug("binding %s failed: %s", listen, exc)
        if not self.grpc_port:
            raise ConfigError(
                f"cannot listen on {listen} for the inter-SCM service (ozone.scm.grpc.port): the port is in use, "
                f"or the host is not a local address (set {GRPC_BIND_HOST_KEY}=0.0.0.0 to listen on every interface)"
            )
        await server.start()
        self._grpc = server

    async def _join_ring(self) -> None:
        """First start of a bootstrapped SCM: ask the leader to add us (AddSCM), bounded."""
        raft = self._raft()
        addresses = [p.grpc_address for p in self.local.peers]
        if not addresses:
            raise SCMException(
                ResultCodes.SCM_NOT_INITIALIZED,
                f"SCM {self.node_id} has no Raft configuration and no other SCM is configured to join; "
                "run `ozone-scm scm --init` on the primordial SCM",
            )
        request = scm_ha_pb2.AddScmRequestProto(
            clusterId=self.cluster_id, scmId=self.peer_id, ratisAddr=self.raft_config.address, nodeId=self.node_id or ""
        )
        LOG.info("SCM %s (%s) has no Raft configuration: asking the leader to add it", self.node_id, self.peer_id)
        accepted = await add_scm(addresses, request, attempts=self._join_attempts, security=self.channel_security)
        LOG.info("SCM %s added to the ring by %s (conf %s)", self.node_id, accepted, raft.conf.voters)

    def _raft(self) -> RaftServer:
        if self.raft is None:
            raise SCMException(ResultCodes.INTERNAL_ERROR, "SCM HA manager is not started")
        return self.raft

    # ---- replication ----
    async def submit_request(
        self, request: scm_ratis_pb2.SCMRatisRequestProto, *, client_call: tuple[bytes, int] | None = None
    ) -> scm_ratis_pb2.SCMRatisResponseProto:
        """Replicate ``request``; exactly once per (client id, call id): this SCM's own with a fresh call
        id, or the client's when the write is made for a client call (its retries, here or on the next
        leader, get the first result; :mod:`scm_server.ha.client_call`)."""
        raft = self._raft()
        if not raft.is_leader:
            raise self.not_leader_exception()
        data = request.SerializeToString()
        client_id, call_id = client_call if client_call is not None else (self._client_id, next(self._call_ids))
        for attempt in range(2):
            try:
                result = await raft.submit(data, client_id=client_id, call_id=call_id)
                break
            except NotLeaderError as exc:
                raise self.not_leader_exception(exc.leader_id) from exc
            except ApplyRejected as exc:
                return scm_ratis_pb2.SCMRatisResponseProto(errorResult=exc.code, errorMessage=exc.message)
            except ProposalQueueFullError as exc:
                raise SCMException(ResultCodes.TIMEOUT, f"Raft proposal queue is full; retry later ({exc})") from exc
            except RaftTimeoutError as exc:
                if attempt == 0 and raft.is_leader:
                    continue  # same call id: the retry cache makes the retry exactly-once
                raise SCMException(ResultCodes.TIMEOUT, f"replicated {request.method.name} timed out: {exc}") from exc
            except RaftStoppedError as exc:
                raise self.not_leader_exception() from exc
        response = scm_ratis_pb2.SCMRatisResponseProto()
        response.ParseFromString(result)
        return response

    # ---- leadership ----
    def is_leader(self) -> bool:
        return self.raft is not None and self.raft.is_leader

    def leader_lease_remaining(self) -> float:
        """Seconds left of this leader's lease (negative: expired; see RaftServer.lease_remaining)."""
        return self.raft.lease_remaining() if self.raft is not None else 0.0

    def current_term(self) -> int:
        return self.raft.term if self.raft is not None else 0

    def leader_peer_id(self) -> str | None:
        if self.raft is None:
            return None
        return self.raft.leader_id or None

    def node_of_peer(self, peer_id: str) -> SCMNodeDetails | None:
        """The configured SCM whose Raft address matches ``peer_id``'s address in the Raft conf."""
        if peer_id == self.peer_id:
            return self.local.node
        raft = self.raft
        if raft is None:
            return None
        address = raft.conf.address_of(peer_id)
        for node in self.local.ha.nodes:
            if node.ratis_address == address:
                return node
        return None

    def ring_membership(self) -> ConfState | None:
        return self.raft.conf if self.raft is not None else None

    def raft_role(self) -> str | None:
        return self.raft.status().role if self.raft is not None else None

    def metrics_collector(self) -> RatisNames:
        """Our Raft's figures under Apache Ratis's names (ratis_log_worker_*, ratis_server_*), for /prom."""
        return RatisNames(lambda: self.raft.metrics if self.raft is not None else None, self.peer_id,
                          ratis_group_label(raft_group_id(self.cluster_id)))

    def leader_node(self) -> SCMNodeDetails | None:
        leader = self.leader_peer_id()
        return self.node_of_peer(leader) if leader else None

    def get_leader(self) -> tuple[str, str] | None:
        """(leader peer id, leader's client address) if known."""
        leader = self.leader_peer_id()
        if not leader:
            return None
        node = self.node_of_peer(leader)
        return leader, node.client_address if node is not None else ""

    def not_leader_exception(self, leader_id: str | None = None) -> NotLeaderException:
        leader = leader_id or self.leader_peer_id() or ""
        node = self.node_of_peer(leader) if leader else None
        return NotLeaderException(
            f"SCM {self.node_id} ({self.peer_id}) is not the leader",
            leader,
            node.client_address if node is not None else "",
        )

    def on_leader_changed(self, leader_id: str, term: int) -> None:
        host = self.host
        if leader_id == self.peer_id:
            LOG.info("SCM %s became leader in term %d", self.node_id, term)
            host.on_become_leader(term)
        else:
            LOG.info("SCM %s: leader is now %s (term %d)", self.node_id, leader_id, term)

    def on_leader_ready(self) -> None:
        self.state_machine.mark_leader()
        self.host.on_leader_ready()

    def on_not_leader(self) -> None:
        LOG.info("SCM %s stepped down", self.node_id)
        self.host.on_step_down(self.current_term())

    def on_configuration_changed(self, conf: ConfState) -> None:
        LOG.info("SCM %s: Raft configuration voters=%s learners=%s", self.node_id, conf.voters, conf.learners)
        self._refresh_addresses_soon()

    def is_state_machine_ready(self) -> bool:
        """StateMachineReadyRule / datanode-report gate (HDDS-14989)."""
        return self.state_machine.is_state_machine_ready

    def dn_reports_ready(self) -> bool:
        return self.state_machine.dn_reports_ready

    def check_dn_reports_allowed(self) -> None:
        """Raise (a retriable error: the datanode keeps its reports) until this SCM caught up.

        The facade calls this first in register/heartbeat processing: Ozone does not even start
        the datanode server until then (HDDS-14989); refusing the call has the same effect on the
        datanode, which keeps its incremental reports for the next heartbeat.
        """
        if self.state_machine.dn_reports_ready:
            return
        applied = self.host.transaction_buffer.latest_trx_info().index
        target = self.state_machine.catch_up_target
        raise SCMException(
            ResultCodes.TIMEOUT,
            f"SCM {self.node_id or self.peer_id} is catching up with the leader (applied index {applied}, leader commit index "
            f"{'unknown yet' if target is None else target}); datanode reports are accepted once it has caught up",
        )

    async def _monitor(self) -> None:
        """Capture the leader's commit index on (re)join and re-evaluate the gate every tick."""
        tick = max(self.raft_config.tick_interval, 0.05)
        election = self.raft_config.election_tick * self.raft_config.tick_interval
        last_ask = 0.0
        failing_since: float | None = None
        loop = asyncio.get_running_loop()
        while self._running:
            await asyncio.sleep(tick * 2)
            sm = self.state_machine
            if sm.dn_reports_ready:
                continue
            raft = self.raft
            if raft is None:
                continue
            leader = raft.leader_id
            if not leader or leader == self.peer_id:
                sm.check_catch_up()
                continue
            if sm.catch_up_target is None or self._target_leader != leader:
                if loop.time() - last_ask < min(0.5, election / 2):
                    continue
                last_ask = loop.time()
                target, source = await self._leader_commit_index(leader, timeout=min(2.0, election))
                if target is None:
                    failing_since = last_ask if failing_since is None else failing_since
                    if loop.time() - failing_since >= election:
                        # Nobody reachable over the inter-SCM service could tell within an election
                        # timeout (the leader is missing from our configuration, or its inter-SCM port is
                        # not reachable yet after a move): use the commit index the leader sent us.
                        target, source = raft.status().commit_index, "the leader's heartbeats"
                if target is not None:
                    failing_since = None
                    self._target_leader = leader
                    sm.set_catch_up_target(target)
                    LOG.info(
                        "SCM %s: leader %s commit index %d captured (from %s); datanode reports wait until applied",
                        self.node_id,
                        leader,
                        target,
                        source,
                    )
            sm.check_catch_up()

    async def _leader_commit_index(self, leader: str, timeout: float = 2.0) -> tuple[int | None, str]:
        """The leader's commit index, asked over the inter-SCM service (or a peer following it).

        Every SCM is asked concurrently, each within ``timeout``: a peer that moved or hangs costs one
        timeout, not one per peer."""
        node = self.node_of_peer(leader)
        addresses = [node.grpc_address] if node is not None else []
        addresses += [p.grpc_address for p in self.local.peers if p.grpc_address not in addresses]
        answers = await asyncio.gather(
            *(get_roles(a, timeout=timeout, security=self.channel_security) for a in addresses), return_exceptions=True
        )
        fallback: tuple[int | None, str] = (None, "")
        for address, roles in zip(addresses, answers, strict=True):
            if isinstance(roles, BaseException):
                if not isinstance(roles, grpc.aio.AioRpcError | OSError):
                    raise roles
                continue
            if roles.answeredBy == leader:
                return roles.commitIndex, f"the leader at {address}"
            if roles.leaderId == leader and fallback[0] is None:
                fallback = (roles.commitIndex, f"follower {roles.answeredBy} of the same leader")
        return fallback

    # ---- membership / leadership admin ----
    async def add_scm(self, scm_id: str, ratis_address: str, node_id: str = "") -> str:
        raft = self._raft()
        if scm_id in raft.conf.voters:
            return f"SCM {scm_id} is already a member"
        LOG.info("adding SCM %s (%s) at %s to the ring", node_id or "?", scm_id, ratis_address)
        try:
            await raft.add_member(scm_id, ratis_address, timeout=max(60.0, self.raft_config.request_timeout * 4))
        except NotLeaderError as exc:
            raise self.not_leader_exception(exc.leader_id) from exc
        except RaftTimeoutError as exc:
            raise SCMException(ResultCodes.TIMEOUT, str(exc)) from exc
        return f"SCM {scm_id} added"

    async def remove_scm(self, scm_id: str) -> str:
        raft = self._raft()
        if scm_id == self.peer_id or scm_id == raft.leader_id:
            raise SCMException(
                ResultCodes.INVALID_REQUEST,
                f"Cannot remove current leader {scm_id}; transfer leadership first (`ozone-scm admin scm transfer`)",
            )
        if scm_id not in raft.conf.members():
            raise SCMException(ResultCodes.INVALID_REQUEST, f"SCM {scm_id} is not a member of the ring {raft.conf.voters}")
        node = self.node_of_peer(scm_id)
        try:
            await raft.remove_member(scm_id)
        except NotLeaderError as exc:
            raise self.not_leader_exception(exc.leader_id) from exc
        except RaftTimeoutError as exc:
            raise SCMException(ResultCodes.TIMEOUT, str(exc)) from exc
        hook = self._decommission_hook
        if hook is not None:
            # security: a decommissioned SCM's sub-CA certificate is revoked (Ozone left that to hand, HDDS-8399)
            await hook(scm_id, node.node_id if node is not None else "")
            return f"SCM {scm_id} removed from the ring; its certificates are revoked"
        return f"SCM {scm_id} removed from the ring"

    def set_decommission_hook(self, hook: Callable[[str, str], Awaitable[None]]) -> None:
        """Called with (scm id, node id) on the leader after an SCM was removed from the ring."""
        self._decommission_hook = hook

    async def transfer_leadership(self, target: str | None) -> str:
        raft = self._raft()
        try:
            return await raft.transfer_leadership(target)
        except NotLeaderError as exc:
            raise self.not_leader_exception(exc.leader_id) from exc
        except ConfigError as exc:
            raise SCMException(ResultCodes.INVALID_REQUEST, str(exc)) from exc
        except RaftTimeoutError as exc:
            raise SCMException(ResultCodes.TIMEOUT, f"leadership transfer to {target or 'any'} timed out: {exc}") from exc

    # ---- roles ----
    def peer_roles(self) -> list[str]:
        """``roles_proto().roles`` (``host:port:ROLE:peerId:ip`` per member, as Ozone 2.2.0 answers; see
        :mod:`scm_server.ha.peer_addresses`) from Raft's published view alone, without the rest of that answer:
        GetScmInfo, the no-op call of both transports, asks for it on every call, so the IP addresses come from
        memory (a stale one is looked up in the background). Empty before Raft starts (its view has no members
        yet), as roles_proto's is."""
        raft = self.raft
        if raft is None:
            return []
        conf = raft.conf
        leader = raft.leader_id
        self._refresh_addresses_soon()
        return [self._peer_role(conf.address_of(peer), _role_of(peer, leader, conf.learners), peer)
                for peer in conf.members()]

    def _peer_role(self, address: str, role: str, peer: str) -> str:
        return peer_role(address, role, peer, self.peer_addresses.ip_of(host_of(address)))

    def _peer_hosts(self) -> list[str]:
        raft = self.raft
        if raft is None:
            return []
        conf = raft.conf
        return [host_of(conf.address_of(peer)) for peer in conf.members()]

    def _refresh_addresses_soon(self) -> None:
        """Look up the peers' stale host names in the background (one lookup round at a time; none without a
        running event loop): the caller answers with what is known now."""
        if self._address_refresh is not None and not self._address_refresh.done():
            return
        hosts = self._peer_hosts()
        if not self.peer_addresses.stale(hosts):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._address_refresh = loop.create_task(self.peer_addresses.refresh(hosts), name=f"scm-peer-addresses-{self.node_id}")

    def roles_proto(self) -> scm_ha_pb2.ScmRatisRolesResponseProto:
        raft = self.raft
        resp = scm_ha_pb2.ScmRatisRolesResponseProto(answeredBy=self.peer_id, term=0, commitIndex=0, appliedIndex=0)
        if raft is None:
            return resp
        try:
            st = raft.status()
        except RaftStoppedError:  # starting or stopping: answer for itself without a Raft view
            resp.selfRole = "STARTING" if self._running is False else "STOPPED"
            resp.answeredByNode = self.node_id or ""
            return resp
        resp.selfRole = st.role
        resp.answeredByNode = self.node_id or ""
        resp.term = st.term
        resp.commitIndex = st.commit_index
        resp.appliedIndex = st.applied_index
        resp.leaderId = st.leader_id
        resp.lastIndex = st.last_index
        if raft.storage is not None:
            # the status is a snapshot of a running ring: the log may be compacted past (or not yet hold) the
            # index read a moment ago; the term is then left unset rather than failing the whole answer
            with contextlib.suppress(CompactedError, UnavailableError):
                resp.lastTerm = raft.storage.term(st.last_index)
        resp.electionTimeoutMs = round(self.raft_config.election_tick * self.raft_config.tick_interval * 1000)
        resp.heartbeatIntervalMs = round(self.raft_config.heartbeat_tick * self.raft_config.tick_interval * 1000)
        for peer in st.conf.members():
            address = st.conf.address_of(peer)
            host, _, port = address.rpartition(":")
            role = _role_of(peer, st.leader_id, st.conf.learners)
            node = self.node_of_peer(peer)
            p = scm_ha_pb2.ScmPeerRoleProto(
                host=host, ratisPort=int(port or 0), role=role, peerId=peer, nodeId=node.node_id if node else ""
            )
            if node is not None:
                p.clientAddress = node.client_address
                p.grpcAddress = node.grpc_address
            if st.peers and peer in st.peers:
                p.matchIndex = st.peers[peer]
                p.lag = max(0, st.commit_index - st.peers[peer])
            elif peer == self.peer_id:
                p.matchIndex = st.last_index
                p.lag = max(0, st.commit_index - st.applied_index)
            if peer in st.last_contact:
                p.lastContactMs = round(st.last_contact[peer] * 1000)
            resp.peers.append(p)
            resp.roles.append(self._peer_role(address, role, peer))
        return resp

    # ---- snapshot install support ----
    async def pause_for_install(self) -> None:
        return None

    async def download_checkpoint_from_leader(
        self, leader_id: str, leader_address: str, meta: SnapshotMetadata
    ) -> DownloadedCheckpoint:
        """Try the leader's inter-SCM service first, then any other configured SCM."""
        addresses: list[str] = []
        node = self.node_of_peer(leader_id) if leader_id else None
        if node is None and leader_address:
            for n in self.local.ha.nodes:
                if n.ratis_address == leader_address:
                    node = n
        if node is not None:
            addresses.append(node.grpc_address)
        addresses += [p.grpc_address for p in self.local.peers if p.grpc_address not in addresses]
        errors: list[str] = []
        dest = Path(self.checkpoint_work_dir())
        for address in addresses:
            try:
                ck = await download_checkpoint(address, self.cluster_id, dest, security=self.channel_security)
            except (SCMException, OSError) as exc:
                errors.append(f"{address}: {exc}")
                continue
            if ck.transaction_info.index < meta.index:
                errors.append(f"{address}: checkpoint at {ck.transaction_info.index} < snapshot index {meta.index}")
                import shutil

                shutil.rmtree(ck.db_path.parent.parent, ignore_errors=True)
                continue
            return ck
        raise SCMException(
            ResultCodes.IO_EXCEPTION,
            f"could not download a checkpoint at index >= {meta.index} from {', '.join(addresses)}: {'; '.join(errors)}",
        )


def _role_of(peer: str, leader_id: str, learners: Any) -> str:
    if peer == leader_id:
        return "LEADER"
    return "LEARNER" if peer in learners else "FOLLOWER"

