"""The scheduled Spark audit on Kubernetes, end to end in containers (issue 8, item 4).

The real ``ozone-scm-operator`` process creates an ``OzoneSCMCluster`` with ``spec.audit`` whose member Pods the
kubelet fixture runs as podman containers from the SCM image, next to simulated datanodes that allocate and hold
containers. Once the ring has formed, the operator's CronJob is no longer suspended. The emulated API server has no
CronJob or Job controller, so the test plays them exactly as Kubernetes does: a Job from the CronJob's
``jobTemplate``, a Pod from the Job's template labelled with ``batch.kubernetes.io/job-name``, and, when the Pod has
finished, the Job's ``Complete`` condition. Everything in between is real: the kubelet fixture runs the audit Pod
from the audit image (Java + PySpark) with the Pod spec the operator built (the export init container reaching
every SCM through the cluster's Services, then ``audit run`` on a local Spark writing to the report volume and
its summary to ``/dev/termination-log``), and the operator records that summary in ``status.audit``.

A second test submits the job with ``spark-submit --master k8s://`` in cluster mode against the emulated API server
(the way a large cluster runs it, or a ``SparkApplication`` of the Spark operator does): Spark's own Kubernetes
client creates the driver Pod running the job script inside the audit image, and its configuration ConfigMap.

Not part of ``make test``: ``make e2e-container`` builds both images and runs them; ``.ci/run`` does so.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from scm_server.client.scm_client import SCMClient
from tests.e2e.local import scm_ring
from tests.e2e.local.apiserver import serving
from tests.e2e.local.operator_env import Env, environment

pytestmark = pytest.mark.container
IMAGE = "localhost/ozone-scm:dev"
AUDIT_IMAGE = "localhost/ozone-scm-audit:dev"
NAME = "scm"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def cronjob(env: Env) -> dict[str, Any] | None:
    return env.api.get_object("batch/v1", "CronJob", f"{NAME}-audit", env.ns)


async def container_count(ips: dict[str, str]) -> int:
    async with SCMClient([f"{ip}:19860" for ip in ips.values()]) as client:
        containers, _ = await asyncio.wait_for(client.list_containers(count=10), 20)
    return len(containers)


def job_from(cj: dict[str, Any], name: str) -> dict[str, Any]:
    """What the CronJob controller creates for one scheduled time."""
    template = cj["spec"]["jobTemplate"]
    meta = cj["metadata"]
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": meta["namespace"], "labels": dict(template["metadata"]["labels"]),
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": meta["name"],
                                          "uid": meta["uid"], "controller": True}]},
        "spec": template["spec"],
    }


def pod_from(job: dict[str, Any]) -> dict[str, Any]:
    """What the Job controller creates (one attempt: ``backoffLimit: 0``)."""
    template = job["spec"]["template"]
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-a1", "namespace": job["metadata"]["namespace"],
                     "labels": {**template["metadata"]["labels"], JOB_NAME_LABEL: name}},
        "spec": template["spec"],
    }


@pytest.mark.timeout(1500)
async def test_scheduled_audit_pod_runs_spark_in_the_audit_image_and_reports_to_status(tmp_path: Path) -> None:
    for image, target in ((IMAGE, "make image"), (AUDIT_IMAGE, "make audit-image")):
        if subprocess.run(["podman", "image", "exists", image], capture_output=True).returncode != 0:
            pytest.fail(f"image {image} not found: run `{target}` first (make e2e-container does)")
    async with environment(tmp_path, runtime="podman") as env:
        await env.create(NAME, {"replicas": 3, "image": IMAGE, "imagePullPolicy": "Never",
                                "ozoneSite": {"ozone.scm.ha.ratis.fsync": "false"},
                                "audit": {"enabled": True, "schedule": "17 3 * * *"}})  # the default audit image
        dn = scm_ring.datanode_pod(NAME, env.ns, scm_ring.member_names(NAME, 3), IMAGE)
        dn["spec"]["containers"][0]["command"] += ["--containers-per-node", "2"]
        env.api.put_object(dn)
        await env.wait_ready(NAME, timeout=600)

        cj = await env.wait_for(lambda: (c := cronjob(env)) and c["spec"]["suspend"] is False and c, 120,
                                "the audit CronJob, not suspended once the ring has formed")
        pod_spec = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        assert [c["image"] for c in pod_spec["initContainers"] + pod_spec["containers"]] == [AUDIT_IMAGE] * 2

        # Containers exist before the run (the datanodes allocate them once SCM has left safemode).
        deadline = time.monotonic() + 300
        while await container_count(env.member_ips(NAME)) == 0:
            assert time.monotonic() < deadline, "no container allocated by the simulated datanodes within 300s"
            await asyncio.sleep(1)

        job = job_from(cj, f"{NAME}-audit-29000001")
        env.api.put_object(job)
        pod = pod_from(env.api.get_object("batch/v1", "Job", job["metadata"]["name"], env.ns) or job)
        env.api.put_object(pod)
        pod_name = pod["metadata"]["name"]

        def finished() -> dict[str, Any] | None:
            p = env.api.get_object("v1", "Pod", pod_name, env.ns) or {}
            return p if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

        done = await env.wait_for(finished, 900, "the audit Pod finished")
        statuses = {c["name"]: c for c in done["status"].get("initContainerStatuses", [])
                    + done["status"].get("containerStatuses", [])}
        logs = {n: env.kubelet.logs(env.ns, pod_name, n)[-3000:] for n in ("export", "audit")}
        assert done["status"]["phase"] == "Succeeded", json.dumps({"statuses": statuses, "logs": logs}, indent=1)
        summary = json.loads(statuses["audit"]["state"]["terminated"]["message"])
        assert summary["containers"] > 0 and summary["agreesWithSCM"] is True, summary

        # The report is on the report volume, where the next runs find it for their trends.
        pvc = env.api.get_object("v1", "PersistentVolumeClaim", f"{NAME}-audit-reports", env.ns)
        assert pvc is not None
        reports = env.kubelet.pvc_dir(pvc)
        on_disk = json.loads((reports / "summary.json").read_text())
        assert on_disk["runId"] == summary["runId"] and on_disk["containers"]["total"] == summary["containers"]
        assert (reports / "report.html").read_text().count(summary["runId"]) >= 1

        # The Job controller marks the Job complete; the operator records the run in status.audit.
        env.api.patch_object("batch/v1", "Job", job["metadata"]["name"], env.ns, {"status": {
            "succeeded": 1, "startTime": done["status"].get("startTime"),
            "completionTime": statuses["audit"]["state"]["terminated"]["finishedAt"],
            "conditions": [{"type": "Complete", "status": "True",
                            "lastTransitionTime": statuses["audit"]["state"]["terminated"]["finishedAt"]}]}},
            subresource="status")

        def recorded() -> dict[str, Any] | None:
            audit = env.status(NAME).get("audit") or {}
            return audit if audit.get("lastSummary") else None

        audit = await env.wait_for(recorded, 120, "status.audit.lastSummary")
        assert audit["lastJob"] == job["metadata"]["name"] and audit["lastResult"] == "Succeeded"
        assert audit["lastSummary"] == {**summary, "job": job["metadata"]["name"]}
        # The audit Pod is nobody's member: the ring is still the three members, Ready.
        assert env.members(NAME) == ["scm-0", "scm-1", "scm-2"]
        assert env.is_ready(NAME, 3)


JOB_IN_IMAGE = "/opt/ozone-scm/lib/python3.11/site-packages/scm_audit/job.py"


@pytest.mark.timeout(300)
async def test_spark_submit_to_k8s_creates_the_driver_pod_of_the_audit_job() -> None:
    if subprocess.run(["podman", "image", "exists", AUDIT_IMAGE], capture_output=True).returncode != 0:
        pytest.fail(f"image {AUDIT_IMAGE} not found: run `make audit-image` first (make e2e-container does)")
    # the job script a k8s:// submission names (local://) is where the audit image has it
    found = subprocess.run(["podman", "run", "--rm", "--network", "none", "--entrypoint", "test", AUDIT_IMAGE,
                            "-f", JOB_IN_IMAGE], capture_output=True)
    assert found.returncode == 0, f"{JOB_IN_IMAGE} is not in {AUDIT_IMAGE}"
    bin_dir = os.path.dirname(sys.executable)
    async with serving() as (api, url):
        api.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ozone"}})
        api.put_object({"apiVersion": "v1", "kind": "ServiceAccount",
                        "metadata": {"name": "scm-audit", "namespace": "ozone"}})
        argv = [os.path.join(bin_dir, "spark-submit"), "--master", f"k8s://{url}", "--deploy-mode", "cluster",
                "--name", "scm-audit",
                "--conf", f"spark.kubernetes.container.image={AUDIT_IMAGE}",
                "--conf", "spark.kubernetes.namespace=ozone",
                "--conf", "spark.kubernetes.driver.pod.name=scm-audit-driver",
                "--conf", "spark.kubernetes.authenticate.driver.serviceAccountName=scm-audit",
                "--conf", "spark.kubernetes.submission.waitAppCompletion=false",
                f"local://{JOB_IN_IMAGE}", "--input", "/audit/scratch/export", "--out", "/audit/reports"]
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SPARK_LOCAL_IP": "127.0.0.1"}
        proc = await asyncio.create_subprocess_exec(*argv, env=env, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), 240)
        assert proc.returncode == 0, out.decode()[:3000]
        driver = api.get_object("v1", "Pod", "scm-audit-driver", "ozone")
        assert driver is not None, out.decode()[-3000:]
        assert driver["metadata"]["labels"]["spark-role"] == "driver"
        assert driver["spec"]["serviceAccountName"] == "scm-audit"
        (container,) = driver["spec"]["containers"]
        assert container["image"] == AUDIT_IMAGE
        assert container["args"][:1] == ["driver"]
        assert f"local://{JOB_IN_IMAGE}" in container["args"]
        assert container["args"][-4:] == ["--input", "/audit/scratch/export", "--out", "/audit/reports"]
        conf_maps = {v["configMap"]["name"] for v in driver["spec"]["volumes"] if "configMap" in v}
        (conf_map,) = conf_maps
        props = (api.get_object("v1", "ConfigMap", conf_map, "ozone") or {}).get("data", {}).get("spark.properties", "")
        assert f"spark.master=k8s://{url}" in props.replace("\\:", ":"), props  # Java properties escape ":"
