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
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from a checkout: make scm_server importable
    sys.path.insert(0, str(REPO))
PYTHON = sys.executable
VALUE_SIZE = 256
KEYSPACE = 1000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_until(cond: Callable[[], Awaitable[bool]], timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if await cond():
                return
        except Exception as exc:
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


@dataclass
class SystemResult:
    system: str
    cells: list[Cell] = field(default_factory=list)
    failover_s: list[float] = field(default_factory=list)
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


# ------------------------------------------------------------------------------------- etcd


class EtcdWriter(Writer):
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
                    raise RuntimeError(f"etcd put failed: HTTP {resp.status} {data}")
        except Exception:
            self.n += 1  # next try goes to another member
            raise


class EtcdCluster(Cluster):
    name = "etcd"

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.peer_ports = [free_port() for _ in range(3)]
        self.client_ports = [free_port() for _ in range(3)]
        self.session: aiohttp.ClientSession | None = None
        self.member_ids: dict[int, int] = {}

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

    async def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        return self.session

    async def leader(self) -> int | None:
        session = await self._session()
        for i in self.alive():
            try:
                async with session.post(
                    f"{self.url(i)}/v3/maintenance/status", json={}, timeout=aiohttp.ClientTimeout(total=1)
                ) as resp:
                    st = await resp.json(content_type=None)
            except Exception:
                continue
            member, leader = int(st["header"]["member_id"]), int(st.get("leader", 0))
            self.member_ids[i] = member
            if leader and leader == member:
                return i
        return None

    async def writer(self) -> Writer:
        leader = await self.leader()
        assert leader is not None
        return EtcdWriter(await self._session(), [self.url(leader)], timeout=10)

    async def failover_writer(self) -> Writer:
        return EtcdWriter(await self._session(), [self.url(i) for i in self.alive()], timeout=0.5)

    async def stop(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None
        await super().stop()


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
                raise RuntimeError(f"pysyncobj put failed: {line!r}")
        except BaseException:
            await self._drop()
            raise

    async def close(self) -> None:
        if self.conn is not None:
            self.conn[1].close()
            self.conn = None


class PySyncObjCluster(Cluster):
    name = "pysyncobj"

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
            except Exception:
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

    async def work(w: Writer, wid: int) -> None:
        nonlocal errors
        n = 0
        while True:
            t0 = time.perf_counter()
            if t0 >= t_end:
                return
            try:
                await w.put(f"k{(wid * 7919 + n) % KEYSPACE:04d}", value)
            except Exception:
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
    for w in writers:
        await w.close()
    await cluster.end_cell()
    latencies.sort()

    def pct(p: float) -> float:
        if not latencies:
            return float("nan")
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    return Cell(cluster.name, clients, len(latencies), errors, duration, len(latencies) / duration, pct(0.5), pct(0.99))


async def measure_failover(cluster: Cluster, repeats: int) -> list[float]:
    times = []
    value = b"f" * VALUE_SIZE
    for r in range(repeats):
        await wait_until(cluster.healthy, 60, f"{cluster.name} healthy before failover {r}")
        leader = await cluster.leader()
        assert leader is not None
        # warm writer connections to every replica except the leader first
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
            except Exception:
                n += 1
                await asyncio.sleep(0.005)
        await w.close()
        if done is None:
            raise RuntimeError(f"{cluster.name}: no write succeeded within 60 s of killing the leader")
        times.append(done - t_kill)
        await cluster.restart(leader)
        await wait_until(cluster.healthy, 60, f"{cluster.name} healthy after restart")
    return times


def _print_cell(cell: Cell, rnd: int) -> None:
    print(
        f"  r{rnd} {cell.system:10s} {cell.clients:4d} clients: {cell.ops_per_s:9.1f} ops/s  p50 {cell.p50_ms:7.2f} ms  "
        f"p99 {cell.p99_ms:7.2f} ms  errors {cell.errors}",
        flush=True,
    )


async def bench_all(names: list[str], systems: dict[str, type[Cluster]], args: argparse.Namespace, root: Path
                    ) -> dict[str, SystemResult]:
    """All clusters are up together (idle ones only heartbeat); every cell is run for every
    system back to back, in alternating order over ``--rounds`` rounds, and the best round
    of each (system, clients) is kept: load from other processes on this shared machine then
    hits all systems alike instead of whichever happened to run during a busy minute."""
    results = {n: SystemResult(n) for n in names}
    clusters: dict[str, Cluster] = {}
    try:
        for n in names:
            workdir = root / n
            workdir.mkdir()
            clusters[n] = systems[n](workdir)
            try:
                await clusters[n].start()
            except Exception as exc:
                results[n].error = f"start: {type(exc).__name__}: {exc}"
                print(f"  {n}: FAILED to start: {results[n].error} (logs in {workdir})", flush=True)
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
        if args.failovers:
            for n in live:
                if results[n].error:
                    continue
                try:
                    results[n].failover_s = await measure_failover(clusters[n], args.failovers)
                except Exception as exc:
                    results[n].error = f"failover: {type(exc).__name__}: {exc}"
                print(f"  {n:10s} failover: {', '.join(f'{t:.2f}s' for t in results[n].failover_s)}", flush=True)
    finally:
        for c in clusters.values():
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
    ours = {c.clients: c for c in results["ours"].cells} if "ours" in results else {}
    etcd = {c.clients: c for c in results["etcd"].cells} if "etcd" in results else {}
    pso = {c.clients: c for c in results["pysyncobj"].cells} if "pysyncobj" in results else {}
    print()
    print(f"{'system':10s} {'clients':>7s} {'ops/s':>9s} {'p50 ms':>8s} {'p99 ms':>8s}   {'ours/etcd':>9s} {'ours/pso':>9s}")
    for name, res in results.items():
        for c in res.cells:
            o = ours.get(c.clients)
            r_e = ratio(o.ops_per_s if o else None, etcd[c.clients].ops_per_s if c.clients in etcd else None)
            r_p = ratio(o.ops_per_s if o else None, pso[c.clients].ops_per_s if c.clients in pso else None)
            extra = f"   {r_e:>9s} {r_p:>9s}" if name == "ours" else ""
            print(f"{name:10s} {c.clients:7d} {c.ops_per_s:9.1f} {c.p50_ms:8.2f} {c.p99_ms:8.2f}{extra}")
    print()
    print("failover (SIGKILL leader -> first successful write), median:")
    for name, res in results.items():
        med = res.failover_median
        runs = ", ".join(f"{t:.2f}" for t in res.failover_s)
        print(f"  {name:10s} {'-' if med is None else f'{med:.2f} s'}  ({runs})" + (f"  ERROR {res.error}" if res.error else ""))
    fo = {n: r.failover_median for n, r in results.items()}
    if "ours" in fo:
        print(f"  ratio ours/etcd {ratio(fo.get('ours'), fo.get('etcd'))}, ours/pysyncobj {ratio(fo.get('ours'), fo.get('pysyncobj'))}")
    print("latency ratios (ours/other, lower is better) at 1 client: p50 "
          f"{ratio(ours[1].p50_ms if 1 in ours else None, etcd[1].p50_ms if 1 in etcd else None)} vs etcd, "
          f"{ratio(ours[1].p50_ms if 1 in ours else None, pso[1].p50_ms if 1 in pso else None)} vs pysyncobj")


async def amain(args: argparse.Namespace) -> int:
    systems: dict[str, type[Cluster]] = {"ours": OursCluster, "etcd": EtcdCluster, "pysyncobj": PySyncObjCluster}
    chosen = [s for s in args.systems if s in systems]
    if "etcd" in chosen:
        ensure_etcd()
    root = Path(tempfile.mkdtemp(prefix="raft-bench-"))
    print(
        f"raft_bench: {', '.join(chosen)}; clients {args.clients}; {args.duration}s per cell; value {VALUE_SIZE} B; "
        f"work dir {root}",
        flush=True,
    )
    results = await bench_all(chosen, systems, args, root)
    print_table(results)
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "value_size": VALUE_SIZE,
        "duration_per_cell_s": args.duration,
        "rounds": args.rounds,
        "note": "best of the rounds per (system, clients); systems interleaved per cell; 3 replicas on loopback",
        "host_cpus": os.cpu_count(),
        "systems": {
            n: {"cells": [asdict(c) for c in r.cells], "failover_s": r.failover_s, "failover_median_s": r.failover_median,
                "error": r.error}
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
    ap.add_argument("--systems", nargs="+", default=["ours", "etcd", "pysyncobj"])
    ap.add_argument("--clients", nargs="+", type=int, default=[1, 16, 64, 256])
    ap.add_argument("--duration", type=float, default=4.0, help="measured seconds per cell")
    ap.add_argument("--warmup", type=float, default=0.7)
    ap.add_argument("--rounds", type=int, default=2, help="rounds over all cells; the best round is kept")
    ap.add_argument("--failovers", type=int, default=3)
    sys.exit(asyncio.run(amain(ap.parse_args())))


if __name__ == "__main__":
    main()
