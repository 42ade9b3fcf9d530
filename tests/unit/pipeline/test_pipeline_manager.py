"""PipelineManager: creation up to the per-node limit, opening on reports, placement, close/scrub."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from scm_state_harness import FakeDatanode, bring_up, make_datanodes, make_scm

from scm_server.clock import FakeClock
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.node.node_manager import DatanodeInfo
from scm_server.pipeline.placement import ContainerPlacementRackAware, PipelinePlacementPolicy
from scm_server.proto import hdds_pb2, scm_datanode_pb2

T = scm_datanode_pb2.SCMCommandProto.Type


def node(uuid: str, rack: str, health: int = hdds_pb2.HEALTHY, op: int = hdds_pb2.IN_SERVICE) -> DatanodeInfo:
    return DatanodeInfo(
        details=hdds_pb2.DatanodeDetailsProto(uuid=uuid, networkLocation=rack),
        health=health,
        op_state=op,
        op_state_expiry_epoch_s=0,
        last_heartbeat_mono=0,
        last_heartbeat_wall_ms=0,
    )


def test_pipeline_placement_spreads_over_racks_and_respects_limits() -> None:
    nodes = [node(f"a{i}", "/r1") for i in range(4)] + [node(f"b{i}", "/r2") for i in range(4)]
    nodes.append(node("dead", "/r3", health=hdds_pb2.DEAD))
    nodes.append(node("decom", "/r3", op=hdds_pb2.DECOMMISSIONING))
    policy = PipelinePlacementPolicy(random.Random(1))
    load = {n.uuid: 0 for n in nodes}
    load["a0"] = 2  # at the limit
    for _ in range(20):
        chosen = policy.choose_datanodes(nodes, 3, lambda u: load[u], lambda _u: 2)
        uuids = [n.uuid for n in chosen]
        assert len(set(uuids)) == 3
        assert not {"dead", "decom", "a0"} & set(uuids)
        assert len({n.rack for n in chosen}) == 2  # anchor + other rack + nearby
    with pytest.raises(SCMException) as err:
        policy.choose_datanodes(nodes[:2], 3, lambda u: 0, lambda _u: 2)
    assert err.value.result is ResultCodes.FAILED_TO_FIND_SUITABLE_NODE


def test_container_placement_prefers_new_racks() -> None:
    nodes = [node("a1", "/r1"), node("a2", "/r1"), node("b1", "/r2"), node("b2", "/r2")]
    placement = ContainerPlacementRackAware(random.Random(3))
    targets = placement.choose_targets(nodes, ["/r1", "/r1"], 1, lambda _u: 0, exclude={"a1", "a2"})
    assert [t.rack for t in targets] == ["/r2"]
    assert ContainerPlacementRackAware.is_policy_satisfied(["/r1", "/r1", "/r2"], 3, 2)
    assert not ContainerPlacementRackAware.is_policy_satisfied(["/r1"] * 3, 3, 2)
    assert ContainerPlacementRackAware.is_policy_satisfied(["/r1"] * 3, 3, 1)


async def test_background_creation_opens_when_members_report(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    dns = make_datanodes(6, racks=2)
    for dn in dns:
        await dn.register(scm)
    pm = scm.pipeline_manager
    created = await pm.create_pipelines_up_to_limit()
    assert created == len(pm.get_pipelines())
    assert all(p.state == hdds_pb2.PIPELINE_ALLOCATED for p in pm.get_pipelines())
    for dn in dns:
        assert pm.pipeline_count_of(dn.uuid, hdds_pb2.THREE) <= 2  # ozone.scm.datanode.pipeline.limit
        assert pm.pipeline_count_of(dn.uuid, hdds_pb2.ONE) == 1  # one RATIS/ONE pipeline per datanode
    assert len(pm.get_pipelines(hdds_pb2.RATIS, hdds_pb2.THREE)) >= 3
    # Members get CreatePipeline commands, execute them and report: pipelines open.
    three = pm.get_pipelines(hdds_pb2.RATIS, hdds_pb2.THREE)
    members = {m.uuid for m in three[0].members}
    for dn in dns:
        resp = await dn.heartbeat(scm)
        assert all(c.term == scm.scm_context.term for c in resp.commands)
        dn.execute(list(resp.commands))
    assert three[0].id.id in next(d for d in dns if d.uuid in members).pipelines
    for dn in dns:
        await dn.heartbeat(scm)
    assert all(p.state == hdds_pb2.PIPELINE_OPEN for p in pm.get_pipelines())
    assert len({frozenset(m.uuid for m in p.members) for p in pm.get_pipelines(hdds_pb2.RATIS, hdds_pb2.THREE)}) == len(
        pm.get_pipelines(hdds_pb2.RATIS, hdds_pb2.THREE)
    )  # no duplicate member sets
    await scm.stop()


async def test_close_activate_deactivate_and_unknown_pipeline_report(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    (p,) = scm.pipeline_manager.get_pipelines(hdds_pb2.RATIS, hdds_pb2.THREE)
    pid = p.id.id
    await scm.deactivate_pipeline(pid)
    assert scm.pipeline_manager.get_pipeline(pid).state == hdds_pb2.PIPELINE_DORMANT
    with pytest.raises(SCMException) as err:
        await scm.deactivate_pipeline(pid)
    assert err.value.result is ResultCodes.INVALID_PIPELINE_STATE
    await scm.activate_pipeline(pid)
    await scm.close_pipeline(pid)
    assert scm.pipeline_manager.get_pipeline(pid).state == hdds_pb2.PIPELINE_CLOSED
    queued = scm.node_manager.queued_commands(dns[0].uuid, T.closePipelineCommand)
    assert [c.closePipelineCommandProto.pipelineID.id for c in queued] == [pid]
    with pytest.raises(SCMException) as err:
        await scm.close_pipeline("no-such-pipeline")
    assert err.value.result is ResultCodes.PIPELINE_NOT_FOUND
    # A DN reporting a pipeline SCM does not know is told to close it.
    stray = FakeDatanode(uuid=dns[0].uuid, host="dn1", pipelines={"stray"})
    resp = await stray.heartbeat(scm)
    assert any(c.closePipelineCommandProto.pipelineID.id == "stray" for c in resp.commands)
    await scm.stop()


async def test_allocated_pipeline_scrubbed_after_timeout(tmp_path: Path) -> None:
    clock = FakeClock()
    scm = await make_scm(tmp_path, clock)
    dns = make_datanodes(3)
    for dn in dns:
        await dn.register(scm)
    p = await scm.create_pipeline(hdds_pb2.RATIS, hdds_pb2.THREE)
    assert p.state == hdds_pb2.PIPELINE_ALLOCATED
    clock.advance(60)
    assert await scm.pipeline_manager.scrub_pipelines() == 0
    clock.advance(5 * 60)
    assert await scm.pipeline_manager.scrub_pipelines() == 1
    assert scm.pipeline_manager.find(p.id.id) is None
    with pytest.raises(SCMException) as err:  # EC needs its layout (Ozone's AllocatePipeline carries none)
        await scm.create_pipeline(hdds_pb2.EC, hdds_pb2.THREE)
    assert err.value.result is ResultCodes.INVALID_REQUEST and "needs an ecReplicationConfig" in err.value.message
    await scm.stop()


async def test_pipelines_persist_across_restart(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    before = {p.id.id: p.state for p in scm.list_pipelines()}
    await scm.stop()
    from scm_state_harness import make_conf

    from scm_server.scm import StorageContainerManager

    again = await StorageContainerManager.create(make_conf(tmp_path), clock=FakeClock())
    assert {p.id.id: p.state for p in again.list_pipelines()} == before
    await again.stop()


async def test_creator_runs_after_pre_check_and_honours_safemode_pipeline_creation(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path / "a", **{"hdds.scm.safemode.min.datanode": "2"})
    scm.safe_mode_manager.set_state_machine_ready_hook(lambda: False)  # keep it in safemode
    dns = make_datanodes(3)
    await dns[0].register(scm)
    await scm.pipeline_creator.run_once()
    assert scm.list_pipelines() == []  # pre-check (DataNodeSafeModeRule) not passed yet
    for dn in dns[1:]:
        await dn.register(scm)
    assert scm.in_safe_mode() == (True, True)
    await scm.pipeline_creator.run_once()
    assert len(scm.list_pipelines()) == 4  # created during safemode, after the pre-check
    await scm.stop()

    off = await make_scm(tmp_path / "b", **{"hdds.scm.safemode.pipeline.creation": "false"})
    off.safe_mode_manager.set_state_machine_ready_hook(lambda: False)
    for dn in make_datanodes(3):
        await dn.register(off)
    await off.pipeline_creator.run_once()
    assert off.list_pipelines() == []
    await off.stop()


async def test_create_pipeline_command_carries_one_priority_per_member(tmp_path: Path) -> None:
    """Ozone's CreatePipelineCommandHandler reads priority[i] for every member i (RatisHelper.newRaftGroup):
    a command without the list fails there silently and the datanodes never form the pipeline. Ours sends one
    per member, the suggested leader (our leaderID) 1 and the others 0, and it reaches Ozone's wire form."""
    from scm_server import ozone_wire

    scm = await make_scm(tmp_path)
    dns = make_datanodes(3)
    for dn in dns:
        await dn.register(scm)
    p = await scm.pipeline_manager.create_pipeline(hdds_pb2.RATIS, hdds_pb2.THREE, [d.uuid for d in dns])
    assert p.leaderID == dns[0].uuid
    for dn in dns:
        (cmd,) = [c for c in scm.node_manager.queued_commands(dn.uuid, T.createPipelineCommand)
                  if c.createPipelineCommandProto.pipelineID.id == p.id.id]
        create = cmd.createPipelineCommandProto
        assert len(create.priority) == len(create.datanode) == 3
        assert list(create.priority) == [1 if d.uuid == p.leaderID else 0 for d in create.datanode]
        wire = ozone_wire.heartbeat_response_to_wire(
            scm_datanode_pb2.SCMHeartbeatResponseProto(datanodeUUID=dn.uuid, commands=[cmd]))
        assert list(wire.commands[0].createPipelineCommandProto.priority) == [1, 0, 0]
        assert wire.commands[0].createPipelineCommandProto.cmdId == cmd.cmdId
    await scm.stop()


async def test_administrators_ratis_one_pipeline_as_ozone_answers_it(tmp_path: Path) -> None:
    """`ozone admin pipeline create -t RATIS -f ONE` (AllocatePipeline), issue 29 item 7. Ozone 2.2.0's SCM picks a
    healthy datanode in no ALLOCATED/OPEN/DORMANT RATIS/ONE pipeline (pickAllNodesNotUsed), for an administrator as
    for its background creator: with every datanode already hosting one, its own ring refuses with "Cannot create
    pipeline RATIS/ONE using 0 nodes. Used 4 nodes. Healthy nodes 4" (seen on Ozone's ring, docs/ozone-interop.md);
    ours answers with Ozone's counts and says what to do, and creates the pipeline once a datanode is free."""
    scm = await make_scm(tmp_path)
    dns = make_datanodes(4)
    await bring_up(scm, dns)
    pm = scm.pipeline_manager
    ones = pm.get_pipelines(hdds_pb2.RATIS, hdds_pb2.ONE)
    assert len(ones) == 4 and all(p.state == hdds_pb2.PIPELINE_OPEN for p in ones)

    with pytest.raises(SCMException) as err:
        await scm.create_pipeline(hdds_pb2.RATIS, hdds_pb2.ONE)
    assert err.value.result is ResultCodes.FAILED_TO_FIND_SUITABLE_NODE
    assert "Cannot create pipeline RATIS/ONE using 0 nodes. Used 4 nodes. Healthy nodes 4" in err.value.message
    assert "ozone admin pipeline close" in err.value.message

    # a datanode whose RATIS/ONE pipeline was closed is free again: the administrator's pipeline lands on it
    freed = ones[0].members[0].uuid
    await scm.close_pipeline(ones[0].id.id)
    created = await scm.create_pipeline(hdds_pb2.RATIS, hdds_pb2.ONE)
    assert [m.uuid for m in created.members] == [freed]
    assert created.state == hdds_pb2.PIPELINE_ALLOCATED
    assert any(c.createPipelineCommandProto.pipelineID.id == created.id.id
               for c in scm.node_manager.queued_commands(freed, T.createPipelineCommand))
    await scm.stop()


async def test_leader_choice_follows_ozone_scm_pipeline_leader_choose_policy(tmp_path: Path) -> None:
    """MinLeaderCountChoosePolicy: each new pipeline's suggested leader is the member leading the fewest;
    DefaultLeaderChoosePolicy: no suggestion, every member's priority 0."""
    scm = await make_scm(tmp_path / "min")
    dns = make_datanodes(3)
    for dn in dns:
        await dn.register(scm)
    members = [d.uuid for d in dns]
    leaders = [(await scm.pipeline_manager.create_pipeline(hdds_pb2.RATIS, hdds_pb2.THREE, members)).leaderID
               for _ in range(3)]
    assert sorted(leaders) == sorted(members)  # one pipeline led by each
    await scm.stop()

    scm = await make_scm(tmp_path / "default", **{"ozone.scm.pipeline.leader-choose.policy": "DefaultLeaderChoosePolicy"})
    for dn in dns:
        await dn.register(scm)
    p = await scm.pipeline_manager.create_pipeline(hdds_pb2.RATIS, hdds_pb2.THREE, members)
    assert p.leaderID == ""
    for dn in dns:
        (cmd,) = scm.node_manager.queued_commands(dn.uuid, T.createPipelineCommand)
        assert list(cmd.createPipelineCommandProto.priority) == [0, 0, 0]
    await scm.stop()
