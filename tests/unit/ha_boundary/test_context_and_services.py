"""SCMContext leader/term/safemode semantics and SCMService gating with a fake clock."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scm_server.clock import FakeClock
from scm_server.exceptions import NotLeaderException
from scm_server.ha.scm_context import INVALID_TERM, SafeModeStatus, SCMContext
from scm_server.ha.scm_service import BackgroundSCMService, Event, SCMServiceManager, ServiceStatus


def test_non_ratis_context_is_always_leader() -> None:
    ctx = SCMContext.non_ratis()
    assert ctx.is_leader() and ctx.is_leader_ready()
    assert ctx.get_term_of_leader() == INVALID_TERM
    assert not ctx.is_ratis()


def test_ratis_context_leader_ready_and_not_leader_hint() -> None:
    ctx = SCMContext.ratis_follower()
    ctx.set_leader_hint(lambda: ("scm2-uuid", "host2:9860"))
    assert not ctx.is_leader()
    with pytest.raises(NotLeaderException) as err:
        ctx.get_term_of_leader()
    assert err.value.leader_id == "scm2-uuid" and err.value.leader_address == "host2:9860"
    ctx.update_leader_and_term(True, 7)
    assert ctx.is_leader() and not ctx.is_leader_ready()
    assert ctx.get_term_of_leader() == 7
    ctx.set_leader_ready()
    assert ctx.is_leader_ready()
    ctx.update_leader_and_term(False, 8)
    assert not ctx.is_leader_ready()
    ctx.set_leader_ready()  # a follower can never be leader-ready
    assert not ctx.is_leader_ready()


async def test_background_service_runs_only_when_leader_ready_out_of_safemode_after_wait() -> None:
    clock = FakeClock()
    ctx = SCMContext.ratis_follower()
    runs: list[float] = []

    async def work() -> None:
        runs.append(clock.monotonic())

    svc = BackgroundSCMService(
        "Test", scm_context=ctx, clock=clock, interval=timedelta(seconds=60), run_once=work, wait_time=timedelta(minutes=5)
    )
    manager = SCMServiceManager()
    manager.register(svc)
    assert svc.status is ServiceStatus.PAUSING
    assert not await svc.run_if_due()
    ctx.update_leader_and_term(True, 3)
    ctx.set_leader_ready()
    manager.notify_status_changed()
    assert svc.status is ServiceStatus.PAUSING  # still in safemode
    ctx.update_safe_mode_status(SafeModeStatus(False, True))
    manager.notify_status_changed()
    assert svc.status is ServiceStatus.RUNNING
    assert not await svc.run_if_due()  # hdds.scm.wait.time.after.safemode.exit not yet passed
    clock.advance(299)
    assert not await svc.run_if_due()
    clock.advance(1)
    assert await svc.run_if_due()
    assert runs == [clock.monotonic()]
    svc.enabled = False
    assert not await svc.run_if_due()
    svc.enabled = True
    ctx.update_leader_and_term(False, 4)  # step down
    manager.notify_status_changed()
    assert svc.status is ServiceStatus.PAUSING
    assert not await svc.run_if_due()
    manager.notify_event_triggered(Event.PRE_CHECK_COMPLETED)  # no crash for untracked events
