"""``ozone-scm-operator``: the console script, and ``run_operator`` (the same thing, in-process, for tests).

Runs kopf (``handlers.make_registry``) next to the ``/healthz`` and ``/metrics`` server until stopped. Connection:
``--server URL`` (no authentication: ``kubectl proxy`` or the tests' emulated API server), else the in-cluster
service account, else kubeconfig. Run exactly one replica (Deployment strategy ``Recreate``): kopf's peering is
not leader election, and the operator relies on being the only writer of each cluster's status.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import threading
from collections.abc import Sequence

import click
import kopf

from ozone_scm_operator.effects import web
from ozone_scm_operator.effects.kube import ConnectionSettings, KubeClient, load_configuration
from ozone_scm_operator.effects.scm import SCMAdmin
from ozone_scm_operator.handlers import Runtime, make_registry
from ozone_scm_operator.reconciler import Reconciler, ReconcilerSettings

LOG = logging.getLogger("ozone_scm_operator")
FAILPOINT_ENV = "OZONE_SCM_OPERATOR_FAILPOINT"  # tests only: "<ActionKind>:<target>", exit before that action


def _failpoint(value: str) -> tuple[str, str] | None:
    if not value:
        return None
    kind, sep, target = value.partition(":")
    if not sep or not kind or not target:
        raise click.BadParameter(f"{FAILPOINT_ENV}={value!r}: expected <ActionKind>:<target>, e.g. CreatePod:scm-1")
    LOG.warning("failpoint armed: the operator exits before %s %s", kind, target)
    return kind, target


@dataclasses.dataclass(frozen=True)
class OperatorOptions:
    namespaces: Sequence[str] = ()  # empty: every namespace
    server: str | None = None
    kubeconfig: str | None = None
    cluster_domain: str = "cluster.local"
    poll_interval: float = 5.0
    health_host: str = "0.0.0.0"
    health_port: int = 8080
    stall_after: float = 300.0
    watch_timeout: float = 60.0
    probe_timeout: float = 2.0
    crash_before: tuple[str, str] | None = None  # test failpoint, see ReconcilerSettings


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
) -> None:
    cfg = load_configuration(options.server, options.kubeconfig)
    kube = KubeClient(cfg)
    metrics = web.Metrics.create()
    health = web.Health(stall_after=options.stall_after)
    reconciler = Reconciler(
        kube,
        SCMAdmin(probe_timeout=options.probe_timeout),
        settings=ReconcilerSettings(
            cluster_domain=options.cluster_domain, poll_interval=options.poll_interval, crash_before=options.crash_before
        ),
        metrics=metrics,
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
        await runner.cleanup()
        kube.close()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-n", "--namespace", "namespaces", multiple=True, help="Watch only this namespace (repeatable); default: all.")
@click.option("--server", help="Kubernetes API URL without authentication (kubectl proxy); default: in-cluster, then kubeconfig.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")
@click.option("--cluster-domain", default="cluster.local", show_default=True, help="DNS domain of the Kubernetes cluster.")
@click.option("--poll-interval", default=5.0, show_default=True, type=float, help="Seconds between passes of a steady cluster.")
@click.option("--health-port", default=8080, show_default=True, type=int, help="Port of /healthz and /metrics.")
@click.option("--health-host", default="0.0.0.0", show_default=True, help="Address of /healthz and /metrics.")
@click.option("--log-level", default="INFO", show_default=True, type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]))
def main(
    namespaces: tuple[str, ...], server: str | None, kubeconfig: str | None, cluster_domain: str, poll_interval: float,
    health_port: int, health_host: str, log_level: str,
) -> None:
    """Run the OzoneSCMCluster operator (one replica)."""
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if poll_interval <= 0:
        raise click.BadParameter("must be positive", param_hint="--poll-interval")
    options = OperatorOptions(
        namespaces=namespaces, server=server, kubeconfig=kubeconfig, cluster_domain=cluster_domain,
        poll_interval=poll_interval, health_host=health_host, health_port=health_port,
        crash_before=_failpoint(os.environ.get(FAILPOINT_ENV, "")),
    )
    asyncio.run(run_operator(options))


if __name__ == "__main__":  # pragma: no cover
    main()
