"""Pure: the live audit CronJob, its Jobs and their Pods -> ``status.audit`` of the ``OzoneSCMCluster``.

Called by the reconciler after it lists the audit's objects (by :data:`naming.LABEL_AUDIT`); the planner copies
the result into status. No I/O, no clock. What it reports:

* ``lastScheduleTime`` / ``lastSuccessfulTime``: the CronJob's own status;
* ``lastJob`` and ``lastResult`` (``Succeeded``/``Failed``): the most recently finished Job;
* ``lastSummary``: the compact summary (``audit run --status-file /dev/termination-log``) that the audit container
  of the newest *successful* Job left as its termination message; ``lastMessage``: a failed run's reason (its
  termination message, or the Job's condition message), so ``kubectl get oscm -o yaml`` says why.

Bounded: the Jobs are those the CronJob's history limits keep.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

Body = Mapping[str, Any]

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
AUDIT_CONTAINER = "audit"


def _finished(job: Body) -> tuple[str, str, str] | None:
    """(result, finish time, message) of a finished Job, None while it runs."""
    st = job.get("status") or {}
    for c in st.get("conditions") or ():
        if c.get("status") != "True":
            continue
        if c.get("type") == "Complete":
            return "Succeeded", st.get("completionTime") or c.get("lastTransitionTime") or "", ""
        if c.get("type") == "Failed":
            return "Failed", c.get("lastTransitionTime") or "", c.get("message") or c.get("reason") or ""
    return None


def _termination_message(job_name: str, pods: Sequence[Body]) -> str | None:
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get(JOB_NAME_LABEL, labels.get("job-name")) != job_name:
            continue
        for cs in (pod.get("status") or {}).get("containerStatuses") or ():
            term = (cs.get("state") or {}).get("terminated") or {}
            if cs.get("name") == AUDIT_CONTAINER and term.get("message"):
                return str(term["message"])
    return None


def _summary(message: str | None) -> dict[str, Any] | None:
    if not message:
        return None
    try:
        data = json.loads(message)
    except ValueError:
        return None
    keys = ("runId", "containers", "notHealthy", "findings", "agreesWithSCM")
    if not isinstance(data, dict) or not all(k in data for k in keys):
        return None
    return {k: data[k] for k in keys}


def audit_status(cronjob: Body | None, jobs: Sequence[Body], pods: Sequence[Body]) -> dict[str, Any] | None:
    """``status.audit``, or None when there is no audit CronJob (and no Job left of one)."""
    if cronjob is None and not jobs:
        return None
    out: dict[str, Any] = {}
    cj_status = (cronjob or {}).get("status") or {}
    for key in ("lastScheduleTime", "lastSuccessfulTime"):
        if cj_status.get(key):
            out[key] = cj_status[key]
    finished = []
    for job in jobs:
        f = _finished(job)
        if f is not None:
            finished.append((f[1], job["metadata"]["name"], f[0], f[2]))
    if finished:
        _, name, result, message = max(finished)
        out["lastJob"], out["lastResult"] = name, result
        if result == "Failed":
            out["lastMessage"] = (_termination_message(name, pods) or message)[:1024]
    for _, name, result, _ in sorted(finished, reverse=True):
        if result == "Succeeded":
            summary = _summary(_termination_message(name, pods))
            if summary is not None:
                out["lastSummary"] = {**summary, "job": name}
            break
    return out
