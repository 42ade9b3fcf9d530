"""Quorum recovery: the ``ozone-scm.io/recover-from`` annotation starts ``RecoverQuorum`` (or is refused), and the
operation stops the lost members, runs ``scm --recover`` on the survivor and restarts it with ``--bootstrap``.
Pure."""

from __future__ import annotations

import dataclasses

from ozone_scm_operator import builders, naming
from ozone_scm_operator.model import (
    JOINED,
    LEAVING,
    OP_RECOVER,
    Operation,
)
from ozone_scm_operator.planner.actions import (
    Action,
    DeletePod,
    DeleteSecret,
    RemoveAnnotation,
    RetainPVC,
)
from ozone_scm_operator.planner.passes import _Pass, majority


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
            return DeletePod(
                target=x.name,
                reason="StoppingLostMember",
                message=f"stopping {x.name}: the ring is recovered from {s.name}, and {x.name} must never rejoin "
                          "on its old data",
            )
    pod = p.obs.pods.get(s.name)
    if op.step in (None, "StopOthers", "StopSurvivor"):
        if pod is not None and pod.init_mode != builders.INIT_MODE_RECOVER:
            p.set_op(op.at_step("StopSurvivor", p.now))
            if pod.deleting:
                return None
            return DeletePod(
                target=s.name,
                reason="StoppingSurvivor",
                message=f"stopping {s.name} to run scm --recover on its data",
            )
        p.set_op(op.at_step("Recover", p.now))
        return None  # the repairs create its Pod, with the recover init container
    ring = p.obs.ring
    if op.step == "Recover":
        if pod is None or pod.init_mode != builders.INIT_MODE_RECOVER or pod.deleting:
            return None
        alone = ring is not None and ring.leader_scm_id == s.scm_id and [v.scm_id for v in ring.voters] == [s.scm_id]
        if alone and pod.ready:
            p.set_op(op.at_step("Restart", p.now))
            return DeletePod(
                target=s.name,
                reason="RestartingSurvivor",
                message=f"{s.name} leads the recovered one-member ring; restarting it with scm --bootstrap",
            )
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
            return RetainPVC(
                target=pvc.name,
                reason="RetainingVolume",
                message=f"keeping PersistentVolumeClaim {pvc.name} of lost member {x.name} for inspection (no "
                          "longer the cluster's; delete it yourself when it is not needed)",
            )
        secret = naming.member_tls_secret_name(x.name)
        if secret in p.obs.secrets:
            return DeleteSecret(
                target=secret,
                reason="DeletingCertificateSecret",
                message=f"deleting Secret {secret} of lost member {x.name} (no longer in the ring)",
            )
    if p.obs.recover_from is not None:
        return RemoveAnnotation(
            target=p.ref.name,
            reason="RecoveryAnnotationRemoved",
            message=f"the ring is recovered from {s.name}; removing annotation {naming.ANN_RECOVER_FROM}",
            key=naming.ANN_RECOVER_FROM,
        )
    for x in others:
        p.status = p.status.without_member(x.name)
    p.set_status(primordial_member=s.name)
    p.set_op(None)
    return None
