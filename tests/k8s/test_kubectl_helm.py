"""``kubectl`` and ``helm`` as users run them, against the emulated API server: ``kubectl apply -f manifests/``,
``kubectl get oscm`` with the CRD's printer columns, the CRD's validation seen through kubectl, and ``helm install``
/ ``upgrade`` / ``uninstall`` of the chart (Helm v4's server-side apply, release Secrets, ``--wait``).

No flag works around the emulator: kubectl validates with ``fieldValidation=Strict`` after reading the OpenAPI v3
index, as against a real cluster.
"""

from __future__ import annotations

import os
import queue
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.local.apiserver import ThreadedAPIServer, write_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools" / "bin"
CHART = ROOT / "charts" / "ozone-scm-operator"
GROUP_VERSION = "ozone-scm.io/v1alpha1"


class Cli:
    def __init__(self, server: ThreadedAPIServer, home: Path) -> None:
        self.server = server
        home.mkdir(parents=True, exist_ok=True)
        kubeconfig = write_kubeconfig(home / "kubeconfig", server.url)
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
                    "KUBECONFIG": str(kubeconfig), "HELM_CACHE_HOME": str(home / "helm-cache"),
                    "HELM_CONFIG_HOME": str(home / "helm-config"), "HELM_DATA_HOME": str(home / "helm-data")}

    def run(self, tool: str, *args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        binary = TOOLS / tool
        if not binary.exists():
            pytest.fail(f"{binary} is missing: run `make k8s-tools`")
        result = subprocess.run([str(binary), *args], env=self.env, capture_output=True, text=True, input=stdin,
                                cwd=ROOT, timeout=300)
        if check and result.returncode != 0:
            raise AssertionError(f"{tool} {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n"
                                 f"{result.stderr}")
        return result

    def kubectl(self, *args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.run("kubectl", *args, check=check, stdin=stdin)

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("helm", *args, check=check)


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    with ThreadedAPIServer() as server:
        yield Cli(server, tmp_path / "home")
        assert server.api.internal_errors == []


def test_kubectl_apply_manifests_then_get_oscm_with_printer_columns(cli: Cli) -> None:
    out = cli.kubectl("apply", "-f", "manifests/").stdout
    for created in ("namespace/ozone-scm-system created",
                    "customresourcedefinition.apiextensions.k8s.io/ozonescmclusters.ozone-scm.io created",
                    "serviceaccount/ozone-scm-operator created", "role.rbac.authorization.k8s.io/"
                    "ozone-scm-operator created", "deployment.apps/ozone-scm-operator created"):
        assert created in out, out
    assert "unchanged" in cli.kubectl("apply", "-f", "manifests/").stdout  # idempotent
    deployment = cli.server.get_object("apps/v1", "Deployment", "ozone-scm-operator", "ozone-scm-system")
    assert deployment is not None and deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert deployment["spec"]["replicas"] == 2  # one active through the Lease, one standing by

    cli.kubectl("apply", "-n", "default", "-f", "crds/examples/scm-minimal.yaml")
    cli.server.patch_object(GROUP_VERSION, "OzoneSCMCluster", "scm", "default", {"status": {
        "phase": "Running", "membersReady": "3/3", "leader": "scm-1", "clusterID": "CID-1",
        "conditions": [{"type": "Ready", "status": "True", "reason": "AllMembersReady", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, subresource="status")
    table = cli.kubectl("get", "oscm", "-n", "default").stdout.splitlines()
    assert table[0].split() == ["NAME", "READY", "MEMBERS", "LEADER", "PHASE", "AGE"]
    assert table[1].split()[:5] == ["scm", "True", "3/3", "scm-1", "Running"]
    wide = cli.kubectl("get", "ozonescmclusters.ozone-scm.io", "-n", "default", "-o", "wide").stdout
    assert "CLUSTERID" in wide and "CID-1" in wide
    explained = cli.kubectl("explain", "oscm.spec.replicas").stdout
    assert "FIELD: replicas <integer>" in explained and "DESCRIPTION" in explained
    watch_shows_changes(cli)


def watch_shows_changes(cli: Cli) -> None:
    """``kubectl get oscm -w``: the watch events come back as Table rows with the printer columns."""
    proc = subprocess.Popen([str(TOOLS / "kubectl"), "get", "oscm", "-n", "default", "-w"], env=cli.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in proc.stdout or []:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        assert lines.get(timeout=30).split()[:2] == ["NAME", "READY"]
        assert lines.get(timeout=30).split()[:5] == ["scm", "True", "3/3", "scm-1", "Running"]
        cli.server.patch_object(GROUP_VERSION, "OzoneSCMCluster", "scm", "default",
                                {"status": {"phase": "Scaling", "membersReady": "3/5"}}, subresource="status")
        row = lines.get(timeout=30).split()
        assert row[:5] == ["scm", "True", "3/5", "scm-1", "Scaling"], row
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_kubectl_sees_the_crd_refuse_bad_resources(cli: Cli) -> None:
    cli.kubectl("apply", "-f", "crds/ozonescmclusters.yaml")
    bad = yaml.safe_load((ROOT / "crds" / "examples" / "scm-minimal.yaml").read_text())
    bad["spec"]["replicas"] = 2
    result = cli.kubectl("apply", "-n", "default", "-f", "-", stdin=yaml.safe_dump(bad), check=False)
    assert result.returncode != 0
    assert 'The OzoneSCMCluster "scm" is invalid: spec.replicas: Invalid value: 2: replicas must be 1, 3 or 5' \
        in result.stderr
    bad["spec"]["replicas"] = 3
    bad["spec"]["replicaz"] = 3
    result = cli.kubectl("apply", "-n", "default", "-f", "-", stdin=yaml.safe_dump(bad), check=False)
    assert result.returncode != 0 and 'unknown field "spec.replicaz"' in result.stderr
    del bad["spec"]["replicaz"]
    cli.kubectl("apply", "-n", "default", "-f", "-", stdin=yaml.safe_dump(bad))
    changed = cli.kubectl("patch", "oscm", "scm", "-n", "default", "--type=merge", "-p",
                          '{"spec": {"security": {"enabled": true}}}', check=False)
    assert changed.returncode != 0 and "security.enabled is immutable" in changed.stderr


def test_helm_install_upgrade_uninstall(cli: Cli) -> None:
    cli.kubectl("create", "namespace", "ozone-scm-system")
    out = cli.helm("install", "ozone-scm-operator", str(CHART), "--namespace", "ozone-scm-system",
                   "--set", "cluster.create=true", "--set", "cluster.name=scm").stdout
    assert "STATUS: deployed" in out
    assert cli.server.get_object("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                                 "ozonescmclusters.ozone-scm.io") is not None
    cluster = cli.server.get_object(GROUP_VERSION, "OzoneSCMCluster", "scm", "ozone-scm-system")
    assert cluster is not None and cluster["spec"]["replicas"] == 3 and cluster["spec"]["image"] == "ozone-scm:0.1.0"
    assert cluster["spec"]["storage"]["size"] == "10Gi"

    cli.helm("upgrade", "ozone-scm-operator", str(CHART), "--namespace", "ozone-scm-system",
             "--set", "cluster.create=true", "--set", "cluster.name=scm", "--set", "cluster.spec.replicas=5",
             "--set", "operator.logLevel=DEBUG")
    cluster = cli.server.get_object(GROUP_VERSION, "OzoneSCMCluster", "scm", "ozone-scm-system")
    assert cluster is not None and cluster["spec"]["replicas"] == 5
    deployment = cli.server.get_object("apps/v1", "Deployment", "ozone-scm-operator", "ozone-scm-system")
    assert deployment is not None
    assert "--log-level=DEBUG" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    history = cli.helm("history", "ozone-scm-operator", "--namespace", "ozone-scm-system").stdout
    assert "Install complete" in history and "Upgrade complete" in history

    refused = cli.helm("upgrade", "ozone-scm-operator", str(CHART), "--namespace", "ozone-scm-system",
                       "--set", "cluster.create=true", "--set", "cluster.name=scm",
                       "--set", "cluster.spec.security.enabled=true", check=False)
    assert refused.returncode != 0 and "security.enabled is immutable" in refused.stderr

    out = cli.helm("uninstall", "ozone-scm-operator", "--namespace", "ozone-scm-system").stdout
    assert "uninstalled" in out
    assert cli.server.get_object("apps/v1", "Deployment", "ozone-scm-operator", "ozone-scm-system") is None
    # Kept on purpose: the CRD (crds/ folder) and the cluster (resource-policy: keep) with its data.
    assert cli.server.get_object(GROUP_VERSION, "OzoneSCMCluster", "scm", "ozone-scm-system") is not None
    assert cli.server.get_object("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                                 "ozonescmclusters.ozone-scm.io") is not None
