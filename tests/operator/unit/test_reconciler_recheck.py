"""The re-check right before a step that stops a member (issue 29 item 4): ``Reconciler.recheck`` reads the leader's
view again -- not the pass's observation -- until the voters the plan counted have answered the leader since the
re-check began, for at most a few heartbeat intervals, and holds the step otherwise. The SCMs are a scripted fake
(below the unit boundary); the clock is injected."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest

from ozone_scm_operator import planner
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.effects.scm import Endpoint
from ozone_scm_operator.model import Observed, PeerObs, PodObs, RingObs
from ozone_scm_operator.reconciler import Reconciler, StepHeld

REF = ClusterRef(name="scm", namespace="ns", uid="u")
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
GUARD = planner.QuorumGuard(stopping="scm-1", leader="scm-0", leader_scm_id="L",
                            voters=(("scm-0", "L"), ("scm-2", "F2")), need=2, max_lag=10, live_bound=0.3)
OBS = Observed(now=NOW, pods={"scm-0": PodObs(name="scm-0", phase="Running", ready=True, pod_ip="10.0.0.1")})


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def monotonic(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += seconds


class FakeSCM:
    """The leader's answers: ``view(t)`` gives scm-2's last contact at time t (None: the leader does not answer)."""

    def __init__(self, clock: Clock, view: Callable[[float], float | None], *, answers: bool = True) -> None:
        self.clock, self.view, self.answers = clock, view, answers
        self.reads: list[tuple[float, Endpoint]] = []

    async def ring(self, ep: Endpoint, security: Any = None) -> RingObs | None:
        self.reads.append((self.clock.t, ep))
        self.clock.t += 0.01  # a read takes 10 ms
        if not self.answers:
            return None
        peers = (PeerObs("L", "LEADER", 0), PeerObs("F1", "FOLLOWER", 0, last_contact=0.0),
                 PeerObs("F2", "FOLLOWER", 0, last_contact=self.view(self.clock.t)))
        return RingObs("L", 3, 500, peers, election_timeout=1.0, heartbeat_interval=0.1)


def _reconciler(scm: FakeSCM, clock: Clock) -> Reconciler:
    return Reconciler(None, scm, monotonic=clock.monotonic, sleep=clock.sleep)  # type: ignore[arg-type]


def _restart(guard: planner.QuorumGuard | None = GUARD) -> planner.DeletePod:
    return planner.DeletePod(target="scm-1", reason="RollingMember", message="", guard=guard)


async def test_the_step_goes_on_once_every_counted_voter_answered_since_the_recheck_began() -> None:
    clock = Clock()
    start = clock.t
    # scm-2 answers the leader every 100 ms, the last time 50 ms before the re-check began
    scm = FakeSCM(clock, lambda t: (t - start + 0.05) % 0.1)
    await _reconciler(scm, clock).recheck(REF, _restart(), OBS, None)
    assert len(scm.reads) >= 2  # the first read could not yet show an answer given after the re-check began
    assert {ep for _, ep in scm.reads} == {Endpoint("scm-0", "10.0.0.1", REF.host("scm-0"))}  # from the leader
    assert clock.t - start < 0.3


async def test_a_member_frozen_just_before_the_recheck_holds_the_step_after_a_few_heartbeat_intervals() -> None:
    clock = Clock()
    frozen_at = clock.t - 0.02  # 20 ms before: its last contact still looks fresh (the plan counted it live)
    scm = FakeSCM(clock, lambda t: t - frozen_at)
    with pytest.raises(StepHeld, match="scm-2 has not answered the leader since the check"):
        await _reconciler(scm, clock).recheck(REF, _restart(), OBS, None)
    assert 0.3 <= clock.t - (frozen_at + 0.02) < 0.4  # held within the live bound, polling each half heartbeat
    assert 5 <= len(scm.reads) <= 8


async def test_a_leader_that_does_not_answer_holds_the_step_at_once() -> None:
    clock = Clock()
    scm = FakeSCM(clock, lambda t: 0.0, answers=False)
    with pytest.raises(StepHeld, match="the leader scm-0 did not answer a fresh read of the ring"):
        await _reconciler(scm, clock).recheck(REF, _restart(), OBS, None)
    assert len(scm.reads) == 1


async def test_steps_without_a_guard_read_nothing() -> None:
    clock = Clock()
    scm = FakeSCM(clock, lambda t: 0.0, answers=False)
    r = _reconciler(scm, clock)
    await r.recheck(REF, _restart(None), OBS, None)
    await r.recheck(REF, planner.DeletePVC(target="scm-1-data", reason="", message=""), OBS, None)
    assert scm.reads == []
