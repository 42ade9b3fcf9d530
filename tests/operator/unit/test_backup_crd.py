"""The OzoneSCMBackup CRD as an API server applies it (the emulator's ``crdschema``): the names the kubectl plugin
relies on, ``spec.cluster`` required and immutable, and no status field the operator writes pruned -- the backup's
own and the cluster's ``status.backup``. Also how the operator reads a finished Job (``observations.job_obs``)."""

from __future__ import annotations

import copy
import dataclasses
import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from ozone_scm_operator import backups, naming
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.model import BackupObs, ClusterStatus, JobObs
from ozone_scm_operator.observations import backup_obs, job_obs
from ozone_scm_operator.spec import parse_spec
from tests.e2e.local.crdschema import CRDVersion, SchemaInvalid, check_crd, crd_versions

ROOT = Path(__file__).resolve().parents[3]
CRD = yaml.safe_load((ROOT / "crds" / "ozonescmbackups.yaml").read_text())
CLUSTER_CRD = yaml.safe_load((ROOT / "crds" / "ozonescmclusters.yaml").read_text())
T = datetime.datetime(2026, 1, 1, 3, tzinfo=datetime.UTC)


@pytest.fixture(scope="module")
def version() -> CRDVersion:
    (v,) = crd_versions(CRD)
    return v


def backup(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "ozone-scm.io/v1alpha1", "kind": "OzoneSCMBackup",
            "metadata": {"name": "b1", "namespace": "ns"}, "spec": spec}


def test_the_crd_is_structural_with_the_names_the_plugin_uses(version: CRDVersion) -> None:
    assert check_crd(CRD) == []
    assert version.unsupported == []
    names = CRD["spec"]["names"]
    assert (CRD["spec"]["group"], CRD["spec"]["versions"][0]["name"], names["kind"], names["plural"]) == (
        "ozone-scm.io", "v1alpha1", "OzoneSCMBackup", "ozonescmbackups")
    phase = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["phase"]
    assert phase["enum"] == ["Pending", "Running", "Completed", "Failed"]


def test_spec_cluster_is_required_and_immutable(version: CRDVersion) -> None:
    admitted, pruned = version.admit(backup(cluster="scm"), None, part="main")
    assert pruned == [] and admitted["spec"] == {"cluster": "scm"}
    with pytest.raises(SchemaInvalid, match="cluster"):
        version.admit(backup(), None, part="main")
    with pytest.raises(SchemaInvalid, match="spec is immutable"):
        version.admit(backup(cluster="other"), admitted, part="main")


def _completed_status() -> dict[str, Any]:
    """The status the planner writes into a backup over its life (Running, then Completed), merged."""
    spec, _ = parse_spec({"backup": {"schedule": "0 3 * * *"}})
    ref = ClusterRef("scm", "ns", "uid")
    b = BackupObs("b1", uid="u1", created_at=T)
    merged: dict[str, Any] = {}
    inputs = backups.Inputs(ref=ref, spec=spec, now=T, cluster_id="CID-1", has_leader=True, backups={"b1": b},
                            jobs={}, volume_exists=True, recorded=None, admissible=lambda _w, _s: True)
    running = backups.plan(inputs).step
    assert isinstance(running, backups.UpdateBackup)
    merged.update({k: v for k, v in running.status.items() if v is not None})
    b = BackupObs("b1", uid="u1", created_at=T, phase="Running", status=dict(merged))
    job = JobObs(naming.backup_job_name("b1"), "b1", "backup", result="Succeeded", finished_at=T,
                 message='{"clusterID": "CID-1", "term": 2, "index": 41, "createdMs": 1, "sizeBytes": 9000}')
    done = backups.plan(dataclasses.replace(inputs, backups={"b1": b}, jobs={job.name: job})).step
    assert isinstance(done, backups.UpdateBackup)
    merged.update(done.status)
    return merged


def test_no_backup_status_field_the_operator_writes_is_pruned(version: CRDVersion) -> None:
    obj, _ = version.admit(backup(cluster="scm"), None, part="main")
    obj["status"] = _completed_status()
    admitted, pruned = version.admit(obj, None, part="status")
    assert pruned == []
    st = admitted["status"]
    assert (st["phase"], st["term"], st["index"], st["clusterID"], st["sizeBytes"]) == ("Completed", 2, 41,
                                                                                       "CID-1", 9000)
    assert st["backupPath"] == "/backups/b1" and st["startedAt"] and st["completedAt"]
    bad = copy.deepcopy(obj)
    bad["status"]["phase"] = "Done"
    with pytest.raises(SchemaInvalid, match="phase"):
        version.admit(bad, None, part="status")


def test_no_cluster_status_backup_field_is_pruned() -> None:
    (cluster,) = crd_versions(CLUSTER_CRD)
    obj, _ = cluster.admit({"apiVersion": "ozone-scm.io/v1alpha1", "kind": "OzoneSCMCluster",
                            "metadata": {"name": "scm", "namespace": "ns"}, "spec": {}}, None, part="main")
    spec, _ = parse_spec({"backup": {"schedule": "0 3 * * *", "suspend": False}})
    b = BackupObs("b1", created_at=T, phase="Completed", completed_at=T, status={"index": 41})
    result = backups.plan(backups.Inputs(
        ref=ClusterRef("scm", "ns", "uid"), spec=spec, now=T, cluster_id="CID-1", has_leader=True,
        backups={"b1": b}, jobs={}, volume_exists=True, recorded=None, admissible=lambda _w, _s: True))
    assert result.status is not None
    # (a merge patch nulls currentOperation and leader; the stored status has neither)
    obj["status"] = {k: v for k, v in ClusterStatus(backup=result.status).to_raw().items() if v is not None}
    admitted, pruned = cluster.admit(obj, None, part="status")
    assert pruned == []
    assert set(admitted["status"]["backup"]) >= {"lastBackup", "lastBackupTime", "lastBackupIndex", "schedule",
                                                 "scheduleSince", "nextScheduleTime", "deadline"}


def test_a_finished_job_is_read_from_its_pods_termination_messages() -> None:
    labels = {naming.LABEL_BACKUP_NAME: "b1", "ozone-scm.io/backup-job": "backup"}
    job = {"metadata": {"name": "b1-backup", "labels": labels},
           "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                      "lastTransitionTime": "2026-01-01T03:00:05Z"}]}}
    pod = {"metadata": {"labels": {"batch.kubernetes.io/job-name": "b1-backup"}},
           "status": {"initContainerStatuses": [
               {"name": "backup", "state": {"terminated": {"exitCode": 1,
                                                           "message": "Error: the ring is in safemode\n"}}}]}}
    obs = job_obs(job, [pod])
    assert obs is not None and obs.result == "Failed" and obs.message == "Error: the ring is in safemode\n"
    assert obs.finished_at == T.replace(second=5)
    running = job_obs({"metadata": {"name": "b1-backup", "labels": labels}, "status": {}}, [pod])
    assert running is not None and running.result is None
    assert job_obs({"metadata": {"name": "other", "labels": {}}}, []) is None
    raw = {"metadata": {"name": "b1", "uid": "u", "finalizers": [naming.FINALIZER_BACKUP_DATA],
                        "annotations": {naming.ANN_SCHEDULED_AT: "2026-01-01T03:00:00Z"}},
           "spec": {"cluster": "scm"}, "status": {"phase": "Running"}}
    b = backup_obs(raw)
    assert (b.phase, b.scheduled_at, b.finalizers) == ("Running", T, (naming.FINALIZER_BACKUP_DATA,))
