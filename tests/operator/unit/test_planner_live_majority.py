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
    assert ("scm-1 has not answered the leader for 30s (a live member answers within 0.3s, 3 heartbeat intervals of "
            "0.1s)") in deg.message
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


# ---- issue 29 item 4: live on a few heartbeat intervals, re-checked right before the step ----


def _ring(**last_contact: float | None) -> RingObs:
    """A leader ``L`` with followers named by keyword, each with that last contact; 100 ms heartbeats, 1 s timeout."""
    peers = (PeerObs("L", "LEADER", 0), *(PeerObs(n, "FOLLOWER", 0, last_contact=c) for n, c in last_contact.items()))
    return RingObs("L", 2, 100, peers, election_timeout=1.0, heartbeat_interval=0.1)


def test_a_follower_that_missed_a_few_heartbeats_is_not_live_for_a_disruption() -> None:
    ring = _ring(a=0.25, b=0.5, c=1.5)
    a, b, c = (ring.peer(x) for x in "abc")
    assert a is not None and b is not None and c is not None
    assert ring.live_bound == 3 * 0.1
    # b missed a few heartbeats: suspect for a disruption, though within an election timeout for its status
    assert ring.live(a) and not ring.live(b) and not ring.live(c)
    assert ring.answering(a) and ring.answering(b) and not ring.answering(c)
    # the bound never exceeds the election timeout (a ring configured with slow heartbeats)
    slow = dataclasses.replace(ring, heartbeat_interval=0.5)
    assert slow.live_bound == 1.0 and slow.live(b) and not slow.live(c)
    # a leader that publishes no heartbeat interval (an older SCM): one election timeout, as before
    older = dataclasses.replace(ring, heartbeat_interval=None)
    assert older.live_bound == 1.0 and older.live(b)


def test_a_roll_holds_while_a_follower_misses_a_few_heartbeats_and_its_status_does_not_flap() -> None:
    """scm-2 answers the leader only every 0.5 s (a few heartbeats missed, not yet an election timeout): restarting
    scm-1 would leave the ring on a suspect member. The roll holds; scm-2 still reads ready in the status."""
    w = World({"replicas": 3})
    w.run()
    observe = w.observe
    scm2 = w.scm_of("scm-2")

    def slow() -> Observed:
        obs = observe()
        if obs.ring is None:
            return obs
        ring = dataclasses.replace(obs.ring, peers=tuple(
            dataclasses.replace(p, last_contact=0.5) if p.scm_id == scm2 else p for p in obs.ring.peers))
        return dataclasses.replace(obs, ring=ring)

    w.observe = slow  # type: ignore[method-assign]
    w.spec_raw = {"replicas": 3, "image": "ozone-scm:0.2.0"}
    n = len(w.actions)
    passes(w, 10)
    assert deletions(w, n) == []
    deg = w.status.condition("Degraded")
    assert deg is not None and deg.reason == "WaitingForQuorum", deg
    assert "scm-2 has not answered the leader for 0.5s (a live member answers within 0.3s" in deg.message
    assert w.status.member("scm-2").ready is True  # type: ignore[union-attr]
    w.observe = observe  # type: ignore[method-assign]
    w.run()
    assert all(p.image == "ozone-scm:0.2.0" for p in w.pods.values()) and w.condition("Ready") == "True"


def _freeze_before_recheck(w: World, member: str, kind: type[planner.Action], target: str) -> None:
    def hook(a: planner.Action) -> None:
        if isinstance(a, kind) and a.target == target:
            w.frozen.add(member)
            w.before_recheck = None

    w.before_recheck = hook


def test_a_follower_frozen_after_the_check_at_the_start_of_the_roll_is_caught_by_the_recheck() -> None:
    """The not-yet-rolled scm-2 is frozen after the plan allowed restarting scm-1 and before the step: the plan's
    view still shows it live, the fresh read before the delete does not. Without the re-check the simulated world
    raises Unsafe (scm-1 restarting and scm-2 frozen leave the leader without a quorum)."""
    w = World({"replicas": 3})
    w.run()
    assert w.leader_member() == "scm-0"
    w.spec_raw = {"replicas": 3, "image": "ozone-scm:0.2.0"}
    n = len(w.actions)
    _freeze_before_recheck(w, "scm-2", planner.DeletePod, "scm-1")
    passes(w, 20)
    (held, why), = w.held
    assert isinstance(held, planner.DeletePod) and held.target == "scm-1" and held.guard is not None
    assert "scm-2 has not answered the leader since the check" in why, why
    assert any("WaitingForQuorum: DeletePod scm-1 held:" in e for e in w.events)
    # scm-1 is never restarted while scm-2 is frozen (sim.World raises Unsafe); the next passes see scm-2 silent
    # and may restart scm-2 itself, which takes nothing from the quorum
    assert "scm-1" not in deletions(w, n) and set(deletions(w, n)) <= {"scm-2"}
    w.frozen.discard("scm-2")
    w.run()
    assert all(p.image == "ozone-scm:0.2.0" for p in w.pods.values()) and w.condition("Ready") == "True"


def test_a_leader_frozen_after_the_first_member_rolled_holds_the_next_restart() -> None:
    """The leader is frozen after scm-1 rolled, between the check for restarting scm-2 and the step: the fresh read
    goes to a leader that answers nobody, so scm-2 is not restarted (the ring elects a new leader with scm-1 and
    scm-2; the operator must not take one of them away meanwhile)."""
    w = World({"replicas": 3})
    w.run()
    w.spec_raw = {"replicas": 3, "image": "ozone-scm:0.2.0"}
    w.run(until=rolling("scm-2"))
    assert w.pods["scm-1"].image == "ozone-scm:0.2.0"
    n = len(w.actions)
    _freeze_before_recheck(w, "scm-0", planner.DeletePod, "scm-2")
    passes(w, 10)
    assert w.held and "the leader scm-0 did not answer a fresh read of the ring" in w.held[0][1]
    # scm-2 is not restarted while scm-0 is frozen; once scm-1 and scm-2 elected a leader, the frozen scm-0 (not
    # live, so restarting it takes nothing away) may be
    assert set(deletions(w, n)) <= {"scm-0"}
    w.frozen.discard("scm-0")
    w.run()
    assert all(p.image == "ozone-scm:0.2.0" for p in w.pods.values()) and w.condition("Ready") == "True"


def test_a_follower_frozen_after_the_check_of_a_decommission_is_caught_by_the_recheck() -> None:
    w = World({"replicas": 3})
    w.run()
    w.spec_raw = {"replicas": 1}
    n = len(w.actions)
    _freeze_before_recheck(w, "scm-1", planner.Decommission, "scm-2")
    passes(w, 10)
    assert [a for a in w.actions[n:] if isinstance(a, planner.Decommission)] == []
    assert w.held and "scm-1 has not answered the leader since the check" in w.held[0][1]
    w.frozen.discard("scm-1")
    w.run()
    assert w.member_names() == ["scm-0"]


def test_the_guard_counts_only_voters_that_answered_since_the_recheck_began() -> None:
    guard = planner.QuorumGuard(stopping="m", leader="l", leader_scm_id="L", voters=(("l", "L"), ("a", "a")),
                                need=2, max_lag=10, live_bound=0.3)
    assert guard.why_not(_ring(a=0.01, m=0.0), answered_within=0.05) is None
    why = guard.why_not(_ring(a=0.08, m=0.0), answered_within=0.05)  # its last answer came before the re-check
    assert why == ("stopping m now would leave 1 live, caught-up voter of the 2 needed: a has not answered the "
                   "leader since the check (last answer 0.08s ago)")
    assert "a has not answered the leader since the check (last answer not since its term began)" in (
        guard.why_not(_ring(a=None), 0.2) or "")
    assert guard.why_not(None, 0.1) == "the leader l did not answer a fresh read of the ring"
    moved = dataclasses.replace(_ring(a=0.0), leader_scm_id="a")
    assert guard.why_not(moved, 0.1) == "l no longer leads the ring"
    behind = _ring(a=0.0)
    behind = dataclasses.replace(behind, peers=tuple(dataclasses.replace(p, lag=50) for p in behind.peers))
    assert "a fell behind (50 entries, more than 10)" in (guard.why_not(behind, 0.1) or "")
    learner = dataclasses.replace(behind, peers=(PeerObs("L", "LEADER", 0), PeerObs("a", "LEARNER", 0, last_contact=0)))
    assert "a is no longer a voter" in (guard.why_not(learner, 0.1) or "")
    # a leader that publishes no contact times: lag and roles alone, as the plan judged
    older = RingObs("L", 2, 100, (PeerObs("L", "LEADER", 0), PeerObs("a", "FOLLOWER", 0)))
    assert guard.why_not(older, 0.0) is None
