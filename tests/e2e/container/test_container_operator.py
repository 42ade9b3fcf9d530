"""The operator's container scenario: the real ``ozone-scm-operator`` process (on the host, as in
``tests/e2e/local/test_operator_scenarios.py``) creates an OzoneSCMCluster whose Pods the kubelet fixture runs as podman
containers (``--runtime runc``) from the built image, on a podman network it creates. Three members reach Ready, the
leader's container is killed, a new leader serves (the ring is Ready again under another leader), and every member
reports one cluster ID and identical tables.

Not part of ``make test``: ``make e2e-container`` runs it after ``make image``, and ``.ci/run`` does both.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.e2e.local.operator_env import environment

pytestmark = pytest.mark.container
IMAGE = "localhost/ozone-scm:dev"
NAME = "scm"


@pytest.mark.timeout(1200)
async def test_operator_ring_of_containers_survives_a_leader_container_kill(tmp_path: Path) -> None:
    found = subprocess.run(["podman", "image", "exists", IMAGE], capture_output=True)
    if found.returncode != 0:
        pytest.fail(f"image {IMAGE} not found: run `make image` first (make e2e-container does)")
    async with environment(tmp_path, runtime="podman") as env:
        await env.create(NAME, {"replicas": 3, "image": IMAGE, "imagePullPolicy": "Never"})
        await env.wait_ready(NAME, timeout=600)
        await env.verify_consistent(NAME)
        leader = await env.leader(NAME)
        await env.kill_scm(leader)
        await env.wait_for(lambda: env.status(NAME).get("leader") not in (None, leader), 120, "a new leader")
        await env.wait_ready(NAME, timeout=300)
        assert env.members(NAME) == ["scm-0", "scm-1", "scm-2"]  # the killed member restarted in place
        await env.verify_consistent(NAME)
