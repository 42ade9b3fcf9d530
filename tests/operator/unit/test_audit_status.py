"""``status.audit`` from the audit's CronJob, Jobs and their Pods' termination messages (pure)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ozone_scm_operator import planner
from ozone_scm_operator.audit_status import audit_status
from ozone_scm_operator.model import ClusterStatus
from ozone_scm_operator.spec import parse_spec

from .sim import World

SUMMARY = {"runId": "r1", "containers": 100, "notHealthy": 2, "findings": 3, "agreesWithSCM": True}


def job(name: str, result: str | None, at: str, message: str = "") -> dict[str, Any]:
    conds = []
    if result == "Complete":
        conds = [{"type": "Complete", "status": "True", "lastTransitionTime": at}]
    elif result == "Failed":
        conds = [{"type": "Failed", "status": "True", "lastTransitionTime": at, "reason": "BackoffLimitExceeded",
                  "message": message}]
    status: dict[str, Any] = {"conditions": conds}
    if result == "Complete":
        status["completionTime"] = at
    return {"metadata": {"name": name}, "status": status}


def pod(job_name: str, message: str | None) -> dict[str, Any]:
    term = {"exitCode": 0, **({"message": message} if message is not None else {})}
    return {
        "metadata": {"name": f"{job_name}-x", "labels": {"batch.kubernetes.io/job-name": job_name}},
        "status": {"containerStatuses": [{"name": "audit", "state": {"terminated": term}}]},
    }


CJ = {"metadata": {"name": "scm-audit"},
      "status": {"lastScheduleTime": "2026-11-23T03:00:00Z", "lastSuccessfulTime": "2026-11-22T03:20:00Z"}}


def test_no_cronjob_and_no_jobs_is_no_status() -> None:
    assert audit_status(None, [], []) is None


def test_the_newest_finished_run_and_the_newest_successful_summary() -> None:
    jobs = [
        job("scm-audit-1", "Complete", "2026-11-22T03:20:00Z"),
        job("scm-audit-2", "Failed", "2026-11-23T03:05:00Z", "Job has reached the specified backoff limit"),
        job("scm-audit-3", None, ""),  # still running: not a finished run
    ]
    pods = [pod("scm-audit-1", json.dumps(SUMMARY)),
            pod("scm-audit-2", "Error: the export directory is empty")]
    got = audit_status(CJ, jobs, pods)
    assert got == {
        "lastScheduleTime": "2026-11-23T03:00:00Z",
        "lastSuccessfulTime": "2026-11-22T03:20:00Z",
        "lastJob": "scm-audit-2",
        "lastResult": "Failed",
        "lastMessage": "Error: the export directory is empty",
        "lastSummary": {**SUMMARY, "job": "scm-audit-1"},
    }


def test_a_failed_run_without_a_termination_message_reports_the_jobs_condition() -> None:
    got = audit_status(CJ, [job("scm-audit-2", "Failed", "2026-11-23T03:05:00Z", "backoff limit")], [])
    assert got is not None and got["lastMessage"] == "backoff limit" and "lastSummary" not in got


def test_a_message_that_is_not_a_summary_is_not_taken_for_one() -> None:
    jobs = [job("scm-audit-1", "Complete", "2026-11-22T03:20:00Z")]
    for message in ("audit 1: 10 containers", json.dumps({"runId": "r"}), None):
        got = audit_status(CJ, jobs, [pod("scm-audit-1", message)])
        assert got is not None and got["lastResult"] == "Succeeded" and "lastSummary" not in got


def test_the_planner_records_what_was_observed_and_keeps_it_through_the_api_round_trip() -> None:
    w = World({"replicas": 1, "audit": {"enabled": True}})
    w.run()
    seen = audit_status(CJ, [job("scm-audit-1", "Complete", "2026-11-22T03:20:00Z")],
                        [pod("scm-audit-1", json.dumps(SUMMARY))])
    spec, problems = parse_spec(w.spec_raw)
    obs = w.observe()
    p = planner.plan(w.ref, spec, problems, 1, ClusterStatus.from_raw(w.status_raw),
                     dataclasses.replace(obs, audit=seen))
    raw = json.loads(json.dumps(p.status.to_raw()))
    assert raw["audit"]["lastSummary"] == {**SUMMARY, "job": "scm-audit-1"}
    assert ClusterStatus.from_raw(raw).audit == seen
