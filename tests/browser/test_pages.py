"""The pages people open, loaded in a real browser (headless Chromium): the SCM status page of a secure 3-SCM quorum
(served over HTTPS, as a secure SCM does by default) and the Spark audit's HTML report.

For every page: no console error, no uncaught exception, no error-level log entry, no failed request, no request
leaving the machine (everything the page loads is inline or on loopback), the elements an operator reads first are
present with the values the SCM reports through its own API, and a screenshot is kept under
``build/browser-artifacts/`` (printed at the end of each test).

The operator's ``/healthz`` and ``/metrics`` are JSON and Prometheus text, not HTML: their content is checked by the
monitoring tier (a real Prometheus scrapes them), not here.

Chromium is started with ``--ignore-certificate-errors`` because the quorum's root CA is made by the test and the
browser's trust store cannot be told about it without NSS tools; instead the test checks with Python's ``ssl`` that
the page's certificate chains to the quorum's root and names the host, so the HTTPS the browser used is the SCM's own.

Run by ``make browser-test`` (in ``.ci/run``); about a minute and a half on 2 shared cores.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from scm_server.client.scm_client import SCMClient
from scm_server.datanode_sim import DatanodeSimulator
from scm_server.datanode_sim.simulator import RState, SimDatanode
from scm_server.local.quorum import HALocalCluster
from scm_server.proto import hdds_pb2
from tests.integration.ha.harness import (
    CLIENT_CONFIG,
    TEST_SETTINGS,
    start_sim,
    wait_open_pipeline,
    wait_until,
)

from .chromium import Chromium, Page, PageLog

pytestmark = [pytest.mark.browser, pytest.mark.timeout(1500), pytest.mark.asyncio(loop_scope="module")]
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "build" / "browser-artifacts"
SETTINGS = {
    **TEST_SETTINGS,
    # nothing repairs or expires the lost replica before the export
    "hdds.scm.replication.thread.interval": "1h",
    "ozone.scm.stale.node.interval": "60s",
    "ozone.scm.dead.node.interval": "120s",
}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def browser(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Chromium]:
    chromium = Chromium(tmp_path_factory.mktemp("chromium-profile"), ignore_certificate_errors=True)
    await chromium.start()
    try:
        yield chromium
    finally:
        await chromium.stop()


def assert_clean(log: PageLog, what: str) -> None:
    assert log.requests, f"{what}: the browser recorded no request at all (the DevTools log is not working)"
    assert not log.errors(), f"{what}: errors in the browser: {log.errors()}"
    assert not log.failed_requests, f"{what}: failed requests: {log.failed_requests}"
    assert not log.outside_requests(), f"{what}: requests leaving the machine: {log.outside_requests()}"


async def keep_screenshot(page: Page, name: str) -> Path:
    path = await page.screenshot(ARTIFACTS / f"{name}.png")
    assert path.stat().st_size > 10_000, f"{path}: a screenshot this small shows nothing"
    print(f"screenshot: {path}")
    return path


def served_certificate_chains_to(url_host: str, port: int, root_pem: Path) -> dict[str, Any]:
    """The certificate the SCM's web server presents, verified against the quorum's root (raises if it does not)."""
    ctx = ssl.create_default_context(cafile=str(root_pem))
    ctx.check_hostname = False  # SCM certificates name the SCM's role and host; the chain is what is checked here
    with socket.create_connection((url_host, port), timeout=10) as raw, ctx.wrap_socket(raw) as tls:
        cert = tls.getpeercert()
    assert cert, "the SCM's web server presented no certificate"
    return cert


@dataclasses.dataclass
class Quorum:
    cluster: HALocalCluster
    sim: DatanodeSimulator


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def quorum(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Quorum]:
    """A secure 3-SCM quorum (HTTPS pages, mutual TLS) with three simulated datanodes, its ReplicationManager stopped
    so that a lost replica stays lost until the audit has seen it."""
    cluster = HALocalCluster(tmp_path_factory.mktemp("browser") / "c", 3, settings=SETTINGS, secure=True)
    sim = None
    try:
        cluster.start_quorum()
        sim = await start_sim(cluster, 3)
        await cluster.wait_healthy_quorum(timeout=120)
        await wait_open_pipeline(cluster)
        yield Quorum(cluster, sim)
    finally:
        if sim is not None:
            await sim.stop()
        cluster.stop_all()


async def test_scm_status_page_of_a_secure_quorum(browser: Chromium, quorum: Quorum) -> None:
    cluster, sim = quorum.cluster, quorum.sim
    assert cluster.secure is not None
    leader = await cluster.wait_leader(timeout=60)
    views = {v["index"]: v for v in await cluster.node_views()}
    cluster_id = views[leader]["clusterId"]
    hostnames = sorted(dn.hostname for dn in sim.datanodes)

    async def reports_every_datanode() -> bool:
        status = json.loads(cluster.fetch(leader, "/api/status"))
        return sorted(n["hostname"] for n in status.get("nodes", [])) == hostnames

    await wait_until(reports_every_datanode, 60, "the leader's /api/status listing every datanode")

    for index, s in enumerate(cluster.scms):
        assert s.http_url.startswith("https://"), f"a secure SCM serves its page over HTTPS, got {s.http_url}"
        served_certificate_chains_to(s.host, s.http_port, cluster.secure.root_cert)
        async with browser.page() as page:
            log = await page.open(s.http_url + "/")
            assert_clean(log, f"{s.node_id}'s status page")
            assert await page.evaluate("document.title") == "Storage Container Manager"
            heading = await page.evaluate("document.querySelector('h1').innerText")
            summary = await page.evaluate("document.querySelector('p').innerText")
            assert str(s.node_id) in heading, heading
            assert f"Cluster {cluster_id}" in summary, summary
            role = "LEADER" if index == leader else "FOLLOWER"
            assert f"HA role: {role}" in summary, summary
            if index != leader:
                await keep_screenshot(page, f"scm-status-follower-{index}")
                continue
            datanodes = await page.evaluate(section_text("Datanodes"))
            rows = await page.evaluate(section_rows("Datanodes"))
            assert rows == 1 + len(hostnames), f"datanode table rows: {rows}: {datanodes}"
            for host in hostnames:
                assert host in datanodes, f"{host} missing from the datanode table: {datanodes}"
            assert "HEALTHY" in datanodes, datanodes
            assert "out of safe mode" in await page.evaluate(section_text("Safe mode"))
            await keep_screenshot(page, "scm-status-leader")


def _section(heading: str) -> str:
    """The element after the ``<h2>`` whose text starts with ``heading``."""
    return f"Array.from(document.querySelectorAll('h2')).find(h => h.innerText.startsWith({json.dumps(heading)}))" \
        ".nextElementSibling"


def section_text(heading: str) -> str:
    return _section(heading) + ".innerText"


def section_rows(heading: str) -> str:
    return _section(heading) + ".querySelectorAll('tr').length"


def holders(sim: DatanodeSimulator, cid: int) -> list[SimDatanode]:
    return [dn for dn in sim.datanodes if cid in dn.containers]


def drop_replica(dn: SimDatanode, cid: int) -> None:
    """The datanode loses its replica of ``cid`` and says so in an incremental report."""
    replica = dn.containers.pop(cid)
    gone = replica.to_proto(dn.sim.container_size)
    gone.state = RState.DELETED  # type: ignore[assignment]
    dn._icr(gone)


def run_cli(cluster: HALocalCluster, *args: str, timeout: float = 660) -> subprocess.CompletedProcess[str]:
    """``ozone-scm`` as the quorum's admin (its client certificate and configuration)."""
    assert cluster.secure is not None
    return subprocess.run(
        [sys.executable, "-m", "scm_server.cli.main", "--conf", str(cluster.secure.admin_conf_dir), *args],
        capture_output=True, text=True, timeout=timeout,
    )


async def audit_run(cluster: HALocalCluster, input_dir: Path, out_dir: Path) -> dict[str, Any]:
    """``ozone-scm audit run`` as a user runs it (spark-submit, local[2]); in a thread, so that the simulated
    datanodes in this event loop keep heartbeating."""
    started = time.monotonic()
    proc = await asyncio.to_thread(
        run_cli, cluster, "audit", "run", "--input", str(input_dir), "--out", str(out_dir), "--master", "local[2]",
        "--timeout", "600",
    )
    assert proc.returncode == 0, f"audit run failed after {time.monotonic() - started:.0f} s: {proc.stderr[-3000:]}"
    print(f"audit run: {time.monotonic() - started:.1f} s")
    summary: dict[str, Any] = json.loads((out_dir / "summary.json").read_text())
    return summary


async def test_audit_report(browser: Chromium, quorum: Quorum, tmp_path: Path) -> None:
    """Three CLOSED containers; the datanodes lose one replica of one of them (UNDER_REPLICATED); every SCM exported at
    one barrier; the audit run twice (the trends chart draws from the second run on)."""
    cluster, sim = quorum.cluster, quorum.sim
    async with SCMClient(cluster.client_addresses, CLIENT_CONFIG, security=cluster.client_security) as admin:
        cids = []
        for _ in range(3):
            cwp = await admin.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "browser-test")
            cid = cwp.containerInfo.containerID
            await sim.write_to_container(cid, 1 << 20, 1, cwp.pipeline)
            cids.append(cid)
        for cid in cids:
            await admin.close_container(cid)

        async def all_closed() -> bool:
            states = [(await admin.get_container(c)).state for c in cids]
            return all(state == hdds_pb2.CLOSED for state in states)

        await wait_until(all_closed, 60, "the three containers CLOSED")
        lost = cids[0]
        drop_replica(holders(sim, lost)[0], lost)

        async def leader_sees_two() -> bool:
            _, replicas = await admin.get_container_with_pipeline(lost)
            return len(replicas) == 2

        await wait_until(leader_sees_two, 60, f"the leader listing two replicas of container {lost}")

    export_dir, out = tmp_path / "export", tmp_path / "report"
    exported = await asyncio.to_thread(run_cli, cluster, "admin", "audit", "export", "--all-scms", "--out",
                                       str(export_dir))
    assert exported.returncode == 0, exported.stderr
    await audit_run(cluster, export_dir, out)
    summary = await audit_run(cluster, export_dir, out)
    assert summary["findings"]["byKind"].get("UNDER_REPLICATED") == 1, summary["findings"]
    report = out / "report.html"
    assert report.exists(), f"no report.html in {out}: {sorted(p.name for p in out.iterdir())}"

    async with browser.page() as page:
        log = await page.open(report.as_uri())
        assert_clean(log, "the audit report")
        text = await page.evaluate("document.body.innerText")
        for kind in summary["findings"]["byKind"]:
            assert kind in text, f"finding kind {kind} is not on the page"
        assert summary["primary"] in text, f"the headline view ({summary['primary']}) is not named on the page"
        charts = await page.evaluate("document.querySelectorAll('svg.chart').length")
        assert charts >= 3, f"expected the datanode, rack and trend charts as inline SVG, found {charts}"
        overflowing = await page.evaluate(
            "Array.from(document.querySelectorAll('svg.chart')).filter(svg => svg.getBoundingClientRect().right >"
            " svg.parentElement.getBoundingClientRect().right + 1).length"
        )
        assert overflowing == 0, f"{overflowing} chart(s) drawn past the edge of their panel"
        lines = await page.evaluate("document.querySelectorAll('svg.chart polyline, svg.chart path').length")
        assert lines >= 1, "the trends chart draws no line after two runs"
        in_a_cell = await page.evaluate(
            f"Array.from(document.querySelectorAll('td')).some(td => td.innerText.trim() == '{lost}')"
        )
        assert in_a_cell, f"container {lost} (UNDER_REPLICATED) is in no findings table cell"
        await keep_screenshot(page, "audit-report")
