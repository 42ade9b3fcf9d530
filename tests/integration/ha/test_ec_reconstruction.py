"""Erasure coding on a real 3-SCM ring with simulated datanodes: an EC block allocated over Hadoop RPC with the
project's client (Ozone's AllocateScmBlock with ecReplicationConfig), the container's replicas written with
their indexes, then a datanode holding one index killed: it goes STALE then DEAD (intervals shortened), the
leader's ReplicationManager sends a reconstructECContainersCommand, the coordinator rebuilds the lost index on
a new datanode, and the container is back to d+p distinct indexes on d+p distinct live datanodes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from scm_server.client.hadoop_rpc import BlockLocationClient
from scm_server.client.scm_client import SCMClient
from scm_server.datanode_sim import DatanodeSimulator
from scm_server.local.quorum import HALocalCluster
from scm_server.proto import hdds_pb2
from scm_server.proto.ozone import ScmServerProtocol_pb2 as wire_block
from scm_server.proto.ozone import hdds_pb2 as wire

from .harness import CLIENT_CONFIG, TEST_SETTINGS, wait_open_pipeline, wait_until

pytestmark = pytest.mark.timeout(300)
MB = 1 << 20
SETTINGS = {
    **TEST_SETTINGS,
    "hdds.scm.safemode.min.datanode": "7",
    "hdds.scm.wait.time.after.safemode.exit": "1s",
    "hdds.scm.replication.thread.interval": "2s",
    "ozone.scm.heartbeat.thread.interval": "500ms",
    "ozone.scm.stale.node.interval": "3s",
    "ozone.scm.dead.node.interval": "6s",
    "ozone.scm.ec.pipeline.minimum": "1",
}


async def test_a_killed_datanodes_ec_index_is_reconstructed(tmp_path: Path) -> None:
    cluster = HALocalCluster(tmp_path / "c", 3, settings=SETTINGS, hadoop_rpc=True)
    sim = DatanodeSimulator(
        cluster.datanode_addresses, 7, heartbeat_interval=0.3, racks=3,
        admin_addresses=cluster.client_addresses, container_report_interval=2,
    )
    try:
        cluster.start_quorum()
        await sim.start()
        await cluster.wait_healthy_quorum(timeout=90)
        await wait_open_pipeline(cluster)

        ec = wire.ECReplicationConfig(data=3, parity=2, codec="rs", ecChunkSize=MB)
        async with BlockLocationClient(cluster.hadoop_addresses("block")) as blocks:
            answer = await blocks.allocate_blocks(MB, 1, "om", ec=ec)
        assert answer.status == wire_block.OK, answer.message
        [block] = answer.allocateScmBlockResponse.blocks
        assert list(block.pipeline.memberReplicaIndexes) == [1, 2, 3, 4, 5]
        cid = block.containerBlockID.containerID

        assert await sim.write_to_container(cid, 4 * MB, keys=3) == 5
        assert sorted(r.replica_index for _, r in sim.replicas_of(cid)) == [1, 2, 3, 4, 5]
        async with SCMClient(cluster.client_addresses, CLIENT_CONFIG) as admin:
            await admin.close_container(cid)

            async def closed() -> bool:
                info = (await admin.get_container_with_pipeline(cid))[0].containerInfo
                return info.state == hdds_pb2.CLOSED

            await wait_until(closed, 60, f"container #{cid} CLOSED")
            _, replicas = await admin.get_container_with_pipeline(cid)
            assert sorted(r.replica.replicaIndex for r in replicas) == [1, 2, 3, 4, 5]  # indexes through the reports

            victim, lost = next((dn, r.replica_index) for dn, r in sim.replicas_of(cid) if r.replica_index == 2)
            await sim.kill(victim.hostname)
            killed_at = time.monotonic()

            async def dead() -> bool:
                nodes = await admin.query_nodes()
                return any(n.nodeID.uuid == victim.uuid and n.nodeStates[0] == hdds_pb2.DEAD for n in nodes)

            await wait_until(dead, 60, f"{victim.hostname} DEAD")
            dead_at = time.monotonic()

            async def rebuilt() -> bool:
                live = [(dn.uuid, r.replica_index) for dn, r in sim.replicas_of(cid)]
                return sorted(i for _, i in live) == [1, 2, 3, 4, 5] and len({u for u, _ in live}) == 5

            await wait_until(rebuilt, 90, f"index {lost} of container #{cid} rebuilt on a live datanode")
            healthy_at = time.monotonic()
            holder = next(dn for dn, r in sim.replicas_of(cid) if r.replica_index == lost)
            assert holder.uuid != victim.uuid
            # one target, so it coordinated the reconstruction itself (the command goes to a target, as Ozone's)
            assert holder.executed.get("reconstructECContainersCommand", 0) >= 1
            assert not any(dn.executed.get("replicateContainerCommand") for dn in sim.live())

            async def scm_sees_it() -> bool:
                _, now = await admin.get_container_with_pipeline(cid)
                return sorted((r.replica.replicaIndex, r.datanode.uuid != victim.uuid) for r in now) == [
                    (i, True) for i in range(1, 6)
                ]

            # the holder's next report (every 2 s) and the dead node's replica dropped; 30 s ran out once beside a CI run
            await wait_until(scm_sees_it, 90, "SCM listing the rebuilt replica with its index")
        print(f"\nEC rs-3-2: DEAD {dead_at - killed_at:.1f}s after the kill, index {lost} rebuilt "
              f"{healthy_at - dead_at:.1f}s after DEAD")
    finally:
        await sim.stop()
        cluster.stop_all()
