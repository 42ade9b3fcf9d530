"""SequenceIdGenerator: batched, replicated, never-reused IDs (Ozone's ``SequenceIdGenerator``).

Types (SequenceIdType): ``localId`` (block local IDs), ``containerId``, ``delTxnId`` (deleted-block
transactions), ``CertificateId`` (certificate serials, batch size 1).

The leader hands out IDs from an in-memory batch ``[next_id, last_id]``. When a batch is used up
it calls the replicated compare-and-swap ``allocate_batch(name, expected_last_id, new_last_id)``
through Raft; apply succeeds on every SCM only if the applied lastId equals ``expected_last_id``,
so two leaders (old and new) can never both own the same range. On leader change
``invalidate_batch()`` drops the unused rest of the batch: there are gaps, never reuse. After a
restart the persisted lastId is the floor, so IDs stay unique across restarts too.

Initial values are constants, identical on every SCM (HDDS-5015: localId once diverged because it
was derived from the local clock): localId starts above Ozone's legacy UniqueId range.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha.replicate import RequestType, replicate
from scm_server.ha.state_manager import ReplicatedStateManager
from scm_server.proto import hdds_pb2

log = logging.getLogger(__name__)

LOCAL_ID = "localId"
CONTAINER_ID = "containerId"
DEL_TXN_ID = "delTxnId"
CERTIFICATE_ID = "CertificateId"
SEQUENCE_ID_TYPES = (LOCAL_ID, CONTAINER_ID, DEL_TXN_ID, CERTIFICATE_ID)

# 2021-01-01T00:00:00Z in ms, shifted left by 16 (Ozone's localId scheme), as a fixed constant so
# that every SCM starts from the same value no matter when or where it was initialised.
LOCAL_ID_INITIAL_VALUE = 1609459200000 << 16
INITIAL_VALUES = {
    LOCAL_ID: LOCAL_ID_INITIAL_VALUE,
    CONTAINER_ID: 0,
    DEL_TXN_ID: 0,
    CERTIFICATE_ID: 2,  # serial 1 = root CA, 2 = primordial sub-CA
}
_MAX_CAS_ATTEMPTS = 16


class SequenceIdStateManager(ReplicatedStateManager):
    """The replicated part: the last allocated ID per type (table ``sequenceId``)."""

    _last_id: dict[str, int]

    def reinitialize(self) -> None:
        last = dict(INITIAL_VALUES)
        for name, value in self._store.sequence_id.items():
            last[name] = value.lastId
        self._last_id = last

    def last_id(self, name: str) -> int:
        return self._last_id[name]

    @replicate(RequestType.SEQUENCE_ID)
    def allocate_batch(self, name: str, expected_last_id: int, new_last_id: int) -> bool:
        """CAS: move lastId from ``expected_last_id`` to ``new_last_id``; False if someone moved it."""
        if name not in INITIAL_VALUES:
            raise SCMException(ResultCodes.INVALID_REQUEST, f"unknown sequence id type {name!r}")
        if new_last_id <= expected_last_id:
            raise SCMException(
                ResultCodes.INVALID_REQUEST, f"{name}: new lastId {new_last_id} must exceed {expected_last_id}"
            )
        if self._last_id[name] != expected_last_id:
            return False
        self._last_id[name] = new_last_id
        self._buffer.add_to_buffer(self._store.sequence_id, name, hdds_pb2.SequenceIdProto(lastId=new_last_id))
        return True


@dataclass
class _Batch:
    next_id: int = 1
    last_id: int = 0  # next_id > last_id means "empty, allocate first"


class SequenceIdGenerator:
    def __init__(self, state_manager: SequenceIdStateManager, batch_size: int = 1000) -> None:
        if batch_size <= 0:
            raise ValueError("batch_size must be positive")
        self.state_manager = state_manager
        self.batch_size = batch_size
        self._batches: dict[str, _Batch] = {name: _Batch() for name in SEQUENCE_ID_TYPES}
        self._lock = asyncio.Lock()
        self.batch_allocations = 0

    def _batch_size_of(self, name: str) -> int:
        return 1 if name == CERTIFICATE_ID else self.batch_size

    async def get_next_id(self, name: str) -> int:
        """Next unique ID of ``name`` (leader only; a Raft round trip once per batch)."""
        batch = self._batches.get(name)
        if batch is None:
            raise SCMException(ResultCodes.INVALID_REQUEST, f"unknown sequence id type {name!r}")
        if batch.next_id <= batch.last_id:  # fast path, no await
            value = batch.next_id
            batch.next_id += 1
            return value
        async with self._lock:
            if batch.next_id > batch.last_id:
                await self._allocate(name, batch)
            value = batch.next_id
            batch.next_id += 1
            return value

    async def _allocate(self, name: str, batch: _Batch) -> None:
        for _ in range(_MAX_CAS_ATTEMPTS):
            expected = self.state_manager.last_id(name)
            new_last = expected + self._batch_size_of(name)
            if await self.state_manager.allocate_batch(name, expected, new_last):
                batch.next_id = expected + 1
                batch.last_id = new_last
                self.batch_allocations += 1
                log.debug("allocated %s batch (%d, %d]", name, expected, new_last)
                return
            log.info("%s batch CAS lost (expected lastId %d); retrying", name, expected)
        raise SCMException(ResultCodes.INTERNAL_ERROR, f"could not allocate a {name} batch after retries")

    def invalidate_batch(self) -> None:
        """Drop unused IDs of every batch (leader change): gaps, never reuse."""
        for name in SEQUENCE_ID_TYPES:
            self._batches[name] = _Batch()

    def reinitialize(self) -> None:
        self.state_manager.reinitialize()
        self.invalidate_batch()
