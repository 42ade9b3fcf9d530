"""The Ozone half of the migration scenario: Ozone 2.2.0's own SCM ring with its datanodes and OM, keys written
with `ozone sh`, then the SCMs stopped cleanly and their state read back.

Used by the tier (`make ozone-migrate-test`, tests/ozone_migrate/test_migrate_ozone.py) and, once, to make the
decoder's fixture (`python -m tests.ozone_migrate.scenario OUT_DIR`): the leader's `scm.db` and VERSION as Ozone's
jars wrote them, with what Ozone's own CLI said about the same state in `expected.json` (container list, pipeline
ids, every key's block IDs), so the unit tests compare our decoding with Ozone's own account, not with bytes made
by hand.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from scm_server.migrate import from_ozone, ozone_records
from tests.ozone_interop.ozone_procs import (
    OzoneCluster,
    OzoneInteropError,
    ScmNode,
    Timings,
    resolve_classpath,
    wait_for,
)

VOLUME = "migvol"
BUCKET = "migbucket"
# Ozone flushes its SCM transaction buffer into scm.db on this interval (and at each Ratis snapshot); a stop
# does not flush it. The scenario shortens it so that a cleanly stopped ring has everything in scm.db.
FLUSH_INTERVAL_KEY = "ozone.scm.ha.dbtransactionbuffer.flush.interval"
PIPELINE_ID = re.compile(r"Pipeline\{\s*Id:\s*([0-9a-fA-F-]{36})")  # Pipeline.toString; not the "leaderId:"


class MigratingCluster(OzoneCluster):
    """The interop harness's cluster, with the few keys the migration scenario needs on every process."""

    # the fixture keeps SCM's deleted-block transactions: SCM's block deleting service does not run in its lifetime
    keep_deletions = False

    def common_props(self) -> dict[str, str]:
        props = super().common_props()
        props[FLUSH_INTERVAL_KEY] = "2s"
        return props

    def om_props(self) -> dict[str, str]:
        props = super().om_props()
        # the OM's KeyDeletingService hands deleted keys' blocks to SCM within seconds (SCM's deletedBlocks rows)
        props["ozone.block.deleting.service.interval"] = "2s"
        return props

    def scm_props(self, scm: ScmNode) -> dict[str, str]:
        props = super().scm_props(scm)
        if self.keep_deletions:  # (the OM's KeyDeletingService reads the same key: only the SCMs get it)
            props["ozone.block.deleting.service.interval"] = "1h"
        return props

    def terminate(self, name: str, timeout: float = 60) -> None:
        """SIGTERM (Ozone's shutdown hook runs) and wait for the process to exit, bounded by `timeout`."""
        proc = self.procs[name]
        if proc.popen.poll() is None:
            os.killpg(proc.popen.pid, signal.SIGTERM)
            try:
                proc.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired as exc:
                raise OzoneInteropError(f"{name} did not exit within {timeout:.0f} s of SIGTERM") from exc

    def metadata_dir(self, node_id: str) -> Path:
        return self.base / node_id / "metadata"


def write_keys(cluster: OzoneCluster, tmp: Path, count: int, prefix: str) -> dict[str, bytes]:
    """`ozone sh key put` of `count` small keys; returns name -> bytes written."""
    written = {}
    for i in range(count):
        data = os.urandom(4096 + 977 * i)
        src = tmp / f"{prefix}{i}.in"
        src.write_bytes(data)
        cluster.sh("key", "put", f"/{VOLUME}/{BUCKET}/{prefix}{i}", str(src))
        written[f"{prefix}{i}"] = data
    return written


def block_ids(cluster: OzoneCluster, key: str) -> list[tuple[int, int]]:
    """(containerID, localID) of every block of a key, as `ozone sh key info` reports them."""
    info = json.loads(cluster.sh("key", "info", f"/{VOLUME}/{BUCKET}/{key}"))
    locs = info.get("ozoneKeyLocations") or []
    return [(int(loc["containerID"]), int(loc["localID"])) for loc in locs]


def ozone_account(cluster: OzoneCluster, keys: list[str]) -> dict[str, object]:
    """What Ozone's own CLI says about the SCM's state: containers, pipeline ids, the keys' blocks."""
    containers = json.loads(cluster.admin("container", "list", "--all"))
    pipelines = sorted(set(PIPELINE_ID.findall(cluster.admin("pipeline", "list"))))
    return {
        "containers": sorted(
            ({"containerID": int(c["containerID"]), "state": c["state"],
              "replicationFactor": c["replicationConfig"].get("replicationFactor", "")} for c in containers),
            key=lambda c: int(str(c["containerID"])),
        ),
        "pipelines": pipelines,
        "blocks": {k: block_ids(cluster, k) for k in keys},
    }


def flushed(cluster: MigratingCluster, node_id: str, *, deletions: bool = False) -> bool | None:
    """True once the SCM's scm.db holds every state-machine entry of its Ratis log (the migration's own check),
    and with ``deletions`` at least one deleted-block transaction; read while the SCM runs (RocksDB allows
    read-only opens beside the writer)."""
    meta = cluster.metadata_dir(node_id)
    cluster.check_alive()
    try:
        tables = from_ozone.read_tables(meta / "scm.db")
        version = from_ozone.read_version(meta / "scm" / "current" / "VERSION")
        plan = ozone_records.plan_migration(tables, version)
        log = from_ozone.read_ratis_log(meta / "scm.ratis", version.cluster_id, plan.index)
    except (from_ozone.MigrationRefused, ozone_records.NotOzoneSCMData):
        return None  # a segment being written or a table not flushed yet: look again
    if deletions and not plan.deleted_blocks:
        return None
    return True if not ozone_records.pending_entries(log, plan.index) else None


def stop_scms(cluster: MigratingCluster) -> str:
    """Stop Ozone's SCMs cleanly, followers first; returns the node id of the leader at the time of the stop."""
    leader = cluster.scm_leader()
    for scm in cluster.scms:
        if scm.node_id != leader:
            cluster.terminate(scm.node_id)
    cluster.terminate(leader)
    return leader


def make_fixture(out: Path) -> None:
    """Run Ozone's side once and keep the leader's scm.db and VERSION with Ozone's account (see the docstring)."""
    classpath, note = resolve_classpath()
    base = Path(__file__).resolve().parents[2] / "run-data" / "ozone-migrate-fixture"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    cluster = MigratingCluster(base, classpath, scm_side="ozone", timings=Timings(jars=note))
    try:
        cluster.keep_deletions = True
        cluster.start()
        cluster.sh("volume", "create", f"/{VOLUME}")
        cluster.sh("bucket", "create", f"/{VOLUME}/{BUCKET}")
        tmp = base / "tmp"
        tmp.mkdir()
        written = write_keys(cluster, tmp, 4, "k")
        account = ozone_account(cluster, sorted(written))
        # one key deleted: the OM hands its blocks to SCM, whose deletedBlocks table keeps them (see keep_deletions)
        cluster.sh("key", "delete", f"/{VOLUME}/{BUCKET}/k3")
        leader = cluster.scm_leader()
        wait_for(f"{leader}'s scm.db holding the deleted key's blocks and its whole Ratis log",
                 lambda: flushed(cluster, leader, deletions=True), 180, interval=1)
        stop_scms(cluster)
        meta = cluster.metadata_dir(leader)
        out.mkdir(parents=True, exist_ok=True)
        shutil.copytree(meta / "scm.db", out / "scm.db", ignore=shutil.ignore_patterns("LOG*", "LOCK"))
        (out / "scm" / "current").mkdir(parents=True, exist_ok=True)
        shutil.copy2(meta / "scm" / "current" / "VERSION", out / "scm" / "current" / "VERSION")
        shutil.copytree(meta / "scm.ratis", out / "scm.ratis")
        account["deleted"] = {"k3": account["blocks"]["k3"]}  # type: ignore[index]
        (out / "expected.json").write_text(json.dumps({"leader": leader, **account}, indent=2) + "\n")
    finally:
        cluster.stop()


if __name__ == "__main__":
    make_fixture(Path(sys.argv[1]))
