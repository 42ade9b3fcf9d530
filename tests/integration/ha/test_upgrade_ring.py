"""Upgrade finalization on a real 3-SCM ring (processes, Raft, simulated datanodes over both transports).

The ring is initialised at Ozone 1.4.1's HDDS layout (7, ``testing.hdds.scm.init.layout.version``, Ozone's key)
and its datanodes report 2.2.0's software layout (10) on data still at 7, as datanodes restarted on new jars
after an upgrade. ``FinalizeScmUpgrade`` starts finalization on the leader; the datanodes hold back their own
finalization, so every SCM sees them HEALTHY_READONLY and the leader waits for a pipeline it cannot create yet.
The leadership moves to another SCM in that state; the new leader resumes from the replicated checkpoint, and
once the datanodes finalize (they are told again by the new leader) a pipeline opens and every SCM reports
FINALIZATION_DONE, with layout 10 in its VERSION file. (Apache Ozone 1.4.1's own datanode and OM jars are not
on Maven Central, so simulated datanodes stand in for them: docs/ozone-compatibility.md, Upgrades.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scm_server.client.hadoop_rpc import LocationClient
from scm_server.datanode_sim import DatanodeSimulator
from scm_server.local.quorum import HALocalCluster
from scm_server.metadata import SCMStorageConfig
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import hdds_pb2 as wire

from .harness import cli, wait_until

pytestmark = pytest.mark.processes  # whole-SCM scenarios: make test-slow
Request = wire_loc.ScmContainerLocationRequest
Status = wire.UpgradeFinalizationStatus


async def _status(client: LocationClient, *, client_id: str = "watcher", readonly: bool = True) -> str:
    answer = (await client.submit(Request(
        cmdType=wire_loc.QueryUpgradeFinalizationProgress,
        queryUpgradeFinalizationProgressRequest=wire_loc.QueryUpgradeFinalizationProgressRequestProto(
            upgradeClientId=client_id, readonly=readonly)),
    )).queryUpgradeFinalizationProgressResponse.status
    return str(Status.Status.Name(answer.status))


async def _roles(client: LocationClient) -> list[list[str]]:
    info = (await client.submit(Request(cmdType=wire_loc.GetScmInfo, getScmInfoRequest=wire.GetScmInfoRequestProto()))
            ).getScmInfoResponse
    return [line.split(":") for line in info.peerRoles]


def _node_states(cluster: HALocalCluster) -> list[str]:
    listed = cli(cluster, "admin", "datanode", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return sorted(str(n["healthState"]) for n in json.loads(listed.stdout))


@pytest.mark.timeout(400)
async def test_finalization_resumes_on_a_new_leader_and_readonly_datanodes_finalize(tmp_path: Path) -> None:
    cluster = HALocalCluster(tmp_path / "ring", 3, hadoop_rpc=True, settings={
        "hdds.scm.safemode.min.datanode": "3",
        "testing.hdds.scm.init.layout.version": "7",
        "ozone.scm.heartbeat.thread.interval": "500ms",
    })
    sim = None
    try:
        cluster.start_quorum()
        # their data was written by Ozone 1.4.1 (layout 7); they hold back finalizing until told below
        sim = DatanodeSimulator(
            cluster.datanode_addresses, 3, heartbeat_interval=0.3, racks=1, admin_addresses=cluster.client_addresses,
            container_report_interval=5, layout_version=7,
            hadoop_rpc_addresses=cluster.hadoop_addresses("datanode"), hadoop_rpc_datanodes=1)
        sim.finalization_held = True
        await sim.start()
        await cluster.wait_healthy_quorum(timeout=120)
        async with LocationClient(cluster.hadoop_addresses("client"), attempts=20, retry_interval=0.2) as client:
            assert await _status(client) == "FINALIZATION_REQUIRED"

            async def three_healthy() -> bool:
                return _node_states(cluster) == ["HEALTHY"] * 3

            await wait_until(three_healthy, 60, "three HEALTHY datanodes before finalization", interval=0.5)

            async def started() -> str | None:
                answer = (await client.submit(Request(
                    cmdType=wire_loc.FinalizeScmUpgrade,
                    finalizeScmUpgradeRequest=wire_loc.FinalizeScmUpgradeRequestProto(upgradeClientId="admin-1")),
                )).finalizeScmUpgradeResponse.status
                return str(Status.Status.Name(answer.status))

            assert await started() == "STARTING_FINALIZATION"

            async def readonly() -> bool:
                return _node_states(cluster) == ["HEALTHY_READONLY"] * 3

            await wait_until(readonly, 60, "the datanodes HEALTHY_READONLY after SCM finalized", interval=0.5)
            assert await _status(client) == "FINALIZATION_IN_PROGRESS"
            assert all(dn.metadata_layout == 7 for dn in sim.datanodes)

            roles = await _roles(client)
            old = next(r[3] for r in roles if r[2] == "LEADER")
            target = next(r[3] for r in roles if r[2] != "LEADER")
            await client.submit(Request(
                cmdType=wire_loc.TransferLeadership,
                transferScmLeadershipRequest=wire.TransferLeadershipRequestProto(newLeaderId=target)))

            async def moved() -> bool:
                return any(r[2] == "LEADER" and r[3] == target for r in await _roles(client))

            await wait_until(moved, 60, f"{target} leading instead of {old}", interval=0.2)
            assert await _status(client) == "FINALIZATION_IN_PROGRESS"  # the new leader, before the datanodes

            sim.finalization_held = False  # the datanodes finalize when the (new) leader tells them again

            async def done() -> bool:
                return await _status(client) == "FINALIZATION_DONE"

            await wait_until(done, 120, "FINALIZATION_DONE on the new leader", interval=0.5)
            assert all(dn.metadata_layout == 10 for dn in sim.datanodes)
            assert _node_states(cluster) == ["HEALTHY"] * 3

            # the new leader's messages go to a client that takes over monitoring
            answer = (await client.submit(Request(
                cmdType=wire_loc.QueryUpgradeFinalizationProgress,
                queryUpgradeFinalizationProgressRequest=wire_loc.QueryUpgradeFinalizationProgressRequestProto(
                    upgradeClientId="admin-2", takeover=True)),
            )).queryUpgradeFinalizationProgressResponse.status
            assert list(answer.messages)[-1] == "Finalization is done."

        # every SCM applied the same steps: layout 10 in each VERSION file
        for scm in cluster.scms:
            assert SCMStorageConfig(scm.metadata_dir).layout_version == 10
        status = cli(cluster, "admin", "scm", "finalizationstatus")
        assert status.returncode == 0 and status.stdout.strip() == "FINALIZATION_DONE", status
        again = cli(cluster, "admin", "scm", "finalizeupgrade")
        assert again.stdout.splitlines() == ["Upgrade has already been finalized.", "Exiting..."], again
    finally:
        if sim is not None:
            await sim.stop()
        cluster.stop_all()
