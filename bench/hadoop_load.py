"""The allocation load both failover benches drive over Hadoop RPC: clients allocating one block per call through
Ozone's block protocol until stopped, the moments each call started and was answered, the block IDs handed out and
the refusals by kind; and the gap from a fault to the first call answered after it."""

from __future__ import annotations

import asyncio
import time

from scm_server.client.hadoop_rpc import BlockLocationClient, ConnectionLost, RemoteError

BLOCK_SIZE = 4096
RETRY_INTERVAL = 0.05  # the client's pause before trying the next SCM (Ozone's own client waits 2 s)


class HadoopLoad:
    """``clients`` Hadoop RPC clients allocating one block per call until stopped; successes kept as (start, end)."""

    def __init__(self, addresses: list[str], clients: int) -> None:
        self.addresses = addresses
        self.clients = clients
        self.done: list[tuple[float, float]] = []
        self.ids: list[tuple[int, int]] = []
        self.refusals: dict[str, int] = {}
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.get_running_loop().create_task(self._run(i)) for i in range(self.clients)]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    def _refused(self, name: str) -> None:
        self.refusals[name] = self.refusals.get(name, 0) + 1

    async def _run(self, i: int) -> None:
        async with BlockLocationClient(self.addresses, attempts=30, retry_interval=RETRY_INTERVAL,
                                       call_timeout=10) as c:
            while not self._stop.is_set():
                t0 = time.monotonic()
                try:
                    resp = await c.allocate_blocks(BLOCK_SIZE, 1, f"failover-{i}")
                except (ConnectionLost, RemoteError, OSError) as exc:
                    self._refused(type(exc).__name__)
                    await asyncio.sleep(0.01)
                    continue
                if not resp.success:  # e.g. SAFE_MODE_EXCEPTION from a leader not ready yet
                    self._refused(str(resp.status))
                    await asyncio.sleep(0.01)
                    continue
                self.done.append((t0, time.monotonic()))
                for b in resp.allocateScmBlockResponse.blocks:
                    cb = b.containerBlockID
                    self.ids.append((cb.containerID, cb.localID))

    def first_success_after(self, t: float) -> float | None:
        ends = [end for start, end in self.done if start >= t]
        return min(ends) if ends else None

    async def steady(self, count: int = 200, timeout: float = 30) -> None:
        n = len(self.done)
        deadline = time.monotonic() + timeout
        while len(self.done) < n + count and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if len(self.done) == n:
            raise RuntimeError(f"no allocation succeeded for {timeout:.0f} s before the fault "
                               f"(failed attempts: {self.refusals})")


async def gap_after(load: HadoopLoad, fault_at: float, timeout: float = 90) -> float:
    """Seconds from the fault to the first allocation answered among calls started after it."""
    deadline = time.monotonic() + timeout
    while (first := load.first_success_after(fault_at)) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no allocation succeeded within {timeout:.0f} s of the SIGKILL "
                               f"(failed attempts: {load.refusals})")
        await asyncio.sleep(0.01)
    return first - fault_at
