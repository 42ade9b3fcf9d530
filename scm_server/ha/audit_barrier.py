"""AuditBarrierStateManager: a replicated no-op marker at which every SCM captures an audit snapshot.

Why a Raft entry: an audit compares the replicated tables of every SCM "at the same applied
index". Asking each SCM for "your state now" gives different indexes while writes go on (block
allocation batches, container creation, the ReplicationManager's transitions). A marker in the
log is the classic fix (a Chandy-Lamport-style cut, made trivial by the total order Raft gives):
the leader proposes ``auditBarrier(barrierId, expiresAtMs)``; every SCM applies it at the same
index, and at that moment, before the next entry, captures its snapshot
(:class:`scm_server.server.audit_export_service.AuditSnapshotRegistry`).

The body changes no replicated state (it writes nothing to the transaction buffer), so it is
trivially deterministic and idempotent: applying it again after a restart (log replay) only
offers listeners a barrier they may ignore (it has expired, or nobody asked for it). Listeners
are side effects that must never fail the apply: an exception there is logged and swallowed,
because a fatal apply error would stop the SCM.

Called by: the dispatcher on apply (every SCM) and, through ``@replicate``, the audit export
service on the leader. It must not touch scm.db tables or any manager.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha.replicate import RequestType, replicate
from scm_server.ha.scm_ha_manager_api import SCMHAManager

LOG = logging.getLogger(__name__)

BarrierListener = Callable[[str, int], None]


class AuditBarrierStateManager:
    def __init__(self, ha_manager: SCMHAManager | None) -> None:
        self.ha_manager = ha_manager
        self._listeners: list[BarrierListener] = []
        self.applied = 0  # barriers applied by this process (tests, metrics)

    def add_listener(self, listener: BarrierListener) -> None:
        """``listener(barrier_id, expires_at_ms)`` while the barrier entry is being applied."""
        self._listeners.append(listener)

    def remove_listener(self, listener: BarrierListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def reinitialize(self) -> None:
        return None  # no replicated state

    @replicate(RequestType.AUDIT_BARRIER)
    def audit_barrier(self, barrier_id: str, expires_at_ms: int) -> None:
        if not barrier_id:
            raise SCMException(ResultCodes.INVALID_REQUEST, "audit barrier id must not be empty")
        self.applied += 1
        for listener in list(self._listeners):
            try:
                listener(barrier_id, expires_at_ms)
            except Exception:  # a side effect: never let it fail (and so stop) the apply
                LOG.exception("audit barrier %s: listener failed; no snapshot captured here", barrier_id)
