"""A cluster of real demo-KV Raft server processes on loopback, for chaos tests and benchmarks.

Where it sits: ``tests/raft/chaos`` and ``bench/raft_bench.py`` start 3 (or more)
``python -m scm_server.raft.kv`` processes with :class:`KvCluster`, find the leader
through the admin ``Status`` RPC, and inject faults:

* process faults: SIGKILL + restart (same data dir), SIGSTOP / SIGCONT (a pause);
* network faults through each server's fault layer (``--fault-injection``; admin RPC
  ``SetFaults``): symmetric partitions, one-way cuts, bridges, random drop / delay.

Everything listens on 127.0.0.1 with ports picked free at start. All processes are
children of the caller and are killed by :meth:`KvCluster.stop` (also from ``__del__`` as
a last resort); logs go to ``<workdir>/<id>.log``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from scm_server.client.retryable import is_transient
from scm_server.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


async def wait_for(
    cond: Callable[[], Awaitable[bool]], timeout: float, what: str, interval: float = 0.05
) -> None:
    """Poll ``cond`` until it is true; raise TimeoutError naming ``what`` after ``timeout`` s. Only the errors of a
    node that is down or not ready (``is_transient``) are waited out; any other is raised at once."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            if await cond():
                return
        except Exception as exc:  # a node may be down while we poll
            if not is_transient(exc):
                raise
            last = exc
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {what} (last error: {last!r})")
        await asyncio.sleep(interval)


@dataclass(frozen=True, slots=True)
class Fault:
    """A network fault rule installed on one node about one peer (see raft.proto FaultRule)."""

    peer: str = "*"
    drop: float = 0.0
    delay: float = 0.0
    jitter: float = 0.0
    cut_outbound: bool = False
    cut_inbound: bool = False


class KvCluster:
    """Process manager for a demo-KV Raft cluster (node ids n1..nN)."""

    def __init__(
        self,
        workdir: Path,
        size: int = 3,
        *,
        fault_injection: bool = True,
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.size = size
        self.ids = [f"n{i + 1}" for i in range(size)]
        self.ports = [free_port() for _ in range(size)]
        self.addresses = [f"127.0.0.1:{p}" for p in self.ports]
        self.fault_injection = fault_injection
        self.extra_args = list(extra_args)
        self.env = dict(os.environ if env is None else env)
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * size
        self.paused: set[int] = set()
        self.logs = [workdir / f"{nid}.log" for nid in self.ids]
        self.data_dirs = [workdir / nid for nid in self.ids]
        self._channels: dict[int, grpc.aio.Channel] = {}
        self.started_once = [False] * size

    # ------------------------------------------------------------------ processes

    @property
    def peers_arg(self) -> str:
        return ",".join(f"{nid}={addr}" for nid, addr in zip(self.ids, self.addresses, strict=True))

    def command(self, i: int, first_start: bool) -> list[str]:
        cmd = [
            sys.executable, "-m", "scm_server.raft.kv",
            "--id", self.ids[i],
            "--listen", self.addresses[i],
            "--peers", self.peers_arg,
            "--data-dir", str(self.data_dirs[i]),
        ]  # fmt: skip
        if first_start:
            cmd.append("--init")
        if self.fault_injection:
            cmd.append("--fault-injection")
        return cmd + self.extra_args

    def spawn(self, i: int) -> None:
        if self.procs[i] is not None and self.procs[i].poll() is None:  # type: ignore[union-attr]
            raise RuntimeError(f"{self.ids[i]} is already running (pid {self.procs[i].pid})")  # type: ignore[union-attr]
        first = not self.started_once[i]
        self.data_dirs[i].mkdir(parents=True, exist_ok=True)
        with self.logs[i].open("ab") as log:
            log.write(f"\n==== start {'(init)' if first else '(restart)'} at {time.time():.3f}\n".encode())
            log.flush()
            self.procs[i] = subprocess.Popen(
                self.command(i, first), stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=self.env
            )
        self.started_once[i] = True
        self.paused.discard(i)

    async def start(self, timeout: float = 60.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for i in range(self.size):
            self.spawn(i)
        await self.wait_leader(timeout)

    def pid(self, i: int) -> int | None:
        p = self.procs[i]
        return p.pid if p is not None and p.poll() is None else None

    def alive(self) -> list[int]:
        return [i for i in range(self.size) if self.pid(i) is not None]

    def reachable(self) -> list[int]:
        """Running and not paused."""
        return [i for i in self.alive() if i not in self.paused]

    def kill(self, i: int) -> None:
        """SIGKILL (a crash: no flush, no cleanup)."""
        p = self.procs[i]
        if p is not None and p.poll() is None:
            if i in self.paused:
                p.send_signal(signal.SIGCONT)
            p.send_signal(signal.SIGKILL)
            p.wait()
        self.paused.discard(i)
        # The channel is kept: gRPC reconnects by itself (fast backoff, see channel()), and
        # closing it would cancel the calls clients have in flight on it.

    def restart(self, i: int) -> None:
        self.kill(i)
        self.spawn(i)

    def pause(self, i: int) -> None:
        p = self.procs[i]
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGSTOP)
            self.paused.add(i)

    def resume(self, i: int) -> None:
        p = self.procs[i]
        if p is not None and p.poll() is None and i in self.paused:
            p.send_signal(signal.SIGCONT)
        self.paused.discard(i)

    def exit_codes(self) -> dict[str, int | None]:
        return {self.ids[i]: (p.poll() if p is not None else None) for i, p in enumerate(self.procs)}

    async def stop(self) -> None:
        for i in range(self.size):
            self.resume(i)
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self.procs:
            if p is None:
                continue
            while p.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            if p.poll() is None:
                p.kill()
                p.wait()
        for i in list(self._channels):
            self._drop_channel(i)
        await asyncio.sleep(0)

    def __del__(self) -> None:
        for p in getattr(self, "procs", []):
            if p is not None and p.poll() is None:
                with contextlib.suppress(Exception):
                    p.send_signal(signal.SIGCONT)
                    p.kill()

    # ------------------------------------------------------------------ admin RPCs

    def _drop_channel(self, i: int) -> None:
        ch = self._channels.pop(i, None)
        if ch is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().create_task(ch.close())

    def channel(self, i: int) -> grpc.aio.Channel:
        ch = self._channels.get(i)
        if ch is None:
            ch = grpc.aio.insecure_channel(
                self.addresses[i],
                options=[
                    ("grpc.initial_reconnect_backoff_ms", 50),
                    ("grpc.min_reconnect_backoff_ms", 50),
                    ("grpc.max_reconnect_backoff_ms", 300),
                ],
            )
            self._channels[i] = ch
        return ch

    def _admin(self, i: int) -> Any:
        from scm_server.proto import raft_pb2_grpc

        return raft_pb2_grpc.RaftAdminStub(self.channel(i))

    async def status(self, i: int, timeout: float = 1.0) -> Any:
        from scm_server.proto import raft_pb2

        return await self._admin(i).Status(raft_pb2.StatusRequest(), timeout=timeout)

    async def leader_index(self) -> int | None:
        """The index of a reachable node that says it is the leader, with the highest term."""
        best: tuple[int, int] | None = None
        for i in self.reachable():
            try:
                st = await self.status(i, timeout=0.5)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                continue
            if st.role == "LEADER" and (best is None or st.term > best[0]):
                best = (st.term, i)
        return None if best is None else best[1]

    async def wait_leader(self, timeout: float = 30.0) -> int:
        found: list[int] = []

        async def has_leader() -> bool:
            li = await self.leader_index()
            if li is None:
                return False
            found.append(li)
            return True

        await wait_for(has_leader, timeout, f"a leader among {self.ids} (logs in {self.workdir})", interval=0.1)
        return found[-1]

    async def _on_leader(self, method: str, make_req: Callable[[], Any], timeout: float) -> int:
        """Call admin ``method`` on the current leader, following leader changes, until it
        answers ok; returns the index of the member that did. Raises after ``timeout``."""
        deadline = time.monotonic() + timeout
        last = "no leader found"
        while time.monotonic() < deadline:
            li = await self.leader_index()
            if li is None:
                await asyncio.sleep(0.1)
                continue
            try:
                reply = await getattr(self._admin(li), method)(
                    make_req(), timeout=max(1.0, min(deadline - time.monotonic(), 30.0) + 1.0)
                )
            except Exception as exc:  # any answer of the ring (or none) is retried; a harness error is not
                if not (isinstance(exc, grpc.RpcError) or is_transient(exc)):
                    raise
                code = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else ""
                last = f"{self.ids[li]}: {type(exc).__name__} {code}".strip()
                await asyncio.sleep(0.1)
                continue
            if reply.ok:
                return li
            last = f"{self.ids[li]}: {reply.error.code} {reply.error.message}".strip()
            await asyncio.sleep(0.1)
        raise TimeoutError(f"{method} did not succeed within {timeout:.0f}s (last: {last})")

    async def voters(self) -> list[str]:
        li = await self.leader_index()
        if li is None:
            return []
        return list((await self.status(li)).conf.voters)

    async def remove_member(self, i: int, timeout: float = 20.0) -> None:
        from scm_server.proto import raft_pb2

        await self._on_leader(
            "RemoveMember", lambda: raft_pb2.MemberRequest(node_id=self.ids[i], timeout=timeout), timeout
        )

    async def add_member(self, i: int, timeout: float = 40.0) -> None:
        """Learner catch-up then promotion, run by the leader (the member must be running)."""
        from scm_server.proto import raft_pb2

        await self._on_leader(
            "AddMember",
            lambda: raft_pb2.MemberRequest(node_id=self.ids[i], address=self.addresses[i], timeout=timeout),
            timeout,
        )

    async def transfer_leadership(self, target: int | None = None, timeout: float = 10.0) -> None:
        from scm_server.proto import raft_pb2

        tid = "" if target is None else self.ids[target]
        await self._on_leader(
            "TransferLeadership", lambda: raft_pb2.TransferLeadershipRequest(target_id=tid, timeout=timeout), timeout
        )

    def wipe(self, i: int) -> None:
        """Delete a stopped member's data dir: it restarts empty, without ``--init``, and waits
        until a leader adds it."""
        if self.pid(i) is not None:
            raise RuntimeError(f"{self.ids[i]} is running; kill it before wiping its data dir")
        shutil.rmtree(self.data_dirs[i], ignore_errors=True)

    async def set_faults(self, i: int, faults: Iterable[Fault], seed: int = 0) -> None:
        from scm_server.proto import raft_pb2

        req = raft_pb2.SetFaultsRequest(
            rules=[
                raft_pb2.FaultRule(
                    peer=f.peer, drop=f.drop, delay=f.delay, jitter=f.jitter,
                    cut_outbound=f.cut_outbound, cut_inbound=f.cut_inbound,
                )
                for f in faults
            ],
            seed=seed,
        )  # fmt: skip
        reply = await self._admin(i).SetFaults(req, timeout=2.0)
        if not reply.ok:
            raise RuntimeError(f"SetFaults on {self.ids[i]} failed: {reply.error.code} {reply.error.message}")

    async def clear_faults(self, i: int) -> None:
        from scm_server.proto import raft_pb2

        reply = await self._admin(i).ClearFaults(raft_pb2.StatusRequest(), timeout=2.0)
        if not reply.ok:
            raise RuntimeError(f"ClearFaults on {self.ids[i]} failed: {reply.error.code} {reply.error.message}")

    async def heal_network(self) -> None:
        """Clear network faults on every reachable node (paused ones are resumed first by callers)."""
        for i in self.reachable():
            with contextlib.suppress(Exception):
                await self.clear_faults(i)

    async def _set_faults_best_effort(self, i: int, faults: Iterable[Fault], seed: int) -> bool:
        try:
            await self.set_faults(i, faults, seed)
            return True
        except Exception:  # e.g. a node still starting; the peer's side of a cut covers both ways
            return False

    async def partition(self, groups: Sequence[Sequence[int]], seed: int = 0) -> None:
        """Symmetric partition: nodes in different groups cannot talk (both sides cut)."""
        side = {i: g for g, members in enumerate(groups) for i in members}
        for i in self.reachable():
            rules = [
                Fault(peer=self.ids[j], cut_outbound=True, cut_inbound=True)
                for j in range(self.size)
                if j != i and side.get(j, -1) != side.get(i, -2)
            ]
            await self._set_faults_best_effort(i, rules, seed)

    async def cut(self, pairs: Iterable[tuple[int, int]], seed: int = 0) -> None:
        """One-way cuts: for each (src, dst) nothing from src reaches dst (both ends told).

        Rules are merged per (node, peer): a node holds one rule per peer, so a cut in both
        directions becomes one rule with both flags."""
        flags: dict[tuple[int, int], tuple[bool, bool]] = {}  # (node, peer) -> (out, in)
        for src, dst in pairs:
            o, n = flags.get((src, dst), (False, False))
            flags[(src, dst)] = (True, n)
            o, n = flags.get((dst, src), (False, False))
            flags[(dst, src)] = (o, True)
        per_node: dict[int, list[Fault]] = {}
        for (node, peer), (o, n) in sorted(flags.items()):
            per_node.setdefault(node, []).append(Fault(peer=self.ids[peer], cut_outbound=o, cut_inbound=n))
        for i, rules in per_node.items():
            if i in self.reachable():
                await self._set_faults_best_effort(i, rules, seed)

    async def flaky(self, drop: float, delay: float, jitter: float, seed: int = 0) -> None:
        """Random loss and delay on every link."""
        for i in self.reachable():
            await self._set_faults_best_effort(i, [Fault(peer="*", drop=drop, delay=delay, jitter=jitter)], seed + i)

    def client(self, timeout: float = 5.0, client_id: bytes | None = None) -> KvTestClient:
        """A KV client over this cluster's shared channels (see :class:`KvTestClient`)."""
        return KvTestClient(self, timeout, client_id)


_client_seq = itertools.count(1)


class KvTestClient:
    """A KV client with leader failover and exactly-once retries, for tests and benchmarks.

    Every write carries one (client_id, call_id) for all its attempts, so retrying at another
    node after a timeout, a lost connection or a NotLeader reply (which a step-down also sends
    for proposals that may still commit) can never apply it twice: the servers' retry cache
    returns the first result. An operation therefore ends in one of two ways: a definite
    reply (returned), or ``TimeoutError`` after ``timeout`` seconds, meaning the outcome is
    unknown. Reads (ReadIndex on the server) are simply retried.
    """

    def __init__(self, cluster: KvCluster, timeout: float, client_id: bytes | None = None) -> None:
        self.cluster = cluster
        self.timeout = timeout
        self.client_id = client_id or f"c{os.getpid()}-{next(_client_seq)}".encode()
        self._call_ids = itertools.count(1)
        self._target = 0
        self.attempts = 0

    def _stub(self, i: int) -> Any:
        from scm_server.proto import raft_pb2_grpc

        return raft_pb2_grpc.KvServiceStub(self.cluster.channel(i))

    def _index_of(self, address: str) -> int | None:
        try:
            return self.cluster.addresses.index(address)
        except ValueError:
            return None

    async def _call(self, method: str, make_req: Callable[[float], Any]) -> Any:
        deadline = time.monotonic() + self.timeout
        tried_without_hint = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{method} got no definite reply within {self.timeout:.1f}s; outcome unknown")
            i = self._target
            self.attempts += 1
            try:
                reply = await getattr(self._stub(i), method)(
                    make_req(min(remaining, 2.0)), timeout=min(remaining, 2.5)
                )
            except Exception as exc:  # any answer of the ring (or none) is retried; a harness error is not
                if not (isinstance(exc, grpc.RpcError) or is_transient(exc)):
                    raise
                self._target = (i + 1) % self.cluster.size
                await asyncio.sleep(min(0.02, max(deadline - time.monotonic(), 0)))
                continue
            if reply.ok or reply.error.code == "CAS_MISMATCH":
                return reply
            if reply.HasField("not_leader"):
                hint = self._index_of(reply.not_leader.leader_address)
                if hint is not None and hint != i:
                    self._target = hint
                    tried_without_hint = 0
                    continue
            if reply.error.code.startswith("REJECTED") or reply.error.code == "INVALID":
                raise RuntimeError(f"{method} rejected by {self.cluster.ids[i]}: {reply.error.code} {reply.error.message}")
            # no leader known here, or a retryable error: try the next node, briefly backing off
            self._target = (i + 1) % self.cluster.size
            tried_without_hint += 1
            if tried_without_hint >= self.cluster.size:
                tried_without_hint = 0
                await asyncio.sleep(min(0.05, max(deadline - time.monotonic(), 0)))

    async def put(self, key: str, value: str | bytes) -> None:
        from scm_server.proto import raft_pb2

        call_id = next(self._call_ids)
        v = value.encode() if isinstance(value, str) else value
        await self._call(
            "Put",
            lambda t: raft_pb2.KvRequest(key=key.encode(), value=v, client_id=self.client_id, call_id=call_id, timeout=t),
        )

    async def get(self, key: str) -> str | None:
        from scm_server.proto import raft_pb2

        reply = await self._call("Get", lambda t: raft_pb2.KvRequest(key=key.encode(), timeout=t))
        return reply.value.decode() if reply.found else None

    async def cas(self, key: str, expected: str | None, value: str) -> bool:
        from scm_server.proto import raft_pb2

        call_id = next(self._call_ids)
        reply = await self._call(
            "Cas",
            lambda t: raft_pb2.KvRequest(
                key=key.encode(),
                value=value.encode(),
                expected=(expected or "").encode(),
                expect_absent=expected is None,
                client_id=self.client_id,
                call_id=call_id,
                timeout=t,
            ),
        )
        return bool(reply.ok)

    async def close(self) -> None:
        return None
