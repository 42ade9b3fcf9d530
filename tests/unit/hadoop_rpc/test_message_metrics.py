"""Ozone's per-cmdType protocol metrics (scm_server/server/hadoop_rpc/message_metrics.py): the cmdType read from a
request's first field, each call counted and timed (the clock injected), the concurrency while it runs, and the
names and labels Ozone's sink writes (the ones Ozone's Grafana "SCM overview" dashboard reads)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from scm_server.proto.ozone import ScmServerProtocol_pb2 as wire_block
from scm_server.server.hadoop_rpc.message_metrics import MeasuredHandler, ProtocolMessageMetrics, cmd_type_of


def test_cmd_type_is_read_from_the_first_field_only() -> None:
    request = wire_block.SCMBlockLocationRequest(cmdType=wire_block.AllocateScmBlock, traceID="t")
    assert cmd_type_of(request.SerializeToString()) == wire_block.AllocateScmBlock
    assert cmd_type_of(bytes([0x08, 0xAC, 0x02])) == 300  # a two-byte varint
    assert cmd_type_of(b"") is None
    assert cmd_type_of(b"\x12\x01t") is None  # field 2 first: not a request wrapper
    assert cmd_type_of(bytes([0x08, 0x80])) is None  # a varint cut short


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Call:
    body: bytes


class Inner:
    protocol = "org.apache.hadoop.hdds.scm.protocol.ScmBlockLocationProtocol"
    version = 1
    methods = frozenset({"send"})

    def __init__(self, clock: Clock, metrics: list[ProtocolMessageMetrics]) -> None:
        self.clock = clock
        self.metrics = metrics
        self.seen_concurrency: list[int] = []

    async def call(self, method: str, call: Call) -> bytes:  # type: ignore[override]
        self.seen_concurrency.append(self.metrics[0].concurrency)
        self.clock.now += 0.25  # the call takes 250 ms
        if call.body.endswith(b"boom"):
            raise RuntimeError("boom")
        return b"answer"


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_calls_are_counted_and_timed_by_cmd_type_under_ozones_names() -> None:
    clock = Clock()
    holder: list[ProtocolMessageMetrics] = []
    inner = Inner(clock, holder)
    registry = CollectorRegistry()
    metrics = ProtocolMessageMetrics.of_enum(
        "ScmBlockLocationProtocol", wire_block.DESCRIPTOR.enum_types_by_name["Type"], "scm1", clock)
    metrics.register(registry)
    holder.append(metrics)
    handler = MeasuredHandler(inner, metrics)
    assert (handler.protocol, handler.version, handler.methods) == (inner.protocol, 1, inner.methods)
    allocate = wire_block.SCMBlockLocationRequest(cmdType=wire_block.AllocateScmBlock).SerializeToString()

    async def run() -> None:
        assert await handler.call("send", Call(allocate)) == b"answer"
        assert await handler.call("send", Call(allocate)) == b"answer"
        with pytest.raises(RuntimeError, match="boom"):
            await handler.call("send", Call(allocate + b"boom"))
        assert await handler.call("send", Call(b"\x12\x00")) == b"answer"  # no cmdType: passed through, uncounted

    asyncio.run(run())
    assert inner.seen_concurrency == [1, 1, 1, 0]
    got = _samples(registry)
    allocate_labels = (("hostname", "scm1"), ("type", "AllocateScmBlock"))
    assert got[("scm_block_location_protocol_counter", allocate_labels)] == 3  # a call that raised counts too
    assert got[("scm_block_location_protocol_time", allocate_labels)] == 750
    assert got[("scm_block_location_protocol_counter", (("hostname", "scm1"), ("type", "GetScmInfo")))] == 0
    assert got[("scm_block_location_protocol_concurrency", (("hostname", "scm1"),))] == 0
    # one series per cmdType of Ozone's enum, as Ozone's SCM writes them
    types = {dict(labels)["type"] for name, labels in got if name == "scm_block_location_protocol_counter"}
    assert types == set(wire_block.Type.keys())
