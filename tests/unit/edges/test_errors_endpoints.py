"""Wire contract of SCM errors over gRPC, and config -> endpoint resolution."""

from __future__ import annotations

import grpc
import pytest

from scm_server.exceptions import ConfigError, NotLeaderException, ResultCodes, SCMException
from scm_server.grpc_errors import (
    LEADER_ADDRESS_KEY,
    LEADER_ID_KEY,
    RESULT_KEY,
    from_grpc_error,
    status_for,
    to_grpc_error,
)
from scm_server.server import endpoints


@pytest.mark.parametrize(
    ("result", "code"),
    [
        (ResultCodes.CONTAINER_NOT_FOUND, grpc.StatusCode.NOT_FOUND),
        (ResultCodes.INVALID_BLOCK_SIZE, grpc.StatusCode.INVALID_ARGUMENT),
        (ResultCodes.SAFE_MODE_EXCEPTION, grpc.StatusCode.FAILED_PRECONDITION),
        (ResultCodes.SCM_NOT_LEADER, grpc.StatusCode.UNAVAILABLE),
        (ResultCodes.INTERNAL_ERROR, grpc.StatusCode.INTERNAL),
        (ResultCodes.FAILED_TO_FIND_SUITABLE_NODE, grpc.StatusCode.RESOURCE_EXHAUSTED),
    ],
)
def test_status_for(result: ResultCodes, code: grpc.StatusCode) -> None:
    assert status_for(result) is code


def test_every_result_code_round_trips() -> None:
    for result in ResultCodes:
        exc = SCMException(result, f"msg for {result.value}")
        code, details, md = to_grpc_error(exc)
        back = from_grpc_error(code, details, md)
        assert back is not None
        assert back.result is result
        assert back.message == f"msg for {result.value}"


def test_not_leader_carries_protocol_address_override() -> None:
    exc = NotLeaderException("follower", "scm2", "10.0.0.2:9894")
    code, _details, md = to_grpc_error(exc, leader_address="10.0.0.2:9860")
    assert dict(md) == {RESULT_KEY: "SCM_NOT_LEADER", LEADER_ID_KEY: "scm2", LEADER_ADDRESS_KEY: "10.0.0.2:9860"}
    back = from_grpc_error(code, _details, [(k, v.encode()) for k, v in md])
    assert isinstance(back, NotLeaderException)
    assert (back.leader_id, back.leader_address) == ("scm2", "10.0.0.2:9860")


def test_transport_error_has_no_scm_result() -> None:
    assert from_grpc_error(grpc.StatusCode.UNAVAILABLE, "connection refused", ()) is None


HA = {
    "ozone.scm.service.ids": "svc",
    "ozone.scm.nodes.svc": "scm1,scm2",
    "ozone.scm.address.svc.scm1": "127.0.0.1",
    "ozone.scm.address.svc.scm2": "127.0.0.2",
    "ozone.scm.client.grpc.port.svc.scm2": "19860",
    "ozone.scm.client.grpc.port": "9860",
    "ozone.scm.datanode.grpc.port.svc.scm1": "19861",
    "ozone.scm.datanode.grpc.port": "9861",
    "ozone.scm.client.port.svc.scm2": "29860",
    "ozone.scm.http-address.svc.scm2": "127.0.0.2:19876",
}


def test_ha_addresses_use_per_node_suffix_keys() -> None:
    get = HA.get
    assert endpoints.protocol_addresses(get, endpoints.Protocol.CLIENT) == ["127.0.0.1:9860", "127.0.0.2:19860"]
    assert endpoints.protocol_addresses(get, endpoints.Protocol.DATANODE) == ["127.0.0.1:19861", "127.0.0.2:9861"]
    assert endpoints.leader_address(get, endpoints.Protocol.CLIENT, "scm2") == "127.0.0.2:19860"
    assert endpoints.leader_address(get, endpoints.Protocol.CLIENT, "nope") is None
    # Ozone's own key names the Hadoop RPC port (default 9860), never the gRPC one
    assert endpoints.protocol_addresses(get, endpoints.Protocol.CLIENT_HADOOP) == ["127.0.0.1:9860", "127.0.0.2:29860"]
    node = endpoints.find_node(get, "scm2")
    assert endpoints.http_address(get, node) == ("127.0.0.2", 19876)


@pytest.mark.parametrize("retired", ["ozone.scm.client.hadoop-rpc.port", "ozone.scm.datanode.hadoop-rpc.port.svc.scm2",
                                     "ozone.scm.security.service.hadoop-rpc.address.svc"])
def test_a_retired_hadoop_rpc_key_is_refused_naming_both_renames(retired: str) -> None:
    get = {**HA, retired: "19999"}.get
    with pytest.raises(ConfigError) as err:
        endpoints.protocol_addresses(get, endpoints.Protocol.CLIENT)
    message = str(err.value)
    stem, _, rest = retired.partition(".hadoop-rpc.")
    assert message.startswith(f"{retired} is no longer read: Ozone's own {stem}.{rest.split('.')[0]} now serves")
    assert f"rename {retired} to {stem}.{rest}" in message and f"{stem}.grpc.{rest}" in message
    assert "\n" not in message


def test_single_scm_from_scm_names() -> None:
    conf = {"ozone.scm.names": "scm.example.com", "ozone.scm.block.client.grpc.port": "1234"}
    assert endpoints.protocol_addresses(conf.get, endpoints.Protocol.BLOCK) == ["scm.example.com:1234"]
    assert endpoints.protocol_addresses(conf.get, endpoints.Protocol.CLIENT) == ["scm.example.com:19860"]
    assert endpoints.protocol_addresses(conf.get, endpoints.Protocol.BLOCK_HADOOP) == ["scm.example.com:9863"]
