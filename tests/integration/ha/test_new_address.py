"""A member that comes back on a new IP address (every Kubernetes Pod restart), with real processes.

The SCMs, the datanode simulator and a client process know each other only by name
(``scmN.test``, see named_cluster.py). The leader is SIGKILLed, its name is pointed at a new
address, and it is restarted there (binding the new address). Then, measured from the moment the
restarted SCM serves:

* its peers reach it (Raft) and it catches up with the leader;
* the datanodes, whose channels were connected to the old address, re-register with it, so it
  leaves safemode;
* after leadership moves back to it, the client process, whose channel also pointed at the old
  address, is served by it.

Each must take about 2 s (the issue's goal; gRPC's default DNS re-resolution delay of 30 s made it
20-47 s). `admin scm roles` never lists the dead SCM as FOLLOWER meanwhile.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pytest

from scm_server.client import SCMClient, SCMClientConfig
from scm_server.client.ha_admin import HAAdminClient
from scm_server.client.retryable import is_answer_or_transient
from scm_server.proto import hdds_pb2

from .harness import TEST_SETTINGS, wait_caught_up, wait_until
from .named_cluster import NamedHACluster

PROBE = Path(__file__).with_name("name_probe.py")
BOUND_S = 5.0  # asserted; the figures printed are what matters (goal about 2 s, shared machine)


async def _registered_on(cluster: NamedHACluster, index: int, count: int) -> bool:
    """That SCM's own view (a local read at its current IP): ``count`` HEALTHY datanodes."""
    config = SCMClientConfig(max_retries=0, retry_interval=0.05, rpc_timeout=2, election_timeout=0.1)
    try:
        async with SCMClient([cluster.scms[index].client_address], config, local_read=True) as c:
            nodes = await c.query_nodes()
    except Exception as exc:
        if not is_answer_or_transient(exc):
            raise
        return False
    return sum(hdds_pb2.HEALTHY in n.nodeStates for n in nodes) >= count


async def _out_of_safemode(cluster: NamedHACluster, index: int) -> bool:
    try:
        return not await cluster.safe_mode_of(index)
    except Exception as exc:
        if not is_answer_or_transient(exc):
            raise
        return False


def _probe_lines(path: Path) -> list[dict[str, object]]:
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


async def test_member_back_on_a_new_address_is_reached_within_seconds(tmp_path: Path) -> None:
    settings = {**TEST_SETTINGS, "hdds.scm.safemode.min.datanode": "3"}
    cluster = NamedHACluster(tmp_path / "c", 3, settings=settings)
    helpers = []
    try:
        cluster.start_quorum()
        dn = cluster.spawn(
            [sys.executable, "-m", "scm_server.cli.main", "datanode-sim", "--count", "3", "--racks", "1",
             "--heartbeat-interval", "300ms", "--scm", ",".join(cluster.named("datanode_port"))],
            tmp_path / "datanodes.log",
        )
        helpers.append(dn)
        await cluster.wait_healthy_quorum(timeout=90)
        leader = await cluster.wait_leader(timeout=30)
        probe_log = tmp_path / "probe.log"
        probe = cluster.spawn(
            [sys.executable, str(PROBE), ",".join(cluster.named("client_port")), "180"], probe_log
        )
        helpers.append(probe)
        await wait_until(lambda: _served_by(probe_log, cluster.name(leader)), 60, "the probe client served by the leader")

        # the leader dies; it comes back under the same name on a new address
        old_host = cluster.scms[leader].host
        cluster.kill(leader, signal.SIGKILL)
        new_leader = await cluster.wait_leader(timeout=30, exclude=leader)

        async with HAAdminClient(cluster.grpc_addresses, rounds=1) as admin:
            roles = await admin.roles(timeout=1.0)
        dead = next(p for p in roles.peers if p.node_id == cluster.scms[leader].node_id)
        assert dead.role == "UNKNOWN" and not dead.answered, f"the dead SCM is listed as {dead.role}"

        new_host = cluster.move(leader, 100 + leader)
        assert new_host != old_host
        cluster.start_node(leader)
        cluster.wait_serving(leader, 60)
        serving = time.monotonic()
        await wait_caught_up(cluster, timeout=30)
        caught_up = time.monotonic() - serving
        await wait_until(lambda: _registered_on(cluster, leader, 3), 30, "datanodes re-registered with the moved SCM")
        registered = time.monotonic() - serving
        await wait_until(lambda: _out_of_safemode(cluster, leader), 30, "the moved SCM out of safemode")
        safemode_exit = time.monotonic() - serving

        # leadership back to the moved SCM: the client must reach it at its new address
        peer_id = next(v["scmId"] for v in await cluster.node_views() if v["index"] == leader)
        async with HAAdminClient([cluster.scms[new_leader].grpc_address], rounds=3) as admin:
            await admin.transfer(peer_id)
        moved_at = time.time()
        await wait_until(lambda: _served_by(probe_log, cluster.name(leader), after=moved_at), 30,
                         "the probe client served by the moved SCM")
        served = [e for e in _probe_lines(probe_log) if e["ok"] and float(e["t"]) >= moved_at  # type: ignore[arg-type]
                  and str(e["address"]).startswith(cluster.name(leader))]
        client_gap = float(served[0]["t"]) - moved_at  # type: ignore[arg-type]
        print(f"\nmoved {cluster.scms[leader].node_id} from {old_host} to {new_host}: caught up "
              f"{caught_up:.2f}s after it served, datanodes re-registered after {registered:.2f}s, out of "
              f"safemode after {safemode_exit:.2f}s; after the leadership transfer the client reached it in "
              f"{client_gap:.2f}s")
        assert caught_up < BOUND_S
        assert registered < BOUND_S
        assert client_gap < BOUND_S
    finally:
        for p in helpers:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in helpers:
            try:
                p.wait(timeout=10)
            except Exception:
                p.kill()
        cluster.stop_all()


async def _served_by(path: Path, name: str, after: float = 0.0) -> bool:
    if not path.exists():
        return False
    return any(
        e["ok"] and float(e["t"]) >= after and str(e["address"]).startswith(name)  # type: ignore[arg-type]
        for e in _probe_lines(path)
    )


pytestmark = [pytest.mark.processes, pytest.mark.timeout(240)]
