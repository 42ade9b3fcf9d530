"""Simulated datanodes that speak the real gRPC datanode protocol to every SCM.

Used by integration tests, ``ozone-scm datanode-sim``, ``ozone-scm local run`` and the
benchmarks. One ``DatanodeSimulator`` holds N ``SimDatanode``s in one asyncio loop; each
datanode runs one endpoint task per SCM, walking Ozone's DN endpoint state machine

    SEARCHING_SCM (GetVersion: learn clusterID) -> REGISTER (full report) -> HEARTBEAT

and every heartbeat carries the node report, pending incremental container reports (ICRs),
command status reports (block deletion ACKs), container actions (CLOSE when a replica passes
90% of ``ozone.scm.container.size``), pipeline reports, and periodically a full container
report. Every SCM gets every report (followers rebuild soft state too), but commands are
executed only when ``fencing.CommandFence`` says the issuing SCM is the current leader.

The simulated state is a dict of replicas per datanode (state, used bytes, key count, BCSID,
delete transaction id) plus the pipelines it has joined. ``replicateContainer`` copies a
replica from a source datanode found in the simulator's registry (all simulated datanodes
of the process). Test controls: ``kill``, ``make_stale``, ``revive``, ``corrupt_replica``,
``write_to_container``, ``finalization_held``.

Each datanode reports its HDDS layout versions (``LayoutVersionProto``: software 10, Ozone 2.2.0's; metadata
``layout_version``, older for data written by an older release) and finalizes its metadata layout when SCM sends
``finalizeNewLayoutVersionCommand``.

With a :class:`~scm_server.datanode_sim.security.DatanodeSecurity` (mutual TLS), every datanode
first obtains its own certificate from the leader (or loads it from its directory), talks to every
SCM over its own channels presenting it, and renews it within the grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import random
import time
import uuid as uuidlib
from collections.abc import Iterable, Mapping, Sequence

from scm_server.client.datanode_client import DatanodeProtocolClient
from scm_server.client.errors import SCMUnavailableError
from scm_server.client.hadoop_rpc import HadoopDatanodeClient
from scm_server.client.scm_client import SCMClient
from scm_server.datanode_sim.fencing import CommandFence
from scm_server.datanode_sim.security import DatanodeSecurity
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.hdds_layout import SOFTWARE_LAYOUT_VERSION
from scm_server.proto import hdds_pb2, scm_datanode_pb2
from scm_server.security.cert_client import NodeCertificateClient
from scm_server.security.tls import ChannelSecurity

# The transports a simulated datanode can speak: our gRPC protocol, or Ozone's over Hadoop RPC.
PROTOCOLS = ("grpc", "hadoop-rpc")
DatanodeClient = DatanodeProtocolClient | HadoopDatanodeClient

LOG = logging.getLogger(__name__)

RState = hdds_pb2.ContainerReplicaProto
CmdType = scm_datanode_pb2.SCMCommandProto
GB = 1024**3
METADATA_VOLUME = 64 * GB  # the simulated datanodes' Ratis metadata volume


class EndpointState(enum.Enum):
    SEARCHING_SCM = "SEARCHING_SCM"
    REGISTER = "REGISTER"
    HEARTBEAT = "HEARTBEAT"
    SHUTDOWN = "SHUTDOWN"


@dataclasses.dataclass
class Replica:
    container_id: int
    state: int = RState.OPEN
    used: int = 0
    key_count: int = 0
    bcsid: int = 0
    delete_txn_id: int = 0
    origin_node: str = ""
    close_requested: bool = False
    replica_index: int = 0  # EC: the stripe position this replica holds (1..d+p); 0 for Ratis

    def to_proto(self, size: int) -> hdds_pb2.ContainerReplicaProto:
        proto = hdds_pb2.ContainerReplicaProto(
            containerID=self.container_id,
            state=self.state,  # type: ignore[arg-type]
            size=size,
            used=self.used,
            keyCount=self.key_count,
            deleteTransactionId=self.delete_txn_id,
            blockCommitSequenceId=self.bcsid,
            originNodeId=self.origin_node,
            isEmpty=self.key_count == 0,
        )
        if self.replica_index:
            proto.replicaIndex = self.replica_index
        return proto


@dataclasses.dataclass
class _Outbox:
    """What one SCM endpoint still has to be told (each SCM gets its own copy)."""

    icrs: list[hdds_pb2.ContainerReplicaProto] = dataclasses.field(default_factory=list)
    statuses: list[scm_datanode_pb2.CommandStatus] = dataclasses.field(default_factory=list)
    actions: list[scm_datanode_pb2.ContainerAction] = dataclasses.field(default_factory=list)
    pipelines_dirty: bool = True
    full_report_due: bool = True


@dataclasses.dataclass
class Endpoint:
    address: str
    state: EndpointState = EndpointState.SEARCHING_SCM
    cluster_id: str = ""
    outbox: _Outbox = dataclasses.field(default_factory=_Outbox)
    last_full_report: float = 0.0
    last_pipeline_report: float = 0.0
    heartbeats: int = 0
    failures: int = 0
    last_error: str = ""
    register_error: str = ""
    unreachable: bool = False  # the last attempt could not reach this SCM at all


class SimDatanode:
    """One simulated datanode: identity, replicas, pipelines, and its per-SCM endpoints."""

    def __init__(
        self,
        sim: DatanodeSimulator,
        index: int,
        rack: str,
        hostname: str,
        capacity: int,
        dn_uuid: str | None = None,
        protocol: str | None = None,
    ) -> None:
        self.sim = sim
        self.index = index
        self.protocol = protocol or sim.protocol  # the datanode protocol's transport: grpc or hadoop-rpc
        if dn_uuid is None and sim.security is not None:
            dn_uuid = sim.security.datanode_uuid(hostname)
        self.uuid = dn_uuid or str(uuidlib.uuid4())
        self.hostname = hostname
        self.rack = rack
        self.ip = "127.0.0.1"
        self.capacity = capacity
        self.containers: dict[int, Replica] = {}
        self.pipelines: dict[str, bool] = {}  # pipeline id -> this DN is the Ratis leader
        self.op_state: int = hdds_pb2.IN_SERVICE
        self.op_state_expiry = 0
        self.fence = CommandFence()
        self.endpoints = [Endpoint(a) for a in sim.addresses_for(self.protocol)]
        self.alive = True
        self.resume = asyncio.Event()
        self.resume.set()
        self.tasks: list[asyncio.Task[None]] = []
        self.executed: dict[str, int] = {}
        self.deferred: list[scm_datanode_pb2.SCMCommandProto] = []
        self.certificates: NodeCertificateClient | None = None
        self._enrol_lock = asyncio.Lock()
        # HDDS layout versions it reports: its software's (Ozone 2.2.0's) and its data's (older after an upgrade)
        self.software_layout = SOFTWARE_LAYOUT_VERSION
        self.metadata_layout = sim.layout_version

    def layout(self) -> scm_datanode_pb2.LayoutVersionProto:
        return scm_datanode_pb2.LayoutVersionProto(
            metadataLayoutVersion=self.metadata_layout, softwareLayoutVersion=self.software_layout)

    # ---- identity and reports ----

    def details(self) -> hdds_pb2.DatanodeDetailsProto:
        base = self.sim.port_base + self.index * 10
        return hdds_pb2.DatanodeDetailsProto(
            uuid=self.uuid,
            ipAddress=self.ip,
            hostName=self.hostname,
            ports=[
                hdds_pb2.Port(name="STANDALONE", value=base),
                hdds_pb2.Port(name="RATIS", value=base + 1),
                hdds_pb2.Port(name="REST", value=base + 2),
            ],
            networkName=self.uuid,
            networkLocation=self.rack,
            persistedOpState=self.op_state,  # type: ignore[arg-type]
            persistedOpStateExpiry=self.op_state_expiry,
        )

    def node_report(self) -> scm_datanode_pb2.NodeReportProto:
        used = sum(r.used for r in self.containers.values())
        return scm_datanode_pb2.NodeReportProto(
            storageReport=[
                scm_datanode_pb2.StorageReportProto(
                    storageUuid=f"DS-{self.uuid}",
                    storageLocation=f"/data/hdds/{self.hostname}",
                    capacity=self.capacity,
                    scmUsed=used,
                    remaining=max(self.capacity - used, 0),
                    committed=0,
                    failed=False,
                )
            ],
            # the Ratis metadata volume, as a real datanode reports it (Ozone places pipelines only on
            # datanodes with room there)
            metadataStorageReport=[
                scm_datanode_pb2.MetadataStorageReportProto(
                    storageLocation=f"/data/ratis/{self.hostname}", capacity=METADATA_VOLUME,
                    scmUsed=0, remaining=METADATA_VOLUME, failed=False,
                )
            ],
        )

    def container_report(self) -> scm_datanode_pb2.ContainerReportsProto:
        size = self.sim.container_size
        return scm_datanode_pb2.ContainerReportsProto(
            reports=[r.to_proto(size) for r in self.containers.values()]
        )

    def pipeline_reports(self) -> scm_datanode_pb2.PipelineReportsProto:
        return scm_datanode_pb2.PipelineReportsProto(
            pipelineReport=[
                scm_datanode_pb2.PipelineReport(pipelineID=hdds_pb2.PipelineID(id=pid), isLeader=leader)
                for pid, leader in self.pipelines.items()
            ]
        )

    def _icr(self, replica: Replica | hdds_pb2.ContainerReplicaProto) -> None:
        proto = replica.to_proto(self.sim.container_size) if isinstance(replica, Replica) else replica
        for ep in self.endpoints:
            ep.outbox.icrs.append(proto)

    def _status(self, status: scm_datanode_pb2.CommandStatus) -> None:
        for ep in self.endpoints:
            ep.outbox.statuses.append(status)

    def _pipelines_changed(self) -> None:
        for ep in self.endpoints:
            ep.outbox.pipelines_dirty = True

    # ---- simulated client writes ----

    def add_replica(
        self, container_id: int, state: int = RState.OPEN, used: int = 0, keys: int = 0, replica_index: int = 0
    ) -> Replica:
        replica = self.containers.get(container_id)
        if replica is None:
            replica = Replica(
                container_id, state, used, keys, bcsid=keys, origin_node=self.uuid, replica_index=replica_index
            )
            self.containers[container_id] = replica
            self._icr(replica)
        return replica

    def write(self, container_id: int, nbytes: int, keys: int) -> bool:
        replica = self.containers.get(container_id)
        if replica is None or replica.state != RState.OPEN:
            return False
        replica.used += nbytes
        replica.key_count += keys
        replica.bcsid += max(keys, 1)
        self._icr(replica)
        threshold = int(0.9 * self.sim.container_size)
        if replica.used >= threshold and not replica.close_requested:
            replica.close_requested = True
            action = scm_datanode_pb2.ContainerAction(
                containerID=container_id,
                action=scm_datanode_pb2.ContainerAction.CLOSE,
                reason=scm_datanode_pb2.ContainerAction.CONTAINER_FULL,
            )
            for ep in self.endpoints:
                ep.outbox.actions.append(action)
        return True

    # ---- commands ----

    def handle_response(self, ep: Endpoint, resp: scm_datanode_pb2.SCMHeartbeatResponseProto) -> None:
        response_term = resp.term if resp.HasField("term") else None
        for cmd in resp.commands:
            if cmd.commandType == CmdType.reregisterCommand:
                # Re-registration concerns only the SCM that asked: no leader fencing.
                ep.state = EndpointState.REGISTER
                continue
            command_term = cmd.term if cmd.HasField("term") else None
            if not self.fence.accept(response_term, command_term):
                LOG.info(
                    "%s: dropped %s from %s (term %s, highest seen %s)",
                    self.hostname, CmdType.Type.Name(cmd.commandType), ep.address,
                    command_term if command_term is not None else response_term, self.fence.highest_term,
                )
                continue
            self.execute(cmd)

    def execute(self, cmd: scm_datanode_pb2.SCMCommandProto) -> None:
        name = CmdType.Type.Name(cmd.commandType)
        self.executed[name] = self.executed.get(name, 0) + 1
        if cmd.commandType == CmdType.createPipelineCommand:
            c = cmd.createPipelineCommandProto
            leader = bool(c.datanode) and c.datanode[0].uuid == self.uuid
            self.pipelines[c.pipelineID.id] = leader
            self._pipelines_changed()
        elif cmd.commandType == CmdType.closePipelineCommand:
            self.pipelines.pop(cmd.closePipelineCommandProto.pipelineID.id, None)
            self._pipelines_changed()
        elif cmd.commandType == CmdType.closeContainerCommand:
            replica = self.containers.get(cmd.closeContainerCommandProto.containerID)
            if replica is not None and replica.state in (RState.OPEN, RState.CLOSING, RState.QUASI_CLOSED):
                replica.state = RState.CLOSED
                self._icr(replica)
        elif cmd.commandType == CmdType.replicateContainerCommand:
            if self.sim.replication_held:
                self.deferred.append(cmd)  # a slow datanode: copy later (see hold_replication)
            else:
                self._replicate(cmd)
        elif cmd.commandType == CmdType.reconstructECContainersCommand:
            self._reconstruct(cmd)
        elif cmd.commandType == CmdType.deleteContainerCommand:
            delete = cmd.deleteContainerCommandProto
            held = self.containers.get(delete.containerID)
            if held is not None and delete.HasField("replicaIndex") and delete.replicaIndex != held.replica_index:
                LOG.info(
                    "%s: not deleting container #%d: it holds index %d, the command names index %d",
                    self.hostname, delete.containerID, held.replica_index, delete.replicaIndex,
                )
                return
            replica = self.containers.pop(delete.containerID, None)
            if replica is not None:
                gone = replica.to_proto(self.sim.container_size)
                gone.state = RState.DELETED
                self._icr(gone)
        elif cmd.commandType == CmdType.deleteBlocksCommand:
            self._delete_blocks(cmd)
        elif cmd.commandType == CmdType.setNodeOperationalStateCommand:
            op = cmd.setNodeOperationalStateCommandProto
            self.op_state = op.nodeOperationalState
            self.op_state_expiry = op.stateExpiryEpochSeconds
        elif cmd.commandType == CmdType.finalizeNewLayoutVersionCommand:
            if self.sim.finalization_held:
                LOG.info("%s: not finalizing its layout yet (held)", self.hostname)
                return
            target = cmd.finalizeNewLayoutVersionCommandProto.dataNodeLayoutVersion.metadataLayoutVersion
            if self.metadata_layout < target <= self.software_layout:
                LOG.info("%s: finalized its layout %d -> %d", self.hostname, self.metadata_layout, target)
                self.metadata_layout = target
        else:
            LOG.debug("%s: ignoring %s", self.hostname, name)

    def _replicate(self, cmd: scm_datanode_pb2.SCMCommandProto) -> None:
        c = cmd.replicateContainerCommandProto
        ok = False
        if c.containerID not in self.containers:
            for src in c.sources:
                source = self.sim.by_uuid.get(src.uuid)
                replica = source.containers.get(c.containerID) if source else None
                if replica is not None and replica.state != RState.UNHEALTHY:
                    copy = dataclasses.replace(replica, close_requested=True)
                    if c.HasField("replicaIndex"):
                        copy.replica_index = c.replicaIndex
                    self.containers[c.containerID] = copy
                    self._icr(copy)
                    ok = True
                    break
        else:
            ok = True
        if cmd.HasField("cmdId"):
            self._status(
                scm_datanode_pb2.CommandStatus(
                    cmdId=cmd.cmdId,
                    status=scm_datanode_pb2.CommandStatus.EXECUTED if ok else scm_datanode_pb2.CommandStatus.FAILED,
                    type=CmdType.replicateContainerCommand,
                    msg="" if ok else "no healthy source replica reachable",
                )
            )

    def _reconstruct(self, cmd: scm_datanode_pb2.SCMCommandProto) -> None:
        """Ozone's ECReconstructionCoordinator, simulated: with ``data`` distinct indexes readable on live
        sources, each target gets a replica of the container holding its missing index (the same keys,
        bytes and BCSID as the sources: decoding rebuilds the stripe's cells); otherwise it fails whole."""
        c = cmd.reconstructECContainersCommandProto
        readable: dict[int, Replica] = {}
        for src in c.sources:
            source = self.sim.by_uuid.get(src.datanodeDetails.uuid)
            replica = source.containers.get(c.containerID) if source is not None and source.alive else None
            if replica is not None and replica.state != RState.UNHEALTHY and replica.replica_index == src.replicaIndex:
                readable[src.replicaIndex] = replica
        targets = [self.sim.by_uuid.get(t.uuid) for t in c.targets]
        missing = list(c.missingContainerIndexes)
        ok = len(readable) >= c.ecReplicationConfig.data and len(missing) == len(targets)
        if ok:
            model = readable[min(readable)]
            for target, index in zip(targets, missing, strict=True):
                if target is None or not target.alive or c.containerID in target.containers:
                    ok = False
                    continue
                copy = dataclasses.replace(model, replica_index=index, close_requested=True, origin_node=target.uuid)
                target.containers[c.containerID] = copy
                target._icr(copy)
        if cmd.HasField("cmdId"):
            self._status(
                scm_datanode_pb2.CommandStatus(
                    cmdId=cmd.cmdId,
                    status=scm_datanode_pb2.CommandStatus.EXECUTED if ok else scm_datanode_pb2.CommandStatus.FAILED,
                    type=CmdType.reconstructECContainersCommand,
                    msg="" if ok else f"{len(readable)} readable indexes, {c.ecReplicationConfig.data} needed",
                )
            )

    def _delete_blocks(self, cmd: scm_datanode_pb2.SCMCommandProto) -> None:
        c = cmd.deleteBlocksCommandProto
        results = []
        for txn in c.deletedBlocksTransactions:
            replica = self.containers.get(txn.containerID)
            if replica is not None:
                replica.delete_txn_id = max(replica.delete_txn_id, txn.txID)
                replica.key_count = max(replica.key_count - len(txn.localID), 0)
            results.append(
                scm_datanode_pb2.DeleteBlockTransactionResult(
                    txID=txn.txID, containerID=txn.containerID, success=replica is not None
                )
            )
        self._status(
            scm_datanode_pb2.CommandStatus(
                cmdId=c.cmdId,
                status=scm_datanode_pb2.CommandStatus.EXECUTED,
                type=CmdType.deleteBlocksCommand,
                blockDeletionAck=scm_datanode_pb2.ContainerBlocksDeletionACKProto(results=results, dnId=self.uuid),
            )
        )

    # ---- endpoint state machine ----

    def start(self) -> None:
        self.alive = True
        self.resume.set()
        for ep in self.endpoints:
            ep.state = EndpointState.SEARCHING_SCM
            ep.outbox.full_report_due = True
            ep.outbox.pipelines_dirty = True
        self.tasks = [asyncio.create_task(self._run_endpoint(ep)) for ep in self.endpoints]

    async def stop(self) -> None:
        self.alive = False
        self.resume.set()
        tasks, self.tasks = self.tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    async def ensure_certificate(self) -> None:
        """Secure clusters: load or obtain this datanode's certificate (once, shared by its endpoints)."""
        security = self.sim.security
        if security is None:
            return
        async with self._enrol_lock:
            if self.certificates is None:
                cluster_id = self.sim.cluster_id or await self.sim.learn_cluster_id()
                self.certificates = security.client_for(
                    self.hostname, self.uuid, self.ip, cluster_id, self.sim.admin_addresses
                )
            await self.certificates.ensure()

    async def _run_endpoint(self, ep: Endpoint) -> None:
        # Spread the first heartbeats so N datanodes do not hit SCM in lock-step.
        await asyncio.sleep(random.uniform(0, self.sim.heartbeat_interval / 2))
        while self.alive and self.sim.security is not None:
            try:
                await self.ensure_certificate()
                break
            except (SCMException, OSError) as exc:
                ep.failures += 1
                ep.last_error = f"no certificate yet: {exc}"
                LOG.warning("%s: cannot obtain a certificate yet: %s", self.hostname, exc)
                await asyncio.sleep(self.sim.heartbeat_interval)
        client = self.sim.client_for(ep.address, self)
        while self.alive:
            if not self.resume.is_set():
                await self.resume.wait()
                continue
            try:
                await self._step(ep, client)
                ep.last_error = ""
                ep.unreachable = False
            except SCMUnavailableError as exc:
                # The SCM may come back as a fresh process that does not know us: start over
                # (GetVersion, Register with a full report) once it answers again.
                ep.failures += 1
                ep.last_error = str(exc)
                ep.unreachable = True
                ep.state = EndpointState.SEARCHING_SCM
            except SCMException as exc:
                ep.failures += 1
                repeated = ep.last_error == str(exc)  # e.g. a revoked certificate: say it once, not every heartbeat
                ep.last_error = str(exc)
                if exc.result is ResultCodes.NO_SUCH_DATANODE:
                    ep.state = EndpointState.REGISTER
                (LOG.debug if repeated else LOG.warning)("%s -> %s: %s", self.hostname, ep.address, exc)
            await asyncio.sleep(self.sim.heartbeat_interval)

    async def _step(self, ep: Endpoint, client: DatanodeClient) -> None:
        if ep.state is EndpointState.SEARCHING_SCM:
            version = await client.get_version()
            keys = {kv.key: kv.value for kv in version.keys}
            ep.cluster_id = self.sim.cluster_id or keys.get("clusterID", "")
            ep.state = EndpointState.REGISTER
        if ep.state is EndpointState.REGISTER:
            req = scm_datanode_pb2.SCMRegisterRequestProto(
                datanodeDetails=self.details(),
                nodeReport=self.node_report(),
                containerReport=self.container_report(),
                pipelineReports=self.pipeline_reports(),
                clusterID=ep.cluster_id,
                dataNodeLayoutVersion=self.layout(),
            )
            resp = await client.register(req)
            if resp.errorCode != scm_datanode_pb2.SCMRegisteredResponseProto.success:
                ep.register_error = resp.errorMessage or "registration refused"
                LOG.warning("%s: SCM %s refused registration: %s", self.hostname, ep.address, ep.register_error)
                return
            ep.register_error = ""
            ep.state = EndpointState.HEARTBEAT
            ep.last_full_report = ep.last_pipeline_report = time.monotonic()
            ep.outbox.full_report_due = False
            ep.outbox.pipelines_dirty = False
            return
        await self._heartbeat(ep, client)

    async def _heartbeat(self, ep: Endpoint, client: DatanodeClient) -> None:
        now = time.monotonic()
        req = scm_datanode_pb2.SCMHeartbeatRequestProto(
            datanodeDetails=self.details(), nodeReport=self.node_report(), dataNodeLayoutVersion=self.layout()
        )
        full = ep.outbox.full_report_due or now - ep.last_full_report >= self.sim.container_report_interval
        if full:
            req.containerReport.CopyFrom(self.container_report())
        pipelines = ep.outbox.pipelines_dirty or now - ep.last_pipeline_report >= self.sim.pipeline_report_interval
        if pipelines:
            req.pipelineReports.CopyFrom(self.pipeline_reports())
        icrs, ep.outbox.icrs = ep.outbox.icrs, []
        statuses, ep.outbox.statuses = ep.outbox.statuses, []
        actions, ep.outbox.actions = ep.outbox.actions, []
        if icrs:
            req.incrementalContainerReport.append(scm_datanode_pb2.IncrementalContainerReportProto(report=icrs))
        if statuses:
            req.commandStatusReports.append(scm_datanode_pb2.CommandStatusReportsProto(cmdStatus=statuses))
        if actions:
            req.containerActions.CopyFrom(scm_datanode_pb2.ContainerActionsProto(containerActions=actions))
        try:
            resp = await client.send_heartbeat(req)
        except Exception:
            # Not delivered: keep everything for the next heartbeat.
            ep.outbox.icrs[:0] = icrs
            ep.outbox.statuses[:0] = statuses
            ep.outbox.actions[:0] = actions
            raise
        ep.heartbeats += 1
        if full:
            ep.last_full_report = now
            ep.outbox.full_report_due = False
        if pipelines:
            ep.last_pipeline_report = now
            ep.outbox.pipelines_dirty = False
        self.handle_response(ep, resp)


def replicas_to_create(
    containers: Iterable[hdds_pb2.ContainerInfoProto],
    members: Mapping[str, Sequence[str]],
    held: Mapping[str, Iterable[int]],
) -> list[tuple[str, int]]:
    """Which (datanode uuid, container id) replicas a datanode creates, as a real one does when the first
    write (or ``ozone admin container create``'s CreateContainer) reaches it: every OPEN or CLOSING
    container, on each member of its pipeline (``members``: pipeline id -> datanode uuids) among ``held``
    (uuid -> the containers it holds: the simulator's live datanodes) that does not hold it yet. Pure."""
    out: list[tuple[str, int]] = []
    for info in containers:
        if info.state not in (hdds_pb2.OPEN, hdds_pb2.CLOSING) or not info.HasField("pipelineID"):
            continue
        for dn_uuid in members.get(info.pipelineID.id, ()):
            have = held.get(dn_uuid)
            if have is not None and info.containerID not in have:
                out.append((dn_uuid, info.containerID))
    return out


class DatanodeSimulator:
    """N simulated datanodes in one asyncio loop, reporting to every SCM in ``scm_addresses``.

    ``scm_addresses`` are datanode-protocol addresses (ozone.scm.datanode.grpc.port; with ``protocol="hadoop-rpc"``
    Ozone's datanode protocol over Hadoop RPC, Ozone's ozone.scm.datanode.port: SIMPLE authentication, so
    not with ``security``);
    ``admin_addresses`` (client port) are only needed by ``write_to_container`` to look up a
    container's pipeline when no datanode holds it yet.
    """

    def __init__(
        self,
        scm_addresses: Sequence[str],
        count: int = 5,
        *,
        heartbeat_interval: float = 1.0,
        racks: int = 2,
        container_size: int = 5 * GB,
        capacity: int = 1024 * GB,
        container_report_interval: float = 60.0,
        pipeline_report_interval: float | None = None,
        admin_addresses: Sequence[str] | None = None,
        cluster_id: str | None = None,
        name_prefix: str = "sim-dn",
        security: DatanodeSecurity | None = None,
        admin_security: ChannelSecurity | None = None,
        protocol: str = "grpc",
        hadoop_rpc_addresses: Sequence[str] | None = None,
        hadoop_rpc_datanodes: int = 0,
        follow_containers: float = 0.0,
        layout_version: int = SOFTWARE_LAYOUT_VERSION,
    ) -> None:
        if count < 0:
            raise ValueError("count must be >= 0")
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        if not 0 <= hadoop_rpc_datanodes <= count:
            raise ValueError(f"hadoop_rpc_datanodes must be between 0 and count ({count}), got {hadoop_rpc_datanodes}")
        if hadoop_rpc_datanodes and not hadoop_rpc_addresses:
            raise ValueError("hadoop_rpc_datanodes needs hadoop_rpc_addresses (ozone.scm.datanode.port)")
        if (protocol == "hadoop-rpc" or hadoop_rpc_datanodes) and security is not None:
            raise ValueError("the hadoop-rpc datanode protocol serves SIMPLE authentication only: not on a secure cluster")
        self.protocol = protocol
        # Mixed transports: the last ``hadoop_rpc_datanodes`` datanodes speak Ozone's datanode protocol over
        # Hadoop RPC to ``hadoop_rpc_addresses`` (one per SCM), the others ``protocol`` to ``scm_addresses``.
        self.hadoop_rpc_addresses = list(hadoop_rpc_addresses or [])
        self.hadoop_rpc_datanodes = hadoop_rpc_datanodes
        self._count = count
        # > 0: every so many seconds, ask SCM (admin port) for OPEN and CLOSING containers and create the
        # replicas a datanode would hold once a client wrote to them (see replicas_to_create)
        if follow_containers < 0:
            raise ValueError(f"follow_containers must be >= 0 seconds, got {follow_containers}")
        if follow_containers and not admin_addresses:
            raise ValueError("follow_containers needs admin_addresses (the SCMs' client port)")
        self.follow_containers = follow_containers
        if not 0 <= layout_version <= SOFTWARE_LAYOUT_VERSION:
            raise ValueError(f"layout_version must be an HDDS layout version 0..{SOFTWARE_LAYOUT_VERSION}, "
                             f"got {layout_version}")
        # the metadata layout version each datanode's data starts at (older: restarted on new software after an
        # upgrade, until SCM tells it to finalize); while finalization_held the datanodes ignore that command
        self.layout_version = layout_version
        self.finalization_held = False
        self._follower: asyncio.Task[None] | None = None
        self.security = security
        self.admin_security = admin_security  # the admin client's certificate (populate allocates containers)
        self._renewer: asyncio.Task[None] | None = None
        self.scm_addresses = list(scm_addresses)
        self.heartbeat_interval = heartbeat_interval
        self.container_size = container_size
        self.container_report_interval = container_report_interval
        self.pipeline_report_interval = pipeline_report_interval or max(5 * heartbeat_interval, 1.0)
        self.cluster_id = cluster_id  # override (tests of wrong cluster IDs); None = learn from SCM
        self.admin_addresses = list(admin_addresses or [])
        self._clients: dict[tuple[str, str], DatanodeClient] = {}
        self._admin: SCMClient | None = None
        self.datanodes: list[SimDatanode] = []
        self.by_uuid: dict[str, SimDatanode] = {}
        self.replication_held = False
        self.racks = max(racks, 1)
        self.capacity = capacity
        self.name_prefix = name_prefix
        # Datanodes on one host need distinct ports (host:port names one of them): each simulator
        # starts its ports at a random multiple of 1000, so two simulators (say `freon stb` next to a
        # running `datanode-sim`) rarely share one.
        self.port_base = random.randrange(10, 60) * 1000
        for _ in range(count):
            self.add_datanode()

    def addresses_for(self, protocol: str) -> list[str]:
        if protocol == "hadoop-rpc" and self.protocol != "hadoop-rpc" and self.hadoop_rpc_addresses:
            return self.hadoop_rpc_addresses
        return self.scm_addresses

    def transports(self) -> dict[str, list[str]]:
        """Host names of the datanodes by the transport their datanode protocol uses."""
        out: dict[str, list[str]] = {}
        for dn in self.datanodes:
            out.setdefault(dn.protocol, []).append(dn.hostname)
        return out

    def add_datanode(self) -> SimDatanode:
        i = len(self.datanodes)
        hadoop = self.hadoop_rpc_datanodes and i >= self._count - self.hadoop_rpc_datanodes
        dn = SimDatanode(
            self, i, f"/rack{i % self.racks + 1}", f"{self.name_prefix}-{i}", self.capacity,
            protocol="hadoop-rpc" if hadoop else None,
        )
        self.datanodes.append(dn)
        self.by_uuid[dn.uuid] = dn
        return dn

    def client_for(self, address: str, dn: SimDatanode | None = None) -> DatanodeClient:
        """One client per SCM address; with security one per (datanode, SCM): each presents its own certificate."""
        certs = dn.certificates if dn is not None else None
        key = (address, dn.uuid if certs is not None and dn is not None else "")
        client = self._clients.get(key)
        protocol = dn.protocol if dn is not None else self.protocol
        if client is None and protocol == "hadoop-rpc":
            client = HadoopDatanodeClient(address, timeout=max(5.0, 5 * self.heartbeat_interval))
            self._clients[key] = client
        elif client is None:
            client = DatanodeProtocolClient(
                address,
                timeout=max(5.0, 5 * self.heartbeat_interval),
                security=certs.material if certs is not None else None,
            )
            self._clients[key] = client
        return client

    async def learn_cluster_id(self) -> str:
        assert self.security is not None
        if not self.cluster_id:
            self.cluster_id = await self.security.cluster_id()
        return self.cluster_id

    async def renew_certificates(self) -> int:
        """One renewal pass over every datanode's certificate; returns how many were renewed."""
        renewed = 0
        for dn in self.datanodes:
            if dn.certificates is not None and dn.alive:
                try:
                    renewed += int(await dn.certificates.renew_if_due())
                except (SCMException, OSError) as exc:
                    LOG.warning("%s: certificate renewal failed (will retry): %s", dn.hostname, exc)
        return renewed

    async def _renew_loop(self) -> None:
        assert self.security is not None
        while True:
            await asyncio.sleep(self.security.renew_check_interval)
            await self.renew_certificates()

    async def start(self) -> None:
        for dn in self.datanodes:
            if not dn.tasks:
                dn.start()
        if self.security is not None and self._renewer is None:
            self._renewer = asyncio.get_running_loop().create_task(self._renew_loop(), name="dn-cert-renewal")
        if self.follow_containers and self._follower is None:
            self._follower = asyncio.get_running_loop().create_task(self._follow_loop(), name="dn-follow-containers")

    async def follow_containers_once(self) -> int:
        """One pass of ``follow_containers``: the replicas created (see :func:`replicas_to_create`)."""
        admin = await self._admin_client()
        pipelines = await admin.list_pipelines()
        members = {p.id.id: [m.uuid for m in p.members] for p in pipelines}
        # EC: member i of a pipeline holds replica index memberReplicaIndexes[i]
        indexes = {
            (p.id.id, m.uuid): i for p in pipelines for m, i in zip(p.members, p.memberReplicaIndexes, strict=False)
        }
        held = {dn.uuid: list(dn.containers) for dn in self.live()}
        found: list[hdds_pb2.ContainerInfoProto] = []
        for state in (hdds_pb2.OPEN, hdds_pb2.CLOSING):
            start = 0
            while True:
                page, _ = await admin.list_containers(start, 1000, state=state)
                found.extend(page)
                if len(page) < 1000:
                    break
                start = page[-1].containerID + 1
        created = replicas_to_create(found, members, held)
        pipeline_of = {info.containerID: info.pipelineID.id for info in found}
        for dn_uuid, cid in created:
            self.by_uuid[dn_uuid].add_replica(cid, replica_index=indexes.get((pipeline_of[cid], dn_uuid), 0))
        return len(created)

    async def _follow_loop(self) -> None:
        while True:
            await asyncio.sleep(self.follow_containers)
            try:
                await self.follow_containers_once()
            except Exception as exc:  # an SCM failover or restart: try again next round
                LOG.debug("following containers failed (will retry): %s", exc)

    async def stop(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._follower
            self._follower = None
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._renewer
            self._renewer = None
        for dn in self.datanodes:
            await dn.stop()
        clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            await c.close()
        if self._admin is not None:
            await self._admin.close()
            self._admin = None

    async def __aenter__(self) -> DatanodeSimulator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ---- lookups ----

    def datanode(self, key: int | str) -> SimDatanode:
        if isinstance(key, int):
            return self.datanodes[key]
        for dn in self.datanodes:
            if key in (dn.uuid, dn.hostname):
                return dn
        raise KeyError(f"no simulated datanode {key!r}")

    def live(self) -> list[SimDatanode]:
        return [dn for dn in self.datanodes if dn.alive]

    def replicas_of(self, container_id: int) -> list[tuple[SimDatanode, Replica]]:
        return [(dn, dn.containers[container_id]) for dn in self.live() if container_id in dn.containers]

    def registered(self) -> int:
        """Datanodes in HEARTBEAT state with every SCM."""
        return sum(
            1 for dn in self.live() if all(ep.state is EndpointState.HEARTBEAT for ep in dn.endpoints)
        )

    def registered_where_reachable(self) -> int:
        """Datanodes in HEARTBEAT state with every SCM that answers (at least one): what a tool can wait
        for while an SCM of the quorum is down (Ozone's datanodes, too, serve with the SCMs they reach)."""
        return sum(
            1
            for dn in self.live()
            if any(ep.state is EndpointState.HEARTBEAT for ep in dn.endpoints)
            and all(ep.state is EndpointState.HEARTBEAT or ep.unreachable for ep in dn.endpoints)
        )

    def unreachable_scms(self) -> list[str]:
        return sorted({ep.address for dn in self.live() for ep in dn.endpoints if ep.unreachable})

    def register_errors(self) -> list[str]:
        return [ep.register_error for dn in self.datanodes for ep in dn.endpoints if ep.register_error]

    # ---- controls ----

    async def kill(self, key: int | str) -> SimDatanode:
        """Stop the datanode for good (until ``revive``): no more heartbeats, SCM sees it go DEAD."""
        dn = self.datanode(key)
        await dn.stop()
        return dn

    def make_stale(self, key: int | str) -> SimDatanode:
        """Pause heartbeats (the datanode keeps its state); ``revive`` resumes them."""
        dn = self.datanode(key)
        dn.resume.clear()
        return dn

    def revive(self, key: int | str) -> SimDatanode:
        dn = self.datanode(key)
        if not dn.alive or not dn.tasks:
            dn.start()
        dn.resume.set()
        return dn

    def hold_replication(self) -> None:
        """Make every datanode slow at copying: replicate commands are accepted but queued."""
        self.replication_held = True

    def release_replication(self) -> int:
        """Run the queued replicate commands now; returns how many ran."""
        self.replication_held = False
        ran = 0
        for dn in self.live():
            queued, dn.deferred = dn.deferred, []
            for cmd in queued:
                dn._replicate(cmd)
                ran += 1
        return ran

    def corrupt_replica(self, key: int | str, container_id: int) -> None:
        dn = self.datanode(key)
        replica = dn.containers[container_id]
        replica.state = RState.UNHEALTHY
        dn._icr(replica)

    async def _admin_client(self) -> SCMClient:
        if self._admin is None:
            if not self.admin_addresses:
                raise ValueError("admin_addresses are needed to look up a container's pipeline")
            security = self.admin_security
            if security is None and self.security is not None:
                # reads only: a datanode's own certificate is a cluster member
                dn = next((d for d in self.datanodes if d.certificates is not None), None)
                if dn is not None and dn.certificates is not None:
                    security = dn.certificates.material
            self._admin = SCMClient(self.admin_addresses, security=security)
        return self._admin

    async def write_to_container(
        self,
        container_id: int,
        nbytes: int,
        keys: int = 1,
        pipeline: hdds_pb2.Pipeline | None = None,
    ) -> int:
        """Simulate a client writing ``keys`` keys of ``nbytes`` in total into a container.

        Replicas are created (OPEN, with an ICR) on the pipeline's live members on first
        write, as a real datanode creates the container when the first chunk arrives (on an EC
        pipeline, member i holding replica index ``memberReplicaIndexes[i]``). Returns the number
        of replicas written.
        """
        if not self.replicas_of(container_id):
            if pipeline is None:
                cwp, _ = await (await self._admin_client()).get_container_with_pipeline(container_id)
                pipeline = cwp.pipeline
            indexes = list(pipeline.memberReplicaIndexes) or [0] * len(pipeline.members)
            for member, index in zip(pipeline.members, indexes, strict=True):
                dn = self.by_uuid.get(member.uuid)
                if dn is not None and dn.alive:
                    dn.add_replica(container_id, replica_index=index)
        written = 0
        for dn, _replica in self.replicas_of(container_id):
            if dn.write(container_id, nbytes, keys):
                written += 1
        return written

    async def populate(self, containers_per_node: int, used: int = 1024 * 1024) -> list[int]:
        """Allocate containers through the admin API and place replicas on their pipelines."""
        if containers_per_node <= 0 or not self.datanodes:
            return []
        admin = await self._admin_client()
        wanted = max(1, (containers_per_node * len(self.datanodes) + 2) // 3)
        ids: list[int] = []
        for _ in range(wanted):
            cwp = await admin.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "datanode-sim")
            cid = cwp.containerInfo.containerID
            await self.write_to_container(cid, used, 1, cwp.pipeline)
            ids.append(cid)
        return ids


def hosts_of(datanodes: Iterable[SimDatanode]) -> list[str]:
    return [dn.hostname for dn in datanodes]
