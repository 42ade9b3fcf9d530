"""The simulator's mixed transports and its container following (pure parts and construction)."""

from __future__ import annotations

import pytest

from scm_server.datanode_sim.simulator import DatanodeSimulator, replicas_to_create
from scm_server.proto import hdds_pb2, scm_datanode_pb2


def info(cid: int, state: int, pipeline: str | None = "p1") -> hdds_pb2.ContainerInfoProto:
    out = hdds_pb2.ContainerInfoProto(containerID=cid, state=state)  # type: ignore[arg-type]
    if pipeline is not None:
        out.pipelineID.id = pipeline
    return out


def test_replicas_to_create_on_pipeline_members_missing_them() -> None:
    members = {"p1": ["a", "b", "c"], "p2": ["d"]}
    held = {"a": [1], "b": [], "c": [], "d": []}  # "x" of p1 is not one of the simulator's (live) datanodes
    containers = [info(1, hdds_pb2.OPEN), info(2, hdds_pb2.CLOSING, "p2"), info(3, hdds_pb2.CLOSED),
                  info(4, hdds_pb2.OPEN, None), info(5, hdds_pb2.OPEN, "gone"), info(6, hdds_pb2.DELETING)]
    assert replicas_to_create(containers, members, held) == [("b", 1), ("c", 1), ("d", 2)]
    assert replicas_to_create(containers, members, {"a": [1], "b": [1], "c": [1], "d": [2]}) == []


def test_mixed_transports_last_datanodes_speak_hadoop_rpc() -> None:
    sim = DatanodeSimulator(["g1:1", "g2:1"], 5, hadoop_rpc_addresses=["h1:2", "h2:2"], hadoop_rpc_datanodes=2)
    assert sim.transports() == {"grpc": ["sim-dn-0", "sim-dn-1", "sim-dn-2"], "hadoop-rpc": ["sim-dn-3", "sim-dn-4"]}
    assert [ep.address for ep in sim.datanodes[0].endpoints] == ["g1:1", "g2:1"]
    assert [ep.address for ep in sim.datanodes[4].endpoints] == ["h1:2", "h2:2"]
    assert type(sim.client_for("h1:2", sim.datanodes[4])).__name__ == "HadoopDatanodeClient"
    assert type(sim.client_for("g1:1", sim.datanodes[0])).__name__ == "DatanodeProtocolClient"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"hadoop_rpc_datanodes": 6, "hadoop_rpc_addresses": ["h:1"]}, "between 0 and count"),
    ({"hadoop_rpc_datanodes": 1}, "needs hadoop_rpc_addresses"),
    ({"follow_containers": -1.0}, "follow_containers must be >= 0"),
    ({"follow_containers": 2.0}, "needs admin_addresses"),
])
def test_bad_simulator_arguments_are_named(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DatanodeSimulator(["g:1"], 5, **kwargs)  # type: ignore[arg-type]


def test_local_quorum_configures_hadoop_rpc_and_describes_the_transports(tmp_path: object) -> None:
    from pathlib import Path

    from scm_server.local.cluster import SERVICE_ID
    from scm_server.local.quorum import HALocalCluster, describe_transports, hadoop_rpc_datanodes

    cluster = HALocalCluster(Path(str(tmp_path)), 3, hadoop_rpc=True)
    values = cluster.common_settings()
    for s in cluster.scms:
        for protocol, key in HALocalCluster.HADOOP_RPC_KEYS.items():
            assert values[f"{key}.{SERVICE_ID}.{s.node_id}"] == str(cluster.hadoop_port(s.node_id, protocol))
    assert len({a for p in HALocalCluster.HADOOP_RPC_KEYS for a in cluster.hadoop_addresses(p)}) == 12
    mixed = hadoop_rpc_datanodes(cluster, 5)
    assert mixed == {"hadoop_rpc_addresses": cluster.hadoop_addresses("datanode"), "hadoop_rpc_datanodes": 2}
    lines = describe_transports(cluster, {"grpc": ["dn-0"], "hadoop-rpc": ["dn-1"]})
    assert lines[0].startswith("gRPC (our datanode protocol): dn-0 -> " + cluster.datanode_addresses[0])
    assert lines[1].startswith("Hadoop RPC (Ozone's StorageContainerDatanodeProtocol): dn-1 -> " +
                               cluster.hadoop_addresses("datanode")[0])
    plain = HALocalCluster(Path(str(tmp_path)) / "plain", 3)
    assert hadoop_rpc_datanodes(plain, 5) == {}
    # every SCM serves Hadoop RPC on Ozone's keys (ports of its own, never the defaults), gRPC on ours
    settings = plain.common_settings()
    assert not any("hadoop-rpc" in k for k in settings)
    for s in plain.scms:
        assert settings[f"ozone.scm.client.port.{SERVICE_ID}.{s.node_id}"] == str(s.hadoop_ports["client"])
        assert settings[f"ozone.scm.client.grpc.port.{SERVICE_ID}.{s.node_id}"] == str(s.client_port)
    refusal = r"serves Kerberos-authenticated callers only: set hadoop\.security\.authentication=kerberos"
    with pytest.raises(ValueError, match=refusal):
        HALocalCluster(Path(str(tmp_path)) / "secure", 3, hadoop_rpc=True, secure=True)


KERBEROS = {
    "hadoop.security.authentication": "kerberos",
    "hdds.scm.kerberos.principal": "scm/_HOST@EXAMPLE.COM",
    "hdds.scm.kerberos.keytab.file": "/etc/security/keytabs/scm.keytab",
}


def test_secure_hadoop_rpc_needs_kerberos_and_names_each_missing_key() -> None:
    from scm_server.conf.security import secure_hadoop_rpc_problem

    assert secure_hadoop_rpc_problem({}) is None  # insecure: SIMPLE is fine
    assert secure_hadoop_rpc_problem({"ozone.security.enabled": "true", **KERBEROS}) is None
    nothing = secure_hadoop_rpc_problem({"ozone.security.enabled": "true"})
    assert nothing is not None and "\n" not in nothing
    for key in KERBEROS:
        assert key in nothing, nothing
    for left_out in KERBEROS:
        problem = secure_hadoop_rpc_problem(
            {"ozone.security.enabled": "true", **{k: v for k, v in KERBEROS.items() if k != left_out}})
        assert problem is not None and left_out in problem, (left_out, problem)
        assert [k for k in KERBEROS if k in problem] == [left_out], problem
    simple = secure_hadoop_rpc_problem({"ozone.security.enabled": "true", **KERBEROS,
                                        "hadoop.security.authentication": "simple"})
    assert simple is not None and "hadoop.security.authentication=kerberos" in simple


def test_a_secure_ring_serves_hadoop_rpc_with_kerberos_and_keeps_the_simulator_on_grpc(tmp_path: object) -> None:
    from pathlib import Path

    from scm_server.local.quorum import HALocalCluster, hadoop_rpc_datanodes

    cluster = HALocalCluster(Path(str(tmp_path)) / "kerberized", 3, hadoop_rpc=True, secure=True, settings=KERBEROS)
    assert cluster.hadoop_rpc
    assert cluster.settings["hadoop.security.authentication"] == "kerberos"
    # the simulated datanodes speak SIMPLE only: on a secure ring none of them uses Hadoop RPC
    assert hadoop_rpc_datanodes(cluster, 5) == {}


def test_local_up_refuses_secure_hadoop_rpc_without_kerberos_before_starting_anything(tmp_path: object) -> None:
    from pathlib import Path

    from click.testing import CliRunner

    from scm_server.cli.main import cli

    data_dir = Path(str(tmp_path)) / "never-made"
    result = CliRunner().invoke(cli, ["local", "up", "--secure", "--hadoop-rpc", "--data-dir", str(data_dir),
                                      "--set", "hadoop.security.authentication=kerberos"])
    assert result.exit_code == 2, result.output
    assert "hdds.scm.kerberos.principal" in result.output and "hdds.scm.kerberos.keytab.file" in result.output
    assert "hadoop.security.authentication=kerberos" not in result.output.split("set ", 1)[1]
    assert not data_dir.exists()
    bad = CliRunner().invoke(cli, ["local", "up", "--secure", "--hadoop-rpc", "--data-dir", str(data_dir),
                                   "--set", "no-equals-sign"])
    assert bad.exit_code == 2 and "is not KEY=VALUE" in bad.output, bad.output


def test_ozone_keys_serve_hadoop_rpc_and_secure_mode_serves_all_four_only_with_kerberos() -> None:
    from scm_server.server.endpoints import Protocol as P
    from scm_server.server.hadoop_rpc.settings import hadoop_rpc_listeners

    assert [p.port_key for p in (P.CLIENT_HADOOP, P.DATANODE_HADOOP, P.BLOCK_HADOOP, P.SECURITY_HADOOP)] == [
        "ozone.scm.client.port", "ozone.scm.datanode.port", "ozone.scm.block.client.port",
        "ozone.scm.security.service.port"]
    assert [p.default_port for p in (P.CLIENT_HADOOP, P.DATANODE_HADOOP, P.BLOCK_HADOOP, P.SECURITY_HADOOP)] == [
        9860, 9861, 9863, 9961]
    assert [(p.port_key, p.default_port) for p in (P.CLIENT, P.DATANODE, P.BLOCK, P.SECURITY)] == [
        ("ozone.scm.client.grpc.port", 19860), ("ozone.scm.datanode.grpc.port", 19861),
        ("ozone.scm.block.client.grpc.port", 19863), ("ozone.scm.security.service.grpc.port", 19961)]
    every = [P.BLOCK_HADOOP, P.DATANODE_HADOOP, P.CLIENT_HADOOP, P.SECURITY_HADOOP]
    assert hadoop_rpc_listeners(secure=False) == (every, None)
    served, left_out = hadoop_rpc_listeners(secure=True)
    assert served == [P.SECURITY_HADOOP]
    assert left_out is not None and "ozone.scm.client.port" in left_out and "ozone.scm.client.grpc.port" in left_out
    assert "hadoop.security.authentication" in left_out  # the line says how to serve them all
    # with Kerberos every caller is authenticated: all four listeners, as Ozone's secure SCM serves them
    assert hadoop_rpc_listeners(secure=True, kerberos=True) == (every, None)


class _Recorder:
    """A datanode client that answers like an SCM and keeps what it was sent."""

    def __init__(self) -> None:
        self.sent: list[object] = []

    async def get_version(self) -> scm_datanode_pb2.SCMVersionResponseProto:
        return scm_datanode_pb2.SCMVersionResponseProto(
            softwareVersion=1, keys=[hdds_pb2.KeyValue(key="clusterID", value="CID-1")])

    async def register(self, req: scm_datanode_pb2.SCMRegisterRequestProto) -> scm_datanode_pb2.SCMRegisteredResponseProto:
        self.sent.append(req)
        return scm_datanode_pb2.SCMRegisteredResponseProto(errorCode=scm_datanode_pb2.SCMRegisteredResponseProto.success)

    async def send_heartbeat(self, req: scm_datanode_pb2.SCMHeartbeatRequestProto) -> scm_datanode_pb2.SCMHeartbeatResponseProto:
        self.sent.append(req)
        return scm_datanode_pb2.SCMHeartbeatResponseProto(datanodeUUID=req.datanodeDetails.uuid)


@pytest.mark.parametrize("layout", [7, 10])
async def test_layout_version_is_reported_in_registration_and_heartbeats(layout: int) -> None:
    sim = DatanodeSimulator(["h:1"], 1, protocol="hadoop-rpc", layout_version=layout)
    dn = sim.datanodes[0]
    client = _Recorder()
    await dn._step(dn.endpoints[0], client)  # type: ignore[arg-type]  # version, then registration
    await dn._step(dn.endpoints[0], client)  # type: ignore[arg-type]  # a heartbeat
    register, beat = client.sent
    assert isinstance(register, scm_datanode_pb2.SCMRegisterRequestProto) and register.clusterID == "CID-1"
    for req in (register, beat):
        got = req.dataNodeLayoutVersion  # type: ignore[attr-defined]
        # the metadata layout the data starts at, the software layout of the release (Ozone 2.2.0's: 10)
        assert (got.metadataLayoutVersion, got.softwareLayoutVersion) == (layout, 10)
    # the Ratis metadata volume is reported either way, as a real datanode does
    assert register.nodeReport.metadataStorageReport[0].remaining > 1 << 30
