"""BlockManager.allocate_block (Ozone flow) and the DeletedBlockLog end to end."""

from __future__ import annotations

from pathlib import Path

import pytest
from scm_state_harness import bring_up, make_conf, make_datanodes, make_scm, replica

from scm_server.clock import FakeClock
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.proto import hdds_pb2, scm_client_pb2, scm_datanode_pb2
from scm_server.protocols import BlockAllocation

T = scm_datanode_pb2.SCMCommandProto.Type
R = hdds_pb2.ContainerReplicaProto
MB = 1 << 20


async def test_rejected_in_safe_mode_and_bad_sizes(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    assert scm.in_safe_mode() == (True, False)
    with pytest.raises(SCMException) as err:
        await scm.allocate_block(MB, 1, hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    assert err.value.result is ResultCodes.SAFE_MODE_EXCEPTION
    await bring_up(scm, make_datanodes(3))
    assert scm.in_safe_mode() == (False, True)
    for size in (0, -1, (1 << 30) + 1):
        with pytest.raises(SCMException) as err:
            await scm.allocate_block(size, 1, hdds_pb2.RATIS, hdds_pb2.THREE, "om")
        assert err.value.result is ResultCodes.INVALID_BLOCK_SIZE
    with pytest.raises(SCMException) as err:
        await scm.allocate_block(MB, 0, hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    assert err.value.result is ResultCodes.INVALID_REQUEST
    server_says = err.value.message
    assert server_says == "numBlocks=0 must be at least 1: ask for one block or more per call"
    assert scm.block_manager.blocks_allocated == 0
    await scm.stop()

    # the client applies the same rule before sending, in the same words: an address nobody serves is never
    # dialled (without the check the call would end in SCMUnavailableError after its connection attempts)
    from scm_server.client import SCMClient, SCMClientConfig
    from scm_server.client.arguments import InvalidArgumentError
    from scm_server.ports import free_port

    config = SCMClientConfig(max_retries=0, retry_interval=0.01, rpc_timeout=1)
    async with SCMClient([f"127.0.0.1:{free_port()}"], config) as client:
        with pytest.raises(InvalidArgumentError) as refused:
            await client.allocate_block(MB, 0)
        assert str(refused.value) == f"allocate_block: {server_says}"
        with pytest.raises(InvalidArgumentError) as refused:  # what no uint32 can carry keeps its own words
            await client.allocate_block(MB, -1)
        assert str(refused.value) == "allocate_block: num_blocks=-1 is invalid; use an integer from 0 to 4294967295"


async def test_allocation_reuses_containers_and_ids_are_unique(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    await bring_up(scm, make_datanodes(3))
    blocks = await scm.allocate_block(64 * MB, 50, hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    blocks += await scm.allocate_block(64 * MB, 50, hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    ids = [(b.container_id, b.local_id) for b in blocks]
    assert len({local for _, local in ids}) == 100  # every localID unique
    containers = {c for c, _ in ids}
    assert len(containers) == 2  # reused within openContainerLimit, not one container per block
    assert all(b.pipeline.state == hdds_pb2.PIPELINE_OPEN and len(b.pipeline.members) == 3 for b in blocks)
    # 100 blocks with a batch of 100 ids: one localId batch (Raft round trip), plus containers.
    assert scm.sequence_id_generator.batch_allocations == 2  # localId + containerId
    ones = await scm.allocate_block(MB, 3, hdds_pb2.RATIS, hdds_pb2.ONE, "om")
    assert all(len(b.pipeline.members) == 1 for b in ones)
    assert not containers & {b.container_id for b in ones}
    await scm.stop()


async def test_the_hadoop_edge_gets_the_stored_pipelines_without_a_copy_per_block(tmp_path: Path) -> None:
    # allocate_block hands out (container, local id, the stored pipeline message itself): the Hadoop RPC edge
    # writes Ozone's answer from them, equal block for block to what the gRPC answer would carry
    from scm_server import ozone_wire
    from scm_server.proto.ozone import ScmServerProtocol_pb2 as wire_block
    from scm_server.server.hadoop_rpc import convert

    scm = await make_scm(tmp_path)
    await bring_up(scm, make_datanodes(6))
    blocks = await scm.allocate_block(MB, 40, hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    stored = {id(p) for p in scm.pipeline_manager.open_pipelines(hdds_pb2.RATIS, hdds_pb2.THREE)}
    assert len(blocks) == 40 and {id(p) for _, _, p in blocks} == stored  # round robin, no copies
    assert len({local_id for _, local_id, _ in blocks}) == 40
    answer = wire_block.AllocateScmBlockResponseProto.FromString(convert.allocated_blocks_bytes(blocks))
    assert [(b.containerBlockID.containerID, b.containerBlockID.localID, b.pipeline) for b in answer.blocks] == [
        (c, local_id, ozone_wire.pipeline_to_wire(p)) for c, local_id, p in blocks
    ]
    await scm.stop()


async def test_the_protocol_answer_carries_each_block_with_its_whole_pipeline(tmp_path: Path) -> None:
    # The gRPC edge's answer (grpc_services.allocate_response): every block must carry its container, a
    # fresh local id, and a complete copy of the OPEN pipeline it was placed on (a client writes to it).
    from scm_server.server.grpc_services import allocate_response

    scm = await make_scm(tmp_path)
    await bring_up(scm, make_datanodes(6))
    response = allocate_response(await scm.allocate_block(MB, 40, hdds_pb2.RATIS, hdds_pb2.THREE, "om"))
    assert isinstance(response, scm_client_pb2.AllocateScmBlockResponseProto) and len(response.blocks) == 40
    wire = scm_client_pb2.AllocateScmBlockResponseProto.FromString(response.SerializeToString())
    assert wire == response
    pipelines = {p.id.id: p for p in scm.pipeline_manager.open_pipelines(hdds_pb2.RATIS, hdds_pb2.THREE)}
    assert len(pipelines) >= 2
    used = set()
    for block in wire.blocks:
        assert block.pipeline == pipelines[block.pipeline.id.id]  # the whole pipeline, members and all
        assert scm.container_manager.get_container(block.containerBlockID.containerID).state == hdds_pb2.OPEN
        used.add(block.pipeline.id.id)
    assert used == set(pipelines)  # round robin over the OPEN pipelines, per block
    assert len({b.containerBlockID.localID for b in wire.blocks}) == 40
    listed = await scm.allocate_block(MB, 3, hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    assert [type(b) for b in listed] == [BlockAllocation] * 3
    assert min(b.local_id for b in listed) > max(b.containerBlockID.localID for b in wire.blocks)
    await scm.stop()


async def test_exclude_list_is_honoured(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    ones = scm.pipeline_manager.open_pipelines(hdds_pb2.RATIS, hdds_pb2.ONE)
    assert len(ones) == 3
    excl = hdds_pb2.ExcludeListProto(datanodes=[dns[0].uuid], pipelineIds=[ones[1].id])
    allowed = {p.id.id for p in ones if p.id != ones[1].id and dns[0].uuid not in {m.uuid for m in p.members}}
    blocks = await scm.allocate_block(MB, 10, hdds_pb2.RATIS, hdds_pb2.ONE, "om", excl)
    assert {b.pipeline.id.id for b in blocks} <= allowed
    first = blocks[0].container_id
    excl_container = hdds_pb2.ExcludeListProto(containerIds=[first])
    more = await scm.allocate_block(MB, 5, hdds_pb2.RATIS, hdds_pb2.ONE, "om", excl_container)
    assert first not in {b.container_id for b in more}
    await scm.stop()


async def test_ids_never_reissued_across_restart(tmp_path: Path) -> None:
    clock = FakeClock()
    scm = await make_scm(tmp_path, clock)
    await bring_up(scm, make_datanodes(3))
    first = await scm.allocate_block(MB, 30, hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    c1 = await scm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "admin")
    await scm.stop()
    from scm_server.scm import StorageContainerManager

    again = await StorageContainerManager.create(make_conf(tmp_path), clock=clock)
    await again.ha_manager.start()
    again.force_exit_safe_mode()
    dns = make_datanodes(3)
    for dn in dns:
        await dn.register(again)
        for p in again.list_pipelines():
            if dn.uuid in {m.uuid for m in p.members}:
                dn.pipelines.add(p.id.id)
        await dn.heartbeat(again)
    second = await again.allocate_block(MB, 30, hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    c2 = await again.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "admin")
    old = {b.local_id for b in first}
    new = {b.local_id for b in second}
    assert not old & new and min(new) > max(old)
    assert c2.containerInfo.containerID > c1.containerInfo.containerID
    await again.stop()


async def test_not_leader_cannot_allocate(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    await bring_up(scm, make_datanodes(3))
    scm.scm_context.update_leader_and_term(False, 4)
    with pytest.raises(NotLeaderException):
        await scm.allocate_block(MB, 1, hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    await scm.stop()


async def test_deleted_block_log_flow(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    blocks = await scm.allocate_block(MB, 4, hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    cids = sorted({b.container_id for b in blocks})
    for dn in dns:
        for cid in cids:
            dn.replicas[cid] = replica(cid, R.OPEN)
        await dn.heartbeat(scm)
    key_blocks = [
        scm_client_pb2.KeyBlocks(
            key="/vol/bucket/key1",
            blocks=[scm_client_pb2.BlockIDProto(containerID=b.container_id, localID=b.local_id) for b in blocks]
            + [scm_client_pb2.BlockIDProto(containerID=999, localID=1)],
        )
    ]
    results = await scm.delete_key_blocks(key_blocks)
    codes = [r.result for r in results[0].blockResults]
    assert codes[:4] == [scm_client_pb2.DeleteScmBlockResult.success] * 4
    assert codes[4] == scm_client_pb2.DeleteScmBlockResult.errorNotFound
    dbl = scm.deleted_block_log
    assert dbl.num_of_transactions() == len(cids)
    assert scm.metadata_store.deleted_blocks.count() == len(cids)
    # The deleting service sends one DeleteBlocks command per datanode and not again while in flight.
    assert dbl.send_delete_commands() == 3
    assert dbl.send_delete_commands() == 0
    cmds = {dn.uuid: scm.node_manager.queued_commands(dn.uuid, T.deleteBlocksCommand) for dn in dns}
    assert all(len(c) == 1 for c in cmds.values())

    def ack(dn_uuid: str, success: bool = True) -> scm_datanode_pb2.CommandStatusReportsProto:
        cmd = cmds[dn_uuid][0]
        return scm_datanode_pb2.CommandStatusReportsProto(
            cmdStatus=[
                scm_datanode_pb2.CommandStatus(
                    cmdId=cmd.cmdId,
                    status=scm_datanode_pb2.CommandStatus.EXECUTED,
                    type=T.deleteBlocksCommand,
                    blockDeletionAck=scm_datanode_pb2.ContainerBlocksDeletionACKProto(
                        dnId=dn_uuid,
                        results=[
                            scm_datanode_pb2.DeleteBlockTransactionResult(txID=t.txID, containerID=t.containerID, success=success)
                            for t in cmd.deleteBlocksCommandProto.deletedBlocksTransactions
                        ],
                    ),
                )
            ]
        )

    await dns[0].heartbeat(scm, commandStatusReports=[ack(dns[0].uuid)])
    await dns[1].heartbeat(scm, commandStatusReports=[ack(dns[1].uuid, success=False)])
    assert dbl.num_of_transactions() == len(cids)  # not every replica acked yet
    assert all(t.count == 1 for t in dbl.state_manager.transactions())  # dn2 failure bumped retries
    await dns[2].heartbeat(scm, commandStatusReports=[ack(dns[2].uuid)])
    assert dbl.num_of_transactions() == len(cids)
    # dn2 is sent the transactions again and acks; now all replicas have deleted them.
    assert dbl.send_delete_commands() == 1
    cmds[dns[1].uuid] = scm.node_manager.queued_commands(dns[1].uuid, T.deleteBlocksCommand)[-1:]
    await dns[1].heartbeat(scm, commandStatusReports=[ack(dns[1].uuid)])
    assert dbl.num_of_transactions() == 0
    assert scm.metadata_store.deleted_blocks.count() == 0
    await scm.stop()


async def test_delete_key_blocks_in_safe_mode(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    results = await scm.delete_key_blocks(
        [scm_client_pb2.KeyBlocks(key="k", blocks=[scm_client_pb2.BlockIDProto(containerID=1, localID=2)])]
    )
    assert results[0].blockResults[0].result == scm_client_pb2.DeleteScmBlockResult.safeMode
    assert scm.deleted_block_log.num_of_transactions() == 0
    await scm.stop()


async def test_allocation_creates_a_pipeline_and_waits_for_it(tmp_path: Path) -> None:
    import asyncio

    scm = await make_scm(tmp_path)
    dns = make_datanodes(3)
    for dn in dns:
        await dn.register(scm)
    assert scm.list_pipelines() == []
    tasks = [asyncio.create_task(scm.allocate_block(MB, 1, hdds_pb2.RATIS, hdds_pb2.THREE, "om")) for _ in range(3)]
    await asyncio.sleep(0)
    assert len(scm.list_pipelines()) == 1  # one creation for the burst
    for _ in range(2):  # members receive CreatePipeline, then report it
        for dn in dns:
            resp = await dn.heartbeat(scm)
            dn.execute(list(resp.commands))
    blocks = [b for t in tasks for b in await asyncio.wait_for(t, timeout=10)]
    assert {b.pipeline.state for b in blocks} == {hdds_pb2.PIPELINE_OPEN}
    assert len({b.local_id for b in blocks}) == 3
    await scm.stop()


async def test_unsupported_replication_is_a_clear_error(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    await bring_up(scm, make_datanodes(3))
    for rtype, rfactor in ((hdds_pb2.RATIS, hdds_pb2.ZERO), (hdds_pb2.STAND_ALONE, hdds_pb2.ONE)):
        with pytest.raises(SCMException) as err:
            await scm.allocate_block(MB, 1, rtype, rfactor, "om")
        assert err.value.result is ResultCodes.FAILED_TO_CREATE_PIPELINE
        assert "RATIS/ONE or RATIS/THREE" in err.value.message
    with pytest.raises(SCMException) as err:  # EC is served, with its layout (tests/unit/block/test_ec_allocation.py)
        await scm.allocate_block(MB, 1, hdds_pb2.EC, hdds_pb2.THREE, "om")
    assert err.value.result is ResultCodes.INVALID_REQUEST
    assert "needs an ecReplicationConfig" in err.value.message
    assert scm.block_manager.blocks_allocated == 0
    await scm.stop()
