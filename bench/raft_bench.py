"""Raft benchmark: our 3-node KV cluster vs etcd 3.4 vs PySyncObj, same machine, same run.

What it measures (3 replicas on 127.0.0.1, 256-byte values, keys spread over 1,000 names):

* commit latency and throughput of writes with 1, 16, 64 and 256 concurrent clients
  (each client has one write outstanding; a cell runs for ``--duration`` seconds after a
  short warm-up; p50/p99 are over every completed write of the cell);
* failover time: SIGKILL the leader, then measure until the first client write succeeds
  (the client retries every replica with short timeouts); the killed replica is
  restarted and the cluster re-checked between repetitions; median of ``--failovers``.

How each system is driven — one asyncio client harness for all three, in this process:

* ours: ``python -m scm_server.raft.kv --fsync`` processes, driven by the runtime's
  ``scm_server.raft.kv_client.KvClient`` (one per cell, shared by the cell's writers: ops are
  multiplexed on one gRPC stream per member; leader-hint failover, exactly-once retries);
* etcd: Debian's ``etcd`` 3.4 binary, 3 members started here on free loopback ports with
  temp data dirs (fsync is always on in etcd), driven through its HTTP/JSON gateway with
  aiohttp (``POST /v3/kv/put`` with base64 key/value) at the leader's client URL;
* PySyncObj: it has no client protocol, so each replica runs ``bench/anchors/pysyncobj_node.py``
  (file journal, default timing) which adds a tiny line protocol over TCP; each client is
  one TCP connection to the leader replica (see that file's docstring).

All three clusters are started up front (idle ones only send heartbeats), and each cell
is run for every system back to back, in alternating order over ``--rounds`` rounds; the
best round per (system, clients) is reported, so background load on this shared 2-core
machine hits all systems alike. Results: a table on stdout with ratios ours/etcd and
ours/PySyncObj per row, and JSON in ``bench/results/raft_bench.json``. If etcd is
missing, ``scripts/install_bench_deps.sh`` installs it (apt-get) or the bench fails.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if not __package__:  # `python bench/raft_bench.py`: import bench.* and tests.* from this checkout, as `python -m` does
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp

from scm_server.client.retryable import is_transient
from scm_server.ports import free_port
from scm_server.raft.errors import RaftError

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
VALUE_SIZE = 256
KEYSPACE = 1000


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of these processes (all their threads), from /proc."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")




class PutRefused(Exception):
    """A system answered a put with a refusal (not the leader, no quorum yet): a write loop counts it and retries."""


def put_failed(exc: BaseException) -> bool:
    """What a write loop counts as a failed put and retries: the network (refused, reset, timed out, gRPC UNAVAILABLE
    or DEADLINE_EXCEEDED: what etcd answers while it has no leader) or a system's refusal (our KvClient's errors,
    PutRefused). Anything else is a broken harness and ends the cell with its error."""
    return is_transient(exc) or isinstance(exc, (PutRefused, RaftError))


async def wait_until(cond: Callable[[], Awaitable[bool]], timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll ``cond`` until true; only the errors a retry loop expects (``is_transient``) are waited out, any other
    (a harness that cannot import its client, a bug) is raised at once instead of timing out as "last error: None"."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if await cond():
                return
        except Exception as exc:
            if not is_transient(exc):
                raise
            last_exc = exc
        await asyncio.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what} (last error: {last_exc!r})")


@dataclass
class Cell:
    system: str
    clients: int
    ops: int
    errors: int
    seconds: float
    ops_per_s: float
    p50_ms: float
    p99_ms: float
    client_cpu_us: float = 0.0  # CPU time of this bench process (the clients) per completed op
    server_cpu_us: float = 0.0  # CPU time of the 3 server processes together per completed op


@dataclass
class SystemResult:
    system: str
    cells: list[Cell] = field(default_factory=list)
    failover_s: list[float] = field(default_factory=list)
    stability: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""

    @property
    def failover_median(self) -> float | None:
        return statistics.median(self.failover_s) if self.failover_s else None


class Writer:
    """One benchmark client: a put with one request outstanding."""

    async def put(self, key: str, value: bytes) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class Cluster:
    """A 3-replica cluster of one system, started and stopped by the bench."""

    name = "?"
    failover = True  # measured by the failover phase
    stability = True  # measured by the stability phase (needs term())

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[subprocess.Popen[bytes] | None] = [None, None, None]
        self.logs: list[Path] = [workdir / f"node{i}.log" for i in range(3)]

    def command(self, i: int, first_start: bool) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def spawn(self, i: int, first_start: bool) -> None:
        log = self.logs[i].open("ab")
        self.procs[i] = subprocess.Popen(
            self.command(i, first_start), stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=self.env()
        )
        log.close()

    async def start(self) -> None:
        for i in range(3):
            self.spawn(i, True)
        await wait_until(self.healthy, 60, f"{self.name} cluster to elect a leader")

    async def healthy(self) -> bool:
        return await self.leader() is not None

    async def leader(self) -> int | None:
        raise NotImplementedError

    async def writer(self) -> Writer:
        raise NotImplementedError

    async def failover_writer(self) -> Writer:
        """A writer that tries every live replica (used right after a leader kill)."""
        raise NotImplementedError

    async def end_cell(self) -> None:
        """Release what the cell's writers shared (called after every cell)."""
        return None

    def kill(self, i: int) -> None:
        p = self.procs[i]
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()

    async def restart(self, i: int) -> None:
        self.spawn(i, False)

    def pause(self, i: int) -> None:
        p = self.procs[i]
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGSTOP)

    def resume(self, i: int) -> None:
        p = self.procs[i]
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGCONT)

    async def term(self) -> int:
        """The highest Raft term any live member reports (elections = how much it grew)."""
        raise NotImplementedError

    async def stop(self) -> None:
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            if p is not None:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    def alive(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p is not None and p.poll() is None]

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p is not None and p.poll() is None]


# ------------------------------------------------------------------------------------- etcd


class EtcdGrpcWriter(Writer):
    """etcd's native ``KV.Put`` over grpc.aio; every writer of a cell shares one channel per member
    (one HTTP/2 connection, calls multiplexed on it: what etcd's Go client does)."""

    def __init__(self, cluster: EtcdCluster, members: list[int], timeout: float) -> None:
        self.cluster = cluster
        self.members = members
        self.timeout = timeout
        self.n = 0

    async def put(self, key: str, value: bytes) -> None:
        i = self.members[self.n % len(self.members)]
        try:
            await self.cluster.grpc(i).put(key.encode(), value, self.timeout)
        except Exception:
            self.n += 1  # next try goes to another member
            raise


class EtcdGatewayWriter(Writer):
    def __init__(self, session: aiohttp.ClientSession, urls: list[str], timeout: float) -> None:
        self.session = session
        self.urls = urls
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.n = 0

    async def put(self, key: str, value: bytes) -> None:
        body = {"key": base64.b64encode(key.encode()).decode(), "value": base64.b64encode(value).decode()}
        url = self.urls[self.n % len(self.urls)]
        try:
            async with self.session.post(f"{url}/v3/kv/put", json=body, timeout=self.timeout) as resp:
                data = await resp.json(content_type=None)
                if resp.status != 200 or "header" not in data:
                    raise PutRefused(f"etcd put failed: HTTP {resp.status} {data}")
        except Exception:
            self.n += 1  # next try goes to another member
            raise


class EtcdCluster(Cluster):
    """Debian's etcd 3.4, 3 members, driven through its native gRPC API (``bench/anchors/etcd_grpc.py``)."""

    name = "etcd"

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.peer_ports = [free_port() for _ in range(3)]
        self.client_ports = [free_port() for _ in range(3)]
        self.session: aiohttp.ClientSession | None = None
        self._grpc: dict[int, Any] = {}

    def url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.client_ports[i]}"

    def command(self, i: int, first_start: bool) -> list[str]:
        cluster = ",".join(f"e{j}=http://127.0.0.1:{self.peer_ports[j]}" for j in range(3))
        etcd = shutil.which("etcd")
        assert etcd is not None
        return [
            etcd,
            "--name", f"e{i}",
            "--data-dir", str(self.workdir / f"e{i}"),
            "--listen-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
            "--listen-client-urls", self.url(i),
            "--advertise-client-urls", self.url(i),
            "--initial-cluster", cluster,
            "--initial-cluster-state", "new",
            "--initial-cluster-token", f"bench-{os.getpid()}",
            "--logger", "zap",
            "--log-level", "error",
        ]  # fmt: skip

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("ETCDCTL_API", None)
        return env

    def grpc(self, i: int) -> Any:
        from bench.anchors.etcd_grpc import EtcdGrpc

        c = self._grpc.get(i)
        if c is None:
            c = self._grpc[i] = EtcdGrpc(f"127.0.0.1:{self.client_ports[i]}")
        return c

    async def gateway_session(self) -> aiohttp.ClientSession:
        if self.session is None:
            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        return self.session

    async def leader(self) -> int | None:
        for i in self.alive():
            try:
                st = await self.grpc(i).status(timeout=1.0)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                continue
            if st.leader and st.leader == st.member_id:
                return i
        return None

    async def term(self) -> int:
        terms = []
        for i in self.alive():
            try:
                terms.append((await self.grpc(i).status(timeout=1.0)).raft_term)
            except Exception as exc:
                if not is_transient(exc):
                    raise
        if not terms:
            raise RuntimeError("no etcd member answered Status")
        return max(terms)

    async def writer(self) -> Writer:
        leader = await self.leader()
        assert leader is not None
        return EtcdGrpcWriter(self, [leader], timeout=10)

    async def failover_writer(self) -> Writer:
        return EtcdGrpcWriter(self, self.alive(), timeout=0.5)

    async def stop(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None
        for c in self._grpc.values():
            with contextlib.suppress(Exception):
                await c.close()
        self._grpc.clear()
        await super().stop()


class EtcdGatewayView(Cluster):
    """The same etcd members as :class:`EtcdCluster`, driven through the HTTP/JSON gateway with aiohttp
    (``POST /v3/kv/put`` with base64 key/value): the figure the gateway-only benchmark used to print."""

    name = "etcd-gw"
    failover = False
    stability = False

    def __init__(self, workdir: Path, etcd: EtcdCluster) -> None:
        super().__init__(workdir)
        self.etcd = etcd

    async def start(self) -> None:
        await wait_until(self.healthy, 60, "etcd (gateway view) to see a leader")

    def alive(self) -> list[int]:
        return self.etcd.alive()

    def pids(self) -> list[int]:
        return self.etcd.pids()

    async def leader(self) -> int | None:
        return await self.etcd.leader()

    async def writer(self) -> Writer:
        leader = await self.leader()
        assert leader is not None
        return EtcdGatewayWriter(await self.etcd.gateway_session(), [self.etcd.url(leader)], timeout=10)

    async def stop(self) -> None:
        return None  # the processes belong to the EtcdCluster


# -------------------------------------------------------------------------------- PySyncObj


class LineWriter(Writer):
    """A client of bench/anchors/pysyncobj_node.py's line protocol (one request at a time)."""

    def __init__(self, ports: list[int], timeout: float) -> None:
        self.ports = ports
        self.timeout = timeout
        self.n = 0
        self.conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.rid = 0

    async def _conn(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.conn is None:
            port = self.ports[self.n % len(self.ports)]
            self.conn = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), self.timeout)
        return self.conn

    async def _drop(self) -> None:
        if self.conn is not None:
            self.conn[1].close()
            self.conn = None
        self.n += 1

    async def put(self, key: str, value: bytes) -> None:
        self.rid += 1
        try:
            reader, writer = await self._conn()
            writer.write(f"P {self.rid} {key} {base64.b64encode(value).decode()}\n".encode())
            line = await asyncio.wait_for(reader.readline(), self.timeout)
            parts = line.decode().split()
            if not parts or parts[0] != "OK" or parts[1] != str(self.rid):
                raise PutRefused(f"pysyncobj put failed: {line!r}")
        except BaseException:
            await self._drop()
            raise

    async def close(self) -> None:
        if self.conn is not None:
            self.conn[1].close()
            self.conn = None


class PySyncObjCluster(Cluster):
    name = "pysyncobj"
    stability = False  # its line protocol does not report the term

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.raft_ports = [free_port() for _ in range(3)]
        self.client_ports = [free_port() for _ in range(3)]

    def command(self, i: int, first_start: bool) -> list[str]:
        d = self.workdir / f"p{i}"
        d.mkdir(parents=True, exist_ok=True)
        partners = ",".join(f"127.0.0.1:{p}" for j, p in enumerate(self.raft_ports) if j != i)
        return [
            PYTHON, str(REPO / "bench" / "anchors" / "pysyncobj_node.py"),
            "--self", f"127.0.0.1:{self.raft_ports[i]}",
            "--partners", partners,
            "--client-port", str(self.client_ports[i]),
            "--data-dir", str(d),
        ]  # fmt: skip

    async def _status(self, i: int) -> list[str]:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.client_ports[i]), 1)
        try:
            writer.write(b"S\n")
            return (await asyncio.wait_for(reader.readline(), 1)).decode().split()
        finally:
            writer.close()

    async def leader(self) -> int | None:
        for i in self.alive():
            try:
                st = await self._status(i)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                continue
            if st and st[0] == "S" and st[2] == st[3]:
                return i
        return None

    async def writer(self) -> Writer:
        leader = await self.leader()
        assert leader is not None
        return LineWriter([self.client_ports[leader]], timeout=10)

    async def failover_writer(self) -> Writer:
        return LineWriter([self.client_ports[i] for i in self.alive()], timeout=0.5)


# ------------------------------------------------------------------------------------- ours


class OursWriter(Writer):
    def __init__(self, client: Any, owned: bool) -> None:
        self.client = client
        self.owned = owned

    async def put(self, key: str, value: bytes) -> None:
        await self.client.put(key.encode(), value)

    async def close(self) -> None:
        if self.owned:
            await self.client.close()


class OursCluster(Cluster):
    """Our demo KV server (``python -m scm_server.raft.kv --fsync``), driven by the runtime's
    ``scm_server.raft.kv_client.KvClient``: one client object per cell shared by all the
    cell's concurrent writers (ops multiplexed on one stream per member, like the one pooled
    aiohttp session used for etcd), each writer with one put outstanding."""

    name = "ours"

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        from scm_server.verify.kvcluster import KvCluster

        self.kv = KvCluster(workdir, size=3, fault_injection=False, extra_args=["--fsync"])
        self.logs = self.kv.logs
        self.shared: Any = None

    async def start(self) -> None:
        await self.kv.start()

    def alive(self) -> list[int]:
        return self.kv.alive()

    def pids(self) -> list[int]:
        return [pid for i in self.kv.alive() if (pid := self.kv.pid(i)) is not None]

    async def leader(self) -> int | None:
        return await self.kv.leader_index()

    async def writer(self) -> Writer:
        from scm_server.raft.kv_client import KvClient

        if self.shared is None:
            leader = await self.leader()
            order = list(self.kv.addresses)
            if leader is not None:  # start at the leader, like the etcd writers
                order = order[leader:] + order[:leader]
            self.shared = KvClient(order, rpc_timeout=10.0)
        return OursWriter(self.shared, owned=False)

    async def end_cell(self) -> None:
        if self.shared is not None:
            await self.shared.close()
            self.shared = None

    async def failover_writer(self) -> Writer:
        from scm_server.raft.kv_client import KvClient

        return OursWriter(KvClient(list(self.kv.addresses), rpc_timeout=0.5, max_attempts=2, retry_interval=0.01), True)

    def kill(self, i: int) -> None:
        self.kv.kill(i)

    async def restart(self, i: int) -> None:
        self.kv.spawn(i)

    def pause(self, i: int) -> None:
        self.kv.pause(i)

    def resume(self, i: int) -> None:
        self.kv.resume(i)

    async def term(self) -> int:
        terms = []
        for i in self.kv.alive():
            try:
                terms.append(int((await self.kv.status(i, timeout=1.0)).term))
            except Exception as exc:
                if not put_failed(exc):
                    raise
        if not terms:
            raise RuntimeError("no member answered Status")
        return max(terms)

    async def stop(self) -> None:
        await self.end_cell()
        await self.kv.stop()


# ------------------------------------------------------------------------------- harness


async def run_cell(cluster: Cluster, clients: int, duration: float, warmup: float) -> Cell:
    writers = [await cluster.writer() for _ in range(clients)]
    value = os.urandom(VALUE_SIZE // 2).hex().encode()[:VALUE_SIZE]
    latencies: list[float] = []
    errors = 0
    t_start = time.perf_counter()
    t_measure = t_start + warmup
    t_end = t_measure + duration
    cpu_at_measure: list[float] = []  # [client CPU, server CPU] when the measured window opens
    pids = cluster.pids()

    async def work(w: Writer, wid: int) -> None:
        nonlocal errors
        n = 0
        while True:
            t0 = time.perf_counter()
            if t0 >= t_end:
                return
            if t0 >= t_measure and not cpu_at_measure:
                cpu_at_measure.append(time.process_time())
                cpu_at_measure.append(cpu_seconds(pids))
            try:
                await w.put(f"k{(wid * 7919 + n) % KEYSPACE:04d}", value)
            except Exception as exc:
                if not put_failed(exc):
                    raise
                if t0 >= t_measure:
                    errors += 1
                await asyncio.sleep(0.01)
                continue
            finally:
                n += 1
            t1 = time.perf_counter()
            if t0 >= t_measure and t1 <= t_end:
                latencies.append(t1 - t0)

    await asyncio.gather(*(work(w, i) for i, w in enumerate(writers)))
    cpu = time.process_time() - (cpu_at_measure[0] if cpu_at_measure else time.process_time())
    server_cpu = cpu_seconds(pids) - (cpu_at_measure[1] if cpu_at_measure else cpu_seconds(pids))
    for w in writers:
        await w.close()
    await cluster.end_cell()
    latencies.sort()

    def pct(p: float) -> float:
        if not latencies:
            return float("nan")
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    ops = len(latencies)
    return Cell(
        cluster.name, clients, ops, errors, duration, ops / duration, pct(0.5), pct(0.99),
        client_cpu_us=(cpu / ops * 1e6) if ops else float("nan"),
        server_cpu_us=(server_cpu / ops * 1e6) if ops else float("nan"),
    )  # fmt: skip


async def measure_failover(cluster: Cluster, repeats: int) -> list[float]:
    times = []
    value = b"f" * VALUE_SIZE
    for r in range(repeats):
        await wait_until(cluster.healthy, 60, f"{cluster.name} healthy before failover {r}")
        leader = await cluster.leader()
        assert leader is not None
        t_kill = time.perf_counter()
        cluster.kill(leader)
        w = await cluster.failover_writer()
        deadline = t_kill + 60
        done = None
        n = 0
        while time.perf_counter() < deadline:
            try:
                await w.put(f"failover-{r}-{n}", value)
                done = time.perf_counter()
                break
            except Exception as exc:
                if not put_failed(exc):
                    raise
                n += 1
                await asyncio.sleep(0.005)
        await w.close()
        if done is None:
            raise RuntimeError(f"{cluster.name}: no write succeeded within 60 s of killing the leader")
        times.append(done - t_kill)
        await cluster.restart(leader)
        await wait_until(cluster.healthy, 60, f"{cluster.name} healthy after restart")
    return times


async def measure_stability(cluster: Cluster, seconds: float, clients: int, pause: bool) -> dict[str, Any]:
    """``clients`` writers for ``seconds`` with no fault, or with the member that leads at the start
    paused (SIGSTOP) for 100 ms at the start of every second. Counts elections (how much the highest
    term grew) and leader changes (polled every 100 ms) and the writes that completed."""
    await wait_until(cluster.healthy, 60, f"{cluster.name} healthy before the stability run")
    leader0 = await cluster.leader()
    assert leader0 is not None
    term0 = await cluster.term()
    writers = [await cluster.writer() for _ in range(clients)]
    value = b"s" * VALUE_SIZE
    loop = asyncio.get_running_loop()
    t_end = loop.time() + seconds
    done = errors = 0

    async def work(w: Writer, wid: int) -> None:
        nonlocal done, errors
        n = 0
        while loop.time() < t_end:
            n += 1
            try:
                await w.put(f"k{(wid * 7919 + n) % KEYSPACE:04d}", value)
                done += 1
            except Exception as exc:
                if not put_failed(exc):
                    raise
                errors += 1
                await asyncio.sleep(0.01)

    async def pauser() -> int:
        pauses = 0
        next_at = loop.time() + 1.0
        while next_at + 0.1 < t_end:
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            cluster.pause(leader0)
            try:
                await asyncio.sleep(0.1)
            finally:
                cluster.resume(leader0)
            pauses += 1
            next_at += 1.0
        return pauses

    leaders: list[int] = [leader0]

    async def watch() -> None:
        while loop.time() < t_end:
            await asyncio.sleep(0.1)
            li = await cluster.leader()  # waits out the network itself; anything else is a broken harness
            if li is not None and li != leaders[-1]:
                leaders.append(li)

    tasks = [loop.create_task(work(w, i)) for i, w in enumerate(writers)]
    watcher = loop.create_task(watch())
    pauses = await pauser() if pause else 0
    await asyncio.gather(*tasks, watcher)
    for w in writers:
        await w.close()
    await cluster.end_cell()
    term1 = await cluster.term()
    return {
        "scenario": "leader paused 100 ms every second" if pause else "no fault",
        "seconds": seconds,
        "clients": clients,
        "pauses": pauses,
        "elections": term1 - term0,
        "leader_changes": len(leaders) - 1,
        "writes": done,
        "errors": errors,
    }


def _print_cell(cell: Cell, rnd: int) -> None:
    print(
        f"  r{rnd} {cell.system:10s} {cell.clients:4d} clients: {cell.ops_per_s:9.1f} ops/s  p50 {cell.p50_ms:7.2f} ms  "
        f"p99 {cell.p99_ms:7.2f} ms  errors {cell.errors}  CPU us/op: client {cell.client_cpu_us:5.0f}, "
        f"servers {cell.server_cpu_us:5.0f}",
        flush=True,
    )


def make_clusters(names: list[str], root: Path) -> dict[str, Cluster]:
    clusters: dict[str, Cluster] = {}
    for n in names:
        workdir = root / n
        workdir.mkdir()
        if n == "ours":
            clusters[n] = OursCluster(workdir)
        elif n == "etcd":
            clusters[n] = EtcdCluster(workdir)
        elif n == "etcd-gw":
            etcd = clusters.get("etcd")
            assert isinstance(etcd, EtcdCluster), "etcd-gw drives the etcd members: list etcd before it"
            clusters[n] = EtcdGatewayView(workdir, etcd)
        elif n == "pysyncobj":
            clusters[n] = PySyncObjCluster(workdir)
        else:
            raise SystemExit(f"unknown system {n!r}: choose from {', '.join(SYSTEMS)}")
    return clusters


async def bench_all(names: list[str], args: argparse.Namespace, root: Path) -> dict[str, SystemResult]:
    """All clusters are up together (idle ones only heartbeat); every cell is run for every
    system back to back, in alternating order over ``--rounds`` rounds, and the best round
    of each (system, clients) is kept: load from other processes on this shared machine then
    hits all systems alike instead of whichever happened to run during a busy minute."""
    results = {n: SystemResult(n) for n in names}
    clusters = make_clusters(names, root)
    try:
        for n, c in clusters.items():
            try:
                await c.start()
            except Exception as exc:
                results[n].error = f"start: {type(exc).__name__}: {exc}"
                print(f"  {n}: FAILED to start: {results[n].error} (logs in {root / n})", flush=True)
        live = [n for n in names if not results[n].error]
        best: dict[tuple[str, int], Cell] = {}
        for rnd in range(args.rounds):
            order = live if rnd % 2 == 0 else list(reversed(live))
            for clients in args.clients:
                for n in order:
                    if results[n].error:
                        continue
                    try:
                        await wait_until(clusters[n].healthy, 30, f"{n} leader before the {clients}-client cell")
                        cell = await run_cell(clusters[n], clients, args.duration, args.warmup)
                    except Exception as exc:
                        results[n].error = f"{clients} clients: {type(exc).__name__}: {exc}"
                        print(f"  {n}: FAILED: {results[n].error} (logs in {root / n})", flush=True)
                        continue
                    _print_cell(cell, rnd)
                    key = (n, clients)
                    if key not in best or cell.ops_per_s > best[key].ops_per_s:
                        best[key] = cell
        for n in names:
            results[n].cells = [best[(n, c)] for c in args.clients if (n, c) in best]
        if args.stability_seconds > 0:
            for pause in (False, True):
                for n in live:
                    if results[n].error or not clusters[n].stability:
                        continue
                    try:
                        st = await measure_stability(clusters[n], args.stability_seconds, args.stability_clients, pause)
                    except Exception as exc:
                        results[n].error = f"stability: {type(exc).__name__}: {exc}"
                        print(f"  {n}: FAILED: {results[n].error}", flush=True)
                        continue
                    results[n].stability.append(st)
                    print(f"  {n:10s} stability, {st['scenario']}: {st['elections']} elections, "
                          f"{st['leader_changes']} leader changes, {st['writes']} writes, {st['errors']} errors",
                          flush=True)
        if args.failovers:
            # interleaved per repetition, so a busy minute hits every system alike
            for r in range(args.failovers):
                for n in live if r % 2 == 0 else list(reversed(live)):
                    if results[n].error or not clusters[n].failover:
                        continue
                    try:
                        results[n].failover_s += await measure_failover(clusters[n], 1)
                    except Exception as exc:
                        results[n].error = f"failover: {type(exc).__name__}: {exc}"
            for n in live:
                if clusters[n].failover:
                    print(f"  {n:10s} failover: {', '.join(f'{t:.2f}s' for t in results[n].failover_s)}", flush=True)
    finally:
        for c in reversed(list(clusters.values())):
            with contextlib.suppress(Exception):
                await c.stop()
    return results


def ensure_etcd() -> None:
    if shutil.which("etcd"):
        return
    print("etcd not found: installing it with scripts/install_bench_deps.sh", flush=True)
    subprocess.run(["bash", str(REPO / "scripts" / "install_bench_deps.sh")], check=True)
    if not shutil.which("etcd"):
        raise SystemExit("etcd is still missing after scripts/install_bench_deps.sh; install etcd-server by hand")


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0 or a != a or b != b:
        return "-"
    return f"{a / b:.2f}x"


def print_table(results: dict[str, SystemResult]) -> None:
    by = {n: {c.clients: c for c in r.cells} for n, r in results.items()}
    ours = by.get("ours", {})
    others = [n for n in ("etcd", "etcd-gw", "pysyncobj") if n in results]
    print()
    head = "".join(f" {'ours/' + o:>14s}" for o in others)
    print(f"{'system':10s} {'clients':>7s} {'ops/s':>9s} {'p50 ms':>8s} {'p99 ms':>8s} {'cli us/op':>9s} "
          f"{'srv us/op':>9s}  {head}")
    for name, res in results.items():
        for c in res.cells:
            o = ours.get(c.clients)
            extra = ""
            if name == "ours":
                for other in others:
                    a = by[other].get(c.clients)
                    extra += f" {ratio(o.ops_per_s if o else None, a.ops_per_s if a else None):>14s}"
            print(f"{name:10s} {c.clients:7d} {c.ops_per_s:9.1f} {c.p50_ms:8.2f} {c.p99_ms:8.2f} {c.client_cpu_us:9.0f} "
                  f"{c.server_cpu_us:9.0f}  {extra}")
    print("(ratios: throughput ours/other, higher is better; etcd = native gRPC KV.Put, etcd-gw = its JSON gateway;\n"
          " cli/srv us/op: CPU time of the client process / of the 3 server processes per completed write)")
    for clients in sorted(ours):
        parts = []
        for other in others:
            a = by[other].get(clients)
            parts.append(f"{ratio(ours[clients].p50_ms, a.p50_ms if a else None)} vs {other}")
        print(f"latency p50 ours/other at {clients} client{'s' if clients > 1 else ''} (lower is better): "
              + ", ".join(parts))
    print()
    print("failover (SIGKILL leader -> first successful write), median:")
    for name, res in results.items():
        if not res.failover_s and not res.error:
            continue
        med = res.failover_median
        runs = ", ".join(f"{t:.2f}" for t in res.failover_s)
        print(f"  {name:10s} {'-' if med is None else f'{med:.2f} s'}  ({runs})" + (f"  ERROR {res.error}" if res.error else ""))
    fo = {n: r.failover_median for n, r in results.items()}
    if "ours" in fo:
        print(f"  ratio ours/etcd {ratio(fo.get('ours'), fo.get('etcd'))} (lower is better), "
              f"ours/pysyncobj {ratio(fo.get('ours'), fo.get('pysyncobj'))}")
    if any(r.stability for r in results.values()):
        print()
        print("stability (elections = growth of the highest term; goal 0 for ours):")
        for name, res in results.items():
            for st in res.stability:
                print(f"  {name:10s} {st['scenario']:36s} {st['seconds']:.0f}s x {st['clients']} clients: "
                      f"{st['elections']} elections, {st['leader_changes']} leader changes, {st['writes']} writes")


SYSTEMS = ("ours", "etcd", "etcd-gw", "pysyncobj")


async def amain(args: argparse.Namespace) -> int:
    chosen = [s for s in SYSTEMS if s in args.systems]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown:
        raise SystemExit(f"--systems: unknown {unknown}; choose from {', '.join(SYSTEMS)}")
    if "etcd-gw" in chosen and "etcd" not in chosen:
        raise SystemExit("--systems: etcd-gw drives the etcd members; list etcd too")
    if "etcd" in chosen:
        ensure_etcd()
    root = Path(tempfile.mkdtemp(prefix="raft-bench-"))
    print(
        f"raft_bench: {', '.join(chosen)}; clients {args.clients}; {args.duration}s per cell; value {VALUE_SIZE} B; "
        f"work dir {root}",
        flush=True,
    )
    results = await bench_all(chosen, args, root)
    print_table(results)
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "value_size": VALUE_SIZE,
        "duration_per_cell_s": args.duration,
        "rounds": args.rounds,
        "note": "best of the rounds per (system, clients); systems interleaved per cell; 3 replicas on loopback; "
                "etcd = native gRPC KV.Put, etcd-gw = the same members through the JSON gateway",
        "host_cpus": os.cpu_count(),
        "load_average_at_end": os.getloadavg(),
        "systems": {
            n: {"cells": [asdict(c) for c in r.cells], "failover_s": r.failover_s, "failover_median_s": r.failover_median,
                "stability": r.stability, "error": r.error}
            for n, r in results.items()
        },
    }
    (out / "raft_bench.json").write_text(json.dumps(payload, indent=2))
    print(f"wrote {out / 'raft_bench.json'}")
    failed = [n for n, r in results.items() if r.error]
    if failed:
        print(f"FAILED systems: {failed}; work dir kept: {root}")
        return 1
    with contextlib.suppress(OSError):
        shutil.rmtree(root)
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", nargs="+", default=list(SYSTEMS))
    ap.add_argument("--clients", nargs="+", type=int, default=[1, 16, 64, 256])
    ap.add_argument("--duration", type=float, default=4.0, help="measured seconds per cell")
    ap.add_argument("--warmup", type=float, default=0.7)
    ap.add_argument("--rounds", type=int, default=2, help="rounds over all cells; the best round is kept")
    ap.add_argument(
        "--failovers",
        type=int,
        default=15,
        help="SIGKILLs of the leader per system (median reported; each gap is one draw of a random 1-2 s "
        "election timeout, so a median of 7 moved by a tenth of a second between runs)",
    )
    ap.add_argument("--stability-seconds", type=float, default=60.0,
                    help="length of each stability run (no fault; leader paused 100 ms every second); 0 skips them")
    ap.add_argument("--stability-clients", type=int, default=64)
    sys.exit(asyncio.run(amain(ap.parse_args())))


if __name__ == "__main__":
    main()
