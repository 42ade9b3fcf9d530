"""A real S3 server on loopback for the object-storage tests: Ceph's RADOS Gateway (Debian's ``radosgw`` 16.2.15)
over a one-node Ceph, started in a temporary directory and stopped by PID.

Debian 12's radosgw has no standalone backend, so three processes run, each on free loopback ports:

* ``ceph-mon`` (msgr2 only, on ``127.0.0.1:<port>``; cephx with one keyring in the directory for every daemon);
* ``ceph-osd`` with ``osd objectstore = memstore`` (objects in memory, no disk; one replica allowed);
* ``radosgw`` with the beast frontend on ``http://127.0.0.1:<port>`` and, with a certificate from a CA made for the
  run, on ``https://127.0.0.1:<port>`` (the CA is the ``--ca-bundle`` of the TLS tests).

No ``ceph-mgr``: the pools radosgw creates get a fixed, small PG count (no autoscaler needed). A user is created with
``radosgw-admin user create`` with keys this module chooses; :func:`radosgw` yields the endpoint and the keys, and
kills the three processes (their PIDs, never by name) when done. Every wait is on a condition (the monitor answers,
the OSD is up, the gateway answers HTTP) with a bounded deadline; a failure raises with the daemon's log tail.
``scripts/install_s3_server.sh`` installs the packages (``make s3-test`` runs it first).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import ipaddress
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from scm_server.ports import free_port

START_DEADLINE_S = 120.0  # each daemon's wait (about 15 s for all three on an idle machine)
BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool", "ceph-authtool", "ceph")


class RadosgwError(RuntimeError):
    """The server could not be started or used: the message says which step and carries the log tail."""


@dataclasses.dataclass(frozen=True)
class S3Server:
    endpoint: str  # http://127.0.0.1:<port>
    access_key: str
    secret_key: str
    region: str  # radosgw accepts any region in a signature; this is the one the tests sign with
    root: Path
    tls_endpoint: str  # https://<host>:<port>, the same gateway under a certificate of a CA made for this run
    ca_file: Path  # that CA (PEM): what --ca-bundle is given

    def env(self) -> dict[str, str]:
        """The environment a client process (``ozone-scm admin scm backup upload|download``) needs."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_DEFAULT_REGION": self.region,
        }


def check_installed() -> None:
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        raise RadosgwError(
            f"{', '.join(missing)} not on PATH: run `bash scripts/install_s3_server.sh` (make s3-test does)"
        )


def _tls(root: Path, host: str) -> Path:
    """A CA made for this run and the gateway's certificate from it (IP SAN ``host``); returns the CA's PEM."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "radosgw test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    d = root / "tls"
    d.mkdir(mode=0o700)
    (d / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (d / "server.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / "server.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                     serialization.PrivateFormat.TraditionalOpenSSL,
                                                     serialization.NoEncryption()))
    return d / "ca.pem"


def _conf(root: Path, fsid: str, mon_port: int, rgw_host: str, rgw_port: int, tls_port: int) -> str:
    return f"""[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{mon_port}
public addr = 127.0.0.1
ms bind msgr1 = false
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
run dir = {root}/run
admin socket = {root}/run/$name.asok
pid file = {root}/run/$name.pid
log file = {root}/log/$name.log
crash dir = {root}/crash
keyring = {root}/keyring
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
[mon]
mon data = {root}/mon/$name
[osd]
osd data = {root}/osd/$name
osd objectstore = memstore
memstore device bytes = 1073741824
osd max object name len = 256
osd max object namespace len = 64
[client.rgw.a]
rgw frontends = beast endpoint={rgw_host}:{rgw_port} ssl_endpoint={rgw_host}:{tls_port} ssl_certificate={root}/tls/server.pem ssl_private_key={root}/tls/server.key
rgw data = {root}/rgw
rgw dns name = {rgw_host}
rgw enable usage log = false
"""


def _run(argv: list[str], what: str, timeout: float = 60.0) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RadosgwError(f"{what}: {' '.join(argv)} did not finish in {timeout:g}s") from exc
    if done.returncode != 0:
        raise RadosgwError(f"{what}: {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return f"(no log at {path})"


def _wait(what: str, check: Callable[[], bool], procs: dict[str, subprocess.Popen[bytes]], log: Path,
          deadline_s: float = START_DEADLINE_S) -> None:
    deadline = time.monotonic() + deadline_s
    while True:
        for name, p in procs.items():
            if p.poll() is not None:
                raise RadosgwError(f"{what}: {name} exited with {p.returncode}; its log:\n{_tail(log)}")
        if check():
            return
        if time.monotonic() > deadline:
            raise RadosgwError(f"{what}: not within {deadline_s:g}s; log {log}:\n{_tail(log)}")
        time.sleep(0.25)


def _http_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status)
    except urllib.error.HTTPError:
        return True  # any HTTP answer: the gateway is serving
    except OSError:
        return False


def _stop(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    for p in reversed(list(procs.values())):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in reversed(list(procs.values())):
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=15)


@contextlib.contextmanager
def radosgw(base: Path | None = None, host: str = "127.0.0.1") -> Iterator[S3Server]:
    """Start mon, OSD and radosgw on free loopback ports under a new temporary directory; yield the server.
    ``host``: the address the gateway listens on (default loopback; the operator's end-to-end test gives the
    test process's address on its own Pod network, the only one its Pods reach)."""
    check_installed()
    root = Path(tempfile.mkdtemp(prefix="radosgw-", dir=base))
    for d in ("run", "log", "crash", "mon/mon.a", "osd/osd.0", "rgw"):
        (root / d).mkdir(parents=True, exist_ok=True)
    mon_port, rgw_port, tls_port = free_port(), free_port(host), free_port(host)
    ca_file = _tls(root, host)
    fsid = str(uuid.uuid4())
    conf = root / "ceph.conf"
    conf.write_text(_conf(root, fsid, mon_port, host, rgw_port, tls_port))
    c = ["-c", str(conf)]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    started = time.monotonic()

    def ceph(*args: str, timeout: float = 30.0) -> str:
        return _run(["ceph", *c, "--connect-timeout", "10", *args], f"ceph {' '.join(args)}", timeout)

    def daemon(name: str, argv: list[str]) -> None:
        out = (root / "log" / f"{name}.stdout").open("wb")
        procs[name] = subprocess.Popen([*argv, *c, "-f"], stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)

    try:
        _run(["monmaptool", "--create", "--fsid", fsid, "--addv", "a", f"[v2:127.0.0.1:{mon_port}]",
              str(root / "monmap")], "monmaptool")
        keyring = str(root / "keyring")
        _run(["ceph-authtool", "--create-keyring", keyring, "--gen-key", "-n", "mon.", "--cap", "mon", "allow *"],
             "ceph-authtool (mon.)")
        for name, caps in (("client.admin", ["mon", "allow *", "osd", "allow *", "mgr", "allow *"]),
                           ("osd.0", ["mon", "allow profile osd", "osd", "allow *", "mgr", "allow profile osd"]),
                           ("client.rgw.a", ["mon", "allow rw", "osd", "allow rwx", "mgr", "allow rw"])):
            _run(["ceph-authtool", keyring, "--gen-key", "-n", name,
                  *[a for i in range(0, len(caps), 2) for a in ("--cap", caps[i], caps[i + 1])]],
                 f"ceph-authtool ({name})")
        _run(["ceph-mon", *c, "--mkfs", "-i", "a", "--monmap", str(root / "monmap")], "ceph-mon --mkfs")
        daemon("mon", ["ceph-mon", "-i", "a"])

        def mon_answers() -> bool:
            try:
                ceph("mon", "stat", timeout=15)
            except RadosgwError:
                return False
            return True

        _wait("the monitor answers", mon_answers, procs, root / "log" / "mon.a.log")
        osd_uuid = str(uuid.uuid4())
        osd_id = ceph("osd", "new", osd_uuid).strip()
        if osd_id != "0":
            raise RadosgwError(f"ceph osd new gave id {osd_id!r}, expected 0 on a new cluster")
        _run(["ceph-osd", *c, "-i", "0", "--mkfs", "--osd-uuid", osd_uuid], "ceph-osd --mkfs")
        daemon("osd", ["ceph-osd", "-i", "0"])

        def osd_up() -> bool:
            try:
                stat = json.loads(ceph("osd", "stat", "-f", "json", timeout=15))
            except (RadosgwError, ValueError):
                return False
            return int(stat.get("num_up_osds", 0)) >= 1 and int(stat.get("num_in_osds", 0)) >= 1

        _wait("the OSD is up and in", osd_up, procs, root / "log" / "osd.0.log")
        daemon("rgw", ["radosgw", "-n", "client.rgw.a"])
        endpoint = f"http://{host}:{rgw_port}"
        _wait("radosgw answers HTTP", lambda: _http_answers(endpoint + "/"), procs,
              root / "log" / "client.rgw.a.log")
        access, secret = "OZSCM" + secrets.token_hex(8).upper(), secrets.token_hex(20)
        _run(["radosgw-admin", *c, "-n", "client.rgw.a", "user", "create", "--uid", "ozone-scm-test",
              "--display-name", "ozone-scm test", "--access-key", access, "--secret", secret],
             "radosgw-admin user create")
        server = S3Server(endpoint=endpoint, access_key=access, secret_key=secret, region="us-east-1", root=root,
                          tls_endpoint=f"https://{host}:{tls_port}", ca_file=ca_file)
        if os.environ.get("S3_TIER_TIMING"):
            print(f"radosgw up at {endpoint} in {time.monotonic() - started:.1f}s", flush=True)
        yield server
    finally:
        _stop(procs)
        shutil.rmtree(root, ignore_errors=True)
