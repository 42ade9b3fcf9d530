"""What the Raft HA manager and its inter-SCM service ask of their host (SCMHAHost): at attach, before anything
starts, the StateMachineReadyRule's check, which holds until this member has caught up with the leader; on a backup,
the sequence id batch size the manifest records, and word that the whole stream went out."""

from __future__ import annotations

from pathlib import Path

from scm_server.client.ha_admin import HAAdminClient
from scm_server.ha.bootstrap import scm_init

from .minihost import MiniHost, alloc_ports, make_conf, wait_for


def test_attach_hands_the_host_the_state_machine_ready_check(tmp_path: Path) -> None:
    conf = make_conf(tmp_path, ["scm1"], "scm1", alloc_ports(["scm1"]))
    assert scm_init(conf, security=None)
    host = MiniHost(conf)
    try:
        ready = host.state_machine_ready
        assert ready() is False  # nothing caught up yet: safemode would hold
        host.ha.state_machine.mark_leader()  # a leader has nothing to catch up with
        assert ready() is True
    finally:
        host._store.stop()


async def test_a_backup_records_the_hosts_batch_size_and_tells_the_host_it_went_out(tmp_path: Path) -> None:
    ports = alloc_ports(["scm1"])
    conf = make_conf(tmp_path, ["scm1"], "scm1", ports)
    assert scm_init(conf, security=None)
    host = MiniHost(conf, batch_size=7)
    await host.start()
    try:
        await wait_for(lambda: host.ha.is_leader(), 10, "the single SCM to lead its ring")
        async with HAAdminClient([f"127.0.0.1:{ports['scm1']['ozone.scm.grpc.port']}"]) as client:
            meta, _blob, _keys = await client.backup(allow_safemode=True, timeout=30)
        assert meta["sequenceBatchSize"] == 7
        await wait_for(lambda: len(host.backups_served) == 1, 5, "the host to hear the backup went out")
    finally:
        await host.stop()
