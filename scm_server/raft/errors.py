"""Errors raised by the Raft runtime (storage, driver, transport, clients).

They sit under the project's error hierarchy (:mod:`scm_server.exceptions`) so callers never see
plyvel or grpc exceptions: the library error is chained as ``__cause__``. ``NotLeaderError`` is the
runtime's name for Ozone's ``NotLeaderException`` (same class family, so the HA layer can map it
onto ``SCM_NOT_LEADER`` without translation).
"""

from __future__ import annotations

from scm_server.exceptions import NotLeaderException, SCMError, SCMFatalError, StorageError

__all__ = [
    "LogFailedError",
    "NotLeaderError",
    "ProposalQueueFullError",
    "RaftError",
    "RaftStoppedError",
    "RaftTimeoutError",
    "StorageError",
]


class RaftError(SCMError):
    """Base of the Raft runtime's own errors."""


class NotLeaderError(NotLeaderException):
    """This server is not the leader. ``leader_id``/``leader_address`` hint where it is ("" if unknown)."""

    def __init__(self, leader_id: str = "", leader_address: str = "", message: str = "") -> None:
        super().__init__(message or "this Raft server is not the leader", leader_id, leader_address)


class ProposalQueueFullError(RaftError):
    """Too many proposals are waiting to commit; the caller should back off and retry."""


class RaftTimeoutError(RaftError, TimeoutError):
    """A Raft operation did not finish within its deadline; its outcome is unknown."""


class RaftStoppedError(RaftError):
    """The Raft server is stopped (or stopping) and cannot serve the call."""


class LogFailedError(SCMFatalError):
    """The replicated log or the state machine failed; the server stopped to avoid divergence."""
