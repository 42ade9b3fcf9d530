"""The planner: observed state + spec + recorded status -> the next single action, and the status to record first.

Called by the reconciler once per pass. Pure: no I/O, no clock (``Observed.now``), no randomness. It never acts;
it returns a :class:`Plan`: the status to write **before** acting (the intent: a member recorded before its Pod
exists, an operation and its step recorded before the step runs) and at most one :class:`Action`. The reconciler
writes the status, and only if that succeeded, performs the action; then it plans again from fresh observations.
Because every step is idempotent and judged against what is observed (is the member still in the ring? is its
Pod still there?), an operator restarted mid-step resumes the step instead of repeating or skipping it.

Order of concerns in one pass (the first that wants to act wins):

1. refuse to act: an invalid cluster name; members reporting different cluster IDs (split brain:
   ``ConsistentClusterID=False``); ``spec.paused``; a replica count that was never valid;
2. bootstrap: record the primordial member (``<name>-<nextMemberIndex>``) and the ``Bootstrap`` operation; for a
   new ring (not restored, not migrated) also the other members, whose Pods start beside the primordial's with
   ``scm --bootstrap`` and which AddMember operations then complete, one at a time;
3. certificates (CA mode ``operator``): root CA, the operator's client certificate, member certificates missing,
   signed by another root, or due for renewal;
4. owned objects whose content differs from what the builders produce: ConfigMap (the member list, so running
   members learn of a joiner before its Pod starts), headless and client Services, PodDisruptionBudget;
5. level repairs: a recorded member's missing volume (while it has not joined yet) or missing Pod;
6. the operation in progress (``status.currentOperation``): Bootstrap, AddMember, RemoveMember, ReplaceMember,
   RollMember, Switchover, each a small state machine over observed facts;
7. what the user asked through annotations (``directives``): a switchover to a named member (refused unless it is
   a caught-up voter); hibernation (``on``: once no operation is in progress, delete the member Pods, followers
   first and the leader last, keep every volume and start nothing; ``off``: the repairs above create the Pods
   again from those volumes); restart requests are folded into the members' Pod revisions, so they are rolls;
8. a new operation, one at a time: replace a member whose volume is gone or that stayed out of the quorum longer
   than ``membership.replaceAfter``; roll a member whose Pod revision is stale (unready ones first, followers,
   the leader last after a leadership transfer, only while a caught-up majority remains); add a member; remove a
   member.

The package, one module per concern (each pure: no I/O, no clock, no randomness):

- ``actions``: the steps, one frozen dataclass each (``Action`` is their union); what the reconciler performs;
- ``passes``: ``_Pass`` (one pass's cluster, spec, status being written, observations, notes) and the helpers every
  concern shares (health, caught up, live majority, Pod Security admissibility), the status refreshed from
  observations (``_refresh_members``, ``_cluster_ids``);
- ``security``: concern 3 (``_security``, ``_scm_ca_client``);
- ``children``: concerns 4 and 5 (``_children``, ``_ownership``, ``_volumes``, ``_repairs``), adopting a ring or
  retained volumes found in place (``_found_existing``), and what this resource does not control yet (``_unowned``:
  not Ready until nothing is left);
- ``restore``: creating a ring from a backup (``_restore_source``; a secure ring's root CA, ``_restored_root_ca``),
  shared by ``security`` and ``children``'s repairs;
- ``operations``: concerns 6 and 8 (``_continue``, ``_new_operation``); ``recovery``: ``RecoverQuorum``
  (``_recovery_request``, ``_continue_recover``); ``switchover``: concern 7 (``_hibernation``, ``_start_switchover``);
- ``backups_audit``: the scheduled audit (``_audit``) and backups (``_backups``), after the members' own work;
- this module: ``plan`` (the entry point), ``_decide`` (the order above), ``Plan``, ``Settings``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ozone_scm_operator import builders, naming
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.directives import Directives
from ozone_scm_operator.model import (
    CREATING,
    JOINED,
    JOINING,
    OP_BOOTSTRAP,
    ClusterStatus,
    Observed,
    Operation,
)
from ozone_scm_operator.planner import actions
from ozone_scm_operator.planner.actions import *  # noqa: F403  (every step, as planner.<Kind>)
from ozone_scm_operator.planner.actions import Action
from ozone_scm_operator.planner.backups_audit import _audit, _backups
from ozone_scm_operator.planner.children import (
    _children,
    _found_existing,
    _ownership,
    _repairs,
    _unowned,
    _volumes,
)
from ozone_scm_operator.planner.operations import _continue, _new_operation
from ozone_scm_operator.planner.passes import _cluster_ids, _Pass, _refresh_members, majority
from ozone_scm_operator.planner.recovery import _recovery_request
from ozone_scm_operator.planner.security import _security
from ozone_scm_operator.planner.switchover import (
    _clear_switchover,
    _hibernation,
    _hibernation_wanted,
    _start_switchover,
)
from ozone_scm_operator.spec import (
    ALLOWED_REPLICAS,
    ClusterSpec,
    ImmutableSpec,
    SpecProblem,
    effective_spec,
    unsupported,
)
from ozone_scm_operator.status import Event, Facts, derive_conditions

# the public surface; every step class of ``actions`` is reachable as ``planner.<Kind>`` too (the star import)
__all__ = ["Action", "Plan", "Settings", "actions", "majority", "plan"]

RETRY_SOON = 1.0  # seconds until the next pass while an operation waits for something to happen


@dataclasses.dataclass(frozen=True)
class Plan:
    status: ClusterStatus  # write this first
    action: Action | None  # then do this (None: nothing to do now)
    events: tuple[Event, ...] = ()  # Events besides the action's own (condition changes)
    requeue_after: float | None = None  # seconds until the next pass when nothing else wakes it (None: default)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Operator-wide behaviour the planner needs (from the command line)."""

    poll_interval: float = 5.0


def plan(
    ref: ClusterRef,
    spec: ClusterSpec,
    problems: Sequence[SpecProblem],
    generation: int | None,
    status: ClusterStatus,
    obs: Observed,
    settings: Settings = Settings(),
    applied_spec: Mapping[str, Any] | None = None,
    directives: Directives = Directives(),
) -> Plan:
    """The status to write and the next action (see the module docstring for the order of concerns).
    ``applied_spec``: the valid spec ``spec`` was read as (``spec.read_spec``), recorded so that a later invalid
    value is replaced by it, never by a default. ``directives``: what the resource's annotations ask for."""
    recorded = ImmutableSpec.from_status(status.immutable_spec)
    eff, all_problems = effective_spec(spec, problems, recorded, status.replicas)
    p = _Pass(ref=ref, spec=eff, status=status, obs=obs, problems=all_problems,
              revision=builders.pod_revision(eff, directives.restarted_at), directives=directives)
    for problem in directives.problems:
        p.note("InvalidAnnotation", problem)
    p.hibernate = _hibernation_wanted(status, directives)
    p.set_status(observed_generation=generation, revision=p.revision)
    if recorded is not None and eff.storage.size != recorded.storage_size:
        p.set_status(immutable_spec=ImmutableSpec.of(eff).to_status())  # grown: a later shrink is measured from here
    if applied_spec is not None:
        p.set_status(applied_spec=applied_spec)
    if obs.audit is not None:
        p.set_status(audit=obs.audit)  # kept after the audit is disabled: the last run stays on record
    _refresh_members(p)
    action = _decide(p)
    op_member = p.op.member if p.op is not None else None
    for m in p.status.members:
        pod = p.obs.pods.get(m.name)
        foreign = pod.foreign_volume() if pod is not None else None
        if foreign:
            p.note(
                "ForeignVolume",
                f"member {m.name} cannot start: {foreign}. Its volume {naming.pvc_name(m.name)} is kept as it is; "
                "delete that PersistentVolumeClaim (the member is then replaced) or restore this cluster's data",
            )
    if p.status.cluster_id is not None and not p.hibernate:
        unready = [m for m in p.members(JOINED) if not p.healthy(m) and m.name != op_member]
        if unready:
            p.note(
                "MembersNotReady",
                "not ready or not caught up: " + "; ".join(f"{m.name} ({p.pod_trouble(m.name)})" for m in unready),
            )
    facts = Facts(
        spec=p.spec,
        problems=tuple(p.problems),
        notes=tuple(p.notes),
        cluster_ids=_cluster_ids(p),
        healthy=frozenset(m.name for m in p.status.members if p.healthy(m)),
        has_leader=p.obs.ring is not None,
        now=p.now,
        generation=generation,
        adopted=p.adopted,
        outdated=tuple(
            m.name for m in p.members(JOINED)
            if (pod := p.obs.pods.get(m.name)) is not None and pod.revision != p.member_revision(m.name)
        ),
        hibernate=p.hibernate,
        pods_left=tuple(sorted(m.name for m in p.status.members if m.name in p.obs.pods)),
        unowned=tuple(_unowned(p)),
    )
    new_status, events = derive_conditions(status, p.status, facts)
    if action is not None:
        requeue = 0.0
    elif new_status.current_operation is not None or p.status.cluster_id is None:
        requeue = RETRY_SOON
    else:
        requeue = settings.poll_interval
    return Plan(status=new_status, action=action, events=tuple(events), requeue_after=requeue)


def _decide(p: _Pass) -> Action | None:
    bad_name = naming.check_cluster_name(p.ref.name)
    if bad_name is None and p.spec.security.enabled:
        # the operator's client certificate (CN=ozone-scm-operator) may not bear a name of the ring (its client Service)
        bad_name = naming.check_client_certificate_name(p.ref.name)
        # every member's sub-CA certificate names its DNS name: refuse before any member exists, not at its Secret
        newest = f"{p.ref.name}-{p.status.next_member_index}"
        for member in dict.fromkeys([*(m.name for m in p.members()), newest]):
            bad_name = bad_name or naming.check_certificate_name(member, p.ref.name, p.ref.namespace,
                                                                 p.ref.cluster_domain)
    if bad_name:
        p.note("InvalidName", bad_name)
        return None
    ids = _cluster_ids(p)
    if len(ids) > 1:
        return None  # split brain: ConsistentClusterID=False, act on nothing
    if p.spec.paused:
        return _audit(p, only_existing=True)  # only to suspend the audit; nothing else is touched while paused
    if p.spec.replicas not in ALLOWED_REPLICAS and p.status.replicas is None:
        return None  # never valid: start nothing
    if unsupported(p.spec) is not None:
        return None  # reported as InvalidSpec; nothing is created
    if p.status.immutable_spec is None:
        p.set_status(immutable_spec=ImmutableSpec.of(p.spec).to_status())
    if p.spec.replicas in ALLOWED_REPLICAS:
        p.set_status(replicas=p.spec.replicas)
    if not p.status.members and _found_existing(p):
        return None  # adopted (or waiting to): never a new ring over existing volumes
    if not p.status.members:
        m = p.allocate_member(CREATING)
        p.set_status(primordial_member=m.name)
        message = f"{m.name} is the primordial SCM (scm --init)"
        if not (p.spec.bootstrap.from_backup or p.spec.bootstrap.from_ozone):
            # A new ring: the other members are recorded now and their Pods start beside the primordial's, each
            # running scm --bootstrap (which retries until the primordial answers), as Ozone's own recipe does.
            # Each is then completed by an AddMember of its own (one operation at a time). A ring restored or
            # migrated grows one member at a time after its primordial restarted with --bootstrap.
            joiners = [p.allocate_member(JOINING) for _ in range(p.spec.replicas - 1)]
            if joiners:
                message += "; " + ", ".join(j.name for j in joiners) + " bootstrap beside it (scm --bootstrap)"
        p.set_op(Operation(OP_BOOTSTRAP, m.name, started_at=p.now, reason="Create", message=message))
        return None
    _recovery_request(p)
    for concern in (_ownership, _volumes, _security, _children, _audit):
        action = concern(p)
        if action is not None:
            return action
    if p.hibernate and p.op is None:
        if p.directives.switchover_to is not None:
            return _clear_switchover(p, "SwitchoverRefused", f"switchover to {p.directives.switchover_to} refused: "
                                     f"{p.ref.name} is hibernated (no SCM runs)", warning=True)
        return _hibernation(p)
    for concern in (_repairs, _continue, _backups):
        action = concern(p)
        if action is not None:
            return action
    if p.op is not None:
        if p.hibernate:
            p.note("Hibernation", f"hibernation waits for the {p.op.type} of {p.op.member} to finish")
        return None
    if p.directives.switchover_to is not None:
        return _start_switchover(p, p.directives.switchover_to)
    if any(r in ("RootCAMissing", "RootCAChanged") for r, _ in p.notes):
        return None  # no membership change without a trustworthy root CA
    return _new_operation(p)
