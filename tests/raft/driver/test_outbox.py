"""The outbox (:mod:`scm_server.raft.outbox`) with a recording transport and a recorded timer."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from scm_server.raft.core.types import Entry, Message, MessageType, StateRole
from scm_server.raft.outbox import Outbox
from scm_server.raft.view import CoreView


class Wire:
    def __init__(self) -> None:
        self.sent: list[list[tuple[MessageType, str, int]]] = []

    def send(self, messages: Sequence[Message]) -> None:
        self.sent.append([(m.type, m.to, len(m.entries)) for m in messages])


class Timer:
    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn, self.cancelled = fn, False

    def cancel(self) -> None:
        self.cancelled = True


class Timers:
    def __init__(self) -> None:
        self.started: list[Timer] = []

    def __call__(self, delay: float, fn: Callable[[], None]) -> Timer:
        assert delay == 0.005
        self.started.append(Timer(fn))
        return self.started[-1]


def append(to: str, entries: int = 0) -> Message:
    return Message(
        type=MessageType.APPEND, frm="s1", to=to, term=2, entries=tuple(Entry(2, i + 1) for i in range(entries))
    )


def make(role: StateRole = StateRole.LEADER) -> tuple[Outbox, Wire, Timers, CoreView]:
    view = CoreView("s1", role=role, term=2)
    wire, timers = Wire(), Timers()
    return Outbox(view, wire, call_later=timers), wire, timers, view


APP = MessageType.APPEND


def test_a_leaders_commit_only_append_waits_for_the_next_append_to_that_peer() -> None:
    outbox, wire, timers, _ = make()
    outbox.send([append("s2"), append("s3"), Message(type=MessageType.HEARTBEAT, frm="s1", to="s2", term=2)])
    assert wire.sent == [[(MessageType.HEARTBEAT, "s2", 0)]]
    assert len(timers.started) == 1
    outbox.send([append("s2", entries=1)])  # replaces the held one to s2; s3's is still held
    assert wire.sent[-1] == [(APP, "s2", 1)]
    assert not timers.started[0].cancelled
    outbox.send([append("s3", entries=2)])  # nothing held any more: the timer is not needed
    assert wire.sent[-1] == [(APP, "s3", 2)] and timers.started[0].cancelled


def test_held_appends_leave_when_the_timer_fires() -> None:
    outbox, wire, timers, _ = make()
    outbox.send([append("s2"), append("s3")])
    assert wire.sent == []
    timers.started[0].fn()
    assert wire.sent == [[(APP, "s2", 0), (APP, "s3", 0)]]
    outbox.send([append("s2")])
    assert len(timers.started) == 2  # a new hold, a new timer


def test_a_follower_sends_everything_and_releases_what_it_held_as_leader() -> None:
    outbox, wire, _, view = make()
    outbox.send([append("s2")])
    view.role = StateRole.FOLLOWER
    outbox.send([Message(type=MessageType.APPEND_RESP, frm="s1", to="s3", term=3)])
    assert wire.sent == [[(APP, "s2", 0)], [(MessageType.APPEND_RESP, "s3", 0)]]
    follower, fwire, timers, _ = make(StateRole.FOLLOWER)
    follower.send([append("s2")])
    assert fwire.sent == [[(APP, "s2", 0)]] and timers.started == []
