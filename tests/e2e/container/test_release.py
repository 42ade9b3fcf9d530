"""Installing from a registry: ``scripts/release.py`` (what ``make release`` runs after building the images) pushes
the SCM image, the audit image and the Helm chart to a real OCI registry (Debian's ``docker-registry``, started here
on loopback with its own configuration and storage), and renders the versioned release manifest. Then, on the
emulated API server with the kubelet fixture running Pods as podman containers:

* ``helm install oci://127.0.0.1:<port>/charts/ozone-scm-operator --version <v> --plain-http``, or
* ``kubectl apply -f dist/ozone-scm-operator-<v>.yaml``,

installs the CRD (whose default member image is the release's), RBAC and the operator Deployment naming the
release's image. The emulator enforces RBAC, so the release's Role is all the operator gets:

* after ``helm install oci://``, the operator runs **in the Deployment's own Pods** (as many as its replicas, one
  holding the Lease), made from the installed template by a stand-in for the Deployment controller together with
  what the ServiceAccount admission adds (the projected token, ``kube-root-ca.crt``, the namespace) and the
  ``KUBERNETES_SERVICE_*`` variables; the kubelet fixture pulls their image from the registry and runs them as podman
  containers, and the operator inside uses the ``kubernetes`` client's in-cluster configuration against the
  emulator served over HTTPS on the Pod network's gateway (a TLS front passing bytes to the emulator on loopback);
* after ``kubectl apply -f``, the operator runs as a process on the host with the installed Deployment's arguments,
  authenticated as the release's ServiceAccount.

Either way it makes an ``OzoneSCMCluster`` that names no image in the release's namespace (Pod Security
``restricted``); every container the kubelet fixture runs from the release's image (the member's and, in the first
case, the operator's own) reports ``image`` the release's reference and ``imageID``
``<registry>/ozone-scm@<digest>`` with the digest the release pushed. The operator must never be refused nor warn
about permissions.

Not part of ``make test``: ``make e2e-container`` runs it after building the images (``.ci/run`` does both).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import json
import os
import socket
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from scm_server.ports import free_port
from tests.e2e.local.apiserver import EmulatedAPIServer, serving, write_kubeconfig
from tests.e2e.local.clusterdns import IP_FREEBIND
from tests.e2e.local.kubelet import Kubelet, KubeletConfig
from tests.e2e.local.operator_env import PERMISSION_SIGNS, Env, permission_warnings

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


# ---------------------------------------------------------------------------------------------------------------
# The operator's own Pod (helm-oci): what a cluster gives a Deployment's Pod, played here

SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def _serving_pki(directory: Path, ip: str) -> tuple[Path, Path, Path]:
    """A CA and a serving certificate for ``ip`` (the API server's address as the Pods dial it): ca.crt, tls.crt,
    tls.key."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ozone-scm-test-emulator-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip)),
                                                        x509.DNSName("kubernetes.default.svc")]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = (directory / "ca.crt", directory / "tls.crt", directory / "tls.key")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


@contextlib.asynccontextmanager
async def _https_front(host: str, backend_url: str, cert: Path, key: Path) -> AsyncIterator[int]:
    """The emulator over HTTPS on ``host`` (the Pod network's gateway), as Pods reach an API server: a TLS front that
    passes each connection's bytes to the emulator's plain HTTP port on loopback (bearer tokens included)."""
    backend = backend_url.removeprefix("http://")
    b_host, b_port = backend.rsplit(":", 1)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            b_reader, b_writer = await asyncio.open_connection(b_host, int(b_port))
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, b_writer), pipe(b_reader, writer))

    port = free_port()
    # IP_FREEBIND, as the fixture's cluster DNS on the same address: podman brings the bridge (and so the gateway
    # address) up only when the first container joins the network
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
    sock.bind((host, port))
    server = await asyncio.start_server(handle, sock=sock, ssl=ctx)
    try:
        yield port
    finally:
        server.close()
        await server.wait_closed()


def _deployment_pods(deployment: dict[str, Any], api_host: str, api_port: int) -> list[dict[str, Any]]:
    """The Pods a Deployment controller would create from the template (one per replica), with what the API
    server's ServiceAccount admission adds (the projected ``kube-api-access`` volume: a bound token, the cluster CA
    from ``kube-root-ca.crt``, the namespace) and the ``KUBERNETES_SERVICE_*`` variables a kubelet sets."""
    meta, template = deployment["metadata"], deployment["spec"]["template"]
    pods = []
    for i in range(int(deployment["spec"].get("replicas", 1))):
        spec = json.loads(json.dumps(template["spec"]))
        spec["volumes"] = [*spec.get("volumes", []), {"name": "kube-api-access", "projected": {"sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                          "fieldPath": "metadata.namespace"}}]}},
        ]}}]
        for c in spec["containers"]:
            c["volumeMounts"] = [*c.get("volumeMounts", []), {"name": "kube-api-access", "mountPath": SA_MOUNT,
                                                              "readOnly": True}]
            c["env"] = [*c.get("env", []), {"name": "KUBERNETES_SERVICE_HOST", "value": api_host},
                        {"name": "KUBERNETES_SERVICE_PORT", "value": str(api_port)}]
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"{meta['name']}-5d8f7c9b4-{'abcdefghij'[i]}x{i}kq", "namespace": meta["namespace"],
            "labels": {**template["metadata"].get("labels", {}), "pod-template-hash": "5d8f7c9b4"}}, "spec": spec})
    return pods


def _in_pod_permission_warnings(kubelet: Kubelet, pods: list[str]) -> list[str]:
    return [f"{pod}: {line}" for pod in pods for line in kubelet.logs(NAMESPACE, pod, "operator").splitlines()
            if any(sign in line for sign in PERMISSION_SIGNS)]


def _pod_ready(api: EmulatedAPIServer, name: str) -> bool:
    pod = api.get_object("v1", "Pod", name, NAMESPACE) or {}
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or ())


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
        async with Kubelet(url, config) as kubelet, contextlib.AsyncExitStack() as stack:
            env = Env(api, url, kubelet, tmp_path, NAMESPACE, operator_args=_operator_args(container,
                                                                                             operator_kubeconfig))
            # helm-oci: the operator runs in the Deployment's own Pods, from the image the kubelet fixture pulls from
            # the registry, reaching the API server as a Pod does (in-cluster configuration, its ServiceAccount's
            # token); kubectl-manifest: the Deployment's command line as a process on the host
            in_pod = install == "helm-oci"
            operator_pods: list[str] = []
            if in_pod:
                gateway = kubelet.network.host_ip
                ca, crt, key = _serving_pki(tmp_path, gateway)
                port = await stack.enter_async_context(_https_front(gateway, url, crt, key))
                api.put_object({"apiVersion": "v1", "kind": "ConfigMap",  # kube-controller-manager publishes it
                                "metadata": {"name": "kube-root-ca.crt", "namespace": NAMESPACE},
                                "data": {"ca.crt": ca.read_text()}})
                for body in _deployment_pods(deployment, gateway, port):
                    api.put_object(body)
                    operator_pods.append(body["metadata"]["name"])
                try:
                    await env.wait_for(lambda: any(_pod_ready(api, p) for p in operator_pods), 300,
                                       "an operator Pod ready")
                except TimeoutError as exc:
                    raise AssertionError(f"{exc}\n" + "\n".join(
                        kubelet.logs(NAMESPACE, p)[-3000:] for p in operator_pods)) from None
            else:
                await env.start_operator()
            try:
                # no image: the release's CRD default names the registry's image
                await env.create("scm", {"replicas": 1, "storage": {"size": "1Gi"}})
                try:
                    await env.wait_ready("scm", timeout=420, replicas=1)
                except TimeoutError as exc:
                    operator_log = ("\n".join(kubelet.logs(NAMESPACE, p)[-3000:] for p in operator_pods) if in_pod
                                    else env.operator_output()[-3000:])
                    raise AssertionError(f"{exc}\n{kubelet.logs(NAMESPACE, 'scm-0')[-2000:]}\n"
                                         f"{operator_log}") from None
            finally:
                if not in_pod:
                    await env.stop_operator()
            assert env.cluster("scm")["spec"]["image"] == scm["reference"]
            pod = env.pods("scm")["scm-0"]
            statuses = [*pod["status"].get("initContainerStatuses", []), *pod["status"]["containerStatuses"]]
            assert statuses, "the member Pod reports no containers"
            repository = scm["reference"].rsplit(":", 1)[0]
            for name in operator_pods:  # the operator's own containers: the registry's image, by the pushed digest
                op_pod = api.get_object("v1", "Pod", name, NAMESPACE) or {}
                op_statuses = (op_pod.get("status") or {}).get("containerStatuses") or []
                assert [s["name"] for s in op_statuses] == ["operator"], op_pod.get("status")
                statuses += op_statuses
            for status in statuses:
                assert status["image"] == scm["reference"], status
                # pulled by the kubelet fixture from the registry, by the digest the release pushed
                assert status["imageID"] == f"{repository}@{scm['digest']}", status
            in_pod_warnings = _in_pod_permission_warnings(kubelet, operator_pods)
            if in_pod:
                # one replica holds the Lease; the other stands by, ready too (a rolling update needs it)
                lease = api.get_object("coordination.k8s.io/v1", "Lease", deployment["metadata"]["name"], NAMESPACE)
                assert lease is not None and lease["spec"]["holderIdentity"] in operator_pods, lease
                await env.wait_for(lambda: all(_pod_ready(api, p) for p in operator_pods), 60,
                                   "every operator Pod ready")
                # the cluster's Events come from the in-Pod operator: its Pod name is the reportingInstance
                instances = {e.get("reportingInstance") for e in api.list_objects("v1", "Event", NAMESPACE)
                             if (e.get("involvedObject") or {}).get("kind") == "OzoneSCMCluster"}
                assert instances and instances <= set(operator_pods), (instances, operator_pods)
        operator_user = f"system:serviceaccount:{NAMESPACE}:{template['serviceAccountName']}"
        refused = [r for r in api.refusals if operator_user in r] + permission_warnings(tmp_path) + in_pod_warnings
        assert not refused, "the release's RBAC refused the operator:\n" + "\n".join(refused[:10])
        assert api.internal_errors == []
