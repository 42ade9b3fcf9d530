"""The audit export end to end in one process: a real SCM facade (stub HA), the real gRPC servicer on
loopback, the real client writing Parquet, read back with pyarrow.

What must hold: the files hold exactly the SCM's state at the header's applied index (containers
and pipelines as stored, replicas and datanodes as reported), the ReplicationManager verdicts are
SCM's own check over that state, the digests equal ``GetTableDigests``' for the same state, and a
capture is a point in time: writes and reports after it do not leak into the stream.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pyarrow.parquet as pq
import pytest
from scm_state_harness import FakeDatanode, bring_up, make_datanodes, make_scm, replica

from scm_server import audit_format as fmt
from scm_server.client import audit_export_writer as client
from scm_server.container.container_state_manager import CLOSE, FINALIZE
from scm_server.exceptions import ResultCodes, SCMError, SCMException
from scm_server.ha.inter_scm_service import table_digests
from scm_server.proto import hdds_pb2, scm_audit_pb2
from scm_server.scm import StorageContainerManager
from scm_server.server import audit_export_service as server
from scm_server.server import endpoints
from scm_server.server.grpc_services import RpcMetrics

R = hdds_pb2.ContainerReplicaProto


async def serve(scm: StorageContainerManager) -> tuple[grpc.aio.Server, str]:
    srv = grpc.aio.server()
    svc = server.AuditExportService(scm, endpoints.Protocol.CLIENT, lambda _k: None, RpcMetrics(None))
    srv.add_generic_rpc_handlers((svc.generic_handler(),))
    port = srv.add_insecure_port("127.0.0.1:0")
    await srv.start()
    return srv, f"127.0.0.1:{port}"


async def closed_container(scm: StorageContainerManager) -> int:
    info = await scm.container_manager.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    sm = scm.container_state_manager
    await sm.update_container_state(info.containerID, FINALIZE, 1)
    await sm.update_container_state(info.containerID, CLOSE, 2)
    return info.containerID


async def cluster(tmp_path: Path) -> tuple[StorageContainerManager, list[FakeDatanode], list[int]]:
    scm = await make_scm(tmp_path / "scm")
    dns = make_datanodes(6, racks=2)
    await bring_up(scm, dns)
    cids = [await closed_container(scm) for _ in range(4)]
    # c0 healthy on 3 nodes over 2 racks, c1 on 2 nodes (under-replicated), c2 on 4 (over),
    # c3 with no replica (missing).
    layout = {cids[0]: [0, 1, 2], cids[1]: [0, 1], cids[2]: [0, 1, 2, 3]}
    for cid, holders in layout.items():
        for i in holders:
            dns[i].replicas[cid] = replica(cid, R.CLOSED, keys=7, bcsid=9, origin=dns[i].uuid, used=4096)
    for dn in dns:
        await dn.heartbeat(scm)
    return scm, dns, cids


def read(directory: Path, table: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(directory / fmt.file_name(table)).to_pylist()
    return rows


async def test_export_holds_the_scm_state_and_its_own_verdicts(tmp_path: Path) -> None:
    scm, dns, cids = await cluster(tmp_path)
    srv, address = await serve(scm)
    try:
        out = tmp_path / "export"
        results = await client.export([address], out, page_size=2)  # tiny pages: many chunks
        assert [r.path for r in results] == [out.resolve()]
        manifest = fmt.parse_manifest(json.loads((out / fmt.MANIFEST).read_text()), "test")
        applied = scm.transaction_buffer.latest_trx_info()
        assert (manifest.applied_term, manifest.applied_index) == (applied.term, applied.index)
        assert manifest.cluster_id == scm.storage_config.cluster_id
        assert manifest.scm_id == scm.storage_config.scm_id
        assert manifest.is_leader and manifest.consistency == "local"

        containers = read(out, fmt.CONTAINERS)
        assert [c["container_id"] for c in containers] == sorted(scm.container_state_manager.container_ids())
        for row in containers:
            stored = scm.container_state_manager.get_container(row["container_id"])
            assert row["lifecycle_state"] == hdds_pb2.LifeCycleState.Name(stored.state)
            assert (row["sequence_id"], row["used_bytes"], row["owner"]) == (stored.sequenceId, stored.usedBytes, stored.owner)
            assert row["pipeline_id"] == stored.pipelineID.id
        replicas = read(out, fmt.REPLICAS)
        expected = sorted(
            (cid, r.datanode_uuid) for cid, rs in scm.container_manager.all_replicas().items() for r in rs
        )
        assert sorted((r["container_id"], r["datanode_uuid"]) for r in replicas) == expected
        assert {r["replica_state"] for r in replicas if r["container_id"] in cids} == {"CLOSED"}
        assert {(r["bcsid"], r["key_count"], r["used_bytes"]) for r in replicas if r["container_id"] in cids} == {(9, 7, 4096)}
        datanodes = read(out, fmt.DATANODES)
        assert sorted(d["datanode_uuid"] for d in datanodes) == sorted(dn.uuid for dn in dns)
        assert {d["rack"] for d in datanodes} == {"/rack1", "/rack2"}
        assert {d["health"] for d in datanodes} == {"HEALTHY"}
        pipelines = read(out, fmt.PIPELINES)
        assert sorted(p["pipeline_id"] for p in pipelines) == sorted(p.id.id for p in scm.pipeline_manager.get_pipelines())
        for table in fmt.TABLES:
            rows = read(out, table)
            assert len(rows) == manifest.tables[table].rows
            assert {(r["scm_id"], r["cluster_id"], r["applied_index"]) for r in rows} <= {
                (manifest.scm_id, manifest.cluster_id, manifest.applied_index)
            }
            meta = pq.read_schema(out / fmt.file_name(table)).metadata
            assert meta[fmt.META_APPLIED_INDEX.encode()] == str(manifest.applied_index).encode()

        # The verdicts are the ReplicationManager's own, over the same state.
        await scm.replication_manager.run_once()
        rm = scm.replication_manager.last_results
        verdicts = {v["container_id"]: v for v in read(out, fmt.RM_VERDICTS)}
        assert set(verdicts) == set(rm)
        for cid, result in rm.items():
            assert verdicts[cid]["health"] == result.health.value
            assert verdicts[cid]["states"] == sorted(s.value for s in result.states)
        assert [verdicts[c]["health"] for c in cids] == ["HEALTHY", "UNDER_REPLICATED", "OVER_REPLICATED", "MISSING"]

        # Since when this SCM holds soft state, and each datanode's first full report since then (format 2; 3 adds EC).
        assert manifest.format_version == 3 and manifest.started_at_ms == scm.container_manager.started_wall_ms > 0
        assert all(d["first_report_ms"] >= manifest.started_at_ms for d in datanodes)
        assert manifest.replication_manager["state"] == "RUNNING"
        assert manifest.replication_manager["intervalMs"] == int(scm.replication_manager.interval.total_seconds() * 1000)

        # Digests of the replicated column families: the same as GetTableDigests computes.
        assert {k: v["sha256"] for k, v in manifest.digests.items()} == {
            d.table: d.sha256 for d in table_digests(scm.metadata_store)
        }
    finally:
        await srv.stop(None)
        await scm.stop()


async def test_a_capture_is_a_point_in_time(tmp_path: Path) -> None:
    scm, dns, cids = await cluster(tmp_path)
    try:
        snap = server.capture(scm)
        before = snap.applied
        # After the capture: a replicated write, a new replica, a lost replica, a node going away.
        await closed_container(scm)
        dns[4].replicas[cids[1]] = replica(cids[1], R.CLOSED, origin=dns[4].uuid)
        del dns[0].replicas[cids[0]]
        for dn in dns:
            await dn.heartbeat(scm)
        scm.node_manager.require_node(dns[5].uuid).health = hdds_pb2.DEAD
        assert scm.transaction_buffer.latest_trx_info().index > before.index

        chunks = [c async for c in server.stream_snapshot(snap, page_size=1000)]
        header = chunks[0].header
        assert header.transactionInfo.index == before.index
        containers = [r.containerID for c in chunks if c.HasField("containers") for r in c.containers.rows]
        assert containers == cids  # not the one created after the capture
        holders = {
            (r.containerID, r.datanodeUuid) for c in chunks if c.HasField("replicas") for r in c.replicas.rows
        }
        assert (cids[0], dns[0].uuid) in holders and (cids[1], dns[4].uuid) not in holders
        health = {r.uuid: r.health for c in chunks if c.HasField("datanodes") for r in c.datanodes.rows}
        assert health[dns[5].uuid] == hdds_pb2.HEALTHY
        verdicts = {r.containerID: r.health for c in chunks if c.HasField("verdicts") for r in c.verdicts.rows}
        assert verdicts[cids[1]] == "UNDER_REPLICATED"  # as it was at the capture
        snap.release()
    finally:
        await scm.stop()


async def test_barrier_captures_at_its_own_index_and_expires(tmp_path: Path) -> None:
    scm, _dns, _cids = await cluster(tmp_path)
    try:
        registry = server.registry_for(scm)
        resp = await server.create_barrier(scm, ttl_seconds=60)
        snap = registry.get(resp.barrierId)
        assert snap is not None and snap.consistency == "barrier"
        assert snap.applied.index == resp.transactionInfo.index == scm.transaction_buffer.latest_trx_info().index
        await closed_container(scm)  # later writes do not move the capture
        assert registry.get(resp.barrierId) is snap and snap.applied.index == resp.transactionInfo.index
        # The DB snapshot holds exactly the containers at the barrier.
        got = await server.registry_for(scm).wait_for(resp.barrierId, resp.transactionInfo.index, 1)
        assert got is snap
        # A barrier applied after its expiry (log replay long after) captures nothing.
        await scm.audit_barrier_state_manager.audit_barrier("old", scm.clock.wall_ms() - 1)
        assert registry.get("old") is None
        # Unknown barrier whose index this SCM already passed: fails at once, naming why.
        with pytest.raises(SCMException) as err:
            await registry.wait_for("never", 1, 30)
        assert err.value.result is ResultCodes.INVALID_REQUEST and "skipped" in str(err.value)
        # Captures are bounded and released after their TTL.
        for _ in range(server.MAX_CAPTURES + 2):
            await server.create_barrier(scm, ttl_seconds=60)
        assert len(registry) == server.MAX_CAPTURES
        scm.clock.advance(61)  # type: ignore[attr-defined]
        registry.expire()
        assert len(registry) == 0 and snap.released
    finally:
        await scm.stop()


async def test_bad_export_requests_are_refused_clearly(tmp_path: Path) -> None:
    scm, _dns, _cids = await cluster(tmp_path)
    srv, address = await serve(scm)
    try:
        for request, code, words in (
            (scm_audit_pb2.AuditExportRequestProto(pageSize=0), ResultCodes.INVALID_REQUEST, "pageSize"),
            (scm_audit_pb2.AuditExportRequestProto(clusterId="CID-other"), ResultCodes.INVALID_CLUSTER_ID, "CID-other"),
            (scm_audit_pb2.AuditExportRequestProto(barrierId="nope", waitSeconds=0.2), ResultCodes.TIMEOUT, "nope"),
        ):
            with pytest.raises(SCMException) as err:
                await client.stream_to_dir(
                    address, tmp_path / f"x-{code.value}", barrier_id=request.barrierId,
                    cluster_id=request.clusterId, page_size=request.pageSize, wait_seconds=request.waitSeconds,
                )
            assert err.value.result is code and words in str(err.value)
        # bytes that are no AuditExportRequestProto at all: refused, and the SCM keeps serving
        async with grpc.aio.insecure_channel(address) as channel:
            call = channel.unary_stream(
                "/hadoop.hdds.scm.audit.SCMAuditProtocolService/ExportSnapshot", request_serializer=None, response_deserializer=None,
            )
            with pytest.raises(grpc.aio.AioRpcError) as bad:
                async for _ in call(b"\xff\xff\xff\x0f garbage", timeout=5):
                    pass
            assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "malformed AuditExportRequestProto for" in (bad.value.details() or "")
            assert dict(bad.value.trailing_metadata() or ()).get("x-scm-result") == "INVALID_REQUEST"
        await client.stream_to_dir(address, tmp_path / "after-garbage")
    finally:
        await srv.stop(None)
        await scm.stop()


def test_output_directory_rules(tmp_path: Path) -> None:
    client.check_output_dir(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    client.check_output_dir(tmp_path / "empty")
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(client.AuditExportError, match="not empty"):
        client.check_output_dir(other)
    # A volume's mount point (a Pod's emptyDir) cannot be moved aside: refused up front, naming a way out.
    with pytest.raises(client.AuditExportError, match=r"/proc is a mount point.*e\.g\. /proc/export"):
        client.check_output_dir(Path("/proc"))
    # A previous export is replaced only once the new one is complete.
    old = tmp_path / "export"
    old.mkdir()
    (old / fmt.MANIFEST).write_text("{}")
    client.check_output_dir(old)
    new = tmp_path / ".export.tmp"
    new.mkdir()
    (new / fmt.MANIFEST).write_text('{"new": true}')
    client.publish(new, old)
    assert json.loads((old / fmt.MANIFEST).read_text()) == {"new": True}
    assert not new.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".export.old")] == []


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scm_server.cli.main", *args], capture_output=True, text=True, timeout=120
    )


def _one_line(result: subprocess.CompletedProcess[str], *words: str) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0 and len(lines) == 1, result.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


async def test_bad_out_paths_and_options_are_refused_in_one_line_leaving_nothing_behind(tmp_path: Path) -> None:
    scm, _dns, _cids = await cluster(tmp_path)
    srv, address = await serve(scm)
    try:
        # --out under a regular file: refused before the SCM is asked, nothing created.
        plain = tmp_path / "plain.txt"
        plain.write_text("mine")
        with pytest.raises(client.AuditExportError, match=rf"--out {plain}/a/out: {plain} is a file, not a directory"):
            await client.export([address], plain / "a" / "out")
        assert plain.read_text() == "mine"
        # A read-only place (root may write nearly anywhere, but not in sysfs): the directory and the fix named.
        with pytest.raises(client.AuditExportError, match=r"cannot create directory /sys/audit-test-[0-9a-f]+: .*choose a directory you can write to"):
            await client.export([address], Path(f"/sys/audit-test-{uuid.uuid4().hex[:6]}") / "out")
        # A negative --wait would never wait for the barrier.
        with pytest.raises(client.AuditExportError, match=r"--wait -1 is not a number of seconds >= 0"):
            await client.export([address], tmp_path / "w", wait_seconds=-1)
        assert not (tmp_path / "w").exists()
        # A failed export into a new directory tree removes the directories it created, and only those.
        (tmp_path / "keep").mkdir()
        (tmp_path / "keep" / "note").write_text("x")
        with socket.socket() as s:  # bound, never listening: connection refused
            s.bind(("127.0.0.1", 0))
            dead = f"127.0.0.1:{s.getsockname()[1]}"
            with pytest.raises(SCMError):
                await client.export([dead], tmp_path / "keep" / "new" / "deeper" / "out")
            with pytest.raises(SCMError):
                await client.export([dead], tmp_path / "fresh" / "out", all_scms=True)
        assert sorted(p.name for p in (tmp_path / "keep").iterdir()) == ["note"]
        assert not (tmp_path / "fresh").exists()
        # A good export into a new tree keeps it.
        await client.export([address], tmp_path / "fresh" / "out")
        assert (tmp_path / "fresh" / "out" / fmt.MANIFEST).is_file()
    finally:
        await srv.stop(None)
        await scm.stop()


def test_the_export_cli_refuses_bad_out_and_wait_in_one_line(tmp_path: Path) -> None:
    plain = tmp_path / "plain.txt"
    plain.write_text("mine")
    _one_line(_cli("admin", "--scm", "127.0.0.1:1", "audit", "export", "--out", str(plain / "x")),
              f"--out {plain}/x: {plain} is a file", "choose an --out path")
    _one_line(_cli("admin", "--scm", "127.0.0.1:1", "audit", "export", "--out", "/sys/audit-cli-test/out"),
              "/sys/audit-cli-test", "choose a directory you can write to")
    _one_line(_cli("admin", "--scm", "127.0.0.1:1", "audit", "export", "--wait", "-1", "--out", str(tmp_path / "o")),
              "--wait -1 is not a number of seconds >= 0")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.txt"]


async def test_export_says_which_datanodes_have_not_reported_and_that_rm_is_stopped(tmp_path: Path) -> None:
    scm, dns, _cids = await cluster(tmp_path)
    srv, address = await serve(scm)
    try:
        # A datanode this SCM knows of but has had no full container report from since it started.
        silent = make_datanodes(7, racks=2)[6]
        scm.node_manager.register(silent.details)
        scm.stop_replication_manager()
        out = tmp_path / "export"
        await client.export([address], out)
        manifest = fmt.parse_manifest(json.loads((out / fmt.MANIFEST).read_text()), "test")
        first = {d["datanode_uuid"]: d["first_report_ms"] for d in read(out, fmt.DATANODES)}
        assert first[silent.uuid] == 0
        assert all(first[dn.uuid] >= manifest.started_at_ms for dn in dns)
        assert manifest.replication_manager["state"] == "STOPPED"
    finally:
        await srv.stop(None)
        await scm.stop()


def test_an_ec_containers_layout_is_exported_by_ozones_name() -> None:
    from scm_server.client.audit_export_writer import container_columns

    ec = hdds_pb2.ContainerInfoProto(containerID=3, state=hdds_pb2.CLOSED, replicationType=hdds_pb2.EC,
                                     ecReplicationConfig=hdds_pb2.ECReplicationConfig(data=6, parity=3, codec="rs",
                                                                                      ecChunkSize=1 << 20))
    ratis = hdds_pb2.ContainerInfoProto(containerID=4, state=hdds_pb2.CLOSED, replicationType=hdds_pb2.RATIS,
                                        replicationFactor=hdds_pb2.THREE)
    columns = container_columns([ec, ratis])
    assert columns["ec_replication"] == ["rs-6-3-1024k", None]
    assert columns["replication_type"] == ["EC", "RATIS"]
