"""scripts/test_clock/sitecustomize.py, the sleep shim of ``make test-clock``: it stands in for ``time.sleep`` only
where Debian's libfaketime 0.9.10 breaks it (EINVAL under FAKETIME_DONT_FAKE_MONOTONIC, wolfcw/libfaketime issue
426), keeps ``time.sleep``'s contract, and leaves every other session alone."""

from __future__ import annotations

import errno
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

SHIM_DIR = Path(__file__).resolve().parents[2] / "scripts" / "test_clock"


def _shim() -> ModuleType:
    spec = importlib.util.spec_from_file_location("test_clock_sitecustomize", SHIM_DIR / "sitecustomize.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _raises(code: int):  # type: ignore[no-untyped-def]
    def probe() -> None:
        raise OSError(code, os.strerror(code))
    return probe


def test_the_shim_stands_in_only_for_libfaketimes_einval() -> None:
    shim = _shim()
    preloaded = {"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"}
    assert shim.sleep_is_broken(preloaded, _raises(errno.EINVAL))
    assert not shim.sleep_is_broken(preloaded, lambda: None)  # a libfaketime whose sleep works: no shim
    assert not shim.sleep_is_broken(preloaded, _raises(errno.EINTR))  # another failure is not this bug
    assert not shim.sleep_is_broken({}, _raises(errno.EINVAL))  # without libfaketime: never
    assert not shim.sleep_is_broken({"LD_PRELOAD": "libother.so"}, _raises(errno.EINVAL))


def test_its_sleep_keeps_time_sleeps_contract() -> None:
    shim = _shim()
    for seconds in (0, 0.02, 0.05):
        start = time.monotonic()
        shim.monotonic_sleep(seconds)
        assert time.monotonic() - start >= seconds
    with pytest.raises(ValueError, match="non-negative"):
        shim.monotonic_sleep(-1)


def test_time_sleep_works_here_and_in_a_child_python() -> None:
    """In make test-clock (libfaketime preloaded) this fails without the shim: both sleeps raise EINVAL."""
    time.sleep(0)  # any length: libfaketime 0.9.10 fails even a zero sleep with EINVAL
    child = subprocess.run([sys.executable, "-c", "import time; time.sleep(0); print('slept')"],
                           capture_output=True, text=True, timeout=60)
    assert (child.returncode, child.stdout.strip()) == (0, "slept"), child.stderr
