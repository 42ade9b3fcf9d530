"""The operator's scenarios on the node tier's real single node (``make e2e-node``): every scenario of
``tests/e2e/scenarios.py`` -- the functions of ``tests/e2e/local/test_operator_scenarios.py``, not copies, the list
the control-plane and kind tiers run -- with ``environment`` replaced by ``node_env.node_environment`` (the kind
tier's environment on this node): member Pods run by kubelet and containerd under Pod Security ``restricted``,
probes and restarts by kubelet, Services by kube-proxy, names by CoreDNS, volumes the node's local
PersistentVolumes."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tests.e2e import scenarios as shared
from tests.e2e.local import test_operator_scenarios as scenarios
from tests.e2e.node.cluster import Node
from tests.e2e.node.node_env import node_environment

pytestmark = [pytest.mark.node, pytest.mark.timeout(1800)]

SCENARIOS = shared.SCENARIOS


@pytest.mark.parametrize("name", SCENARIOS)
async def test_scenario_on_the_node(name: str, node: Node, scm_image: str, audit_image: str, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenarios, "environment", functools.partial(node_environment, node, restricted=True))
    await getattr(scenarios, name)(tmp_path)
