"""The planner and ``spec.bootstrap.fromOzone``: the primordial member runs ``migrate from-ozone`` from the named
volume (mounted read-only) once, is restarted with ``--bootstrap`` once it leads, and the others join with
``--bootstrap``; a missing volume leaves the Pod waiting, and the spec refuses fromOzone with fromBackup or with
security."""

from __future__ import annotations

from ozone_scm_operator import builders, naming, planner
from ozone_scm_operator.spec import OzoneSource, parse_spec

from .sim import World

CID = "CID-0f0e0d0c-0000-4000-8000-000000000001"


def pod_bodies(w: World, member: str) -> list[dict[str, object]]:
    return [a.body for a in w.actions if isinstance(a, planner.CreatePod) and a.target == member and a.body is not None]


def test_a_ring_from_ozones_scm_migrates_on_the_primordial_once_and_bootstraps_the_others() -> None:
    w = World({"replicas": 3, "bootstrap": {"fromOzone": {"claimName": "ozone-scm-meta", "dbPath": "meta/scm.db"}}})
    w.ozone_volumes["ozone-scm-meta"] = ("meta/scm.db", CID)
    w.run(max_passes=200)  # the sim raises Unsafe on a migration over existing data or beside an existing ring
    assert w.status.cluster_id == CID and w.clusters_created == 0 and w.migrations == 1
    assert w.member_names() == ["scm-0", "scm-1", "scm-2"] and len(w.voters) == 3
    first, second = pod_bodies(w, "scm-0")[:2]
    init = first["spec"]["initContainers"][0]  # type: ignore[index]
    assert init["command"] == ["ozone-scm", "migrate", "from-ozone", "--ozone-db", "/ozone-scm/meta/scm.db"]
    assert {"name": "ozone-scm", "mountPath": naming.OZONE_SCM_DIR, "readOnly": True} in init["volumeMounts"]
    assert {"name": "ozone-scm", "persistentVolumeClaim": {"claimName": "ozone-scm-meta", "readOnly": True}} in \
        first["spec"]["volumes"]  # type: ignore[index]
    # only the init container sees Ozone's volume
    scm = first["spec"]["containers"][0]  # type: ignore[index]
    assert all(m["name"] != "ozone-scm" for m in scm["volumeMounts"])
    assert second["metadata"]["annotations"][naming.ANN_INIT_MODE] == builders.INIT_MODE_BOOTSTRAP  # type: ignore[index]
    restart = [a for a in w.actions if a.reason == "RestartingRestoredMember"]
    assert restart and "migrated from Ozone's SCM (PersistentVolumeClaim ozone-scm-meta)" in restart[0].message
    for member in ("scm-1", "scm-2"):
        modes = {b["metadata"]["annotations"][naming.ANN_INIT_MODE] for b in pod_bodies(w, member)}  # type: ignore[index]
        assert modes == {builders.INIT_MODE_BOOTSTRAP}


def test_a_volume_without_ozones_db_leaves_the_primordial_waiting() -> None:
    w = World({"replicas": 1, "bootstrap": {"fromOzone": {"claimName": "ozone-scm-meta"}}})
    for _ in range(15):
        w.step()
        w.operator_pass()
    pod = w.pods["scm-0"]
    assert pod.trouble is not None and "holds no Ozone scm.db" in pod.trouble
    assert w.status.cluster_id is None and w.migrations == 0


def test_the_spec_checks_from_ozone() -> None:
    spec, problems = parse_spec({"bootstrap": {"fromOzone": {"claimName": "meta"}}})
    assert spec.bootstrap.from_ozone == OzoneSource("meta", "scm.db") and not problems
    _, problems = parse_spec({"bootstrap": {"fromOzone": {"claimName": "Meta!", "dbPath": "meta/.."}}})
    assert {p.field for p in problems} == {"bootstrap.fromOzone.claimName", "bootstrap.fromOzone.dbPath"}
    spec, problems = parse_spec({"bootstrap": {"fromOzone": {"claimName": "meta"}, "fromBackup": "b1"}})
    assert spec.bootstrap.from_ozone is None and any("not both" in p.message for p in problems)
    spec, problems = parse_spec({"bootstrap": {"fromOzone": {"claimName": "meta"}},
                                 "security": {"enabled": True, "caMode": "scm"}})
    assert spec.bootstrap.from_ozone is None and any("secure Ozone cluster" in p.message for p in problems)
