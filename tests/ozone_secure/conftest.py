"""Fixtures of the secure-Ozone tier: a real MIT KDC on loopback and a whole secure Ozone cluster on our ring."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator

import pytest

from tests.kerberos.kdc import MiniKdc
from tests.ozone_interop.ozone_procs import REPO, Timings, resolve_classpath
from tests.ozone_secure.secure_procs import SecureOzoneCluster


@pytest.fixture(scope="module")
def kdc() -> Iterator[MiniKdc]:
    # under run-data/ (git-ignored) beside the cluster, so that the KDC's log stays for a look afterwards
    root = REPO / "run-data" / "ozone-secure" / "kdc"
    shutil.rmtree(root, ignore_errors=True)
    kdc = MiniKdc.start(root)
    saved = {k: os.environ.get(k) for k in kdc.env()}
    os.environ.update(kdc.env())  # our SCMs (Python, MIT Kerberos) read the realm from KRB5_CONFIG
    try:
        yield kdc
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        kdc.stop()


@pytest.fixture(scope="module")
def secure_cluster(request: pytest.FixtureRequest, kdc: MiniKdc) -> Iterator[SecureOzoneCluster]:
    start = time.monotonic()
    classpath, note = resolve_classpath()
    timings = Timings(jars=f"{note} [script {time.monotonic() - start:.1f} s]")
    base = REPO / "run-data" / "ozone-secure" / "ours"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    cluster = SecureOzoneCluster(base, classpath, kdc, timings=timings)
    start = time.monotonic()
    cluster.start()  # kills whatever it started if any step fails
    timings.add("secure cluster start, total", time.monotonic() - start)
    timings.memory = cluster.resident_memory()
    try:
        yield cluster
    finally:
        cluster.stop()
        capman = request.config.pluginmanager.getplugin("capturemanager")
        report = f"\n[secure; logs under {base}/logs, KDC log {kdc.root / 'kdc.log'}]\n{timings.report()}\n"
        if capman is not None:
            with capman.global_and_fixture_disabled():
                print(report)
        else:
            print(report)
