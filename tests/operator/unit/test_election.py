"""The leader-election core (``ozone_scm_operator.election``): expiry, renewal, conflicting updates, clock skew,
step-down, release; and a randomized simulation of candidates racing on one Lease with a compare-and-swap store,
checking that two never count themselves leader at the same instant."""

from __future__ import annotations

import dataclasses
import random

import pytest

from ozone_scm_operator import election
from ozone_scm_operator.election import Create, Lease, LeaseRecord, Lost, State, Timing, Update, Wait

T = Timing(lease_duration=15, renew_deadline=10.0, retry_period=2.0)
W0 = "2026-11-27T08:00:00.000000Z"


def held(holder: str, rv: str = "7", renew: str = W0, transitions: int = 0, duration: int | None = 15) -> Lease:
    return Lease(LeaseRecord(holder, duration, W0, renew, transitions), rv)


def test_absent_lease_is_created_with_us_as_holder() -> None:
    state, step = election.decide("a", T, State(), None, now=100.0, wall=W0)
    assert step == Create(LeaseRecord("a", 15, W0, W0, 0))
    state = election.written(state, step.record, started=100.0)
    assert election.leading(state, T, 100.0) and election.leading(state, T, 109.9)
    assert not election.leading(state, T, 110.0)


def test_a_held_lease_is_taken_only_after_it_expired_on_our_clock() -> None:
    state, step = election.decide("b", T, State(), held("a"), now=50.0, wall=W0)
    assert step == Wait("a", 15.0)
    state, step = election.decide("b", T, state, held("a"), now=64.9, wall=W0)
    assert isinstance(step, Wait) and step.expires_in == pytest.approx(0.1)
    state, step = election.decide("b", T, state, held("a"), now=65.0, wall="later")
    assert step == Update(LeaseRecord("b", 15, "later", "later", 1), "7")


def test_a_renewal_by_the_holder_restarts_the_wait() -> None:
    state, _ = election.decide("b", T, State(), held("a", rv="7"), now=0.0, wall=W0)
    # the holder renews at 10: a new renewTime and resourceVersion
    state, step = election.decide("b", T, state, held("a", rv="9", renew="r2"), now=10.0, wall=W0)
    assert step == Wait("a", 15.0)
    state, step = election.decide("b", T, state, held("a", rv="9", renew="r2"), now=20.0, wall=W0)
    assert isinstance(step, Wait)  # 15 s from 10, not from 0
    _, step = election.decide("b", T, state, held("a", rv="9", renew="r2"), now=25.0, wall=W0)
    assert isinstance(step, Update) and step.record.holder == "b"


def test_the_lease_duration_written_in_the_lease_is_the_one_waited() -> None:
    state, _ = election.decide("b", T, State(), held("a", duration=40), now=0.0, wall=W0)
    _, step = election.decide("b", T, state, held("a", duration=40), now=39.0, wall=W0)
    assert step == Wait("a", 1.0)


def test_clock_skew_between_holder_and_candidate_does_not_matter() -> None:
    """renewTime is the holder's wall clock; the candidate never compares it with its own."""
    # the holder's clock is an hour behind ours: its renewTime looks long expired, yet it is renewing
    behind = [f"2026-11-27T07:00:0{i}.000000Z" for i in range(4)]
    state = State()
    for i, renew in enumerate(behind):
        state, step = election.decide("b", T, state, held("a", rv=str(10 + i), renew=renew), now=i * 2.0, wall=W0)
        assert isinstance(step, Wait), step
    # the holder's clock is an hour ahead: once it stops renewing, the candidate waits one lease duration of its own
    # time after it last saw a change, not until the (future) renewTime plus the duration
    ahead = held("a", rv="20", renew="2026-11-27T09:00:00.000000Z")
    state, step = election.decide("b", T, state, ahead, now=100.0, wall=W0)
    assert step == Wait("a", 15.0)
    _, step = election.decide("b", T, state, ahead, now=115.0, wall=W0)
    assert isinstance(step, Update) and step.record.holder == "b" and step.record.transitions == 1


def test_renewal_keeps_acquire_time_and_transitions() -> None:
    lease = Lease(LeaseRecord("a", 15, "acq", "r1", 4), "11")
    state = election.written(State(), lease.record, started=0.0)
    state, step = election.decide("a", T, state, lease, now=2.0, wall="r2")
    assert step == Update(LeaseRecord("a", 15, "acq", "r2", 4), "11")
    state = election.written(state, step.record, started=2.0)
    assert election.leading(state, T, 11.9) and not election.leading(state, T, 12.0)


def test_a_restarted_replica_takes_its_own_lease_back_at_once() -> None:
    _, step = election.decide("a", T, State(), Lease(LeaseRecord("a", 15, "acq", "r1", 2), "5"), now=0.0, wall="r2")
    assert step == Update(LeaseRecord("a", 15, "acq", "r2", 2), "5")


def test_a_released_lease_is_taken_at_once() -> None:
    released = Lease(LeaseRecord("", 1, "acq", "rel", 3), "8")
    _, step = election.decide("b", T, State(), released, now=0.0, wall="now")
    assert step == Update(LeaseRecord("b", 15, "now", "now", 4), "8")


def test_the_holder_steps_down_the_moment_it_reads_another_holder() -> None:
    state = election.written(State(), LeaseRecord("a", 15, W0, W0, 0), started=0.0)
    state, step = election.decide("a", T, state, held("b", rv="30", transitions=1), now=1.0, wall=W0)
    assert step == Lost("b")
    assert not election.leading(state, T, 1.0)


def test_the_holder_steps_down_at_the_renew_deadline_without_a_renewal() -> None:
    state = election.written(State(), LeaseRecord("a", 15, W0, W0, 0), started=0.0)
    for failed_at in (2.0, 4.0, 6.0, 8.0):
        state = election.write_failed(state, conflict=False)
        assert election.leading(state, T, failed_at)
    assert not election.leading(state, T, 10.0)


def test_a_conflicting_update_makes_the_loser_count_afresh() -> None:
    lease = held("a", rv="7")
    sa, step_a = election.decide("b", T, State(), lease, now=0.0, wall=W0)
    sc, step_c = election.decide("c", T, State(), lease, now=0.0, wall=W0)
    sa, step_a = election.decide("b", T, sa, lease, now=15.0, wall="t")
    sc, step_c = election.decide("c", T, sc, lease, now=15.0, wall="t")
    assert isinstance(step_a, Update) and isinstance(step_c, Update)
    assert step_a.resource_version == step_c.resource_version == "7"  # both conditional on what they read
    store = Store({"rv": 7, "record": lease.record})
    assert store.update(step_a) is True and store.update(step_c) is False  # the second is a 409
    sa = election.written(sa, step_a.record, 15.0)
    sc = election.write_failed(sc, conflict=True)
    sc, step = election.decide("c", T, sc, store.read(), now=15.5, wall=W0)
    assert step == Wait("b", 15.0)


def test_release_only_our_own_lease() -> None:
    assert election.release("a", held("b"), "now") is None
    assert election.release("a", None, "now") is None
    step = election.release("a", Lease(LeaseRecord("a", 15, "acq", "r", 2), "9"), "now")
    assert step == Update(LeaseRecord("", 1, "acq", "now", 2), "9")


@pytest.mark.parametrize(("timing", "fragment"), [
    (Timing(15, 15.0, 2.0), "--leader-elect-renew-deadline 15.0: must be less than the lease duration"),
    (Timing(15, 2.0, 2.0), "must exceed 1.2 x the retry period"),
    (Timing(0, 0.5, 0.1), "--leader-elect-lease-duration 0"),
    (Timing(15, 10.0, 0.0), "--leader-elect-retry-period 0.0: must be positive"),
])
def test_timing_problems_name_the_option(timing: Timing, fragment: str) -> None:
    assert any(fragment in p for p in timing.problems()), timing.problems()


def test_default_timing_is_fine() -> None:
    assert Timing().problems() == []
    assert Timing(4, 3.0, 0.5).problems() == []


def test_lease_record_round_trips_through_the_spec() -> None:
    rec = LeaseRecord("a", 15, "t1", "t2", 3)
    assert LeaseRecord.from_spec(rec.to_spec()) == rec
    assert LeaseRecord.from_spec(None) == LeaseRecord()
    body = {"metadata": {"resourceVersion": "12"}, "spec": {"holderIdentity": "x", "leaseDurationSeconds": 5}}
    assert Lease.from_body(body) == Lease(LeaseRecord("x", 5, None, None, 0), "12")


# ---- a simulation: candidates, a compare-and-swap store, crashes and slow requests ----


@dataclasses.dataclass
class Store:
    """The API server's view of one Lease: a record and a resourceVersion; updates are compare-and-swap."""

    data: dict[str, object] | None

    def read(self) -> Lease | None:
        if self.data is None:
            return None
        rec = self.data["record"]
        assert isinstance(rec, LeaseRecord)
        return Lease(rec, str(self.data["rv"]))

    def create(self, step: Create, rv: int) -> bool:
        if self.data is not None:
            return False
        self.data = {"rv": rv, "record": step.record}
        return True

    def update(self, step: Update, rv: int | None = None) -> bool:
        if self.data is None or str(self.data["rv"]) != step.resource_version:
            return False
        self.data = {"rv": rv if rv is not None else int(str(self.data["rv"])) + 1, "record": step.record}
        return True


@pytest.mark.parametrize("seed", range(40))
def test_never_two_leaders_at_once(seed: int) -> None:
    rng = random.Random(seed)
    timing = Timing(lease_duration=4, renew_deadline=3.0, retry_period=0.5)
    names = ["a", "b", "c"]
    states = {n: State() for n in names}
    alive = dict.fromkeys(names, True)
    cut_until = dict.fromkeys(names, 0.0)  # partitioned from the API server (alive, but every request fails)
    next_try = {n: rng.uniform(0, 1) for n in names}
    store = Store(None)
    rv = 1
    now = 0.0
    leaders_seen: list[str] = []
    transitions = 0
    while now < 120.0:
        n = min(names, key=lambda x: next_try[x])
        now = next_try[n]
        # the invariant, at every step: at most one candidate counts itself leader
        current = [x for x in names if alive[x] and election.leading(states[x], timing, now)]
        assert len(current) <= 1, (now, current, states)
        if current and (not leaders_seen or leaders_seen[-1] != current[0]):
            leaders_seen.append(current[0])
        if not alive[n]:
            if rng.random() < 0.3:  # a crashed replica comes back (same identity: a container restart)
                alive[n] = True
                states[n] = State()
            next_try[n] = now + rng.uniform(1, 5)
            continue
        if rng.random() < 0.02:  # crash: it stops renewing, without releasing
            alive[n] = False
            next_try[n] = now + rng.uniform(1, 5)
            continue
        if rng.random() < 0.03:
            cut_until[n] = now + rng.uniform(1, 10)
        if now < cut_until[n]:  # the request never reaches the server; the replica keeps running
            states[n] = election.write_failed(states[n], conflict=False)
            next_try[n] = now + timing.retry_period * rng.uniform(1.0, election.JITTER)
            continue
        started = now
        lease = store.read()
        states[n], step = election.decide(n, timing, states[n], lease, now, f"w{now:.3f}")
        # the request may take a while; the write lands later (or the reply is lost)
        delay = rng.choice([0.0, 0.0, 0.0, 0.05, 0.3])
        if isinstance(step, Create | Update):
            rv += 1
            ok = store.create(step, rv) if isinstance(step, Create) else store.update(step, rv)
            if ok and isinstance(step, Update) and lease is not None and lease.record.holder != n:
                transitions += 1
            if ok and rng.random() > 0.05:
                states[n] = election.written(states[n], step.record, started)
            else:
                states[n] = election.write_failed(states[n], conflict=not ok)
        elif isinstance(step, Lost):
            assert not election.leading(states[n], timing, now)
        next_try[n] = now + delay + timing.retry_period * rng.uniform(1.0, election.JITTER)
    assert len(leaders_seen) > 1, "the simulation never moved the Lease"
    final = store.read()
    assert final is not None and final.record.transitions == transitions
