"""The event loop the SCM daemon runs on: ``ozone.scm.event.loop`` (ours), read once before the loop exists."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from scm_server.conf import OzoneConfiguration
from scm_server.exceptions import ConfigError

EVENT_LOOP_KEY = "ozone.scm.event.loop"
EVENT_LOOPS = ("uvloop", "asyncio")  # the first is the default


def event_loop_factory(conf: OzoneConfiguration) -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's loop (libuv under asyncio's API; 10-19 % less of the leader's CPU per Hadoop RPC call than
    asyncio's own, docs/performance.md), or asyncio's. A value naming neither is refused, naming both."""
    name = (conf.get_str(EVENT_LOOP_KEY) or EVENT_LOOPS[0]).strip().lower()
    if name == "asyncio":
        return asyncio.new_event_loop
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    raise ConfigError(
        f"{EVENT_LOOP_KEY}={name!r} is not an event loop this SCM runs on: give uvloop (the default) or asyncio"
    )
