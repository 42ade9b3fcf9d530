"""Requests a user makes through annotations (the kubectl plugin writes them): switchover to a named member,
restart of the ring or of one member (folded into the Pod revision, so a roll with all its gates), and hibernation
(Pods removed, volumes kept, the same ring back). Played in the simulated world (``sim.py``), which raises
``Unsafe`` when an action takes a live majority down or deletes the leader's Pod without a transfer first."""

from __future__ import annotations

import datetime

from ozone_scm_operator import planner
from ozone_scm_operator.directives import (
    ANN_HIBERNATION,
    ANN_RESTARTED_AT,
    ANN_SWITCHOVER_TO,
    member_restart_annotation,
    read_directives,
)
from ozone_scm_operator.model import OP_SWITCHOVER

from .sim import World


def ready_world() -> World:
    w = World({"replicas": 3})
    w.run()
    return w


def follower(w: World) -> str:
    return next(m for m in w.member_names() if m != w.leader_member())


def test_read_directives_parses_each_annotation_and_names_a_bad_value() -> None:
    d = read_directives({
        ANN_SWITCHOVER_TO: " scm-1 ", ANN_RESTARTED_AT: "2026-01-01T00:00:00Z",
        member_restart_annotation("scm-2"): "2026-01-02T00:00:00Z", ANN_HIBERNATION: "ON", "other": "x",
    })
    assert d.switchover_to == "scm-1" and d.restarted_at == "2026-01-01T00:00:00Z"
    assert d.member_restarted_at("scm-2") == "2026-01-02T00:00:00Z" and d.member_restarted_at("scm-1") is None
    assert d.hibernation is True and d.problems == ()
    assert read_directives(None).hibernation is False
    bad = read_directives({ANN_HIBERNATION: "yes"})
    assert bad.hibernation is None
    assert bad.problems == ("annotation ozone-scm.io/hibernation is 'yes'; set it to 'on' or 'off' (until then the "
                            "cluster stays as it is)",)


def test_switchover_moves_leadership_to_the_named_follower_then_clears_the_annotation() -> None:
    w = ready_world()
    target = follower(w)
    w.annotations[ANN_SWITCHOVER_TO] = target
    p = w.operator_pass()
    # the intent (a Switchover operation) is in the status written before the transfer
    assert p.status.current_operation is not None and p.status.current_operation.type == OP_SWITCHOVER
    assert p.status.phase == "SwitchingOver"
    assert p.action is not None and isinstance(p.action, planner.TransferLeadership)
    assert p.action.to == target
    w.run(until=lambda w: ANN_SWITCHOVER_TO not in w.annotations)
    assert w.leader_member() == target and w.status.leader == target
    assert any(e.startswith(f"Normal SwitchoverDone: {target} is the leader") for e in w.action_events), w.action_events
    assert w.pod_deletions == [] and w.status.current_operation is None
    w.run()
    assert w.condition("Ready") == "True"


def test_switchover_survives_operator_crashes_between_intent_and_action() -> None:
    """Killed after writing each step's intent and before acting, the operator resumes: the transfer is asked again
    and the annotation is cleared exactly once the target leads."""
    w = ready_world()
    target = follower(w)
    w.annotations[ANN_SWITCHOVER_TO] = target
    crashed: set[type] = set()

    def crash(_: int) -> bool:
        p = w.plan()
        kind = type(p.action) if p.action is not None else None
        if kind in (planner.TransferLeadership, planner.ClearAnnotation) and kind not in crashed:
            crashed.add(kind)
            return True
        return False

    w.run(until=lambda w: ANN_SWITCHOVER_TO not in w.annotations, crash=crash)
    assert crashed == {planner.TransferLeadership, planner.ClearAnnotation}
    assert w.leader_member() == target and w.status.current_operation is None
    assert sum(e.startswith("Normal SwitchoverDone") for e in w.action_events) == 1


def test_switchover_to_the_leader_is_done_at_once() -> None:
    w = ready_world()
    leader = w.leader_member()
    assert leader is not None
    w.annotations[ANN_SWITCHOVER_TO] = leader
    p = w.operator_pass()
    assert p.action is not None and isinstance(p.action, planner.ClearAnnotation) and p.action.reason == "SwitchoverDone"
    assert ANN_SWITCHOVER_TO not in w.annotations and w.leader_member() == leader


def test_switchover_refused_for_a_stranger_and_for_a_member_that_is_not_caught_up() -> None:
    w = ready_world()
    leader = w.leader_member()
    w.annotations[ANN_SWITCHOVER_TO] = "scm-9"
    p = w.operator_pass()
    assert p.action is not None and p.action.event_type == "Warning" and p.action.reason == "SwitchoverRefused"
    assert p.action.message == "switchover to scm-9 refused: scm-9 is not a member of scm (members: scm-0, scm-1, scm-2)"
    assert ANN_SWITCHOVER_TO not in w.annotations and w.status.current_operation is None

    target = follower(w)
    w.frozen.add(target)  # it stops answering the leader: not a caught-up voter
    w.step()
    w.annotations[ANN_SWITCHOVER_TO] = target
    w.run(max_passes=10, until=lambda w: ANN_SWITCHOVER_TO not in w.annotations)
    assert any(e.startswith(f"Warning SwitchoverRefused: switchover to {target} refused: {target} is not a "
                            "caught-up voter") for e in w.action_events), w.action_events
    assert w.leader_member() == leader and not any(isinstance(a, planner.TransferLeadership) for a in w.actions)


def test_restart_annotation_rolls_every_member_leader_last_and_only_once() -> None:
    w = ready_world()
    leader = w.leader_member()
    images = {n: p.image for n, p in w.pods.items()}
    w.annotations[ANN_RESTARTED_AT] = "2026-01-01T10:00:00Z"
    n = len(w.actions)
    w.run()
    assert sorted(w.pod_deletions) == sorted(w.member_names())
    assert w.pod_deletions[-1] == leader  # the leader last, after a transfer (sim.World.apply checks the transfer)
    kinds = [type(a) for a in w.actions[n:]]
    assert kinds.index(planner.TransferLeadership) < len(kinds) - 1 - kinds[::-1].index(planner.DeletePod)
    assert {n: p.image for n, p in w.pods.items()} == images  # nothing but the revision changed
    revision = w.status.revision
    assert all(p.revision == revision for p in w.pods.values())
    # settled: the same annotation restarts nothing again
    deleted = len(w.pod_deletions)
    for _ in range(5):
        w.step()
        w.operator_pass()
        w.now += datetime.timedelta(seconds=1)
    assert len(w.pod_deletions) == deleted and w.condition("Ready") == "True"


def test_restart_of_one_member_restarts_only_it_and_moves_leadership_first_when_it_leads() -> None:
    w = ready_world()
    target = follower(w)
    w.annotations[member_restart_annotation(target)] = "2026-01-01T10:00:00Z"
    w.run()
    assert w.pod_deletions == [target]
    assert w.pods[target].revision != w.status.revision  # its own revision (the cluster's plus its request)
    assert all(p.revision == w.status.revision for n, p in w.pods.items() if n != target)

    leader = w.leader_member()
    assert leader is not None
    w.annotations[member_restart_annotation(leader)] = "2026-01-01T11:00:00Z"
    n = len(w.actions)
    w.run()
    assert w.pod_deletions == [target, leader] and w.leader_member() != leader
    assert [type(a) for a in w.actions[n:]].count(planner.TransferLeadership) == 1


def test_hibernation_removes_the_pods_keeps_the_volumes_and_wakes_the_same_ring() -> None:
    w = ready_world()
    cid = w.status.cluster_id
    leader = w.leader_member()
    ids = {m.name: m.scm_id for m in w.status.members}
    pvcs = set(w.pvcs)
    w.annotations[ANN_HIBERNATION] = "on"
    w.run(until=lambda w: w.status.phase == "Hibernated")
    assert w.pods == {} and set(w.pvcs) == pvcs
    assert w.pod_deletions[-1] == leader  # followers first, the leader last
    st = w.status
    hib = st.condition("Hibernated")
    assert hib is not None and hib.status == "True" and hib.reason == "Hibernated"
    ready = st.condition("Ready")
    assert ready is not None and ready.status == "False" and ready.reason == "Hibernated"
    degraded = st.condition("Degraded")
    assert degraded is not None and degraded.status == "False", degraded
    assert any(e.startswith("Normal Hibernated") for e in w.events)
    # hours later: nothing is replaced, re-created or deleted while it sleeps
    n = len(w.actions)
    for _ in range(20):
        w.step()
        w.operator_pass()
        w.now += datetime.timedelta(hours=1)
    assert [a for a in w.actions[n:] if not isinstance(a, planner.Apply)] == [] and w.pods == {}
    assert all(m.out_of_quorum_since is None for m in w.status.members)
    # a switchover asked while it sleeps is refused, not kept for later
    w.annotations[ANN_SWITCHOVER_TO] = "scm-1"
    w.run(max_passes=5, until=lambda w: ANN_SWITCHOVER_TO not in w.annotations)
    assert w.action_events[-1] == "Warning SwitchoverRefused: switchover to scm-1 refused: scm is hibernated (no SCM runs)"

    w.annotations[ANN_HIBERNATION] = "off"
    w.run()
    st = w.status
    assert st.cluster_id == cid and w.clusters_created == 1
    assert {m.name: m.scm_id for m in st.members} == ids  # same members, same identities, no replacement
    assert all(p.init_mode == "bootstrap" for p in w.pods.values())
    hib = st.condition("Hibernated")
    assert hib is not None and hib.status == "False" and hib.reason == "Resumed"
    assert w.condition("Ready") == "True" and st.phase == "Running"


def test_an_unreadable_hibernation_value_keeps_the_state_and_says_why() -> None:
    w = ready_world()
    w.annotations[ANN_HIBERNATION] = "on"
    w.run(until=lambda w: w.status.phase == "Hibernated")
    w.annotations[ANN_HIBERNATION] = "sleep"
    for _ in range(5):
        w.step()
        w.operator_pass()
        w.now += datetime.timedelta(seconds=1)
    assert w.pods == {} and w.status.phase == "Hibernated"
    degraded = w.status.condition("Degraded")
    assert degraded is not None and degraded.reason == "InvalidAnnotation" and "'sleep'" in degraded.message
