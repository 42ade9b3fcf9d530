"""Our Raft's figures under Apache Ratis's names (scm_server/ha/ratis_metrics.py) and the reservoir behind its
times (scm_server/raft/metrics.py): what Ozone's "Ratis operations" panels read, in the shape Ozone's SCM writes."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from scm_server.ha.ratis_metrics import QUANTILES, RatisNames, ratis_group_label
from scm_server.raft.metrics import RaftMetrics, Reservoir


def test_quantiles_by_nearest_rank_over_the_last_samples() -> None:
    r = Reservoir(size=100)
    assert r.quantiles([0.5, 0.99]) == [0.0, 0.0]
    for ms in range(1, 201):  # 1..200 ms: the reservoir keeps 101..200
        r.add(ms / 1000)
    assert r.count == 200 and r.total == pytest.approx(sum(range(1, 201)) / 1000)
    assert r.quantiles([0.0, 0.5, 0.99, 1.0]) == [0.101, 0.150, 0.199, 0.200]
    with pytest.raises(ValueError, match=r"quantile lies in \[0, 1\], got 1.5"):
        r.quantiles([1.5])
    with pytest.raises(ValueError, match="at least one sample"):
        Reservoir(size=0)


def test_a_log_write_counts_its_entries_and_its_sync() -> None:
    m = RaftMetrics()
    m.logged(3, True, 0.002)
    m.logged(0, False, 0.0001)  # the commit index alone: neither an append nor a sync
    m.logged(2, False, 0.001)  # entries written unsynced
    assert (m.appended_entries, m.flushes, m.append_latency.count, m.sync_time.count) == (5, 1, 2, 1)


def test_ratis_group_label_is_as_ratis_prints_a_group_id() -> None:
    assert ratis_group_label("b0b0e5c5-3f39-4c0c-8c39-fb93fd32a801") == "group-FB93FD32A801"


def test_the_page_has_ratis_names_labels_and_summary_shape() -> None:
    m = RaftMetrics()
    m.logged(4, True, 0.003)
    m.failed_client_writes = 2
    for s in (0.01, 0.02, 0.03):
        m.client_writes.add(s)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RatisNames(lambda: m, "scm-1-id", "group-FB93FD32A801"))
    text = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    labels = {"instance": "scm-1-id", "group": "group-FB93FD32A801"}
    assert families["ratis_log_worker_appendEntryCount"].samples[0].value == 4
    assert families["ratis_log_worker_flushCount"].samples[0].value == 1
    assert families["ratis_server_numFailedClientWriteOnServer"].samples[0].value == 2
    writes = families["ratis_server_clientWriteRequest"]
    assert writes.type == "summary"
    by_quantile = {s.labels["quantile"]: s.value for s in writes.samples if "quantile" in s.labels}
    assert list(by_quantile) == [str(q) for q in QUANTILES] and by_quantile["0.5"] == 0.02
    count = next(s for s in writes.samples if s.name.endswith("_count"))
    assert count.value == 3 and count.labels == labels
    assert all({k: v for k, v in s.labels.items() if k != "quantile"} == labels for f in families.values()
               for s in f.samples)
    # the bare name Ozone's panels query has series: the quantile samples, as on Ozone's page
    assert any(s.name == "ratis_log_worker_syncTime" and s.labels == {"quantile": "0.5", **labels}
               and s.value == 0.003 for s in families["ratis_log_worker_syncTime"].samples)


def test_nothing_before_raft_started() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RatisNames(lambda: None, "scm-1-id", "group-X"))
    assert "ratis_" not in generate_latest(registry).decode()
