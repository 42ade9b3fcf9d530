"""SCMContext: the single source of truth for "am I leader, in which term, and am I in safemode".

Ozone's ``SCMContext``. ``term == INVALID_TERM (-1)`` means the SCM runs without Raft: it is
then always leader and leader-ready. Rule of thumb (Ozone Javadoc): use ``is_leader()`` to decide
whether to send datanode commands (and stamp them with ``get_term_of_leader()``); background
services use ``is_leader_ready()`` (leader AND has applied every entry of earlier terms).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from scm_server.exceptions import NotLeaderException

INVALID_TERM = -1


@dataclass(frozen=True)
class SafeModeStatus:
    in_safe_mode: bool
    pre_check_complete: bool


LeaderHint = Callable[[], tuple[str, str] | None]


class SCMContext:
    def __init__(
        self,
        *,
        is_leader: bool = True,
        term: int = INVALID_TERM,
        safe_mode_status: SafeModeStatus = SafeModeStatus(True, False),
        leader_hint: LeaderHint | None = None,
    ) -> None:
        self._lock = threading.RLock()
        self._is_leader = is_leader
        self._is_leader_ready = is_leader and term == INVALID_TERM
        self._term = term
        self._safe_mode_status = safe_mode_status
        self._leader_hint = leader_hint

    @classmethod
    def non_ratis(cls) -> SCMContext:
        return cls(is_leader=True, term=INVALID_TERM)

    @classmethod
    def ratis_follower(cls) -> SCMContext:
        return cls(is_leader=False, term=0)

    def set_leader_hint(self, hint: LeaderHint) -> None:
        self._leader_hint = hint

    def update_leader_and_term(self, leader: bool, term: int) -> None:
        with self._lock:
            self._is_leader = leader
            self._is_leader_ready = False if term != INVALID_TERM else leader
            self._term = term

    def set_leader_ready(self) -> None:
        with self._lock:
            self._is_leader_ready = self._is_leader

    def is_leader(self) -> bool:
        with self._lock:
            return self._term == INVALID_TERM or self._is_leader

    def is_leader_ready(self) -> bool:
        with self._lock:
            return self._term == INVALID_TERM or (self._is_leader and self._is_leader_ready)

    @property
    def term(self) -> int:
        return self._term

    def is_ratis(self) -> bool:
        return self._term != INVALID_TERM

    def get_term_of_leader(self) -> int:
        """The current term if this SCM is leader; else NotLeaderException with a leader hint."""
        with self._lock:
            if self._term == INVALID_TERM:
                return self._term
            if not self._is_leader:
                raise self.not_leader()
            return self._term

    def not_leader(self, message: str = "") -> NotLeaderException:
        hint = self._leader_hint() if self._leader_hint else None
        if hint:
            return NotLeaderException(message, leader_id=hint[0], leader_address=hint[1])
        return NotLeaderException(message)

    def check_leader(self) -> None:
        if not self.is_leader():
            raise self.not_leader()

    def update_safe_mode_status(self, status: SafeModeStatus) -> None:
        with self._lock:
            self._safe_mode_status = status

    @property
    def safe_mode_status(self) -> SafeModeStatus:
        return self._safe_mode_status

    def is_in_safe_mode(self) -> bool:
        return self._safe_mode_status.in_safe_mode

    def is_pre_check_complete(self) -> bool:
        return self._safe_mode_status.pre_check_complete

    def __repr__(self) -> str:
        return (
            f"SCMContext(leader={self._is_leader}, ready={self._is_leader_ready}, term={self._term}, "
            f"safemode={self._safe_mode_status})"
        )
