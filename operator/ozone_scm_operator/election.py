"""Leader election on a ``coordination.k8s.io/v1`` Lease: the pure decision core.

Used by ``effects.lease`` (which reads and writes the Lease and keeps the time) so that two or more operator
replicas run with exactly one of them acting. No I/O, no clock: every function takes the caller's monotonic time
(``now``, seconds) and, for what is written into the Lease, the wall-clock time as a string (``wall``).

The semantics are Kubernetes' own (client-go's ``leaderelection``), with the Lease's fields:

* ``holderIdentity`` names the holder; ``leaseDurationSeconds`` how long a candidate waits, from the moment it
  *saw* the Lease last change, before it may take it over; ``renewTime``/``acquireTime`` are written for people
  and tools (``kubectl get lease``) and never compared with this process's clock, so clock skew between machines
  does not matter (only the rate at which monotonic clocks advance, covered by the margin below);
  ``leaseTransitions`` counts changes of holder;
* a candidate **acquires only after expiry**: the Lease is absent (create), released (empty holder), already its
  own (a restart of the same Pod), or unchanged for ``leaseDurationSeconds`` of the candidate's own time;
* every write is a compare-and-swap on ``metadata.resourceVersion``: of two candidates racing for an expired
  Lease, the API server lets one update win and answers the other 409 Conflict;
* the holder **renews** every ``retry_period`` and counts itself leader only until ``renew_deadline`` after the
  start of its last successful renewal (``leading``). It **steps down** the moment that deadline passes without
  a renewal, or the moment it reads another holder in the Lease (``Lost``), whichever comes first.

Why this is safe: the holder's claim ends at ``renewed_at + renew_deadline``; any other candidate saw that write
no earlier than ``renewed_at`` and waits ``lease_duration`` after seeing it, so it acts no earlier than
``renewed_at + lease_duration``. ``lease_duration - renew_deadline`` is the margin for clock-rate differences and
for a holder that notices its loss late; ``Timing.problems`` refuses settings without one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

JITTER = 1.2  # retries wait retry_period * [1, JITTER); the renew deadline must exceed the longest such wait


@dataclasses.dataclass(frozen=True)
class Timing:
    lease_duration: int = 15  # seconds (the Lease stores whole seconds)
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def problems(self) -> list[str]:
        """What is wrong with these settings, one line each, naming the option to change (empty: fine)."""
        out = []
        if self.lease_duration < 1:
            out.append(f"--leader-elect-lease-duration {self.lease_duration}: must be a whole number of seconds >= 1")
        if self.retry_period <= 0:
            out.append(f"--leader-elect-retry-period {self.retry_period}: must be positive")
        if self.renew_deadline >= self.lease_duration:
            out.append(f"--leader-elect-renew-deadline {self.renew_deadline}: must be less than the lease duration "
                       f"({self.lease_duration}s), or a new holder could act while the old one still does")
        if self.retry_period > 0 and self.renew_deadline <= JITTER * self.retry_period:
            out.append(f"--leader-elect-renew-deadline {self.renew_deadline}: must exceed {JITTER} x the retry "
                       f"period ({self.retry_period}s), or one failed renewal loses the lease")
        return out


@dataclasses.dataclass(frozen=True)
class LeaseRecord:
    """The Lease's ``spec`` (empty holder: nobody holds it)."""

    holder: str = ""
    lease_duration: int | None = None
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> LeaseRecord:
        spec = spec or {}
        duration = spec.get("leaseDurationSeconds")
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            lease_duration=int(duration) if isinstance(duration, int) and not isinstance(duration, bool) else None,
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"holderIdentity": self.holder, "leaseTransitions": self.transitions}
        if self.lease_duration is not None:
            spec["leaseDurationSeconds"] = self.lease_duration
        if self.acquire_time is not None:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time is not None:
            spec["renewTime"] = self.renew_time
        return spec


@dataclasses.dataclass(frozen=True)
class Lease:
    """A Lease as read: its record and the resourceVersion every update is conditional on."""

    record: LeaseRecord
    resource_version: str | None

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Lease:
        return cls(LeaseRecord.from_spec(body.get("spec")), (body.get("metadata") or {}).get("resourceVersion"))


@dataclasses.dataclass(frozen=True)
class State:
    """What one candidate remembers: the record it last saw change and when (its own monotonic time), and when it
    started its last successful write as holder (None: it does not hold the Lease)."""

    observed: LeaseRecord | None = None
    observed_at: float | None = None
    renewed_at: float | None = None


# ---- the next step ----


@dataclasses.dataclass(frozen=True)
class Create:
    record: LeaseRecord


@dataclasses.dataclass(frozen=True)
class Update:
    record: LeaseRecord
    resource_version: str | None


@dataclasses.dataclass(frozen=True)
class Wait:
    """Another candidate holds the Lease and it has not expired (``expires_in`` seconds of our time)."""

    holder: str
    expires_in: float


@dataclasses.dataclass(frozen=True)
class Lost:
    """We counted ourselves leader, and the Lease names another holder: step down now."""

    holder: str


Step = Create | Update | Wait | Lost


def leading(state: State, timing: Timing, now: float) -> bool:
    """True while our last successful renewal started less than ``renew_deadline`` ago."""
    return state.renewed_at is not None and now - state.renewed_at < timing.renew_deadline


def observe(state: State, lease: Lease | None, now: float) -> State:
    """Remember the record and when it was first seen as it is (expiry counts from then, on our clock)."""
    if lease is None or lease.record == state.observed:
        return state
    return dataclasses.replace(state, observed=lease.record, observed_at=now)


def decide(identity: str, timing: Timing, state: State, lease: Lease | None, now: float,
           wall: str) -> tuple[State, Step]:
    """One attempt to acquire or renew, given the Lease as just read (None: it does not exist)."""
    state = observe(state, lease, now)
    if lease is None:
        return state, Create(LeaseRecord(identity, timing.lease_duration, wall, wall, 0))
    rec = lease.record
    if rec.holder and rec.holder != identity:
        if state.renewed_at is not None:
            return dataclasses.replace(state, renewed_at=None), Lost(rec.holder)
        assert state.observed_at is not None
        duration = rec.lease_duration if rec.lease_duration is not None else timing.lease_duration
        expires_in = state.observed_at + duration - now
        if expires_in > 0:
            return state, Wait(rec.holder, expires_in)
    if rec.holder == identity:
        new = LeaseRecord(identity, timing.lease_duration, rec.acquire_time or wall, wall, rec.transitions)
    else:
        new = LeaseRecord(identity, timing.lease_duration, wall, wall, rec.transitions + 1)
    return state, Update(new, lease.resource_version)


def written(state: State, record: LeaseRecord, started: float) -> State:
    """Our create/update (begun at ``started``) succeeded: we hold the Lease until ``started + renew_deadline``."""
    return State(observed=record, observed_at=started, renewed_at=started)


def write_failed(state: State, conflict: bool) -> State:
    """A write failed. A conflict means someone else wrote: forget what we saw, so the next read counts afresh."""
    return dataclasses.replace(state, observed=None, observed_at=None) if conflict else state


def step_down(state: State) -> State:
    return dataclasses.replace(state, renewed_at=None)


def release(identity: str, lease: Lease | None, wall: str) -> Update | None:
    """The update that gives the Lease up on a clean shutdown (the standby then takes it at once), or None when it
    is not ours. ``leaseDurationSeconds`` 1, as client-go releases."""
    if lease is None or lease.record.holder != identity:
        return None
    rec = lease.record
    return Update(LeaseRecord("", 1, rec.acquire_time, wall, rec.transitions), lease.resource_version)
