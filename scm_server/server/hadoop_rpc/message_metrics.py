"""Ozone's per-message metrics of a Hadoop RPC protocol (Ozone's ``ProtocolMessageMetrics``), on /prom.

Ozone's SCM counts, for every ``cmdType`` of a protocol's ``Type`` enum, the calls handled (``counter``) and the
sum of their handling times in milliseconds (``time``), and the calls being handled at the moment
(``concurrency``). Its Prometheus sink names them after the metrics record, one series per cmdType labelled
``type``: record ``ScmBlockLocationProtocol`` gives ``scm_block_location_protocol_counter{type="AllocateScmBlock"}``,
``scm_block_location_protocol_time{...}`` and ``scm_block_location_protocol_concurrency``. Ozone's own Grafana
dashboards ("Ozone - SCM overview": block location throughput, latency and concurrency) read these names, so ours
serves them too, beside our own ``scm_hadoop_rpc_requests_total`` and ``scm_hadoop_rpc_latency_seconds``.

:class:`MeasuredHandler` wraps a translator: it reads the request's ``cmdType`` from the call's body without
decoding the rest (:func:`cmd_type_of`: every request wrapper of Ozone's SCM protocols has ``cmdType`` as field 1,
written first) and times the translator's answer. The clock is injected.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from google.protobuf import message as pb_message
from google.protobuf.descriptor import EnumDescriptor
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from scm_server.ozone_metrics import prometheus_name

if TYPE_CHECKING:
    from scm_server.hadoop_ipc import Call
    from scm_server.server.hadoop_rpc.server import ProtocolHandler

_CMD_TYPE_TAG = 0x08  # field 1, wire type 0 (varint)


def cmd_type_of(body: bytes) -> int | None:
    """The ``cmdType`` (field 1, a varint) a serialized request wrapper starts with; None when it does not."""
    if not body or body[0] != _CMD_TYPE_TAG:
        return None
    value = 0
    for i, byte in enumerate(body[1:11]):
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value
    return None


class ProtocolMessageMetrics(Collector):
    """The counters of one protocol, by cmdType number; a Prometheus collector of Ozone's names for them."""

    def __init__(self, record: str, types: Mapping[int, str], hostname: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.record = record
        self.types = dict(types)
        self.hostname = hostname
        self.clock = clock
        self.counter = dict.fromkeys(self.types, 0)
        self.time_ms = dict.fromkeys(self.types, 0)
        self.concurrency = 0

    @classmethod
    def of_enum(cls, record: str, enum: EnumDescriptor, hostname: str,
                clock: Callable[[], float] = time.monotonic) -> ProtocolMessageMetrics:
        """For every value of a protobuf enum (``ScmServerProtocol_pb2.DESCRIPTOR.enum_types_by_name["Type"]``)."""
        return cls(record, {v.number: v.name for v in enum.values}, hostname, clock)

    def started(self) -> float:
        """A call begins: counted as running; returns the clock reading :meth:`ended` takes."""
        self.concurrency += 1
        return self.clock()

    def ended(self, cmd_type: int, start: float) -> None:
        """The call of ``cmd_type`` begun at ``start`` ended, answered or raised: counted, its duration (whole
        milliseconds, as Ozone's) added."""
        self.concurrency -= 1
        self.counter[cmd_type] += 1
        self.time_ms[cmd_type] += int((self.clock() - start) * 1000)

    def collect(self) -> Iterator[Metric]:
        labels = ["type", "hostname"]
        counter = GaugeMetricFamily(prometheus_name(self.record, "counter"),
                                    f"Number of distinct calls of {self.record} (Ozone's name)", labels=labels)
        elapsed = GaugeMetricFamily(prometheus_name(self.record, "time"),
                                    f"Sum of the duration of the calls of {self.record} in ms (Ozone's name)",
                                    labels=labels)
        for number, name in sorted(self.types.items()):
            counter.add_metric([name, self.hostname], self.counter[number])
            elapsed.add_metric([name, self.hostname], self.time_ms[number])
        concurrency = GaugeMetricFamily(prometheus_name(self.record, "concurrency"),
                                        f"Number of {self.record} requests processed concurrently (Ozone's name)",
                                        labels=["hostname"])
        concurrency.add_metric([self.hostname], self.concurrency)
        yield from (counter, elapsed, concurrency)

    def register(self, registry: CollectorRegistry) -> ProtocolMessageMetrics:
        registry.register(self)
        return self


class MeasuredHandler:
    """A translator whose calls :class:`ProtocolMessageMetrics` counts by cmdType (the rest passes through)."""

    def __init__(self, inner: ProtocolHandler, metrics: ProtocolMessageMetrics) -> None:
        self.inner = inner
        self.metrics = metrics
        self.protocol = inner.protocol
        self.version = inner.version
        self.methods = inner.methods

    async def call(self, method: str, call: Call) -> bytes | pb_message.Message:
        cmd_type = cmd_type_of(call.body)
        if cmd_type not in self.metrics.types:
            return await self.inner.call(method, call)
        assert cmd_type is not None
        start = self.metrics.started()  # not a context manager: this runs on every call
        try:
            return await self.inner.call(method, call)
        finally:
            self.metrics.ended(cmd_type, start)
