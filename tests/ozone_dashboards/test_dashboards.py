"""Apache Ozone's own Grafana dashboards against our SCM ring and against Ozone's own: a real Prometheus
(Debian's, tests/monitoring/prom.py) scrapes the three SCMs' ``/prom`` of each ring (Ozone's 2.2.0 datanodes and
OM on it, one key written), then every panel's expressions are evaluated through Prometheus' HTTP API, and the
panels with series are counted: ``panels with series: ours N/M, Ozone's K/M``, M being the SCM panels
(tests/ozone_dashboards/panels.py says which those are).

What must hold: every SCM panel that finds series on Ozone's ring finds them on ours, except the panels
:data:`WITHOUT_SERIES_ON_OURS` names with why (each also in docs/ozone-compatibility.md's table of metrics not
served); and no panel is named there that finds series on ours (the list cannot go stale). One ring runs at a
time (memory is shared): Ozone's first, then ours. ``OZONE_DASHBOARDS_SCM=ours`` runs our side only (the
comparison with Ozone's side is then skipped with a printed note, the listed panels still checked).

Run by ``make ozone-dashboards-test`` (Ozone's jars from ``make ozone-jars``, Prometheus from
``make monitoring-tools``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.monitoring.prom import Prometheus, running
from tests.ozone_interop.ozone_procs import REPO, OzoneCluster, Timings, resolve_classpath

from .panels import Panel, all_panels, scm_panels
from .prom_repair import RepairRelay

pytestmark = [pytest.mark.ozone_dashboards, pytest.mark.timeout(2400)]
SIDES = [s for s in os.environ.get("OZONE_DASHBOARDS_SCM", "ozone,ours").replace(" ", "").split(",") if s]
JOB = "ozone-scm"
SCRAPE = "5s"  # also the scrape timeout: Ozone's JVMs answer /prom in seconds on a loaded machine
SAMPLES = 5  # scrapes of every SCM before the panels are evaluated (rate() over RATE_INTERVAL needs two)

# SCM panels that find no series on our ring, and why (each names metrics in NOT_SERVED, scm_server/ozone_metrics.py,
# which docs/ozone-compatibility.md renders). The test fails when one of them finds series on ours (stale entry).
WITHOUT_SERIES_ON_OURS: dict[str, str] = {
    "Ozone - SCM overview / JVM CPU load": "JVM metrics: ours is a Python process (process_* on /prom)",
    "Ozone - SCM overview / Heap — used / committed / max": "JVM heap: ours is a Python process",
    "Ozone - SCM overview / Non-heap (native / metaspace) — used / committed / max": "JVM memory pools",
    "Ozone - SCM overview / GC time (fraction of wall per minute)": "Java's G1 collector (python_gc_* on /prom)",
    "Ozone - SCM overview / GC count rate": "Java's G1 collector (python_gc_* on /prom)",
    "Ozone - SCM overview / Netty direct memory — used / max": "Netty (Java)",
    "Ozone - SCM overview / Thread count": "JVM thread states",
    "Ozone - SCM overview / Jetty http server threads": "Jetty's thread pool; ours serves HTTP with aiohttp",
    "Ozone - SCM overview / Block deleting service throughput": "the panel joins on jvm_metrics_mem_heap_used_m "
                                                                "(a JVM's heap) to pick SCM hosts",
    "Ozone - Datanode Decommission and Maintenance / Partial Replication Rates (Decommission/Maintenance)":
        "ReplicationManagerMetrics Partial*, EcPartial*: partial replication is not done here",
    "Ozone - Datanode Decommission and Maintenance / Replication Manager Queue Sizes":
        "our ReplicationManager keeps no under/over-replicated queues",
}


def _has_series(prom: Prometheus, expr: str) -> bool:
    data = prom.api("query", query=expr)
    return bool(data["result"]) if data["resultType"] in ("vector", "matrix") else True


def evaluate(prom: Prometheus, panels: list[Panel]) -> dict[str, bool]:
    """panel label -> whether any of its expressions returns a series."""
    return {p.label: any(_has_series(prom, e) for e in p.exprs) for p in panels}


def measure(side: str, classpath: str, base: Path, panels: list[Panel]) -> dict[str, bool]:
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    timings = Timings()
    cluster = OzoneCluster(base / "cluster", classpath, scm_side=side, timings=timings)
    start = time.monotonic()
    cluster.start()
    try:
        # a little traffic: a volume, a bucket and a key, so block allocation and container creation have run
        src = base / "key.bin"
        src.write_bytes(os.urandom(64 * 1024))
        cluster.sh("volume", "create", "/dash")
        cluster.sh("bucket", "create", "/dash/bucket")
        cluster.sh("key", "put", "/dash/bucket/key1", str(src))
        with contextlib.ExitStack() as stack:
            # Ozone's page reaches Prometheus through the relay (prom_repair.py: Ozone's SCM writes label values
            # with raw line breaks, and Prometheus refuses such a page); ours is scraped as it is
            relays = [stack.enter_context(RepairRelay(f"http://127.0.0.1:{s.http_port}/prom"))
                      for s in cluster.scms] if side == "ozone" else []
            ports = [r.port for r in relays] or [s.http_port for s in cluster.scms]
            prom = stack.enter_context(running(Prometheus(base / "prometheus", [{
                "job_name": JOB,
                "metrics_path": "/prom",
                "static_configs": [{"targets": [f"127.0.0.1:{port}" for port in ports]}],
            }], rule_files=[], interval=SCRAPE)))

            def scraped() -> bool:
                got = prom.query(f'count_over_time(up{{job="{JOB}"}}[5m]) >= {SAMPLES}')
                return len(got) == len(cluster.scms) and all(
                    v == "up" for v in prom.targets_up(JOB).values())

            try:
                Prometheus.wait(scraped, 180, f"{SAMPLES} successful scrapes of every SCM", interval=1)
            except AssertionError as exc:  # say why Prometheus could not scrape
                errors = {t["scrapeUrl"]: t.get("lastError", "") for t in prom.api("targets")["activeTargets"]}
                raise AssertionError(f"{exc}; [{side}] scrape errors: {errors}") from exc
            result = evaluate(prom, panels)
            if relays:
                print(f"\n[{side}] relayed {sum(r.pages for r in relays)} /prom pages, escaping "
                      f"{sum(r.escaped for r in relays)} line breaks and quotes inside label values")
    finally:
        cluster.stop()
    print(f"\n[{side}] ring up and measured in {time.monotonic() - start:.0f} s; logs under {base}/cluster/logs")
    return result


def test_ozone_dashboards_find_series_on_ours_as_on_ozones() -> None:
    panels = scm_panels(all_panels())
    assert len(panels) >= 40, f"only {len(panels)} SCM panels found in the dashboards"
    assert set(WITHOUT_SERIES_ON_OURS) <= {p.label for p in panels}, (
        f"WITHOUT_SERIES_ON_OURS names panels the dashboards lack: "
        f"{sorted(set(WITHOUT_SERIES_ON_OURS) - {p.label for p in panels})}")
    classpath, account = resolve_classpath()
    print(f"\n{account}")
    results = {side: measure(side, classpath, REPO / "run-data" / "ozone-dashboards" / side, panels)
               for side in SIDES}
    m = len(panels)
    counts = {side: sum(r.values()) for side, r in results.items()}
    print(f"\npanels with series: ours {counts.get('ours', '-')}/{m}, Ozone's {counts.get('ozone', '-')}/{m}")
    for side, r in results.items():
        missing = sorted(label for label, found in r.items() if not found)
        print(f"\n{side}: {len(missing)} SCM panels without series:")
        for label in missing:
            print(f"  {label}" + (f"  ({WITHOUT_SERIES_ON_OURS[label]})" if side == "ours"
                                  and label in WITHOUT_SERIES_ON_OURS else ""))
    if "ours" not in results:
        pytest.fail("OZONE_DASHBOARDS_SCM names no 'ours' side: nothing of ours was measured")
    ours = results["ours"]
    stale = sorted(label for label in WITHOUT_SERIES_ON_OURS if ours[label])
    assert not stale, f"panels listed as without series on ours find series: {stale} (drop them from the list)"
    if "ozone" in results:
        lacking = sorted(label for label, found in results["ozone"].items()
                         if found and not ours[label] and label not in WITHOUT_SERIES_ON_OURS)
        assert not lacking, f"SCM panels with series on Ozone's ring but none on ours: {lacking}"
    else:
        print("Ozone's side not run (OZONE_DASHBOARDS_SCM): only the listed panels were checked")
