"""Simulated datanodes as a load on an SCM ring's leader: Ozone's datanode protocol over Hadoop RPC, the same
bytes to our ring and to Ozone's (a helper of bench/wire.py, not a benchmark itself).

Each of N datanodes has Ozone's identity and reports (the simulator's: ``scm_server.datanode_sim``, reporting
Ozone 2.2.0's HDDS layout version, which Ozone's SCM requires) and registers with every SCM of the ring once,
as a datanode does. Then the load sends heartbeats to the leader only, each datanode over its own connection,
as fast as the leader answers them with ``clients`` heartbeats in flight: what the leader's heartbeat path
costs at N datanodes. What a heartbeat carries follows Ozone's default intervals (:class:`ReportSchedule`):
a datanode heartbeats every 30 s (``hdds.heartbeat.interval``), and sends its node report and its pipeline
report every 60 s (``hdds.node.report.interval``, ``hdds.pipeline.report.interval``), so every second heartbeat
carries both; an incremental container report of one replica rides on every fourth heartbeat (a datanode
whose containers change every two minutes: the rate is ours, Ozone's datanode sends an ICR when a replica
changes). Full container reports (every 60 min by default) are their own row: :meth:`DatanodeLoad.full_report`.

The heartbeat requests are encoded once per datanode and schedule position before the measurement, so the
bench process spends its time on the calls and not on building them; both rings get the same bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from scm_server import ozone_wire
from scm_server.client.hadoop_rpc import (
    DATANODE_PROTOCOL,
    ConnectionLost,
    HadoopDatanodeClient,
    HadoopRpcConnection,
)
from scm_server.datanode_sim import DatanodeSimulator
from scm_server.datanode_sim.simulator import SimDatanode
from scm_server.proto import hdds_pb2, scm_datanode_pb2
from scm_server.proto.ozone import ScmServerDatanodeHeartbeatProtocol_pb2 as wire_dn

# HDDSLayoutFeature's latest in Ozone 2.2.0 (STORAGE_SPACE_DISTRIBUTION): Ozone's SCM refuses a registration
# whose software layout version differs from its own.
OZONE_LAYOUT_VERSION = 10
NODE, PIPELINES, ICR = "node report", "pipeline report", "incremental container report"


@dataclass(frozen=True)
class ReportSchedule:
    """Seconds between heartbeats and between reports (Ozone's defaults), and the ICR rate (ours)."""

    heartbeat_s: float = 30.0
    node_report_s: float = 60.0
    pipeline_report_s: float = 60.0
    icr_every: int = 4  # heartbeats

    def every(self) -> dict[str, int]:
        """Each report's period in heartbeats (at least every heartbeat)."""
        return {
            NODE: max(1, round(self.node_report_s / self.heartbeat_s)),
            PIPELINES: max(1, round(self.pipeline_report_s / self.heartbeat_s)),
            ICR: max(1, self.icr_every),
        }

    def period(self) -> int:
        """After this many heartbeats the pattern repeats."""
        return math.lcm(*self.every().values())

    def carries(self, beat: int) -> frozenset[str]:
        """The reports heartbeat number ``beat`` (0, 1, ...) of a datanode carries."""
        return frozenset(name for name, n in self.every().items() if beat % n == 0)


def heartbeat(dn: SimDatanode, reports: frozenset[str], icr_container: int,
              layout: scm_datanode_pb2.LayoutVersionProto) -> scm_datanode_pb2.SCMHeartbeatRequestProto:
    """One heartbeat of ``dn`` carrying ``reports`` (the ICR names one OPEN replica of ``icr_container``)."""
    req = scm_datanode_pb2.SCMHeartbeatRequestProto(datanodeDetails=dn.details(), dataNodeLayoutVersion=layout)
    if NODE in reports:
        req.nodeReport.CopyFrom(dn.node_report())
    if PIPELINES in reports:
        req.pipelineReports.CopyFrom(dn.pipeline_reports())
    if ICR in reports:
        replica = replica_of(icr_container, dn.uuid, used=64 << 20, keys=4)
        req.incrementalContainerReport.append(scm_datanode_pb2.IncrementalContainerReportProto(report=[replica]))
    return req


def replica_of(container_id: int, origin: str, used: int = 0, keys: int = 0) -> hdds_pb2.ContainerReplicaProto:
    return hdds_pb2.ContainerReplicaProto(
        containerID=container_id, state=hdds_pb2.ContainerReplicaProto.OPEN, size=used, used=used,
        keyCount=keys, originNodeId=origin, blockCommitSequenceId=keys)


def wire_request(req: scm_datanode_pb2.SCMHeartbeatRequestProto) -> bytes:
    """The SendHeartbeat request in Ozone's messages, encoded (what HadoopDatanodeClient sends)."""
    return wire_dn.SCMDatanodeRequest(
        cmdType=wire_dn.SendHeartbeat,
        sendHeartbeatRequest=ozone_wire.by_name(req, wire_dn.SCMHeartbeatRequestProto),
    ).SerializeToString()


class DatanodeLoad:
    """N simulated datanodes registered with one ring; heartbeats and full reports to its leader."""

    def __init__(self, count: int, name_prefix: str, schedule: ReportSchedule = ReportSchedule()) -> None:
        # the simulator gives identities and reports only: it is never started (no endpoint tasks)
        self.sim = DatanodeSimulator([], count, racks=1, protocol="hadoop-rpc", name_prefix=name_prefix,
                                     layout_version=OZONE_LAYOUT_VERSION)
        self.layout = scm_datanode_pb2.LayoutVersionProto(metadataLayoutVersion=OZONE_LAYOUT_VERSION,
                                                          softwareLayoutVersion=OZONE_LAYOUT_VERSION)
        self.schedule = schedule
        self.connections: list[HadoopRpcConnection] = []
        self.reconnects = 0
        self.requests: list[list[bytes]] = []
        self._call_ids = itertools.count(1)
        self._next = itertools.cycle(range(count))
        self._beat = [0] * count

    @property
    def datanodes(self) -> list[SimDatanode]:
        return self.sim.datanodes

    async def register(self, scm_addresses: Sequence[str], cluster_id: str, in_flight: int = 32) -> None:
        """Every datanode registers with every SCM (raises if one refuses)."""
        clients = [HadoopDatanodeClient(a, timeout=30) for a in scm_addresses]
        gate = asyncio.Semaphore(in_flight)

        async def one(dn: SimDatanode, client: HadoopDatanodeClient) -> None:
            req = scm_datanode_pb2.SCMRegisterRequestProto(
                datanodeDetails=dn.details(), nodeReport=dn.node_report(), containerReport=dn.container_report(),
                pipelineReports=dn.pipeline_reports(), clusterID=cluster_id, dataNodeLayoutVersion=self.layout)
            async with gate:
                resp = await client.register(req)
            if resp.errorCode != scm_datanode_pb2.SCMRegisteredResponseProto.success:
                raise RuntimeError(f"{client.address} refused {dn.hostname}: {resp.errorCode} {resp.errorMessage}")

        try:
            await asyncio.gather(*(one(dn, c) for dn in self.datanodes for c in clients))
        finally:
            for c in clients:
                await c.close()

    async def connect(self, leader_address: str, icr_containers: Sequence[int]) -> None:
        """One connection per datanode to the leader's datanode port; every heartbeat encoded in advance."""
        period = self.schedule.period()
        for i, dn in enumerate(self.datanodes):
            conn = HadoopRpcConnection(leader_address, DATANODE_PROTOCOL)
            await conn.connect(timeout=30)
            self.connections.append(conn)
            container = icr_containers[i % len(icr_containers)]
            self.requests.append([wire_request(heartbeat(dn, self.schedule.carries(b), container, self.layout))
                                  for b in range(period)])

    async def _submit(self, i: int, body: bytes) -> None:
        """Datanode ``i``'s call; a connection the server closed meanwhile (an idle one: Hadoop's IPC server closes
        them) is opened again first, as a datanode's client does, and counted. The server may also close it while
        the call is on its way (its idle timer fired just then): the call is sent once more on a new connection."""
        for attempt in (1, 2):
            conn = self.connections[i]
            if not conn.open:
                await conn.close()
                conn = self.connections[i] = HadoopRpcConnection(conn.address, DATANODE_PROTOCOL)
                await conn.connect(timeout=30)
                self.reconnects += 1
            try:
                answer = await conn.call("submitRequest", body, call_id=next(self._call_ids) & 0x7FFFFFFF, timeout=60)
            except ConnectionLost:
                if attempt == 2:
                    raise
                continue
            wire_dn.SCMDatanodeResponse.FromString(answer)
            return

    @property
    def heartbeats_sent(self) -> int:
        """Heartbeats sent so far (the rows' calls and :meth:`keep_alive`'s)."""
        return sum(self._beat)

    def call(self) -> Callable[[], Awaitable[None]]:
        """A measuring loop's call: the next datanode's next heartbeat (datanodes taken in turn)."""

        async def send() -> None:
            i = next(self._next)
            beat = self._beat[i]
            self._beat[i] = beat + 1
            requests = self.requests[i]
            await self._submit(i, requests[beat % len(requests)])

        return send

    async def keep_alive(self, stop: asyncio.Event, in_flight: int = 16) -> int:
        """Until ``stop`` is set: every ``schedule.heartbeat_s`` seconds each datanode sends its next heartbeat, as
        a datanode does between the rows, so none goes stale (and loses its pipelines) while the ring is measured.
        Returns the heartbeats sent."""
        gate = asyncio.Semaphore(in_flight)
        sent = 0

        async def beat(i: int) -> None:
            nonlocal sent
            async with gate:
                b = self._beat[i]
                self._beat[i] = b + 1
                await self._submit(i, self.requests[i][b % len(self.requests[i])])
                sent += 1

        while not stop.is_set():
            await asyncio.gather(*(beat(i) for i in range(len(self.requests))))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.schedule.heartbeat_s)
        return sent

    def full_report(self, container_ids: Sequence[int], reporters: int = 3) -> Callable[[], Awaitable[None]]:
        """A call sending one full container report (a heartbeat with every replica of ``container_ids``), from
        the first ``reporters`` datanodes in turn."""
        bodies = []
        for dn in self.datanodes[:reporters]:
            req = scm_datanode_pb2.SCMHeartbeatRequestProto(
                datanodeDetails=dn.details(), nodeReport=dn.node_report(), dataNodeLayoutVersion=self.layout,
                containerReport=scm_datanode_pb2.ContainerReportsProto(
                    reports=[replica_of(c, dn.uuid, used=1 << 20, keys=1) for c in container_ids]))
            bodies.append(wire_request(req))
        turn = itertools.cycle(range(len(bodies)))

        async def send() -> None:
            i = next(turn)
            await self._submit(i, bodies[i])

        return send

    async def close(self) -> None:
        for conn in self.connections:
            await conn.close()
        self.connections.clear()
