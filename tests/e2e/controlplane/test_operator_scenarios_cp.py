"""The operator's local scenarios (``tests/e2e/local/test_operator_scenarios.py``, the same functions, not copies)
on the real control plane: the chart installed with ``helm install``, the operator as the chart's ServiceAccount
(RBAC as the chart grants it), every Pod admitted by the real API server's admission chain (Pod Security included)
and run by the kubelet fixture as real SCM processes. Run by ``make e2e-control-plane``.

Every scenario runs in a namespace labelled ``pod-security.kubernetes.io/enforce=restricted`` (and ``warn``,
``audit``): the member, audit and workload Pods are admitted only if they pass the ``restricted`` profile.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tests.e2e import scenarios as shared
from tests.e2e.controlplane.env import control_plane_environment
from tests.e2e.controlplane.fixture import ControlPlane
from tests.e2e.local import test_operator_scenarios as scenarios

# Each scenario bounds its own waits (the audit's: a ready ring, a container, the CronJob's Job, the Job's end: up to
# 20 min in all); pytest's limit is the last resort above them, not the default 300 s that a loaded machine outlasts.
pytestmark = [pytest.mark.control_plane, pytest.mark.timeout(1800)]

# Every scenario of the local tier (the functions are imported, not copied): tests/e2e/scenarios.py
SCENARIOS = shared.SCENARIOS


@pytest.mark.parametrize("name", SCENARIOS)
async def test_scenario_in_a_restricted_namespace(name: str, control_plane: ControlPlane, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenarios, "environment",
                        functools.partial(control_plane_environment, control_plane, restricted=True))
    await getattr(scenarios, name)(tmp_path)
