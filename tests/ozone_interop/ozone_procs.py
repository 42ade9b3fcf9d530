"""Apache Ozone's own processes on loopback, started from the released jars (scripts/ozone_jars.sh).

The harness of `make ozone-interop`: it writes one `ozone-site.xml` per process with Ozone's own configuration
keys only (written here, key by key; nothing is taken from Ozone's files), starts Ozone's SCM ring, datanodes and
Ozone Manager as JVMs with small heaps, runs `ozone sh` and `ozone admin` through their main classes, and waits
on conditions (ports open, command output) with deadlines, never for a fixed time. Every process it starts is
recorded and killed by `OzoneCluster.stop()`, which the tests call on any failure. Its ports come from
:class:`PortPool`: outside the kernel's ephemeral range and reserved machine-wide per block, so that harnesses run
at once by several people never race for a port.

The SCM side is a parameter: "ozone" starts Ozone's own 3-SCM HA ring (the anchor); "ours" starts this project's
3-SCM ring (`ozone-scm scm --init` / `--bootstrap` / `scm`) serving Ozone's four protocols over Hadoop RPC (issue 20)
on Ozone's own port keys: our SCMs read the very keys every Ozone process is given, plus our gRPC services' keys
(`ozone.scm.<x>.grpc.port.<service>.<node>`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from xml.sax.saxutils import escape

from scm_server import ports

REPO = Path(__file__).resolve().parents[2]
JARS_SCRIPT = REPO / "scripts" / "ozone_jars.sh"
LOOPBACK = "127.0.0.1"
SCM_SERVICE_ID = "scmservice"

# Ozone's main classes in the 2.2.0 jars (checked with `unzip -l` on each jar; see docs/ozone-interop.md).
SCM_MAIN = "org.apache.hadoop.hdds.scm.server.StorageContainerManagerStarter"
DATANODE_MAIN = "org.apache.hadoop.ozone.HddsDatanodeService"
OM_MAIN = "org.apache.hadoop.ozone.om.OzoneManagerStarter"
SHELL_MAIN = "org.apache.hadoop.ozone.shell.OzoneShell"
ADMIN_MAIN = "org.apache.hadoop.ozone.admin.OzoneAdmin"
ADMIN_BATCH_MAIN = "AdminBatch"  # tests/ozone_interop/AdminBatch.java: many `ozone admin` commands in one JVM
ADMIN_BATCH_SOURCE = Path(__file__).with_name("AdminBatch.java")
FREON_MAIN = "org.apache.hadoop.ozone.freon.Freon"

# Heaps: 2 cores and 24 GiB shared with the project's own processes and other test runs.
SCM_HEAP = "-Xmx512m"
DATANODE_HEAP = "-Xmx512m"
OM_HEAP = "-Xmx512m"
CLI_HEAP = "-Xmx256m"
# JVM flags Ozone's launcher adds on Java 17 (module access for Netty/Ratis and JMX), plus small-machine ones.
JVM_FLAGS = [
    "--add-opens", "java.management/com.sun.jmx.mbeanserver=ALL-UNNAMED",
    "--add-exports", "java.management/com.sun.jmx.mbeanserver=ALL-UNNAMED",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.reflect=ALL-UNNAMED",
    "-Dorg.apache.ratis.thirdparty.io.netty.tryReflectionSetAccessible=true",
    "-XX:+UseSerialGC",
    "-XX:ActiveProcessorCount=2",
    "-Djava.net.preferIPv4Stack=true",
]
# Command-line tools live for seconds: the C1 compiler only starts them faster.
CLI_FLAGS = ["-XX:TieredStopAtLevel=1", "-Xshare:auto"]

T = TypeVar("T")
# how long a JVM (SCM, datanode, OM) may take to listen: a shared 2-core machine under load starts an OM in minutes
PROCESS_START_TIMEOUT = 420.0


class OzoneInteropError(RuntimeError):
    """A process of the interop cluster failed, or a condition was not met by its deadline."""


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 0.5) -> T:
    """Call `probe` until it returns something other than None (returned) or `timeout` seconds pass (raises).

    `interval` is the pause between two probes of a condition that is not met yet, never a wait for its own
    sake; the loop is bounded by the deadline."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = probe()
        except OzoneInteropError as exc:  # a probe's command failed: keep the last error for the report
            last_error = exc
            value = None
        if value is not None:
            return value
        if time.monotonic() >= deadline:
            detail = f": last error: {last_error}" if last_error else ""
            raise OzoneInteropError(f"{what}: not reached within {timeout:.0f} s{detail}")
        time.sleep(interval)


def port_open(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


# The harness's ports: a range below the kernel's ephemeral range (ip_local_port_range, 32768-60999 by default), so
# no outgoing connection's source port and no other process's bind(0) ever lands on one of them between the pick
# and the JVM's bind; and blocks of that range are reserved machine-wide, one lock file each (flock, released by
# the kernel when the holding process exits, even killed), so two harnesses running at once never pick the same
# port. OZONE_INTEROP_PORT_RANGE=LO-HI moves the range (it must stay outside the ephemeral range).
PORT_RANGE_ENV = "OZONE_INTEROP_PORT_RANGE"
# below the NodePort range (30000-32767) a real node's kube-proxy may use; scm_server.ports.free_port (every other
# tier's local servers) never draws from it, so only this pool's locks hand its ports out
DEFAULT_PORT_RANGE = ports.LOCKED_POOL
PORT_BLOCK = 128  # a 7-datanode cluster takes about 105 ports
PORT_LOCK_DIR = Path(tempfile.gettempdir()) / "ozone-interop-ports"


def ephemeral_range(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int]:
    """The kernel's ephemeral (automatically assigned) port range; Linux's default when it cannot be read."""
    try:
        lo, hi = path.read_text().split()[:2]
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def port_range_from_env(value: str | None, ephemeral: tuple[int, int]) -> tuple[int, int]:
    """``LO-HI`` (inclusive) from OZONE_INTEROP_PORT_RANGE, or the default; refused when malformed, too small for
    one block, or overlapping the ephemeral range."""
    if not value:
        lo, hi = DEFAULT_PORT_RANGE
    else:
        m = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", value)
        if not m:
            raise OzoneInteropError(f"{PORT_RANGE_ENV}={value!r} is not LO-HI (e.g. 20000-29999): fix or unset it")
        lo, hi = int(m.group(1)), int(m.group(2))
    if not 1024 <= lo <= hi <= 65535 or hi - lo + 1 < PORT_BLOCK:
        raise OzoneInteropError(f"port range {lo}-{hi} must lie within 1024-65535 and hold at least {PORT_BLOCK} ports:"
                                f" set {PORT_RANGE_ENV}=LO-HI")
    if lo <= ephemeral[1] and ephemeral[0] <= hi:
        raise OzoneInteropError(f"port range {lo}-{hi} overlaps the kernel's ephemeral range {ephemeral[0]}-"
                                f"{ephemeral[1]}: set {PORT_RANGE_ENV}=LO-HI outside it")
    return lo, hi


def port_bindable(port: int) -> bool:
    """Whether nothing holds ``port`` on any address (a wildcard bind collides with every address's socket)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # as the servers bind (Java and grpc set SO_REUSEADDR): a TIME_WAIT left by an earlier run is no obstacle
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


class PortPool:
    """Ports handed out by this process: blocks of the range locked with one lock file each (held until the
    process exits), every port given once, a port some other process already holds skipped."""

    def __init__(self, port_range: tuple[int, int] | None = None, lock_dir: Path = PORT_LOCK_DIR,
                 block: int = PORT_BLOCK) -> None:
        self._range = port_range
        self.lock_dir = lock_dir
        self.block = block
        self._locks: list[tuple[int, int]] = []  # (first port of a block, its lock file's descriptor)
        self._next: int | None = None  # the next port of the newest block to try
        self._mutex = threading.Lock()

    @property
    def port_range(self) -> tuple[int, int]:
        if self._range is None:  # read on first use: a bad environment variable fails the cluster, not the import
            self._range = port_range_from_env(os.environ.get(PORT_RANGE_ENV), ephemeral_range())
        return self._range

    def blocks(self) -> list[int]:
        """First ports of the blocks this pool holds."""
        return [start for start, _ in self._locks]

    def _lock_block(self) -> int:
        lo, hi = self.port_range
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        held = set(self.blocks())
        for start in range(lo, hi - self.block + 2, self.block):
            if start in held:
                continue
            fd = ports.try_lock(self.lock_dir / f"{start}.lock")
            if fd is None:
                continue
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())  # who holds it, for a person looking
            self._locks.append((start, fd))
            return start
        raise OzoneInteropError(
            f"every {self.block}-port block of {lo}-{hi} is held by another running harness (lock files in "
            f"{self.lock_dir}): wait for one to end, or set {PORT_RANGE_ENV}=LO-HI to a wider range"
        )

    def take(self) -> int:
        with self._mutex:
            for _ in range(64):  # bounded: a block of ports all held by strangers is left for the next
                if self._next is None or self._next >= self.blocks()[-1] + self.block:
                    self._next = self._lock_block()
                while self._next < self.blocks()[-1] + self.block:
                    port = self._next
                    self._next += 1
                    if port_bindable(port):
                        return port
            raise OzoneInteropError(f"no bindable port in 64 blocks of {self.port_range}: something else holds them")

    def release(self) -> None:
        """Give every block back (the kernel does it anyway when the process exits)."""
        with self._mutex:
            for _, fd in self._locks:
                os.close(fd)
            self._locks.clear()
            self._next = None


# one pool per process: clusters, Recon and the secure tier's extra listeners all draw from it, never the same port
PORTS = PortPool()


class PortAllocator:
    """Distinct loopback ports for one cluster, from the process's :data:`PORTS` pool (never reused within the
    process; reserved machine-wide against other harnesses; outside the ephemeral range)."""

    def __init__(self, pool: PortPool | None = None) -> None:
        self.pool = pool or PORTS
        self._given: set[int] = set()

    def take(self) -> int:
        port = self.pool.take()
        self._given.add(port)
        return port


def write_site(path: Path, props: dict[str, str]) -> None:
    """Write a Hadoop configuration file (<configuration><property><name/><value/>...) with `props`."""
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<configuration>"]
    for name in sorted(props):
        lines.append(
            f"  <property><name>{escape(name)}</name><value>{escape(props[name])}</value></property>"
        )
    lines.append("</configuration>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


# Ozone's log4j 1 (reload4j) settings for every JVM: INFO to the process's log file, noisy loggers down.
LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.target=System.err
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %-5p %c{1}: %m%n
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
log4j.logger.org.apache.ratis.metrics=WARN
log4j.logger.org.apache.hadoop.metrics2=WARN
"""
# The audit loggers are log4j 2; without a file of their own they would print a warning to every CLI's stderr.
LOG4J2_PROPERTIES = """\
status = ERROR
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = STDERR
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d %p %c{1}: %m%n
"""
# Cli tools print only warnings and errors on stderr, so that their stdout is the answer alone; freon, without a
# terminal, logs its report ("Successful executions: N") at INFO, so its own loggers stay at INFO (on stderr).
LOG4J_CLI_PROPERTIES = LOG4J_PROPERTIES.replace("rootLogger=INFO", "rootLogger=WARN") + (
    "log4j.logger.org.apache.hadoop.ozone.freon=INFO\n"
)


@dataclass
class ScmNode:
    node_id: str
    client_port: int
    block_port: int
    datanode_port: int
    security_port: int
    ratis_port: int
    grpc_port: int
    http_port: int
    https_port: int
    # our SCM only: its gRPC services (ozone.scm.<x>.grpc.port); the ports above, on Ozone's keys, are its Hadoop
    # RPC listeners, the ones Ozone's processes are given
    grpc_client_port: int = 0
    grpc_block_port: int = 0
    grpc_datanode_port: int = 0


@dataclass
class DatanodeNode:
    name: str
    ports: dict[str, int]


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    started: float
    ready_seconds: float | None = None


@dataclass
class Timings:
    """Seconds measured by the harness (printed by the tests and recorded in docs/ozone-interop.md)."""

    jars: str = ""
    steps: dict[str, float] = field(default_factory=dict)
    memory: dict[str, int] = field(default_factory=dict)  # resident MiB of each server JVM once all were ready

    def add(self, name: str, seconds: float) -> None:
        self.steps[name] = seconds

    def report(self) -> str:
        rows = [f"  {name:<42} {secs:7.1f} s" for name, secs in self.steps.items()]
        mem = ", ".join(f"{name} {mib} MiB" for name, mib in self.memory.items())
        return "\n".join([f"ozone-interop timings ({self.jars}):", *rows, f"  resident memory: {mem}"])


@contextlib.contextmanager
def timed(timings: Timings, name: str) -> Iterator[None]:
    start = time.monotonic()
    yield
    timings.add(name, time.monotonic() - start)


def resolve_classpath() -> tuple[str, str]:
    """Run scripts/ozone_jars.sh: returns (the class path, the script's one-line account of the resolution)."""
    result = subprocess.run(
        ["bash", str(JARS_SCRIPT)], capture_output=True, text=True, timeout=1800, check=False
    )
    if result.returncode != 0:
        raise OzoneInteropError(f"{JARS_SCRIPT} failed ({result.returncode}):\n{result.stderr}")
    cp_file = Path(result.stdout.strip().splitlines()[-1])
    note = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ""
    return cp_file.read_text().strip(), note


def compile_admin_batch(classpath: str, out_dir: Path) -> Path:
    """tests/ozone_interop/AdminBatch.java compiled against Ozone's class path into ``out_dir`` (again only when
    the source changed). Returns ``out_dir``."""
    source = ADMIN_BATCH_SOURCE.read_bytes()
    stamp = out_dir / "source.sha256"
    if stamp.exists() and stamp.read_text() == digest(source) and (out_dir / f"{ADMIN_BATCH_MAIN}.class").exists():
        return out_dir
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    javac = Path(java_binary()).resolve().with_name("javac")
    if not javac.exists():
        raise OzoneInteropError(f"no javac beside {java_binary()}: AdminBatch needs the JDK (openjdk-17-jdk-headless)")
    result = subprocess.run([str(javac), "-nowarn", "-cp", classpath, "-d", str(out_dir), str(ADMIN_BATCH_SOURCE)],
                            capture_output=True, text=True, timeout=300, check=False)
    if result.returncode != 0:
        raise OzoneInteropError(f"javac AdminBatch.java exited {result.returncode}:\n{result.stderr[-3000:]}")
    stamp.write_text(digest(source))
    return out_dir


def java_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise OzoneInteropError("java is not installed (make ozone-interop installs openjdk-17 when root)")
    return found


class OzoneCluster:
    """Ozone's SCM ring (or ours), three Ozone datanodes and one Ozone Manager under `base`."""

    def __init__(self, base: Path, classpath: str, *, scm_side: str = "ozone", scms: int = 3,
                 datanodes: int = 3, timings: Timings | None = None, extra_props: dict[str, str] | None = None,
                 racks: int = 0) -> None:
        """``extra_props``: keys every process gets on top of (and over) :meth:`common_props`' own.

        ``racks`` > 0: each datanode with a loopback address of its own as its name (dn1 127.0.0.11, dn2
        127.0.0.12, ...: ``hdds.datanode.hostname``, which it reports as host name and address), racks resolved
        from that name (``hdds.datanode.use.datanode.hostname=true``) through a Hadoop ``TableMapping`` file
        (``topology.table`` under ``base``) putting dn<i> on ``/rack<(i - 1) % racks + 1>``, named to every
        process through ``net.topology.node.switch.mapping.impl`` and ``net.topology.table.file.name``. Its
        servers listen on every address (each on ports of its own): Ozone's SCM records a datanode's address as
        the source address of its heartbeat connection (127.0.0.1 here, whatever the datanode reports) and hands
        that address to the other datanodes as their Ratis peer. 0: every datanode on 127.0.0.1 and no mapping
        (each lands on ``/default-rack``)."""
        if scm_side not in ("ozone", "ours"):
            raise ValueError(f"scm_side must be 'ozone' or 'ours', not {scm_side!r}")
        self.base = base
        self.classpath = classpath
        self.scm_side = scm_side
        self.java = java_binary()
        self.timings = timings or Timings()
        self.procs: dict[str, Proc] = {}
        ports = PortAllocator()
        self.scms = [
            ScmNode(f"scm{i}", *(ports.take() for _ in range(11))) for i in range(1, scms + 1)
        ]
        dn_port_keys = ["ipc", "ratis_ipc", "ratis_admin", "ratis_server", "ratis_datastream", "client",
                        "http", "https", "replication"]
        self.datanodes = [
            DatanodeNode(f"dn{i}", {k: ports.take() for k in dn_port_keys}) for i in range(1, datanodes + 1)
        ]
        self.om_ports = {k: ports.take() for k in ("rpc", "ratis", "http", "https", "grpc")}
        self.freon_ports = {k: ports.take() for k in ("http", "https")}
        self.replication = "3" if datanodes >= 3 else "1"
        self.extra_props = dict(extra_props or {})
        if racks < 0 or (racks and datanodes > 240):
            raise ValueError(f"racks must be >= 0 (and datanodes at most 240 with racks), not {racks}")
        self.racks = racks

    # ---------------------------------------------------------------- configuration (Ozone's own keys)

    def datanode_address(self, dn: DatanodeNode) -> str:
        """The address the datanode binds and reports (its IP and host name in DatanodeDetails)."""
        return f"127.0.0.{10 + int(dn.name[2:])}" if self.racks else LOOPBACK

    def datanode_rack(self, dn: DatanodeNode) -> str:
        """The rack the topology table gives the datanode (``/default-rack`` without racks)."""
        return f"/rack{(int(dn.name[2:]) - 1) % self.racks + 1}" if self.racks else "/default-rack"

    @property
    def topology_table(self) -> Path:
        return self.base / "topology.table"

    def write_topology_table(self) -> None:
        """Hadoop's TableMapping format: one ``name rack`` pair per line (names here: the datanodes' IPs)."""
        lines = [f"{self.datanode_address(dn)} {self.datanode_rack(dn)}" for dn in self.datanodes]
        self.topology_table.write_text("# written by tests/ozone_interop/ozone_procs.py\n" + "\n".join(lines) + "\n")

    def common_props(self) -> dict[str, str]:
        """Keys every process shares: where the SCMs and the OM are, security off, a small test cluster."""
        props: dict[str, str] = {
            "ozone.scm.service.ids": SCM_SERVICE_ID,
            "ozone.scm.default.service.id": SCM_SERVICE_ID,
            f"ozone.scm.nodes.{SCM_SERVICE_ID}": ",".join(s.node_id for s in self.scms),
            "ozone.scm.primordial.node.id": self.scms[0].node_id,
            "ozone.om.address": f"{LOOPBACK}:{self.om_ports['rpc']}",
            "ozone.om.http-address": f"{LOOPBACK}:{self.om_ports['http']}",
            "ozone.om.https-address": f"{LOOPBACK}:{self.om_ports['https']}",
            "ozone.om.ratis.port": str(self.om_ports["ratis"]),
            "ozone.om.grpc.port": str(self.om_ports["grpc"]),
            "ozone.freon.http-address": f"{LOOPBACK}:{self.freon_ports['http']}",
            "ozone.freon.https-address": f"{LOOPBACK}:{self.freon_ports['https']}",
            # security off, block tokens off, no ACLs: this tier tests the protocols, not Kerberos
            "ozone.security.enabled": "false",
            "hadoop.security.authentication": "simple",
            "hdds.block.token.enabled": "false",
            "hdds.container.token.enabled": "false",
            "ozone.acl.enabled": "false",
            # replication: RATIS/THREE on three datanodes, ONE for a smaller cluster
            "ozone.server.default.replication": self.replication,
            "ozone.server.default.replication.type": "RATIS",
            "ozone.replication": self.replication,
            # a small cluster that reacts in seconds, not minutes
            "ozone.scm.container.size": "256MB",
            "ozone.scm.block.size": "16MB",
            "hdds.heartbeat.interval": "2s",
            "hdds.node.report.interval": "5s",
            "hdds.pipeline.report.interval": "5s",
            "hdds.container.report.interval": "30s",
            "hdds.command.status.report.interval": "5s",
            "ozone.scm.heartbeat.rpc-timeout": "3s",
            "ozone.scm.pipeline.creation.interval": "5s",
            "ozone.scm.pipeline.scrub.interval": "30s",
            "hdds.scm.safemode.min.datanode": str(len(self.datanodes)),
            "hdds.scm.wait.time.after.safemode.exit": "2s",
            "ozone.scm.ha.ratis.leader.ready.wait.timeout": "60s",
            "ozone.scm.ha.ratis.leader.ready.check.interval": "1s",
        }
        for s in self.scms:
            sfx = f"{SCM_SERVICE_ID}.{s.node_id}"
            props[f"ozone.scm.address.{sfx}"] = LOOPBACK
            props[f"ozone.scm.client.port.{sfx}"] = str(s.client_port)
            props[f"ozone.scm.block.client.port.{sfx}"] = str(s.block_port)
            props[f"ozone.scm.datanode.port.{sfx}"] = str(s.datanode_port)
            props[f"ozone.scm.security.service.port.{sfx}"] = str(s.security_port)
            props[f"ozone.scm.ratis.port.{sfx}"] = str(s.ratis_port)
            props[f"ozone.scm.grpc.port.{sfx}"] = str(s.grpc_port)
            props[f"ozone.scm.http-address.{sfx}"] = f"{LOOPBACK}:{s.http_port}"
            props[f"ozone.scm.https-address.{sfx}"] = f"{LOOPBACK}:{s.https_port}"
        if self.racks:
            props["net.topology.node.switch.mapping.impl"] = "org.apache.hadoop.net.TableMapping"
            props["net.topology.table.file.name"] = str(self.topology_table)
            props["hdds.datanode.use.datanode.hostname"] = "true"  # the table's names are the datanodes' own
        props.update(self.extra_props)
        return props

    def our_scm_props(self, scm: ScmNode) -> dict[str, str]:
        """Our SCM's own ozone-site.xml: exactly the keys Ozone's processes are given (Ozone's port keys name the
        Hadoop RPC ports our SCM serves Ozone's protocols on), plus our gRPC services on keys of our own
        (``ozone.scm.<x>.grpc.port``; per node, since the ring shares one loopback address)."""
        props = dict(self.common_props())
        for s in self.scms:
            sfx = f"{SCM_SERVICE_ID}.{s.node_id}"
            props[f"ozone.scm.client.grpc.port.{sfx}"] = str(s.grpc_client_port)
            props[f"ozone.scm.block.client.grpc.port.{sfx}"] = str(s.grpc_block_port)
            props[f"ozone.scm.datanode.grpc.port.{sfx}"] = str(s.grpc_datanode_port)
        props.update({
            "ozone.scm.node.id": scm.node_id,
            "ozone.metadata.dirs": str(self.base / scm.node_id / "metadata"),
            "ozone.scm.names": ",".join(LOOPBACK for _ in self.scms),
        })
        return props

    def scm_props(self, scm: ScmNode) -> dict[str, str]:
        meta = self.base / scm.node_id / "metadata"
        return {
            **self.common_props(),
            "ozone.scm.node.id": scm.node_id,
            "ozone.metadata.dirs": str(meta),
            "ozone.scm.db.dirs": str(meta),
            "ozone.scm.ha.ratis.storage.dir": str(meta / "scm.ratis"),
            "ozone.scm.ha.ratis.snapshot.dir": str(meta / "scm.ratis.snapshot"),
            # in HA the RPC servers read the bind hosts suffixed with service and node id (else 0.0.0.0)
            **{
                f"ozone.scm.{key}.{SCM_SERVICE_ID}.{scm.node_id}": LOOPBACK
                for key in ("client.bind.host", "block.client.bind.host", "datanode.bind.host",
                            "security.service.bind.host", "http-bind-host", "https-bind-host")
            },
            # (SCM's Ratis server and its InterSCM gRPC server have no bind-host key in 2.2.0: SCM passes only
            # ozone.scm.ha.raft.server.* through to Ratis, so they listen on the wildcard address)
        }

    def datanode_props(self, dn: DatanodeNode) -> dict[str, str]:
        root = self.base / dn.name
        p = dn.ports
        host = self.datanode_address(dn)
        bind = "0.0.0.0" if self.racks else LOOPBACK  # see __init__: Ozone's SCM dials 127.0.0.1 whatever the name
        return {
            **self.common_props(),
            "ozone.metadata.dirs": str(root / "metadata"),
            "ozone.scm.datanode.id.dir": str(root / "metadata"),
            "hdds.datanode.dir": str(root / "data"),
            "hdds.container.ratis.datanode.storage.dir": str(root / "ratis"),
            "hdds.datanode.hostname": host if self.racks else "localhost",
            "hdds.container.ipc.port": str(p["ipc"]),
            "hdds.container.ratis.ipc.port": str(p["ratis_ipc"]),
            "hdds.container.ratis.admin.port": str(p["ratis_admin"]),
            "hdds.container.ratis.server.port": str(p["ratis_server"]),
            "hdds.container.ratis.datastream.port": str(p["ratis_datastream"]),
            "hdds.datanode.client.port": str(p["client"]),
            "hdds.datanode.client.bind.host": bind,
            "hdds.datanode.http-address": f"{host}:{p['http']}",
            "hdds.datanode.https-address": f"{host}:{p['https']}",
            "hdds.datanode.http-bind-host": bind,
            "hdds.datanode.https-bind-host": bind,
            "hdds.datanode.replication.port": str(p["replication"]),
            # Ratis' own host keys, passed through by the datanode under hdds.ratis.: its Raft servers on loopback
            **{f"hdds.ratis.raft.grpc.{kind}.host": bind for kind in ("server", "admin", "client")},
            # a test volume on a shared disk: reserve little, never refuse writes for the disk's fill level
            "hdds.datanode.volume.min.free.space": "64MB",
            "hdds.datanode.storage.utilization.critical.threshold": "0.999",
        }

    def om_props(self) -> dict[str, str]:
        meta = self.base / "om" / "metadata"
        return {
            **self.common_props(),
            "ozone.metadata.dirs": str(meta),
            "ozone.om.db.dirs": str(meta),
            "ozone.om.ratis.storage.dir": str(meta / "om.ratis"),
            "ozone.om.http-bind-host": LOOPBACK,
            "ozone.om.https-bind-host": LOOPBACK,
            # Ratis' own host keys, passed through by the OM under ozone.om.ha.: its Raft server on loopback
            **{f"ozone.om.ha.raft.grpc.{kind}.host": LOOPBACK for kind in ("server", "admin", "client")},
        }

    def conf_dir(self, name: str, props: dict[str, str], *, cli: bool = False) -> Path:
        conf = self.base / name / "conf"
        write_site(conf / "ozone-site.xml", props)
        (conf / "log4j.properties").write_text(LOG4J_CLI_PROPERTIES if cli else LOG4J_PROPERTIES)
        (conf / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
        return conf

    # ---------------------------------------------------------------- processes

    def jvm_properties(self) -> list[str]:
        """System properties every JVM of this cluster gets (none here; the secure tier adds its krb5.conf)."""
        return []

    def java_cmd(self, conf: Path, heap: str, main: str, args: list[str], *, cli: bool = False,
                 extra_classpath: str | None = None, extra_flags: tuple[str, ...] = ()) -> list[str]:
        classpath = os.pathsep.join(p for p in (str(conf), extra_classpath, self.classpath) if p)
        return [
            self.java, heap, *JVM_FLAGS, *(CLI_FLAGS if cli else []), *self.jvm_properties(),
            f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
            f"-Dlog4j.configurationFile={conf / 'log4j2.properties'}",
            f"-Dozone.log.dir={conf.parent / 'logs'}",
            *extra_flags,
            "-cp", classpath,
            main, *args,
        ]

    def spawn(self, name: str, cmd: list[str]) -> Proc:
        log = self.base / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            popen = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=self.base,
            )
        proc = Proc(name, popen, log, time.monotonic())
        self.procs[name] = proc
        return proc

    def run_once(self, name: str, conf: Path, heap: str, main: str, args: list[str],
                 timeout: float = 180) -> None:
        """A finite command of a server (--init, --bootstrap): must exit 0 within `timeout`."""
        log = self.base / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            try:
                rc = subprocess.run(
                    self.java_cmd(conf, heap, main, args), stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, timeout=timeout, cwd=self.base, check=False,
                ).returncode
            except subprocess.TimeoutExpired as exc:
                raise OzoneInteropError(f"{name}: did not finish within {timeout:.0f} s (log {log})") from exc
        if rc != 0:
            raise OzoneInteropError(f"{name}: exited {rc}; last lines of {log}:\n{tail(log)}")

    def check_alive(self) -> None:
        for proc in self.procs.values():
            rc = proc.popen.poll()
            if rc is not None and rc != -signal.SIGKILL:
                raise OzoneInteropError(f"{proc.name} exited {rc}; last lines of {proc.log}:\n{tail(proc.log)}")

    def wait_port(self, proc: Proc, port: int, timeout: float = 120, host: str = LOOPBACK) -> None:
        def probe() -> bool | None:
            if proc.popen.poll() is not None:
                raise OzoneInteropError(
                    f"{proc.name} exited {proc.popen.returncode}; last lines of {proc.log}:\n{tail(proc.log)}"
                )
            return True if port_open(port, host) else None

        wait_for(f"{proc.name} listening on {host}:{port}", probe, timeout)
        proc.ready_seconds = time.monotonic() - proc.started

    def resident_memory(self) -> dict[str, int]:
        """VmRSS in MiB of every running server JVM (Linux /proc)."""
        out = {}
        for name, proc in self.procs.items():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{proc.popen.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        out[name] = int(line.split()[1]) // 1024
        return out

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        if proc.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGKILL)
            proc.popen.wait(timeout=30)

    def stop(self) -> None:
        """Kill every process this cluster started (its whole process group), newest first."""
        for proc in reversed(list(self.procs.values())):
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGKILL)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=30)

    # ---------------------------------------------------------------- the SCM ring

    def start_scm_ring(self) -> None:
        if self.scm_side == "ours":
            self.start_our_scm_ring()
            return
        first, *others = self.scms
        conf = self.conf_dir(first.node_id, self.scm_props(first))
        with timed(self.timings, f"{first.node_id} --init"):
            self.run_once(f"{first.node_id}-init", conf, SCM_HEAP, SCM_MAIN, ["--init"])
        self.start_scm(first)
        for scm in others:
            conf = self.conf_dir(scm.node_id, self.scm_props(scm))
            with timed(self.timings, f"{scm.node_id} --bootstrap"):
                self.run_once(f"{scm.node_id}-bootstrap", conf, SCM_HEAP, SCM_MAIN, ["--bootstrap"])
            self.start_scm(scm)
        with timed(self.timings, "SCM ring: 3 members in scm roles"):
            wait_for("all SCMs in the ring with one leader", self._ring_complete, 180, interval=1)

    def our_scm_cmd(self, scm: ScmNode, *args: str) -> list[str]:
        return [sys.executable, "-m", "scm_server.cli.main", "--conf", str(self.base / scm.node_id / "conf"),
                "scm", *args]

    def start_our_scm_ring(self) -> None:
        """This project's 3-SCM ring: `ozone-scm scm --init` on the primordial node, `scm` on it, then
        `scm --bootstrap` and `scm` on the two others, each with its own ozone-site.xml (our_scm_props)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("OZONE-SITE.XML_")}
        env.pop("OZONE_CONF_DIR", None)
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        self._our_env = env
        for scm in self.scms:
            (self.base / scm.node_id / "metadata").mkdir(parents=True, exist_ok=True)
            write_site(self.base / scm.node_id / "conf" / "ozone-site.xml", self.our_scm_props(scm))
        first, *others = self.scms
        with timed(self.timings, f"{first.node_id} --init (ours)"):
            self.run_ours_once(f"{first.node_id}-init", self.our_scm_cmd(first, "--init"))
        self.start_our_scm(first)
        for scm in others:
            with timed(self.timings, f"{scm.node_id} --bootstrap (ours)"):
                self.run_ours_once(f"{scm.node_id}-bootstrap", self.our_scm_cmd(scm, "--bootstrap"))
            self.start_our_scm(scm)
        with timed(self.timings, "SCM ring: 3 members in scm roles"):
            wait_for("all SCMs in the ring with one leader", self._ring_complete, 180, interval=1)

    def run_ours_once(self, name: str, cmd: list[str], timeout: float = 120) -> None:
        log = self.base / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            try:
                rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    timeout=timeout, cwd=self.base, env=self._our_env, check=False).returncode
            except subprocess.TimeoutExpired as exc:
                raise OzoneInteropError(f"{name}: did not finish within {timeout:.0f} s (log {log})") from exc
        if rc != 0:
            raise OzoneInteropError(f"{name}: exited {rc}; last lines of {log}:\n{tail(log)}")

    def start_our_scm(self, scm: ScmNode) -> None:
        log = self.base / "logs" / f"{scm.node_id}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            popen = subprocess.Popen(self.our_scm_cmd(scm), stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.base,
                                     env=self._our_env)
        proc = Proc(scm.node_id, popen, log, time.monotonic())
        self.procs[scm.node_id] = proc
        self.wait_port(proc, scm.client_port, timeout=120)
        self.timings.add(f"{scm.node_id} start (ours; Hadoop RPC client port open)", proc.ready_seconds or 0.0)

    def start_scm(self, scm: ScmNode) -> None:
        conf = self.base / scm.node_id / "conf"
        proc = self.spawn(scm.node_id, self.java_cmd(conf, SCM_HEAP, SCM_MAIN, []))
        self.wait_port(proc, scm.client_port, timeout=PROCESS_START_TIMEOUT)
        self.timings.add(f"{scm.node_id} start (client port open)", proc.ready_seconds or 0.0)

    def _ring_complete(self) -> list[tuple[str, str]] | None:
        self.check_alive()
        roles = self.scm_roles()
        leaders = [r for r in roles if r[1] == "LEADER"]
        return roles if len(roles) == len(self.scms) and len(leaders) == 1 else None

    def scm_roles(self) -> list[tuple[str, str]]:
        """`ozone admin scm roles` as (node id, role) pairs; the node is found by its Ratis port."""
        out = self.admin("scm", "roles")
        by_ratis = {str(s.ratis_port): s.node_id for s in self.scms}
        roles = []
        for line in out.splitlines():
            # host:ratisPort:ROLE:peerId:address, one line per member
            m = re.match(r"^\s*[^:\s]+:(\d+):(LEADER|FOLLOWER|CANDIDATE|LISTENER|UNKNOWN)\b", line)
            if m and m.group(1) in by_ratis:
                roles.append((by_ratis[m.group(1)], m.group(2)))
        return roles

    def scm_peer_ids(self) -> dict[str, tuple[str, str]]:
        """`ozone admin scm roles`: node id -> (Raft peer id, role), the peer id `scm transfer -n` takes."""
        by_ratis = {str(s.ratis_port): s.node_id for s in self.scms}
        peers = {}
        for line in self.admin("scm", "roles").splitlines():
            m = re.match(r"^\s*[^:\s]+:(\d+):(LEADER|FOLLOWER|CANDIDATE|LISTENER|UNKNOWN):([^:\s]+)", line)
            if m and m.group(1) in by_ratis:
                peers[by_ratis[m.group(1)]] = (m.group(3), m.group(2))
        return peers

    def rewrite_scm_site(self, node_id: str, extra: dict[str, str]) -> None:
        """Rewrite one SCM's ozone-site.xml with ``extra`` over the keys it started with (a run-time
        reconfiguration then reads it): Ozone's SCM reads it from its class path, ours from ``--conf``."""
        scm = next(s for s in self.scms if s.node_id == node_id)
        props = self.our_scm_props(scm) if self.scm_side == "ours" else self.scm_props(scm)
        write_site(self.base / node_id / "conf" / "ozone-site.xml", {**props, **extra})

    def our_hadoop_rpc_calls(self) -> dict[str, float]:
        """Our SCMs only: successful Hadoop RPC calls per protocol, summed over the running SCMs' /prom pages."""
        totals: dict[str, float] = {}
        pattern = re.compile(
            r'^scm_hadoop_rpc_requests_total\{(?=[^}]*answer="SUCCESS")(?=[^}]*protocol="([^"]+)")[^}]*\}\s+(\S+)$'
        )
        for scm in self.scms:
            if self.procs[scm.node_id].popen.poll() is not None:
                continue  # the SCM killed by the failover test
            url = f"http://{LOOPBACK}:{scm.http_port}/prom"
            with urllib.request.urlopen(url, timeout=10) as resp:
                for line in resp.read().decode().splitlines():
                    m = pattern.match(line)
                    if m:
                        name = m.group(1).rsplit(".", 1)[-1]
                        totals[name] = totals.get(name, 0.0) + float(m.group(2))
        return totals

    def scm_leader(self) -> str:
        def probe() -> str | None:
            leaders = [node for node, role in self.scm_roles() if role == "LEADER"]
            return leaders[0] if len(leaders) == 1 else None

        return wait_for("an SCM leader in scm roles", probe, 120, interval=1)

    # ---------------------------------------------------------------- datanodes and OM

    def start_datanodes(self) -> None:
        procs = []
        for dn in self.datanodes:
            conf = self.conf_dir(dn.name, self.datanode_props(dn))
            procs.append((dn, self.spawn(dn.name, self.java_cmd(conf, DATANODE_HEAP, DATANODE_MAIN, []))))
        for dn, proc in procs:
            self.wait_port(proc, dn.ports["ratis_ipc"], timeout=PROCESS_START_TIMEOUT, host=self.datanode_address(dn))
            self.timings.add(f"{dn.name} start (ratis port open)", proc.ready_seconds or 0.0)

    def start_om(self) -> None:
        conf = self.conf_dir("om", self.om_props())
        with timed(self.timings, "om --init"):
            self.run_once("om-init", conf, OM_HEAP, OM_MAIN, ["--init"])
        proc = self.spawn("om", self.java_cmd(conf, OM_HEAP, OM_MAIN, []))
        self.wait_port(proc, self.om_ports["rpc"], timeout=PROCESS_START_TIMEOUT)
        self.timings.add("om start (rpc port open)", proc.ready_seconds or 0.0)

    def start(self) -> None:
        """The whole cluster, each step timed; on any failure every process started so far is killed."""
        try:
            if self.racks:
                self.write_topology_table()
            self.start_scm_ring()
            self.start_datanodes()
            self.start_om()
            with timed(self.timings, "safemode exit + an open RATIS pipeline"):
                self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, timeout: float = 300) -> None:
        def out_of_safemode() -> bool | None:
            self.check_alive()
            return True if "out of safe mode" in self.admin("safemode", "status").lower() else None

        wait_for("SCM out of safe mode", out_of_safemode, timeout, interval=2)
        wanted = f"RATIS/{'THREE' if self.replication == '3' else 'ONE'}"

        def pipeline_open() -> bool | None:
            self.check_alive()
            out = self.admin("pipeline", "list")
            return True if any(wanted in ln and "OPEN" in ln for ln in out.splitlines()) else None

        wait_for(f"an OPEN {wanted} pipeline", pipeline_open, timeout, interval=2)

    # ---------------------------------------------------------------- the command-line tools

    def client_conf(self) -> Path:
        conf = self.base / "client" / "conf"
        if not (conf / "ozone-site.xml").exists():
            self.conf_dir("client", self.common_props(), cli=True)
        return conf

    def tool_env(self, user: str | None) -> dict[str, str] | None:
        """The environment of a command-line tool run as `user` (None: the default caller). Without security every
        tool inherits this process's environment; the secure tier points KRB5CCNAME at the user's tickets."""
        if user is not None:
            raise OzoneInteropError(f"no user {user!r} on an insecure cluster: every caller is the process's user")
        return None

    def tool(self, main: str, *args: str, timeout: float = 120,
             user: str | None = None) -> subprocess.CompletedProcess[str]:
        conf = self.client_conf()
        try:
            return subprocess.run(
                self.java_cmd(conf, CLI_HEAP, main, list(args), cli=True), capture_output=True, text=True,
                timeout=timeout, cwd=self.base, check=False, stdin=subprocess.DEVNULL, env=self.tool_env(user),
            )
        except subprocess.TimeoutExpired as exc:  # subprocess.run has killed it; a probe may try again
            raise OzoneInteropError(f"{main.rsplit('.', 1)[-1]} {' '.join(args)}: no answer in {timeout:.0f} s") from exc

    def _checked(self, what: str, result: subprocess.CompletedProcess[str]) -> str:
        if result.returncode != 0:
            raise OzoneInteropError(
                f"`{what}` exited {result.returncode}\nstdout:\n{result.stdout[-3000:]}\n"
                f"stderr:\n{result.stderr[-3000:]}"
            )
        return result.stdout

    def admin(self, *args: str, timeout: float = 120, user: str | None = None) -> str:
        return self._checked("ozone admin " + " ".join(args),
                             self.tool(ADMIN_MAIN, *args, timeout=timeout, user=user))

    def admin_batch(self, commands: list[list[str]], timeout: float = 1800) -> list[subprocess.CompletedProcess[str]]:
        """Each of ``commands`` run by Ozone's `ozone admin` in turn, all in one JVM (tests/ozone_interop/
        AdminBatch.java: a new OzoneAdmin per command, its exit code, stdout and stderr kept apart), as
        :meth:`tool` would run each in a JVM of its own; a JVM start costs seconds of CPU a command. Ozone's log
        lines go to the batch's own log, not to a command's stderr. Raises if the batch does not finish every
        command within ``timeout``."""
        if any("\t" in a or "\n" in a for args in commands for a in args):
            raise OzoneInteropError(f"an argument of {commands} holds a tab or a line break: AdminBatch cannot pass it")
        conf = self.client_conf()
        classes = compile_admin_batch(self.classpath, self.base / "admin-batch-classes")
        work = Path(tempfile.mkdtemp(prefix="admin-batch-", dir=self.base))
        (work / "commands").write_text("".join("\t".join(args) + "\n" for args in commands))
        cmd = self.java_cmd(conf, CLI_HEAP, ADMIN_BATCH_MAIN, [str(work / "commands"), str(work / "out")], cli=True,
                            extra_classpath=str(classes), extra_flags=("-Djava.security.manager=allow",))
        with (work / "batch.log").open("wb") as log:
            try:
                rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.base,
                                    timeout=timeout, check=False).returncode
            except subprocess.TimeoutExpired as exc:
                raise OzoneInteropError(f"AdminBatch of {len(commands)} commands: not done in {timeout:.0f} s"
                                        f" (log {work / 'batch.log'})") from exc
        out = work / "out"
        if rc != 0 or not (out / "done").exists():
            raise OzoneInteropError(f"AdminBatch exited {rc} before its last command; {work / 'batch.log'}:\n"
                                    f"{tail(work / 'batch.log')}")
        return [subprocess.CompletedProcess(args, int((out / f"{i}.rc").read_text()), (out / f"{i}.out").read_text(),
                                            (out / f"{i}.err").read_text()) for i, args in enumerate(commands)]

    def freon(self, *args: str, timeout: float = 300) -> str:
        result = self.tool(FREON_MAIN, *args, timeout=timeout)
        return self._checked("ozone freon " + " ".join(args), result) + result.stderr

    def sh(self, *args: str, timeout: float = 120, user: str | None = None) -> str:
        return self._checked("ozone sh " + " ".join(args), self.tool(SHELL_MAIN, *args, timeout=timeout, user=user))


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def keys_survive_leader_kill(c: OzoneCluster, tmp_path: Path, volume: str, bucket: str, *,
                             user: str | None = None) -> dict[str, bytes]:
    """Keys are put one after another into /volume/bucket (each `ozone sh key put` its own JVM, run as `user`)
    while the SCM leader is SIGKILLed; the survivors elect a leader, writing goes on, and every acknowledged key
    reads back identical (asserted here). Returns the acknowledged keys and their bytes."""
    start = time.monotonic()
    old_leader = c.scm_leader()
    acked: dict[str, bytes] = {}
    failed: list[tuple[str, str]] = []
    spans: dict[str, tuple[float, float]] = {}  # each put's start and end (monotonic)
    lock = threading.Lock()
    stop = threading.Event()
    writer_error: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(60):  # bounded; the main thread stops it once enough keys are acknowledged
                if stop.is_set():
                    return
                name = f"during-failover-{i:02d}"
                data = os.urandom(256 * 1024 + i)
                src = tmp_path / f"{name}.in"
                src.write_bytes(data)
                began = time.monotonic()
                try:
                    result = c.tool(SHELL_MAIN, "key", "put", f"/{volume}/{bucket}/{name}", str(src),
                                    timeout=300, user=user)
                    rc, err = result.returncode, result.stderr[-2000:]
                except OzoneInteropError as exc:  # no answer in time: not acknowledged
                    rc, err = -1, str(exc)
                with lock:
                    spans[name] = (began, time.monotonic())
                    if rc == 0:
                        acked[name] = data
                    else:
                        failed.append((name, err))
        except BaseException as exc:  # surfaced by the main thread
            writer_error.append(exc)

    def acknowledged_at_least(n: int) -> bool | None:
        if writer_error:
            raise writer_error[0]
        with lock:
            return True if len(acked) >= n else None

    thread = threading.Thread(target=writer, name="key-writer", daemon=True)
    thread.start()
    try:
        wait_for("2 keys acknowledged before the kill", lambda: acknowledged_at_least(2), 300, interval=0.2)
        killed_at = time.monotonic()
        c.kill(old_leader)  # SIGKILL to the leader's JVM while the writer keeps putting keys
        with lock:
            before_kill = len(acked)

        def new_leader() -> str | None:
            leaders = [n for n, role in c.scm_roles() if role == "LEADER" and n != old_leader]
            return leaders[0] if leaders else None

        elected = wait_for("a new SCM leader among the survivors", new_leader, 180, interval=1)
        c.timings.add(f"failover: {old_leader} killed -> {elected} leader (seen by scm roles)",
                      time.monotonic() - killed_at)
        wait_for("3 more keys acknowledged after the kill",
                 lambda: acknowledged_at_least(before_kill + 3), 600, interval=0.5)
    finally:
        stop.set()
        thread.join(timeout=400)
    assert not thread.is_alive(), "the key writer did not stop"
    if writer_error:
        raise writer_error[0]

    with lock:
        written = dict(acked)
        in_flight = [n for n, (b, e) in spans.items() if b <= killed_at <= e]
    assert in_flight, "no put was in flight when the leader was killed"
    mismatched = []
    for name, data in sorted(written.items()):
        dst = tmp_path / f"{name}.out"
        try:
            c.sh("key", "get", f"/{volume}/{bucket}/{name}", str(dst), user=user)
        except OzoneInteropError as exc:
            mismatched.append(f"{name}: {exc}")
            continue
        if digest(dst.read_bytes()) != digest(data):
            mismatched.append(f"{name}: bytes differ")
    listed = json.loads(c.sh("key", "list", f"/{volume}/{bucket}", "--length", "1000", user=user))
    listed_names = {k["name"] for k in listed}
    assert set(written) <= listed_names, sorted(set(written) - listed_names)
    assert not mismatched, mismatched
    c.timings.add(
        f"scenario: leader kill, {len(written)} keys acked ({len(failed)} failed, "
        f"{in_flight[0]} in flight at the kill), all read back",
        time.monotonic() - start,
    )
    if failed:  # not an error (an unacknowledged put may fail), but shown: it is part of the failover picture
        print(f"puts that failed during the failover: {[name for name, _ in failed]}\n{failed[0][1]}")
    return written


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"
