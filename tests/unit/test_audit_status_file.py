"""``audit run --status-file``: the compact summary the operator's audit Pod leaves as its termination message."""

from __future__ import annotations

import json

from scm_server.cli.audit import compact_summary


def test_compact_summary_keeps_the_figures_status_shows_and_fits_a_termination_message() -> None:
    summary = {
        "runId": "20261123T213000Z",
        "containers": {"total": 1_000_000, "healthy": 999_990, "byHealth": {"HEALTHY": 999_990}},
        "findings": {"total": 12, "byKind": {"UNDER_REPLICATED": 10, "MISSING": 2}},
        "agreement": {"agrees": False, "disagreements": [{"container": i} for i in range(500)]},
    }
    got = compact_summary(summary)
    assert got == {
        "runId": "20261123T213000Z", "containers": 1_000_000, "notHealthy": 10, "findings": 12,
        "agreesWithSCM": False,
    }
    assert len(json.dumps(got).encode()) < 4096  # the kubelet keeps at most 4 KiB of a termination message
