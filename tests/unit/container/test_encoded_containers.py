"""The containers' kept encoded forms (ContainerManager.encoded, what ListContainer serves): always the bytes of
what get_container answers, through every change of a stored record or of a container's replicas, and kept
(the same bytes object) while nothing changed."""

from __future__ import annotations

from pathlib import Path

import pytest
from scm_state_harness import bring_up, make_datanodes, make_scm, replica

from scm_server.container import container_manager as cm_module
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.proto import hdds_pb2
from scm_server.scm import StorageContainerManager

R = hdds_pb2.ContainerReplicaProto


def _expected(scm: StorageContainerManager, ids: list[int]) -> list[tuple[bytes, str | None]]:
    out = []
    for cid in ids:
        info = scm.get_container(cid)
        out.append((info.SerializeToString(), info.pipelineID.id if info.HasField("pipelineID") else None))
    return out


async def test_encoded_forms_follow_every_change_and_are_kept_meanwhile(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    dns = make_datanodes(3)
    await bring_up(scm, dns)
    cm = scm.container_manager
    ids = [(await scm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "e")).containerInfo.containerID for _ in range(3)]

    def check() -> list[tuple[bytes, str | None]]:
        got = cm.encoded(ids)
        assert got == _expected(scm, ids)
        return got

    first = check()
    again = cm.encoded(ids)
    assert all(a[0] is b[0] for a, b in zip(first, again, strict=True))  # kept: nothing changed

    # a report raising the usage (soft state: a new replica tuple, the same record)
    for n, dn in enumerate(dns):
        dn.replicas[ids[0]] = replica(ids[0], R.OPEN, keys=3 + n, used=(n + 1) << 20, bcsid=4)
        await dn.heartbeat(scm)
    after_report = check()
    assert after_report[0][0] is not first[0][0] and after_report[1][0] is first[1][0]
    assert hdds_pb2.ContainerInfoProto.FromString(after_report[0][0]).usedBytes == 3 << 20

    # the stored record replaced (closing goes through Raft), then suppressed
    await scm.close_container(ids[1])
    closing = check()
    assert hdds_pb2.ContainerInfoProto.FromString(closing[1][0]).state == hdds_pb2.CLOSING
    assert await scm.suppress_containers([ids[2]], True) == []
    assert hdds_pb2.ContainerInfoProto.FromString(check()[2][0]).suppressed

    # replicas taken away (a dead datanode) and a reload from scm.db (a checkpoint install: every record new)
    await cm.on_node_dead(dns[2].uuid)
    before_reload = check()
    assert hdds_pb2.ContainerInfoProto.FromString(before_reload[0][0]).usedBytes == 2 << 20
    scm.reinitialize()
    reloaded = check()
    assert all(a[0] is not b[0] for a, b in zip(reloaded, before_reload, strict=True))  # from the new records

    # a removed container is not found, as get_container says
    await scm.container_state_manager.remove_container(ids[2])
    with pytest.raises(SCMException) as err:
        cm.encoded(ids)
    assert err.value.result is ResultCodes.CONTAINER_NOT_FOUND
    await scm.stop()


async def test_the_kept_forms_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cm_module, "ENCODED_MAX", 2)
    scm = await make_scm(tmp_path)
    await bring_up(scm, make_datanodes(3))
    ids = [(await scm.allocate_container(hdds_pb2.RATIS, hdds_pb2.THREE, "b")).containerInfo.containerID for _ in range(5)]
    assert scm.container_manager.encoded(ids) == _expected(scm, ids)
    assert len(scm.container_manager._encoded) <= 2
    page, total = scm.list_containers_encoded(start_id=ids[1], count=2)
    assert total == 4 and page == _expected(scm, ids[1:3])
    await scm.stop()
