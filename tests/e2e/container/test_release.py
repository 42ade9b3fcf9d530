"""Installing from a registry: ``scripts/release.py`` (what ``make release`` runs after building the images) pushes
the SCM image, the audit image and the Helm chart to a real OCI registry (Debian's ``docker-registry``, started here
on loopback with its own configuration and storage), and renders the versioned release manifest. Then, on the
emulated API server with the kubelet fixture running Pods as podman containers:

* ``helm install oci://127.0.0.1:<port>/charts/ozone-scm-operator --version <v> --plain-http``, or
* ``kubectl apply -f dist/ozone-scm-operator-<v>.yaml``,

installs the CRD (whose default member image is the release's), RBAC and the operator Deployment naming the
release's image. The emulator enforces RBAC; the operator runs as a process on the host (the emulator has no
Deployment controller, and the API server listens on loopback only) with the installed Deployment's arguments,
authenticated as the release's ServiceAccount, so the release's Role is all it gets. It makes an
``OzoneSCMCluster`` that names no image in the release's namespace (Pod Security ``restricted``); the member Pod's
containers are pulled from the registry by the kubelet fixture: each container status reports ``imageID``
``<registry>/ozone-scm@<digest>`` with the digest the release pushed. The operator must never be refused nor warn
about permissions.

Not part of ``make test``: ``make e2e-container`` runs it after building the images (``.ci/run`` does both).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scm_server.ports import free_port
from tests.e2e.local.apiserver import serving, write_kubeconfig
from tests.e2e.local.kubelet import Kubelet, KubeletConfig
from tests.e2e.local.operator_env import Env, permission_warnings

pytestmark = pytest.mark.container
ROOT = Path(__file__).resolve().parents[3]
TOOLS = ROOT / ".tools" / "bin"
sys.path.insert(0, str(ROOT / "scripts"))
import local_registry  # noqa: E402 - scripts/local_registry.py, found through the line above

VERSION = "0.1.0-rc.1"
NAMESPACE = "ozone-scm-system"
SOURCE_IMAGES = ("localhost/ozone-scm:dev", "localhost/ozone-scm-audit:dev")


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real OCI registry on 127.0.0.1, its configuration and storage in the test's directory; stopped by PID."""
    for image in SOURCE_IMAGES:
        if subprocess.run(["podman", "image", "exists", image], capture_output=True).returncode != 0:
            pytest.fail(f"image {image} not found: run `make image audit-image` first (make e2e-container does)")
    root = tmp_path_factory.mktemp("registry")
    port = free_port()
    config = local_registry.write_config(root, port)
    log = open(root / "registry.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([local_registry.binary(), "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        local_registry.wait_ready(f"http://127.0.0.1:{port}")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def release(registry: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``scripts/release.py`` into the registry; the pushed references are then untagged locally, so the only
    copy under the registry's name is the registry's."""
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "release.py"), "--registry", registry,
                           "--version", VERSION, "--insecure", "--out", str(out)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, f"release failed:\n{proc.stdout}\n{proc.stderr}"
    published: dict[str, Any] = json.loads((out / f"release-{VERSION}.json").read_text())
    for image in published["images"].values():
        subprocess.run(["podman", "untag", image["reference"], image["reference"]], capture_output=True)
    assert Path(published["manifest"]).name == f"ozone-scm-operator-{VERSION}.yaml"
    return published


async def _tool(name: str, *args: str, kubeconfig: Path, home: Path) -> str:
    """helm or kubectl as a subprocess of this loop (the emulator serves on the same loop)."""
    tool = TOOLS / name
    assert os.access(tool, os.X_OK), f"{tool} is missing: run `make k8s-tools`"
    env = {**os.environ, "HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
           "HELM_DATA_HOME": str(home / "data"), "KUBECONFIG": str(kubeconfig)}
    proc = await asyncio.create_subprocess_exec(str(tool), *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, env=env, cwd=ROOT)
    out, err = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode == 0, f"{name} {' '.join(args)} failed:\n{out.decode()}\n{err.decode()}"
    return out.decode()


def _operator_args(container: dict[str, Any], kubeconfig: Path) -> list[str]:
    """The installed Deployment's command line for the operator process on the host: its args as rendered (the
    watched namespace, log level, poll interval; ``Env`` appends its own health port and poll interval after them),
    authenticated by ``kubeconfig`` instead of the in-cluster ServiceAccount mount."""
    assert container["command"] == ["ozone-scm-operator"], container["command"]
    return ["--kubeconfig", str(kubeconfig), *container["args"]]


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("install", ["helm-oci", "kubectl-manifest"])
async def test_release_installs_from_the_registry(install: str, release: dict[str, Any], registry: str,
                                                  tmp_path: Path) -> None:
    scm = release["images"]["ozone-scm"]
    async with serving() as (api, url):
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
        if install == "helm-oci":
            # the chart comes from the registry, not from the checkout
            await _tool("helm", "install", "ozone-scm-operator", release["chart"], "--version", VERSION,
                        "--plain-http", "--namespace", NAMESPACE, "--create-namespace", kubeconfig=kubeconfig,
                        home=tmp_path / "helm")
        else:
            await _tool("kubectl", "apply", "-f", release["manifest"], kubeconfig=kubeconfig, home=tmp_path / "helm")
        deployment = api.get_object("apps/v1", "Deployment", "ozone-scm-operator", NAMESPACE)
        assert deployment is not None, "the release installed no operator Deployment"
        template = deployment["spec"]["template"]["spec"]
        (container,) = template["containers"]
        assert container["image"] == scm["reference"], container["image"]
        crd = api.get_object("apiextensions.k8s.io/v1", "CustomResourceDefinition", "ozonescmclusters.ozone-scm.io")
        assert crd is not None, "the release installed no CRD"
        # RBAC as granted from here on: the release's own Role is all the operator gets. (helm and kubectl above
        # acted as the administrator before it was on: they send no bearer token over the emulator's plain HTTP.)
        admin = api.enable_rbac()
        api.patch_object("v1", "Namespace", NAMESPACE, None, {"metadata": {"labels": {
            "pod-security.kubernetes.io/enforce": "restricted"}}})
        token = api.service_account_token(NAMESPACE, template["serviceAccountName"])
        operator_kubeconfig = write_kubeconfig(tmp_path / "operator.kubeconfig", url, NAMESPACE, token)

        config = KubeletConfig(workdir=tmp_path / "kubelet", runtime="podman", backoff_base=0.5, backoff_cap=2.0,
                               insecure_registries=(registry,), api_token=admin)
        async with Kubelet(url, config) as kubelet:
            env = Env(api, url, kubelet, tmp_path, NAMESPACE, operator_args=_operator_args(container,
                                                                                             operator_kubeconfig))
            await env.start_operator()
            try:
                # no image: the release's CRD default names the registry's image
                await env.create("scm", {"replicas": 1, "storage": {"size": "1Gi"}})
                try:
                    await env.wait_ready("scm", timeout=420, replicas=1)
                except TimeoutError as exc:
                    raise AssertionError(f"{exc}\n{kubelet.logs(NAMESPACE, 'scm-0')[-2000:]}\n"
                                         f"{env.operator_output()[-3000:]}") from None
            finally:
                await env.stop_operator()
            assert env.cluster("scm")["spec"]["image"] == scm["reference"]
            pod = env.pods("scm")["scm-0"]
            statuses = [*pod["status"].get("initContainerStatuses", []), *pod["status"]["containerStatuses"]]
            assert statuses, "the member Pod reports no containers"
            repository = scm["reference"].rsplit(":", 1)[0]
            for status in statuses:
                assert status["image"] == scm["reference"], status
                # pulled by the kubelet fixture from the registry, by the digest the release pushed
                assert status["imageID"] == f"{repository}@{scm['digest']}", status
        operator_user = f"system:serviceaccount:{NAMESPACE}:{template['serviceAccountName']}"
        refused = [r for r in api.refusals if operator_user in r] + permission_warnings(tmp_path)
        assert not refused, "the release's RBAC refused the operator:\n" + "\n".join(refused[:10])
        assert api.internal_errors == []
