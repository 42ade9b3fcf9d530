"""Apache Ozone's own 3-SCM HA ring (Java, Ratis) as a benchmark anchor: shared by bench/wire.py and
bench/failover_ozone.py; not a benchmark itself (bench/run_all.sh does not run it).

Ozone 2.2.0's released jars come from Maven Central through ``scripts/ozone_jars.sh`` (``make ozone-jars``,
cached in ~/.m2); the processes are started by the ozone-interop harness (tests/ozone_interop/ozone_procs.py):
three SCMs (``--init``, ``--bootstrap``, start) and three real ``HddsDatanodeService`` JVMs (512 MiB heaps), no
OM: the benchmarks speak ScmBlockLocationProtocol to the SCMs directly with the project's Python Hadoop RPC
client, the same client they point at our ring. Ozone's SCM allocates blocks only once datanodes registered, it
left safe mode and an OPEN RATIS/THREE pipeline exists, so :func:`start_ring` waits for all of that.

When the jars cannot be had (no Java, no Maven, Maven Central unreachable) :func:`classpath_or_reason` says why;
the benchmarks print it as a banner and exit non-zero, never skipping the anchor silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import re
import time
from pathlib import Path

from scm_server.client.hadoop_rpc import BlockLocationClient, ConnectionLost, RemoteError
from tests.ozone_interop.ozone_procs import (
    OzoneCluster,
    OzoneInteropError,
    ScmNode,
    Timings,
    resolve_classpath,
    wait_for,
)

# Ozone's shipped SCM election timeout (ozone.scm.ha.ratis.leader.election.timeout); ours is 1 s randomised
# to [1 s, 2 s).
OZONE_ELECTION_TIMEOUT = "5s"


def classpath_or_reason() -> tuple[str | None, str]:
    """(class path, one-line note) when Ozone's jars resolve; (None, why not) otherwise."""
    try:
        classpath, note = resolve_classpath()
    except (OzoneInteropError, OSError, IndexError) as exc:
        return None, f"scripts/ozone_jars.sh (make ozone-jars) failed: {exc}"
    return classpath, note


def banner(reason: str) -> str:
    line = "!" * 100
    return (f"\n{line}\n!!! OZONE'S SCM RING NOT MEASURED: {reason}\n"
            f"!!! the Ozone anchor needs Java 17, Maven and Maven Central (make ozone-jars); rerun once it works\n"
            f"{line}\n")


class AnchorCluster(OzoneCluster):
    """The interop harness's cluster with a few SCM settings of the benchmark's own (same sizes as our ring's
    benchmark settings, the election timeout when asked)."""

    def __init__(self, base: Path, classpath: str, overrides: dict[str, str], datanodes: int = 3) -> None:
        super().__init__(base, classpath, scm_side="ozone", timings=Timings(), datanodes=datanodes)
        self.overrides = dict(overrides)

    def common_props(self) -> dict[str, str]:
        return {**super().common_props(), **self.overrides}


def start_ring(base: Path, classpath: str, overrides: dict[str, str]) -> AnchorCluster:
    """Ozone's 3-SCM ring and 3 datanodes, ready to allocate (out of safe mode, an OPEN RATIS/THREE pipeline).
    On any failure every process started is killed."""
    cluster = AnchorCluster(base, classpath, overrides)
    t0 = time.monotonic()
    try:
        cluster.start_scm_ring()
        cluster.start_datanodes()
        cluster.wait_ready()
    except BaseException:
        cluster.stop()
        raise
    cluster.timings.add("Ozone ring + datanodes ready", time.monotonic() - t0)
    return cluster


def start_scms(base: Path, classpath: str, overrides: dict[str, str]) -> AnchorCluster:
    """Ozone's 3-SCM ring alone (3 JVMs, no datanodes: the caller's simulated datanodes register with it).
    On any failure every process started is killed."""
    cluster = AnchorCluster(base, classpath, overrides, datanodes=0)
    t0 = time.monotonic()
    try:
        cluster.start_scm_ring()
    except BaseException:
        cluster.stop()
        raise
    cluster.timings.add("Ozone SCM ring up", time.monotonic() - t0)
    return cluster


def block_address(scm: ScmNode) -> str:
    return f"127.0.0.1:{scm.block_port}"


async def probe_leader(cluster: OzoneCluster, timeout: float = 60) -> ScmNode:
    """The SCM that answers GetScmInfo on its block port (followers answer ServerNotLeaderException)."""
    deadline = time.monotonic() + timeout
    while True:
        for scm in cluster.scms:
            if cluster.procs[scm.node_id].popen.poll() is not None:
                continue
            client = BlockLocationClient([block_address(scm)], attempts=1, call_timeout=5)
            try:
                if (await client.get_scm_info()).success:
                    return scm
            except (RemoteError, ConnectionLost, OSError):
                pass
            finally:
                await client.close()
        if time.monotonic() > deadline:
            raise OzoneInteropError(f"no Ozone SCM answered GetScmInfo as leader within {timeout:.0f} s")
        await asyncio.sleep(0.2)


def log_size(cluster: OzoneCluster, scm: ScmNode) -> int:
    path = cluster.base / "logs" / f"{scm.node_id}.log"
    return path.stat().st_size if path.exists() else 0


def restart_scm(cluster: OzoneCluster, scm: ScmNode, timeout: float = 180) -> float:
    """Start a killed SCM again (its metadata kept) and wait until it left safe mode (its own log says so:
    a restarted SCM leaves it once the datanodes reported to it). Seconds taken."""
    t0 = time.monotonic()
    offset = log_size(cluster, scm)
    cluster.start_scm(scm)
    path = cluster.base / "logs" / f"{scm.node_id}.log"

    def out_of_safe_mode() -> bool | None:
        cluster.check_alive()
        with path.open("rb") as f:
            f.seek(offset)
            return True if b"SCM exiting safe mode." in f.read() else None

    wait_for(f"{scm.node_id} out of safe mode after its restart", out_of_safe_mode, timeout, interval=0.5)
    return time.monotonic() - t0


_BECAME_LEADER = re.compile(rb"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d{3} .*changes role from CANDIDATE to LEADER")


def elections_since(cluster: OzoneCluster, since: float) -> int:
    """Leader elections won in the ring after ``since`` (wall clock), counted in the SCMs' logs (Ratis logs
    "changes role from CANDIDATE to LEADER" once per won election, in local time to the second)."""
    count = 0
    for scm in cluster.scms:
        path = cluster.base / "logs" / f"{scm.node_id}.log"
        if not path.exists():
            continue
        for line in path.read_bytes().splitlines():
            m = _BECAME_LEADER.match(line)
            if m and datetime.datetime.strptime(m.group(1).decode(), "%Y-%m-%d %H:%M:%S").timestamp() >= int(since):
                count += 1
    return count


def set_election_timeout(cluster: AnchorCluster, value: str) -> None:
    """Rewrite every SCM's ozone-site.xml with ``value`` as the election timeout (takes effect on restart)."""
    cluster.overrides["ozone.scm.ha.ratis.leader.election.timeout"] = value
    for scm in cluster.scms:
        cluster.conf_dir(scm.node_id, cluster.scm_props(scm))


def stop(cluster: OzoneCluster | None) -> None:
    if cluster is not None:
        with contextlib.suppress(Exception):
            cluster.stop()


def loadavg() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"
