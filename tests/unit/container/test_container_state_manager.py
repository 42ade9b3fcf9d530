"""ContainerStateManager: Ozone's transition table, idempotence, rejections, determinism across SCMs."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import plyvel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scm_server.container.container_state_manager import (
    CLEANUP,
    CLOSE,
    CLOSED,
    CLOSING,
    DELETE,
    DELETED,
    DELETING,
    EVENT_TARGET,
    FINALIZE,
    FORCE_CLOSE,
    OPEN,
    QUASI_CLOSE,
    QUASI_CLOSED,
    RECOVERING,
    TRANSITIONS,
    ContainerStateManager,
    next_state,
)
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha.dispatcher import SCMStateMachineDispatcher
from scm_server.ha.replicate import RequestType
from scm_server.ha.scm_ha_manager_stub import SCMHAManagerStub
from scm_server.ha.transaction_buffer import SCMHADBTransactionBuffer
from scm_server.metadata import SCMMetadataStore, SCMStorageConfig
from scm_server.proto import hdds_pb2

STATES = [OPEN, CLOSING, QUASI_CLOSED, CLOSED, DELETING, DELETED]
EVENTS = [FINALIZE, QUASI_CLOSE, CLOSE, FORCE_CLOSE, DELETE, CLEANUP]
N = None  # no-op
X = "invalid"

# Rows: from-state; columns: FINALIZE, QUASI_CLOSE, CLOSE, FORCE_CLOSE, DELETE, CLEANUP.
EXPECTED = {
    OPEN: [CLOSING, X, X, X, X, X],
    CLOSING: [N, QUASI_CLOSED, CLOSED, X, X, X],
    QUASI_CLOSED: [N, N, X, CLOSED, DELETING, X],
    CLOSED: [N, N, N, N, DELETING, X],
    DELETING: [N, N, N, N, N, DELETED],
    DELETED: [N, N, N, N, N, N],
}


class SCMNode:
    def __init__(self, path: Path) -> None:
        self.metadata_store = SCMMetadataStore(path, sync=False)
        self.transaction_buffer = SCMHADBTransactionBuffer(self.metadata_store)
        self.dispatcher = SCMStateMachineDispatcher()
        self.storage_config = SCMStorageConfig(path)
        self.stub = SCMHAManagerStub()
        self.csm = ContainerStateManager(self.metadata_store, self.transaction_buffer, self.stub)
        self.dispatcher.register(RequestType.CONTAINER, self.csm)
        self.stub.attach(self)  # type: ignore[arg-type]

    def raw_db(self) -> dict[bytes, bytes]:
        self.metadata_store.close()
        db = plyvel.DB(str(self.metadata_store.db_path))
        try:
            return dict(db.iterator())
        finally:
            db.close()


def info(cid: int, state: int = OPEN) -> hdds_pb2.ContainerInfoProto:
    return hdds_pb2.ContainerInfoProto(
        containerID=cid,
        state=state,  # type: ignore[arg-type]
        pipelineID=hdds_pb2.PipelineID(id="p1"),
        owner="om",
        stateEnterTime=1,
        replicationFactor=hdds_pb2.THREE,
        replicationType=hdds_pb2.RATIS,
    )


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("event_index", range(len(EVENTS)))
def test_transition_table(state: int, event_index: int) -> None:
    event = EVENTS[event_index]
    expected = EXPECTED[state][event_index]
    if expected == X:
        with pytest.raises(SCMException) as err:
            next_state(state, event)
        assert err.value.result is ResultCodes.UNEXPECTED_CONTAINER_STATE
        assert not err.value.is_fatal
    else:
        assert next_state(state, event) == expected


def test_table_matches_ozone_definition() -> None:
    assert TRANSITIONS == {
        (OPEN, FINALIZE): CLOSING,
        (CLOSING, QUASI_CLOSE): QUASI_CLOSED,
        (CLOSING, CLOSE): CLOSED,
        (QUASI_CLOSED, FORCE_CLOSE): CLOSED,
        (QUASI_CLOSED, DELETE): DELETING,
        (CLOSED, DELETE): DELETING,
        (DELETING, CLEANUP): DELETED,
    }
    with pytest.raises(SCMException):
        next_state(RECOVERING, FINALIZE)


async def test_replicated_mutations_and_rejections(tmp_path: Path) -> None:
    node = SCMNode(tmp_path)
    csm = node.csm
    await csm.add_container(info(1))
    await csm.add_container(info(1))  # identical replay: idempotent
    with pytest.raises(SCMException) as err:
        await csm.add_container(info(1, CLOSED))
    assert err.value.result is ResultCodes.CONTAINER_EXISTS
    assert [c.containerID for c in csm.open_containers_of_pipeline("p1")] == [1]
    await csm.update_container_state(1, FINALIZE, 1234)
    assert csm.get_container(1).state == CLOSING and csm.get_container(1).stateEnterTime == 1234
    assert csm.open_containers_of_pipeline("p1") == []
    with pytest.raises(SCMException) as err:
        await csm.update_container_state(1, DELETE)
    assert err.value.result is ResultCodes.UNEXPECTED_CONTAINER_STATE
    assert csm.get_container(1).state == CLOSING  # untouched
    with pytest.raises(SCMException) as err:
        await csm.update_container_state(99, FINALIZE)
    assert err.value.result is ResultCodes.CONTAINER_NOT_FOUND
    await csm.update_container_state(1, CLOSE)
    updated = hdds_pb2.ContainerInfoProto()
    updated.CopyFrom(csm.get_container(1))
    updated.numberOfKeys = 42
    await csm.update_container_info(updated)
    updated.state = OPEN  # type: ignore[assignment]
    with pytest.raises(SCMException, match="may not change state"):
        await csm.update_container_info(updated)
    assert csm.counts_by_state()["CLOSED"] == 1
    # Everything survives a reopen from scm.db.
    node.metadata_store.close()
    again = SCMNode(tmp_path)
    assert again.csm.get_container(1).state == CLOSED and again.csm.get_container(1).numberOfKeys == 42
    await again.csm.remove_container(1)
    assert not again.csm.contains(1)
    again.metadata_store.close()


_requests = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 5)),
        st.tuples(st.just("event"), st.integers(1, 6), st.sampled_from(EVENTS)),
        st.tuples(st.just("remove"), st.integers(1, 5)),
    ),
    max_size=40,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=_requests)
def test_random_events_never_illegal_and_two_scms_end_identical(requests: list[tuple]) -> None:  # type: ignore[type-arg]
    order = {s: i for i, s in enumerate(STATES)}

    async def drive(node: SCMNode) -> list[str]:
        outcomes = []
        for req in requests:
            try:
                if req[0] == "add":
                    await node.csm.add_container(info(req[1]))
                elif req[0] == "remove":
                    await node.csm.remove_container(req[1])
                else:
                    cid, event = req[1], req[2]
                    before = node.csm.find(cid)
                    await node.csm.update_container_state(cid, event, 7)
                    after = node.csm.get_container(cid)
                    assert before is not None
                    if after.state != before.state:
                        assert TRANSITIONS[(before.state, event)] == after.state
                    else:
                        assert order[after.state] >= order[EVENT_TARGET[event]]
                    assert order[after.state] >= order[before.state]  # never backwards
                outcomes.append("ok")
            except SCMException as exc:
                assert not exc.is_fatal
                outcomes.append(exc.result.name)
        for c in node.csm.get_containers():
            assert c.state in STATES
        return outcomes

    async def run() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            a, b = SCMNode(Path(tmp) / "scm1"), SCMNode(Path(tmp) / "scm2")
            out_a, out_b = await drive(a), await drive(b)
            assert out_a == out_b
            assert a.raw_db() == b.raw_db()

    asyncio.run(run())
