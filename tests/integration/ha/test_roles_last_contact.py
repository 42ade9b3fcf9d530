"""The leader publishes, per follower, how long ago that follower last answered it (``lastContactMs`` in
GetScmRatisRoles), its own election timeout (``electionTimeoutMs``) and heartbeat interval
(``heartbeatIntervalMs``): what an operator needs to tell a live,
caught-up follower from one that stopped answering (crashed, partitioned or frozen) before its Pod readiness or
its lag in entries shows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from scm_server.client.ha_admin import roles_from_proto

from .minihost import wait_for
from .test_ha_inprocess import _init_cluster, _leader

pytestmark = pytest.mark.processes  # whole-SCM scenarios: make test-slow


async def test_leader_publishes_last_contact_per_follower(tmp_path: Path) -> None:
    hosts, _ = await _init_cluster(tmp_path, ["scm1", "scm2", "scm3"])
    try:
        await wait_for(lambda: all(len(h.ha.raft.conf.voters) == 3 for h in hosts), 20, "3 voters everywhere")
        leader = _leader(hosts)
        followers = [h for h in hosts if h is not leader]

        def view() -> dict[str, float | None]:
            roles = roles_from_proto(leader.ha.roles_proto())
            assert roles.election_timeout is not None and roles.election_timeout > 0
            return {p.peer_id: p.last_contact for p in roles.peers}

        ids = [f.ha.peer_id for f in followers]
        election = roles_from_proto(leader.ha.roles_proto()).election_timeout
        assert election is not None
        # the heartbeat interval is the configured one (heartbeat ticks x tick interval), well below the timeout
        heartbeat = roles_from_proto(leader.ha.roles_proto()).heartbeat_interval
        cfg = leader.ha.raft_config
        assert heartbeat == round(cfg.heartbeat_tick * cfg.tick_interval * 1000) / 1000 and 0 < heartbeat < election
        await wait_for(lambda: all((c := view()[i]) is not None and c < election for i in ids), 10,
                       "both followers heard within an election timeout")
        assert view()[leader.ha.peer_id] is None  # the leader has no contact with itself to report
        # GetScmInfo's peerRoles (from Raft's published view alone) are the roles of the whole answer, everywhere
        await wait_for(lambda: all(h.ha.peer_roles() == list(h.ha.roles_proto().roles) for h in hosts), 10,
                       "peerRoles equal to GetScmRatisRoles' roles")
        assert sorted(r.split(":")[2] for r in leader.ha.peer_roles()) == ["FOLLOWER", "FOLLOWER", "LEADER"]
        # Ozone 2.2.0's five fields, the IP address of the member's host last (here an IP literal already)
        assert [r.split(":")[4] for r in leader.ha.peer_roles()] == ["127.0.0.1"] * 3
        # a follower's answer does not come from the follower: it has no leader's view to give
        assert all(not p.HasField("lastContactMs") for p in followers[0].ha.roles_proto().peers)

        # one follower stops answering: its last contact grows past the election timeout (or is gone with its
        # connection) while the other's stays fresh
        stopped, alive = followers
        hosts.remove(stopped)
        await stopped.stop()

        def silent() -> bool:
            v = view()
            c = v[stopped.ha.peer_id]
            return (c is None or c > election) and (a := v[alive.ha.peer_id]) is not None and a < election

        await wait_for(silent, 10, "the stopped follower's silence seen by the leader")
    finally:
        for h in hosts:
            await h.stop()
