"""Majority arithmetic over the voters of one configuration (learners never count).

Kept separate so the two questions Raft asks of a quorum — "which index is on a majority?"
and "did this election win?" — have one obviously-correct answer each.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping

from scm_server.raft.core.types import NodeId


class VoteResult(enum.Enum):
    PENDING = 0
    LOST = 1
    WON = 2


def majority(n: int) -> int:
    return n // 2 + 1


def committed_index(voters: tuple[NodeId, ...], match_of: Callable[[NodeId], int]) -> int:
    """The largest index that a majority of voters have (0 without voters)."""
    n = len(voters)
    if n == 0:
        return 0
    if n == 1:
        return match_of(voters[0])
    matches = sorted((match_of(v) for v in voters), reverse=True)
    return matches[majority(n) - 1]


def vote_result(voters: tuple[NodeId, ...], votes: Mapping[NodeId, bool]) -> VoteResult:
    granted = rejected = 0
    for v in voters:
        got = votes.get(v)
        if got is True:
            granted += 1
        elif got is False:
            rejected += 1
    need = majority(len(voters))
    if granted >= need:
        return VoteResult.WON
    if len(voters) - rejected < need:
        return VoteResult.LOST
    return VoteResult.PENDING


def has_quorum(voters: tuple[NodeId, ...], ids: Iterable[NodeId]) -> bool:
    """Do the given ids include a majority of the voters?"""
    s = set(ids)
    return sum(1 for v in voters if v in s) >= majority(len(voters)) if voters else False
