"""The operator's scenarios on a real kind cluster (see README.md in this folder).

``test_scenario_on_kind`` runs every scenario of ``tests/e2e/scenarios.py`` -- the functions of
``tests/e2e/local/test_operator_scenarios.py``, not copies, the same list the control-plane tier runs -- with their
``environment`` replaced by ``kind_env.kind_environment``. Two more tests use only ``helm`` and ``kubectl``, as a
user does: the chart's own Deployment running the operator inside the cluster, and the API server refusing invalid
resources.

Skipped unless selected with ``make e2e-kind``: the project's machines have no Kubernetes cluster.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import yaml

from tests.e2e import scenarios as shared
from tests.e2e.kind.conftest import IMAGE, KindCluster
from tests.e2e.kind.kind_env import kind_environment
from tests.e2e.local import test_operator_scenarios as scenarios

pytestmark = [pytest.mark.kind, pytest.mark.timeout(1800)]
GV = "ozone-scm.io/v1alpha1"

# Every scenario of the local tier (tests/e2e/scenarios.py), in the same order as the control-plane tier runs them.
SCENARIOS = shared.SCENARIOS


@pytest.mark.parametrize("name", SCENARIOS)
async def test_scenario_on_kind(name: str, kind_cluster: KindCluster, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenarios, "environment", functools.partial(kind_environment, kind_cluster, restricted=True))
    await getattr(scenarios, name)(tmp_path)


def cluster(name: str, namespace: str, replicas: int) -> str:
    return yaml.safe_dump({"apiVersion": GV, "kind": "OzoneSCMCluster",
                           "metadata": {"name": name, "namespace": namespace}, "spec": {"replicas": replicas}})


def test_the_chart_runs_the_operator_in_the_cluster_and_invalid_resources_are_refused(kind_cluster: KindCluster) -> None:
    kube, ns = kind_cluster.kube, "ozone-scm-install"
    kube.helm("install", "ozone-scm-operator", str(Path(__file__).resolve().parents[3] / "charts" /
                                                   "ozone-scm-operator"),
              "--namespace", ns, "--create-namespace", "--wait", "--timeout", "5m",
              "--set", f"watchNamespaces={{{ns}}}",
              "--set", f"image.repository={IMAGE.rsplit(':', 1)[0]}", "--set", f"image.tag={IMAGE.rsplit(':', 1)[1]}",
              "--set", "image.pullPolicy=Never")
    try:
        crd = kube.json("get", "crd", "ozonescmclusters.ozone-scm.io")
        assert any(c["type"] == "Established" and c["status"] == "True" for c in crd["status"]["conditions"])
        kube.kubectl("rollout", "status", "deployment/ozone-scm-operator", "-n", ns, "--timeout=300s")
        for replicas in (2, 4):
            result = kube.kubectl("apply", "-f", "-", stdin=cluster("bad", ns, replicas), check=False)
            assert result.returncode != 0 and "replicas must be 1, 3 or 5" in result.stderr
        kube.kubectl("apply", "-f", "-", stdin=cluster("solo", ns, 1))
        kube.kubectl("wait", "oscm/solo", "-n", ns, "--for=condition=Ready", "--timeout=600s")
    finally:
        kube.helm("uninstall", "ozone-scm-operator", "-n", ns, check=False)
        kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)
