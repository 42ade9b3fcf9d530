"""Allocation and listing cost what the indexes promise, not a scan of every container.

Operation counts, not timings: the container map of ContainerStateManager is wrapped in a dict
that counts lookups, then we check how many containers one allocation / one matching-container
call / one list page touches while thousands of other OPEN containers exist. Before the
per-pipeline/per-owner indexes every allocation rebuilt and sorted the pipeline's whole open
list (hundreds of lookups here); now it is bounded by the owner's own open containers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from scm_state_harness import bring_up, make_datanodes, make_scm

from scm_server.container.container_state_manager import ContainerInfo, ContainerStateManager
from scm_server.proto import hdds_pb2

BULK = 400


class CountingDict(dict[int, Any]):
    """A dict that counts item lookups (``d[k]`` and ``d.get(k)``)."""

    lookups = 0

    def __getitem__(self, key: int) -> Any:
        self.lookups += 1
        return super().__getitem__(key)

    def get(self, key: int, default: Any = None) -> Any:  # type: ignore[override]
        self.lookups += 1
        return super().get(key, default)


def count_lookups(sm: ContainerStateManager) -> CountingDict:
    counting = CountingDict(sm._containers)
    sm._containers = counting
    return counting


async def test_allocation_touches_only_the_owners_open_containers(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path, **{"ozone.scm.sequence.id.batch.size": "1000"})
    await bring_up(scm, make_datanodes(3))
    cm = scm.container_manager
    (pipeline,) = scm.pipeline_manager.open_pipelines(hdds_pb2.RATIS, hdds_pb2.THREE)
    for _ in range(BULK):  # another owner's OPEN containers pile up on the same pipeline
        await cm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "bulk")
    assert len(cm.state_manager.open_containers_of_pipeline(pipeline.id.id)) == BULK
    counting = count_lookups(cm.state_manager)

    for _ in range(20):
        await cm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "bulk")  # least-loaded pipeline path
    per_allocation = counting.lookups / 20
    assert per_allocation <= 4, f"{per_allocation} container lookups per allocation with {BULK} open"

    counting.lookups = 0
    got = {(await cm.get_matching_container(1000, "om", pipeline)).containerID for _ in range(20)}
    assert len(got) == 2  # openContainerLimit for this owner on this pipeline
    assert counting.lookups / 20 <= 8, f"{counting.lookups / 20} lookups per get_matching_container"
    await scm.stop()


async def test_list_containers_page_costs_the_page(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path, **{"ozone.scm.sequence.id.batch.size": "1000"})
    await bring_up(scm, make_datanodes(3))
    cm = scm.container_manager
    ids = [(await cm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")).containerID for _ in range(BULK)]
    await cm.close_container(ids[10])
    counting = count_lookups(cm.state_manager)

    page, total = scm.list_containers(start_id=ids[-5], count=3)
    assert [c.containerID for c in page] == ids[-5:-2] and total == 5
    assert counting.lookups <= 2 * 3 + 2, f"{counting.lookups} lookups for a page of 3"

    counting.lookups = 0
    page, total = scm.list_containers(start_id=0, count=10, state=hdds_pb2.CLOSING)
    assert [c.containerID for c in page] == [ids[10]] and total == 1
    assert counting.lookups <= 4
    # Unfiltered and filtered listings agree with a plain scan.
    page, total = scm.list_containers(start_id=ids[100], count=50, state=hdds_pb2.OPEN, rfactor=hdds_pb2.THREE)
    expected = [c for c in ids if c >= ids[100] and c != ids[10]]
    assert [c.containerID for c in page] == expected[:50] and total == len(expected)
    assert cm.state_manager.counts_by_state()["OPEN"] == BULK - 1
    assert cm.state_manager.counts_by_state()["CLOSING"] == 1
    await scm.stop()


async def test_indexes_survive_reload_and_removal(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    await bring_up(scm, make_datanodes(3))
    cm = scm.container_manager
    (pipeline,) = scm.pipeline_manager.open_pipelines(hdds_pb2.RATIS, hdds_pb2.THREE)
    a = await cm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    b = await cm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om2")
    await cm.close_container(a.containerID)
    cm.reinitialize()
    sm = cm.state_manager
    assert [c.containerID for c in sm.open_containers_of(pipeline.id.id, "om2")] == [b.containerID]
    assert sm.open_containers_of(pipeline.id.id, "om") == []
    assert sm.open_container_count(pipeline.id.id) == 1
    await sm.remove_container(b.containerID)
    assert sm.open_container_count(pipeline.id.id) == 0 and sm.container_ids() == [a.containerID]
    assert scm.list_containers(0, 10) == ([cm.get_container(a.containerID)], 1)
    await scm.stop()


async def test_matching_container_builds_one_proto_whatever_the_owner_has_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """allocate_block's hot path: scanning the owner's open containers uses the stored records;
    only the chosen container becomes a ContainerInfoProto."""
    scm = await make_scm(tmp_path, **{"ozone.scm.sequence.id.batch.size": "1000"})
    await bring_up(scm, make_datanodes(3))
    cm = scm.container_manager
    (pipeline,) = scm.pipeline_manager.open_pipelines(hdds_pb2.RATIS, hdds_pb2.THREE)
    for _ in range(BULK):
        await cm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    built = 0
    original = ContainerInfo.to_proto

    def counting_to_proto(self: ContainerInfo) -> hdds_pb2.ContainerInfoProto:
        nonlocal built
        built += 1
        return original(self)

    monkeypatch.setattr(ContainerInfo, "to_proto", counting_to_proto)
    got = {(await cm.get_matching_container(1000, "om", pipeline)).containerID for _ in range(20)}
    assert len(got) == 20  # round robin over the owner's open containers with room
    assert built <= 20, f"{built} protos built for 20 get_matching_container calls"
    await scm.stop()


async def test_replication_pass_builds_one_proto_per_container(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scm = await make_scm(tmp_path, **{"ozone.scm.sequence.id.batch.size": "1000"})
    await bring_up(scm, make_datanodes(3))
    for _ in range(100):
        await scm.container_manager.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    built = 0
    original = ContainerInfo.to_proto

    def counting_to_proto(self: ContainerInfo) -> hdds_pb2.ContainerInfoProto:
        nonlocal built
        built += 1
        return original(self)

    monkeypatch.setattr(ContainerInfo, "to_proto", counting_to_proto)
    report = await scm.replication_manager.run_once()
    assert {c.key: c.count for c in report.stat}["OPEN"] == 100
    assert built <= 100, f"{built} protos built for one pass over 100 containers"
    await scm.stop()
