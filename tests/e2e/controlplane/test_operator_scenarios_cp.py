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

from tests.e2e.controlplane.env import control_plane_environment
from tests.e2e.controlplane.fixture import ControlPlane
from tests.e2e.local import test_operator_scenarios as scenarios

pytestmark = pytest.mark.control_plane

# Every scenario of the local tier, by name (the functions are imported, not copied).
SCENARIOS = [
    "test_one_member_cluster",
    "test_create_kill_replace_and_scale",
    "test_operator_killed_in_the_middle_of_bootstrap_and_of_scaling",
    "test_secure_cluster_certificates_chain_to_one_root",
    "test_secure_ca_mode_scm_cluster_chains_to_the_primordials_root",
    "test_bad_input_keeps_the_cluster_serving",
    "test_rolling_image_change_leader_last_without_failed_allocations",
    "test_roll_with_the_primordial_lost_replaces_it_before_restarting_another_member",
    "test_a_member_frozen_just_before_the_next_roll_step_holds_the_roll",
    "test_a_recreated_resource_adopts_and_owns_the_orphaned_ring",
    "test_two_operators_one_active_and_the_standby_finishes_after_a_sigkill",
    "test_the_standby_finishes_a_bootstrap_the_active_operator_was_killed_in",
    "test_backup_runs_as_a_verified_job_into_the_backup_volume_and_deleting_it_deletes_its_data",
    "test_operator_recovers_a_lost_quorum_from_the_named_survivor",
    "test_a_cluster_created_from_a_backup_has_its_containers_and_hands_out_higher_block_ids",
    "test_scheduled_backups_keep_the_newest_and_export_the_deadline",
]


@pytest.mark.parametrize("name", SCENARIOS)
async def test_scenario_in_a_restricted_namespace(name: str, control_plane: ControlPlane, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenarios, "environment",
                        functools.partial(control_plane_environment, control_plane, restricted=True))
    await getattr(scenarios, name)(tmp_path)
