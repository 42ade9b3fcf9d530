"""Core of Ozone's SCM throughput benchmark (``freon stb`` / ``bench/scm_throughput.py``).

Like Ozone's ``SCMThroughputBenchmark``: register datanodes (our simulator, over the real gRPC
protocol), make sure pipelines are open and force-exit safemode, then hammer one SCM call and
report ops/s with latency percentiles:

* ``AllocateBlocks``: ``--num-blocks`` blocks of ``--block-size`` from ``--num-threads``
  concurrent clients, one block per call, or ``batch`` blocks per call (``numBlocks``);
* ``AllocateContainers``: ``--num-containers`` RATIS/THREE container allocations;
* ``ProcessReports``: full container reports (``--num-containers`` replicas each) sent in
  heartbeats of ``--num-datanodes`` datanodes, ``--num-heartbeats`` rounds; the SCM's own count
  is read from its ``/prom`` endpoint when an HTTP address is known.

A no-op RPC (``GetScmInfo``) through the same server is measured alongside as the baseline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import statistics
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

from scm_server.client.datanode_client import DatanodeProtocolClient
from scm_server.client.scm_client import SCMClient
from scm_server.datanode_sim import DatanodeSimulator
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.proto import hdds_pb2, scm_datanode_pb2

MODES = ("AllocateBlocks", "AllocateContainers", "ProcessReports")


@dataclasses.dataclass
class BenchResult:
    mode: str
    operations: int
    seconds: float
    latencies_ms: list[float] = dataclasses.field(repr=False, default_factory=list)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def ops_per_second(self) -> float:
        return self.operations / self.seconds if self.seconds > 0 else 0.0

    def percentile(self, p: float) -> float:
        if not self.latencies_ms:
            return 0.0
        data = sorted(self.latencies_ms)
        k = min(len(data) - 1, max(0, round(p / 100 * (len(data) - 1))))
        return data[k]

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "operations": self.operations,
            "seconds": round(self.seconds, 4),
            "ops_per_second": round(self.ops_per_second, 1),
            "latency_ms": {
                "p50": round(self.percentile(50), 3),
                "p90": round(self.percentile(90), 3),
                "p99": round(self.percentile(99), 3),
                "mean": round(statistics.fmean(self.latencies_ms), 3) if self.latencies_ms else 0.0,
            },
            **self.extra,
        }


async def _timed_workers(
    total: int, threads: int, op: Callable[[int], Awaitable[int]], progress: Callable[[int], None] | None
) -> tuple[int, float, list[float]]:
    """Run ``op(i)`` for i in range(total) over ``threads`` concurrent workers; op returns units done."""
    latencies: list[float] = []
    done = 0
    counter = iter(range(total))

    async def worker() -> None:
        nonlocal done
        for i in counter:
            t0 = time.perf_counter()
            units = await op(i)
            latencies.append((time.perf_counter() - t0) * 1000)
            done += units
            if progress is not None:
                progress(units)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(max(1, threads))))
    return done, time.perf_counter() - started, latencies


async def prepare_cluster(
    admin: SCMClient, dn_addresses: list[str], num_datanodes: int, heartbeat_interval: float = 1.0,
    timeout: float = 60.0, security: Any = None,
) -> DatanodeSimulator:
    """Register datanodes, wait for an OPEN RATIS/THREE pipeline, force-exit safemode.
    ``security``: the datanodes' DatanodeSecurity on a secure cluster (they enrol first).

    The datanodes register with every SCM that answers; an SCM that is down does not hold them up
    (they keep trying it, as real datanodes do). They stay registered in the cluster afterwards: once
    stopped they go STALE, then DEAD, like Ozone's freon datanodes."""
    sim = DatanodeSimulator(
        dn_addresses, max(num_datanodes, 3), heartbeat_interval=heartbeat_interval,
        container_report_interval=3600, name_prefix="stb-dn", security=security,
    )
    await sim.start()
    deadline = time.monotonic() + timeout
    while True:
        if sim.registered_where_reachable() == len(sim.datanodes):
            if (await admin.in_safe_mode()).in_safe_mode:
                await admin.force_exit_safe_mode()
            pipelines = await admin.list_pipelines()
            if any(p.state == hdds_pb2.PIPELINE_OPEN and p.factor == hdds_pb2.THREE for p in pipelines):
                return sim
        if time.monotonic() > deadline:
            registered, down = sim.registered_where_reachable(), sim.unreachable_scms()
            await sim.stop()
            raise SCMException(
                ResultCodes.TIMEOUT,
                f"no OPEN RATIS/THREE pipeline within {timeout:g}s ({registered} of {len(sim.datanodes)} datanodes "
                f"registered with every SCM that answers; unreachable: {', '.join(down) or 'none'}); is SCM healthy?",
            )
        await asyncio.sleep(0.2)


async def bench_ping(admin: SCMClient, count: int, threads: int) -> BenchResult:
    async def op(_: int) -> int:
        await admin.get_scm_info()
        return 1

    n, secs, lat = await _timed_workers(count, threads, op, None)
    return BenchResult("NoOpRpc(GetScmInfo)", n, secs, lat)


async def bench_allocate_blocks(
    admin: SCMClient, num_blocks: int, threads: int, block_size: int, batch: int = 1,
    progress: Callable[[int], None] | None = None,
) -> tuple[BenchResult, list[tuple[int, int]]]:
    ids: list[tuple[int, int]] = []
    calls = (num_blocks + batch - 1) // batch

    async def op(_: int) -> int:
        blocks = await admin.allocate_block(block_size, batch, hdds_pb2.RATIS, hdds_pb2.THREE, "freon-stb")
        ids.extend((b.containerBlockID.containerID, b.containerBlockID.localID) for b in blocks)
        return len(blocks)

    n, secs, lat = await _timed_workers(calls, threads, op, progress)
    mode = "AllocateBlocks" if batch == 1 else f"AllocateBlocks(batch={batch})"
    return BenchResult(mode, n, secs, lat, {"calls": calls, "blocks_per_call": batch}), ids


async def bench_allocate_containers(
    admin: SCMClient, num_containers: int, threads: int, progress: Callable[[int], None] | None = None
) -> BenchResult:
    async def op(_: int) -> int:
        await admin.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "freon-stb")
        return 1

    n, secs, lat = await _timed_workers(num_containers, threads, op, progress)
    return BenchResult("AllocateContainers", n, secs, lat)


def prom_value(http_url: str, metric: str) -> float | None:
    """Sum of a metric's samples on an SCM's /prom page (None if unreachable or absent)."""
    try:
        with urllib.request.urlopen(http_url.rstrip("/") + "/prom", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    total, found = 0.0, False
    for line in text.splitlines():
        if re.match(rf"^{re.escape(metric)}(\{{.*\}})? ", line):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    return total if found else None


async def bench_process_reports(
    admin: SCMClient, sim: DatanodeSimulator, num_containers: int, num_heartbeats: int, threads: int,
    http_url: str | None = None, progress: Callable[[int], None] | None = None,
) -> BenchResult:
    """Full container reports of ``num_containers`` replicas per datanode, ``num_heartbeats`` rounds."""
    members: dict[int, set[str]] = {}
    for _ in range(num_containers):
        cwp = await admin.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "freon-stb")
        members[cwp.containerInfo.containerID] = {m.uuid for m in cwp.pipeline.members}
    dns = sim.datanodes
    requests = []
    replicas = 0
    for dn in dns:
        # Like a real datanode, each one reports only the containers of pipelines it belongs to.
        held = [cid for cid, uuids in members.items() if dn.uuid in uuids]
        if not held:
            # Against a cluster whose pipelines our fake datanodes are not part of (freon on a live
            # cluster), report every container so the SCM still processes full-size reports.
            held = list(members)
        replicas += len(held)
        report = scm_datanode_pb2.ContainerReportsProto(
            reports=[
                hdds_pb2.ContainerReplicaProto(
                    containerID=cid, state=hdds_pb2.ContainerReplicaProto.OPEN, size=sim.container_size,
                    used=4096, keyCount=1, blockCommitSequenceId=1, originNodeId=dn.uuid,
                )
                for cid in held
            ]
        )
        requests.append(
            scm_datanode_pb2.SCMHeartbeatRequestProto(
                datanodeDetails=dn.details(), nodeReport=dn.node_report(), containerReport=report
            )
        )
    clients = [DatanodeProtocolClient(addr, timeout=60) for addr in sim.scm_addresses[:1]]
    before = prom_value(http_url, "scm_datanode_full_container_reports_total") if http_url else None

    async def op(i: int) -> int:
        await clients[0].send_heartbeat(requests[i % len(requests)])
        return 1

    try:
        n, secs, lat = await _timed_workers(len(dns) * num_heartbeats, threads, op, progress)
    finally:
        for c in clients:
            await c.close()
    per_report = replicas / len(dns) if dns else 0.0
    extra: dict[str, Any] = {"replicas_per_report": round(per_report, 1), "datanodes": len(dns)}
    after = prom_value(http_url, "scm_datanode_full_container_reports_total") if http_url else None
    if before is not None and after is not None:
        extra["reports_counted_by_scm_prom"] = int(after - before)
    extra["replicas_per_second"] = round(n * per_report / secs, 1) if secs > 0 else 0.0
    return BenchResult("ProcessReports", n, secs, lat, extra)
