"""A real MIT Kerberos KDC on loopback for tests: its own realm, database, krb5.conf and keytabs in a temp dir.

Reusable by every Kerberos tier (this package's SASL tests, the secure-Ozone tier)::

    kdc = MiniKdc.start(tmp_path / "kdc")          # krb5kdc on a free 127.0.0.1 port, realm EXAMPLE.COM
    keytab = kdc.keytab("scm/localhost", "scm")     # kadmin.local addprinc -randkey + ktadd
    ccache = kdc.kinit("alice", kdc.keytab("alice"))  # kinit -kt into a FILE ccache
    ...
    kdc.stop()

Everything a Kerberos library needs is in :meth:`MiniKdc.env` (``KRB5_CONFIG``, ``KRB5_KDC_PROFILE``,
``KRB5RCACHEDIR``); the commands run with it, and the tests put it in ``os.environ`` for in-process GSSAPI.
The Debian packages come from ``scripts/install_kerberos.sh`` (``make kerberos-test`` runs it); a missing
binary fails the test with the command to run, never skips it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

BINARIES = ("krb5kdc", "kdb5_util", "kadmin.local", "kinit", "klist", "kvno")
INSTALL_HINT = "run `make kerberos-test` (or bash scripts/install_kerberos.sh) to install MIT Kerberos"
START_TIMEOUT = 20.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def require_binaries() -> None:
    missing = [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
    if missing:
        raise RuntimeError(f"MIT Kerberos binaries missing: {', '.join(missing)}; {INSTALL_HINT}")


def _which(binary: str) -> str:
    found = shutil.which(binary)
    if found:
        return found
    candidate = Path("/usr/sbin", binary)
    if candidate.exists():
        return str(candidate)
    raise RuntimeError(f"{binary} not found; {INSTALL_HINT}")


class MiniKdc:
    def __init__(self, root: Path, realm: str, port: int, process: subprocess.Popen[bytes]) -> None:
        self.root = root
        self.realm = realm
        self.port = port
        self.process = process

    # ---- lifecycle ----

    @classmethod
    def start(cls, root: Path, realm: str = "EXAMPLE.COM") -> MiniKdc:
        require_binaries()
        root.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        (root / "rcache").mkdir(exist_ok=True)
        (root / "krb5.conf").write_text(
            "[libdefaults]\n"
            f"  default_realm = {realm}\n"
            "  dns_lookup_realm = false\n"
            "  dns_lookup_kdc = false\n"
            "  dns_canonicalize_hostname = false\n"
            "  rdns = false\n"
            "  udp_preference_limit = 1\n"
            "  ticket_lifetime = 1h\n"
            "  forwardable = true\n"
            "[realms]\n"
            f"  {realm} = {{\n    kdc = 127.0.0.1:{port}\n  }}\n"
            "[domain_realm]\n"
            f"  localhost = {realm}\n"
        )
        (root / "kdc.conf").write_text(
            "[kdcdefaults]\n"
            f"  kdc_ports = {port}\n"
            f"  kdc_tcp_ports = {port}\n"
            "[realms]\n"
            f"  {realm} = {{\n"
            f"    database_name = {root}/principal\n"
            f"    key_stash_file = {root}/stash\n"
            f"    acl_file = {root}/kadm5.acl\n"
            "    max_life = 1h\n"
            "    supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal\n"
            "  }\n"
            "[logging]\n"
            f"  kdc = FILE:{root}/kdc.log\n"
        )
        (root / "kadm5.acl").write_text("")
        env = cls._env_of(root)
        subprocess.run(
            [_which("kdb5_util"), "create", "-s", "-r", realm, "-P", "master-password-for-tests"],
            env=env, check=True, capture_output=True,
        )
        process = subprocess.Popen(
            [_which("krb5kdc"), "-n", "-r", realm], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        kdc = cls(root, realm, port, process)
        deadline = time.monotonic() + START_TIMEOUT
        while not kdc._listening():
            if process.poll() is not None:
                err = process.stderr.read().decode() if process.stderr else ""
                raise RuntimeError(f"krb5kdc exited with {process.returncode}: {err.strip()}")
            if time.monotonic() > deadline:
                kdc.stop()
                raise RuntimeError(f"krb5kdc did not listen on 127.0.0.1:{port} within {START_TIMEOUT}s")
            time.sleep(0.05)  # polling the port the KDC opens (a bounded wait on a condition)
        return kdc

    def _listening(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
            return True
        return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    # ---- environment ----

    @staticmethod
    def _env_of(root: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            KRB5_CONFIG=str(root / "krb5.conf"),
            KRB5_KDC_PROFILE=str(root / "kdc.conf"),
            KRB5RCACHEDIR=str(root / "rcache"),
        )
        env.pop("KRB5CCNAME", None)
        env.pop("KRB5_KTNAME", None)
        return env

    def env(self) -> dict[str, str]:
        """The variables a Kerberos library must see to use this realm."""
        return {k: v for k, v in self._env_of(self.root).items() if k.startswith("KRB5")}

    # ---- principals, keytabs, tickets ----

    def principal(self, name: str) -> str:
        return name if "@" in name else f"{name}@{self.realm}"

    def kadmin(self, query: str) -> str:
        done = subprocess.run(
            [_which("kadmin.local"), "-r", self.realm, "-q", query],
            env=self._env_of(self.root), check=True, capture_output=True, text=True,
        )
        if "error" in done.stderr.lower() or "error" in done.stdout.lower():  # kadmin.local exits 0 on errors
            raise RuntimeError(f"kadmin.local -q {query!r}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def add_principal(self, name: str) -> str:
        principal = self.principal(name)
        self.kadmin(f"addprinc -randkey {principal}")
        return principal

    def keytab(self, name: str, file_name: str | None = None, *, create: bool = True) -> Path:
        """A keytab holding ``name``'s key (the principal is created first unless ``create`` is False)."""
        principal = self.add_principal(name) if create else self.principal(name)
        path = self.root / f"{file_name or principal.replace('/', '_').split('@')[0]}.keytab"
        self.kadmin(f"ktadd -k {path} {principal}")
        path.chmod(0o400)
        return path

    def kinit(self, name: str, keytab: Path, ccache_name: str | None = None) -> Path:
        """A ticket-granting ticket for ``name`` from ``keytab`` in a FILE ccache of its own."""
        principal = self.principal(name)
        ccache = self.root / f"{ccache_name or principal.replace('/', '_').split('@')[0]}.ccache"
        done = subprocess.run(
            [_which("kinit"), "-kt", str(keytab), "-c", f"FILE:{ccache}", principal],
            env=self._env_of(self.root), capture_output=True, text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kinit {principal}: {done.stderr.strip()}")
        return ccache

    def service_ticket(self, ccache: Path, service: str) -> None:
        """Put a ticket for ``service`` (``name/host``) into ``ccache`` now (``kvno``), so that a client can use it
        later without the KDC."""
        done = subprocess.run(
            [_which("kvno"), "-c", f"FILE:{ccache}", self.principal(service)],
            env=self._env_of(self.root), capture_output=True, text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kvno {service}: {done.stderr.strip()}")
