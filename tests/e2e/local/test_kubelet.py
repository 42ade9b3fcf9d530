"""The kubelet-playing fixture runs simple Pods as real processes, as a kubelet would (no operator involved).

Each Pod here is a small Python program (the repo's virtualenv interpreter, "image" ``local/python:3``) so that the
checks are about the fixture: scheduling, addresses and names, environment, volumes, probes, restarts, crashes,
termination, and clean-up of every process and namespace.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.local.apiserver import EmulatedAPIServer, serving
from tests.e2e.local.kubelet import Kubelet, KubeletConfig
from tests.e2e.local.podspec import ImageSpec
from tests.e2e.local.runtimes import ProcessContainer

PY = ImageSpec(entrypoint=(sys.executable,), env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
                                                  "PYTHONUNBUFFERED": "1"})
NS = "default"

# A tiny "server" program: serves GET /ready (200 when the file /data/ready exists, else 503) and GET /env/<name>
# and /resolve/<host> on the port in $PORT, bound to 0.0.0.0 (possible because each Pod has its own namespace).
SERVER = textwrap.dedent("""
    import http.server, os, socket, sys, signal
    signal.signal(signal.SIGTERM, lambda *a: (print("got SIGTERM", flush=True), sys.exit(0)))
    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def do_GET(self):
            if self.path == "/ready":
                ok = os.path.exists(os.environ.get("READY_FILE", "/data/ready"))
                self.send_response(200 if ok else 503); self.end_headers(); return
            if self.path.startswith("/env/"):
                body = os.environ.get(self.path[5:], "<unset>").encode()
            elif self.path.startswith("/resolve/"):
                try:
                    body = socket.gethostbyname(self.path[9:]).encode()
                except OSError as e:
                    body = f"error {e}".encode()
            elif self.path == "/hostname":
                body = socket.gethostname().encode()
            elif self.path.startswith("/file/"):
                try:
                    body = open(self.path[5:], "rb").read()
                except OSError as e:
                    body = f"error {e}".encode()
            else:
                body = b"?"
            self.send_response(200); self.end_headers(); self.wfile.write(body)
    http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ.get("PORT", "8080"))), H).serve_forever()
""")


def server_pod(name: str, **extra: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "local/python:3", "args": ["-c", SERVER],
                 "env": [{"name": "PORT", "value": "8080"}],
                 "ports": [{"name": "http", "containerPort": 8080}]}
    container.update(extra.pop("container", {}))
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"app": "demo"}},
            "spec": {"containers": [container], "terminationGracePeriodSeconds": 5, **extra}}


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[EmulatedAPIServer, Kubelet]]:
    async with serving() as (api, url):
        kubelet = Kubelet(url, KubeletConfig(workdir=tmp_path, images={"local/python:*": PY},
                                             backoff_base=0.2, backoff_cap=1.0))
        async with kubelet:
            yield api, kubelet
        assert api.internal_errors == []


def pod_of(api: EmulatedAPIServer, name: str) -> dict[str, Any] | None:
    return api.get_object("v1", "Pod", name, NS)


def condition(pod: dict[str, Any] | None, ctype: str) -> str | None:
    for c in ((pod or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return str(c["status"])
    return None


def restarts(pod: dict[str, Any] | None) -> int:
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or [{}]
    return int(statuses[0].get("restartCount", 0))


async def until(api: EmulatedAPIServer, fn: Callable[[], Any], timeout: float = 30) -> Any:
    return await api.wait_for(fn, timeout)


async def http_get(url: str, wait: float = 10) -> tuple[int, str]:
    """GET, retrying connection refusals until ``wait`` seconds have passed (the process may still be starting)."""
    deadline = asyncio.get_running_loop().time() + wait
    while True:
        try:
            async with aiohttp.ClientSession() as s, s.get(url, timeout=aiohttp.ClientTimeout(total=5)) as r:
                return r.status, await r.text()
        except aiohttp.ClientConnectorError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.05)


async def test_pod_runs_with_its_own_address_env_volumes_names_and_readiness(
        cluster: tuple[EmulatedAPIServer, Kubelet]) -> None:
    api, kubelet = cluster
    api.put_object({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "conf", "namespace": NS},
                    "data": {"greeting": "hello", "site.xml": "<configuration/>"}})
    api.put_object({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": NS},
                    "stringData": {"token": "s3cret"}})
    api.put_object({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "data-demo-0", "namespace": NS},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    api.put_object({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "demo-headless", "namespace": NS},
                    "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {"app": "demo"},
                             "ports": [{"port": 8080}]}})
    pod = server_pod("demo-0", hostname="demo-0", subdomain="demo-headless", container={
        "env": [{"name": "PORT", "value": "8080"},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "conf", "key": "greeting"}}},
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                {"name": "OZONE-SITE.XML_ozone.scm.names", "value": "$(POD_NAME)"}],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "conf", "mountPath": "/etc/demo"}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 1}})
    pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data-demo-0"}},
                              {"name": "conf", "configMap": {"name": "conf"}}]
    api.put_object(pod)
    running = await until(api, lambda: (p := pod_of(api, "demo-0")) and p["status"].get("phase") == "Running"
                          and p["status"].get("podIP") and p)
    ip = running["status"]["podIP"]
    assert ip != "127.0.0.1" and running["spec"]["nodeName"] == "local-node-1"
    assert condition(running, "Ready") == "False"  # /data/ready does not exist yet
    pvc = api.get_object("v1", "PersistentVolumeClaim", "data-demo-0", NS)
    assert pvc is not None and pvc["status"]["phase"] == "Bound"
    base = f"http://{ip}:8080"
    assert await http_get(f"{base}/env/POD_NAME") == (200, "demo-0")
    assert await http_get(f"{base}/env/POD_IP") == (200, ip)
    assert await http_get(f"{base}/env/GREETING") == (200, "hello")
    assert await http_get(f"{base}/env/TOKEN") == (200, "s3cret")
    assert await http_get(f"{base}/env/OZONE-SITE.XML_ozone.scm.names") == (200, "demo-0")
    assert await http_get(f"{base}/hostname") == (200, "demo-0")
    assert await http_get(f"{base}/file/etc/demo/site.xml") == (200, "<configuration/>")
    fqdn = "demo-0.demo-headless.default.svc.cluster.local"
    assert await http_get(f"{base}/resolve/{fqdn}") == (200, ip)
    assert await http_get(f"{base}/resolve/demo-headless.default.svc") == (200, ip)
    assert not Path("/etc/hosts").read_text().count(fqdn)  # the host's file is untouched
    # The PVC is a directory kept outside the pod; readiness follows the probe.
    pv = kubelet.pvc_dir(pvc)
    (pv / "ready").write_text("1")
    await until(api, lambda: condition(pod_of(api, "demo-0"), "Ready") == "True")
    # A ConfigMap change reaches the mounted file.
    api.patch_object("v1", "ConfigMap", "conf", NS, {"data": {"site.xml": "<configuration>2</configuration>"}})
    for _ in range(100):
        if (await http_get(f"{base}/file/etc/demo/site.xml"))[1] == "<configuration>2</configuration>":
            break
        await asyncio.sleep(0.05)
    assert (await http_get(f"{base}/file/etc/demo/site.xml"))[1] == "<configuration>2</configuration>"


async def test_crash_restart_and_graceful_deletion(cluster: tuple[EmulatedAPIServer, Kubelet]) -> None:
    api, kubelet = cluster
    api.put_object(server_pod("crashy"))
    first = await until(api, lambda: (p := pod_of(api, "crashy")) and condition(p, "Ready") == "True" and p)
    ip = first["status"]["podIP"]
    await kubelet.kill(NS, "crashy")
    restarted = await until(api, lambda: (p := pod_of(api, "crashy")) and restarts(p) == 1 and
                            condition(p, "Ready") == "True" and p)
    status = restarted["status"]["containerStatuses"][0]
    assert status["lastState"]["terminated"]["exitCode"] == 137
    assert restarted["status"]["podIP"] == ip  # a container restart keeps the Pod's address
    assert (await http_get(f"http://{ip}:8080/env/PORT")) == (200, "8080")
    # kubectl logs' path: pods/log through the API server, proxied to this kubelet (current and previous run).
    async with aiohttp.ClientSession() as s, s.get(
            f"{kubelet.api_url}/api/v1/namespaces/{NS}/pods/crashy/log", params={"previous": "true"}) as r:
        assert r.status == 200 and "import http" not in await r.text()
    async with aiohttp.ClientSession() as s, s.get(
            f"{kubelet.api_url}/api/v1/namespaces/{NS}/pods/crashy/log", params={"container": "nope"}) as r:
        assert r.status == 404
    worker = kubelet.worker(NS, "crashy")
    assert worker is not None and worker.addr is not None
    netns = worker.addr.netns
    api.call_delete("v1", "Pod", "crashy", NS)
    await until(api, lambda: pod_of(api, "crashy") is None)
    assert "got SIGTERM" in kubelet.logs(NS, "crashy", "main")
    if netns:
        assert netns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


async def test_prestop_hook_then_sigterm_then_sigkill_after_the_grace_period(
        cluster: tuple[EmulatedAPIServer, Kubelet], tmp_path: Path) -> None:
    api, kubelet = cluster
    stubborn = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('sig' + 'term-ignored', " \
               "flush=True)\n" \
               "while True: time.sleep(1)"
    out = tmp_path / "hook"
    out.mkdir()
    pod = server_pod("stubborn", terminationGracePeriodSeconds=1, container={
        "args": ["-c", stubborn],
        "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "echo prestop-ran > /hook/marker"]}}},
        "volumeMounts": [{"name": "hook", "mountPath": "/hook"}]})
    pod["spec"]["volumes"] = [{"name": "hook", "hostPath": {"path": str(out)}}]
    api.put_object(pod)
    await until(api, lambda: "sigterm-ignored" in kubelet.logs(NS, "stubborn"))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    api.call_delete("v1", "Pod", "stubborn", NS)
    await until(api, lambda: pod_of(api, "stubborn") is None)
    elapsed = loop.time() - t0
    assert (out / "marker").read_text().strip() == "prestop-ran"
    assert elapsed >= 0.9  # SIGTERM was ignored: the kubelet waited out the grace period before SIGKILL


async def test_failing_init_container_and_restart_policy_never(cluster: tuple[EmulatedAPIServer, Kubelet]) -> None:
    api, _kubelet = cluster
    pod = server_pod("init-fails", restartPolicy="Never")
    pod["spec"]["initContainers"] = [{"name": "setup", "image": "local/python:3",
                                      "args": ["-c", "import sys; sys.exit(3)"]}]
    api.put_object(pod)
    failed = await until(api, lambda: (p := pod_of(api, "init-fails")) and p["status"].get("phase") == "Failed"
                         and p)
    init = failed["status"]["initContainerStatuses"][0]
    assert init["state"]["terminated"]["exitCode"] == 3
    assert condition(failed, "Initialized") == "False"
    ok = server_pod("init-ok")
    ok["spec"]["initContainers"] = [{"name": "setup", "image": "local/python:3",
                                     "args": ["-c", "open('/scratch/x', 'w').write('from init')"],
                                     "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}]
    ok["spec"]["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    ok["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    api.put_object(ok)
    ready = await until(api, lambda: (p := pod_of(api, "init-ok")) and condition(p, "Ready") == "True" and p)
    assert await http_get(f"http://{ready['status']['podIP']}:8080/file/scratch/x") == (200, "from init")


async def test_termination_messages_from_the_file_or_the_log_tail(cluster: tuple[EmulatedAPIServer, Kubelet]) -> None:
    api, _kubelet = cluster

    def job_pod(name: str, code: str, **container: Any) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
                "spec": {"restartPolicy": "Never", "containers": [
                    {"name": "main", "image": "local/python:3", "args": ["-c", code], **container}]}}

    api.put_object(job_pod("says", "open('/dev/termination-log', 'w').write('{\"findings\": 3}')",
                           terminationMessagePolicy="FallbackToLogsOnError"))
    api.put_object(job_pod("fails", "import sys; print('first line'); print('export failed: no leader'); sys.exit(2)",
                           terminationMessagePolicy="FallbackToLogsOnError"))
    api.put_object(job_pod("custom", "open('/tmp/oscm-test-msg', 'w').write('custom path')",
                           terminationMessagePath="/tmp/oscm-test-msg"))
    api.put_object(job_pod("silent", "print('nothing to say')"))

    def terminated(name: str) -> dict[str, Any] | None:
        p = pod_of(api, name)
        if not p or p["status"].get("phase") not in ("Succeeded", "Failed"):
            return None
        return dict(p["status"]["containerStatuses"][0]["state"]["terminated"])

    for name in ("says", "fails", "custom", "silent"):
        await until(api, functools.partial(terminated, name))
    says = terminated("says") or {}
    assert (says.get("exitCode"), says.get("message")) == (0, '{"findings": 3}')
    fails = terminated("fails")
    assert fails is not None and fails["exitCode"] == 2
    assert fails["message"].splitlines()[-2:] == ["first line", "export failed: no leader"]
    assert (terminated("custom") or {}).get("message") == "custom path"
    assert "message" not in (terminated("silent") or {})


async def test_liveness_probe_restarts_and_unknown_image_waits(cluster: tuple[EmulatedAPIServer, Kubelet]) -> None:
    api, _kubelet = cluster
    api.put_object(server_pod("unhealthy", container={
        "livenessProbe": {"tcpSocket": {"port": 9999}, "periodSeconds": 1, "failureThreshold": 2}}))
    await until(api, lambda: restarts(pod_of(api, "unhealthy")) >= 1)
    api.put_object(server_pod("no-image", container={"image": "registry.example/none:1"}))
    waiting = await until(api, lambda: (p := pod_of(api, "no-image")) and
                          (p["status"].get("containerStatuses") or [{}])[0].get("state", {}).get("waiting", {})
                          .get("reason") == "ImagePullBackOff" and p)
    assert waiting["status"]["phase"] == "Pending"


async def test_missing_pvc_keeps_the_pod_pending_until_it_exists(cluster: tuple[EmulatedAPIServer, Kubelet]) -> None:
    api, _kubelet = cluster
    pod = server_pod("needs-pvc")
    pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "later"}}]
    api.put_object(pod)
    pending = await until(api, lambda: condition(pod_of(api, "needs-pvc"), "PodScheduled") == "False" and
                          pod_of(api, "needs-pvc"))
    assert not pending["spec"].get("nodeName")
    api.put_object({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "later",
                                                                                     "namespace": NS},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    await until(api, lambda: condition(pod_of(api, "needs-pvc"), "Ready") == "True")


async def test_pvc_outlives_pod_restarts_and_is_deleted_after_its_pod(cluster: tuple[EmulatedAPIServer, Kubelet]) \
        -> None:
    api, kubelet = cluster
    api.put_object({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "keep",
                                                                                     "namespace": NS},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    pod = server_pod("writer", container={"volumeMounts": [{"name": "d", "mountPath": "/data"}]})
    pod["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "keep"}}]
    api.put_object(pod)
    await until(api, lambda: condition(pod_of(api, "writer"), "PodScheduled") == "True")
    pvc = await until(api, lambda: (c := api.get_object("v1", "PersistentVolumeClaim", "keep", NS)) and
                      c.get("status", {}).get("phase") == "Bound" and c)
    directory = kubelet.pvc_dir(pvc)
    (directory / "payload").write_text("kept")
    marked = api.call_delete("v1", "PersistentVolumeClaim", "keep", NS)
    assert marked["metadata"]["deletionTimestamp"]  # held by the pvc-protection finalizer
    rv = marked["metadata"]["resourceVersion"]
    await until(api, lambda: kubelet.handled.get(("PersistentVolumeClaim", NS, "keep")) == rv)
    assert directory.exists()  # protected while the Pod uses it
    assert api.get_object("v1", "PersistentVolumeClaim", "keep", NS) is not None
    api.call_delete("v1", "Pod", "writer", NS)
    await until(api, lambda: api.get_object("v1", "PersistentVolumeClaim", "keep", NS) is None)
    await until(api, lambda: not directory.exists(), 10)


async def test_stop_leaves_no_process_or_namespace(tmp_path: Path) -> None:
    emulator = EmulatedAPIServer()
    async with serving(emulator) as (api, url):
        kubelet = Kubelet(url, KubeletConfig(workdir=tmp_path, images={"local/python:*": PY}))
        async with kubelet:
            api.put_object(server_pod("a"))
            await until(api, lambda: condition(pod_of(api, "a"), "Ready") == "True")
            worker = kubelet.worker(NS, "a")
            assert worker is not None and isinstance(worker.workers[0].running, ProcessContainer)
            pid = worker.workers[0].running.pid
            netns = worker.addr.netns if worker.addr else None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, signal.SIG_DFL)
        if netns:
            assert netns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
