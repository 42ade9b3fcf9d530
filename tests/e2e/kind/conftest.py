"""Fixtures of the kind tier: a kind cluster (created from kind-config.yaml with a host directory mounted at the
local-path provisioner's directory on every node, or an existing one named by KIND_CLUSTER whose mount KIND_VOLUMES_DIR
names), the project images loaded into it under the tags the scenarios use, a cluster-admin token for the test, and a
route from this machine to every node's Pod CIDR (the operator process and the scenarios' checks reach the SCMs by
Pod IP, as in the other tiers); kubectl/helm helpers.

Selected by ``make e2e-kind`` (``OZONE_SCM_KIND=1``); otherwise every test here is skipped with a message that
says why (``make test`` also deselects the ``kind`` marker, so these never count as passing there).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.controlplane.fixture import RealAPI

ROOT = Path(__file__).resolve().parents[3]
TOOLS = ROOT / ".tools" / "bin"
HERE = Path(__file__).resolve().parent
IMAGE = os.environ.get("OZONE_SCM_IMAGE", "ozone-scm:dev")
AUDIT_IMAGE = os.environ.get("OZONE_SCM_AUDIT_IMAGE", "ozone-scm-audit:dev")
# The tags the scenarios name (the default image, the roll's target; the audit image derived from the default):
# each is the built image under another name, so a change of tag is a new revision and rolls the members.
TAGS = {IMAGE: ("ozone-scm:0.1.0", "ozone-scm:0.2.0"), AUDIT_IMAGE: ("ozone-scm-audit:0.1.0",)}
ENGINE = "podman" if os.environ.get("KIND_EXPERIMENTAL_PROVIDER") == "podman" else "docker"
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


class KindCluster:
    """The kind cluster as ``kind_env.kind_environment`` uses it: the API server's URL and CA, an administrator's
    token and kubeconfig, the host directory behind every node's volumes, the container engine of the nodes."""

    def __init__(self, name: str, kubeconfig: Path, workdir: Path, volumes: Path) -> None:
        self.name, self.workdir, self.volumes, self.engine = name, workdir, volumes, ENGINE
        self.kube = Kube(kubeconfig)
        cluster = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
        self.url = str(cluster["server"])
        self.ca_crt = workdir / "ca.crt"
        self.ca_crt.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        self.kubectl("create", "serviceaccount", "e2e-admin", "-n", "kube-system")
        self.kubectl("create", "clusterrolebinding", "e2e-admin", "--clusterrole=cluster-admin",
                     "--serviceaccount=kube-system:e2e-admin")
        self.admin_token = self.kubectl("create", "token", "e2e-admin", "-n", "kube-system", "--duration=6h").strip()
        self.admin_kubeconfig = kubeconfig

    def admin(self) -> RealAPI:
        return RealAPI(self.url, self.ca_crt, self.admin_token)

    def check_alive(self) -> None:
        self.kubectl("get", "--raw", "/readyz")

    def kubectl(self, *args: str, timeout: float = 120) -> str:
        return self.kube.kubectl(*args, timeout=timeout).stdout


def _pod_routes(cluster: KindCluster) -> list[str]:
    """Route every node's Pod CIDR through the node's address on the kind network; the routes added."""
    added = []
    for node in json.loads(cluster.kubectl("get", "nodes", "-o", "json"))["items"]:
        cidr = node["spec"].get("podCIDR")
        ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
        if cidr:
            subprocess.run(["ip", "route", "replace", cidr, "via", ip], check=True, timeout=30)
            added.append(cidr)
    return added


@pytest.fixture(scope="session")
def kind_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KindCluster]:
    existing = os.environ.get("KIND_CLUSTER")
    name = existing or "ozone-scm-e2e"
    workdir = tmp_path_factory.mktemp("kind")
    kubeconfig = workdir / "kubeconfig"
    kind = _tool("kind")
    if existing:
        volumes_env = os.environ.get("KIND_VOLUMES_DIR")
        if not volumes_env:
            pytest.fail("KIND_CLUSTER is set but KIND_VOLUMES_DIR is not: name the host directory the cluster mounts "
                        "at /var/local-path-provisioner on every node (see tests/e2e/kind/README.md)")
        volumes = Path(volumes_env)
        subprocess.run([kind, "export", "kubeconfig", "--name", name, "--kubeconfig", str(kubeconfig)], check=True)
    else:
        volumes = workdir / "volumes"
        volumes.mkdir(mode=0o777)
        config = yaml.safe_load((HERE / "kind-config.yaml").read_text())
        for node in config["nodes"]:
            node["extraMounts"] = [{"hostPath": str(volumes), "containerPath": "/var/local-path-provisioner"}]
        (workdir / "kind-config.yaml").write_text(yaml.safe_dump(config))
        subprocess.run([kind, "create", "cluster", "--config", str(workdir / "kind-config.yaml"), "--name", name,
                        "--kubeconfig", str(kubeconfig), "--wait", "300s"], check=True, timeout=900)
    routes: list[str] = []
    try:
        for image, tags in TAGS.items():
            for tag in tags:
                _load_image(kind, name, image, tag)
        cluster = KindCluster(name, kubeconfig, workdir, volumes)
        routes = _pod_routes(cluster)
        yield cluster
    finally:
        for cidr in routes:
            subprocess.run(["ip", "route", "del", cidr], check=False, timeout=30)
        if not existing:
            subprocess.run([kind, "delete", "cluster", "--name", name], check=False, timeout=300)


def _load_image(kind: str, cluster: str, image: str, tag: str) -> None:
    """``kind load`` ``image`` under the name ``tag`` (tagged in the engine that holds it; Podman through an archive)."""
    if shutil.which("docker") and subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0:
        subprocess.run(["docker", "tag", image, tag], check=True, timeout=60)
        subprocess.run([kind, "load", "docker-image", tag, "--name", cluster], check=True, timeout=600)
        return
    if shutil.which("podman") and subprocess.run(["podman", "image", "exists", image]).returncode == 0:
        archive = Path("/tmp") / f"ozone-scm-image-{os.getpid()}.tar"
        try:
            subprocess.run(["podman", "tag", image, tag], check=True, timeout=60)
            subprocess.run(["podman", "save", "-o", str(archive), tag], check=True, timeout=600)
            subprocess.run([kind, "load", "image-archive", str(archive), "--name", cluster], check=True, timeout=600)
        finally:
            archive.unlink(missing_ok=True)
        return
    pytest.fail(f"image {image} is in neither docker nor podman: build it first (make image, make audit-image)")
