"""Operations (concerns 6 and 8): continuing the one in progress (Bootstrap, AddMember, RemoveMember, ReplaceMember,
RollMember, and through their modules RecoverQuorum and Switchover), each a small state machine over observed
facts; and starting a new one: replace, roll, scale up, scale down. Pure."""

from __future__ import annotations

import dataclasses

from ozone_scm_operator import builders, naming
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
    MemberStatus,
    Operation,
)
from ozone_scm_operator.planner.actions import (
    REASON_CESSATION_OF_OPERATION,
    Action,
    Decommission,
    DeletePod,
    DeletePVC,
    DeleteSecret,
    RetainPVC,
    RevokeCertificate,
    TransferLeadership,
)
from ozone_scm_operator.planner.passes import _admissible, _Pass, _serving, majority
from ozone_scm_operator.planner.recovery import _continue_recover
from ozone_scm_operator.planner.switchover import _continue_switchover
from ozone_scm_operator.spec import (
    ALLOWED_REPLICAS,
)


def _created_from(p: _Pass, init_mode: str | None) -> str:
    if init_mode == builders.INIT_MODE_MIGRATE and p.spec.bootstrap.from_ozone is not None:
        return f"migrated from Ozone's SCM (PersistentVolumeClaim {p.spec.bootstrap.from_ozone.claim_name})"
    return f"restored from {p.spec.bootstrap.from_backup}"


def _continue_bootstrap(p: _Pass, op: Operation) -> Action | None:
    m = p.status.member(op.member)
    if m is None:
        p.set_op(None)
        return None
    scm = p.obs.scms.get(m.name)
    pod = p.obs.pods.get(m.name)
    if (scm is not None and scm.is_leader and pod is not None and pod.ready
            and pod.init_mode in builders.ONE_SHOT_INIT_MODES):
        # restored from a backup (or migrated from Ozone's SCM): record the ring, then restart the member with
        # --bootstrap, so that no later start of its Pod runs --restore (or the migration) over its own data again
        p.set_status(cluster_id=scm.cluster_id)
        p.set_member(dataclasses.replace(m, scm_id=scm.scm_id, cluster_id=scm.cluster_id))
        p.set_op(op.at_step("Restart", p.now))
        if pod.deleting:
            return None
        return DeletePod(
            target=m.name,
            reason="RestartingRestoredMember",
            message=f"{m.name} leads the ring {_created_from(p, pod.init_mode)} (cluster {scm.cluster_id}); "
                    "restarting it with scm --bootstrap",
        )
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
    return TransferLeadership(
        target=m.name,
        reason="TransferringLeadership",
        message=f"transferring leadership from {m.name} to {target.name} before {op.type} of {m.name}",
        to_scm_id=target.scm_id,
        to=target.name,
        from_scm_id=m.scm_id,
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
        leaving = dataclasses.replace(m, scm_id=sid)
        why, guard = p.quorum_check(leaving, leaves_ring=True)
        if why is not None:
            p.note("WaitingForQuorum", why)
            return None
        return Decommission(
            target=m.name,
            reason="DecommissioningMember",
            message=f"decommissioning SCM {m.name} (scmId {sid}) from the ring ({op.reason or op.type})",
            scm_id=sid,
            guard=guard,
        )
    pod = p.obs.pods.get(m.name)
    if pod is not None:
        p.set_op(op.at_step("DeletePod", p.now))
        if pod.deleting:
            return None
        return DeletePod(
            target=m.name,
            reason="DeletingPod",
            message=f"deleting Pod {m.name} (member left the ring)",
        )
    pvc_name = naming.pvc_name(m.name)
    pvc = p.obs.pvcs.get(pvc_name)
    if pvc is not None and not pvc.deleting:
        p.set_op(op.at_step("Volume", p.now))
        if op.type == OP_REPLACE and op.reason != "VolumeLost":
            return RetainPVC(
                target=pvc_name,
                reason="RetainingVolume",
                message=f"keeping PersistentVolumeClaim {pvc_name} of replaced member {m.name} for inspection (no longer owned "
                "by the cluster; delete it yourself when it is not needed)",
            )
        return DeletePVC(
            target=pvc_name,
            reason="DeletingVolume",
            message=f"deleting PersistentVolumeClaim {pvc_name} of {m.name}",
        )
    secret_name = naming.member_tls_secret_name(m.name)
    if secret_name in p.obs.secrets:
        p.set_op(op.at_step("RevokeCertificate", p.now))
        secret = p.obs.secrets[secret_name]
        serial = secret.certificate_serial or m.certificate_serial
        if serial and not secret.revoked:
            # SCM refuses the certificate from now on, on every member (its revocation set is replicated); the
            # serial alone names it: operator-issued serials are random above 2^63, SCM's own a sequence below
            return RevokeCertificate(
                target=secret_name,
                reason="RevokingCertificate",
                message=f"revoking the certificate of {m.name} (serial {serial}) in SCM",
                serial=str(int(serial, 16)),
                revocation_reason=REASON_CESSATION_OF_OPERATION,
            )
        if serial and serial not in p.status.security.revoked_serials:
            p.set_status(
                security=dataclasses.replace(
                    p.status.security, revoked_serials=(*p.status.security.revoked_serials, serial)
                )
            )
        return DeleteSecret(
            target=secret_name,
            reason="DeletingCertificateSecret",
            message=f"deleting Secret {secret_name} of {m.name} (its certificate, serial {serial}, is revoked)",
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
        why, guard = p.restart_blocked(m) if len(p.members(JOINED)) > 1 else (None, None)
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
        return DeletePod(
            target=m.name,
            reason="RollingMember",
            message=f"restarting {m.name} with revision {revision} (was {pod.revision})",
            guard=guard,
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
        why = p.restart_blocked(m)[0] if len(joined) > 1 else None
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
        started = p.members(JOINING)
        if started:  # recorded beside the primordial when the ring was created: complete the lowest first
            joiner = min(started, key=lambda r: r.index)
            p.set_op(Operation(OP_ADD, joiner.name, started_at=p.now, reason="Create",
                               message=f"{len(joined)} -> {len(joined) + 1} members ({joiner.name} started beside "
                                       "the primordial)"))
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
