"""Leader election's I/O (``effects.lease.LeaseElector``) against the emulated API server: the Lease is created,
renewed and taken over through real HTTP, a stale update is refused with 409, a holder whose Lease is taken steps
down at once, and a released Lease is taken without waiting for its expiry."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from ozone_scm_operator import election
from ozone_scm_operator.effects.kube import Conflict, KubeClient, load_configuration
from ozone_scm_operator.effects.lease import LEASE_API, LeaseElector, LeaseSettings
from tests.e2e.local.apiserver import serving

# every wait below is bounded (a Lease call that hangs must fail the test with what it saw, not stall the suite)
pytestmark = pytest.mark.timeout(90)
BOUND = 20.0
NS = "default"
NAME = "ozone-scm-operator"
FAST = election.Timing(lease_duration=3, renew_deadline=2.0, retry_period=0.25)


async def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout}s")
        await asyncio.sleep(0.05)


def elector(url: str, identity: str) -> LeaseElector:
    return LeaseElector(KubeClient(load_configuration(url)), LeaseSettings(NS, NAME, identity, FAST))


async def stop(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_one_holder_takeover_after_expiry_stale_update_refused() -> None:
    async with serving() as (api, url):
        a, b = elector(url, "op-a"), elector(url, "op-b")

        def lease() -> dict[str, Any]:
            obj = api.get_object(LEASE_API, "Lease", NAME, NS)
            assert obj is not None
            return obj

        assert await asyncio.wait_for(a.acquire(), BOUND) is True
        spec = lease()["spec"]
        assert spec["holderIdentity"] == "op-a" and spec["leaseTransitions"] == 0
        assert spec["leaseDurationSeconds"] == 3 and spec["renewTime"].endswith("Z")
        assert isinstance(await asyncio.wait_for(b.attempt(), BOUND), election.Wait)

        # the API server refuses an update conditional on an old resourceVersion
        stale = lease()
        holding = asyncio.create_task(a.hold())
        await wait_for(lambda: lease()["metadata"]["resourceVersion"] != stale["metadata"]["resourceVersion"], 5,
                       "a renewal")
        with pytest.raises(Conflict):
            await asyncio.wait_for(b.kube.request("PUT", f"/apis/{LEASE_API}/namespaces/{NS}/leases/{NAME}",
                                 {**stale, "spec": {**stale["spec"], "holderIdentity": "op-b"}}), BOUND)

        # while op-a renews, op-b waits well past the lease duration without taking it
        waiting = asyncio.create_task(b.acquire())
        renewals: set[str] = set()

        def renewed_often() -> bool:
            renewals.add(lease()["spec"]["renewTime"])
            return len(renewals) > 16  # 16 renewals 0.25 s apart: longer than the 3 s lease duration

        await wait_for(renewed_often, 20, "op-a renewing for longer than the lease duration")
        assert not waiting.done() and lease()["spec"]["holderIdentity"] == "op-a" and a.leading()

        # op-a stops renewing without releasing (as a SIGKILL would): op-b takes over once the Lease expired
        await stop(holding)
        stopped = time.monotonic()
        assert await asyncio.wait_for(waiting, 10) is True
        took = time.monotonic() - stopped
        assert FAST.lease_duration - FAST.retry_period * 2 < took < FAST.lease_duration + 2, took
        assert lease()["spec"]["holderIdentity"] == "op-b" and lease()["spec"]["leaseTransitions"] == 1
        assert not a.leading()  # its claim ended at its renew deadline, before op-b's takeover


async def test_a_holder_steps_down_the_moment_another_holds_the_lease() -> None:
    async with serving() as (api, url):
        a = elector(url, "op-a")
        assert await asyncio.wait_for(a.acquire(), BOUND) is True
        holding = asyncio.create_task(a.hold())
        obj = api.get_object(LEASE_API, "Lease", NAME, NS)
        assert obj is not None
        # someone else holds it now (here: written by hand, as `kubectl edit lease` would)
        api.patch_object(LEASE_API, "Lease", NAME, NS, {"spec": {"holderIdentity": "intruder"}})
        started = time.monotonic()
        reason = await asyncio.wait_for(holding, 5)
        assert "intruder" in reason and not a.leading()
        assert time.monotonic() - started < FAST.renew_deadline  # noticed at its next renewal, not at the deadline


async def test_a_released_lease_is_taken_at_once() -> None:
    async with serving() as (api, url):
        a, b = elector(url, "op-a"), elector(url, "op-b")
        assert await asyncio.wait_for(a.acquire(), BOUND) is True
        assert isinstance(await asyncio.wait_for(b.attempt(), BOUND), election.Wait)
        await asyncio.wait_for(a.release(), BOUND)
        obj = api.get_object(LEASE_API, "Lease", NAME, NS)
        assert obj is not None and obj["spec"]["holderIdentity"] == ""
        started = time.monotonic()
        assert await asyncio.wait_for(b.acquire(), 5) is True
        assert time.monotonic() - started < FAST.lease_duration
        obj = api.get_object(LEASE_API, "Lease", NAME, NS)
        assert obj is not None and obj["spec"]["holderIdentity"] == "op-b" and obj["spec"]["leaseTransitions"] == 1
