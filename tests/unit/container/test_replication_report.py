"""The replication manager's report: counters per state, samples only of containers that need attention."""

from __future__ import annotations

from scm_server.container.replication.replication_manager import ReplicationManagerReport


def test_healthy_containers_are_counted_not_sampled() -> None:
    report = ReplicationManagerReport(sample_limit=2)
    for cid in (1, 2, 3):
        report.increment("HEALTHY", cid)
    for cid in (4, 5, 6):
        report.increment("UNDER_REPLICATED", cid)
    proto = report.to_proto(0)
    counts = {c.key: c.count for c in proto.stat}
    assert counts["HEALTHY"] == 3 and counts["UNDER_REPLICATED"] == 3
    assert [(s.key, list(s.containerIds)) for s in proto.statSample] == [("UNDER_REPLICATED", [4, 5])]
