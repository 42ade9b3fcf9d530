"""Apache Ozone's Recon (``ozone-recon`` 2.2.0 from Maven Central) beside a cluster of the interop harness.

Recon runs on its own class path (``interop/ozone-recon``, resolved by ``make ozone-recon-jars``), since its web
stack must stay off the datanodes', the OM's and Ozone's SCM's. Every process of the cluster gets Recon's
addresses (``ozone.recon.address``: the datanodes report to Recon as to an SCM, which is where Recon's datanode
list comes from), and Recon gets the cluster's SCM and OM addresses.

``ozone.recon.scm.snapshot.enabled=false``: Recon then builds its view of SCM through SCM client calls
(``listPipelines``, ``getContainerCount``, ``getContainerWithPipeline``, ...) instead of downloading a RocksDB
checkpoint of ``scm.db`` from the SCM's ``/dbCheckpoint`` servlet, which our SCM does not serve (its scm.db is
LevelDB; docs/ozone-compatibility.md, "Recon").
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.ozone_interop.ozone_procs import (
    JARS_SCRIPT,
    JVM_FLAGS,
    LOOPBACK,
    OzoneCluster,
    OzoneInteropError,
    PortAllocator,
    Proc,
    Timings,
    timed,
)

RECON_MAIN = "org.apache.hadoop.ozone.recon.ReconServer"
RECON_HEAP = "-Xmx768m"
RECON_PROJECT = "interop/ozone-recon"


def resolve_recon_classpath() -> tuple[str, str]:
    """Run scripts/ozone_jars.sh on Recon's project: (the class path, the script's account of the resolution)."""
    result = subprocess.run(
        ["bash", str(JARS_SCRIPT)], capture_output=True, text=True, timeout=1800, check=False,
        env={**os.environ, "OZONE_JARS_PROJECT": RECON_PROJECT},
    )
    if result.returncode != 0:
        raise OzoneInteropError(f"make ozone-recon-jars failed:\n{result.stderr[-3000:]}")
    path = Path(result.stdout.strip().splitlines()[-1])
    return path.read_text().strip(), result.stderr.strip()


class ReconCluster(OzoneCluster):
    """An interop cluster (Ozone's SCM ring or ours, Ozone's datanodes and OM) with Ozone's Recon beside it."""

    def __init__(self, base: Path, classpath: str, recon_classpath: str, *, scm_side: str,
                 timings: Timings | None = None) -> None:
        ports = PortAllocator()
        self.recon_ports = {k: ports.take() for k in ("rpc", "http", "https")}
        self.recon_classpath = recon_classpath
        recon_props = {
            "ozone.recon.address": f"{LOOPBACK}:{self.recon_ports['rpc']}",
            "ozone.recon.http-address": f"{LOOPBACK}:{self.recon_ports['http']}",
            "ozone.recon.https-address": f"{LOOPBACK}:{self.recon_ports['https']}",
        }
        super().__init__(base, classpath, scm_side=scm_side, timings=timings, extra_props=recon_props)

    @property
    def recon_url(self) -> str:
        return f"http://{LOOPBACK}:{self.recon_ports['http']}"

    def recon_props(self) -> dict[str, str]:
        data = self.base / "recon" / "data"
        return {
            **self.common_props(),
            "ozone.metadata.dirs": str(data),
            "ozone.recon.db.dir": str(data / "db"),
            "ozone.recon.om.db.dir": str(data / "om"),
            "ozone.recon.scm.db.dirs": str(data / "scm"),
            # the datanodes report to ozone.recon.address; Recon binds its datanode endpoint on this key (default
            # 0.0.0.0:9891), so both name the same port
            "ozone.recon.datanode.address": f"{LOOPBACK}:{self.recon_ports['rpc']}",
            "ozone.recon.http-bind-host": LOOPBACK,
            "ozone.recon.https-bind-host": LOOPBACK,
            # build SCM's view through SCM client calls, not a RocksDB checkpoint of scm.db (see the module doc)
            "ozone.recon.scm.snapshot.enabled": "false",
            # a test cluster: sync with the OM and SCM in seconds, not minutes
            "ozone.recon.om.snapshot.task.initial.delay": "5s",
            "ozone.recon.om.snapshot.task.interval.delay": "10s",
            "ozone.recon.scm.container.sync.task.initial.delay": "5s",
            "ozone.recon.scm.container.sync.task.interval.delay": "10s",
            "ozone.recon.task.pipelinesync.interval": "10s",
        }

    def start_recon(self) -> Proc:
        conf = self.conf_dir("recon", self.recon_props())
        cmd = [
            self.java, RECON_HEAP, *JVM_FLAGS,
            f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
            f"-Dlog4j.configurationFile={conf / 'log4j2.properties'}",
            f"-Dozone.log.dir={conf.parent / 'logs'}",
            "-cp", f"{conf}{os.pathsep}{self.recon_classpath}",
            RECON_MAIN,
        ]
        with timed(self.timings, "recon start (http port open)"):
            proc = self.spawn("recon", cmd)
            self.wait_port(proc, self.recon_ports["http"], timeout=240)
        return proc

    def recon_api(self, path: str) -> Any:
        """GET Recon's REST API under /api/v1 (JSON)."""
        with urllib.request.urlopen(f"{self.recon_url}/api/v1/{path}", timeout=30) as resp:
            return json.loads(resp.read())

    def recon_api_or_none(self, path: str) -> Any:
        """As :meth:`recon_api`, None while Recon answers with an error or not at all (a probe's step)."""
        try:
            return self.recon_api(path)
        except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
            return None
