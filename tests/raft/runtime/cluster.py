"""Test harness: real ``python -m scm_server.raft.kv`` processes on loopback.

Ports are picked free at runtime (bind port 0), every wait is a poll with a deadline, and every
process started is killed at teardown.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from scm_server.client.retryable import is_answer_or_transient
from scm_server.ports import free_port
from scm_server.raft.errors import RaftError
from scm_server.raft.kv_client import KvClient, RaftAdminClient, RaftNodeStatus

ROOT = Path(__file__).resolve().parents[3]
T = TypeVar("T")




async def wait_for(pred: Callable[[], Awaitable[T | None]], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``pred`` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = await pred()
            if value:
                return value
        except Exception as exc:  # a member down or refusing (any gRPC status, a KV error); a harness error raises
            if not (is_answer_or_transient(exc) or isinstance(exc, RaftError)):
                raise
            last_exc = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_exc!r})")
        await asyncio.sleep(interval)


class KvProcess:
    def __init__(self, cluster: KvCluster, node_id: str, address: str, data_dir: Path, init: bool) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.address = address
        self.data_dir = data_dir
        self.init = init
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{node_id}.log"

    def start(self, extra_env: dict[str, str] | None = None) -> None:
        c = self.cluster
        args = [
            sys.executable, "-m", "scm_server.raft.kv",
            "--id", self.node_id, "--listen", self.address,
            "--peers", ",".join(f"{n}={a}" for n, a in c.initial_peers.items()),
            "--data-dir", str(self.data_dir),
            "--tick", str(c.tick), "--election-tick", str(c.election_tick),
            "--snapshot-threshold", str(c.snapshot_threshold), "--purge-gap", str(c.purge_gap),
            "--install-mode", c.install_mode, "--max-pending", str(c.max_pending),
            "--fault-injection", "--log-level", "WARNING",
        ]  # fmt: skip
        if self.init:
            args.append("--init")
        if not c.fsync:
            args.append("--no-fsync")
        env = dict(os.environ, PYTHONPATH=str(ROOT), **(extra_env or {}))
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        log.close()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(10)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def terminate(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def admin(self) -> RaftAdminClient:
        return RaftAdminClient(self.address, timeout=2.0)

    async def status_once(self) -> RaftNodeStatus:
        async with self.admin() as a:
            return await a.status()

    async def status(self, timeout: float = 15.0) -> RaftNodeStatus:
        """Status, retried until the member answers (it may still be starting on a loaded machine)."""
        return await wait_for(self.status_once, timeout, f"status of {self.node_id}")


class KvCluster:
    """N kv processes; ``initial`` of them form the group at start (``--init``)."""

    def __init__(
        self,
        base: Path,
        n: int = 3,
        *,
        tick: float = 0.05,
        election_tick: int = 10,
        snapshot_threshold: int = 1000,
        purge_gap: int = 1000,
        install_mode: str = "notify",
        max_pending: int = 4096,
        fsync: bool = True,
    ) -> None:
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        self.tick = tick
        self.election_tick = election_tick
        self.snapshot_threshold = snapshot_threshold
        self.purge_gap = purge_gap
        self.install_mode = install_mode
        self.max_pending = max_pending
        self.fsync = fsync
        ids = [f"n{i + 1}" for i in range(n)]
        self.initial_peers = {nid: f"127.0.0.1:{free_port()}" for nid in ids}
        self.nodes: dict[str, KvProcess] = {
            nid: KvProcess(self, nid, addr, base / nid, init=True) for nid, addr in self.initial_peers.items()
        }

    def add_process(self, node_id: str) -> KvProcess:
        p = KvProcess(self, node_id, f"127.0.0.1:{free_port()}", self.base / node_id, init=False)
        self.nodes[node_id] = p
        return p

    def start(self) -> None:
        for p in self.nodes.values():
            p.start()

    def stop(self) -> None:
        for p in self.nodes.values():  # signal everyone first, then wait: members stop in parallel
            if p.alive:
                assert p.proc is not None
                p.proc.send_signal(signal.SIGCONT)
                p.proc.terminate()
        for p in self.nodes.values():
            p.terminate()

    def addresses(self) -> list[str]:
        return [p.address for p in self.nodes.values()]

    def client(self, **kw: object) -> KvClient:
        return KvClient(self.addresses(), rpc_timeout=2.0, **kw)  # type: ignore[arg-type]

    async def leader(self, timeout: float = 15.0, exclude: set[str] | None = None) -> KvProcess:
        """Wait until exactly one live member reports itself leader at the highest term."""

        async def find() -> KvProcess | None:
            best: tuple[int, KvProcess] | None = None
            for p in self.nodes.values():
                if not p.alive or (exclude and p.node_id in exclude):
                    continue
                try:
                    st = await p.status_once()
                except Exception as exc:
                    if not (is_answer_or_transient(exc) or isinstance(exc, RaftError)):
                        raise
                    continue
                if st.role == "LEADER" and (best is None or st.term > best[0]):
                    best = (st.term, p)
            return best[1] if best else None

        return await wait_for(find, timeout, "a leader")
