"""The operator's local environment (``tests/e2e/local/operator_env.Env``) on the real control plane
(``fixture.ControlPlane``) instead of the emulator: the scenarios of ``tests/e2e/local/test_operator_scenarios.py``
run unchanged with ``environment`` replaced by ``control_plane_environment``.

Per scenario: a fresh namespace (labelled ``pod-security.kubernetes.io/enforce=restricted`` unless the caller asks
for a non-enforcing one), the chart installed into it by the real ``helm install`` with ``watchNamespaces`` set to
it (so RBAC is the chart's Role and RoleBinding), the operator process authenticated as the chart's ServiceAccount
with a token from the TokenRequest API (a kubeconfig, ``-n <namespace>``), and the kubelet fixture running the Pods
it creates as real SCM processes. The kubelet fixture authenticates as the test's administrator: it also plays the
scheduler and the volume provisioner, which a node's credentials may not do.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

from tests.e2e.controlplane.fixture import (
    RESTRICTED,
    TOOLS_BIN,
    ApiError,
    ControlPlane,
    RealAPI,
    kubeconfig,
    wait_until,
)
from tests.e2e.local.kubelet import Kubelet, KubeletConfig
from tests.e2e.local.operator_env import IMAGES, Env, permission_warnings

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "ozone-scm-operator"
RELEASE = "ozone-scm-operator"
_counter = itertools.count(1)


def helm(cp: ControlPlane, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real helm (``make k8s-tools``) against the control plane, as the administrator."""
    tool = TOOLS_BIN / "helm"
    if not os.access(tool, os.X_OK):
        raise AssertionError(f"{tool} is missing: run `make k8s-tools`")
    result = subprocess.run([str(tool), "--kubeconfig", str(cp.admin_kubeconfig), *args], capture_output=True,
                            text=True, timeout=timeout, cwd=REPO, env={**os.environ, "HELM_CACHE_HOME": str(
                                cp.workdir / "helm-cache"), "HELM_CONFIG_HOME": str(cp.workdir / "helm-config")})
    if result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def install_operator_chart(cp: ControlPlane, namespace: str, *values: str) -> tuple[str, list[str]]:
    """``helm install`` of the chart into ``namespace`` watching only it (``values``: more ``--set`` assignments);
    returns the operator's ServiceAccount and the warnings the API server sent back (Pod Security ``warn`` for the
    Deployment's Pod template, say)."""
    sets = [arg for value in values for arg in ("--set", value)]
    result = helm(cp, "install", RELEASE, str(CHART), "--namespace", namespace, "--set",
                  f"watchNamespaces={{{namespace}}}", *sets, "--wait=false")
    warnings = [line for line in result.stderr.splitlines() if "warning" in line.lower()]
    return RELEASE, warnings


@contextlib.asynccontextmanager
async def control_plane_environment(cp: ControlPlane, workdir: Path, *, namespace: str = "ozone",
                                    runtime: str = "process", restricted: bool = True) -> AsyncIterator[Env]:
    """Like ``operator_env.environment``: yields an ``Env`` whose ``api`` is a real API server."""
    assert runtime == "process", "the control-plane tier runs Pods as processes"
    cp.check_alive()
    admin = cp.admin()
    ns = f"{namespace}-{os.getpid()}-{next(_counter)}"
    admin.create_namespace(ns, RESTRICTED if restricted else {"ozone-scm.test/pod-security": "not-enforced"})
    sa, warnings = install_operator_chart(cp, ns)
    (workdir / "helm-warnings.txt").parent.mkdir(parents=True, exist_ok=True)
    (workdir / "helm-warnings.txt").write_text("\n".join(warnings))
    wait_until(lambda: admin.get_object("v1", "ServiceAccount", sa, ns), 30, f"ServiceAccount {ns}/{sa}")
    token = admin.service_account_token(ns, sa)
    operator_kubeconfig = kubeconfig(workdir / "operator.kubeconfig", cp.url, cp.ca_crt, token, ns)
    config = KubeletConfig(workdir=workdir / "kubelet", runtime="process", images=dict(IMAGES), backoff_base=0.5,
                           backoff_cap=4.0, namespaces={ns}, api_token=cp.admin_token, api_ca=str(cp.ca_crt),
                           node_name=f"local-node-{ns}")
    async with Kubelet(cp.url, config) as kubelet:
        env = Env(RealAPI(cp.url, cp.ca_crt, cp.admin_token), cp.url, kubelet, workdir, ns,
                  operator_args=["--kubeconfig", str(operator_kubeconfig), "-n", ns])
        env.restricted = restricted  # type: ignore[attr-defined]
        env.real_controllers = True  # kube-controller-manager runs the Job controller (the backup scenarios)
        env.helm_warnings = warnings  # type: ignore[attr-defined]
        await env.start_operator()
        try:
            yield env
        finally:
            await env.stop_all_operators()
        refused = permission_warnings(workdir)
        assert not refused, "the operator, as the chart's ServiceAccount, was refused or warned about permissions:\n" + (
            "\n".join(refused[:10]))
    # the namespace controller removes what the scenario left; the Node is the kubelet fixture's own
    for kind, name in (("Namespace", ns), ("Node", config.node_name)):
        with contextlib.suppress(ApiError, OSError):
            admin.call_delete("v1", kind, name)

