"""/logLevel on a secure SCM: over real TLS on loopback, served only to a caller whose client certificate (issued
under the ring's roots) names an administrator; a caller without a certificate, or a user who is not one, gets 403
and the level is left as it was."""

from __future__ import annotations

import logging
import ssl
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
from aiohttp import web
from cryptography.hazmat.primitives import serialization

from scm_server.ports import free_port
from scm_server.security.core import certificates as pki
from scm_server.server.hadoop_servlets import log_level_denial
from scm_server.server.web import make_app
from tests.unit.edges.fakes import FakeSCM

EC = pki.KeySpec("EC", 256, "SHA256withECDSA")
NOW = datetime(2026, 1, 1, tzinfo=UTC)
LOGGER = "scm_server.tests.loglevel.tls"


def _write(tmp: Path, name: str, cert: pki.x509.Certificate, key: pki.PrivateKey) -> tuple[Path, Path]:
    cert_path, key_path = tmp / f"{name}.crt", tmp / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def _pki(tmp: Path) -> tuple[pki.x509.Certificate, dict[str, tuple[Path, Path]]]:
    root_key = pki.generate_key(EC)
    root = pki.build_root_ca(root_key, pki.SubjectInfo("scm-root@test"), serial=1, now=NOW,
                             lifetime=timedelta(days=3650), spec=EC)
    files = {}
    for serial, name in enumerate(("localhost", "admin", "bob"), start=2):
        key = pki.generate_key(EC)
        cert = pki.issue_certificate(pki.SubjectInfo(name, hostnames=("localhost",)), key.public_key(), issuer=root,
                                     issuer_key=root_key, serial=serial, now=NOW, lifetime=timedelta(days=3650),
                                     profile=pki.Profile.END_ENTITY, spec=EC)
        files[name] = _write(tmp, name, cert, key)
    return root, files


def _client(files: dict[str, tuple[Path, Path]], who: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the server's certificate is not what is tested here
    if who is not None:
        ctx.load_cert_chain(*files[who])
    return ctx


async def test_only_an_administrator_certificate_reads_or_sets_levels(tmp_path: Path) -> None:
    root, files = _pki(tmp_path)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(*files["localhost"])
    server_ctx.verify_mode = ssl.CERT_OPTIONAL  # as the daemon's HTTPS context
    server_ctx.load_verify_locations(cadata=pki.certs_pem([root]))
    logging.getLogger(LOGGER).setLevel(logging.INFO)
    runner = web.AppRunner(make_app(FakeSCM(), {}, secure=True, administrators=("admin",)))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=server_ctx).start()
    url = f"https://127.0.0.1:{port}/logLevel"
    params = {"log": LOGGER, "level": "DEBUG"}
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(url, params=params, ssl=_client(files, None)) as resp:
                assert resp.status == 403 and "client certificate whose CN is listed in ozone.administrators" in (
                    await resp.text())
            async with session.get(url, params=params, ssl=_client(files, "bob")) as resp:
                assert resp.status == 403 and "access denied for bob" in await resp.text()
            assert logging.getLogger(LOGGER).level == logging.INFO
            async with session.get(url, params=params, ssl=_client(files, "admin")) as resp:
                assert resp.status == 200 and "Effective Level: <b>DEBUG</b>" in await resp.text()
            assert logging.getLogger(LOGGER).level == logging.DEBUG
    finally:
        await runner.cleanup()


def test_the_denial_names_what_is_missing() -> None:
    assert "ozone.administrators" in (log_level_denial(None, ("admin",)) or "")
    assert "cannot be read" in (log_level_denial(b"not a certificate", ("admin",)) or "")
