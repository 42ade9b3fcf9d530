"""The replicated state machine interface the Raft driver applies committed entries to.

It mirrors what Ozone's ``SCMStateMachine`` uses from Ratis: batched apply with a logical
rejection path (:class:`ApplyRejected`, returned to the client; any other exception is fatal and
stops the server), ``take_snapshot`` = "flush and return the (term, index) now durable" (the SCM
transaction-buffer pattern), two snapshot install modes (chunked data through Raft, or the
notification mode in which the state machine fetches a checkpoint from the leader itself, then
``pause``/``reinitialize``), and the leader/configuration/log-failure notifications.

The driver (:mod:`scm_server.raft.server`) calls these on its event loop, in log order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from scm_server.raft.core.types import ConfState, SnapshotMetadata


class ApplyRejected(Exception):
    """A logical rejection while applying: returned to the client, replicas stay identical."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ApplyRejected) and (self.code, self.message) == (other.code, other.message)

    def __hash__(self) -> int:
        return hash((self.code, self.message))


@dataclass(frozen=True, slots=True)
class AppliedEntry:
    """A committed NORMAL entry handed to the state machine (the client envelope is removed)."""

    term: int
    index: int
    data: bytes


@runtime_checkable
class StateMachine(Protocol):
    def last_applied(self) -> tuple[int, int]: ...

    async def apply(self, entries: Sequence[AppliedEntry]) -> list[bytes | ApplyRejected]: ...

    def notify_term_index_updated(self, term: int, index: int) -> None: ...

    async def take_snapshot(self) -> tuple[int, int]: ...

    def snapshot_chunks(self) -> AsyncIterator[bytes]: ...

    async def install_snapshot_data(self, meta: SnapshotMetadata, chunks: AsyncIterator[bytes]) -> None: ...

    async def install_snapshot_from_leader(
        self, leader_id: str, leader_address: str, meta: SnapshotMetadata
    ) -> tuple[int, int]: ...

    async def pause(self) -> None: ...

    async def reinitialize(self) -> None: ...

    def notify_leader_changed(self, leader_id: str, term: int) -> None: ...

    def notify_leader_ready(self) -> None: ...

    def notify_not_leader(self) -> None: ...

    def notify_configuration_changed(self, conf: ConfState) -> None: ...

    def notify_log_failed(self, exc: BaseException) -> None: ...


class BaseStateMachine:
    """No-op defaults for the notifications and snapshot hooks; subclasses implement the rest."""

    def last_applied(self) -> tuple[int, int]:
        raise NotImplementedError

    async def apply(self, entries: Sequence[AppliedEntry]) -> list[bytes | ApplyRejected]:
        raise NotImplementedError

    def notify_term_index_updated(self, term: int, index: int) -> None:
        return None

    async def take_snapshot(self) -> tuple[int, int]:
        return self.last_applied()

    async def snapshot_chunks(self) -> AsyncIterator[bytes]:
        raise NotImplementedError(f"{type(self).__name__} does not support chunked snapshot install")
        yield b""  # pragma: no cover

    async def install_snapshot_data(self, meta: SnapshotMetadata, chunks: AsyncIterator[bytes]) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not support chunked snapshot install")

    async def install_snapshot_from_leader(
        self, leader_id: str, leader_address: str, meta: SnapshotMetadata
    ) -> tuple[int, int]:
        raise NotImplementedError(f"{type(self).__name__} does not support notification snapshot install")

    async def pause(self) -> None:
        return None

    async def reinitialize(self) -> None:
        return None

    def notify_leader_changed(self, leader_id: str, term: int) -> None:
        return None

    def notify_leader_ready(self) -> None:
        return None

    def notify_not_leader(self) -> None:
        return None

    def notify_configuration_changed(self, conf: ConfState) -> None:
        return None

    def notify_log_failed(self, exc: BaseException) -> None:
        return None
