"""The StorageContainerLocationProtocol calls `ozone admin` sends beyond containers, pipelines and safe mode:
datanode usage, decommission status, the SCM ring (transfer, decommission), deleted blocks, upgrade
finalization, the container balancer, and the request filters. A real in-process SCM (stub HA, fake datanodes)
behind our Hadoop RPC server, called with our Hadoop RPC client over loopback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scm_server import ozone_wire
from scm_server.client.hadoop_rpc import RemoteError
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.node.decommission_metrics import BEAN_NAME
from scm_server.proto import hdds_pb2, scm_datanode_pb2
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import hdds_pb2 as wire
from scm_server.server.hadoop_rpc.location_translator import SCM_EXCEPTION
from tests.unit.hadoop_rpc.test_location_translator import Admin, serve
from tests.unit.scm_state_harness import bring_up, make_datanodes, make_scm

GiB = 1 << 30


@pytest.fixture
async def admin(tmp_path: Path) -> Any:
    scm = await make_scm(tmp_path)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    server, conn = await serve(scm)
    yield Admin(conn), scm, dns
    await conn.close()
    await server.stop()
    await scm.stop()


def report(uuid: str, capacity: int, remaining: int, used: int) -> scm_datanode_pb2.NodeReportProto:
    return scm_datanode_pb2.NodeReportProto(storageReport=[scm_datanode_pb2.StorageReportProto(
        storageUuid=f"{uuid}-vol", storageLocation="/data", capacity=capacity, remaining=remaining, scmUsed=used)])


async def test_datanode_usage_by_uuid_address_and_rank(admin: Any) -> None:
    call, scm, dns = admin
    scm.node_manager.process_node_report(dns[0].uuid, report(dns[0].uuid, 100 * GiB, 10 * GiB, 90 * GiB))
    scm.node_manager.process_node_report(dns[2].uuid, report(dns[2].uuid, 100 * GiB, 95 * GiB, 5 * GiB))
    one = (await call(wire_loc.DatanodeUsageInfo, DatanodeUsageInfoRequest={"uuid": dns[0].uuid})).DatanodeUsageInfoResponse
    assert [(i.node.uuid, i.capacity, i.remaining, i.used) for i in one.info] == [
        (dns[0].uuid, 100 * GiB, 10 * GiB, 90 * GiB)]
    assert one.info[0].pipelineCount == scm.pipeline_manager.pipeline_count_of(dns[0].uuid) > 0
    by_host = await call(wire_loc.DatanodeUsageInfo, DatanodeUsageInfoRequest={"ipaddress": dns[1].host})
    assert [i.node.uuid for i in by_host.DatanodeUsageInfoResponse.info] == [dns[1].uuid]
    most = await call(wire_loc.DatanodeUsageInfo, DatanodeUsageInfoRequest={"mostUsed": True, "count": 2})
    assert [i.node.uuid for i in most.DatanodeUsageInfoResponse.info] == [dns[0].uuid, dns[1].uuid]
    least = await call(wire_loc.DatanodeUsageInfo, DatanodeUsageInfoRequest={"mostUsed": False, "count": 5})
    assert [i.node.uuid for i in least.DatanodeUsageInfoResponse.info] == [dns[2].uuid, dns[1].uuid, dns[0].uuid]
    with pytest.raises(RemoteError, match="greater than zero"):
        await call(wire_loc.DatanodeUsageInfo, DatanodeUsageInfoRequest={"mostUsed": True, "count": 0})
    with pytest.raises(RemoteError, match="NO_SUCH_DATANODE"):
        await call(wire_loc.DatanodeUsageInfo, DatanodeUsageInfoRequest={"uuid": "00000000-0000-0000-0000-00000000dead"})


async def test_containers_on_a_decommissioning_node(admin: Any) -> None:
    call, scm, dns = admin
    await call(wire_loc.ForceExitSafeMode, forceExitSafeModeRequest={})
    created = await call(wire_loc.AllocateContainer, containerRequest={
        "replicationType": wire.RATIS, "replicationFactor": wire.THREE, "owner": "admin"})
    cid = created.containerResponse.containerWithPipeline.containerInfo.containerID
    for dn in dns:  # every datanode reports an open replica of it
        dn.replicas[cid] = hdds_pb2.ContainerReplicaProto(containerID=cid, state=hdds_pb2.ContainerReplicaProto.OPEN)
        await dn.heartbeat(scm)
    node = ozone_wire.datanode_to_wire(dns[0].details)
    quiet = await call(wire_loc.GetContainersOnDecomNode, getContainersOnDecomNodeRequest={"datanodeDetails": node})
    assert list(quiet.getContainersOnDecomNodeResponse.containersOnDecomNode) == []  # not leaving: nothing held
    await call(wire_loc.DecommissionNodes, decommissionNodesRequest={"hosts": [dns[0].host]})
    held = await call(wire_loc.GetContainersOnDecomNode, getContainersOnDecomNodeRequest={"datanodeDetails": node})
    got = {e.name: [i.id for i in e.id] for e in held.getContainersOnDecomNodeResponse.containersOnDecomNode}
    assert got == {"UnderReplicated": [], "UnClosed": [cid]}
    # what `ozone admin datanode status decommission` reads: the bean's first entry, the node count, then the
    # record whose tag.datanode.<i> is the host (DecommissionUtils.getCountsMap)
    metrics = await call(wire_loc.GetMetrics, getMetricsRequest={"query": BEAN_NAME})
    bean = json.loads(metrics.getMetricsResponse.metricsJson)["beans"][0]
    assert bean["DecommissioningMaintenanceNodesTotal"] == 1 and bean["tag.datanode.1"] == dns[0].host
    assert (bean["UnclosedContainersDN.1"], bean["UnderReplicatedDN.1"]) == (1, 0)
    assert bean["StartTimeDN.1"] == scm.clock.wall_ms()  # the fake clock has not moved since the decommission
    assert bean["PipelinesWaitingToCloseDN.1"] == scm.pipeline_manager.pipeline_count_of(dns[0].uuid)
    other = await call(wire_loc.GetMetrics, getMetricsRequest={"query": "Hadoop:service=OzoneManager,name=*"})
    assert json.loads(other.getMetricsResponse.metricsJson) == {"beans": []}
    unknown = wire.DatanodeDetailsProto(uuid="00000000-0000-0000-0000-00000000dead", ipAddress="x", hostName="x")
    with pytest.raises(RemoteError, match="Unable to find required node"):
        await call(wire_loc.GetContainersOnDecomNode, getContainersOnDecomNodeRequest={"datanodeDetails": unknown})


async def test_container_counts_ids_and_list_filters(admin: Any) -> None:
    call, scm, dns = admin
    await call(wire_loc.ForceExitSafeMode, forceExitSafeModeRequest={})
    cids = []
    for _ in range(3):
        created = await call(wire_loc.AllocateContainer, containerRequest={
            "replicationType": wire.RATIS, "replicationFactor": wire.THREE, "owner": "admin"})
        cids.append(created.containerResponse.containerWithPipeline.containerInfo.containerID)
    closed = await call(wire_loc.GetClosedContainerCount, getContainerCountRequest={})
    assert closed.getContainerCountResponse.containerCount == 0
    await call(wire_loc.CloseContainer, scmCloseContainerRequest={"containerID": cids[0]})
    for dn in dns:  # the replicas report closed: the container becomes CLOSED
        dn.replicas[cids[0]] = hdds_pb2.ContainerReplicaProto(
            containerID=cids[0], state=hdds_pb2.ContainerReplicaProto.CLOSED, blockCommitSequenceId=1)
        await dn.heartbeat(scm)
    assert scm.get_container(cids[0]).state == hdds_pb2.CLOSED
    closed = await call(wire_loc.GetClosedContainerCount, getContainerCountRequest={})
    assert closed.getContainerCountResponse.containerCount == 1

    ids = await call(wire_loc.ListContainerIDs, scmListContainerIDsRequest={"count": 2, "startContainerID": {"id": cids[1]}})
    assert [c.id for c in ids.scmListContainerIDsResponse.containerIDs] == cids[1:3]
    open_ids = await call(wire_loc.ListContainerIDs, scmListContainerIDsRequest={"count": 10, "state": wire.OPEN})
    assert [c.id for c in open_ids.scmListContainerIDsResponse.containerIDs] == cids[1:]

    suppressed = await call(wire_loc.ListContainer, scmListContainerRequest={"count": 10, "suppressed": True})
    assert list(suppressed.scmListContainerResponse.containers) == []
    assert suppressed.scmListContainerResponse.containerCount == 0
    unsuppressed = await call(wire_loc.ListContainer, scmListContainerRequest={"count": 10, "suppressed": False})
    assert [c.containerID for c in unsuppressed.scmListContainerResponse.containers] == cids

    marked = await call(wire_loc.SuppressContainer, suppressContainerRequest={
        "containerIDs": [cids[1], 999999], "suppress": True})
    assert list(marked.suppressContainerResponse.failedContainerIDs) == [999999]
    only = await call(wire_loc.ListContainer, scmListContainerRequest={"count": 10, "suppressed": True})
    assert [(c.containerID, c.suppressed) for c in only.scmListContainerResponse.containers] == [(cids[1], True)]
    assert only.scmListContainerResponse.containerCount == 1
    rest = await call(wire_loc.ListContainer, scmListContainerRequest={"count": 10, "suppressed": False})
    assert [c.containerID for c in rest.scmListContainerResponse.containers] == [cids[0], cids[2]]
    everything = await call(wire_loc.ListContainer, scmListContainerRequest={"count": 10})
    assert [c.containerID for c in everything.scmListContainerResponse.containers] == cids
    # kept in scm.db: a reload from the table still has it
    scm.reinitialize()
    assert scm.get_container(cids[1]).suppressed and not scm.get_container(cids[2]).suppressed
    report = await scm.replication_manager.process_all()
    assert cids[1] not in scm.replication_manager.last_results and cids[2] in scm.replication_manager.last_results
    assert {s.key: s.count for s in report.stat}["OPEN"] == 2  # still counted by state
    await call(wire_loc.SuppressContainer, suppressContainerRequest={"containerIDs": [cids[1]], "suppress": False})
    assert not scm.get_container(cids[1]).suppressed
    # the EC filter is served: these containers are all RATIS, so an rs-3-2-1024k filter keeps none of them
    ec_only = await call(wire_loc.ListContainer, scmListContainerRequest={
        "count": 10, "type": wire.EC, "ecReplicationConfig": {"data": 3, "parity": 2, "codec": "rs",
                                                              "ecChunkSize": 1048576}})
    assert list(ec_only.scmListContainerResponse.containers) == []
    assert ec_only.scmListContainerResponse.containerCount == 0
    with pytest.raises(RemoteError) as err:
        await call(wire_loc.QueryNode, nodeQueryRequest={"scope": wire.QueryScope.POOL})
    assert err.value.exception_class == "java.lang.IllegalArgumentException" and err.value.message == "Not Supported yet"


async def test_deleted_blocks_and_finalization(admin: Any) -> None:
    call, scm, _dns = admin
    empty = await call(wire_loc.GetDeletedBlocksTransactionSummary, getDeletedBlocksTxnSummaryRequest={})
    summary = empty.getDeletedBlocksTxnSummaryResponse.summary
    assert (summary.totalTransactionCount, summary.totalBlockCount) == (0, 0)
    await scm.deleted_block_log_state_manager.add_transactions_to_db([
        hdds_pb2.DeletedBlocksTransaction(txID=1, containerID=7, localID=[1, 2, 3]),
        hdds_pb2.DeletedBlocksTransaction(txID=2, containerID=8, localID=[4]),
    ])
    summary = (await call(wire_loc.GetDeletedBlocksTransactionSummary, getDeletedBlocksTxnSummaryRequest={})
               ).getDeletedBlocksTxnSummaryResponse.summary
    assert (summary.totalTransactionCount, summary.totalBlockCount) == (2, 4)
    failed = await call(wire_loc.GetFailedDeletedBlocksTransaction, getFailedDeletedBlocksTxnRequest={"count": 10})
    assert list(failed.getFailedDeletedBlocksTxnResponse.deletedBlocksTransactions) == []
    reset = await call(wire_loc.ResetDeletedBlockRetryCount, resetDeletedBlockRetryCountRequest={"transactionId": [1]})
    assert reset.resetDeletedBlockRetryCountResponse.resetCount == 0

    done = await call(wire_loc.FinalizeScmUpgrade, finalizeScmUpgradeRequest={"upgradeClientId": "admin"})
    assert done.finalizeScmUpgradeResponse.status.status == wire.UpgradeFinalizationStatus.ALREADY_FINALIZED
    assert list(done.finalizeScmUpgradeResponse.status.messages) == []
    progress = await call(wire_loc.QueryUpgradeFinalizationProgress,
                          queryUpgradeFinalizationProgressRequest={"upgradeClientId": "admin", "readonly": True})
    # a cluster that never needed finalizing reports FINALIZATION_DONE, as Ozone's SCM does
    assert progress.queryUpgradeFinalizationProgressResponse.status.status == \
        wire.UpgradeFinalizationStatus.FINALIZATION_DONE
    await scm.finalization_state_manager.add_finalizing_mark()
    progress = await call(wire_loc.QueryUpgradeFinalizationProgress,
                          queryUpgradeFinalizationProgressRequest={"upgradeClientId": "admin", "takeover": True})
    assert progress.queryUpgradeFinalizationProgressResponse.status.status == \
        wire.UpgradeFinalizationStatus.FINALIZATION_IN_PROGRESS


async def test_balancer_start_status_and_stop_over_hadoop_rpc(admin: Any) -> None:
    """Start records the run (options over the keys' values) and answers start=true; status and status info show
    it; a second start and a bad option answer Ozone's refusals; a stop before any run was recorded answers
    without an error, as Ozone 2.2's SCM does (its `containerbalancer stop` prints "Container Balancer stopped.")."""
    call, scm, _dns = admin
    status = await call(wire_loc.GetContainerBalancerStatus, containerBalancerStatusRequest={})
    assert not status.containerBalancerStatusResponse.isRunning
    info = await call(wire_loc.GetContainerBalancerStatusInfo, containerBalancerStatusInfoRequest={})
    assert not info.containerBalancerStatusInfoResponse.isRunning
    assert not info.containerBalancerStatusInfoResponse.HasField("containerBalancerStatusInfo")
    never_started = await call(wire_loc.StopContainerBalancer, stopContainerBalancerRequest={})
    assert never_started.success and never_started.status == wire_loc.ScmContainerLocationResponse.OK
    bad = await call(wire_loc.StartContainerBalancer, startContainerBalancerRequest={"threshold": 120.0})
    assert not bad.startContainerBalancerResponse.start
    assert "threshold 120 must be a percentage in [0, 100)" in bad.startContainerBalancerResponse.message
    start = await call(wire_loc.StartContainerBalancer, startContainerBalancerRequest={
        "threshold": 5.0, "iterations": 3, "maxDatanodesPercentageToInvolvePerIteration": 100,
        "maxSizeToMovePerIterationInGB": 20, "excludeNodes": "dn9"})
    assert start.startContainerBalancerResponse.start
    assert start.startContainerBalancerResponse.message == "Container Balancer started successfully."
    assert (await call(wire_loc.GetContainerBalancerStatus, containerBalancerStatusRequest={})
            ).containerBalancerStatusResponse.isRunning
    info = await call(wire_loc.GetContainerBalancerStatusInfo, containerBalancerStatusInfoRequest={})
    conf = info.containerBalancerStatusInfoResponse.containerBalancerStatusInfo.configuration
    assert info.containerBalancerStatusInfoResponse.isRunning and conf.shouldRun
    assert (float(conf.utilizationThreshold), conf.iterations, conf.datanodesInvolvedMaxPercentagePerIteration,
            conf.sizeMovedMaxPerIteration, conf.excludeDatanodes) == (5.0, 3, 100, 20 * GiB, "dn9")
    assert conf.sizeEnteringTargetMax == scm.config.balancer.size_entering_target_max  # the key's value
    again = await call(wire_loc.StartContainerBalancer, startContainerBalancerRequest={})
    assert not again.startContainerBalancerResponse.start
    assert again.startContainerBalancerResponse.message == (
        "Expect ContainerBalancer as not running state, but running state is actually RUNNING")
    await call(wire_loc.StopContainerBalancer, stopContainerBalancerRequest={})
    assert not (await call(wire_loc.GetContainerBalancerStatus, containerBalancerStatusRequest={})
                ).containerBalancerStatusResponse.isRunning
    stored = scm.container_balancer.record()
    assert stored is not None and not stored.shouldRun  # the record stays, marked stopped


async def test_scm_ring_calls_reach_the_ha_manager(admin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """TransferLeadership and DecommissionScm go through the facade to the HA manager's leadership transfer
    and membership change; a single SCM without Raft refuses both with the reason."""
    call, scm, _dns = admin
    with pytest.raises(RemoteError) as err:
        await call(wire_loc.TransferLeadership, transferScmLeadershipRequest={"newLeaderId": "scm2"})
    assert err.value.exception_class == SCM_EXCEPTION and "without Raft" in err.value.message
    refused = await call(wire_loc.DecommissionScm, decommissionScmRequest={"scmId": "scm2"})
    assert not refused.decommissionScmResponse.success
    assert "without Raft" in refused.decommissionScmResponse.errorMsg

    asked: list[tuple[str, str | None]] = []

    async def transfer(target: str | None) -> str:
        asked.append(("transfer", target))
        return target or "scm3"

    async def remove(scm_id: str) -> str:
        asked.append(("remove", scm_id))
        if scm_id == "leader":
            raise SCMException(ResultCodes.INVALID_REQUEST, "Cannot remove current leader leader")
        return f"SCM {scm_id} removed from the ring"

    monkeypatch.setattr(scm.ha_manager, "transfer_leadership", transfer)
    monkeypatch.setattr(scm.ha_manager, "remove_scm", remove)
    moved = await call(wire_loc.TransferLeadership, transferScmLeadershipRequest={"newLeaderId": "scm2"})
    assert moved.HasField("transferScmLeadershipResponse")
    await call(wire_loc.TransferLeadership, transferScmLeadershipRequest={"newLeaderId": ""})
    ok = await call(wire_loc.DecommissionScm, decommissionScmRequest={"scmId": "scm3"})
    assert ok.decommissionScmResponse.success and not ok.decommissionScmResponse.HasField("errorMsg")
    no = await call(wire_loc.DecommissionScm, decommissionScmRequest={"scmId": "leader"})
    assert not no.decommissionScmResponse.success
    assert no.decommissionScmResponse.errorMsg == "Cannot remove current leader leader"
    assert asked == [("transfer", "scm2"), ("transfer", None), ("remove", "scm3"), ("remove", "leader")]


async def test_add_scm_checks_the_cluster_before_the_membership_change(
    admin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _call, scm, _dns = admin
    with pytest.raises(SCMException) as err:
        await scm.add_scm("CID-00000000-0000-0000-0000-000000000000", "scm-4", "scm4:9894")
    assert err.value.result is ResultCodes.INVALID_CLUSTER_ID
    with pytest.raises(SCMException, match="without Raft"):
        await scm.add_scm(scm.storage_config.cluster_id, "scm-4", "scm4:9894")
    added: list[tuple[str, str]] = []

    async def add(scm_id: str, ratis_address: str, node_id: str = "") -> str:
        added.append((scm_id, ratis_address))
        return f"SCM {scm_id} added"

    monkeypatch.setattr(scm.ha_manager, "add_scm", add)
    assert await scm.add_scm(scm.storage_config.cluster_id, "scm-4", "scm4:9894") == "SCM scm-4 added"
    assert added == [("scm-4", "scm4:9894")]


async def test_delete_container_answers_as_ozone_which_does_not_serve_it(admin: Any) -> None:
    call, _scm, _dns = admin
    with pytest.raises(RemoteError) as err:
        await call(wire_loc.DeleteContainer, scmDeleteContainerRequest={"containerID": 1})
    assert err.value.exception_class == "java.lang.IllegalArgumentException"
    assert err.value.message == "Unknown command type: DeleteContainer"
    assert (await call(wire_loc.InSafeMode, inSafeModeRequest={})).HasField("inSafeModeResponse")


async def test_reconcile_container_sends_each_replica_its_peers(admin: Any) -> None:
    call, scm, dns = admin
    await call(wire_loc.ForceExitSafeMode, forceExitSafeModeRequest={})
    created = await call(wire_loc.AllocateContainer, containerRequest={
        "replicationType": wire.RATIS, "replicationFactor": wire.THREE, "owner": "admin"})
    cid = created.containerResponse.containerWithPipeline.containerInfo.containerID
    with pytest.raises(RemoteError, match=f"UNEXPECTED_CONTAINER_STATE: Cannot reconcile container {cid} in state OPEN"):
        await call(wire_loc.ReconcileContainer, reconcileContainerRequest={"containerID": cid})
    with pytest.raises(RemoteError, match="CONTAINER_NOT_FOUND: Container #424242 not found for reconciliation"):
        await call(wire_loc.ReconcileContainer, reconcileContainerRequest={"containerID": 424242})
    await call(wire_loc.CloseContainer, scmCloseContainerRequest={"containerID": cid})
    for dn in dns:
        dn.replicas[cid] = hdds_pb2.ContainerReplicaProto(
            containerID=cid, state=hdds_pb2.ContainerReplicaProto.CLOSED, blockCommitSequenceId=1)
        await dn.heartbeat(scm)
    assert scm.get_container(cid).state == hdds_pb2.CLOSED
    await call(wire_loc.ReconcileContainer, reconcileContainerRequest={"containerID": cid})
    T = scm_datanode_pb2.SCMCommandProto
    for dn in dns:
        (command,) = scm.node_manager.queued_commands(dn.uuid, T.reconcileContainerCommand)
        assert command.reconcileContainerCommandProto.containerID == cid and command.term == scm.scm_context.term
        assert sorted(p.uuid for p in command.reconcileContainerCommandProto.peers) == sorted(
            d.uuid for d in dns if d is not dn)
        # what an Ozone datanode receives in its heartbeat answer
        theirs = ozone_wire.heartbeat_response_to_wire(scm_datanode_pb2.SCMHeartbeatResponseProto(
            datanodeUUID=dn.uuid, commands=[command]))
        assert theirs.commands[0].reconcileContainerCommandProto.containerID == cid
        assert len(theirs.commands[0].reconcileContainerCommandProto.peers) == 2


async def test_answers_as_ozone_admin_prints_them(admin: Any) -> None:
    """What the field-by-field comparison with Ozone's own SCM found (tests/ozone_interop/test_admin_compare.py):
    `safemode exit` answers true once out of safe mode too; every datanode is named by its uuid in the network
    topology whatever it sent; a pipeline handed out with a container or a block carries only the ports a client
    writes through (`pipeline list` all of them); `datanode
    usageinfo` carries the file system's figures, the reserved space and the space to spare the datanodes report."""
    call, scm, dns = admin
    for _ in range(2):  # the second time SCM is already out of safe mode: Ozone's SCM still answers true
        answer = await call(wire_loc.ForceExitSafeMode, forceExitSafeModeRequest={})
        assert answer.forceExitSafeModeResponse.exitedSafeMode is True
    nodes = await call(wire_loc.QueryNode, nodeQueryRequest={"scope": wire.QueryScope.CLUSTER, "state": wire.HEALTHY})
    assert {n.nodeID.networkName for n in nodes.nodeQueryResponse.datanodes} == {dn.uuid for dn in dns}

    member = hdds_pb2.DatanodeDetailsProto(uuid=dns[0].uuid, ipAddress="127.0.0.1", hostName="dn1", ports=[
        hdds_pb2.Port(name=name, value=port) for name, port in (
            ("HTTP", 9882), ("CLIENT_RPC", 19864), ("REPLICATION", 9886), ("RATIS", 9858), ("RATIS_ADMIN", 9857),
            ("RATIS_SERVER", 9856), ("STANDALONE", 9859), ("RATIS_DATASTREAM", 9855))])
    pipeline = hdds_pb2.Pipeline(id=hdds_pb2.PipelineID(id="0f4e3d2c-1b0a-4988-8776-655443322110"), members=[member])
    (on_wire,) = ozone_wire.pipeline_to_wire(pipeline).members  # with a container, in an allocated block
    assert sorted(p.name for p in on_wire.ports) == ["RATIS", "RATIS_DATASTREAM", "STANDALONE"]
    (listed,) = ozone_wire.pipeline_to_wire(pipeline, all_ports=True).members  # pipeline list / get / create
    assert len(listed.ports) == 8
    assert len(member.ports) == 8  # the stored record keeps them all

    volume = scm_datanode_pb2.StorageReportProto(
        storageUuid="v1", storageLocation="/data", capacity=100 * GiB, scmUsed=10 * GiB, remaining=80 * GiB,
        freeSpaceToSpare=5 * GiB, reserved=1 * GiB, fsCapacity=101 * GiB, fsAvailable=81 * GiB)
    scm.node_manager.process_node_report(dns[0].uuid, scm_datanode_pb2.NodeReportProto(storageReport=[volume]))
    usage = await call(wire_loc.DatanodeUsageInfo, DatanodeUsageInfoRequest={"uuid": dns[0].uuid})
    (info,) = usage.DatanodeUsageInfoResponse.info
    assert (info.freeSpaceToSpare, info.reserved, info.fsCapacity, info.fsAvailable) == (
        5 * GiB, 1 * GiB, 101 * GiB, 81 * GiB)


async def test_datanode_list_carries_its_volume_counts(admin: Any) -> None:
    """`ozone admin datanode list` prints "Total volume count" and "Healthy volume count" (and the failed volumes
    with --nodes-with-failed-volumes) from QueryNode's Node: the volumes of the last node report."""
    call, scm, dns = admin
    volumes = [scm_datanode_pb2.StorageReportProto(storageUuid=f"v{i}", storageLocation=f"/data{i}", capacity=GiB,
                                                   remaining=GiB, failed=i == 2) for i in range(3)]
    scm.node_manager.process_node_report(dns[0].uuid, scm_datanode_pb2.NodeReportProto(storageReport=volumes))
    nodes = await call(wire_loc.QueryNode, nodeQueryRequest={"scope": wire.QueryScope.CLUSTER, "state": wire.HEALTHY})
    (node,) = [n for n in nodes.nodeQueryResponse.datanodes if n.nodeID.uuid == dns[0].uuid]
    assert (node.totalVolumeCount, node.healthyVolumeCount, list(node.failedVolumes)) == (3, 2, ["/data2"])


async def test_pipelines_carry_their_suggested_leader(admin: Any) -> None:
    """`pipeline list --json` and `container info --json` print Ozone's suggestedLeaderId: the member the
    leader-choose policy suggested when the pipeline was made, kept apart from the leader the datanodes elect."""
    call, scm, _dns = admin
    listed = await call(wire_loc.ListPipelines, listPipelineRequest={})
    ratis = [p for p in listed.listPipelineResponse.pipelines if p.type == wire.RATIS]
    assert ratis, "the fixture's cluster has RATIS pipelines"
    for p in ratis:
        ours = scm.pipeline_manager.get_pipeline(ozone_wire.pipeline_id_from_wire(p.id).id)
        assert ours.suggestedLeaderID and ours.suggestedLeaderID in {m.uuid for m in ours.members}
        assert ozone_wire.uuid_text(p.suggestedLeaderID) == ours.suggestedLeaderID
        assert ozone_wire.uuid_text(p.suggestedLeaderDatanodeID.uuid) == ours.suggestedLeaderID
