"""SCM's upgrade finalization (Ozone's FinalizationManager and SCMUpgradeFinalizer): what
``ozone admin scm finalizeupgrade`` starts and ``finalizationstatus`` reports.

The leader drives it; every step that changes state is a replicated call of the
:class:`~scm_server.ha.stateful_service_state_manager.FinalizationStateManager`, so every SCM crosses the
same checkpoints (:mod:`scm_server.hdds_layout`) in the same order::

    finalizeupgrade  -> STARTING_FINALIZATION (this leader, until the mark is committed)
    add the #FINALIZING mark            FINALIZATION_STARTED: pipeline creation frozen, status IN_PROGRESS
    close every pipeline                (their containers close with them)
    finalize each newer feature, in order (MLV + 1 each; the VERSION file follows)
                                        MLV_EQUALS_SLV: every HEALTHY node HEALTHY_READONLY, creation resumes;
                                        datanodes behind SCM's layout are told to finalize
    wait for an OPEN RATIS/THREE pipeline (nodes that finalized, so clients can write)
    remove the #FINALIZING mark         FINALIZATION_COMPLETE: status FINALIZATION_DONE

Each step is skipped when its checkpoint was already crossed, so a new leader resumes where the old one
stopped (``on_leader_ready``), and a follower that installs a snapshot lands on the snapshot's checkpoint.

The status is this SCM's own (Ozone's layout version manager keeps it in memory): every SCM sets it from the
checkpoints it crosses; the leader sets STARTING_FINALIZATION before the mark, and FINALIZATION_REQUIRED
again when finalization fails before MLV reached SLV. The messages for the client that started finalization
(``finalizeupgrade`` polls with its client id; ``--takeover`` hands them to another client) are queued here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol

from scm_server import hdds_layout as layout
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.ha.scm_context import SCMContext
from scm_server.ha.stateful_service_state_manager import FinalizationStateManager
from scm_server.hdds_layout import FinalizationCheckpoint, Status, StatusAndMessages
from scm_server.node.node_manager import ScmLayout, SCMNodeManager
from scm_server.proto import hdds_pb2

log = logging.getLogger(__name__)

PIPELINE_WAIT_INTERVAL_S = 5.0  # Ozone's SCMUpgradeFinalizer polls for an open RATIS/THREE pipeline this often
RESUME_CLIENT_ID = "resume-finalization-as-leader"
UNKNOWN_CLIENT = (
    "Unknown client tries to get finalization status.\n The requester is not the initiating client of the "
    "finalization, if you want to take over, and get unsent status messages, check -takeover option."
)


class FinalizationPipelines(Protocol):
    """What finalization asks of the pipeline manager."""

    def freeze_pipeline_creation(self) -> None: ...

    def resume_pipeline_creation(self) -> None: ...

    def get_pipelines(
        self, rtype: int | None = None, rfactor: int | None = None, states: set[int] | None = None
    ) -> list[hdds_pb2.Pipeline]: ...

    async def close_pipeline(self, pipeline_id: str, *, remove: bool = False) -> None: ...


class FinalizationManager:
    """One per SCM. It is the finalization state manager's listener (the upgrade context), so it sees every
    checkpoint crossed on this SCM, whoever drives."""

    def __init__(
        self,
        state: FinalizationStateManager,
        pipelines: FinalizationPipelines,
        nodes: SCMNodeManager,
        scm_context: SCMContext,
        write_layout_version: Callable[[int], None],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.state = state
        self.pipelines = pipelines
        self.nodes = nodes
        self.scm_context = scm_context
        self._write_layout_version = write_layout_version
        self.sleep = sleep  # how the driver waits for a pipeline (tests pass one that lets time pass)
        self._status = Status.ALREADY_FINALIZED
        self._client_id: str | None = None
        self._messages: deque[str] = deque()
        self._task: asyncio.Task[None] | None = None
        self._started = asyncio.Event()  # set while the FINALIZATION_STARTED checkpoint is crossed
        state.set_listener(self)

    # ---- the upgrade context (called while entries are applied, on every SCM) ----
    def on_checkpoint(self, checkpoint: FinalizationCheckpoint) -> None:
        self._status = checkpoint.status
        if checkpoint.has_crossed(FinalizationCheckpoint.FINALIZATION_STARTED):
            self._started.set()
        else:
            self._started.clear()
        if checkpoint is FinalizationCheckpoint.MLV_EQUALS_SLV:
            self.nodes.force_nodes_to_healthy_readonly()
        if layout.should_create_new_pipelines(checkpoint):
            self.pipelines.resume_pipeline_creation()
        else:
            self.pipelines.freeze_pipeline_creation()
        self.nodes.set_scm_layout(ScmLayout(
            self.state.metadata_layout_version, self.state.software_layout_version,
            compare=layout.should_tell_datanodes_to_finalize(checkpoint),
        ))

    def on_layout_finalized(self, feature: layout.LayoutFeature) -> None:
        # No HDDS feature has an SCM action in Ozone 2.2.0: finalizing one records its version (VERSION too).
        self._emit(layout.no_action_message(feature.name))
        self._write_layout_version(feature.layout_version)
        log.info("layout feature %s (%d) has been finalized", feature.name, feature.layout_version)

    # ---- what the admin calls reach ----
    @property
    def status(self) -> Status:
        return self._status

    @property
    def checkpoint(self) -> FinalizationCheckpoint:
        return self.state.checkpoint()

    async def finalize(self, client_id: str) -> StatusAndMessages:
        """``finalizeupgrade`` on the leader: ALREADY_FINALIZED when there is nothing to do, else start (or
        resume) finalization and answer STARTING_FINALIZATION once the #FINALIZING mark is committed."""
        self.scm_context.check_leader()
        if self._status in (Status.ALREADY_FINALIZED, Status.FINALIZATION_DONE):
            return layout.FINALIZED_MSG
        if self.running():
            return layout.FINALIZATION_IN_PROGRESS_MSG
        if self._status is Status.FINALIZATION_REQUIRED and not self.state.needs_finalization():
            raise SCMException(ResultCodes.INVALID_REQUEST, "Upgrade found in inconsistent state. Upgrade state "
                               "is FINALIZATION_REQUIRED while MLV has been upgraded to SLV.")
        self._client_id = client_id
        if self._status is Status.FINALIZATION_REQUIRED:
            self._status = Status.STARTING_FINALIZATION
        self._start()
        task = self._task
        assert task is not None
        started = asyncio.ensure_future(self._started.wait())
        try:
            await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            started.cancel()
        if not self._started.is_set() and self._status is Status.FINALIZATION_REQUIRED:
            raise SCMException(ResultCodes.INTERNAL_ERROR, "Upgrade finalization could not start; see the SCM log")
        return layout.STARTING_MSG

    def report(self, client_id: str, takeover: bool, readonly: bool) -> StatusAndMessages:
        """``finalizationstatus`` (readonly: the status alone, from any SCM) or the starting client's poll (its
        queued messages; ``takeover`` makes the caller that client)."""
        if readonly:
            return StatusAndMessages(self._status)
        if takeover:
            self._client_id = client_id
        if self._client_id is None or self._client_id != client_id:
            raise SCMException(ResultCodes.INVALID_REQUEST, UNKNOWN_CLIENT)
        messages = tuple(self._messages)
        self._messages.clear()
        return StatusAndMessages(self._status, messages)

    # ---- leadership ----
    def on_leader_ready(self) -> None:
        """A new leader resumes a finalization its predecessor started and did not complete."""
        checkpoint = self.checkpoint
        if checkpoint.has_crossed(FinalizationCheckpoint.FINALIZATION_STARTED) and not checkpoint.has_crossed(
            FinalizationCheckpoint.FINALIZATION_COMPLETE
        ):
            log.info("SCM became leader. Resuming upgrade finalization from current checkpoint %s.", checkpoint.name)
            self._client_id = RESUME_CLIENT_ID
            self._start()

    def on_step_down(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def wait(self) -> None:
        """Until the driver this SCM runs (if any) has stopped."""
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self._task)

    async def stop(self) -> None:
        self.on_step_down()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._task = None

    def _start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._execute(), name="scm-upgrade-finalization")

    # ---- the driver (leader only) ----
    async def _execute(self) -> None:
        try:
            self._emit(layout.STARTED_MESSAGE)
            await self._pre_finalize()
            for feature in layout.unfinalized_features(self.state.metadata_layout_version):
                if feature.layout_version > self.state.software_layout_version:
                    break
                await self.state.finalize_layout_feature(feature.layout_version)
            await self._post_finalize()
            self._emit(layout.FINISHED_MESSAGE)
        except NotLeaderException:
            log.info("Leader change encountered during finalization. The new leader continues it.")
        except asyncio.CancelledError:
            log.info("upgrade finalization stopped on this SCM (no longer leader); the new leader continues it")
            raise
        except Exception:
            log.warning("Upgrade Finalization failed", exc_info=True)
            if self.state.needs_finalization():
                self._status = Status.FINALIZATION_REQUIRED

    async def _pre_finalize(self) -> None:
        if not self.checkpoint.has_crossed(FinalizationCheckpoint.FINALIZATION_STARTED):
            await self.state.add_finalizing_mark()
        if not self.checkpoint.has_crossed(FinalizationCheckpoint.MLV_EQUALS_SLV):
            # creation was frozen when the mark's checkpoint was published
            for pipeline in self.pipelines.get_pipelines():
                if pipeline.state != hdds_pb2.PIPELINE_CLOSED:
                    await self.pipelines.close_pipeline(pipeline.id.id)
            self._emit(layout.CLOSING_PIPELINES_MESSAGE)

    async def _post_finalize(self) -> None:
        if self.checkpoint.has_crossed(FinalizationCheckpoint.FINALIZATION_COMPLETE):
            return
        # Clients must be able to write when finalization says done: one OPEN RATIS/THREE pipeline of nodes
        # that finalized (the background creator makes it once they are HEALTHY again).
        while not self.pipelines.get_pipelines(hdds_pb2.RATIS, hdds_pb2.THREE, {hdds_pb2.PIPELINE_OPEN}):
            self.scm_context.check_leader()
            log.info("Waiting for at least one open Ratis 3 pipeline after SCM finalization.")
            await self.sleep(PIPELINE_WAIT_INTERVAL_S)
        self.scm_context.check_leader()
        await self.state.remove_finalizing_mark()

    def _emit(self, message: str) -> None:
        log.info("%s", message)
        self._messages.append(message)
