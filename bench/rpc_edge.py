#!/usr/bin/env python3
"""The Hadoop RPC edge's CPU per call: one SCM and the real Hadoop RPC server in this process, the clients in another.

One SCM (the single-SCM HA stub, no background services) behind ``HadoopRpcServer`` with the block translator
(wrapped in Ozone's per-cmdType metrics, as the daemon wraps it) on loopback; a child process runs ``--clients``
Python Hadoop RPC clients calling GetScmInfo (the no-op row of ``bench/wire.py``) one call at a time each. Over the
measured window this process's CPU time (user and system apart, ``os.times``) is divided by the calls answered:
what the socket reads and writes, the framing, the decoder, the dispatch, the metrics and the answer cost per call,
with nothing else of a ring's leader in it. The anchor, measured the same way in the same run: the translator's
own call in process (the same request through ``translator.call``, no socket), so ``edge = server - translator``.

The server runs on the daemon's default loop (uvloop; ``--event-loop asyncio`` for asyncio's own).

Run: ``python bench/rpc_edge.py [--seconds 6] [--clients 8] [--event-loop uvloop|asyncio]``. Figures and what they led to: docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

if not __package__:  # `python bench/rpc_edge.py`: import scm_server from this checkout, as `python -m` does
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scm_server.clock import SystemClock
from scm_server.conf import OzoneConfiguration
from scm_server.hadoop_ipc import Call
from scm_server.metadata import SCMMetadataStore, SCMStorageConfig
from scm_server.proto.ozone import ScmServerProtocol_pb2 as wire_block
from scm_server.scm import StorageContainerManager
from scm_server.server.event_loop import EVENT_LOOP_KEY, EVENT_LOOPS, event_loop_factory
from scm_server.server.hadoop_rpc.block_translator import PROTOCOL, BlockLocationTranslator
from scm_server.server.hadoop_rpc.message_metrics import MeasuredHandler, ProtocolMessageMetrics
from scm_server.server.hadoop_rpc.server import HadoopRpcMetrics, HadoopRpcServer

CLUSTER_ID = "CID-0b0e4c1a-0000-4000-8000-00000000be7c"

CLIENTS = r"""
import asyncio, sys, time
sys.path.insert(0, sys.argv[1])
from scm_server.client.hadoop_rpc import BlockLocationClient

async def main(address: str, seconds: float, clients: int) -> None:
    async def one() -> None:
        async with BlockLocationClient([address]) as client:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                await client.get_scm_info()
    await asyncio.gather(*[one() for _ in range(clients)])

asyncio.run(main(sys.argv[2], float(sys.argv[3]), int(sys.argv[4])))
"""


async def measure(seconds: float, clients: int, tmp: Path) -> dict[str, float]:
    SCMStorageConfig(tmp).initialize(cluster_id=CLUSTER_ID, scm_id=str(uuid.uuid4()))
    conf = OzoneConfiguration({"ozone.metadata.dirs": str(tmp)})
    scm = await StorageContainerManager.create(conf, clock=SystemClock(),
                                               metadata_store=SCMMetadataStore(tmp, sync=False))
    await scm.ha_manager.start()  # the stub: leader at once
    translator = MeasuredHandler(
        BlockLocationTranslator(scm, conf.get, "scm1", "localhost"),
        ProtocolMessageMetrics.of_enum("ScmBlockLocationProtocol", wire_block.DESCRIPTOR.enum_types_by_name["Type"],
                                       "localhost"))
    body = wire_block.SCMBlockLocationRequest(cmdType=wire_block.GetScmInfo, traceID="").SerializeToString()

    # the anchor: the translator's own call, no socket
    count = 20000
    cpu0 = time.process_time()
    for n in range(count):
        await translator.call("send", Call(n, b"bench-client-id0", -1, PROTOCOL, "send", 1, body))
    translator_us = 1e6 * (time.process_time() - cpu0) / count

    server = HadoopRpcServer([translator], metrics=HadoopRpcMetrics(None))
    port = await server.start("127.0.0.1", 0)
    root = str(Path(__file__).resolve().parents[1])
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CLIENTS, root, f"127.0.0.1:{port}", str(seconds + 2), str(clients))
    try:
        answered = server.stats["answered"]
        deadline = time.monotonic() + 60
        while server.stats["answered"] - answered < clients * 20:  # every client connected and calling
            if time.monotonic() > deadline or child.returncode is not None:
                raise RuntimeError("the clients did not start calling within 60 s")
            await asyncio.sleep(0.05)
        t0, n0, wall0 = os.times(), server.stats["answered"], time.monotonic()
        await asyncio.sleep(seconds)  # the measuring window itself
        t1, n1, wall1 = os.times(), server.stats["answered"], time.monotonic()
    finally:
        await child.wait()
        await server.stop()
        await scm.stop()
    calls = n1 - n0
    return {"calls_per_s": calls / (wall1 - wall0), "server_us": 1e6 * ((t1.user - t0.user) + (t1.system - t0.system)) / calls,
            "user_us": 1e6 * (t1.user - t0.user) / calls, "system_us": 1e6 * (t1.system - t0.system) / calls,
            "translator_us": translator_us}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=6.0, help="the measured window (default 6)")
    p.add_argument("--clients", type=int, default=8, help="clients calling, one call in flight each (default 8)")
    p.add_argument("--event-loop", choices=EVENT_LOOPS, default=EVENT_LOOPS[0],
                   help=f"the server's loop, as {EVENT_LOOP_KEY} sets the daemon's (default {EVENT_LOOPS[0]})")
    args = p.parse_args()
    if args.seconds <= 0 or args.clients < 1:
        p.error("--seconds must be positive and --clients at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-rpc-edge-") as tmp:
        factory = event_loop_factory(OzoneConfiguration({EVENT_LOOP_KEY: args.event_loop}))
        with asyncio.Runner(loop_factory=factory) as runner:
            got = runner.run(measure(args.seconds, args.clients, Path(tmp)))
    edge = got["server_us"] - got["translator_us"]
    print(f"GetScmInfo over loopback Hadoop RPC, {args.clients} clients: {got['calls_per_s']:,.0f} calls/s, server CPU"
          f" {got['server_us']:.1f} us a call (user {got['user_us']:.1f}, system {got['system_us']:.1f})")
    print(f"anchor: the translator alone {got['translator_us']:.1f} us a call; the edge {edge:.1f} us a call"
          f" ({got['server_us'] / got['translator_us']:.1f}x the translator)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
