"""The pure Raft core: no I/O, no clock, no threads; randomness is injected.

Map (read in this order):

* :mod:`.types`       data types shared with storage and the driver (Entry, Message, Ready, ...)
* :mod:`.rawnode`     the public entry point: ``RawNode`` (tick/step/propose/ready/advance), ``Config``, ``Status``
* :mod:`.raft`        the state machine: roles, elections, replication, reads, transfer, membership
* :mod:`.log`         the log = stable storage + unstable tail; commit/apply indexes
* :mod:`.progress`    the leader's per-follower view (PROBE/REPLICATE/SNAPSHOT, inflight window)
* :mod:`.quorum`      majority arithmetic (commit index, vote tally)
* :mod:`.read_only`   pending ReadIndex requests
* :mod:`.confchange`  single-server membership changes as pure functions
* :mod:`.storage`     the ``Storage`` protocol the core reads, and ``MemoryStorage``
* :mod:`.config`      ``Config``, ``ReadOnlyOption``, ``RandomSource``

See :mod:`scm_server.raft.core.types` for the contract with the driver (the Ready handling order).
Tests: ``tests/raft/core`` (paper and feature tests), ``tests/raft/interaction`` (scripted
scenarios with golden transcripts; ``RAFT_REWRITE=1`` regenerates them for review).
"""
