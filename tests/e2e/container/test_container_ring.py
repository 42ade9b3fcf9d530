"""The container scenario: a 3-SCM ring whose Pods run as podman containers (``--runtime runc``) from the built
image, on a podman network the fixture creates, with the kubelet fixture in its podman mode. The members reach
Ready, a client outside the network allocates blocks, the leader's container is killed, a new leader serves, and
the killed member's container restarts and rejoins with one cluster ID and identical tables.

Twice: with the hand-written Pods of the container recipe (``scm_ring.py``), and with the Pods the real operator
builds from an ``OzoneSCMCluster`` (the operator runs in-process against the emulated API server, reaching the
members at their container addresses).

Not part of ``make test``: ``make e2e-container`` runs it (after ``make image``), and ``.ci/run`` does both.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ozone_scm_operator.main import OperatorOptions, run_operator
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


ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.timeout(1200)
async def test_operator_built_ring_in_containers_survives_a_leader_container_kill(tmp_path: Path) -> None:
    found = subprocess.run(["podman", "image", "exists", IMAGE], capture_output=True)
    if found.returncode != 0:
        pytest.fail(f"image {IMAGE} not found: run `make image` first (make e2e-container does)")
    async with serving() as (api, url):
        for crd in sorted((ROOT / "crds").glob("*.yaml")):  # every CRD the operator watches
            api.put_object(yaml.safe_load(crd.read_text()))
        config = KubeletConfig(workdir=tmp_path, runtime="podman", backoff_base=0.5, backoff_cap=2.0)
        async with Kubelet(url, config) as kubelet:
            stop = asyncio.Event()
            options = OperatorOptions(server=url, poll_interval=1.0, health_host="127.0.0.1", health_port=0)
            operator: asyncio.Task[Any] = asyncio.create_task(run_operator(options, stop_flag=stop))
            try:
                api.put_object({"apiVersion": "ozone-scm.io/v1alpha1", "kind": "OzoneSCMCluster",
                                "metadata": {"name": "scm", "namespace": NS},
                                "spec": {"replicas": 3, "image": IMAGE, "storage": {"size": "1Gi"},
                                         "ozoneSite": {"ozone.scm.ha.ratis.fsync": "false"}}})
                api.put_object(scm_ring.datanode_pod("scm", NS, scm_ring.member_names("scm", 3), IMAGE))

                def cluster_ready() -> bool:
                    status = (api.get_object("ozone-scm.io/v1alpha1", "OzoneSCMCluster", "scm", NS) or {}).get(
                        "status") or {}
                    return status.get("membersReady") == "3/3" and any(
                        c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])

                await api.wait_for(cluster_ready, 600)
                await check_ring_survives_a_leader_crash(api, kubelet, ready_timeout=120)
                await api.wait_for(cluster_ready, 300)  # the operator sees the ring whole again
            finally:
                stop.set()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(operator, 60)
        assert api.internal_errors == []
