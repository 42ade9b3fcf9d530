"""The planner and backups: a one-off OzoneSCMBackup runs as a Job into the backup volume and reports its result in
its status and Events; one backup at a time; deleting one deletes its data first; the schedule creates backups and
retention deletes the oldest; the cluster's status.backup and its deadline."""

from __future__ import annotations

import datetime

from ozone_scm_operator import backup_builders, backups, naming, planner
from ozone_scm_operator.model import parse_time
from ozone_scm_operator.spec import parse_spec

from .sim import World


def ready_world(spec: dict[str, object] | None = None) -> World:
    w = World({"replicas": 3, **(spec or {})})
    w.run()
    return w


def idle(w: World) -> bool:
    """Nothing to do, no backup waiting or running, none being deleted."""
    return w.quiet() and not any(b.get("status", {}).get("phase") in (None, "Pending", "Running")
                                 or b["metadata"].get("deletionTimestamp") for b in w.backups.values())


def settle(w: World, name: str) -> None:
    w.run(until=lambda w: w.backup_phase(name) in ("Completed", "Failed") and w.quiet(), max_passes=40)
    w.run(max_passes=1, until=lambda w: True)  # the pass that records what the last one did


def test_one_off_backup_creates_the_volume_then_runs_a_verified_job_and_completes() -> None:
    w = ready_world()
    w.create_backup("b1")
    settle(w, "b1")
    kinds = [(type(a), a.target) for a in w.actions if a.target in ("b1", "scm-backups", "b1-backup")]
    assert kinds == [
        (planner.CreatePVC, "scm-backups"),
        (planner.UpdateBackup, "b1"),  # Running, with the finalizer, before the Job exists
        (planner.CreateJob, "b1-backup"),
        (planner.UpdateBackup, "b1"),  # Completed
    ]
    st = w.backups["b1"]["status"]
    assert st["phase"] == "Completed" and st["backupPath"] == "/backups/b1"
    assert (st["term"], st["index"], st["clusterID"], st["sizeBytes"]) == (w.term, 100, w.cluster_id, 4096)
    assert parse_time(st["startedAt"]) is not None and parse_time(st["completedAt"]) is not None
    assert w.backups["b1"]["metadata"]["finalizers"] == [naming.FINALIZER_BACKUP_DATA]
    assert "b1" in w.backup_data
    # the Job is the builder's: the SCM image, the backup then the verify against this cluster ID
    job = next(a.body for a in w.actions if isinstance(a, planner.CreateJob))
    spec, _ = parse_spec(w.spec_raw)
    owner = backup_builders.backup_ref(w.ref, "b1", "uid-b1")
    assert job == backup_builders.build_backup_job(w.ref, spec, "b1", owner, w.cluster_id or "")
    pod = job["spec"]["template"]["spec"]
    assert pod["initContainers"][0]["command"][-2:] == ["--out", "/backups/b1"]
    assert pod["containers"][0]["command"][4:] == ["verify", "/backups/b1", "--clusterid", w.cluster_id,
                                                   "--status-file", "/dev/termination-log"]
    # each step's Event is about the backup too, and the cluster's status names the last backup
    assert next(a for a in w.actions if isinstance(a, planner.CreateJob)).subject == owner
    assert w.status.backup is not None and w.status.backup["lastBackup"] == "b1"
    assert w.status.backup["lastBackupIndex"] == 100 and "deadline" not in w.status.backup  # no schedule


def test_a_failed_backup_says_why_in_one_line_and_is_not_retried() -> None:
    w = ready_world()
    w.failing_backups.add("b1")
    w.create_backup("b1")
    settle(w, "b1")
    st = w.backups["b1"]["status"]
    assert st["phase"] == "Failed"
    assert st["message"] == "the ring is in safemode; retry with --allow-safemode"
    assert sum(1 for a in w.actions if isinstance(a, planner.CreateJob)) == 1
    assert w.status.backup is None or "lastBackup" not in w.status.backup


def test_one_backup_at_a_time_and_the_second_waits_with_a_message() -> None:
    w = ready_world()
    w.held_jobs.add("b1-backup")
    w.create_backup("b1")
    w.create_backup("b2")
    w.run(until=lambda w: w.backup_phase("b2") == "Pending", max_passes=20)
    assert w.backups["b2"]["status"]["message"] == "waiting: backup b1 is running (one backup at a time)"
    assert w.backup_phase("b1") == "Running" and list(w.jobs) == ["b1-backup"]
    w.held_jobs.clear()
    # the sim raises Unsafe on a second backup Job while one runs
    w.run(until=lambda w: all(w.backup_phase(b) == "Completed" for b in ("b1", "b2")), max_passes=40)


def test_a_backup_waits_for_a_leader_and_for_a_ring_that_has_formed() -> None:
    w = World({"replicas": 1})
    w.create_backup("early")
    formed: list[bool] = []
    w.hooks.append(lambda w: formed.append(w.status.cluster_id is not None))
    w.run(until=lambda w: w.backup_phase("early") == "Completed", max_passes=60)
    job_at = next(i for i, a in enumerate(w.actions) if isinstance(a, planner.CreateJob))
    assert w.actions[job_at].body is not None and w.status.cluster_id is not None
    assert formed[0] is False  # the backup existed before the ring did, and its Job came only after

    w2 = ready_world()
    w2.hooks.append(lambda w: setattr(w, "leader", None))  # the ring lost its leader
    w2.create_backup("b")
    w2.run(until=lambda w: w.backup_phase("b") == "Pending", max_passes=20)
    assert w2.backups["b"]["status"]["message"] == "waiting: the ring has no leader"
    assert not w2.jobs


def test_backups_of_another_cluster_are_left_alone() -> None:
    w = ready_world()
    w.create_backup("theirs", cluster="other")
    for _ in range(5):
        w.step()
        w.operator_pass()
    assert "status" not in w.backups["theirs"] and not w.jobs


def test_deleting_a_backup_deletes_its_data_then_the_object() -> None:
    w = ready_world()
    w.create_backup("b1")
    settle(w, "b1")
    w.delete_backup("b1")
    assert "b1" in w.backups  # held by the finalizer
    w.run(until=lambda w: "b1" not in w.backups, max_passes=20)
    assert "b1" not in w.backup_data
    kinds = [type(a) for a in w.actions if a.target in ("b1-delete", "b1")][-2:]
    assert kinds == [planner.CreateJob, planner.UpdateBackup]


def test_a_backup_deleted_before_it_ran_goes_at_once() -> None:
    w = World({"replicas": 1})
    w.create_backup("b1")
    w.step()
    w.operator_pass()
    w.delete_backup("b1")
    assert "b1" not in w.backups  # no finalizer yet: nothing was written


def test_the_schedule_creates_backups_and_retention_deletes_the_oldest_with_their_data() -> None:
    w = ready_world({"backup": {"schedule": "0 * * * *", "retention": {"keepLast": 2}}})
    assert w.status.backup is not None
    since = parse_time(w.status.backup["scheduleSince"])
    assert since is not None and not w.backups  # no run is made up for times before the schedule was set
    for _ in range(4):  # four hours, each one scheduled backup
        w.now = w.now.replace(minute=0, second=30) + datetime.timedelta(hours=1)
        w.run(until=idle, max_passes=40)
    names = sorted(w.backups)
    assert len(names) == 2 and all(n.startswith("scm-2026") for n in names)
    assert w.backup_data == set(names)  # the expired ones' data went with them
    created = [a.target for a in w.actions if isinstance(a, planner.CreateBackup)]
    assert len(created) == 4 and sorted(created)[-2:] == names
    st = w.status.backup
    assert st["lastBackup"] == names[-1] and st["schedule"] == "0 * * * *"
    assert parse_time(st["nextScheduleTime"]) == w.now.replace(minute=0, second=0) + datetime.timedelta(hours=1)
    # the deadline: the last backup plus the schedule's longest gap (1h) plus the grace
    last = parse_time(st["lastBackupTime"])
    assert last is not None
    assert parse_time(st["deadline"]) == last + datetime.timedelta(hours=1) + backups.DEADLINE_GRACE


def test_retention_by_age_keeps_one_offs_and_the_newest_completed_backup() -> None:
    w = ready_world({"backup": {"schedule": "0 0 * * *", "retention": {"maxAge": "36h"}}})
    w.create_backup("mine")
    settle(w, "mine")
    for _ in range(3):
        w.now = w.now.replace(hour=0, minute=0, second=30) + datetime.timedelta(days=1)
        w.run(until=idle, max_passes=40)
    scheduled = sorted(n for n in w.backups if n != "mine")
    assert "mine" in w.backups  # a one-off backup is the user's
    assert len(scheduled) == 2  # today's and yesterday's (< 36h); the older one expired
    # with no new backup, even the newest completed one outlives maxAge
    w.now += datetime.timedelta(days=5)
    w.spec_raw = {**w.spec_raw, "backup": {"schedule": "0 0 * * *", "suspend": True, "retention": {"maxAge": "36h"}}}
    w.run(until=idle, max_passes=40)
    assert sorted(n for n in w.backups if n != "mine") == [scheduled[-1]]
    assert w.status.backup is not None and w.status.backup.get("suspended") is True
    assert "deadline" not in w.status.backup


def test_a_weekday_schedule_allows_for_the_weekend() -> None:
    start = datetime.datetime(2026, 1, 2, 12, tzinfo=datetime.UTC)  # a Friday
    assert backups.longest_gap("0 3 * * 1-5", start) == datetime.timedelta(days=3)
    assert backups.longest_gap("*/15 * * * *", start) == datetime.timedelta(minutes=15)


def test_the_summary_is_read_only_from_the_verify_containers_json() -> None:
    assert backups.summary_of('{"clusterID": "c", "term": 1, "index": 2, "sizeBytes": 3}') is not None
    assert backups.summary_of("Error: no leader") is None
    assert backups.summary_of('{"term": 1}') is None


def test_a_backup_of_a_secure_ring_records_its_root_ca() -> None:
    w = ready_world({"security": {"enabled": True}})
    w.create_backup("b1")
    settle(w, "b1")
    st = w.backups["b1"]["status"]
    assert st["phase"] == "Completed" and st["rootCAFingerprint"] == w.status.security.root_ca_fingerprint
    assert st["includesRootKey"] is False
    plain = ready_world()
    plain.create_backup("b1")
    settle(plain, "b1")
    assert "rootCAFingerprint" not in plain.backups["b1"]["status"]
