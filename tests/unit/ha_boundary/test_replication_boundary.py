"""@replicate codec, dispatcher (logical rejection vs fatal), transaction buffer and the stub HA path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plyvel
import pytest

from scm_server.exceptions import ResultCodes, SCMException, SCMFatalError
from scm_server.ha import codec
from scm_server.ha.dispatcher import SCMStateMachineDispatcher
from scm_server.ha.replicate import RequestType, replicate, replicated_methods, to_wire_name
from scm_server.ha.scm_ha_manager_stub import SCMHAManagerStub
from scm_server.ha.transaction_buffer import SCMHADBTransactionBuffer, TransactionInfo
from scm_server.metadata import TRANSACTION_INFO_KEY, SCMMetadataStore, SCMStorageConfig
from scm_server.proto import hdds_pb2, scm_ratis_pb2


class Counter:
    """A tiny replicated state manager writing to the meta table."""

    def __init__(self, store: SCMMetadataStore, buffer: SCMHADBTransactionBuffer, ha_manager: Any) -> None:
        self.store = store
        self.buffer = buffer
        self.ha_manager = ha_manager
        self.value = 0

    @replicate(RequestType.STATEFUL_SERVICE_CONFIG)
    def add(self, amount: int, note: str = "") -> int:
        if amount < 0:
            raise SCMException(ResultCodes.INVALID_REQUEST, "negative")
        self.value += amount
        self.buffer.add_to_buffer(self.store.meta, "counter", str(self.value))
        return self.value

    @replicate(RequestType.STATEFUL_SERVICE_CONFIG)
    def explode(self, fatal: bool) -> None:
        self.buffer.add_to_buffer(self.store.meta, "partial", "written-before-crash")
        if fatal:
            raise SCMException(ResultCodes.IO_EXCEPTION, "disk on fire")
        raise RuntimeError("bug")


class Host:
    """The minimal SCMHAHost the stub needs."""

    def __init__(self, tmp: Path) -> None:
        self.metadata_store = SCMMetadataStore(tmp)
        self.transaction_buffer = SCMHADBTransactionBuffer(self.metadata_store)
        self.dispatcher = SCMStateMachineDispatcher()
        self.storage_config = SCMStorageConfig(tmp)
        self.storage_config.initialize()
        self.leader_calls: list[str] = []

    def on_become_leader(self, term: int) -> None:
        self.leader_calls.append(f"leader:{term}")

    def on_leader_ready(self) -> None:
        self.leader_calls.append("ready")

    class _Ctx:
        term = -1

    scm_context = _Ctx()


@pytest.fixture
def setup(tmp_path: Path):  # type: ignore[no-untyped-def]
    host = Host(tmp_path)
    stub = SCMHAManagerStub(host.metadata_store)
    counter = Counter(host.metadata_store, host.transaction_buffer, stub)
    host.dispatcher.register(RequestType.STATEFUL_SERVICE_CONFIG, counter)
    stub.attach(host)  # type: ignore[arg-type]
    yield host, stub, counter
    host.metadata_store.close()


def test_codec_round_trip() -> None:
    values = [None, True, False, 0, -5, 2**62, "héllo", b"\x00\xff", hdds_pb2.PipelineID(id="p"), [1, "a", [hdds_pb2.PipelineID(id="q")]]]
    for v in values:
        decoded = codec.decode_value(codec.encode_value(v))
        assert decoded == v
        assert type(decoded) is type(v) or isinstance(v, tuple)
    with pytest.raises(TypeError):
        codec.encode_value(1.5)
    with pytest.raises(SCMException) as err:
        codec.decode_value(scm_ratis_pb2.MethodArgument(type="no.such.Message", value=b""))
    assert err.value.result is ResultCodes.INVALID_REQUEST


def test_wire_names_are_ozone_camel_case() -> None:
    assert to_wire_name("update_container_state") == "updateContainerState"
    assert set(replicated_methods(Counter.__new__(Counter))) == {"add", "explode"}


async def test_replicated_call_goes_through_stub_and_persists_with_index(setup) -> None:  # type: ignore[no-untyped-def]
    host, stub, counter = setup
    await stub.start()
    assert host.leader_calls == ["leader:-1", "ready"]
    assert await counter.add(5) == 5
    assert await counter.add(amount=2, note="kw") == 7
    store = host.metadata_store
    assert store.meta.get("counter") == "7"
    assert store.get_transaction_info() == hdds_pb2.TransactionInfoProto(term=0, index=2)
    assert host.transaction_buffer.latest_snapshot() == TransactionInfo(0, 2)


async def test_logical_rejection_leaves_state_and_returns_error(setup) -> None:  # type: ignore[no-untyped-def]
    host, _stub, counter = setup
    await counter.add(3)
    with pytest.raises(SCMException) as err:
        await counter.add(-1)
    assert err.value.result is ResultCodes.INVALID_REQUEST
    assert counter.value == 3
    assert host.metadata_store.meta.get("counter") == "3"
    # The rejected entry still consumed an index, like a committed-but-rejected Raft entry.
    assert host.metadata_store.get_transaction_info().index == 2


def test_dispatcher_rejection_and_fatal(setup) -> None:  # type: ignore[no-untyped-def]
    host, _stub, counter = setup
    d = host.dispatcher
    ok = d.apply(codec.encode_request(RequestType.STATEFUL_SERVICE_CONFIG, "add", [4, ""]).SerializeToString())
    assert codec.decode_result(ok) == 4
    rejected = d.apply(codec.encode_request(RequestType.STATEFUL_SERVICE_CONFIG, "add", [-4, ""]).SerializeToString())
    assert rejected.errorResult == "INVALID_REQUEST" and counter.value == 4
    unknown = d.apply(codec.encode_request(RequestType.STATEFUL_SERVICE_CONFIG, "nope", []).SerializeToString())
    assert unknown.errorResult == "INVALID_REQUEST" and "nope" in unknown.errorMessage
    no_handler = d.apply(codec.encode_request(RequestType.CONTAINER, "addContainer", []).SerializeToString())
    assert no_handler.errorResult == "INVALID_REQUEST"
    garbage = d.apply(b"\xff\xff\xff")
    assert garbage.errorResult == "INVALID_REQUEST"
    with pytest.raises(SCMException) as err:
        d.apply(codec.encode_request(RequestType.STATEFUL_SERVICE_CONFIG, "explode", [True]).SerializeToString())
    assert err.value.is_fatal
    with pytest.raises(RuntimeError):
        d.apply(codec.encode_request(RequestType.STATEFUL_SERVICE_CONFIG, "explode", [False]).SerializeToString())


async def test_stub_fatal_error_discards_batch_and_raises(setup) -> None:  # type: ignore[no-untyped-def]
    host, _stub, counter = setup
    await counter.add(1)
    with pytest.raises(SCMFatalError, match="disk on fire"):
        await counter.explode(True)
    host.transaction_buffer.flush()
    assert host.metadata_store.meta.get("partial") is None  # the half-applied write never landed
    assert host.metadata_store.get_transaction_info().index == 1


def test_flush_writes_state_and_transaction_info_in_one_batch(tmp_path: Path) -> None:
    store = SCMMetadataStore(tmp_path)
    buf = SCMHADBTransactionBuffer(store)
    buf.add_to_buffer(store.meta, "k", "v")
    buf.update_latest_trx_info(4, 10)
    assert store.meta.get("k") is None and store.get_transaction_info() is None
    calls: list[int] = []
    buf.add_flush_listener(lambda: calls.append(1))
    assert buf.flush() == TransactionInfo(4, 10)
    assert calls == [1]
    assert store.meta.get("k") == "v"
    with pytest.raises(ValueError, match="backwards"):
        buf.update_latest_trx_info(4, 9)
    store.close()
    # Both keys were written by one LevelDB batch: inspect raw DB.
    db = plyvel.DB(str(tmp_path / "scm.db"))
    raw = dict(db.iterator())
    db.close()
    assert b"meta/k" in raw and b"scmTransactionInfos/" + TRANSACTION_INFO_KEY.encode() in raw
    again = SCMMetadataStore(tmp_path)
    assert SCMHADBTransactionBuffer(again).latest_trx_info() == TransactionInfo(4, 10)
    again.close()
