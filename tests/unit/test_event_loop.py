"""ozone.scm.event.loop: the daemon's event loop, uvloop by default, asyncio on request, anything else refused."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from scm_server.conf import OzoneConfiguration
from scm_server.exceptions import ConfigError
from scm_server.server.event_loop import EVENT_LOOP_KEY, event_loop_factory


def _loop_of(conf: OzoneConfiguration) -> asyncio.AbstractEventLoop:
    loop = event_loop_factory(conf)()
    loop.close()
    return loop


def test_uvloop_is_the_default_and_asyncio_is_chosen_by_name() -> None:
    assert isinstance(_loop_of(OzoneConfiguration()), uvloop.Loop)
    conf = OzoneConfiguration()
    conf.set(EVENT_LOOP_KEY, " AsyncIO ")
    loop = _loop_of(conf)
    assert isinstance(loop, asyncio.BaseEventLoop) and not isinstance(loop, uvloop.Loop)


def test_a_loop_this_scm_does_not_run_on_is_refused_naming_the_choices() -> None:
    conf = OzoneConfiguration()
    conf.set(EVENT_LOOP_KEY, "trio")
    with pytest.raises(ConfigError) as err:
        event_loop_factory(conf)
    assert str(err.value) == (
        "ozone.scm.event.loop='trio' is not an event loop this SCM runs on: give uvloop (the default) or asyncio"
    )
