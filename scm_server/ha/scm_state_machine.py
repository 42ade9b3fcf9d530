"""SCMStateMachine: the Raft state machine of an SCM (Ozone's ``SCMStateMachine`` on Ratis).

Where it sits: the Raft driver (:class:`scm_server.raft.server.RaftServer`) hands it batches of
committed entries; each entry is an ``SCMRatisRequestProto`` submitted by
:meth:`SCMHAManagerImpl.submit_request` on the leader. For every entry the
:class:`~scm_server.ha.dispatcher.SCMStateMachineDispatcher` runs the undecorated state-manager
method, which writes into the :class:`~scm_server.ha.transaction_buffer.SCMHADBTransactionBuffer`;
after the batch the buffer is flushed ONCE with the last entry's (term, index), so scm.db holds
the state and the applied index that produced it in one atomic LevelDB batch.

* Logical rejections (non-fatal SCMException codes) are encoded in the response
  (``errorResult``); every replica rejects identically, state untouched.
* Fatal errors (INTERNAL_ERROR / IO_EXCEPTION / anything unexpected) propagate: the Raft server
  stops and calls :meth:`notify_log_failed`, which terminates the process (Ozone's
  ``ExitUtils.terminate``): a replica that is down is recoverable, one that diverged is not.
* ``take_snapshot`` = flush: the DB is the snapshot.
* Snapshot install (notification mode): download a checkpoint of the leader's scm.db over the
  inter-SCM service, verify its sha256 and that its TransactionInfo index is not behind what this
  SCM already applied, swap the DB (backup + rollback inside
  ``SCMMetadataStore.replace_from_checkpoint``; exit if even the rollback failed), then reload every
  manager (``scm.reinitialize()``) and the buffer.
* Leadership notifications drive SCMContext through the facade's hooks (``on_become_leader``:
  context + ``SequenceIdGenerator.invalidate_batch`` + flush; ``on_leader_ready``: services may run
  once out of safemode; ``on_step_down``: services pause, no more datanode commands).

Datanode-report gate (Ozone HDDS-14989) and its liveness fix (HDDS-16132)
-------------------------------------------------------------------------
A follower must not process datanode container reports against stale replicated state (it
would record replicas of containers it does not know yet, leading to CONTAINER_NOT_FOUND /
NO_REPLICA_FOUND after a rolling restart). So, when a follower learns of a (new) leader, the HA
manager captures the leader's commit index (asked over the inter-SCM service; the leader's
no-op of its term is included, so it is never 0 after an election) as the *catch-up target*;
:attr:`dn_reports_ready` becomes true once the local applied index reaches it. The leader
itself is always ready.

Ozone's version re-evaluated the condition only when an entry was applied, so in an idle cluster
(no writes after the follower restarted) the check never ran again and the follower stayed
gated and in safemode (HDDS-16132). Here the condition is level-triggered: it is evaluated on
every apply, on every ``notify_term_index_updated`` (no-ops / conf entries) and by the HA
manager's periodic monitor task (every tick), and the target is the leader's commit index at the
time we asked, which an idle follower has typically already applied: the gate opens at once. No
extra no-op entries are needed, so idle replicas keep identical applied indexes (which the
cross-SCM digest check relies on).

StateMachineReadyRule (safemode, HA only): :attr:`is_state_machine_ready` is true once the gate
above is open, i.e. the SCM has replayed/caught up to what the cluster had committed when it
(re)joined.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from typing import Protocol

from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha import heap
from scm_server.ha.inter_scm_client import DownloadedCheckpoint
from scm_server.ha.scm_ha_manager_api import SCMHAHost
from scm_server.raft.core.types import ConfState, SnapshotMetadata
from scm_server.raft.statemachine import AppliedEntry, ApplyRejected, BaseStateMachine

LOG = logging.getLogger(__name__)

Terminate = Callable[[int, str], None]


def terminate_process(status: int, message: str) -> None:
    """Ozone's ExitUtils.terminate: log loudly and leave without running cleanups that may write."""
    LOG.critical("SCM terminating: %s", message)
    print(f"FATAL: SCM terminating: {message}", file=sys.stderr, flush=True)
    os._exit(status)


class StateMachineOwner(Protocol):
    """What the state machine needs from the HA manager that owns it (``SCMHAManagerImpl``, which builds
    the state machine and so is not imported here): the SCM it applies to, the checkpoint download, and
    the leadership and configuration notifications it passes on."""

    @property
    def host(self) -> SCMHAHost: ...

    async def download_checkpoint_from_leader(
        self, leader_id: str, leader_address: str, meta: SnapshotMetadata
    ) -> DownloadedCheckpoint: ...

    async def pause_for_install(self) -> None: ...

    def on_leader_changed(self, leader_id: str, term: int) -> None: ...

    def on_leader_ready(self) -> None: ...

    def on_not_leader(self) -> None: ...

    def on_configuration_changed(self, conf: ConfState) -> None: ...


class SCMStateMachine(BaseStateMachine):
    def __init__(self, ha: StateMachineOwner, terminate: Terminate = terminate_process) -> None:
        self._ha = ha
        self._terminate = terminate
        self._catch_up_target: int | None = None  # leader commit index to reach (None: not known yet)
        self._dn_ready = False
        self.installs = 0  # checkpoint installs done (tests and metrics)

    # ---- apply path ----
    def last_applied(self) -> tuple[int, int]:
        info = self._ha.host.transaction_buffer.latest_trx_info()
        return info.term, info.index

    async def apply(self, entries: Sequence[AppliedEntry]) -> list[bytes | ApplyRejected]:
        host = self._ha.host
        buffer = host.transaction_buffer
        dispatcher = host.dispatcher
        results: list[bytes | ApplyRejected] = []
        for entry in entries:
            try:
                response = dispatcher.apply(entry.data)
            except BaseException:
                buffer.discard()
                LOG.exception("fatal error applying entry %d (term %d)", entry.index, entry.term)
                raise
            buffer.update_latest_trx_info(entry.term, entry.index)
            results.append(response.SerializeToString())
        if entries:
            buffer.flush()
            self.check_catch_up()
        return results

    def notify_term_index_updated(self, term: int, index: int) -> None:
        buffer = self._ha.host.transaction_buffer
        if index > buffer.latest_trx_info().index:
            buffer.update_latest_trx_info(term, index)
        self.check_catch_up()

    async def take_snapshot(self) -> tuple[int, int]:
        info = self._ha.host.transaction_buffer.flush()
        return info.term, info.index

    # ---- datanode-report gate / StateMachineReadyRule ----
    def set_catch_up_target(self, index: int | None) -> None:
        """The leader's commit index captured at (re)join; None re-arms the gate (unknown yet)."""
        self._catch_up_target = index
        if index is None:
            self._dn_ready = False
        self.check_catch_up()

    def mark_leader(self) -> None:
        self._catch_up_target = 0
        self.check_catch_up()

    def check_catch_up(self) -> bool:
        target = self._catch_up_target
        if not self._dn_ready and target is not None:
            applied = self._ha.host.transaction_buffer.latest_trx_info().index
            if applied >= target:
                self._dn_ready = True
                LOG.info("SCM caught up (applied %d >= leader commit %d): processing datanode reports", applied, target)
        return self._dn_ready

    @property
    def dn_reports_ready(self) -> bool:
        return self._dn_ready

    @property
    def is_state_machine_ready(self) -> bool:
        return self._dn_ready

    @property
    def catch_up_target(self) -> int | None:
        return self._catch_up_target

    # ---- snapshot install (notification mode) ----
    async def install_snapshot_from_leader(
        self, leader_id: str, leader_address: str, meta: SnapshotMetadata
    ) -> tuple[int, int]:
        host = self._ha.host
        local_applied = host.transaction_buffer.latest_trx_info().index
        checkpoint = await self._ha.download_checkpoint_from_leader(leader_id, leader_address, meta)
        trx = checkpoint.transaction_info
        try:
            if trx.index < local_applied:
                raise SCMException(
                    ResultCodes.IO_EXCEPTION,
                    f"checkpoint from {checkpoint.source} is at index {trx.index}, behind this SCM's applied "
                    f"index {local_applied}; refusing it",
                )
            if trx.index < meta.index:
                LOG.warning(
                    "checkpoint from %s is at index %d, below the snapshot index %d Raft asked for; installing "
                    "it anyway, the log covers the rest",
                    checkpoint.source,
                    trx.index,
                    meta.index,
                )
            await self._ha.pause_for_install()
            store = host.metadata_store
            try:
                backup = store.replace_from_checkpoint(checkpoint.db_path)
            except Exception as exc:
                if not store.is_open:
                    self._terminate(1, f"checkpoint install failed and the rollback failed too: {exc}")
                raise
            host.transaction_buffer.init()
            host.reinitialize()
            heap.after_load()  # the daemon: the reloaded tables join the frozen heap
            shutil.rmtree(backup, ignore_errors=True)
            self.installs += 1
            info = host.transaction_buffer.latest_trx_info()
            LOG.info(
                "installed checkpoint from %s at (term %d, index %d) (%d bytes)",
                checkpoint.source,
                info.term,
                info.index,
                checkpoint.size,
            )
            self.check_catch_up()
            return info.term, info.index
        finally:
            shutil.rmtree(checkpoint.db_path.parent.parent, ignore_errors=True)

    async def pause(self) -> None:
        await self._ha.pause_for_install()

    async def reinitialize(self) -> None:
        return None  # done inside install_snapshot_from_leader, after the swap

    # ---- notifications ----
    def notify_leader_changed(self, leader_id: str, term: int) -> None:
        self._ha.on_leader_changed(leader_id, term)

    def notify_leader_ready(self) -> None:
        self._ha.on_leader_ready()

    def notify_not_leader(self) -> None:
        self._ha.on_not_leader()

    def notify_configuration_changed(self, conf: ConfState) -> None:
        self._ha.on_configuration_changed(conf)

    def notify_log_failed(self, exc: BaseException) -> None:
        self._terminate(1, f"Raft log / state machine failure, stopping to avoid divergence: {exc!r}")
