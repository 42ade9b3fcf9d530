#!/usr/bin/env python3
"""Replication audit benchmark (issue 8): audit time on local[2] for 1M, 3M and 10M replicas, SCM's
in-process ReplicationManager over the same 1M-replica state side by side, and the export's
throughput and peak memory for 1M replicas next to the admin API's ListContainer paging.

1. **Synthetic exports** in the real format (``scm_server.audit_format``), generated with
   pyarrow compute: about 3 replicas per container, 100 / 300 / 1,000 datanodes on racks of 25,
   with a known share of faults (0.5% under-replicated, 0.2% over, 0.1% missing, 0.2% on one rack,
   0.5% stale BCSID, 0.1% unhealthy, 1% OPEN). The ReplicationManager verdict table holds the
   expected verdicts, so the audit must report zero verdict mismatches: the benchmark checks
   correctness at scale too.
2. **Audit time**: ``ozone-scm audit run``'s own path (``scm_audit.submit``: spark-submit,
   ``--master local[2]``) per size, wall time (JVM start included) and the job's own time;
   replicas per second. Goal: 10M replicas in under 3 minutes.
3. **Anchor**: an in-process SCM (stub HA) holding the same 1M-replica layout runs one
   ReplicationManager pass (``process_all``: classification + command planning); its verdict
   counts must equal the audit's.
4. **Export**: the same in-process SCM serves ``ExportSnapshot`` on loopback; the real CLI
   (``ozone-scm admin audit export``) runs as a subprocess: rows/s, the client's peak RSS and the
   SCM's RSS growth during the export; side by side, paging every container through the existing
   admin ``ListContainer`` call (the anchor), containers/s.

Prints a table, writes bench/results/audit_bench.json. Figures taken on a shared machine are noisy:
the JSON records the load average at the start and end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from scm_server import audit_format as fmt
from scm_server.client.audit_export_writer import arrow_schema, make_manifest

ROOT = Path(__file__).resolve().parent.parent

SIZES = {"1M": 1_000_000, "3M": 3_000_000, "10M": 10_000_000}
DATANODES = {"1M": 100, "3M": 300, "10M": 1000}
RACK_SIZE = 25
GOAL_SECONDS_10M = 180
CLUSTER_ID = "CID-6e6c7b5a-0000-4000-8000-000000000001"  # a valid Ozone cluster id (CID-<uuid>)
SCM_ID = "6e6c7b5a-0000-4000-8000-000000000002"  # the in-process SCM's id (a UUID, as Ozone's VERSION file requires)

# Fault classes by container id % 1000: (first, last) inclusive -> class.
CLASSES = [
    (0, 4, "under"),
    (5, 6, "over"),
    (7, 7, "missing"),
    (8, 9, "one_rack"),
    (10, 14, "stale"),
    (15, 15, "unhealthy"),
    (16, 25, "open"),
]
EXPECTED = {
    "under": "UNDER_REPLICATED", "over": "OVER_REPLICATED", "missing": "MISSING", "one_rack": "MIS_REPLICATED",
    "stale": "HEALTHY", "unhealthy": "UNHEALTHY", "open": "HEALTHY", "healthy": "HEALTHY",
}


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def arange(n: int, start: int = 0) -> pa.Array:
    """0..n-1 (+start) without a Python loop."""
    return pc.add(pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), n)), 1), start)


def class_of(cid: int) -> str:
    r = cid % 1000
    return next((name for lo, hi, name in CLASSES if lo <= r <= hi), "healthy")


def layout(cid: int, datanodes: int) -> list[tuple[int, str, int]]:
    """(datanode index, replica state, bcsid) of container ``cid``: the same rule the vectorized
    generator applies, used to build the in-process SCM."""
    racks = max(2, datanodes // RACK_SIZE)
    base = (cid * 7919) % datanodes
    kind = class_of(cid)
    slots = {"under": 2, "over": 4, "missing": 0, "unhealthy": 4}.get(kind, 3)
    step = racks if kind == "one_rack" else 1
    state = "OPEN" if kind == "open" else "CLOSED"
    out = []
    for k in range(slots):
        s = "UNHEALTHY" if kind == "unhealthy" and k == 3 else state
        bcsid = 99 if kind == "stale" and k == 0 else 100
        out.append(((base + step * k) % datanodes, s, bcsid))
    return out


def generate(directory: Path, replicas_target: int, datanodes: int, scm_id: str = SCM_ID) -> dict[str, int]:
    """Write one export of about ``replicas_target`` replicas; returns rows per table."""
    containers = replicas_target // 3
    racks = max(2, datanodes // RACK_SIZE)
    cid = arange(containers, 1)
    residue = pc.remainder(cid, 1000)

    def in_class(name: str) -> pa.Array:
        lo, hi = next((lo, hi) for lo, hi, n in CLASSES if n == name)
        return pc.and_(pc.greater_equal(residue, lo), pc.less_equal(residue, hi))

    under, over, missing, one_rack = in_class("under"), in_class("over"), in_class("missing"), in_class("one_rack")
    stale, unhealthy, open_ = in_class("stale"), in_class("unhealthy"), in_class("open")
    slots = pc.if_else(under, 2, pc.if_else(missing, 0, pc.if_else(pc.or_(over, unhealthy), 4, 3)))
    step = pc.if_else(one_rack, racks, 1)
    base = pc.remainder(pc.multiply(cid, 7919), datanodes)
    names = pa.array([f"dn-{i:05d}" for i in range(datanodes)])
    identity = (scm_id, CLUSTER_ID, 1000)
    meta = {fmt.META_SCM_ID: scm_id, fmt.META_CLUSTER_ID: identity[1], fmt.META_APPLIED_INDEX: str(identity[2])}

    def write(table: str, columns: dict[str, pa.Array]) -> int:
        n = len(next(iter(columns.values())))
        schema = arrow_schema(table, meta)
        arrays = [
            pa.repeat(pa.scalar(identity[0], pa.string()), n),
            pa.repeat(pa.scalar(identity[1], pa.string()), n),
            pa.repeat(pa.scalar(identity[2], pa.int64()), n),
        ] + [columns[f.name].cast(f.type) for f in list(schema)[3:]]
        pq.write_table(pa.Table.from_arrays(arrays, schema=schema), directory / fmt.file_name(table), row_group_size=1 << 20)
        return n

    def const(value: Any, n: int, type_: pa.DataType) -> pa.Array:
        return pa.repeat(pa.scalar(value, type_), n)

    directory.mkdir(parents=True)
    rows: dict[str, int] = {}
    lifecycle = pc.if_else(open_, "OPEN", "CLOSED")
    rows[fmt.CONTAINERS] = write(fmt.CONTAINERS, {
        "container_id": cid, "lifecycle_state": lifecycle, "replication_type": const("RATIS", containers, pa.string()),
        "replication_factor": const("THREE", containers, pa.string()), "pipeline_id": const("p1", containers, pa.string()),
        "owner": const("om", containers, pa.string()), "sequence_id": const(100, containers, pa.int64()),
        "used_bytes": const(1 << 30, containers, pa.int64()), "number_of_keys": const(10, containers, pa.int64()),
        "state_enter_time": const(0, containers, pa.int64()), "delete_transaction_id": const(0, containers, pa.int64()),
    })
    parts: list[dict[str, pa.Array]] = []
    for k in range(4):
        mask = pc.greater(slots, k)
        ids = pc.filter(cid, mask)
        n = len(ids)
        node = pc.remainder(pc.add(pc.filter(base, mask), pc.multiply(pc.filter(step, mask), k)), datanodes)
        state = pc.if_else(pc.filter(open_, mask), "OPEN", "CLOSED")
        if k == 3:
            state = pc.if_else(pc.filter(unhealthy, mask), "UNHEALTHY", state)
        bcsid = pc.if_else(pc.filter(stale, mask), 99, 100) if k == 0 else const(100, n, pa.int64())
        node_names = pc.take(names, node)
        parts.append({
            "container_id": ids, "datanode_uuid": node_names, "replica_state": state, "bcsid": bcsid,
            "replica_index": const(0, n, pa.int32()), "used_bytes": const(1 << 30, n, pa.int64()),
            "key_count": const(10, n, pa.int64()), "origin_node_id": node_names,
            "is_empty": const(False, n, pa.bool_()), "last_report_ms": const(0, n, pa.int64()),
        })
    rows[fmt.REPLICAS] = write(fmt.REPLICAS, {k: pa.concat_arrays([p[k] for p in parts]) for k in parts[0]})
    rows[fmt.DATANODES] = write(fmt.DATANODES, {
        "datanode_uuid": names, "hostname": names, "ip_address": const("127.0.0.1", datanodes, pa.string()),
        "rack": pa.array([f"/rack-{i % racks:03d}" for i in range(datanodes)]),
        "health": const("HEALTHY", datanodes, pa.string()), "op_state": const("IN_SERVICE", datanodes, pa.string()),
        "op_state_expiry_s": const(0, datanodes, pa.int64()), "last_heartbeat_ms": const(0, datanodes, pa.int64()),
        "capacity": const(1 << 44, datanodes, pa.int64()), "used": const(0, datanodes, pa.int64()),
        "remaining": const(1 << 44, datanodes, pa.int64()), "replica_count": const(0, datanodes, pa.int64()),
        "first_report_ms": const(1, datanodes, pa.int64()),  # every datanode has reported (a full view)
    })
    rows[fmt.PIPELINES] = write(fmt.PIPELINES, {
        "pipeline_id": pa.array(["p1"]), "pipeline_state": pa.array(["PIPELINE_OPEN"]),
        "replication_type": pa.array(["RATIS"]), "replication_factor": pa.array(["THREE"]),
        "leader_id": pa.array(["dn-00000"]), "members": pa.array([["dn-00000", "dn-00001", "dn-00002"]]),
        "creation_time_ms": pa.array([0]),
    })
    verdict = const("HEALTHY", containers, pa.string())
    for name, mask in (("under", under), ("over", over), ("missing", missing), ("one_rack", one_rack), ("unhealthy", unhealthy)):
        verdict = pc.if_else(mask, EXPECTED[name], verdict)
    rows[fmt.RM_VERDICTS] = write(fmt.RM_VERDICTS, {
        "container_id": cid, "health": verdict,
        "states": pa.ListArray.from_arrays(pc.cast(arange(containers + 1), pa.int32()), verdict),
        "reason": const("", containers, pa.string()),
    })
    sizes = {t: (directory / fmt.file_name(t)).stat().st_size for t in fmt.TABLES}
    manifest = make_manifest(
        scm_id=scm_id, cluster_id=identity[1], node_id="scm1", applied_term=1, applied_index=identity[2],
        captured_at_ms=int(time.time() * 1000), rows=rows, sizes=sizes, is_leader=True, exporter="bench/audit_bench.py",
    )
    (directory / fmt.MANIFEST).write_text(json.dumps(manifest))
    return rows


def run_audit(export: Path, out: Path, driver_memory: str) -> dict[str, Any]:
    from scm_audit import submit

    launch = submit.build_launch(export, out, master="local[2]", driver_memory=driver_memory)
    t0 = time.perf_counter()
    line = submit.run(launch)
    wall = time.perf_counter() - t0
    summary = json.loads((out / "summary.json").read_text())
    return {"wall_seconds": round(wall, 2), "job_seconds": summary["seconds"], "line": line, "summary": summary}


# ---- the in-process SCM over the 1M layout ----
async def build_scm(meta_dir: Path, replicas_target: int, datanodes: int) -> Any:
    from scm_server.conf import OzoneConfiguration
    from scm_server.container.container_manager import ContainerReplica
    from scm_server.ha.replicate import invoke_local
    from scm_server.metadata import SCMMetadataStore, SCMStorageConfig
    from scm_server.proto import hdds_pb2
    from scm_server.scm import StorageContainerManager

    storage = SCMStorageConfig(meta_dir)
    storage.initialize(cluster_id=CLUSTER_ID, scm_id=SCM_ID)
    conf = OzoneConfiguration({
        "ozone.metadata.dirs": str(meta_dir), "hdds.scm.safemode.min.datanode": "1",
        "hdds.scm.wait.time.after.safemode.exit": "0s",
    })
    scm = await StorageContainerManager.create(conf, metadata_store=SCMMetadataStore(meta_dir, sync=False))
    await scm.ha_manager.start()
    racks = max(2, datanodes // RACK_SIZE)
    names = [f"dn-{i:05d}" for i in range(datanodes)]
    for i, name in enumerate(names):
        scm.node_manager.register(hdds_pb2.DatanodeDetailsProto(
            uuid=name, hostName=name, ipAddress="127.0.0.1", networkLocation=f"/rack-{i % racks:03d}"))
    await scm.pipeline_state_manager.add_pipeline(hdds_pb2.Pipeline(
        id=hdds_pb2.PipelineID(id="p1"), members=[scm.node_manager.require_node(n).details for n in names[:3]],
        state=hdds_pb2.PIPELINE_OPEN, type=hdds_pb2.RATIS, factor=hdds_pb2.THREE))
    sm, cm, buf = scm.container_state_manager, scm.container_manager, scm.transaction_buffer
    state_of = {"OPEN": hdds_pb2.ContainerReplicaProto.OPEN, "CLOSED": hdds_pb2.ContainerReplicaProto.CLOSED,
                "UNHEALTHY": hdds_pb2.ContainerReplicaProto.UNHEALTHY}
    for cid in range(1, replicas_target // 3 + 1):
        kind = class_of(cid)
        invoke_local(sm, "addContainer", [hdds_pb2.ContainerInfoProto(
            containerID=cid, state=hdds_pb2.OPEN if kind == "open" else hdds_pb2.CLOSED,
            pipelineID=hdds_pb2.PipelineID(id="p1"), usedBytes=1 << 30, numberOfKeys=10, owner="om",
            sequenceId=100, replicationFactor=hdds_pb2.THREE, replicationType=hdds_pb2.RATIS)])
        for node, state, bcsid in layout(cid, datanodes):
            cm.update_container_replica(ContainerReplica(
                container_id=cid, datanode_uuid=names[node], state=state_of[state], sequence_id=bcsid,
                key_count=10, used_bytes=1 << 30, origin_node_id=names[node]))
        if cid % 20_000 == 0:
            buf.update_latest_trx_info(0, buf.latest_trx_info().index + 1)
            buf.flush()
    buf.update_latest_trx_info(0, buf.latest_trx_info().index + 1)
    buf.flush()
    return scm


def rss(pid: int | str = "self", field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


async def rm_and_export(work: Path, replicas_target: int, datanodes: int) -> dict[str, Any]:
    import grpc.aio

    from scm_server.client.scm_client import SCMClient
    from scm_server.container.replication.replication_manager import report_counts
    from scm_server.server import endpoints
    from scm_server.server.audit_export_service import AuditExportService
    from scm_server.server.grpc_services import LocationProtocolService, RpcMetrics

    t0 = time.perf_counter()
    scm = await build_scm(work / "scm", replicas_target, datanodes)
    build_s = time.perf_counter() - t0
    out: dict[str, Any] = {"build_seconds": round(build_s, 1), "containers": len(scm.container_state_manager),
                           "replicas": scm.container_manager.replica_count()}
    # Anchor: one ReplicationManager pass over the same state.
    t0 = time.perf_counter()
    report = await scm.replication_manager.process_all()
    out["rm_pass_seconds"] = round(time.perf_counter() - t0, 2)
    out["rm_counts"] = {k: v for k, v in report_counts(report).items() if v}
    # Export over loopback gRPC to the real CLI in a subprocess.
    from scm_server.grpc_options import server_options

    server = grpc.aio.server(options=server_options())  # as the daemon: accepts the clients' liveness PINGs
    metrics = RpcMetrics(None)
    handlers = [cls(scm, endpoints.Protocol.CLIENT, lambda _k: None, metrics).generic_handler()
                for cls in (LocationProtocolService, AuditExportService)]
    server.add_generic_rpc_handlers(tuple(handlers))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        base_rss = rss()
        peak_server = base_rss
        t0 = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "scm_server.cli.main", "admin", "--scm", f"127.0.0.1:{port}", "audit", "export",
            "--out", str(work / "export"), "--json", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        client_peak = 0
        while proc.returncode is None:
            with contextlib.suppress(OSError):
                client_peak = max(client_peak, rss(proc.pid, "VmHWM"))
            peak_server = max(peak_server, rss())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 0.05)
        stdout, stderr = await proc.communicate()
        export_s = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"export failed: {stderr.decode()[-2000:]}")
        rows = json.loads(stdout)[0]["rows"]
        out["export"] = {
            "seconds": round(export_s, 2), "rows": rows,
            "replicas_per_second": round(rows["replicas"] / export_s),
            "client_peak_rss_mb": round(client_peak / 2**20, 1),
            "server_rss_growth_mb": round((peak_server - base_rss) / 2**20, 1),
            "bytes_on_disk_mb": round(sum(f.stat().st_size for f in (work / "export").iterdir()) / 2**20, 1),
        }
        # Anchor: page every container through the existing admin API (ListContainer).
        t0 = time.perf_counter()
        seen, start = 0, 1
        async with SCMClient([f"127.0.0.1:{port}"]) as client:
            while True:
                page, _total = await client.list_containers(start, 1000)
                if not page:
                    break
                seen += len(page)
                start = page[-1].containerID + 1
        list_s = time.perf_counter() - t0
        out["list_containers"] = {"seconds": round(list_s, 2), "containers": seen,
                                  "containers_per_second": round(seen / list_s)}
        out["export"]["containers_per_second"] = round(rows["containers"] / export_s)
    finally:
        await server.stop(None)
        await scm.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1M,3M,10M", help="comma list of 1M, 3M, 10M")
    parser.add_argument("--driver-memory", default="6g", help="spark-submit --driver-memory (local mode: the JVM doing the work)")
    parser.add_argument("--skip-scm", action="store_true", help="skip the in-process RM pass and the export (audit only)")
    parser.add_argument("--keep", action="store_true", help="keep the generated data (printed path)")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    work = Path(tempfile.mkdtemp(prefix="audit-bench-"))
    results: dict[str, Any] = {"machine": platform.platform(), "cpus": os.cpu_count(), "load_start": load_average(),
                               "driver_memory": args.driver_memory, "audit": []}
    try:
        if not args.skip_scm and "1M" in sizes:
            print("building an in-process SCM with the 1M-replica layout (ReplicationManager pass, export)...", flush=True)
            results["scm_1M"] = asyncio.run(rm_and_export(work / "scm1m", SIZES["1M"], DATANODES["1M"]))
        for size in sizes:
            export = work / f"export-{size}"
            t0 = time.perf_counter()
            rows = generate(export, SIZES[size], DATANODES[size])
            gen_s = time.perf_counter() - t0
            print(f"{size}: generated {rows['replicas']:,} replicas / {rows['containers']:,} containers on "
                  f"{DATANODES[size]} datanodes in {gen_s:.1f}s; auditing on local[2]...", flush=True)
            audit = run_audit(export, work / f"report-{size}", args.driver_memory)
            summary = audit.pop("summary")
            entry = {
                "size": size, "replicas": rows["replicas"], "containers": rows["containers"],
                "datanodes": DATANODES[size], "generate_seconds": round(gen_s, 1), **audit,
                "replicas_per_second_wall": round(rows["replicas"] / audit["wall_seconds"]),
                "replicas_per_second_job": round(rows["replicas"] / max(audit["job_seconds"], 1e-9)),
                "by_health": {k: v for k, v in summary["containers"]["byHealth"].items() if v},
                "findings_by_kind": summary["findings"]["byKind"],
                "verdict_mismatches": sum(summary["agreement"]["disagreements"].values()),
            }
            results["audit"].append(entry)
            if not args.keep:
                shutil.rmtree(export, ignore_errors=True)
    finally:
        results["load_end"] = load_average()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")
    report(results)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "audit_bench.json").write_text(json.dumps(results, indent=2, default=str))
    bad = [a["size"] for a in results["audit"] if a["verdict_mismatches"]]
    if bad:
        print(f"!! the audit disagreed with the expected verdicts at {bad}")
        return 1
    return 0


def report(results: dict[str, Any]) -> None:
    print("\nReplication audit benchmark (local[2], driver memory {}; load avg {} -> {})".format(
        results["driver_memory"], results["load_start"], results["load_end"]))
    print(f"{'replicas':>12} {'containers':>11} {'datanodes':>9} {'wall s':>8} {'job s':>8} {'replicas/s (job)':>17} {'verdict diffs':>13}")
    for a in results["audit"]:
        print(f"{a['replicas']:>12,} {a['containers']:>11,} {a['datanodes']:>9} {a['wall_seconds']:>8.1f} "
              f"{a['job_seconds']:>8.1f} {a['replicas_per_second_job']:>17,} {a['verdict_mismatches']:>13}")
    by = {a["size"]: a for a in results["audit"]}
    if "10M" in by:
        a = by["10M"]
        verdict = "met" if a["wall_seconds"] < GOAL_SECONDS_10M else "NOT met"
        print(f"goal: 10M replicas in < {GOAL_SECONDS_10M}s on 2 cores: {verdict} ({a['wall_seconds']:.0f}s wall)")
    if "1M" in by and "10M" in by:
        print(f"growth 1M -> 10M: x{by['10M']['job_seconds'] / max(by['1M']['job_seconds'], 1e-9):.1f} job time for x10 replicas")
    scm = results.get("scm_1M")
    if scm:
        print(f"\nSCM in-process, same 1M layout ({scm['replicas']:,} replicas, {scm['containers']:,} containers):")
        print(f"  ReplicationManager pass (anchor): {scm['rm_pass_seconds']:.1f}s")
        if "1M" in by:
            print(f"  audit job on local[2]:            {by['1M']['job_seconds']:.1f}s "
                  f"(ratio audit/RM {by['1M']['job_seconds'] / max(scm['rm_pass_seconds'], 1e-9):.2f}); "
                  f"wall incl. JVM start {by['1M']['wall_seconds']:.1f}s")
            audit_h = by["1M"]["by_health"]
            rm_h = {k: v for k, v in scm["rm_counts"].items() if k in audit_h or k in EXPECTED.values()}
            same = all(scm["rm_counts"].get(k, 0) == v for k, v in audit_h.items())
            print(f"  health counts agree with the RM pass: {'yes' if same else 'NO'} (audit {audit_h}; RM {rm_h})")
        e, lc = scm["export"], scm["list_containers"]
        print(f"  export of {e['rows']['replicas']:,} replicas + {e['rows']['containers']:,} containers: {e['seconds']:.1f}s, "
              f"{e['replicas_per_second']:,} replicas/s; client peak RSS {e['client_peak_rss_mb']} MB, "
              f"SCM RSS growth {e['server_rss_growth_mb']} MB; {e['bytes_on_disk_mb']} MB of Parquet")
        print(f"  ListContainer paging (anchor): {lc['containers_per_second']:,} containers/s vs export "
              f"{e['containers_per_second']:,} containers/s (x{e['containers_per_second'] / max(lc['containers_per_second'], 1):.1f}, "
              "and the export carries replicas, datanodes, verdicts too)")


if __name__ == "__main__":
    sys.exit(main())
