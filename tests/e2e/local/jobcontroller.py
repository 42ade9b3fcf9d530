"""A fixture that plays Kubernetes' Job controller for the local end-to-end tier (the emulated API server runs no
controllers): for every Job in a namespace it creates one Pod from the Job's template, and when that Pod ends it
writes the Job's ``Complete`` or ``Failed`` condition, as the real controller does for ``backoffLimit: 0``.

Used by the operator's backup scenarios (the operator creates the backup Jobs; the kubelet fixture runs their Pods).
Test support only: nothing in ``scm_server`` or the operator imports it. Jobs asking for retries (``backoffLimit``
above 0) or parallelism are refused loudly instead of being run differently from a real cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import logging
from collections.abc import AsyncIterator
from typing import Any

log = logging.getLogger(__name__)

JOB_NAME = "batch.kubernetes.io/job-name"


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class JobController:
    def __init__(self, api: Any, namespace: str, poll: float = 0.25) -> None:
        self.api = api
        self.ns = namespace
        self.poll = poll
        self.refused: list[str] = []

    def pod_name(self, job: dict[str, Any]) -> str:
        digest = hashlib.sha256(job["metadata"].get("uid", job["metadata"]["name"]).encode()).hexdigest()[:5]
        return f"{job['metadata']['name']}-{digest}"

    def sync_once(self) -> None:
        pods = {p["metadata"]["name"]: p for p in self.api.list_objects("v1", "Pod", self.ns)}
        for job in self.api.list_objects("batch/v1", "Job", self.ns):
            meta, spec = job["metadata"], job.get("spec") or {}
            if any(c.get("status") == "True" and c.get("type") in ("Complete", "Failed")
                   for c in (job.get("status") or {}).get("conditions") or ()):
                continue
            if spec.get("backoffLimit", 6) != 0 or spec.get("parallelism", 1) != 1:
                if meta["name"] not in self.refused:
                    self.refused.append(meta["name"])
                    log.error("Job %s asks for retries or parallelism, which this fixture does not play", meta["name"])
                continue
            name = self.pod_name(job)
            pod = pods.get(name)
            if pod is None:
                template = spec["template"]
                labels = {**(template.get("metadata") or {}).get("labels", {}), JOB_NAME: meta["name"],
                          "job-name": meta["name"]}
                self.api.put_object({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": self.ns, "labels": labels, "ownerReferences": [{
                        "apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta.get("uid"),
                        "controller": True, "blockOwnerDeletion": True}]},
                    "spec": template["spec"],
                })
                self.api.patch_object("batch/v1", "Job", meta["name"], self.ns,
                                      {"status": {"active": 1, "startTime": _now()}}, subresource="status")
                continue
            phase = (pod.get("status") or {}).get("phase")
            if phase == "Succeeded":
                status = {"active": 0, "succeeded": 1, "completionTime": _now(), "conditions": [
                    {"type": "Complete", "status": "True", "lastTransitionTime": _now()}]}
            elif phase == "Failed":
                status = {"active": 0, "failed": 1, "conditions": [
                    {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                     "message": "Job has reached the specified backoff limit", "lastTransitionTime": _now()}]}
            else:
                continue
            self.api.patch_object("batch/v1", "Job", meta["name"], self.ns, {"status": status}, subresource="status")

    async def run(self) -> None:
        while True:
            try:
                self.sync_once()
            except Exception:  # the next round retries; a test fails on what it waits for, not here
                log.exception("job controller round failed")
            await asyncio.sleep(self.poll)


@contextlib.asynccontextmanager
async def running(api: Any, namespace: str, *, enabled: bool = True) -> AsyncIterator[JobController]:
    """Play the Job controller in ``namespace`` while the block runs; ``enabled=False`` (a real control plane, whose
    kube-controller-manager runs the real one) plays nothing."""
    ctl = JobController(api, namespace)
    if not enabled:
        yield ctl
        return
    task = asyncio.ensure_future(ctl.run())
    try:
        yield ctl
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
