"""The planner and ``spec.bootstrap.fromBackup``: the primordial member runs ``scm --restore`` from the named
OzoneSCMBackup (its volume mounted read-only, its cluster ID checked) or from a directory on the cluster's own backup
volume, is restarted with ``--bootstrap`` once it leads, and the others join with ``--bootstrap``; a backup that is
missing, not Completed, or a secure ring, creates nothing and says why."""

from __future__ import annotations

from ozone_scm_operator import builders, naming, planner
from ozone_scm_operator.model import BackupObs, RootCAObs, SecretObs

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

    s = World({"replicas": 1, "bootstrap": {"fromBackup": "b1"},
               "security": {"enabled": True, "caMode": "scm"}})
    s.restore_backup = completed()
    for _ in range(40):
        s.step()
        s.operator_pass()
    deg = s.status.condition("Degraded")
    assert deg is not None and "in CA mode operator only" in deg.message and "scm --restore DIR" in deg.message
    assert not s.pods


OLD_ROOT = "ab" * 32


def secure_backup() -> BackupObs:
    return BackupObs("b1", uid="u", cluster="old", phase="Completed",
                     status={"clusterID": CID, "index": 41, "rootCAFingerprint": OLD_ROOT, "includesRootKey": False})


def secure_world(**bootstrap: str) -> World:
    w = World({"replicas": 3, "bootstrap": {"fromBackup": "b1", **bootstrap}, "security": {"enabled": True}})
    w.restore_backup = secure_backup()
    w.stored_backups["/backups/b1"] = CID
    return w


def passes(w: World, n: int = 20) -> None:
    for _ in range(n):
        w.step()
        w.operator_pass()


def test_a_secure_cluster_from_a_backup_takes_the_old_root_ca_and_restores_under_it() -> None:
    w = secure_world(rootCASecret="old-root-ca")
    w.restore_root_ca = RootCAObs("old-root-ca", OLD_ROOT, has_key=True)
    w.run(max_passes=300)  # the sim raises Unsafe on a restore under another root than the backup's
    assert w.status.cluster_id == CID and w.clusters_created == 0
    assert w.member_names() == ["scm-0", "scm-1", "scm-2"] and len(w.voters) == 3
    taken = [a for a in w.actions if isinstance(a, planner.CreateRootCA)]
    assert len(taken) == 1 and taken[0].target == "scm-root-ca" and taken[0].reason == "TakingRootCA"
    assert (taken[0].copy_from, taken[0].fingerprint) == ("old-root-ca", OLD_ROOT)
    assert w.status.security.root_ca_fingerprint == OLD_ROOT
    for m in ("scm-0", "scm-1", "scm-2"):  # every member's sub-CA comes from the old root
        assert w.secrets[naming.member_tls_secret_name(m)].root_fingerprint == OLD_ROOT
    init = pod_bodies(w, "scm-0")[0]["spec"]["initContainers"][0]  # type: ignore[index]
    assert init["command"] == ["ozone-scm", "scm", "--restore", "/backups/b1", "--clusterid", CID]


def test_a_cluster_created_again_under_the_old_name_keeps_its_retained_root_ca() -> None:
    w = secure_world()
    w.secrets["scm-root-ca"] = SecretObs("scm-root-ca", root_fingerprint=OLD_ROOT)  # left by the deleted cluster
    w.run(max_passes=300)
    assert w.status.cluster_id == CID and not any(isinstance(a, planner.CreateRootCA) for a in w.actions)
    assert w.status.security.root_ca_fingerprint == OLD_ROOT


def test_a_secure_restore_without_the_right_root_ca_starts_nothing_and_says_why() -> None:
    w = secure_world()
    passes(w)
    deg = w.status.condition("Degraded")
    assert deg is not None and deg.reason == "RestoreSource"
    assert "spec.bootstrap.rootCASecret" in deg.message and "old-root-ca" in deg.message and OLD_ROOT in deg.message
    assert "scm-root-ca" not in w.secrets and not w.pods  # no new root CA, no Pod

    w = secure_world(rootCASecret="old-root-ca")
    passes(w)
    deg = w.status.condition("Degraded")
    assert deg is not None and "names Secret old-root-ca, which does not exist" in deg.message and not w.pods

    w.restore_root_ca = RootCAObs("old-root-ca", "cd" * 32, has_key=True)  # another cluster's root
    passes(w)
    deg = w.status.condition("Degraded")
    assert deg is not None and f"holds root CA {'cd' * 32}, not the root CA {OLD_ROOT}" in deg.message
    assert "scm-root-ca" not in w.secrets and not w.pods

    w.restore_root_ca = RootCAObs("old-root-ca", OLD_ROOT, problem="it has no ca.key (the root CA's private key)")
    passes(w)
    deg = w.status.condition("Degraded")
    assert deg is not None and "it has no ca.key" in deg.message and not w.pods

    w.restore_root_ca = RootCAObs("old-root-ca", OLD_ROOT, has_key=True)  # fixed: the restore goes on
    w.run(max_passes=300)
    deg = w.status.condition("Degraded")
    assert w.status.cluster_id == CID and deg is not None and deg.status == "False"


def test_a_retained_root_ca_of_another_ring_or_a_backup_without_a_root_is_refused() -> None:
    w = secure_world()
    w.secrets["scm-root-ca"] = SecretObs("scm-root-ca", root_fingerprint="cd" * 32)
    passes(w)
    deg = w.status.condition("Degraded")
    assert deg is not None and f"Secret scm-root-ca holds root CA {'cd' * 32}" in deg.message
    assert "Delete Secret scm-root-ca" in deg.message and not w.pods

    w = secure_world(rootCASecret="old-root-ca")
    w.restore_root_ca = RootCAObs("old-root-ca", OLD_ROOT, has_key=True)
    w.restore_backup = completed()  # a backup of a ring without security: no root recorded
    passes(w)
    deg = w.status.condition("Degraded")
    assert deg is not None and "records no root CA" in deg.message and "scm-root-ca" not in w.secrets
    assert not w.pods
