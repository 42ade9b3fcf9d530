"""The operator's steps: one frozen dataclass per kind of action, ``Action`` their union.

The planner returns at most one of them per pass; the reconciler performs it (``Reconciler.act``) and the unit tier's
simulated world plays it (``tests/operator/unit/sim.py``), both with a ``match`` over these classes that ends in
``assert_never``, so a step added here and not handled there fails type checking (mypy, ``make lint``).

Every step carries what its Event and log line need: ``target`` (the object it acts on, by name), ``reason`` and
``message`` (the Event's), ``event_type`` (``Normal``, or ``Warning`` for a refused request) and ``subject`` (another
object the step is about, which gets the Event too: the OzoneSCMBackup of a backup step). Its ``kind`` is the class
name: the ``_actions_total{kind}`` label, the log line and the ``<ActionKind>:<target>`` failpoint
(``OZONE_SCM_OPERATOR_FAILPOINT``). The first line of each class's docstring describes the step (docs/kubernetes.md,
"The operator's steps", is generated from them: ``make operator-docs``).
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, ClassVar, TypeAlias, get_args

from ozone_scm_operator.builders import Body
from ozone_scm_operator.model import RingObs

REASON_CESSATION_OF_OPERATION = 5  # RFC 5280 CRLReason of a member that left the ring


@dataclasses.dataclass(frozen=True, kw_only=True)
class Step:
    """What every step carries for its Event and log line."""

    target: str  # the object acted on, by name
    reason: str  # Event reason
    message: str  # Event message
    subject: Body | None = None  # another object the action is about (apiVersion, kind, name, uid, namespace)
    event_type: str = "Normal"  # the action's Event: Normal, or Warning for a refused request
    kind: ClassVar[str] = "Step"  # the class name (set below): metrics label, log line, failpoint

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.kind = cls.__name__


# ---- owned objects: Services, ConfigMap, PodDisruptionBudget, the audit CronJob ----


@dataclasses.dataclass(frozen=True, kw_only=True)
class Apply(Step):
    """Server-side apply of ``body``: a Service, the ConfigMap, the PodDisruptionBudget or the audit CronJob."""

    body: Body


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeleteObject(Step):
    """Delete an owned object no longer wanted (PodDisruptionBudget, the audit CronJob), ``target`` of ``object_kind``."""

    object_kind: str


# ---- members: Pods and volumes ----


@dataclasses.dataclass(frozen=True)
class QuorumGuard:
    """What must still hold right before a step that stops a member or takes it out of the ring, checked again by
    the effect on a fresh read of the leader's view (the plan's check may be a pass old): the leader the plan read
    still leads, and at least ``need`` of ``voters`` -- the members the plan counted live, caught up and ready --
    are still voters within ``max_lag`` that answered the leader *after* the re-check began. A member frozen,
    crashed or cut off between the plan's check and the step has not, and the step is held."""

    stopping: str  # the member the step stops or removes (for the message)
    leader: str  # the leader's member name, whose view is read again
    leader_scm_id: str
    voters: tuple[tuple[str, str], ...]  # (member, scmId) counted by the plan
    need: int
    max_lag: int
    live_bound: float | None  # seconds (ring.live_bound): how long the re-check may wait for every answer

    def why_not(self, ring: RingObs | None, answered_within: float) -> str | None:
        """Why the step must be held on this fresh view (None: it may go on). ``answered_within``: seconds since
        the re-check began; a counted voter must have answered the leader since then (ignored when the leader
        publishes no contact times)."""
        if ring is None:
            return f"the leader {self.leader} did not answer a fresh read of the ring"
        if ring.leader_scm_id != self.leader_scm_id:
            return f"{self.leader} no longer leads the ring"
        within = answered_within if ring.live_bound is not None else None
        good: list[str] = []
        bad: list[str] = []
        for name, scm_id in self.voters:
            peer = ring.peer(scm_id)
            if peer is None or peer.role not in ("LEADER", "FOLLOWER"):
                bad.append(f"{name} is no longer a voter")
            elif not ring.answered_within(peer, within):
                silent = "not since its term began" if peer.last_contact is None else f"{peer.last_contact:.3g}s ago"
                bad.append(f"{name} has not answered the leader since the check (last answer {silent})")
            elif peer.scm_id != ring.leader_scm_id and (peer.lag is None or peer.lag > self.max_lag):
                bad.append(f"{name} fell behind ({peer.lag} entries, more than {self.max_lag})")
            else:
                good.append(name)
        if len(good) >= self.need:
            return None
        return (f"stopping {self.stopping} now would leave {len(good)} live, caught-up voter"
                f"{'s' if len(good) != 1 else ''} of the {self.need} needed: {'; '.join(bad)}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CreatePVC(Step):
    """Create a PersistentVolumeClaim: a member's volume, the backup volume or the audit report volume (``body``)."""

    body: Body


@dataclasses.dataclass(frozen=True, kw_only=True)
class CreatePod(Step):
    """Create a member's Pod (``body``: its init container runs scm --init, --bootstrap, --recover or --restore)."""

    body: Body


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeletePod(Step):
    """Delete a member's Pod: a roll's restart (its ``guard`` checked again on a fresh read of the leader right
    before), a member leaving or lost, hibernation."""

    guard: QuorumGuard | None = None  # a roll's restart: re-checked on a fresh read of the leader right before


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeletePVC(Step):
    """Delete the volume of a member that left the ring."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RetainPVC(Step):
    """Keep a replaced or lost member's volume for inspection: drop the owner reference, label it retained."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReleasePVC(Step):
    """``storage.reclaimPolicy: Retain``: drop the cluster's owner reference from a member's volume."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class LabelPVC(Step):
    """Put the cluster ID (``cluster_id``) on a member's volume, so a later resource can adopt it."""

    cluster_id: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExpandPVC(Step):
    """Raise a member volume's storage request to ``size``."""

    size: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Adopt(Step):
    """Add the cluster's controller owner reference to an object nothing owns (``object_kind``: Pod, PVC, Secret)."""

    object_kind: str


# ---- the ring: SCM calls ----


@dataclasses.dataclass(frozen=True, kw_only=True)
class TransferLeadership(Step):
    """Ask the leader (``target``) to hand leadership to member ``to`` (scmId ``to_scm_id``)."""

    to_scm_id: str | None
    to: str
    from_scm_id: str | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Decommission(Step):
    """RemoveSCM on the leader: take ``scm_id`` out of the ring (a voter's ``guard`` checked again right before)."""

    scm_id: str
    guard: QuorumGuard | None = None  # re-checked on a fresh read of the leader right before (a voter leaving)


# ---- certificates and Secrets ----


@dataclasses.dataclass(frozen=True, kw_only=True)
class CreateEnrollmentSecret(Step):
    """Create the enrolment Secret (with ``scm``: also the proof secret of CA mode scm)."""

    scm: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class CreateRootCA(Step):
    """CA mode operator: create the root CA (valid for ``duration``) in its Secret; a secure restore: copy the root
    CA of Secret ``copy_from`` instead, whose certificate has SHA-256 ``fingerprint`` (the backup's root)."""

    duration: datetime.timedelta
    copy_from: str = ""
    fingerprint: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class IssueMemberCertificate(Step):
    """CA mode operator: issue ``member``'s sub-CA certificate (valid for ``duration``) into its Secret."""

    member: str
    duration: datetime.timedelta


@dataclasses.dataclass(frozen=True, kw_only=True)
class IssueClientCertificate(Step):
    """CA mode operator: issue the operator's client certificate (valid for ``duration``) into its Secret."""

    duration: datetime.timedelta


@dataclasses.dataclass(frozen=True, kw_only=True)
class CreateClientKey(Step):
    """CA mode scm: create the operator's key pair in its client Secret (key only)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class CreateAdminCSR(Step):
    """CA mode scm: create the operator's CSR from that key, in the Secret the members mount."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class FetchClientCertificate(Step):
    """CA mode scm: fetch the certificate the primordial ``member`` signed at --init into the client Secret."""

    member: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class RenewClientCertificate(Step):
    """CA mode scm: RenewCertificate with a new key, presented with the current certificate."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RevokeCertificate(Step):
    """SCM's RevokeCertificates for ``serial`` (decimal) with ``revocation_reason``, then mark the Secret revoked."""

    serial: str
    revocation_reason: int = REASON_CESSATION_OF_OPERATION


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeleteSecret(Step):
    """Delete a Secret: a revoked member certificate, a lost member's, an admin CSR for another key."""


# ---- backups (backups.py): ``subject`` is the OzoneSCMBackup the step is about ----


@dataclasses.dataclass(frozen=True, kw_only=True)
class UpdateBackup(Step):
    """Write ``status`` into an OzoneSCMBackup's status and, when not None, set its ``finalizers``."""

    status: Body
    finalizers: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class CreateJob(Step):
    """Create a backup or clean-up Job (``body``)."""

    body: Body


@dataclasses.dataclass(frozen=True, kw_only=True)
class CreateBackup(Step):
    """Create a scheduled OzoneSCMBackup (``body``)."""

    body: Body


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeleteBackup(Step):
    """Delete an OzoneSCMBackup beyond retention (its finalizer has its data deleted first)."""


# ---- the resource's annotations ----


@dataclasses.dataclass(frozen=True, kw_only=True)
class RemoveAnnotation(Step):
    """Remove annotation ``key`` from the OzoneSCMCluster once it is done with (``recover-from``)."""

    key: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClearAnnotation(Step):
    """Remove a handled request (annotation ``key``: ``switchover-to``) from the OzoneSCMCluster."""

    key: str


Action: TypeAlias = (
    Apply
    | DeleteObject
    | CreatePVC
    | CreatePod
    | DeletePod
    | DeletePVC
    | RetainPVC
    | ReleasePVC
    | LabelPVC
    | ExpandPVC
    | Adopt
    | TransferLeadership
    | Decommission
    | CreateEnrollmentSecret
    | CreateRootCA
    | IssueMemberCertificate
    | IssueClientCertificate
    | CreateClientKey
    | CreateAdminCSR
    | FetchClientCertificate
    | RenewClientCertificate
    | RevokeCertificate
    | DeleteSecret
    | UpdateBackup
    | CreateJob
    | CreateBackup
    | DeleteBackup
    | RemoveAnnotation
    | ClearAnnotation
)
"""One step of the operator: what ``planner.plan`` returns and ``Reconciler.act`` performs."""

ACTIONS: tuple[type[Step], ...] = get_args(Action)  # every kind, in the order above (docs, tests)
