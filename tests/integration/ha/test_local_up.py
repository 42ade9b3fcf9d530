"""`local up|status|down` (scm_server.local.quorum): a 3-SCM quorum plus a datanode simulator
process started in the background, inspected from its recorded state, and stopped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scm_server.local import quorum as local_cluster

pytestmark = pytest.mark.processes  # whole-SCM scenarios: make test-slow


@pytest.mark.timeout(240)
def test_up_status_down(tmp_path: Path) -> None:
    data = tmp_path / "run-data"
    try:
        state_file = local_cluster.up(3, 3, data)
        assert state_file.exists()
        st = local_cluster.status(data)
        assert all(st["alive"].values())
        roles = st["roles"]
        assert not isinstance(roles, str), roles
        assert sorted(p.role for p in roles.peers) == ["FOLLOWER", "FOLLOWER", "LEADER"]
        conf = st["state"]["scms"][0]["conf_dir"]
        out = subprocess.run(
            [sys.executable, "-m", "scm_server.cli.main", "--conf", conf, "admin", "scm", "roles"],
            capture_output=True, text=True, timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.count(":FOLLOWER:") == 2 and out.stdout.count(":LEADER:") == 1
        with pytest.raises(RuntimeError, match="local down"):
            local_cluster.up(3, 3, data)
    finally:
        stopped = local_cluster.down(data) if (data / local_cluster.STATE_FILE).exists() else []
    assert set(stopped) == {"scm1", "scm2", "scm3", "datanodes"}
    assert not any(local_cluster.status(data)["alive"].values())


@pytest.mark.timeout(240)
def test_up_mixes_transports_and_a_container_closes(tmp_path: Path) -> None:
    """`local up` serves Ozone's protocols over Hadoop RPC next to gRPC: some simulated datanodes speak the
    datanode protocol over Hadoop RPC, and a container created through the admin API gets replicas on its
    pipeline's datanodes (as after a client's first write), so closing it over Hadoop RPC's location protocol
    reaches CLOSED."""
    import asyncio
    import re
    import urllib.request

    from scm_server import hadoop_ipc as codec
    from scm_server.client.hadoop_rpc import HadoopRpcConnection, RemoteError
    from scm_server.client.scm_client import SCMClient
    from scm_server.proto import hdds_pb2
    from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
    from scm_server.server.hadoop_rpc import datanode_translator, location_translator
    from tests.integration.ha.harness import wait_until

    data = tmp_path / "run-data"
    try:
        local_cluster.up(3, 4, data)
        state = local_cluster.status(data)["state"]
        admin_addresses = [s["client"] for s in state["scms"]]
        hadoop_client = [s["hadoop_rpc"]["client"] for s in state["scms"]]

        async def close_over_hadoop_rpc(cid: int) -> None:
            address, call_id = hadoop_client[0], 0
            for _ in range(6):  # follow ServerNotLeaderException hints as Ozone's failover proxy does
                conn = HadoopRpcConnection(address, location_translator.PROTOCOL)
                await conn.connect()
                try:
                    call_id += 1
                    req = wire_loc.ScmContainerLocationRequest(
                        cmdType=wire_loc.CloseContainer, scmCloseContainerRequest={"containerID": cid})
                    resp = wire_loc.ScmContainerLocationResponse.FromString(
                        await conn.call("submitRequest", req, call_id=call_id))
                    assert resp.scmCloseContainerResponse.status == wire_loc.SCMCloseContainerResponseProto.OK
                    return
                except RemoteError as exc:
                    assert exc.exception_class == codec.SERVER_NOT_LEADER, exc
                    address = codec.suggested_leader(exc.message) or hadoop_client[(hadoop_client.index(address) + 1) % 3]
                finally:
                    await conn.close()
            raise AssertionError("no SCM took the close over Hadoop RPC")

        async def scenario() -> None:
            async with SCMClient(admin_addresses) as admin:
                async def ready() -> bool:
                    nodes = await admin.query_nodes()
                    pipelines = await admin.list_pipelines()
                    return len(nodes) == 4 and not (await admin.in_safe_mode()).in_safe_mode and any(
                        p.state == hdds_pb2.PIPELINE_OPEN and p.factor == hdds_pb2.THREE for p in pipelines)

                await wait_until(ready, 120, "4 datanodes, safemode off, an OPEN RATIS/THREE pipeline", 0.5)
                cwp = await admin.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "test")
                cid = cwp.containerInfo.containerID
                members = {m.uuid for m in cwp.pipeline.members}

                async def replicas() -> bool:
                    _, held = await admin.get_container_with_pipeline(cid)
                    return {r.datanode.uuid for r in held} == members

                await wait_until(replicas, 30, f"replicas of container {cid} on its pipeline's datanodes", 0.3)
                await close_over_hadoop_rpc(cid)

                async def closed() -> bool:
                    info = await admin.get_container(cid)
                    return info.state in (hdds_pb2.CLOSED, hdds_pb2.DELETING, hdds_pb2.DELETED)  # empty: then deleted

                await wait_until(closed, 60, f"container {cid} CLOSED", 0.3)

        asyncio.run(scenario())
        # both datanode transports reached the SCMs: Hadoop RPC datanode calls counted on every SCM
        for s in state["scms"]:
            prom = urllib.request.urlopen(s["http"] + "/prom", timeout=10).read().decode()
            served = [float(v) for v in re.findall(
                r'scm_hadoop_rpc_requests_total\{answer="SUCCESS",method="submitRequest",protocol="'
                + re.escape(datanode_translator.PROTOCOL) + r'"\} ([0-9.e+]+)', prom)]
            assert served and served[0] > 0, f"{s['node_id']}: no datanode call over Hadoop RPC"
        log = (data / "datanodes.log").read_text(errors="replace")
        assert "Traceback" not in log, log[-3000:]
    finally:
        if (data / local_cluster.STATE_FILE).exists():
            local_cluster.down(data)
