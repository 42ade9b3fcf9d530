"""Conditions, phase and Events derived from one planned pass.

Called by the planner at the end of every pass. Pure. Conditions follow ``metav1.Condition`` (type, status,
reason, message, lastTransitionTime, observedGeneration): ``Ready``, ``Initialized``, ``Progressing``, ``Degraded``
and ``ConsistentClusterID`` (CloudNativePG's ``ConsistentSystemID``, for the SCM cluster ID); ``Hibernated`` once
hibernation was asked for (True while it is on, False after ``off``). A condition keeps its
``lastTransitionTime`` while its status is unchanged. Events are emitted on transitions only (a Degraded reason or
message that changes, a cluster that becomes Ready, a split brain detected), so a stuck cluster does not flood the
namespace with Events; messages therefore carry no counters or lags that change from pass to pass.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence

from ozone_scm_operator.model import (
    JOINED,
    OP_ADD,
    OP_BOOTSTRAP,
    OP_RECOVER,
    OP_REMOVE,
    OP_REPLACE,
    OP_ROLL,
    OP_SWITCHOVER,
    ClusterStatus,
    Condition,
)
from ozone_scm_operator.spec import ClusterSpec, SpecProblem

READY = "Ready"
INITIALIZED = "Initialized"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
CONSISTENT_CLUSTER_ID = "ConsistentClusterID"
HIBERNATED = "Hibernated"

# Degraded reasons, most important first
_PRIORITY = (
    "ClusterIDMismatch",
    "InvalidName",
    "InvalidSpec",
    "RecoveryRefused",
    "RestoreSource",
    "RootCAMissing",
    "RootCAChanged",
    "ForeignVolume",
    "InvalidAnnotation",
    "PodSecurity",
    "VolumeExpansion",
    "BackupDataNotDeleted",
    "OperationStuck",
    "NoLeader",
    "WaitingForQuorum",
    "MembersNotReady",
    "WaitingForMembers",
    "UnknownOperation",
    "Hibernation",
)
# Reasons that alone do not make the cluster Degraded (it is working towards the goal)
_BENIGN = {"WaitingForMembers", "Hibernation"}

PHASE_BY_OP = {
    OP_BOOTSTRAP: "Initializing",
    OP_ADD: "Scaling",
    OP_REMOVE: "Scaling",
    OP_REPLACE: "Replacing",
    OP_ROLL: "Upgrading",
    OP_RECOVER: "Recovering",
    OP_SWITCHOVER: "SwitchingOver",
}


@dataclasses.dataclass(frozen=True)
class Event:
    type: str  # Normal or Warning
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Facts:
    spec: ClusterSpec
    problems: tuple[SpecProblem, ...]
    notes: tuple[tuple[str, str], ...]  # (reason, message) from the planner
    cluster_ids: Mapping[str, Sequence[str]]  # cluster ID -> members reporting it ("status.clusterID" included)
    healthy: frozenset[str]
    has_leader: bool
    now: datetime.datetime
    generation: int | None
    adopted: str | None = None  # this pass adopted an existing ring (what it found), instead of creating one
    outdated: tuple[str, ...] = ()  # joined members whose Pod runs another revision than the spec's (a roll is due)
    hibernate: bool = False  # hibernation is on (ozone-scm.io/hibernation)
    pods_left: tuple[str, ...] = ()  # members whose Pod still exists
    # objects this resource should control that do not carry its controller owner reference ("<kind> <name>"):
    # left by a resource deleted with --cascade=orphan, until they are adopted
    unowned: tuple[str, ...] = ()


def _cond(type_: str, ok: bool | None, reason: str, message: str) -> Condition:
    status = "Unknown" if ok is None else ("True" if ok else "False")
    return Condition(type=type_, status=status, reason=reason, message=message)


def _cluster_id_condition(ids: Mapping[str, Sequence[str]]) -> Condition:
    reported = {cid: [m for m in who if m != "status.clusterID"] for cid, who in ids.items()}
    if len(ids) > 1:
        parts = "; ".join(f"{cid}: {', '.join(who) or 'recorded in status'}" for cid, who in sorted(reported.items()))
        return _cond(
            CONSISTENT_CLUSTER_ID, False, "Mismatch",
            f"members report different cluster IDs ({parts}); the operator stops acting on this cluster until an "
            "administrator removes the member that does not belong (see docs/kubernetes.md, split brain)",
        )
    if any(reported.values()):
        cid = next(iter(ids))
        return _cond(CONSISTENT_CLUSTER_ID, True, "Unique", f"every member that answered reports {cid}")
    return _cond(CONSISTENT_CLUSTER_ID, None, "NotFound", "no member has reported a cluster ID yet")


def derive_conditions(old: ClusterStatus, new: ClusterStatus, facts: Facts) -> tuple[ClusterStatus, list[Event]]:
    """``new`` with conditions, phase and ``membersReady`` set, and the Events for what changed since ``old``."""
    spec = facts.spec
    op = new.current_operation
    joined = [m for m in new.members if m.state == JOINED]
    ready_members = [m for m in joined if m.name in facts.healthy]
    consistent = _cluster_id_condition(facts.cluster_ids)

    notes: list[tuple[str, str]] = list(facts.notes)
    if consistent.status == "False":
        notes.insert(0, ("ClusterIDMismatch", consistent.message))
    if facts.problems:
        notes.append(("InvalidSpec", "; ".join(str(pr) for pr in facts.problems)))
    if (new.cluster_id is not None and not facts.has_leader and not facts.hibernate
            and not any(r == "NoLeader" for r, _ in notes)):
        notes.append(("NoLeader", "no SCM reports a leader"))
    for _reason, message in notes:
        if "initialized with cluster id" in message.lower():
            notes.append(("ForeignVolume", f"a member's volume holds another cluster's data: {message}"))
            break
    notes.sort(key=lambda n: _PRIORITY.index(n[0]) if n[0] in _PRIORITY else len(_PRIORITY))
    serious = [n for n in notes if n[0] not in _BENIGN]
    seen: set[str] = set()
    messages = []
    for _reason, message in serious:
        if message not in seen:
            seen.add(message)
            messages.append(message)
    degraded = (
        _cond(DEGRADED, True, serious[0][0], "; ".join(messages))
        if serious
        else _cond(DEGRADED, False, "Healthy", "nothing needs attention")
    )

    prev_init = old.condition(INITIALIZED)
    if facts.adopted and new.cluster_id:
        initialized = _cond(INITIALIZED, True, "ClusterAdopted", facts.adopted)
    elif new.cluster_id and prev_init is not None and prev_init.reason == "ClusterAdopted" and prev_init.status == "True":
        initialized = _cond(INITIALIZED, True, "ClusterAdopted", prev_init.message)
    elif new.cluster_id:
        initialized = _cond(INITIALIZED, True, "ClusterCreated", f"the primordial SCM created cluster {new.cluster_id}")
    else:
        initialized = _cond(INITIALIZED, False, "Bootstrapping" if new.members else "Pending", "the ring has not formed yet")
    volumes = ", ".join(f"{m.name}-data" for m in new.members)
    hibernated: Condition | None = None
    if facts.hibernate:
        hibernated = (
            _cond(HIBERNATED, True, "Hibernated", f"no member Pod runs; the volumes are kept ({volumes})")
            if not facts.pods_left
            else _cond(HIBERNATED, True, "Hibernating",
                       f"removing the member Pods ({', '.join(facts.pods_left)} left); the volumes are kept")
        )
    elif old.condition(HIBERNATED) is not None:
        hibernated = _cond(HIBERNATED, False, "Resumed", "hibernation is off: the members run from their volumes")
    if spec.paused:
        progressing = _cond(PROGRESSING, False, "Paused", "spec.paused is true: the operator changes nothing")
    elif facts.hibernate and op is None:
        progressing = _cond(PROGRESSING, bool(facts.pods_left), "Hibernating" if facts.pods_left else "Hibernated",
                            hibernated.message if hibernated is not None else "")
    elif op is not None:
        step = f" (step {op.step})" if op.step else ""
        progressing = _cond(PROGRESSING, True, op.type, f"{op.type} {op.member}{step}: {op.message or ''}".rstrip(": "))
    else:
        progressing = _cond(PROGRESSING, False, "Stable", "no operation in progress")

    want = new.replicas or spec.replicas
    leader = new.leader
    if consistent.status == "False":
        ready = _cond(READY, False, "ClusterIDMismatch", "members report different cluster IDs")
    elif new.cluster_id is None:
        ready = _cond(READY, False, "NotInitialized", "the ring has not formed yet")
    elif facts.hibernate and op is None:
        ready = _cond(READY, False, "Hibernated", "hibernation is on (ozone-scm.io/hibernation): no member Pod runs")
    elif not facts.has_leader:
        ready = _cond(READY, False, "NoLeader", "no SCM reports a leader")
    elif op is not None:
        ready = _cond(READY, False, op.type, progressing.message)
    elif len(ready_members) < want or len(joined) != want:
        ready = _cond(READY, False, "MembersNotReady", f"{len(ready_members)}/{want} members ready and caught up")
    elif facts.outdated:
        # between two steps of a roll (e.g. one held by the live-majority check): not Ready until every member runs
        # the spec's revision
        ready = _cond(READY, False, "MembersOutdated",
                      f"{', '.join(facts.outdated)} still run{'s' if len(facts.outdated) == 1 else ''} an older "
                      f"revision than {new.revision}; the roll goes on")
    elif facts.unowned:
        # adopted in place (after kubectl delete --cascade=orphan): a delete now would leave these behind
        ready = _cond(READY, False, "Adopting",
                      f"not yet owned by this resource: {', '.join(facts.unowned)}; the operator adopts them")
    else:
        ready = _cond(
            READY, True, "AllMembersReady", f"{len(ready_members)}/{want} members ready and caught up, leader {leader}"
        )

    if consistent.status == "False":
        phase = "Failed"
    elif spec.paused:
        phase = "Paused"
    elif new.cluster_id is None and not new.members:
        phase = "Pending"
    elif facts.hibernate and op is None:
        phase = "Hibernating" if facts.pods_left else "Hibernated"
    elif op is not None:
        phase = PHASE_BY_OP.get(op.type, "Running")
    elif new.cluster_id is None:
        phase = "Initializing"
    elif degraded.status == "True":
        phase = "Degraded"
    elif ready.reason == "Adopting":
        phase = "Adopting"
    else:
        phase = "Running"

    conditions = []
    events: list[Event] = []
    for c in (ready, initialized, progressing, degraded, consistent, *((hibernated,) if hibernated else ())):
        prev = old.condition(c.type)
        if prev is not None and prev.status == c.status:
            c = dataclasses.replace(c, last_transition_time=prev.last_transition_time or facts.now)
        else:
            c = dataclasses.replace(c, last_transition_time=facts.now)
        c = dataclasses.replace(c, observed_generation=facts.generation)
        conditions.append(c)
        changed = prev is None or (prev.status, prev.reason, prev.message) != (c.status, c.reason, c.message)
        if not changed:
            continue
        if c.type == DEGRADED and c.status == "True":
            events.append(Event("Warning", c.reason, c.message))
        elif c.type == DEGRADED and prev is not None and prev.status == "True":
            events.append(Event("Normal", "Recovered", "nothing needs attention any more"))
        elif c.type == READY and c.status == "True" and (prev is None or prev.status != "True"):
            events.append(Event("Normal", "ClusterReady", c.message))
        elif c.type == HIBERNATED and c.reason in ("Hibernated", "Resumed"):
            events.append(Event("Normal", c.reason, c.message))
        elif c.type == INITIALIZED and c.status == "True":
            events.append(Event("Normal", "ClusterAdopted" if c.reason == "ClusterAdopted" else "ClusterInitialized",
                                c.message))
    out = dataclasses.replace(
        new,
        conditions=tuple(conditions),
        phase=phase,
        members_ready=f"{len(ready_members)}/{want}",
    )
    return out, events
