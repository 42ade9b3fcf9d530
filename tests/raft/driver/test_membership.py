"""Membership changes (:mod:`scm_server.raft.membership`) without a server: a fake core records the
proposals, and a fake driver loop applies them (or lets another leader's entry take their index)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scm_server.raft.core.progress import ProgressState
from scm_server.raft.core.rawnode import Progress, Status
from scm_server.raft.core.storage import CompactedError
from scm_server.raft.core.types import (
    ConfChange,
    ConfChangeType,
    ConfState,
    ProposalDroppedError,
    StateRole,
)
from scm_server.raft.errors import NotLeaderError, RaftTimeoutError
from scm_server.raft.membership import MembershipChanges, conf_change_in_effect
from scm_server.raft.view import ChangeSignal, CoreView

ADD = ConfChangeType.ADD_NODE
LEARNER = ConfChangeType.ADD_LEARNER
REMOVE = ConfChangeType.REMOVE_NODE


class FakeNode:
    def __init__(self) -> None:
        self.proposed: list[ConfChange] = []
        self.drops = 0  # proposals refused before one is taken (a change already in flight)
        self.last_index = 10
        self.learner_match = 0
        self.catch_up_per_status = 4  # how far the learner gets between two looks

    def propose_conf_change(self, cc: ConfChange) -> int:
        if self.drops:
            self.drops -= 1
            raise ProposalDroppedError("a conf change is already pending")
        self.proposed.append(cc)
        self.last_index += 1
        return self.last_index

    def status(self) -> Status:
        self.learner_match = min(self.learner_match + self.catch_up_per_status, self.last_index)
        pr = Progress(match=self.learner_match, next=self.learner_match + 1, state=ProgressState.REPLICATE, recent_active=True)
        return Status(id="s1", role=StateRole.LEADER, last_index=self.last_index, progress={"s4": pr})


class Loop:
    """The driver loop: applies a proposed index at once, in the term the test says."""

    def __init__(self, view: CoreView) -> None:
        self.view = view
        self.terms: dict[int, int] = {}
        self.overwritten = False  # another leader's entry took the index, in a later term
        self.compacted = False
        self.wakes = 0

    async def wait_until(self, pred: Callable[[], bool], deadline: float, what: str) -> None:
        self.view.applied += 1
        self.terms[self.view.applied] = self.view.term + (1 if self.overwritten else 0)
        assert pred(), what

    def log_term(self, index: int) -> int:
        if self.compacted:
            raise CompactedError(f"{index} is compacted")
        return self.terms[index]

    def wake(self) -> None:
        self.wakes += 1


def make(role: StateRole = StateRole.LEADER) -> tuple[MembershipChanges, FakeNode, Loop, CoreView]:
    view = CoreView(
        "s1", role=role, leader="s1" if role == StateRole.LEADER else "s2", term=3, applied=10,
        conf=ConfState(voters=("s1", "s2", "s3"), addresses=(("s2", "h2:9894"),)),
    )  # fmt: skip
    node, loop = FakeNode(), Loop(view)
    changes = MembershipChanges(
        view, ChangeSignal(), 0.001, node=lambda: node, wake=loop.wake, wait_until=loop.wait_until, log_term=loop.log_term
    )
    return changes, node, loop, view


async def test_a_new_member_joins_as_a_learner_and_is_promoted_once_it_caught_up_twice() -> None:
    changes, node, loop, _ = make()
    await changes.add_member("s4", "h4:9894", timeout=5)
    assert [(cc.type, cc.node_id, cc.address) for cc in node.proposed] == [
        (LEARNER, "s4", "h4:9894"),
        (ADD, "s4", "h4:9894"),
    ]
    assert loop.wakes == 2


async def test_a_learner_that_never_catches_up_is_not_promoted() -> None:
    changes, node, _, _ = make()
    node.catch_up_per_status = 0
    with pytest.raises(RaftTimeoutError, match="did not catch up"):
        await changes.add_member("s4", "h4:9894", timeout=0.05)
    assert [cc.type for cc in node.proposed] == [LEARNER]


async def test_adding_a_voter_changes_nothing_and_a_learner_is_only_promoted() -> None:
    changes, node, _, view = make()
    await changes.add_member("s2", "h2:9894")
    assert node.proposed == []
    view.conf = ConfState(voters=("s1", "s2", "s3"), learners=("s4",))
    await changes.add_member("s4", "h4:9894", timeout=5)
    assert [cc.type for cc in node.proposed] == [ADD]


async def test_a_follower_answers_not_leader_with_the_hint_and_proposes_nothing() -> None:
    changes, node, _, _ = make(StateRole.FOLLOWER)
    for change in (changes.add_member("s4", "h4:9894"), changes.remove_member("s3")):
        with pytest.raises(NotLeaderError) as info:
            await change
        assert (info.value.leader_id, info.value.leader_address) == ("s2", "h2:9894")
    assert node.proposed == []


async def test_a_refused_proposal_is_tried_again_until_the_core_takes_it() -> None:
    changes, node, _, _ = make()
    node.drops = 3
    await changes.remove_member("s3", timeout=5)
    assert [(cc.type, cc.node_id) for cc in node.proposed] == [(REMOVE, "s3")]


async def test_removing_a_non_member_changes_nothing() -> None:
    changes, node, _, _ = make()
    await changes.remove_member("s9")
    assert node.proposed == []


async def test_a_change_whose_entry_another_leader_overwrote_fails() -> None:
    changes, _, loop, _ = make()
    loop.overwritten = True
    with pytest.raises(NotLeaderError):
        await changes.remove_member("s3", timeout=5)


async def test_after_a_compaction_the_configuration_in_force_decides() -> None:
    changes, _, loop, view = make()
    loop.compacted = True
    with pytest.raises(NotLeaderError):  # s3 still a voter: the change did not happen
        await changes.remove_member("s3", timeout=5)
    view.conf = ConfState(voters=("s1", "s2"))
    await changes.propose(ConfChange(REMOVE, "s3", ""), deadline=float("inf"))


def test_the_effect_of_each_kind_of_change() -> None:
    conf = ConfState(voters=("s1", "s2"), learners=("s3",))
    assert conf_change_in_effect(ConfChange(ADD, "s2", ""), conf)
    assert not conf_change_in_effect(ConfChange(ADD, "s3", ""), conf)
    assert conf_change_in_effect(ConfChange(LEARNER, "s3", ""), conf)
    assert conf_change_in_effect(ConfChange(LEARNER, "s1", ""), conf)  # already more than a learner
    assert conf_change_in_effect(ConfChange(REMOVE, "s4", ""), conf)
    assert not conf_change_in_effect(ConfChange(REMOVE, "s3", ""), conf)
