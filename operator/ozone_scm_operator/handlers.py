"""The kopf handlers: thin wiring from kopf's watches to the reconciler.

Called by kopf (``make_registry`` builds a registry per operator instance, so tests can run several). Nothing here
decides anything:

* one **daemon** per ``OzoneSCMCluster`` runs the reconcile loop: a pass, then a wait until the pass's requeue
  delay elapses or something relevant changes (``Runtime.wake``);
* **event handlers** on the cluster resource, on the Pods, volumes and Secrets the operator manages, on
  ``OzoneSCMBackup`` objects (their ``spec.cluster``) and on the backup Jobs wake the owning cluster's loop (level-based: the event only says "look again", never what to do);
* **indexes** (``@kopf.index``, one per observed kind: Pods, volumes, Secrets, Services, ConfigMaps, PDBs,
  CronJobs, Jobs, ``OzoneSCMBackup``) feed the reconciler's watch-fed store (``effects/store.py``): the reconcile
  passes read them instead of listing every kind every pass; kopf starts no daemon before their initial listings;
* **startup** configures kopf: its own finalizer and progress annotations under ``ozone-scm.io``, no peering
  (one operator replica, ``Recreate``: kopf peering is not leader election);
* **login** hands kopf the same connection the operator's Kubernetes client uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
from collections.abc import Callable
from typing import Any

import kopf

from ozone_scm_operator import API_GROUP, API_VERSION, BACKUP_PLURAL, PLURAL, naming
from ozone_scm_operator.backoff import Backoff
from ozone_scm_operator.effects import store
from ozone_scm_operator.effects.kube import ConnectionSettings, KubeError
from ozone_scm_operator.effects.web import Health
from ozone_scm_operator.reconciler import Reconciler

LOG = logging.getLogger(__name__)

ERROR_BACKOFF = 5.0  # the wait when a pass names none
ERROR_BACKOFF_CAP = 30.0  # the longest wait after failed passes in a row


@dataclasses.dataclass
class Runtime:
    """What the handlers of one operator instance share."""

    reconciler: Reconciler
    connection: ConnectionSettings
    health: Health
    watch_timeout: float = 60.0
    wakes: dict[str, asyncio.Event] = dataclasses.field(default_factory=dict)
    # after a failed pass: growing, jittered waits, never shorter than a 429's Retry-After (backoff.py)
    backoff: Backoff = dataclasses.field(default_factory=lambda: Backoff(base=1.0, cap=ERROR_BACKOFF_CAP))
    draw: Callable[[], float] = random.random

    def wake(self, namespace: str | None, cluster: str | None) -> None:
        if namespace and cluster:
            event = self.wakes.get(f"{namespace}/{cluster}")
            if event is not None:
                event.set()

    async def loop(self, namespace: str, name: str, stopped: kopf.DaemonStopped) -> None:
        key = f"{namespace}/{name}"
        wake = self.wakes.setdefault(key, asyncio.Event())
        self.health.started(key)
        LOG.info("reconcile loop for %s started", key)
        failures = 0
        try:
            while not stopped:
                wake.clear()
                try:
                    delay = await self.reconciler.reconcile(namespace, name)
                    failures = 0
                except Exception as exc:
                    failures += 1
                    retry_after = exc.retry_after if isinstance(exc, KubeError) else None
                    delay = self.backoff.delay(failures, self.draw(), retry_after)
                    LOG.exception("reconcile pass for %s failed (%d in a row); retrying in %.1fs%s", key, failures,
                                  delay, f" (the API server asked for {retry_after:.0f}s)" if retry_after else "")
                self.health.passed(key)
                if delay is not None and delay <= 0:
                    continue
                await self._wait(wake, stopped, delay if delay is not None else ERROR_BACKOFF)
        finally:
            self.health.stopped(key)
            self.wakes.pop(key, None)
            LOG.info("reconcile loop for %s stopped", key)

    @staticmethod
    async def _wait(wake: asyncio.Event, stopped: kopf.DaemonStopped, delay: float) -> None:
        waker = asyncio.ensure_future(wake.wait())
        stopper = asyncio.ensure_future(stopped.wait())
        try:
            await asyncio.wait({waker, stopper}, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (waker, stopper):
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await t


def _owner_cluster(body: Any) -> tuple[str | None, str | None]:
    meta = body.get("metadata") or {}
    return meta.get("namespace"), (meta.get("labels") or {}).get(naming.LABEL_CLUSTER)


def _index_id(plural: str) -> str:
    return f"index_{plural}"


def make_registry(rt: Runtime) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    managed = {naming.LABEL_MANAGED_BY: naming.MANAGER}

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.persistence.finalizer = f"{API_GROUP}/finalizer"
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=API_GROUP, key="last-handled-configuration"
        )
        settings.posting.level = logging.WARNING
        # whole seconds: kopf sends it as ?timeoutSeconds=, which a real API server parses as an integer
        # ("strconv.ParseInt: parsing \"60.0\": invalid syntax", 400, and the watch is lost)
        settings.watching.server_timeout = max(1, round(rt.watch_timeout))
        settings.watching.client_timeout = rt.watch_timeout + 10
        settings.watching.connect_timeout = 10
        settings.peering.standalone = True
        # No runtime scanning of CRDs and namespaces: the chart installs the CRDs before the operator, and the
        # namespaces are the ones it is told to watch. Scanning needs cluster-wide list/watch on namespaces and
        # CRDs, which the chart's namespaced Role does not grant; a real API server answers 403 and kopf retries
        # for about a minute at every start before it falls back to exactly this.
        settings.scanning.disabled = True

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        c = rt.connection
        return kopf.ConnectionInfo(
            server=c.server, ca_path=c.ca_path, insecure=c.insecure, token=c.token,
            certificate_path=c.certificate_path, private_key_path=c.private_key_path,
        )

    def add_index(kind: str, group: str, version: str, plural: str) -> None:
        @kopf.index(group, version, plural, registry=registry, id=_index_id(plural))
        def index(body: kopf.Body, **_: Any) -> dict[Any, Any]:
            return store.index_entries(kind, body)

    for kind, (group, version, plural) in store.WATCHED.items():
        add_index(kind, group, version, plural)

    @kopf.daemon(API_GROUP, API_VERSION, PLURAL, registry=registry, id="reconcile", cancellation_timeout=10.0)
    async def reconcile(name: str, namespace: str | None, stopped: kopf.DaemonStopped, **kwargs: Any) -> None:
        assert namespace is not None  # OzoneSCMCluster is namespaced
        watched = rt.reconciler.store
        if watched is not None:
            for kind, (_g, _v, plural) in store.WATCHED.items():
                watched.attach(kind, kwargs[_index_id(plural)])
        await rt.loop(namespace, name, stopped)

    @kopf.on.event(API_GROUP, API_VERSION, PLURAL, registry=registry)
    def cluster_changed(name: str, namespace: str | None, **_: Any) -> None:
        rt.wake(namespace, name)

    for plural in ("pods", "persistentvolumeclaims", "secrets"):

        @kopf.on.event("", "v1", plural, labels=managed, registry=registry, id=f"wake-on-{plural}")
        def child_changed(body: kopf.Body, **_: Any) -> None:
            rt.wake(*_owner_cluster(body))

    @kopf.on.event(API_GROUP, API_VERSION, BACKUP_PLURAL, registry=registry)
    def backup_changed(body: kopf.Body, **_: Any) -> None:
        cluster = (body.get("spec") or {}).get("cluster")
        rt.wake((body.get("metadata") or {}).get("namespace"), cluster if isinstance(cluster, str) else None)

    @kopf.on.event("batch", "v1", "jobs", labels={naming.LABEL_COMPONENT: "backup"}, registry=registry)
    def backup_job_changed(body: kopf.Body, **_: Any) -> None:
        meta = body.get("metadata") or {}
        rt.wake(meta.get("namespace"), (meta.get("labels") or {}).get(naming.LABEL_BACKUP))

    return registry
