"""The security part of a local quorum (``ozone-scm local up|run --secure`` and the secure tests).

Who calls it: :class:`scm_server.local.quorum.HALocalCluster` (``secure=True``). It lays out,
under the cluster's data dir:

    secrets/scm.secret, secrets/datanode.secret      enrolment secrets (0600, 32 random bytes hex)
    admin/admin.key, admin/admin.csr                  the administrator's key and CSR, made here
    admin/admin.crt, admin/ca.crt                     its certificate (fetched by public key after the
                                                      primordial signed the CSR at --init) and the root CA
    admin/conf/ozone-site.xml                         a client configuration for the CLI:
                                                      `ozone-scm --conf <dir>/admin/conf admin ...`
    datanodes/<host>/{datanode.id,dn/keys,dn/certs}   the simulated datanodes' identities

and the settings every SCM gets: security and mutual TLS on, ``ozone.administrators=admin`` and a
security port per SCM, in one of two CA modes:

* ``scm`` (default): the primordial makes the root CA at ``--init`` and signs the admin CSR; the
  others bootstrap with the SCM secret, learning the root from the primordial's proof. No private
  key is copied anywhere: the admin key is made here and only its certificate is fetched.
* ``operator``: :class:`OperatorCA` plays the Kubernetes operator: it keeps the root CA under
  ``operator-ca/`` (outside every SCM), issues each SCM a sub-CA (``<node>/subca/{subca.crt,subca.key}``,
  what the operator mounts from a per-member Secret) and the admin's client certificate. No SCM holds
  the root key; a new SCM joins with a sub-CA issued for it, without any CSR.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
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
LOG = logging.getLogger(__name__)


def run_sync(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from sync code, also when the caller's thread runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())  # type: ignore[arg-type]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(factory())).result()  # type: ignore[arg-type]


class OperatorCA:
    """A root CA held outside the cluster that issues sub-CAs and client certificates (what the
    Kubernetes operator does in CA mode ``operator``), built on the pure builders."""

    def __init__(self, directory: Path, spec: pki.KeySpec, *, cluster_id: str = "") -> None:
        self.dir = Path(directory)
        self.spec = spec
        self.cluster_id = cluster_id
        self.root_cert_path = self.dir / "root.crt"
        self.root_key_path = self.dir / "root.key"
        if self.root_cert_path.exists():
            self.root = pki.load_certificate(self.root_cert_path.read_bytes())
            self.root_key = pki.load_private_key(self.root_key_path.read_bytes())
        else:
            self.root_key = pki.generate_key(spec)
            self.root = pki.build_root_ca(
                self.root_key, pki.SubjectInfo("ozone-operator-root", "", cluster_id), serial=external_serial(),
                now=_utcnow(), lifetime=timedelta(days=3650), spec=spec,
            )
            atomic_write(self.root_key_path, pki.private_key_pem(self.root_key), 0o600)
            atomic_write(self.root_cert_path, pki.cert_pem(self.root).encode("ascii"))

    def issue_sub_ca(self, node_id: str, host: str, out_dir: Path, *, lifetime: timedelta = timedelta(days=365),
                     now: datetime | None = None) -> tuple[Path, Path]:
        """A sub-CA for SCM ``node_id`` at ``host`` (OU = node id), as a cert chain file + key file."""
        key = pki.generate_key(self.spec)
        cert = pki.issue_certificate(
            ids.role_bound(pki.SubjectInfo(f"{ids.SCM_SUB_CA_PREFIX}{host}", node_id, self.cluster_id, (host,)),
                           ids.Role.SCM),
            key.public_key(),
            issuer=self.root, issuer_key=self.root_key, serial=external_serial(), now=now or _utcnow(),
            lifetime=lifetime, profile=pki.Profile.SUB_CA, spec=self.spec,
        )
        cert_path, key_path = out_dir / "subca.crt", out_dir / "subca.key"
        # key first: a reader that sees the new certificate also finds its key (the SCM validates both)
        atomic_write(key_path.with_name("subca.key.new"), pki.private_key_pem(key), 0o600)
        atomic_write(cert_path.with_name("subca.crt.new"), pki.certs_pem([cert, self.root]).encode("ascii"))
        os.replace(key_path.with_name("subca.key.new"), key_path)
        os.replace(cert_path.with_name("subca.crt.new"), cert_path)
        return cert_path, key_path

    def issue_client(self, user: str, key_path: Path, cert_path: Path) -> None:
        key = pki.generate_key(self.spec)
        cert = pki.issue_certificate(
            ids.client_subject(user, self.cluster_id), key.public_key(), issuer=self.root, issuer_key=self.root_key,
            serial=external_serial(), now=_utcnow(), lifetime=timedelta(days=365), profile=pki.Profile.END_ENTITY,
            spec=self.spec,
        )
        atomic_write(key_path, pki.private_key_pem(key), 0o600)
        atomic_write(cert_path, pki.cert_pem(cert).encode("ascii"))


def external_serial() -> int:
    """A random serial of SCM's external range (RFC 5280 style; never one of SCM's sequence serials)."""
    return (1 << 63) + secrets.randbits(120)


def _utcnow() -> datetime:
    return datetime.now(UTC)


class SecureSetup:
    def __init__(self, base_dir: Path, *, spec: pki.KeySpec | None = None, ca_mode: str = "scm") -> None:
        if ca_mode not in ("scm", "operator"):
            raise ValueError(f"CA mode {ca_mode!r}: use scm or operator")
        self.ca_mode = ca_mode
        self.operator: OperatorCA | None = None
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
        """Secrets and the admin key + CSR (kept if they exist: a restarted cluster keeps them); in CA
        mode operator the operator's root and the admin's certificate."""
        for role in ("scm", "datanode"):
            path = self.secret_file(role)
            if not path.exists():
                atomic_write(path, secrets.token_hex(32).encode() + b"\n", 0o600)
        if self.ca_mode == "operator":
            self.operator = OperatorCA(self.base_dir / "operator-ca", self.spec)
            if not self.admin_cert.exists():
                self.operator.issue_client(ADMIN_USER, self.admin_key, self.admin_cert)
                atomic_write(self.root_cert, pki.cert_pem(self.operator.root).encode("ascii"))
            return
        if not self.admin_key.exists():
            key = pki.generate_key(self.spec)
            atomic_write(self.admin_key, pki.private_key_pem(key), 0o600)
            csr = pki.build_csr(key, ids.client_subject(ADMIN_USER), self.spec)
            atomic_write(self.admin_csr, pki.csr_pem(csr).encode("ascii"))

    def settings(self) -> dict[str, str]:
        common = {
            "ozone.security.enabled": "true",
            "hdds.grpc.tls.enabled": "true",
            "hdds.key.algo": self.spec.algorithm,
            "hdds.key.len": str(self.spec.length),
            "hdds.x509.signature.algorithm": self.spec.signature,
            "ozone.administrators": ADMIN_USER,
            enrollment_secret_key("datanode"): str(self.secret_file("datanode")),
            # the status page and /prom over HTTPS with the SCM's certificate (a setting given to `local up`
            # replaces it, e.g. HTTP_ONLY or HTTP_AND_HTTPS)
            "ozone.http.policy": "HTTPS_ONLY",
            # one machine: datanodes enrol with 127.0.0.1, which a real cluster refuses
            "ozone.scm.security.enrollment.loopback.allowed": "true",
        }
        if self.ca_mode == "operator":
            # the trust anchor only (no root key in the cluster); sub-CA files per node, see node_settings
            return {**common, "hdds.x509.rootca.certificate.file": str(self.base_dir / "operator-ca" / "root.crt"),
                    "hdds.x509.subca.reload.interval": "500ms"}
        return {
            **common,
            "ozone.scm.security.admin.csr.files": str(self.admin_csr),
            enrollment_secret_key("scm"): str(self.secret_file("scm")),
        }

    def subca_dir(self, node_id: str) -> Path:
        return self.base_dir / node_id / "subca"

    def node_settings(self, node_id: str, host: str = "127.0.0.1") -> dict[str, str]:
        """CA mode operator: issue (once) and point at this SCM's sub-CA files."""
        if self.ca_mode != "operator":
            return {}
        assert self.operator is not None, "prepare() first"
        out = self.subca_dir(node_id)
        if not (out / "subca.crt").exists():
            self.operator.issue_sub_ca(node_id, host, out)
        return {
            "hdds.x509.subca.certificate.file": str(out / "subca.crt"),
            "hdds.x509.subca.private.key.file": str(out / "subca.key"),
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
        if self.ready or self.ca_mode == "operator":
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
        from scm_server.local.cluster import site_xml

        self.admin_conf_dir.mkdir(parents=True, exist_ok=True)
        values = {**common, **self.client_settings()}
        values.pop("ozone.scm.security.admin.csr.files", None)
        path = self.admin_conf_dir / "ozone-site.xml"
        path.write_text(site_xml(values))
        os.chmod(path, 0o644)
        return self.admin_conf_dir


class AdminCertRenewer:
    """Keeps the harness's admin client certificate renewed for as long as the cluster runs, as a long-running
    client's renewal check does: every ``interval`` seconds (``hdds.x509.renew.check.interval``), once the
    certificate is within ``grace`` (``hdds.x509.renew.grace.duration``) of its expiry, ``renew`` runs
    (``ozone-scm admin cert renew`` with the admin configuration). A failed renewal is kept in ``errors`` and
    tried again at the next check.

    Why the harness and not the test: the admin certificate is signed at the primordial's ``--init`` and never
    outlives the sub-CA that signed it, so with short test lifetimes it is due while the quorum is still
    starting; a renewer started only once the quorum serves can come too late on a busy machine, and a client
    whose certificate expired cannot renew it any more (every SCM refuses its handshake)."""

    def __init__(
        self,
        cert_file: Path,
        renew: Callable[[], subprocess.CompletedProcess[str]],
        *,
        grace: timedelta,
        interval: float,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.cert_file = cert_file
        self.renew = renew
        self.grace = grace
        self.interval = interval
        self.clock = clock
        self.renewals = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> bool:
        """Renew if due; True when a renewal succeeded."""
        cert = pki.load_certificates(self.cert_file.read_bytes())[0]
        if not pki.needs_renewal(cert, self.clock(), self.grace):
            return False
        out = self.renew()
        if out.returncode != 0:
            error = f"{self.clock().isoformat()}: exit {out.returncode}: {out.stderr.strip()[-500:]}"
            self.errors.append(error)
            LOG.warning("renewing the admin certificate failed (retried at the next check): %s", error)
            return False
        self.renewals += 1
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.check()
            except Exception as exc:  # a torn read or a CLI timeout: the next check tries again
                self.errors.append(f"{self.clock().isoformat()}: {type(exc).__name__}: {exc}")
            self._stop.wait(self.interval)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="admin-cert-renewer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=90)
            self._thread = None
