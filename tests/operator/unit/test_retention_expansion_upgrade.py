"""Data kept unless asked (storage.reclaimPolicy, adoption of retained volumes by cluster ID), volume expansion, and
operator upgrades that change the Pods it builds rolling the members (issue 22 items 3 and 4)."""

from __future__ import annotations

from typing import Any

import pytest

from ozone_scm_operator import builders, naming, planner
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.spec import parse_spec

from .sim import World

REF = ClusterRef(name="scm", namespace="ns", uid="u")


def test_member_volumes_are_owned_only_under_delete() -> None:
    retain = builders.build_pvc(REF, parse_spec({})[0], "scm-0")
    assert "ownerReferences" not in retain["metadata"]
    delete = builders.build_pvc(REF, parse_spec({"storage": {"reclaimPolicy": "Delete"}})[0], "scm-0")
    assert delete["metadata"]["ownerReferences"][0]["uid"] == "u"


def test_retained_volumes_are_labelled_and_survive_deletion_then_adopted_by_cluster_id() -> None:
    w = World({"replicas": 3})
    w.run()
    cid = w.status.cluster_id
    ids = {m.name: m.scm_id for m in w.status.members}
    assert {v.label_cid for v in w.pvcs.values()} == {cid}  # every volume says whose data it holds
    assert all(v.owner is None for v in w.pvcs.values())
    w.delete_cluster_and_recreate({"replicas": 3, "storage": {"adoptClusterID": cid}})
    assert sorted(w.pvcs) == ["scm-0-data", "scm-1-data", "scm-2-data"]  # kept
    w.run()
    st = w.status
    assert w.clusters_created == 1 and st.cluster_id == cid
    assert {m.name: m.scm_id for m in st.members} == ids
    creates = [a for a in w.actions if isinstance(a, planner.CreatePod)]
    assert sorted(a.target for a in creates) == sorted(ids)
    assert all(a.body is not None and a.body["metadata"]["annotations"][naming.ANN_INIT_MODE] == "bootstrap"
               for a in creates)  # never scm --init over retained data
    assert not [a for a in w.actions if isinstance(a, (planner.CreatePVC, planner.DeletePVC))]
    init = st.condition("Initialized")
    assert init is not None and init.reason == "ClusterAdopted"


def test_without_adopt_cluster_id_retained_volumes_are_left_alone_and_the_message_says_how() -> None:
    w = World({"replicas": 3})
    w.run()
    w.delete_cluster_and_recreate({"replicas": 3})
    for _ in range(5):
        w.step()
        w.operator_pass()
    assert not [a for a in w.actions if isinstance(a, (planner.CreatePod, planner.CreatePVC, planner.DeletePVC))]
    deg = w.status.condition("Degraded")
    assert deg is not None and "spec.storage.adoptClusterID" in deg.message


@pytest.mark.parametrize("foreign", ["CID-other", None])
def test_a_retained_volume_of_another_cluster_refuses_the_adoption(foreign: str | None) -> None:
    w = World({"replicas": 3})
    w.run()
    cid = w.status.cluster_id
    w.delete_cluster_and_recreate({"replicas": 3, "storage": {"adoptClusterID": cid}})
    w.pvcs["scm-1-data"].label_cid = foreign
    for _ in range(5):
        w.step()
        w.operator_pass()
    assert not [a for a in w.actions if isinstance(a, (planner.CreatePod, planner.CreatePVC, planner.DeletePVC))]
    deg = w.status.condition("Degraded")
    assert deg is not None and deg.reason == "ForeignVolume" and "scm-1-data" in deg.message
    assert w.status.members == ()
    assert any("ForeignVolume" in e for e in w.events)


def test_delete_policy_owns_the_volumes_so_deletion_removes_them() -> None:
    w = World({"replicas": 3, "storage": {"reclaimPolicy": "Delete"}})
    w.run()
    assert all(v.owner == w.ref.uid for v in w.pvcs.values())
    w.delete_cluster_and_recreate({"replicas": 3})
    assert w.pvcs == {}


def test_switching_to_retain_releases_the_volumes() -> None:
    w = World({"replicas": 3, "storage": {"reclaimPolicy": "Delete"}})
    w.run()
    w.spec_raw = {"replicas": 3}
    w.run()
    assert sorted(a.target for a in w.actions if isinstance(a, planner.ReleasePVC)) == sorted(w.pvcs)
    assert all(v.owner is None for v in w.pvcs.values())


def test_growing_storage_expands_every_volume_without_a_roll() -> None:
    w = World({"replicas": 3, "storage": {"size": "10Gi"}})
    w.run()
    w.actions = []
    w.spec_raw = {"replicas": 3, "storage": {"size": "20Gi"}}
    w.run()
    assert sorted(a.target for a in w.actions if isinstance(a, planner.ExpandPVC)) == sorted(w.pvcs)
    assert {v.size for v in w.pvcs.values()} == {"20Gi"}
    assert not [a for a in w.actions if isinstance(a, planner.DeletePod)]
    assert w.status.immutable_spec["storageSize"] == "20Gi"  # type: ignore[index]
    # a member created later gets the grown size
    w.spec_raw = {"replicas": 5, "storage": {"size": "20Gi"}}
    w.run()
    assert {v.size for v in w.pvcs.values()} == {"20Gi"}


def test_shrinking_is_refused_and_changes_nothing() -> None:
    w = World({"replicas": 3, "storage": {"size": "10Gi"}})
    w.run()
    w.actions = []
    w.spec_raw = {"replicas": 3, "storage": {"size": "5Gi"}}
    w.run(until=lambda w: w.condition("Degraded") == "True", max_passes=10)
    assert not [a for a in w.actions if isinstance(a, (planner.ExpandPVC, planner.DeletePVC, planner.DeletePod))]
    deg = w.status.condition("Degraded")
    assert deg is not None and deg.reason == "InvalidSpec" and "cannot shrink" in deg.message


def test_a_storage_class_without_expansion_gives_degraded_and_nothing_deleted() -> None:
    w = World({"replicas": 3})
    w.run()
    w.volume_expansion = False
    w.actions = []
    w.spec_raw = {"replicas": 3, "storage": {"size": "20Gi"}}
    w.run(until=lambda w: w.condition("Degraded") == "True", max_passes=10)
    for _ in range(5):
        w.step()
        w.operator_pass()
    assert not [a for a in w.actions if isinstance(a, (planner.ExpandPVC, planner.DeletePVC, planner.DeletePod))]
    deg = w.status.condition("Degraded")
    assert deg is not None and deg.reason == "VolumeExpansion" and "allowVolumeExpansion" in deg.message
    assert any("VolumeExpansion" in e for e in w.events)
    # the class allows it now: the volumes grow and the condition clears
    w.volume_expansion = True
    w.run()
    assert {v.size for v in w.pvcs.values()} == {"20Gi"} and w.condition("Degraded") == "False"


# ---- operator upgrades ----

def test_a_builder_change_rolls_every_member_once_followers_first_leader_last(
        monkeypatch: pytest.MonkeyPatch) -> None:
    w = World({"replicas": 3})
    w.run()
    leader = w.leader_member()
    w.actions = []
    # nothing changed: another operator pass (a restarted operator of the same version) rolls nothing
    w.run()
    assert [a for a in w.actions if isinstance(a, planner.DeletePod)] == []
    # a new operator version that builds other Pods (here: one more environment variable in every container)
    original = builders._build_pod

    def new_builder(*args: Any, **kwargs: Any) -> dict[str, Any]:
        pod = original(*args, **kwargs)
        for c in [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]:
            c["env"] = [*c["env"], {"name": "NEW_OPERATOR", "value": "1"}]
        return pod

    monkeypatch.setattr(builders, "_build_pod", new_builder)
    w.run()
    rolled = [a.target for a in w.actions if isinstance(a, planner.DeletePod)]
    assert sorted(rolled) == sorted(w.member_names()) and len(set(rolled)) == len(rolled)  # each once
    assert rolled[-1] == leader
    k = [(type(a), a.target) for a in w.actions]
    assert k.index((planner.TransferLeadership, leader)) < k.index((planner.DeletePod, leader))
    assert len({p.revision for p in w.pods.values()}) == 1
    w.actions = []
    w.run()
    assert [a for a in w.actions if isinstance(a, planner.DeletePod)] == []
