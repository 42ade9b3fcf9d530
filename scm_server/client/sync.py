"""Blocking facade over ``SCMClient`` for the CLI and scripts.

It owns a private event loop, so it must not be used from inside a running loop (use
``SCMClient`` there). Every coroutine method of ``SCMClient`` is exposed as a plain method
with the same name and arguments.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from typing import Any

from scm_server.client.config import SCMClientConfig
from scm_server.client.scm_client import SCMClient
from scm_server.security.tls import ChannelSecurity


class SyncSCMClient:
    def __init__(
        self,
        addresses: Sequence[str] | str,
        config: SCMClientConfig | None = None,
        on_failover: Callable[[str, str, int], None] | None = None,
        security: ChannelSecurity | None = None,
        local_read: bool = False,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._client = self._loop.run_until_complete(self._make(addresses, config, on_failover, security, local_read))

    @staticmethod
    async def _make(
        addresses: Sequence[str] | str,
        config: SCMClientConfig | None,
        on_failover: Callable[[str, str, int], None] | None,
        security: ChannelSecurity | None,
        local_read: bool,
    ) -> SCMClient:
        # grpc.aio channels bind to the loop that is running when they are created.
        return SCMClient(addresses, config, on_failover=on_failover, security=security, local_read=local_read)

    @property
    def addresses(self) -> list[str]:
        return self._client.addresses

    @property
    def current_address(self) -> str:
        return self._client.current_address

    def run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr  # type: ignore[no-any-return,unused-ignore]

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run_until_complete(attr(*args, **kwargs))

        return call

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._loop.run_until_complete(self._client.close())
        self._loop.close()

    def __enter__(self) -> SyncSCMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
