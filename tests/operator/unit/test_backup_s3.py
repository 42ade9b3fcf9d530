"""``spec.backup.s3``: the spec (one target of two), the backup Job with its ``upload`` container after backup and
verify (scratch emptyDir, keys from the Secret), the clean-up Job on the ``s3://`` URL (manifest first is the CLI's),
the restore's ``download`` init container before ``scm --restore``; every Pod admitted by Pod Security
``restricted``; and the planner through whole backups, deletions and a restore in the simulated world."""

from __future__ import annotations

import datetime
from typing import Any

from ozone_scm_operator import backup_builders, builders, naming, planner, podsecurity
from ozone_scm_operator.model import BackupObs
from ozone_scm_operator.spec import BackupS3, parse_spec

from .sim import World

S3 = {"endpoint": "https://s3.example.test:9000", "bucket": "scm-backups", "prefix": "/prod/scm/",
      "credentialsSecret": "s3-keys"}
URL = "s3://scm-backups/prod/scm/b1/"
CID = "CID-from-s3"


def s3_world(**extra: Any) -> World:
    w = World({"replicas": 3, "backup": {"s3": {**S3, **extra}}})
    w.run()
    return w


def settle(w: World, name: str) -> None:
    w.run(until=lambda w: w.backup_phase(name) in ("Completed", "Failed") and w.quiet(), max_passes=40)
    w.run(max_passes=1, until=lambda w: True)


def test_the_spec_takes_s3_or_volume_not_both_and_says_which_field_is_wrong() -> None:
    spec, problems = parse_spec({"backup": {"s3": S3}})
    assert problems == []
    assert spec.backup.s3 == BackupS3("https://s3.example.test:9000", "scm-backups", "prod/scm", "s3-keys")
    assert spec.backup.s3.url("b1") == URL
    spec, problems = parse_spec({"backup": {"s3": S3, "volume": {"size": "1Gi"}}})
    assert spec.backup.s3 is None  # the volume (the default) until one of them is removed
    assert [(p.field, "one target" in p.message) for p in problems] == [("backup.s3", True)]
    spec, problems = parse_spec({"backup": {"s3": {"endpoint": "ftp://x", "bucket": "B"}}})
    assert spec.backup.s3 is None
    assert sorted(p.field for p in problems) == ["backup.s3.bucket", "backup.s3.credentialsSecret",
                                                  "backup.s3.endpoint", "backup.s3.prefix"]


def _restricted(pod_spec: dict[str, Any]) -> None:
    assert podsecurity.check(pod_spec, "restricted") == []


def test_the_backup_job_takes_verifies_then_uploads_from_its_own_scratch_directory() -> None:
    w = World({"replicas": 1, "backup": {"s3": {**S3, "caSecret": "s3-ca"}}})
    spec, _ = parse_spec(w.spec_raw)
    owner = backup_builders.backup_ref(w.ref, "b1", "uid-b1")
    job = backup_builders.build_backup_job(w.ref, spec, "b1", owner, CID)
    pod = job["spec"]["template"]["spec"]
    _restricted(pod)
    take, verify = pod["initContainers"]
    (upload,) = pod["containers"]
    assert take["command"][-2:] == ["--out", "/scratch/b1"]
    assert verify["command"][4:] == ["verify", "/scratch/b1", "--clusterid", CID, "--status-file",
                                     "/dev/termination-log"]
    assert upload["name"] == "upload"
    assert upload["command"] == ["ozone-scm", "admin", "scm", "backup", "upload", "/scratch/b1", URL,
                                 "--endpoint-url", "https://s3.example.test:9000",
                                 "--ca-bundle", f"{naming.S3_CA_DIR}/ca.crt", "--status-file", "/dev/termination-log"]
    # the keys only where the object storage is reached; no backup volume at all
    keys = [{"name": k, "valueFrom": {"secretKeyRef": {"name": "s3-keys", "key": k}}}
            for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")]
    assert all(e in upload["env"] for e in keys)
    assert not any("valueFrom" in e for c in (take, verify) for e in c["env"])
    assert {"name": "s3-ca", "mountPath": naming.S3_CA_DIR, "readOnly": True} in upload["volumeMounts"]
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["scratch"] == {"name": "scratch", "emptyDir": {}}
    assert vols["s3-ca"] == {"name": "s3-ca", "secret": {"secretName": "s3-ca"}}
    assert not any("persistentVolumeClaim" in v for v in pod["volumes"])
    for c in (take, verify, upload):
        assert {"name": "scratch", "mountPath": "/scratch"} in c["volumeMounts"]

    delete = backup_builders.build_delete_job(w.ref, spec, "b1", owner, URL)["spec"]["template"]["spec"]
    _restricted(delete)
    assert delete["containers"][0]["command"] == ["ozone-scm", "admin", "scm", "backup", "delete", URL,
                                                  "--endpoint-url", "https://s3.example.test:9000",
                                                  "--ca-bundle", f"{naming.S3_CA_DIR}/ca.crt"]
    assert all(e in delete["containers"][0]["env"] for e in keys)


def test_a_backup_to_s3_needs_no_volume_records_its_url_and_completes() -> None:
    w = s3_world()
    w.create_backup("b1")
    settle(w, "b1")
    kinds = [(type(a), a.target) for a in w.actions if a.target in ("b1", "scm-backups", "b1-backup")]
    assert kinds == [(planner.UpdateBackup, "b1"), (planner.CreateJob, "b1-backup"), (planner.UpdateBackup, "b1")]
    assert ("PersistentVolumeClaim", "scm-backups") not in w.children
    st = w.backups["b1"]["status"]
    assert st["phase"] == "Completed" and st["location"] == URL and "backupPath" not in st
    assert st["clusterID"] == w.cluster_id and w.s3_backups == {URL: w.cluster_id}
    started = next(a for a in w.actions if isinstance(a, planner.CreateJob))
    assert URL in started.message
    spec, _ = parse_spec(w.spec_raw)
    owner = backup_builders.backup_ref(w.ref, "b1", "uid-b1")
    assert started.body == backup_builders.build_backup_job(w.ref, spec, "b1", owner, w.cluster_id or "")

    # deleting the object deletes the objects (the clean-up Job on the URL), then the finalizer
    w.delete_backup("b1")
    w.run(until=lambda w: "b1" not in w.backups, max_passes=20)
    assert w.s3_backups == {}
    cleanup = next(a for a in w.actions if a.target == "b1-delete")
    assert isinstance(cleanup, planner.CreateJob) and URL in cleanup.body["spec"]["template"]["spec"]["containers"][0][
        "command"]  # type: ignore[index]


def test_a_backup_in_s3_is_kept_while_the_cluster_no_longer_names_the_storage() -> None:
    w = s3_world()
    w.create_backup("b1")
    settle(w, "b1")
    w.spec_raw = {**w.spec_raw, "backup": {}}  # back to the volume: the old backup's keys are gone
    w.delete_backup("b1")
    for _ in range(6):
        w.step()
        w.operator_pass()
    assert "b1" in w.backups and "b1-delete" not in w.jobs
    deg = w.status.condition("Degraded")
    assert deg is not None and deg.reason == "BackupDataNotDeleted" and URL in deg.message
    assert "spec.backup.s3" in deg.message


def test_a_cluster_from_a_backup_in_s3_downloads_it_first_then_restores() -> None:
    old = s3_world()
    old.create_backup("b1")
    settle(old, "b1")
    done = old.backups["b1"]["status"]

    w = World({"replicas": 3, "bootstrap": {"fromBackup": "b1"}})
    w.restore_backup = BackupObs("b1", uid="u", cluster="scm", phase="Completed", status=dict(done))
    w.s3_backups = dict(old.s3_backups)
    for _ in range(10):
        w.step()
        w.operator_pass()
    deg = w.status.condition("Degraded")
    assert deg is not None and deg.reason == "RestoreSource" and "set spec.backup.s3" in deg.message
    assert "scm-0" not in w.pods

    w.spec_raw = {**w.spec_raw, "backup": {"s3": S3}}
    w.run(max_passes=200)
    assert w.status.cluster_id == old.cluster_id and w.clusters_created == 0
    assert w.member_names() == ["scm-0", "scm-1", "scm-2"] and len(w.voters) == 3
    first = next(a.body for a in w.actions if isinstance(a, planner.CreatePod) and a.target == "scm-0")
    assert first is not None
    pod = first["spec"]
    _restricted(pod)
    download, restore = pod["initContainers"]
    cid = ["--clusterid", str(old.cluster_id)]
    assert download["command"] == ["ozone-scm", "admin", "scm", "backup", "download", URL, "/scratch/b1", *cid,
                                   "--endpoint-url", "https://s3.example.test:9000"]
    assert restore["command"] == ["ozone-scm", "scm", "--restore", "/scratch/b1", *cid]
    assert {"name": "restore", "mountPath": "/scratch"} in download["volumeMounts"]
    assert {"name": "restore", "mountPath": "/scratch", "readOnly": True} in restore["volumeMounts"]
    assert {"name": "restore", "emptyDir": {}} in pod["volumes"]
    assert any(e.get("valueFrom", {}).get("secretKeyRef", {}).get("name") == "s3-keys" for e in download["env"])
    assert not any("valueFrom" in e and "secretKeyRef" in e["valueFrom"] for e in restore["env"])
    assert pod["containers"][0]["name"] == "scm"
    # the member's later Pods (its restart after it leads, the others) never download or restore again
    later = [a.body for a in w.actions if isinstance(a, planner.CreatePod) and a.body is not first]
    assert later and all(b is not None and len(b["spec"]["initContainers"]) == 1 and
                         b["metadata"]["annotations"][naming.ANN_INIT_MODE] == builders.INIT_MODE_BOOTSTRAP
                         for b in later)


def test_scheduled_backups_to_s3_expire_with_their_objects() -> None:
    w = World({"replicas": 3, "backup": {"s3": S3, "schedule": "0 * * * *", "retention": {"keepLast": 2}}})
    w.run()
    for _ in range(4):  # four hours, each one scheduled backup
        w.now = w.now.replace(minute=0, second=30) + datetime.timedelta(hours=1)
        w.run(until=lambda w: w.quiet() and not any(
            b.get("status", {}).get("phase") in (None, "Pending", "Running") or b["metadata"].get("deletionTimestamp")
            for b in w.backups.values()), max_passes=40)
    names = sorted(w.backups)
    assert len(names) == 2
    # only the kept backups' objects remain; each clean-up Job ran on its backup's own URL
    assert set(w.s3_backups) == {f"s3://scm-backups/prod/scm/{n}/" for n in names}
    cleanups = [a for a in w.actions if isinstance(a, planner.CreateJob) and a.target.endswith("-delete")]
    assert len(cleanups) == 2 and not any(a.target.startswith(tuple(names)) for a in cleanups)
