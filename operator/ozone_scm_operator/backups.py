"""Pure: a cluster's ``OzoneSCMBackup`` objects, their Jobs and ``spec.backup`` -> the next backup step, and the
backups' summary for the cluster's ``status.backup``.

Called by the planner once per pass (its ``_backups`` concern), after the members' own work. No I/O, no clock
(``now`` is passed in), no randomness. At most one step per pass, in this order:

1. **deleted backups** (``deletionTimestamp`` with the ``ozone-scm.io/backup-data`` finalizer): wait for a backup
   Job still writing, then a clean-up Job deletes ``/backups/<name>`` on the backup volume (or, for a backup whose
   ``status.location`` is an ``s3://`` URL, the objects under it, manifest first), then the finalizer is
   removed. A backup that never started writing loses its finalizer at once. A failed clean-up keeps the finalizer
   (nothing is removed that was not checked) and says why;
2. **running backups**: the Job created if missing; when it ends, the object's status says ``Completed`` with
   term, index, cluster ID and size (the verify container's summary), or ``Failed`` with the reason in one line;
3. **pending backups**, oldest first, one at a time: the backup volume created if missing (not with
   ``spec.backup.s3``), then ``Running`` (with ``startedAt``, ``location``: ``backupPath`` or the ``s3://`` URL, and
   the finalizer) written into the object before its Job is created. A backup
   waits (``Pending`` with the reason as ``message``) while another one runs, while the ring has not formed or has
   no leader;
4. **the schedule** (``spec.backup.schedule``, cron in UTC): the latest scheduled time that has passed since the
   schedule was set and has no backup yet gets one (``<cluster>-<YYYYMMDDHHMM>``); missed runs are not made up;
5. **retention** (scheduled backups only; one-off backups are the user's): beyond ``keepLast`` newest, or older
   than ``maxAge``, finished backups are deleted (their data through step 1) -- never the newest ``Completed`` one.

``status.backup`` records the last completed backup (name, time, index), the one running, the schedule with its
last and next times, and ``deadline``: the time by which the next backup should have completed (the last one, or
the schedule's start, plus the longest gap between two scheduled times, plus an hour); the operator exports it as
a metric and the chart's ``OzoneSCMBackupTooOld`` alert fires after it.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from croniter import croniter

from ozone_scm_operator import backup_builders, naming
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.model import BackupObs, JobObs, format_time, parse_time
from ozone_scm_operator.spec import ClusterSpec

Body = dict[str, Any]

DEADLINE_GRACE = datetime.timedelta(hours=1)  # time a scheduled backup has to complete after its scheduled time
_GAP_SAMPLES = 32  # scheduled times looked at for the longest gap (weekday and monthly schedules included)


class Phase(enum.StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"


# ---- the steps (the planner turns each into one Action) ----


@dataclasses.dataclass(frozen=True)
class CreateVolume:
    body: Body


@dataclasses.dataclass(frozen=True)
class UpdateBackup:
    """Write ``status`` into the backup's status and, when not None, set its finalizers."""

    backup: BackupObs
    status: Body
    finalizers: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True)
class CreateJob:
    backup: BackupObs
    body: Body


@dataclasses.dataclass(frozen=True)
class CreateBackup:
    body: Body


@dataclasses.dataclass(frozen=True)
class DeleteBackup:
    backup: BackupObs


Step = CreateVolume | UpdateBackup | CreateJob | CreateBackup | DeleteBackup


@dataclasses.dataclass(frozen=True)
class BackupPlan:
    step: Step | None
    reason: str = ""  # the step's Event reason and message (on the cluster and, when it has one, the backup)
    message: str = ""
    status: Mapping[str, Any] | None = None  # the cluster's status.backup
    notes: tuple[tuple[str, str], ...] = ()  # (reason, message) for the cluster's Degraded condition


@dataclasses.dataclass(frozen=True)
class Inputs:
    ref: ClusterRef
    spec: ClusterSpec
    now: datetime.datetime
    cluster_id: str | None  # the ring's, once formed
    has_leader: bool
    backups: Mapping[str, BackupObs]
    jobs: Mapping[str, JobObs]
    volume_exists: bool
    recorded: Mapping[str, Any] | None  # status.backup as last written
    admissible: Callable[[str, Mapping[str, Any]], bool]  # the namespace's Pod Security admits this Pod spec


# ---- helpers ----


def _one_line(text: str | None, limit: int = 300) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    line = lines[-1] if lines else ""
    return line.removeprefix("Error: ")[:limit]


def summary_of(message: str | None) -> dict[str, Any] | None:
    """The verify container's summary (``backup verify --status-file``), or None when it is not one."""
    try:
        data = json.loads(message or "")
    except ValueError:
        return None
    keys = ("clusterID", "term", "index", "sizeBytes")
    if not isinstance(data, dict) or not all(k in data for k in keys):
        return None
    return data


def longest_gap(schedule: str, start: datetime.datetime) -> datetime.timedelta:
    """The longest time between two consecutive scheduled times after ``start`` (a weekday schedule's weekend)."""
    it = croniter(schedule, start)
    times = [it.get_next(datetime.datetime) for _ in range(_GAP_SAMPLES)]
    return max(b - a for a, b in itertools.pairwise(times))


def _previous(schedule: str, now: datetime.datetime) -> datetime.datetime:
    t: datetime.datetime = croniter(schedule, now).get_prev(datetime.datetime)
    return t


def _next(schedule: str, now: datetime.datetime) -> datetime.datetime:
    t: datetime.datetime = croniter(schedule, now).get_next(datetime.datetime)
    return t


def _wanted(b: BackupObs, status: Mapping[str, Any]) -> bool:
    """Whether ``status`` says something the backup's stored status does not."""
    return any(b.status.get(k) != v for k, v in status.items())


def _order(b: BackupObs) -> tuple[datetime.datetime, str]:
    return (b.created_at or datetime.datetime.min.replace(tzinfo=datetime.UTC), b.name)


# ---- the plan ----


def plan(i: Inputs) -> BackupPlan:
    notes: list[tuple[str, str]] = []
    backups = sorted(i.backups.values(), key=_order)
    status = _cluster_status(i, backups)
    step, reason, message = _step(i, backups, notes, status)
    return BackupPlan(step=step, reason=reason, message=message, status=status or None, notes=tuple(notes))


def _step(i: Inputs, backups: Sequence[BackupObs], notes: list[tuple[str, str]],
          status: Mapping[str, Any]) -> tuple[Step | None, str, str]:
    for b in backups:
        if b.deleting:
            found = _deleted(i, b, notes)
            if found is not None:
                return found
    live = [b for b in backups if not b.deleting]
    for b in live:
        if b.phase == Phase.RUNNING:
            found = _running(i, b)
            if found[0] is not None:
                return found
    for b in live:
        if b.phase in (None, "", Phase.PENDING):
            return _pending(i, b)
    found = _schedule(i, backups, status)
    if found is not None:
        return found
    return _retention(i, live)


def location_of(b: BackupObs) -> str:
    """Where a backup's data is: ``status.location`` (an ``s3://`` URL or a directory), else ``backupPath`` (backups
    recorded before object storage), else its directory on the backup volume."""
    for key in ("location", "backupPath"):
        value = b.status.get(key)
        if isinstance(value, str) and value:
            return value
    return naming.backup_path(b.name)


def _deleted(i: Inputs, b: BackupObs, notes: list[tuple[str, str]]) -> tuple[Step | None, str, str] | None:
    if naming.FINALIZER_BACKUP_DATA not in b.finalizers:
        return None
    rest = tuple(f for f in b.finalizers if f != naming.FINALIZER_BACKUP_DATA)
    taking = i.jobs.get(naming.backup_job_name(b.name))
    if taking is not None and taking.result is None:
        return (None, "", "")  # the backup still writes: delete its data once it stopped
    path = location_of(b)
    in_s3 = path.startswith("s3://")
    where = path if in_s3 else f"{path} on {naming.backup_pvc_name(i.ref.name)}"
    if (not in_s3 and not i.volume_exists) or (b.phase in (None, "", Phase.PENDING) and taking is None):
        return (UpdateBackup(b, {}, rest), "BackupDeleted",
                f"backup {b.name} deleted (it wrote no data to the backup volume)")
    cleaning = i.jobs.get(naming.backup_delete_job_name(b.name))
    if cleaning is None:
        if in_s3 and i.spec.backup.s3 is None:
            notes.append((
                "BackupDataNotDeleted",
                f"the data of deleted backup {b.name} is in object storage ({path}) and spec.backup.s3 is not set: "
                f"set it (endpoint, credentialsSecret) so that it can be deleted, or remove the finalizer "
                f"{naming.FINALIZER_BACKUP_DATA} to keep the data",
            ))
            return None
        owner = backup_builders.backup_ref(i.ref, b.name, b.uid)
        body = backup_builders.build_delete_job(i.ref, i.spec, b.name, owner, path if in_s3 else None)
        return (CreateJob(b, body), "DeletingBackupData", f"deleting the data of backup {b.name} ({where})")
    if cleaning.result == "Succeeded":
        return (UpdateBackup(b, {}, rest), "BackupDeleted", f"backup {b.name} and its data {path} deleted")
    if cleaning.result == "Failed":
        notes.append((
            "BackupDataNotDeleted",
            f"the data of deleted backup {b.name} ({path}) could not be deleted: "
            f"{_one_line(cleaning.message) or 'the clean-up Job failed'}; it is kept. Fix it, then delete Job "
            f"{cleaning.name} to try again (or remove the finalizer {naming.FINALIZER_BACKUP_DATA} to keep the data)",
        ))
    return None


def _running(i: Inputs, b: BackupObs) -> tuple[Step | None, str, str]:
    job = i.jobs.get(naming.backup_job_name(b.name))
    if job is None:
        if i.cluster_id is None:
            return (None, "", "")
        owner = backup_builders.backup_ref(i.ref, b.name, b.uid)
        body = backup_builders.build_backup_job(i.ref, i.spec, b.name, owner, i.cluster_id)
        if not i.admissible(f"the Pod of backup Job {body['metadata']['name']}", body["spec"]["template"]["spec"]):
            return (None, "", "")
        return (CreateJob(b, body), "BackupStarted",
                f"backing up the ring into {location_of(b)} (Job {body['metadata']['name']})")
    if job.result is None:
        return (None, "", "")
    done = format_time(job.finished_at or i.now)
    if job.result == "Succeeded":
        summary = summary_of(job.message)
        if summary is not None:
            st = {"phase": Phase.COMPLETED.value, "completedAt": done, "term": summary["term"],
                  "index": summary["index"], "clusterID": summary["clusterID"], "sizeBytes": summary["sizeBytes"],
                  "message": f"backup verified: term {summary['term']}, index {summary['index']}, "
                             f"{summary['sizeBytes']} bytes"}
            if isinstance(summary.get("rootCAFingerprint"), str):
                st["rootCAFingerprint"] = summary["rootCAFingerprint"]
                st["includesRootKey"] = bool(summary.get("includesRootKey"))
            return (UpdateBackup(b, st), "BackupCompleted",
                    f"backup {b.name} completed and verified at term {summary['term']} index {summary['index']} "
                    f"({summary['sizeBytes']} bytes in {location_of(b)})")
        why = "the backup Job succeeded but left no summary (backup verify --status-file)"
    else:
        why = _one_line(job.message) or "the backup Job failed"
    st = {"phase": Phase.FAILED.value, "completedAt": done, "message": why}
    return (UpdateBackup(b, st), "BackupFailed", f"backup {b.name} failed: {why}")


def _pending(i: Inputs, b: BackupObs) -> tuple[Step | None, str, str]:
    running = next((x for x in i.backups.values() if x.phase == Phase.RUNNING and not x.deleting), None)
    wait = None
    if i.spec.paused:
        wait = "the cluster is paused (spec.paused)"
    elif i.cluster_id is None:
        wait = "the ring has not formed yet"
    elif not i.has_leader:
        wait = "the ring has no leader"
    elif running is not None:
        wait = f"backup {running.name} is running (one backup at a time)"
    if wait is not None:
        pending = {"phase": Phase.PENDING.value, "message": f"waiting: {wait}"}
        if _wanted(b, pending):
            return (UpdateBackup(b, pending), "BackupPending", f"backup {b.name} waits: {wait}")
        return (None, "", "")
    s3 = i.spec.backup.s3
    if s3 is None and not i.volume_exists:
        body = backup_builders.build_backup_pvc(i.ref, i.spec)
        return (CreateVolume(body), "CreatingBackupVolume",
                f"creating the backup volume {body['metadata']['name']} ({i.spec.backup.volume_size})")
    location = backup_builders.backup_location(i.spec, b.name)
    st: dict[str, Any] = {"phase": Phase.RUNNING.value, "startedAt": format_time(i.now), "location": location,
                          "completedAt": None}
    if s3 is None:
        st["backupPath"] = location
        st["message"] = f"backing up into {location} on {naming.backup_pvc_name(i.ref.name)}"
    else:
        st["message"] = f"backing up into {location} (at {s3.endpoint})"
    finalizers = (*b.finalizers, naming.FINALIZER_BACKUP_DATA) \
        if naming.FINALIZER_BACKUP_DATA not in b.finalizers else b.finalizers
    return (UpdateBackup(b, st, finalizers), "BackupRunning", f"backup {b.name} of cluster {i.ref.name} starts")


def _schedule(i: Inputs, backups: Sequence[BackupObs], status: Mapping[str, Any]) -> tuple[Step, str, str] | None:
    schedule = i.spec.backup.schedule
    if not schedule or i.spec.backup.suspend or i.spec.paused or i.cluster_id is None:
        return None
    since = parse_time(status.get("scheduleSince"))
    last = parse_time(status.get("lastScheduleTime"))
    due = _previous(schedule, i.now)
    if since is None or due <= since or (last is not None and due <= last):
        return None
    body = backup_builders.build_scheduled_backup(i.ref, due)
    if body["metadata"]["name"] in i.backups:
        return None  # a backup of that name exists (counted as this run)
    return (CreateBackup(body), "BackupScheduled",
            f"creating OzoneSCMBackup {body['metadata']['name']} (schedule {schedule!r}, due {format_time(due)})")


def _retention(i: Inputs, live: Sequence[BackupObs]) -> tuple[Step | None, str, str]:
    keep_last = i.spec.backup.retention.keep_last
    max_age = i.spec.backup.retention.max_age
    if keep_last is None and max_age is None:
        return (None, "", "")
    scheduled = sorted((b for b in live if b.scheduled_at is not None), key=lambda b: b.scheduled_at or i.now,
                       reverse=True)
    newest_completed = next((b for b in scheduled if b.phase == Phase.COMPLETED), None)
    doomed = []
    for n, b in enumerate(scheduled):
        if b is newest_completed or b.phase not in (Phase.COMPLETED, Phase.FAILED):
            continue
        beyond = keep_last is not None and n >= keep_last
        old = max_age is not None and b.scheduled_at is not None and i.now - b.scheduled_at > max_age
        if beyond or old:
            doomed.append((b, "beyond keepLast" if beyond else "older than maxAge"))
    if not doomed:
        return (None, "", "")
    b, why = doomed[-1]  # the oldest first
    return (DeleteBackup(b), "BackupExpired", f"deleting scheduled backup {b.name} ({why}; spec.backup.retention)")


def _cluster_status(i: Inputs, backups: Sequence[BackupObs]) -> dict[str, Any]:
    rec = dict(i.recorded or {})
    out: dict[str, Any] = {}
    done = [b for b in backups if b.phase == Phase.COMPLETED and b.completed_at is not None]
    newest = max(done, key=lambda b: b.completed_at or i.now, default=None)
    last_time = parse_time(rec.get("lastBackupTime"))
    if newest is not None and (last_time is None or (newest.completed_at and newest.completed_at >= last_time)):
        out["lastBackup"] = newest.name
        out["lastBackupTime"] = format_time(newest.completed_at)
        if isinstance(newest.status.get("index"), int):
            out["lastBackupIndex"] = newest.status["index"]
    else:
        # kept after the object is gone (retention, or deleted by hand): the metric and the alert still see it
        for k in ("lastBackup", "lastBackupTime", "lastBackupIndex"):
            if rec.get(k) is not None:
                out[k] = rec[k]
    running = next((b.name for b in backups if b.phase == Phase.RUNNING and not b.deleting), None)
    if running is not None:
        out["running"] = running
    schedule = i.spec.backup.schedule
    if schedule:
        out["schedule"] = schedule
        since = parse_time(rec.get("scheduleSince")) if rec.get("schedule") == schedule else None
        out["scheduleSince"] = format_time(since or i.now)
        stamps = [b.scheduled_at for b in backups if b.scheduled_at is not None]
        recorded_last = parse_time(rec.get("lastScheduleTime"))
        if recorded_last is not None:
            stamps.append(recorded_last)
        due = _previous(schedule, i.now)
        taken = naming.scheduled_backup_name(i.ref.name, backup_builders.schedule_stamp(due))
        if taken in i.backups:
            stamps.append(due)
        if stamps:
            out["lastScheduleTime"] = format_time(max(stamps))
        out["nextScheduleTime"] = format_time(_next(schedule, i.now))
        if i.spec.backup.suspend:
            out["suspended"] = True  # no deadline: nothing is expected while suspended
        else:
            starts = [t for t in (parse_time(out.get("lastBackupTime")), parse_time(out["scheduleSince"])) if t]
            start = max(starts, default=i.now)
            out["deadline"] = format_time(start + longest_gap(schedule, start) + DEADLINE_GRACE)
    return out
