"""Quick throughput/latency probe of the runtime (not a test; raft-verify's bench/raft_bench.py is
the real benchmark with etcd and PySyncObj side by side).

    .venv/bin/python -m tests.raft.runtime.quick_bench [CLIENTS] [SECONDS]   # GETS=1 for reads

Starts 3 ``python -m scm_server.raft.kv`` members (fsync on, tick 0.1 s) on loopback, runs CLIENTS
concurrent writers (256-byte values) through one shared KvClient for SECONDS, and prints ops/s,
p50/p99 latency and CPU microseconds per operation of every process.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from tests.raft.runtime.cluster import KvCluster


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def main(clients: int, seconds: float) -> None:
    gets = bool(os.environ.get("GETS"))
    c = KvCluster(Path(tempfile.mkdtemp(prefix="raft-quick-bench-")), tick=0.1)
    c.start()
    try:
        await c.leader(20)
        kv = c.client()
        await kv.put(b"warm", b"x")
        done = 0
        lat: list[float] = []
        before = {n: _cpu(p.proc.pid) for n, p in c.nodes.items() if p.proc}
        t_client = os.times()
        stop = time.monotonic() + seconds

        async def worker(w: int) -> None:
            nonlocal done
            i = 0
            while time.monotonic() < stop:
                t = time.monotonic()
                if gets:
                    await kv.get(b"warm")
                else:
                    await kv.put(b"k%d-%d" % (w, i), b"v" * 256)
                lat.append(time.monotonic() - t)
                i += 1
                done += 1

        t0 = time.monotonic()
        await asyncio.gather(*(worker(w) for w in range(clients)))
        dt = time.monotonic() - t0
        lat.sort()
        print(
            f"{'gets' if gets else 'puts'} clients={clients} fsync=on: {done / dt:.0f} ops/s "
            f"p50={lat[len(lat) // 2] * 1e3:.1f}ms p99={lat[int(len(lat) * 0.99)] * 1e3:.1f}ms"
        )
        for n, p in c.nodes.items():
            if p.proc:
                print(f"  {n} cpu {(_cpu(p.proc.pid) - before[n]) / done * 1e6:.0f} us/op")
        t = os.times()
        print(f"  client cpu {(t.user + t.system - t_client.user - t_client.system) / done * 1e6:.0f} us/op")
        await kv.close()
    finally:
        c.stop()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 64, float(sys.argv[2]) if len(sys.argv) > 2 else 8.0))
