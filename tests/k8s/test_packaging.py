"""The Helm chart and the plain manifests, checked with the real tools users run: ``helm lint``/``helm template``
(Helm v4), offline schema validation against Kubernetes 1.35 (``kubernetes-validate --strict``), the CRD's own
schema for custom resources, and drift between the CRD's single source (``crds/``) and its copies.

The binaries come from ``make k8s-tools`` (``scripts/install_k8s_tools.sh``); a missing one fails the test with
the command that installs it.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.local.crdschema import SchemaInvalid, crd_versions

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / ".tools" / "bin" / "helm"
CHART = ROOT / "charts" / "ozone-scm-operator"
CRD_FILE = ROOT / "crds" / "ozonescmclusters.yaml"
VALIDATE = Path(sys.executable).parent / "kubernetes-validate"
sys.path.insert(0, str(ROOT / "scripts"))
import sync_k8s_packaging  # noqa: E402


def need(tool: Path) -> Path:
    if not tool.exists():
        pytest.fail(f"{tool} is missing: run `make k8s-tools` (helm, kubectl) or `make env` (kubernetes-validate)")
    return tool


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(need(HELM)), *args], capture_output=True, text=True, check=check)


def render(*sets: str, namespace: str = "ozone-scm-system") -> list[dict[str, Any]]:
    args = ["template", "ozone-scm-operator", str(CHART), "--namespace", namespace, "--include-crds"]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(helm(*args).stdout) if isinstance(d, dict) and d]


def validate_offline(docs: list[dict[str, Any]], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return subprocess.run([str(need(VALIDATE)), "-k", "1.35.0", "--strict", str(path)],
                          capture_output=True, text=True)


VARIANTS = [(), ("cluster.create=true",), ("watchNamespaces={team-a,team-b}", "metrics.service.enabled=false"),
            ("serviceAccount.create=false", "serviceAccount.name=existing", "rbac.create=false"),
            ("clusterWide=true",)]
VARIANT_IDS = ["defaults", "with-cluster", "namespaced", "bring-your-own-sa", "cluster-wide"]


@pytest.mark.parametrize("sets", VARIANTS, ids=VARIANT_IDS)
def test_helm_lint_strict(sets: tuple[str, ...]) -> None:
    args = ["lint", "--strict", str(CHART)]
    for s in sets:
        args += ["--set", s]
    result = helm(*args, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("sets", VARIANTS, ids=VARIANT_IDS)
def test_rendered_objects_validate_against_kubernetes_1_35(sets: tuple[str, ...], tmp_path: Path) -> None:
    docs = render(*sets)
    builtin = [d for d in docs if d["kind"] not in ("OzoneSCMCluster",)]
    result = validate_offline(builtin, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_manifests_validate_against_kubernetes_1_35() -> None:
    files = sorted((ROOT / "manifests").glob("*.yaml"))
    assert [f.name for f in files] == ["00-namespace.yaml", "10-crd-ozonescmbackups.yaml",
                                       "10-crd-ozonescmclusters.yaml", "20-rbac.yaml", "30-operator.yaml"]
    result = subprocess.run([str(need(VALIDATE)), "-k", "1.35.0", "--strict", *map(str, files)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_offline_validation_can_fail(tmp_path: Path) -> None:
    docs = render()
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["paht"] = "/typo"
    assert validate_offline([deployment], tmp_path).returncode != 0


def test_custom_resources_validate_against_the_crd_schema() -> None:
    version = crd_versions(yaml.safe_load(CRD_FILE.read_text()))[0]
    assert version.unsupported == []  # every CEL rule of the CRD is evaluated, none skipped
    resources = [d for f in sorted((ROOT / "crds" / "examples").glob("*.yaml"))
                 for d in yaml.safe_load_all(f.read_text()) if d]
    resources += [d for d in render("cluster.create=true") if d["kind"] == "OzoneSCMCluster"]
    assert len(resources) >= 5
    for resource in resources:
        version.admit(resource, None, part="main")
    broken = copy.deepcopy(resources[0])
    broken["spec"]["replicas"] = 4
    with pytest.raises(SchemaInvalid, match="replicas must be 1, 3 or 5"):
        version.admit(broken, None, part="main")


def test_crd_copies_do_not_drift() -> None:
    for name in ("ozonescmclusters.yaml", "ozonescmbackups.yaml"):
        assert (CHART / "crds" / name).read_text() == (ROOT / "crds" / name).read_text(), \
            f"charts/ozone-scm-operator/crds/{name} differs from crds/: run `make manifests`"
    assert sync_k8s_packaging.main(["--check"]) == 0, "manifests/ or the chart's CRD drifted: run `make manifests`"


def test_drift_check_detects_a_changed_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    changed = tmp_path / "crd.yaml"
    changed.write_text(CRD_FILE.read_text().replace("shortNames:\n      - oscm", "shortNames:\n      - oscmx"))
    assert changed.read_text() != CRD_FILE.read_text()
    monkeypatch.setattr(sync_k8s_packaging, "CRD", changed)
    assert sync_k8s_packaging.main(["--check"]) == 1


def test_values_schema_rejects_bad_values() -> None:
    for bad, message in (("operator.logLevel=LOUD", "logLevel"), ("cluster.spec.replicas=2", "replicas"),
                         ("image.pullPolicy=Sometimes", "pullPolicy"), ("watchNamespaces={Bad_NS}", "watchNamespaces"),
                         ("unknownKey=1", "unknownKey")):
        result = helm("template", "x", str(CHART), "--set", bad, check=False)
        assert result.returncode != 0, bad
        assert message in result.stderr, result.stderr
    both = helm("template", "x", str(CHART), "--set", "clusterWide=true", "--set", "watchNamespaces={a}", check=False)
    assert both.returncode != 0 and "clusterWide=true watches every namespace: leave watchNamespaces empty" in \
        both.stderr, both.stderr


def test_operator_deployment_shape_and_least_privilege_rbac() -> None:
    docs = render()
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    spec = deployment["spec"]
    # two replicas, one active through the Lease; a rolling update never leaves none ready
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    container = spec["template"]["spec"]["containers"][0]
    assert "--leader-elect-resource-name=ozone-scm-operator" in container["args"]
    assert "--leader-elect-resource-namespace=ozone-scm-system" in container["args"]
    assert {e["name"] for e in container["env"]} >= {"POD_NAME", "POD_NAMESPACE"}
    assert container["command"] == ["ozone-scm-operator"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    # the production default: the release's namespace only, no cluster-wide grant (no Secret outside it)
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    (own,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "ozone-scm-operator"]
    assert own["metadata"]["namespace"] == "ozone-scm-system"
    assert "--namespace=ozone-scm-system" in spec["template"]["spec"]["containers"][0]["args"]
    wide = render("clusterWide=true")
    role = next(d for d in wide if d["kind"] == "ClusterRole")
    assert not [a for a in next(d for d in wide if d["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"][0]["args"] if a.startswith("--namespace")]
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
        assert "escalate" not in rule["verbs"] and "bind" not in rule["verbs"] and "impersonate" not in rule["verbs"]
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert ("ozone-scm.io", "ozonescmclusters/status") in granted
    assert ("", "nodes") not in granted
    # namespaces and StorageClasses: get only (the enforced Pod Security level; whether volumes may expand)
    for g, r in (("", "namespaces"), ("storage.k8s.io", "storageclasses")):
        assert [rule["verbs"] for rule in role["rules"] if r in rule["resources"] and g in rule["apiGroups"]] == [["get"]]
    pod_spec = spec["template"]["spec"]
    from ozone_scm_operator import podsecurity
    assert podsecurity.check(pod_spec, "restricted") == []  # the operator Deployment passes Pod Security restricted
    # leader election: exactly the Lease verbs, in the release namespace, reading and renewing only its own Lease
    election = next(d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-leader-election"))
    assert election["metadata"]["namespace"] == "ozone-scm-system"
    assert election["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["ozone-scm-operator"],
         "verbs": ["get", "update"]},
    ]
    assert not [g for g in granted if g[0] == "coordination.k8s.io"]  # nothing on Leases cluster-wide
    namespaced = render("watchNamespaces={team-a,team-b}")
    assert not [d for d in namespaced if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    roles = [d for d in namespaced if d["kind"] == "Role" and d["metadata"]["name"] == "ozone-scm-operator"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    args = next(d for d in namespaced if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args


def test_the_spark_audit_service_account_may_run_executor_pods_in_each_watched_namespace_and_nothing_else() -> None:
    """What Spark's driver (the audit Pod, spec.audit.master k8s://...) needs: executor Pods and their ConfigMap,
    the claims Spark may list; in each watched namespace, bound to the ServiceAccount spec.audit defaults to."""
    from ozone_scm_operator.spec import AuditSpec

    docs = render("watchNamespaces={team-a,team-b}")
    name = AuditSpec().service_account_name
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        assert sorted(d["metadata"]["namespace"] for d in docs
                      if d["kind"] == kind and d["metadata"]["name"] == name) == ["team-a", "team-b"], kind
    role = next(d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == name)
    granted = {(g, r): set(rule["verbs"]) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert set(granted) == {("", "pods"), ("", "configmaps"), ("", "persistentvolumeclaims")}
    assert {"create", "watch", "delete"} <= granted[("", "pods")] and "create" in granted[("", "configmaps")]
    assert "create" not in granted[("", "persistentvolumeclaims")]
    binding = next(d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"] == name
                   and d["metadata"]["namespace"] == "team-a")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": "team-a"}]
    # cluster-wide: the chart cannot know the namespaces; off: none
    for sets in (("clusterWide=true",), ("sparkAudit.create=false",)):
        assert not [d for d in render(*sets) if d["metadata"]["name"] == name], sets


def test_single_replica_without_leader_election() -> None:
    docs = render("leaderElection.enabled=false", "replicaCount=1")
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert "--no-leader-elect" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-leader-election")]
    for sets, message in ((("leaderElection.enabled=false",), "replicaCount must be 1 when leaderElection.enabled is false"),
                          (("leaderElection.renewDeadline=15",), "renewDeadline must be less than"),
                          (("replicaCount=0",), "replicaCount")):
        result = helm("template", "x", str(CHART), *(a for s in sets for a in ("--set", s)), check=False)
        assert result.returncode != 0 and message in result.stderr, (sets, result.stderr)


def test_crds_ship_in_the_crds_folder_and_the_cluster_is_kept_on_uninstall() -> None:
    plain = helm("template", "x", str(CHART), "--set", "cluster.create=true").stdout
    assert "kind: CustomResourceDefinition" not in plain  # only with --include-crds: the crds/ folder
    cluster = next(d for d in render("cluster.create=true") if d["kind"] == "OzoneSCMCluster")
    assert cluster["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert cluster["spec"]["image"] == "ozone-scm:0.1.0"
