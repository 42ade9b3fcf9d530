"""The pass: what one planning pass works on and the helpers every concern shares.

``_Pass`` holds the cluster, its effective spec, the status being written (changed in place as the concerns
decide), the observations and the notes for ``Degraded``; its methods answer the questions every concern asks
(is a member healthy, caught up, the leader; would stopping it keep a live majority). Then the status refreshed
from what was observed, the cluster IDs reported, Pod Security admissibility and safemode. Pure."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from ozone_scm_operator import builders, naming, podsecurity
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.directives import Directives
from ozone_scm_operator.model import (
    CREATING,
    JOINED,
    JOINING,
    LIVE_HEARTBEATS,
    ClusterStatus,
    MemberStatus,
    Observed,
    Operation,
    PeerObs,
    RingObs,
)
from ozone_scm_operator.planner.actions import QuorumGuard
from ozone_scm_operator.spec import (
    ClusterSpec,
    SpecProblem,
)


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
            and ring.answering(peer)
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

    def _quorum_count(
        self, m: MemberStatus, *, leaves_ring: bool
    ) -> tuple[int, int, list[tuple[str, str]], list[str]] | None:
        """(size of the voting configuration in force during the step, votes needed, the voters that remain counted live, caught up and ready as (member, scmId), why each
        other one is not), or None when the step takes no vote from the quorum. Needs the leader's view."""
        ring = self.obs.ring
        assert ring is not None
        voters = ring.voters
        if leaves_ring and all(v.scm_id != m.scm_id for v in voters):
            return None  # a learner (or an identity already gone) leaving takes no vote from the quorum
        remaining = [v for v in voters if v.scm_id != m.scm_id]
        size = len(remaining) if leaves_ring else len(voters)
        if size == 0:
            return None
        by_id = {x.scm_id: x for x in self.status.members if x.scm_id}
        good: list[tuple[str, str]] = []
        bad: list[str] = []
        for v in remaining:
            member = by_id.get(v.scm_id)
            name = member.name if member is not None else f"scmId {v.scm_id}"
            if member is None:
                bad.append(f"{name} is not a recorded member")
            elif not ring.live(v):
                bad.append(_silence(ring, name, v))
            elif not self.healthy(member):
                bad.append(f"{name}: {self.pod_trouble(name)}")
            else:
                good.append((name, v.scm_id))
        return size, majority(size), good, bad

    def _guard(self, m: MemberStatus, voters: list[tuple[str, str]], need: int) -> QuorumGuard | None:
        ring = self.obs.ring
        leader = self.leader()
        if ring is None or leader is None or not voters:
            return None
        return QuorumGuard(
            stopping=m.name, leader=leader.name, leader_scm_id=ring.leader_scm_id, voters=tuple(voters), need=need,
            max_lag=self.spec.membership.max_catch_up_lag, live_bound=ring.live_bound,
        )

    def quorum_check(self, m: MemberStatus, *, leaves_ring: bool) -> tuple[str | None, QuorumGuard | None]:
        """Why stopping or removing ``m`` now would break the quorum (None when it is safe), and what the effect
        checks again right before the step (None: nothing to re-check; the voters counted here, from one count).

        Checked before every step that stops a member (a roll's restart) or takes it out of the ring (decommission in
        a scale-down or replacement), from the leader's own view: the voters that remain -- all but ``m`` -- must
        include a majority of the voting configuration in force during the step (the whole ring for a restart, the
        ring without ``m`` for a removal) that are live (answered the leader within a few heartbeat intervals,
        ``RingObs.live``), caught up (lag at most maxCatchUpLag) and whose Pods are ready. Pod readiness alone is
        not enough: a frozen or partitioned SCM keeps a ready Pod for seconds."""
        if self.obs.ring is None:
            return f"no leader reports the ring, so stopping {m.name} cannot be judged safe", None
        counted = self._quorum_count(m, leaves_ring=leaves_ring)
        if counted is None:
            return None, None
        size, need, good, bad = counted
        if len(good) >= need:
            return None, self._guard(m, good, need)
        verb = "removing" if leaves_ring else "restarting"
        names = [n for n, _ in good]
        return (
            f"{verb} {m.name} now would leave {len(good)} live, caught-up voter{'s' if len(good) != 1 else ''} "
            f"({', '.join(names) or 'none'}) where the ring needs {need} of {size}: {'; '.join(bad)}; waiting"
        ), None

    def live_majority(self, m: MemberStatus, *, leaves_ring: bool) -> str | None:
        """``quorum_check``'s reason alone."""
        return self.quorum_check(m, leaves_ring=leaves_ring)[0]

    def restart_blocked(self, m: MemberStatus) -> tuple[str | None, QuorumGuard | None]:
        """Why a roll must not restart ``m`` now (None when it may), and what the effect checks again right before
        the restart (None: nothing to re-check).

        A restart needs the voters that remain to be a live, caught-up majority (``quorum_check``). The one
        exception is a member that is itself not live and caught up while every other member is: it adds nothing to
        the quorum, and restarting it is how a broken revision is repaired (in a two-voter ring the others alone are
        never a majority). A member that merely looks unhealthy for a moment -- lagging under load, its Pod briefly
        unready, a leader view not yet read -- is NOT a licence to restart it while another voter is frozen or lost:
        that would leave no quorum. Without a leader's view, an unhealthy member may be restarted only when no other
        member has a ready Pod (no quorum serves anyway: a ring whose every member crashes on a bad image)."""
        why, guard = self.quorum_check(m, leaves_ring=False)
        ring = self.obs.ring
        if why is None:
            return None, guard
        if self.healthy(m):
            return why, None
        others = [x for x in self.status.members if x.name != m.name and x.state == JOINED]
        if ring is None:
            ready = [x.name for x in others if (pod := self.obs.pods.get(x.name)) is not None and pod.ready
                     and not pod.deleting]
            return (why if ready else None), None
        by_id = {x.scm_id: x for x in self.status.members if x.scm_id}
        kept: list[tuple[str, str]] = []
        for v in ring.voters:
            if v.scm_id == m.scm_id:
                continue
            x = by_id.get(v.scm_id)
            if x is None or not ring.live(v) or not self.healthy(x):
                return why, None  # another voter is not live too: restarting m as well leaves even less
            kept.append((x.name, v.scm_id))
        return None, self._guard(m, kept, len(kept))  # every other voter must still answer right before

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


def _silence(ring: RingObs, name: str, v: PeerObs) -> str:
    """Why voter ``v`` (member ``name``) does not count as live, for a WaitingForQuorum message."""
    if v.last_contact is None:
        return f"{name} has not answered the leader in its term"
    bound = ring.live_bound or 0
    how = (f"{LIVE_HEARTBEATS} heartbeat intervals of {ring.heartbeat_interval:g}s"
           if ring.heartbeat_interval is not None and bound < (ring.election_timeout or bound + 1)
           else "one election timeout")
    return f"{name} has not answered the leader for {v.last_contact:.3g}s (a live member answers within {bound:g}s, {how})"


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


def _serving(p: _Pass, m: MemberStatus) -> bool:
    """The member's SCM answered that it is out of safemode (an SCM in safemode refuses block allocations)."""
    scm = p.obs.scms.get(m.name)
    return scm is not None and scm.in_safe_mode is False
