#!/usr/bin/env python3
"""Backup and restore of an SCM ring at 100k / 1M containers, next to a joining member's checkpoint install.

For every size N (``--sizes``): a one-SCM ring is started, stopped, and N CLOSED containers are written
into its scm.db (``bench/scale.py``'s ``seed_containers``: as if replicated and purged long ago); then,
with the ring serving again:

* **backup**: ``ozone-scm admin scm backup --out DIR`` (a CLI process, through the leader's ``Backup`` RPC),
  wall time and the size of the directory, next to the size of scm.db;
* **verify**: ``admin scm backup verify DIR`` (offline sha256 of every file, the tar read through);
* **anchor**: what a joining member pays for the same state: ``download_checkpoint`` (the ``Download``
  RPC a bootstrapping SCM calls) plus ``replace_from_checkpoint`` into an empty scm.db, the functions
  the joiner runs;
* **restore**: ``ozone-scm scm --restore DIR`` on empty storage (CLI process), then the restored SCM
  started until it serves as leader;
* the start-up of one CLI process (``ozone-scm --help``, best of 3), paid inside each CLI figure.

Every time is printed with its ratio to the anchor. Writes JSON to bench/results/backup.json. The
ring is in safemode (no datanodes), so the backup runs with ``--allow-safemode``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if not __package__:  # `python bench/backup.py`: import bench.* and tests.* from this checkout, as `python -m` does
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.scale import scm_db_dir, seed_containers
from scm_server.ha.inter_scm_client import download_checkpoint
from scm_server.local.quorum import HALocalCluster
from scm_server.metadata.scm_metadata_store import SCMMetadataStore
from scm_server.metadata.storage_config import SCMStorageConfig

ROOT = Path(__file__).resolve().parent.parent

SETTINGS = {
    "hdds.scm.replication.thread.interval": "600s",
    "ozone.scm.container.size": "5GB",
    "ozone.scm.block.size": "256MB",
}


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_cli(cluster: HALocalCluster, *args: str) -> float:
    t0 = time.perf_counter()
    result = cluster.cli(cluster.scms[0], *args, timeout=3600)
    if result.returncode != 0:
        raise RuntimeError(f"`ozone-scm {' '.join(args)}` failed: {result.stderr[-2000:]}")
    return time.perf_counter() - t0


async def anchor(address: str, cluster_id: str, work: Path) -> float:
    """A joining member's checkpoint download + install, through the functions it runs."""
    t0 = time.perf_counter()
    ck = await download_checkpoint(address, cluster_id, work / "download")
    store = SCMMetadataStore(work / "joiner", create=True, sync=True)
    try:
        store.replace_from_checkpoint(ck.db_path)
    finally:
        store.stop()
    return time.perf_counter() - t0


async def measure(n: int, base: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"containers": n}
    cluster = HALocalCluster(base / f"ring-{n}", 1, settings=SETTINGS)
    restored: HALocalCluster | None = None
    try:
        cluster.start_quorum(timeout=120)
        await cluster.wait_leader(timeout=60)
        cluster.stop_all()
        db_dir = scm_db_dir(cluster.scms[0].metadata_dir)
        out["seed_seconds"] = (await asyncio.to_thread(seed_containers, [db_dir], n))["seconds"]
        cluster.start(0)
        cluster.wait_serving(0, timeout=900)
        await cluster.wait_leader(timeout=120)
        out["scm_db_bytes"] = du(db_dir / "scm.db")
        print(f"  [{n:,}] seeded and serving; scm.db {out['scm_db_bytes'] / 2**20:.1f} MiB", flush=True)

        backup = base / f"backup-{n}"
        out["cli_startup_seconds"] = round(min(run_cli(cluster, "--help") for _ in range(3)), 2)
        out["backup_seconds"] = round(run_cli(cluster, "admin", "scm", "backup", "--out", str(backup),
                                              "--allow-safemode"), 2)
        out["backup_bytes"] = du(backup)
        out["verify_seconds"] = round(run_cli(cluster, "admin", "scm", "backup", "verify", str(backup)), 2)
        cid = SCMStorageConfig(db_dir).cluster_id
        assert cid is not None
        out["anchor_join_install_seconds"] = round(
            await anchor(cluster.scms[0].grpc_address, cid, base / f"anchor-{n}"), 2)
        print(f"  [{n:,}] backup {out['backup_seconds']} s, verify {out['verify_seconds']} s, "
              f"joiner's install {out['anchor_join_install_seconds']} s", flush=True)
        cluster.stop_all()

        restored = HALocalCluster(base / f"restored-{n}", 1, settings=SETTINGS)
        restored.write_configs()
        out["restore_cli_seconds"] = round(run_cli(restored, "scm", "--restore", str(backup)), 2)
        t0 = time.perf_counter()
        restored.start(0)
        restored.wait_serving(0, timeout=900)
        await restored.wait_leader(timeout=120)
        out["restored_start_to_leader_seconds"] = round(time.perf_counter() - t0, 2)
        a = out["anchor_join_install_seconds"] or 1e-9
        out["ratios_vs_join_install"] = {
            "backup": round(out["backup_seconds"] / a, 2),
            "verify": round(out["verify_seconds"] / a, 2),
            "restore_cli": round(out["restore_cli_seconds"] / a, 2),
            "restore_cli_plus_start": round((out["restore_cli_seconds"] + out["restored_start_to_leader_seconds"]) / a, 2),
        }
        out["backup_size_vs_scm_db"] = round(out["backup_bytes"] / out["scm_db_bytes"], 3)
    finally:
        cluster.stop_all()
        if restored is not None:
            restored.stop_all()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,1000000", help="container counts, comma separated")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    base = Path(tempfile.mkdtemp(prefix="bench-backup-"))
    points = []
    try:
        for n in sizes:
            points.append(asyncio.run(measure(n, base)))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("\nSCM backup / restore (one-SCM ring, loopback; anchor: a joining member's checkpoint download + install)")
    print("(backup, verify and restore are CLI processes: 'cli s' is one `ozone-scm --help`, the start-up in each)")
    print(f"{'containers':>10} | {'scm.db MiB':>10} {'backup MiB':>10} | {'join s':>6} {'cli s':>5} | {'backup s':>8} {'x':>5} | "
          f"{'verify s':>8} {'x':>5} | {'restore s':>9} {'x':>5} | {'+start s':>8} {'x':>5}")
    for p in points:
        r = p["ratios_vs_join_install"]
        print(f"{p['containers']:>10,} | {p['scm_db_bytes'] / 2**20:>10.1f} {p['backup_bytes'] / 2**20:>10.1f} | "
              f"{p['anchor_join_install_seconds']:>6.2f} {p['cli_startup_seconds']:>5.2f} | {p['backup_seconds']:>8.2f} {r['backup']:>5.2f} | "
              f"{p['verify_seconds']:>8.2f} {r['verify']:>5.2f} | {p['restore_cli_seconds']:>9.2f} "
              f"{r['restore_cli']:>5.2f} | {p['restored_start_to_leader_seconds']:>8.2f} {r['restore_cli_plus_start']:>5.2f}")
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "backup.json").write_text(json.dumps(
        {"host": platform.node(), "python": platform.python_version(), "points": points}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
