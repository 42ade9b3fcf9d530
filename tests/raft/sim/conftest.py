"""Session summary for the Raft simulation: how many simulated steps ran (make test must run >= 100,000).

A *step* is one simulated action (a tick, a message delivered/dropped/duplicated/delayed, a
proposal, a read, a crash/restart/pause, a partition change, a membership change, a
compaction...). Every cluster counts its steps into ``cluster.STATS``; this hook prints the total.
"""

from __future__ import annotations

import os
import time

import pytest

from .cluster import STATS

_T0 = time.monotonic()  # this conftest is imported while the session collects tests


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if STATS["clusters"]:
        terminalreporter.write_line(
            f"raft simulation: {STATS['steps']:,} simulated steps in {STATS['clusters']} clusters "
            f"({STATS['violations_expected']} violations detected on deliberately broken variants), "
            f"{time.monotonic() - _T0:.1f}s wall since collection"
        )


def env_seed(default: int) -> int:
    """SIM_SEED=<seed> replays one failing seed."""
    return int(os.environ.get("SIM_SEED", default))
