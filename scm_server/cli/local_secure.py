"""The security part of a local quorum (``ozone-scm local up|run --secure`` and the secure tests).

Who calls it: :class:`scm_server.cli.local_quorum.HALocalCluster` (``secure=True``). It lays out,
under the cluster's data dir:

    secrets/scm.secret, secrets/datanode.secret      enrolment secrets (0600, 32 random bytes hex)
    admin/admin.key, admin/admin.csr                  the administrator's key and CSR, made here
    admin/admin.crt, admin/ca.crt                     its certificate (fetched by public key after the
                                                      primordial signed the CSR at --init) and the root CA
    admin/conf/ozone-site.xml                         a client configuration for the CLI:
                                                      `ozone-scm --conf <dir>/admin/conf admin ...`
    datanodes/<host>/{datanode.id,dn/keys,dn/certs}   the simulated datanodes' identities

and the settings every SCM gets: security and mutual TLS on, CA mode ``scm`` (the primordial makes
the root CA; the others bootstrap with the SCM secret, learning the root from the primordial's
proof), ``ozone.administrators=admin``, the admin CSR for ``--init`` and a security port per SCM.
No private key is copied anywhere: the admin key is made here and only its certificate is fetched.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from scm_server.conf.security import enrollment_secret_key
from scm_server.exceptions import SCMError
from scm_server.security.cert_client import SecurityProtocolClient
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids
from scm_server.security.keystore import atomic_write
from scm_server.security.tls import FileClientSecurity

ADMIN_USER = "admin"
T = TypeVar("T")


def run_sync(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from sync code, also when the caller's thread runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())  # type: ignore[arg-type]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(factory())).result()  # type: ignore[arg-type]


class SecureSetup:
    def __init__(self, base_dir: Path, *, spec: pki.KeySpec | None = None) -> None:
        self.base_dir = Path(base_dir)
        self.secrets_dir = self.base_dir / "secrets"
        self.admin_dir = self.base_dir / "admin"
        self.datanodes_dir = self.base_dir / "datanodes"
        self.spec = spec or pki.KeySpec()
        self.admin_key = self.admin_dir / "admin.key"
        self.admin_csr = self.admin_dir / "admin.csr"
        self.admin_cert = self.admin_dir / "admin.crt"
        self.root_cert = self.admin_dir / "ca.crt"
        self.admin_conf_dir = self.admin_dir / "conf"

    def secret_file(self, role: str) -> Path:
        return self.secrets_dir / f"{role}.secret"

    def prepare(self) -> None:
        """Secrets and the admin key + CSR (kept if they exist: a restarted cluster keeps them)."""
        for role in ("scm", "datanode"):
            path = self.secret_file(role)
            if not path.exists():
                atomic_write(path, secrets.token_hex(32).encode() + b"\n", 0o600)
        if not self.admin_key.exists():
            key = pki.generate_key(self.spec)
            atomic_write(self.admin_key, pki.private_key_pem(key), 0o600)
            csr = pki.build_csr(key, ids.client_subject(ADMIN_USER), self.spec)
            atomic_write(self.admin_csr, pki.csr_pem(csr).encode("ascii"))

    def settings(self) -> dict[str, str]:
        return {
            "ozone.security.enabled": "true",
            "hdds.grpc.tls.enabled": "true",
            "hdds.key.algo": self.spec.algorithm,
            "hdds.key.len": str(self.spec.length),
            "hdds.x509.signature.algorithm": self.spec.signature,
            "ozone.administrators": ADMIN_USER,
            "ozone.scm.security.admin.csr.files": str(self.admin_csr),
            enrollment_secret_key("scm"): str(self.secret_file("scm")),
            enrollment_secret_key("datanode"): str(self.secret_file("datanode")),
        }

    def client_settings(self) -> dict[str, str]:
        return {
            "hdds.x509.client.certificate.file": str(self.admin_cert),
            "hdds.x509.client.private.key.file": str(self.admin_key),
            "hdds.x509.rootca.certificate.file": str(self.root_cert),
        }

    @property
    def ready(self) -> bool:
        return self.admin_cert.exists() and self.root_cert.exists()

    def client_security(self) -> FileClientSecurity:
        return FileClientSecurity(self.admin_cert, self.admin_key, self.root_cert)

    def fetch_admin_certificate(self, security_address: str, primordial_metadata: Path, timeout: float = 60.0) -> None:
        """Fetch the admin certificate the primordial signed at --init, by our public key.

        The root CA certificate is public and this is the same machine, so it is read from the
        primordial's certs dir; the certificate itself comes over the security protocol (verified
        TLS), once the primordial's first leadership recorded it."""
        if self.ready:
            return
        roots = sorted((primordial_metadata / "scm" / "sub-ca" / "certs").glob("ROOTCA-*.crt"))
        if not roots:
            raise RuntimeError(f"no root CA certificate under {primordial_metadata}/scm/sub-ca/certs; did --init run?")
        root = pki.load_certificate(roots[0].read_bytes())
        key = pki.load_private_key(self.admin_key.read_bytes())
        client = SecurityProtocolClient([security_address], roots=[root], rounds=1)
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                resp = run_sync(lambda: client.certificate_for_key(pki.public_key_sha256(key.public_key())))
            except SCMError as exc:  # not recorded yet / not serving yet
                last = exc
                time.sleep(0.3)
                continue
            chain = pki.load_certificates(resp.certificate.x509Certificate + resp.chain)
            atomic_write(self.admin_cert, pki.certs_pem(chain).encode("ascii"))
            atomic_write(self.root_cert, pki.cert_pem(root).encode("ascii"))
            return
        raise TimeoutError(f"the admin certificate was not available from {security_address} within {timeout}s: {last}")

    def write_admin_conf(self, common: dict[str, str]) -> Path:
        from scm_server.cli.local_cluster import site_xml

        self.admin_conf_dir.mkdir(parents=True, exist_ok=True)
        values = {**common, **self.client_settings()}
        values.pop("ozone.scm.security.admin.csr.files", None)
        path = self.admin_conf_dir / "ozone-site.xml"
        path.write_text(site_xml(values))
        os.chmod(path, 0o644)
        return self.admin_conf_dir
