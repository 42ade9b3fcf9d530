#!/usr/bin/env python3
"""Wire benchmark: our SCM ring next to Apache Ozone's own, every row over Hadoop RPC, interleaved in one run.

Two 3-SCM HA rings run side by side on loopback for the whole run: ours (separate Python processes) and
**Ozone's own** (Apache Ozone 2.2.0's SCM, Java and Ratis, three JVMs from ``make ozone-jars``; no datanode or
OM JVMs). Both get the same simulated datanodes speaking Ozone's datanode protocol over Hadoop RPC
(``scm_server.datanode_sim`` reporting Ozone's layout version): three that keep an OPEN RATIS/THREE pipeline,
and the heartbeat load of bench/dn_load.py. Both are driven through their leader by the same Python clients
(``scm_server.client.hadoop_rpc``), so the figures compare the server paths plus equal client work. The rows:

* no-op (GetScmInfo); AllocateScmBlock of 1 and of 100 blocks (ScmBlockLocationProtocol);
* SendHeartbeat from 100 and from 1,000 datanodes, each on its own connection, reports at Ozone's default
  intervals (bench/dn_load.py), as many as the leader answers with ``--clients`` in flight, the leader's CPU
  measured beside;
* a full container report of 1,000 replicas (a heartbeat carrying it);
* GetContainerWithPipelineBatch of 100 containers and ListContainer of 1,000 (StorageContainerLocationProtocol);
* after the rounds: each leader's resident memory and the ring's, then failover: the leader SIGKILLed under
  one-block allocation by ``--failover-clients`` callers, the gap to the first allocation that succeeds.

Both rings hold the same state for the rows: 1,000 containers allocated through each, 1,103 datanodes registered.
Both run their background services at Ozone's defaults (``BACKGROUND``), every simulated datanode heartbeats at
Ozone's 30 s interval from registration to the end of the rounds, and the rounds start once each ring's pipeline
count has stood still for ``--settle`` seconds (its creator has placed the new datanodes' pipelines): the rows
measure rings in their steady state. The rows are measured in interleaved rounds (bench/interleave.py): ``--warmup-rounds`` first (the JVM's JIT and
our caches warm; kept in the JSON, left out of the figures), then ``--rounds`` rounds of ``--seconds`` a row, the
rings' order alternating, the load average read at the start and end of each round. Each row prints each ring's
median with its lowest and highest round, and ours/Ozone's taken round by round.

Ozone's SCM processes a container report after answering the heartbeat that carried it (its event queue);
ours before answering: the full-report row compares the calls each leader answers.

Needs Ozone's jars (make ozone-jars); without them the bench prints a banner saying so and exits 1
(``--no-ozone`` leaves Ozone's ring out on purpose). Writes bench/results/wire.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

if not __package__:  # `python bench/wire.py`: import bench.* and tests.* from this checkout, as `python -m` does
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import dn_load, interleave, ozone_anchor
from bench.hadoop_load import HadoopLoad, gap_after
from scm_server.client.hadoop_rpc import BlockLocationClient, HadoopDatanodeClient, LocationClient
from scm_server.datanode_sim import DatanodeSimulator
from scm_server.exceptions import SCMError
from scm_server.local.quorum import HALocalCluster
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import hdds_pb2 as wire_hdds

ROOT = Path(__file__).resolve().parent.parent

# Ozone's defaults where they matter to the rows (stale and dead node intervals: the load's datanodes heartbeat
# only while their row runs), our benchmark sizes on both rings.
SIZES = {"ozone.scm.container.size": "5GB", "ozone.scm.block.size": "256MB"}
# Both rings run the background services at Ozone's defaults (the local harness's FAST_SETTINGS, short intervals for
# tests, are put back to them): a pipeline creator every 1 s that scrubs unreported pipelines after 30 s would spend
# our leader's CPU on a churn Ozone's ring never has. The one change on both: background services start right after
# safe mode (Ozone's default waits 5 min), so the pipelines of the registered datanodes are placed before the rounds.
BACKGROUND = {
    "hdds.scm.wait.time.after.safemode.exit": "0s",
    "ozone.scm.heartbeat.thread.interval": "3s",
    "hdds.scm.replication.thread.interval": "300s",
    "ozone.scm.pipeline.creation.interval": "120s",
    "ozone.scm.pipeline.allocated.timeout": "5m",
    "ozone.scm.pipeline.destroy.timeout": "66s",
    "hdds.scm.safemode.rule.refresh.interval": "5s",
    "ozone.block.deleting.service.interval": "60s",
    "hdds.scm.replication.event.timeout": "12m",
    "hdds.scm.replication.event.timeout.datanode.offset": "6m",
    "ozone.scm.ha.dbtransactionbuffer.flush.interval": "60s",
}
SETTINGS = {
    **SIZES,
    **BACKGROUND,
    "hdds.heartbeat.interval": "3s",
    "ozone.scm.stale.node.interval": "5m",
    "ozone.scm.dead.node.interval": "10m",
    "hdds.scm.safemode.min.datanode": "3",
    "ozone.scm.ha.ratis.fsync": "false",
}
OZONE_OVERRIDES = {**SIZES, **BACKGROUND, "hdds.scm.safemode.min.datanode": "3", "ozone.replication": "3",
                   "ozone.server.default.replication": "3"}
BLOCK = 256 << 20
CONTAINERS = 1000
# room on the pipeline's datanodes for every container the bench allocates (Ozone's SCM checks it)
CAPACITY = 100 << 40
OURS, OZONE = "ours", "Ozone"

NOOP, ALLOC1, ALLOC100 = "no-op (GetScmInfo)", "allocate 1 block", "allocate 100 blocks"
HB100, HB1000 = "heartbeats, 100 datanodes", "heartbeats, 1,000 datanodes"
FCR = "full report, 1,000 containers"
BATCH, LIST = "GetContainerWithPipelineBatch 100", "ListContainer 1,000"
ROWS = (NOOP, ALLOC1, ALLOC100, HB100, HB1000, FCR, BATCH, LIST)
# --rows names a subset by these short keys
ROW_KEYS = {"noop": NOOP, "alloc1": ALLOC1, "alloc100": ALLOC100, "hb100": HB100, "hb1000": HB1000, "fcr": FCR,
            "batch": BATCH, "list": LIST}
ROW_KEY_OF = {row: key for key, row in ROW_KEYS.items()}


def rows_of(text: str) -> tuple[str, ...]:
    """``--rows``: comma-separated short keys -> the rows, in the bench's order; ValueError naming an unknown key."""
    keys = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in keys if k not in ROW_KEYS]
    if unknown or not keys:
        raise ValueError(f"--rows {text!r}: unknown row(s) {', '.join(unknown) or '(none named)'}; "
                         f"choose from {','.join(ROW_KEYS)}")
    wanted = {ROW_KEYS[k] for k in keys}
    return tuple(r for r in ROWS if r in wanted)


async def measure(clients: int, seconds: float, make_call: Callable[[], Callable[[], Awaitable[Any]]]) -> dict[str, float]:
    """``clients`` loops calling for ``seconds``; every call's latency kept."""
    latencies: list[float] = []
    deadline = time.monotonic() + seconds

    async def loop() -> None:
        call = make_call()
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - t0)

    t0 = time.monotonic()
    await asyncio.gather(*(loop() for _ in range(clients)))
    elapsed = time.monotonic() - t0
    latencies.sort()
    return {
        "calls": len(latencies),
        "calls_per_s": len(latencies) / elapsed,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
    }


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds process ``pid`` (all its threads) used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on TCP ``port`` (any address, IPv4 or IPv6), from /proc/net/tcp{,6}."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                    found.add(fields[9])
    return found


def holds_listener(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds the socket listening on ``port``: the process whose CPU is read is the one
    that answers the calls (not a launcher or a parent of it)."""
    inodes = listening_inodes(port)
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        with contextlib.suppress(OSError):
            link = os.readlink(fd)
            if link.startswith("socket:[") and link[8:-1] in inodes:
                return True
    return False


def cpu_us_per_call(sample: interleave.Sample) -> float | None:
    """The leader's CPU microseconds per answered call in one sample (CPU share / calls per second)."""
    if sample.leader_cpu_pct is None or sample.calls_per_s <= 0:
        return None
    return 1e6 * (sample.leader_cpu_pct / 100) / sample.calls_per_s


@dataclasses.dataclass
class Ring:
    """One ring as the rows see it: its leader's addresses and process, every member's, a way to kill one."""

    name: str
    leader: str
    block: list[str]  # every member's ScmBlockLocationProtocol address, the leader's first
    location: list[str]  # every member's StorageContainerLocationProtocol address, the leader's first
    datanode: list[str]  # every member's datanode protocol address, the leader's first
    pids: list[int]  # every member's process, the leader's first
    kill_leader: Callable[[], None]
    opened: list[Any] = dataclasses.field(default_factory=list)
    loads: list[dn_load.DatanodeLoad] = dataclasses.field(default_factory=list)  # the simulated datanodes


def _block_calls(clients: list[BlockLocationClient]) -> dict[str, interleave.MakeCall]:
    turn = iter(range(1 << 62))

    def maker(num: int) -> interleave.MakeCall:
        def make() -> Callable[[], Awaitable[Any]]:
            c = clients[next(turn) % len(clients)]
            if num == 0:
                return c.get_scm_info

            async def allocate() -> None:
                resp = await c.allocate_blocks(BLOCK, num, "bench")
                if not resp.success:
                    raise RuntimeError(f"allocation refused: {resp.status} {resp.message}")
            return allocate
        return make

    return {NOOP: maker(0), ALLOC1: maker(1), ALLOC100: maker(100)}


def _location_calls(client: LocationClient, containers: Sequence[int]) -> dict[str, interleave.MakeCall]:
    batch = wire_loc.ScmContainerLocationRequest(
        cmdType=wire_loc.GetContainerWithPipelineBatch, traceID="",
        getContainerWithPipelineBatchRequest=wire_loc.GetContainerWithPipelineBatchRequestProto(
            containerIDs=list(containers[:100])))
    listing = wire_loc.ScmContainerLocationRequest(
        cmdType=wire_loc.ListContainer, traceID="",
        scmListContainerRequest=wire_loc.SCMListContainerRequestProto(count=CONTAINERS, startContainerID=0))

    def call(request: wire_loc.ScmContainerLocationRequest, check: Callable[[Any], int]) -> interleave.MakeCall:
        async def submit() -> None:
            got = check(await client.submit(request))
            if got < 100:
                raise RuntimeError(f"{request.cmdType}: {got} containers in the answer")
        return lambda: submit

    return {
        BATCH: call(batch, lambda r: len(r.getContainerWithPipelineBatchResponse.containerWithPipelines)),
        LIST: call(listing, lambda r: len(r.scmListContainerResponse.containers)),
    }


def _same(call: Callable[[], Awaitable[Any]]) -> interleave.MakeCall:
    return lambda: call


async def allocate_containers(client: LocationClient, count: int, in_flight: int = 16) -> list[int]:
    """``count`` RATIS/THREE containers allocated through the ring's leader; their IDs."""
    gate = asyncio.Semaphore(in_flight)
    request = wire_loc.ScmContainerLocationRequest(
        cmdType=wire_loc.AllocateContainer, traceID="",
        containerRequest=wire_loc.ContainerRequestProto(
            replicationFactor=wire_hdds.THREE, replicationType=wire_hdds.RATIS, owner="bench"))

    async def one() -> int:
        async with gate:
            resp = await client.submit(request)
        return int(resp.containerResponse.containerWithPipeline.containerInfo.containerID)

    ids = await asyncio.gather(*(one() for _ in range(count)))
    if len(set(ids)) != count:
        raise RuntimeError(f"{count} allocations gave {len(set(ids))} distinct containers")
    return sorted(ids)


async def _until_allocation(client: BlockLocationClient, what: str, timeout: float = 300) -> None:
    """Until an allocation succeeds (an OPEN RATIS/THREE pipeline exists and the ring left safe mode)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if (await client.allocate_blocks(BLOCK, 1, "bench")).success:
                return
        except (SCMError, OSError, RuntimeError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} refused allocations for {timeout:.0f} s")
        await asyncio.sleep(0.5)


async def pipeline_count(ring: Ring) -> int | None:
    """The pipelines the ring's leader lists (every state), None when it would not say: read before and after the
    rounds, so that a reader sees how much of the background creator's work (a Raft entry per pipeline) ran beside
    the rows."""
    client = LocationClient(ring.location, attempts=20, retry_interval=0.2)
    try:
        request = wire_loc.ScmContainerLocationRequest(
            cmdType=wire_loc.ListPipelines, traceID="", listPipelineRequest=wire_loc.ListPipelineRequestProto())
        return len((await client.submit(request)).listPipelineResponse.pipelines)
    except (SCMError, OSError, RuntimeError) as exc:
        print(f"{ring.name}: ListPipelines failed ({exc}); pipeline count not recorded", flush=True)
        return None
    finally:
        await client.close()


async def settle_pipelines(ring: Ring, quiet: float, timeout: float) -> tuple[int | None, float]:
    """Until the ring's pipeline count has not moved for ``quiet`` seconds (its background creator has placed the
    pipelines of the datanodes just registered: a Raft entry each), at most ``timeout`` seconds: the rows measure
    a ring in its steady state, not in the wave that follows 1,100 registrations. Returns the count and the
    seconds it took."""
    t0 = time.monotonic()
    last, since = await pipeline_count(ring), time.monotonic()
    while time.monotonic() - t0 < timeout:
        await asyncio.sleep(min(2.0, quiet))
        now = await pipeline_count(ring)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    else:
        print(f"{ring.name}: pipeline count still moving after {timeout:.0f} s ({last}); measuring anyway",
              flush=True)
    return last, since - t0


async def prepare(ring: Ring, args: argparse.Namespace) -> dict[str, interleave.MakeCall]:
    """The ring's state for the rows (containers, datanodes registered) and each row's call maker."""
    # every member's address, the leader's first: a client follows a new leader's hint if one is elected
    blocks = [BlockLocationClient(ring.block) for _ in range(args.clients)]
    ring.opened += blocks
    await _until_allocation(blocks[0], f"{ring.name}'s ring")
    location = LocationClient(ring.location, attempts=20, retry_interval=0.2)
    ring.opened.append(location)
    containers = await allocate_containers(location, CONTAINERS)
    version = HadoopDatanodeClient(ring.datanode[0], timeout=30)
    cluster_id = {kv.key: kv.value for kv in (await version.get_version()).keys}["clusterID"]
    await version.close()
    rows = {**_block_calls(blocks), **_location_calls(location, containers)}
    for count, row in ((100, HB100), (1000, HB1000)):
        load = dn_load.DatanodeLoad(count, f"{ring.name.lower()}-hb{count}")
        ring.opened.append(load)
        await load.register(ring.datanode, cluster_id)
        await load.connect(ring.datanode[0], containers)
        ring.loads.append(load)
        rows[row] = load.call
        if count == 100:
            rows[FCR] = _same(load.full_report(containers))
    if args.idle_datanodes:  # heartbeats only (keep_alive): the idle cost of many datanodes, no row of their own
        load = dn_load.DatanodeLoad(args.idle_datanodes, f"{ring.name.lower()}-idle")
        ring.opened.append(load)
        await load.register(ring.datanode, cluster_id)
        await load.connect(ring.datanode[0], containers)
        ring.loads.append(load)
    return rows


async def idle_cost(rings: list[Ring], window: float) -> dict[str, dict[str, float]]:
    """Each leader's CPU over the same ``window`` seconds while only the keep-alive heartbeats run (every
    registered datanode every ``hdds.heartbeat.interval``, 30 s, with its node, pipeline and incremental reports
    as bench/dn_load.py schedules them) and the rings' background services: the cost of holding that many
    datanodes, as a share of one core, and per heartbeat; projected to exactly one heartbeat per datanode per
    30 s (keep_alive's rounds take a little longer than 30 s)."""
    before = {r.name: (cpu_seconds(r.pids[0]), sum(load.heartbeats_sent for load in r.loads)) for r in rings}
    t0 = time.monotonic()
    await asyncio.sleep(window)  # the measuring window itself (not a wait for a condition)
    took = time.monotonic() - t0
    out = {}
    for r in rings:
        cpu0, beats0 = before[r.name]
        cpu = cpu_seconds(r.pids[0]) - cpu0
        beats = sum(load.heartbeats_sent for load in r.loads) - beats0
        datanodes = sum(len(load.datanodes) for load in r.loads)
        per_beat = cpu / beats if beats else float("nan")
        out[r.name] = {"datanodes": datanodes, "seconds": took, "heartbeats": beats, "leader_cpu_pct": 100 * cpu / took,
                       "cpu_us_per_heartbeat": 1e6 * per_beat, "pct_of_core_at_30s": 100 * per_beat * datanodes / 30}
        print(f"{r.name}: {datanodes:,} datanodes heartbeating, {beats:,} heartbeats in {took:.0f} s: leader at"
              f" {100 * cpu / took:.1f} % of one core, {1e6 * per_beat:.0f} us a heartbeat"
              f" ({100 * per_beat * datanodes / 30:.1f} % at one heartbeat per datanode per 30 s)", flush=True)
    return out


async def start_ours(tmp: Path, event_loop: str = "uvloop") -> tuple[HALocalCluster, DatanodeSimulator, Ring]:
    # ``--event-loop``: our SCMs' ozone.scm.event.loop (uvloop is the daemon's default)
    cluster = HALocalCluster(tmp / "ours", 3, settings={**SETTINGS, "ozone.scm.event.loop": event_loop})
    cluster.start_quorum()
    sim = DatanodeSimulator(cluster.hadoop_addresses("datanode"), 3, heartbeat_interval=3.0, racks=1,
                            capacity=CAPACITY, protocol="hadoop-rpc", layout_version=dn_load.OZONE_LAYOUT_VERSION,
                            name_prefix="ours-dn")
    await sim.start()
    await cluster.wait_healthy_quorum(timeout=180)
    leader = await cluster.wait_leader()
    order = [leader] + [i for i in range(3) if i != leader]
    scms = [cluster.scms[i] for i in order]

    def kill() -> None:
        proc = cluster.scms[leader].proc
        assert proc is not None
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

    pids = []
    for s in scms:
        assert s.proc is not None
        pids.append(s.proc.pid)
    ring = Ring(OURS, scms[0].node_id or "scm", [f"{s.host}:{s.hadoop_ports['block']}" for s in scms],
                [f"{s.host}:{s.hadoop_ports['client']}" for s in scms],
                [f"{s.host}:{s.hadoop_ports['datanode']}" for s in scms], pids, kill)
    return cluster, sim, ring


async def start_ozone(cluster: ozone_anchor.AnchorCluster) -> tuple[DatanodeSimulator, Ring]:
    sim = DatanodeSimulator([f"127.0.0.1:{s.datanode_port}" for s in cluster.scms], 3, heartbeat_interval=3.0,
                            racks=1, capacity=CAPACITY, protocol="hadoop-rpc",
                            layout_version=dn_load.OZONE_LAYOUT_VERSION, name_prefix="ozone-dn")
    await sim.start()
    leader = await ozone_anchor.probe_leader(cluster)
    scms = [leader] + [s for s in cluster.scms if s is not leader]
    ring = Ring(OZONE, leader.node_id, [ozone_anchor.block_address(s) for s in scms],
                [f"127.0.0.1:{s.client_port}" for s in scms], [f"127.0.0.1:{s.datanode_port}" for s in scms],
                [cluster.procs[s.node_id].popen.pid for s in scms], lambda: cluster.kill(leader.node_id))
    return sim, ring


async def failover(ring: Ring, clients: int) -> float:
    """SIGKILL of the leader under one-block allocation: seconds to the first allocation that succeeds."""
    load = HadoopLoad(ring.block, clients)
    load.start()
    try:
        await load.steady(count=100, timeout=60)
        fault_at = time.monotonic()
        ring.kill_leader()
        return await gap_after(load, fault_at, timeout=120)
    finally:
        await load.stop()


async def profile_rows(ring: Ring, rows: dict[str, interleave.MakeCall], args: argparse.Namespace) -> None:
    """Each chosen row once for ``--seconds`` while py-spy samples ``ring``'s leader (its raw folded stacks, one
    file a row, under ``--profile``), before the rounds; the leader's CPU per call printed beside."""
    args.profile.mkdir(parents=True, exist_ok=True)
    pid = ring.pids[0]
    for row in args.rows:
        out = args.profile / f"{ROW_KEY_OF[row]}.txt"
        spy = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(pid), "--duration",
            str(max(1, round(args.seconds))), "--rate", "200", "--nonblocking", "--format", "raw", "--output", str(out),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        cpu0 = cpu_seconds(pid)
        got = await measure(args.clients, args.seconds, rows[row])
        cpu = cpu_seconds(pid) - cpu0
        _, err = await spy.communicate()
        if spy.returncode != 0:
            raise RuntimeError(f"py-spy on {pid} failed ({spy.returncode}): {err.decode(errors='replace').strip()}")
        print(f"profile {row}: {got['calls_per_s']:.0f} calls/s, leader CPU {1e6 * cpu / max(got['calls'], 1):.0f}"
              f" us/call -> {out}", flush=True)


async def run(args: argparse.Namespace, tmp: Path, ozone: ozone_anchor.AnchorCluster | None) -> dict[str, Any]:
    """Our ring started here and ``ozone`` (Ozone's SCMs, already started) or None; the rounds, then memory
    and failover."""
    sims: list[DatanodeSimulator] = []
    rings: list[Ring] = []
    beats: list[asyncio.Task[int]] = []
    cluster = None
    try:
        if ozone is not None:
            sim, ring = await start_ozone(ozone)
            sims.append(sim)
            rings.append(ring)
        cluster, sim, ring = await start_ours(tmp, args.event_loop)
        sims.append(sim)
        rings.insert(0, ring)
        targets = {}
        for ring in rings:
            t0 = time.monotonic()
            targets[ring.name] = await prepare(ring, args)
            print(f"{ring.name}: leader {ring.leader}, {CONTAINERS} containers and"
                  f" {sum(len(load.datanodes) for load in ring.loads):,} datanodes in"
                  f" {time.monotonic() - t0:.0f} s", flush=True)
        for ring in rings:
            port = int(ring.block[0].rsplit(":", 1)[1])
            if not holds_listener(ring.pids[0], port):
                raise RuntimeError(f"{ring.name}: process {ring.pids[0]} does not hold the leader's listening socket"
                                   f" {ring.block[0]}: its CPU would not be the leader's")
        print("the CPU read is each leader's own process (it holds the leader's listening block port)", flush=True)
        # every simulated datanode heartbeats at Ozone's interval from here to the end of the rounds, as a live
        # cluster's do, so none goes stale while the ring settles or is measured
        stop_beats = asyncio.Event()
        beats += [asyncio.create_task(load.keep_alive(stop_beats)) for ring in rings for load in ring.loads]
        settled = {}
        if args.settle > 0:
            for ring in rings:
                count, took = await settle_pipelines(ring, args.settle, timeout=900)
                settled[ring.name] = {"pipelines": count, "seconds": round(took, 1)}
                print(f"{ring.name}: {count} pipelines placed for the registered datanodes, the last {took:.0f} s after"
                      f" registration ended (then {args.settle:.0f} s without a change)", flush=True)
        idle = await idle_cost(rings, args.idle_window) if args.idle_window > 0 else {}
        if args.profile is not None:
            await profile_rows(rings[0], targets[rings[0].name], args)
        cpu = {ring.name: (lambda pid=ring.pids[0]: cpu_seconds(pid)) for ring in rings}
        pipelines = {ring.name: [await pipeline_count(ring)] for ring in rings}
        samples, loads = await interleave.run_rounds(
            targets, list(args.rows), rounds=args.rounds, warmup_rounds=args.warmup_rounds, clients=args.clients,
            seconds=args.seconds, measure=measure, cpu=cpu)
        stop_beats.set()
        sent = sum(await asyncio.gather(*beats))
        print(f"keep-alive heartbeats beside the rounds and the settling: {sent}", flush=True)
        for ring in rings:
            pipelines[ring.name].append(await pipeline_count(ring))
            print(f"{ring.name}: {pipelines[ring.name][0]} pipelines before the rounds, {pipelines[ring.name][1]} after"
                  " (the background creator places the registered datanodes' pipelines meanwhile)", flush=True)
        for ring in rings:
            for c in ring.opened:
                await c.close()
            ring.opened.clear()
        now = cluster.scms[await cluster.wait_leader()].node_id
        if now != rings[0].leader:  # the rows after the change measured another process than the one whose CPU is read
            print(f"WARNING: our ring's leader changed during the rounds ({rings[0].leader} -> {now})", flush=True)
        memory = {ring.name: {"leader_mib": rss_mib(ring.pids[0]), "ring_mib": sum(rss_mib(p) for p in ring.pids)}
                  for ring in rings}
        gaps = {}
        for ring in rings if not args.no_failover else ():
            gaps[ring.name] = await failover(ring, args.failover_clients)
            print(f"{ring.name}: allocation gap after SIGKILL of the leader {gaps[ring.name]:.2f} s", flush=True)
        return {"leaders": {r.name: r.leader for r in rings}, "targets": [r.name for r in rings], "rows": args.rows,
                "pipelines_before_after": pipelines, "pipelines_settled": settled,
                "our_leader_after_rounds": now,
                "samples": samples, "loads": loads, "memory": memory, "failover_s": gaps, "idle": idle}
    finally:
        for task in beats:
            task.cancel()
        for ring in rings:
            for c in ring.opened:
                await c.close()
        for sim in sims:
            await sim.stop()
        if cluster is not None:
            cluster.stop_all()


def start_ozone_scms(args: argparse.Namespace, tmp: Path) -> tuple[Any, dict[str, Any]]:
    """Ozone's three SCMs, started before ours (their start takes minutes): (the ring, what to record) or
    (None, {"error": why}) when its jars cannot be had."""
    if args.no_ozone:
        return None, {}
    classpath, note = ozone_anchor.classpath_or_reason()
    if classpath is None:
        return None, {"error": note}
    cluster = ozone_anchor.start_scms(tmp / "ozone", classpath, OZONE_OVERRIDES)
    return cluster, {"jars": note, "start_seconds": round(cluster.timings.steps["Ozone SCM ring up"], 1)}


def report(result: dict[str, Any], args: argparse.Namespace) -> str:
    """The rounds with their load, then each row: ours and Ozone's (median [lowest-highest round]), the ratio."""
    samples: list[interleave.Sample] = result["samples"]
    summary = interleave.summarize(samples)
    both = OZONE in result["targets"]
    lines = [f"\nevery row through each leader ({', '.join(f'{k}: {v}' for k, v in result['leaders'].items())}),"
             f" {args.clients} in flight; {args.rounds} interleaved rounds of {args.seconds:g} s a row after"
             f" {args.warmup_rounds} warm-up round(s), the rings' order alternating",
             f"{'round':>5}  {'load at start':<16} {'load at end':<16}"]
    for load in result["loads"]:
        tag = " (warm-up)" if load.warmup else ""
        lines.append(f"{load.round:>5}  {_load(load.start):<16} {_load(load.end):<16}{tag}")
    lines.append(f"{'row':<34} {'ring':<6} {'calls/s median [low-high]':>27} {'p50 ms':>18} {'p99 ms':>18}"
                 f" {'leader CPU %':>16} {'leader CPU us/call':>20}")
    rows = result["rows"]
    for row in rows:
        for target in result["targets"]:
            got = summary[row][target]
            cpu = got[interleave.CPU].text() if interleave.CPU in got else "-"
            per_call = [v for s in samples if s.row == row and s.target == target and not s.warmup
                        and (v := cpu_us_per_call(s)) is not None]
            us = interleave.spread(per_call).text() if per_call else "-"
            lines.append(f"{row:<34} {target:<6} {got['calls_per_s'].text():>27} {got['p50_ms'].text('.2f'):>18}"
                         f" {got['p99_ms'].text('.2f'):>18} {cpu:>16} {us:>20}")
    if both:
        lines.append("ours / Ozone's, round by round, median [low-high] (throughput goal >= 1.0; latency <= 1.0):")
        lines.append(f"  {'row':<34} {'calls/s':>18} {'p50':>18} {'p99':>18}")
        for row in rows:
            cells = []
            for metric in ("calls_per_s", "p50_ms", "p99_ms"):
                r = interleave.ratio(samples, row, OURS, OZONE, metric)
                cells.append(r.text(".2f") if r is not None else "-")
            lines.append(f"  {row:<34} {cells[0]:>18} {cells[1]:>18} {cells[2]:>18}")
    lines.append("resident memory after the rounds (MiB): "
                 + "; ".join(f"{k} leader {v['leader_mib']}, ring {v['ring_mib']}" for k, v in result["memory"].items()))
    idle = result["idle"]
    if idle:
        lines.append("datanodes heartbeating at 30 s, leader CPU as a share of one core (projected to one heartbeat a"
                     " datanode per 30 s): " + "; ".join(
                         f"{k} {v['datanodes']:,} datanodes {v['pct_of_core_at_30s']:.1f} %"
                         f" ({v['cpu_us_per_heartbeat']:.0f} us a heartbeat)" for k, v in idle.items()))
        if both:
            ours, theirs = idle[OURS]["pct_of_core_at_30s"], idle[OZONE]["pct_of_core_at_30s"]
            lines.append(f"  ours / Ozone's: {ours / theirs:.2f} (goal: ours <= 50 % of one core at 10,000 datanodes)")
    if result["failover_s"]:
        lines.append("allocation gap after SIGKILL of the leader (one kill each): "
                     + "; ".join(f"{k} {v:.2f} s" for k, v in result["failover_s"].items()))
    if both and result["failover_s"]:
        mem, gap = result["memory"], result["failover_s"]
        lines.append(f"  ours / Ozone's: RSS leader {mem[OURS]['leader_mib'] / mem[OZONE]['leader_mib']:.2f}"
                     f" (goal <= 0.5), failover {gap[OURS] / gap[OZONE]:.2f} (goal <= 0.2)")
    return "\n".join(lines)


def _load(values: tuple[float, float, float]) -> str:
    return " ".join(f"{v:.2f}" for v in values)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=8, help="calls in flight per row (default 8)")
    p.add_argument("--seconds", type=float, default=2.0, help="duration of each row in each round (default 2)")
    p.add_argument("--rounds", type=int, default=3, help="measured rounds (default 3)")
    p.add_argument("--warmup-rounds", type=int, default=1, help="rounds run first and left out of the figures (default 1)")
    p.add_argument("--failover-clients", type=int, default=4, help="callers allocating during the SIGKILL (default 4)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "wire.json")
    p.add_argument("--no-ozone", "--ours-only", action="store_true",
                   help="leave out Ozone's own SCM ring (the anchor): our ring alone")
    p.add_argument("--rows", default=",".join(ROW_KEYS),
                   help=f"comma-separated rows to measure (default all: {','.join(ROW_KEYS)})")
    p.add_argument("--settle", type=float, default=10.0,
                   help="before the rounds, wait until each ring's pipeline count has not changed for this many"
                        " seconds (the background creator's wave after the registrations); 0: measure during it")
    p.add_argument("--no-failover", action="store_true", help="skip the SIGKILL of each leader after the rounds")
    p.add_argument("--idle-datanodes", type=int, default=0,
                   help="this many more simulated datanodes registered with each ring, heartbeating only (e.g. 10000)")
    p.add_argument("--idle-window", type=float, default=0.0,
                   help="after the settling, each leader's CPU over this many seconds (a multiple of 30) while only"
                        " the datanodes' heartbeats run; 0: not measured")
    p.add_argument("--event-loop", choices=("uvloop", "asyncio"), default="uvloop",
                   help="our SCMs' event loop (ozone.scm.event.loop; default uvloop, the daemon's default)")
    p.add_argument("--profile", type=Path, default=None,
                   help="before the rounds, run each chosen row once while py-spy samples our leader; its folded"
                        " stacks go to DIR/<row>.txt")
    args = p.parse_args()
    try:
        args.rows = rows_of(args.rows)
    except ValueError as exc:
        p.error(str(exc))
    if args.idle_datanodes < 0 or args.idle_window < 0:
        p.error("--idle-datanodes and --idle-window must not be negative")
    if args.rounds < 1 or args.warmup_rounds < 0 or args.seconds <= 0 or args.clients < 1 or args.failover_clients < 1:
        p.error("--rounds, --clients and --failover-clients must be at least 1, --warmup-rounds at least 0,"
                " --seconds above 0")
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-wire-") as tmp:
        ozone, ozone_note = start_ozone_scms(args, Path(tmp))
        try:
            result = asyncio.run(run(args, Path(tmp), ozone))
        finally:
            ozone_anchor.stop(ozone)
    print(report(result, args))
    if "error" in ozone_note:
        print(ozone_anchor.banner(ozone_note["error"]))
    elif args.no_ozone:
        print("\nOzone's own SCM ring left out (--no-ozone)")
    summary = interleave.summarize(result["samples"])
    ratios = {metric: {row: dataclasses.asdict(r) for row in args.rows
                       if (r := interleave.ratio(result["samples"], row, OURS, OZONE, metric)) is not None}
              for metric in ("calls_per_s", "p50_ms", "p99_ms")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "started_unix": started, "leaders": result["leaders"], "ozone": ozone_note,
        "clients": args.clients, "seconds": args.seconds, "rounds": args.rounds, "warmup_rounds": args.warmup_rounds,
        "loads": [dataclasses.asdict(x) for x in result["loads"]],
        "rows": list(args.rows),
        "samples": [dataclasses.asdict(x) | {"leader_cpu_us_per_call": cpu_us_per_call(x)} for x in result["samples"]],
        "summary": {row: {t: {m: dataclasses.asdict(v) for m, v in ms.items()} for t, ms in ts.items()}
                    for row, ts in summary.items()},
        "pipelines_before_after_rounds": result["pipelines_before_after"],
        "our_leader_after_rounds": result["our_leader_after_rounds"], "ratios_ours_over_ozone": ratios, "memory_mib": result["memory"], "failover_s": result["failover_s"],
        "idle_heartbeats": result["idle"],
        "machine": platform.platform(),
    }, indent=2))
    return 1 if "error" in ozone_note else 0


if __name__ == "__main__":
    sys.exit(main())
