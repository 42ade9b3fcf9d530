"""cluster.json names every port by transport and Ozone's protocol name (issue 29 item 8), and a data dir kept from
format 1 (gRPC ports under ``client_port``/``block_port``/``datanode_port``, Ozone's words for its Hadoop RPC ports)
still restarts on its ports. No process is started."""

from __future__ import annotations

import json
from pathlib import Path

from scm_server.local.quorum import STATE_FILE, HALocalCluster, recorded_ports


def test_ports_are_recorded_by_transport_and_read_back(tmp_path: Path) -> None:
    first = HALocalCluster(tmp_path, 3)
    state = json.loads(first.save_state().read_text())
    for s, rec in zip(first.scms, state["scms"], strict=True):
        ports = rec["ports"]
        assert set(ports) == {"grpc", "hadoop_rpc", "http", "ratis", "inter_scm_grpc"}
        assert ports["grpc"] == {"client": s.client_port, "block": s.block_port, "datanode": s.datanode_port,
                                 "security": first.security_port(s.node_id)}
        assert ports["hadoop_rpc"] == s.hadoop_ports and set(ports["hadoop_rpc"]) == {"client", "block", "datanode",
                                                                                        "security"}
        assert not {"client_port", "block_port", "datanode_port"} & set(ports)
    again = HALocalCluster(tmp_path, 3)
    assert again.reuse_ports()
    for a, b in zip(first.scms, again.scms, strict=True):
        assert (a.client_port, a.block_port, a.datanode_port, a.http_port, a.ratis_port, a.grpc_port,
                a.hadoop_ports) == (b.client_port, b.block_port, b.datanode_port, b.http_port, b.ratis_port,
                                    b.grpc_port, b.hadoop_ports)
        assert first.security_port(a.node_id) == again.security_port(b.node_id)


def test_a_format_1_state_file_keeps_its_ports(tmp_path: Path) -> None:
    old = {"client_port": 19860, "block_port": 19863, "datanode_port": 19861, "http_port": 19876,
           "ratis_port": 19894, "grpc_port": 19895, "security_port": 19961}
    assert recorded_ports(old) == old
    state = {"scms": [{"node_id": f"scm{i}", "ports": {k: v + 100 * i for k, v in old.items()},
                       "hadoop_rpc": {"client": f"127.0.0.1:{9860 + i}"}} for i in (1, 2, 3)]}
    (tmp_path / STATE_FILE).write_text(json.dumps(state))
    cluster = HALocalCluster(tmp_path, 3)
    assert cluster.reuse_ports()
    assert [(s.client_port, s.grpc_port, s.hadoop_ports["client"]) for s in cluster.scms] == [
        (19960, 19995, 9861), (20060, 20095, 9862), (20160, 20195, 9863)]
