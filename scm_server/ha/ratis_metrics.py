"""Our Raft's figures under the names Apache Ratis gives the same events on Ozone's SCM ``/prom``.

Ozone's SCM replicates through Ratis, whose metric registries its Prometheus endpoint exports as
``ratis_log_worker_*`` and ``ratis_server_*``, labelled with the member (``instance``: its peer id) and the Raft
group (``group``: ``group-`` and the last 12 hex digits of the group's UUID, upper case, as Ratis prints a group
id); Ozone's dashboards ("Ozone - SCM overview": Ratis operations rate and latency) read them. Our Raft counts the
same events (:class:`scm_server.raft.metrics.RaftMetrics`), so this collector writes them under those names and
shapes: counts as gauges, times as summaries in seconds with Dropwizard's quantiles and a ``_count``.

=================================================  ===========================================================
Ratis's name                                       our figure
=================================================  ===========================================================
``ratis_log_worker_appendEntryCount``              log entries written
``ratis_log_worker_flushCount``                    synced log writes
``ratis_log_worker_appendEntryLatency``            time of each log write carrying entries
``ratis_log_worker_syncTime``                      time of each synced log write
``ratis_server_clientWriteRequest``                a replicated request, proposal to result (leader)
``ratis_server_clientReadRequest``                 a linearizable read's ReadIndex barrier
``ratis_server_numFailedClientWriteOnServer``      replicated requests that ended without a result
=================================================  ===========================================================
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from scm_server.raft.metrics import RaftMetrics, Reservoir

__all__ = ["QUANTILES", "RatisNames", "ratis_group_label"]

QUANTILES = (0.5, 0.75, 0.95, 0.98, 0.99, 0.999)  # Dropwizard's, as Ratis's timers export them


def ratis_group_label(group_id: str) -> str:
    """How Ratis prints a group id: ``group-`` and the last 12 hex digits of its UUID, upper case."""
    try:
        digits = uuid.UUID(group_id).hex
    except ValueError:
        digits = "".join(c for c in group_id if c in "0123456789abcdefABCDEF") or group_id
    return f"group-{digits[-12:].upper()}"


class RatisNames(Collector):
    """Collects ``metrics()`` (None: Raft not started, nothing written) under Ratis's names for member
    ``instance`` of ``group``."""

    def __init__(self, metrics: Callable[[], RaftMetrics | None], instance: str, group: str) -> None:
        self._metrics = metrics
        self._labels = {"instance": instance, "group": group}

    def collect(self) -> Iterator[Metric]:
        m = self._metrics()
        if m is None:
            return
        yield self._gauge("ratis_log_worker_appendEntryCount", "log entries written", m.appended_entries)
        yield self._gauge("ratis_log_worker_flushCount", "synced log writes", m.flushes)
        yield self._gauge("ratis_server_numFailedClientWriteOnServer", "replicated requests that ended without "
                          "a result", m.failed_client_writes)
        yield self._summary("ratis_log_worker_appendEntryLatency", "seconds per log write carrying entries",
                            m.append_latency)
        yield self._summary("ratis_log_worker_syncTime", "seconds per synced log write", m.sync_time)
        yield self._summary("ratis_server_clientWriteRequest", "seconds from proposal to result", m.client_writes)
        yield self._summary("ratis_server_clientReadRequest", "seconds per ReadIndex barrier", m.client_reads)

    def _gauge(self, name: str, doc: str, value: float) -> Metric:
        g = GaugeMetricFamily(name, f"{doc} (Apache Ratis's name)", labels=list(self._labels))
        g.add_metric(list(self._labels.values()), value)
        return g

    def _summary(self, name: str, doc: str, times: Reservoir) -> Metric:
        s = Metric(name, f"{doc} (Apache Ratis's name; quantiles of the last samples)", "summary")
        for q, value in zip(QUANTILES, times.quantiles(QUANTILES), strict=True):
            s.add_sample(name, {"quantile": str(q), **self._labels}, value)
        s.add_sample(f"{name}_count", dict(self._labels), times.count)
        s.add_sample(f"{name}_sum", dict(self._labels), times.total)
        return s
