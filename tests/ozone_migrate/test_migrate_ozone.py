"""From Ozone's own SCM ring to ours, with Ozone's datanodes and OM running throughout (`make ozone-migrate-test`).

Apache Ozone 2.2.0's 3-SCM ring, its 3 datanodes and its OM start from the released jars; keys are written with
`ozone sh`; once the leader's scm.db holds its whole Ratis log the three Ozone SCMs are stopped (SIGTERM);
`ozone-scm migrate from-ozone` builds our primordial member from the leader's scm.db on the same node id, address
and ports; the two others join with `scm --bootstrap`. The same datanode and OM processes (never restarted) then
find our ring: the datanodes register (their VERSION's clusterID must match), every key reads back byte for byte,
and new keys are written with block IDs above everything Ozone handed out.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scm_server.migrate import from_ozone
from tests.ozone_interop.ozone_procs import (
    REPO,
    ScmNode,
    Timings,
    resolve_classpath,
    timed,
    wait_for,
    write_site,
)
from tests.ozone_migrate.scenario import (
    BUCKET,
    VOLUME,
    MigratingCluster,
    block_ids,
    flushed,
    stop_scms,
    write_keys,
)

pytestmark = [pytest.mark.ozone_migrate, pytest.mark.timeout(1800)]


class OursAfterOzone(MigratingCluster):
    """Our SCMs keep their store beside Ozone's (never in it): `<node>/ours`, on the same ports."""

    migrated = ""

    def our_scm_props(self, scm: ScmNode) -> dict[str, str]:
        props = super().our_scm_props(scm)
        props["ozone.metadata.dirs"] = str(self.base / scm.node_id / "ours")
        # the member built from Ozone's leader is our primordial one: the others bootstrap from it
        props["ozone.scm.primordial.node.id"] = self.migrated
        return props

    def start_our_ring_from(self, leader: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OZONE-SITE.XML_")}
        env.pop("OZONE_CONF_DIR", None)
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        self._our_env = env
        self.migrated = leader
        for scm in self.scms:
            conf = self.base / scm.node_id / "ours-conf"
            write_site(conf / "ozone-site.xml", self.our_scm_props(scm))
        first = next(s for s in self.scms if s.node_id == leader)
        db = self.metadata_dir(leader) / "scm.db"
        with timed(self.timings, f"{leader}: migrate from-ozone"):
            self.run_ours_once(f"{leader}-migrate", self.our_cmd(first, "migrate", "from-ozone", "--ozone-db", str(db)))
        self.start_our_scm(first)
        for scm in (s for s in self.scms if s.node_id != leader):
            with timed(self.timings, f"{scm.node_id} --bootstrap (ours)"):
                self.run_ours_once(f"{scm.node_id}-bootstrap-ours", self.our_scm_cmd(scm, "--bootstrap"))
            self.start_our_scm(scm)
        with timed(self.timings, "our ring: 3 members in scm roles"):
            wait_for("all our SCMs in the ring with one leader", self._ring_complete, 180, interval=1)

    def our_cmd(self, scm: ScmNode, *args: str) -> list[str]:
        return [sys.executable, "-m", "scm_server.cli.main", "--conf", str(self.base / scm.node_id / "ours-conf"),
                *args]

    def our_scm_cmd(self, scm: ScmNode, *args: str) -> list[str]:
        return self.our_cmd(scm, "scm", *args)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def cluster() -> Iterator[OursAfterOzone]:
    classpath, note = resolve_classpath()
    base = REPO / "run-data" / "ozone-migrate"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    timings = Timings(jars=note)
    c = OursAfterOzone(base, classpath, scm_side="ozone", timings=timings)
    start = time.monotonic()
    c.start()
    timings.add("Ozone cluster start, total", time.monotonic() - start)
    try:
        yield c
    finally:
        c.stop()
        print(f"\n[logs under {base}/logs]\n{timings.report()}\n")


def test_ozone_ring_to_ours_keys_read_back_and_ids_never_reused(cluster: OursAfterOzone, tmp_path: Path) -> None:
    c = cluster
    c.sh("volume", "create", f"/{VOLUME}")
    c.sh("bucket", "create", f"/{VOLUME}/{BUCKET}")
    with timed(c.timings, "Ozone: 5 keys written"):
        written = write_keys(c, tmp_path, 5, "before")
    old_blocks = {b for k in written for b in block_ids(c, k)}
    assert old_blocks

    # stop Ozone's ring once its leader's scm.db holds every applied entry (the migration checks this too)
    leader = c.scm_leader()
    with timed(c.timings, "Ozone: leader's scm.db flushed"):
        wait_for(f"{leader}'s scm.db holding its whole Ratis log", lambda: flushed(c, leader), 180, interval=1)
    with timed(c.timings, "Ozone: 3 SCMs stopped (SIGTERM)"):
        assert stop_scms(c) == leader
    plan = from_ozone.plan_from(from_ozone.OzoneSources.from_db(c.metadata_dir(leader) / "scm.db"))
    assert plan.refusals == []
    ceilings = dict(plan.sequence_ids)
    assert max(local for _, local in old_blocks) <= ceilings["localId"]

    with timed(c.timings, "ours: migrate, start, bootstrap 2"):
        c.start_our_ring_from(leader)
    # safemode ends only once all 3 datanodes registered (hdds.scm.safemode.min.datanode=3): a datanode whose
    # VERSION names another clusterID is refused at registration
    with timed(c.timings, "ours: datanodes back, safemode exit, pipeline open"):
        c.wait_ready()

    # the same OM and datanodes (never restarted) serve every key Ozone's ring placed
    with timed(c.timings, "ours: 5 old keys read back"):
        for key, data in written.items():
            out = tmp_path / f"{key}.back"
            c.sh("key", "get", f"/{VOLUME}/{BUCKET}/{key}", str(out))
            assert digest(out.read_bytes()) == digest(data), key
    containers = {int(x["containerID"]) for x in json.loads(c.admin("container", "list", "--all"))}
    assert {cid for cid, _ in old_blocks} <= containers

    with timed(c.timings, "ours: 5 new keys written and read back"):
        fresh = write_keys(c, tmp_path, 5, "after")
        for key, data in fresh.items():
            out = tmp_path / f"{key}.back"
            c.sh("key", "get", f"/{VOLUME}/{BUCKET}/{key}", str(out))
            assert digest(out.read_bytes()) == digest(data), key
    new_blocks = {b for k in fresh for b in block_ids(c, k)}
    assert new_blocks and not (new_blocks & old_blocks)
    # no ID Ozone handed out (or could have, up to its stored ceilings) is handed out again
    assert min(local for _, local in new_blocks) > ceilings["localId"]
    new_containers = {cid for cid, _ in new_blocks} - {cid for cid, _ in old_blocks}
    assert all(cid > ceilings["containerId"] for cid in new_containers)
    c.check_alive()  # the OM and the datanodes Ozone's ring served are the ones serving now
