"""What the Raft HA manager hands its host at attach, before anything starts:
the StateMachineReadyRule's check, which holds until this member has caught up with the leader."""

from __future__ import annotations

from pathlib import Path

from scm_server.ha.bootstrap import scm_init

from .minihost import MiniHost, alloc_ports, make_conf


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
