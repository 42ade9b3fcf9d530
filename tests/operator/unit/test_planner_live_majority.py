"""No disruption without a live majority (issue 22, items 8 and 9): before every step that stops a member (a roll's
restart) or takes one out of the ring (decommission), the planner checks from the leader's own view -- lag and last
contact per follower -- that the members that remain are a live, caught-up majority; otherwise it waits and says
why. The simulated world (``sim.py``) raises ``Unsafe`` when an action takes a live majority down."""

from __future__ import annotations

import dataclasses
import datetime

from ozone_scm_operator import planner
from ozone_scm_operator.model import OP_ROLL, Observed, PeerObs, RingObs

from .sim import World


def deletions(w: World, since: int = 0) -> list[str]:
    return [a.target for a in w.actions[since:] if isinstance(a, planner.DeletePod)]


def rolling(member: str):  # type: ignore[no-untyped-def]
    def until(w: World) -> bool:
        op = w.status.current_operation
        return op is not None and op.type == OP_ROLL and op.member == member and op.step is None

    return until


def passes(w: World, n: int, seconds: float = 1.0) -> None:
    for _ in range(n):
        w.step()
        w.operator_pass()
        w.now += datetime.timedelta(seconds=seconds)


def test_a_roll_never_restarts_a_member_while_a_lost_one_is_still_a_voter() -> None:
    """Item 8: the primordial's volume and Pod are deleted while a roll is about to restart another member."""
    w = World({"replicas": 3})
    w.run()
    w.leader = w.scm_of("scm-1")  # the primordial is a follower, so losing it keeps a leader
    w.term += 1
    w.spec_raw = {"replicas": 3, "image": "ozone-scm:0.2.0"}
    w.run(until=rolling("scm-2"))  # the roll's next step would restart scm-2
    n = len(w.actions)
    w.delete_pvc_and_pod("scm-0")
    passes(w, 3)  # sim.World.apply raises Unsafe if scm-2 (or the leader) were stopped now
    assert deletions(w, n) == []
    assert any("WaitingForQuorum" in e and "restarting scm-2" in e and "scm-0" in e for e in w.events), w.events
    # the lost member is replaced first, then the roll finishes; nothing unsafe on the way
    w.run()
    assert w.member_names() == ["scm-1", "scm-2", "scm-3"]
    assert all(p.image == "ozone-scm:0.2.0" for p in w.pods.values())
    assert w.status.current_operation is None and w.condition("Ready") == "True"


def test_a_frozen_member_is_not_taken_for_healthy() -> None:
    """Item 9: a member frozen (SIGSTOP) just before the roll's next step: its Pod still reads ready and its lag
    small, but it no longer answers the leader; the operator must not restart another member."""
    w = World({"replicas": 3})
    w.run()
    assert w.leader_member() == "scm-0"
    w.spec_raw = {"replicas": 3, "image": "ozone-scm:0.2.0"}
    w.run(until=rolling("scm-2"))  # scm-1 is rolled and ready again
    assert w.pods["scm-1"].image == "ozone-scm:0.2.0"
    n = len(w.actions)
    w.frozen.add("scm-1")
    passes(w, 20)
    assert deletions(w, n) == []  # neither scm-2 nor (after a transfer) scm-0
    deg = w.status.condition("Degraded")
    assert deg is not None and deg.reason == "WaitingForQuorum", deg
    assert "scm-1 has not answered the leader for 30.0s (election timeout 1s)" in deg.message
    assert w.status.member("scm-1").ready is False  # type: ignore[union-attr]
    w.frozen.discard("scm-1")
    w.run()
    assert all(p.image == "ozone-scm:0.2.0" for p in w.pods.values()) and w.condition("Ready") == "True"


def test_a_scale_down_never_decommissions_a_member_when_the_rest_are_not_a_live_majority() -> None:
    w = World({"replicas": 3})
    w.run()
    w.spec_raw = {"replicas": 1}

    def removing(w: World) -> bool:
        op = w.status.current_operation
        return op is not None and op.type == "RemoveMember" and op.member == "scm-2"

    w.run(until=removing)
    n = len(w.actions)
    w.frozen.add("scm-1")  # before the decommission of scm-2, the only other follower stops answering
    passes(w, 10)
    assert [a for a in w.actions[n:] if isinstance(a, planner.Decommission)] == []
    deg = w.status.condition("Degraded")
    assert deg is not None and deg.reason == "WaitingForQuorum" and "removing scm-2" in deg.message
    w.frozen.discard("scm-1")
    w.run()
    assert w.member_names() == ["scm-0"]


def test_live_majority_reads_last_contact_not_only_lag_or_readiness() -> None:
    w = World({"replicas": 3})
    w.run()
    obs = w.observe()
    ring = obs.ring
    assert ring is not None
    follower = next(p for p in ring.peers if p.role == "FOLLOWER")
    silent = RingObs(
        leader_scm_id=ring.leader_scm_id, term=ring.term, commit_index=ring.commit_index, election_timeout=1.0,
        peers=tuple(PeerObs(p.scm_id, p.role, p.lag, p.host, 1.5 if p is follower else p.last_contact)
                    for p in ring.peers),
    )
    assert ring.live(follower) and not silent.live(silent.peer(follower.scm_id))  # type: ignore[arg-type]
    # a follower the leader has not heard from in its term has no last contact: not live
    unheard = RingObs(ring.leader_scm_id, ring.term, ring.commit_index,
                      tuple(PeerObs(p.scm_id, p.role, p.lag, p.host) for p in ring.peers), election_timeout=1.0)
    assert not unheard.live(unheard.peer(follower.scm_id))  # type: ignore[arg-type]
    assert unheard.live(unheard.peer(ring.leader_scm_id))  # type: ignore[arg-type]
    # a leader that publishes no contact times at all (an older SCM): lag and readiness judge, as before
    older = RingObs(ring.leader_scm_id, ring.term, ring.commit_index,
                    tuple(PeerObs(p.scm_id, p.role, p.lag, p.host) for p in ring.peers))
    assert older.live(older.peer(follower.scm_id))  # type: ignore[arg-type]


def test_never_ready_while_a_member_runs_an_outdated_revision() -> None:
    """Between two roll steps (one held by the check, or a pass spent on a Service) no operation is recorded, yet
    the cluster is not Ready: a member still runs the old revision."""
    w = World({"replicas": 3})
    w.run()
    w.spec_raw = {"replicas": 3, "image": "ozone-scm:0.2.0", "service": {"annotations": {"a": "b"}}}
    p = w.plan()
    assert p.action is not None and isinstance(p.action, planner.Apply) and p.status.current_operation is None
    ready = p.status.condition("Ready")
    assert ready is not None and ready.status == "False" and ready.reason == "MembersOutdated", ready
    assert "scm-0, scm-1, scm-2 still run an older revision" in ready.message


def test_a_member_that_looks_unhealthy_is_not_restarted_while_another_voter_is_frozen() -> None:
    """Item 9 after an operator restart: the roll's next member (scm-2) looks unhealthy for a moment -- its lag over
    maxCatchUpLag under load, or its Pod briefly unready -- while scm-1 is frozen. "Restarting a member that is
    already not live takes nothing away" does not hold then: scm-0 alone is no majority of three, and restarting
    scm-2 leaves no quorum. The roll holds until scm-1 answers again."""
    w = World({"replicas": 3})
    w.run()
    w.spec_raw = {"replicas": 3, "image": "ozone-scm:0.2.0"}
    w.run(until=rolling("scm-2"))
    n = len(w.actions)
    w.frozen.add("scm-1")
    observe = w.observe
    scm2 = w.scm_of("scm-2")

    def lagging() -> Observed:
        obs = observe()
        assert obs.ring is not None
        ring = dataclasses.replace(obs.ring, peers=tuple(
            dataclasses.replace(p, lag=5000) if p.scm_id == scm2 else p for p in obs.ring.peers))
        return dataclasses.replace(obs, ring=ring)

    w.observe = lagging  # type: ignore[method-assign]
    passes(w, 5)
    assert deletions(w, n) == []
    deg = w.status.condition("Degraded")
    assert deg is not None and deg.reason == "WaitingForQuorum" and "scm-1 has not answered the leader" in deg.message

    def unready() -> Observed:
        obs = observe()
        pods = dict(obs.pods)
        pods["scm-2"] = dataclasses.replace(pods["scm-2"], ready=False)
        return dataclasses.replace(obs, pods=pods)

    w.observe = unready  # type: ignore[method-assign]
    passes(w, 5)
    assert deletions(w, n) == []
    w.observe = observe  # type: ignore[method-assign]
    w.frozen.discard("scm-1")
    w.run()
    assert all(p.image == "ozone-scm:0.2.0" for p in w.pods.values()) and w.condition("Ready") == "True"


def test_an_unhealthy_member_alone_is_still_rolled() -> None:
    """The other side of the rule: when the roll's member is the only one not live and caught up (the others are a
    live majority), restarting it is allowed -- that is how a member stuck on a bad revision is repaired."""
    w = World({"replicas": 3})
    w.run()
    w.spec_raw = {"replicas": 3, "image": "ozone-scm:0.2.0"}
    w.run(until=rolling("scm-2"))
    n = len(w.actions)
    observe = w.observe

    def unready() -> Observed:
        obs = observe()
        pods = dict(obs.pods)
        if "scm-2" in pods and pods["scm-2"].revision != w.pods["scm-1"].revision:
            pods["scm-2"] = dataclasses.replace(pods["scm-2"], ready=False)
        return dataclasses.replace(obs, pods=pods)

    w.observe = unready  # type: ignore[method-assign]
    passes(w, 3)
    assert "scm-2" in deletions(w, n)
