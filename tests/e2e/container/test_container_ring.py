"""The container scenario: a 3-SCM ring whose Pods run as podman containers (``--runtime runc``) from the built
image, on a podman network the fixture creates, with the kubelet fixture in its podman mode. The members reach
Ready, a client outside the network allocates blocks, the leader's container is killed, a new leader serves, and
the killed member's container restarts and rejoins with one cluster ID and identical tables.

Not part of ``make test``: ``make e2e-container`` runs it (after ``make image``), and ``.ci/run`` does both.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.local import scm_ring
from tests.e2e.local.apiserver import EmulatedAPIServer, serving
from tests.e2e.local.kubelet import Kubelet, KubeletConfig
from tests.e2e.local.test_scm_ring import NS, check_ring_survives_a_leader_crash

pytestmark = pytest.mark.container
IMAGE = "localhost/ozone-scm:dev"


@pytest.fixture
async def podman_ring(tmp_path: Path) -> AsyncIterator[tuple[EmulatedAPIServer, Kubelet]]:
    found = subprocess.run(["podman", "image", "exists", IMAGE], capture_output=True)
    if found.returncode != 0:
        pytest.fail(f"image {IMAGE} not found: run `make image` first (make e2e-container does)")
    async with serving() as (api, url):
        config = KubeletConfig(workdir=tmp_path, runtime="podman", backoff_base=0.5, backoff_cap=2.0)
        async with Kubelet(url, config) as kubelet:
            for obj in scm_ring.ring_objects("scm", NS, 3, IMAGE, extra_site={"ozone.scm.ha.ratis.fsync": "false"}):
                api.put_object(obj)
            yield api, kubelet
        assert api.internal_errors == []


@pytest.mark.timeout(900)
async def test_container_ring_survives_a_leader_container_kill(
        podman_ring: tuple[EmulatedAPIServer, Kubelet]) -> None:
    api, kubelet = podman_ring
    await check_ring_survives_a_leader_crash(api, kubelet, ready_timeout=420)
