#!/usr/bin/env python3
"""The leader's CPU per heartbeat, in-process: what 10,000 datanodes heartbeating at Ozone's default interval cost.

One SCM in this process (the single-SCM HA stub, no background services, no sockets), N simulated datanodes
registered through the Hadoop RPC datanode translator with Ozone's messages (bench/dn_load.py's datanodes), then
every datanode's heartbeats in turn, each carrying what bench/dn_load.py's schedule says (node and pipeline reports
every second heartbeat, an incremental container report every fourth), through the same translator call a
connection's task makes: Ozone's request parsed, converted, processed by the facade, the answer converted and
serialized. The CPU seconds this process spends per heartbeat (``time.process_time``, so the machine's load does not
enter) times the heartbeats per second of N datanodes at ``hdds.heartbeat.interval`` (30 s) gives the share of one
core the leader's heartbeat path takes. The socket, the framing and the event loop's turn per call are not in it: the
anchor, measured the same way in the same run, is the translator's GetVersion (the datanode protocol's no-op call),
and ``bench/wire.py``'s heartbeat rows give the whole path over loopback.

Run: ``python bench/heartbeat_cpu.py [--datanodes 10000] [--heartbeats 30000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

if not __package__:  # `python bench/heartbeat_cpu.py`: import bench.* from this checkout, as `python -m` does
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import dn_load
from scm_server import ozone_wire
from scm_server.clock import SystemClock
from scm_server.conf import OzoneConfiguration
from scm_server.hadoop_ipc import Call
from scm_server.metadata import SCMMetadataStore, SCMStorageConfig
from scm_server.proto import hdds_pb2, scm_datanode_pb2
from scm_server.proto.ozone import ScmServerDatanodeHeartbeatProtocol_pb2 as wire_dn
from scm_server.scm import StorageContainerManager
from scm_server.server.hadoop_rpc.datanode_translator import PROTOCOL, DatanodeTranslator

CLUSTER_ID = "CID-0b0e4c1a-0000-4000-8000-00000000be7c"
OZONE_INTERVAL_S = 30.0  # hdds.heartbeat.interval's default


def call(body: bytes, call_id: int) -> Call:
    return Call(call_id, b"bench-client-id0", 0, PROTOCOL, "submitRequest", 1, body)


async def run(datanodes: int, heartbeats: int, tmp: Path) -> dict[str, float]:
    storage = SCMStorageConfig(tmp)
    storage.initialize(cluster_id=CLUSTER_ID, scm_id=str(uuid.uuid4()))
    # one OPEN container per datanode, written before the start (as bench/scale.py seeds), for its ICRs to name
    store = SCMMetadataStore(tmp, sync=False)
    batch = store.new_batch(sync=False)
    pipeline = hdds_pb2.PipelineID(id=str(uuid.uuid4()))
    for cid in range(1, datanodes + 1):
        store.containers.put_with_batch(batch, cid, hdds_pb2.ContainerInfoProto(
            containerID=cid, state=hdds_pb2.OPEN, pipelineID=pipeline, usedBytes=0, numberOfKeys=0,
            stateEnterTime=0, owner="bench", deleteTransactionId=0, sequenceId=0,
            replicationFactor=hdds_pb2.THREE, replicationType=hdds_pb2.RATIS))
    store.sequence_id.put_with_batch(batch, "containerId", hdds_pb2.SequenceIdProto(lastId=datanodes))
    batch.commit()
    store.stop()
    conf = OzoneConfiguration({"ozone.metadata.dirs": str(tmp), "hdds.scm.safemode.min.datanode": "1",
                               "hdds.heartbeat.interval": f"{OZONE_INTERVAL_S:g}s"})
    scm = await StorageContainerManager.create(conf, clock=SystemClock(),
                                               metadata_store=SCMMetadataStore(tmp, create=False, sync=False))
    await scm.ha_manager.start()  # the stub: leader at once, no background services
    translator = DatanodeTranslator(scm)
    ids = itertools.count(1)
    load = dn_load.DatanodeLoad(datanodes, "hb-cpu")
    t0 = time.monotonic()
    for dn in load.datanodes:
        req = scm_datanode_pb2.SCMRegisterRequestProto(
            datanodeDetails=dn.details(), nodeReport=dn.node_report(), containerReport=dn.container_report(),
            pipelineReports=dn.pipeline_reports(), clusterID=CLUSTER_ID, dataNodeLayoutVersion=load.layout)
        body = wire_dn.SCMDatanodeRequest(cmdType=wire_dn.Register,
                                          registerRequest=ozone_wire.register_request_to_wire(req)).SerializeToString()
        answer = wire_dn.SCMDatanodeResponse.FromString(await translator.call("submitRequest", call(body, next(ids))))
        if answer.registerResponse.errorCode != scm_datanode_pb2.SCMRegisteredResponseProto.success:
            raise RuntimeError(f"{dn.hostname} not registered: {answer.registerResponse}")
    period = load.schedule.period()
    bodies = [[dn_load.wire_request(dn_load.heartbeat(dn, load.schedule.carries(b), i + 1, load.layout))
               for b in range(period)] for i, dn in enumerate(load.datanodes)]
    print(f"{datanodes} datanodes registered in {time.monotonic() - t0:.1f} s", flush=True)
    version = wire_dn.SCMDatanodeRequest(cmdType=wire_dn.GetVersion,
                                         getVersionRequest=wire_dn.SCMVersionRequestProto()).SerializeToString()

    async def timed(count: int, body_of: Callable[[int], bytes]) -> float:
        cpu0 = time.process_time()
        for n in range(count):
            answer = wire_dn.SCMDatanodeResponse.FromString(
                await translator.call("submitRequest", call(body_of(n), next(ids))))
            if any(c.HasField("reregisterCommandProto") for c in answer.sendHeartbeatResponse.commands):
                raise RuntimeError("a heartbeat was answered with reregister: the datanode is not known")
        return (time.process_time() - cpu0) / count

    anchor = await timed(min(heartbeats, 20000), lambda n: version)
    per_heartbeat = await timed(heartbeats, lambda n: bodies[n % datanodes][(n // datanodes) % period])
    replicas = scm.container_manager.replica_count()
    await scm.stop()
    return {"heartbeat_cpu_s": per_heartbeat, "getversion_cpu_s": anchor, "replicas": replicas}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datanodes", type=int, default=10000)
    p.add_argument("--heartbeats", type=int, default=30000, help="heartbeats timed (default 30,000)")
    args = p.parse_args()
    if args.datanodes < 1 or args.heartbeats < 1:
        p.error("--datanodes and --heartbeats must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-hb-cpu-") as tmp:
        got = asyncio.run(run(args.datanodes, args.heartbeats, Path(tmp)))
    rate = args.datanodes / OZONE_INTERVAL_S
    share = 100 * rate * got["heartbeat_cpu_s"]
    print(f"CPU per heartbeat {1e6 * got['heartbeat_cpu_s']:.0f} us (anchor: GetVersion {1e6 * got['getversion_cpu_s']:.0f}"
          f" us, ratio {got['heartbeat_cpu_s'] / got['getversion_cpu_s']:.1f}x)")
    print(f"{args.datanodes} datanodes every {OZONE_INTERVAL_S:g} s = {rate:.0f} heartbeats/s: {share:.2f} % of one core"
          f" (goal <= 50 %)")
    if got["replicas"] < args.datanodes:
        print(f"only {got['replicas']} replicas recorded from {args.datanodes} datanodes' ICRs")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
