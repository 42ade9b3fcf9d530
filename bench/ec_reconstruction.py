#!/usr/bin/env python3
"""How fast the leader's ReplicationManager schedules EC reconstructions after a datanode dies.

An in-process leader SCM (single member, stub HA, real scm.db) holds N CLOSED ``rs-3-2-1024k`` containers
spread over ``--datanodes`` datanodes (index i of container c on datanode (c + i) mod D), every replica
reported. One datanode goes DEAD (SCM drops its replicas, as DeadNodeHandler does), and one ReplicationManager
pass runs: it classifies every container and sends a reconstructECContainersCommand for each one that lost
an index (per-datanode limits raised so the figure is the scheduling cost, not the throttle). Printed: the pass
time, the reconstructions sent, their rate, and as the anchor the same pass with nothing to repair (every
container healthy), so the cost of deciding and queueing a reconstruction is the difference. Each pass is timed
twice: wall clock, and the CPU time this process spent in it (``time.process_time``), which other processes on a
shared machine do not inflate; the rate is given for both.

Usage: ``.venv/bin/python bench/ec_reconstruction.py --sizes 10000 100000``. Writes bench/results/ec_reconstruction.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import tempfile
import time
import uuid
from pathlib import Path

from scm_server.clock import SystemClock
from scm_server.conf import OzoneConfiguration
from scm_server.container.container_manager import ContainerReplica
from scm_server.metadata import SCMMetadataStore, SCMStorageConfig
from scm_server.proto import hdds_pb2, scm_datanode_pb2
from scm_server.scm import StorageContainerManager

ROOT = Path(__file__).resolve().parent.parent
EC = hdds_pb2.ECReplicationConfig(data=3, parity=2, codec="rs", ecChunkSize=1 << 20)
CommandType = scm_datanode_pb2.SCMCommandProto.Type


async def build(base: Path, containers: int, datanodes: int) -> StorageContainerManager:
    storage = SCMStorageConfig(base)
    storage.initialize(cluster_id=f"CID-{uuid.uuid4()}", scm_id=str(uuid.uuid4()))
    conf = OzoneConfiguration({
        "ozone.metadata.dirs": str(base),
        "hdds.scm.safemode.min.datanode": "1",
        "hdds.scm.wait.time.after.safemode.exit": "0s",
        "hdds.scm.replication.datanode.replication.limit": str(10 * containers),
    })
    scm = await StorageContainerManager.create(conf, clock=SystemClock(), metadata_store=SCMMetadataStore(base, sync=False))
    await scm.ha_manager.start()
    uuids = [f"00000000-0000-0000-0000-{i:012d}" for i in range(datanodes)]
    for i, dn in enumerate(uuids):
        await scm.register_datanode(scm_datanode_pb2.SCMRegisterRequestProto(
            datanodeDetails=hdds_pb2.DatanodeDetailsProto(uuid=dn, hostName=f"dn{i}", ipAddress="127.0.0.1",
                                                          networkLocation=f"/rack{i % 5}"),
            nodeReport=scm_datanode_pb2.NodeReportProto(), containerReport=scm_datanode_pb2.ContainerReportsProto(),
            pipelineReports=scm_datanode_pb2.PipelineReportsProto(), clusterID=storage.cluster_id,
        ))
    scm.force_exit_safe_mode()
    for cid in range(1, containers + 1):
        await scm.container_state_manager.add_container(hdds_pb2.ContainerInfoProto(
            containerID=cid, state=hdds_pb2.CLOSED, pipelineID=hdds_pb2.PipelineID(id="gone"), owner="om",
            numberOfKeys=10, sequenceId=5, replicationType=hdds_pb2.EC, ecReplicationConfig=EC,
        ))
        for index in range(1, 6):
            scm.container_manager.update_container_replica(ContainerReplica(
                container_id=cid, datanode_uuid=uuids[(cid + index) % datanodes],
                state=hdds_pb2.ContainerReplicaProto.CLOSED, sequence_id=5, key_count=10, replica_index=index,
            ))
    return scm


async def measure(containers: int, datanodes: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        scm = await build(Path(tmp), containers, datanodes)
        rm = scm.replication_manager
        try:
            started, cpu = time.perf_counter(), time.process_time()
            await rm.run_once()
            healthy_pass, healthy_cpu = time.perf_counter() - started, time.process_time() - cpu
            victim = scm.node_manager.all_nodes()[0]
            lost = len(scm.container_manager.containers_on(victim.uuid))
            victim.health = hdds_pb2.DEAD
            await scm.container_manager.on_node_dead(victim.uuid)
            started, cpu = time.perf_counter(), time.process_time()
            await rm.run_once()
            repair_pass, repair_cpu = time.perf_counter() - started, time.process_time() - cpu
            sent = sum(scm.node_manager.queued_count(n.uuid, CommandType.reconstructECContainersCommand)
                       for n in scm.node_manager.all_nodes())
            return {
                "containers": containers, "datanodes": datanodes, "containers_that_lost_an_index": lost,
                "healthy_pass_s": round(healthy_pass, 3), "repair_pass_s": round(repair_pass, 3),
                "reconstructions_sent": sent, "reconstructions_per_s": round(sent / repair_pass, 1),
                "healthy_pass_cpu_s": round(healthy_cpu, 3), "repair_pass_cpu_s": round(repair_cpu, 3),
                "reconstructions_per_cpu_s": round(sent / repair_cpu, 1) if repair_cpu > 0 else 0.0,
                "extra_cost_per_reconstruction_us": round(1e6 * (repair_pass - healthy_pass) / max(sent, 1), 1),
            }
        finally:
            await scm.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--datanodes", type=int, default=20)
    args = parser.parse_args()
    rows = [asyncio.run(measure(n, args.datanodes)) for n in args.sizes]
    for r in rows:
        print(f"{r['containers']:>8} EC containers, {r['containers_that_lost_an_index']:>6} lost an index: healthy pass "
              f"{r['healthy_pass_s']:.2f}s, repair pass {r['repair_pass_s']:.2f}s, {r['reconstructions_sent']} "
              f"reconstructions sent ({r['reconstructions_per_s']:.0f}/s); CPU: healthy {r['healthy_pass_cpu_s']:.2f}s, "
              f"repair {r['repair_pass_cpu_s']:.2f}s ({r['reconstructions_per_cpu_s']:.0f} per CPU second)")
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "ec_reconstruction.json").write_text(json.dumps({"machine": platform.node(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
