"""SCMNodeManager: registration, health by heartbeat age (fake clock), op state, commands, decommission."""

from __future__ import annotations

from pathlib import Path

from scm_state_harness import bring_up, make_datanodes, make_scm, replica

from scm_server.clock import FakeClock
from scm_server.proto import hdds_pb2, scm_datanode_pb2

T = scm_datanode_pb2.SCMCommandProto.Type
R = hdds_pb2.ContainerReplicaProto
Err = scm_datanode_pb2.SCMRegisteredResponseProto.ErrorCode


async def test_register_checks_cluster_id(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    dn = make_datanodes(1)[0]
    bad = await dn.register(scm, cluster_id="CID-99999999-9999-9999-9999-999999999999")
    assert bad.errorCode == Err.errorNodeNotPermitted
    assert "CID-99999999" in bad.errorMessage and scm.storage_config.cluster_id in bad.errorMessage
    assert scm.node_manager.get_node(dn.uuid) is None  # nothing recorded
    ok = await dn.register(scm)
    assert ok.errorCode == Err.success and ok.clusterID == scm.storage_config.cluster_id
    assert ok.networkLocation == "/rack1"
    version = scm.get_version()
    assert {kv.key: kv.value for kv in version.keys}["clusterID"] == scm.storage_config.cluster_id
    await scm.stop()


async def test_unknown_node_heartbeat_gets_reregister(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    dn = make_datanodes(1)[0]
    resp = await dn.heartbeat(scm)
    assert [c.commandType for c in resp.commands] == [T.reregisterCommand]
    await scm.stop()


async def test_health_transitions_with_fake_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    scm = await make_scm(tmp_path, clock)
    nm = scm.node_manager
    a, b = make_datanodes(2)
    await a.register(scm)
    await b.register(scm)
    clock.advance(4 * 60)
    await a.heartbeat(scm)
    assert await nm.check_node_health() == []
    clock.advance(61)  # b: 5m01s without heartbeat -> STALE; a: 61s
    await nm.check_node_health()
    assert nm.require_node(b.uuid).health == hdds_pb2.STALE
    assert nm.require_node(a.uuid).health == hdds_pb2.HEALTHY
    assert [n.uuid for n in nm.get_nodes(health=hdds_pb2.STALE)] == [b.uuid]
    clock.advance(5 * 60)  # b: 10m01s -> DEAD, a: 6m01s -> STALE
    transitions = await nm.check_node_health()
    assert (b.uuid, hdds_pb2.STALE, hdds_pb2.DEAD) in transitions
    assert (a.uuid, hdds_pb2.HEALTHY, hdds_pb2.STALE) in transitions
    await b.heartbeat(scm)  # DEAD -> HEALTHY on heartbeat
    assert nm.require_node(b.uuid).health == hdds_pb2.HEALTHY
    # A node silent for longer than the dead interval goes through STALE to DEAD in one pass.
    clock.advance(20 * 60)
    transitions = await nm.check_node_health()
    assert (b.uuid, hdds_pb2.HEALTHY, hdds_pb2.STALE) in transitions and (b.uuid, hdds_pb2.STALE, hdds_pb2.DEAD) in transitions
    nodes = {n.nodeID.uuid: n for n in scm.query_nodes(state=hdds_pb2.DEAD)}
    assert set(nodes) == {a.uuid, b.uuid}
    await scm.stop()


async def test_commands_are_term_stamped_and_drained(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    scm.scm_context.update_leader_and_term(True, 9)
    dn = make_datanodes(1)[0]
    await dn.register(scm)
    cmd = scm.node_manager.add_command(
        dn.uuid, scm_datanode_pb2.SCMCommandProto(commandType=T.closePipelineCommand,
                                                   closePipelineCommandProto=scm_datanode_pb2.ClosePipelineCommandProto(pipelineID=hdds_pb2.PipelineID(id="p")))
    )
    assert cmd.term == 9 and cmd.HasField("cmdId")
    resp = await dn.heartbeat(scm)
    assert resp.term == 9 and [c.cmdId for c in resp.commands] == [cmd.cmdId]
    assert list((await dn.heartbeat(scm)).commands) == []
    await scm.stop()


async def test_follower_adopts_reported_op_state_leader_resends(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    dn = make_datanodes(1)[0]
    await dn.register(scm)
    nm = scm.node_manager
    # Leader: the DN claims IN_MAINTENANCE but SCM says IN_SERVICE -> SCM tells it again.
    dn.op_state = hdds_pb2.IN_MAINTENANCE
    resp = await dn.heartbeat(scm)
    set_cmds = [c for c in resp.commands if c.commandType == T.setNodeOperationalStateCommand]
    assert [c.setNodeOperationalStateCommandProto.nodeOperationalState for c in set_cmds] == [hdds_pb2.IN_SERVICE]
    assert nm.require_node(dn.uuid).op_state == hdds_pb2.IN_SERVICE
    # Follower: adopts what the DN persisted (HDDS-5090), sends nothing.
    scm.scm_context.update_leader_and_term(False, 3)
    resp = await dn.heartbeat(scm)
    assert nm.require_node(dn.uuid).op_state == hdds_pb2.IN_MAINTENANCE
    assert list(resp.commands) == []
    await scm.stop()


async def test_decommission_completes_once_replicated_elsewhere(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    dns = make_datanodes(4)
    await bring_up(scm, dns)
    cid = (await scm.container_manager.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")).containerID
    holders = dns[:3]
    for dn in holders:
        dn.replicas[cid] = replica(cid, R.CLOSED)
        await dn.heartbeat(scm)
    target = holders[0]
    errors = await scm.decommission_nodes([target.host, "no-such-host"])
    assert [e.host for e in errors] == ["no-such-host"]
    nm = scm.node_manager
    assert nm.require_node(target.uuid).op_state == hdds_pb2.DECOMMISSIONING
    resp = await target.heartbeat(scm)
    target.execute(list(resp.commands))
    assert target.op_state == hdds_pb2.DECOMMISSIONING
    assert all(p.state == hdds_pb2.PIPELINE_CLOSED for p in scm.pipeline_manager.pipelines_of(target.uuid))
    assert await scm.decommission_manager.run_once() == []  # only 2 copies elsewhere
    # The ReplicationManager copies the container to the 4th node (replicas on a
    # decommissioning node do not count), then decommission can complete.
    await scm.replication_manager.run_once()
    replicate = scm.node_manager.queued_commands(dns[3].uuid, T.replicateContainerCommand)
    assert len(replicate) == 1 and target.uuid in {s.uuid for s in replicate[0].replicateContainerCommandProto.sources}
    dns[3].replicas[cid] = replica(cid, R.CLOSED)
    await dns[3].heartbeat(scm)
    assert await scm.decommission_manager.run_once() == [(target.uuid, hdds_pb2.DECOMMISSIONED)]
    assert [n.nodeID.uuid for n in scm.query_nodes(op_state=hdds_pb2.DECOMMISSIONED)] == [target.uuid]
    await scm.recommission_nodes([target.uuid])
    assert nm.require_node(target.uuid).op_state == hdds_pb2.IN_SERVICE
    await scm.stop()


async def test_maintenance_with_end_time_expires(tmp_path: Path) -> None:
    clock = FakeClock()
    scm = await make_scm(tmp_path, clock)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    await scm.start_maintenance_nodes([dns[0].uuid], end_hours=1)
    node = scm.node_manager.require_node(dns[0].uuid)
    assert node.op_state == hdds_pb2.ENTERING_MAINTENANCE and node.op_state_expiry_epoch_s > 0
    assert await scm.decommission_manager.run_once() == [(dns[0].uuid, hdds_pb2.IN_MAINTENANCE)]  # no containers
    errors = await scm.decommission_nodes([dns[0].uuid])
    assert errors and "maintenance" in errors[0].error
    clock.advance(3601)
    assert await scm.decommission_manager.run_once() == [(dns[0].uuid, hdds_pb2.IN_SERVICE)]
    await scm.stop()


async def test_find_node_by_uuid_or_host(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    a, b = make_datanodes(2)
    await a.register(scm)
    await b.register(scm)
    nm = scm.node_manager
    assert nm.find_node(b.uuid) is not None and nm.find_node(b.uuid).uuid == b.uuid  # type: ignore[union-attr]
    assert nm.find_node("dn2").uuid == b.uuid  # type: ignore[union-attr]
    assert nm.find_node("nope") is None
    await scm.stop()


async def test_an_address_shared_by_several_datanodes_names_none_of_them(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    a, b = make_datanodes(2)  # both on 127.0.0.1
    await a.register(scm)
    await b.register(scm)
    nm = scm.node_manager
    assert nm.find_node("127.0.0.1") is None
    assert {n.uuid for n in nm.find_nodes("127.0.0.1")} == {a.uuid, b.uuid}
    for call in (scm.decommission_nodes, scm.start_maintenance_nodes):
        errors = await call(["127.0.0.1"])
        assert [e.host for e in errors] == ["127.0.0.1"]
        assert "2 datanodes match; name one by UUID or host:port" in errors[0].error
        assert {n.op_state for n in nm.all_nodes()} == {hdds_pb2.IN_SERVICE}
    errors = await scm.decommission_nodes(["no-such-host"])
    assert "no registered datanode" in errors[0].error
    # the valid host of a request goes ahead, the ambiguous one is reported
    errors = await scm.start_maintenance_nodes(["127.0.0.1", "dn2"])
    assert [e.host for e in errors] == ["127.0.0.1"]
    assert nm.require_node(b.uuid).op_state == hdds_pb2.ENTERING_MAINTENANCE
    assert nm.require_node(a.uuid).op_state == hdds_pb2.IN_SERVICE
    await scm.stop()


async def test_healthy_volumes_follow_each_node_report(tmp_path: Path) -> None:
    """The count is cached per report (it is asked for every allocated block) and must change with
    the next report, which is what the open-container limit of a pipeline is derived from."""
    scm = await make_scm(tmp_path, FakeClock())
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    nm = scm.node_manager
    uuid = dns[0].uuid

    def report(failed: int, total: int) -> scm_datanode_pb2.NodeReportProto:
        return scm_datanode_pb2.NodeReportProto(storageReport=[
            scm_datanode_pb2.StorageReportProto(storageUuid=f"vol-{i}", storageLocation=f"/data/{i}", capacity=100,
                                                scmUsed=0, remaining=100, failed=i < failed)
            for i in range(total)
        ])

    nm.process_node_report(uuid, report(0, 6))
    info = nm.get_node(uuid)
    assert info is not None and info.healthy_volumes() == 6 and info.healthy_volumes() == 6
    nm.process_node_report(uuid, report(4, 6))
    assert info.healthy_volumes() == 2
    nm.process_node_report(uuid, report(6, 6))
    assert info.healthy_volumes() == 1  # never below one
    await scm.stop()


async def test_pipeline_limit_zero_derives_from_per_metadata_disk(tmp_path: Path) -> None:
    """ozone.scm.datanode.pipeline.limit=0: the limit is ozone.scm.pipeline.per.metadata.disk times the healthy
    volumes; a set limit wins."""
    scm = await make_scm(tmp_path / "zero", FakeClock(), **{
        "ozone.scm.datanode.pipeline.limit": "0", "ozone.scm.pipeline.per.metadata.disk": "3"})
    dns = make_datanodes(1)
    await dns[0].register(scm)
    nm = scm.node_manager
    nm.process_node_report(dns[0].uuid, scm_datanode_pb2.NodeReportProto(storageReport=[
        scm_datanode_pb2.StorageReportProto(storageUuid=f"v{i}", storageLocation=f"/d{i}", capacity=100, remaining=100)
        for i in range(2)]))
    assert nm.pipeline_limit(dns[0].uuid) == 6
    assert nm.open_container_limit([dns[0].uuid]) == 1  # ceil(3 owner containers * 2 volumes / 6)
    await scm.stop()
    scm = await make_scm(tmp_path / "set", FakeClock(), **{"ozone.scm.datanode.pipeline.limit": "4"})
    await dns[0].register(scm)
    assert scm.node_manager.pipeline_limit(dns[0].uuid) == 4
    await scm.stop()


async def test_decommission_of_an_ec_holder_waits_for_its_index_elsewhere(tmp_path: Path) -> None:
    """Ozone's ECContainerReplicaCount.isSufficientlyReplicatedForOffline: a datanode holding index i of an EC
    container leaves only once index i sits on another healthy in-service datanode; other holders of other
    indexes do not count for it (rs-3-2: five holders, none of them a copy of the leaving index)."""
    scm = await make_scm(tmp_path)
    dns = make_datanodes(6)
    await bring_up(scm, dns)
    ec = hdds_pb2.ECReplicationConfig(data=3, parity=2, codec="rs", ecChunkSize=1 << 20)
    cid = (await scm.container_manager.allocate_container(hdds_pb2.EC, hdds_pb2.THREE, "om", ec=ec)).containerID
    pipeline = scm.pipeline_manager.get_pipeline(scm.container_manager.get_container(cid).pipelineID.id)
    index_of = dict(zip((m.uuid for m in pipeline.members), pipeline.memberReplicaIndexes, strict=True))
    by_uuid = {dn.uuid: dn for dn in dns}
    await scm.close_container(cid)
    for uuid, index in index_of.items():
        by_uuid[uuid].replicas[cid] = hdds_pb2.ContainerReplicaProto(
            containerID=cid, state=R.CLOSED, keyCount=10, blockCommitSequenceId=5, used=1000, replicaIndex=index
        )
        await by_uuid[uuid].heartbeat(scm)
    assert scm.container_manager.get_container(cid).state == hdds_pb2.CLOSED
    leaving = next(u for u, i in index_of.items() if i == 2)
    spare = next(dn for dn in dns if dn.uuid not in index_of)
    assert await scm.decommission_nodes([leaving]) == []
    # four other holders, but none holds index 2: the node cannot leave yet
    assert await scm.decommission_manager.run_once() == []
    await scm.replication_manager.run_once()
    [copy] = scm.node_manager.queued_commands(spare.uuid, T.replicateContainerCommand)
    assert copy.replicateContainerCommandProto.replicaIndex == 2
    spare.replicas[cid] = hdds_pb2.ContainerReplicaProto(
        containerID=cid, state=R.CLOSED, keyCount=10, blockCommitSequenceId=5, used=1000, replicaIndex=2
    )
    await spare.heartbeat(scm)
    assert await scm.decommission_manager.run_once() == [(leaving, hdds_pb2.DECOMMISSIONED)]
    # maintenance (remaining redundancy 1) needs d + 1 = 4 distinct indexes on other in-service nodes: with a
    # first holder in maintenance four remain, so it enters at once; a second one would leave three
    first, second = (u for u, i in index_of.items() if i in (4, 5))
    assert await scm.start_maintenance_nodes([first]) == []
    assert await scm.decommission_manager.run_once() == [(first, hdds_pb2.IN_MAINTENANCE)]
    assert await scm.start_maintenance_nodes([second]) == []
    assert await scm.decommission_manager.run_once() == []
    await scm.stop()
