"""A Jepsen-style chaos run against a real demo-KV Raft cluster, checked for linearizability.

Where it sits: ``tests/raft/chaos`` calls :func:`run_chaos`. It starts a
:class:`~scm_server.verify.kvcluster.KvCluster` (real processes, fault injection on),
runs concurrent asyncio clients doing put / get / cas on a few keys with unique values,
recording every operation (invoke, then ok / fail / info) in a
:class:`~scm_server.verify.history.HistoryRecorder`, while a seeded nemesis applies one
fault at a time: leader SIGKILL + restart, SIGSTOP/SIGCONT pause, symmetric partition of
the leader, one-way cuts, random drop + delay, and a bridge. Then it heals everything,
checks liveness (a write must succeed within a bound), and checks the history with
:class:`~scm_server.verify.models.KvModel`.

Outcome classification (what makes the history sound): an operation is ``ok`` only with a
definite reply, ``fail`` only when the client knows the request was never proposed (see
:class:`DefiniteFailure`), and ``info`` (may or may not have happened) in every other
case: timeouts, connection errors after sending, unexpected errors. A worker whose
operation ended ``info`` continues as a new logical client (Jepsen's process renumbering).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from scm_server.verify.history import HistoryRecorder
from scm_server.verify.kvcluster import KvCluster
from scm_server.verify.linearizability import CheckResult, Verdict, check_operations
from scm_server.verify.models import KvModel, kv_cas, kv_get, kv_put
from scm_server.verify.render import write_report


class DefiniteFailure(Exception):
    """The request certainly did not take effect (e.g. rejected before being proposed)."""


class KvOps(Protocol):
    """What a chaos worker needs from a KV client. Any exception other than
    :class:`DefiniteFailure` means the outcome is unknown."""

    async def put(self, key: str, value: str) -> None: ...
    async def get(self, key: str) -> str | None: ...
    async def cas(self, key: str, expected: str | None, value: str) -> bool: ...
    async def close(self) -> None: ...


ClientFactory = Callable[[KvCluster, float, int], KvOps]
"""Makes the client of worker ``w`` (third argument) with a per-operation ``timeout``."""


class RuntimeKvOps:
    """Adapter for the runtime's own client, ``scm_server.raft.kv_client.KvClient``.

    Its contract: ``KvError`` = definitely not applied (recorded ``fail``, so the checker
    verifies that claim), ``KvUnavailableError`` = unknown (``info``).
    """

    def __init__(self, cluster: KvCluster, timeout: float) -> None:
        from scm_server.raft.kv_client import KvClient

        self.client = KvClient(
            list(cluster.addresses), rpc_timeout=min(timeout, 2.0), max_attempts=10_000, retry_interval=0.05
        )

    async def put(self, key: str, value: str) -> None:
        from scm_server.raft.kv_client import KvError

        try:
            await self.client.put(key.encode(), value.encode())
        except KvError as exc:
            raise DefiniteFailure(str(exc)) from exc

    async def get(self, key: str) -> str | None:
        from scm_server.raft.kv_client import KvError

        try:
            v = await self.client.get(key.encode())
        except KvError as exc:
            raise DefiniteFailure(str(exc)) from exc
        return None if v is None else v.decode()

    async def cas(self, key: str, expected: str | None, value: str) -> bool:
        from scm_server.raft.kv_client import KvError

        try:
            return await self.client.cas(key.encode(), None if expected is None else expected.encode(), value.encode())
        except KvError as exc:
            raise DefiniteFailure(str(exc)) from exc

    async def close(self) -> None:
        await self.client.close()


def default_client(cluster: KvCluster, timeout: float, worker: int) -> KvOps:
    """Even workers use the runtime's ``KvClient`` (streaming), odd ones the simple unary
    exactly-once test client (``KvTestClient``): both paths run concurrently in every run."""
    if worker % 2 == 0:
        return RuntimeKvOps(cluster, timeout)
    return cluster.client(timeout)

NEMESES = (
    "kill-leader",
    "kill-random",
    "pause-leader",
    "pause-random",
    "partition-leader",
    "oneway-leader-out",
    "oneway-leader-in",
    "flaky",
    "bridge",
    "majorities-ring",
    "transfer-leader",
    "member-replace",
)


@dataclass
class ChaosConfig:
    seed: int
    duration: float = 12.0  # seconds of client traffic
    clients: int = 5
    keys: int = 3
    op_timeout: float = 2.0
    fault_min: float = 1.0  # how long one fault lasts
    fault_max: float = 2.5
    quiet_min: float = 0.3  # healthy gap between faults
    quiet_max: float = 1.2
    nemeses: tuple[str, ...] = NEMESES
    schedule: tuple[str, ...] = ()  # if set: apply these in order (cycling) instead of random picks
    liveness_timeout: float = 20.0
    check_timeout: float = 120.0
    size: int = 3
    server_args: tuple[str, ...] = ()  # extra kv.py flags, e.g. a small --snapshot-threshold


@dataclass
class ChaosReport:
    seed: int
    workdir: Path
    counts: dict[str, int] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)
    check: CheckResult | None = None
    liveness_s: float | None = None
    crashed: dict[str, int | None] = field(default_factory=dict)
    error: str = ""
    server_args: tuple[str, ...] = ()
    size: int = 3
    final_status: dict[str, str] = field(default_factory=dict)  # per node: term/commit/snapshot

    @property
    def ok(self) -> bool:
        return (
            not self.error
            and not self.crashed
            and self.liveness_s is not None
            and self.check is not None
            and self.check.verdict is Verdict.OK
        )

    def summary(self) -> str:
        verdict = self.check.summary() if self.check else "not checked"
        live = f"{self.liveness_s:.2f}s" if self.liveness_s is not None else "FAILED"
        return (
            f"chaos seed={self.seed} size={self.size}{' ' + ' '.join(self.server_args) if self.server_args else ''}: "
            f"ops ok={self.counts.get('ok', 0)} fail={self.counts.get('fail', 0)} "
            f"info={self.counts.get('info', 0)}; faults={len(self.faults)} [{', '.join(self.faults)}]; "
            f"liveness after heal {live}; crashed={self.crashed or 'none'}; "
            f"end: {', '.join(f'{k} {v}' for k, v in self.final_status.items())}; history {verdict}"
            + (f"; ERROR {self.error}" if self.error else "")
        )


class _Nemesis:
    def __init__(self, cluster: KvCluster, rng: random.Random, cfg: ChaosConfig) -> None:
        self.cluster = cluster
        self.rng = rng
        self.cfg = cfg
        self.applied: list[str] = []
        self.killed: set[int] = set()

    async def _target(self, leader_only: bool) -> int:
        li = await self.cluster.leader_index() if leader_only else None
        if li is None:
            li = self.rng.choice(self.cluster.reachable() or list(range(self.cluster.size)))
        return li

    async def heal(self) -> None:
        c = self.cluster
        for i in list(c.paused):
            c.resume(i)
        for i in range(c.size):
            if c.pid(i) is None:
                c.spawn(i)
        self.killed.clear()
        await c.heal_network()
        # a member-replace cut short leaves a member outside the group: add it back
        with contextlib.suppress(Exception):
            await c.wait_leader(20.0)
            voters = await c.voters()
            for i in range(c.size):
                if voters and c.ids[i] not in voters:
                    self.applied.append(f"(heal: re-adding {c.ids[i]})")
                    await c.add_member(i, timeout=30.0)

    async def one(self, name: str) -> None:
        c, rng = self.cluster, self.rng
        hold = rng.uniform(self.cfg.fault_min, self.cfg.fault_max)
        seed = rng.randrange(1 << 30)
        if name in ("kill-leader", "kill-random"):
            i = await self._target(name == "kill-leader")
            c.kill(i)
            self.killed.add(i)
            self.applied.append(f"{name}({c.ids[i]})")
            await asyncio.sleep(hold)
            c.spawn(i)
            self.killed.discard(i)
        elif name in ("pause-leader", "pause-random"):
            i = await self._target(name == "pause-leader")
            c.pause(i)
            self.applied.append(f"{name}({c.ids[i]})")
            await asyncio.sleep(hold)
            c.resume(i)
        elif name == "partition-leader":
            i = await self._target(True)
            others = [j for j in range(c.size) if j != i]
            await c.partition([[i], others], seed)
            self.applied.append(f"{name}({c.ids[i]})")
            await asyncio.sleep(hold)
            await c.heal_network()
        elif name in ("oneway-leader-out", "oneway-leader-in"):
            i = await self._target(True)
            others = [j for j in range(c.size) if j != i]
            pairs = [(i, j) for j in others] if name.endswith("out") else [(j, i) for j in others]
            await c.cut(pairs, seed)
            self.applied.append(f"{name}({c.ids[i]})")
            await asyncio.sleep(hold)
            await c.heal_network()
        elif name == "flaky":
            drop, delay, jitter = rng.uniform(0.1, 0.4), rng.uniform(0.0, 0.03), rng.uniform(0.0, 0.06)
            await c.flaky(drop, delay, jitter, seed)
            self.applied.append(f"flaky(drop={drop:.2f},delay={delay * 1000:.0f}ms)")
            await asyncio.sleep(hold)
            await c.heal_network()
        elif name == "bridge":
            # Jepsen's bridge: two halves that cannot talk, plus one node that sees both
            # (on 3 nodes: the leader and one follower cannot talk, the third sees both).
            a = await self._target(True)
            rest = [j for j in range(c.size) if j != a]
            rng.shuffle(rest)
            bridge_node = rest.pop()
            left = [a, *rest[: (c.size - 1) // 2 - 1]]
            right = [j for j in rest if j not in left]
            pairs = [(x, y) for x in left for y in right] + [(y, x) for x in left for y in right]
            await c.cut(pairs, seed)
            self.applied.append(
                f"bridge({'+'.join(c.ids[x] for x in left)}|{c.ids[bridge_node]}|{'+'.join(c.ids[y] for y in right)})"
            )
            await asyncio.sleep(hold)
            await c.heal_network()
        elif name == "transfer-leader":
            await c.transfer_leadership(None, timeout=8.0)
            self.applied.append(name)
        elif name == "member-replace":
            # etcd's MemberReplace: remove a member (the leader half of the time: it must
            # step down safely), wipe its data, restart it empty and add it back (learner
            # catch-up through a snapshot or the log, then promotion).
            i = await self._target(rng.random() < 0.5)
            self.applied.append(f"member-replace({c.ids[i]})")
            await c.remove_member(i, timeout=15.0)
            c.kill(i)
            self.killed.add(i)
            c.wipe(i)
            c.spawn(i)
            self.killed.discard(i)
            await c.add_member(i, timeout=30.0)
        elif name == "majorities-ring":
            # Every node sees a majority, no two see the same one: on 5 nodes node i talks to
            # i-1 and i+1 only. On 3 nodes every majority overlaps: degrade to a bridge.
            if c.size < 5:
                await self.one("bridge")
                return
            order = list(range(c.size))
            rng.shuffle(order)
            pos = {node: k for k, node in enumerate(order)}
            half = c.size // 2
            pairs = []
            for x in range(c.size):
                for y in range(c.size):
                    dist = min((pos[x] - pos[y]) % c.size, (pos[y] - pos[x]) % c.size)
                    if x != y and dist > (half - 1 if c.size % 2 else half):
                        pairs.append((x, y))
            await c.cut(pairs, seed)
            self.applied.append(f"majorities-ring({'-'.join(c.ids[x] for x in order)})")
            await asyncio.sleep(hold)
            await c.heal_network()
        else:
            raise ValueError(f"unknown nemesis {name!r}; known: {', '.join(NEMESES)}")

    async def run(self, stop_at: float) -> None:
        n = 0
        while time.monotonic() < stop_at:
            await asyncio.sleep(self.rng.uniform(self.cfg.quiet_min, self.cfg.quiet_max))
            if time.monotonic() >= stop_at:
                break
            try:
                if self.cfg.schedule:
                    name = self.cfg.schedule[n % len(self.cfg.schedule)]
                else:
                    name = self.rng.choice(self.cfg.nemeses)
                n += 1
                await self.one(name)
            except Exception as exc:  # an admin RPC to a node that just died, etc.
                self.applied.append(f"(nemesis error: {type(exc).__name__}: {exc})")
                with contextlib.suppress(Exception):
                    await self.heal()


async def _worker(
    wid: int,
    make_client: ClientFactory,
    cluster: KvCluster,
    rec: HistoryRecorder,
    rng: random.Random,
    cfg: ChaosConfig,
    keys: list[str],
    stop_at: float,
) -> None:
    generation = 0
    seq = 0
    client = make_client(cluster, cfg.op_timeout, wid)
    known: dict[str, str | None] = {}
    try:
        while time.monotonic() < stop_at:
            key = rng.choice(keys)
            r = rng.random()
            seq += 1
            value = f"w{wid}.{seq}"
            proc = f"{wid}.{generation}"
            try:
                if r < 0.4:
                    h = rec.invoke(proc, kv_get(key))
                    got = await asyncio.wait_for(client.get(key), cfg.op_timeout * 1.5)
                    h.ok(got)
                    known[key] = got
                elif r < 0.7:
                    h = rec.invoke(proc, kv_put(key, value))
                    await asyncio.wait_for(client.put(key, value), cfg.op_timeout * 1.5)
                    h.ok(None)
                    known[key] = value
                else:
                    expected = known.get(key)
                    h = rec.invoke(proc, kv_cas(key, expected, value))
                    swapped = await asyncio.wait_for(client.cas(key, expected, value), cfg.op_timeout * 1.5)
                    h.ok(bool(swapped))
                    if swapped:
                        known[key] = value
            except DefiniteFailure as exc:
                h.fail(str(exc))
                await asyncio.sleep(0.02)
            except (Exception, asyncio.CancelledError) as exc:
                task = asyncio.current_task()
                if isinstance(exc, asyncio.CancelledError) and task is not None and task.cancelling():
                    raise  # this worker itself is being cancelled
                # (a CancelledError not aimed at us comes from a gRPC call cancelled underneath)
                h.info(f"{type(exc).__name__}: {exc}")
                generation += 1  # Jepsen: a process with an unknown outcome is replaced
                known.pop(key, None)
                with contextlib.suppress(Exception):
                    await client.close()
                client = make_client(cluster, cfg.op_timeout, wid)
                await asyncio.sleep(0.02)
    finally:
        with contextlib.suppress(Exception):
            await client.close()


async def _liveness(
    cluster: KvCluster, make_client: ClientFactory, rec: HistoryRecorder, cfg: ChaosConfig
) -> float | None:
    started = time.monotonic()
    deadline = started + cfg.liveness_timeout
    n = 0
    while time.monotonic() < deadline:
        client = make_client(cluster, 1.0, n)
        n += 1
        h = rec.invoke("liveness", kv_put("k0", f"live.{n}"))
        try:
            await asyncio.wait_for(client.put("k0", f"live.{n}"), 2.0)
            h.ok(None)
            return time.monotonic() - started
        except DefiniteFailure as exc:
            h.fail(str(exc))
        except Exception as exc:
            h.info(f"{type(exc).__name__}: {exc}")
        finally:
            with contextlib.suppress(Exception):
                await client.close()
        await asyncio.sleep(0.1)
    return None


async def run_chaos(cfg: ChaosConfig, workdir: Path, make_client: ClientFactory | None = None) -> ChaosReport:
    """One randomized chaos run; ``workdir`` keeps data dirs, logs and (on failure) the report."""
    if make_client is None:
        make_client = default_client
    rng = random.Random(cfg.seed)
    report = ChaosReport(cfg.seed, workdir, server_args=cfg.server_args, size=cfg.size)
    cluster = KvCluster(workdir, size=cfg.size, fault_injection=True, extra_args=cfg.server_args)
    rec = HistoryRecorder()
    nemesis = _Nemesis(cluster, random.Random(rng.randrange(1 << 30)), cfg)
    keys = [f"k{i}" for i in range(cfg.keys)]
    try:
        await cluster.start()
        stop_at = time.monotonic() + cfg.duration
        workers = [
            _worker(w, make_client, cluster, rec, random.Random(rng.randrange(1 << 30)), cfg, keys, stop_at)
            for w in range(cfg.clients)
        ]
        await asyncio.gather(nemesis.run(stop_at), *workers)
        # Processes that died without the nemesis killing them crashed on their own.
        report.crashed = {
            cluster.ids[i]: code
            for i, code in enumerate(p.poll() if p is not None else None for p in cluster.procs)
            if code is not None and i not in nemesis.killed
        }
        await nemesis.heal()
        report.liveness_s = await _liveness(cluster, make_client, rec, cfg)
        if any(n.startswith("member-replace") for n in nemesis.applied):
            voters = await cluster.voters()
            missing = [nid for nid in cluster.ids if nid not in voters]
            if missing:
                report.error = f"members not restored after heal: {missing} (voters {voters})"
        for i in cluster.reachable():
            with contextlib.suppress(Exception):
                st = await cluster.status(i)
                report.final_status[cluster.ids[i]] = (
                    f"{st.role.lower()} t{st.term} commit={st.commit_index} snap={st.snapshot_index}"
                )
        for i, p in enumerate(cluster.procs):  # nothing may die on its own after the heal either
            if p is not None and p.poll() is not None:
                report.crashed.setdefault(cluster.ids[i], p.poll())
    except Exception as exc:
        report.error = f"{type(exc).__name__}: {exc}"
    finally:
        report.faults = nemesis.applied
        await cluster.stop()
    report.counts = rec.counts()
    rec.save(workdir / "history.jsonl")
    ops = rec.operations()
    report.check = await asyncio.get_running_loop().run_in_executor(
        None, check_operations, KvModel(), ops, cfg.check_timeout
    )
    if not report.ok:
        write_report(report.check, KvModel(), workdir, "history")
        (workdir / "report.json").write_text(
            json.dumps({"summary": report.summary(), "faults": report.faults, "seed": cfg.seed}, indent=2)
        )
    return report


def cleanup(report: ChaosReport) -> None:
    """Remove the work dir of a passing run (failing ones are kept for inspection)."""
    if report.ok:
        shutil.rmtree(report.workdir, ignore_errors=True)


def describe_failure(report: ChaosReport) -> str:
    lines = [report.summary(), f"kept for inspection: {report.workdir} (data dirs, node logs, history.*)"]
    part = report.check.failing_partition() if report.check else None
    if part is not None:
        lines.append(f"see {report.workdir / 'history.txt'} and {report.workdir / 'history.html'}")
    lines.append(f"re-check: ozone-scm debug verify --model kv {report.workdir / 'history.jsonl'}")
    return "\n".join(lines)


def counts_line(reports: list[ChaosReport]) -> str:
    ops = sum(r.check.ops_checked for r in reports if r.check)
    bad = sum(1 for r in reports if r.check and r.check.verdict is Verdict.ILLEGAL)
    unknown = sum(1 for r in reports if r.check and r.check.verdict is Verdict.UNKNOWN)
    return (
        f"chaos summary: {len(reports)} runs, {len(reports)} histories, {ops} ops checked, "
        f"{bad} linearizability violations, {unknown} undecided, "
        f"{sum(1 for r in reports if r.ok)} runs fully ok"
    )
