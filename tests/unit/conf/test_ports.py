"""The port table: Ozone's keys and numbers serve Hadoop RPC, ours serve gRPC, and the image exposes both."""

from __future__ import annotations

import re
from pathlib import Path

from scm_server.conf import ports
from scm_server.conf.ozone_configuration import DEFAULTS

ROOT = Path(__file__).resolve().parents[3]


def test_ozones_keys_and_numbers_are_the_hadoop_rpc_ones() -> None:
    hadoop = {p.port_key: p.default_port for p in ports.ALL if p.transport is ports.Transport.HADOOP_RPC}
    assert hadoop == {"ozone.scm.client.port": 9860, "ozone.scm.datanode.port": 9861,
                      "ozone.scm.block.client.port": 9863, "ozone.scm.security.service.port": 9961}
    grpc = {p.port_key: p.default_port for p in ports.ALL if p.transport is ports.Transport.GRPC}
    assert grpc == {"ozone.scm.client.grpc.port": 19860, "ozone.scm.datanode.grpc.port": 19861,
                    "ozone.scm.block.client.grpc.port": 19863, "ozone.scm.security.service.grpc.port": 19961}
    assert ports.CLIENT_HADOOP.bind_host_key == "ozone.scm.client.bind.host"  # Ozone's own
    assert ports.CLIENT_GRPC.bind_host_key == "ozone.scm.client.grpc.bind.host"
    assert ports.SECURITY_GRPC.address_key == "ozone.scm.security.service.grpc.address"
    # the raw default table agrees (error examples and per-node lookups read it)
    assert {k: DEFAULTS[k] for k in ports.DEFAULT_PORTS} == {k: str(v) for k, v in {**hadoop, **grpc}.items()}
    assert (DEFAULTS["ozone.scm.ratis.port"], DEFAULTS["ozone.scm.grpc.port"]) == ("9894", "9895")  # unchanged


def test_a_configuration_without_retired_keys_has_no_problem() -> None:
    conf = {"ozone.scm.client.port": "9860", "ozone.scm.client.grpc.port": "19860"}
    assert ports.retired_key_problem(conf.get, ["", ".svc.scm1"]) is None
    retired = {"ozone.scm.block.client.hadoop-rpc.address.svc.scm1": "h:1"}
    problem = ports.retired_key_problem(retired.get, ["", ".svc.scm1"])
    assert problem is not None and problem.startswith("ozone.scm.block.client.hadoop-rpc.address.svc.scm1 is no longer")
    assert "rename ozone.scm.block.client.hadoop-rpc.address.svc.scm1 to ozone.scm.block.client.address.svc.scm1" \
        in problem and "ozone.scm.block.client.grpc.address.svc.scm1" in problem


def test_the_image_exposes_and_binds_both_transports() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    exposed = {int(p) for line in re.findall(r"^EXPOSE (.+)$", dockerfile, re.M) for p in line.split()}
    assert exposed == {p.default_port for p in ports.ALL} | {9876, 9894, 9895}
    for p in ports.ALL:
        assert f"<name>{p.bind_host_key}</name><value>0.0.0.0</value>" in dockerfile, p.bind_host_key
