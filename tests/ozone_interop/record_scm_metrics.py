"""Record what Apache Ozone's own SCM serves on its web port: its /jmx beans (name and attribute names) and its
/prom metric names, into the committed fixture ``tests/unit/web/data/ozone_scm_metrics.json``.

Run it with ``make ozone-metrics-fixture`` (Ozone's jars from ``make ozone-jars``): one Ozone SCM, one Ozone
datanode and the Ozone Manager, started by the interop harness (``ozone_procs.OzoneCluster``), out of safemode with
an open pipeline; then both pages are read once. The fixture notes its source (Ozone's version, the classes run).
The unit tier's ``tests/unit/web/test_ozone_names.py`` reads it and checks that our SCM serves each name, or that
docs/ozone-compatibility.md says why not.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import urllib.request
from pathlib import Path

from tests.ozone_interop.ozone_procs import (
    LOOPBACK,
    SCM_MAIN,
    OzoneCluster,
    Timings,
    resolve_classpath,
    wait_for,
)

FIXTURE = Path(__file__).resolve().parents[1] / "unit" / "web" / "data" / "ozone_scm_metrics.json"
# Beans of the JVM and of libraries (Ratis's own, the JVM's) are not the SCM's; only Hadoop:* beans are recorded.
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{.*\})?\s")


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return resp.read().decode()


def record(cluster: OzoneCluster) -> dict[str, object]:
    http = f"http://{LOOPBACK}:{cluster.scms[0].http_port}"

    def replication_manager_ran() -> dict[str, object] | None:
        beans = json.loads(_get(f"{http}/jmx"))["beans"]
        names = {b["name"] for b in beans}
        wanted = "Hadoop:service=StorageContainerManager,name=ReplicationManagerMetrics"
        return {"beans": beans} if wanted in names else None

    jmx = wait_for("ReplicationManagerMetrics on Ozone's /jmx", replication_manager_ran, 120, interval=2)
    beans = {
        str(b["name"]): sorted(k for k in b if k not in ("name", "modelerType"))
        for b in jmx["beans"]  # type: ignore[attr-defined]
        if str(b["name"]).startswith("Hadoop:")
    }
    prom_names = sorted({m.group(1) for line in _get(f"{http}/prom").splitlines() if (m := _SAMPLE.match(line))})
    return {
        "source": (
            f"Apache Ozone 2.2.0 ({SCM_MAIN} from the hdds-server-scm jar on Maven Central), one SCM with one "
            "datanode and the OM, out of safemode with an open RATIS/ONE pipeline; recorded by "
            "tests/ozone_interop/record_scm_metrics.py (make ozone-metrics-fixture)"
        ),
        "jmx": dict(sorted(beans.items())),
        "prom": prom_names,
    }


def main() -> int:
    classpath, account = resolve_classpath()
    print(account, file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="ozone-metrics-") as tmp:
        cluster = OzoneCluster(Path(tmp), classpath, scm_side="ozone", scms=1, datanodes=1, timings=Timings())
        try:
            cluster.start()
            fixture = record(cluster)
        finally:
            cluster.stop()
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n")
    print(f"recorded {len(fixture['jmx'])} beans and {len(fixture['prom'])} metric names into {FIXTURE}")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
