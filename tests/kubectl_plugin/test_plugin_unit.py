"""The kubectl plugin without an API server: the status summary and its rendering, the switchover pre-check, the
bodies it writes, the support bundle's redaction, and argument errors (one line, exit code 1 or 2, nothing written)."""

from __future__ import annotations

import datetime
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner
from rich.console import Console

from ozone_scm_kubectl import bundle, view
from ozone_scm_kubectl.main import cli

NOW = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.UTC)
KEY_PEM = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB0secretsecret\n-----END EC PRIVATE KEY-----\n"
CERT_PEM = "-----BEGIN CERTIFICATE-----\nMIIBcertcert\n-----END CERTIFICATE-----\n"


def cluster() -> dict[str, Any]:
    return {
        "apiVersion": "ozone-scm.io/v1alpha1", "kind": "OzoneSCMCluster",
        "metadata": {"name": "scm", "namespace": "ozone", "annotations": {
            "ozone-scm.io/hibernation": "off", "ozone-scm.io/last-handled-configuration": "{}"},
            "managedFields": [{"manager": "kubectl"}]},
        "spec": {"replicas": 3},
        "status": {
            "phase": "Running", "clusterID": "CID-1", "leader": "scm-0", "term": 4, "membersReady": "2/3",
            "members": [
                {"name": "scm-0", "role": "LEADER", "state": "Joined", "ready": True, "lag": 0, "scmId": "a",
                 "certificateExpiry": "2026-03-05T12:00:00Z"},
                {"name": "scm-1", "role": "FOLLOWER", "state": "Joined", "ready": True, "lag": 1, "scmId": "b",
                 "certificateExpiry": "2027-03-01T12:00:00Z"},
                {"name": "scm-2", "role": "FOLLOWER", "state": "Joined", "ready": False, "lag": 900, "scmId": "c"},
            ],
            "conditions": [{"type": "Ready", "status": "False", "reason": "MembersNotReady", "message": "2/3"},
                           {"type": "Degraded", "status": "False", "reason": "Healthy", "message": "ok"}],
            "audit": {"lastJob": "scm-audit-1", "lastResult": "Succeeded", "lastSummary": {"findings": 2}},
        },
    }


def pod(name: str, restarts: int = 0) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True"}], "containerStatuses": [{"name": "scm", "restartCount": restarts}]}}


def backups() -> list[dict[str, Any]]:
    return [
        {"metadata": {"name": "b1", "creationTimestamp": "2026-02-01T00:00:00Z"}, "spec": {"cluster": "scm"},
         "status": {"phase": "Completed"}},
        {"metadata": {"name": "b2", "creationTimestamp": "2026-02-02T00:00:00Z"}, "spec": {"cluster": "scm"},
         "status": {"phase": "Failed", "message": "the ring is in safemode"}},
        {"metadata": {"name": "other", "creationTimestamp": "2026-02-03T00:00:00Z"}, "spec": {"cluster": "x"}},
    ]


def test_summary_carries_members_leader_lag_certificates_backup_and_audit() -> None:
    s = view.summary(cluster(), [pod("scm-0"), pod("scm-1", restarts=2)], backups(), NOW)
    assert s["leader"] == "scm-0" and s["term"] == 4 and s["clusterID"] == "CID-1"
    m = {x["name"]: x for x in s["members"]}
    assert m["scm-0"]["certificateExpiresIn"] == "4d" and m["scm-0"]["certificateExpiringSoon"] is True
    assert m["scm-1"]["certificateExpiringSoon"] is False and m["scm-1"]["restarts"] == 2
    assert m["scm-2"]["pod"] is None and m["scm-2"]["lag"] == 900
    assert s["lastBackup"] == {"name": "b2", "created": "2026-02-02T00:00:00Z", "phase": "Failed",
                               "message": "the ring is in safemode",
                               "lastCompleted": {"name": "b1", "created": "2026-02-01T00:00:00Z"}}
    assert s["lastAudit"]["lastSummary"] == {"findings": 2}
    assert s["annotations"] == {"ozone-scm.io/hibernation": "off"}  # the operator's bookkeeping left out
    assert view.summary(cluster(), [], None, NOW)["backupKindInstalled"] is False
    json.dumps(s)  # what -o json prints


def test_rendered_status_names_every_member_role_and_condition() -> None:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(view.render_status(view.summary(cluster(), [pod("scm-0")], backups(), NOW)))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    for word in ("ozone/scm", "CID-1", "scm-0 (term 4)", "LEADER", "FOLLOWER", "900", "4d", "MembersNotReady",
                 "b2 Failed", "last completed b1", "scm-audit-1 Succeeded", "findings 2",
                 "ozone-scm.io/hibernation=off"):
        assert word in text, (word, text)


def test_switchover_precheck_refuses_strangers_and_members_not_caught_up() -> None:
    s = view.summary(cluster(), [], None, NOW)
    assert view.switchover_refusal(s, "scm-1") is None
    assert view.switchover_refusal(s, "scm-7") == "scm-7 is not a member of scm (members: scm-0, scm-1, scm-2)"
    assert view.switchover_refusal(s, "scm-2") == ("scm-2 is not a caught-up voter (lag 900, not ready); choose one "
                                                   "of: scm-0, scm-1")


def test_backup_body_follows_the_backup_contract() -> None:
    body = view.backup_body("scm", "ozone", view.backup_name("scm", NOW))
    assert body["apiVersion"] == "ozone-scm.io/v1alpha1" and body["kind"] == "OzoneSCMBackup"
    assert body["metadata"]["name"] == "scm-20260301120000" and body["metadata"]["namespace"] == "ozone"
    assert body["spec"] == {"cluster": "scm"}
    assert view.check_name("--name", "Bad_Name") is not None and view.check_name("--name", "ok-1") is None


def test_bundle_never_holds_secret_data_or_pem_blocks(tmp_path: Path) -> None:
    import base64
    secret = {"metadata": {"name": "scm-0-tls", "annotations": {"note": CERT_PEM}}, "type": "kubernetes.io/tls",
              "data": {"tls.key": base64.b64encode(KEY_PEM.encode()).decode(), "ca.crt": "Zm9v"}}
    c = cluster()
    c["metadata"]["annotations"]["leak"] = KEY_PEM
    p = pod("scm-0")
    p["spec"] = {"containers": [{"name": "scm", "env": [{"name": "X", "value": CERT_PEM}]}]}
    files = bundle.files(
        cluster=c, events=[{"reason": "X", "message": "m", "lastTimestamp": "2026-01-01T00:00:00Z"}], pods=[p],
        pvcs=[], secrets=[secret], logs={"scm-0/scm.log": f"started\n{KEY_PEM}done\n"}, backups=backups(),
        roles={"peers": [{"line": "h:9894:LEADER:a", "nodeId": "scm-0", "lag": 0}], "answers": 1, "asked": 1},
        now=NOW, tool="t",
    )
    out = tmp_path / "b.zip"
    bundle.write_zip(out, files, top="b")
    with zipfile.ZipFile(out) as z:
        names = set(z.namelist())
        everything = b"".join(z.read(n) for n in names)
    assert {"b/cluster.yaml", "b/events.yaml", "b/pods.yaml", "b/secrets.yaml", "b/scm-roles.txt",
            "b/logs/scm-0/scm.log", "b/manifest.json", "b/backups.yaml"} <= names
    for leak in (b"secretsecret", b"certcert", b"BEGIN EC PRIVATE KEY", b"LS0tLS1CRUdJTi", b"manager: kubectl"):
        assert leak not in everything, leak
    listing = yaml.safe_load(files["secrets.yaml"])
    assert listing == [{"name": "scm-0-tls", "type": "kubernetes.io/tls", "labels": {},
                        "annotations": {"note": "<redacted PEM CERTIFICATE>\n"}, "keys": ["ca.crt", "tls.key"],
                        "creationTimestamp": None}]
    assert b"<redacted PEM EC PRIVATE KEY>" in files["logs/scm-0/scm.log"]
    assert b"h:9894:LEADER:a" in files["scm-roles.txt"]
    # never over an existing file
    try:
        bundle.write_zip(out, files, top="b")
        raise AssertionError("overwrote")
    except FileExistsError:
        pass


def test_argument_errors_are_one_line_and_touch_nothing(tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(cli, ["hibernate", "maybe", "scm"])
    assert r.exit_code == 2 and "'maybe' is not one of 'on', 'off'" in r.output
    r = runner.invoke(cli, ["switchover", "scm"])
    assert r.exit_code == 2 and "Missing argument 'MEMBER'" in r.output
    r = runner.invoke(cli, ["status", "-o", "yaml"])
    assert r.exit_code == 2 and "'yaml' is not one of" in r.output
    # no kubeconfig: one line naming what to do, through the console script
    env = {"KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([str(Path(sys.executable).parent / "kubectl-ozone_scm"), "status"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot load a kubeconfig" in lines[0] and "--kubeconfig" in lines[0], proc.stderr
    # the report refuses an existing file before reading anything
    existing = tmp_path / "r.zip"
    existing.write_bytes(b"keep")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "ozone"}}],
        "users": [{"name": "u", "user": {}}]}))
    proc = subprocess.run([str(Path(sys.executable).parent / "kubectl-ozone_scm"), "--kubeconfig", str(kubeconfig),
                           "report", "scm", "-o", str(existing)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "exists; choose another -o" in proc.stderr and existing.read_bytes() == b"keep"
    # an API server that is not there: one line
    proc = subprocess.run([str(Path(sys.executable).parent / "kubectl-ozone_scm"), "--kubeconfig", str(kubeconfig),
                           "status", "scm"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "cannot reach the API server at http://127.0.0.1:9" in proc.stderr


def test_events_are_ordered_by_their_last_occurrence_whichever_api_posted_them() -> None:
    """The operator posts through events.k8s.io/v1 (read back through core v1: ``eventTime``, a repeat in
    ``series.lastObservedTime``); the kubelet through core v1 (``lastTimestamp``)."""
    operator_repeat = {"reason": "SwitchoverRefused", "eventTime": "2026-01-01T00:00:00.000001Z",
                       "series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:09.000001Z"}}
    operator_once = {"reason": "ClusterReady", "eventTime": "2026-01-01T00:00:05.000001Z"}
    kubelet = {"reason": "Started", "lastTimestamp": "2026-01-01T00:00:07Z"}
    assert view.event_last_seen(operator_repeat) == datetime.datetime(2026, 1, 1, 0, 0, 9, 1, tzinfo=datetime.UTC)
    assert view.event_last_seen(operator_once) == datetime.datetime(2026, 1, 1, 0, 0, 5, 1, tzinfo=datetime.UTC)
    files = bundle.files(cluster=cluster(), events=[operator_repeat, kubelet, operator_once], pods=[], pvcs=[],
                         secrets=[], logs={}, backups=backups(), roles=None, now=NOW, tool="t")
    assert [e["reason"] for e in yaml.safe_load(files["events.yaml"])] == ["ClusterReady", "Started",
                                                                         "SwitchoverRefused"]
