"""The operator's own HTTP endpoints: ``/healthz`` (the Deployment's liveness probe) and ``/metrics`` (Prometheus).

Started by ``main.run_operator`` next to kopf. ``/healthz`` answers 200 while the kopf operator task runs (or, with
leader election, while this replica stands by for the Lease: a standby must count as ready, or a rolling update of
the Deployment never completes) and every cluster's reconcile loop completed a pass recently (a loop stuck longer
than ``stall_after`` seconds, for example on an API call that never returns, makes it 500 so the kubelet restarts
the operator; the intent written to status makes the restart safe). ``/metrics`` serves the operator's own
registry.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)


@dataclasses.dataclass
class Metrics:
    registry: CollectorRegistry
    reconciles: Counter
    reconcile_seconds: Histogram
    actions: Counter
    action_errors: Counter
    observation_reads: Counter
    cluster_ready: Gauge
    members_ready: Gauge
    members_desired: Gauge
    member_lag: Gauge
    certificate_expiry: Gauge
    audit_findings: Gauge
    backup_last_completed: Gauge
    backup_deadline: Gauge
    leader: Gauge

    @classmethod
    def create(cls) -> Metrics:
        r = CollectorRegistry()
        labels = ["namespace", "cluster"]
        return cls(
            registry=r,
            reconciles=Counter("ozone_scm_operator_reconcile", "Reconcile passes by result", ["result"], registry=r),
            reconcile_seconds=Histogram(
                "ozone_scm_operator_reconcile_duration_seconds", "Duration of one reconcile pass", registry=r,
                buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            ),
            actions=Counter("ozone_scm_operator_actions", "Actions taken, by kind", ["kind"], registry=r),
            action_errors=Counter("ozone_scm_operator_action_errors", "Actions that failed, by kind", ["kind"], registry=r),
            observation_reads=Counter(
                "ozone_scm_operator_observation_reads",
                "Reads a pass made past the watch-fed store: 'fresh' (an object written since the watch last "
                "delivered it, one GET each), 'resync' (a pass that LISTed, every --resync-period)", ["reason"],
                registry=r),
            cluster_ready=Gauge("ozone_scm_operator_cluster_ready", "1 if the cluster's Ready condition is True", labels,
                                registry=r),
            members_ready=Gauge("ozone_scm_operator_members_ready", "Ready, caught-up members", labels, registry=r),
            members_desired=Gauge("ozone_scm_operator_members_desired", "Desired members", labels, registry=r),
            member_lag=Gauge("ozone_scm_operator_member_lag", "Raft entries a member is behind the leader",
                             [*labels, "member"], registry=r),
            certificate_expiry=Gauge(
                "ozone_scm_operator_certificate_expiry_timestamp_seconds",
                "Expiry of a member's sub-CA certificate (Unix time)", [*labels, "member"], registry=r,
            ),
            audit_findings=Gauge(
                "ozone_scm_operator_audit_findings",
                "Findings of the last successful scheduled audit (status.audit.lastSummary.findings)", labels,
                registry=r,
            ),
            backup_last_completed=Gauge(
                "ozone_scm_operator_backup_last_completed_timestamp_seconds",
                "When the cluster's last verified backup completed (status.backup.lastBackupTime, Unix time)", labels,
                registry=r,
            ),
            backup_deadline=Gauge(
                "ozone_scm_operator_backup_deadline_timestamp_seconds",
                "When the next scheduled backup should have completed by (status.backup.deadline, Unix time; only "
                "with spec.backup.schedule, not while suspended)", labels, registry=r,
            ),
            leader=Gauge(
                "ozone_scm_operator_leader",
                "1 while this replica holds the leader-election Lease and acts, 0 while it stands by", registry=r,
            ),
        )


class Health:
    """Liveness bookkeeping: which reconcile loops run, and when each last finished a pass."""

    def __init__(self, stall_after: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_after = stall_after
        self.clock = clock
        self.loops: dict[str, float] = {}
        self.operator_running = False
        # leader election: this replica waits for the Lease (healthy and ready, acting on nothing); ``holder`` is
        # the replica that holds it, as last seen
        self.standby = False
        self.holder = ""

    def started(self, key: str) -> None:
        self.loops[key] = self.clock()

    def passed(self, key: str) -> None:
        self.loops[key] = self.clock()

    def stopped(self, key: str) -> None:
        self.loops.pop(key, None)

    def check(self) -> tuple[bool, dict[str, object]]:
        now = self.clock()
        stalled = {k: round(now - t, 1) for k, t in self.loops.items() if now - t > self.stall_after}
        ok = (self.operator_running or self.standby) and not stalled
        body: dict[str, object] = {
            "status": "ok" if ok else "unhealthy",
            "operator": "running" if self.operator_running else "standby" if self.standby else "not running",
            "clusters": len(self.loops),
            "stalled": stalled,
        }
        if self.holder:
            body["leaseHolder"] = self.holder
        return ok, body


def make_app(health: Health, metrics: Metrics) -> web.Application:
    async def healthz(request: web.Request) -> web.Response:
        ok, body = health.check()
        return web.json_response(body, status=200 if ok else 500)

    async def prom(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", prom)
    return app


async def start(health: Health, metrics: Metrics, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve until the runner is cleaned up; returns it and the bound port (``port=0`` picks a free one)."""
    runner = web.AppRunner(make_app(health, metrics), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = port
    for address in runner.addresses:  # (host, port[, ...]) of each listening socket
        bound = int(address[1])
        break
    return runner, bound
