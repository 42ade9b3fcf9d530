"""Values the planner works on: the cluster's recorded status and the state observed in one reconcile pass.

Pure. ``ClusterStatus.from_raw`` / ``to_raw`` convert between the resource's ``status`` (camelCase, as declared in
the CRD's structural schema: every field written here is declared there, or the API server would prune it) and
frozen dataclasses. The ``*Obs`` classes are what the effects layer saw: Pods, PVCs, the SCMs' own answers
(``GetScmInfo``) and the leader's view of the ring (``GetScmRatisRoles``); the effects layer fills them, the planner
only reads them.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

# The first line of an init container's termination message when its volume holds another cluster's data
# (``ozone-scm scm --bootstrap --termination-log``): short and fixed, so it is never cut like a log tail.
FOREIGN_VOLUME_PREFIX = "ForeignVolume:"

# Member states (status.members[].state)
CREATING = "Creating"  # recorded, volume/Pod being created (the primordial member before it leads)
JOINING = "Joining"  # bootstrapped into the ring, being added and caught up
JOINED = "Joined"  # a caught-up voter at least once
LEAVING = "Leaving"  # being decommissioned


def parse_time(v: Any) -> datetime.datetime | None:
    if not v or not isinstance(v, str):
        return None
    try:
        t = datetime.datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=datetime.UTC)


def format_time(t: datetime.datetime | None) -> str | None:
    if t is None:
        return None
    return t.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


# ---------------------------------------------------------------------------------------------------------------
# status
# ---------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MemberStatus:
    name: str
    index: int
    state: str
    scm_id: str | None = None
    role: str | None = None
    ready: bool = False
    lag: int | None = None
    cluster_id: str | None = None
    pod_ip: str | None = None
    revision: str | None = None
    out_of_quorum_since: datetime.datetime | None = None
    certificate_expiry: datetime.datetime | None = None
    certificate_serial: str | None = None

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> MemberStatus:
        return cls(
            name=str(raw["name"]),
            index=int(raw.get("index", 0)),
            state=str(raw.get("state", CREATING)),
            scm_id=raw.get("scmId") or None,
            role=raw.get("role") or None,
            ready=bool(raw.get("ready", False)),
            lag=raw.get("lag"),
            cluster_id=raw.get("clusterID") or None,
            pod_ip=raw.get("podIP") or None,
            revision=raw.get("revision") or None,
            out_of_quorum_since=parse_time(raw.get("outOfQuorumSince")),
            certificate_expiry=parse_time(raw.get("certificateExpiry")),
            certificate_serial=raw.get("certificateSerial") or None,
        )

    def to_raw(self) -> dict[str, Any]:
        return _drop_none(
            {
                "name": self.name,
                "index": self.index,
                "state": self.state,
                "scmId": self.scm_id,
                "role": self.role,
                "ready": self.ready,
                "lag": self.lag,
                "clusterID": self.cluster_id,
                "podIP": self.pod_ip,
                "revision": self.revision,
                "outOfQuorumSince": format_time(self.out_of_quorum_since),
                "certificateExpiry": format_time(self.certificate_expiry),
                "certificateSerial": self.certificate_serial,
            }
        )


# Operation types (status.currentOperation.type)
OP_BOOTSTRAP = "Bootstrap"
OP_ADD = "AddMember"
OP_REMOVE = "RemoveMember"
OP_REPLACE = "ReplaceMember"
OP_ROLL = "RollMember"
OP_RECOVER = "RecoverQuorum"  # a majority lost for good: the named survivor runs scm --recover, the ring regrows
OP_SWITCHOVER = "Switchover"  # leadership moved to a member a user named (ozone-scm.io/switchover-to)


@dataclasses.dataclass(frozen=True)
class Operation:
    type: str
    member: str
    started_at: datetime.datetime
    step: str | None = None
    step_started_at: datetime.datetime | None = None
    replacement: str | None = None
    reason: str | None = None
    message: str | None = None

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any] | None) -> Operation | None:
        if not raw or not raw.get("type"):
            return None
        started = parse_time(raw.get("startedAt")) or datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
        return cls(
            type=str(raw["type"]),
            member=str(raw.get("member", "")),
            started_at=started,
            step=raw.get("step") or None,
            step_started_at=parse_time(raw.get("stepStartedAt")),
            replacement=raw.get("replacement") or None,
            reason=raw.get("reason") or None,
            message=raw.get("message") or None,
        )

    def to_raw(self) -> dict[str, Any]:
        return _drop_none(
            {
                "type": self.type,
                "member": self.member,
                "startedAt": format_time(self.started_at),
                "step": self.step,
                "stepStartedAt": format_time(self.step_started_at),
                "replacement": self.replacement,
                "reason": self.reason,
                "message": self.message,
            }
        )

    def at_step(self, step: str, now: datetime.datetime) -> Operation:
        if step == self.step:
            return self
        return dataclasses.replace(self, step=step, step_started_at=now)


@dataclasses.dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True", "False", "Unknown"
    reason: str
    message: str
    last_transition_time: datetime.datetime | None = None
    observed_generation: int | None = None

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> Condition:
        return cls(
            type=str(raw["type"]),
            status=str(raw.get("status", "Unknown")),
            reason=str(raw.get("reason", "")),
            message=str(raw.get("message", "")),
            last_transition_time=parse_time(raw.get("lastTransitionTime")),
            observed_generation=raw.get("observedGeneration"),
        )

    def to_raw(self) -> dict[str, Any]:
        return _drop_none(
            {
                "type": self.type,
                "status": self.status,
                "reason": self.reason,
                "message": self.message,
                "lastTransitionTime": format_time(self.last_transition_time),
                "observedGeneration": self.observed_generation,
            }
        )


@dataclasses.dataclass(frozen=True)
class SecurityStatus:
    root_ca_secret: str | None = None
    root_ca_expiry: datetime.datetime | None = None
    root_ca_fingerprint: str | None = None
    revoked_serials: tuple[str, ...] = ()

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any] | None) -> SecurityStatus:
        raw = raw or {}
        return cls(
            root_ca_secret=raw.get("rootCASecret") or None,
            root_ca_expiry=parse_time(raw.get("rootCAExpiry")),
            root_ca_fingerprint=raw.get("rootCAFingerprint") or None,
            revoked_serials=tuple(raw.get("revokedSerials") or ()),
        )

    def to_raw(self) -> dict[str, Any]:
        return _drop_none(
            {
                "rootCASecret": self.root_ca_secret,
                "rootCAExpiry": format_time(self.root_ca_expiry),
                "rootCAFingerprint": self.root_ca_fingerprint,
                "revokedSerials": list(self.revoked_serials) if self.revoked_serials else None,
            }
        )


@dataclasses.dataclass(frozen=True)
class ClusterStatus:
    phase: str | None = None
    observed_generation: int | None = None
    conditions: tuple[Condition, ...] = ()
    cluster_id: str | None = None
    primordial_member: str | None = None
    leader: str | None = None
    term: int | None = None
    replicas: int | None = None
    members_ready: str | None = None
    next_member_index: int = 0
    revision: str | None = None
    immutable_spec: Mapping[str, Any] | None = None
    members: tuple[MemberStatus, ...] = ()
    current_operation: Operation | None = None
    security: SecurityStatus = SecurityStatus()
    audit: Mapping[str, Any] | None = None  # the scheduled audit's last runs (see audit_status.py)
    backup: Mapping[str, Any] | None = None  # the backups' summary (see backups.py: backup_status)
    applied_spec: Mapping[str, Any] | None = None  # the valid spec the last pass acted on (spec.read_spec)

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any] | None) -> ClusterStatus:
        raw = raw or {}
        return cls(
            phase=raw.get("phase"),
            observed_generation=raw.get("observedGeneration"),
            conditions=tuple(Condition.from_raw(c) for c in raw.get("conditions") or () if c.get("type")),
            cluster_id=raw.get("clusterID") or None,
            primordial_member=raw.get("primordialMember") or None,
            leader=raw.get("leader") or None,
            term=raw.get("term"),
            replicas=raw.get("replicas"),
            members_ready=raw.get("membersReady"),
            next_member_index=int(raw.get("nextMemberIndex") or 0),
            revision=raw.get("revision") or None,
            immutable_spec=raw.get("immutableSpec") or None,
            members=tuple(MemberStatus.from_raw(m) for m in raw.get("members") or () if m.get("name")),
            current_operation=Operation.from_raw(raw.get("currentOperation")),
            security=SecurityStatus.from_raw(raw.get("security")),
            audit=raw.get("audit") or None,
            backup=raw.get("backup") if isinstance(raw.get("backup"), Mapping) and raw.get("backup") else None,
            applied_spec=raw.get("appliedSpec") if isinstance(raw.get("appliedSpec"), Mapping) else None,
        )

    def to_raw(self) -> dict[str, Any]:
        """The full status. ``currentOperation`` is always present (null when none) so a merge patch clears it."""
        out = _drop_none(
            {
                "phase": self.phase,
                "observedGeneration": self.observed_generation,
                "conditions": [c.to_raw() for c in self.conditions],
                "clusterID": self.cluster_id,
                "primordialMember": self.primordial_member,
                "leader": self.leader,
                "term": self.term,
                "replicas": self.replicas,
                "membersReady": self.members_ready,
                "nextMemberIndex": self.next_member_index,
                "revision": self.revision,
                "immutableSpec": dict(self.immutable_spec) if self.immutable_spec else None,
                "members": [m.to_raw() for m in self.members],
                "security": self.security.to_raw() or None,
                "audit": dict(self.audit) if self.audit else None,
                "backup": dict(self.backup) if self.backup else None,
                "appliedSpec": dict(self.applied_spec) if self.applied_spec is not None else None,
            }
        )
        out["currentOperation"] = self.current_operation.to_raw() if self.current_operation else None
        if self.leader is None:
            out["leader"] = None
        return out

    def member(self, name: str) -> MemberStatus | None:
        return next((m for m in self.members if m.name == name), None)

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def with_member(self, member: MemberStatus) -> ClusterStatus:
        """Replace the member of the same name, or append it."""
        if self.member(member.name) is None:
            return dataclasses.replace(self, members=(*self.members, member))
        return dataclasses.replace(self, members=tuple(member if m.name == member.name else m for m in self.members))

    def without_member(self, name: str) -> ClusterStatus:
        return dataclasses.replace(self, members=tuple(m for m in self.members if m.name != name))


# ---------------------------------------------------------------------------------------------------------------
# observed state
# ---------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ContainerObs:
    name: str
    init: bool
    ready: bool = False
    restart_count: int = 0
    waiting_reason: str | None = None
    waiting_message: str | None = None
    terminated_reason: str | None = None
    exit_code: int | None = None
    terminated_message: str | None = None


@dataclasses.dataclass(frozen=True)
class PodObs:
    name: str
    phase: str = "Pending"
    ready: bool = False
    deleting: bool = False
    revision: str | None = None
    init_mode: str | None = None
    pod_ip: str | None = None
    created_at: datetime.datetime | None = None
    containers: tuple[ContainerObs, ...] = ()
    controller_uid: str | None = None  # the uid of its controlling owner (None: nothing owns it, e.g. orphaned)

    @property
    def running(self) -> bool:
        return self.phase == "Running" and not self.deleting

    def trouble(self) -> str | None:
        """What keeps the Pod from running, in one line (for conditions), or None."""
        for c in self.containers:
            if c.waiting_reason and c.waiting_reason not in ("PodInitializing", "ContainerCreating"):
                detail = f": {c.waiting_message}" if c.waiting_message else ""
                last = ""
                if c.terminated_message or c.exit_code not in (None, 0):
                    last = f" (last exit {c.exit_code}{': ' + c.terminated_message if c.terminated_message else ''})"
                return f"{'init ' if c.init else ''}container {c.name} {c.waiting_reason}{detail}{last}"
            if c.init and c.exit_code not in (None, 0):
                msg = f": {c.terminated_message}" if c.terminated_message else ""
                return f"init container {c.name} failed with exit code {c.exit_code}{msg}"
        if self.phase == "Failed":
            return "Pod failed"
        return None

    def foreign_volume(self) -> str | None:
        """The fixed-format refusal ``scm --bootstrap --termination-log`` leaves as its termination message when the
        volume holds another cluster's data (``ForeignVolume: ...``), or None."""
        for c in self.containers:
            if c.init and c.terminated_message and c.terminated_message.startswith(FOREIGN_VOLUME_PREFIX):
                return c.terminated_message.splitlines()[0][len(FOREIGN_VOLUME_PREFIX):].strip()
        return None


@dataclasses.dataclass(frozen=True)
class PVCObs:
    name: str
    phase: str = "Pending"
    deleting: bool = False
    storage_class_name: str | None = None
    controller_uid: str | None = None
    cluster_id: str | None = None  # its LABEL_CLUSTER_ID label (the cluster ID its data belongs to)
    size: str | None = None  # spec.resources.requests.storage


@dataclasses.dataclass(frozen=True)
class SCMObs:
    """One SCM's own answer (GetScmInfo on its inter-SCM port)."""

    member: str
    cluster_id: str
    scm_id: str
    leader_id: str | None = None
    term: int = 0
    in_safe_mode: bool | None = None  # None: not asked / no answer

    @property
    def is_leader(self) -> bool:
        return bool(self.leader_id) and self.leader_id == self.scm_id


@dataclasses.dataclass(frozen=True)
class PeerObs:
    scm_id: str
    role: str  # LEADER, FOLLOWER, LEARNER, CANDIDATE, UNKNOWN
    lag: int | None = None
    host: str = ""
    last_contact: float | None = None  # seconds since it last answered the leader in its term (None: not since)
    node_id: str = ""  # its ozone.scm.node.id (= member name) as the leader knows it


# A follower counts as live for a disruptive step only if it answered the leader within this many of the ring's
# heartbeat intervals (0.3 s with the default 100 ms tick): one that misses a few heartbeats is already suspect,
# well before an election timeout (1 s) would call it lost.
LIVE_HEARTBEATS = 3


@dataclasses.dataclass(frozen=True)
class RingObs:
    """The leader's view of the ring (GetScmRatisRoles answered by the leader)."""

    leader_scm_id: str
    term: int
    commit_index: int
    peers: tuple[PeerObs, ...]
    election_timeout: float | None = None  # seconds, the leader's own (None: it did not publish one)
    heartbeat_interval: float | None = None  # seconds between the leader's heartbeats (None: not published)

    def peer(self, scm_id: str | None) -> PeerObs | None:
        if not scm_id:
            return None
        return next((p for p in self.peers if p.scm_id == scm_id), None)

    @property
    def voters(self) -> tuple[PeerObs, ...]:
        return tuple(p for p in self.peers if p.role in ("LEADER", "FOLLOWER"))

    @property
    def live_bound(self) -> float | None:
        """How recently a follower must have answered the leader to count as live for a disruptive step:
        ``LIVE_HEARTBEATS`` heartbeat intervals, never more than the election timeout; the election timeout from a
        leader that publishes no heartbeat interval (an older SCM); None when it publishes neither."""
        if self.heartbeat_interval is not None and self.heartbeat_interval > 0:
            bound = LIVE_HEARTBEATS * self.heartbeat_interval
            return bound if self.election_timeout is None else min(bound, self.election_timeout)
        return self.election_timeout

    def answered_within(self, peer: PeerObs, seconds: float | None) -> bool:
        """The leader itself, or a peer that answered the leader within ``seconds`` (None: no contact times are
        published, e.g. an SCM older than the field in the middle of a roll from such an image: lag and Pod
        readiness alone judge, as before)."""
        if peer.scm_id == self.leader_scm_id or seconds is None:
            return True
        return peer.last_contact is not None and peer.last_contact <= seconds

    def live(self, peer: PeerObs) -> bool:
        """Counted live for a disruptive step: it answered the leader within ``live_bound`` (a few heartbeat
        intervals). A crashed, partitioned or frozen SCM stops answering at once; its Pod readiness and lag in
        entries show it only seconds later."""
        return self.answered_within(peer, self.live_bound)

    def answering(self, peer: PeerObs) -> bool:
        """Counted as answering for the member's status (caught up, ready): it answered within one election
        timeout, the bound after which the ring itself would call the leader lost. Looser than ``live``, so that a
        few late heartbeats on a loaded node do not make the status flap."""
        return self.answered_within(peer, self.election_timeout)


@dataclasses.dataclass(frozen=True)
class SecretObs:
    name: str
    content_hash: str | None = None
    certificate_serial: str | None = None
    certificate_not_after: datetime.datetime | None = None
    root_fingerprint: str | None = None
    revoked: bool = False  # SCM recorded the revocation of this Secret's certificate (annotation)
    certificate_not_before: datetime.datetime | None = None
    public_key: str | None = None  # CA mode scm: sha256 of the operator's public key (client key and CSR Secrets)
    role_bound: bool = False  # the certificate carries its role SANs (docs/security.md, "Identities and roles")
    controller_uid: str | None = None


@dataclasses.dataclass(frozen=True)
class BackupObs:
    """One ``OzoneSCMBackup`` of this cluster (``spec.cluster``) as observed: its metadata and the status the
    operator wrote into it."""

    name: str
    uid: str = ""
    cluster: str = ""  # spec.cluster
    created_at: datetime.datetime | None = None
    deleting: bool = False
    finalizers: tuple[str, ...] = ()
    scheduled_at: datetime.datetime | None = None  # created by the schedule for this time (its annotation)
    phase: str | None = None
    message: str | None = None
    started_at: datetime.datetime | None = None
    completed_at: datetime.datetime | None = None
    status: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # status as stored (to compare with)


@dataclasses.dataclass(frozen=True)
class RootCAObs:
    """A Secret offered as the root CA of a secure restore: its name, the SHA-256 fingerprint of the certificate
    in ``ca.crt`` (None: none readable), whether it holds ``ca.key``, and why the pair is unusable (None: usable)."""

    name: str
    fingerprint: str | None = None
    has_key: bool = False
    problem: str | None = None


@dataclasses.dataclass(frozen=True)
class JobObs:
    """A backup or clean-up Job of this cluster: which backup it is for, and how it ended (None: still running)."""

    name: str
    backup: str
    purpose: str  # "backup" (take and verify) or "delete" (remove the backup's data)
    result: str | None = None  # "Succeeded", "Failed", or None while it runs
    finished_at: datetime.datetime | None = None
    message: str | None = None  # the termination message of its last container (a JSON summary on success)


@dataclasses.dataclass(frozen=True)
class Observed:
    """Everything one reconcile pass saw. ``children`` maps (kind, name) to the content hash annotation of
    Services, the ConfigMap and the PDB, the audit's CronJob and report volume and the backup volume (None: exists
    without one); ``child_owners`` maps the same keys to the uid of the object's controller owner (None: owned by
    nothing)."""

    now: datetime.datetime
    pods: Mapping[str, PodObs] = dataclasses.field(default_factory=dict)
    pvcs: Mapping[str, PVCObs] = dataclasses.field(default_factory=dict)
    scms: Mapping[str, SCMObs] = dataclasses.field(default_factory=dict)
    ring: RingObs | None = None
    children: Mapping[tuple[str, str], str | None] = dataclasses.field(default_factory=dict)
    child_owners: Mapping[tuple[str, str], str | None] = dataclasses.field(default_factory=dict)
    secrets: Mapping[str, SecretObs] = dataclasses.field(default_factory=dict)
    audit: Mapping[str, Any] | None = None  # status.audit as derived from the audit's CronJob, Jobs and Pods
    # the Pod Security level the namespace enforces (its pod-security.kubernetes.io/enforce label; None: not read)
    pod_security: str | None = None
    # whether the members' StorageClass sets allowVolumeExpansion (None: not read, or no such class)
    volume_expansion: bool | None = None
    # the member the user named in the ozone-scm.io/recover-from annotation (operator-driven quorum recovery)
    recover_from: str | None = None
    # the OzoneSCMBackup spec.bootstrap.fromBackup names, while the ring is being created (None: absent or not read)
    restore_backup: BackupObs | None = None
    # secure restore: the root CA Secret spec.bootstrap.rootCASecret names (else <name>-root-ca), as read
    restore_root_ca: RootCAObs | None = None
    backups: Mapping[str, BackupObs] = dataclasses.field(default_factory=dict)  # this cluster's OzoneSCMBackups
    backup_jobs: Mapping[str, JobObs] = dataclasses.field(default_factory=dict)  # their Jobs, by Job name
