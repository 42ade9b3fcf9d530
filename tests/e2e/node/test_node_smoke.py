"""The node tier's smoke test (``make e2e-node``): what the kubelet fixture of the other tiers only plays, done by
a real kubelet, containerd and runc, kube-proxy and CoreDNS on one node (``cluster.Node``).

- the node registers and becomes Ready with the versions ``make k8s-node`` built and installed, and every Pod
  sandbox runs the project's own pause image;
- a Pod from the project's image (``make image``, loaded with ``ctr images import``) is admitted under Pod Security
  ``restricted`` (a non-compliant one is refused), runs with that security context applied by runc (non-root, no
  capabilities, no new privileges, seccomp filter), passes its readiness and liveness probes, and is reached from
  another Pod through a ClusterIP Service (kube-proxy's rules) by its DNS name (CoreDNS) and by the short name;
- kubelet restarts a container killed with SIGKILL, and one whose liveness probe fails;
- a PersistentVolumeClaim of the default StorageClass binds a local volume of the node, written as the Pod's
  ``fsGroup``, and may grow (``allowVolumeExpansion``);
- the chart, installed with its defaults, runs the operator in its own Deployment Pods from the project's image
  (one holds the Lease), reaching the API server through the ``kubernetes`` Service with the ServiceAccount's
  projected token, and that operator makes a one-member ring Ready.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.controlplane.env import install_operator_chart
from tests.e2e.controlplane.fixture import RESTRICTED, TOOLS_BIN, ApiError, RealAPI, wait_until
from tests.e2e.local.operator_env import FAST_SITE
from tests.e2e.node.cluster import NODE_NAME, PAUSE_IMAGE, STORAGE_CLASS, Node

pytestmark = pytest.mark.node

Obj = dict[str, Any]
_ns_counter = itertools.count(1)

# A tiny HTTP server in the project's image: "/" says who answers, "/healthz" fails once /tmp/unhealthy exists.
SERVER = """
import http.server, os, socket
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/healthz" and os.path.exists("/tmp/unhealthy"):
            self.send_response(500); self.end_headers(); return
        body = ("hello from " + socket.gethostname()).encode()
        self.send_response(200); self.end_headers(); self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("", 8080), Handler).serve_forever()
"""
# kube-proxy and CoreDNS learn of a new Service's endpoints asynchronously: each URL is retried for at most 30 s
# (the failures on stderr), so a Service that never works fails the Pod.
CLIENT = """
import socket, sys, time, urllib.request
for url in ("http://web.{ns}.svc.cluster.local/", "http://web/"):
    host, deadline = url.split("/")[2], time.monotonic() + 30
    while True:
        try:
            print(url, socket.gethostbyname(host), urllib.request.urlopen(url, timeout=5).read().decode(), flush=True)
            break
        except OSError as exc:
            print(url, "not yet:", exc, file=sys.stderr, flush=True)
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
"""


def restricted_pod(name: str, ns: str, image: str, command: list[str], **spec: Any) -> Obj:
    """A Pod that passes Pod Security ``restricted``, as the operator's members do."""
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "automountServiceAccountToken": False,
            "containers": [{
                "name": name, "image": image, "imagePullPolicy": "Never", "command": command,
                "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}], **spec.pop("container", {})}],
            "volumes": [{"name": "tmp", "emptyDir": {}}, *spec.pop("volumes", [])],
            **spec}}


def namespace(admin: RealAPI) -> str:
    ns = f"smoke-{os.getpid()}-{next(_ns_counter)}"
    admin.create_namespace(ns, RESTRICTED)
    return ns


def pod(admin: RealAPI, ns: str, name: str) -> Obj:
    out = admin.get_object("v1", "Pod", name, ns)
    assert out is not None, f"Pod {ns}/{name} is gone"
    return out


def wait_pod(node: Node, ns: str, name: str, check: Callable[[Obj], bool], what: str, timeout: float = 120) -> Obj:
    admin = node.admin()
    wait_until(lambda: check(pod(admin, ns, name)), timeout, f"Pod {ns}/{name}: {what}", poll=0.3,
               alive=node.check_alive)
    return pod(admin, ns, name)


def ready(p: Obj) -> bool:
    conds = {c["type"]: c["status"] for c in (p.get("status") or {}).get("conditions") or ()}
    return conds.get("Ready") == "True"


def container_status(p: Obj) -> Obj:
    statuses: list[Obj] = (p.get("status") or {}).get("containerStatuses") or []
    assert len(statuses) == 1, statuses
    return statuses[0]


def logs(admin: RealAPI, ns: str, name: str) -> str:
    """Through the API server, which asks kubelet (its client certificate against kubelet's client CA)."""
    return bytes(admin.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}/log", raw=True)).decode()


def task_pid(node: Node, container_id: str) -> int:
    """The host PID of a running container, from containerd."""
    cid = container_id.removeprefix("containerd://")
    for line in node.ctr("tasks", "ls").splitlines()[1:]:
        fields = line.split()
        if fields and fields[0] == cid and fields[2] == "RUNNING":
            return int(fields[1])
    raise AssertionError(f"container {cid} has no running task:\n{node.ctr('tasks', 'ls')}")


def proc_status(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def kubectl(node: Node, *args: str) -> str:
    assert node.cp is not None
    result = subprocess.run([str(TOOLS_BIN / "kubectl"), "--kubeconfig", str(node.cp.admin_kubeconfig), *args],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stdout}{result.stderr}"
    return result.stdout


def start_web(node: Node, ns: str, image: str) -> Obj:
    admin = node.admin()
    probe = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1, "failureThreshold": 2}
    admin.put_object(restricted_pod("web", ns, image, ["python3", "-c", SERVER], container={
        "ports": [{"containerPort": 8080}], "readinessProbe": probe, "livenessProbe": probe}))
    admin.put_object({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": ns},
                      "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    return wait_pod(node, ns, "web", ready, "Ready (its readiness probe passes)")


def test_the_node_is_ready_with_what_make_k8s_node_built(node: Node) -> None:
    admin = node.admin()
    n = admin.get_object("v1", "Node", NODE_NAME)
    assert n is not None and node.node_ready(admin)
    info = n["status"]["nodeInfo"]
    server = admin.request("GET", "/version")
    assert info["kubeletVersion"] == server["gitVersion"]  # one k8s.io/kubernetes build for both
    containerd = subprocess.run(["containerd", "--version"], capture_output=True, text=True, check=True).stdout
    assert info["containerRuntimeVersion"] == f"containerd://{containerd.split()[2].split('~')[0]}"
    dns = [p for p in admin.list_objects("v1", "Pod", "kube-system") if p["metadata"]["name"].startswith("coredns-")]
    assert len(dns) == 1 and ready(dns[0]) and dns[0]["spec"]["nodeName"] == NODE_NAME
    # every Pod sandbox runs the project's pause image (nothing else could have been pulled)
    sandboxes = [line for line in node.ctr("containers", "ls").splitlines()[1:] if PAUSE_IMAGE in line]
    assert sandboxes, node.ctr("containers", "ls")


def test_a_restricted_pod_is_served_through_a_service_by_its_dns_name(node: Node, scm_image: str) -> None:
    admin = node.admin()
    ns = namespace(admin)
    # Pod Security admission refuses what `restricted` forbids
    with pytest.raises(ApiError) as refused:
        admin.put_object({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root", "namespace": ns},
                          "spec": {"containers": [{"name": "c", "image": scm_image, "imagePullPolicy": "Never"}]}})
    assert refused.value.status == 403 and "violates PodSecurity" in str(refused.value)
    web = start_web(node, ns, scm_image)
    # runc applied the security context: uid 1000, no capabilities, no new privileges, a seccomp filter
    status = proc_status(task_pid(node, container_status(web)["containerID"]))
    assert status["Uid"].split()[0] == "1000" and status["CapEff"] == "0000000000000000"
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2"
    admin.put_object(restricted_pod("client", ns, scm_image, ["python3", "-c", CLIENT.format(ns=ns)],
                                    restartPolicy="Never"))
    done = wait_pod(node, ns, "client", lambda p: p["status"].get("phase") in ("Succeeded", "Failed"), "finished")
    out = logs(admin, ns, "client")
    assert done["status"]["phase"] == "Succeeded", out
    service_ip = admin.get_object("v1", "Service", "web", ns)["spec"]["clusterIP"]  # type: ignore[index]
    served = [line for line in out.splitlines() if " not yet: " not in line]  # the log holds stderr too
    assert served == [f"http://web.{ns}.svc.cluster.local/ {service_ip} hello from web",
                      f"http://web/ {service_ip} hello from web"], out
    admin.call_delete("v1", "Namespace", ns)


def test_kubelet_restarts_a_killed_container_and_a_failing_liveness_probe(node: Node, scm_image: str) -> None:
    admin = node.admin()
    ns = namespace(admin)
    web = start_web(node, ns, scm_image)
    first = container_status(web)
    assert first["restartCount"] == 0
    os.kill(task_pid(node, first["containerID"]), signal.SIGKILL)
    web = wait_pod(node, ns, "web", lambda p: container_status(p)["restartCount"] == 1 and ready(p),
                   "restarted after SIGKILL and Ready again")
    last = container_status(web)["lastState"]["terminated"]
    assert last["exitCode"] == 137 and last["containerID"] == first["containerID"]
    # the liveness probe fails once /tmp/unhealthy exists: kubelet kills and restarts the container (the emptyDir
    # outlives it, so the restarted one is made healthy again by removing the file from inside)
    kubectl(node, "-n", ns, "exec", "web", "--", "touch", "/tmp/unhealthy")
    web = wait_pod(node, ns, "web", lambda p: container_status(p)["restartCount"] >= 2, "restarted by liveness")
    events = admin.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
    assert any(e["reason"] == "Unhealthy" and "Liveness probe failed" in e["message"] for e in events), events
    kubectl(node, "-n", ns, "exec", "web", "--", "rm", "-f", "/tmp/unhealthy")
    wait_pod(node, ns, "web", ready, "Ready after the liveness restart")
    admin.call_delete("v1", "Namespace", ns)


def test_a_claim_of_the_default_class_binds_a_local_volume_that_may_grow(node: Node, scm_image: str) -> None:
    admin = node.admin()
    ns = namespace(admin)
    admin.put_object({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": ns},
                      "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}}})
    admin.put_object(restricted_pod(
        "writer", ns, scm_image, ["sh", "-c", "echo written > /data/proof && id -g && stat -c %g /data/proof"],
        restartPolicy="Never", container={"volumeMounts": [{"name": "tmp", "mountPath": "/tmp"},
                                                           {"name": "data", "mountPath": "/data"}]},
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]))
    done = wait_pod(node, ns, "writer", lambda p: p["status"].get("phase") in ("Succeeded", "Failed"), "finished")
    assert done["status"]["phase"] == "Succeeded", logs(admin, ns, "writer")
    claim = admin.get_object("v1", "PersistentVolumeClaim", "data", ns)
    assert claim is not None and claim["status"]["phase"] == "Bound"
    assert claim["spec"]["storageClassName"] == STORAGE_CLASS  # the default class was filled in
    pv = admin.get_object("v1", "PersistentVolume", claim["spec"]["volumeName"])
    assert pv is not None
    written = Path(pv["spec"]["local"]["path"]) / "proof"
    assert written.read_text() == "written\n" and written.stat().st_gid == 1000
    # the class allows expansion: the API server accepts a larger request (a class without it refuses)
    grown = admin.patch_object("v1", "PersistentVolumeClaim", "data", ns,
                               {"spec": {"resources": {"requests": {"storage": "8Gi"}}}})
    assert grown["spec"]["resources"]["requests"]["storage"] == "8Gi"
    admin.call_delete("v1", "Namespace", ns)


def test_the_charts_operator_pod_reaches_the_api_through_the_kubernetes_service_and_runs_a_ring(
        node: Node, scm_image: str) -> None:
    """``helm install`` with the chart's defaults in a ``restricted`` namespace: two operator Pods from the project's
    image (one holds the Lease, the other stands by), run by kubelet as non-root with no capabilities, their API
    server the ``kubernetes`` Service (kube-proxy) and their credentials the ServiceAccount's projected token; the
    active one creates a one-member ring that becomes Ready."""
    assert node.cp is not None
    admin = node.admin()
    ns = namespace(admin)
    release, _ = install_operator_chart(node.cp, ns)
    label = f"app.kubernetes.io/name={release}"

    def operator_pods() -> list[Obj]:
        return [p for p in admin.list_objects("v1", "Pod", ns)
                if (p["metadata"].get("labels") or {}).get("app.kubernetes.io/name") == release]

    wait_until(lambda: len([p for p in operator_pods() if ready(p)]) == 2, 240,
               f"the chart's two operator Pods Ready ({label})", poll=0.5, alive=node.check_alive)
    pods = {p["metadata"]["name"]: p for p in operator_pods()}
    for name, p in pods.items():
        assert p["spec"]["serviceAccountName"] == release
        assert p["spec"]["containers"][0]["image"] == f"{scm_image.split(':')[0]}:0.1.0"  # the chart's appVersion
        # runc applied the chart's security context
        status = proc_status(task_pid(node, container_status(p)["containerID"]))
        assert status["Uid"].split()[0] == "1000" and status["CapEff"] == "0000000000000000", (name, status)
        assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2", (name, status)
        # in-cluster configuration: the `kubernetes` Service's address and the projected token
        seen = kubectl(node, "-n", ns, "exec", name, "--", "python3", "-c",
                       "import os; print(os.environ['KUBERNETES_SERVICE_HOST'], os.environ['KUBERNETES_SERVICE_PORT']);"
                       "print(len(open('/var/run/secrets/kubernetes.io/serviceaccount/token').read()) > 0)")
        service = admin.get_object("v1", "Service", "kubernetes", "default")
        assert service is not None
        assert seen.split() == [service["spec"]["clusterIP"], "443", "True"], seen
    # one holds the Lease (leader election, as installed by default)
    wait_until(lambda: ((admin.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{release}")
                         .get("spec") or {}).get("holderIdentity") in pods), 60, "the Lease held by an operator Pod",
               poll=0.5, alive=node.check_alive)

    admin.put_object({"apiVersion": "ozone-scm.io/v1alpha1", "kind": "OzoneSCMCluster",
                      "metadata": {"name": "smoke", "namespace": ns},
                      "spec": {"replicas": 1, "ozoneSite": dict(FAST_SITE)}})

    def ring_ready() -> bool:
        obj = admin.get_object("ozone-scm.io/v1alpha1", "OzoneSCMCluster", "smoke", ns) or {}
        st = obj.get("status") or {}
        conds = {c["type"]: c["status"] for c in st.get("conditions") or ()}
        return conds.get("Ready") == "True" and [m.get("ready") for m in st.get("members") or ()] == [True]

    wait_until(ring_ready, 300, "the one-member ring Ready", poll=1, alive=node.check_alive)
    member = pod(admin, ns, "smoke-0")  # the member Pod is named after the cluster
    assert member["spec"]["nodeName"] == NODE_NAME and ready(member)
    # kubelet never had to restart an operator (a crash, or a failed liveness probe)
    assert all(container_status(p)["restartCount"] == 0 for p in operator_pods()), operator_pods()
    admin.call_delete("v1", "Namespace", ns)
