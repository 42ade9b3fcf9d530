"""A fixture that plays the kubelet (and the scheduler and volume controllers) for the local end-to-end tier.

Used by the local e2e tests (``tests/e2e/local/``), the operator's scenarios and ``bench/``: it watches Pods, PVCs,
ConfigMaps, Secrets and Services on an API server (the emulated one) over HTTP, as a kubelet does, and runs every
Pod bound to its node. It knows nothing about the operator: it runs whatever Pods appear. It must not be imported
by ``scm_server`` or the operator package.

What it does, in Kubernetes' terms:

- **scheduler**: binds Pods with no ``nodeName`` to its node through ``pods/binding`` once every PVC they mount
  exists (otherwise ``PodScheduled=False``, ``Unschedulable``, and a retry when the PVC appears);
- **volumes**: provisions each PVC as a directory ``<workdir>/pv/<pvc uid>`` (``Bound``, capacity from the request,
  ``kubernetes.io/pvc-protection`` finalizer), kept across Pod restarts and deleted with the PVC once no Pod uses
  it; ``emptyDir`` per Pod; ConfigMap, Secret, downward-API and projected volumes rendered as files and rewritten
  when the objects change (``subPath`` mounts, as in Kubernetes, are not updated); ``hostPath`` as is;
- **network and names**: every Pod gets its own address from a ``podnet`` network (its own network namespace on a
  private bridge by default), reported as ``status.podIP``; its ``/etc/hosts`` (bind-mounted into the Pod's own
  mount namespace, rewritten in place) holds localhost and its own names, as the kubelet writes it, and its
  ``/etc/resolv.conf`` points at the fixture's cluster DNS (``clusterdns.py``) with Kubernetes' search path, so
  ``<pod-hostname>.<headless-svc>.<ns>.svc.cluster.local``, ``<svc>.<ns>.svc`` and short names resolve as on a
  cluster, and follow Pods and Services as they come and go (a recreated Pod gets a new address);
- **containers**: init containers in order (each must exit 0; ``restartPolicy: Always`` init containers run as
  sidecars), then the main containers, as real processes (``ProcessRuntime``) or podman containers
  (``PodmanRuntime``), with the Pod's command/args (``$(VAR)`` expanded), environment (``valueFrom`` fieldRef,
  secretKeyRef, configMapKeyRef, resourceFieldRef, ``envFrom``), volumes, hostname and working directory; an image
  unknown to the runtime waits in ``ErrImagePull``/``ImagePullBackOff``, a missing ConfigMap/Secret in
  ``CreateContainerConfigError``;
- **restarts**: ``restartPolicy`` Always/OnFailure/Never with an exponential back-off (``CrashLoopBackOff``;
  base and cap configurable, shorter than the kubelet's 10 s/300 s by default so tests stay fast), restart counts
  and ``lastState``; an image change on a running Pod restarts that container, as the kubelet does;
- **termination messages**: a container that declares ``terminationMessagePath`` or ``terminationMessagePolicy``
  gets a fresh host file mounted there (``/dev/termination-log`` by default); what it wrote (at most 4096 bytes),
  or with ``FallbackToLogsOnError`` the tail of its log after a failure, becomes ``state.terminated.message``;
- **probes**: startup, readiness and liveness probes (``httpGet``, ``tcpSocket``, ``exec`` inside the container's
  namespaces, ``grpc`` health checks) with their delays, periods, timeouts and thresholds; readiness drives
  ``ContainersReady``/``Ready``; a failed liveness or startup probe kills and restarts the container;
- **termination**: on ``deletionTimestamp`` it runs ``preStop`` hooks, sends SIGTERM, waits for the grace period,
  sends SIGKILL, then confirms the deletion (grace period 0); ``kill()`` lets a test crash a container;
- **status**: ``phase``, conditions (``PodScheduled``, ``Initialized``, ``ContainersReady``, ``Ready``), ``podIP``,
  ``hostIP``, ``startTime``, container statuses (state, ready, started, restartCount, lastState), and Events
  (Scheduled, Started, Killing, Unhealthy, BackOff).

Every container start is recorded in ``launches`` (Pod, uid, container, command line). Everything it starts is
tracked (PIDs, namespaces, containers, networks) and removed by ``stop()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import aiohttp.web

from . import clusterdns, podspec
from .kubeclient import ApiStatusError, KubeClient, cancel_and_wait
from .podnet import LoopbackNetwork, NetnsNetwork, PodAddress, PodmanNetwork
from .podspec import ConfigError, ImageSpec
from .runtimes import Launch, Mount, PodmanRuntime, ProcessRuntime, Running

Obj = dict[str, Any]
log = logging.getLogger(__name__)

PVC_PROTECTION = "kubernetes.io/pvc-protection"


@dataclass(frozen=True)
class LaunchRecord:
    """One container start: which Pod (name and uid), which container, with which command line."""

    namespace: str
    pod: str
    uid: str
    container: str
    argv: tuple[str, ...]


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class KubeletConfig:
    workdir: Path
    node_name: str = "local-node-1"
    runtime: str = "process"  # "process" or "podman"
    network: str = "netns"  # "netns" or "loopback" (process runtime); podman uses its own network
    images: dict[str, ImageSpec] = field(default_factory=dict)  # process runtime: image (glob) -> what it runs
    backoff_base: float = 1.0
    backoff_cap: float = 10.0
    namespaces: set[str] | None = None  # None: every namespace
    schedule: bool = True
    pvc_capacity_default: str = "1Gi"
    dns_port: int = 53  # cluster DNS on the Pod network's host address (resolv.conf cannot name a port)
    api_token: str | None = None  # a real API server: the bearer token the fixture uses (the emulator needs none)
    api_ca: str | None = None  # ... and the CA of its serving certificate
    # podman runtime: registries (host:port) reached over plain HTTP that images are pulled from, by digest, as a
    # runtime with these registries marked insecure would (``PodmanRuntime.pull``); other images must be local
    insecure_registries: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------------------------------------------


class ContainerWorker:
    """One container of a Pod: start, probe, restart, report."""

    def __init__(self, pod: PodWorker, spec: Obj, *, init: bool = False, sidecar: bool = False) -> None:
        self.pod = pod
        self.spec = spec
        self.name = spec["name"]
        self.init = init
        self.sidecar = sidecar
        self.restart_count = 0
        self.state: Obj = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state: Obj = {}
        self.ready = False
        self.started = False
        self.started_once = False
        self.running: Running | None = None
        self.launch: Launch | None = None
        self.image_id: str | None = None  # repository@digest of a pulled image (what a kubelet reports)
        self.finished = asyncio.Event()  # init containers: exited 0; mains: will not restart again
        self.failed_for_good = False
        self.task: asyncio.Task[None] | None = None
        self._restart_requested = False
        self._config_changed = asyncio.Event()

    @property
    def image(self) -> str:
        return str(self.spec.get("image", ""))

    def will_restart(self) -> bool:
        return not self.finished.is_set() and not self.pod.terminating.is_set()

    def status(self) -> Obj:
        out: Obj = {"name": self.name, "image": self.image, "imageID": self.image_id or self.image, "ready": self.ready,
                    "restartCount": self.restart_count, "state": copy.deepcopy(self.state),
                    "started": self.started}
        if self.last_state:
            out["lastState"] = copy.deepcopy(self.last_state)
        if self.running is not None:
            out["containerID"] = f"{self.pod.kubelet.runtime.kind}://{self.pod.uid}-{self.name}"
        return out

    def wants_termination_message(self) -> bool:
        return "terminationMessagePath" in self.spec or "terminationMessagePolicy" in self.spec

    def termination_file(self) -> Path:
        return self.pod.dir / "termination" / self.name

    def _termination_message(self, launch: Launch, code: int) -> str:
        """What the kubelet reports as ``state.terminated.message`` (limits as the kubelet's)."""
        if not self.wants_termination_message():
            return ""
        path = self.termination_file()
        text = path.read_bytes()[:4096].decode(errors="replace") if path.exists() else ""
        if not text and code != 0 and self.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            log = launch.log_path.read_bytes() if launch.log_path.exists() else b""
            text = b"\n".join(log[-2048:].splitlines()[-80:]).decode(errors="replace")
        return text

    def _policy(self) -> str:
        if self.sidecar:
            return "Always"
        if self.init:
            return "Never" if self.pod.restart_policy == "Never" else "OnFailure"
        return self.pod.restart_policy

    async def run(self) -> None:
        kubelet = self.pod.kubelet
        backoff = kubelet.config.backoff_base
        while not self.pod.terminating.is_set():
            try:
                launch = await self.pod.launch_for(self)
            except ConfigError as exc:
                self.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
                self.pod.changed()
                await self._pause(backoff, wake_on_config=True)
                backoff = min(backoff * 2, kubelet.config.backoff_cap)
                continue
            except _ImageMissing as exc:
                reason = "ErrImagePull" if self.state.get("waiting", {}).get("reason") != "ErrImagePull" \
                    else "ImagePullBackOff"
                self.state = {"waiting": {"reason": reason, "message": str(exc)}}
                self.pod.changed()
                await self.pod.event("Warning", "Failed", f"Failed to pull image \"{self.image}\": {exc}")
                await self._pause(backoff)
                backoff = min(backoff * 2, kubelet.config.backoff_cap)
                continue
            self._restart_requested = False
            self.launch = launch
            try:
                self.running = await kubelet.runtime.start(launch)
            except Exception as exc:
                self.state = {"waiting": {"reason": "RunContainerError", "message": str(exc)}}
                self.pod.changed()
                await self._pause(backoff)
                backoff = min(backoff * 2, kubelet.config.backoff_cap)
                continue
            kubelet.launches.append(LaunchRecord(self.pod.namespace, self.pod.name, self.pod.uid, self.name,
                                                 tuple(launch.argv)))
            started_at = _now()
            self.started_once = True
            self.state = {"running": {"startedAt": started_at}}
            has_startup = bool(self.spec.get("startupProbe"))
            self.started = not has_startup
            self.ready = not self.spec.get("readinessProbe") and self.started and not self.init
            self.pod.changed()
            await self.pod.event("Normal", "Started", f"Started container {self.name}")
            probes = self._start_probes()
            t0 = time.monotonic()
            code = await self.running.wait()
            await cancel_and_wait(probes)
            ran = time.monotonic() - t0
            self.ready = False
            self.started = False
            reason = "Completed" if code == 0 else "Error"
            terminated = {"exitCode": code, "reason": reason, "startedAt": started_at, "finishedAt": _now()}
            message = self._termination_message(launch, code)
            if message:
                terminated["message"] = message
            self.state = {"terminated": terminated}
            await kubelet.runtime.remove(self.running)
            self.running = None
            self.pod.changed()
            if self.pod.terminating.is_set():
                break
            policy = self._policy()
            restart = self._restart_requested or policy == "Always" or (policy == "OnFailure" and code != 0)
            if self.init and code == 0 and not self.sidecar:
                self.finished.set()
                break
            if not restart:
                self.failed_for_good = code != 0
                self.finished.set()
                self.pod.changed()
                break
            self.last_state = {"terminated": terminated}
            if ran > 10 * kubelet.config.backoff_cap:
                backoff = kubelet.config.backoff_base
            delay = 0.0 if self._restart_requested else backoff
            if delay > 0:
                self.state = {"waiting": {"reason": "CrashLoopBackOff",
                                          "message": f"back-off {delay:g}s restarting failed container="
                                                     f"{self.name} pod={self.pod.name}"}}
                self.pod.changed()
                await self.pod.event("Warning", "BackOff", f"Back-off restarting failed container {self.name}")
                await self._pause(delay)
                backoff = min(backoff * 2, kubelet.config.backoff_cap)
            self.restart_count += 1
        self.ready = False
        self.pod.changed()

    async def _pause(self, seconds: float, wake_on_config: bool = False) -> None:
        waits = [asyncio.ensure_future(self.pod.terminating.wait())]
        if wake_on_config:
            self._config_changed.clear()
            waits.append(asyncio.ensure_future(self._config_changed.wait()))
        _done, pending = await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        for p in pending:
            p.cancel()

    def config_changed(self) -> None:
        self._config_changed.set()

    async def restart(self) -> None:
        """Restart the container now (spec change): SIGTERM, grace, SIGKILL; no back-off."""
        if self.running is not None:
            self._restart_requested = True
            await self.stop(self.pod.grace_period())

    async def stop(self, grace: float) -> None:
        running = self.running
        if running is None or not running.alive():
            return
        await self.pod.event("Normal", "Killing", f"Stopping container {self.name}")
        await running.signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._exited(running), grace)
        if running.alive():
            await running.signal(signal.SIGKILL)

    @staticmethod
    async def _exited(running: Running) -> None:
        while running.alive():
            await asyncio.sleep(0.05)

    # -- probes ----------------------------------------------------------------------------------------------------
    def _start_probes(self) -> list[asyncio.Task[None]]:
        return [asyncio.create_task(self._probe_chain())]

    async def _probe_chain(self) -> None:
        startup = self.spec.get("startupProbe")
        if startup:
            ok = await self._probe_loop("startup", startup)
            if not ok:
                return
            self.started = True
            if not self.spec.get("readinessProbe") and not self.init:
                self.ready = True
            self.pod.changed()
        loops = []
        if self.spec.get("readinessProbe"):
            loops.append(asyncio.create_task(self._probe_loop("readiness", self.spec["readinessProbe"])))
        if self.spec.get("livenessProbe"):
            loops.append(asyncio.create_task(self._probe_loop("liveness", self.spec["livenessProbe"])))
        try:
            if loops:
                await asyncio.gather(*loops)
        finally:
            await cancel_and_wait(loops)

    async def _probe_loop(self, kind: str, probe: Obj) -> bool:
        period = float(probe.get("periodSeconds", 10))
        timeout = float(probe.get("timeoutSeconds", 1))
        success_threshold = int(probe.get("successThreshold", 1))
        failure_threshold = int(probe.get("failureThreshold", 3))
        await asyncio.sleep(float(probe.get("initialDelaySeconds", 0)))
        successes = failures = 0
        while self.running is not None and self.running.alive():
            ok, detail = await self.pod.kubelet.run_probe(self.pod, self, probe, timeout)
            if ok:
                successes += 1
                failures = 0
            else:
                failures += 1
                successes = 0
                await self.pod.event("Warning", "Unhealthy", f"{kind.capitalize()} probe failed: {detail}")
            if kind == "startup":
                if ok:
                    return True
                if failures >= failure_threshold:
                    await self._probe_kill(kind, probe)
                    return False
            elif kind == "readiness":
                if ok and successes >= success_threshold and not self.ready:
                    self.ready = True
                    self.pod.changed()
                elif not ok and failures >= failure_threshold and self.ready:
                    self.ready = False
                    self.pod.changed()
            elif kind == "liveness" and failures >= failure_threshold:
                await self._probe_kill(kind, probe)
                return False
            await asyncio.sleep(period)
        return False

    async def _probe_kill(self, kind: str, probe: Obj) -> None:
        await self.pod.event("Normal", "Killing", f"Container {self.name} failed {kind} probe, will be restarted")
        grace = float(probe.get("terminationGracePeriodSeconds", self.pod.grace_period()))
        running = self.running
        if running is not None:
            self._restart_requested = self._policy() != "Never"
            await running.signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exited(running), grace)
            if running.alive():
                await running.signal(signal.SIGKILL)


class _ImageMissing(Exception):
    pass


class PodWorker:
    """One Pod bound to this node: sandbox (address, hosts file, volumes), containers, status, termination."""

    def __init__(self, kubelet: Kubelet, pod: Obj) -> None:
        self.kubelet = kubelet
        self.pod = pod
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.namespace: str = meta.get("namespace", "default")
        self.name: str = meta["name"]
        self.dir = kubelet.pod_dir(self.namespace, self.name, self.uid)
        self.addr: PodAddress | None = None
        self.terminating = asyncio.Event()
        self.stopped = asyncio.Event()  # set once termination (graceful or not) has stopped the containers
        self.gone = asyncio.Event()
        spec = pod.get("spec") or {}
        self.restart_policy: str = spec.get("restartPolicy", "Always")
        self.init_workers = [ContainerWorker(self, c, init=True, sidecar=c.get("restartPolicy") == "Always")
                             for c in spec.get("initContainers") or []]
        self.workers = [ContainerWorker(self, c) for c in spec.get("containers") or []]
        self.init_done = not self.init_workers
        self.init_failed = False
        self.start_time: str | None = None
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._conditions: dict[str, Obj] = {}
        self._hosts_content = ""
        self.main: asyncio.Task[None] | None = None
        self.sa_token: str | None = None  # for projected serviceAccountToken sources (a real API server's Pods)

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def start(self) -> None:
        self.main = asyncio.create_task(self._run(), name=f"pod {self.namespace}/{self.name}")

    def grace_period(self) -> float:
        meta = self.pod["metadata"]
        if meta.get("deletionGracePeriodSeconds") is not None:
            return float(meta["deletionGracePeriodSeconds"])
        return float((self.pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))

    def changed(self) -> None:
        self._dirty.set()

    def background(self, coro: Any) -> None:
        """Run ``coro`` as part of this Pod (cancelled with it)."""
        self._tasks.append(asyncio.create_task(coro))

    async def _run(self) -> None:
        self._tasks.append(asyncio.create_task(self._status_writer()))
        try:
            self.addr = await self.kubelet.network.add_pod(f"{self.namespace}/{self.name}")
            self.start_time = _now()
            self.dir.mkdir(parents=True, exist_ok=True)
            self.write_hosts()
            (self.dir / "resolv.conf").write_text(clusterdns.resolv_conf(self.namespace, self.kubelet.dns_ip))
            self.kubelet.dns_changed()
            self.changed()
            self.sa_token = await self.kubelet.service_account_token(self.pod)
            await self._run_init_containers()
            if not self.terminating.is_set() and not self.init_failed:
                for w in self.workers:
                    w.task = asyncio.create_task(w.run())
                self.changed()
            await self.stopped.wait()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A sandbox that cannot be made (network, volumes) is reported as the kubelet does, on the Pod.
            log.exception("pod %s/%s failed in the kubelet fixture", self.namespace, self.name)
            await self.event("Warning", "FailedCreatePodSandBox", f"{type(exc).__name__}: {exc}")
        finally:
            await self._shutdown()

    async def _run_init_containers(self) -> None:
        for w in self.init_workers:
            if self.terminating.is_set():
                return
            w.task = asyncio.create_task(w.run())
            if w.sidecar:
                while not w.started and not self.terminating.is_set() and not w.finished.is_set():
                    await asyncio.sleep(0.05)
                continue
            waiter = asyncio.ensure_future(w.finished.wait())
            term = asyncio.ensure_future(self.terminating.wait())
            await asyncio.wait([waiter, term], return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            term.cancel()
            if w.failed_for_good:
                self.init_failed = True
                self.changed()
                return
        self.init_done = True
        self.changed()

    async def terminate(self) -> None:
        """Graceful termination requested through the API (``deletionTimestamp``)."""
        if self.terminating.is_set():
            return
        grace = self.grace_period()
        deadline = time.monotonic() + grace
        await self._pre_stop_hooks(grace)
        self.terminating.set()
        mains = [w for w in self.workers if w.running is not None]
        await asyncio.gather(*(w.stop(max(0.0, deadline - time.monotonic())) for w in mains))
        sidecars = [w for w in self.init_workers if w.running is not None]
        await asyncio.gather(*(w.stop(max(0.0, deadline - time.monotonic())) for w in sidecars))
        self.stopped.set()

    async def kill_now(self) -> None:
        """The Pod vanished from the API (force deletion): kill everything at once."""
        self.terminating.set()
        for w in [*self.workers, *self.init_workers]:
            if w.running is not None:
                await w.running.signal(signal.SIGKILL)
        self.stopped.set()

    async def _pre_stop_hooks(self, grace: float) -> None:
        hooks = []
        for w in self.workers:
            hook = ((w.spec.get("lifecycle") or {}).get("preStop")) or {}
            if w.running is None or not hook:
                continue
            hooks.append(self.kubelet.run_handler(self, w, hook, grace))
        if hooks:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*hooks, return_exceptions=True), grace)

    async def _shutdown(self) -> None:
        self.terminating.set()
        workers = [w for w in [*self.workers, *self.init_workers] if w.task is not None]
        for w in workers:
            if w.running is not None:
                await w.running.signal(signal.SIGKILL)
        for w in workers:
            assert w.task is not None
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(w.task, 30)
        self.changed()
        await asyncio.sleep(0)
        await cancel_and_wait(self._tasks)
        if self.addr is not None:
            await self.kubelet.network.remove_pod(self.addr)
        shutil.rmtree(self.dir / "volumes", ignore_errors=True)
        self.gone.set()
        await self.kubelet.pod_finished(self)

    # -- launching -------------------------------------------------------------------------------------------------
    async def launch_for(self, w: ContainerWorker) -> Launch:
        kubelet = self.kubelet
        assert self.addr is not None
        run_image = w.image
        if isinstance(kubelet.runtime, PodmanRuntime):
            try:
                pulled = await kubelet.runtime.pull(w.image, w.spec.get("imagePullPolicy") or "IfNotPresent",
                                                    kubelet.config.insecure_registries)
            except RuntimeError as exc:
                raise _ImageMissing(str(exc)) from exc
            if pulled is not None:
                run_image, w.image_id = pulled
        image = await kubelet.image_spec(run_image)
        if image is None:
            raise _ImageMissing(f"image {w.image!r} is not known to the {kubelet.runtime.kind} runtime")
        pod = self.status_view()
        cms, secrets = kubelet.objects_in(self.namespace)
        hostname = ((self.pod.get("spec") or {}).get("hostname") or self.name)[:63]
        env = podspec.container_env(pod, w.spec, image, cms, secrets, {"HOSTNAME": hostname})
        argv = podspec.container_command(w.spec, image, env)
        mounts = self.mounts_for(w, cms, secrets)
        if w.wants_termination_message():
            term = w.termination_file()  # fresh for every attempt, writable by any container user
            term.parent.mkdir(parents=True, exist_ok=True)
            term.write_bytes(b"")
            os.chmod(term, 0o666)
            mounts.append(Mount(str(term), w.spec.get("terminationMessagePath") or "/dev/termination-log"))
        user = None
        sc = {**((self.pod.get("spec") or {}).get("securityContext") or {}), **(w.spec.get("securityContext") or {})}
        if sc.get("runAsUser") is not None:
            user = str(sc["runAsUser"]) + (f":{sc['runAsGroup']}" if sc.get("runAsGroup") is not None else "")
        attempt = w.restart_count
        return Launch(
            name=f"k8s_{w.name}_{self.name}_{self.namespace}_{self.uid[:8]}_{attempt}",
            argv=argv, env=env, image=run_image, hostname=hostname, hosts_file=str(self.dir / "hosts"),
            resolv_conf=str(self.dir / "resolv.conf"), dns=(self.kubelet.dns_ip, self.namespace),
            log_path=self.dir / "logs" / f"{w.name}.log", ip=self.addr.ip, netns=self.addr.netns, mounts=mounts,
            workdir=w.spec.get("workingDir") or image.workdir, user=user,
            labels={"io.kubernetes.pod.uid": self.uid, "io.kubernetes.pod.name": self.name},
        )

    def _volume_source(self, vol: Obj, cms: Mapping[str, Obj], secrets: Mapping[str, Obj]) -> Path:
        name = vol["name"]
        target = self.dir / "volumes" / name
        if "persistentVolumeClaim" in vol:
            claim = vol["persistentVolumeClaim"]["claimName"]
            pvc = self.kubelet.pvcs.get((self.namespace, claim))
            if pvc is None or (pvc["metadata"].get("deletionTimestamp") and not self.kubelet.pvc_dir(pvc).exists()):
                raise ConfigError(f'persistentvolumeclaim "{claim}" not found')
            path = self.kubelet.pvc_dir(pvc)
            path.mkdir(parents=True, exist_ok=True)
            return path
        if "emptyDir" in vol:
            target.mkdir(parents=True, exist_ok=True)
            os.chmod(target, 0o777)
            return target
        if "hostPath" in vol:
            path = Path(vol["hostPath"]["path"])
            if vol["hostPath"].get("type") in ("DirectoryOrCreate",):
                path.mkdir(parents=True, exist_ok=True)
            return path
        files = podspec.volume_files(self.status_view(), vol, cms, secrets, self.sa_token)
        if files is None:
            raise ConfigError(f"volume {name!r}: type {sorted(k for k in vol if k != 'name')} is not supported "
                              "by the local kubelet")
        self._write_files(target, files)
        return target

    @staticmethod
    def _write_files(target: Path, files: list[podspec.RenderedFile]) -> None:
        target.mkdir(parents=True, exist_ok=True)
        wanted = set()
        for f in files:
            path = target / f.path
            wanted.add(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists() and path.read_bytes() == f.content:
                continue
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(f.content)
            os.chmod(tmp, f.mode)
            os.replace(tmp, path)
        for path in list(target.rglob("*")):
            if path.is_file() and path not in wanted:
                path.unlink()

    def mounts_for(self, w: ContainerWorker, cms: Mapping[str, Obj], secrets: Mapping[str, Obj]) -> list[Mount]:
        volumes = {v["name"]: v for v in (self.pod.get("spec") or {}).get("volumes") or []}
        mounts = []
        for vm in w.spec.get("volumeMounts") or []:
            vol = volumes.get(vm["name"])
            if vol is None:
                raise ConfigError(f"volume {vm['name']!r} is not defined in the pod")
            source = self._volume_source(vol, cms, secrets)
            if vm.get("subPath"):
                source = source / vm["subPath"]
                if not source.exists():
                    source.mkdir(parents=True, exist_ok=True)
                    os.chmod(source, 0o777)
            mounts.append(Mount(str(source), vm["mountPath"], bool(vm.get("readOnly"))))
        return mounts

    def refresh_volumes(self) -> None:
        """ConfigMaps/Secrets changed: re-render projected files and wake containers waiting for config."""
        cms, secrets = self.kubelet.objects_in(self.namespace)
        for vol in (self.pod.get("spec") or {}).get("volumes") or []:
            if any(k in vol for k in ("configMap", "secret", "projected", "downwardAPI")) and \
                    (self.dir / "volumes" / vol["name"]).exists():
                with contextlib.suppress(ConfigError):
                    self._volume_source(vol, cms, secrets)
        for w in [*self.init_workers, *self.workers]:
            w.config_changed()

    async def update(self, pod: Obj) -> None:
        old = self.pod
        self.pod = pod
        old_images = {c["name"]: c.get("image") for c in (old.get("spec") or {}).get("containers") or []}
        for w in self.workers:
            new_spec = next((c for c in pod["spec"].get("containers") or [] if c["name"] == w.name), None)
            if new_spec is not None and new_spec.get("image") != old_images.get(w.name):
                w.spec = new_spec
                await self.event("Normal", "Killing", f"Container {w.name} definition changed, will be restarted")
                self.background(w.restart())
        if (pod["metadata"].get("labels") != old["metadata"].get("labels")
                or pod["metadata"].get("annotations") != old["metadata"].get("annotations")):
            self.refresh_volumes()

    # -- status ----------------------------------------------------------------------------------------------------
    def status_view(self) -> Obj:
        """The Pod as its containers see it through the downward API (with our address filled in)."""
        pod = copy.deepcopy(self.pod)
        status = pod.setdefault("status", {})
        if self.addr is not None:
            status["podIP"] = self.addr.ip
            status["podIPs"] = [{"ip": self.addr.ip}]
            status["hostIP"] = self.kubelet.network.host_ip
            status["hostIPs"] = [{"ip": self.kubelet.network.host_ip}]
        return pod

    def _condition(self, ctype: str, ok: bool, reason: str | None = None, message: str | None = None) -> Obj:
        status = "True" if ok else "False"
        prev = self._conditions.get(ctype)
        since = prev["lastTransitionTime"] if prev and prev["status"] == status else _now()
        cond = {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": since}
        if reason:
            cond["reason"] = reason
        if message:
            cond["message"] = message
        self._conditions[ctype] = cond
        return cond

    def compute_status(self) -> Obj:
        mains = self.workers
        states = [w.state for w in mains]
        phase = podspec.pod_phase(self.restart_policy, self.init_done, self.init_failed, states,
                                  [w.will_restart() for w in mains], [w.started_once for w in mains])
        if self.init_failed and self.restart_policy == "Never":
            phase = "Failed"
        containers_ready = bool(mains) and all(w.ready for w in mains)
        not_ready = [w.name for w in mains if not w.ready]
        gates = [g["conditionType"] for g in (self.pod.get("spec") or {}).get("readinessGates") or []]
        existing = {c["type"]: c for c in (self.pod.get("status") or {}).get("conditions") or []}
        gates_ok = all(existing.get(g, {}).get("status") == "True" for g in gates)
        ready = containers_ready and gates_ok and not self.terminating.is_set()
        msg = f"containers with unready status: [{' '.join(not_ready)}]" if not_ready else None
        conditions = [
            self._condition("PodReadyToStartContainers", self.addr is not None),
            self._condition("Initialized", self.init_done, None if self.init_done else "ContainersNotInitialized"),
            self._condition("Ready", ready, None if ready else "ContainersNotReady", msg),
            self._condition("ContainersReady", containers_ready, None if containers_ready else
                            "ContainersNotReady", msg),
            self._condition("PodScheduled", True),
        ]
        for g in gates:
            if g in existing:
                conditions.append(existing[g])
        status: Obj = {"phase": phase, "conditions": conditions,
                       "containerStatuses": [w.status() for w in mains],
                       "qosClass": (self.pod.get("status") or {}).get("qosClass", "BestEffort")}
        if self.init_workers:
            status["initContainerStatuses"] = [w.status() for w in self.init_workers]
        if self.addr is not None:
            status.update({"podIP": self.addr.ip, "podIPs": [{"ip": self.addr.ip}],
                           "hostIP": self.kubelet.network.host_ip,
                           "hostIPs": [{"ip": self.kubelet.network.host_ip}]})
        if self.start_time:
            status["startTime"] = self.start_time
        return status

    async def _status_writer(self) -> None:
        last: Obj | None = None
        while True:
            await self._dirty.wait()
            await asyncio.sleep(0.02)  # coalesce bursts
            self._dirty.clear()
            status = self.compute_status()
            if status == last:
                continue
            try:
                result = await self.kubelet.client.merge_patch(self.kubelet.pod_path(self, "status"),
                                                               {"status": status})
            except (ApiStatusError, aiohttp.ClientError, OSError) as exc:
                log.debug("status of %s/%s: %s", self.namespace, self.name, exc)
                self._dirty.set()
                await asyncio.sleep(0.2)
                continue
            if result is None:
                return  # the Pod is gone
            last = status
            self.kubelet.pod_status_written(self, result)

    def write_hosts(self) -> None:
        if self.addr is None:
            return
        content = podspec.hosts_file(self.status_view())
        if content != self._hosts_content:
            # In place (not rename): running containers see this inode through their bind mount.
            with open(self.dir / "hosts", "r+" if (self.dir / "hosts").exists() else "w") as f:
                f.seek(0)
                f.write(content)
                f.truncate()
            self._hosts_content = content

    async def event(self, etype: str, reason: str, message: str) -> None:
        await self.kubelet.event(self.pod, etype, reason, message)


# ---------------------------------------------------------------------------------------------------------------------


class Kubelet:
    """The fixture. ``async with Kubelet(api_url, KubeletConfig(...)) as kubelet:`` (see module docstring)."""

    def __init__(self, api_url: str, config: KubeletConfig) -> None:
        self.api_url = api_url
        self.config = config
        self.client = KubeClient(api_url, token=config.api_token, ca_file=config.api_ca)
        self.network: Any
        self.runtime: Any
        if config.runtime == "podman":
            self.network = PodmanNetwork()
        elif config.network == "loopback":
            self.network = LoopbackNetwork()
        else:
            self.network = NetnsNetwork()
        self.pods: dict[str, Obj] = {}  # uid -> latest object (all pods, for DNS)
        self.workers: dict[str, PodWorker] = {}
        self.pvcs: dict[tuple[str, str], Obj] = {}
        self.configmaps: dict[tuple[str, str], Obj] = {}
        self.secrets: dict[tuple[str, str], Obj] = {}
        self.services: dict[tuple[str, str], Obj] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self._dns_dirty = asyncio.Event()
        self._unschedulable: set[str] = set()
        self.finished_pods: list[str] = []
        # every container process started, in order: what ran, and how often (a test's record of side effects)
        self.launches: list[LaunchRecord] = []
        # (kind, namespace, name) -> the resourceVersion of the last event the fixture finished handling
        self.handled: dict[tuple[str, str, str], str] = {}
        self._terminations: list[asyncio.Task[None]] = []
        self.dns: clusterdns.ClusterDNS | None = None
        self._logs_runner: aiohttp.web.AppRunner | None = None
        self._logs_url = ""
        self.dns_ip = ""
        self._stopping = False

    async def __aenter__(self) -> Kubelet:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- start/stop ------------------------------------------------------------------------------------------------
    async def start(self) -> None:
        self.config.workdir.mkdir(parents=True, exist_ok=True)
        await self.client.__aenter__()
        try:
            await self.network.setup()
            if self.config.runtime == "podman":
                self.runtime = PodmanRuntime(self.network.name)
            else:
                self.runtime = ProcessRuntime(self.config.images)
            await self.runtime.prepare()
            self.dns_ip = self.network.host_ip
            self.dns = clusterdns.ClusterDNS(self.dns_zone)
            await self.dns.start(self.dns_ip, self.config.dns_port)
            await self._serve_logs()
            await self._register_node()
            synced = []
            for path, handler in (("/api/v1/persistentvolumeclaims", self._on_pvc),
                                  ("/api/v1/configmaps", self._on_configmap),
                                  ("/api/v1/secrets", self._on_secret),
                                  ("/api/v1/services", self._on_service),
                                  ("/api/v1/pods", self._on_pod)):
                ev = asyncio.Event()
                synced.append(ev)
                self._tasks.append(asyncio.create_task(self.client.informer(path, handler, ev)))
            self._tasks.append(asyncio.create_task(self._dns_writer()))
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in synced)), 30)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        self._stopping = True
        await cancel_and_wait(self._terminations)
        await cancel_and_wait(self._tasks)
        self._tasks.clear()
        workers = list(self.workers.values())
        for w in workers:
            await w.kill_now()
        for w in workers:
            if w.main is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(w.main, 30)
        if getattr(self, "runtime", None) is not None:
            await self.runtime.cleanup()
        if self.dns is not None:
            await self.dns.stop()
        if self._logs_runner is not None:
            await self._logs_runner.cleanup()
        await self.network.teardown()
        await self.client.__aexit__(None, None, None)

    async def _serve_logs(self) -> None:
        """The kubelet's ``/containerLogs/{ns}/{pod}/{container}`` endpoint, on loopback (for ``kubectl logs``
        through the API server)."""

        async def container_logs(request: aiohttp.web.Request) -> aiohttp.web.Response:
            ns, pod, container = (request.match_info[k] for k in ("ns", "pod", "container"))
            w = self.worker(ns, pod)
            known = w is not None and any(c.name == container for c in [*w.workers, *w.init_workers])
            if not known:
                return aiohttp.web.Response(status=404, text=f'container "{container}" in pod "{pod}" not found')
            runs: list[list[str]] = [[]]
            for line in self.logs(ns, pod, container).splitlines():
                if line.startswith("--- ") and " start [" in line:
                    runs.append([])
                else:
                    runs[-1].append(line)
            if request.query.get("previous") == "true":
                if len(runs) < 3:
                    return aiohttp.web.Response(status=400, text=f'previous terminated container "{container}" '
                                                                 f'in pod "{pod}" not found')
                lines = runs[-2]
            else:
                lines = runs[-1]
            tail = request.query.get("tailLines")
            if tail:
                lines = lines[-int(tail):]
            return aiohttp.web.Response(text="\n".join(lines) + ("\n" if lines else ""))

        app = aiohttp.web.Application()
        app.router.add_get("/containerLogs/{ns}/{pod}/{container}", container_logs)
        self._logs_runner = aiohttp.web.AppRunner(app)
        await self._logs_runner.setup()
        site = aiohttp.web.TCPSite(self._logs_runner, "127.0.0.1", 0)
        await site.start()
        port = self._logs_runner.addresses[0][1]
        self._logs_url = f"http://127.0.0.1:{port}"

    async def _register_node(self) -> None:
        name = self.config.node_name
        meta: Obj = {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                              "topology.kubernetes.io/zone": "local"}}
        if self._logs_url:
            meta["annotations"] = {"kubelet.local-fixture/endpoint": self._logs_url}
        node = {"apiVersion": "v1", "kind": "Node", "metadata": meta}
        with contextlib.suppress(ApiStatusError):
            await self.client.post("/api/v1/nodes", node)
        if self._logs_url:
            await self.client.merge_patch(f"/api/v1/nodes/{name}", {"metadata": {"annotations": {
                "kubelet.local-fixture/endpoint": self._logs_url}}})
        await self.client.merge_patch(f"/api/v1/nodes/{name}/status", {"status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "local kubelet fixture is posting ready status",
                            "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}],
            "addresses": [{"type": "InternalIP", "address": self.network.host_ip},
                          {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.35.0-local", "containerRuntimeVersion": self.config.runtime,
                         "operatingSystem": "linux", "architecture": "amd64"}}})

    async def service_account_token(self, pod: Obj) -> str | None:
        """A token bound to ``pod`` from the TokenRequest API when a projected volume asks for one (the API server's
        ServiceAccount admission adds such a volume unless ``automountServiceAccountToken`` is false)."""
        sources = [s["serviceAccountToken"] for v in (pod.get("spec") or {}).get("volumes") or []
                   for s in (v.get("projected") or {}).get("sources") or [] if "serviceAccountToken" in s]
        if not sources:
            return None
        meta = pod["metadata"]
        spec: Obj = {"expirationSeconds": int(sources[0].get("expirationSeconds", 3607)),
                     "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"], "uid": meta["uid"]}}
        if sources[0].get("audience"):
            spec["audiences"] = [sources[0]["audience"]]
        sa = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        out = await self.client.post(f"/api/v1/namespaces/{meta.get('namespace', 'default')}/serviceaccounts/{sa}/token",
                                     {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
        return str(out["status"]["token"])

    # -- helpers for tests -----------------------------------------------------------------------------------------
    def pod_dir(self, namespace: str, name: str, uid: str) -> Path:
        return self.config.workdir / "pods" / f"{namespace}_{name}_{uid[:8]}"

    def volume_dir(self, namespace: str, name: str, uid: str, volume: str) -> Path:
        """Where a Pod's ``emptyDir`` volume lives (the test reads and writes it, as ``kubectl cp`` would)."""
        return self.pod_dir(namespace, name, uid) / "volumes" / volume

    def worker(self, namespace: str, name: str) -> PodWorker | None:
        for w in self.workers.values():
            if (w.namespace, w.name) == (namespace, name) and not w.gone.is_set():
                return w
        return None

    def pod_ip(self, namespace: str, name: str) -> str | None:
        w = self.worker(namespace, name)
        return w.addr.ip if w is not None and w.addr is not None else None

    async def kill(self, namespace: str, name: str, container: str | None = None,
                   sig: int = signal.SIGKILL) -> None:
        """Crash a Pod's container(s) (default: every main container) with ``sig``; the kubelet then restarts
        them per ``restartPolicy``, as after a real crash."""
        w = self.worker(namespace, name)
        if w is None:
            raise KeyError(f"no running pod {namespace}/{name}")
        for c in w.workers:
            if (container is None or c.name == container) and c.running is not None:
                await c.running.signal(sig)

    def logs(self, namespace: str, name: str, container: str | None = None) -> str:
        w = self.worker(namespace, name)
        dirs = [w.dir] if w is not None else sorted((self.config.workdir / "pods").glob(f"{namespace}_{name}_*"))
        out = []
        for d in dirs:
            for f in sorted((d / "logs").glob(f"{container or '*'}.log")):
                out.append(f.read_text(errors="replace"))
        return "".join(out)

    def resolve(self, name: str) -> list[str]:
        """What cluster DNS answers for a fully qualified name (for the test process, which has no cluster DNS)."""
        return list(self.dns_zone().get(name.rstrip(".").lower(), []))

    # -- informer handlers -----------------------------------------------------------------------------------------
    def _mine(self, obj: Obj) -> bool:
        ns = obj["metadata"].get("namespace")
        return self.config.namespaces is None or ns in self.config.namespaces

    async def _on_pod(self, etype: str, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        if etype == "DELETED":
            self.pods.pop(uid, None)
            w = self.workers.get(uid)
            if w is not None:
                await w.kill_now()
            self.dns_changed()
            return
        self.pods[uid] = pod
        self.dns_changed()
        if not self._mine(pod):
            return
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node:
            if self.config.schedule and not pod["metadata"].get("deletionTimestamp") and \
                    spec.get("schedulerName", "default-scheduler") == "default-scheduler":
                await self._schedule(pod)
            return
        if node != self.config.node_name:
            return
        w = self.workers.get(uid)
        if w is None:
            if pod["metadata"].get("deletionTimestamp"):
                await self._confirm_deletion(pod)
                return
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return
            w = PodWorker(self, pod)
            self.workers[uid] = w
            w.start()
            return
        await w.update(pod)
        if pod["metadata"].get("deletionTimestamp") and not w.terminating.is_set():
            self._terminations = [t for t in self._terminations if not t.done()]
            self._terminations.append(asyncio.create_task(w.terminate()))

    async def _schedule(self, pod: Obj) -> None:
        ns = pod["metadata"].get("namespace", "default")
        claims = [v["persistentVolumeClaim"]["claimName"] for v in (pod.get("spec") or {}).get("volumes") or []
                  if "persistentVolumeClaim" in v]
        missing = [c for c in claims if (ns, c) not in self.pvcs
                   or self.pvcs[(ns, c)]["metadata"].get("deletionTimestamp")]
        uid = pod["metadata"]["uid"]
        if missing:
            if uid not in self._unschedulable:
                self._unschedulable.add(uid)
                message = f'persistentvolumeclaim "{missing[0]}" not found'
                await self.client.merge_patch(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/status", {
                    "status": {"phase": "Pending", "conditions": [{
                        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                        "lastTransitionTime": _now(), "lastProbeTime": None}]}})
                await self.event(pod, "Warning", "FailedScheduling", message)
            return
        self._unschedulable.discard(uid)
        try:
            await self.client.post(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/binding", {
                "apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod["metadata"]["name"], "namespace": ns},
                "target": {"apiVersion": "v1", "kind": "Node", "name": self.config.node_name}})
        except ApiStatusError as exc:
            if exc.status not in (404, 409):
                raise
            return
        await self.event(pod, "Normal", "Scheduled",
                         f"Successfully assigned {ns}/{pod['metadata']['name']} to {self.config.node_name}")

    async def _retry_unschedulable(self) -> None:
        for uid in list(self._unschedulable):
            pod = self.pods.get(uid)
            if pod is None:
                self._unschedulable.discard(uid)
            elif not (pod.get("spec") or {}).get("nodeName"):
                await self._schedule(pod)

    async def _on_pvc(self, etype: str, pvc: Obj) -> None:
        try:
            await self._handle_pvc(etype, pvc)
        finally:
            self.handled[("PersistentVolumeClaim", pvc["metadata"].get("namespace", ""), pvc["metadata"]["name"])] = \
                pvc["metadata"].get("resourceVersion", "")

    async def _handle_pvc(self, etype: str, pvc: Obj) -> None:
        key = (pvc["metadata"].get("namespace", "default"), pvc["metadata"]["name"])
        if etype == "DELETED":
            if self.pvcs.get(key, {}).get("metadata", {}).get("uid") == pvc["metadata"]["uid"]:
                del self.pvcs[key]
            shutil.rmtree(self.pvc_dir(pvc), ignore_errors=True)
            return
        self.pvcs[key] = pvc
        if not self._mine(pvc):
            return
        meta = pvc["metadata"]
        if meta.get("deletionTimestamp"):
            await self._release_pvc(pvc)
            return
        status = pvc.get("status") or {}
        if status.get("phase") != "Bound" or PVC_PROTECTION not in (meta.get("finalizers") or []):
            path = self.pvc_dir(pvc)
            path.mkdir(parents=True, exist_ok=True)
            os.chmod(path, 0o777)
            size = ((pvc.get("spec") or {}).get("resources") or {}).get("requests", {}).get(
                "storage", self.config.pvc_capacity_default)
            base = f"/api/v1/namespaces/{key[0]}/persistentvolumeclaims/{key[1]}"
            finalizers = list(meta.get("finalizers") or [])
            if PVC_PROTECTION not in finalizers:
                await self.client.merge_patch(base, {"metadata": {"finalizers": [*finalizers, PVC_PROTECTION]},
                                                     "spec": {"volumeName": f"pvc-{meta['uid']}"}})
            await self.client.merge_patch(f"{base}/status", {"status": {
                "phase": "Bound", "accessModes": (pvc.get("spec") or {}).get("accessModes", ["ReadWriteOnce"]),
                "capacity": {"storage": size}}})
        await self._retry_unschedulable()

    def pvc_dir(self, pvc: Obj) -> Path:
        uid = str(pvc["metadata"]["uid"])
        if not uid.replace("-", "").isalnum():
            raise ValueError(f"unexpected PVC uid {uid!r}")
        return self.config.workdir / "pv" / uid

    def _pvc_in_use(self, pvc: Obj) -> bool:
        ns, name = pvc["metadata"].get("namespace"), pvc["metadata"]["name"]
        for w in self.workers.values():
            if w.namespace == ns and not w.gone.is_set() and any(
                    (v.get("persistentVolumeClaim") or {}).get("claimName") == name
                    for v in (w.pod.get("spec") or {}).get("volumes") or []):
                return True
        return False

    async def _release_pvc(self, pvc: Obj) -> None:
        if self._pvc_in_use(pvc):
            return
        finalizers = [f for f in pvc["metadata"].get("finalizers") or [] if f != PVC_PROTECTION]
        if len(finalizers) != len(pvc["metadata"].get("finalizers") or []):
            ns, name = pvc["metadata"].get("namespace"), pvc["metadata"]["name"]
            await self.client.merge_patch(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}",
                                          {"metadata": {"finalizers": finalizers or None,
                                                        "resourceVersion": pvc["metadata"]["resourceVersion"]}})

    async def _on_configmap(self, etype: str, cm: Obj) -> None:
        self._store(self.configmaps, etype, cm)
        self._refresh(cm["metadata"].get("namespace"))

    async def _on_secret(self, etype: str, secret: Obj) -> None:
        self._store(self.secrets, etype, secret)
        self._refresh(secret["metadata"].get("namespace"))

    async def _on_service(self, etype: str, svc: Obj) -> None:
        self._store(self.services, etype, svc)
        self.dns_changed()

    @staticmethod
    def _store(cache: dict[tuple[str, str], Obj], etype: str, obj: Obj) -> None:
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if etype == "DELETED":
            cache.pop(key, None)
        else:
            cache[key] = obj

    def _refresh(self, namespace: str | None) -> None:
        for w in self.workers.values():
            if w.namespace == namespace and not w.gone.is_set():
                w.refresh_volumes()

    def objects_in(self, namespace: str) -> tuple[dict[str, Obj], dict[str, Obj]]:
        cms = {n: o for (ns, n), o in self.configmaps.items() if ns == namespace}
        secrets = {n: o for (ns, n), o in self.secrets.items() if ns == namespace}
        return cms, secrets

    # -- pods finishing, status, DNS -------------------------------------------------------------------------------
    async def pod_finished(self, w: PodWorker) -> None:
        self.workers.pop(w.uid, None)
        self.finished_pods.append(f"{w.namespace}/{w.name}")
        self.dns_changed()
        if self._stopping:
            return
        pod = self.pods.get(w.uid)
        if pod is not None and pod["metadata"].get("deletionTimestamp"):
            await self._confirm_deletion(pod)
        for (ns, _name), pvc in list(self.pvcs.items()):
            if ns == w.namespace and pvc["metadata"].get("deletionTimestamp"):
                await self._release_pvc(pvc)

    async def _confirm_deletion(self, pod: Obj) -> None:
        ns, name = pod["metadata"].get("namespace"), pod["metadata"]["name"]
        with contextlib.suppress(ApiStatusError, aiohttp.ClientError):
            await self.client.delete(f"/api/v1/namespaces/{ns}/pods/{name}", {
                "gracePeriodSeconds": 0, "preconditions": {"uid": pod["metadata"]["uid"]}})

    def pod_status_written(self, w: PodWorker, pod: Obj) -> None:
        self.pods[w.uid] = pod
        self.dns_changed()

    def pod_path(self, w: PodWorker, sub: str = "") -> str:
        return f"/api/v1/namespaces/{w.namespace}/pods/{w.name}" + (f"/{sub}" if sub else "")

    def dns_changed(self) -> None:
        self._dns_dirty.set()

    def _dns_pods(self) -> list[Obj]:
        pods = []
        for uid, pod in self.pods.items():
            w = self.workers.get(uid)
            pods.append(w.status_view() if w is not None and (pod.get("status") or {}).get("podIP") is None
                        and w.addr is not None else pod)
        return pods

    def dns_zone(self) -> dict[str, list[str]]:
        """What the cluster DNS answers now (computed at every query, so it is never stale)."""
        return podspec.dns_zone(self._dns_pods(), list(self.services.values()))

    async def _dns_writer(self) -> None:
        while True:
            await self._dns_dirty.wait()
            await asyncio.sleep(0.02)
            self._dns_dirty.clear()
            for w in list(self.workers.values()):
                if not w.gone.is_set():
                    try:
                        w.write_hosts()
                    except OSError as exc:
                        log.debug("hosts file of %s: %s", w.name, exc)

    # -- probes, hooks, images, events -----------------------------------------------------------------------------
    async def image_spec(self, image: str) -> ImageSpec | None:
        if isinstance(self.runtime, PodmanRuntime):
            return await self.runtime.image_spec_async(image)
        spec: ImageSpec | None = self.runtime.image_spec(image)
        return spec

    @staticmethod
    def _port(w: ContainerWorker, port: int | str) -> int:
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        for p in w.spec.get("ports") or []:
            if p.get("name") == port:
                return int(p["containerPort"])
        raise ValueError(f"named port {port!r} not found in container {w.name}")

    async def run_probe(self, pod: PodWorker, w: ContainerWorker, probe: Obj, timeout: float) -> tuple[bool, str]:
        assert pod.addr is not None
        try:
            if "exec" in probe:
                if w.running is None or w.launch is None:
                    return False, "container not running"
                code, out = await w.running.exec(list(probe["exec"]["command"]), w.launch.env, timeout)
                return code == 0, f"exit code {code}: {out.strip()[-200:]}"
            if "httpGet" in probe:
                h = probe["httpGet"]
                host = h.get("host") or pod.addr.ip
                scheme = h.get("scheme", "HTTP").lower()
                url = f"{scheme}://{host}:{self._port(w, h['port'])}{h.get('path', '/')}"
                headers = {x["name"]: x["value"] for x in h.get("httpHeaders") or []}
                async with aiohttp.ClientSession() as session, session.get(
                        url, headers=headers, ssl=False, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                    await resp.read()
                    return 200 <= resp.status < 400, f"HTTP probe failed with statuscode: {resp.status}"
            if "tcpSocket" in probe:
                t = probe["tcpSocket"]
                host = t.get("host") or pod.addr.ip
                _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, self._port(w, t["port"])),
                                                         timeout)
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
                return True, ""
            if "grpc" in probe:
                return await self._grpc_probe(pod.addr.ip, int(probe["grpc"]["port"]),
                                              probe["grpc"].get("service", ""), timeout)
        except (OSError, TimeoutError, aiohttp.ClientError, ValueError, ConfigError, _ImageMissing) as exc:
            return False, f"{type(exc).__name__}: {exc}"
        return False, "unsupported probe handler"

    @staticmethod
    async def _grpc_probe(ip: str, port: int, service: str, timeout: float) -> tuple[bool, str]:
        import grpc

        request = b"\x0a" + bytes([len(service.encode())]) + service.encode() if service else b""
        async with grpc.aio.insecure_channel(f"{ip}:{port}") as channel:
            call = channel.unary_unary("/grpc.health.v1.Health/Check")
            try:
                reply = await call(request, timeout=timeout)
            except grpc.aio.AioRpcError as exc:
                return False, f"grpc health check failed: {exc.code().name}"
        status = reply[1] if len(reply) >= 2 and reply[0] == 0x08 else 0
        return status == 1, f"grpc status {status}"

    async def run_handler(self, pod: PodWorker, w: ContainerWorker, handler: Obj, timeout: float) -> None:
        """A lifecycle hook (exec or httpGet), as for preStop."""
        ok, detail = await self.run_probe(pod, w, handler, timeout)
        if not ok:
            await pod.event("Warning", "FailedPreStopHook", f"PreStopHook failed: {detail}")

    async def event(self, obj: Obj, etype: str, reason: str, message: str) -> None:
        if self._stopping:
            return
        meta = obj["metadata"]
        ns = meta.get("namespace", "default")
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{meta['name']}.", "namespace": ns},
                "involvedObject": {"apiVersion": "v1", "kind": obj.get("kind", "Pod"), "name": meta["name"],
                                   "namespace": ns, "uid": meta.get("uid")},
                "reason": reason, "message": message, "type": etype, "count": 1,
                "firstTimestamp": _now(), "lastTimestamp": _now(),
                "source": {"component": "kubelet", "host": self.config.node_name}}
        with contextlib.suppress(ApiStatusError, aiohttp.ClientError, OSError):
            await self.client.post(f"/api/v1/namespaces/{ns}/events", body)


class ThreadedKubelet:
    """The kubelet on its own thread and loop (like ``ThreadedAPIServer``), for synchronous tests."""

    def __init__(self, api_url: str, config: KubeletConfig) -> None:
        self.kubelet = Kubelet(api_url, config)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="local-kubelet", daemon=True)

    def __enter__(self) -> ThreadedKubelet:
        self._thread.start()
        try:
            self.call(self.kubelet.start(), timeout=120)
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.call(self.kubelet.stop(), timeout=120)
        finally:
            self._close()

    def _close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    def call(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def run(self, fn: Callable[[Kubelet], Any]) -> Any:
        async def inner() -> Any:
            return fn(self.kubelet)

        return self.call(inner())
