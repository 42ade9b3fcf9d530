"""Helpers for integration tests: a real SCM process + simulated datanodes in a background loop.

The SCM runs as its own process (``python -m scm_server.cli.main scm``), started through
``LocalCluster`` after ``scm --init`` in a tmp dir with short intervals. The simulator runs in a
thread with its own asyncio loop so tests stay synchronous and can share one SCM per module.
Every wait is a poll with a deadline (``wait_for``), never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from scm_server.client import SCMClientConfig, SyncSCMClient
from scm_server.datanode_sim import DatanodeSimulator
from scm_server.local.cluster import LocalCluster, tail, wait_for
from scm_server.proto import hdds_pb2

T = TypeVar("T")

__all__ = ["LocalCluster", "ScmUnderTest", "SimThread", "run_cli", "tail", "wait_for"]


class SimThread:
    """A ``DatanodeSimulator`` living in its own event loop thread."""

    def __init__(self, make: Callable[[], DatanodeSimulator]) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="datanode-sim", daemon=True)
        self.thread.start()

        async def build() -> DatanodeSimulator:
            sim = make()
            await sim.start()
            return sim

        self.sim: DatanodeSimulator = self.call(build())

    def call(self, coro: Awaitable[T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def run(self, fn: Callable[[], T], timeout: float = 30.0) -> T:
        """Run a plain function on the simulator's loop (its state is not thread-safe)."""

        async def wrapper() -> T:
            return fn()

        return self.call(wrapper(), timeout)

    def stop(self) -> None:
        try:
            self.call(self.sim.stop(), timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
            self.loop.close()


def run_cli(conf_dir: Path, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """The real ``ozone-scm`` CLI as a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "scm_server.cli.main", "--conf", str(conf_dir), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cli_json(conf_dir: Path, *args: str) -> Any:
    result = run_cli(conf_dir, *args)
    assert result.returncode == 0, f"ozone-scm {' '.join(args)} failed: {result.stderr}"
    return json.loads(result.stdout)


class ScmUnderTest:
    """One SCM process + N simulated datanodes + a sync admin client."""

    def __init__(
        self,
        base: Path,
        datanodes: int = 5,
        racks: int = 2,
        settings: dict[str, str] | None = None,
        container_size: int = 5 << 30,
    ) -> None:
        self.cluster = LocalCluster(
            base,
            1,
            settings={
                "hdds.scm.safemode.min.datanode": "3",
                **(settings or {}),
            },
        )
        self.cluster.write_configs()
        self.cluster.init()
        self.scm = self.cluster.start(0)
        self.cluster.wait_serving(0, timeout=60)
        self.conf_dir = self.scm.conf_dir
        self.container_size = container_size
        cluster = self.cluster
        self.sim_thread = SimThread(
            lambda: DatanodeSimulator(
                cluster.datanode_addresses,
                datanodes,
                heartbeat_interval=0.3,
                racks=racks,
                container_size=container_size,
                admin_addresses=cluster.client_addresses,
                container_report_interval=5,
            )
        )
        self.sim = self.sim_thread.sim
        self.client = SyncSCMClient(
            cluster.client_addresses, SCMClientConfig(max_retries=30, retry_interval=0.2, rpc_timeout=30)
        )

    def check_alive(self) -> None:
        proc = self.scm.proc
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"SCM exited with {proc.returncode}:\n{tail(self.scm.log_path, 60)}")

    def wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        return wait_for(predicate, timeout, what, self.check_alive, interval=0.2)

    def wait_ready(self, timeout: float = 60.0) -> None:
        def ready() -> bool:
            if self.client.in_safe_mode().in_safe_mode:
                return False
            return any(
                p.state == hdds_pb2.PIPELINE_OPEN and p.factor == hdds_pb2.THREE
                for p in self.client.list_pipelines()
            )

        self.wait(ready, timeout, "SCM out of safemode with an OPEN RATIS/THREE pipeline")

    def report(self) -> dict[str, Any]:
        """The container report as the real CLI prints it (``admin container report --json``)."""
        data: dict[str, Any] = cli_json(self.conf_dir, "admin", "container", "report", "--json")
        return data

    def stats(self) -> dict[str, int]:
        """Report counters through the client (cheap enough to poll)."""
        return {c.key: int(c.count) for c in self.client.replication_manager_report().stat}

    def op_state(self, hostname: str) -> str:
        for n in self.client.query_nodes():
            if n.nodeID.hostName == hostname and n.nodeOperationalStates:
                return hdds_pb2.NodeOperationalState.Name(n.nodeOperationalStates[0])
        return "UNKNOWN"

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            try:
                self.sim_thread.stop()
            finally:
                self.cluster.stop_all()
