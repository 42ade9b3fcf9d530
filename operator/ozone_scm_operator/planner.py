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
2. bootstrap: record the primordial member (``<name>-<nextMemberIndex>``) and the ``Bootstrap`` operation;
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
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any, assert_never

from ozone_scm_operator import audit_builders, backup_builders, backups, builders, naming, podsecurity
from ozone_scm_operator.builders import Body, ClusterRef
from ozone_scm_operator.directives import ANN_SWITCHOVER_TO, Directives
from ozone_scm_operator.model import (
    CREATING,
    JOINED,
    JOINING,
    LEAVING,
    OP_ADD,
    OP_BOOTSTRAP,
    OP_RECOVER,
    OP_REMOVE,
    OP_REPLACE,
    OP_ROLL,
    OP_SWITCHOVER,
    BackupObs,
    ClusterStatus,
    MemberStatus,
    Observed,
    Operation,
    SecurityStatus,
)
from ozone_scm_operator.spec import (
    ALLOWED_REPLICAS,
    ClusterSpec,
    ImmutableSpec,
    SpecProblem,
    effective_spec,
    quantity_bytes,
    unsupported,
)
from ozone_scm_operator.status import Event, Facts, derive_conditions

# Action kinds
APPLY = "Apply"  # create or replace a Service, ConfigMap or PodDisruptionBudget (body)
DELETE_OBJECT = "DeleteObject"  # delete a Service/ConfigMap/PDB (body names it)
CREATE_PVC = "CreatePVC"
CREATE_POD = "CreatePod"
DELETE_POD = "DeletePod"
DELETE_PVC = "DeletePVC"
RETAIN_PVC = "RetainPVC"  # drop the owner reference and label the volume retained (never delete unknown data)
DELETE_SECRET = "DeleteSecret"
CREATE_ROOT_CA = "CreateRootCA"
CREATE_ENROLLMENT_SECRET = "CreateEnrollmentSecret"
ISSUE_MEMBER_CERT = "IssueMemberCertificate"
ISSUE_CLIENT_CERT = "IssueClientCertificate"
# CA mode scm: the operator's admin identity through SCM's CSR flow
CREATE_CLIENT_KEY = "CreateClientKey"  # its key pair, into the client Secret (key only)
CREATE_ADMIN_CSR = "CreateAdminCSR"  # its CSR from that key, into the Secret the members mount
FETCH_CLIENT_CERT = "FetchClientCertificate"  # the certificate the primordial signed at --init (params: member)
RENEW_CLIENT_CERT = "RenewClientCertificate"  # RenewCertificate with a new key, as its current identity
TRANSFER_LEADERSHIP = "TransferLeadership"
DECOMMISSION = "Decommission"
REVOKE_CERTIFICATE = "RevokeCertificate"  # SCM's RevokeCertificates (params: serial, decimal), then mark the Secret
ADOPT = "Adopt"  # add the cluster's controller owner reference to an object nothing owns (params: kind)
RELEASE_PVC = "ReleasePVC"  # reclaimPolicy Retain: drop the cluster's owner reference from a member's volume
LABEL_PVC = "LabelPVC"  # put the cluster ID on a member's volume (params: cluster_id)
EXPAND_PVC = "ExpandPVC"  # raise a member volume's storage request (params: size)
# backups (backups.py): the OzoneSCMBackup the action is about is ``subject`` (its Event goes there too)
UPDATE_BACKUP = "UpdateBackup"  # write params["status"] into its status; params["finalizers"]: set them (or None)
CREATE_JOB = "CreateJob"  # a backup or clean-up Job (body)
CREATE_BACKUP = "CreateBackup"  # a scheduled OzoneSCMBackup (body)
DELETE_BACKUP = "DeleteBackup"  # an OzoneSCMBackup beyond retention (its finalizer has its data deleted first)
REMOVE_ANNOTATION = "RemoveAnnotation"  # remove an annotation from the OzoneSCMCluster (params: key)
CLEAR_ANNOTATION = "ClearAnnotation"  # remove a handled request from the resource's annotations (params: key)

REASON_CESSATION_OF_OPERATION = 5  # RFC 5280 CRLReason of a member that left the ring

RETRY_SOON = 1.0  # seconds until the next pass while an operation waits for something to happen
SWITCHOVER_RETRY = datetime.timedelta(seconds=10)  # a transfer whose target does not lead by then is asked again


@dataclasses.dataclass(frozen=True)
class Action:
    kind: str
    target: str
    reason: str  # Event reason
    message: str  # Event message
    body: Body | None = None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    subject: Body | None = None  # another object the action is about (apiVersion, kind, name, uid, namespace)
    event_type: str = "Normal"  # the action's Event: Normal, or Warning for a refused request


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


# ---------------------------------------------------------------------------------------------------------------
# helpers over one pass
# ---------------------------------------------------------------------------------------------------------------


def majority(n: int) -> int:
    return n // 2 + 1


@dataclasses.dataclass
class _Pass:
    ref: ClusterRef
    spec: ClusterSpec
    status: ClusterStatus
    obs: Observed
    problems: list[SpecProblem]
    revision: str
    notes: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (reason, message) for Degraded
    adopted: str | None = None  # this pass recorded an existing ring found in place (the message for Initialized)
    directives: Directives = dataclasses.field(default_factory=Directives)
    hibernate: bool = False  # hibernation is on (and the ring has formed): no member Pod runs

    def member_revision(self, member: str) -> str:
        """The revision ``member``'s Pod must carry (the spec's, with any restart asked for it folded in)."""
        return builders.member_revision(self.revision, member, self.directives.member_restarted_at(member))

    @property
    def now(self) -> datetime.datetime:
        return self.obs.now

    @property
    def op(self) -> Operation | None:
        return self.status.current_operation

    def note(self, reason: str, message: str) -> None:
        self.notes.append((reason, message))

    # ---- members ----
    def members(self, *states: str) -> list[MemberStatus]:
        return [m for m in self.status.members if not states or m.state in states]

    def caught_up(self, m: MemberStatus) -> bool:
        ring = self.obs.ring
        if ring is None or not m.scm_id:
            return False
        peer = ring.peer(m.scm_id)
        if peer is None:
            return False
        if peer.role == "LEADER":
            return True
        return (
            peer.role == "FOLLOWER"
            and peer.lag is not None
            and peer.lag <= self.spec.membership.max_catch_up_lag
            and ring.live(peer)
        )

    def healthy(self, m: MemberStatus) -> bool:
        pod = self.obs.pods.get(m.name)
        return pod is not None and pod.ready and not pod.deleting and self.caught_up(m)

    def is_leader(self, m: MemberStatus) -> bool:
        ring = self.obs.ring
        return ring is not None and bool(m.scm_id) and ring.leader_scm_id == m.scm_id

    def leader(self) -> MemberStatus | None:
        return next((m for m in self.status.members if self.is_leader(m)), None)

    def in_ring(self, scm_id: str | None) -> bool:
        return self.obs.ring is not None and self.obs.ring.peer(scm_id) is not None

    def voters(self) -> list[MemberStatus]:
        """Members the leader counts as voters (LEADER/FOLLOWER)."""
        ring = self.obs.ring
        if ring is None:
            return []
        ids = {p.scm_id for p in ring.voters}
        return [m for m in self.status.members if m.scm_id in ids]

    def pvc_gone(self, m: MemberStatus) -> bool:
        pvc = self.obs.pvcs.get(naming.pvc_name(m.name))
        return pvc is None or pvc.deleting

    def set_status(self, **changes: Any) -> None:
        self.status = dataclasses.replace(self.status, **changes)

    def set_member(self, m: MemberStatus) -> None:
        self.status = self.status.with_member(m)

    def set_op(self, op: Operation | None) -> None:
        self.status = dataclasses.replace(self.status, current_operation=op)

    def allocate_member(self, state: str) -> MemberStatus:
        index = max([self.status.next_member_index, *(m.index + 1 for m in self.status.members)])
        m = MemberStatus(name=naming.member_name(self.ref.name, index), index=index, state=state)
        self.set_status(next_member_index=index + 1)
        self.set_member(m)
        return m

    def timed_out(self, op: Operation) -> bool:
        started = op.step_started_at or op.started_at
        return self.now - started > self.spec.membership.operation_timeout

    def live_majority(self, m: MemberStatus, *, leaves_ring: bool) -> str | None:
        """Why stopping or removing ``m`` now would break the quorum, or None when it is safe.

        Checked before every step that stops a member (a roll's restart) or takes it out of the ring (decommission in
        a scale-down or replacement), from the leader's own view: the voters that remain -- all but ``m`` -- must
        include a majority of the voting configuration in force during the step (the whole ring for a restart, the
        ring without ``m`` for a removal) that are live (answered the leader within an election timeout), caught up
        (lag at most maxCatchUpLag) and whose Pods are ready. Pod readiness alone is not enough: a frozen or
        partitioned SCM keeps a ready Pod for seconds."""
        ring = self.obs.ring
        if ring is None:
            return f"no leader reports the ring, so stopping {m.name} cannot be judged safe"
        voters = ring.voters
        remaining = [v for v in voters if v.scm_id != m.scm_id]
        size = len(remaining) if leaves_ring else len(voters)
        if size == 0:
            return None
        need = majority(size)
        by_id = {x.scm_id: x for x in self.status.members if x.scm_id}
        good: list[str] = []
        bad: list[str] = []
        for v in remaining:
            member = by_id.get(v.scm_id)
            name = member.name if member is not None else f"scmId {v.scm_id}"
            if member is None:
                bad.append(f"{name} is not a recorded member")
            elif v.scm_id != ring.leader_scm_id and not ring.live(v):
                bad.append(
                    f"{name} has not answered the leader for {v.last_contact:.1f}s (election timeout "
                    f"{ring.election_timeout or 0:g}s)" if v.last_contact is not None
                    else f"{name} has not answered the leader in its term"
                )
            elif not self.healthy(member):
                bad.append(f"{name}: {self.pod_trouble(name)}")
            else:
                good.append(name)
        if len(good) >= need:
            return None
        verb = "removing" if leaves_ring else "restarting"
        return (
            f"{verb} {m.name} now would leave {len(good)} live, caught-up voter{'s' if len(good) != 1 else ''} "
            f"({', '.join(good) or 'none'}) where the ring needs {need} of {size}: {'; '.join(bad)}; waiting"
        )

    def restart_blocked(self, m: MemberStatus) -> str | None:
        """Why a roll must not restart ``m`` now, or None when it may.

        A restart needs the voters that remain to be a live, caught-up majority (``live_majority``). The one
        exception is a member that is itself not live and caught up while every other member is: it adds nothing to
        the quorum, and restarting it is how a broken revision is repaired (in a two-voter ring the others alone are
        never a majority). A member that merely looks unhealthy for a moment -- lagging under load, its Pod briefly
        unready, a leader view not yet read -- is NOT a licence to restart it while another voter is frozen or lost:
        that would leave no quorum. Without a leader's view, an unhealthy member may be restarted only when no other
        member has a ready Pod (no quorum serves anyway: a ring whose every member crashes on a bad image)."""
        why = self.live_majority(m, leaves_ring=False)
        if why is None or self.healthy(m):
            return why
        ring = self.obs.ring
        others = [x for x in self.status.members if x.name != m.name and x.state == JOINED]
        if ring is None:
            ready = [x.name for x in others if (pod := self.obs.pods.get(x.name)) is not None and pod.ready
                     and not pod.deleting]
            return why if ready else None
        by_id = {x.scm_id: x for x in self.status.members if x.scm_id}
        for v in ring.voters:
            if v.scm_id == m.scm_id:
                continue
            x = by_id.get(v.scm_id)
            if x is None or (v.scm_id != ring.leader_scm_id and not ring.live(v)) or not self.healthy(x):
                return why  # another voter is not live too: restarting m as well leaves even less
        return None

    def pod_trouble(self, name: str) -> str:
        pod = self.obs.pods.get(name)
        if pod is None:
            return "its Pod does not exist"
        trouble = pod.trouble()
        if trouble:
            return trouble
        if not pod.ready:
            return f"its Pod is {pod.phase} and not ready"
        return "it is not caught up with the leader"


# ---------------------------------------------------------------------------------------------------------------
# refreshing what status says about members from what was observed
# ---------------------------------------------------------------------------------------------------------------


def _refresh_members(p: _Pass) -> None:
    ring = p.obs.ring
    for m in p.status.members:
        pod = p.obs.pods.get(m.name)
        scm = p.obs.scms.get(m.name)
        scm_id = m.scm_id
        if scm is not None and scm_id is None and m.state in (CREATING, JOINING, JOINED):
            # JOINED without an SCM ID: adopted from retained volumes, learnt from its own answer
            scm_id = scm.scm_id
        peer = ring.peer(scm_id) if ring is not None else None
        updated = dataclasses.replace(
            m,
            scm_id=scm_id,
            cluster_id=scm.cluster_id if scm is not None else m.cluster_id,
            pod_ip=pod.pod_ip if pod is not None else None,
            revision=pod.revision if pod is not None else None,
            role=peer.role if peer is not None else ("UNKNOWN" if ring is not None else None),
            lag=peer.lag if peer is not None else None,
        )
        secret = p.obs.secrets.get(naming.member_tls_secret_name(m.name))
        if secret is not None:
            updated = dataclasses.replace(
                updated,
                certificate_expiry=secret.certificate_not_after,
                certificate_serial=secret.certificate_serial,
            )
        p.set_member(updated)
        ready = p.healthy(updated)
        p.set_member(
            dataclasses.replace(
                updated,
                ready=ready,
                # recorded on the transition only, so a steady cluster's status does not change every pass
                # and never while hibernated (a member woken later must not look long lost and be replaced)
                out_of_quorum_since=None if ready or p.hibernate else (updated.out_of_quorum_since or p.now),
            )
        )
    leader = p.leader()
    p.set_status(
        leader=leader.name if leader else None,
        term=ring.term if ring is not None else p.status.term,
    )


def _cluster_ids(p: _Pass) -> dict[str, list[str]]:
    """Cluster ID -> members reporting it (the recorded ID counts as reported by ``status``)."""
    ids: dict[str, list[str]] = {}
    for name, scm in sorted(p.obs.scms.items()):
        if p.status.member(name) is not None:
            ids.setdefault(scm.cluster_id, []).append(name)
    if p.status.cluster_id:
        ids.setdefault(p.status.cluster_id, []).append("status.clusterID")
    return ids


# ---------------------------------------------------------------------------------------------------------------
# the concerns, in order; each returns an Action, or None to let the next one look
# ---------------------------------------------------------------------------------------------------------------


def _security(p: _Pass) -> Action | None:
    sec = p.spec.security
    if not sec.enabled:
        return None
    enrollment = naming.enrollment_secret_name(p.ref.name)
    if enrollment not in p.obs.secrets:
        return Action(
            CREATE_ENROLLMENT_SECRET, enrollment, "CreatingSecret",
            f"creating the enrolment secret{'s' if sec.scm_ca else ''} in {enrollment}",
            params={"scm": sec.scm_ca},
        )
    if sec.scm_ca:
        return _scm_ca_client(p)
    if not sec.operator_ca:
        return None
    root_name = naming.root_ca_secret_name(p.ref.name)
    root = p.obs.secrets.get(root_name)
    recorded = p.status.security
    if root is None:
        if recorded.root_ca_fingerprint is None and p.spec.bootstrap.from_backup and p.status.cluster_id is None:
            return _restored_root_ca(p, root_name)  # a secure restore keeps the old ring's root CA
        if recorded.root_ca_fingerprint is None:
            return Action(
                CREATE_ROOT_CA, root_name, "CreatingRootCA",
                f"creating the root CA in Secret {root_name}",
                params={"duration": sec.root_ca_duration.total_seconds()},
            )
        p.note(
            "RootCAMissing",
            f"the root CA Secret {root_name} was deleted; members keep serving with their current certificates, but "
            "no member can be added, replaced, rolled or renewed until it is restored from a backup "
            f"(its certificate had SHA-256 fingerprint {recorded.root_ca_fingerprint}); the operator never replaces "
            "a root CA by itself",
        )
        return None
    if recorded.root_ca_fingerprint is None:
        p.set_status(
            security=SecurityStatus(
                root_ca_secret=root_name,
                root_ca_expiry=root.certificate_not_after,
                root_ca_fingerprint=root.root_fingerprint,
                revoked_serials=recorded.revoked_serials,
            )
        )
    elif root.root_fingerprint != recorded.root_ca_fingerprint:
        p.note(
            "RootCAChanged",
            f"Secret {root_name} holds a different root CA (fingerprint {root.root_fingerprint}, expected "
            f"{recorded.root_ca_fingerprint}); the operator issues nothing from it. Restore the original root CA",
        )
        return None
    fp = p.status.security.root_ca_fingerprint
    client_name = naming.operator_client_secret_name(p.ref.name)
    client = p.obs.secrets.get(client_name)
    if client is None or client.root_fingerprint != fp or _due(client.certificate_not_after, p):
        return Action(
            ISSUE_CLIENT_CERT, client_name, "IssuingCertificate",
            f"issuing the operator's client certificate into Secret {client_name}",
            params={"duration": sec.certificate_duration.total_seconds()},
        )
    for m in p.members(CREATING, JOINING, JOINED):
        name = naming.member_tls_secret_name(m.name)
        s = p.obs.secrets.get(name)
        why = None
        if s is None:
            why = "issuing" if m.certificate_serial is None else "re-issuing (its Secret was deleted)"
        elif s.root_fingerprint != fp:
            why = "re-issuing (signed by another root CA)"
        elif _due(s.certificate_not_after, p):
            why = "renewing (expires " + (s.certificate_not_after.isoformat() if s.certificate_not_after else "?") + ")"
        elif not s.role_bound:
            why = "re-issuing with its role names (issued before role-bound identities)"
        if why:
            return Action(
                ISSUE_MEMBER_CERT, name, "IssuingCertificate",
                f"{why} the sub-CA certificate of member {m.name} into Secret {name}",
                params={"member": m.name, "duration": sec.certificate_duration.total_seconds()},
            )
    return None


def _scm_ca_client(p: _Pass) -> Action | None:
    """CA mode scm: the operator's admin certificate through Ozone's own flow. Before any Pod: its key (client
    Secret) and CSR (mounted by the members, ``ozone.scm.security.admin.csr.files``). Once the primordial is ready
    (it signed the CSR at ``--init`` and recorded the certificate on its first leadership): fetch it by public key
    over the security port, trusting the root only with the scm enrolment secret's proof. Before expiry: renew it
    (``RenewCertificate``, a new key, presented with the current certificate). Until it holds a certificate the
    operator cannot observe the SCMs (mutual TLS), so it waits on the primordial's Pod readiness."""
    client_name = naming.operator_client_secret_name(p.ref.name)
    client = p.obs.secrets.get(client_name)
    if client is None:
        return Action(CREATE_CLIENT_KEY, client_name, "CreatingClientKey",
                      f"creating the operator's administrator key in Secret {client_name}")
    csr_name = naming.admin_csr_secret_name(p.ref.name)
    csr = p.obs.secrets.get(csr_name)
    if csr is None:
        return Action(CREATE_ADMIN_CSR, csr_name, "CreatingAdminCSR",
                      f"creating the operator's certificate request (CN {naming.MANAGER}) in Secret {csr_name}")
    if client.certificate_not_after is None and csr.public_key and client.public_key and csr.public_key != client.public_key:
        # the client Secret was lost and its key made again: the old request can never be fetched for the new key
        after = (
            f"; the primordial already signed the old one at --init, so an administrator must sign this one "
            f"(`ozone-scm admin cert sign --csr` with {naming.ADMIN_CSR_FILE} from Secret {csr_name})"
            if p.status.cluster_id else ""
        )
        return Action(DELETE_SECRET, csr_name, "ReplacingAdminCSR",
                      f"Secret {csr_name} holds a request for another key than {client_name}'s: replacing it{after}")
    if client.certificate_not_after is None:
        primordial = p.status.primordial_member
        pod = p.obs.pods.get(primordial) if primordial else None
        if pod is None or not pod.ready or not pod.pod_ip:
            return None  # the members' Pods come first; the certificate exists once the primordial leads
        return Action(
            FETCH_CLIENT_CERT, client_name, "FetchingCertificate",
            f"fetching the operator's certificate, signed by {primordial} at --init, into Secret {client_name}",
            params={"member": primordial},
        )
    if client.root_fingerprint and p.status.security.root_ca_fingerprint != client.root_fingerprint:
        p.set_status(security=dataclasses.replace(p.status.security, root_ca_fingerprint=client.root_fingerprint))
    # SCM chooses the lifetime (hdds.x509.default.duration): renew within renewBefore, but never in the first two
    # thirds of the certificate's life, or a lifetime shorter than renewBefore would renew on every pass
    window = p.spec.security.renew_before
    if client.certificate_not_before is not None:
        window = min(window, (client.certificate_not_after - client.certificate_not_before) / 3)
    if client.certificate_not_after - window <= p.now and p.obs.scms:
        return Action(
            RENEW_CLIENT_CERT, client_name, "RenewingCertificate",
            f"renewing the operator's certificate (expires {client.certificate_not_after.isoformat()}) in Secret "
            f"{client_name}",
        )
    return None


def _due(not_after: datetime.datetime | None, p: _Pass) -> bool:
    return not_after is None or not_after - p.spec.security.renew_before <= p.now


def _pdb_max_unavailable(p: _Pass) -> int:
    """One voluntary disruption per tolerable failure ((n-1)/2), minus members already down or catching up;
    none during an operation."""
    joined = p.members(JOINED, LEAVING)
    if p.op is not None:
        return 0
    tolerable = (len(joined) - 1) // 2
    down = sum(1 for m in joined if not p.healthy(m))
    return max(0, tolerable - down)


def _children(p: _Pass) -> Action | None:
    names = [m.name for m in p.status.members]
    desired: list[Body] = [
        builders.build_configmap(p.ref, p.spec, names, p.status.primordial_member),
        builders.build_headless_service(p.ref),
        builders.build_client_service(p.ref, p.spec),
    ]
    if p.spec.pdb_enabled:
        desired.append(builders.build_pdb(p.ref, _pdb_max_unavailable(p)))
    for body in desired:
        key = (body["kind"], body["metadata"]["name"])
        want = body["metadata"]["annotations"][naming.ANN_CONTENT_HASH]
        have = p.obs.children.get(key, "<absent>")
        if have != want:
            verb = "creating" if have == "<absent>" else "updating"
            return Action(APPLY, key[1], f"Apply{key[0]}", f"{verb} {key[0]} {key[1]}", body=body)
    pdb_key = ("PodDisruptionBudget", naming.pdb_name(p.ref.name))
    if not p.spec.pdb_enabled and pdb_key in p.obs.children:
        return Action(
            DELETE_OBJECT, pdb_key[1], "DeletePodDisruptionBudget",
            f"deleting PodDisruptionBudget {pdb_key[1]} (spec.podDisruptionBudget.enabled=false)",
            body={"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                  "metadata": {"name": pdb_key[1], "namespace": p.ref.namespace}},
        )
    return None


def _audit(p: _Pass, *, only_existing: bool = False) -> Action | None:
    """The scheduled Spark audit: its report volume, then its CronJob (suspended until the ring has formed, while
    the cluster is Degraded as the last pass found it, or paused); deleted when ``spec.audit.enabled`` is false (the reports are kept).
    ``only_existing`` (a paused cluster): only rewrite a CronJob that exists (to suspend it), create nothing."""
    key = ("CronJob", naming.audit_cronjob_name(p.ref.name))
    if only_existing and key not in p.obs.children:
        return None
    if not p.spec.audit.enabled:
        if key in p.obs.children:
            return Action(
                DELETE_OBJECT, key[1], "DeleteAuditCronJob",
                f"deleting CronJob {key[1]} (spec.audit.enabled=false; the report volume is kept)",
                body={"apiVersion": "batch/v1", "kind": "CronJob",
                      "metadata": {"name": key[1], "namespace": p.ref.namespace}},
            )
        return None
    pvc = audit_builders.build_audit_pvc(p.ref, p.spec)
    if ("PersistentVolumeClaim", pvc["metadata"]["name"]) not in p.obs.children:
        return Action(CREATE_PVC, pvc["metadata"]["name"], "CreateAuditVolume",
                      f"creating the audit report volume {pvc['metadata']['name']}", body=pvc)
    cond = p.status.condition("Degraded")
    degraded = cond is not None and cond.status == "True"
    # before the ring has formed there is nothing to export either
    # before the ring has formed there is nothing to export either, nor while it hibernates
    suspend = audit_builders.audit_suspended(p.spec, degraded=degraded or p.status.cluster_id is None or p.hibernate)
    body = audit_builders.build_audit_cronjob(p.ref, p.spec, suspend=suspend)
    want = body["metadata"]["annotations"][naming.ANN_CONTENT_HASH]
    have = p.obs.children.get(key, "<absent>")
    if have == want:
        return None
    if not _admissible(p, f"the audit CronJob's Pods ({key[1]})",
                       body["spec"]["jobTemplate"]["spec"]["template"]["spec"]):
        return None
    verb = "creating" if have == "<absent>" else "updating"
    why = ""
    if suspend:
        cause = ("spec.audit.suspend" if p.spec.audit.suspend else "spec.paused" if p.spec.paused
                 else "hibernated" if p.hibernate else "Degraded" if degraded else "the ring has not formed yet")
        why = f" (suspended: {cause})"
    return Action(APPLY, key[1], "ApplyAuditCronJob", f"{verb} CronJob {key[1]}{why}", body=body)


def _backups(p: _Pass) -> Action | None:
    """The cluster's OzoneSCMBackups, the backup schedule and retention (``backups.plan``), after the members' own
    work: one step per pass, its Event also on the backup it is about."""
    result = backups.plan(backups.Inputs(
        ref=p.ref, spec=p.spec, now=p.now, cluster_id=p.status.cluster_id, has_leader=p.obs.ring is not None,
        backups=p.obs.backups, jobs=p.obs.backup_jobs,
        volume_exists=("PersistentVolumeClaim", naming.backup_pvc_name(p.ref.name)) in p.obs.children,
        recorded=p.status.backup, admissible=lambda what, spec: _admissible(p, what, spec),
    ))
    p.set_status(backup=result.status)
    for reason, message in result.notes:
        p.note(reason, message)
    step = result.step
    if step is None:
        return None
    match step:
        case backups.CreateVolume(body=body):
            return Action(CREATE_PVC, body["metadata"]["name"], result.reason, result.message, body=body)
        case backups.UpdateBackup(backup=b, status=status, finalizers=finalizers):
            return Action(UPDATE_BACKUP, b.name, result.reason, result.message,
                          params={"status": status, "finalizers": finalizers},
                          subject=backup_builders.backup_ref(p.ref, b.name, b.uid))
        case backups.CreateJob(backup=b, body=body):
            return Action(CREATE_JOB, body["metadata"]["name"], result.reason, result.message, body=body,
                          subject=backup_builders.backup_ref(p.ref, b.name, b.uid))
        case backups.CreateBackup(body=body):
            return Action(CREATE_BACKUP, body["metadata"]["name"], result.reason, result.message, body=body)
        case backups.DeleteBackup(backup=b):
            return Action(DELETE_BACKUP, b.name, result.reason, result.message,
                          subject=backup_builders.backup_ref(p.ref, b.name, b.uid))
        case _:
            assert_never(step)


def _found_existing(p: _Pass) -> bool:
    """A resource with no member recorded, over the Pods and volumes of an existing ring of the same name (e.g.
    re-created after ``kubectl delete --cascade=orphan``): adopt that ring as the leader describes it -- its cluster
    ID, and each voter (mapped to its member by ``ozone.scm.node.id``) as a joined member -- instead of bootstrapping
    a second ring over it. Volumes the leader does not list are neither adopted nor touched. Returns False when
    there is nothing of this cluster's name."""
    name = p.ref.name
    found = {n for n in p.obs.pods if naming.member_index(name, n) is not None}
    found |= {v.removesuffix("-data") for v in p.obs.pvcs if v.endswith("-data")
              and naming.member_index(name, v.removesuffix("-data")) is not None}
    if not found:
        return False
    ring = p.obs.ring
    leader = next((s for s in p.obs.scms.values() if ring is not None and s.scm_id == ring.leader_scm_id), None)
    running = [n for n in found if n in p.obs.pods]
    if not running and p.spec.storage.adopt_cluster_id:
        return _adopt_retained(p, found)
    if ring is None or leader is None:
        p.note(
            "NoLeader",
            f"found the Pods or volumes of an existing ring named {name} ({', '.join(sorted(found))}); waiting for one "
            "of its SCMs to lead and answer before adopting it (nothing is created over existing volumes). Volumes "
            "kept by reclaimPolicy Retain are adopted with spec.storage.adoptClusterID set to the cluster ID they "
            f"are labelled with ({naming.LABEL_CLUSTER_ID}); delete those PersistentVolumeClaims to start a new "
            "ring instead",
        )
        return True
    adopted: list[MemberStatus] = []
    for peer in ring.voters:
        member = peer.node_id or peer.host.split(".", 1)[0]
        index = naming.member_index(name, member)
        if index is None:
            continue
        adopted.append(MemberStatus(name=member, index=index, state=JOINED, scm_id=peer.scm_id,
                                    cluster_id=leader.cluster_id))
    if not adopted:
        p.note("NoLeader", f"the SCMs found under {name} lead a ring whose members are not named {name}-<index>")
        return True
    adopted.sort(key=lambda m: m.index)
    indexes = [i for n in found if (i := naming.member_index(name, n)) is not None]
    p.set_status(
        cluster_id=leader.cluster_id,
        primordial_member=adopted[0].name,
        members=tuple(adopted),
        next_member_index=max([p.status.next_member_index, *(i + 1 for i in indexes)]),
    )
    left = sorted(found - {m.name for m in adopted})
    p.adopted = (
        f"adopted the existing ring of cluster {leader.cluster_id} (members {', '.join(m.name for m in adopted)}, "
        f"leader {next((m.name for m in adopted if m.scm_id == ring.leader_scm_id), '?')})"
        + (f"; not in the ring, left untouched: {', '.join(left)}" if left else "")
    )
    return True


def _adopt_retained(p: _Pass, found: set[str]) -> bool:
    """Volumes kept by reclaimPolicy Retain, no Pod running: with ``spec.storage.adoptClusterID`` they become the
    members of this resource, but only if every one of them is labelled with that cluster ID (one that is not is
    another cluster's data: ForeignVolume, and nothing starts). Their Pods then start with ``scm --bootstrap``,
    which on an initialised volume starts the SCM on its own data; the ring forms again from the Raft logs."""
    want = p.spec.storage.adopt_cluster_id
    name = p.ref.name
    vols = {n: p.obs.pvcs.get(naming.pvc_name(n)) for n in sorted(found)}
    foreign = sorted(f"{v.name} ({v.cluster_id or 'no cluster ID label'})" for v in vols.values()
                     if v is not None and v.cluster_id != want)
    missing = sorted(n for n, v in vols.items() if v is None)
    if foreign or missing:
        p.note(
            "ForeignVolume",
            f"spec.storage.adoptClusterID is {want}, but "
            + "; ".join(([f"these volumes hold other data: {', '.join(foreign)}"] if foreign else [])
                        + ([f"these members have a Pod but no volume: {', '.join(missing)}"] if missing else []))
            + ". Nothing was adopted, started or deleted: fix adoptClusterID, or move those PersistentVolumeClaims "
            "away",
        )
        return True
    members = tuple(
        MemberStatus(name=n, index=i, state=JOINED, cluster_id=want)
        for n in sorted(found, key=lambda n: naming.member_index(name, n) or 0)
        if (i := naming.member_index(name, n)) is not None
    )
    p.set_status(
        cluster_id=want,
        primordial_member=members[0].name,
        members=members,
        next_member_index=max([p.status.next_member_index, *(m.index + 1 for m in members)]),
    )
    p.adopted = f"adopted the retained volumes of cluster {want} ({', '.join(m.name for m in members)})"
    return True


def _ownership(p: _Pass) -> Action | None:
    """Objects of recorded members (Pods, volumes) and the cluster's Secrets that nothing owns -- left by a deleted
    resource with ``--cascade=orphan`` and adopted -- get this resource as their controller owner, so deleting it
    later removes them: a member's once its SCM answered with the recorded cluster ID (a volume holding another
    cluster's data is never owned, so never deleted with the resource); the root CA Secret deliberately never."""
    uid = p.ref.uid
    for m in p.status.members:
        scm = p.obs.scms.get(m.name)
        if scm is None or scm.cluster_id != p.status.cluster_id:
            continue  # owned only once its SCM answered with this cluster's ID: a foreign volume is never owned
        pod = p.obs.pods.get(m.name)
        if pod is not None and pod.controller_uid is None and not pod.deleting:
            return Action(ADOPT, m.name, "AdoptingPod", f"adopting Pod {m.name} (owned by nothing)",
                          params={"kind": "Pod"})
        pvc = p.obs.pvcs.get(naming.pvc_name(m.name))
        if (pvc is not None and pvc.controller_uid is None and not pvc.deleting
                and p.spec.storage.reclaim_policy == "Delete"):
            return Action(ADOPT, pvc.name, "AdoptingVolume",
                          f"adopting PersistentVolumeClaim {pvc.name} of member {m.name} (owned by nothing)",
                          params={"kind": "PersistentVolumeClaim"})
    root = naming.root_ca_secret_name(p.ref.name)
    for secret in p.obs.secrets.values():
        if secret.name != root and secret.controller_uid is None and uid:
            return Action(ADOPT, secret.name, "AdoptingSecret", f"adopting Secret {secret.name} (owned by nothing)",
                          params={"kind": "Secret"})
    return None


def _volumes(p: _Pass) -> Action | None:
    """The members' volumes as ``spec.storage`` wants them: under reclaimPolicy Retain owned by nothing (so deleting
    the resource keeps them), labelled with the cluster ID once the member's SCM answered with it (a later resource
    adopts them by that label), and as large as ``storage.size`` (expanded where the StorageClass allows it)."""
    retain = p.spec.storage.reclaim_policy == "Retain"
    want = p.spec.storage.size
    small: list[str] = []
    for m in p.status.members:
        pvc = p.obs.pvcs.get(naming.pvc_name(m.name))
        if pvc is None or pvc.deleting:
            continue
        if retain and pvc.controller_uid is not None and pvc.controller_uid == p.ref.uid:
            return Action(RELEASE_PVC, pvc.name, "RetainingVolume",
                          f"releasing PersistentVolumeClaim {pvc.name} from the cluster's ownership "
                          "(storage.reclaimPolicy Retain: it outlives the OzoneSCMCluster)")
        scm = p.obs.scms.get(m.name)
        cid = p.status.cluster_id
        if cid and pvc.cluster_id != cid and scm is not None and scm.cluster_id == cid:
            return Action(LABEL_PVC, pvc.name, "LabellingVolume",
                          f"labelling PersistentVolumeClaim {pvc.name} with cluster ID {cid}",
                          params={"cluster_id": cid})
        if pvc.size and pvc.size != want and quantity_bytes(pvc.size) < quantity_bytes(want):
            small.append(pvc.name)
    if small:
        if p.obs.volume_expansion is False:
            p.note(
                "VolumeExpansion",
                f"storage.size asks for {want} but the StorageClass of {', '.join(small)} does not allow volume "
                "expansion (allowVolumeExpansion is not true); the volumes keep their size and nothing is deleted. "
                "Set allowVolumeExpansion on the StorageClass (if its provisioner supports it)",
            )
            return None
        return Action(EXPAND_PVC, small[0], "ExpandingVolume",
                      f"expanding PersistentVolumeClaim {small[0]} to {want}", params={"size": want})
    return None


def _init_mode(p: _Pass, m: MemberStatus) -> str:
    op = p.op
    if op is not None and op.type == OP_RECOVER and m.name == op.member and op.step in ("StopSurvivor", "Recover"):
        return builders.INIT_MODE_RECOVER
    first_start = (
        m.name == p.status.primordial_member
        and p.status.cluster_id is None
        and m.state == CREATING
        and op is not None
        and op.type == OP_BOOTSTRAP
    )
    if not first_start:
        return builders.INIT_MODE_BOOTSTRAP
    return builders.INIT_MODE_RESTORE if p.spec.bootstrap.from_backup else builders.INIT_MODE_INIT


def _restore_source(p: _Pass) -> tuple[builders.RestoreSource | None, str | None]:
    """Where ``spec.bootstrap.fromBackup`` restores from, or why it cannot (yet)."""
    wanted = p.spec.bootstrap.from_backup
    if not wanted:
        return None, None
    if p.spec.security.scm_ca or (p.spec.security.enabled and not p.spec.security.operator_ca):
        return None, ("the operator restores a secure ring in CA mode operator only (CA mode scm needs the root "
                      "CA's private key, which the operator's backups do not hold): restore it by hand with "
                      "`ozone-scm scm --restore DIR` from a backup taken with --include-keys, or with --root-ca-cert "
                      "and --root-ca-key (docs/operations.md, \"Restoring a secure ring\")")
    path = p.spec.bootstrap.backup_path
    if path is not None:
        claim = naming.backup_pvc_name(p.ref.name)
        if ("PersistentVolumeClaim", claim) not in p.obs.children:
            return None, (f"spec.bootstrap.fromBackup is {path} on this cluster's backup volume {claim}, which does "
                          "not exist: create it (spec.backup.volume) and copy the backup there, or name an "
                          "OzoneSCMBackup")
        return builders.RestoreSource(claim, path), None
    b = p.obs.restore_backup
    if b is None:
        return None, (f"spec.bootstrap.fromBackup names OzoneSCMBackup {wanted}, which does not exist in namespace "
                      f"{p.ref.namespace} (kubectl get ozonescmbackups); nothing is created until it does")
    if b.phase != backups.Phase.COMPLETED or not b.cluster:
        return None, (f"OzoneSCMBackup {wanted} is {b.phase or 'not started'}, not Completed; the ring is created "
                      "from it once it is")
    cid = b.status.get("clusterID")
    cluster_id = cid if isinstance(cid, str) else None
    if p.spec.security.enabled:
        why = _restore_root_mismatch(p, b)
        if why is not None:
            return None, why
    location = backups.location_of(b)
    if location.startswith("s3://"):
        if p.spec.backup.s3 is None:
            return None, (f"OzoneSCMBackup {wanted} is in object storage ({location}): set spec.backup.s3 (endpoint, "
                          "credentialsSecret, and caSecret for a private CA) on this cluster so that its first member "
                          "can download it")
        return builders.RestoreSource("", location, cluster_id, s3=p.spec.backup.s3), None
    return builders.RestoreSource(naming.backup_pvc_name(b.cluster), naming.backup_path(b.name), cluster_id), None


def _backup_root(b: BackupObs) -> str | None:
    fp = b.status.get("rootCAFingerprint")
    return fp if isinstance(fp, str) and fp else None


def _restore_root_mismatch(p: _Pass, b: BackupObs) -> str | None:
    """Secure restore (CA mode operator): why this cluster's root CA is not the one backup ``b`` records, or None."""
    expected = _backup_root(b)
    if expected is None:
        return (f"OzoneSCMBackup {b.name} records no root CA (a backup of a ring without security, or taken by an "
                "operator that did not record it): a secure ring is restored only from a backup of a secure ring "
                "that names its root CA (status.rootCAFingerprint); take a new one, or restore by hand "
                "(docs/operations.md, \"Restoring a secure ring\")")
    root_name = naming.root_ca_secret_name(p.ref.name)
    root = p.obs.secrets.get(root_name)
    held = root.root_fingerprint if root is not None else None
    if held != expected:
        return (f"Secret {root_name} holds root CA {held or '(none)'} but OzoneSCMBackup {b.name} records root CA "
                f"{expected}: the restored ring must keep the old ring's root CA, or no certificate issued under it "
                f"stays valid. Delete Secret {root_name} and name the old cluster's root CA Secret in "
                f"spec.bootstrap.rootCASecret ({naming.root_ca_secret_name(b.cluster)} if it was kept); nothing "
                "was started")
    return None


def _restored_root_ca(p: _Pass, root_name: str) -> Action | None:
    """CA mode operator, restoring: take the old cluster's root CA (``spec.bootstrap.rootCASecret``) into this
    cluster's root CA Secret, once its certificate is the root the backup records; never a new root."""
    b = p.obs.restore_backup
    wanted = p.spec.bootstrap.from_backup
    expected = _backup_root(b) if b is not None else None
    if b is None or b.phase != backups.Phase.COMPLETED or expected is None:
        _, why = _restore_source(p)  # says what is missing about the backup
        if why is not None:
            p.note("RestoreSource", why)
        return None
    src = p.obs.restore_root_ca
    named = p.spec.bootstrap.root_ca_secret
    old_root = naming.root_ca_secret_name(b.cluster)
    why = None
    if src is None and named is None:
        why = (f"restoring the secure ring of OzoneSCMBackup {wanted} needs its root CA (fingerprint {expected}): "
               f"name the Secret that holds it in spec.bootstrap.rootCASecret (the old cluster's {old_root}, kept "
               "when the cluster was deleted)")
    elif src is None:
        why = (f"spec.bootstrap.rootCASecret names Secret {named}, which does not exist in namespace "
               f"{p.ref.namespace}; the restore needs the root CA of OzoneSCMBackup {wanted} (fingerprint "
               f"{expected}, the old cluster's {old_root})")
    elif src.problem is not None:
        why = f"Secret {src.name} cannot be the restored ring's root CA: {src.problem}"
    elif src.fingerprint != expected:
        why = (f"Secret {src.name} holds root CA {src.fingerprint}, not the root CA {expected} OzoneSCMBackup {wanted} "
               f"records: no certificate of the old ring would be valid under it. Name the old cluster's root CA "
               f"Secret ({old_root} if it was kept) in spec.bootstrap.rootCASecret")
    if why is not None:
        p.note("RestoreSource", why + "; no root CA was taken and no Pod started")
        return None
    assert src is not None
    return Action(
        CREATE_ROOT_CA, root_name, "TakingRootCA",
        f"taking the root CA of Secret {src.name} (fingerprint {expected}, the root OzoneSCMBackup {wanted} records) "
        f"into Secret {root_name}",
        params={"copyFrom": src.name, "fingerprint": expected},
    )


def _admissible(p: _Pass, what: str, pod_spec: Mapping[str, Any]) -> bool:
    """Whether the namespace's Pod Security admission would take this Pod (spec): a ``spec.podSecurityContext`` /
    ``spec.containerSecurityContext`` override that breaks the level it enforces is reported (PodSecurity) instead
    of a Pod the API server refuses; nothing existing is touched."""
    level = p.obs.pod_security
    if level is None:
        return True
    violations = podsecurity.check(pod_spec, level)
    if not violations:
        return True
    p.note(
        "PodSecurity",
        f"{what} would break the Pod Security level {level!r} namespace {p.ref.namespace} enforces: "
        + "; ".join(violations[:4]) + ("; ..." if len(violations) > 4 else "")
        + ". Fix spec.podSecurityContext / spec.containerSecurityContext (the defaults pass 'restricted'); "
        "nothing was created or deleted",
    )
    return False


def _repairs(p: _Pass) -> Action | None:
    for m in p.members(CREATING, JOINING, JOINED):
        pvc_name = naming.pvc_name(m.name)
        pvc = p.obs.pvcs.get(pvc_name)
        if pvc is None and m.state in (CREATING, JOINING):
            return Action(
                CREATE_PVC, pvc_name, "CreatingVolume", f"creating PersistentVolumeClaim {pvc_name} for member {m.name}",
                body=builders.build_pvc(p.ref, p.spec, m.name),
            )
        if pvc is None or pvc.deleting:
            continue  # a joined member's volume is gone: replacement (below), never a fresh Pod on empty disk
        if p.spec.security.operator_ca and naming.member_tls_secret_name(m.name) not in p.obs.secrets:
            continue  # its certificate first (blocked while the root CA is missing)
        if p.spec.security.enabled and naming.enrollment_secret_name(p.ref.name) not in p.obs.secrets:
            continue
        if p.spec.security.scm_ca and naming.admin_csr_secret_name(p.ref.name) not in p.obs.secrets:
            continue  # mounted by every member; the primordial signs it at --init
        if m.name not in p.obs.pods:
            mode = _init_mode(p, m)
            source = None
            if mode == builders.INIT_MODE_RESTORE:
                source, why = _restore_source(p)
                if why is not None:
                    p.note("RestoreSource", why)
                    return None
            what = {builders.INIT_MODE_INIT: "scm --init (primordial)",
                    builders.INIT_MODE_RECOVER: "scm --recover (quorum recovery)",
                    builders.INIT_MODE_RESTORE: f"scm --restore from {p.spec.bootstrap.from_backup}",
                    }.get(mode, "scm --bootstrap")
            revision = p.member_revision(m.name)
            body = builders.build_pod(p.ref, p.spec, m.name, mode, source, revision)
            if not _admissible(p, f"Pod {m.name}", body["spec"]):
                return None
            return Action(
                CREATE_POD, m.name, "CreatingPod", f"creating Pod {m.name} ({what}, revision {revision})",
                body=body,
            )
    return None


# ---- operations ----


def _continue_bootstrap(p: _Pass, op: Operation) -> Action | None:
    m = p.status.member(op.member)
    if m is None:
        p.set_op(None)
        return None
    scm = p.obs.scms.get(m.name)
    pod = p.obs.pods.get(m.name)
    if scm is not None and scm.is_leader and pod is not None and pod.ready and pod.init_mode == builders.INIT_MODE_RESTORE:
        # restored from a backup: record the ring, then restart the member with --bootstrap, so that no later start
        # of its Pod runs --restore over its own data again
        p.set_status(cluster_id=scm.cluster_id)
        p.set_member(dataclasses.replace(m, scm_id=scm.scm_id, cluster_id=scm.cluster_id))
        p.set_op(op.at_step("Restart", p.now))
        if pod.deleting:
            return None
        return Action(DELETE_POD, m.name, "RestartingRestoredMember",
                      f"{m.name} leads the ring restored from {p.spec.bootstrap.from_backup} (cluster "
                      f"{scm.cluster_id}); restarting it with scm --bootstrap")
    if scm is not None and scm.is_leader and pod is not None and pod.ready:
        p.set_status(cluster_id=scm.cluster_id)
        p.set_member(dataclasses.replace(m, state=JOINED, scm_id=scm.scm_id, cluster_id=scm.cluster_id))
        p.set_op(None)
        return None
    p.set_op(op.at_step("WaitForLeader" if op.step != "Restart" else "Restart", p.now))
    if p.timed_out(op):
        p.note("OperationStuck", f"the primordial member {m.name} has not become the leader: {p.pod_trouble(m.name)}")
    return None


def _continue_add(p: _Pass, op: Operation) -> Action | None:
    m = p.status.member(op.member)
    if m is None:
        p.set_op(None)
        return None
    if m.state == JOINED:
        p.set_op(None)
        return None
    joined = p.members(JOINED)
    if len(joined) >= p.spec.replicas and op.reason != "Replacement":
        # The user scaled down while this member was still joining: give it up (RemoveMember cleans up).
        p.set_member(dataclasses.replace(m, state=LEAVING))
        p.set_op(Operation(OP_REMOVE, m.name, started_at=p.now, reason="ScaleDown", message="abandoning the add"))
        return None
    observed = p.obs.scms.get(m.name)
    if m.scm_id and p.in_ring(m.scm_id) and (
        p.pvc_gone(m) or (observed is not None and observed.scm_id and observed.scm_id != m.scm_id)
    ):
        # The joiner lost its volume after the leader added it: the ring waits for an identity that no longer
        # exists. Give the add up (RemoveMember decommissions the recorded scmId); a fresh member follows.
        p.set_member(dataclasses.replace(m, state=LEAVING))
        p.set_op(Operation(OP_REMOVE, m.name, started_at=p.now, reason="VolumeLost",
                           message=f"abandoning the add of {m.name}: its volume was lost while it joined"))
        return None
    if p.healthy(m) and m.scm_id is not None and p.obs.ring is not None:
        peer = p.obs.ring.peer(m.scm_id)
        if peer is not None and peer.role in ("FOLLOWER", "LEADER"):
            p.set_member(dataclasses.replace(m, state=JOINED))
            p.set_op(None)
            return None
    step = "WaitForPod" if m.name not in p.obs.pods else ("CatchUp" if m.scm_id and p.in_ring(m.scm_id) else "Join")
    p.set_op(op.at_step(step, p.now))
    if m.state == CREATING:
        p.set_member(dataclasses.replace(m, state=JOINING))
    if p.timed_out(p.op or op):
        p.note("OperationStuck", f"member {m.name} has not joined and caught up: {p.pod_trouble(m.name)}")
    return None


def _serving(p: _Pass, m: MemberStatus) -> bool:
    """The member's SCM answered that it is out of safemode (an SCM in safemode refuses block allocations)."""
    scm = p.obs.scms.get(m.name)
    return scm is not None and scm.in_safe_mode is False


def _transfer_target(p: _Pass, away_from: MemberStatus) -> MemberStatus | None:
    candidates = [m for m in p.members(JOINED) if m.name != away_from.name and p.healthy(m)]
    if _serving(p, away_from):
        # never hand a serving leadership to an SCM in safemode: every allocation would fail until it leaves it
        candidates = [m for m in candidates if _serving(p, m)]
    if not candidates:
        return None
    lag = {m.name: (m.lag or 0) for m in candidates}
    return min(candidates, key=lambda m: (lag[m.name], m.index))


def _transfer(p: _Pass, op: Operation, m: MemberStatus) -> Action | None:
    target = _transfer_target(p, m)
    p.set_op(op.at_step("TransferLeadership", p.now))
    if target is None:
        p.note(
            "WaitingForQuorum",
            f"cannot move leadership away from {m.name} yet: no other member is ready, caught up"
            + (" and out of safemode" if _serving(p, m) else ""),
        )
        return None
    return Action(
        TRANSFER_LEADERSHIP, m.name, "TransferringLeadership",
        f"transferring leadership from {m.name} to {target.name} before {op.type} of {m.name}",
        params={"to_scm_id": target.scm_id, "to": target.name, "from_scm_id": m.scm_id},
    )


def _continue_remove(p: _Pass, op: Operation) -> Action | None:
    """RemoveMember and the first half of ReplaceMember: move leadership and the primordial role away,
    decommission, delete the Pod, the volume (or retain it) and the certificate, forget the member."""
    m = p.status.member(op.member)
    if m is None:
        return _finish_remove(p, op, None)
    if m.state != LEAVING:
        p.set_member(dataclasses.replace(m, state=LEAVING))
        m = p.status.member(op.member)
        assert m is not None
    observed = p.obs.scms.get(m.name)
    ids = {m.scm_id, observed.scm_id if observed is not None else None}
    if p.obs.ring is None and any(ids):
        # Without the leader's view we cannot tell whether it is still a member: never delete what may be one.
        p.note("NoLeader", f"waiting for a leader before removing {m.name} ({op.reason or op.type})")
        return None
    in_ring = sorted(sid for sid in ids if sid and p.in_ring(sid))
    if p.is_leader(m):
        return _transfer(p, op, m)
    if p.status.primordial_member == m.name:
        successor = next((x for x in p.members(JOINED) if x.name != m.name and p.healthy(x)), None)
        if successor is None:
            successor = next((x for x in p.members(JOINED) if x.name != m.name), None)
        if successor is not None:
            p.set_status(primordial_member=successor.name)
            p.set_op(op.at_step("RepointPrimordial", p.now))
            return None
    for sid in in_ring:
        p.set_op(op.at_step("Decommission", p.now))
        why = p.live_majority(dataclasses.replace(m, scm_id=sid), leaves_ring=True)
        if why is not None:
            p.note("WaitingForQuorum", why)
            return None
        return Action(
            DECOMMISSION, m.name, "DecommissioningMember",
            f"decommissioning SCM {m.name} (scmId {sid}) from the ring ({op.reason or op.type})",
            params={"scm_id": sid},
        )
    pod = p.obs.pods.get(m.name)
    if pod is not None:
        p.set_op(op.at_step("DeletePod", p.now))
        if pod.deleting:
            return None
        return Action(DELETE_POD, m.name, "DeletingPod", f"deleting Pod {m.name} (member left the ring)")
    pvc_name = naming.pvc_name(m.name)
    pvc = p.obs.pvcs.get(pvc_name)
    if pvc is not None and not pvc.deleting:
        p.set_op(op.at_step("Volume", p.now))
        if op.type == OP_REPLACE and op.reason != "VolumeLost":
            return Action(
                RETAIN_PVC, pvc_name, "RetainingVolume",
                f"keeping PersistentVolumeClaim {pvc_name} of replaced member {m.name} for inspection (no longer owned "
                "by the cluster; delete it yourself when it is not needed)",
            )
        return Action(DELETE_PVC, pvc_name, "DeletingVolume", f"deleting PersistentVolumeClaim {pvc_name} of {m.name}")
    secret_name = naming.member_tls_secret_name(m.name)
    if secret_name in p.obs.secrets:
        p.set_op(op.at_step("RevokeCertificate", p.now))
        secret = p.obs.secrets[secret_name]
        serial = secret.certificate_serial or m.certificate_serial
        if serial and not secret.revoked:
            # SCM refuses the certificate from now on, on every member (its revocation set is replicated); the
            # serial alone names it: operator-issued serials are random above 2^63, SCM's own a sequence below
            return Action(
                REVOKE_CERTIFICATE, secret_name, "RevokingCertificate",
                f"revoking the certificate of {m.name} (serial {serial}) in SCM",
                params={"serial": str(int(serial, 16)), "reason": REASON_CESSATION_OF_OPERATION},
            )
        if serial and serial not in p.status.security.revoked_serials:
            p.set_status(
                security=dataclasses.replace(
                    p.status.security, revoked_serials=(*p.status.security.revoked_serials, serial)
                )
            )
        return Action(
            DELETE_SECRET, secret_name, "DeletingCertificateSecret",
            f"deleting Secret {secret_name} of {m.name} (its certificate, serial {serial}, is revoked)",
        )
    return _finish_remove(p, op, m)


def _finish_remove(p: _Pass, op: Operation, m: MemberStatus | None) -> Action | None:
    if m is not None:
        p.status = p.status.without_member(m.name)
    if op.type == OP_REPLACE and op.replacement:
        replacement = p.status.member(op.replacement)
        if replacement is None:
            idx = naming.member_index(p.ref.name, op.replacement)
            replacement = MemberStatus(name=op.replacement, index=idx if idx is not None else 0, state=JOINING)
            p.set_member(replacement)
            p.set_status(next_member_index=max(p.status.next_member_index, replacement.index + 1))
        p.set_op(
            Operation(
                OP_ADD, replacement.name, started_at=p.now, reason="Replacement",
                message=f"replacing {op.member}",
            )
        )
        return None
    p.set_op(None)
    return None


def _continue_roll(p: _Pass, op: Operation) -> Action | None:
    m = p.status.member(op.member)
    if m is None:
        p.set_op(None)
        return None
    if p.pvc_gone(m):
        p.set_op(None)  # its volume is gone: a replacement (a new operation) takes over, with the new revision
        return None
    pod = p.obs.pods.get(m.name)
    if pod is None:
        p.set_op(op.at_step("WaitForPod", p.now))
        return None  # the repairs create it with the current revision
    revision = p.member_revision(m.name)
    if pod.revision != revision:
        if pod.deleting:
            return None
        if p.is_leader(m) and len(p.members(JOINED)) > 1:
            return _transfer(p, op, m)
        why = p.restart_blocked(m) if len(p.members(JOINED)) > 1 else None
        if why is not None:
            # nothing of this step has happened yet: give the roll up for now, so that a replacement of a lost
            # member can go first; the roll starts again (same order) once a live majority allows it
            p.note("WaitingForQuorum", why)
            p.set_op(None)
            return None
        if not _admissible(p, f"the new Pod of {m.name}", builders.build_pod(p.ref, p.spec, m.name,
                                                                          builders.INIT_MODE_BOOTSTRAP)["spec"]):
            p.set_op(None)  # never delete a member whose new Pod the namespace would refuse
            return None
        p.set_op(op.at_step("Restart", p.now))
        return Action(
            DELETE_POD, m.name, "RollingMember",
            f"restarting {m.name} with revision {revision} (was {pod.revision})",
        )
    leader = p.leader()
    if p.healthy(m) and (leader is None or not _serving(p, leader) or _serving(p, m)):
        # done once ready, caught up and, while the ring serves, out of safemode (a possible next leader)
        p.set_op(None)
        return None
    p.set_op(op.at_step("WaitForReady", p.now))
    if p.timed_out(p.op or op):
        p.note(
            "OperationStuck",
            f"member {m.name} did not become ready with revision {revision} (image {p.spec.image}): "
            f"{p.pod_trouble(m.name)}; the roll stops here and the other members keep serving. Fix or revert the "
            "change and the member is rolled again",
        )
    return None


def _continue(p: _Pass) -> Action | None:
    op = p.op
    if op is None:
        return None
    if op.type == OP_BOOTSTRAP:
        return _continue_bootstrap(p, op)
    if op.type == OP_ADD:
        return _continue_add(p, op)
    if op.type in (OP_REMOVE, OP_REPLACE):
        return _continue_remove(p, op)
    if op.type == OP_ROLL:
        return _continue_roll(p, op)
    if op.type == OP_RECOVER:
        return _continue_recover(p, op)
    if op.type == OP_SWITCHOVER:
        return _continue_switchover(p, op)
    p.note("UnknownOperation", f"status.currentOperation.type {op.type!r} is unknown; clearing it")
    p.set_op(None)
    return None


def _recovery_request(p: _Pass) -> None:
    """The ``ozone-scm.io/recover-from: <member>`` annotation: start ``RecoverQuorum`` from that member, or refuse
    (``Degraded`` ``RecoveryRefused`` and its Event; nothing is done) while the ring has a leader or a majority of the
    members is Ready, when the member is not a joined one, or when its volume is gone. Starting abandons an
    operation in progress (without a quorum it cannot finish) and marks every other member ``Leaving``, so that no
    repair brings them back on their old data."""
    name = p.obs.recover_from
    if not name or (p.op is not None and p.op.type == OP_RECOVER):
        return
    ann = f"{naming.ANN_RECOVER_FROM}={name}"
    joined = p.members(JOINED)
    m = p.status.member(name)
    why = None
    if m is None or m.state != JOINED:
        why = f"{name} is not a joined member (joined: {', '.join(x.name for x in joined) or 'none'})"
    elif p.pvc_gone(m):
        why = f"the volume of {name} is gone; name a member that still has its data"
    elif p.obs.ring is not None:
        leader = p.leader()
        why = f"the ring has a leader ({leader.name if leader else p.obs.ring.leader_scm_id}), so it has a quorum"
    else:
        ready = [x.name for x in joined if (pod := p.obs.pods.get(x.name)) is not None and pod.ready
                 and not pod.deleting]
        if len(ready) >= majority(len(joined)):
            why = (f"{len(ready)} of {len(joined)} members are Ready ({', '.join(ready)}), a majority; restart or "
                   "repair the others instead")
    if why is not None:
        p.note("RecoveryRefused", f"annotation {ann} refused: {why}. Nothing was done; remove the annotation")
        return
    assert m is not None
    abandoned = p.op
    others = [x for x in p.status.members if x.name != name]
    for x in others:
        p.set_member(dataclasses.replace(x, state=LEAVING))
    lost = ", ".join(x.name for x in others) or "none"
    p.set_op(Operation(
        OP_RECOVER, name, started_at=p.now, reason="QuorumLost",
        message=(f"recovering the ring from {name} (scm --recover); lost members {lost} are stopped and their "
                 "volumes kept for inspection" + (f"; abandoned {abandoned.type} of {abandoned.member}"
                                                  if abandoned is not None else "")),
    ))


def _continue_recover(p: _Pass, op: Operation) -> Action | None:
    """RecoverQuorum: stop the lost members (their Pods deleted), restart the survivor with ``scm --recover`` (its
    membership becomes itself alone; its whole log is kept), then once it leads its one-member ring restart it with
    ``scm --bootstrap`` (so no later restart runs ``--recover`` again); keep the lost members' volumes out of the
    cluster's view (retained, for inspection) and delete their certificate Secrets; remove the annotation and forget
    the lost members. The ring then grows back by the usual scale-up (``scm --bootstrap``, one member at a time)."""
    s = p.status.member(op.member)
    if s is None:
        p.set_op(None)
        return None
    others = [x for x in p.status.members if x.name != s.name]
    for x in others:
        pod = p.obs.pods.get(x.name)
        if pod is not None:
            p.set_op(op.at_step("StopOthers", p.now))
            if pod.deleting:
                return None
            return Action(DELETE_POD, x.name, "StoppingLostMember",
                          f"stopping {x.name}: the ring is recovered from {s.name}, and {x.name} must never rejoin "
                          "on its old data")
    pod = p.obs.pods.get(s.name)
    if op.step in (None, "StopOthers", "StopSurvivor"):
        if pod is not None and pod.init_mode != builders.INIT_MODE_RECOVER:
            p.set_op(op.at_step("StopSurvivor", p.now))
            if pod.deleting:
                return None
            return Action(DELETE_POD, s.name, "StoppingSurvivor",
                          f"stopping {s.name} to run scm --recover on its data")
        p.set_op(op.at_step("Recover", p.now))
        return None  # the repairs create its Pod, with the recover init container
    ring = p.obs.ring
    if op.step == "Recover":
        if pod is None or pod.init_mode != builders.INIT_MODE_RECOVER or pod.deleting:
            return None
        alone = ring is not None and ring.leader_scm_id == s.scm_id and [v.scm_id for v in ring.voters] == [s.scm_id]
        if alone and pod.ready:
            p.set_op(op.at_step("Restart", p.now))
            return Action(DELETE_POD, s.name, "RestartingSurvivor",
                          f"{s.name} leads the recovered one-member ring; restarting it with scm --bootstrap")
        if p.timed_out(op):
            p.note("OperationStuck", f"{s.name} has not come back as the leader of a one-member ring after "
                                     f"scm --recover: {p.pod_trouble(s.name)}")
        return None
    if pod is None or pod.init_mode == builders.INIT_MODE_RECOVER or not p.healthy(s):
        if p.timed_out(op):
            p.note("OperationStuck", f"{s.name} did not become ready after the recovery: {p.pod_trouble(s.name)}")
        return None
    for x in others:  # out of the ring now: keep their data out of the cluster's view, drop their certificates
        pvc = p.obs.pvcs.get(naming.pvc_name(x.name))
        if pvc is not None and not pvc.deleting:
            return Action(RETAIN_PVC, pvc.name, "RetainingVolume",
                          f"keeping PersistentVolumeClaim {pvc.name} of lost member {x.name} for inspection (no "
                          "longer the cluster's; delete it yourself when it is not needed)")
        secret = naming.member_tls_secret_name(x.name)
        if secret in p.obs.secrets:
            return Action(DELETE_SECRET, secret, "DeletingCertificateSecret",
                          f"deleting Secret {secret} of lost member {x.name} (no longer in the ring)")
    if p.obs.recover_from is not None:
        return Action(REMOVE_ANNOTATION, p.ref.name, "RecoveryAnnotationRemoved",
                      f"the ring is recovered from {s.name}; removing annotation {naming.ANN_RECOVER_FROM}",
                      params={"key": naming.ANN_RECOVER_FROM})
    for x in others:
        p.status = p.status.without_member(x.name)
    p.set_status(primordial_member=s.name)
    p.set_op(None)
    return None


def _start_replace(p: _Pass, m: MemberStatus, reason: str, why: str) -> None:
    replacement = naming.member_name(p.ref.name, max(p.status.next_member_index, *(x.index + 1 for x in p.status.members)))
    idx = naming.member_index(p.ref.name, replacement) or 0
    p.set_status(next_member_index=idx + 1)
    p.set_member(dataclasses.replace(m, state=LEAVING))
    p.set_op(
        Operation(OP_REPLACE, m.name, started_at=p.now, replacement=replacement, reason=reason,
                  message=f"{why}; replacing it with {replacement}")
    )


def _new_operation(p: _Pass) -> Action | None:
    joined = p.members(JOINED)
    ring = p.obs.ring
    if p.status.cluster_id is None:
        return None
    if ring is None:
        p.note("NoLeader", "no SCM reports a leader; waiting for the ring to elect one before any membership change")
        return None
    healthy = [m for m in joined if p.healthy(m)]

    # 1. replacement (one at a time, never breaking the majority, never the leader without a transfer first)
    for m in joined:
        why = None
        reason = None
        recorded = m.scm_id
        observed = p.obs.scms.get(m.name)
        if p.pvc_gone(m):
            why, reason = f"the volume of member {m.name} is gone", "VolumeLost"
        elif observed is not None and recorded and observed.scm_id != recorded:
            why, reason = (
                f"member {m.name} now reports scmId {observed.scm_id} instead of {recorded} (its volume was replaced)",
                "IdentityChanged",
            )
        else:
            timeout = p.spec.membership.replace_after
            if timeout.total_seconds() > 0 and not p.healthy(m):
                since = m.out_of_quorum_since
                if since is not None and p.now - since > timeout:
                    why = f"member {m.name} has been out of the quorum since {since.isoformat()} ({p.pod_trouble(m.name)})"
                    reason = "OutOfQuorum"
        if why is None or reason is None:
            continue
        others_healthy = [x for x in healthy if x.name != m.name]
        if len(others_healthy) < majority(max(len(joined) - 1, 1)):
            p.note("WaitingForQuorum", f"{why}, but replacing it now would leave no caught-up majority; waiting")
            return None
        _start_replace(p, m, reason, why)
        return None

    # 2. rolling: stale Pods, unready ones first, followers next, the leader last
    stale = [
        m for m in joined
        if (pod := p.obs.pods.get(m.name)) is not None and not pod.deleting
        and pod.revision != p.member_revision(m.name)
    ]
    if stale:
        stale.sort(key=lambda m: (p.healthy(m), p.is_leader(m), -(m.lag or 0), m.index))
        m = stale[0]
        why = p.restart_blocked(m) if len(joined) > 1 else None
        if why is not None:
            p.note("WaitingForQuorum", f"before rolling {m.name}: {why}")
            return None
        if not _admissible(p, f"the new Pod of {m.name}", builders.build_pod(p.ref, p.spec, m.name,
                                                                          builders.INIT_MODE_BOOTSTRAP)["spec"]):
            return None
        asked = p.directives.member_restarted_at(m.name) or p.directives.restarted_at
        p.set_op(Operation(OP_ROLL, m.name, started_at=p.now, reason="RevisionChanged",
                           message=f"revision {m.revision} -> {p.member_revision(m.name)}"
                           + (f" (restart asked at {asked})" if asked else "")))
        return None

    if p.spec.replicas not in ALLOWED_REPLICAS:
        return None
    # 3. scale up, one member at a time, only with every member ready and caught up
    if len(joined) < p.spec.replicas:
        if len(healthy) < len(joined):
            p.note("WaitingForMembers", "waiting for every member to be ready and caught up before adding one")
            return None
        m = p.allocate_member(JOINING)
        p.set_op(Operation(OP_ADD, m.name, started_at=p.now, reason="ScaleUp",
                           message=f"{len(joined)} -> {len(joined) + 1} members"))
        return None
    # 4. scale down, one member at a time, keeping a caught-up majority
    if len(joined) > p.spec.replicas:
        victims = sorted(
            joined,
            key=lambda m: (p.healthy(m), m.name == p.status.primordial_member, p.is_leader(m), -m.index),
        )
        m = victims[0]
        why = p.live_majority(m, leaves_ring=True)
        if why is not None:
            p.note("WaitingForQuorum", f"before scaling down: {why}")
            return None
        p.set_member(dataclasses.replace(m, state=LEAVING))
        p.set_op(Operation(OP_REMOVE, m.name, started_at=p.now, reason="ScaleDown",
                           message=f"{len(joined)} -> {len(joined) - 1} members"))
        return None
    return None


# ---------------------------------------------------------------------------------------------------------------
# the entry point
# ---------------------------------------------------------------------------------------------------------------


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
        p.set_op(Operation(OP_BOOTSTRAP, m.name, started_at=p.now, reason="Create",
                           message=f"{m.name} is the primordial SCM (scm --init)"))
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


# ---------------------------------------------------------------------------------------------------------------
# requests from annotations: hibernation and switchover
# ---------------------------------------------------------------------------------------------------------------


def _hibernation_wanted(status: ClusterStatus, directives: Directives) -> bool:
    """Hibernation is on when the annotation says so (an unreadable value keeps the recorded state), and only once
    the ring has formed (there is nothing to keep before)."""
    if status.cluster_id is None:
        return False
    if directives.hibernation is not None:
        return directives.hibernation
    recorded = status.condition("Hibernated")
    return recorded is not None and recorded.status == "True"


def _hibernation(p: _Pass) -> Action | None:
    """Delete the member Pods one per pass, followers first and the leader last; volumes, Secrets, Services and the
    ConfigMap stay, so ``off`` starts the same ring again (same cluster ID, Raft logs and every committed state)."""
    running = [m for m in p.status.members if (pod := p.obs.pods.get(m.name)) is not None and not pod.deleting]
    if not running:
        return None
    running.sort(key=lambda m: (p.is_leader(m), m.index))
    m = running[0]
    return Action(
        DELETE_POD, m.name, "Hibernating",
        f"deleting Pod {m.name} (hibernation: its volume {naming.pvc_name(m.name)} is kept)",
    )


def _clear_switchover(p: _Pass, reason: str, message: str, *, warning: bool) -> Action:
    return Action(CLEAR_ANNOTATION, p.ref.name, reason, message, params={"key": ANN_SWITCHOVER_TO},
                  event_type="Warning" if warning else "Normal")


def _switchover_refusal(p: _Pass, target: str) -> str | None:
    """Why leadership cannot move to ``target`` now, or None. Only a joined voter that is ready, caught up, live and
    -- while the ring serves -- out of safemode may lead."""
    m = p.status.member(target)
    names = ", ".join(x.name for x in p.members(JOINED))
    if m is None:
        return f"{target} is not a member of {p.ref.name} (members: {names})"
    if m.state != JOINED:
        return f"{target} is {m.state}, not a joined voter"
    if not p.healthy(m):
        return f"{target} is not a caught-up voter: {p.pod_trouble(target)}"
    leader = p.leader()
    if leader is not None and _serving(p, leader) and not _serving(p, m):
        return f"{target} is in safemode; as leader it would refuse every block allocation"
    return None


def _start_switchover(p: _Pass, target: str) -> Action | None:
    leader = p.leader()
    if leader is not None and leader.name == target:
        return _clear_switchover(p, "SwitchoverDone", f"{target} is the leader (term {p.status.term})", warning=False)
    why = _switchover_refusal(p, target)
    if why is not None:
        return _clear_switchover(p, "SwitchoverRefused", f"switchover to {target} refused: {why}", warning=True)
    if leader is None:
        p.note("NoLeader", f"no SCM reports a leader; the switchover to {target} waits for one")
        return None
    m = p.status.member(target)
    assert m is not None
    p.set_op(Operation(OP_SWITCHOVER, target, started_at=p.now, step="TransferLeadership", step_started_at=p.now,
                       reason="Requested", message=f"leadership {leader.name} -> {target}"))
    return Action(
        TRANSFER_LEADERSHIP, leader.name, "TransferringLeadership",
        f"transferring leadership from {leader.name} to {target} (switchover asked by {ANN_SWITCHOVER_TO})",
        params={"to_scm_id": m.scm_id, "to": target, "from_scm_id": leader.scm_id},
    )


def _continue_switchover(p: _Pass, op: Operation) -> Action | None:
    target = op.member
    if p.directives.switchover_to != target:
        p.set_op(None)  # the request was withdrawn or replaced; a new one starts afresh
        return None
    leader = p.leader()
    if leader is not None and leader.name == target:
        p.set_op(None)
        return _clear_switchover(p, "SwitchoverDone", f"{target} is the leader (term {p.status.term}); "
                                 f"{op.message or ''}".rstrip("; "), warning=False)
    why = _switchover_refusal(p, target)
    if why is None and p.now - op.started_at > p.spec.membership.operation_timeout:
        why = (f"{target} did not become the leader within membership.operationTimeout "
               f"({p.spec.membership.operation_timeout})")
    if why is not None:
        p.set_op(None)
        return _clear_switchover(p, "SwitchoverFailed", f"switchover to {target} failed: {why}", warning=True)
    if leader is None or (op.step_started_at is not None and p.now - op.step_started_at < SWITCHOVER_RETRY):
        return None  # an election or the transfer is under way
    m = p.status.member(target)
    assert m is not None
    p.set_op(dataclasses.replace(op, step="TransferLeadership", step_started_at=p.now))
    return Action(
        TRANSFER_LEADERSHIP, leader.name, "TransferringLeadership",
        f"transferring leadership from {leader.name} to {target} again (switchover)",
        params={"to_scm_id": m.scm_id, "to": target, "from_scm_id": leader.scm_id},
    )
