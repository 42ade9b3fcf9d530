"""A 3-SCM HA ring from hand-written Pods (``scm_ring.py``, the container recipe of docs/operations.md), run by the
kubelet fixture as real SCM processes, each in its own network namespace with cluster DNS names: the members
bootstrap through the headless Service, elect a leader, serve block allocations to a client outside the "cluster";
a crash of the leader's container moves leadership, the container restarts and rejoins, and every member ends
with the same cluster ID and identical replicated tables.

This exercises the fixture with the real daemon (no operator); the operator's scenarios build on the same fixture.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from scm_server.client.ha_admin import HAAdminClient
from scm_server.client.retryable import is_answer_or_transient
from scm_server.client.scm_client import SCMClient
from tests.e2e.local import scm_ring
from tests.e2e.local.apiserver import EmulatedAPIServer, serving
from tests.e2e.local.kubelet import Kubelet, KubeletConfig
from tests.e2e.local.podspec import ImageSpec

pytestmark = pytest.mark.processes  # whole-SCM scenarios: make test-slow

NS = "default"
VENV_BIN = str(Path(sys.executable).parent)
# In process mode the "image" is this checkout's virtualenv, with the image's PATH.
SCM_IMAGE = ImageSpec(cmd=("ozone-scm", "scm"), env={"PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
                                                     "PYTHONUNBUFFERED": "1", "HOME": "/tmp"})


@pytest.fixture
async def ring(tmp_path: Path) -> AsyncIterator[tuple[EmulatedAPIServer, Kubelet]]:
    async with serving() as (api, url):
        config = KubeletConfig(workdir=tmp_path, images={"ozone-scm:*": SCM_IMAGE}, backoff_base=0.5,
                               backoff_cap=2.0)
        async with Kubelet(url, config) as kubelet:
            for obj in scm_ring.ring_objects("scm", NS, 3, "ozone-scm:dev",
                                             extra_site={"ozone.scm.ha.ratis.fsync": "false"}):
                api.put_object(obj)
            yield api, kubelet
        assert api.internal_errors == []


def ready(api: EmulatedAPIServer, name: str) -> bool:
    pod = api.get_object("v1", "Pod", name, NS) or {}
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def pod_ip(api: EmulatedAPIServer, name: str) -> str:
    pod = api.get_object("v1", "Pod", name, NS)
    assert pod is not None
    return str(pod["status"]["podIP"])


async def eventually(fn: Any, timeout: float, what: str) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    last: BaseException | None = None
    while asyncio.get_running_loop().time() < deadline:
        try:
            value = await fn()
            if value:
                return value
        except Exception as exc:  # an SCM down or refusing is retried until the deadline; a harness error raises
            if not is_answer_or_transient(exc):
                raise
            last = exc
        await asyncio.sleep(0.25)
    raise AssertionError(f"{what} did not happen within {timeout}s (last error: {last!r})")


async def leader_member(ips: dict[str, str]) -> str | None:
    async with HAAdminClient([f"{ip}:9895" for ip in ips.values()], rounds=1, timeout=3) as admin:
        roles = await admin.roles()
    if not roles.leader_id:
        return None
    leader = next((p for p in roles.peers if p.peer_id == roles.leader_id), None)
    if leader is None:
        return None
    return next((m for m in ips if leader.host.startswith(f"{m}.")), None)


async def allocate(ips: dict[str, str]) -> int:
    async with SCMClient([f"{ip}:19860" for ip in ips.values()]) as client:
        blocks = await asyncio.wait_for(client.allocate_block(1024 * 1024, num_blocks=2), 20)
    return len(blocks)


async def test_scm_ring_in_pods_survives_a_leader_crash(ring: tuple[EmulatedAPIServer, Kubelet]) -> None:
    api, kubelet = ring
    await check_ring_survives_a_leader_crash(api, kubelet, ready_timeout=240)


async def check_ring_survives_a_leader_crash(api: EmulatedAPIServer, kubelet: Kubelet, ready_timeout: float) -> None:
    """The scenario, shared with the container tier (tests/e2e/container)."""
    members = scm_ring.member_names("scm", 3)
    try:
        await api.wait_for(lambda: all(ready(api, m) for m in members), ready_timeout)
    except TimeoutError:
        for pod in (*members, "scm-datanodes"):
            print(f"===== {pod}\n{kubelet.logs(NS, pod)[-3000:]}")
        raise
    ips = {m: pod_ip(api, m) for m in members}
    assert len(set(ips.values())) == 3

    assert await eventually(lambda: allocate(ips), 120, "block allocation after safemode") == 2
    old_leader = await eventually(lambda: leader_member(ips), 30, "a leader")

    await kubelet.kill(NS, old_leader)  # the container crashes (SIGKILL); the kubelet restarts it

    async def new_leader() -> str | None:
        leader = await leader_member({m: ip for m, ip in ips.items() if m != old_leader})
        return leader if leader and leader != old_leader else None

    leader = await eventually(new_leader, 30, "a new leader")
    assert await eventually(lambda: allocate(ips), 60, "block allocation by the new leader") == 2

    def restarted() -> bool:
        pod = api.get_object("v1", "Pod", old_leader, NS) or {}
        statuses = pod.get("status", {}).get("containerStatuses") or [{}]
        return statuses[0].get("restartCount", 0) >= 1 and ready(api, old_leader)

    await api.wait_for(restarted, 120)
    assert pod_ip(api, old_leader) == ips[old_leader]  # a container restart keeps the Pod's address

    # Every member: one cluster ID, and the replicated tables agree.
    infos = {}
    for member, ip in ips.items():
        async with HAAdminClient([f"{ip}:9895"], rounds=3, timeout=5) as admin:
            infos[member] = await admin.scm_info()
    assert len({i.clusterId for i in infos.values()}) == 1
    async def tables_agree() -> bool:
        async with HAAdminClient([f"{ip}:9895" for ip in ips.values()], rounds=3, timeout=10) as admin:
            roles = await admin.roles()
            digests = {m: await admin.table_digests(f"{ip}:9895", min_applied_index=roles.commit_index)
                       for m, ip in ips.items()}
        tables = {m: {t.table: (t.sha256, t.count) for t in d.digests} for m, d in digests.items()}
        return bool(tables[leader]) and all(t == tables[leader] for t in tables.values())

    assert await eventually(tables_agree, 30, "identical replicated tables on every member")
