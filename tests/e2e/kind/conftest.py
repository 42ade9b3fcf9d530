"""Fixtures of the kind tier: a kind cluster (created from kind-config.yaml, or an existing one named by
KIND_CLUSTER), the project image loaded into it, the chart installed with helm, and kubectl/helm helpers.

Selected by ``make e2e-kind`` (``OZONE_SCM_KIND=1``); otherwise every test here is skipped with a message that
says why (``make test`` also deselects the ``kind`` marker, so these never count as passing there).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
TOOLS = ROOT / ".tools" / "bin"
HERE = Path(__file__).resolve().parent
IMAGE = os.environ.get("OZONE_SCM_IMAGE", "ozone-scm:dev")
OPERATOR_NS = "ozone-scm-system"
SCENARIO_NS = "ozone-e2e"  # where the scenarios run: the operator watches it (watchNamespaces)
NOT_SELECTED = ("the kind tier needs a real Kubernetes cluster (kind + a container engine), which the project's "
                "machines do not have; run it with `make e2e-kind` where kind is available (tests/e2e/kind/README.md)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("OZONE_SCM_KIND") == "1":
        return
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.skip(reason=NOT_SELECTED))


def _tool(name: str) -> str:
    local = TOOLS / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} not found: install it (make k8s-tools for kubectl and helm; kind from its releases)")
    return found


class Kube:
    """kubectl/helm against the kind cluster's kubeconfig, as a user runs them."""

    def __init__(self, kubeconfig: Path) -> None:
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig)}

    def run(self, tool: str, *args: str, check: bool = True, stdin: str | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([_tool(tool), *args], env=self.env, capture_output=True, text=True, input=stdin,
                                timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"{tool} {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result

    def kubectl(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.run("kubectl", *args, **kw)

    def helm(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.run("helm", *args, **kw)

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def wait(self, predicate: Any, timeout: float, what: str, interval: float = 2.0) -> Any:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                value = predicate()
                if value:
                    return value
            except (AssertionError, json.JSONDecodeError, KeyError) as exc:
                last = exc
            time.sleep(interval)
        raise AssertionError(f"{what}: not within {timeout}s (last error: {last})")


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    existing = os.environ.get("KIND_CLUSTER")
    name = existing or "ozone-scm-e2e"
    kubeconfig = tmp_path_factory.mktemp("kind") / "kubeconfig"
    kind = _tool("kind")
    if not existing:
        subprocess.run([kind, "create", "cluster", "--config", str(HERE / "kind-config.yaml"), "--name", name,
                        "--kubeconfig", str(kubeconfig), "--wait", "300s"], check=True, timeout=900)
    else:
        subprocess.run([kind, "export", "kubeconfig", "--name", name, "--kubeconfig", str(kubeconfig)], check=True)
    try:
        _load_image(kind, name)
        k = Kube(kubeconfig)
        # the production mode: the operator watches the scenarios' namespace only (a Role there, made first)
        k.kubectl("create", "namespace", SCENARIO_NS, check=False)
        k.helm("install", "ozone-scm-operator", str(ROOT / "charts" / "ozone-scm-operator"), "--namespace",
               OPERATOR_NS, "--create-namespace", "--wait", "--timeout", "5m", "--set", f"watchNamespaces={{{SCENARIO_NS}}}",
               "--set", f"image.repository={IMAGE.rsplit(':', 1)[0]}", "--set", f"image.tag={IMAGE.rsplit(':', 1)[1]}",
               "--set", "image.pullPolicy=Never", "--set", "operator.logLevel=DEBUG")
        yield k
    finally:
        if not existing:
            subprocess.run([kind, "delete", "cluster", "--name", name], check=False, timeout=300)


def _load_image(kind: str, cluster: str) -> None:
    """``kind load`` the image from Docker, or from Podman through an archive."""
    if shutil.which("docker") and subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode == 0:
        subprocess.run([kind, "load", "docker-image", IMAGE, "--name", cluster], check=True, timeout=600)
        return
    if shutil.which("podman"):
        archive = Path("/tmp") / f"ozone-scm-image-{os.getpid()}.tar"
        try:
            subprocess.run(["podman", "save", "-o", str(archive), IMAGE], check=True, timeout=600)
            subprocess.run([kind, "load", "image-archive", str(archive), "--name", cluster], check=True, timeout=600)
        finally:
            archive.unlink(missing_ok=True)
        return
    pytest.fail(f"image {IMAGE} is in neither docker nor podman: build it first (make image)")
