"""A local SCM cluster as separate processes on loopback: config generation, init, start, kill.

Used by ``ozone-scm local run`` (the main job) and by the integration tests, which need a REAL
SCM daemon process (``python -m scm_server.cli.main scm``) with short intervals. Everything
binds 127.0.0.1 with ports picked free at runtime. ``num_scms`` > 1 lays out an Ozone HA
service (``ozone.scm.service.ids``, ``ozone.scm.nodes.<svc>``, per-node port suffix keys,
``ozone.scm.primordial.node.id``) and runs ``scm --init`` and ``scm --bootstrap`` on every node,
as Ozone's auto-bootstrap does.

Synchronous on purpose (subprocess + polling with deadlines): callers run it from plain
threads, pytest fixtures, or before starting their own event loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import logging
import os
import re
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any
from xml.sax.saxutils import escape

from scm_server.conf import OzoneConfiguration, ports
from scm_server.exceptions import ConfigError
from scm_server.ports import free_port

SERVICE_ID = "scmservice"
LOG = logging.getLogger(__name__)

# A port picked free can be taken by another process before the daemon binds it (a busy machine): the
# daemon then exits with one line "cannot listen on HOST:PORT (...)", and the harness starts that SCM
# again on a freshly picked port, up to this many starts in all.
START_ATTEMPTS = 3
_BIND_FAILURE = re.compile(r"cannot listen on \[?[^\s\]]*?\]?:(\d+)\b")
# the ports the harness may move: every port but the Raft and inter-SCM ones (the ring knows a member by them)
_MOVABLE_PORTS = ("client_port", "block_port", "datanode_port", "http_port")


class PortInUseError(RuntimeError):
    """An SCM could not bind one of its ports on any of its start attempts."""

# Short intervals so a local cluster (and a test) sees safemode exit, stale/dead nodes and
# replication within seconds rather than Ozone's production minutes.
FAST_SETTINGS: dict[str, str] = {
    "hdds.heartbeat.interval": "500ms",
    "ozone.scm.heartbeat.thread.interval": "250ms",
    "ozone.scm.stale.node.interval": "3s",
    "ozone.scm.dead.node.interval": "6s",
    "hdds.scm.replication.thread.interval": "1s",
    "ozone.scm.pipeline.creation.interval": "1s",
    "hdds.scm.wait.time.after.safemode.exit": "0s",
    "hdds.scm.safemode.rule.refresh.interval": "250ms",
    "ozone.scm.pipeline.destroy.timeout": "2s",
    "ozone.scm.pipeline.allocated.timeout": "30s",
    "hdds.scmclient.failover.retry.interval": "200ms",
    "hdds.scmclient.failover.max.retry": "15",
    "ozone.block.deleting.service.interval": "1s",
    "hdds.scm.replication.event.timeout": "10s",
    "hdds.scm.replication.event.timeout.datanode.offset": "5s",  # less than the event timeout, as it must be
    "ozone.scm.ha.dbtransactionbuffer.flush.interval": "1s",
}


def site_xml(values: Mapping[str, str]) -> str:
    props = "\n".join(
        f"  <property><name>{escape(k)}</name><value>{escape(str(v))}</value></property>"
        for k, v in sorted(values.items())
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{props}\n</configuration>\n'


# Ozone's protocols over Hadoop RPC, on Ozone's own port keys (scm_server.conf.ports)
HADOOP_RPC_KEYS = {
    "block": ports.BLOCK_HADOOP.port_key,
    "datanode": ports.DATANODE_HADOOP.port_key,
    "client": ports.CLIENT_HADOOP.port_key,
    "security": ports.SECURITY_HADOOP.port_key,
}


@dataclasses.dataclass
class ScmProcessInfo:
    """One SCM process. ``client_port``, ``block_port`` and ``datanode_port`` are its **gRPC** ports (our client,
    CLI and simulator; ``ozone.scm.<x>.grpc.port``); ``hadoop_ports`` its Hadoop RPC ports on Ozone's keys."""

    node_id: str | None
    conf_dir: Path
    metadata_dir: Path
    client_port: int
    block_port: int
    datanode_port: int
    http_port: int
    ratis_port: int
    grpc_port: int  # the inter-SCM port (ozone.scm.grpc.port)
    log_path: Path
    hadoop_ports: dict[str, int] = dataclasses.field(
        default_factory=lambda: {protocol: free_port() for protocol in HADOOP_RPC_KEYS}
    )
    proc: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None
    _log_offset: int = 0  # where this process's output starts in log_path
    _extra_env: Mapping[str, str] | None = None  # the environment of the last start, for a start on new ports
    start_attempts: int = 0  # starts of the current launch (more than 1: a port was taken before the bind)
    host: str = "127.0.0.1"  # where this process can be reached now (tests move SCMs to new addresses)
    web_scheme: str = "http"  # "https" when the SCM serves its page only over HTTPS (ozone.http.policy=HTTPS_ONLY)
    web_ca: Path | None = None  # the root CA file that verifies the HTTPS page (secure clusters)

    @property
    def client_address(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def block_address(self) -> str:
        return f"{self.host}:{self.block_port}"

    @property
    def datanode_address(self) -> str:
        return f"{self.host}:{self.datanode_port}"

    @property
    def grpc_address(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def ratis_address(self) -> str:
        return f"{self.host}:{self.ratis_port}"

    @property
    def http_url(self) -> str:
        """The web page (``/health``, ``/prom``): on ``http_port``, over HTTPS under ``ozone.http.policy=HTTPS_ONLY``."""
        return f"{self.web_scheme}://{self.host}:{self.http_port}"


class LocalCluster:
    """``num_scms`` SCM processes sharing one cluster, under ``base_dir``."""

    def __init__(
        self,
        base_dir: Path,
        num_scms: int = 1,
        *,
        settings: Mapping[str, str] | None = None,
        python: str = sys.executable,
        port_picker: Callable[[], int] = free_port,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.port_picker = port_picker  # every port of every SCM (tests inject one to force a collision)
        self.num_scms = num_scms
        self.python = python
        self.settings = {**FAST_SETTINGS, **(settings or {})}
        self.node_settings: dict[str, dict[str, str]] = {}  # per node id, on top of the common settings
        self.launcher: list[str] = []  # a command prefix for every SCM process (tests: own /etc/hosts)
        self.scms: list[ScmProcessInfo] = []
        for i in range(num_scms):
            node_id = f"scm{i + 1}" if num_scms > 1 else None
            root = self.base_dir / (node_id or "scm")
            self.scms.append(
                ScmProcessInfo(
                    node_id=node_id,
                    conf_dir=root / "conf",
                    metadata_dir=root / "metadata",
                    client_port=self.port_picker(),
                    block_port=self.port_picker(),
                    datanode_port=self.port_picker(),
                    http_port=self.port_picker(),
                    ratis_port=self.port_picker(),
                    grpc_port=self.port_picker(),
                    log_path=root / "scm.log",
                    hadoop_ports={protocol: self.port_picker() for protocol in HADOOP_RPC_KEYS},
                )
            )

    # ---- configuration ----

    @property
    def https_only(self) -> bool:
        return str(self.settings.get("ozone.http.policy", "HTTP_ONLY")).upper() == "HTTPS_ONLY"

    def common_settings(self) -> dict[str, str]:
        values = dict(self.settings)
        # HTTPS_ONLY: the page moves to HTTPS on the same port (the http-address is then unused)
        web_key = "ozone.scm.https-address" if self.https_only else "ozone.scm.http-address"
        for s in self.scms:
            s.web_scheme = "https" if self.https_only else "http"
        if self.num_scms == 1:
            s = self.scms[0]
            values.update({
                "ozone.scm.names": "127.0.0.1",
                "ozone.scm.client.address": "127.0.0.1",
                ports.CLIENT_GRPC.port_key: str(s.client_port),
                ports.BLOCK_GRPC.port_key: str(s.block_port),
                ports.DATANODE_GRPC.port_key: str(s.datanode_port),
                web_key: f"127.0.0.1:{s.http_port}",
                "ozone.scm.ratis.port": str(s.ratis_port),
                "ozone.scm.grpc.port": str(s.grpc_port),
                **{key: str(s.hadoop_ports[protocol]) for protocol, key in HADOOP_RPC_KEYS.items()},
            })
            return values
        ids = [s.node_id for s in self.scms if s.node_id]
        values.update({
            "ozone.scm.service.ids": SERVICE_ID,
            "ozone.scm.default.service.id": SERVICE_ID,
            f"ozone.scm.nodes.{SERVICE_ID}": ",".join(ids),
            "ozone.scm.primordial.node.id": ids[0],
            "ozone.scm.names": ",".join("127.0.0.1" for _ in ids),
        })
        for s in self.scms:
            sfx = f"{SERVICE_ID}.{s.node_id}"
            values.update({
                f"ozone.scm.address.{sfx}": "127.0.0.1",
                f"{ports.CLIENT_GRPC.port_key}.{sfx}": str(s.client_port),
                f"{ports.BLOCK_GRPC.port_key}.{sfx}": str(s.block_port),
                f"{ports.DATANODE_GRPC.port_key}.{sfx}": str(s.datanode_port),
                f"{web_key}.{sfx}": f"127.0.0.1:{s.http_port}",
                f"ozone.scm.ratis.port.{sfx}": str(s.ratis_port),
                f"ozone.scm.grpc.port.{sfx}": str(s.grpc_port),
                **{f"{key}.{sfx}": str(s.hadoop_ports[protocol]) for protocol, key in HADOOP_RPC_KEYS.items()},
            })
        return values

    def write_configs(self, create_metadata_dirs: bool = True) -> None:
        common = self.common_settings()
        for s in self.scms:
            s.conf_dir.mkdir(parents=True, exist_ok=True)
            if create_metadata_dirs:
                s.metadata_dir.mkdir(parents=True, exist_ok=True)
            values = {**common, "ozone.metadata.dirs": str(s.metadata_dir), **self.node_settings.get(str(s.node_id), {})}
            if s.node_id:
                values["ozone.scm.node.id"] = s.node_id
            (s.conf_dir / "ozone-site.xml").write_text(site_xml(values))

    # ---- processes ----

    def cli(self, scm: ScmProcessInfo, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run ``ozone-scm --conf <scm conf> args...`` to completion."""
        return subprocess.run(
            self.command(scm, *args),
            capture_output=True, text=True, timeout=timeout, env=self._env(),
        )

    def command(self, scm: ScmProcessInfo, *args: str) -> list[str]:
        """``ozone-scm --conf <scm conf> args...`` as an argv, behind :attr:`launcher`."""
        return [*self.launcher, self.python, "-m", "scm_server.cli.main", "--conf", str(scm.conf_dir), *args]

    def _env(self) -> dict[str, str]:
        return child_env()

    def init(self, cluster_id: str | None = None) -> None:
        """``scm --init`` on every node (non-primordial nodes skip it; their ``--bootstrap`` needs the
        primordial SCM running, so ``start`` does it)."""
        for s in self.scms:
            args = ["scm", "--init"] + ([f"--clusterid={cluster_id}"] if cluster_id else [])
            result = self.cli(s, *args)
            if result.returncode != 0:
                raise RuntimeError(f"scm --init on {s.node_id or 'scm'} failed: {result.stderr.strip()}")

    def start(self, index: int = 0, extra_env: Mapping[str, str] | None = None) -> ScmProcessInfo:
        s = self.scms[index]
        if self.num_scms > 1 and index > 0 and not (s.metadata_dir / "scm" / "current" / "VERSION").exists():
            result = self.cli(s, "scm", "--bootstrap", timeout=120)
            if result.returncode != 0:
                raise RuntimeError(f"scm --bootstrap on {s.node_id} failed: {result.stderr.strip()}")
        s._extra_env = dict(extra_env or {})
        s.start_attempts = 0
        self._launch(s)
        return s

    def _launch(self, s: ScmProcessInfo) -> None:
        s.log_path.parent.mkdir(parents=True, exist_ok=True)
        s._log = open(s.log_path, "ab")  # noqa: SIM115 - closed in stop()/kill()
        s._log_offset = s._log.tell()
        env = self._env()
        env.update(s._extra_env or {})
        s.start_attempts += 1
        s.proc = subprocess.Popen(
            self.command(s, "scm"),
            stdout=s._log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )

    def start_all(self) -> None:
        self.start(0)
        if self.num_scms > 1:
            self.wait_serving(0)
        for i in range(1, self.num_scms):
            self.start(i)

    def wait_serving(self, index: int = 0, timeout: float = 60.0) -> None:
        """Poll /health until the SCM's HTTP server answers (its gRPC servers start before it). An SCM that
        exited because another process took one of its ports since it was picked is started again on a
        new port (:data:`START_ATTEMPTS` starts in all); after the last, :class:`PortInUseError`."""
        s = self.scms[index]
        wait_for(lambda: self._http_ok(s, "/health"), timeout, f"SCM {s.node_id or ''} at {s.http_url}",
                 lambda: self._check_alive(s))

    def _check_alive(self, s: ScmProcessInfo) -> None:
        if s.proc is None or s.proc.poll() is None:
            return
        port = bind_failure(s.log_path, s._log_offset)
        if port is None:
            raise RuntimeError(
                f"SCM process exited with {s.proc.returncode}; log {s.log_path}:\n{tail(s.log_path)}"
            )
        slot = self.port_slot(s, port)
        name = s.node_id or "scm"
        if slot is None or s.start_attempts >= START_ATTEMPTS:
            why = (f"after {s.start_attempts} start attempt(s), each on a newly picked port" if slot is not None
                   else f"and the harness does not move that port ({self.port_key(s, port)})")
            raise PortInUseError(
                f"SCM {name} could not listen on 127.0.0.1:{port} ({self.port_key(s, port)}): address in use, "
                f"{why}; log {s.log_path}:\n{tail(s.log_path)}"
            )
        new = self.port_picker()
        LOG.warning("SCM %s: port %d (%s) was taken before it bound it; starting it again on port %d",
                    name, port, self.port_key(s, port), new)
        self._close_log(s)
        self.set_port(s, slot, new)
        self.ports_changed()
        self._launch(s)

    # ---- ports: which port of an SCM a bind failure names, and moving it ----

    def port_slots(self, s: ScmProcessInfo) -> dict[str, int]:
        """The ports of ``s`` the harness may move to a new port, by slot name."""
        slots = {attr: int(getattr(s, attr)) for attr in _MOVABLE_PORTS}
        slots.update({f"hadoop:{protocol}": port for protocol, port in s.hadoop_ports.items()})
        return slots

    def port_slot(self, s: ScmProcessInfo, port: int) -> str | None:
        return next((slot for slot, p in self.port_slots(s).items() if p == port), None)

    def port_key(self, s: ScmProcessInfo, port: int) -> str:
        """The configuration key of ``port`` on ``s``, for messages."""
        keys = {s.client_port: ports.CLIENT_GRPC.port_key, s.block_port: ports.BLOCK_GRPC.port_key,
                s.datanode_port: ports.DATANODE_GRPC.port_key, s.ratis_port: "ozone.scm.ratis.port",
                s.grpc_port: "ozone.scm.grpc.port", s.http_port: "the web port",
                **{p: HADOOP_RPC_KEYS[protocol] for protocol, p in s.hadoop_ports.items()}}
        return keys.get(port, "a port not of this SCM")

    def set_port(self, s: ScmProcessInfo, slot: str, port: int) -> None:
        if slot.startswith("hadoop:"):
            s.hadoop_ports[slot.split(":", 1)[1]] = port
        else:
            setattr(s, slot, port)

    def ports_changed(self) -> None:
        """A port moved: every SCM's configuration names it (running SCMs keep what they loaded)."""
        self.write_configs()

    @staticmethod
    def _http_ok(s: ScmProcessInfo, path: str) -> bool:
        return web_ok(s.http_url + path, s.web_ca)

    def kill(self, index: int = 0, sig: int = signal.SIGKILL) -> None:
        s = self.scms[index]
        if s.proc is not None and s.proc.poll() is None:
            s.proc.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                s.proc.wait(timeout=20)
            if s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait(timeout=10)
        self._close_log(s)

    @staticmethod
    def _close_log(s: ScmProcessInfo) -> None:
        if s._log is not None:
            s._log.close()
            s._log = None

    def stop_all(self) -> None:
        for i in range(len(self.scms)):
            self.kill(i, signal.SIGTERM)

    # ---- addresses ----

    @property
    def client_addresses(self) -> list[str]:
        return [s.client_address for s in self.scms]

    @property
    def datanode_addresses(self) -> list[str]:
        return [s.datanode_address for s in self.scms]

    @property
    def block_addresses(self) -> list[str]:
        return [s.block_address for s in self.scms]

    def hadoop_port(self, node_id: str | None, protocol: str) -> int:
        """The Hadoop RPC port of ``protocol`` (block, datanode, client, security) on the SCM ``node_id``."""
        for s in self.scms:
            if s.node_id == node_id:
                return s.hadoop_ports[protocol]
        raise KeyError(f"no SCM {node_id}")

    def hadoop_addresses(self, protocol: str) -> list[str]:
        """``host:port`` of ``protocol`` over Hadoop RPC on every SCM (Ozone's own port keys)."""
        return [f"{s.host}:{s.hadoop_ports[protocol]}" for s in self.scms]

    def fetch(self, index: int, path: str) -> str:
        s = self.scms[index]
        with urllib.request.urlopen(s.http_url + path, timeout=5, context=web_context(s.http_url, s.web_ca)) as resp:
            return str(resp.read().decode())

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()


def child_env() -> dict[str, str]:
    """Environment of an SCM child process: its own ozone-site.xml only (no OZONE-SITE.XML_ overrides,
    no OZONE_CONF_DIR), unbuffered output, and the same scm_server as ours, installed or not."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OZONE-SITE.XML_")}
    env.pop("OZONE_CONF_DIR", None)
    env["PYTHONUNBUFFERED"] = "1"
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def bind_failure(log_path: Path, offset: int = 0) -> int | None:
    """The port of the daemon's "cannot listen on HOST:PORT" line in ``log_path`` after ``offset``, if any."""
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    found = _BIND_FAILURE.findall(text)
    return int(found[-1]) if found else None


def wait_for(
    predicate: Callable[[], Any],
    timeout: float,
    what: str,
    check: Callable[[], None] | None = None,
    interval: float = 0.1,
) -> Any:
    """Poll ``predicate`` until truthy or ``timeout`` seconds pass (then TimeoutError naming ``what``)."""
    deadline = time.monotonic() + timeout
    while True:
        if check is not None:
            check()
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def web_context(url: str, ca_file: Path | None) -> ssl.SSLContext | None:
    """The TLS context for a local SCM's HTTPS page: verified against the cluster's root CA when its file
    exists; before it does (the primordial's first start) a liveness probe that verifies nothing (it sends
    no credentials and reads only /health). None for plain HTTP."""
    if not url.startswith("https://"):
        return None
    if ca_file is not None and Path(ca_file).is_file():
        return ssl.create_default_context(cafile=str(ca_file))
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def web_ok(url: str, ca_file: Path | None = None, timeout: float = 2.0) -> bool:
    """True if ``url`` (HTTP or HTTPS) answers 200 within ``timeout``; False also when what answers does not
    speak HTTP (another process's gRPC server on a port this SCM could not bind: the caller's wait sees the
    SCM exit and says which port)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=web_context(url, ca_file)) as resp:
            return bool(resp.status == 200)
    except (OSError, http.client.HTTPException):
        return False


def configured_web_url(conf_dir: Path) -> str | None:
    """The base URL of the page the SCM configured in ``conf_dir`` serves, following its ``ozone.http.policy``
    (HTTPS when it serves only HTTPS); None if the configuration cannot be read."""
    try:
        conf = OzoneConfiguration.load(conf_dir / "ozone-site.xml", env={})
    except (OSError, ValueError, SyntaxError, ConfigError):  # unreadable: the caller uses the recorded URL
        return None
    https = (conf.get_str("ozone.http.policy") or "HTTP_ONLY").upper() == "HTTPS_ONLY"
    key, default = ("ozone.scm.https-address", "0.0.0.0:9877") if https else ("ozone.scm.http-address", "0.0.0.0:9876")
    node, service = conf.get_str("ozone.scm.node.id"), conf.get_str("ozone.scm.default.service.id")
    address = (conf.get_str(f"{key}.{service}.{node}") if node and service else None) or conf.get_str(key) or default
    host, _, port = address.rpartition(":")
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    return f"{'https' if https else 'http'}://{host}:{port}"
