"""Leader election's I/O: reads and writes the ``coordination.k8s.io/v1`` Lease and keeps the time.

Used by ``main`` to run two (or more) operator replicas with one active. Every decision is ``election``'s (pure);
this module only reads the Lease, performs the create/update it asks for (an update is conditional on the
resourceVersion read, so a racing candidate gets 409), and sleeps ``retry_period`` (with jitter) in between:

* ``acquire`` returns once this process holds the Lease (the standby waits here, doing nothing else);
* ``hold`` renews until the Lease is lost and returns why: another holder in the Lease, or no successful renewal
  within ``renew_deadline`` (each attempt is bounded by the time left, so a hung API call cannot stretch it);
* ``leading`` is the time-bounded claim the reconciler checks before every write (false from the deadline on,
  even before ``hold`` has noticed);
* ``release`` empties the holder on a clean shutdown, so the standby takes over at once.

Why not the ``kubernetes`` client's ``leaderelection`` package: it runs in threads with blocking sleeps, reads
the global client configuration rather than the operator's, measures deadlines on the wall clock and never
writes ``leaseTransitions``; kopf's peering is not leader election (it pauses operators by priority and needs its
own CRD). docs/kubernetes.md, "Operator HA".
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import os
import random
import socket
import time
from collections.abc import Callable
from pathlib import Path

import kubernetes.config

from ozone_scm_operator import election
from ozone_scm_operator.effects.kube import Conflict, KubeClient, KubeError

LOG = logging.getLogger(__name__)

LEASE_API = "coordination.k8s.io/v1"
SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def micro_time(now: datetime.datetime) -> str:
    """Kubernetes' MicroTime: RFC 3339 with microseconds, UTC."""
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    """The Pod's name (the chart passes it as ``POD_NAME``), else the host name: unique per running replica, and
    the same for a restart of the same Pod, which may then take its own Lease back at once."""
    return os.environ.get("POD_NAME") or socket.gethostname()


def default_namespace(kubeconfig: str | None = None, server: str | None = None) -> str:
    """Where the Lease lives: ``POD_NAMESPACE`` (the chart sets it), the in-cluster service account's namespace, the
    kubeconfig context's namespace, else ``default``."""
    ns = os.environ.get("POD_NAMESPACE")
    if ns:
        return ns
    if not server:
        try:
            return SA_NAMESPACE_FILE.read_text().strip() or "default"
        except OSError:
            pass
        try:
            _, active = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)
            ns = (active or {}).get("context", {}).get("namespace")
        except (kubernetes.config.ConfigException, OSError):
            ns = None
    return ns or "default"


@dataclasses.dataclass(frozen=True)
class LeaseSettings:
    namespace: str
    name: str = "ozone-scm-operator"
    identity: str = dataclasses.field(default_factory=default_identity)
    timing: election.Timing = dataclasses.field(default_factory=election.Timing)


def _path(namespace: str, name: str | None = None) -> str:
    path = f"/apis/{LEASE_API}/namespaces/{namespace}/leases"
    return f"{path}/{name}" if name else path


class LeaseElector:
    def __init__(
        self,
        kube: KubeClient,
        settings: LeaseSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
        jitter: Callable[[], float] = lambda: random.uniform(1.0, election.JITTER),
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.clock = clock
        self.wall = wall
        self.jitter = jitter
        self.state = election.State()
        self.holder = ""  # the holder last seen (for logs and /healthz)
        self._waiting_logged = ""

    @property
    def timing(self) -> election.Timing:
        return self.settings.timing

    def leading(self) -> bool:
        return election.leading(self.state, self.timing, self.clock())

    async def _read(self) -> election.Lease | None:
        s = self.settings
        body = await self.kube.get_path(_path(s.namespace, s.name))
        return None if body is None else election.Lease.from_body(body)

    async def _write(self, step: election.Create | election.Update) -> None:
        s = self.settings
        meta: dict[str, str] = {"name": s.name, "namespace": s.namespace}
        body = {"apiVersion": LEASE_API, "kind": "Lease", "metadata": meta, "spec": step.record.to_spec()}
        if isinstance(step, election.Create):
            await self.kube.request("POST", _path(s.namespace), body)
        else:
            if step.resource_version is not None:
                meta["resourceVersion"] = step.resource_version
            await self.kube.request("PUT", _path(s.namespace, s.name), body)

    async def attempt(self) -> election.Step:
        """Read the Lease, decide, and write if asked; returns the step taken (Create/Update: now held)."""
        s = self.settings
        started = self.clock()
        lease = await self._read()
        self.state, step = election.decide(s.identity, self.timing, self.state, lease, self.clock(),
                                           micro_time(self.wall()))
        if isinstance(step, election.Wait | election.Lost):
            self.holder = step.holder
            return step
        try:
            await self._write(step)
        except KubeError as exc:
            self.state = election.write_failed(self.state, isinstance(exc, Conflict) or exc.status == 409)
            raise
        self.state = election.written(self.state, step.record, started)
        self.holder = s.identity
        return step

    async def acquire(self, stop: asyncio.Event | None = None) -> bool:
        """Wait until this process holds the Lease (True), or until ``stop`` is set (False)."""
        s = self.settings
        LOG.info("leader election: %s is a candidate for Lease %s/%s", s.identity, s.namespace, s.name)
        while stop is None or not stop.is_set():
            try:
                step = await asyncio.wait_for(self.attempt(), self.timing.renew_deadline)
            except (KubeError, OSError, TimeoutError) as exc:
                LOG.warning("leader election: could not acquire Lease %s/%s: %s", s.namespace, s.name, exc)
            else:
                if isinstance(step, election.Create | election.Update):
                    LOG.info("leader election: %s acquired Lease %s/%s (transitions %d); now active", s.identity,
                             s.namespace, s.name, step.record.transitions)
                    return True
                if isinstance(step, election.Wait) and step.holder != self._waiting_logged:
                    self._waiting_logged = step.holder
                    LOG.info("leader election: Lease %s/%s is held by %s; %s stands by", s.namespace, s.name,
                             step.holder, s.identity)
            await self._sleep(self.timing.retry_period * self.jitter(), stop)
        return False

    async def hold(self) -> str:
        """Renew until the Lease is lost; returns why (the caller must stop acting at once)."""
        s = self.settings
        while True:
            assert self.state.renewed_at is not None
            left = self.state.renewed_at + self.timing.renew_deadline - self.clock()
            if left <= 0:
                self.state = election.step_down(self.state)
                return f"no successful renewal within the renew deadline ({self.timing.renew_deadline}s)"
            try:
                step = await asyncio.wait_for(self.attempt(), left)
            except (KubeError, OSError, TimeoutError) as exc:
                LOG.warning("leader election: renewing Lease %s/%s failed: %s", s.namespace, s.name, exc)
                await asyncio.sleep(max(0.0, min(self.timing.retry_period, left)))
                continue
            if isinstance(step, election.Lost):
                return f"the Lease is now held by {step.holder}"
            await asyncio.sleep(self.timing.retry_period)

    async def release(self) -> None:
        """Give the Lease up (best effort) if this process still holds it."""
        s = self.settings
        if not self.leading():
            return
        self.state = election.step_down(self.state)
        try:
            step = election.release(s.identity, await self._read(), micro_time(self.wall()))
            if step is not None:
                await asyncio.wait_for(self._write(step), self.timing.retry_period)
                LOG.info("leader election: %s released Lease %s/%s", s.identity, s.namespace, s.name)
        except (KubeError, OSError, TimeoutError) as exc:
            LOG.warning("leader election: could not release Lease %s/%s: %s (the standby takes over when it "
                        "expires)", s.namespace, s.name, exc)

    @staticmethod
    async def _sleep(seconds: float, stop: asyncio.Event | None) -> None:
        if stop is None:
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)
