"""The install commands of docs/kubernetes.md, run verbatim against a real control plane (``make e2e-control-plane``).

The ``bash`` blocks under "With Helm" and "With kubectl apply" are read from the document, continuation lines
joined, and each line is run by ``bash -c`` exactly as written, with the real ``helm`` and ``kubectl``
(``.tools/bin`` first on ``PATH``) and ``KUBECONFIG`` naming the administrator's kubeconfig, as a user's shell has
it. The document changing changes what runs; a command that fails fails the test with its output.

What the commands cannot do here is run the operator's Deployment (the control plane has no Deployment controller
and ``registry.example/ozone-scm`` is a placeholder): once the ServiceAccount exists, the test starts the operator
process authenticated as that ServiceAccount (watching every namespace, as the chart's and the manifests' ClusterRole
allow), and the kubelet fixture runs the Pods of the ``default`` namespace, labelled ``enforce=restricted`` first.
``kubectl get oscm -w`` is read until the ring's row says Ready 3/3, then stopped as a user stops it (SIGINT).

This test has its own control plane: the commands use fixed names (the namespace ``ozone-scm-system``, the ClusterRole
``ozone-scm-operator``, ``default/scm``) that the other scenarios' per-namespace installs must not meet.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.controlplane.env import helm, permission_warnings
from tests.e2e.controlplane.fixture import (
    RESTRICTED,
    TOOLS_BIN,
    ControlPlane,
    RealAPI,
    kubeconfig,
    wait_until,
)
from tests.e2e.local.kubelet import Kubelet, KubeletConfig
from tests.e2e.local.operator_env import IMAGES, Env

pytestmark = pytest.mark.control_plane
REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "kubernetes.md"
OPERATOR_NS = "ozone-scm-system"
OPERATOR_SA = "ozone-scm-operator"
READY_ROW = re.compile(r"^scm\s+True\s+3/3\s+scm-\d+\s+Running\s")


def doc_commands(heading: str) -> list[str]:
    """The command lines of the first ``bash`` block under ``heading`` (backslash continuations joined; comment-only
    lines dropped; a trailing comment stays: bash ignores it)."""
    text = DOC.read_text()
    at = text.index(f"\n{heading}\n")
    start = text.index("```bash\n", at) + len("```bash\n")
    block = text[start:text.index("```", start)]
    commands: list[str] = []
    current = ""
    for line in block.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        commands.append(current + line.strip())
        current = ""
    assert commands, f"no commands under {heading!r} in {DOC}"
    return commands


def shell_env(cp: ControlPlane) -> dict[str, str]:
    return {**os.environ, "PATH": f"{TOOLS_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "KUBECONFIG": str(cp.admin_kubeconfig), "HELM_CACHE_HOME": str(cp.workdir / "helm-cache"),
            "HELM_CONFIG_HOME": str(cp.workdir / "helm-config")}


def run(cp: ControlPlane, command: str, timeout: float = 900) -> str:
    """One documented command line through bash; its stdout (stderr too on failure, in the assertion)."""
    result = subprocess.run(["bash", "-c", command], cwd=REPO, env=shell_env(cp), capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"`{command}` failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result.stdout


async def watch_until_ready(cp: ControlPlane, command: str, timeout: float) -> list[str]:
    """``kubectl get oscm -w`` as written; its lines until the ring's row is Ready 3/3, then SIGINT (Ctrl-C)."""
    proc = await asyncio.create_subprocess_exec("bash", "-c", f"exec {command}", cwd=REPO, env=shell_env(cp),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(timeout):
            while not (lines and READY_ROW.match(lines[-1])):
                raw = await proc.stdout.readline()
                assert raw, f"`{command}` ended early: {lines}"
                lines.append(raw.decode().rstrip())
    except TimeoutError:
        raise AssertionError(f"`{command}`: no Ready 3/3 row within {timeout:.0f}s: {lines[-10:]}") from None
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
    return lines


class Cluster:
    """The kubelet fixture for the operator's namespace (where the docs create the cluster) and the operator process
    as the chart's ServiceAccount, with the Deployment's arguments (it watches its own namespace only)."""

    def __init__(self, cp: ControlPlane, workdir: Path, kubelet: Kubelet) -> None:
        self.cp, self.workdir, self.kubelet = cp, workdir, kubelet
        self.env: Env | None = None

    async def start_operator(self, name: str) -> None:
        admin = self.cp.admin()
        wait_until(lambda: admin.get_object("v1", "ServiceAccount", OPERATOR_SA, OPERATOR_NS), 30,
                   f"ServiceAccount {OPERATOR_NS}/{OPERATOR_SA}")
        token = admin.service_account_token(OPERATOR_NS, OPERATOR_SA)
        config = kubeconfig(self.workdir / f"{name}.kubeconfig", self.cp.url, self.cp.ca_crt, token, OPERATOR_NS)
        if self.env is None:  # one Env: its operator logs are numbered operator-1.log, operator-2.log, ...
            self.env = Env(RealAPI(self.cp.url, self.cp.ca_crt, self.cp.admin_token), self.cp.url, self.kubelet,
                           self.workdir, OPERATOR_NS)
        self.env.operator_args = ["--kubeconfig", str(config), "-n", OPERATOR_NS]
        await self.env.start_operator()

    async def stop_operator(self) -> None:
        if self.env is not None:
            await self.env.stop_operator()


@pytest.fixture
async def docs_cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    with ControlPlane(tmp_path / "control-plane") as cp:
        config = KubeletConfig(workdir=tmp_path / "kubelet", runtime="process", images=dict(IMAGES),
                               backoff_base=0.5, backoff_cap=4.0, namespaces={OPERATOR_NS}, api_token=cp.admin_token,
                               api_ca=str(cp.ca_crt), node_name="local-node-docs")
        async with Kubelet(cp.url, config) as kubelet:
            cluster = Cluster(cp, tmp_path, kubelet)
            try:
                yield cluster
            finally:
                await cluster.stop_operator()


async def test_install_commands_of_the_docs_work_verbatim(docs_cluster: Cluster) -> None:
    cp, admin = docs_cluster.cp, docs_cluster.cp.admin()

    # "With Helm": install, a cluster from the example, watch it become Ready, wait, describe
    commands = doc_commands("### With Helm")
    assert commands[0].startswith("helm install ozone-scm-operator charts/ozone-scm-operator -n ozone-scm-system")
    assert any(c.startswith("kubectl describe") and "oscm scm" in c for c in commands), commands
    described = listed = ""
    for command in commands:
        if " -w" in command.split("#")[0]:
            lines = await watch_until_ready(cp, command, 600)
            assert lines[0].split()[:5] == ["NAME", "READY", "MEMBERS", "LEADER", "PHASE"], lines
            continue
        out = run(cp, command)
        if command.startswith("helm install"):
            assert "STATUS: deployed" in out, out
            # the namespace helm created enforces Pod Security restricted before anything runs in it
            admin.patch_object("v1", "Namespace", OPERATOR_NS, None, {"metadata": {"labels": RESTRICTED}})
            await docs_cluster.start_operator("operator-helm")  # what the chart's Deployment would run
        elif "-f crds/examples/scm-minimal.yaml" in command and command.startswith("kubectl apply"):
            assert "ozonescmcluster.ozone-scm.io/scm created" in out, out
        elif command.startswith("kubectl wait"):
            assert "ozonescmcluster.ozone-scm.io/scm condition met" in out, out
        elif command.startswith("kubectl describe"):
            described = out
        elif command.startswith("kubectl get events"):
            listed = out
    status = (admin.get_object("ozone-scm.io/v1alpha1", "OzoneSCMCluster", "scm", OPERATOR_NS) or {})["status"]
    # kubectl describe spells the status's fields out ("clusterID" as "Cluster Id")
    for expected in (r"^Name:\s+scm$", r"^Kind:\s+OzoneSCMCluster$", r"^Status:$", rf"^  Cluster Id:\s+{status['clusterID']}$",
                     r"^  Conditions:$", r"^    Reason:\s+AllMembersReady$", r"^  Members Ready:\s+3/3$",
                     r"^  Phase:\s+Running$", rf"^  Leader:\s+{status['leader']}$", r"^Events:$",
                     r"^  Normal\s+ClusterReady\s", *(rf"^    Name:\s+{m['name']}$" for m in status["members"])):
        assert re.search(expected, described, re.M), f"{expected!r} not in kubectl describe:\n{described}"
    # the operator posts through events.k8s.io/v1; the real server shows the same Events through core v1 (describe,
    # get events): each names the operator as reportingController, its replica and the action
    assert re.search(r"^\S+\s+Normal\s+ClusterReady\s+ozonescmcluster/scm\s", listed, re.M), listed
    posted = [e for e in admin.list_objects("events.k8s.io/v1", "Event", OPERATOR_NS)
              if e["regarding"].get("kind") == "OzoneSCMCluster"]
    assert posted and all(e["reportingController"] == "ozone-scm.io/operator" and e["reportingInstance"]
                          and e["action"] and e["eventTime"] for e in posted), posted
    assert {"CreatePod", "Reconcile"} <= {e["action"] for e in posted}, posted
    await docs_cluster.stop_operator()
    helm(cp, "uninstall", "ozone-scm-operator", "-n", OPERATOR_NS)

    # "With kubectl apply": the rendered manifests instead of the release; the ring is kept and served again
    commands = doc_commands("### With kubectl apply")
    assert commands[0].startswith("kubectl apply -f manifests/"), commands
    for command in commands:
        out = run(cp, command)
        if command.startswith("kubectl apply -f manifests/"):
            assert "deployment.apps/ozone-scm-operator created" in out, out
            await docs_cluster.start_operator("operator-manifests")
            # the manifests' RBAC is enough for real work: a deleted member Pod is created again by the operator
            uid = (admin.get_object("v1", "Pod", "scm-1", OPERATOR_NS) or {})["metadata"]["uid"]
            admin.call_delete("v1", "Pod", "scm-1", OPERATOR_NS)
        elif command.startswith("kubectl get oscm"):
            assert out.splitlines()[0].split()[:5] == ["NAME", "READY", "MEMBERS", "LEADER", "PHASE"], out
            assert any(line.startswith("scm ") for line in out.splitlines()[1:]), out
    assert docs_cluster.env is not None
    await docs_cluster.env.wait_for(
        lambda: ((p := admin.get_object("v1", "Pod", "scm-1", OPERATOR_NS)) and p["metadata"]["uid"] != uid
                 and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))),
        300, "scm-1 created again by the operator installed from manifests/ and ready")
    await docs_cluster.env.wait_ready("scm", timeout=300)
    out = run(cp, f"kubectl get oscm -n {OPERATOR_NS}")
    assert any(READY_ROW.match(line) for line in out.splitlines()), out
    refused = permission_warnings(docs_cluster.workdir)
    assert not refused, "the operator was refused or warned about permissions:\n" + "\n".join(refused[:10])
