"""The container balancer's run is replicated state: started on the leader of a real 3-SCM ring (processes,
Raft, simulated datanodes) with `ContainerBalancer` recorded through Raft in statefulServiceConfig, it survives a
change of leader: the new leader answers that the balancer runs, shows its recorded configuration, and stops it.

The service waits ``hdds.scm.wait.time.after.safemode.exit`` after becoming active before its first step, set long
here, so that neither leader finishes the run before the failover is observed (a balanced ring would stop it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scm_server.client.hadoop_rpc import LocationClient
from scm_server.local.quorum import HALocalCluster
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import hdds_pb2 as wire

from .harness import start_sim, wait_until

pytestmark = pytest.mark.processes  # whole-SCM scenarios: make test-slow
Request = wire_loc.ScmContainerLocationRequest


async def _running(client: LocationClient) -> bool:
    answer = await client.submit(Request(cmdType=wire_loc.GetContainerBalancerStatus,
                                         containerBalancerStatusRequest=wire_loc.ContainerBalancerStatusRequestProto()))
    return answer.containerBalancerStatusResponse.isRunning


async def _leader_peer(client: LocationClient) -> str:
    info = (await client.submit(Request(cmdType=wire_loc.GetScmInfo, getScmInfoRequest=wire.GetScmInfoRequestProto()))
            ).getScmInfoResponse
    return next(line.split(":")[3] for line in info.peerRoles if line.split(":")[2] == "LEADER")


@pytest.mark.timeout(300)
async def test_a_started_balancer_is_still_running_after_a_leader_change(tmp_path: Path) -> None:
    cluster = HALocalCluster(tmp_path / "ring", 3, hadoop_rpc=True, settings={
        "hdds.scm.safemode.min.datanode": "3",
        "hdds.scm.wait.time.after.safemode.exit": "10m",
    })
    sim = None
    try:
        cluster.start_quorum()
        sim = await start_sim(cluster, 3)
        await cluster.wait_healthy_quorum(timeout=120)
        async with LocationClient(cluster.hadoop_addresses("client"), attempts=20, retry_interval=0.2) as client:
            async def started() -> bool:
                answer = (await client.submit(Request(
                    cmdType=wire_loc.StartContainerBalancer,
                    startContainerBalancerRequest=wire_loc.StartContainerBalancerRequestProto(
                        threshold=7.5, iterations=4, maxDatanodesPercentageToInvolvePerIteration=100)),
                )).startContainerBalancerResponse
                if not answer.start:
                    assert "safe mode" in answer.message, answer.message  # the one refusal waited out
                return answer.start

            await wait_until(started, 90, "the balancer started (out of safe mode)", interval=0.5)
            assert await _running(client)
            old = await _leader_peer(client)
            target = next(line.split(":")[3] for line in (await client.submit(Request(
                cmdType=wire_loc.GetScmInfo, getScmInfoRequest=wire.GetScmInfoRequestProto()))
            ).getScmInfoResponse.peerRoles if line.split(":")[3] != old)
            await client.submit(Request(
                cmdType=wire_loc.TransferLeadership,
                transferScmLeadershipRequest=wire.TransferLeadershipRequestProto(newLeaderId=target)))

            async def moved() -> bool:
                return await _leader_peer(client) == target

            await wait_until(moved, 60, f"{target} leading", interval=0.2)
            assert await _running(client)  # the new leader read the replicated record
            info = (await client.submit(Request(
                cmdType=wire_loc.GetContainerBalancerStatusInfo,
                containerBalancerStatusInfoRequest=wire_loc.ContainerBalancerStatusInfoRequestProto()))
            ).containerBalancerStatusInfoResponse
            conf = info.containerBalancerStatusInfo.configuration
            assert info.isRunning and conf.shouldRun
            assert (float(conf.utilizationThreshold), conf.iterations, conf.nextIterationIndex) == (7.5, 4, 0)
            await client.submit(Request(cmdType=wire_loc.StopContainerBalancer,
                                        stopContainerBalancerRequest=wire_loc.StopContainerBalancerRequestProto()))
            assert not await _running(client)
    finally:
        if sim is not None:
            await sim.stop()
        cluster.stop_all()
