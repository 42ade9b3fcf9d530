"""The SCM ring's own admin calls over Ozone's location protocol on a real 3-SCM quorum (`local up`): Ozone's
`scm transfer` (TransferLeadership) moves Raft leadership to the named member, `scm decommission`
(DecommissionScm) refuses the leader and removes a follower through the membership change; and `ozone-scm admin`
reaches the Hadoop RPC client ports named in the configuration."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from scm_server.client.hadoop_rpc import LocationClient
from scm_server.local import quorum as local_cluster
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import hdds_pb2 as wire

from .harness import wait_until

Request = wire_loc.ScmContainerLocationRequest


async def roles(client: LocationClient) -> dict[str, str]:
    """peer id -> role, from GetScmInfo's peerRoles (`host:port:ROLE:peerId:ip`)."""
    info = (await client.submit(Request(cmdType=wire_loc.GetScmInfo, getScmInfoRequest=wire.GetScmInfoRequestProto()))
            ).getScmInfoResponse
    return {line.split(":")[3]: line.split(":")[2] for line in info.peerRoles}


@pytest.mark.timeout(240)
def test_transfer_and_decommission_over_the_location_protocol(tmp_path: Path) -> None:
    data = tmp_path / "run-data"
    try:
        local_cluster.up(3, 3, data)
        recorded = local_cluster.status(data)["state"]
        addresses = [s["hadoop_rpc"]["client"] for s in recorded["scms"]]
        conf = recorded["scms"][0]["conf_dir"]

        async def scenario() -> None:
            async with LocationClient(addresses, attempts=20, retry_interval=0.2) as client:
                await wait_until(lambda: _roles_are(client, ["FOLLOWER", "FOLLOWER", "LEADER"]), 60,
                                 "one leader, two followers", interval=0.2)
                before = await roles(client)
                leader = next(p for p, r in before.items() if r == "LEADER")
                target = sorted(p for p, r in before.items() if r == "FOLLOWER")[0]
                moved = await client.submit(Request(
                    cmdType=wire_loc.TransferLeadership,
                    transferScmLeadershipRequest=wire.TransferLeadershipRequestProto(newLeaderId=target)))
                assert moved.HasField("transferScmLeadershipResponse")
                await wait_until(lambda: _leader_is(client, target), 30, f"{target} leading", interval=0.2)

                refused = (await client.submit(Request(
                    cmdType=wire_loc.DecommissionScm,
                    decommissionScmRequest=wire_loc.DecommissionScmRequestProto(scmId=target)))
                ).decommissionScmResponse
                assert not refused.success and "Cannot remove current leader" in refused.errorMsg
                removed = (await client.submit(Request(
                    cmdType=wire_loc.DecommissionScm,
                    decommissionScmRequest=wire_loc.DecommissionScmRequestProto(scmId=leader)))
                ).decommissionScmResponse
                assert removed.success, removed.errorMsg
                await wait_until(lambda: _member_count_is(client, 2), 30, f"{leader} out of the ring", interval=0.2)

        asyncio.run(scenario())
        out = subprocess.run([sys.executable, "-m", "scm_server.cli.main", "--conf", conf, "admin", "scm",
                              "finalizationstatus"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and out.stdout.strip() == "FINALIZATION_DONE", out.stdout + out.stderr
    finally:
        if (data / local_cluster.STATE_FILE).exists():
            local_cluster.down(data)


async def _roles_are(client: LocationClient, wanted: list[str]) -> bool:
    return sorted((await roles(client)).values()) == wanted


async def _leader_is(client: LocationClient, peer: str) -> bool:
    return (await roles(client)).get(peer) == "LEADER"


async def _member_count_is(client: LocationClient, n: int) -> bool:
    return len(await roles(client)) == n
