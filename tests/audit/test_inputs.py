"""Bad input to the audit: each case is refused with one line naming what is wrong and what to do,
before any JVM starts (``scm_audit.inputs`` / ``scm_audit.submit``), and through the real CLI."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from exports import write_export

from scm_audit import inputs, submit
from scm_audit.errors import AuditError
from scm_server import audit_format as fmt

ROWS = {
    fmt.CONTAINERS: [{"container_id": 1}],
    fmt.REPLICAS: [{"container_id": 1, "datanode_uuid": d} for d in ("dn1", "dn2", "dn3")],
    fmt.DATANODES: [{"datanode_uuid": d} for d in ("dn1", "dn2", "dn3")],
    fmt.PIPELINES: [{"pipeline_id": "p1"}],
    fmt.RM_VERDICTS: [{"container_id": 1, "health": "HEALTHY", "states": ["HEALTHY"]}],
}


def refused(path: Path, *words: str) -> str:
    with pytest.raises(AuditError) as err:
        inputs.discover(path)
    message = str(err.value)
    assert "\n" not in message
    for w in words:
        assert w in message, message
    return message


def test_a_good_export_and_a_good_set(tmp_path: Path) -> None:
    single = inputs.discover(write_export(tmp_path / "one", ROWS, barrier_id=""))
    assert [e.label for e in single.exports] == ["scm1"] and single.consistency == "local"
    root = tmp_path / "all"
    write_export(root / "scm1", ROWS, scm_id="u1", node_id="scm1", is_leader=False)
    write_export(root / "scm2", ROWS, scm_id="u2", node_id="scm2", is_leader=True)
    both = inputs.discover(root)
    assert [e.label for e in both.exports] == ["scm2", "scm1"]  # the leader leads
    assert both.primary.label == "scm2" and both.same_index and both.consistency == "barrier"


def test_missing_or_empty_input(tmp_path: Path) -> None:
    refused(tmp_path / "nope", "does not exist")
    (tmp_path / "empty").mkdir()
    refused(tmp_path / "empty", "is empty", "ozone-scm admin audit export")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("x")
    refused(tmp_path / "junk", "holds no manifest.json")


def test_truncated_or_corrupt_exports(tmp_path: Path) -> None:
    d = write_export(tmp_path / "cut", ROWS)
    manifest = d / fmt.MANIFEST
    manifest.write_text(manifest.read_text()[:40])
    refused(d, "is not valid JSON", "export again")

    d = write_export(tmp_path / "short", ROWS)
    f = d / fmt.file_name(fmt.REPLICAS)
    f.write_bytes(f.read_bytes()[:-10])
    refused(d, "replicas.parquet is", "bytes but the manifest says", "truncated")

    d = write_export(tmp_path / "magic", ROWS)
    f = d / fmt.file_name(fmt.CONTAINERS)
    data = bytearray(f.read_bytes())
    data[-1:] = b"X"
    f.write_bytes(bytes(data))
    refused(d, "containers.parquet is not a complete Parquet file")

    d = write_export(tmp_path / "gone", ROWS)
    (d / fmt.file_name(fmt.PIPELINES)).unlink()
    refused(d, "pipelines.parquet is missing")


def test_unknown_format_or_version(tmp_path: Path) -> None:
    d = write_export(tmp_path / "v9", ROWS)
    data = json.loads((d / fmt.MANIFEST).read_text())
    (d / fmt.MANIFEST).write_text(json.dumps({**data, "formatVersion": 9}))
    refused(d, "unknown export format version 9", "reads versions 1, 2")
    (d / fmt.MANIFEST).write_text(json.dumps({**data, "format": "something-else"}))
    refused(d, "not an SCM audit export")


def test_two_clusters_or_one_scm_twice(tmp_path: Path) -> None:
    root = tmp_path / "mixed"
    write_export(root / "a", ROWS, scm_id="u1", node_id="scm1", cluster_id="CID-a")
    write_export(root / "b", ROWS, scm_id="u2", node_id="scm2", cluster_id="CID-b")
    refused(root, "mixes exports of different clusters", "scm1=CID-a", "scm2=CID-b")
    root = tmp_path / "twice"
    write_export(root / "a", ROWS, scm_id="u1", node_id="scm1")
    write_export(root / "b", ROWS, scm_id="u1", node_id="scm1")
    refused(root, "two exports of SCM u1")


def test_environment_checks(tmp_path: Path) -> None:
    with pytest.raises(AuditError, match="Java not found"):
        submit.find_java({"PATH": str(tmp_path)})
    with pytest.raises(AuditError, match="JAVA_HOME=/nowhere has no bin/java"):
        submit.find_java({"JAVA_HOME": "/nowhere", "PATH": ""})
    for master in ("local", "local[2]", "local[*]", "local[4,2]"):
        submit.check_master(master)
    with socket.socket() as s:  # a port nobody listens on (bound, never listening)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(AuditError, match=f"cannot reach Spark master spark://127.0.0.1:{port}"):
            submit.check_master(f"spark://127.0.0.1:{port}", timeout=2)
        with pytest.raises(AuditError, match="cannot reach the Kubernetes API server"):
            submit.check_master(f"k8s://http://127.0.0.1:{port}", timeout=2)
    with pytest.raises(AuditError, match="unknown Spark master 'yarn-client'"):
        submit.check_master("yarn-client")


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scm_server.cli.main", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_the_cli_refuses_bad_input_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    good = write_export(tmp_path / "export", ROWS)
    out = tmp_path / "report"
    (tmp_path / "empty").mkdir()
    cases = [
        (["audit", "run", "--input", str(tmp_path / "empty"), "--out", str(out)], None, "is empty"),
        (["audit", "run", "--input", str(good), "--out", str(out), "--master", "spark://127.0.0.1:1"], None,
         "cannot reach Spark master spark://127.0.0.1:1"),
        (["audit", "run", "--input", str(good), "--out", str(out)], {"PATH": str(tmp_path), "HOME": str(tmp_path)},
         "Java not found"),
    ]
    for args, env, words in cases:
        result = cli(*args, env=env)
        assert result.returncode == 1, result.stderr
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and words in lines[0], result.stderr
        assert not out.exists()
