"""SequenceIdGenerator: unique, increasing IDs across batches, invalidation, CAS races and restarts."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scm_server.ha.dispatcher import SCMStateMachineDispatcher
from scm_server.ha.replicate import RequestType
from scm_server.ha.scm_ha_manager_stub import SCMHAManagerStub
from scm_server.ha.sequence_id_generator import (
    CERTIFICATE_ID,
    CONTAINER_ID,
    INITIAL_VALUES,
    LOCAL_ID,
    LOCAL_ID_INITIAL_VALUE,
    SEQUENCE_ID_TYPES,
    SequenceIdGenerator,
    SequenceIdStateManager,
)
from scm_server.ha.transaction_buffer import SCMHADBTransactionBuffer
from scm_server.metadata import SCMMetadataStore, SCMStorageConfig


class Node:
    """One SCM's worth of sequence-id machinery over a directory (stub HA)."""

    def __init__(self, path: Path, batch: int) -> None:
        self.metadata_store = SCMMetadataStore(path, sync=False)
        self.transaction_buffer = SCMHADBTransactionBuffer(self.metadata_store)
        self.dispatcher = SCMStateMachineDispatcher()
        self.storage_config = SCMStorageConfig(path)
        self.stub = SCMHAManagerStub()
        self.state_manager = SequenceIdStateManager(self.metadata_store, self.transaction_buffer, self.stub)
        self.dispatcher.register(RequestType.SEQUENCE_ID, self.state_manager)
        self.stub.attach(self)  # type: ignore[arg-type]
        self.generator = SequenceIdGenerator(self.state_manager, batch)

    def close(self) -> None:
        self.metadata_store.close()


ops = st.lists(
    st.one_of(
        st.tuples(st.just("next"), st.sampled_from(SEQUENCE_ID_TYPES), st.integers(1, 12)),
        st.tuples(st.just("concurrent"), st.sampled_from([LOCAL_ID, CONTAINER_ID]), st.integers(2, 8)),
        st.just(("invalidate",)),
        st.just(("restart",)),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops, batch=st.integers(1, 7))
def test_ids_unique_and_increasing_across_batches_invalidation_and_restarts(ops: list[tuple], batch: int) -> None:  # type: ignore[type-arg]
    async def run() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            node = Node(Path(tmp), batch)
            issued: dict[str, list[int]] = {t: [] for t in SEQUENCE_ID_TYPES}
            try:
                for op in ops:
                    if op[0] == "next":
                        for _ in range(op[2]):
                            issued[op[1]].append(await node.generator.get_next_id(op[1]))
                    elif op[0] == "concurrent":
                        got = await asyncio.gather(*(node.generator.get_next_id(op[1]) for _ in range(op[2])))
                        issued[op[1]].extend(sorted(got))
                    elif op[0] == "invalidate":
                        node.generator.invalidate_batch()
                    else:
                        node.close()
                        node = Node(Path(tmp), batch)
            finally:
                node.close()
            for name, ids in issued.items():
                assert len(ids) == len(set(ids)), f"{name} reused an id: {ids}"
                assert ids == sorted(ids), f"{name} went backwards: {ids}"
                assert all(i > INITIAL_VALUES[name] for i in ids)

    asyncio.run(run())


async def test_batching_means_one_replicated_write_per_batch(tmp_path: Path) -> None:
    node = Node(tmp_path, 100)
    ids = [await node.generator.get_next_id(LOCAL_ID) for _ in range(250)]
    assert ids == list(range(LOCAL_ID_INITIAL_VALUE + 1, LOCAL_ID_INITIAL_VALUE + 251))
    assert node.generator.batch_allocations == 3
    assert node.metadata_store.get_transaction_info().index == 3
    # Certificate ids use batches of one, starting after the root (1) and sub-CA (2) serials.
    assert [await node.generator.get_next_id(CERTIFICATE_ID) for _ in range(3)] == [3, 4, 5]
    node.close()


async def test_cas_rejects_stale_expected_value_and_leaders_never_overlap(tmp_path: Path) -> None:
    node = Node(tmp_path, 10)
    old_leader = node.generator
    new_leader = SequenceIdGenerator(node.state_manager, 10)
    a = await old_leader.get_next_id(CONTAINER_ID)  # old leader owns (0, 10]
    b = await new_leader.get_next_id(CONTAINER_ID)  # new leader CASes 10 -> 20
    assert (a, b) == (1, 11)
    # A replicated CAS with a stale expected value is refused without changing anything.
    assert await node.state_manager.allocate_batch(CONTAINER_ID, 10, 30) is False
    assert node.state_manager.last_id(CONTAINER_ID) == 20
    rest_old = [await old_leader.get_next_id(CONTAINER_ID) for _ in range(12)]
    rest_new = [await new_leader.get_next_id(CONTAINER_ID) for _ in range(12)]
    assert not set(rest_old) & set(rest_new)
    assert not {a, b} & set(rest_old + rest_new)
    node.close()


def test_initial_values_are_constants_identical_everywhere(tmp_path: Path) -> None:
    # HDDS-5015: two SCMs initialised separately must start localId at the same value.
    one, two = Node(tmp_path / "a", 5), Node(tmp_path / "b", 5)
    assert one.state_manager.last_id(LOCAL_ID) == two.state_manager.last_id(LOCAL_ID) == LOCAL_ID_INITIAL_VALUE
    one.close()
    two.close()
