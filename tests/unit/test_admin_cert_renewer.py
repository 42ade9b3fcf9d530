"""The local harness's admin certificate renewer: renews once within the grace period, never before, and a
failed renewal is recorded and tried again at the next check (the clock is injected)."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

from scm_server.local.secure import AdminCertRenewer
from scm_server.security.core import certificates as pki

T0 = datetime(2030, 1, 1, tzinfo=UTC)
SPEC = pki.KeySpec("EC", 256, "SHA256withECDSA")


def _cert_file(tmp_path: Path, lifetime: timedelta) -> Path:
    key = pki.generate_key(SPEC)
    cert = pki.build_root_ca(key, pki.SubjectInfo("admin", "", ""), serial=7, now=T0, lifetime=lifetime, spec=SPEC)
    path = tmp_path / "admin.crt"
    path.write_bytes(pki.cert_pem(cert).encode("ascii"))
    return path


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class Renew:
    def __init__(self) -> None:
        self.calls = 0
        self.fail = False

    def __call__(self) -> subprocess.CompletedProcess[str]:
        self.calls += 1
        if self.fail:
            return subprocess.CompletedProcess(["renew"], 1, "", "UNAVAILABLE: no leader")
        return subprocess.CompletedProcess(["renew"], 0, "Renewed", "")


def test_renews_only_within_the_grace_period_and_retries_a_failure(tmp_path: Path) -> None:
    clock, renew = Clock(), Renew()
    renewer = AdminCertRenewer(_cert_file(tmp_path, timedelta(seconds=40)), renew,
                               grace=timedelta(seconds=30), interval=1.0, clock=clock)
    clock.now = T0 + timedelta(seconds=9)
    assert renewer.check() is False and renew.calls == 0  # 31 s left: not due
    clock.now = T0 + timedelta(seconds=10)
    renew.fail = True
    assert renewer.check() is False and renew.calls == 1
    assert len(renewer.errors) == 1 and "exit 1" in renewer.errors[0] and "no leader" in renewer.errors[0]
    renew.fail = False
    clock.now = T0 + timedelta(seconds=11)
    assert renewer.check() is True and renew.calls == 2 and renewer.renewals == 1


def test_the_thread_starts_and_stops(tmp_path: Path) -> None:
    renew = Renew()
    renewer = AdminCertRenewer(_cert_file(tmp_path, timedelta(days=365)), renew,
                               grace=timedelta(days=28), interval=3600.0)
    renewer.start()
    assert renewer.running
    renewer.stop()
    assert not renewer.running and renew.calls == 0  # a year left: never due
