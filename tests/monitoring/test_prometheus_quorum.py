"""A real Prometheus scraping a real 3-SCM quorum (secure, /prom over HTTPS) and the real operator with the
chart's rules and dashboard.

The operator runs in this event loop against the emulated API server (tests/e2e/local/apiserver.py) with one
OzoneSCMCluster ``local/test`` (its Pods never run: there is no kubelet here; the operator's gauges and reconcile
counters are what the dashboard needs).

The rules file is charts/ozone-scm-operator/files/ozone-scm-rules.yaml with every ``for`` cut to 2s (the expressions
as shipped; the real durations are in the promtool unit tests). What is checked, all through Prometheus' HTTP API:

* once Prometheus sees a leader, ``OzoneSCMNoLeader`` is inactive within a few scrape and evaluation intervals (it
  may be pending from the election at start);
* every dashboard panel's query returns series while the ring is healthy (after one backup, so the backup-age
  panel has its metric; the certificate panel has the members' certificates);
* the leader is killed: the ring elects another; then that one is killed too, a majority is gone:
  ``OzoneSCMNoLeader`` fires, and the survivor reports ``scm_raft_leader_known 0``;
* the two members come back: the alert clears;
* the operator stops: ``OzoneSCMOperatorDown`` fires.

Timings are printed (the machine is shared), never asserted tightly. Run by ``make monitoring-test``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from ozone_scm_operator.main import OperatorOptions, Running, run_operator
from scm_server.local.quorum import HALocalCluster
from scm_server.ports import free_port
from tests.e2e.local.apiserver import serving
from tests.integration.ha.harness import TEST_SETTINGS, cli, start_sim, wait_until

from .prom import Prometheus, panel_queries, rules_with_short_for

pytestmark = [pytest.mark.monitoring, pytest.mark.timeout(600)]
JOB = "ozone-scm"
OP_JOB = "ozone-scm-operator"
REPO = Path(__file__).resolve().parents[2]
INTERVAL = 1.0  # seconds: Prometheus' scrape and evaluation interval in this test
# How long an alert may lag the samples that clear it: one scrape to see the sample, one evaluation to clear the alert,
# times 5 for a loaded machine (a shared 2-core machine ran these at load average 5)
CLEAR_BOUND = 5 * (INTERVAL + INTERVAL)


def scrape_configs(cluster: HALocalCluster, operator_port: int) -> list[dict[str, Any]]:
    """One static target per member, labelled as the chart's PodMonitor labels a Pod (job, namespace,
    scm_cluster, pod); HTTPS with the ring's root CA, as ``ozone.http.policy=HTTPS_ONLY`` serves /prom."""
    assert cluster.secure is not None
    return [{
        "job_name": JOB,
        "metrics_path": "/prom",
        "scheme": "https",
        "tls_config": {"ca_file": str(cluster.secure.root_cert)},
        "static_configs": [
            {"targets": [f"127.0.0.1:{s.http_port}"],
             "labels": {"namespace": "local", "scm_cluster": "test", "pod": str(s.node_id)}}
            for s in cluster.scms
        ],
    }, {
        # as the chart's operator PodMonitor: the gauges keep their namespace/cluster labels
        "job_name": OP_JOB,
        "honor_labels": True,
        "static_configs": [{"targets": [f"127.0.0.1:{operator_port}"], "labels": {"pod": "operator-0"}}],
    }]


async def test_no_leader_fires_and_clears_and_every_panel_has_series(tmp_path: Path) -> None:
    cluster = HALocalCluster(tmp_path / "c", 3, settings=TEST_SETTINGS, secure=True)
    prom: Prometheus | None = None
    sim = None
    op_port = free_port()
    try:
        cluster.start_quorum()
        rules = rules_with_short_for(tmp_path / "rules.yaml", "2s")
        prom = Prometheus(tmp_path / "prom", scrape_configs(cluster, op_port), [rules], interval=f"{INTERVAL:g}s")
        prom.start()
        async with serving() as (api, url):
            # the CRD exists before the operator starts, as helm and manifests/ install it (the operator does not
            # scan for CRDs created later: docs/kubernetes.md, "RBAC")
            for crd in sorted((REPO / "crds").glob("*.yaml")):  # every CRD the operator watches
                api.put_object(yaml.safe_load(crd.read_text()))
            async with running_operator(url, op_port) as stop_operator:
                api.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "local"}})
                api.put_object({"apiVersion": "ozone-scm.io/v1alpha1", "kind": "OzoneSCMCluster",
                                "metadata": {"name": "test", "namespace": "local"}, "spec": {"replicas": 3}})
                sim = await start_sim(cluster, 3)
                await _scenario(cluster, prom, tmp_path, stop_operator)
    finally:
        if sim is not None:
            await sim.stop()
        if prom is not None:
            prom.stop()
        cluster.stop_all()


@contextlib.asynccontextmanager
async def running_operator(url: str, port: int):  # type: ignore[no-untyped-def]
    """The operator (kopf, its reconcile loops, /metrics on ``port``) in this event loop; yields a stop function."""
    stop_flag = asyncio.Event()
    running = Running()
    opts = OperatorOptions(server=url, health_host="127.0.0.1", health_port=port, poll_interval=0.5)
    task = asyncio.create_task(run_operator(opts, stop_flag=stop_flag, running=running))

    async def stop() -> None:
        stop_flag.set()
        with contextlib.suppress(asyncio.CancelledError):  # kopf cancels daemons that outlive the grace
            await asyncio.wait_for(task, 30)

    async def started() -> bool:
        assert not task.done(), f"the operator exited: {task.exception() if not task.cancelled() else 'cancelled'}"
        return bool(running.health_port)

    try:
        await wait_until(started, 30, "the operator's /metrics")
        yield stop
    finally:
        if not task.done():
            await stop()


async def _scenario(cluster: HALocalCluster, prom: Prometheus, tmp_path: Path, stop_operator: Any) -> None:
    await cluster.wait_healthy_quorum(timeout=120)

    async def q(expr: str) -> list[dict[str, Any]]:
        return prom.query(expr)

    async def all_up() -> bool:
        return len(await q(f'up{{job="{JOB}"}} == 1')) == 3

    await wait_until(all_up, 60, "Prometheus scraping all three members")
    await wait_until(lambda: q(f'ozone_scm_operator_members_desired{{job="{OP_JOB}", cluster="test"}} == 3'), 60,
                     "the operator's gauges for local/test in Prometheus")
    await wait_until(lambda: q(f'max(scm_is_leader{{job="{JOB}"}}) == 1'), 60, "a leader seen by Prometheus")
    # The rule ran while the ring was still electing, so OzoneSCMNoLeader may be pending (or firing: its `for` is cut
    # to 2s) at the instant a leader is first seen; it clears at the first evaluation that sees the leader's sample.
    # Wait for that, bounded by CLEAR_BOUND (a few scrape + evaluation intervals): an alert that stays pending or
    # firing longer while a leader is scraped fails here.
    leader_seen_at = time.monotonic()

    async def no_leader_inactive() -> bool:
        return prom.alert_state("OzoneSCMNoLeader") == "inactive"

    await wait_until(no_leader_inactive, CLEAR_BOUND,
                     "OzoneSCMNoLeader inactive once Prometheus sees a leader", interval=0.1)
    print(f"\nOzoneSCMNoLeader inactive {time.monotonic() - leader_seen_at:.1f}s after a leader was first seen")

    # one backup, so that the backup metric and its panel have a series
    backup = cli(cluster, "admin", "scm", "backup", "--out", str(tmp_path / "backup"))
    assert backup.returncode == 0, backup.stderr
    served = await wait_until(lambda: q(f'scm_backup_last_served_timestamp_seconds{{job="{JOB}"}}'), 30,
                              "scm_backup_last_served_timestamp_seconds in Prometheus")
    assert len(served) == 1 and abs(float(served[0]["value"][1]) - time.time()) < 120

    # every panel of the dashboard returns series from this Prometheus
    empty: dict[str, str] = {}
    for title, expr in panel_queries():
        async def has_series(e: str = expr) -> bool:
            return bool(await q(e))
        try:
            await wait_until(has_series, 30, f"series for panel {title!r}", interval=0.5)
        except AssertionError:
            empty[title] = expr
    assert not empty, f"dashboard panels without series: {empty}"

    # the leader dies: another is elected
    first = await cluster.wait_leader(timeout=30)
    cluster.kill(first, signal.SIGKILL)
    second = await cluster.wait_leader(timeout=60, exclude=first)
    # then that one too: a majority is gone
    killed_at = time.monotonic()
    cluster.kill(second, signal.SIGKILL)
    survivor = ({0, 1, 2} - {first, second}).pop()

    async def firing() -> bool:
        return prom.alert_state("OzoneSCMNoLeader") == "firing"

    await wait_until(firing, 90, "OzoneSCMNoLeader firing after a majority was killed", interval=0.25)
    fired_after = time.monotonic() - killed_at
    alert = prom.alerts("OzoneSCMNoLeader")[0]
    assert alert["labels"]["severity"] == "critical" and alert["labels"]["scm_cluster"] == "test"
    node = str(cluster.scms[survivor].node_id)
    await wait_until(lambda: q(f'scm_raft_leader_known{{job="{JOB}", pod="{node}"}} == 0'), 30,
                     "the survivor reporting scm_raft_leader_known 0")

    # the two come back: a leader again, the alert clears
    restarted_at = time.monotonic()
    cluster.start_node(first)
    cluster.start_node(second)

    async def cleared() -> bool:
        return prom.alert_state("OzoneSCMNoLeader") == "inactive"

    await wait_until(cleared, 120, "OzoneSCMNoLeader clearing after the members came back", interval=0.25)
    cleared_after = time.monotonic() - restarted_at
    assert await q(f'max(scm_is_leader{{job="{JOB}"}}) == 1')
    print(f"\nOzoneSCMNoLeader (for cut to 2s, scrape/eval every 1s): firing {fired_after:.1f}s after the "
          f"majority was killed, cleared {cleared_after:.1f}s after the two were restarted")

    # the operator goes away: OzoneSCMOperatorDown. It runs in this event loop, which the failover above can hold
    # for seconds (a run under load: six 1 s scrape timeouts of its /metrics while the two members restarted), so
    # with `for` cut to 2s the alert may be firing now; it clears at the first evaluation after a scrape succeeds.
    # Wait for that (bounded as above) before stopping it, so that "firing" below is the stop's doing.
    async def operator_up() -> bool:
        return prom.alert_state("OzoneSCMOperatorDown") == "inactive"

    await wait_until(operator_up, CLEAR_BOUND, "OzoneSCMOperatorDown inactive while the operator runs", interval=0.1)
    await stop_operator()
    stopped_at = time.monotonic()

    async def operator_down() -> bool:
        return prom.alert_state("OzoneSCMOperatorDown") == "firing"

    await wait_until(operator_down, 60, "OzoneSCMOperatorDown firing after the operator stopped")
    print(f"OzoneSCMOperatorDown (for cut to 2s): firing {time.monotonic() - stopped_at:.1f}s after the operator stopped")
