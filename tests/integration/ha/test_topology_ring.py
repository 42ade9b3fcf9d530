"""Racks from a TableMapping file on a real 3-SCM ring: simulated datanodes that all report /rack1 are placed by the
table on every SCM, RATIS/THREE pipelines span racks, and `ozone-scm admin printTopology` lists the racks."""

from __future__ import annotations

import asyncio
from pathlib import Path

from scm_server.client.scm_client import SCMClient
from scm_server.datanode_sim import DatanodeSimulator
from scm_server.local.quorum import HALocalCluster
from scm_server.proto import hdds_pb2

from .harness import CLIENT_CONFIG, TEST_SETTINGS, cli, wait_until

RACKS = {"sim-dn-0": "/rackA", "sim-dn-1": "/rackA", "sim-dn-2": "/rackB", "sim-dn-3": "/rackB",
         "sim-dn-4": "/rackC", "sim-dn-5": "/rackC"}


async def test_table_mapping_places_datanodes_and_pipelines_span_racks(tmp_path: Path) -> None:
    table = tmp_path / "topology.table"
    table.write_text("".join(f"{host} {rack}\n" for host, rack in RACKS.items()))
    settings = {
        **TEST_SETTINGS,
        "net.topology.node.switch.mapping.impl": "org.apache.hadoop.net.TableMapping",
        "net.topology.table.file.name": str(table),
        "hdds.datanode.use.datanode.hostname": "true",
    }
    cluster = HALocalCluster(tmp_path / "c", 3, settings=settings)
    sim = None
    try:
        cluster.start_quorum()
        sim = DatanodeSimulator(cluster.datanode_addresses, 6, heartbeat_interval=0.3, racks=1,
                                admin_addresses=cluster.client_addresses, container_report_interval=5)
        await sim.start()
        assert {dn.rack for dn in sim.datanodes} == {"/rack1"}  # what they say about themselves
        await cluster.wait_healthy_quorum(timeout=90)

        async def spread_pipelines() -> list[hdds_pb2.Pipeline] | None:
            async with SCMClient(cluster.client_addresses, CLIENT_CONFIG) as c:
                pipelines = [p for p in await c.list_pipelines()
                             if p.factor == hdds_pb2.THREE and p.state == hdds_pb2.PIPELINE_OPEN]
            return pipelines if len(pipelines) >= 2 else None

        pipelines = await wait_until(spread_pipelines, 90, "two OPEN RATIS/THREE pipelines")
        for p in pipelines:
            racks = [m.networkLocation for m in p.members]
            assert racks == [RACKS[m.hostName] for m in p.members]
            assert len(set(racks)) >= 2, f"pipeline {p.id.id} on {racks}"

        # Every SCM resolved the racks itself (soft state, like the rest of a registration).
        for address in cluster.client_addresses:
            async with SCMClient([address], CLIENT_CONFIG, local_read=True) as c:
                nodes = await c.query_nodes()
            assert {n.nodeID.hostName: n.nodeID.networkLocation for n in nodes} == RACKS

        # in a thread: the simulated datanodes heartbeat on this loop, and a CLI process that takes seconds on a
        # loaded machine must not hold their heartbeats back until the SCMs count them STALE
        shown = await asyncio.to_thread(cli, cluster, "admin", "printTopology")
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert lines[0] == "State = HEALTHY"
        for rack in ("/rackA", "/rackB", "/rackC"):
            at = lines.index(f"Location: {rack}")
            hosts = sorted(h for h, r in RACKS.items() if r == rack)
            assert sorted(line.strip() for line in lines[at + 1 : at + 3]) == [f"127.0.0.1({h})" for h in hosts]
    finally:
        if sim is not None:
            await sim.stop()
        cluster.stop_all()
