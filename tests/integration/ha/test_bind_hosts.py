"""Bind-host keys for the Raft and inter-SCM ports (issue 11, item 10): an SCM whose configured
address is not a local interface (a Kubernetes Service name, an address behind NAT) still listens.

In process: one SCM (a ring of one) configured at 192.0.2.10 (TEST-NET-1, never local) on loopback
ports; every call below goes to loopback only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scm_server.exceptions import ConfigError
from scm_server.ha.bootstrap import resolve_local_scm, scm_init
from scm_server.ha.inter_scm_client import get_roles
from scm_server.ha.scm_ha_manager import bind_address, raft_config_from_conf

from .minihost import MiniHost, alloc_ports, make_conf, wait_for

pytestmark = pytest.mark.processes  # whole-SCM scenarios: make test-slow

NOT_LOCAL = "192.0.2.10"


def _conf(tmp_path: Path, **extra: str):  # type: ignore[no-untyped-def]
    ports = alloc_ports(["scm1"])
    conf = make_conf(tmp_path, ["scm1"], "scm1", ports, **extra)
    conf.set("ozone.scm.address.scmservice.scm1", NOT_LOCAL)
    return conf, ports["scm1"]


def test_bind_address_keys_and_defaults(tmp_path: Path) -> None:
    conf, ports = _conf(tmp_path, **{"ozone.scm.ratis.bind.host": "0.0.0.0"})
    local = resolve_local_scm(conf)
    assert bind_address(conf, local, "ozone.scm.ratis.bind.host", local.ratis_address) == (
        f"0.0.0.0:{ports['ozone.scm.ratis.port']}"
    )
    # unset: listen where it is advertised
    assert bind_address(conf, local, "ozone.scm.grpc.bind.host", local.grpc_address) == local.grpc_address
    # the per-node suffix form wins, as for every SCM key
    conf.set("ozone.scm.grpc.bind.host.scmservice.scm1", "127.0.0.1")
    assert bind_address(conf, local, "ozone.scm.grpc.bind.host", local.grpc_address) == (
        f"127.0.0.1:{ports['ozone.scm.grpc.port']}"
    )
    raft = raft_config_from_conf(conf, local, "peer", tmp_path / "raft")
    assert raft.address == f"{NOT_LOCAL}:{ports['ozone.scm.ratis.port']}"  # advertised to peers
    assert raft.listen_address == f"0.0.0.0:{ports['ozone.scm.ratis.port']}"


async def test_scm_with_a_non_local_address_listens_on_its_bind_host(tmp_path: Path) -> None:
    conf, ports = _conf(tmp_path, **{"ozone.scm.ratis.bind.host": "127.0.0.1",
                                     "ozone.scm.grpc.bind.host": "127.0.0.1"})
    assert scm_init(conf, security=None)
    host = MiniHost(conf)
    await host.start()
    try:
        await wait_for(lambda: host.ha.is_leader(), 10, "the single SCM to lead its ring")
        roles = await get_roles(f"127.0.0.1:{ports['ozone.scm.grpc.port']}", timeout=5)
        assert roles.selfRole == "LEADER" and roles.answeredByNode == "scm1"
        assert roles.peers[0].host == NOT_LOCAL  # peers are told the configured address
    finally:
        await host.stop()


async def test_without_bind_host_a_non_local_address_cannot_listen(tmp_path: Path) -> None:
    conf, _ = _conf(tmp_path)
    assert scm_init(conf, security=None)
    host = MiniHost(conf)
    with pytest.raises(ConfigError, match=r"not a local address \(set ozone\.scm\.grpc\.bind\.host=0\.0\.0\.0"):
        await host.start()
    await host.ha.stop()
    host._store.stop()
