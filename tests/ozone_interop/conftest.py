"""Fixtures of the ozone-interop tier: Apache Ozone's own jars and a whole Ozone cluster on loopback."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator

import pytest

from tests.ozone_interop.ozone_procs import REPO, OzoneCluster, Timings, resolve_classpath

# The SCM side of the scenario. "ozone" is Ozone's own 3-SCM HA ring (the anchor); "ours" is this project's ring
# serving Ozone's four protocols over Hadoop RPC (issue 20), with Ozone's datanodes, OM and CLIs unchanged. Both
# by default; OZONE_INTEROP_SCM=ours (or =ozone) runs one side only.
SCM_SIDES = [s for s in os.environ.get("OZONE_INTEROP_SCM", "ozone,ours").replace(" ", "").split(",") if s]


@pytest.fixture(scope="session")
def ozone_classpath() -> tuple[str, str]:
    start = time.monotonic()
    classpath, note = resolve_classpath()
    return classpath, f"{note} [script {time.monotonic() - start:.1f} s]"


@pytest.fixture(scope="module", params=SCM_SIDES)
def ozone_cluster(request: pytest.FixtureRequest, ozone_classpath: tuple[str, str]) -> Iterator[OzoneCluster]:
    classpath, note = ozone_classpath
    timings = Timings(jars=note)
    # Under run-data/ (git-ignored), not pytest's rotating temp dirs: the JVMs' logs stay for a look afterwards.
    base = REPO / "run-data" / "ozone-interop" / request.param
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    cluster = OzoneCluster(base, classpath, scm_side=request.param, timings=timings)
    start = time.monotonic()
    cluster.start()  # kills whatever it started if any step fails
    timings.add("cluster start, total", time.monotonic() - start)
    timings.memory = cluster.resident_memory()
    try:
        yield cluster
    finally:
        cluster.stop()
        capman = request.config.pluginmanager.getplugin("capturemanager")
        report = f"\n[scm side: {request.param}; logs under {base}/logs]\n{timings.report()}\n"
        if capman is not None:
            with capman.global_and_fixture_disabled():
                print(report)
        else:
            print(report)
