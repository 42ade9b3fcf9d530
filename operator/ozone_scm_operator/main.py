"""``ozone-scm-operator``: the console script, and ``run_operator`` (the same thing, in-process, for tests).

Runs kopf (``handlers.make_registry``) next to the ``/healthz`` and ``/metrics`` server until stopped. Connection:
``--server URL`` (no authentication: ``kubectl proxy`` or the tests' emulated API server), else the in-cluster
service account, else kubeconfig.

Leader election (on by default, ``--no-leader-elect`` for a single replica that needs no Lease): the process first
waits to hold the ``coordination.k8s.io/v1`` Lease (``effects.lease``; the chart runs two replicas), serving
``/healthz`` as a healthy standby and starting nothing else: no kopf, no watches, no handlers. Once it holds the
Lease it starts kopf and keeps renewing; the moment the Lease is lost it stops acting (the reconciler checks the
claim before every write) and exits (``EXIT_LEASE_LOST``), as controller-runtime's managers do, so the
Deployment restarts it as a fresh standby. A clean stop (SIGTERM) releases the Lease, so the standby takes over
at once instead of after the lease duration.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Sequence

import click
import kopf

from ozone_scm_operator import election
from ozone_scm_operator.effects import web
from ozone_scm_operator.effects.kube import ConnectionSettings, KubeClient, load_configuration
from ozone_scm_operator.effects.lease import LeaseElector, LeaseSettings, default_identity, default_namespace
from ozone_scm_operator.effects.scm import SCMAdmin
from ozone_scm_operator.effects.store import WatchStore
from ozone_scm_operator.handlers import Runtime, make_registry
from ozone_scm_operator.reconciler import Reconciler, ReconcilerSettings

LOG = logging.getLogger("ozone_scm_operator")
# tests only: "<ActionKind>:<target>" exits before that action, "<ActionKind>:<target>:pause" blocks before it,
# "<ActionKind>:<target or *>:gate=<file>" waits for <file> to exist (and removes it) after the plan's check, before
# the step's re-check
FAILPOINT_ENV = "OZONE_SCM_OPERATOR_FAILPOINT"
EXIT_LEASE_LOST = 3  # the process's exit status when it loses the leader-election Lease


def _failpoint(value: str) -> tuple[str, str, str] | None:
    """(kind, target, "exit" | "pause" | "gate=<file>") or None."""
    if not value:
        return None
    parts = value.split(":", 2)
    mode = parts.pop() if len(parts) == 3 else "exit"
    if len(parts) != 2 or not all(parts) or not (mode in ("exit", "pause") or mode.startswith("gate=/")):
        raise click.BadParameter(f"{FAILPOINT_ENV}={value!r}: expected <ActionKind>:<target>[:pause|:gate=<absolute "
                                 "file>], e.g. CreatePod:scm-1")
    kind, target = parts
    what = {"exit": "exits", "pause": "blocks"}.get(mode, f"waits for {mode[5:]}")
    LOG.warning("failpoint armed: the operator %s before %s %s", what, kind, target)
    return kind, target, mode


@dataclasses.dataclass(frozen=True)
class OperatorOptions:
    namespaces: Sequence[str] = ()  # empty: every namespace
    server: str | None = None
    kubeconfig: str | None = None
    cluster_domain: str = "cluster.local"
    poll_interval: float = 5.0
    resync: float = 300.0
    health_host: str = "0.0.0.0"
    health_port: int = 8080
    stall_after: float = 300.0
    watch_timeout: float = 60.0
    probe_timeout: float = 2.0
    crash_before: tuple[str, str] | None = None  # test failpoint, see ReconcilerSettings
    pause_before: tuple[str, str] | None = None  # test failpoint, see ReconcilerSettings
    gate_before: tuple[str, str, str] | None = None  # test failpoint, see ReconcilerSettings
    leader_election: LeaseSettings | None = None  # None: act at once, as the only replica


def lose_lease(reason: str) -> None:
    """Default reaction to a lost Lease: stop acting at once by ending the process (no cleanup that could write)."""
    LOG.error("leader election: lost the Lease (%s); exiting so that only the new holder acts", reason)
    logging.shutdown()
    os._exit(EXIT_LEASE_LOST)


@dataclasses.dataclass
class Running:
    """Handles to a running operator, for tests (health port, metrics, runtime)."""

    health_port: int = 0
    runtime: Runtime | None = None
    started: threading.Event = dataclasses.field(default_factory=threading.Event)


async def run_operator(
    options: OperatorOptions,
    *,
    stop_flag: asyncio.Event | None = None,
    ready_flag: asyncio.Event | None = None,
    running: Running | None = None,
    on_lease_lost: Callable[[str], None] = lose_lease,
) -> None:
    cfg = load_configuration(options.server, options.kubeconfig)
    le = options.leader_election
    kube = KubeClient(cfg, instance=le.identity if le is not None else None)
    metrics = web.Metrics.create()
    health = web.Health(stall_after=options.stall_after)
    elector = LeaseElector(kube, le) if le is not None else None
    reconciler = Reconciler(
        kube,
        SCMAdmin(probe_timeout=options.probe_timeout),
        settings=ReconcilerSettings(
            cluster_domain=options.cluster_domain, poll_interval=options.poll_interval, resync=options.resync,
            crash_before=options.crash_before, pause_before=options.pause_before, gate_before=options.gate_before,
        ),
        metrics=metrics,
        fence=elector.leading if elector is not None else None,
        store=WatchStore(kube),
    )
    rt = Runtime(reconciler=reconciler, connection=ConnectionSettings.of(cfg), health=health,
                 watch_timeout=options.watch_timeout)
    registry = make_registry(rt)
    runner, port = await web.start(health, metrics, options.health_host, options.health_port)
    if running is not None:
        running.health_port = port
        running.runtime = rt
        running.started.set()
    LOG.info("ozone-scm-operator: /healthz and /metrics on %s:%d; watching %s", options.health_host, port,
             ", ".join(options.namespaces) or "all namespaces")
    holding: asyncio.Task[None] | None = None
    if elector is None:
        metrics.leader.set(1)  # the only replica: it acts at once
    else:
        health.standby = True
        try:
            acquired = await _standby(elector, health, stop_flag)
        except BaseException:
            await runner.cleanup()
            kube.close()
            raise
        health.standby = False
        if not acquired:
            await runner.cleanup()
            kube.close()
            return
        metrics.leader.set(1)
        holding = asyncio.create_task(_hold(elector, metrics, on_lease_lost))
    health.operator_running = True
    try:
        await kopf.operator(
            registry=registry,
            clusterwide=not options.namespaces,
            namespaces=list(options.namespaces),
            standalone=True,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        health.operator_running = False
        if holding is not None:
            holding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await holding
        metrics.leader.set(0)
        if elector is not None:
            await elector.release()
        await runner.cleanup()
        kube.close()


async def _standby(elector: LeaseElector, health: web.Health, stop_flag: asyncio.Event | None) -> bool:
    """Wait for the Lease, keeping ``/healthz`` informed of who holds it."""
    task = asyncio.ensure_future(elector.acquire(stop_flag))
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=1.0)
            health.holder = elector.holder
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    health.holder = elector.holder
    return task.result()


async def _hold(elector: LeaseElector, metrics: web.Metrics, on_lost: Callable[[str], None]) -> None:
    try:
        reason = await elector.hold()
    except Exception as exc:  # a renewal loop that dies must not leave a leader acting without renewing
        LOG.exception("leader election: the renewal loop failed")
        reason = f"the renewal loop failed: {exc!r}"
    metrics.leader.set(0)
    on_lost(reason)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-n", "--namespace", "namespaces", multiple=True, help="Watch only this namespace (repeatable); default: all.")
@click.option("--server", help="Kubernetes API URL without authentication (kubectl proxy); default: in-cluster, then kubeconfig.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")
@click.option("--cluster-domain", default="cluster.local", show_default=True, help="DNS domain of the Kubernetes cluster.")
@click.option("--poll-interval", default=5.0, show_default=True, type=float, help="Seconds between passes of a steady cluster.")
@click.option("--resync-period", default=300.0, show_default=True, type=float,
              help="Seconds between a cluster's passes that LIST its objects instead of reading kopf's watches.")
@click.option("--health-port", default=8080, show_default=True, type=int, help="Port of /healthz and /metrics.")
@click.option("--health-host", default="0.0.0.0", show_default=True, help="Address of /healthz and /metrics.")
@click.option("--log-level", default="INFO", show_default=True, type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]))
@click.option("--leader-elect/--no-leader-elect", default=True, show_default=True,
              help="Act only while holding the leader-election Lease (run several replicas, one active).")
@click.option("--leader-elect-resource-name", default="ozone-scm-operator", show_default=True,
              help="Name of the coordination.k8s.io/v1 Lease.")
@click.option("--leader-elect-resource-namespace", default=None,
              help="Namespace of the Lease. Default: $POD_NAMESPACE, the service account's, the kubeconfig "
                   "context's, else default.")
@click.option("--leader-elect-identity", default=None,
              help="This replica's holderIdentity, unique per running replica. Default: $POD_NAME, else the host name.")
@click.option("--leader-elect-lease-duration", default=15, show_default=True, type=int,
              help="Seconds a standby waits, after it last saw the Lease change, before taking it over.")
@click.option("--leader-elect-renew-deadline", default=10.0, show_default=True, type=float,
              help="Seconds the holder keeps acting without a successful renewal; must be below the lease duration.")
@click.option("--leader-elect-retry-period", default=2.0, show_default=True, type=float,
              help="Seconds between attempts to acquire or renew the Lease.")
def main(
    namespaces: tuple[str, ...], server: str | None, kubeconfig: str | None, cluster_domain: str, poll_interval: float,
    resync_period: float, health_port: int, health_host: str, log_level: str, leader_elect: bool, leader_elect_resource_name: str,
    leader_elect_resource_namespace: str | None, leader_elect_identity: str | None, leader_elect_lease_duration: int,
    leader_elect_renew_deadline: float, leader_elect_retry_period: float,
) -> None:
    """Run the OzoneSCMCluster operator (several replicas: one active, the others standing by for the Lease)."""
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if poll_interval <= 0:
        raise click.BadParameter("must be positive", param_hint="--poll-interval")
    if resync_period <= 0:
        raise click.BadParameter("must be positive", param_hint="--resync-period")
    lease = None
    if leader_elect:
        timing = election.Timing(leader_elect_lease_duration, leader_elect_renew_deadline, leader_elect_retry_period)
        problems = timing.problems()
        if problems:
            raise click.UsageError(problems[0])
        lease = LeaseSettings(
            namespace=leader_elect_resource_namespace or default_namespace(kubeconfig, server),
            name=leader_elect_resource_name, identity=leader_elect_identity or default_identity(), timing=timing,
        )
    failpoint = _failpoint(os.environ.get(FAILPOINT_ENV, ""))
    options = OperatorOptions(
        namespaces=namespaces, server=server, kubeconfig=kubeconfig, cluster_domain=cluster_domain,
        poll_interval=poll_interval, resync=resync_period, health_host=health_host, health_port=health_port,
        crash_before=failpoint[:2] if failpoint is not None and failpoint[2] == "exit" else None,
        pause_before=failpoint[:2] if failpoint is not None and failpoint[2] == "pause" else None,
        gate_before=((failpoint[0], failpoint[1], failpoint[2][5:]) if failpoint is not None
                     and failpoint[2].startswith("gate=") else None),
        leader_election=lease,
    )
    asyncio.run(run_operator(options))


if __name__ == "__main__":  # pragma: no cover
    main()
