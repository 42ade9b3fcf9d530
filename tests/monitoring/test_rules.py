"""The chart's alert rules, their promtool unit tests, the dashboard and the chart's monitoring templates
(cheap: part of ``make test``; the scrape test against a real quorum is test_prometheus_quorum.py)."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import yaml

from ozone_scm_operator import naming

from .prom import DASHBOARD, REPO, RULES, panel_queries, promtool

CHART = REPO / "charts/ozone-scm-operator"
HELM = REPO / ".tools/bin/helm"
UNIT_TESTS = sorted((REPO / "tests/monitoring").glob("*.test.yaml"))
REQUIRED = {
    "OzoneSCMNoLeader", "OzoneSCMMemberNotCaughtUp", "OzoneSCMMemberOutOfQuorum", "OzoneSCMSafemodeTooLong",
    "OzoneSCMCertificateExpiringSoon", "OzoneSCMBackupTooOld", "OzoneSCMAuditFindings",
    "OzoneSCMOperatorReconcileErrors",
}


def alerts() -> list[dict[str, object]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_checks_the_rules_file() -> None:
    out = promtool("check", "rules", str(RULES))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in out.stdout


def test_promtool_unit_tests_pass_and_cover_every_alert() -> None:
    assert UNIT_TESTS, "no tests/monitoring/*.test.yaml"
    out = promtool("test", "rules", *map(str, UNIT_TESTS))
    assert out.returncode == 0, out.stdout + out.stderr
    fired: set[str] = set()
    quiet: set[str] = set()
    for path in UNIT_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {str(a["alert"]) for a in alerts()}
    assert names >= REQUIRED
    assert names - fired == set(), "alerts no unit test sees firing"
    assert names - quiet == set(), "alerts no unit test sees staying quiet"


def test_every_alert_has_severity_summary_and_a_runbook_entry() -> None:
    ops = (REPO / "docs/operations.md").read_text()
    headings = {m.group(1) for m in re.finditer(r"^#### `?(\w+)`?\s*$", ops, re.M)}
    for a in alerts():
        labels, ann = a["labels"], a["annotations"]
        assert isinstance(labels, dict) and labels["severity"] in ("critical", "warning"), a["alert"]
        assert isinstance(ann, dict) and ann["summary"] and ann["description"], a["alert"]
        assert ann["runbook"] == f"docs/operations.md#{str(a['alert']).lower()}", a["alert"]
        assert a["alert"] in headings, f"docs/operations.md has no '#### {a['alert']}' runbook entry"


def test_dashboard_is_grafana_json_with_a_query_per_panel() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "ozone-scm" and dash["panels"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    assert len(panel_queries(dash)) == len(dash["panels"])
    for _, expr in panel_queries(dash):
        assert "$" not in expr and ('job="ozone-scm"' in expr or 'job="ozone-scm-operator"' in expr)


def _render(*sets: str) -> list[Any]:
    args = [str(HELM), "template", "r", str(CHART), "--namespace", "ops"]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_chart_monitoring_objects_are_off_by_default_and_carry_the_repo_files() -> None:
    kinds = [d["kind"] for d in _render()]
    assert "PodMonitor" not in kinds and "PrometheusRule" not in kinds
    docs = _render("monitoring.podMonitor.enabled=true", "monitoring.prometheusRule.enabled=true",
                   "monitoring.grafanaDashboard.enabled=true", "monitoring.podMonitor.labels.release=kps",
                   "watchNamespaces={a,b}")
    by_kind: dict[str, list[Any]] = {}
    for d in docs:
        by_kind.setdefault(str(d["kind"]), []).append(d)
    rule = by_kind["PrometheusRule"][0]
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    dash = next(d for d in by_kind["ConfigMap"] if "ozone-scm.json" in d.get("data", {}))
    assert json.loads(dash["data"]["ozone-scm.json"]) == json.loads(DASHBOARD.read_text())
    assert dash["metadata"]["labels"]["grafana_dashboard"] == "1"
    op, scm = sorted(by_kind["PodMonitor"], key=lambda d: d["metadata"]["name"])
    assert str(op["metadata"]["name"]).endswith("-operator") and str(scm["metadata"]["name"]).endswith("-scm")
    assert scm["metadata"]["labels"]["release"] == "kps"
    assert scm["spec"]["namespaceSelector"] == {"matchNames": ["a", "b"]}
    scm_ep = scm["spec"]["podMetricsEndpoints"][0]
    assert scm_ep["path"] == "/prom" and scm_ep["port"] == "http"
    relabel = {r["targetLabel"]: r for r in scm_ep["relabelings"]}
    assert relabel["job"]["replacement"] == "ozone-scm"
    # the member Pods' labels as the operator sets them; the cluster label as Prometheus' service discovery spells it
    member = naming.member_labels("c", "c-0")
    assert scm["spec"]["selector"]["matchLabels"].items() <= member.items()
    sd_name = "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", naming.LABEL_CLUSTER)
    assert relabel["scm_cluster"]["sourceLabels"] == [sd_name]
    op_ep = op["spec"]["podMetricsEndpoints"][0]
    assert op_ep["path"] == "/metrics" and op_ep["honorLabels"] is True
    assert {r["targetLabel"]: r for r in op_ep["relabelings"]}["job"]["replacement"] == "ozone-scm-operator"
