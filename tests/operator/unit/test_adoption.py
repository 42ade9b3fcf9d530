"""Adoption that owns what it adopts, and foreign volumes reported at once (issue 22, item 10)."""

from __future__ import annotations

import datetime

from ozone_scm_operator import naming, planner
from ozone_scm_operator.observations import pod_obs

from .sim import World


def test_a_recreated_resource_adopts_the_orphaned_ring_and_owns_it() -> None:
    w = World({"replicas": 3, "storage": {"reclaimPolicy": "Delete"}})
    w.run()
    ids = {m.name: m.scm_id for m in w.status.members}
    cid = w.status.cluster_id
    w.orphan_and_recreate()  # kubectl delete oscm --cascade=orphan; kubectl apply the same resource
    assert w.orphaned
    w.run()
    st = w.status
    assert w.clusters_created == 1 and st.cluster_id == cid  # no second scm --init
    assert {m.name: m.scm_id for m in st.members} == ids and st.next_member_index == 3
    # every Pod, volume and Secret the old resource owned is now owned by the new one (a later delete cleans up)
    assert w.orphaned == set()
    adopted = sorted(a.target for a in w.actions if isinstance(a, planner.Adopt))
    assert adopted == sorted(["scm-0", "scm-0-data", "scm-1", "scm-1-data", "scm-2", "scm-2-data"])
    assert not any(isinstance(a, (planner.CreatePod, planner.CreatePVC, planner.DeletePod)) for a in w.actions)
    init = st.condition("Initialized")
    assert init is not None and init.reason == "ClusterAdopted"
    assert init.message.startswith(f"adopted the existing ring of cluster {cid} (members scm-0, scm-1, scm-2")
    assert any(e.startswith("Normal ClusterAdopted: adopted the existing ring") for e in w.events), w.events
    assert not any("primordial SCM created" in e for e in w.events)
    # and it stays adopted: the truthful condition survives later passes
    w.spec_raw = {"replicas": 5, "storage": {"reclaimPolicy": "Delete"}}
    w.run()
    assert w.status.condition("Initialized").reason == "ClusterAdopted"  # type: ignore[union-attr]


def test_under_retain_the_adopted_ring_s_pods_are_owned_but_its_volumes_never() -> None:
    w = World({"replicas": 3})  # storage.reclaimPolicy Retain, the default
    w.run()
    w.orphan_and_recreate()
    w.run()
    adopted = sorted(a.target for a in w.actions if isinstance(a, planner.Adopt))
    assert adopted == ["scm-0", "scm-1", "scm-2"]
    assert w.orphaned == {"scm-0-data", "scm-1-data", "scm-2-data"}  # kept when this resource is deleted


def test_a_foreign_volume_in_an_adopted_ring_is_reported_and_never_owned() -> None:
    w = World({"replicas": 3, "storage": {"reclaimPolicy": "Delete"}})
    w.run()
    w.orphan_and_recreate()
    w.kill_pod("scm-2")  # nothing recreates it while no resource exists
    w.pvcs["scm-2-data"].cluster_id = "CID-someone-else"
    for _ in range(15):  # seconds: far from operationTimeout
        w.step()
        w.operator_pass()
        w.now += datetime.timedelta(seconds=1)
    deg = w.status.condition("Degraded")
    assert deg is not None and deg.reason == "ForeignVolume" and "member scm-2 cannot start" in deg.message
    assert "scm-2-data" in w.orphaned and "scm-0-data" not in w.orphaned and "scm-1" not in w.orphaned
    assert w.status.cluster_id is not None and w.clusters_created == 1


def test_adoption_waits_for_a_leader_and_never_bootstraps_over_existing_volumes() -> None:
    w = World({"replicas": 3})
    w.run()
    w.orphan_and_recreate()
    w.leader = None
    for pod in w.pods.values():
        pod.alive = False  # no SCM answers
    for _ in range(3):
        w.operator_pass()
    assert [a for a in w.actions if isinstance(a, (planner.CreatePod, planner.CreatePVC))] == []
    assert w.status.members == () and w.status.phase != "Initializing"
    deg = w.status.condition("Degraded")
    assert deg is not None and "waiting for one of its SCMs to lead" in deg.message


def test_a_foreign_volume_is_reported_at_once_from_the_fixed_termination_message() -> None:
    w = World({"replicas": 3, "membership": {"operationTimeout": "5m"}})
    w.run()
    w.kill_pod("scm-1")
    w.pvcs["scm-1-data"].cluster_id = "CID-someone-else"
    for _ in range(3):  # seconds, far from operationTimeout
        w.step()
        w.operator_pass()
        w.now += datetime.timedelta(seconds=1)
    deg = w.status.condition("Degraded")
    assert deg is not None and deg.reason == "ForeignVolume", deg
    assert "member scm-1 cannot start: this volume holds cluster CID-someone-else" in deg.message
    assert "scm-1-data is kept" in deg.message
    assert not any(isinstance(a, (planner.DeletePVC, planner.RetainPVC)) for a in w.actions)


def test_the_refusal_is_read_from_the_termination_message_not_a_log_tail() -> None:
    line = "ForeignVolume: this volume holds cluster CID-a; the running SCMs are cluster CID-b"
    pod = {
        "metadata": {"name": "scm-1", "ownerReferences": [{"uid": "u", "controller": True}]},
        "status": {
            "phase": "Pending",
            "initContainerStatuses": [{
                "name": "bootstrap", "ready": False, "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": line + "\n"}},
            }],
        },
    }
    obs = pod_obs(pod)
    assert obs.foreign_volume() == "this volume holds cluster CID-a; the running SCMs are cluster CID-b"
    assert obs.controller_uid == "u"
    # a log tail (FallbackToLogsOnError) that happens to mention it is not the signal
    pod["status"]["initContainerStatuses"][0]["lastState"]["terminated"]["message"] = "...\nForeignVolume: x"  # type: ignore[index]
    assert pod_obs(pod).foreign_volume() is None


def _owned_everything(w: World) -> list[str]:
    """What the resource does not control yet, as the world holds it (empty: everything is owned)."""
    left = sorted(w.orphaned)  # Pods, volumes, Secrets
    backup = ("PersistentVolumeClaim", naming.backup_pvc_name(w.ref.name))
    left += [f"{k} {n}" for (k, n), owner in sorted(w.child_owners.items()) if owner != w.ref.uid and (k, n) != backup]
    return left


def test_an_unadopted_pod_keeps_a_running_cluster_from_ready_until_it_is_owned() -> None:
    w = World({"replicas": 3})
    w.run()
    assert w.condition("Ready") == "True" and w.status.phase == "Running"
    w.orphaned.add("scm-1")  # its owner reference removed (as by kubectl delete --cascade=orphan)
    w.step()
    p = w.operator_pass()
    ready = p.status.condition("Ready")
    assert ready is not None and (ready.status, ready.reason) == ("False", "Adopting"), ready
    assert ready.message == "not yet owned by this resource: Pod scm-1; the operator adopts them"
    assert p.status.phase == "Adopting"
    assert isinstance(p.action, planner.Adopt) and p.action.target == "scm-1"
    assert w.orphaned == set()
    w.step()
    p = w.operator_pass()
    assert p.status.condition("Ready").status == "True" and p.status.phase == "Running"  # type: ignore[union-attr]
    assert p.action is None


def test_a_configmap_with_the_right_content_but_no_owner_is_applied_again_and_keeps_ready_false_until_then() -> None:
    w = World({"replicas": 3})
    w.run()
    key = ("ConfigMap", naming.configmap_name("scm"))
    w.child_owners[key] = None  # ownerReferences removed by hand; the content hash annotation left as it was
    w.step()
    p = w.operator_pass()
    assert p.status.condition("Ready").reason == "Adopting"  # type: ignore[union-attr]
    assert isinstance(p.action, planner.Apply) and p.action.target == key[1]
    assert w.child_owners[key] == w.ref.uid
    w.step()
    assert w.operator_pass().status.condition("Ready").status == "True"  # type: ignore[union-attr]


def test_a_recreated_resource_is_ready_only_once_it_owns_every_object_of_the_orphaned_ring() -> None:
    """Issue 29 item 5: Ready (and the ClusterReady Event) came in the adoption pass, before the Pods, volumes,
    Secrets, ConfigMap, Services, PDB and audit objects were owned; a delete then would have left them behind."""
    w = World({"replicas": 3, "storage": {"reclaimPolicy": "Delete"},
               "audit": {"enabled": True, "schedule": "0 4 * * *"}})
    w.run()
    w.orphan_and_recreate()
    assert _owned_everything(w) == [
        "scm-0", "scm-0-data", "scm-1", "scm-1-data", "scm-2", "scm-2-data", "ConfigMap scm-config",
        "CronJob scm-audit", "PersistentVolumeClaim scm-audit-reports", "PodDisruptionBudget scm",
        "Service scm", "Service scm-headless"]
    ready_at = None
    for i in range(60):
        before = _owned_everything(w)
        w.step()
        p = w.operator_pass()
        w.now += datetime.timedelta(seconds=1)
        if p.status.condition("Ready").status == "True":  # type: ignore[union-attr]
            assert before == [], f"Ready in pass {i} while {before} were not owned"
            ready_at = i
            break
        assert p.status.phase == "Adopting", (i, p.status.phase)  # never Running while something is not owned
    assert ready_at is not None and ready_at > 0
    assert sum(" ClusterReady:" in e for e in w.events) == 1 and " ClusterReady:" in w.events[-1]
    kinds = {a.object_kind for a in w.actions if isinstance(a, planner.Adopt)}
    assert kinds == {"Pod", "PersistentVolumeClaim"}
    assert {a.target for a in w.actions if isinstance(a, planner.Adopt)} >= {naming.audit_pvc_name("scm")}
    assert {a.target for a in w.actions if isinstance(a, planner.Apply)} >= {
        naming.configmap_name("scm"), "scm-audit", naming.pdb_name("scm")}
    assert _owned_everything(w) == []
    w.run()
    assert _owned_everything(w) == []
