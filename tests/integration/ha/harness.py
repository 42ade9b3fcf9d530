"""Shared pieces of the real-process HA tests: a concurrent block/container workload that records
its full history, and checks over it (uniqueness, per-SCM presence, ldb scans, digests)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

from scm_server.client.config import SCMClientConfig
from scm_server.client.ha_admin import HAAdminClient
from scm_server.client.scm_client import SCMClient
from scm_server.datanode_sim import DatanodeSimulator
from scm_server.exceptions import SCMError
from scm_server.local.quorum import HALocalCluster
from scm_server.proto import hdds_pb2, scm_ha_pb2
from scm_server.security.tls import ChannelSecurity
from scm_server.verify import check_unique_ids
from scm_server.verify.linearizability import Operation

CLIENT_CONFIG = SCMClientConfig(max_retries=200, retry_interval=0.05, rpc_timeout=10.0)

# Fast, HA-friendly settings for tests (on top of the local cluster's defaults).
TEST_SETTINGS = {
    "hdds.scm.safemode.min.datanode": "3",
    "ozone.scm.ha.ratis.fsync": "false",
    "ozone.scm.ha.ratis.fault.injection.enabled": "true",
    "ozone.scm.container.size": "64MB",
    "ozone.scm.block.size": "1MB",
}


@dataclasses.dataclass
class Op:
    kind: str  # "block" | "container"
    start: float
    end: float
    ok: bool
    ids: list[tuple[int, int]] = dataclasses.field(default_factory=list)  # (containerID, localID) or (cid, 0)
    error: str = ""
    client: int = -1


class Workload:
    """``clients`` independent failover clients allocating blocks (and every ``container_every``-th
    op a container) until stopped; every op is recorded."""

    def __init__(
        self, addresses: list[str], clients: int = 4, container_every: int = 10,
        security: ChannelSecurity | None = None, config: SCMClientConfig = CLIENT_CONFIG,
    ) -> None:
        self.addresses = addresses
        self.security = security  # the admin's client certificate on a secure cluster
        self.clients = clients
        self.container_every = container_every
        self.config = config
        self.ops: list[Op] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._client(i)) for i in range(self.clients)]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    async def _client(self, i: int) -> None:
        async with SCMClient(self.addresses, self.config, security=self.security) as c:
            n = 0
            while not self._stop.is_set():
                n += 1
                start = time.monotonic()
                kind = "container" if n % self.container_every == 0 else "block"
                try:
                    if kind == "block":
                        blocks = await c.allocate_block(1 << 20, 1, hdds_pb2.RATIS, hdds_pb2.THREE, f"client{i}")
                        ids = [(b.containerBlockID.containerID, b.containerBlockID.localID) for b in blocks]
                    else:
                        cwp = await c.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, f"client{i}")
                        ids = [(cwp.containerInfo.containerID, 0)]
                    self.ops.append(Op(kind, start, time.monotonic(), True, ids, client=i))
                except (SCMError, OSError) as exc:
                    self.ops.append(Op(kind, start, time.monotonic(), False, error=str(exc)[:200], client=i))
                    await asyncio.sleep(0.05)

    # ---- history checks ----
    def successes(self) -> list[Op]:
        return [o for o in self.ops if o.ok]

    def block_ids(self) -> list[tuple[int, int]]:
        return [i for o in self.ops if o.ok and o.kind == "block" for i in o.ids]

    def container_ids(self) -> list[int]:
        return [o.ids[0][0] for o in self.ops if o.ok and o.kind == "container"]

    def acknowledged_containers(self) -> set[int]:
        return {cid for o in self.ops if o.ok for cid, _ in o.ids}

    def assert_unique(self) -> None:
        """No block localID and no container ID handed out twice over the whole history of every
        client (the raft-verify unique-ID checker), and IDs increase in real-time order: an op that
        started after another returned got a larger ID, across failovers too (batches invalidated)."""
        blocks = [
            Operation(i, "allocateBlock", o.start, o.ids[0][1], o.end)
            for i, o in enumerate(self.ops) if o.ok and o.kind == "block"
        ]
        containers = [
            Operation(i, "allocateContainer", o.start, o.ids[0][0], o.end)
            for i, o in enumerate(self.ops) if o.ok and o.kind == "container"
        ]
        for what, ops in (("block localID", blocks), ("container ID", containers)):
            result = check_unique_ids(ops, require_increasing=True)
            assert result.ok, f"{what}s: {result.describe()}"
        assert blocks, "no block was allocated"

    def first_success_after(self, t: float) -> float | None:
        ends = [o.end for o in self.ops if o.ok and o.start >= t]
        return min(ends) if ends else None


async def wait_until(pred, timeout: float, what: str, interval: float = 0.1):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = await pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


async def start_sim(cluster: HALocalCluster, count: int = 3) -> DatanodeSimulator:
    sim = DatanodeSimulator(
        cluster.datanode_addresses, count, heartbeat_interval=0.3, racks=1,
        admin_addresses=cluster.client_addresses, container_report_interval=5,
        security=cluster.datanode_security(), admin_security=cluster.client_security,
    )
    await sim.start()
    return sim


async def start_serving(cluster: HALocalCluster, datanodes: int = 3) -> DatanodeSimulator:
    """Start the quorum and ``datanodes`` simulated datanodes, and wait until the quorum is healthy and a pipeline
    is open (allocations can succeed). The datanodes are stopped again if the wait fails."""
    cluster.start_quorum()
    sim = await start_sim(cluster, datanodes)
    try:
        await cluster.wait_healthy_quorum(timeout=90)
        await wait_open_pipeline(cluster)
    except BaseException:
        await sim.stop()
        raise
    return sim


async def wait_open_pipeline(cluster: HALocalCluster, timeout: float = 60) -> None:
    async def ok() -> bool:
        try:
            async with SCMClient(cluster.client_addresses, CLIENT_CONFIG, security=cluster.client_security) as c:
                pipelines = await c.list_pipelines()
                return any(p.state == hdds_pb2.PIPELINE_OPEN and p.factor == hdds_pb2.THREE for p in pipelines)
        except SCMError:
            return False

    await wait_until(ok, timeout, "an OPEN RATIS/THREE pipeline")


async def containers_on(cluster: HALocalCluster, index: int, ids: set[int]) -> set[int]:
    """Which of ``ids`` SCM ``index`` knows (a local read on that SCM, no failover)."""
    missing: set[int] = set()
    cfg = SCMClientConfig(max_retries=0, retry_interval=0.05, rpc_timeout=5)
    async with SCMClient([cluster.scms[index].client_address], cfg, security=cluster.client_security,
                         local_read=True) as c:
        for cid in sorted(ids):
            try:
                await c.get_container(cid)
            except SCMError:
                missing.add(cid)
    return ids - missing


async def wait_caught_up(cluster: HALocalCluster, timeout: float = 60) -> list[dict]:  # type: ignore[type-arg]
    """Every running SCM has applied the commit index the leader had when this wait began.

    The target is read once and then held: the views are read one SCM after another, so under
    continuous load a target re-read at every poll is always a little ahead of the followers'
    applied index read before it, and the wait ends only when a pause in the load happens to
    line up with a poll. Writes acknowledged before the call are at or below the target."""
    target: int | None = None

    async def ok() -> list[dict] | None:  # type: ignore[type-arg]
        nonlocal target
        views = await cluster.node_views()
        if any("error" in v for v in views):
            return None
        leaders = [v for v in views if v["isLeader"]]
        if len(leaders) != 1:
            return None
        if target is None:
            target = int(leaders[0]["commit"])
        return views if all(v["applied"] >= target for v in views) else None

    return await wait_until(ok, timeout, "all SCMs caught up with the leader")  # type: ignore[no-any-return]


async def digests(cluster: HALocalCluster, min_index: int) -> dict[str, scm_ha_pb2.TableDigestsResponseProto]:
    out = {}
    async with HAAdminClient(cluster.running_grpc_addresses(), security=cluster.client_security) as c:
        for i, s in enumerate(cluster.scms):
            if cluster.is_running(i):
                out[s.node_id or str(i)] = await c.table_digests(f"127.0.0.1:{s.grpc_port}", min_index, wait=20)
    return out


def ldb_scan(cluster: HALocalCluster, index: int, column_family: str = "containers") -> list[str]:
    s = cluster.scms[index]
    db = s.metadata_dir / "scm.db"
    result = subprocess.run(
        [sys.executable, "-m", "scm_server.cli.main", "debug", "ldb", f"--db={db}", "scan",
         f"--column_family={column_family}"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def ldb_container_ids(lines: list[str]) -> set[int]:
    out = set()
    for line in lines:
        obj = json.loads(line)
        key = obj.get("key", obj.get("containerID"))
        out.add(int(key))
    return out


def cli(cluster: HALocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """``ozone-scm`` with scm1's configuration, or on a secure cluster the admin client configuration."""
    if cluster.secure is not None:
        return subprocess.run(
            [cluster.python, "-m", "scm_server.cli.main", "--conf", str(cluster.secure.admin_conf_dir), *args],
            capture_output=True, text=True, timeout=60, env=cluster._env(),
        )
    return cluster.cli(cluster.scms[0], *args, timeout=60)


__all__ = ["Path"]
