"""Start a Spark executor inside an executor Pod of the audit image (``python -m scm_audit.executor executor``).

Spark's Kubernetes scheduler backend creates each executor Pod from the template the audit's driver passes
(``spark.kubernetes.executor.podTemplateFile``; the operator builds it: ``audit_builders.build_executor_pod_template``)
with the argument ``executor`` and the executor's settings in the environment: the driver's URL, the executor's
ID, cores and memory, the application ID, the Pod's IP and name, the JVM options (``SPARK_JAVA_OPT_<n>``, in
order) and the directory of the configuration Spark mounts. This module turns them into the command of Spark's
Kubernetes executor backend on the image's own PySpark (its jars and Java) and replaces itself with it. A missing
variable ends it with one line naming it. Plain Python: no pyspark import.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from scm_audit.errors import AuditError
from scm_audit.submit import find_java

BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
REQUIRED = ("SPARK_DRIVER_URL", "SPARK_EXECUTOR_ID", "SPARK_EXECUTOR_CORES", "SPARK_EXECUTOR_MEMORY",
            "SPARK_APPLICATION_ID", "SPARK_EXECUTOR_POD_IP", "SPARK_EXECUTOR_POD_NAME")
_JAVA_OPT = re.compile(r"^SPARK_JAVA_OPT_([0-9]+)$")


def spark_home() -> Path:
    """The installed PySpark's directory: its ``jars/`` are Spark's."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise AuditError("pyspark is not installed in this image; the executor needs the audit image "
                         "(make audit-image)")
    return Path(spec.origin).parent


def command(env: Mapping[str, str], home: Path, java: str) -> list[str]:
    """The executor backend's command line from Spark's environment (pure)."""
    missing = [name for name in REQUIRED if not env.get(name)]
    if missing:
        raise AuditError(f"{', '.join(missing)} not set: this command runs only in an executor Pod that Spark's "
                         "Kubernetes scheduler backend created")
    numbered = [(int(m.group(1)), k) for k in env for m in [_JAVA_OPT.match(k)] if m]
    java_opts = [env[k] for _, k in sorted(numbered)]
    classpath = [p for p in (env.get("SPARK_CONF_DIR"), env.get("SPARK_CLASSPATH"), str(home / "jars" / "*")) if p]
    memory = env["SPARK_EXECUTOR_MEMORY"]
    return [
        java, *java_opts, f"-Xms{memory}", f"-Xmx{memory}", "-cp", ":".join(classpath), BACKEND,
        "--driver-url", env["SPARK_DRIVER_URL"],
        "--executor-id", env["SPARK_EXECUTOR_ID"],
        "--cores", env["SPARK_EXECUTOR_CORES"],
        "--app-id", env["SPARK_APPLICATION_ID"],
        "--hostname", env["SPARK_EXECUTOR_POD_IP"],
        "--resourceProfileId", env.get("SPARK_RESOURCE_PROFILE_ID", "0"),
        "--podName", env["SPARK_EXECUTOR_POD_NAME"],
    ]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["executor"]:
        print(f"scm-audit: error: expected the single argument `executor` (Spark's), got {args}", file=sys.stderr)
        return 2
    try:
        env = dict(os.environ)
        home = spark_home()
        env.setdefault("SPARK_HOME", str(home))
        argv_ = command(env, home, find_java(env))
    except AuditError as exc:
        print(f"scm-audit: error: {exc}", file=sys.stderr)
        return 1
    os.execve(argv_[0], argv_, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
