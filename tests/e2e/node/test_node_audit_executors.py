"""The replication audit as a real Spark-on-Kubernetes job on the node tier (``make e2e-node``).

An ``OzoneSCMCluster`` with ``spec.audit.master: k8s://https://kubernetes.default.svc`` and two executors, the
operator the chart's Deployment Pod: the CronJob controller makes a Job, the Job a Pod (Spark's driver, as the
chart's ``ozone-scm-audit`` ServiceAccount), which exports every SCM onto the report volume and runs
``audit run``; Spark's own Kubernetes scheduler backend creates two executor Pods from the audit image (Pod Security
``restricted`` admits them: the operator's template), which register with the driver through its headless Service
(their logs say so) while both run. The Job completes, the report is on the report volume, ``status.audit`` holds
the run's summary, and the executor Pods are gone afterwards. ``kubectl get pods -o wide`` while the executors run
is kept in ``build/node-artifacts/`` (the tier's evidence, with the driver, the executors, the members and the
operator).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from ozone_scm_operator import audit_builders, naming
from ozone_scm_operator.spec import DEFAULT_IMAGE
from tests.e2e.kind.kind_env import KindEnv
from tests.e2e.local import scm_ring
from tests.e2e.node.cluster import NODE_NAME, Node
from tests.e2e.node.node_env import node_environment

pytestmark = [pytest.mark.node, pytest.mark.timeout(1800)]

NAME = "scm"
ARTIFACTS = Path(__file__).resolve().parents[3] / "build" / "node-artifacts"
EXECUTORS = 2
REGISTERED = "Successfully registered with driver"  # Spark's executor backend, once the driver answered


def _labelled(pod: dict[str, Any], labels: dict[str, str]) -> bool:
    have = pod["metadata"].get("labels") or {}
    return all(have.get(k) == v for k, v in labels.items())


async def test_the_audit_runs_with_two_executor_pods_that_reach_the_driver_and_go_afterwards(
        node: Node, scm_image: str, audit_image: str, tmp_path: Path) -> None:
    async with node_environment(node, tmp_path, operator="pod") as env:
        assert isinstance(env, KindEnv)
        await env.create(NAME, {"replicas": 3, "audit": {
            "enabled": True, "schedule": "* * * * *", "suspend": True,
            "master": "k8s://https://kubernetes.default.svc",
            # two cores on this node: a small request each, so both executors fit beside the ring
            "executors": {"instances": EXECUTORS, "cores": 1, "memory": "512m", "cpuRequest": "100m"}}})
        dn = scm_ring.datanode_pod(NAME, env.ns, scm_ring.member_names(NAME, 3), DEFAULT_IMAGE)
        dn["spec"]["containers"][0]["command"] += ["--containers-per-node", "2"]
        env.api.put_object(dn)
        await env.wait_ready(NAME, timeout=300)
        service = await env.wait_for(
            lambda: env.api.get_object("v1", "Service", naming.audit_driver_service_name(NAME), env.ns), 60,
            "the driver's headless Service")
        assert service["spec"]["clusterIP"] == "None"
        deadline = time.monotonic() + 300
        while not await env.containers(NAME):
            assert time.monotonic() < deadline, "no container allocated by the simulated datanodes within 300s"
            await asyncio.sleep(1)

        env.patch_spec(NAME, {"audit": {"suspend": False}})
        audit_labels = naming.audit_labels(NAME)
        executor_labels = {**audit_labels, naming.LABEL_COMPONENT: "audit-executor"}

        def jobs() -> list[dict[str, Any]]:
            return [j for j in env.api.list_objects("batch/v1", "Job", env.ns) if _labelled(j, audit_labels)]

        (job,) = await env.wait_for(jobs, 150, "a Job from the audit CronJob")
        job_name = job["metadata"]["name"]
        env.patch_spec(NAME, {"audit": {"suspend": True}})  # one run is enough; the one started goes on

        # while the driver runs: both executors Running at once, each registered with the driver
        registered: dict[str, str] = {}
        snapshot = ""
        seen: dict[str, dict[str, Any]] = {}

        def executors_working() -> bool:
            nonlocal snapshot
            running = []
            for p in env.api.list_objects("v1", "Pod", env.ns):
                if not _labelled(p, executor_labels):
                    continue
                seen[p["metadata"]["name"]] = p
                if (p.get("status") or {}).get("phase") == "Running":
                    running.append(p["metadata"]["name"])
                    if p["metadata"]["name"] not in registered:
                        log = env.kubelet.logs(env.ns, p["metadata"]["name"]) if _started(p) else ""
                        if REGISTERED in log:
                            registered[p["metadata"]["name"]] = log
            if len(running) == EXECUTORS and not snapshot:
                snapshot = env.kind.kubectl("get", "pods", "-A", "-o", "wide")
            return len(registered) >= EXECUTORS and bool(snapshot)

        def job_finished() -> dict[str, Any] | None:
            j = env.api.get_object("batch/v1", "Job", job_name, env.ns) or {}
            conds = {c["type"]: c["status"] for c in (j.get("status") or {}).get("conditions") or ()}
            return j if "True" in (conds.get("Complete"), conds.get("Failed")) else None

        def working_or_finished() -> bool:
            return executors_working() or job_finished() is not None

        await env.wait_for(working_or_finished, 600, f"{EXECUTORS} executor Pods registered with the driver", poll=0.5)
        driver = next((p for p in env.api.list_objects("v1", "Pod", env.ns)
                       if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == job_name), None)
        assert driver is not None
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "audit-executors-pods.txt").write_text(snapshot)
        print(f"\nkubectl get pods -A -o wide while the executors ran:\n{snapshot}")
        assert len(registered) == EXECUTORS, (
            f"executors seen: {sorted(seen)}, registered: {sorted(registered)}; driver log:\n"
            + env.kind.kubectl("logs", "-n", env.ns, driver["metadata"]["name"], "-c", "audit")[-4000:])
        for name, p in seen.items():
            assert p["spec"]["nodeName"] == NODE_NAME, name
            assert p["spec"]["containers"][0]["image"] == audit_builders.derived_audit_image(DEFAULT_IMAGE), name
            owner = (p["metadata"].get("ownerReferences") or [{}])[0]
            assert (owner.get("kind"), owner.get("name")) == ("Pod", driver["metadata"]["name"]), owner
            assert p["metadata"]["labels"].get("spark-role") == "executor"
        assert driver["spec"]["serviceAccountName"] == "ozone-scm-audit"
        assert driver["metadata"]["name"] in snapshot and all(n in snapshot for n in registered)

        done = await env.wait_for(job_finished, 600, f"Job {job_name} finished")
        driver = env.api.get_object("v1", "Pod", driver["metadata"]["name"], env.ns) or driver
        statuses = {c["name"]: c for c in driver["status"].get("containerStatuses", [])}
        assert done["status"].get("succeeded") == 1, json.dumps(
            {"job": done["status"], "statuses": statuses,
             "log": env.kind.kubectl("logs", "-n", env.ns, driver["metadata"]["name"], "-c", "audit")[-4000:]},
            indent=1)
        summary = json.loads(statuses["audit"]["state"]["terminated"]["message"])
        assert summary["containers"] > 0 and summary["agreesWithSCM"] is True, summary

        pvc = env.api.get_object("v1", "PersistentVolumeClaim", naming.audit_pvc_name(NAME), env.ns)
        assert pvc is not None
        reports = env.kubelet.pvc_dir(pvc)
        on_disk = json.loads((reports / "summary.json").read_text())
        assert on_disk["runId"] == summary["runId"] and on_disk["containers"]["total"] == summary["containers"]
        # the export sat on the report volume (where the executors read it), hidden from the report's own listing
        assert (reports / ".scratch" / "export").is_dir()

        def recorded() -> dict[str, Any] | None:
            audit = env.status(NAME).get("audit") or {}
            return audit if audit.get("lastJob") == job_name and audit.get("lastSummary") else None

        audit = await env.wait_for(recorded, 120, "status.audit of the run")
        assert audit["lastResult"] == "Succeeded" and audit["lastSummary"] == {**summary, "job": job_name}, audit

        # Spark deleted its executors when the driver stopped (and they are owned by the driver's Pod besides)
        def executors_gone() -> bool:
            left = [p["metadata"]["name"] for p in env.api.list_objects("v1", "Pod", env.ns)
                    if _labelled(p, executor_labels)]
            return not left

        await env.wait_for(executors_gone, 120, "the executor Pods gone")
        assert all(env.api.get_object("v1", "Pod", name, env.ns) is None for name in seen)
        assert env.members(NAME) == ["scm-0", "scm-1", "scm-2"] and env.is_ready(NAME, 3)


def _started(pod: dict[str, Any]) -> bool:
    return any("running" in (cs.get("state") or {}) or "terminated" in (cs.get("state") or {})
               for cs in (pod.get("status") or {}).get("containerStatuses") or ())
