"""A full container report read as Ozone's datanode protocol decoded it (the Hadoop RPC edge passes it apart,
uncopied) leaves exactly the state the same report in our message leaves: the replicas, their values, the
replicas a later report no longer lists taken away, and the leader's lifecycle steps."""

from __future__ import annotations

from pathlib import Path

from scm_state_harness import FakeDatanode, bring_up, make_datanodes, make_scm, replica

from scm_server import ozone_wire
from scm_server.clock import FakeClock
from scm_server.proto import hdds_pb2, scm_datanode_pb2
from scm_server.proto.ozone import ScmServerDatanodeHeartbeatProtocol_pb2 as wire_dn
from scm_server.scm import StorageContainerManager

R = hdds_pb2.ContainerReplicaProto


async def _report(scm: StorageContainerManager, dn: FakeDatanode, in_ozones_message: bool) -> None:
    req = scm_datanode_pb2.SCMHeartbeatRequestProto(datanodeDetails=dn.details, nodeReport=dn.node_report())
    if in_ozones_message:
        await scm.process_heartbeat(req, ozone_wire.by_name(dn.container_report(), wire_dn.ContainerReportsProto))
    else:
        req.containerReport.CopyFrom(dn.container_report())
        await scm.process_heartbeat(req)


async def _scenario(tmp_path: Path, in_ozones_message: bool) -> list[object]:
    clock = FakeClock()
    scm = await make_scm(tmp_path, clock)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    ids = [(await scm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "r")).containerInfo.containerID for _ in range(4)]
    await scm.close_container(ids[0])  # CLOSING: a CLOSED replica closes it (a leader's step, through Raft)
    for n, dn in enumerate(dns):
        dn.replicas[ids[0]] = replica(ids[0], R.CLOSED, keys=5, used=7 << 20, bcsid=9)
        dn.replicas[ids[1]] = replica(ids[1], R.OPEN, keys=n, used=n << 20, bcsid=n, origin=dn.uuid)
        dn.replicas[ids[2]] = replica(ids[2], R.OPEN, keys=1, used=1, empty=n == 1)
        dn.replicas[ids[3]] = replica(ids[3], R.OPEN)
        dn.replicas[99] = replica(99, R.CLOSED)  # a container SCM does not know: ignored
        await _report(scm, dn, in_ozones_message)
    clock.advance(30)
    del dns[2].replicas[ids[3]]  # no longer listed: taken away
    dns[2].replicas[ids[2]] = replica(ids[2], R.DELETED)  # a deleted replica: taken away
    await _report(scm, dns[2], in_ozones_message)
    cm = scm.container_manager
    infos = [scm.get_container(c) for c in ids]
    for info in infos:
        info.ClearField("pipelineID")  # a random id in each SCM
    state = [
        infos,
        cm.all_replicas(),
        cm.replica_count(),
        {dn.uuid: sorted(cm.containers_on(dn.uuid)) for dn in dns},
    ]
    await scm.stop()
    return state


async def test_a_full_report_in_ozones_message_leaves_the_state_ours_leaves(tmp_path: Path) -> None:
    ours = await _scenario(tmp_path / "ours", in_ozones_message=False)
    theirs = await _scenario(tmp_path / "theirs", in_ozones_message=True)
    assert theirs == ours
    infos, replicas, count, by_node = ours
    assert infos[0].state == hdds_pb2.CLOSED  # type: ignore[index]
    assert sorted(replicas) == [1, 2, 3, 4]  # type: ignore[call-overload]
    assert count == 3 + 3 + 2 + 2 and len(by_node[make_datanodes(3)[2].uuid]) == 2  # type: ignore[index]
