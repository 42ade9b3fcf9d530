"""Single-server membership changes as pure functions over :class:`~.types.ConfState`.

A configuration takes effect when its entry is *appended* (thesis §4.1), so both the core
(on append, on truncation roll-back, on restart) and storage (``initial_state``) need the
same rule for "configuration after this change". It lives here, once.
"""

from __future__ import annotations

from scm_server.raft.core.types import ConfChange, ConfChangeType, ConfState, NodeId


def conf_state_after(cs: ConfState, cc: ConfChange) -> ConfState:
    """The configuration after applying one change. Total: never raises (followers apply what the leader sent)."""
    voters = set(cs.voters)
    learners = set(cs.learners)
    addresses = dict(cs.addresses)
    nid = cc.node_id
    if cc.type == ConfChangeType.ADD_NODE:
        learners.discard(nid)
        voters.add(nid)
    elif cc.type == ConfChangeType.ADD_LEARNER:
        voters.discard(nid)
        learners.add(nid)
    else:  # REMOVE_NODE
        voters.discard(nid)
        learners.discard(nid)
        addresses.pop(nid, None)
    if cc.type != ConfChangeType.REMOVE_NODE and cc.address:
        addresses[nid] = cc.address
    return ConfState(
        voters=tuple(sorted(voters)),
        learners=tuple(sorted(learners)),
        addresses=tuple(sorted(addresses.items())),
    )


def validate_conf_change(cs: ConfState, cc: ConfChange, leader: NodeId) -> str | None:
    """Why a leader must refuse this change, or None if it is a valid single-server change."""
    nid = cc.node_id
    if not nid:
        return "conf change names no node"
    if cc.type == ConfChangeType.ADD_NODE and nid in cs.voters:
        return f"node {nid} is already a voter"
    if cc.type == ConfChangeType.ADD_LEARNER:
        if nid in cs.learners:
            return f"node {nid} is already a learner"
        if nid == leader:
            return f"cannot demote the leader {nid} to learner; transfer leadership first"
    if cc.type == ConfChangeType.REMOVE_NODE:
        if nid not in cs.voters and nid not in cs.learners:
            return f"node {nid} is not a member"
        if cs.voters == (nid,):
            return f"cannot remove {nid}: it is the only voter"
    if cc.type == ConfChangeType.ADD_LEARNER and nid in cs.voters and len(cs.voters) == 1:
        return f"cannot demote {nid}: it is the only voter"
    return None


def describe(cs: ConfState) -> str:
    """Compact text form used in the core's narrative log, e.g. ``voters=(1 2 3) learners=(4)``."""
    text = "voters=(" + " ".join(cs.voters) + ")"
    if cs.learners:
        text += " learners=(" + " ".join(cs.learners) + ")"
    return text
