"""Memory-shaped invariants of the container table and the replica map (issue: ~2 KB/container).

Measured figures live in the helper's report (RSS over 100k containers); these tests pin the
structural choices that produce them, each observable from outside:

* every replica of one datanode shares ONE id string (and ``originNodeId`` the same one), and
  the replicas of one container one container-id int, rather than fresh copies decoded from each
  report; the replica total (a /prom gauge) is a counter, not a scan;
* the container table hands out fresh ContainerInfoProto copies built from compact records, so a
  caller modifying what it got can never change the replicated table behind Raft's back.
"""

from __future__ import annotations

import gc
from pathlib import Path

from scm_state_harness import bring_up, make_datanodes, make_scm, replica

from scm_server.container.container_manager import ContainerReplica, merge_reported_usage
from scm_server.proto import hdds_pb2

R = hdds_pb2.ContainerReplicaProto


async def test_replicas_share_interned_datanode_ids(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    cm = scm.container_manager
    cids = [(await cm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")).containerID for _ in range(5)]
    for dn in dns:
        for cid in cids:
            dn.replicas[cid] = replica(cid, R.OPEN, keys=0, bcsid=0, origin=dn.uuid)
    for _ in range(2):  # two rounds of full reports: the second replaces every replica
        for dn in dns:
            await dn.heartbeat(scm)
    replicas = [r for cid in cids for r in cm.get_replicas(cid)]
    assert len(replicas) == 15
    assert len({id(r.datanode_uuid) for r in replicas}) == 3
    assert all(r.origin_node_id is r.datanode_uuid for r in replicas)
    assert all(len({id(r.container_id) for r in cm.get_replicas(cid)}) == 1 for cid in cids)
    assert [r.datanode_uuid for r in cm.get_replicas(cids[0])] == sorted(dn.uuid for dn in dns)
    assert cm.replica_count() == 15
    cm.remove_replica(cids[0], dns[0].uuid)
    cm.remove_replica(cids[0], dns[0].uuid)  # already gone: no double count
    assert cm.replica_count() == 14 == sum(len(cm.get_replicas(c)) for c in cids)
    await scm.stop()


async def test_container_table_is_not_mutable_through_reads(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    await bring_up(scm, make_datanodes(3))
    sm = scm.container_manager.state_manager
    info = await scm.container_manager.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "om")
    cid = info.containerID
    got = sm.get_container(cid)
    got.state = hdds_pb2.CLOSED  # type: ignore[assignment]
    got.owner = "intruder"
    found = sm.find(cid)
    assert found is not None
    found.usedBytes = 123
    listed = sm.get_containers()[0]
    listed.numberOfKeys = 99
    fresh = sm.get_container(cid)
    assert (fresh.state, fresh.owner, fresh.usedBytes, fresh.numberOfKeys) == (hdds_pb2.OPEN, "om", 0, 0)
    assert sm.counts_by_state()["OPEN"] == 1
    # What a reload from scm.db gives is the same as what was served before.
    sm.reinitialize()
    assert sm.get_container(cid) == fresh
    await scm.stop()


async def test_replicas_are_plain_tuples_the_collector_untracks_and_read_back_whole(tmp_path: Path) -> None:
    """The index keeps plain tuples (so full collections never walk them); reads name every field,
    the unusual ones (another origin, an empty replica, an EC index) included; per-datanode id
    arrays stay sorted and exact whatever order replicas come and go in."""
    scm = await make_scm(tmp_path)
    cm = scm.container_manager
    dn_a, dn_b = "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b"
    usual = ContainerReplica(7, dn_a, R.CLOSED, 12, 3, 4096, dn_a, False, 0, 1000)
    unusual = ContainerReplica(7, dn_b, R.QUASI_CLOSED, 11, 2, 2048, dn_a, True, 4, 1001)
    for r in (unusual, usual):
        cm.update_container_replica(r)
    assert cm.get_replicas(7) == [usual, unusual]  # ordered by datanode, every field as recorded
    stored = cm.replica_map_view()[7]
    assert type(stored) is tuple and len(stored) == 6 + 9  # one flat tuple: a short and a long record
    gc.collect()
    assert not gc.is_tracked(stored)
    # A record that changes length in the middle of the tuple, a third datanode before both, removals.
    dn_0 = "00000000-0000-0000-0000-000000000000"
    first = usual._replace(datanode_uuid=dn_0, origin_node_id=dn_0, replica_index=2, sequence_id=20)
    plain_b = unusual._replace(origin_node_id=dn_b, is_empty=False, replica_index=0, state=R.CLOSED, used_bytes=8192)
    for r in (first, unusual._replace(sequence_id=13), plain_b):
        cm.update_container_replica(r)
    assert cm.get_replicas(7) == [first, usual, plain_b] and len(cm.replica_map_view()[7]) == 9 + 6 + 6
    merged = merge_reported_usage(hdds_pb2.ContainerInfoProto(containerID=7), cm.replica_map_view()[7])
    assert (merged.sequenceId, merged.numberOfKeys, merged.usedBytes) == (20, 3, 8192)
    cm.remove_replica(7, dn_a)
    assert cm.get_replicas(7) == [first, plain_b]
    cm.remove_replica(7, dn_0)
    cm.remove_replica(7, dn_0)  # a second removal changes nothing
    assert cm.get_replicas(7) == [plain_b] and cm.replica_count() == 1
    cm.update_container_replica(usual)
    cm.update_container_replica(unusual)
    assert cm.get_replicas(7) == [usual, unusual] and cm.replica_count() == 2

    for cid in (30, 10, 20, 40, 5):  # out of id order, as incremental reports may come
        cm.update_container_replica(usual._replace(container_id=cid))
    cm.remove_replica(20, dn_a)
    cm.remove_replica(20, dn_a)
    cm.update_container_replica(usual._replace(container_id=10))  # a repeat is no second entry
    assert list(cm._by_node[dn_a]) == [5, 7, 10, 30, 40]
    assert cm.containers_on(dn_a) == {5, 7, 10, 30, 40} and cm.container_count_on(dn_a) == 5
    assert cm.containers_on(dn_b) == {7} and cm.replica_count() == 6
    await scm.stop()
