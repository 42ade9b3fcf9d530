"""The tiers that run the operator's scenarios run the same list (``tests/e2e/scenarios.py``): the control-plane,
node and kind tiers parametrise exactly it, and it is every scenario function of the local module. Runs in
``make test`` (no cluster needed: it reads the tiers' parametrisation, as pytest does)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from tests.e2e import scenarios
from tests.e2e.controlplane import test_operator_scenarios_cp as control_plane
from tests.e2e.kind import test_kind_scenarios as kind
from tests.e2e.local import test_operator_scenarios as local
from tests.e2e.node import test_node_scenarios as node


def parametrised_names(test: Callable[..., Any]) -> list[str]:
    marks = [m for m in getattr(test, "pytestmark", []) if m.name == "parametrize"]
    assert len(marks) == 1 and marks[0].args[0] == "name", marks
    return list(marks[0].args[1])


def test_the_control_plane_node_and_kind_tiers_run_the_same_scenario_list() -> None:
    assert parametrised_names(control_plane.test_scenario_in_a_restricted_namespace) == scenarios.SCENARIOS
    assert parametrised_names(node.test_scenario_on_the_node) == scenarios.SCENARIOS
    assert parametrised_names(kind.test_scenario_on_kind) == scenarios.SCENARIOS


def test_the_list_is_every_scenario_function_of_the_local_module() -> None:
    functions = {n for n, f in vars(local).items() if n.startswith("test_") and inspect.iscoroutinefunction(f)}
    assert set(scenarios.SCENARIOS) == functions and len(scenarios.SCENARIOS) == len(functions)
    for name in scenarios.SCENARIOS:  # each takes only its work directory: the environment is the tier's
        assert list(inspect.signature(getattr(local, name)).parameters) == ["tmp_path"], name
    # the scenarios the issues name are in it: the retained-volume adoption and the scheduled audit
    assert "test_deleting_a_retained_cluster_keeps_its_volumes_and_a_new_resource_adopts_them" in scenarios.SCENARIOS
    assert "test_scheduled_audit_runs_from_the_cronjob_and_reports_to_status" in scenarios.SCENARIOS


def test_only_the_scenarios_that_need_controllers_are_kept_from_the_emulator() -> None:
    needs = [n for n in scenarios.SCENARIOS
             if any(m.name == "control_plane" for m in getattr(getattr(local, n), "pytestmark", []))]
    assert needs == ["test_scheduled_audit_runs_from_the_cronjob_and_reports_to_status"]


def test_the_node_tiers_ci_subset_is_part_of_the_list() -> None:
    assert node.CI_SCENARIOS and set(node.CI_SCENARIOS) <= set(scenarios.SCENARIOS)
    assert len(set(node.CI_SCENARIOS)) == len(node.CI_SCENARIOS)


# What a scenario can only do to an operator that is a process of this machine (kind_env.PodOperatorEnv refuses it)
_HOST_ONLY = ("crash_before", "pause_before", "gate_before", "identity=", "operator_exited", "kill_operator",
              "extra_env")


def _needs_host_operator(name: str) -> bool:
    """Whether the scenario, or a helper of the local module it calls, uses one of ``_HOST_ONLY``."""
    helpers = {n: inspect.getsource(f) for n, f in vars(local).items()
               if n.startswith("_") and inspect.isfunction(f)}  # coroutine functions too
    source = inspect.getsource(getattr(local, name))
    seen: set[str] = set()
    todo = [source]
    while todo:
        text = todo.pop()
        if any(sign in text for sign in _HOST_ONLY):
            return True
        for helper, body in helpers.items():
            if helper not in seen and f"{helper}(" in text:
                seen.add(helper)
                todo.append(body)
    return False


def test_the_node_tier_runs_the_operator_in_its_pod_except_where_a_scenario_needs_a_host_process() -> None:
    needs = {n for n in scenarios.SCENARIOS if _needs_host_operator(n)}
    assert set(node.HOST_OPERATOR) == needs
    assert not set(node.CI_SCENARIOS) & set(node.HOST_OPERATOR)  # make e2e-node: the operator always in its Pod
