"""The RaftAdmin service (:mod:`scm_server.raft.admin_service`) over a fake target: each call is
translated to one target call, and each answer or error to its reply."""

from __future__ import annotations

from typing import Any

from scm_server.exceptions import ConfigError
from scm_server.proto import raft_pb2
from scm_server.raft.admin_service import RaftAdminService, error_proto
from scm_server.raft.core.types import ConfState
from scm_server.raft.errors import NotLeaderError, ProposalQueueFullError, RaftStoppedError, RaftTimeoutError
from scm_server.raft.faults import NetworkFaults
from scm_server.raft.statemachine import ApplyRejected
from scm_server.raft.view import RaftStatus


class FakeTarget:
    def __init__(self, faults: NetworkFaults | None = None) -> None:
        self.leader_id = "s1"
        self.network_faults = faults
        self.calls: list[tuple[str, Any]] = []
        self.error: Exception | None = None

    def _answer(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))
        if self.error is not None:
            raise self.error

    async def submit(
        self, data: bytes, *, client_id: bytes = b"", call_id: int = 0, timeout: float | None = None
    ) -> bytes:
        self._answer("submit", data, client_id, call_id, timeout)
        return b"ok:" + data

    async def read_index(self, timeout: float | None = None) -> int:
        self._answer("read_index", timeout)
        return 42

    def status(self) -> RaftStatus:
        return RaftStatus(
            node_id="s1", role="LEADER", term=3, leader_id="s1", leader_address="h1:1", commit_index=9,
            applied_index=8, last_index=10, first_index=2, snapshot_index=1,
            conf=ConfState(voters=("s1", "s2")), peers={"s2": 7, "s1": 10},
        )  # fmt: skip

    async def transfer_leadership(self, target_id: str | None, timeout: float = 10.0) -> str:
        self._answer("transfer", target_id, timeout)
        return target_id or "s2"

    async def add_member(self, node_id: str, address: str, timeout: float = 60.0) -> None:
        self._answer("add", node_id, address, timeout)

    async def remove_member(self, node_id: str, timeout: float = 30.0) -> None:
        self._answer("remove", node_id, timeout)


async def test_submit_passes_the_call_identity_and_answers_the_result() -> None:
    target = FakeTarget()
    reply = await RaftAdminService(target).Submit(
        raft_pb2.SubmitRequest(data=b"x", client_id=b"c", call_id=5, timeout=0), None
    )
    assert reply.ok and reply.result == b"ok:x"
    assert target.calls == [("submit", (b"x", b"c", 5, None))]  # no timeout given: the server's default


async def test_a_follower_answers_with_the_leader_hint() -> None:
    target = FakeTarget()
    target.error = NotLeaderError("s2", "h2:9894")
    service = RaftAdminService(target)
    submit = await service.Submit(raft_pb2.SubmitRequest(data=b"x"), None)
    read = await service.ReadIndex(raft_pb2.ReadIndexRequest(), None)
    add = await service.AddMember(raft_pb2.MemberRequest(node_id="s4", address="h4:1"), None)
    for reply in (submit, read, add):
        assert not reply.ok and (reply.not_leader.leader_id, reply.not_leader.leader_address) == ("s2", "h2:9894")


def test_each_error_has_its_code() -> None:
    codes = {
        ApplyRejected("CONTAINER_EXISTS", "there"): "REJECTED:CONTAINER_EXISTS",
        ProposalQueueFullError("full"): "QUEUE_FULL",
        RaftTimeoutError("late"): "TIMEOUT",
        RaftStoppedError("stopped"): "STOPPED",
        ConfigError("bad"): "INVALID",
        KeyError("k"): "INTERNAL",
    }
    assert {exc: error_proto(exc).code for exc in codes} == codes
    assert error_proto(ApplyRejected("CONTAINER_EXISTS", "there")).message == "there"


async def test_membership_and_transfer_answer_the_leader_and_use_the_default_timeouts() -> None:
    target = FakeTarget()
    service = RaftAdminService(target)
    moved = await service.TransferLeadership(raft_pb2.TransferLeadershipRequest(), None)
    added = await service.AddMember(raft_pb2.MemberRequest(node_id="s4", address="h4:1"), None)
    removed = await service.RemoveMember(raft_pb2.MemberRequest(node_id="s3", timeout=5), None)
    assert (moved.ok, moved.leader_id) == (True, "s2")  # the new leader
    assert (added.ok, added.leader_id, removed.leader_id) == (True, "s1", "s1")
    assert target.calls == [("transfer", (None, 10.0)), ("add", ("s4", "h4:1", 60.0)), ("remove", ("s3", 5.0))]


async def test_status_reports_the_peers_in_order() -> None:
    reply = await RaftAdminService(FakeTarget()).Status(raft_pb2.StatusRequest(), None)
    assert (reply.role, reply.term, reply.commit_index, reply.first_index) == ("LEADER", 3, 9, 2)
    assert [(p.node_id, p.match_index) for p in reply.peers] == [("s1", 10), ("s2", 7)]
    assert list(reply.conf.voters) == ["s1", "s2"]


async def test_faults_are_set_and_cleared_only_when_fault_injection_is_on() -> None:
    off = RaftAdminService(FakeTarget())
    reply = await off.SetFaults(raft_pb2.SetFaultsRequest(rules=[raft_pb2.FaultRule(drop=1.0)]), None)
    assert not reply.ok and reply.error.code == "DISABLED"
    faults = NetworkFaults(1)
    on = RaftAdminService(FakeTarget(faults))
    reply = await on.SetFaults(raft_pb2.SetFaultsRequest(rules=[raft_pb2.FaultRule(peer="s2", cut_outbound=True)]), None)
    assert reply.ok and [(r.peer, r.cut_outbound) for r in faults.rules()] == [("s2", True)]
    assert (await on.ClearFaults(raft_pb2.StatusRequest(), None)).ok and faults.rules() == []
