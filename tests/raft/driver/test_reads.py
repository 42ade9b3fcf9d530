"""Linearizable reads (:mod:`scm_server.raft.reads`) with a recording core and a fake applied index."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from scm_server.raft.core.types import ReadState, StateRole
from scm_server.raft.errors import NotLeaderError, RaftStoppedError, RaftTimeoutError
from scm_server.raft.reads import ReadIndexBatcher
from scm_server.raft.view import CoreView


class Node:
    def __init__(self) -> None:
        self.asked: list[bytes] = []

    def read_index(self, request_ctx: bytes) -> None:
        self.asked.append(request_ctx)


def make(
    retry_every: float = 10.0, request_timeout: float = 5.0
) -> tuple[ReadIndexBatcher, Node, CoreView, list[tuple[int, float]]]:
    view = CoreView("s1", role=StateRole.LEADER, leader="s1", term=2)
    node = Node()
    applied_waits: list[tuple[int, float]] = []

    async def wait_applied(index: int, timeout: float) -> None:
        applied_waits.append((index, timeout))

    reads = ReadIndexBatcher(
        view, lambda: node, lambda: None, wait_applied, request_timeout=request_timeout, retry_every=retry_every
    )
    return reads, node, view, applied_waits


async def until(cond: Callable[[], object], what: str) -> None:
    for _ in range(1000):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError(what)


async def test_concurrent_readers_share_one_round_and_wait_for_its_index_to_apply() -> None:
    reads, node, _, applied_waits = make()
    readers = [asyncio.create_task(reads.read()) for _ in range(3)]
    await until(lambda: node.asked, "the round to be issued")
    assert node.asked == [b"s1/1"]
    reads.confirmed([ReadState(index=17, request_ctx=b"s1/1")])
    assert await asyncio.gather(*readers) == [17, 17, 17]
    assert [i for i, _ in applied_waits] == [17, 17, 17]
    later = asyncio.create_task(reads.read())
    await until(lambda: len(node.asked) == 2, "a new round")
    assert node.asked[-1] == b"s1/2"
    reads.confirmed([ReadState(index=18, request_ctx=b"s1/2")])
    assert await later == 18


async def test_a_round_not_confirmed_is_asked_again_with_the_same_context() -> None:
    reads, node, _, _ = make(retry_every=0.01)
    reader = asyncio.create_task(reads.read())
    await until(lambda: len(node.asked) >= 1, "the round to be issued")
    for _ in range(100):
        if len(node.asked) >= 3:
            break
        await asyncio.sleep(0.01)
    assert node.asked[:3] == [b"s1/1"] * 3
    reads.confirmed([ReadState(index=5, request_ctx=b"s1/1")])
    assert await reader == 5


async def test_no_known_leader_answers_not_leader() -> None:
    reads, _, view, _ = make()
    view.leader = ""
    with pytest.raises(NotLeaderError, match="no leader is known"):
        await reads.read()


async def test_a_round_that_is_never_confirmed_times_out() -> None:
    reads, _, _, _ = make()
    with pytest.raises(RaftTimeoutError, match="not confirmed"):
        await reads.read(timeout=0.02)


async def test_stopping_fails_the_waiting_readers() -> None:
    reads, node, _, _ = make()
    reader = asyncio.create_task(reads.read())
    await until(lambda: node.asked, "the round to be issued")
    reads.fail_all(RaftStoppedError("stopped"))
    with pytest.raises(RaftStoppedError):
        await reader
