"""Keys and certificates on disk: Ozone's layout, atomic writes, loading with clear errors (edge).

Who calls it: ``scm --init`` / ``--bootstrap`` (saving what was created or issued), the daemon
(loading its material at start and when files change), the renewal loop, the datanode simulator
and the CLI. It must not decide anything about certificates (that is the pure core) and never
prints key material.

Layout (Ozone's ``hdds.key.dir.name``/``hdds.x509.dir.name``/``hdds.priv.key.file.name``/...):

    <ozone.metadata.dirs>/scm/ca/keys/private.pem, public.pem       the root CA (CA mode scm)
    <ozone.metadata.dirs>/scm/ca/certs/certificate.crt
    <ozone.metadata.dirs>/scm/sub-ca/keys/private.pem, public.pem   this SCM's sub-CA
    <ozone.metadata.dirs>/scm/sub-ca/certs/certificate.crt           its certificate + issuer chain
    <ozone.metadata.dirs>/scm/sub-ca/certs/ROOTCA-<serial>.crt       the root CA certificate(s) it trusts
    <datanode dir>/dn/keys/..., <datanode dir>/dn/certs/...          a datanode

Private keys are written 0600. A key and its certificate change together on renewal: both new
files are written as ``*.new`` first and renamed; a crash between the two renames is completed
on the next load (the pair that matches wins), so a restart never finds a key that does not
match its certificate.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from cryptography import x509

from scm_server.conf.security import SecurityConfig
from scm_server.exceptions import ConfigError
from scm_server.security.core import certificates as pki
from scm_server.security.core.enrollment import check_secret

ROOT_PREFIX = "ROOTCA-"
T = TypeVar("T")


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    """tmp + fsync + rename + fsync(dir)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    dfd = os.open(str(directory), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


@dataclasses.dataclass(frozen=True)
class Material:
    """A private key, its certificate chain (leaf first, issuers after, no root) and the trusted roots."""

    key: pki.PrivateKey
    chain: tuple[x509.Certificate, ...]
    roots: tuple[x509.Certificate, ...]

    @property
    def certificate(self) -> x509.Certificate:
        return self.chain[0]

    @property
    def serial_id(self) -> str:
        return str(self.certificate.serial_number)

    def key_pem(self) -> bytes:
        return pki.private_key_pem(self.key)

    def chain_pem(self, with_root: bool = False) -> bytes:
        certs = list(self.chain) + (list(self.roots) if with_root else [])
        return pki.certs_pem(certs).encode("ascii")

    def roots_pem(self) -> bytes:
        return pki.certs_pem(self.roots).encode("ascii")


def split_chain(certs: Sequence[x509.Certificate]) -> tuple[tuple[x509.Certificate, ...], tuple[x509.Certificate, ...]]:
    """(chain without self-signed roots, the self-signed roots among them)."""
    chain = tuple(c for c in certs if not pki.is_self_signed(c))
    roots = tuple(c for c in certs if pki.is_self_signed(c))
    return chain, roots


class KeyStore:
    """One component's keys and certificates under ``base`` (e.g. ``<metadata>/scm/sub-ca``)."""

    def __init__(self, base: Path, config: SecurityConfig | None = None) -> None:
        c = config or SecurityConfig()
        self.base = Path(base)
        self.keys_dir = self.base / c.key_dir_name
        self.certs_dir = self.base / c.x509_dir_name
        self.private_key_path = self.keys_dir / c.private_key_file_name
        self.public_key_path = self.keys_dir / c.public_key_file_name
        self.certificate_path = self.certs_dir / c.x509_file_name

    def exists(self) -> bool:
        return self.certificate_path.exists() and self.private_key_path.exists()

    def root_paths(self) -> list[Path]:
        if not self.certs_dir.is_dir():
            return []
        return sorted(p for p in self.certs_dir.glob(f"{ROOT_PREFIX}*.crt"))

    def save(self, key: pki.PrivateKey, chain: Sequence[x509.Certificate], roots: Sequence[x509.Certificate]) -> None:
        """Write key, public key, certificate chain and root(s); the key/cert pair switches together."""
        if not chain or not pki.key_matches(chain[0], key):
            raise pki.PKIError("refusing to save a certificate that does not match its private key")
        new_key = self.private_key_path.with_name(self.private_key_path.name + ".new")
        new_cert = self.certificate_path.with_name(self.certificate_path.name + ".new")
        atomic_write(new_key, pki.private_key_pem(key), 0o600)
        atomic_write(new_cert, pki.certs_pem(list(chain)).encode("ascii"))
        for root in roots:
            atomic_write(self.certs_dir / f"{ROOT_PREFIX}{root.serial_number}.crt", pki.cert_pem(root).encode("ascii"))
        atomic_write(self.public_key_path, pki.public_key_pem(key.public_key()))
        os.replace(new_key, self.private_key_path)
        os.replace(new_cert, self.certificate_path)
        _fsync_dir(self.keys_dir)
        _fsync_dir(self.certs_dir)

    def save_roots(self, roots: Sequence[x509.Certificate]) -> None:
        for root in roots:
            atomic_write(self.certs_dir / f"{ROOT_PREFIX}{root.serial_number}.crt", pki.cert_pem(root).encode("ascii"))

    def _complete_interrupted_switch(self) -> None:
        new_key = self.private_key_path.with_name(self.private_key_path.name + ".new")
        new_cert = self.certificate_path.with_name(self.certificate_path.name + ".new")
        if not (new_key.exists() or new_cert.exists()):
            return
        key = pki.load_private_key(self._read(new_key if new_key.exists() else self.private_key_path), str(new_key))
        cert_file = new_cert if new_cert.exists() else self.certificate_path
        cert = pki.load_certificate(self._read(cert_file), str(cert_file))
        if pki.key_matches(cert, key):
            if new_key.exists():
                os.replace(new_key, self.private_key_path)
            if new_cert.exists():
                os.replace(new_cert, self.certificate_path)
        else:  # the new pair was never complete: keep the old one
            for leftover in (new_key, new_cert):
                leftover.unlink(missing_ok=True)

    @staticmethod
    def _read(path: Path) -> bytes:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise ConfigError(f"{path} does not exist") from None
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from exc

    def load(self, extra_roots: Sequence[x509.Certificate] = (), *, root_ca: bool = False) -> Material:
        """Key + chain + roots (the stored ``ROOTCA-*.crt`` files plus ``extra_roots``). ``root_ca``:
        this store holds a self-signed root CA (its own certificate is the root)."""
        self._complete_interrupted_switch()
        try:
            key = pki.load_private_key(self._read(self.private_key_path), str(self.private_key_path))
            certs = pki.load_certificates(self._read(self.certificate_path), str(self.certificate_path))
            roots = [pki.load_certificate(self._read(p), str(p)) for p in self.root_paths()]
        except pki.PKIError as exc:
            raise ConfigError(f"{exc}; restore the file or re-create this component's certificate") from exc
        chain, embedded_roots = split_chain(certs)
        if root_ca and not chain:
            chain = embedded_roots[:1]
        if not chain:
            raise ConfigError(f"{self.certificate_path} holds only self-signed certificates, no own certificate")
        if not pki.key_matches(chain[0], key):
            raise ConfigError(
                f"the private key {self.private_key_path} does not match the certificate {self.certificate_path}"
            )
        all_roots = _unique([*roots, *embedded_roots, *extra_roots])
        return Material(key, chain, tuple(all_roots))


def _unique(certs: Sequence[x509.Certificate]) -> list[x509.Certificate]:
    seen: set[str] = set()
    out = []
    for c in certs:
        fp = pki.fingerprint(c)
        if fp not in seen:
            seen.add(fp)
            out.append(c)
    return out


def _read_configured(path: Path | str, what: str, kind: str = "") -> bytes:
    p = Path(path)
    try:
        return p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{what}={p}: the {kind}file does not exist") from None
    except OSError as exc:
        raise ConfigError(f"{what}={p}: cannot read the {kind}file ({exc})") from exc


def _parsed(parse: Callable[[bytes, str], T], data: bytes, label: str) -> T:
    try:
        return parse(data, label)
    except (pki.PKIError, ValueError) as exc:
        raise ConfigError(str(exc)) from exc


def load_certificate_file(path: Path | str, what: str) -> list[x509.Certificate]:
    """All certificates of a PEM file named by a config key (``what``), with a one-line error."""
    return _parsed(pki.load_certificates, _read_configured(path, what), f"{what}={path}")


def load_private_key_file(path: Path | str, what: str) -> pki.PrivateKey:
    return _parsed(pki.load_private_key, _read_configured(path, what), f"{what}={path}")


def read_secret(path: Path, what: str) -> bytes:
    return _parsed(check_secret, _read_configured(path, what, "enrolment secret "), f"{what}={path}")


def file_signature(*paths: Path | str | None) -> tuple[tuple[str, int, int], ...]:
    """(path, mtime_ns, size) of each existing file: cheap change detection for reload polling.

    Kubernetes swaps a mounted Secret by replacing a symlink, so the stat follows links."""
    out = []
    for p in paths:
        if p is None:
            continue
        try:
            st = os.stat(p)
        except OSError:
            out.append((str(p), -1, -1))
            continue
        out.append((str(p), st.st_mtime_ns, st.st_size))
    return tuple(out)
