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

# What `make e2e-node` (and so `.ci/run`) runs of the list, chosen for what only a real kubelet shows (the rest runs
# on the real control plane with the kubelet fixture, `make e2e-control-plane`; the whole list here is `make
# e2e-node-scenarios`): restarts, volumes and scaling; readiness probes through a roll under load; TLS Secrets
# mounted into `restricted` Pods; the restore init container on the image's own Python. The choice and its budget:
# docs/testing.md, "The node tier in CI".
CI_SCENARIOS = [
    "test_create_kill_replace_and_scale",
    "test_rolling_image_change_leader_last_without_failed_allocations",
    "test_secure_cluster_certificates_chain_to_one_root",
    "test_a_cluster_created_from_a_backup_has_its_containers_and_hands_out_higher_block_ids",
]


@pytest.mark.parametrize("name", SCENARIOS)
async def test_scenario_on_the_node(name: str, node: Node, scm_image: str, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    if "audit" in name:  # only the audit scenarios run the audit image (1.4 GB to load into the node)
        request.getfixturevalue("audit_image")
    monkeypatch.setattr(scenarios, "environment", functools.partial(node_environment, node, restricted=True))
    await getattr(scenarios, name)(tmp_path)
