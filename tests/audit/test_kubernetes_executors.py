"""The audit's pieces for executors on Kubernetes, without a cluster: the executor Pod template ``audit run`` hands
Spark (checked, written, refused with a local master), and the executor launcher's command line from the
environment Spark gives an executor Pod (``scm_audit.executor``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from exports import write_export

from scm_audit import executor, submit
from scm_audit.errors import AuditError
from scm_server import audit_format as fmt

POD = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "executor"}]}}
MASTER = "k8s://https://127.0.0.1:1"
ROWS = {fmt.CONTAINERS: [{"container_id": 1}], fmt.REPLICAS: [{"container_id": 1, "datanode_uuid": "dn1"}],
        fmt.DATANODES: [{"datanode_uuid": "dn1"}], fmt.PIPELINES: [{"pipeline_id": "p1"}],
        fmt.RM_VERDICTS: [{"container_id": 1, "health": "HEALTHY", "states": ["HEALTHY"]}]}


def test_the_template_is_written_for_spark_and_named_in_its_conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(submit, "check_master", lambda master: None)  # no API server here: only the template
    export = tmp_path / "export"
    write_export(export, ROWS)
    launch = submit.build_launch(export, tmp_path / "report", master=MASTER, executor_pod_template=json.dumps(POD),
                                 template_dir=tmp_path)
    written = tmp_path / "executor-pod-template.json"
    assert json.loads(written.read_text()) == POD
    i = launch.argv.index(f"spark.kubernetes.executor.podTemplateFile={written}")
    assert launch.argv[i - 1] == "--conf" and launch.argv.index("--master") < i


@pytest.mark.parametrize(("text", "master", "says"), [
    (json.dumps(POD), "local[2]", "is for executors on Kubernetes; the master is local[2]"),
    ("{not json", MASTER, "is not valid JSON"),
    (json.dumps({"kind": "Deployment", "spec": {}}), MASTER, 'it needs "kind": "Pod"'),
])
def test_a_bad_template_is_refused_in_one_line_before_anything_is_written(tmp_path: Path, text: str, master: str,
                                                                          says: str) -> None:
    with pytest.raises(AuditError) as refused:
        submit.write_pod_template(text, master, tmp_path)
    assert says in str(refused.value) and "\n" not in str(refused.value)
    assert list(tmp_path.iterdir()) == []


SPARK_ENV = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@scm-audit-driver.ns.svc:7078",
    "SPARK_EXECUTOR_ID": "2", "SPARK_EXECUTOR_CORES": "1", "SPARK_EXECUTOR_MEMORY": "512m",
    "SPARK_APPLICATION_ID": "spark-app-1", "SPARK_EXECUTOR_POD_IP": "10.0.0.7",
    "SPARK_EXECUTOR_POD_NAME": "scm-audit-exec-2", "SPARK_CONF_DIR": "/opt/spark/conf",
    "SPARK_JAVA_OPT_10": "-Dlast", "SPARK_JAVA_OPT_0": "-Dfirst", "SPARK_JAVA_OPT_2": "-Dsecond",
}


def test_the_executor_backend_gets_spark_s_settings_in_order() -> None:
    argv = executor.command(SPARK_ENV, Path("/spark"), "/usr/bin/java")
    assert argv[:7] == ["/usr/bin/java", "-Dfirst", "-Dsecond", "-Dlast", "-Xms512m", "-Xmx512m", "-cp"]
    assert argv[7] == "/opt/spark/conf:/spark/jars/*" and argv[8] == executor.BACKEND
    flags = dict(zip(argv[9::2], argv[10::2], strict=True))
    assert flags == {"--driver-url": SPARK_ENV["SPARK_DRIVER_URL"], "--executor-id": "2", "--cores": "1",
                     "--app-id": "spark-app-1", "--hostname": "10.0.0.7", "--resourceProfileId": "0",
                     "--podName": "scm-audit-exec-2"}


def test_outside_an_executor_pod_the_launcher_names_what_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    env = {k: v for k, v in SPARK_ENV.items() if k not in ("SPARK_DRIVER_URL", "SPARK_EXECUTOR_POD_IP")}
    with pytest.raises(AuditError) as refused:
        executor.command(env, Path("/spark"), "/usr/bin/java")
    assert str(refused.value).startswith("SPARK_DRIVER_URL, SPARK_EXECUTOR_POD_IP not set")
    assert executor.main(["driver"]) == 2
    assert "expected the single argument `executor`" in capsys.readouterr().err
