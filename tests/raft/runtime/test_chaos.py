"""Randomized faults against real processes while clients write: kill -9 + restart, SIGSTOP/SIGCONT,
partitions, message loss and leader transfers. Afterwards: every acknowledged write is readable,
CAS counters were incremented exactly once per acknowledged success (retries are deduplicated by
the retry cache), and every member converges to the same data.

The short run is part of ``make test``; ``make chaos`` runs several longer seeds.
(Linearizability of full histories is checked by the verification tier, tests/raft/chaos.)
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from scm_server.raft.kv_client import KvClient, KvError, KvUnavailableError

from .cluster import KvCluster, KvProcess, wait_for


@dataclass
class History:
    acked: dict[bytes, bytes] = field(default_factory=dict)
    unknown: set[bytes] = field(default_factory=set)
    cas_ok: dict[bytes, int] = field(default_factory=dict)
    cas_unknown: dict[bytes, int] = field(default_factory=dict)


async def writer(c: KvCluster, w: int, stop: float, h: History) -> None:
    async with KvClient(c.addresses(), rpc_timeout=1.0, max_attempts=8, retry_interval=0.05) as kv:
        i = 0
        while time.monotonic() < stop:
            key = b"w%d-%d" % (w, i)
            try:
                await kv.put(key, b"%d" % i)
                h.acked[key] = b"%d" % i
            except (KvUnavailableError, KvError):
                h.unknown.add(key)
            i += 1


async def counter(c: KvCluster, key: bytes, stop: float, h: History) -> None:
    async with KvClient(c.addresses(), rpc_timeout=1.0, max_attempts=8, retry_interval=0.05) as kv:
        while time.monotonic() < stop:
            try:
                cur = await kv.get(key)
            except (KvUnavailableError, KvError):
                continue
            n = int(cur or b"0")
            try:
                if await kv.cas(key, cur, b"%d" % (n + 1)):
                    h.cas_ok[key] = h.cas_ok.get(key, 0) + 1
            except (KvUnavailableError, KvError):
                h.cas_unknown[key] = h.cas_unknown.get(key, 0) + 1


async def nemesis(c: KvCluster, rng: random.Random, stop: float) -> list[str]:
    done: list[str] = []
    nodes = list(c.nodes.values())
    while time.monotonic() < stop:
        await asyncio.sleep(rng.uniform(0.3, 1.0))  # time between faults (fault schedule, not a wait)
        victim: KvProcess = rng.choice(nodes)
        kind = rng.choice(["kill", "pause", "partition", "lossy", "transfer"])
        hold = rng.uniform(0.5, 1.5)
        try:
            if kind == "kill":
                victim.kill()
                await asyncio.sleep(hold)
                victim.start()
            elif kind == "pause" and victim.alive:
                victim.signal(signal.SIGSTOP)
                await asyncio.sleep(hold)
                victim.signal(signal.SIGCONT)
            elif kind in ("partition", "lossy") and victim.alive:
                rule = {"peer": "*", "cut_outbound": True, "cut_inbound": True} if kind == "partition" else {
                    "peer": "*", "drop": 0.3, "delay": 0.01, "jitter": 0.02}
                async with victim.admin() as a:
                    await a.set_faults([rule], seed=rng.randrange(1 << 30))
                await asyncio.sleep(hold)
                async with victim.admin() as a:
                    await a.clear_faults()
            elif kind == "transfer":
                leader = await c.leader(timeout=5)
                async with leader.admin() as a:
                    await a.transfer_leadership("", timeout=3)
            done.append(f"{kind}:{victim.node_id}")
        except Exception as exc:  # a fault action may race with another fault
            done.append(f"{kind}:{victim.node_id}:failed:{type(exc).__name__}")
    return done


async def heal(c: KvCluster) -> None:
    for p in c.nodes.values():
        if not p.alive:
            p.start()
        else:
            p.signal(signal.SIGCONT)
    for p in c.nodes.values():
        async def cleared(p: KvProcess = p) -> bool:
            async with p.admin() as a:
                await a.clear_faults()
            return True

        await wait_for(cleared, 20, f"{p.node_id} to accept ClearFaults")


async def run_chaos(base: Path, seed: int, seconds: float) -> None:
    rng = random.Random(seed)
    c = KvCluster(base, snapshot_threshold=200, purge_gap=50, install_mode=rng.choice(["notify", "chunked"]))
    c.start()
    try:
        await c.leader(20)
        h = History()
        stop = time.monotonic() + seconds
        counters = [b"ctr-a", b"ctr-b"]
        tasks = [writer(c, w, stop, h) for w in range(4)] + [counter(c, k, stop, h) for k in counters * 2]
        results = await asyncio.gather(nemesis(c, rng, stop), *tasks)
        faults_done = results[0]
        await heal(c)
        leader = await c.leader(30)
        async with KvClient(c.addresses(), rpc_timeout=2.0, max_attempts=40) as kv:
            await kv.put(b"final-barrier", b"1")
            items = list(h.acked.items())
            limit = asyncio.Semaphore(64)

            async def read(key: bytes) -> bytes | None:
                async with limit:
                    return await kv.get(key)

            got = await asyncio.gather(*(read(k) for k, _ in items))
            for (key, value), seen in zip(items, got, strict=True):
                assert seen == value, f"acknowledged write {key!r} lost (seed {seed}, {faults_done})"
            for key in counters:
                final = int(await kv.get(key) or b"0")
                ok, unknown = h.cas_ok.get(key, 0), h.cas_unknown.get(key, 0)
                assert ok <= final <= ok + unknown, (key, final, ok, unknown, seed)
        commit = (await leader.status()).commit_index
        for p in c.nodes.values():
            try:
                await wait_for(lambda p=p: _caught_up(p, commit), 30, f"{p.node_id} to converge")
            except AssertionError as exc:
                states = [await q.status_once() for q in c.nodes.values()]
                raise AssertionError(f"{exc}; seed {seed}; members: {states}; faults: {faults_done}") from None
        sample = list(h.acked)[:: max(1, len(h.acked) // 50)] + counters
        async with c.client() as kv:
            expected = list(await asyncio.gather(*(kv.get(k) for k in sample)))
        for p in c.nodes.values():
            async with KvClient([p.address], rpc_timeout=2.0, max_attempts=5) as kv:
                seen = await asyncio.gather(*(kv.get(k) for k in sample))
            assert seen == expected, p.node_id
        assert len(h.acked) > 20, f"too little progress under faults: {len(h.acked)} writes (seed {seed})"
    finally:
        c.stop()


async def _caught_up(p: KvProcess, index: int) -> bool:
    return (await p.status_once()).applied_index >= index


@pytest.mark.slow
async def test_short_chaos_run(tmp_path: Path) -> None:
    seed = int(os.environ.get("RAFT_CHAOS_SEED", "1"))
    await run_chaos(tmp_path, seed, float(os.environ.get("RAFT_CHAOS_SECONDS", "8")))


@pytest.mark.chaos
@pytest.mark.parametrize("seed", range(100, 106))
async def test_chaos_runs(tmp_path: Path, seed: int) -> None:
    await run_chaos(tmp_path, seed, 45.0)
