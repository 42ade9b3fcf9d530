"""The operator's scenarios on the node tier's real single node (``make e2e-node``): every scenario of
``tests/e2e/scenarios.py`` -- the functions of ``tests/e2e/local/test_operator_scenarios.py``, not copies, the list
the control-plane and kind tiers run -- with ``environment`` replaced by ``node_env.node_environment`` (the kind
tier's environment on this node): member Pods run by kubelet and containerd under Pod Security ``restricted``,
probes and restarts by kubelet, Services by kube-proxy, names by CoreDNS, volumes the node's local
PersistentVolumes; the operator the chart's Deployment Pod, except in the scenarios of ``HOST_OPERATOR``."""

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


# The scenarios that drive the operator in ways only a process of this machine allows; they run with the operator
# as a host process (the chart's ServiceAccount, the Deployment scaled to 0), every other one with the chart's
# Deployment Pod. The reasons, for docs/kubernetes.md ("The real node"):
HOST_OPERATOR = {
    # a failpoint (OZONE_SCM_OPERATOR_FAILPOINT) makes the operator exit with 86 right after writing an intent; in a
    # Pod kubelet would restart it at once, and the scenario checks the state it left before it starts again
    "test_operator_killed_in_the_middle_of_bootstrap_and_of_scaling": "failpoint exit",
    "test_roll_with_the_primordial_lost_replaces_it_before_restarting_another_member": "failpoint exit",
    "test_a_member_frozen_just_before_the_next_roll_step_holds_the_roll": "failpoint exit",
    # a gate is a file of this machine the operator waits for between a step's check and the step
    "test_a_follower_frozen_after_the_check_at_the_start_of_a_roll_costs_no_call": "gate file",
    "test_a_leader_frozen_after_the_first_member_rolled_gets_no_restart_from_the_operator": "gate file",
    # two operators under named identities, each with its own log and health port, one SIGKILLed and not restarted
    "test_two_operators_one_active_and_the_standby_finishes_after_a_sigkill": "two identities, SIGKILL",
    "test_the_standby_finishes_a_bootstrap_the_active_operator_was_killed_in": "two identities, SIGKILL",
}


@pytest.mark.parametrize("name", SCENARIOS)
async def test_scenario_on_the_node(name: str, node: Node, scm_image: str, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    if "audit" in name:  # only the audit scenarios run the audit image (1.4 GB to load into the node)
        request.getfixturevalue("audit_image")
    operator = "process" if name in HOST_OPERATOR else "pod"
    monkeypatch.setattr(scenarios, "environment",
                        functools.partial(node_environment, node, restricted=True, operator=operator))
    await getattr(scenarios, name)(tmp_path)
