"""`ozone-scm local up --secure --data-dir D` through the real CLI: every certificate found under D
verifies with `openssl verify` against the one root CA there; `local status` shows each SCM's
certificate serial and expiry; the admin client configuration written into D works for `admin cert
list`, `revoke`, `info` and `crl`, and the exported CRL makes openssl refuse the revoked certificate."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509

from scm_server.security.core import certificates as pki

pytestmark = pytest.mark.processes  # whole-SCM scenarios: make test-slow


def ozone(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scm_server.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout)


def _roots(data: Path) -> set[str]:
    out = set()
    for path in data.rglob("*.crt"):
        for cert in pki.load_certificates(path.read_bytes(), str(path)):
            if pki.is_self_signed(cert):
                out.add(pki.fingerprint(cert))
    return out


@pytest.mark.timeout(300)
def test_local_up_secure_certificates_verify_and_revocation_works(tmp_path: Path) -> None:
    data = tmp_path / "D"
    try:
        up = ozone("local", "up", "--secure", "--datanodes", "3", "--data-dir", str(data))
        assert up.returncode == 0, up.stderr + up.stdout
        assert f"{data}/admin/conf" in up.stdout.replace("\n", "")
        # exactly one root CA anywhere under D, and every certificate chains to it
        assert len(_roots(data)) == 1
        root = data / "admin" / "ca.crt"
        leaves = [*sorted(p for p in data.rglob("certificate.crt") if "/ca/" not in str(p)), data / "admin" / "admin.crt"]
        assert len(leaves) >= 3 + 1  # 3 sub-CAs + the admin (+ datanodes once enrolled)
        for leaf in leaves:
            r = subprocess.run(["openssl", "verify", "-CAfile", str(root), "-untrusted", str(leaf), str(leaf)],
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == 0 and ": OK" in r.stdout, f"{leaf}: {r.stdout}{r.stderr}"
        status = ozone("local", "status", "--data-dir", str(data), "--json")
        assert status.returncode == 0, status.stderr
        info = json.loads(status.stdout)
        certs = info["certificates"]
        assert sorted(certs) == ["scm1", "scm2", "scm3"]
        assert all(c["serial"].isdigit() and c["notAfter"] for c in certs.values())
        text = ozone("local", "status", "--data-dir", str(data))
        assert "cert serial" in text.stdout and "cert expiry" in text.stdout

        conf = str(data / "admin" / "conf")
        listed = ozone("--conf", conf, "admin", "cert", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        rows = json.loads(listed.stdout)["certificates"]
        kinds = sorted({r["type"] for r in rows})
        assert {"ROOT_CA", "SCM", "CLIENT"} <= set(kinds), kinds

        def wait_datanodes() -> list[dict[str, str]]:
            import time

            deadline = time.monotonic() + 60
            while True:
                out = ozone("--conf", conf, "admin", "cert", "list", "--type", "datanode", "--json")
                dns = json.loads(out.stdout)["certificates"] if out.returncode == 0 else []
                if len(dns) >= 3:
                    return dns  # type: ignore[no-any-return]
                assert time.monotonic() < deadline, out.stderr
                time.sleep(0.5)

        dns = wait_datanodes()
        # every certificate on disk has its own serial and is the one recorded (through Raft) under it
        listed_pem = {r["serialId"]: r for r in json.loads(ozone("--conf", conf, "admin", "cert", "list", "--json").stdout)["certificates"]}
        on_disk = [x509.load_pem_x509_certificates(p.read_bytes())[0] for p in data.rglob("certificate.crt")]
        on_disk.append(x509.load_pem_x509_certificates((data / "admin" / "admin.crt").read_bytes())[0])
        serials = [str(c.serial_number) for c in on_disk]
        assert len(serials) == len(set(serials)), serials
        for cert in on_disk:
            record = listed_pem.get(str(cert.serial_number))
            assert record is not None, f"{cert.subject.rfc4514_string()} is not recorded"
            assert record["sha256"] == pki.fingerprint(cert)
        pem = ozone("--conf", conf, "admin", "cert", "info", str(on_disk[0].serial_number), "--pem").stdout
        assert pki.load_certificate(pem) == on_disk[0]
        victim = dns[0]["serialId"]
        revoke = ozone("--conf", conf, "admin", "cert", "revoke", victim, "--reason", "keyCompromise")
        assert revoke.returncode == 0 and f"Revoked certificate {victim}" in revoke.stdout, revoke.stderr
        shown = json.loads(ozone("--conf", conf, "admin", "cert", "info", victim, "--json").stdout)
        assert shown["status"] == "REVOKED (keyCompromise)"
        bad = ozone("--conf", conf, "admin", "cert", "revoke", "1")
        assert bad.returncode != 0 and "root CA" in bad.stderr and "Traceback" not in bad.stderr
        crl_file = tmp_path / "crl.pem"
        crl = ozone("--conf", conf, "admin", "cert", "crl", "--out", str(crl_file))
        assert crl.returncode == 0, crl.stderr
        blocks = re.findall(r"-----BEGIN X509 CRL-----.+?-----END X509 CRL-----", crl_file.read_text(), re.S)
        crls = [pki.load_crl(b) for b in blocks]
        assert len(crls) == 4  # one per sub-CA (3) + the root's (the primordial holds the root key)
        assert any(c.get_revoked_certificate_by_serial_number(int(victim)) is not None for c in crls)
        # openssl refuses the revoked datanode certificate with that CRL and accepts another one
        revoked_leaf = next(p for p in (data / "datanodes").rglob("certificate.crt")
                            if str(x509.load_pem_x509_certificates(p.read_bytes())[0].serial_number) == victim)
        other_leaf = next(p for p in (data / "datanodes").rglob("certificate.crt") if p != revoked_leaf)
        for leaf, ok in ((revoked_leaf, False), (other_leaf, True)):
            r = subprocess.run(["openssl", "verify", "-crl_check", "-CAfile", str(root), "-CRLfile", str(crl_file),
                                "-untrusted", str(leaf), str(leaf)], capture_output=True, text=True, timeout=30)
            assert (r.returncode == 0) is ok, r.stdout + r.stderr
    finally:
        if (data / "cluster.json").exists():
            ozone("local", "down", "--data-dir", str(data))
