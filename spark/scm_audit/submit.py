"""Launch the audit job with ``spark-submit`` (behind ``ozone-scm audit run``).

Before a JVM starts, it checks what it can in milliseconds and fails with one line:

* the input is a usable export (:func:`scm_audit.inputs.discover`) and ``--out`` is a report
  directory (:func:`scm_audit.output.check_out_dir`);
* Java is there (``JAVA_HOME`` or ``java`` on PATH), as Spark needs it;
* the master is one we know (``local``, ``local[N]``, ``local[*]``, ``spark://HOST:PORT``,
  ``k8s://URL``) and, when remote, accepts a TCP connection;
* ``spark-submit`` is installed (pyspark).

With a ``k8s://`` master and an executor Pod template (``executor_pod_template``, a JSON Pod: the operator's audit
Pod passes it), the template is checked and written to a file for ``spark.kubernetes.executor.podTemplateFile``.

Then it runs ``spark-submit --master M .../scm_audit/job.py --input ... --out ...`` with the
current interpreter as the PySpark Python, streams the job's one-line result, and turns a failed
job into an :class:`AuditError` carrying the job's own error line (or the last lines of its log).
Plain Python: no pyspark import.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlparse

from scm_audit import inputs, output
from scm_audit.errors import AuditError

ERROR_PREFIX = "scm-audit: error: "
LOCAL_RE = re.compile(r"^local(\[(\*|\d+)(,\d+)?\])?$")
JAVA_HINT = "install a JDK 17+ (Debian: apt-get install -y openjdk-17-jre-headless) or set JAVA_HOME"


@dataclasses.dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]


def find_java(env: dict[str, str] | None = None) -> str:
    env = dict(os.environ if env is None else env)
    home = env.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if java.is_file() and os.access(java, os.X_OK):
            return str(java)
        raise AuditError(f"JAVA_HOME={home} has no bin/java; Spark needs Java: {JAVA_HINT}")
    found = shutil.which("java", path=env.get("PATH"))
    if not found:
        raise AuditError(f"Java not found (no JAVA_HOME, no java on PATH); Spark needs it: {JAVA_HINT}")
    return found


def _reachable(host: str, port: int, timeout: float) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)


def check_master(master: str, timeout: float = 3.0) -> None:
    """Known master URL, and a remote one accepts connections."""
    if LOCAL_RE.match(master):
        return
    if master.startswith("spark://"):
        parsed = urlparse(master)
        if not parsed.hostname or not parsed.port:
            raise AuditError(f"Spark master {master} needs a host and port, e.g. spark://host:7077")
        err = _reachable(parsed.hostname, parsed.port, timeout)
        if err:
            raise AuditError(f"cannot reach Spark master {master}: {err}; check the URL and that the master is up")
        return
    if master.startswith("k8s://"):
        api = urlparse(master[len("k8s://"):])
        if not api.hostname:
            raise AuditError(f"Kubernetes master {master} needs an API server URL, e.g. k8s://https://host:6443")
        port = api.port or (443 if api.scheme == "https" else 80)
        err = _reachable(api.hostname, port, timeout)
        if err:
            raise AuditError(f"cannot reach the Kubernetes API server of {master}: {err}")
        return
    raise AuditError(f"unknown Spark master {master!r}; use local[*], local[N], spark://HOST:PORT or k8s://URL")


def spark_submit_path() -> str:
    beside = Path(sys.executable).parent / "spark-submit"
    if beside.is_file():
        return str(beside)
    found = shutil.which("spark-submit")
    if not found:
        raise AuditError("spark-submit not found: install pyspark (`pip install 'ozone-scm[spark]'`; make env does)")
    return found


def job_script() -> Path:
    return Path(__file__).resolve().parent / "job.py"


def build_launch(
    input_dir: Path,
    out_dir: Path,
    *,
    master: str = "local[*]",
    keep_runs: int = output.DEFAULT_KEEP_RUNS,
    driver_memory: str | None = None,
    conf: Sequence[str] = (),
    extra_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    executor_pod_template: str | None = None,
    template_dir: Path | None = None,
) -> Launch:
    """Validate everything cheap and return the command to run (pure but for the checks' I/O). ``template_dir``:
    where the executor Pod template is written (default: a new temporary directory)."""
    inputs.discover(input_dir)
    output.check_out_dir(out_dir)
    base_env = dict(os.environ if env is None else env)
    find_java(base_env)
    check_master(master)
    template = None
    if executor_pod_template is not None:
        template = write_pod_template(executor_pod_template, master, template_dir)
    argv = [spark_submit_path(), "--master", master, "--name", "scm-audit"]
    if driver_memory:
        argv += ["--driver-memory", driver_memory]
    for item in conf:
        argv += ["--conf", item]
    if template is not None:
        argv += ["--conf", f"spark.kubernetes.executor.podTemplateFile={template}"]
    argv += [
        *extra_args,
        str(job_script()),
        "--input", str(input_dir.resolve()),
        "--out", str(out_dir.resolve()),
        "--keep-runs", str(keep_runs),
        "--master", master,
    ]
    run_env = dict(base_env)
    run_env.setdefault("PYSPARK_PYTHON", sys.executable)
    run_env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        run_env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return Launch(argv, run_env)


def write_pod_template(text: str, master: str, directory: Path | None = None) -> Path:
    """Check an executor Pod template (a JSON Pod object) and write it where Spark's driver reads it."""
    if not master.startswith("k8s://"):
        raise AuditError(f"--executor-pod-template is for executors on Kubernetes; the master is {master}: "
                         "use --master k8s://https://... or drop the template")
    try:
        pod = json.loads(text)
    except ValueError as exc:
        raise AuditError(f"--executor-pod-template is not valid JSON ({exc}); pass a Pod object as JSON") from None
    if not isinstance(pod, dict) or pod.get("kind") != "Pod" or not isinstance(pod.get("spec"), dict):
        raise AuditError('--executor-pod-template is not a Pod: it needs "kind": "Pod" and a "spec" object')
    directory = directory if directory is not None else Path(tempfile.mkdtemp(prefix="scm-audit-"))
    path = directory / "executor-pod-template.json"  # JSON is YAML: Spark reads it as a Pod
    path.write_text(json.dumps(pod))
    return path


def run(launch: Launch, timeout: float | None = None) -> str:
    """Run the job; returns its result line. A failed job raises AuditError with its reason."""
    try:
        proc = subprocess.run(launch.argv, env=launch.env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise AuditError(f"the audit job did not finish within {timeout}s") from exc
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode == 0:
        return lines[-1] if lines else "audit finished"
    # spark-submit runs the job's Python with stderr merged into stdout (PythonRunner), so the job's
    # own one-line error arrives on stdout; look at both, the job's line wins over Spark's log.
    errors = [
        line[len(ERROR_PREFIX):]
        for line in (*proc.stdout.splitlines(), *proc.stderr.splitlines())
        if line.startswith(ERROR_PREFIX)
    ]
    if errors:
        raise AuditError(errors[-1])
    tail = " | ".join(line.strip() for line in proc.stderr.splitlines()[-6:] if line.strip())
    raise AuditError(f"the audit job failed (spark-submit exit {proc.returncode}): {tail or 'no output'}")
