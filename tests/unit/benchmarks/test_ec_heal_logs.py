"""bench/ec_heal.py's reading of Ozone datanode logs: when each repair command after the kill was done."""

from __future__ import annotations

import datetime
from pathlib import Path

from bench.ec_heal import repairs_done

LOG = """\
2026-12-06 03:47:20,001 INFO  ReplicationSupervisor: Successful DONE replicateContainerCommand: cmdID: 1, containerID: 9
2026-12-06 03:47:45,251 INFO  ReplicationSupervisor: Successful DONE replicateContainerCommand: cmdID: 2, containerID: 2
2026-12-06 03:47:45,300 INFO  ReplicationSupervisor: Failed replicateContainerCommand: cmdID: 3, containerID: 3
2026-12-06 03:47:49,716 INFO  ReplicationSupervisor: Successful DONE reconstructECContainersCommand: containerID=1
  at Successful DONE replicateContainerCommand (a stack trace line, no time)
2026-12-06 03:47:50,000 INFO  ECReconstructionCoordinatorTask: DONE reconstructECContainersCommand: containerID=1
"""


def test_repairs_done_after_the_kill_only_successful_ones(tmp_path: Path) -> None:
    (tmp_path / "dn1.log").write_text(LOG)
    (tmp_path / "dn2.log").write_text("2026-12-06 03:47:46,500 INFO  ReplicationSupervisor: Successful DONE "
                                      "replicateContainerCommand: cmdID: 4\n")
    killed = datetime.datetime(2026, 12, 6, 3, 47, 30)
    done = repairs_done(sorted(tmp_path.glob("dn*.log")), killed)
    assert sorted(done) == [
        datetime.datetime(2026, 12, 6, 3, 47, 45, 251000),
        datetime.datetime(2026, 12, 6, 3, 47, 46, 500000),
        datetime.datetime(2026, 12, 6, 3, 47, 49, 716000),
    ]
    assert (max(done) - killed).total_seconds() == 19.716
    assert repairs_done([tmp_path / "dn1.log"], datetime.datetime(2026, 12, 6, 4, 0)) == []
