"""GetScmInfo's peerRoles end with the IP address the member's host resolves to, as Ozone 2.2.0's do
(``host:port:ROLE:peerId:ip``; issue 29, item 7): looked up off the caller's path, answered from memory, and
looked up again once the answer is older than the JVM would keep it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from scm_server.clock import FakeClock
from scm_server.ha.bootstrap import scm_bootstrap, scm_init
from scm_server.ha.peer_addresses import POSITIVE_TTL, PeerAddresses

from .minihost import SERVICE, MiniHost, alloc_ports, make_conf, wait_for

pytestmark = pytest.mark.processes  # whole-SCM scenarios: make test-slow


async def test_peer_roles_end_with_the_ip_of_the_members_host(tmp_path: Path) -> None:
    ports = alloc_ports(["scm1"])
    # a host name (not an IP literal), so the address has to be looked up
    conf = make_conf(tmp_path, ["scm1"], "scm1", ports, **{f"ozone.scm.address.{SERVICE}.scm1": "localhost"})
    assert scm_init(conf, security=None)
    assert scm_bootstrap(conf, security=None)
    host = MiniHost(conf)
    clock = FakeClock()
    answers = {"localhost": "10.1.2.3"}  # not what localhost really is: proves the answer came from the lookup
    calls: list[str] = []
    lock = threading.Lock()

    def resolve(name: str) -> str:
        with lock:
            calls.append(name)
            return answers[name]

    host.ha.peer_addresses = PeerAddresses(clock, resolve)
    await host.start()
    try:
        await wait_for(lambda: host.ha.is_leader(), 10, "the one-member ring to elect its SCM")
        port = ports["scm1"]["ozone.scm.ratis.port"]
        expected = f"localhost:{port}:LEADER:{host.ha.peer_id}:10.1.2.3"
        await wait_for(lambda: host.ha.peer_roles() == [expected], 10, "peerRoles with the looked-up IP address")
        assert list(host.ha.roles_proto().roles) == [expected]
        looked_up = len(calls)
        for _ in range(5):  # every GetScmInfo asks; within the TTL none of them looks the name up again
            assert host.ha.peer_roles() == [expected]
        assert len(calls) == looked_up

        # the Pod came back on another IP: answered with it once the kept answer is older than the TTL
        with lock:
            answers["localhost"] = "10.1.2.4"
        clock.advance(POSITIVE_TTL)
        moved = f"localhost:{port}:LEADER:{host.ha.peer_id}:10.1.2.4"
        await wait_for(lambda: host.ha.peer_roles() == [moved], 10, "peerRoles with the new IP address")
        assert len(calls) == looked_up + 1
    finally:
        await host.stop()
