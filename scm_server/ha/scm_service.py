"""SCMService / SCMServiceManager / BackgroundSCMService (Ozone's ``SCM/ha/SCMService*``).

Background services (ReplicationManager, SCMBlockDeletingService, BackgroundPipelineCreator,
the decommission monitor, ...) run their work only when this SCM is leader-ready and out of
safemode, and only after ``hdds.scm.wait.time.after.safemode.exit`` has passed since they became
eligible. Otherwise they are PAUSING. No task restarts on failover: the loop keeps ticking and
checks ``should_run()`` each iteration; ``SCMServiceManager.notify_status_changed()`` is called
on every leader/safemode change so services re-evaluate at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Protocol

from scm_server.clock import Clock
from scm_server.exceptions import SCMFatalError
from scm_server.ha.scm_context import SCMContext

log = logging.getLogger(__name__)


class ServiceStatus(enum.Enum):
    RUNNING = "RUNNING"
    PAUSING = "PAUSING"


class Event(enum.Enum):
    PRE_CHECK_COMPLETED = "PRE_CHECK_COMPLETED"
    NEW_NODE_HANDLER_TRIGGERED = "NEW_NODE_HANDLER_TRIGGERED"
    UNHEALTHY_TO_HEALTHY_NODE_HANDLER_TRIGGERED = "UNHEALTHY_TO_HEALTHY_NODE_HANDLER_TRIGGERED"


class SCMService(Protocol):
    @property
    def service_name(self) -> str: ...

    def notify_status_changed(self) -> None: ...

    def notify_event_triggered(self, event: Event) -> None: ...

    def should_run(self) -> bool: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class SCMServiceManager:
    """Registry that fans out status changes and events to every SCMService."""

    def __init__(self) -> None:
        self._services: list[SCMService] = []

    def register(self, service: SCMService) -> None:
        self._services.append(service)

    @property
    def services(self) -> list[SCMService]:
        return list(self._services)

    def notify_status_changed(self) -> None:
        for service in self._services:
            service.notify_status_changed()

    def notify_event_triggered(self, event: Event) -> None:
        for service in self._services:
            service.notify_event_triggered(event)

    async def start(self) -> None:
        for service in self._services:
            await service.start()

    async def stop(self) -> None:
        for service in reversed(self._services):
            await service.stop()


class BackgroundSCMService:
    """A periodic SCMService: ``run_once`` every ``interval`` while RUNNING.

    RUNNING iff leader-ready and (not in safemode, unless ``run_in_safe_mode``); work starts
    ``wait_time`` after the service became RUNNING (hdds.scm.wait.time.after.safemode.exit).
    """

    def __init__(
        self,
        name: str,
        *,
        scm_context: SCMContext,
        clock: Clock,
        interval: timedelta,
        run_once: Callable[[], Awaitable[None]],
        wait_time: timedelta = timedelta(0),
        run_in_safe_mode: bool = False,
        trigger_events: frozenset[Event] = frozenset(),
    ) -> None:
        self._name = name
        self._context = scm_context
        self._clock = clock
        self.interval = interval
        self._run_once = run_once
        self.wait_time = wait_time
        self._run_in_safe_mode = run_in_safe_mode
        self._trigger_events = trigger_events
        self._status = ServiceStatus.PAUSING
        self._running_since: float | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self.run_count = 0
        self.enabled = True  # admin start/stop (e.g. `replicationmanager stop`)
        self.notify_status_changed()

    @property
    def service_name(self) -> str:
        return self._name

    @property
    def status(self) -> ServiceStatus:
        return self._status

    def _eligible(self) -> bool:
        if not self._context.is_leader_ready():
            return False
        return self._run_in_safe_mode or not self._context.is_in_safe_mode()

    def notify_status_changed(self) -> None:
        eligible = self._eligible()
        if eligible and self._status is ServiceStatus.PAUSING:
            self._status = ServiceStatus.RUNNING
            self._running_since = self._clock.monotonic()
            log.info("service %s is now RUNNING (first run after %s)", self._name, self.wait_time)
            self._wake.set()
        elif not eligible and self._status is ServiceStatus.RUNNING:
            self._status = ServiceStatus.PAUSING
            self._running_since = None
            log.info("service %s is now PAUSING", self._name)

    def notify_event_triggered(self, event: Event) -> None:
        if event in self._trigger_events:
            self._wake.set()

    def should_run(self) -> bool:
        if not self.enabled or self._status is not ServiceStatus.RUNNING or self._running_since is None:
            return False
        return self._clock.monotonic() - self._running_since >= self.wait_time.total_seconds()

    async def run_if_due(self) -> bool:
        if not self.should_run():
            return False
        await self._run_once()
        self.run_count += 1
        return True

    def trigger(self) -> None:
        self._wake.set()

    async def _loop(self) -> None:
        while not self._stopped:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=min(self.interval.total_seconds(), 3600.0))
            self._wake.clear()
            if self._stopped:
                return
            try:
                await self.run_if_due()
            except SCMFatalError:
                raise
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("service %s: iteration failed; will retry next interval", self._name)

    async def start(self) -> None:
        if self._task is None:
            self._stopped = False
            self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"scm-service-{self._name}")

    async def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
