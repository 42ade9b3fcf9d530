"""Membership rewrites for disaster recovery, as pure functions over the durable state.

* :func:`force_new_cluster` -- etcd's ``--force-new-cluster``: a survivor of a lost quorum keeps its
  whole log, appends one REMOVE_NODE configuration entry per other member (in its current term),
  and marks everything up to the last of them committed. On restart the core rebuilds its
  configuration from those entries (``conf_state_after``), finds itself the only voter, and is
  elected at once; the entries the survivor held beyond its old commit index become committed too,
  as etcd does (they may have been committed by the lost majority; none can have been refused).
* :func:`restored_start` -- a one-member ring restored from a backup at (term, index): a snapshot
  point at that index whose configuration is the new member alone, and a hard state whose term may
  be moved beyond the backup's (so datanodes, which drop commands from terms older than the
  highest they saw, accept the restored leader's).

No I/O here: :class:`scm_server.raft.storage.LevelDBStorage` writes the results in one batch.
"""

from __future__ import annotations

from scm_server.raft.core.confchange import conf_state_after
from scm_server.raft.core.types import (
    ConfChange,
    ConfChangeType,
    ConfState,
    Entry,
    EntryType,
    HardState,
    NodeId,
    SnapshotMetadata,
)


class RecoveryError(ValueError):
    """The requested rewrite does not fit the stored state."""


def force_new_cluster(
    hs: HardState, conf: ConfState, last_index: int, last_term: int, keep: NodeId
) -> tuple[HardState, list[Entry], ConfState]:
    """(new hard state, entries to append, the configuration after them) leaving ``keep`` alone."""
    if keep not in conf.voters:
        raise RecoveryError(
            f"{keep} is not a voter of the stored configuration (voters {', '.join(conf.voters) or 'none'})"
        )
    if hs.commit > last_index:
        raise RecoveryError(f"commit index {hs.commit} is beyond the last log index {last_index}")
    term = max(hs.term, last_term)
    others = sorted((set(conf.voters) | set(conf.learners)) - {keep})
    entries: list[Entry] = []
    after = conf
    index = last_index
    for node in others:
        index += 1
        cc = ConfChange(ConfChangeType.REMOVE_NODE, node)
        entries.append(Entry(term=term, index=index, type=EntryType.CONF_CHANGE, data=cc.encode()))
        after = conf_state_after(after, cc)
    return HardState(term=term, vote=hs.vote, commit=index), entries, after


def restored_start(
    index: int, term: int, node: NodeId, address: str, hard_term: int
) -> tuple[HardState, SnapshotMetadata]:
    """The durable start of a ring restored at (term, index) with ``node`` as its only member."""
    if index < 1 or term < 1:
        raise RecoveryError(f"a restore point needs index >= 1 and term >= 1, got index {index} term {term}")
    if hard_term < term:
        raise RecoveryError(f"hard-state term {hard_term} is below the snapshot term {term}")
    conf = ConfState(voters=(node,), addresses=((node, address),))
    return HardState(term=hard_term, commit=index), SnapshotMetadata(index=index, term=term, conf_state=conf)
