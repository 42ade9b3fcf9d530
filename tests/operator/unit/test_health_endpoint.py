"""The operator's own ``/healthz`` (``effects/web.py``), which the chart's liveness and readiness probes call: what
it reports that kopf's liveness endpoint could not (docs/kubernetes.md, "Why not kopf's probes"): a standby that
runs no kopf is healthy and names the Lease holder; a stalled reconcile loop fails the probe and is named with how
long it has been stuck."""

from __future__ import annotations

import aiohttp

from ozone_scm_operator.effects import web


async def _get(port: int, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}{path}") as r:
        return r.status, await r.text()


async def test_healthz_reports_standby_running_and_stalled_loops() -> None:
    now = [1000.0]
    health = web.Health(stall_after=300.0, clock=lambda: now[0])
    metrics = web.Metrics.create()
    runner, port = await web.start(health, metrics, "127.0.0.1", 0)
    try:
        status, body = await _get(port, "/healthz")
        assert status == 500 and '"operator": "not running"' in body, body  # neither kopf nor standing by
        health.standby, health.holder = True, "ozone-scm-operator-7d9f-abcde"
        status, body = await _get(port, "/healthz")
        assert status == 200 and '"operator": "standby"' in body and '"leaseHolder": "ozone-scm-operator-7d9f-abcde"' \
            in body, body
        health.standby, health.operator_running = False, True
        health.started("ns/scm")
        health.started("ns/other")
        now[0] += 200.0
        health.passed("ns/other")
        status, body = await _get(port, "/healthz")
        assert status == 200 and '"clusters": 2' in body and '"stalled": {}' in body, body
        now[0] += 112.4  # ns/scm's last pass 312.4 s ago, beyond stall_after
        status, body = await _get(port, "/healthz")
        assert status == 500 and '"stalled": {"ns/scm": 312.4}' in body, body
        health.stopped("ns/scm")  # a loop that ended is no longer watched
        status, _ = await _get(port, "/healthz")
        assert status == 200
        status, text = await _get(port, "/metrics")
        assert status == 200 and "ozone_scm_operator_leader" in text
    finally:
        await runner.cleanup()
