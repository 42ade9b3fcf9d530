"""SCMHADBTransactionBuffer: the write path of replicated state into scm.db (Ozone's
``SCMHADBTransactionBufferImpl``).

State managers, while applying a replicated request, update their in-memory maps and call
``add_to_buffer(table, key, value)`` / ``remove_from_buffer(table, key)``; both land in ONE plyvel
write batch. ``flush()`` adds ``scmTransactionInfos["#TRANSACTIONINFO"] = (term, index)`` of the
last applied entry to the same batch and commits it atomically, so the DB always holds state and
the applied index that produced it together (the DB is the Raft snapshot). Under Raft the HA
state machine applies a batch of committed entries and flushes once; the stub flushes after each.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from scm_server.metadata import TRANSACTION_INFO_KEY, BatchOperation, SCMMetadataStore, Table
from scm_server.proto import hdds_pb2

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, order=True)
class TransactionInfo:
    term: int
    index: int

    def to_proto(self) -> hdds_pb2.TransactionInfoProto:
        return hdds_pb2.TransactionInfoProto(term=self.term, index=self.index)

    @classmethod
    def from_proto(cls, proto: hdds_pb2.TransactionInfoProto | None) -> TransactionInfo:
        return cls(0, 0) if proto is None else cls(proto.term, proto.index)


class SCMHADBTransactionBuffer:
    def __init__(self, store: SCMMetadataStore) -> None:
        self._store = store
        self._lock = threading.RLock()
        self._flush_listeners: list[Callable[[], None]] = []
        self._applied_listeners: list[Callable[[TransactionInfo], None]] = []
        self._batch: BatchOperation
        self._latest = TransactionInfo(0, 0)
        self._latest_snapshot = TransactionInfo(0, 0)
        self.init()

    def init(self) -> None:
        """(Re)load the persisted transaction info and start a fresh batch (start, checkpoint install)."""
        with self._lock:
            self._latest = TransactionInfo.from_proto(self._store.get_transaction_info())
            self._latest_snapshot = self._latest
            self._batch = self._store.new_batch()

    @property
    def store(self) -> SCMMetadataStore:
        return self._store

    def add_to_buffer(self, table: Table[K, V], key: K, value: V) -> None:
        with self._lock:
            table.put_with_batch(self._batch, key, value)

    def remove_from_buffer(self, table: Table[K, V], key: K) -> None:
        with self._lock:
            table.delete_with_batch(self._batch, key)

    def update_latest_trx_info(self, term: int, index: int) -> None:
        with self._lock:
            info = TransactionInfo(term, index)
            if info.index < self._latest.index:
                raise ValueError(f"applied index went backwards: {self._latest} -> {info}")
            self._latest = info
        for listener in self._applied_listeners:
            listener(info)

    def add_applied_listener(self, listener: Callable[[TransactionInfo], None]) -> None:
        """Called with (term, index) right after an entry's effects are in the buffer, before the
        next entry is applied: the one moment the in-memory state is exactly that index (the
        audit barrier captures its snapshot here). A listener may flush; it must not raise."""
        self._applied_listeners.append(listener)

    def latest_trx_info(self) -> TransactionInfo:
        return self._latest

    def latest_snapshot(self) -> TransactionInfo:
        """The (term, index) persisted by the last flush."""
        return self._latest_snapshot

    def pending_ops(self) -> int:
        return self._batch.size

    def has_unflushed(self) -> bool:
        return self._batch.size > 0 or self._latest != self._latest_snapshot

    def add_flush_listener(self, listener: Callable[[], None]) -> None:
        """Called after each successful flush (Ozone: DeletedBlockLogImpl.onFlush)."""
        self._flush_listeners.append(listener)

    def flush(self) -> TransactionInfo:
        """Commit the batch plus #TRANSACTIONINFO atomically; returns the persisted info."""
        with self._lock:
            self._store.transaction_info.put_with_batch(self._batch, TRANSACTION_INFO_KEY, self._latest.to_proto())
            self._batch.commit()
            self._latest_snapshot = self._latest
            self._batch = self._store.new_batch()
        for listener in self._flush_listeners:
            listener()
        return self._latest_snapshot

    def flush_if_needed(self) -> bool:
        if self.has_unflushed():
            self.flush()
            return True
        return False

    def discard(self) -> None:
        """Drop unflushed writes (after a fatal apply error, before stopping)."""
        with self._lock:
            self._batch.clear()

    def __repr__(self) -> str:
        return f"SCMHADBTransactionBuffer(latest={self._latest}, snapshot={self._latest_snapshot})"


