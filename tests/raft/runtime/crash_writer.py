"""Child process for the crash-consistency tests: writes a Raft log through every persist point.

Usage: python crash_writer.py DIR N. Each entry i is saved in one synced batch (with the hard
state committing i - 1) and acknowledged on stdout as "ack i" only AFTER ``save`` returned, the
way the driver sends a message only after the write. Every 5 entries it also writes a received
snapshot file, records a snapshot and purges the log (keeping a gap). RAFT_FAILPOINT in the
environment makes it crash (os._exit(1)) at a chosen persist point.
"""

from __future__ import annotations

import sys
from pathlib import Path

from scm_server.raft.core.types import Entry, HardState
from scm_server.raft.storage import LevelDBStorage


def main() -> None:
    path, n = Path(sys.argv[1]), int(sys.argv[2])
    s = LevelDBStorage(path)
    start = s.last_index() + 1
    for i in range(start, start + n):
        s.save(HardState(term=1, vote="w", commit=i - 1), [Entry(term=1, index=i, data=b"payload-%d" % i)], sync=True)
        print(f"ack {i}", flush=True)
        if i % 5 == 0:
            s.write_snapshot_file(1, i - 1, [b"snap-%d" % (i - 1)] * 3)
            s.remove_snapshot_files(keep=s.snapshot_file(1, i - 1))
            s.create_snapshot(i - 1)
            if i - 4 > s.first_index():
                s.compact(i - 4)
    s.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
