"""A real SCM process with simulated datanodes over gRPC: the single-SCM core behaviours.

One SCM process per module (module-scoped fixture). The tests run in file order and build on
each other: safemode exit -> blocks -> a full container closes -> bad input is refused while SCM
keeps serving -> a datanode dies, the container report shows UNDER_REPLICATED, replication brings
every container back to HEALTHY -> a datanode is decommissioned.
"""

from __future__ import annotations

import json
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from scm_harness import ScmUnderTest, cli_json, run_cli

from scm_server.client.datanode_client import DatanodeProtocolClient
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.proto import hdds_pb2, scm_datanode_pb2

pytestmark = pytest.mark.processes  # whole-SCM scenarios: make test-slow

MB = 1024 * 1024
CONTAINER_SIZE = 64 * MB
BIG_CALL = 20000  # a big call that must not starve small ones
# ozone.scm.block.max.blocks.per.request of this module's SCM, and the size of the call whose deadline
# passes: far more work than fits in its 0.3 s deadline on any machine (about 10 us per block), so that
# stopping early is visible (a 20000-block call fits in 0.3 s on a quiet machine).
MAX_BLOCKS = 1_000_000


@pytest.fixture(scope="module")
def scm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScmUnderTest]:
    base: Path = tmp_path_factory.mktemp("scm-process")
    under_test = ScmUnderTest(
        base,
        datanodes=5,
        racks=2,
        container_size=CONTAINER_SIZE,
        settings={
            "ozone.scm.container.size": "64MB",
            "ozone.scm.block.size": "4MB",
            "ozone.scm.block.max.blocks.per.request": str(MAX_BLOCKS),
        },
    )
    try:
        yield under_test
    finally:
        under_test.close()


def test_leaves_safemode_and_opens_pipelines(scm: ScmUnderTest) -> None:
    scm.wait_ready()
    status = cli_json(scm.conf_dir, "admin", "safemode", "status", "--json")
    assert status["inSafeMode"] is False
    nodes = cli_json(scm.conf_dir, "admin", "datanode", "list", "--json")
    assert sorted(n["hostName"] for n in nodes) == [f"sim-dn-{i}" for i in range(5)]
    assert {n["healthState"] for n in nodes} == {"HEALTHY"}
    assert {n["networkLocation"] for n in nodes} == {"/rack1", "/rack2"}
    pipelines = cli_json(scm.conf_dir, "admin", "pipeline", "list", "--json")
    assert any(p["state"] == "PIPELINE_OPEN" and p["factor"] == "THREE" for p in pipelines)


def _allocate_and_write(scm: ScmUnderTest, blocks: int) -> list[int]:
    allocated = scm.client.allocate_block(4 * MB, blocks, hdds_pb2.RATIS, hdds_pb2.THREE, "it")
    assert len(allocated) == blocks
    ids = [(b.containerBlockID.containerID, b.containerBlockID.localID) for b in allocated]
    assert len(set(ids)) == blocks
    by_container: dict[int, hdds_pb2.Pipeline] = {}
    for b in allocated:
        by_container.setdefault(b.containerBlockID.containerID, b.pipeline)
        assert len(b.pipeline.members) == 3
    for cid, pipeline in by_container.items():
        written = scm.sim_thread.call(scm.sim.write_to_container(cid, 4 * MB, 2, pipeline))
        assert written == 3
    return sorted(by_container)


def test_allocate_blocks_and_containers_are_healthy(scm: ScmUnderTest) -> None:
    containers = _allocate_and_write(scm, 6)
    for cid in containers:
        info = cli_json(scm.conf_dir, "admin", "container", "info", str(cid), "--json")
        assert info["containerInfo"]["state"] == "OPEN"

    def replicas_reported() -> bool:
        return all(len(scm.client.get_container_with_pipeline(c)[1]) == 3 for c in containers)

    scm.wait(replicas_reported, 20, "3 replicas reported for every container")
    listed = cli_json(scm.conf_dir, "admin", "container", "list", "--json")
    assert set(containers) <= {int(c["containerID"]) for c in listed}

    def healthy() -> bool:
        stats = scm.stats()
        return stats.get("HEALTHY", 0) >= len(containers) and stats.get("UNDER_REPLICATED", 0) == 0

    scm.wait(healthy, 20, "container report showing the containers HEALTHY")
    stats = scm.report()["stats"]
    assert stats["HEALTHY"] >= len(containers) and stats.get("UNDER_REPLICATED", 0) == 0


def test_full_container_gets_closed(scm: ScmUnderTest) -> None:
    blocks = scm.client.allocate_block(4 * MB, 1, hdds_pb2.RATIS, hdds_pb2.THREE, "it")
    cid = blocks[0].containerBlockID.containerID
    scm.sim_thread.call(scm.sim.write_to_container(cid, int(CONTAINER_SIZE * 0.95), 10, blocks[0].pipeline))

    def closing() -> bool:
        return scm.client.get_container(cid).state in (hdds_pb2.CLOSING, hdds_pb2.CLOSED)

    scm.wait(closing, 20, f"container {cid} closing after its replicas passed 90% of the container size")
    scm.wait(lambda: scm.client.get_container(cid).state == hdds_pb2.CLOSED, 30, f"container {cid} CLOSED")


def test_malformed_protobuf_is_rejected_and_scm_keeps_serving(scm: ScmUnderTest) -> None:
    channel = grpc.insecure_channel(scm.scm.block_address)
    call = channel.unary_unary("/hadoop.hdds.ScmBlockLocationProtocolService/AllocateScmBlock")
    with pytest.raises(grpc.RpcError) as info:
        call(b"\x08\x96\x01\x12\xff\xff not a protobuf", timeout=10)
    err = info.value
    assert err.code() is grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    assert "malformed AllocateScmBlockRequestProto" in err.details()  # type: ignore[attr-defined]
    channel.close()
    dn_channel = grpc.insecure_channel(scm.scm.datanode_address)
    dn_call = dn_channel.unary_unary("/hadoop.hdds.StorageContainerDatanodeProtocolService/SendHeartbeat")
    with pytest.raises(grpc.RpcError) as info2:
        dn_call(b"\xff" * 32, timeout=10)
    assert info2.value.code() is grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    dn_channel.close()
    assert len(scm.client.allocate_block(MB, 1, hdds_pb2.RATIS, hdds_pb2.THREE, "it")) == 1
    scm.check_alive()


def test_unknown_container_is_container_not_found(scm: ScmUnderTest) -> None:
    with pytest.raises(SCMException) as info:
        scm.client.get_container(987654321)
    assert info.value.result is ResultCodes.CONTAINER_NOT_FOUND
    result = run_cli(scm.conf_dir, "admin", "container", "info", "987654321")
    assert result.returncode == 1
    assert "CONTAINER_NOT_FOUND" in result.stderr and "Traceback" not in result.stderr


def test_oversize_block_request_is_invalid_block_size(scm: ScmUnderTest) -> None:
    for size in (CONTAINER_SIZE + 1, 0):
        with pytest.raises(SCMException) as info:
            scm.client.allocate_block(size, 1, hdds_pb2.RATIS, hdds_pb2.THREE, "it")
        assert info.value.result is ResultCodes.INVALID_BLOCK_SIZE


def test_wrong_cluster_id_register_is_refused(scm: ScmUnderTest) -> None:
    async def register() -> scm_datanode_pb2.SCMRegisteredResponseProto:
        client = DatanodeProtocolClient(scm.scm.datanode_address)
        try:
            return await client.register(
                scm_datanode_pb2.SCMRegisterRequestProto(
                    datanodeDetails=hdds_pb2.DatanodeDetailsProto(
                        uuid="00000000-0000-0000-0000-0000000000ff",
                        ipAddress="127.0.0.1",
                        hostName="intruder",
                        networkLocation="/rack1",
                    ),
                    nodeReport=scm_datanode_pb2.NodeReportProto(),
                    containerReport=scm_datanode_pb2.ContainerReportsProto(),
                    pipelineReports=scm_datanode_pb2.PipelineReportsProto(),
                    clusterID="CID-00000000-0000-0000-0000-000000000000",
                )
            )
        finally:
            await client.close()

    try:
        resp = scm.sim_thread.call(register())
    except SCMException as exc:  # refusing with an error status is acceptable too, if it says why
        assert exc.result in (ResultCodes.INVALID_CLUSTER_ID, ResultCodes.INVALID_REQUEST)
        assert "cluster" in str(exc).lower()
    else:
        assert resp.errorCode == scm_datanode_pb2.SCMRegisteredResponseProto.errorNodeNotPermitted
        assert "cluster" in resp.errorMessage.lower()
    hosts = {n.nodeID.hostName for n in scm.client.query_nodes()}
    assert "intruder" not in hosts


def test_web_endpoints(scm: ScmUnderTest) -> None:
    prom = scm.cluster.fetch(0, "/prom")
    assert "scm_rpc_requests_total" in prom
    assert "scm_datanode_full_container_reports_total" in prom

    # /ready answers 503 until the SCM is out of safemode: wait for it (this test may run alone, before the
    # module's other tests have registered datanodes and waited for safemode exit)
    def ready() -> bool:
        try:
            return '"ready": true' in scm.cluster.fetch(0, "/ready")
        except urllib.error.HTTPError as exc:
            assert exc.code == 503, exc
            return False

    scm.wait(ready, 60, "/ready answers ready")
    page = scm.cluster.fetch(0, "/")
    assert "Storage Container Manager" in page and "sim-dn-0" in page


def _close_all_open(scm: ScmUnderTest) -> list[int]:
    containers, _ = scm.client.list_containers(0, 1000, hdds_pb2.OPEN)
    ids = [c.containerID for c in containers]
    for cid in ids:
        result = run_cli(scm.conf_dir, "admin", "container", "close", str(cid))
        assert result.returncode == 0, result.stderr

    def all_closed() -> bool:
        return all(scm.client.get_container(c).state == hdds_pb2.CLOSED for c in ids)

    scm.wait(all_closed, 30, f"containers {ids} CLOSED after close commands")
    return ids


def test_dead_datanode_under_replicated_then_healthy(scm: ScmUnderTest) -> None:
    _allocate_and_write(scm, 4)
    assert _close_all_open(scm)
    closed = [c.containerID for c in scm.client.list_containers(0, 1000, hdds_pb2.CLOSED)[0]]
    # The victim holds replicas of at least one closed container.
    victim = scm.sim_thread.run(
        lambda: next(dn for dn in scm.sim.datanodes if dn.alive and any(c in dn.containers for c in closed))
    )
    affected = scm.sim_thread.run(lambda: sorted(c for c in closed if c in victim.containers))
    # Datanodes copy slowly for a while, so the under-replicated state is observable through the
    # CLI (a subprocess per poll); then copying resumes and Replication Manager's commands complete.
    scm.sim_thread.run(scm.sim.hold_replication)
    scm.sim_thread.call(scm.sim.kill(victim.hostname))

    scm.wait(lambda: scm.stats().get("UNDER_REPLICATED", 0) > 0, 30, "UNDER_REPLICATED after a datanode died")
    report = scm.report()  # the real CLI: `ozone-scm admin container report --json`
    assert report["stats"]["UNDER_REPLICATED"] > 0
    assert set(report["samples"].get("UNDER_REPLICATED", affected)) <= set(closed)
    text = run_cli(scm.conf_dir, "admin", "container", "report").stdout
    assert "UNDER_REPLICATED: 0" not in text and "Container Health Summary" in text
    scm.wait(
        lambda: scm.sim_thread.run(lambda: any(dn.deferred for dn in scm.sim.live())),
        20,
        "replicate commands from Replication Manager reaching the datanodes",
    )
    scm.sim_thread.run(scm.sim.release_replication)

    def live_holders(cid: int) -> list[str]:
        return scm.sim_thread.run(lambda: [dn.hostname for dn, _ in scm.sim.replicas_of(cid)])

    def healthy_again() -> bool:
        stats = scm.stats()
        if stats.get("UNDER_REPLICATED", 0) or stats.get("MISSING", 0):
            return False
        return all(len(live_holders(c)) == 3 for c in affected)

    scm.wait(healthy_again, 60, "replication bringing every container back to HEALTHY with 3 live replicas")
    for cid in affected:
        assert victim.hostname not in live_holders(cid)
        replicas = scm.client.get_container_with_pipeline(cid)[1]
        assert victim.uuid not in {r.datanode.uuid for r in replicas}
    nodes = {n["hostName"]: n for n in cli_json(scm.conf_dir, "admin", "datanode", "list", "--json")}
    assert nodes[victim.hostname]["healthState"] == "DEAD"


def test_decommission_a_node(scm: ScmUnderTest) -> None:
    target = scm.sim_thread.run(lambda: next(dn for dn in reversed(scm.sim.datanodes) if dn.alive))
    result = run_cli(scm.conf_dir, "admin", "datanode", "decommission", target.hostname)
    assert result.returncode == 0, result.stderr

    scm.wait(
        lambda: scm.op_state(target.hostname) in ("DECOMMISSIONING", "DECOMMISSIONED"), 20, "DECOMMISSIONING"
    )
    # The datanode got SetNodeOperationalState from the leader and persists/echoes it.
    scm.wait(
        lambda: (
            scm.sim_thread.run(lambda: target.op_state) in (hdds_pb2.DECOMMISSIONING, hdds_pb2.DECOMMISSIONED)
        ),
        20,
        "the datanode to persist its new operational state",
    )
    scm.wait(
        lambda: scm.op_state(target.hostname) == "DECOMMISSIONED",
        60,
        "DECOMMISSIONED once replicas are copied",
    )
    nodes = {n["hostName"]: n for n in cli_json(scm.conf_dir, "admin", "datanode", "list", "--json")}
    assert nodes[target.hostname]["opState"] == "DECOMMISSIONED"


def test_maintenance_then_recommission(scm: ScmUnderTest) -> None:
    target = scm.sim_thread.run(
        lambda: next(dn for dn in scm.sim.datanodes if dn.alive and dn.op_state == hdds_pb2.IN_SERVICE)
    )
    result = run_cli(scm.conf_dir, "admin", "datanode", "maintenance", target.hostname, "--end", "1")
    assert result.returncode == 0, result.stderr
    scm.wait(
        lambda: scm.op_state(target.hostname) in ("ENTERING_MAINTENANCE", "IN_MAINTENANCE"), 20, "maintenance"
    )
    scm.wait(
        lambda: (
            scm.sim_thread.run(lambda: target.op_state)
            in (hdds_pb2.ENTERING_MAINTENANCE, hdds_pb2.IN_MAINTENANCE)
        ),
        20,
        "the datanode to persist the maintenance state",
    )
    result = run_cli(scm.conf_dir, "admin", "datanode", "recommission", target.hostname)
    assert result.returncode == 0, result.stderr
    scm.wait(lambda: scm.op_state(target.hostname) == "IN_SERVICE", 20, "IN_SERVICE after recommission")
    scm.wait(
        lambda: scm.sim_thread.run(lambda: target.op_state) == hdds_pb2.IN_SERVICE,
        20,
        "the datanode to persist IN_SERVICE",
    )
    bad = run_cli(scm.conf_dir, "admin", "datanode", "decommission", "no-such-host.example")
    assert bad.returncode == 1
    assert "no-such-host.example" in bad.stdout + bad.stderr and "Traceback" not in bad.stderr


def test_freon_stb_allocate_blocks(scm: ScmUnderTest) -> None:
    result = run_cli(
        scm.conf_dir,
        "freon",
        "stb",
        "--benchmark",
        "AllocateBlocks",
        "--num-blocks",
        "200",
        "--num-threads",
        "4",
        "--num-datanodes",
        "3",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    rows = {r["mode"]: r for r in json.loads(result.stdout)}
    assert rows["AllocateBlocks"]["operations"] == 200
    assert rows["AllocateBlocks"]["ops_per_second"] > 0
    assert rows["AllocateBlocks"]["latency_ms"]["p99"] >= rows["AllocateBlocks"]["latency_ms"]["p50"]


def test_datanode_admin_by_host_refuses_an_ambiguous_host(scm: ScmUnderTest) -> None:
    """Every simulated datanode runs on 127.0.0.1: the bare address names them all, so it is refused
    (one line on stderr, nothing changed); host:port or a UUID names one."""
    before = {n["uuid"]: n["opState"] for n in cli_json(scm.conf_dir, "admin", "datanode", "list", "--json")}
    assert len(before) >= 2
    for action in ("decommission", "maintenance", "recommission"):
        result = run_cli(scm.conf_dir, "admin", "datanode", action, "127.0.0.1")
        assert result.returncode == 1, result.stdout
        assert result.stdout == ""
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        assert lines[0].startswith("Error: cannot ") and "127.0.0.1" in lines[0]
        assert f"{len(before)} datanodes match; name one by UUID or host:port" in lines[0]
    after = {n["uuid"]: n["opState"] for n in cli_json(scm.conf_dir, "admin", "datanode", "list", "--json")}
    assert after == before, "a refused request changed a datanode"

    unknown = run_cli(scm.conf_dir, "admin", "datanode", "decommission", "no-such-host.example")
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr.strip().splitlines() == [
        "Error: cannot decommission no-such-host.example: no registered datanode has this hostname, IP "
        "address, host:port or UUID"
    ]

    # host:port picks one datanode among those on the same address (ports of every datanode SCM knows,
    # including the ones `freon stb` registered earlier)
    taken = [p.value for n in scm.client.query_nodes() for p in n.nodeID.ports]
    target = scm.sim_thread.run(
        lambda: next(
            dn
            for dn in scm.sim.datanodes
            if dn.alive
            and dn.op_state == hdds_pb2.IN_SERVICE
            and taken.count(dn.details().ports[0].value) == 1
        )
    )
    port = target.details().ports[0].value
    ok = run_cli(scm.conf_dir, "admin", "datanode", "maintenance", f"127.0.0.1:{port}")
    assert ok.returncode == 0, ok.stderr
    scm.wait(
        lambda: scm.op_state(target.hostname) in ("ENTERING_MAINTENANCE", "IN_MAINTENANCE"), 20, "maintenance"
    )
    others = {
        u: s
        for u, s in {
            n["uuid"]: n["opState"] for n in cli_json(scm.conf_dir, "admin", "datanode", "list", "--json")
        }.items()
        if u != target.uuid
    }
    assert others == {u: s for u, s in before.items() if u != target.uuid}
    back = run_cli(scm.conf_dir, "admin", "datanode", "recommission", target.uuid)
    assert back.returncode == 0, back.stderr
    scm.wait(lambda: scm.op_state(target.hostname) == "IN_SERVICE", 20, "IN_SERVICE after recommission")


def test_ldb_refuses_a_directory_that_is_not_an_scm_db(scm: ScmUnderTest, tmp_path: Path) -> None:
    import plyvel

    db_dir = scm.scm.metadata_dir / "scm.db"
    ok = run_cli(scm.conf_dir, "debug", "ldb", f"--db={db_dir}", "ls")
    assert ok.returncode == 0 and "containers" in ok.stdout, ok.stderr
    raft_like = tmp_path / "raft-log"
    db = plyvel.DB(str(raft_like), create_if_missing=True)
    db.put(b"m:version", b"1")
    db.put(b"l:00000001", b"entry")
    db.close()
    empty = tmp_path / "empty-db"
    plyvel.DB(str(empty), create_if_missing=True).close()
    for bad, why in (
        (raft_like, "is a LevelDB database but not an SCM DB"),
        (empty, "is an empty LevelDB database"),
    ):
        for cmd in (["ls"], ["scan", "--column_family=containers"]):
            result = run_cli(scm.conf_dir, "debug", "ldb", f"--db={bad}", *cmd)
            assert result.returncode == 1 and result.stdout == "", result.stdout
            assert why in result.stderr and "Traceback" not in result.stderr, result.stderr
    # nothing was written to the refused databases
    db = plyvel.DB(str(raft_like))
    assert sorted(k for k, _ in db) == [b"l:00000001", b"m:version"]
    db.close()


def _prom_count(scm: ScmUnderTest, method: str, result: str) -> int:
    import urllib.request

    with urllib.request.urlopen(f"{scm.scm.http_url}/prom", timeout=5) as resp:
        text = resp.read().decode()
    total = 0
    for line in text.splitlines():
        if (
            line.startswith("scm_rpc_requests_total{")
            and f'method="{method}"' in line
            and f'result="{result}"' in line
        ):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


async def test_overload_bounded_requests_interleave_and_honour_deadlines(scm: ScmUnderTest) -> None:
    """Issue 11, item 3: an upper bound on blocks per call; a big call does not starve small ones;
    a call whose deadline passes stops working on the server."""
    import asyncio

    import grpc
    import grpc.aio

    from scm_server.client import SCMClient, SCMClientConfig
    from scm_server.proto import scm_client_pb2

    config = SCMClientConfig(max_retries=3, retry_interval=0.1, rpc_timeout=120)
    address = scm.cluster.client_addresses[0]
    async with SCMClient([address], config) as big, SCMClient([address], config) as small:
        ready_by = asyncio.get_running_loop().time() + 60
        while (await small.in_safe_mode()).in_safe_mode or not any(
            p.state == hdds_pb2.PIPELINE_OPEN and p.factor == hdds_pb2.THREE
            for p in await small.list_pipelines()
        ):
            assert asyncio.get_running_loop().time() < ready_by, "SCM not ready"
            await asyncio.sleep(0.2)
        for n in (2**31, MAX_BLOCKS + 1):
            with pytest.raises(SCMException) as info:
                await big.allocate_block(4 * MB, n)
            assert info.value.result is ResultCodes.INVALID_REQUEST
            assert f"numBlocks={n}" in str(info.value) and "ozone.scm.block.max.blocks.per.request" in str(
                info.value
            )
        assert big.failovers == 0  # refused at once, never retried

        # a big call (the largest allowed) runs while single-block calls keep being answered
        first = (await small.allocate_block(4 * MB, 1))[0].containerBlockID.localID
        call = asyncio.ensure_future(big.allocate_block(4 * MB, BIG_CALL))
        answered_meanwhile = 0
        while not call.done():
            await small.allocate_block(4 * MB, 1)
            answered_meanwhile += int(not call.done())
        blocks = call.result()
        assert len(blocks) == BIG_CALL and len({b.containerBlockID.localID for b in blocks}) == BIG_CALL
        print(f"\n{answered_meanwhile} single-block calls answered during one {BIG_CALL}-block call")
        assert answered_meanwhile >= 10, "single-block calls waited for the big call"

        # a big call whose deadline passes is cancelled on the server: it stops handing out IDs
        cancelled_before = _prom_count(scm, "AllocateScmBlock", "CANCELLED")
        before = (await small.allocate_block(4 * MB, 1))[0].containerBlockID.localID
        channel = grpc.aio.insecure_channel(address)
        stub = channel.unary_unary(
            "/hadoop.hdds.ScmBlockLocationProtocolService/AllocateScmBlock",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=scm_client_pb2.AllocateScmBlockResponseProto.FromString,
        )
        req = scm_client_pb2.AllocateScmBlockRequestProto(
            size=4 * MB, numBlocks=MAX_BLOCKS, type=hdds_pb2.RATIS, factor=hdds_pb2.THREE, owner="deadline"
        )
        with pytest.raises(grpc.aio.AioRpcError) as rpc:
            await stub(req, timeout=0.3)
        assert rpc.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        await channel.close()

        async def server_gave_up() -> bool:
            return _prom_count(scm, "AllocateScmBlock", "CANCELLED") > cancelled_before

        deadline = asyncio.get_running_loop().time() + 30
        while not await server_gave_up():
            assert asyncio.get_running_loop().time() < deadline, "the server never gave up the expired call"
            await asyncio.sleep(0.1)
        after = (await small.allocate_block(4 * MB, 1))[0].containerBlockID.localID
        print(f"the expired {MAX_BLOCKS}-block call used {after - before} IDs before it stopped")
        assert after - before < MAX_BLOCKS // 4, (
            f"the expired call kept allocating ({after - before} IDs used)"
        )
        assert before > first
