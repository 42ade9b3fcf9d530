#!/usr/bin/env python3
"""The leader's CPU per call on three rows of bench/wire.py, in one process: a full container report of 1,000
replicas, GetContainerWithPipelineBatch of 100 and ListContainer of 1,000, each through its Hadoop RPC translator
(StorageContainerDatanodeProtocol, StorageContainerLocationProtocol) to a real in-process SCM facade, no socket.

What bench/wire.py reads as "leader CPU per call" on a ring of processes, less the sockets, the framing and the
ring's background work, measured as this process's own CPU time (``time.process_time``): on a shared machine it
moves far less with the load than calls per second do, and a leader election cannot move it to another process.
Run it from a checkout to measure that checkout's code (``cd OTHER && python bench/container_reads.py``): the same
script over two trees is the before/after of a lever. The load average is printed beside each round.

The state: three datanodes with an OPEN RATIS/THREE pipeline, 1,000 containers allocated through the facade
(replicated through the single-member Raft stub of the unit tests, no fsync), each with an OPEN replica of 1 MiB
reported by every datanode; the full report is a heartbeat carrying every replica of one datanode, from the three
in turn. Anchor, in the same run: GetScmInfo (the no-op) through the same location translator.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if not __package__:  # `python bench/container_reads.py`: import bench.* and tests.* from this checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scm_server.ha import heap
from scm_server.hadoop_ipc import Call
from scm_server.proto import hdds_pb2, scm_datanode_pb2
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import hdds_pb2 as wire_hdds
from scm_server.server.hadoop_rpc.datanode_translator import PROTOCOL as DATANODE_PROTOCOL
from scm_server.server.hadoop_rpc.datanode_translator import DatanodeTranslator
from scm_server.server.hadoop_rpc.location_translator import PROTOCOL as LOCATION_PROTOCOL
from scm_server.server.hadoop_rpc.location_translator import LocationTranslator
from tests.unit.scm_state_harness import bring_up, make_datanodes, make_scm

ROOT = Path(__file__).resolve().parent.parent
CONF = {"ozone.scm.service.ids": "cluster1", "ozone.scm.nodes.cluster1": "scm1",
        "ozone.scm.address.cluster1.scm1": "127.0.0.1"}
NOOP, FCR, BATCH, LIST = "no-op (GetScmInfo)", "full report, 1,000 containers", "GetContainerWithPipelineBatch 100", \
    "ListContainer 1,000"
ROWS = (NOOP, FCR, BATCH, LIST)


def _call(protocol: str, body: bytes, call_ids: itertools.count[int]) -> Call:
    return Call(call_id=next(call_ids), client_id=b"", retry_count=0, protocol=protocol, method="submitRequest",
                client_version=1, body=body)


async def prepare(tmp: Path, containers: int) -> dict[str, Callable[[], Awaitable[bytes]]]:
    """The SCM's state and each row's call (an answer checked once here: the rows measure what they claim)."""
    from bench import dn_load  # the same request bytes as bench/wire.py's rows

    scm = await make_scm(tmp, None, None, **{"ozone.scm.container.size": "5GB", "ozone.scm.block.size": "256MB"})
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    ids = [(await scm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "bench")).containerInfo.containerID
           for _ in range(containers)]
    location = LocationTranslator(scm, CONF.get, "scm1-id", "127.0.0.1")
    datanode = DatanodeTranslator(scm)
    calls = itertools.count(1)
    bodies = []
    for dn in dns:
        req = scm_datanode_pb2.SCMHeartbeatRequestProto(
            datanodeDetails=dn.details, nodeReport=dn.node_report(),
            containerReport=scm_datanode_pb2.ContainerReportsProto(
                reports=[dn_load.replica_of(c, dn.uuid, used=1 << 20, keys=1) for c in ids]))
        bodies.append(dn_load.wire_request(req))
    for body in bodies:  # every datanode's replicas known before the reads
        await datanode.call("submitRequest", _call(DATANODE_PROTOCOL, body, calls))
    assert scm.container_manager.replica_count() == 3 * containers, scm.container_manager.replica_count()
    turn = itertools.cycle(range(len(bodies)))

    def location_call(request: wire_loc.ScmContainerLocationRequest) -> Callable[[], Awaitable[bytes]]:
        body = request.SerializeToString()
        return lambda: location.call("submitRequest", _call(LOCATION_PROTOCOL, body, calls))

    rows = {
        NOOP: location_call(wire_loc.ScmContainerLocationRequest(
            cmdType=wire_loc.GetScmInfo, traceID="", getScmInfoRequest=wire_hdds.GetScmInfoRequestProto())),
        FCR: lambda: datanode.call("submitRequest", _call(DATANODE_PROTOCOL, bodies[next(turn)], calls)),
        BATCH: location_call(wire_loc.ScmContainerLocationRequest(
            cmdType=wire_loc.GetContainerWithPipelineBatch, traceID="",
            getContainerWithPipelineBatchRequest=wire_loc.GetContainerWithPipelineBatchRequestProto(
                containerIDs=ids[:100]))),
        LIST: location_call(wire_loc.ScmContainerLocationRequest(
            cmdType=wire_loc.ListContainer, traceID="",
            scmListContainerRequest=wire_loc.SCMListContainerRequestProto(count=containers, startContainerID=0))),
    }
    batch = wire_loc.ScmContainerLocationResponse.FromString(await rows[BATCH]())
    assert len(batch.getContainerWithPipelineBatchResponse.containerWithPipelines) == min(100, containers)
    listed = wire_loc.ScmContainerLocationResponse.FromString(await rows[LIST]())
    assert len(listed.scmListContainerResponse.containers) == containers
    assert listed.scmListContainerResponse.containers[0].usedBytes == 1 << 20  # the reported usage is served
    return rows


async def measure(call: Callable[[], Awaitable[bytes]], seconds: float) -> dict[str, float]:
    """Calls one after another for ``seconds`` of wall time: CPU (this process) and wall time per call."""
    cpu0, wall0, n = time.process_time(), time.perf_counter(), 0
    deadline = wall0 + seconds
    while True:
        await call()
        n += 1
        if time.perf_counter() >= deadline:
            break
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return {"calls": n, "cpu_us_per_call": 1e6 * cpu / n, "wall_us_per_call": 1e6 * wall / n}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-container-reads-") as tmp:
        rows = await prepare(Path(tmp), args.containers)
        heap.enable()  # the loaded state frozen out of full collections, as the daemon does once it serves
        for row in ROWS:  # warm-up: caches, the allocator's free lists
            await measure(rows[row], min(1.0, args.seconds))
        rounds = []
        for r in range(args.rounds):
            load = os.getloadavg()
            got = {row: await measure(rows[row], args.seconds) for row in ROWS}
            rounds.append({"round": r, "load_start": load, "load_end": os.getloadavg(), "rows": got})
            print(f"round {r}: load {load[0]:.1f} -> {os.getloadavg()[0]:.1f}; "
                  + "; ".join(f"{row} {v['cpu_us_per_call']:.0f} us" for row, v in got.items()), flush=True)
        return {"rounds": rounds}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--containers", type=int, default=1000, help="containers (and replicas per datanode; default 1000)")
    p.add_argument("--seconds", type=float, default=2.0, help="duration of each row in each round (default 2)")
    p.add_argument("--rounds", type=int, default=5, help="measured rounds (default 5)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "container_reads.json")
    args = p.parse_args()
    if args.containers < 100 or args.seconds <= 0 or args.rounds < 1:
        p.error("--containers must be at least 100 (the batch row asks 100), --seconds above 0, --rounds at least 1")
    result = asyncio.run(run(args))
    print(f"\nCPU per call in this process, median of {args.rounds} rounds [lowest-highest], and the ratio to the no-op"
          " in the same rounds:")
    noop = [r["rows"][NOOP]["cpu_us_per_call"] for r in result["rounds"]]
    for row in ROWS:
        cpu = [r["rows"][row]["cpu_us_per_call"] for r in result["rounds"]]
        ratio = statistics.median(c / n for c, n in zip(cpu, noop, strict=True))
        print(f"  {row:<36} {statistics.median(cpu):>9.0f} us [{min(cpu):.0f}-{max(cpu):.0f}]   {ratio:>7.1f}x no-op")
    loads = [x for r in result["rounds"] for x in (r["load_start"][0], r["load_end"][0])]
    print(f"  load average (1 min) during the rounds: {min(loads):.1f}-{max(loads):.1f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"containers": args.containers, "seconds": args.seconds, **result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
