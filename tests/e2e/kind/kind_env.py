"""The operator's scenarios (``tests/e2e/scenarios.py``) on a kind cluster: ``kind_environment`` yields the same
``operator_env.Env`` as the emulator and control-plane tiers, with kind's own kubelets, scheduler, volume provisioner
and controllers in place of the kubelet fixture.

Per scenario, as in the control-plane tier (``tests/e2e/controlplane/env.py``): a namespace labelled
``pod-security.kubernetes.io/enforce=restricted``, ``helm install`` of the chart into it with ``watchNamespaces`` set
to it, and the operator process on this machine authenticated as the chart's ServiceAccount (a TokenRequest token in
a kubeconfig; the chart's Deployment is scaled to 0 so that one operator runs, the one the scenario starts, stops,
crashes with a failpoint and reads the log of) -- or, with ``operator="pod"`` (the node tier's default), the chart's
Deployment Pod itself (``PodOperatorEnv``), which the scenario scales up and down. The operator and the scenarios' checks (``scm_check``) reach the SCMs
by Pod IP: the session fixture routes every node's Pod CIDR through that node's address on the kind network.

What the kubelet fixture does in the other tiers, ``KindNodes`` does on kind's nodes:

- ``kill``: the container's main process signalled from its node (``crictl inspect`` gives its PID; ``docker exec``
  or ``podman exec`` into the node container), so SIGKILL is a crash the kubelet restarts and SIGSTOP freezes it;
- ``pvc_dir``: the volume's directory on this machine: the kind config mounts one host directory at the
  local-path provisioner's ``/var/local-path-provisioner`` on every node, where it makes ``<pv>_<ns>_<pvc>``;
- ``logs``: ``kubectl logs``;
- ``launches``: the container starts, as the fixture records them: ``PodStarts`` watches the scenario namespace's
  Pods from the environment's start and keeps, for each Pod (uid) and container, its command line and the most
  starts seen (``restartCount + 1`` once it has started), so Pods deleted since (a decommissioned member) keep
  their starts.

The workload Pod (``Env.start_workload``) runs ``scm_workload.py`` from a ConfigMap in the SCM image (this repo's
tests are not in it), its output on a PersistentVolume in that host directory instead of an ``emptyDir``.

Never run on the project's machines (no container engine); ``make e2e-kind`` runs it where kind is available.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from ozone_scm_operator.spec import DEFAULT_IMAGE
from tests.e2e.controlplane.env import install_operator_chart, permission_warnings
from tests.e2e.controlplane.fixture import RESTRICTED, ApiError, Obj, RealAPI, kubeconfig, wait_until
from tests.e2e.local.kubelet import LaunchRecord
from tests.e2e.local.operator_env import Env, workload_security

REPO = Path(__file__).resolve().parents[3]
WORKLOAD_SOURCE = REPO / "tests" / "e2e" / "local" / "scm_workload.py"
NODE_VOLUMES = "/var/local-path-provisioner"
_counter = itertools.count(1)


class KindCluster(Protocol):
    """What the session fixture (``conftest.kind_cluster``) provides."""

    url: str
    ca_crt: Path
    admin_token: str
    admin_kubeconfig: Path
    workdir: Path
    volumes: Path  # the host directory mounted at NODE_VOLUMES on every node
    engine: str  # docker or podman: runs `exec` into the node containers

    def admin(self) -> RealAPI: ...
    def check_alive(self) -> None: ...
    def kubectl(self, *args: str, timeout: float = 120) -> str: ...


def pod_starts(pod: Obj) -> dict[tuple[str, str], tuple[str, tuple[str, ...], int]]:
    """(Pod uid, container) -> (Pod name, command line, starts so far) for each container of ``pod`` that has
    started: ``restartCount + 1``, read from its status."""
    meta, spec, st = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    specs = {c["name"]: c for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])}
    out = {}
    for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
        state = cs.get("state") or {}
        if not ("running" in state or "terminated" in state or cs.get("restartCount")):
            continue
        c = specs.get(cs["name"]) or {}
        argv = tuple(list(c.get("command") or []) + list(c.get("args") or []))
        out[(meta["uid"], cs["name"])] = (meta["name"], argv, int(cs.get("restartCount") or 0) + 1)
    return out


class PodStarts:
    """Every container start in a namespace from the moment ``start`` is called, Pods deleted since included: a
    thread lists the Pods, then follows a watch from that list's resourceVersion (again from the last one it saw when
    the server ends the stream; a new list on 410 Gone) and keeps the most starts seen per (Pod uid, container)."""

    def __init__(self, api: RealAPI, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self._seen: dict[tuple[str, str], tuple[str, tuple[str, ...], int]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pod-starts-{namespace}", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop recording; the thread ends when its current watch does (the server ends it within 10 s)."""
        self._stop.set()

    def record(self, pod: Obj) -> None:
        with self._lock:
            for key, (name, argv, starts) in pod_starts(pod).items():
                if starts > self._seen.get(key, (name, argv, 0))[2]:
                    self._seen[key] = (name, argv, starts)

    def launches(self, current: list[Obj]) -> list[LaunchRecord]:
        """The starts recorded, with the Pods listed just now (``current``) taken in first, so nothing lags."""
        if self.error is not None:
            raise AssertionError(f"the Pod watch of {self.namespace} failed: {self.error!r}")
        for pod in current:
            self.record(pod)
        with self._lock:
            return [LaunchRecord(self.namespace, name, uid, container, argv)
                    for (uid, container), (name, argv, starts) in sorted(self._seen.items()) for _ in range(starts)]

    def _run(self) -> None:
        path = self.api.path("v1", "Pod", self.namespace)
        version = ""
        try:
            while not self._stop.is_set():
                if not version:
                    listing = self.api.request("GET", path)
                    for pod in listing.get("items") or []:
                        self.record(pod)
                    version = listing["metadata"]["resourceVersion"]
                query = urllib.parse.urlencode({"watch": "1", "resourceVersion": version, "timeoutSeconds": "10"})
                headers = {"Authorization": f"Bearer {self.api.token}"} if self.api.token else {}
                req = urllib.request.Request(f"{self.api.url}{path}?{query}", headers=headers)
                try:
                    with urllib.request.urlopen(req, context=self.api.ctx, timeout=30) as resp:
                        for line in resp:  # one event a line, as the server sends it
                            event = json.loads(line)
                            if event["type"] == "ERROR":  # e.g. 410 Gone inside the stream: list again
                                version = ""
                                break
                            version = event["object"]["metadata"]["resourceVersion"]
                            if event["type"] != "BOOKMARK":
                                self.record(event["object"])
                except urllib.error.HTTPError as exc:
                    if exc.code != 410:
                        raise
                    version = ""  # too old: list again
        except (ApiError, OSError, ValueError, KeyError) as exc:  # URLError and HTTPError are OSErrors
            if not self._stop.is_set():
                self.error = exc


class KindNodes:
    """The kubelet fixture's test-facing calls (``kill``, ``pvc_dir``, ``logs``, ``launches``) on a kind cluster's
    real nodes."""

    def __init__(self, cluster: KindCluster, api: RealAPI, namespace: str) -> None:
        self.cluster = cluster
        self.api = api
        self.namespace = namespace
        self.starts = PodStarts(api, namespace)

    @property
    def launches(self) -> list[LaunchRecord]:
        return self.starts.launches(self.api.list_objects("v1", "Pod", self.namespace))

    def _container(self, namespace: str, name: str, container: str | None) -> tuple[str, list[str]]:
        pod = self.api.get_object("v1", "Pod", name, namespace) or {}
        node = (pod.get("spec") or {}).get("nodeName")
        ids = [cs["containerID"].split("://", 1)[1] for cs in (pod.get("status") or {}).get("containerStatuses") or ()
               if cs.get("containerID") and (container is None or cs["name"] == container)]
        if not node or not ids:
            raise AssertionError(f"Pod {namespace}/{name} has no running container {container or ''} on a node")
        return str(node), ids

    async def kill(self, namespace: str, name: str, container: str | None = None,
                   sig: int = signal.SIGKILL) -> None:
        """Signal the container's main process from its node, as a crash (or a freeze) of the process."""
        node, ids = self._container(namespace, name, container)
        for cid in ids:
            script = (f"kill -{int(sig)} $(crictl inspect --output go-template --template '{{{{.info.pid}}}}' {cid})")
            proc = await asyncio.create_subprocess_exec(self.cluster.engine, "exec", node, "sh", "-c", script,
                                                        stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.STDOUT)
            out, _ = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode == 0, f"signalling {namespace}/{name} on {node} failed: {out.decode()}"

    def pvc_dir(self, pvc: dict[str, Any]) -> Path:
        meta = pvc["metadata"]
        live = self.api.get_object("v1", "PersistentVolumeClaim", meta["name"], meta["namespace"]) or pvc
        volume = (live.get("spec") or {}).get("volumeName")
        if not volume:
            raise AssertionError(f"PVC {meta['namespace']}/{meta['name']} is not bound")
        return self.cluster.volumes / f"{volume}_{meta['namespace']}_{meta['name']}"

    def logs(self, namespace: str, name: str, container: str | None = None) -> str:
        args = ["logs", "-n", namespace, name] + (["-c", container] if container else [])
        try:
            return self.cluster.kubectl(*args)
        except AssertionError as exc:
            return str(exc)


class KindEnv(Env):
    """``Env`` with the workload Pod built for a real cluster (the SCM image, output on a host-visible volume)."""

    kind: KindCluster
    node_volumes = NODE_VOLUMES  # where the nodes see ``kind.volumes`` (the node tier: the same directory)

    def start_workload(self, cluster: str, *, datanodes: int = 3, name: str = "workload", secure: bool = False) -> Path:
        source = f"{name}-source"
        mounts, volumes, env = workload_security(cluster, secure)
        out = self.kind.volumes / f"{self.ns}-{name}"
        out.mkdir(parents=True, exist_ok=True)
        os.chmod(out, 0o777)
        self.api.put_object({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": source, "namespace": self.ns},
                             "data": {"scm_workload.py": WORKLOAD_SOURCE.read_text()}})
        self.api.put_object({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{self.ns}-{name}"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                     "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": f"{self.node_volumes}/{out.name}"},
                     "claimRef": {"namespace": self.ns, "name": f"{name}-out"}}})
        self.api.put_object({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": f"{name}-out", "namespace": self.ns},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": f"{self.ns}-{name}",
                     "resources": {"requests": {"storage": "1Gi"}}}})
        self.api.put_object({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": self.ns},
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "workload", "image": DEFAULT_IMAGE,
                    "command": ["python", "/workload/scm_workload.py", "--conf", "/etc/ozone", "--out", "/out",
                                "--datanodes", str(datanodes)],
                    "volumeMounts": [{"name": "config", "mountPath": "/etc/ozone"},
                                     {"name": "source", "mountPath": "/workload"},
                                     {"name": "out", "mountPath": "/out"}, *mounts],
                    "env": env,
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }],
                "volumes": [{"name": "config", "configMap": {"name": f"{cluster}-config"}},
                            {"name": "source", "configMap": {"name": source}},
                            {"name": "out", "persistentVolumeClaim": {"claimName": f"{name}-out"}}, *volumes],
            },
        })
        return out


OPERATOR_LABEL = "app.kubernetes.io/name"
OPERATOR_PORT = 8080  # the chart's operator.healthPort (its /healthz and /metrics)
# What the chart's operator Pod is installed with in the scenarios: one replica (the scenarios start and stop "the"
# operator) and the host-process operator's poll interval, so both modes move at the same pace.
POD_OPERATOR_VALUES = ("replicaCount=1", "operator.pollInterval=1")


class PodOperatorEnv(KindEnv):
    """``KindEnv`` whose operator is the chart's Deployment Pod, run by the cluster's kubelet from the project's image
    as the chart's ServiceAccount, reaching the API server through the ``kubernetes`` Service: ``start_operator``
    scales the Deployment to 1 and waits for its Pod to be Ready, ``stop_operator`` scales it to 0 (kubelet sends
    SIGTERM; the operator releases its Lease) and keeps the Pod's log in the work dir, as the host-process operator's
    log is kept, for ``operator_output`` and the permission check. What only a process on this machine allows --
    failpoints, gates, several identities, SIGKILL without a restart -- is refused with one line: such a scenario
    runs with the operator as a host process (``operator="process"``)."""

    release: str

    def _deployment(self) -> str:
        return self.release

    def _operator_pods(self) -> list[Obj]:
        return [p for p in self.api.list_objects("v1", "Pod", self.ns)
                if (p["metadata"].get("labels") or {}).get(OPERATOR_LABEL) == self.release]

    @staticmethod
    def _ready(pod: Obj) -> bool:
        conds = {c["type"]: c["status"] for c in (pod.get("status") or {}).get("conditions") or ()}
        return conds.get("Ready") == "True" and not pod["metadata"].get("deletionTimestamp")

    def _scale(self, replicas: int) -> None:
        self.api.patch_object("apps/v1", "Deployment", self._deployment(), self.ns, {"spec": {"replicas": replicas}},
                              subresource="scale")

    def _pod_log(self, name: str, *, previous: bool = False) -> str:
        params = {"previous": "true"} if previous else None
        try:
            return bytes(self.api.request("GET", f"/api/v1/namespaces/{self.ns}/pods/{name}/log",  # type: ignore[attr-defined]
                                          raw=True, params=params)).decode(errors="replace")
        except (ApiError, OSError):
            return ""

    def _keep_logs(self, pod: Obj) -> None:
        """The Pod's log (and the log of its previous container, if kubelet restarted it) into the work dir."""
        name = pod["metadata"]["name"]
        restarts = sum(int(cs.get("restartCount") or 0) for cs in (pod.get("status") or {}).get("containerStatuses") or ())
        text = (self._pod_log(name, previous=True) if restarts else "") + self._pod_log(name)
        if text:
            (self.workdir / f"operator-pod-{name}.log").write_text(text)

    async def start_operator(self, crash_before: tuple[str, str] | None = None, *, identity: str = "",
                             pause_before: tuple[str, str] | None = None, args: tuple[str, ...] = (),
                             extra_env: Any = None, gate_before: tuple[str, str, Path] | None = None) -> None:
        if crash_before or pause_before or gate_before or identity or args or extra_env:
            raise AssertionError("failpoints, gates, identities, arguments and environment need the operator as a "
                                 "host process: run this scenario with operator='process' (tests/e2e/node/"
                                 "test_node_scenarios.py HOST_OPERATOR)")
        self.operator_starts += 1
        self._scale(1)
        await self.wait_for(lambda: [p for p in self._operator_pods() if self._ready(p)], 240,
                            "the chart's operator Pod Ready (its /healthz probe)", poll=0.5)

    def operator_running(self, identity: str = "") -> bool:
        return not identity and any(self._ready(p) for p in self._operator_pods())

    async def stop_operator(self, identity: str = "") -> None:
        """Scale the Deployment to 0: kubelet stops the Pod (SIGTERM, then SIGKILL after its grace period); its log
        is read until the Pod object is gone."""
        assert not identity, "the chart's operator has no identities: run this scenario with operator='process'"
        pods = self._operator_pods()
        self._scale(0)
        for pod in pods:
            name = pod["metadata"]["name"]

            def gone(name: str = name) -> bool:
                live = self.api.get_object("v1", "Pod", name, self.ns)
                if live is not None:
                    self._keep_logs(live)
                return live is None

            await self.wait_for(gone, 90, f"the operator Pod {name} stopped and deleted", poll=0.5)

    async def stop_all_operators(self) -> None:
        await self.stop_operator()

    async def kill_operator(self, identity: str = "") -> None:
        raise AssertionError("SIGKILL without a restart needs the operator as a host process (kubelet restarts a "
                             "killed container): run this scenario with operator='process'")

    async def operator_exited(self, timeout: float = 120, identity: str = "") -> int:
        raise AssertionError("an operator that exits is restarted by kubelet: run this scenario with "
                             "operator='process'")

    def operator_output(self) -> str:
        kept = "".join(p.read_text(errors="replace") for p in sorted(self.workdir.glob("operator-pod-*.log")))
        live = "".join(self._pod_log(p["metadata"]["name"]) for p in self._operator_pods())
        return kept + live

    async def operator_metrics(self) -> str:
        """``/metrics`` of the running operator Pod, by its Pod IP (the host routes the Pod subnet)."""
        pods = [p for p in self._operator_pods() if self._ready(p)]
        assert pods, "no operator Pod is Ready"
        url = f"http://{pods[0]['status']['podIP']}:{OPERATOR_PORT}/metrics"
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            assert resp.status == 200, resp.status
            return await resp.text()

    def operator_restarts(self) -> dict[str, int]:
        """Container restarts of each operator Pod now running (kubelet restarts a crashed or unhealthy one)."""
        return {p["metadata"]["name"]: sum(int(cs.get("restartCount") or 0)
                                           for cs in (p.get("status") or {}).get("containerStatuses") or ())
                for p in self._operator_pods()}


@contextlib.asynccontextmanager
async def kind_environment(cluster: KindCluster, workdir: Path, *, namespace: str = "ozone", runtime: str = "process",
                           restricted: bool = True, nodes: type[KindNodes] = KindNodes,
                           node_volumes: str = NODE_VOLUMES, operator: str = "process") -> AsyncIterator[Env]:
    """Like ``operator_env.environment``: yields an ``Env`` on the kind cluster (see the module docstring).
    ``nodes`` and ``node_volumes``: how the nodes are reached and where they see ``cluster.volumes`` (the node tier,
    ``tests/e2e/node/node_env.py``, passes its own). ``operator``: ``process`` (this machine's process as the chart's
    ServiceAccount, the chart's Deployment scaled to 0) or ``pod`` (the chart's Deployment Pod, ``PodOperatorEnv``)."""
    assert runtime == "process", "on kind the Pods run in kind's own container runtime"
    if operator not in ("process", "pod"):
        raise ValueError(f"operator={operator!r}: use 'process' (a host process) or 'pod' (the chart's Deployment)")
    cluster.check_alive()
    admin = cluster.admin()
    ns = f"{namespace}-{os.getpid()}-{next(_counter)}"
    admin.create_namespace(ns, RESTRICTED if restricted else {"ozone-scm.test/pod-security": "not-enforced"})
    workdir.mkdir(parents=True, exist_ok=True)
    in_pod = operator == "pod"
    sa, warnings = install_operator_chart(cluster, ns, *(POD_OPERATOR_VALUES if in_pod else ()))  # type: ignore[arg-type]  # helm needs only the kubeconfig
    api = RealAPI(cluster.url, cluster.ca_crt, cluster.admin_token)
    kind_nodes = nodes(cluster, api, ns)
    kind_nodes.starts.start()
    env: KindEnv
    if in_pod:
        env = PodOperatorEnv(api, cluster.url, kind_nodes, workdir, ns)  # type: ignore[arg-type]
        env.release = sa  # the chart names its Deployment and ServiceAccount after the release
    else:
        # one operator: the one the scenario drives (the chart's Deployment would be a second)
        cluster.kubectl("scale", "deployment", "-n", ns, "--all", "--replicas=0")
        wait_until(lambda: not [p for p in admin.list_objects("v1", "Pod", ns)
                                if (p["metadata"].get("labels") or {}).get(OPERATOR_LABEL) == sa], 120,
                   "the chart's operator Pod gone")
        token = admin.service_account_token(ns, sa)
        operator_kubeconfig = kubeconfig(workdir / "operator.kubeconfig", cluster.url, cluster.ca_crt, token, ns)
        env = KindEnv(api, cluster.url, kind_nodes, workdir, ns,  # type: ignore[arg-type]
                      operator_args=["--kubeconfig", str(operator_kubeconfig), "-n", ns])
    env.kind = cluster
    env.node_volumes = node_volumes
    env.real_controllers = True  # kind's kube-controller-manager runs the Job controller (the backup scenarios)
    env.helm_warnings = warnings  # type: ignore[attr-defined]
    await env.start_operator()
    try:
        yield env
        if isinstance(env, PodOperatorEnv):  # a crash or a failed liveness probe is restarted silently by kubelet
            restarts = env.operator_restarts()
            assert not any(restarts.values()), f"kubelet restarted the operator: {restarts}\n" + (
                env.operator_output()[-3000:])
    finally:
        await env.stop_all_operators()
        kind_nodes.starts.stop()
        with contextlib.suppress(ApiError, OSError):
            admin.call_delete("v1", "Namespace", ns)
        for pv in admin.list_objects("v1", "PersistentVolume"):  # the workload's, cluster-scoped
            if pv["metadata"]["name"].startswith(f"{ns}-"):
                with contextlib.suppress(ApiError, OSError):
                    admin.call_delete("v1", "PersistentVolume", pv["metadata"]["name"])
    refused = permission_warnings(workdir)
    assert not refused, "the operator, as the chart's ServiceAccount, was refused or warned about permissions:\n" + (
        "\n".join(refused[:10]))
