"""The operator's local end-to-end environment: the emulated API server, the kubelet-playing fixture running every Pod
as a real SCM process (its own network namespace, address and ``/etc/hosts``), and the real operator in-process.

Used by ``test_operator_scenarios.py`` and ``bench/operator_e2e.py``. Test support: it may use SCM internals and the
fixture; nothing in ``scm_server`` or the operator imports it.

``Env`` offers what the scenarios need and nothing clever:

* ``create`` / ``patch_spec`` / ``cluster`` / ``conditions`` / ``events``: the ``OzoneSCMCluster`` as a user sees it;
* ``wait_ready``: the Ready condition True for the current generation, no operation in progress, every member
  ready (polling the emulator with a deadline, never a fixed sleep);
* ``verify_consistent``: every member reports the same cluster ID (the one in status) and, once each has applied
  the leader's commit index, identical digests of every replicated table (``GetTableDigests``, the RPC behind the
  cross-SCM ``debug ldb`` comparison);
* ``start_operator`` / ``stop_operator`` / ``kill_operator``: the operator is the real ``ozone-scm-operator``
  process (as in a cluster); ``start_operator(crash_before=(kind, target))`` arms its test failpoint, so it exits
  right after writing the intent of that step into status and before the step runs;
* ``start_workload`` / ``stop_workload``: simulated datanodes and a block-allocation client running in a Pod
  (``scm_workload.py``), and what they observed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import yaml

from ozone_scm_operator import naming
from scm_server.local.cluster import FAST_SETTINGS
from scm_server.ports import free_port
from tests.e2e.local.apiserver import EmulatedAPIServer, serving, write_kubeconfig
from tests.e2e.local.eventsapi import occurrences
from tests.e2e.local.kubelet import Kubelet, KubeletConfig
from tests.e2e.local.podspec import ImageSpec

REPO = Path(__file__).resolve().parents[3]
CRD_PATH = REPO / "crds" / "ozonescmclusters.yaml"
CRD_PATHS = (CRD_PATH, REPO / "crds" / "ozonescmbackups.yaml")
BIN = Path(sys.executable).parent
PATH = f"{BIN}:/usr/sbin:/usr/bin:/sbin:/bin"
SCM_IMAGE = ImageSpec(entrypoint=(str(BIN / "ozone-scm"),), env={"PATH": PATH, "PYTHONUNBUFFERED": "1"})
WORKLOAD_IMAGE = ImageSpec(
    entrypoint=(sys.executable, "-m", "tests.e2e.local.scm_workload"),
    env={"PATH": PATH, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)},
    workdir=str(REPO),
)
# The audit image (``<repository>-audit:<tag>``, what ``make audit-image`` builds): this checkout's ``ozone-scm`` with
# the virtual environment's PySpark and the machine's Java, as the image has them; Spark's driver on loopback.
AUDIT_IMAGE = ImageSpec(entrypoint=(str(BIN / "ozone-scm"),),
                        env={"PATH": PATH, "PYTHONUNBUFFERED": "1", "SPARK_LOCAL_IP": "127.0.0.1"})
# Every ozone-scm image tag runs this checkout (an image change still rolls the Pods); anything else is unknown to
# the runtime and waits in ErrImagePull, like an image that does not exist.
IMAGES = {"ozone-scm:*": SCM_IMAGE, "ozone-scm-audit:*": AUDIT_IMAGE, "scm-workload:test": WORKLOAD_IMAGE}
API = "ozone-scm.io/v1alpha1"
KIND = "OzoneSCMCluster"
BACKUP_KIND = "OzoneSCMBackup"

# What a small test ring needs to move fast: the intervals `make run` uses, and no fsync (tests only).
FAST_SITE: dict[str, str] = {**FAST_SETTINGS, "ozone.scm.ha.ratis.fsync": "false"}




@dataclasses.dataclass
class WorkloadResult:
    calls: list[dict[str, Any]]

    @property
    def failures(self) -> list[dict[str, Any]]:
        return [c for c in self.calls if not c["ok"]]

    @property
    def block_ids(self) -> list[tuple[int, int]]:
        return [(i[0], i[1]) for c in self.calls if c["ok"] for i in c["ids"]]

    @property
    def duplicates(self) -> set[tuple[int, int]]:
        seen: set[tuple[int, int]] = set()
        dup = set()
        for bid in self.block_ids:
            if bid in seen:
                dup.add(bid)
            seen.add(bid)
        return dup

    @property
    def longest_gap(self) -> float:
        """Longest time without a successful allocation, from one success to the next (seconds)."""
        ends = sorted(c["t1"] for c in self.calls if c["ok"])
        return max((b - a for a, b in itertools.pairwise(ends)), default=0.0)


def v_applied(result: Mapping[str, Any], member: str) -> int:
    return int(result["members"][member]["appliedIndex"])


class ObjectAPI(Protocol):
    """The object calls the scenarios make: the emulator's direct ones, or ``controlplane.fixture.RealAPI`` over
    HTTPS to a real API server."""

    def put_object(self, obj: Mapping[str, Any]) -> dict[str, Any]: ...
    def get_object(self, api_version: str, kind: str, name: str,
                   namespace: str | None = None) -> dict[str, Any] | None: ...
    def list_objects(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]: ...
    def patch_object(self, api_version: str, kind: str, name: str, namespace: str | None,
                     patch: Mapping[str, Any], subresource: str | None = None) -> dict[str, Any]: ...
    def call_delete(self, api_version: str, kind: str, name: str, namespace: str | None = None,
                    options: Mapping[str, Any] | None = None) -> dict[str, Any]: ...


class Env:
    def __init__(self, api: ObjectAPI, url: str, kubelet: Kubelet, workdir: Path, namespace: str,
                 operator_args: list[str] | None = None) -> None:
        self.api = api
        self.url = url
        # how the operator reaches the API server: the emulator unauthenticated, a real one through a kubeconfig
        self.operator_args = operator_args or ["--server", url]
        # the administrator's bearer token when the emulator enforces RBAC (kubectl-plugin runs use it: a person)
        self.admin_token: str | None = None
        self.kubelet = kubelet
        self.workdir = workdir
        self.ns = namespace
        # running operator processes by leader-election identity ("": the default one)
        self._operators: dict[str, asyncio.subprocess.Process] = {}
        self.operator_logs: dict[str, Path] = {}
        self.operator_starts = 0
        self.health_port = 0
        self.operator_log: Path | None = None
        # a real kube-controller-manager runs the Job controller (the control-plane tier); else a fixture plays it
        self.real_controllers = False

    # ---- the operator (a real process, like in a cluster; the test process never holds gRPC state, since it
    # also forks every Pod's processes) ----
    async def start_operator(self, crash_before: tuple[str, str] | None = None, *, identity: str = "",
                             pause_before: tuple[str, str] | None = None, args: tuple[str, ...] = (),
                             extra_env: Mapping[str, str] | None = None,
                             gate_before: tuple[str, str, Path] | None = None) -> None:
        """Start an operator process. ``identity`` names a replica (its leader-election identity); several may run
        at once, each under its own identity. ``pause_before`` blocks it before that action (it keeps its Lease).
        ``gate_before=(kind, target or "*", file)`` makes it wait after the plan's check of each such step, before
        the step's re-check, until ``file`` exists (``gate_reached``, then ``open_gate``).
        ``extra_env`` is added to its environment (e.g. ``PYTHONPATH`` naming another build of the operator)."""
        assert identity not in self._operators, f"operator {identity or '(default)'} is already running"
        self.operator_starts += 1
        self.health_port = free_port()
        env = dict(os.environ)
        env.pop("OZONE_SCM_OPERATOR_FAILPOINT", None)
        if crash_before is not None:
            env["OZONE_SCM_OPERATOR_FAILPOINT"] = f"{crash_before[0]}:{crash_before[1]}"
        if pause_before is not None:
            env["OZONE_SCM_OPERATOR_FAILPOINT"] = f"{pause_before[0]}:{pause_before[1]}:pause"
        if gate_before is not None:
            env["OZONE_SCM_OPERATOR_FAILPOINT"] = f"{gate_before[0]}:{gate_before[1]}:gate={gate_before[2]}"
        env.update(extra_env or {})
        log_path = self.workdir / f"operator-{self.operator_starts}{'-' + identity if identity else ''}.log"
        self.operator_log = log_path
        self.operator_logs[identity] = log_path
        extra = [*args, *(("--leader-elect-identity", identity) if identity else ())]
        log = open(log_path, "wb")  # noqa: SIM115 - kept open while the process runs
        self._operators[identity] = await asyncio.create_subprocess_exec(
            str(BIN / "ozone-scm-operator"), *self.operator_args, "--poll-interval", "1", "--health-host",
            "127.0.0.1", "--health-port", str(self.health_port), "--log-level", "INFO", *extra,
            stdout=log, stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL, env=env,
        )
        log.close()

    async def operator_exited(self, timeout: float = 120, identity: str = "") -> int:
        proc = self._operators[identity]
        code = await asyncio.wait_for(proc.wait(), timeout)
        del self._operators[identity]
        return code

    async def stop_operator(self, identity: str = "") -> None:
        """SIGTERM, as Kubernetes stops a Pod (SIGKILL after a grace period)."""
        proc = self._operators.pop(identity, None)
        if proc is None or proc.returncode is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()

    async def stop_all_operators(self) -> None:
        for identity in list(self._operators):
            await self.stop_operator(identity)

    async def kill_operator(self, identity: str = "") -> None:
        """SIGKILL: no clean-up, no Lease released."""
        proc = self._operators.pop(identity, None)
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()

    async def gate_reached(self, n: int, timeout: float = 180) -> str:
        """Wait until the operator (started with ``gate_before``) waits at its ``n``-th gated step (1-based): the
        plan has checked the step, which is not re-checked nor performed yet. Returns the step's target."""
        marker = "failpoint: waiting for "

        def targets() -> list[str]:
            log = self.operator_log.read_text(errors="replace") if self.operator_log else ""
            return [line.rsplit(" ", 1)[-1] for line in log.splitlines() if marker in line]

        await self.wait_for(lambda: len(targets()) >= n, timeout, f"the operator at gate {n}", poll=0.02)
        return targets()[n - 1]

    @staticmethod
    def open_gate(gate: Path) -> None:
        """Let the operator waiting at a gate go on (it removes the file: the next gated step waits again)."""
        gate.write_text("go")

    def operator_running(self, identity: str = "") -> bool:
        proc = self._operators.get(identity)
        return proc is not None and proc.returncode is None

    def operator_output(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.workdir.glob("operator-*.log")))

    # ---- the resource ----
    async def create(self, name: str, spec: Mapping[str, Any]) -> None:
        full = dict(spec)
        full["ozoneSite"] = {**FAST_SITE, **(spec.get("ozoneSite") or {})}
        self.api.put_object({"apiVersion": API, "kind": KIND, "metadata": {"name": name, "namespace": self.ns},
                             "spec": full})

    def patch_spec(self, name: str, patch: Mapping[str, Any]) -> None:
        self.api.patch_object(API, KIND, name, self.ns, {"spec": dict(patch)})

    def cluster(self, name: str) -> dict[str, Any]:
        obj = self.api.get_object(API, KIND, name, self.ns)
        assert obj is not None, f"{KIND} {name} is gone"
        return obj

    def status(self, name: str) -> dict[str, Any]:
        return self.cluster(name).get("status") or {}

    def conditions(self, name: str) -> dict[str, dict[str, Any]]:
        return {c["type"]: c for c in self.status(name).get("conditions") or ()}

    def events(self, name: str) -> list[tuple[str, str, str]]:
        """(type, reason, message) of every occurrence of an Event about ``name``, in the order they happened (a
        repeat the operator counted into an Event's ``series`` stands once per occurrence: ``eventsapi.occurrences``).
        Read through core ``v1``, as ``kubectl describe`` reads them: the operator posts them through
        ``events.k8s.io/v1``, the same objects on a real server and on the emulator."""
        evs = [e for e in self.api.list_objects("v1", "Event", self.ns)
               if (e.get("involvedObject") or {}).get("name") == name]
        return [(e.get("type", ""), e.get("reason", ""), e.get("message", "")) for e in occurrences(evs)]

    # ---- backups ----
    def create_backup(self, name: str, cluster: str) -> None:
        """``kubectl apply`` of a one-off OzoneSCMBackup."""
        self.api.put_object({"apiVersion": API, "kind": BACKUP_KIND, "metadata": {"name": name, "namespace": self.ns},
                             "spec": {"cluster": cluster}})

    def backup(self, name: str) -> dict[str, Any] | None:
        return self.api.get_object(API, BACKUP_KIND, name, self.ns)

    def backup_phase(self, name: str) -> str | None:
        obj = self.backup(name)
        return None if obj is None else (obj.get("status") or {}).get("phase")

    async def wait_backup_done(self, name: str, timeout: float = 180) -> dict[str, Any]:
        """The backup's status once it is Completed or Failed."""
        await self.wait_for(lambda: self.backup_phase(name) in ("Completed", "Failed"), timeout, f"backup {name} done")
        obj = self.backup(name)
        assert obj is not None
        return dict(obj["status"])

    def backup_dir(self, cluster: str, backup: str) -> Path:
        """Where the backup volume's directory of ``backup`` lives on this machine (the kubelet fixture's volume)."""
        pvc = self.api.get_object("v1", "PersistentVolumeClaim", f"{cluster}-backups", self.ns)
        assert pvc is not None, f"no backup volume {cluster}-backups"
        return self.kubelet.pvc_dir(pvc) / backup

    def pods(self, name: str) -> dict[str, dict[str, Any]]:
        return {p["metadata"]["name"]: p for p in self.api.list_objects("v1", "Pod", self.ns)
                if (p["metadata"].get("labels") or {}).get("ozone-scm.io/cluster") == name}

    def pvcs(self, name: str) -> dict[str, dict[str, Any]]:
        return {p["metadata"]["name"]: p for p in self.api.list_objects("v1", "PersistentVolumeClaim", self.ns)
                if (p["metadata"].get("labels") or {}).get("ozone-scm.io/cluster") == name}

    def members(self, name: str) -> list[str]:
        return [m["name"] for m in self.status(name).get("members") or ()]

    async def wait_for(self, predicate: Callable[[], Any], timeout: float, what: str, poll: float = 0.25) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = predicate()
            except (AssertionError, KeyError):
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not reached within {timeout}s")
            await asyncio.sleep(poll)

    def is_ready(self, name: str, replicas: int | None = None) -> bool:
        obj = self.cluster(name)
        st = obj.get("status") or {}
        ready = (self.conditions(name).get("Ready") or {}).get("status") == "True"
        want = replicas if replicas is not None else obj["spec"].get("replicas", 3)
        return (
            ready
            and st.get("observedGeneration") == obj["metadata"].get("generation")
            and not st.get("currentOperation")
            and len(st.get("members") or ()) == want
            and all(m.get("ready") and m.get("state") == "Joined" for m in st.get("members") or ())
        )

    async def wait_ready(self, name: str, timeout: float = 180, replicas: int | None = None) -> dict[str, Any]:
        try:
            await self.wait_for(lambda: self.is_ready(name, replicas), timeout, f"{name} Ready")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; status: {json.dumps(self.status(name), indent=1)[:3000]}") from None
        return self.cluster(name)

    # ---- the SCMs ----
    def member_ips(self, name: str) -> dict[str, str]:
        out = {}
        for m in self.members(name):
            ip = ((self.pods(name).get(m) or {}).get("status") or {}).get("podIP")
            if ip:
                out[m] = ip
        return out

    async def verify_consistent(self, name: str, timeout: float = 60) -> dict[str, Any]:
        """One cluster ID on every member (the recorded one) and identical replicated tables (``scm_check``).

        Tables are compared only between members that report the same applied index: each member's digest is taken
        once it has applied the leader's commit index, and the ring may go on committing meanwhile (the SCMs' own
        background work, e.g. closing the containers of datanodes that went away). So while the applied indexes
        differ the check is asked again (bounded by ``timeout``); equal indexes with different digests fail at
        once, as a divergence."""
        status = self.status(name)
        deadline = time.monotonic() + timeout
        while True:
            result = await self.scm_check(name)
            ids = {m: v["clusterId"] for m, v in result["members"].items()}
            assert set(ids.values()) == {status["clusterID"]}, (
                f"cluster IDs differ: {ids} (status {status['clusterID']})")
            applied = {m: v_applied(result, m) for m in result["members"]}
            for m, index in applied.items():
                assert index >= result["commitIndex"], f"{m} has not applied {result['commitIndex']}"
            if len(set(applied.values())) == 1 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        digests = {m: v["digests"] for m, v in result["members"].items()}
        first_member, first = next(iter(digests.items()))
        for m, d in digests.items():
            assert d == first, (f"table digests of {m} (applied index {applied[m]}) differ from {first_member}'s "
                                f"(applied index {applied[first_member]}): {d} vs {first}")
        return result

    async def revocation_report(self, name: str, removed_secret: Mapping[str, Any]) -> dict[str, Any]:
        """SCM's revoked serials and the answer to a call presenting ``removed_secret``'s certificate (a removed
        member's Secret, kept by the test before the operator deleted it)."""
        tls = self.workdir / f"{name}-removed-tls"
        tls.mkdir(exist_ok=True)
        for k, v in removed_secret["data"].items():
            (tls / k).write_bytes(base64.b64decode(v))
        return await self.scm_check(name, "--revoked-tls-dir", str(tls))

    async def scm_check(self, name: str, *extra: str, client: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``tests.e2e.local.scm_check`` against the members, as the operator's client certificate if there is one
        (``client``: as the certificate of that Secret instead, e.g. one kept from a deleted cluster)."""
        ips = self.member_ips(name)
        assert set(ips) == set(self.members(name)), f"members without a Pod IP: {set(self.members(name)) - set(ips)}"
        domain = f"{name}-headless.{self.ns}.svc.cluster.local"
        argv = [sys.executable, "-m", "tests.e2e.local.scm_check", *(f"{m}={ip}={m}.{domain}" for m, ip in ips.items())]
        tls = self.workdir / f"{name}-client-tls"
        if client is not None:
            tls = self.workdir / f"{name}-given-client-tls"
        else:
            client = self.api.get_object("v1", "Secret", f"{name}-operator-client", self.ns)
        if client is not None:
            tls.mkdir(exist_ok=True)
            for k, v in client["data"].items():
                (tls / k).write_bytes(base64.b64decode(v))
            argv += ["--tls-dir", str(tls)]
        argv += list(extra)
        proc = await asyncio.create_subprocess_exec(*argv, cwd=str(REPO), stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 180)
        assert proc.returncode == 0, f"scm_check failed: {err.decode()[-3000:]}"
        result: dict[str, Any] = json.loads(out)
        assert "error" not in result, result
        return result

    async def operator_metrics(self) -> str:
        """The operator's /metrics page (Prometheus text), from its health port."""
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{self.health_port}/metrics") as resp:
            assert resp.status == 200, resp.status
            return await resp.text()

    async def containers(self, name: str, client: Mapping[str, Any] | None = None) -> set[int]:
        """The container IDs the ring holds (asked through its leader; as ``client``'s certificate if given)."""
        return set((await self.scm_check(name, "--containers", client=client))["containers"])

    def annotate(self, name: str, key: str, value: str | None) -> None:
        """``kubectl annotate oscm <name> key=value`` (``key-`` with None)."""
        self.api.patch_object(API, KIND, name, self.ns, {"metadata": {"annotations": {key: value}}})

    async def leader(self, name: str) -> str:
        await self.wait_for(lambda: self.status(name).get("leader"), 60, "a leader in status")
        return str(self.status(name)["leader"])

    # ---- faults ----
    async def kill_scm(self, pod: str) -> None:
        await self.kubelet.kill(self.ns, pod)

    def delete(self, kind: str, name: str) -> None:
        self.api.call_delete("v1", kind, name, self.ns)

    async def freeze(self, pod: str) -> None:
        """SIGSTOP the Pod's SCM process: it answers nobody, while its Pod stays ready until probes fail."""
        await self.kubelet.kill(self.ns, pod, "scm", signal.SIGSTOP)

    async def thaw(self, pod: str) -> None:
        await self.kubelet.kill(self.ns, pod, "scm", signal.SIGCONT)

    def delete_cluster(self, name: str, propagation: str = "Background") -> None:
        """``kubectl delete oscm <name> [--cascade=orphan]``."""
        self.api.call_delete(API, KIND, name, self.ns, {"propagationPolicy": propagation})

    async def silent_to_the_leader(self, name: str, member: str) -> bool:
        """The leader reports that ``member`` has not answered it for longer than an election timeout."""
        r = await self.scm_check(name, "--last-contact", member)
        # a peer the leader's answer does not list is not known to be silent (a lookup that found nothing used to read
        # as "silent" at once, and the operator then started while the leader still counted the member live)
        return bool(r.get("leader")) and bool(r.get("found")) and (
            r["lastContact"] is None or r["lastContact"] > r["electionTimeout"])

    async def transfer_leadership(self, name: str, to: str) -> None:
        await self.scm_check(name, "--transfer-to", to)
        await self.wait_for(lambda: self.status(name).get("leader") == to, 60, f"{to} leads (in status)")

    # ---- the workload Pod ----
    def start_workload(self, cluster: str, *, datanodes: int = 3, name: str = "workload", secure: bool = False) -> Path:
        """The workload Pod, admissible under Pod Security ``restricted`` (non-root, seccomp, no privilege, its
        output on an ``emptyDir`` that the test reads through the kubelet fixture). ``secure``: it mounts the
        operator's client Secret where a member mounts its own (the ConfigMap's root CA path) and presents it, and
        its datanodes enrol with the cluster's datanode enrolment secret."""
        mounts, volumes, env = workload_security(cluster, secure)
        mounts = [{"name": "config", "mountPath": "/etc/ozone"}, {"name": "out", "mountPath": "/out"}, *mounts]
        volumes = [{"name": "config", "configMap": {"name": f"{cluster}-config"}}, {"name": "out", "emptyDir": {}},
                   *volumes]
        pod = self.api.put_object({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": self.ns},
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "workload", "image": "scm-workload:test",
                    "args": ["--conf", "/etc/ozone", "--out", "/out", "--datanodes", str(datanodes)],
                    "volumeMounts": mounts, "env": env,
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }],
                "volumes": volumes,
            },
        })
        out = self.kubelet.volume_dir(self.ns, name, pod["metadata"]["uid"], "out")
        out.mkdir(parents=True, exist_ok=True)
        os.chmod(out, 0o777)
        return out

    async def workload_ready(self, out: Path, timeout: float = 120) -> None:
        await self.wait_for(lambda: (out / "ready").exists() or self._workload_failed(), timeout, "workload ready")
        assert (out / "ready").exists(), f"the workload Pod failed: {self.kubelet.logs(self.ns, 'workload')[-3000:]}"

    def _workload_failed(self) -> bool:
        pod = self.api.get_object("v1", "Pod", "workload", self.ns)
        return bool(pod and (pod.get("status") or {}).get("phase") == "Failed")

    async def stop_workload(self, out: Path, timeout: float = 60) -> WorkloadResult:
        (out / "stop").write_text("stop")
        await self.wait_for(lambda: (out / "done").exists(), timeout, "workload done")
        calls = [json.loads(line) for line in (out / "calls.jsonl").read_text().splitlines() if line.strip()]
        return WorkloadResult(calls)


def workload_security(cluster: str, secure: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                            list[dict[str, str]]]:
    """The mounts, volumes and environment of a workload Pod against a secure ring (none otherwise): the operator's
    client Secret where a member mounts its own (the ConfigMap's root CA path), presented as the client certificate
    (``hdds.x509.client.*``), and the cluster's enrolment Secret for its datanodes."""
    if not secure:
        return [], [], []
    mounts = [{"name": "tls", "mountPath": naming.TLS_DIR, "readOnly": True},
              {"name": "enrollment", "mountPath": naming.ENROLLMENT_DIR, "readOnly": True}]
    volumes = [{"name": "tls", "secret": {"secretName": naming.operator_client_secret_name(cluster)}},
               {"name": "enrollment", "secret": {"secretName": naming.enrollment_secret_name(cluster)}}]
    env = [{"name": "OZONE-SITE.XML_hdds.x509.client.certificate.file", "value": f"{naming.TLS_DIR}/tls.crt"},
           {"name": "OZONE-SITE.XML_hdds.x509.client.private.key.file", "value": f"{naming.TLS_DIR}/tls.key"}]
    return mounts, volumes, env


CHART = REPO / "charts" / "ozone-scm-operator"
HELM = REPO / ".tools" / "bin" / "helm"
RELEASE = "ozone-scm-operator"
RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
PERMISSION_SIGNS = ("Not enough permissions", "forbidden", "Forbidden", " 403")


def render_chart(namespace: str, *values: str) -> list[dict[str, Any]]:
    """The chart as the real ``helm template`` renders it for a release in ``namespace`` watching only it
    (``watchNamespaces={namespace}``, the documented production mode) with ``values`` (``--set``)."""
    if not HELM.exists():
        raise AssertionError(f"{HELM} is missing: run `make k8s-tools`")
    args = [str(HELM), "template", RELEASE, str(CHART), "--namespace", namespace,
            "--set", f"watchNamespaces={{{namespace}}}"]
    for value in values:
        args += ["--set", value]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=60).stdout
    return [d for d in yaml.safe_load_all(out) if isinstance(d, dict) and d]


def chart_rbac(namespace: str, *values: str) -> list[dict[str, Any]]:
    """The ServiceAccount and RBAC objects of the chart (``render_chart``)."""
    return [d for d in render_chart(namespace, *values) if d.get("kind") in RBAC_KINDS]


def permission_warnings(workdir: Path) -> list[str]:
    """Lines of every operator log of this scenario saying the API server refused it (RBAC as the chart grants
    it must be enough: kopf's fallbacks for missing permissions are warnings, not errors, and cost a minute)."""
    lines: list[str] = []
    for log in sorted(workdir.glob("operator-*.log")):
        lines += [f"{log.name}: {line}" for line in log.read_text(errors="replace").splitlines()
                  if any(sign in line for sign in PERMISSION_SIGNS)]
    return lines


def operator_refusals(api: EmulatedAPIServer, workdir: Path, user: str) -> list[str]:
    """What the emulator refused ``user`` (the operator's ServiceAccount) and the permission warnings in its logs."""
    return [r for r in api.refusals if f'User "{user}"' in r] + permission_warnings(workdir)


@contextlib.asynccontextmanager
async def environment(workdir: Path, *, namespace: str = "ozone", runtime: str = "process",
                      chart_values: tuple[str, ...] = ()) -> AsyncIterator[Env]:
    """The emulator, the kubelet fixture and the operator; everything stopped and removed on exit. ``runtime``
    ``podman`` runs the Pods as containers from real images instead of processes of this checkout.

    RBAC as granted: the emulator authenticates and authorizes every request (``rbac.py``); the chart's
    ServiceAccount, Roles and RoleBindings for ``namespace`` (``helm template``, ``watchNamespaces={namespace}``,
    ``chart_values``) are stored, and every operator process runs as that ServiceAccount (its token in a kubeconfig)
    with the arguments of the chart's Deployment (the watched namespace, the leader-election Lease the chart's Role
    names). The kubelet fixture is the administrator. On exit the scenario fails if the API server refused the
    operator anything or an operator log carries a permission warning."""
    async with serving() as (api, url):
        admin_token = api.enable_rbac()
        for crd in CRD_PATHS:  # every CRD the operator watches
            api.put_object(yaml.safe_load(crd.read_text()))
        # Pod Security admission enforces ``restricted`` here, as a production namespace would
        api.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": namespace, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
        rendered = render_chart(namespace, *chart_values)
        for obj in rendered:
            if obj["kind"] in RBAC_KINDS:
                api.put_object(obj)
        (deployment,) = [d for d in rendered if d["kind"] == "Deployment"]
        pod_spec = deployment["spec"]["template"]["spec"]
        (container,) = pod_spec["containers"]
        sa = pod_spec["serviceAccountName"]
        workdir.mkdir(parents=True, exist_ok=True)
        operator_kubeconfig = write_kubeconfig(workdir / "operator.kubeconfig", url, namespace,
                                               api.service_account_token(namespace, sa))
        config = KubeletConfig(workdir=workdir / "kubelet", runtime=runtime,
                               images=dict(IMAGES) if runtime == "process" else {}, backoff_base=0.5, backoff_cap=4.0,
                               api_token=admin_token)
        async with Kubelet(url, config) as kubelet:
            # the Deployment's own arguments (Env appends its poll interval, health port and log level after them)
            env = Env(api, url, kubelet, workdir, namespace,
                      operator_args=["--kubeconfig", str(operator_kubeconfig), *container["args"]])
            env.admin_token = admin_token
            await env.start_operator()
            try:
                yield env
            finally:
                await env.stop_all_operators()
        refused = operator_refusals(api, workdir, f"system:serviceaccount:{namespace}:{sa}")
        assert not refused, ("the operator, as the chart's ServiceAccount, was refused or warned about "
                             "permissions:\n" + "\n".join(refused[:10]))
