"""The per-datanode pipeline counts the placement reads (kept by the state manager until the pipelines change) and
the one-pass placement: both must answer exactly what the plain scans they replaced answered."""

from __future__ import annotations

import asyncio
import random
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scm_server.exceptions import SCMException
from scm_server.ha.dispatcher import SCMStateMachineDispatcher
from scm_server.ha.replicate import RequestType
from scm_server.ha.scm_ha_manager_stub import SCMHAManagerStub
from scm_server.ha.transaction_buffer import SCMHADBTransactionBuffer
from scm_server.metadata import SCMMetadataStore, SCMStorageConfig
from scm_server.node.node_manager import DatanodeInfo
from scm_server.pipeline.pipeline_state_manager import (
    ALLOCATED,
    CLOSED,
    DORMANT,
    OPEN,
    PipelineStateManager,
)
from scm_server.pipeline.placement import PipelinePlacementPolicy, has_enough_space
from scm_server.proto import hdds_pb2, scm_datanode_pb2

LIVE = {ALLOCATED, OPEN, DORMANT}
DATANODES = [f"dn{i}" for i in range(6)]


class Node:
    def __init__(self, path: Path) -> None:
        self.metadata_store = SCMMetadataStore(path, sync=False)
        self.transaction_buffer = SCMHADBTransactionBuffer(self.metadata_store)
        self.dispatcher = SCMStateMachineDispatcher()
        self.storage_config = SCMStorageConfig(path)
        self.stub = SCMHAManagerStub()
        self.psm = PipelineStateManager(self.metadata_store, self.transaction_buffer, self.stub)
        self.dispatcher.register(RequestType.PIPELINE, self.psm)
        self.stub.attach(self)  # type: ignore[arg-type]


def naive_members(psm: PipelineStateManager, rfactor: int | None, dn: str) -> int:
    return sum(1 for p in psm.get_pipelines(None, rfactor, LIVE) if any(m.uuid == dn for m in p.members))


def naive_leaders(psm: PipelineStateManager, rfactor: int | None, dn: str) -> int:
    return sum(1 for p in psm.get_pipelines(None, rfactor, LIVE) if p.leaderID == dn)


# an operation: ("add", members, factor, leader) | ("state", index, state) | ("remove", index)
operation = st.one_of(
    st.tuples(st.just("add"), st.lists(st.sampled_from(DATANODES), min_size=1, max_size=3),
              st.sampled_from([hdds_pb2.ONE, hdds_pb2.THREE]), st.sampled_from(["", *DATANODES])),
    st.tuples(st.just("state"), st.integers(0, 20), st.sampled_from([OPEN, DORMANT, CLOSED])),
    st.tuples(st.just("remove"), st.integers(0, 20)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, max_size=25))
def test_counts_match_a_scan_of_every_pipeline_after_any_changes(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    async def run() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            node = Node(Path(tmp))
            psm = node.psm
            made: list[str] = []
            for op in ops:
                try:
                    if op[0] == "add":
                        _, members, factor, leader = op
                        pid = f"p{len(made)}"
                        made.append(pid)
                        await psm.add_pipeline(hdds_pb2.Pipeline(
                            id=hdds_pb2.PipelineID(id=pid), state=ALLOCATED, type=hdds_pb2.RATIS, factor=factor,
                            leaderID=leader, members=[hdds_pb2.DatanodeDetailsProto(uuid=u) for u in members]))
                    elif made:
                        pid = made[op[1] % len(made)]
                        if op[0] == "state":
                            await psm.update_pipeline_state(pid, op[2])
                        else:
                            await psm.remove_pipeline(pid)
                except SCMException:
                    pass  # a transition Ozone refuses, a removed pipeline: the counts must still agree
                for rfactor in (None, hdds_pb2.ONE, hdds_pb2.THREE):
                    members = psm.member_counts(rfactor, LIVE)
                    leaders = psm.leader_counts(rfactor, LIVE)
                    sets = {frozenset(m.uuid for m in p.members) for p in psm.get_pipelines(hdds_pb2.RATIS, rfactor, LIVE)}
                    assert psm.member_sets(hdds_pb2.RATIS, rfactor, LIVE) == sets
                    for dn in DATANODES:
                        assert members.get(dn, 0) == naive_members(psm, rfactor, dn), (op, rfactor, dn)
                        assert leaders.get(dn, 0) == naive_leaders(psm, rfactor, dn), (op, rfactor, dn)
            node.metadata_store.close()

    asyncio.run(run())


def reference_choose(rng: random.Random, candidates: Sequence[DatanodeInfo], count: int, load: Callable[[str], int],
                     limit: Callable[[str], int], exclude: set[str], favored: Sequence[str],
                     data_size: int) -> list[DatanodeInfo] | str:
    """The placement as it was written before the one-pass version (a scan per filter); the error's result code
    name instead of raising."""
    healthy = [n for n in candidates if n.is_healthy_in_service() and n.uuid not in exclude]
    if len(healthy) < count:
        return "FAILED_TO_FIND_SUITABLE_NODE"
    below = [n for n in healthy if load(n.uuid) < limit(n.uuid)]
    if len(below) < count:
        return "FAILED_TO_FIND_SUITABLE_NODE"
    usable = [n for n in below if has_enough_space(n, data_size, 0)]
    if len(usable) < count:
        return "FAILED_TO_FIND_NODES_WITH_SPACE"
    shuffled = list(usable)
    rng.shuffle(shuffled)
    ordered = sorted(shuffled, key=lambda n: load(n.uuid))
    favored_nodes = [n for n in ordered if n.uuid in set(favored)]
    anchor = (favored_nodes or ordered)[0]
    chosen = [anchor]
    rest = [n for n in ordered if n is not anchor]
    if count > 1:
        other_rack = [n for n in rest if n.rack != anchor.rack]
        second = (other_rack or rest)[0]
        chosen.append(second)
        rest.remove(second)
    while len(chosen) < count:
        near = [n for n in rest if n.rack == anchor.rack]
        pick = (near or rest)[0]
        chosen.append(pick)
        rest.remove(pick)
    return chosen


datanode = st.tuples(
    st.sampled_from(["/r1", "/r2", "/r3"]),
    st.sampled_from([hdds_pb2.HEALTHY, hdds_pb2.STALE, hdds_pb2.HEALTHY_READONLY]),
    st.sampled_from([hdds_pb2.IN_SERVICE, hdds_pb2.DECOMMISSIONING]),
    st.integers(0, 3),  # pipelines it is in
    st.sampled_from([None, 1 << 30, 10 << 30]),  # remaining bytes on its one volume (None: no volume reported)
)


@settings(max_examples=200, deadline=None)
@given(st.lists(datanode, max_size=14), st.integers(1, 3), st.integers(0, 2**32), st.sets(st.integers(0, 13)),
       st.lists(st.integers(0, 13), max_size=2), st.sampled_from([0, 5 << 30]))
def test_one_pass_placement_chooses_what_the_scans_chose(
    spec: list[tuple[str, int, int, int, int | None]], count: int, seed: int, excluded: set[int], favored: list[int],
    data_size: int,
) -> None:
    nodes = []
    for i, (rack, health, op, _, remaining) in enumerate(spec):
        reports = [] if remaining is None else [
            scm_datanode_pb2.StorageReportProto(storageUuid=f"s{i}", capacity=20 << 30, remaining=remaining)]
        nodes.append(DatanodeInfo(
            details=hdds_pb2.DatanodeDetailsProto(uuid=f"dn{i}", networkLocation=rack), health=health, op_state=op,
            op_state_expiry_epoch_s=0, last_heartbeat_mono=0, last_heartbeat_wall_ms=0, storage_reports=reports))
    load = {f"dn{i}": s[3] for i, s in enumerate(spec)}
    exclude = {f"dn{i}" for i in excluded}
    favor = [f"dn{i}" for i in favored]
    want = reference_choose(random.Random(seed), nodes, count, load.__getitem__, lambda _u: 2, exclude, favor,
                            data_size)
    policy = PipelinePlacementPolicy(random.Random(seed))
    if isinstance(want, str):
        with pytest.raises(SCMException) as err:
            policy.choose_datanodes(nodes, count, load.__getitem__, lambda _u: 2, exclude, favored=favor,
                                    data_size=data_size)
        assert err.value.result.name == want
    else:
        got = policy.choose_datanodes(nodes, count, load.__getitem__, lambda _u: 2, exclude, favored=favor,
                                      data_size=data_size)
        assert [n.uuid for n in got] == [n.uuid for n in want]
