"""The reconciler's leader-election fence: a replica that does not hold the Lease (a standby, or a leader whose
renew deadline passed) writes nothing: no status, no Event, no action. The Kubernetes API and the SCMs are
recording fakes (below the unit boundary); the planner is the real one, asked about a new 1-member cluster."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ozone_scm_operator import planner
from ozone_scm_operator.reconciler import ACTION_RETRY, Reconciler

BODY = {"apiVersion": "ozone-scm.io/v1alpha1", "kind": "OzoneSCMCluster",
        "metadata": {"name": "scm", "namespace": "ns", "uid": "u", "generation": 1}, "spec": {"replicas": 1}}


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386, as the API server applies the status merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge(out.get(k), v)
    return out


class RecordingKube:
    def __init__(self) -> None:
        self.writes: list[tuple[str, ...]] = []
        self.status: dict[str, Any] = {}

    async def get_cluster(self, namespace: str, name: str) -> dict[str, Any]:
        return {**BODY, "status": self.status}

    async def get(self, kind: str, namespace: str, name: str) -> None:
        return None

    async def list(self, kind: str, namespace: str, labels: Any = None) -> list[dict[str, Any]]:
        return []

    async def patch_cluster_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.writes.append(("status",))
        self.status = merge(self.status, status)

    async def event(self, involved: Any, type_: str, reason: str, message: str, now: Any, *, action: str = "") -> None:
        self.writes.append(("event", reason))

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(("create", body["kind"], body["metadata"]["name"]))
        return body

    async def apply(self, body: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(("apply", body["kind"], body["metadata"]["name"]))
        return body


class NoSCM:
    async def probe_all(self, endpoints: Any, security: Any) -> dict[str, Any]:
        return {}

    async def ring(self, endpoint: Any, security: Any) -> None:
        return None


def reconciler(fence: Callable[[], bool] | None) -> tuple[Reconciler, RecordingKube]:
    kube = RecordingKube()
    return Reconciler(kube, NoSCM(), fence=fence), kube  # type: ignore[arg-type]


async def test_without_a_fence_a_pass_writes_the_intent_and_acts() -> None:
    r, kube = reconciler(None)
    for _ in range(5):
        await r.reconcile("ns", "scm")
    assert kube.writes[0] == ("status",) and any(w[0] in ("create", "apply") for w in kube.writes), kube.writes


async def test_a_replica_without_the_lease_writes_nothing() -> None:
    r, kube = reconciler(lambda: False)
    for _ in range(5):
        assert await r.reconcile("ns", "scm") == ACTION_RETRY
    assert kube.writes == []


async def test_a_claim_that_ends_after_the_intent_stops_before_the_action() -> None:
    held = [True]
    r, kube = reconciler(lambda: held[0])
    while not any(w[0] in ("create", "apply") for w in kube.writes):  # passes until one acts, as above
        await r.reconcile("ns", "scm")
        assert len(kube.writes) < 50
    # the next pass that would act: the Lease is lost right after its intent is written
    kube.writes.clear()
    asked: list[bool] = []

    def fence() -> bool:
        asked.append(not asked)  # True for the first question (the status write), False from then on
        return asked[-1]

    r.fence = fence
    assert await r.reconcile("ns", "scm") == ACTION_RETRY
    assert asked == [True, False]  # asked before the status write and again before the action
    assert not any(w[0] in ("create", "apply", "event") for w in kube.writes), kube.writes


async def test_act_refuses_without_the_lease() -> None:
    r, kube = reconciler(lambda: False)
    action = planner.CreatePVC(target="scm-0-data", reason="CreatingVolume", message="",
                              body={"kind": "PersistentVolumeClaim", "metadata": {"name": "scm-0-data"}})
    with pytest.raises(RuntimeError, match="no longer holds the leader-election Lease"):
        seen = await r.observe("ns", "scm")
        assert seen is not None
        await r.act(seen.ref, action, seen)
    assert kube.writes == []
