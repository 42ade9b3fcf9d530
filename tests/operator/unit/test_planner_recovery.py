"""The planner and operator-driven quorum recovery (the ``ozone-scm.io/recover-from`` annotation): refused while
the ring has a leader or a majority is Ready, for a member that is not one or has lost its volume; otherwise the
lost members are stopped, the survivor runs ``scm --recover`` once and is restarted with ``--bootstrap``, the lost
members' volumes are kept out of view, the annotation is removed, and the ring grows back by bootstrap."""

from __future__ import annotations

from ozone_scm_operator import builders, naming, planner

from .sim import World


def lost_majority() -> World:
    w = World({"replicas": 3})
    w.run()
    assert w.member_names() == ["scm-0", "scm-1", "scm-2"]
    w.delete_pvc_and_pod("scm-1")
    w.delete_pvc_and_pod("scm-2")
    for _ in range(5):
        w.step()
        w.operator_pass()
    assert w.leader is None and w.condition("Ready") == "False"
    return w


def test_recovery_from_the_survivor_brings_the_ring_back_to_three_with_its_identity_and_data() -> None:
    w = lost_majority()
    survivor_scm = w.scm_of("scm-0")
    cid = w.cluster_id
    w.recover_from = "scm-0"
    w.run(max_passes=200)  # the sim raises Unsafe on --recover while a majority answers, or a second ring
    assert w.recover_from is None  # the operator removed the annotation
    assert w.member_names() == ["scm-0", "scm-3", "scm-4"] and len(w.voters) == 3
    assert w.scm_of("scm-0") == survivor_scm and w.cluster_id == cid and w.clusters_created == 1
    kinds = [(type(a), a.target) for a in w.actions if isinstance(a, (planner.DeletePod, planner.CreatePod,
                                                                  planner.RemoveAnnotation))]
    first = kinds.index((planner.DeletePod, "scm-0"))
    assert kinds[first:first + 5] == [
        (planner.DeletePod, "scm-0"),  # stopped, to run scm --recover on its data
        (planner.CreatePod, "scm-0"),  # ... with the recover init container
        (planner.DeletePod, "scm-0"),  # leads alone: restarted with --bootstrap
        (planner.CreatePod, "scm-0"),
        (planner.RemoveAnnotation, "scm"),
    ]
    modes = [a.body["metadata"]["annotations"][naming.ANN_INIT_MODE] for a in w.actions
             if isinstance(a, planner.CreatePod) and a.target == "scm-0" and a.body is not None]
    assert modes[-2:] == [builders.INIT_MODE_RECOVER, builders.INIT_MODE_BOOTSTRAP]
    recover_pod = next(a.body for a in w.actions if isinstance(a, planner.CreatePod) and a.body is not None
                       and a.body["metadata"]["annotations"][naming.ANN_INIT_MODE] == builders.INIT_MODE_RECOVER)
    assert recover_pod["spec"]["initContainers"][0]["command"] == ["ozone-scm", "scm", "--recover"]
    assert any("RecoverQuorum" in e or "Recovering" in e for e in w.events) or w.status.phase == "Running"
    assert w.settled() and w.status.primordial_member == "scm-0"


def test_lost_members_with_volumes_left_are_stopped_and_their_volumes_kept_not_deleted() -> None:
    w = World({"replicas": 3})
    w.run()
    w.broken_pods.update({"scm-1", "scm-2"})  # crash-looping members: their Pods and data are still there
    w.kill_pod("scm-1")
    w.kill_pod("scm-2")
    w.run(until=lambda w: w.leader is None and {"scm-1", "scm-2"} <= set(w.pods), max_passes=20)
    w.recover_from = "scm-0"
    w.run(until=lambda w: w.recover_from is None and w.status.current_operation is None, max_passes=100)
    retained = [a.target for a in w.actions if isinstance(a, planner.RetainPVC)]
    assert sorted(retained) == ["scm-1-data", "scm-2-data"]
    assert not any(isinstance(a, planner.DeletePVC) for a in w.actions)
    deleted = [a.target for a in w.actions if isinstance(a, planner.DeletePod)]
    assert deleted.index("scm-1") < deleted.index("scm-0") and deleted.index("scm-2") < deleted.index("scm-0")
    w.broken_pods.clear()
    w.run()
    assert w.member_names() == ["scm-0", "scm-3", "scm-4"]


def test_refused_while_the_ring_has_a_quorum_and_nothing_is_done() -> None:
    w = World({"replicas": 3})
    w.run()
    before = len(w.actions)
    w.recover_from = "scm-1"
    w.step()
    w.operator_pass()
    assert w.actions[before:] == [] and w.status.current_operation is None
    deg = w.status.condition("Degraded")
    assert deg is not None and deg.status == "True" and deg.reason == "RecoveryRefused"
    assert "the ring has a leader" in deg.message and "remove the annotation" in deg.message
    assert any("RecoveryRefused" in e for e in w.events)
    w.recover_from = None
    w.run()
    assert w.condition("Degraded") == "False"


def test_refused_for_a_majority_ready_a_stranger_or_a_member_without_its_volume() -> None:
    w = lost_majority()
    w.recover_from = "scm-7"
    w.step()
    w.operator_pass()
    deg = w.status.condition("Degraded")
    assert deg is not None and deg.reason == "RecoveryRefused" and "scm-7 is not a joined member" in deg.message
    w.recover_from = "scm-1"  # its volume was deleted
    w.step()
    w.operator_pass()
    deg = w.status.condition("Degraded")
    assert deg is not None and "the volume of scm-1 is gone" in deg.message
    assert w.status.current_operation is None and not any(isinstance(a, planner.DeletePod) for a in w.actions[-3:])
