"""Requests from annotations (concern 7): hibernation (member Pods deleted, followers first, volumes kept) and a
switchover to a named member (refused unless it is a caught-up voter; the request cleared when done). Pure."""

from __future__ import annotations

import dataclasses
import datetime

from ozone_scm_operator import naming
from ozone_scm_operator.directives import ANN_SWITCHOVER_TO, Directives
from ozone_scm_operator.model import (
    JOINED,
    OP_SWITCHOVER,
    ClusterStatus,
    Operation,
)
from ozone_scm_operator.planner.actions import (
    Action,
    ClearAnnotation,
    DeletePod,
    TransferLeadership,
)
from ozone_scm_operator.planner.passes import _Pass, _serving

SWITCHOVER_RETRY = datetime.timedelta(seconds=10)  # a transfer whose target does not lead by then is asked again


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
    return DeletePod(
        target=m.name,
        reason="Hibernating",
        message=f"deleting Pod {m.name} (hibernation: its volume {naming.pvc_name(m.name)} is kept)",
    )


def _clear_switchover(p: _Pass, reason: str, message: str, *, warning: bool) -> Action:
    return ClearAnnotation(
        target=p.ref.name,
        reason=reason,
        message=message,
        key=ANN_SWITCHOVER_TO,
        event_type="Warning" if warning else "Normal",
    )


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
    return TransferLeadership(
        target=leader.name,
        reason="TransferringLeadership",
        message=f"transferring leadership from {leader.name} to {target} (switchover asked by {ANN_SWITCHOVER_TO})",
        to_scm_id=m.scm_id,
        to=target,
        from_scm_id=leader.scm_id,
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
    return TransferLeadership(
        target=leader.name,
        reason="TransferringLeadership",
        message=f"transferring leadership from {leader.name} to {target} again (switchover)",
        to_scm_id=m.scm_id,
        to=target,
        from_scm_id=leader.scm_id,
    )
