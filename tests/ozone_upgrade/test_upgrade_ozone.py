"""Upgrade finalization on our ring with Apache Ozone's own datanodes, OM and CLIs (`make ozone-upgrade-test`).

Apache Ozone 1.4.1's datanode and OM jars are not on Maven Central (its parent pom `ozone-main` 1.4.1 is; the
module jars answer 404: docs/ozone-compatibility.md, Upgrades), so the old release is stood in for by its
layout: our ring is initialised at 1.4.1's HDDS layout version (7, Ozone's `testing.hdds.scm.init.layout.version`)
and Ozone 2.2.0's three datanodes, once keys are written, are stopped, their `dnlayoutversion/VERSION` set back to
1.4.1's 7, and started again on the same data: datanodes running 2.2.0's software on data at layout 7, as after
an in-place upgrade. Then Ozone's own `ozone admin scm finalizeupgrade` finalizes our SCM; `ozone admin datanode
list` shows the datanodes HEALTHY_READONLY until they, told by our SCM, finalize themselves (their VERSION says
10 again) and are HEALTHY; finalizationstatus says FINALIZATION_DONE; every key reads back and new keys are
written.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scm_server import hdds_layout as layout
from tests.ozone_interop.ozone_procs import (
    ADMIN_MAIN,
    CLI_HEAP,
    REPO,
    ScmNode,
    Timings,
    resolve_classpath,
    timed,
    wait_for,
)
from tests.ozone_migrate.scenario import BUCKET, VOLUME, MigratingCluster, write_keys

pytestmark = [pytest.mark.ozone_upgrade, pytest.mark.timeout(1500)]

OZONE_1_4_1_LAYOUT = 7


class UpgradingCluster(MigratingCluster):
    """Our ring (at layout 7) with Ozone 2.2.0's datanodes and OM."""

    def our_scm_props(self, scm: ScmNode) -> dict[str, str]:
        props = super().our_scm_props(scm)
        props[layout.INIT_LAYOUT_VERSION_KEY] = str(OZONE_1_4_1_LAYOUT)
        # the health check (which moves a finalized datanode back to HEALTHY) every 15 s, not 3 s: a datanode stays
        # HEALTHY_READONLY long enough for `ozone admin datanode list` (a JVM per call) to see it on a busy machine
        props["ozone.scm.heartbeat.thread.interval"] = "15s"
        return props

    def datanode_layout_file(self, name: str) -> Path:
        return self.base / name / "metadata" / "dnlayoutversion" / "VERSION"

    def datanode_layout(self, name: str) -> int:
        found = re.search(r"^layoutVersion=(\d+)$", self.datanode_layout_file(name).read_text(), re.M)
        assert found, self.datanode_layout_file(name)
        return int(found.group(1))

    def restart_datanodes_at(self, layout_version: int) -> None:
        """SIGTERM every datanode, set its layout back, start it again on the same data and configuration."""
        for dn in self.datanodes:
            self.terminate(dn.name)
        for dn in self.datanodes:
            path = self.datanode_layout_file(dn.name)
            path.write_text(re.sub(r"^layoutVersion=\d+$", f"layoutVersion={layout_version}", path.read_text(),
                                   flags=re.M))
        self.start_datanodes()

    def admin_async(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.java_cmd(self.client_conf(), CLI_HEAP, ADMIN_MAIN, list(args), cli=True), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, cwd=self.base, stdin=subprocess.DEVNULL)

    def node_states(self) -> list[str]:
        """`ozone admin datanode list`: each datanode's `Health State`."""
        return sorted(re.findall(r"Health State:\s*(\S+)", self.admin("datanode", "list")))


@pytest.fixture(scope="module")
def cluster() -> Iterator[UpgradingCluster]:
    classpath, note = resolve_classpath()
    base = REPO / "run-data" / "ozone-upgrade"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    timings = Timings(jars=note)
    c = UpgradingCluster(base, classpath, scm_side="ours", timings=timings)
    start = time.monotonic()
    c.start()
    timings.add("cluster start (our ring at layout 7), total", time.monotonic() - start)
    try:
        yield c
    finally:
        c.stop()
        print(f"\n[logs under {base}/logs]\n{timings.report()}\n")


def test_ozone_datanodes_at_an_old_layout_finalize_with_our_ring(cluster: UpgradingCluster, tmp_path: Path) -> None:
    c = cluster
    assert c.admin("scm", "finalizationstatus").strip().splitlines()[-1] == "FINALIZATION_REQUIRED"
    c.sh("volume", "create", f"/{VOLUME}")
    c.sh("bucket", "create", f"/{VOLUME}/{BUCKET}")
    with timed(c.timings, "5 keys written before the upgrade"):
        written = write_keys(c, tmp_path, 5, "before")

    with timed(c.timings, "3 datanodes restarted on their data at layout 7"):
        c.restart_datanodes_at(OZONE_1_4_1_LAYOUT)
    assert [c.datanode_layout(dn.name) for dn in c.datanodes] == [OZONE_1_4_1_LAYOUT] * 3
    # SCM has not finalized: its own layout may still change, so the datanodes are compared with nothing yet
    wait_for("3 HEALTHY datanodes back", lambda: True if c.node_states() == ["HEALTHY"] * 3 else None, 180,
             interval=2)

    seen: set[str] = set()
    with timed(c.timings, "ozone admin scm finalizeupgrade (until FINALIZATION_DONE)"):
        finalize = c.admin_async("scm", "finalizeupgrade")
        deadline = time.monotonic() + 600
        while finalize.poll() is None and time.monotonic() < deadline:
            seen.update(c.node_states())
        if finalize.poll() is None:
            finalize.kill()
        out, err = finalize.communicate(timeout=60)
    assert finalize.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
    lines = out.splitlines()
    assert "No onFinalize work defined for feature: STORAGE_SPACE_DISTRIBUTION." in lines, out
    assert lines[-2:] == ["Exiting...", "Finalization of Storage Container Manager's metadata upgrade finished."], out
    assert "HEALTHY_READONLY" in seen, f"`ozone admin datanode list` never showed HEALTHY_READONLY: {seen}"

    assert c.admin("scm", "finalizationstatus").strip().splitlines()[-1] == "FINALIZATION_DONE"
    wait_for("the datanodes finalized and HEALTHY", lambda: True if c.node_states() == ["HEALTHY"] * 3 else None,
             180, interval=2)
    # Ozone's datanodes finalized themselves when our SCM told them: their layout VERSION says 10
    assert [c.datanode_layout(dn.name) for dn in c.datanodes] == [layout.SOFTWARE_LAYOUT_VERSION] * 3
    assert "Upgrade has already been finalized." in c.admin("scm", "finalizeupgrade")

    with timed(c.timings, "5 old keys read back, 5 new keys written and read back"):
        fresh = write_keys(c, tmp_path, 5, "after")
        for key, data in {**written, **fresh}.items():
            back = tmp_path / f"{key}.back"
            c.sh("key", "get", f"/{VOLUME}/{BUCKET}/{key}", str(back))
            assert back.read_bytes() == data, key
    c.check_alive()

