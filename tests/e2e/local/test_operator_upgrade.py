"""An operator upgrade reaches the running members: the ring is created by an older build of the operator, the
operator is replaced by the current one while a workload allocates blocks, and the new build's Pods roll the members
one at a time, followers first and the leader last, with zero failed calls and zero duplicate block IDs.

The older build is a real, different operator program: a copy of this checkout's ``ozone_scm_operator`` package whose
member containers are built without a read-only root filesystem (as the operator built them before Pod Security
``restricted`` was applied; ``restricted`` itself does not require it, so the namespace admits both builds), put
first on the older process's ``PYTHONPATH``. Nothing in the operator knows it is being tested: the Pod revision covers
the Pod the build makes, so a build that makes other Pods rolls the ring through the same gates as any roll.
Run by ``make e2e-local``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import ozone_scm_operator
from ozone_scm_operator import naming
from tests.e2e.local.operator_env import Env, environment

NAME = "scm"
pytestmark = [pytest.mark.e2e_local, pytest.mark.timeout(900)]


def older_build(root: Path) -> Path:
    """A copy of the operator package that builds member containers with a writable root filesystem."""
    package = Path(ozone_scm_operator.__file__).parent
    target = root / "ozone_scm_operator"
    shutil.copytree(package, target, ignore=shutil.ignore_patterns("__pycache__"))
    builders = target / "builders.py"
    source = builders.read_text()
    current = '"readOnlyRootFilesystem": True,'
    assert source.count(current) == 1, "builders.py no longer sets readOnlyRootFilesystem in one place: update this test"
    builders.write_text(source.replace(current, '"readOnlyRootFilesystem": False,'))
    return root


def read_only_roots(env: Env) -> dict[str, bool]:
    return {
        name: all(c.get("securityContext", {}).get("readOnlyRootFilesystem") is True for c in pod["spec"]["containers"])
        for name, pod in env.pods(NAME).items()
    }


def revisions(env: Env) -> dict[str, str]:
    return {name: (pod["metadata"].get("annotations") or {}).get(naming.ANN_REVISION, "")
            for name, pod in env.pods(NAME).items()}


async def test_an_operator_upgrade_rolls_the_members_leader_last_without_failed_allocations(tmp_path: Path) -> None:
    old = older_build(tmp_path / "old-operator")
    async with environment(tmp_path) as env:
        await env.stop_all_operators()  # the environment starts the current build; this ring starts on the older one
        await env.start_operator(extra_env={"PYTHONPATH": str(old)})
        await env.create(NAME, {"replicas": 3})
        await env.wait_ready(NAME, timeout=240)
        await env.verify_consistent(NAME)
        assert read_only_roots(env) == {m: False for m in env.members(NAME)}, read_only_roots(env)
        old_revisions = revisions(env)
        assert len(set(old_revisions.values())) == 1, old_revisions

        out = env.start_workload(NAME)
        await env.workload_ready(out)
        leader = await env.leader(NAME)
        events_before = len(env.events(NAME))

        # the upgrade: the older operator stops (SIGTERM, as a Deployment's rollout does), the current one starts
        await env.stop_operator()
        await env.start_operator()
        await env.wait_for(lambda: all(read_only_roots(env).values()) and len(read_only_roots(env)) == 3
                           and env.is_ready(NAME, 3), 300, "every member rebuilt by the new operator and Ready")
        result = await env.stop_workload(out)

        new_revisions = revisions(env)
        assert len(set(new_revisions.values())) == 1 and set(new_revisions.values()) != set(old_revisions.values())
        evs = [(r, msg) for _, r, msg in env.events(NAME)[events_before:] if r in ("RollingMember", "TransferringLeadership")]
        rolled = [msg.split()[1] for r, msg in evs if r == "RollingMember"]
        assert sorted(rolled) == sorted(env.members(NAME)), evs  # each member once
        # the member that led when its turn came goes last, after leadership moved away from it
        moved = [msg.split()[3] for r, msg in evs if r == "TransferringLeadership"]
        assert moved and moved[-1] == rolled[-1], f"the leader was not rolled last (it led at first: {leader}): {evs}"
        assert len(result.calls) > 100, len(result.calls)
        assert result.failures == [], result.failures[:5]
        assert result.duplicates == set()
        print(f"operator upgrade: {len(result.calls)} calls, longest gap {result.longest_gap:.2f} s")
        await env.verify_consistent(NAME)
