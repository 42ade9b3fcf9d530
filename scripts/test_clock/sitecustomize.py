"""Loaded by every Python process of ``make test-clock`` (scripts/test_clock.sh puts this directory on PYTHONPATH):
makes ``time.sleep`` work under Debian's libfaketime 0.9.10 with ``FAKETIME_DONT_FAKE_MONOTONIC=1``.

Why: that libfaketime shifts the absolute deadline of ``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ...)`` by
the fake offset even when the monotonic clock is not faked, so the kernel gets a negative time and answers EINVAL
(wolfcw/libfaketime issue 426). Python 3.11's ``time.sleep`` sleeps exactly that way, so every ``time.sleep`` --
the SCM's own polls, ``subprocess.run(timeout=...)`` waiting for a child, a ``python -c 'time.sleep(600)'`` a test
starts -- raises ``OSError: [Errno 22] Invalid argument``. Faking the monotonic clock too is no way out: then
``threading.Event.wait`` and lock timeouts (``sem_clockwait`` on CLOCK_MONOTONIC) hang. Nothing of this is the
code under test's doing, and nothing of it happens without LD_PRELOAD.

What: only when libfaketime is preloaded and a probe ``time.sleep`` fails with EINVAL, ``time.sleep`` is replaced by
:func:`monotonic_sleep`, the same contract (at least the given seconds on the monotonic clock) through
``select``'s relative timeout, which libfaketime leaves alone; ``OZONE_SCM_SLEEP_SHIM`` is set to say so (scripts/test_clock.sh
prints it before each run). Elsewhere this module does nothing.
"""

from __future__ import annotations

import errno
import os
import select
import time
from collections.abc import Callable, Mapping

REASON = (
    "libfaketime 0.9.10 breaks clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) under FAKETIME_DONT_FAKE_MONOTONIC "
    "(EINVAL; wolfcw/libfaketime issue 426): time.sleep replaced by a select()-based sleep"
)


def monotonic_sleep(seconds: float) -> None:
    """Sleep at least ``seconds`` of the monotonic clock (``time.sleep``'s contract) with select's relative timeout."""
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        select.select([], [], [], left)


def _probe() -> None:
    time.sleep(1e-6)


def sleep_is_broken(environ: Mapping[str, str], probe: Callable[[], None] = _probe) -> bool:
    """True when libfaketime is preloaded and a sleep fails the way its bug makes it fail (EINVAL)."""
    if "libfaketime" not in environ.get("LD_PRELOAD", ""):
        return False
    try:
        probe()
    except OSError as exc:
        return exc.errno == errno.EINVAL
    return False


if sleep_is_broken(os.environ):
    time.sleep = monotonic_sleep
    os.environ["OZONE_SCM_SLEEP_SHIM"] = REASON
