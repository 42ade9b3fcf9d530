"""HDDS-3988 term fencing and the simulated datanode's command execution (no network)."""

from __future__ import annotations

import pytest

from scm_server.datanode_sim import CommandFence, DatanodeSimulator
from scm_server.datanode_sim.simulator import RState
from scm_server.proto import hdds_pb2, scm_datanode_pb2

Cmd = scm_datanode_pb2.SCMCommandProto


def test_fence_drops_termless_commands_from_non_leader() -> None:
    fence = CommandFence()
    assert not fence.accept(None, None)
    assert fence.dropped == 1 and fence.highest_term is None


def test_fence_drops_lower_terms_and_ratchets_up() -> None:
    fence = CommandFence()
    assert fence.accept(5, None)
    assert fence.accept(None, 5)
    assert not fence.accept(4, 4)  # deposed leader
    assert fence.accept(7, 7)
    assert not fence.accept(5, 5)
    assert fence.highest_term == 7
    assert (fence.accepted, fence.dropped) == (3, 2)


def test_fence_command_term_wins_over_response_term() -> None:
    fence = CommandFence()
    assert fence.accept(9, None)
    assert not fence.accept(9, 3)


def test_fence_invalid_term_only_before_real_terms() -> None:
    fence = CommandFence()
    assert fence.accept(-1, None)
    assert fence.accept(2, None)
    assert not fence.accept(-1, None)


@pytest.fixture
def sim() -> DatanodeSimulator:
    return DatanodeSimulator(["127.0.0.1:1", "127.0.0.1:2"], 3, container_size=1000)


def _resp(*cmds: scm_datanode_pb2.SCMCommandProto, term: int | None) -> scm_datanode_pb2.SCMHeartbeatResponseProto:
    resp = scm_datanode_pb2.SCMHeartbeatResponseProto(datanodeUUID="x", commands=list(cmds))
    if term is not None:
        resp.term = term
    return resp


def _close(cid: int, term: int | None = None) -> scm_datanode_pb2.SCMCommandProto:
    cmd = Cmd(
        commandType=Cmd.closeContainerCommand,
        closeContainerCommandProto=scm_datanode_pb2.CloseContainerCommandProto(
            containerID=cid, pipelineID=hdds_pb2.PipelineID(id="p")
        ),
    )
    if term is not None:
        cmd.term = term
    return cmd


def test_follower_commands_are_not_executed(sim: DatanodeSimulator) -> None:
    dn = sim.datanodes[0]
    dn.add_replica(7)
    dn.handle_response(dn.endpoints[1], _resp(_close(7), term=None))
    assert dn.containers[7].state == RState.OPEN
    dn.handle_response(dn.endpoints[0], _resp(_close(7), term=3))
    assert dn.containers[7].state == RState.CLOSED
    # every SCM gets the ICR of the change (plus the one of the creation)
    for ep in dn.endpoints:
        assert [r.state for r in ep.outbox.icrs] == [RState.OPEN, RState.CLOSED]


def test_stale_leader_command_dropped(sim: DatanodeSimulator) -> None:
    dn = sim.datanodes[0]
    dn.add_replica(1)
    dn.add_replica(2)
    dn.handle_response(dn.endpoints[0], _resp(_close(1, term=5), term=5))
    dn.handle_response(dn.endpoints[1], _resp(_close(2, term=4), term=4))
    assert dn.containers[1].state == RState.CLOSED
    assert dn.containers[2].state == RState.OPEN
    assert dn.fence.dropped == 1


def test_reregister_is_not_fenced(sim: DatanodeSimulator) -> None:
    from scm_server.datanode_sim import EndpointState

    dn = sim.datanodes[0]
    ep = dn.endpoints[1]
    ep.state = EndpointState.HEARTBEAT
    dn.handle_response(ep, _resp(Cmd(commandType=Cmd.reregisterCommand), term=None))
    assert ep.state is EndpointState.REGISTER


def test_replicate_copies_from_source_and_acks(sim: DatanodeSimulator) -> None:
    src, dst = sim.datanodes[0], sim.datanodes[1]
    src.add_replica(11, RState.CLOSED, used=500, keys=4)
    cmd = Cmd(
        commandType=Cmd.replicateContainerCommand, cmdId=99, term=1,
        replicateContainerCommandProto=scm_datanode_pb2.ReplicateContainerCommandProto(
            containerID=11, sources=[src.details()]
        ),
    )
    dst.handle_response(dst.endpoints[0], _resp(cmd, term=1))
    assert dst.containers[11].state == RState.CLOSED
    assert (dst.containers[11].used, dst.containers[11].key_count) == (500, 4)
    status = dst.endpoints[0].outbox.statuses[-1]
    assert status.cmdId == 99 and status.status == scm_datanode_pb2.CommandStatus.EXECUTED


def test_replicate_from_unhealthy_source_fails(sim: DatanodeSimulator) -> None:
    src, dst = sim.datanodes[0], sim.datanodes[1]
    src.add_replica(12, RState.CLOSED)
    sim.corrupt_replica(0, 12)
    cmd = Cmd(
        commandType=Cmd.replicateContainerCommand, cmdId=5, term=1,
        replicateContainerCommandProto=scm_datanode_pb2.ReplicateContainerCommandProto(
            containerID=12, sources=[src.details()]
        ),
    )
    dst.handle_response(dst.endpoints[0], _resp(cmd, term=1))
    assert 12 not in dst.containers
    assert dst.endpoints[0].outbox.statuses[-1].status == scm_datanode_pb2.CommandStatus.FAILED


def test_delete_blocks_acked_and_delete_container_reports_deleted(sim: DatanodeSimulator) -> None:
    dn = sim.datanodes[2]
    dn.add_replica(3, RState.CLOSED, keys=5)
    txn = hdds_pb2.DeletedBlocksTransaction(txID=42, containerID=3, localID=[1, 2])
    dn.handle_response(dn.endpoints[0], _resp(Cmd(
        commandType=Cmd.deleteBlocksCommand, term=2,
        deleteBlocksCommandProto=scm_datanode_pb2.DeleteBlocksCommandProto(deletedBlocksTransactions=[txn], cmdId=8),
    ), term=2))
    ack = dn.endpoints[1].outbox.statuses[-1]
    assert ack.blockDeletionAck.dnId == dn.uuid
    assert [(r.txID, r.success) for r in ack.blockDeletionAck.results] == [(42, True)]
    assert dn.containers[3].delete_txn_id == 42 and dn.containers[3].key_count == 3
    dn.handle_response(dn.endpoints[0], _resp(Cmd(
        commandType=Cmd.deleteContainerCommand, term=2,
        deleteContainerCommandProto=scm_datanode_pb2.DeleteContainerCommandProto(containerID=3),
    ), term=2))
    assert 3 not in dn.containers
    assert dn.endpoints[0].outbox.icrs[-1].state == RState.DELETED


def test_op_state_is_persisted_and_echoed(sim: DatanodeSimulator) -> None:
    dn = sim.datanodes[0]
    dn.handle_response(dn.endpoints[0], _resp(Cmd(
        commandType=Cmd.setNodeOperationalStateCommand, term=1,
        setNodeOperationalStateCommandProto=scm_datanode_pb2.SetNodeOperationalStateCommandProto(
            nodeOperationalState=hdds_pb2.DECOMMISSIONING, stateExpiryEpochSeconds=0
        ),
    ), term=1))
    assert dn.details().persistedOpState == hdds_pb2.DECOMMISSIONING


def test_pipeline_join_and_leave(sim: DatanodeSimulator) -> None:
    a, b = sim.datanodes[0], sim.datanodes[1]
    create = Cmd(commandType=Cmd.createPipelineCommand, term=1, createPipelineCommandProto=scm_datanode_pb2.
                 CreatePipelineCommandProto(pipelineID=hdds_pb2.PipelineID(id="P"), type=hdds_pb2.RATIS,
                                            factor=hdds_pb2.THREE, datanode=[a.details(), b.details()]))
    a.handle_response(a.endpoints[0], _resp(create, term=1))
    b.handle_response(b.endpoints[0], _resp(create, term=1))
    assert a.pipelines == {"P": True} and b.pipelines == {"P": False}
    assert [r.isLeader for r in a.pipeline_reports().pipelineReport] == [True]
    a.handle_response(a.endpoints[0], _resp(Cmd(
        commandType=Cmd.closePipelineCommand, term=1,
        closePipelineCommandProto=scm_datanode_pb2.ClosePipelineCommandProto(pipelineID=hdds_pb2.PipelineID(id="P")),
    ), term=1))
    assert a.pipelines == {}


async def test_write_fills_container_and_asks_to_close(sim: DatanodeSimulator) -> None:
    pipeline = hdds_pb2.Pipeline(id=hdds_pb2.PipelineID(id="P"), members=[d.details() for d in sim.datanodes])
    assert await sim.write_to_container(21, 500, 2, pipeline) == 3
    assert all(dn.containers[21].used == 500 for dn in sim.datanodes)
    assert not sim.datanodes[0].endpoints[0].outbox.actions
    await sim.write_to_container(21, 450, 1)
    actions = sim.datanodes[0].endpoints[0].outbox.actions
    assert [(a.containerID, a.reason) for a in actions] == [
        (21, scm_datanode_pb2.ContainerAction.CONTAINER_FULL)
    ]
    assert sim.datanodes[0].containers[21].bcsid == 3


async def test_kill_and_stale_controls(sim: DatanodeSimulator) -> None:
    # Endpoints point at closed ports: tasks just retry; the controls must still work and stop cleanly.
    await sim.start()
    try:
        sim.make_stale(1)
        assert not sim.datanodes[1].resume.is_set()
        sim.revive(1)
        assert sim.datanodes[1].resume.is_set()
        dn = await sim.kill(2)
        assert not dn.alive and not dn.tasks
        assert [d.hostname for d in sim.live()] == ["sim-dn-0", "sim-dn-1"]
        sim.revive(2)
        assert sim.datanodes[2].alive and len(sim.datanodes[2].tasks) == 2
    finally:
        await sim.stop()
    assert all(not d.tasks and not d.alive for d in sim.datanodes)
