"""What the CLI tells a person while a call retries and when it fails for good.

Called by ``scm_server/cli/context.py`` (``CliContext.client`` builds a :class:`StatusClient`) and
``scm_server/cli/main.py`` (``stop_all`` before an error line, ``unavailable_hint``). While the
failover client retries an SCM that does not answer, a terminal shows ONE status line that
updates in place; piped output gets one line saying that it retries and how long at most. The
line disappears as soon as the call returns or fails, so the final error (printed by ``main``)
or the command's output stands alone. Writes to stderr only; never changes what is retried.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.status import Status

from scm_server.cli.output import err_console
from scm_server.client.config import SCMClientConfig
from scm_server.client.sync import SyncSCMClient

_ACTIVE: list[RetryStatus] = []


class RetryStatus:
    """The failover notice of one client: an updating line on a terminal, one line when piped."""

    def __init__(self, config: SCMClientConfig, out: Console | None = None) -> None:
        self.config = config
        self.out = out or err_console
        self._status: Status | None = None
        self._announced = False
        self.notices = 0

    def notice(self, address: str, reason: str, attempt: int) -> None:
        """The client's ``on_failover`` callback. Failing over once is silent (it usually just works)."""
        if attempt < 2:
            return
        self.notices += 1
        text = f"SCM at {address} {reason}; retry {attempt}/{self.config.max_retries}"
        if self.out.is_terminal:
            if self._status is None:
                self._status = self.out.status(text)
                self._status.start()
                _ACTIVE.append(self)
            else:
                self._status.update(text)
            return
        if not self._announced:
            self._announced = True
            self.out.print(
                f"SCM at {address} {reason}; retrying up to {self.config.max_retries} times, every "
                f"{self.config.retry_interval:g}s (hdds.scmclient.failover.max.retry, "
                "hdds.scmclient.failover.retry.interval)",
                markup=False, highlight=False, soft_wrap=True,
            )

    def stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
        if self in _ACTIVE:
            _ACTIVE.remove(self)


def stop_all() -> None:
    """Clear every status line still shown (before ``main`` prints an error)."""
    for status in list(_ACTIVE):
        status.stop()


class StatusClient(SyncSCMClient):
    """A :class:`SyncSCMClient` whose retry notices go to a :class:`RetryStatus`, cleared after each call."""

    def __init__(self, addresses: Sequence[str] | str, config: SCMClientConfig, status: RetryStatus | None = None,
                 **kwargs: Any) -> None:
        self.status = status or RetryStatus(config)
        super().__init__(addresses, config, on_failover=self.status.notice, **kwargs)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        attr = super().__getattr__(name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            finally:
                self.status.stop()

        return call

    def close(self) -> None:
        self.status.stop()
        super().close()


def unavailable_hint(message: str) -> str:
    """Advice to append to a "cannot reach SCM" error, when the cause is recognisable."""
    if "http1.x server" in message or "HTTP status 400" in message:
        return (" — that address answers HTTP/1 (the SCM's web port?); admin commands use ozone.scm.client.grpc.port "
                "(default 19860), datanodes ozone.scm.datanode.grpc.port")
    if "Failed parsing HTTP/2" in message or "Expected SETTINGS frame" in message:
        return (" — that address does not speak gRPC (a Hadoop RPC port? Ozone's ozone.scm.client.port and the other "
                "Ozone port keys serve Hadoop RPC); admin commands use ozone.scm.client.grpc.port (default 19860)")
    return ""
