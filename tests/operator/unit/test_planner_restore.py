"""The planner and ``spec.bootstrap.fromBackup``: the primordial member runs ``scm --restore`` from the named
OzoneSCMBackup (its volume mounted read-only, its cluster ID checked) or from a directory on the cluster's own backup
volume, is restarted with ``--bootstrap`` once it leads, and the others join with ``--bootstrap``; a backup that is
missing, not Completed, or a secure ring, creates nothing and says why."""

from __future__ import annotations

from ozone_scm_operator import builders, naming, planner
from ozone_scm_operator.model import BackupObs

from .sim import World

CID = "CID-restored"


def completed(name: str = "b1", cluster: str = "old") -> BackupObs:
    return BackupObs(name, uid="u", cluster=cluster, phase="Completed", status={"clusterID": CID, "index": 41})


def pod_bodies(w: World, member: str) -> list[dict[str, object]]:
    return [a.body for a in w.actions if isinstance(a, planner.CreatePod) and a.target == member and a.body is not None]


def test_a_cluster_from_a_named_backup_restores_on_the_primordial_and_bootstraps_the_others() -> None:
    w = World({"replicas": 3, "bootstrap": {"fromBackup": "b1"}})
    w.restore_backup = completed()
    w.stored_backups["/backups/b1"] = CID
    w.run(max_passes=200)  # the sim raises Unsafe on --restore over existing data or a cluster ID mismatch
    assert w.status.cluster_id == CID and w.clusters_created == 0  # no scm --init ever ran
    assert w.member_names() == ["scm-0", "scm-1", "scm-2"] and len(w.voters) == 3
    first, second = pod_bodies(w, "scm-0")[:2]
    init = first["spec"]["initContainers"][0]  # type: ignore[index]
    assert init["command"] == ["ozone-scm", "scm", "--restore", "/backups/b1", "--clusterid", CID]
    assert {"name": "restore", "mountPath": "/backups", "readOnly": True} in init["volumeMounts"]
    assert {"name": "restore", "persistentVolumeClaim": {"claimName": "old-backups", "readOnly": True}} in \
        first["spec"]["volumes"]  # type: ignore[index]
    assert second["metadata"]["annotations"][naming.ANN_INIT_MODE] == builders.INIT_MODE_BOOTSTRAP  # type: ignore[index]
    assert any(a.reason == "RestartingRestoredMember" for a in w.actions)
    for member in ("scm-1", "scm-2"):
        modes = {b["metadata"]["annotations"][naming.ANN_INIT_MODE] for b in pod_bodies(w, member)}  # type: ignore[index]
        assert modes == {builders.INIT_MODE_BOOTSTRAP}


def test_a_directory_on_the_clusters_own_backup_volume() -> None:
    w = World({"replicas": 1, "bootstrap": {"fromBackup": "/backups/copied"}})
    w.stored_backups["/backups/copied"] = CID
    for _ in range(15):
        w.step()
        w.operator_pass()
    deg = w.status.condition("Degraded")
    assert deg is not None and deg.reason == "RestoreSource" and "scm-backups, which does not exist" in deg.message
    assert "scm-0" not in w.pods
    w.children[("PersistentVolumeClaim", "scm-backups")] = None  # the user created it and copied the backup in
    w.run()
    init = pod_bodies(w, "scm-0")[0]["spec"]["initContainers"][0]  # type: ignore[index]
    assert init["command"] == ["ozone-scm", "scm", "--restore", "/backups/copied"]
    assert w.status.cluster_id == CID


def test_a_missing_or_unfinished_backup_or_a_secure_ring_creates_no_pod_and_says_why() -> None:
    w = World({"replicas": 1, "bootstrap": {"fromBackup": "b1"}})
    for _ in range(15):
        w.step()
        w.operator_pass()
    deg = w.status.condition("Degraded")
    assert deg is not None and deg.reason == "RestoreSource" and "OzoneSCMBackup b1, which does not exist" in deg.message
    w.restore_backup = BackupObs("b1", cluster="old", phase="Running")
    w.step()
    w.operator_pass()
    deg = w.status.condition("Degraded")
    assert deg is not None and "is Running, not Completed" in deg.message and not w.pods
    w.restore_backup = completed()
    w.stored_backups["/backups/b1"] = CID
    w.run()
    assert w.status.cluster_id == CID

    s = World({"replicas": 1, "bootstrap": {"fromBackup": "b1"}, "security": {"enabled": True}})
    s.restore_backup = completed()
    for _ in range(40):
        s.step()
        s.operator_pass()
    deg = s.status.condition("Degraded")
    assert deg is not None and "does not restore a secure ring yet" in deg.message and "scm --restore DIR" in deg.message and not s.pods
