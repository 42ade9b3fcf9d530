"""SCMSafeModeManager and its exit rules (Ozone's ``SCM/safemode``).

Status: INITIAL (in safemode, pre-check not passed) -> PRE_CHECKS_PASSED (DataNodeSafeModeRule,
the only pre-check rule, validated) -> OUT_OF_SAFE_MODE (every rule validated, or forced with
``ozone admin safemode exit``). Each status change is pushed into SCMContext and the
SCMServiceManager is notified (PRE_CHECK_COMPLETED lets pipeline creation start; leaving
safemode lets the leader's background services run). SCM never re-enters safemode.

Rules (a rule, once validated, stays validated, as in Ozone):

* DataNodeSafeModeRule: registered datanodes >= hdds.scm.safemode.min.datanode (pre-check);
* RatisContainerSafeModeRule: of the containers that must have data (CLOSED/QUASI_CLOSED with
  numberOfKeys > 0; OPEN containers may never have been written and CLOSING ones are excluded
  per HDDS-2198), the fraction with >= 1 reported replica >= hdds.scm.safemode.threshold.pct;
* ECContainerSafeModeRule: the same for EC containers, a container counting once replicas from at
  least ``data`` datanodes are reported (enough to read it back);
* HealthyPipelineSafeModeRule: fraction of RATIS/THREE pipelines with all members reported
  >= hdds.scm.safemode.healthy.pipeline.pct;
* OneReplicaPipelineSafeModeRule: fraction of RATIS/THREE pipelines with >= 1 member reported
  >= hdds.scm.safemode.atleast.one.node.reported.pipeline.pct;
* StateMachineReadyRule (HA only): the HA layer says the state machine caught up.

The rules read the managers' current (soft) state; ``validate()`` runs after registrations and
reports and on a refresh interval. In HA every SCM computes its own safemode.
"""

from __future__ import annotations

import enum
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from scm_server.clock import Clock, SystemClock
from scm_server.conf import SafeModeConfig
from scm_server.container.container_manager import ContainerManager
from scm_server.container.container_state_manager import CLOSED, QUASI_CLOSED
from scm_server.ha.scm_context import SafeModeStatus, SCMContext
from scm_server.ha.scm_service import Event, SCMServiceManager
from scm_server.node.node_manager import SCMNodeManager
from scm_server.pipeline.pipeline_manager import RATIS, THREE, PipelineManager
from scm_server.pipeline.pipeline_state_manager import ALLOCATED, DORMANT, OPEN
from scm_server.proto import hdds_pb2

log = logging.getLogger(__name__)


class SafeModeStatusName(enum.Enum):
    INITIAL = "INITIAL"
    PRE_CHECKS_PASSED = "PRE_CHECKS_PASSED"
    OUT_OF_SAFE_MODE = "OUT_OF_SAFE_MODE"


@dataclass
class RuleResult:
    ok: bool
    text: str


class SafeModeExitRule:
    name = "SafeModeExitRule"
    pre_check = False

    def __init__(self) -> None:
        self.validated = False
        self.last = RuleResult(False, "not evaluated yet")
        self.refreshes = 0  # evaluations (Ozone's NumContainerSafeModeRuleRefreshes for the container rules)
        self.last_refresh_ms = 0  # how long the last evaluation took (Last*ContainerSafeModeRuleRefreshDurationMs)

    def figures(self) -> tuple[int, int]:
        """(what is counted now, what the rule requires), the pair Ozone's SafeModeMetrics publishes per rule;
        (1, 1) or (0, 1) for a rule that only holds or does not."""
        return (1 if self.refresh().ok else 0), 1

    def evaluate(self) -> RuleResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def refresh(self) -> RuleResult:
        """:meth:`evaluate`, counted and timed (a duration of the evaluation, not a time of day)."""
        start = time.perf_counter()
        try:
            return self.evaluate()
        finally:
            self.refreshes += 1
            self.last_refresh_ms = int((time.perf_counter() - start) * 1000)

    def validate(self) -> bool:
        if self.validated:
            return True
        self.last = self.refresh()
        if self.last.ok:
            self.validated = True
            log.info("safemode rule %s validated: %s", self.name, self.last.text)
        return self.validated

    def status(self) -> hdds_pb2.SafeModeRuleStatus:
        if not self.validated:
            self.last = self.refresh()
        return hdds_pb2.SafeModeRuleStatus(ruleName=self.name, validate=self.validated or self.last.ok, statusText=self.last.text)


class DataNodeSafeModeRule(SafeModeExitRule):
    name = "DataNodeSafeModeRule"
    pre_check = True

    def __init__(self, node_manager: SCMNodeManager, required: int) -> None:
        super().__init__()
        self.node_manager = node_manager
        self.required = required

    def figures(self) -> tuple[int, int]:
        return len(self.node_manager.all_nodes()), self.required

    def evaluate(self) -> RuleResult:
        registered = len(self.node_manager.all_nodes())
        return RuleResult(
            registered >= self.required,
            f"registered datanodes (={registered}) >= required datanodes (={self.required})",
        )


class RatisContainerSafeModeRule(SafeModeExitRule):
    name = "RatisContainerSafeModeRule"

    def __init__(self, container_manager: ContainerManager, threshold: float) -> None:
        super().__init__()
        self.container_manager = container_manager
        self.threshold = threshold
        # The containers that count are fixed at the first evaluation (as Ozone does at startup).
        # Afterwards a container leaves the pending set when a replica of it is first recorded (the
        # container manager's replica listener, as Ozone's rule consumes container reports), so a
        # heartbeat costs O(1) here, not O(containers not yet reported): with 1M containers and no
        # report yet, a rescan per heartbeat and per refresh kept every SCM busy for seconds each.
        # Containers removed from the table (or a reload after a checkpoint install) are dropped
        # from the pending set on the next evaluation, the only rescan left.
        self._total = 0
        self._pending: set[int] | None = None
        self._removals_seen = 0
        container_manager.add_replica_listener(self._on_replica)

    def _on_replica(self, container_id: int, dn_uuid: str, added: bool) -> None:
        if added and self._pending is not None and not self.validated:
            self._pending.discard(container_id)

    def evaluate(self) -> RuleResult:
        cm = self.container_manager
        removals = cm.state_manager.removals
        if self._pending is None:
            eligible = cm.state_manager.ids_with_keys((CLOSED, QUASI_CLOSED), RATIS)
            self._total = len(eligible)
            self._pending = {cid for cid in eligible if not cm.has_replicas(cid)}
            self._removals_seen = removals
        elif removals != self._removals_seen:
            gone = {cid for cid in self._pending if not cm.exists(cid)}
            self._total -= len(gone)
            self._pending -= gone
            self._removals_seen = removals
        total, reported = self._counts()
        fraction = 1.0 if total == 0 else reported / total
        return RuleResult(
            fraction >= self.threshold,
            f"% of containers with at least one reported replica (={fraction:.2f}) >= "
            f"safeModeCutoff (={self.threshold:.2f}) [{reported}/{total}]",
        )


    def _counts(self) -> tuple[int, int]:
        return self._total, self._total - len(self._pending or ())

    def figures(self) -> tuple[int, int]:
        self.refresh()  # fixes the counted set at the first call, as the rule's own evaluation does
        total, reported = self._counts()
        return reported, math.ceil(self.threshold * total)


class _PipelineRule(SafeModeExitRule):
    def __init__(self, pipeline_manager: PipelineManager, pct: float) -> None:
        super().__init__()
        self.pipeline_manager = pipeline_manager
        self.pct = pct

    def _pipelines(self) -> list[hdds_pb2.Pipeline]:
        return self.pipeline_manager.get_pipelines(RATIS, THREE, {ALLOCATED, OPEN, DORMANT})

    def _count(self, p: hdds_pb2.Pipeline) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def _what(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def figures(self) -> tuple[int, int]:
        pipelines = self._pipelines()
        return sum(1 for p in pipelines if self._count(p)), math.ceil(self.pct * len(pipelines))

    def evaluate(self) -> RuleResult:
        pipelines = self._pipelines()
        ok_count, required = self.figures()
        return RuleResult(
            ok_count >= required,
            f"{self._what()} (={ok_count}) >= required (={required}) of {len(pipelines)} RATIS/THREE pipelines",
        )


class HealthyPipelineSafeModeRule(_PipelineRule):
    name = "HealthyPipelineSafeModeRule"

    def _count(self, p: hdds_pb2.Pipeline) -> bool:
        return {m.uuid for m in p.members} <= self.pipeline_manager.reported_members(p.id.id)

    def _what(self) -> str:
        return "healthy pipelines (all members reported)"


class OneReplicaPipelineSafeModeRule(_PipelineRule):
    name = "AtleastOneDatanodeReportedRule"

    def _count(self, p: hdds_pb2.Pipeline) -> bool:
        return bool(self.pipeline_manager.reported_members(p.id.id))

    def _what(self) -> str:
        return "pipelines with at least one datanode reported"


class StateMachineReadyRule(SafeModeExitRule):
    name = "StateMachineReadyRule"

    def __init__(self, ready: Callable[[], bool]) -> None:
        super().__init__()
        self.ready = ready

    def evaluate(self) -> RuleResult:
        ok = self.ready()
        return RuleResult(ok, "SCM state machine is ready" if ok else "SCM state machine is catching up with the leader")


class ECContainerSafeModeRule(SafeModeExitRule):
    """Ozone's ECContainerSafeModeRule: of the CLOSED/QUASI_CLOSED EC containers with keys, the fraction
    reported by at least ``data`` datanodes is >= hdds.scm.safemode.threshold.pct. As the Ratis rule, the
    containers that count are fixed at the first evaluation and leave the pending set from the replica
    listener (O(replicas of that container) per report of a pending one)."""

    name = "ECContainerSafeModeRule"

    def __init__(self, container_manager: ContainerManager, threshold: float) -> None:
        super().__init__()
        self.container_manager = container_manager
        self.threshold = threshold
        self._total = 0
        self._pending: dict[int, int] | None = None  # container id -> data replicas it needs
        self._removals_seen = 0
        container_manager.add_replica_listener(self._on_replica)

    def _enough(self, container_id: int, data: int) -> bool:
        return len({r.datanode_uuid for r in self.container_manager.get_replicas(container_id)}) >= data

    def _on_replica(self, container_id: int, dn_uuid: str, added: bool) -> None:
        if not added or self._pending is None or self.validated:
            return
        data = self._pending.get(container_id)
        if data is not None and self._enough(container_id, data):
            del self._pending[container_id]

    def evaluate(self) -> RuleResult:
        cm = self.container_manager
        removals = cm.state_manager.removals
        if self._pending is None:
            eligible = cm.state_manager.ids_with_keys((CLOSED, QUASI_CLOSED), hdds_pb2.EC)
            self._total = len(eligible)
            need = {cid: cm.get_container(cid).ecReplicationConfig.data for cid in eligible}
            self._pending = {cid: data for cid, data in need.items() if not self._enough(cid, data)}
            self._removals_seen = removals
        elif removals != self._removals_seen:
            gone = [cid for cid in self._pending if not cm.exists(cid)]
            self._total -= len(gone)
            for cid in gone:
                del self._pending[cid]
            self._removals_seen = removals
        total = self._total
        reported = total - len(self._pending)
        fraction = 1.0 if total == 0 else reported / total
        return RuleResult(
            fraction >= self.threshold,
            f"% of EC containers with at least data replicas reported (={fraction:.2f}) >= "
            f"safeModeCutoff (={self.threshold:.2f}) [{reported}/{total}]",
        )

    def figures(self) -> tuple[int, int]:
        """(EC containers with enough data replicas reported, the count the threshold asks for)."""
        self.refresh()  # fixes the counted set at the first call, as the rule's own evaluation does
        total = self._total
        return total - len(self._pending or {}), math.ceil(self.threshold * total)


class SCMSafeModeManager:
    def __init__(
        self,
        config: SafeModeConfig,
        node_manager: SCMNodeManager,
        container_manager: ContainerManager,
        pipeline_manager: PipelineManager,
        scm_context: SCMContext,
        service_manager: SCMServiceManager,
        state_machine_ready: Callable[[], bool] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.started_at = self.clock.monotonic()
        self.exit_duration_ms = 0  # from start to the exit of safemode (Ozone's ScmSafeModeExitDurationMs)
        self.scm_context = scm_context
        self.service_manager = service_manager
        self.rules: list[SafeModeExitRule] = [
            DataNodeSafeModeRule(node_manager, config.min_datanode),
            RatisContainerSafeModeRule(container_manager, config.threshold_pct),
            ECContainerSafeModeRule(container_manager, config.threshold_pct),
            HealthyPipelineSafeModeRule(pipeline_manager, config.healthy_pipeline_pct),
            OneReplicaPipelineSafeModeRule(pipeline_manager, config.one_replica_pipeline_pct),
        ]
        if state_machine_ready is not None:
            self.rules.append(StateMachineReadyRule(state_machine_ready))
        self.status = SafeModeStatusName.INITIAL
        self.forced = False
        if not config.enabled:
            self._set_status(SafeModeStatusName.OUT_OF_SAFE_MODE)
        else:
            self._push()

    def set_state_machine_ready_hook(self, ready: Callable[[], bool]) -> None:
        """HA: add (or replace) the StateMachineReadyRule."""
        self.rules = [r for r in self.rules if not isinstance(r, StateMachineReadyRule)]
        self.rules.append(StateMachineReadyRule(ready))

    def in_safe_mode(self) -> bool:
        return self.status is not SafeModeStatusName.OUT_OF_SAFE_MODE

    def pre_check_complete(self) -> bool:
        return self.status is not SafeModeStatusName.INITIAL

    def _push(self) -> None:
        self.scm_context.update_safe_mode_status(SafeModeStatus(self.in_safe_mode(), self.pre_check_complete()))

    def _set_status(self, status: SafeModeStatusName) -> None:
        if status is self.status:
            return
        previous, self.status = self.status, status
        log.info("safemode status %s -> %s", previous.value, status.value)
        if status is SafeModeStatusName.OUT_OF_SAFE_MODE:
            self.exit_duration_ms = int((self.clock.monotonic() - self.started_at) * 1000)
        self._push()
        if previous is SafeModeStatusName.INITIAL:
            self.service_manager.notify_event_triggered(Event.PRE_CHECK_COMPLETED)
        self.service_manager.notify_status_changed()

    def validate(self) -> SafeModeStatusName:
        """Re-evaluate the rules (after reports, registrations and on the refresh interval)."""
        if self.status is SafeModeStatusName.OUT_OF_SAFE_MODE:
            return self.status
        pre = all(r.validate() for r in self.rules if r.pre_check)
        if not pre:
            return self.status
        if self.status is SafeModeStatusName.INITIAL:
            self._set_status(SafeModeStatusName.PRE_CHECKS_PASSED)
        results = [r.validate() for r in self.rules]
        if all(results):
            self._set_status(SafeModeStatusName.OUT_OF_SAFE_MODE)
        return self.status

    def force_exit(self) -> bool:
        if self.status is SafeModeStatusName.OUT_OF_SAFE_MODE:
            return False
        log.warning("safemode exit forced by admin")
        self.forced = True
        if self.status is SafeModeStatusName.INITIAL:
            self._set_status(SafeModeStatusName.PRE_CHECKS_PASSED)
        self._set_status(SafeModeStatusName.OUT_OF_SAFE_MODE)
        return True

    def status_line(self) -> str:
        """One line for the periodic safemode log (``hdds.scm.safemode.log.interval``): the status and every
        rule's last evaluation, as Ozone's SCMSafeModeManager logs them while in safemode."""
        rules = "; ".join(
            f"{r.name}: {'validated' if r.validated else 'not validated'} ({r.last.text})" for r in self.rules)
        return f"SCM in safemode, status {self.status.value}, rules: {rules}"

    def rule_statuses(self) -> list[hdds_pb2.SafeModeRuleStatus]:
        return [r.status() for r in self.rules]
