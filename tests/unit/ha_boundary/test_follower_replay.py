"""Deterministic apply across the whole SCM: a follower replaying the leader's request log ends
with a byte-identical scm.db (every replicated table), as Raft followers must."""

from __future__ import annotations

from pathlib import Path

import plyvel
from scm_state_harness import bring_up, make_datanodes, make_scm, replica

from scm_server.proto import hdds_pb2, scm_client_pb2, scm_ratis_pb2
from scm_server.scm import StorageContainerManager

R = hdds_pb2.ContainerReplicaProto


def raw(scm: StorageContainerManager) -> dict[bytes, bytes]:
    path = scm.metadata_store.db_path
    scm.metadata_store.close()
    db = plyvel.DB(str(path))
    try:
        return dict(db.iterator())
    finally:
        db.close()


async def test_follower_replaying_leader_log_has_identical_db(tmp_path: Path) -> None:
    leader = await make_scm(tmp_path / "leader")
    follower = await make_scm(tmp_path / "follower")
    log: list[bytes] = []
    real_submit = leader.ha_manager.submit_request

    async def recording_submit(request: scm_ratis_pb2.SCMRatisRequestProto) -> scm_ratis_pb2.SCMRatisResponseProto:
        log.append(request.SerializeToString())
        return await real_submit(request)

    leader.ha_manager.submit_request = recording_submit  # type: ignore[method-assign]

    # A workload touching every replicated manager.
    dns = make_datanodes(4, racks=2)
    await bring_up(leader, dns)
    blocks = await leader.allocate_block(1024, 20, hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    cid = blocks[0].container_id
    await leader.close_container(cid)
    for dn in dns:
        dn.replicas[cid] = replica(cid, R.CLOSED, keys=4, bcsid=8)
        await dn.heartbeat(leader)
    await leader.delete_key_blocks(
        [scm_client_pb2.KeyBlocks(key="k", blocks=[scm_client_pb2.BlockIDProto(containerID=cid, localID=b.local_id) for b in blocks[:3]])]
    )
    await leader.stateful_service_state_manager.save_configuration("ContainerBalancer", b"\x01")
    p = leader.list_pipelines()[0]
    await leader.close_pipeline(p.id.id)
    await leader.replication_manager.run_once()
    assert len(log) > 10

    # The follower applies the same entries in the same order (what SCMStateMachine does).
    for entry in log:
        request = scm_ratis_pb2.SCMRatisRequestProto()
        request.ParseFromString(entry)
        follower.ha_manager.apply(request)  # type: ignore[attr-defined]

    assert [c.containerID for c in follower.container_state_manager.get_containers()] == [
        c.containerID for c in leader.container_state_manager.get_containers()
    ]
    leader_db, follower_db = raw(leader), raw(follower)
    assert leader_db == follower_db
    assert any(k.startswith(b"deletedBlocks/") for k in leader_db)
    assert any(k.startswith(b"sequenceId/") for k in leader_db)
    await leader.stop()
    await follower.stop()
