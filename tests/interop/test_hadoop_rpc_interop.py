"""The lighter interop tier (issue 20): Hadoop's own IPC client (RPC.getProxy + ProtobufRpcEngine2, from the
Hadoop client jars inside PySpark) against a real 3-SCM quorum of ours serving ScmBlockLocationProtocol over
Hadoop RPC. The Java side is built from the project's protos at test time (scripts/build_interop_java.sh,
into the git-ignored .interop-build/). Run by ``make interop-test``.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from scm_server import hadoop_ipc as codec
from scm_server.client.hadoop_rpc import HadoopRpcConnection
from scm_server.client.scm_client import SCMClient
from scm_server.datanode_sim import DatanodeSimulator
from scm_server.hdds_layout import SOFTWARE_LAYOUT_VERSION
from scm_server.local.quorum import HALocalCluster
from scm_server.proto import hdds_pb2
from scm_server.proto.ozone import ScmServerDatanodeHeartbeatProtocol_pb2 as wire_dn
from scm_server.proto.ozone import ScmServerProtocol_pb2 as wire_block
from scm_server.proto.ozone import hdds_pb2 as wire
from scm_server.server.hadoop_rpc.block_translator import PROTOCOL, SERVER_NOT_LEADER
from scm_server.server.hadoop_rpc.datanode_translator import PROTOCOL as DN_PROTOCOL
from tests.integration.ha.harness import (
    CLIENT_CONFIG,
    TEST_SETTINGS,
    start_sim,
    wait_open_pipeline,
    wait_until,
)

pytestmark = [pytest.mark.interop, pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / ".interop-build"
MAX_FRAME = 1 << 20  # ipc.maximum.data.length on these SCMs (1 MiB: an oversized frame is cheap to send)
# The machine is shared: with the local cluster's 3 s stale interval a starved simulator thread made every
# datanode stale once (no pipeline, no allocation). Nothing here tests node health, so give it room.
SETTINGS = {
    **TEST_SETTINGS,
    "ipc.maximum.data.length": str(MAX_FRAME),
    "ozone.scm.stale.node.interval": "30s",
    "ozone.scm.dead.node.interval": "60s",
}


def build_java() -> str:
    """Build (or reuse) the Java client; its class path."""
    done = subprocess.run(["bash", str(ROOT / "scripts" / "build_interop_java.sh")], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"building the Java client failed:\n{done.stdout}\n{done.stderr}"
    return (BUILD / "classpath").read_text().strip()


def java(classpath: str, *args: str) -> list[str]:
    done = subprocess.run(["java", "-Xmx256m", "-cp", classpath, "ozonescm.interop.InteropClient", *args],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"InteropClient {' '.join(args)} failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    return done.stdout.splitlines()


class Quorum:
    def __init__(self, cluster: HALocalCluster, hadoop_ports: list[int], datanode_ports: list[int],
                 classpath: str, client_ports: list[int], security_ports: list[int]) -> None:
        self.cluster = cluster
        self.hadoop_ports = hadoop_ports
        self.datanode_ports = datanode_ports
        self.classpath = classpath
        self.client_ports = client_ports
        self.security_ports = security_ports

    def client_address(self, index: int) -> str:
        return f"127.0.0.1:{self.client_ports[index]}"

    def security_address(self, index: int) -> str:
        return f"127.0.0.1:{self.security_ports[index]}"

    def address(self, index: int) -> str:
        return f"127.0.0.1:{self.hadoop_ports[index]}"

    def datanode_address(self, index: int) -> str:
        return f"127.0.0.1:{self.datanode_ports[index]}"


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def quorum(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Quorum]:
    classpath = build_java()
    cluster = HALocalCluster(tmp_path_factory.mktemp("interop") / "c", 3, settings=SETTINGS)
    # Ozone's own port keys (ozone.scm.block.client.port, ...) name the Hadoop RPC ports: the harness gives every
    # SCM free ones in its ozone-site.xml, nothing opt-in
    ports = [s.hadoop_ports["block"] for s in cluster.scms]
    dn_ports = [s.hadoop_ports["datanode"] for s in cluster.scms]
    client_ports = [s.hadoop_ports["client"] for s in cluster.scms]
    security_ports = [s.hadoop_ports["security"] for s in cluster.scms]
    sim = None
    try:
        cluster.start_quorum()
        sim = await start_sim(cluster, 3)
        await cluster.wait_healthy_quorum(timeout=120)
        await wait_open_pipeline(cluster)
        yield Quorum(cluster, ports, dn_ports, classpath, client_ports, security_ports)
    finally:
        if sim is not None:
            await sim.stop()
        cluster.stop_all()


# ---- a raw Python Hadoop IPC client (for what Hadoop's client never sends) ----

def raw_call(address: str, request: Any, call_id: int = 1) -> codec.Response:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        client_id = os.urandom(16)
        s.sendall(codec.encode_preamble() + codec.encode_context(client_id, PROTOCOL)
                  + codec.encode_call(call_id, client_id, PROTOCOL, "send", request))
        return read_answers(s)[0]


def read_answers(s: socket.socket) -> list[codec.Response]:
    decoder = codec.ResponseDecoder()
    while True:
        data = s.recv(65536)
        if not data:
            raise ConnectionError("closed before an answer")
        answers = decoder.feed(data)
        if answers:
            return answers


def closes_after_fatal(address: str, payload: bytes) -> codec.Response:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(payload)
        (fatal,) = read_answers(s)
        assert s.recv(65536) == b"", "the connection stayed open after a FATAL answer"
        return fatal


def allocate_request() -> wire_block.SCMBlockLocationRequest:
    return wire_block.SCMBlockLocationRequest(
        cmdType=wire_block.AllocateScmBlock,
        allocateScmBlockRequest=wire_block.AllocateScmBlockRequestProto(
            size=1024, numBlocks=1, type=wire.RATIS, factor=wire.THREE, owner="raw"),
    )


def parse_ok(resp: codec.Response) -> wire_block.SCMBlockLocationResponse:
    assert resp.header.status == codec.Status.SUCCESS, resp.header
    out = wire_block.SCMBlockLocationResponse()
    out.ParseFromString(resp.body or b"")
    return out


# ---- the tests ----

async def test_every_supported_command_from_hadoops_client(quorum: Quorum) -> None:
    await wait_open_pipeline(quorum.cluster)
    leader = await quorum.cluster.wait_leader()
    lines = java(quorum.classpath, "calls", quorum.address(leader))
    facts = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in lines}
    status, cluster_id, _scm_id = facts["GetScmInfo"].split()
    assert status == "OK" and cluster_id.startswith("CID-")
    status, *ids = facts["AllocateScmBlock"].split()
    assert status == "OK" and len(ids) == 3 and len(set(ids)) == 3
    assert re.fullmatch(r"\S+ members 3 RATIS/THREE", facts["Pipeline"]), facts["Pipeline"]
    assert facts["DeleteScmKeyBlocks"] == "OK /vol/bucket/key1 success"
    status, _, reader, _, *hosts = facts["SortDatanodes"].split()
    assert status == "OK" and len(hosts) == 3 and hosts[0] == reader, facts["SortDatanodes"]
    # the tree holds every registered datanode as a leaf under its rack (counted both ways)
    m = re.fullmatch(r"OK success=true root='' level=1 leaves=(\d+) racks=(\d+) rackLeaves=(\d+)", facts["GetClusterTree"])
    assert m is not None, facts["GetClusterTree"]
    assert int(m.group(1)) == int(m.group(3)) >= 3 and int(m.group(2)) >= 1, facts["GetClusterTree"]
    once, retried = facts["Retry"].split(" | ")
    assert once == retried and len(once.split()) == 2, facts["Retry"]


async def test_every_location_command_from_hadoops_client(quorum: Quorum) -> None:
    """What `ozone admin` sends (StorageContainerLocationProtocol), from Hadoop's own client to the leader."""
    await wait_open_pipeline(quorum.cluster)
    leader = await quorum.cluster.wait_leader()
    lines = java(quorum.classpath, "location", quorum.client_address(leader))
    facts: dict[str, list[str]] = {}
    for line in lines:
        name, _, rest = line.partition(" ")
        facts.setdefault(name, []).append(rest)
    one = {k: v[0] for k, v in facts.items()}
    served = {"InSafeMode", "GetSafeModeRuleStatuses", "ForceExitSafeMode", "GetScmInfo", "QueryNode", "ListPipelines",
              "GetPipeline", "AllocateContainer", "GetContainer", "GetContainerWithPipeline", "GetContainerReplicas",
              "GetContainerWithPipelineBatch", "GetExistContainerWithPipelinesInBatch",
              "ListContainer", "GetContainerCount", "CloseContainer", "AllocatePipeline", "DeactivatePipeline",
              "ActivatePipeline", "ClosePipeline", "StopReplicationManager", "StartReplicationManager",
              "GetReplicationManagerStatus", "GetReplicationManagerReport", "DecommissionNodes",
              "StartMaintenanceNodes", "RecommissionNodes", "SingleNodeQuery", "GetContainerToken"}
    from scm_server.server.hadoop_rpc import conformance
    from scm_server.server.hadoop_rpc.location_translator import LocationTranslator
    from tests.unit.edges.fakes import FakeSCM

    # the served cmdTypes whose conformance rows say J are exactly those the Java client calls; the others are
    # checked by the unit tests and `make ozone-interop` (their rows say so)
    assert served <= set(LocationTranslator(FakeSCM(), {}.get, "x", "h").handlers)
    location = next(p for p in conformance.protocols() if p.key == "location")
    assert served == {name for name, note in location.notes.items() if "J" in note.checked.split(", ")}
    # every datanode of the ring may already be at its pipeline limit: then AllocatePipeline is refused by the
    # facade (the success path is checked in the unit tests) and the pipeline commands act on a RATIS/ONE one
    assert one["AllocatePipeline"].startswith(("OK success members=1", "ERROR org.apache.hadoop.hdds.scm.exceptions"
                                               ".SCMException FAILED_TO_FIND_SUITABLE_NODE")), one["AllocatePipeline"]
    assert all(facts[name][0].startswith("OK") for name in served - {"AllocatePipeline"}), lines
    assert one["InSafeMode"] == "OK inSafeMode=false" and one["GetSafeModeRuleStatuses"].startswith("OK rules=")
    assert re.fullmatch(r"OK CID-\S+ peers=3", one["GetScmInfo"]), one["GetScmInfo"]
    assert int(one["QueryNode"].split("healthy=")[1]) >= 3 and one["SingleNodeQuery"] == "OK same=true"
    assert one["ListPipelines"].endswith("open3=true") and one["GetPipeline"] == "OK same=true members=3"
    m = re.fullmatch(r"OK success id=(\d+) state=OPEN owner=java-admin members=3", one["AllocateContainer"])
    assert m is not None, one["AllocateContainer"]
    cid = m.group(1)
    assert facts["GetContainer"][0] == f"OK id={cid}"
    assert one["GetContainerWithPipeline"] == f"OK id={cid} members=3"
    assert one["GetContainerWithPipelineBatch"] == f"OK n=1 id={cid}"
    assert one["GetExistContainerWithPipelinesInBatch"] == "OK n=1"  # the unknown id left out
    assert one["ListContainer"].startswith("OK listed=true") and one["GetContainerCount"].startswith("OK count=")
    assert one["CloseContainer"] == "OK OK"
    assert one["GetReplicationManagerStatus"] == "OK afterStop=false afterStart=true"
    assert one["DecommissionNodes"] == "OK failed=no-such-dn.example"
    assert one["StartMaintenanceNodes"] == "OK failed=1" and one["RecommissionNodes"] == "OK failed=1"
    assert one["GetContainerToken"] == "OK kind= identifier=0"  # tokens off: Ozone's empty token
    refused = one["TransferLeadership"]  # to a member the ring does not have
    assert refused.startswith("ERROR org.apache.hadoop.hdds.scm.exceptions.SCMException INVALID_REQUEST"), refused
    assert "scm-x" in refused, refused
    assert facts["GetContainer"][1].startswith("ERROR org.apache.hadoop.hdds.scm.exceptions.SCMException CONTAINER_NOT_FOUND")
    # a follower refers the client to the leader's Hadoop RPC client port (what Ozone's failover proxy matches)
    follower = (leader + 1) % 3
    follower_lines = java(quorum.classpath, "location", quorum.client_address(follower))
    pipelines = next(line for line in follower_lines if line.startswith("ListPipelines "))
    assert f"{SERVER_NOT_LEADER} " in pipelines and f"Suggested leader is Server:{quorum.client_address(leader)}." in pipelines
    assert next(line for line in follower_lines if line.startswith("InSafeMode ")).startswith("InSafeMode OK")


async def test_security_protocol_from_hadoops_client(quorum: Quorum) -> None:
    """SCMSecurityProtocol over Hadoop RPC on an SCM without security: every read says there is no CA, issuance is
    refused because SIMPLE authentication authenticates nobody, the CRL calls are unsupported as in Ozone."""
    facts = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in java(
        quorum.classpath, "security", quorum.security_address(1))}
    for read in ("GetCACertificate", "GetRootCACertificate", "GetAllRootCaCertificates", "ListCACertificate",
                 "GetCertificate", "ListCertificate"):
        assert facts[read].startswith(f"INTERNAL_ERROR success=false trace=j-{read} {read}: ozone.security.enabled is false")
    issue = facts["GetDataNodeCertificate"]
    assert issue.startswith("UNABLE_TO_ISSUE_CERTIFICATE success=false") and "SIMPLE" in issue, issue
    assert facts["GetCrls"].startswith("INTERNAL_ERROR success=false") and "Unsupported" in facts["GetCrls"]


async def test_follower_answers_server_not_leader_with_the_leaders_address(quorum: Quorum) -> None:
    leader = await quorum.cluster.wait_leader()
    follower = (leader + 1) % 3
    resp = raw_call(quorum.address(follower), allocate_request())
    assert resp.header.status == codec.Status.ERROR
    assert resp.header.exceptionClassName == SERVER_NOT_LEADER
    assert resp.header.errorMsg.endswith(f"is not the leader. Suggested leader is Server:{quorum.address(leader)}.")


async def test_garbage_and_oversized_frames_are_fatal_and_the_scm_serves_on(quorum: Quorum) -> None:
    await wait_open_pipeline(quorum.cluster)
    leader = await quorum.cluster.wait_leader()
    address = quorum.address(leader)
    fatal = closes_after_fatal(address, b"\x00\x01\x02 this is no Hadoop IPC \xff\xfe")
    assert fatal.header.status == codec.Status.FATAL and "preamble" in fatal.header.errorMsg
    client_id = os.urandom(16)
    opening = codec.encode_preamble() + codec.encode_context(client_id, PROTOCOL)
    fatal = closes_after_fatal(address, opening + struct.pack(">i", MAX_FRAME + 1))
    assert fatal.header.errorDetail == codec.ErrorCode.FATAL_INVALID_RPC_HEADER
    assert "ipc.maximum.data.length" in fatal.header.errorMsg
    garbage_frame = b"\x05\xff\xff\xff\xff\xff"
    fatal = closes_after_fatal(address, opening + struct.pack(">i", len(garbage_frame)) + garbage_frame)
    assert fatal.header.status == codec.Status.FATAL
    fatal = closes_after_fatal(address, codec.encode_preamble(auth_protocol=codec.AUTH_SASL))
    assert "SIMPLE authentication only" in fatal.header.errorMsg
    assert quorum.cluster.is_running(leader)
    assert parse_ok(raw_call(address, allocate_request())).success
    assert java(quorum.classpath, "calls", address)[0].startswith("GetScmInfo OK")


async def test_a_datanode_registers_and_heartbeats_over_hadoop_rpc_on_every_scm(quorum: Quorum) -> None:
    """A datanode speaking Ozone's StorageContainerDatanodeProtocol (Python client over our codec: the Java
    datanode tier is the next step) to every SCM of the ring; the leader's admin view then lists it."""
    cluster = quorum.cluster
    dn_uuid = uuid.uuid4()
    u128 = wire.UUID(mostSigBits=_signed(dn_uuid.int >> 64), leastSigBits=_signed(dn_uuid.int & ((1 << 64) - 1)))
    details = wire.DatanodeDetailsProto(
        uuid=str(dn_uuid), uuid128=u128, ipAddress="127.0.0.1", hostName="hrpc-dn-1",
        ports=[wire.Port(name="RATIS", value=1), wire.Port(name="STANDALONE", value=2)],
    )
    node_report = wire_dn.NodeReportProto(storageReport=[wire_dn.StorageReportProto(
        storageUuid="disk-1", storageLocation="/data/hrpc-dn-1", capacity=1 << 40, scmUsed=0, remaining=1 << 40)])
    terms = set()
    for i in range(3):
        conn = HadoopRpcConnection(quorum.datanode_address(i), DN_PROTOCOL)
        await conn.connect()
        try:
            version = wire_dn.SCMDatanodeResponse.FromString(await conn.call("submitRequest", wire_dn.SCMDatanodeRequest(
                cmdType=wire_dn.GetVersion, getVersionRequest=wire_dn.SCMVersionRequestProto()), call_id=0))
            keys = {kv.key: kv.value for kv in version.getVersionResponse.keys}
            assert keys["clusterID"].startswith("CID-")
            registered = wire_dn.SCMDatanodeResponse.FromString(await conn.call("submitRequest", wire_dn.SCMDatanodeRequest(
                cmdType=wire_dn.Register, registerRequest=wire_dn.SCMRegisterRequestProto(
                    extendedDatanodeDetails=wire.ExtendedDatanodeDetailsProto(datanodeDetails=details),
                    nodeReport=node_report, containerReport=wire_dn.ContainerReportsProto(),
                    pipelineReports=wire_dn.PipelineReportsProto())), call_id=1))
            assert registered.registerResponse.errorCode == wire_dn.SCMRegisteredResponseProto.success
            assert registered.registerResponse.clusterID == keys["clusterID"]
            beat = wire_dn.SCMDatanodeResponse.FromString(await conn.call("submitRequest", wire_dn.SCMDatanodeRequest(
                cmdType=wire_dn.SendHeartbeat, sendHeartbeatRequest=wire_dn.SCMHeartbeatRequestProto(
                    datanodeDetails=details, nodeReport=node_report)), call_id=2))
            assert beat.sendHeartbeatResponse.datanodeUUID == str(dn_uuid)
            if beat.sendHeartbeatResponse.HasField("term"):
                terms.add(beat.sendHeartbeatResponse.term)
        finally:
            await conn.close()
    assert len(terms) == 1, f"exactly the leader stamps its term on heartbeat answers: {terms}"
    async with SCMClient(cluster.client_addresses, CLIENT_CONFIG) as admin:
        nodes = {n.nodeID.uuid: n for n in await admin.query_nodes()}
    assert str(dn_uuid) in nodes and nodes[str(dn_uuid)].nodeID.hostName == "hrpc-dn-1"


async def test_hadoops_client_as_a_datanode_gets_commands_with_the_term(quorum: Quorum) -> None:
    """Hadoop's client calling the datanode protocol as a datanode does: an unknown datanode's heartbeat is
    answered with a reregister command, then GetVersion, a registration at a foreign software layout version refused
    as Ozone's SCM refuses it, Register at the SCM's layout and a heartbeat stamped with the term."""
    leader = await quorum.cluster.wait_leader()
    dn = str(uuid.uuid4())
    facts = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in java(
        quorum.classpath, "datanode", dn, quorum.datanode_address(leader), str(SOFTWARE_LAYOUT_VERSION))}
    assert facts["EarlyHeartbeat"] == "OK reregisterCommand", facts
    status, cluster_id = facts["GetVersion"].split()
    assert status == "OK" and cluster_id.startswith("CID-")
    assert facts["RegisterForeignLayout"] == f"OK errorNodeNotPermitted {cluster_id}"
    assert facts["Register"] == f"OK success {cluster_id}"
    m = re.fullmatch(rf"OK {dn} term=(\d+) commands=\[.*\]", facts["Heartbeat"])
    assert m is not None and int(m.group(1)) >= 1, facts["Heartbeat"]


async def test_simulated_datanodes_over_hadoop_rpc_run_pipelines(quorum: Quorum) -> None:
    """``datanode-sim --protocol hadoop-rpc``: three simulated datanodes speak Ozone's datanode protocol over Hadoop
    RPC to every SCM; the leader creates pipelines on them (createPipelineCommand in a heartbeat answer, converted
    to Ozone's form and back) and each of them ends up in an OPEN one, from their own pipeline reports."""
    cluster = quorum.cluster
    sim = DatanodeSimulator([quorum.datanode_address(i) for i in range(3)], 3, heartbeat_interval=0.3, racks=1,
                            admin_addresses=cluster.client_addresses, name_prefix="hrpc-sim", protocol="hadoop-rpc")
    await sim.start()
    try:
        ours = {dn.uuid for dn in sim.datanodes}

        async def each_in_an_open_pipeline() -> bool:
            async with SCMClient(cluster.client_addresses, CLIENT_CONFIG) as admin:
                in_open = {m.uuid for p in await admin.list_pipelines() if p.state == hdds_pb2.PIPELINE_OPEN
                           for m in p.members}
            return ours <= in_open

        await wait_until(each_in_an_open_pipeline, 90, "every Hadoop RPC datanode in an OPEN pipeline")
        assert sim.registered() == 3
    finally:
        await sim.stop()


async def test_allocations_follow_hints_across_a_leader_kill_without_duplicates(quorum: Quorum) -> None:
    cluster = quorum.cluster
    await wait_open_pipeline(cluster)
    leader = await cluster.wait_leader()
    start = (leader + 1) % 3  # begin at a follower: the first call is answered with a hint
    order = [start, (start + 1) % 3, (start + 2) % 3]
    total = 300
    proc = subprocess.Popen(
        ["java", "-Xmx256m", "-cp", quorum.classpath, "ozonescm.interop.InteropClient", "allocate", str(total),
         ",".join(quorum.address(i) for i in order)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    lines: list[str] = []
    blocks = threading.Event()

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if sum(x.startswith("BLOCK ") for x in lines) >= 80:
                blocks.set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        assert blocks.wait(120), f"fewer than 80 blocks in 120 s: {lines[-20:]}"
        killed_at = len(lines)
        cluster.kill(leader, signal.SIGKILL)
        t0 = time.monotonic()
        assert proc.wait(timeout=180) == 0, (proc.stderr.read() if proc.stderr else "")[-4000:]
        thread.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    elapsed = time.monotonic() - t0
    ids = [line.split()[2] for line in lines if line.startswith("BLOCK ")]
    assert not [line for line in lines if line.startswith("DUPLICATE")]
    assert len(ids) == total and len(set(ids)) == total, "a block ID was handed out twice"
    assert lines[-1].startswith(f"DONE {total} unique {total}")
    assert any(line.startswith("HINT ") for line in lines[:killed_at]), "the follower gave no leader hint"
    after = [line for line in lines[killed_at:] if line.startswith("BLOCK ")]
    assert after, "no allocation after the leader was killed"
    assert not any(line.split()[1] == quorum.address(leader) for line in after[5:]), "blocks from the killed SCM?"
    print(f"\n{total} blocks, {len(after)} after the SIGKILL of {cluster.scms[leader].node_id} "
          f"({elapsed:.1f}s); failover lines: {[x for x in lines[killed_at:] if not x.startswith('BLOCK')][:8]}")


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


async def test_a_leader_not_ready_yet_is_retried_in_place_by_hadoops_client() -> None:
    """Ozone's SCM answers a leader that is not ready yet (elected, own term's first entry not applied) with
    RetriableWithNoFailoverException wrapping Ratis's LeaderNotReadyException, and Ozone's failover proxy retries
    that SCM instead of failing over. Hadoop's own client against our block translator, the SCM's readiness held
    back for its first calls: the same SCM answers once ready, no failover, one block."""
    import asyncio

    from scm_server.server.hadoop_rpc.block_translator import BlockLocationTranslator
    from scm_server.server.hadoop_rpc.server import HadoopRpcServer
    from tests.unit.edges.fakes import FakeSCM

    classpath = await asyncio.to_thread(build_java)
    scm = FakeSCM()
    scm.not_ready_for = 3
    follower = FakeSCM(leader=False, leader_id="")
    servers = [HadoopRpcServer([BlockLocationTranslator(f, {}.get, "scm-1-id", "127.0.0.1")]) for f in (scm, follower)]
    try:
        ready_port, other_port = [await s.start("127.0.0.1", 0) for s in servers]
        lines = await asyncio.to_thread(java, classpath, "allocate", "1",
                                        f"127.0.0.1:{ready_port},127.0.0.1:{other_port}")
    finally:
        for s in servers:
            await s.stop()
    not_ready = [line for line in lines if line.startswith("NOTREADY ")]
    assert len(not_ready) == 3, lines
    assert all(line.startswith(f"NOTREADY 127.0.0.1:{ready_port} org.apache.ratis.protocol.exceptions."
                               "LeaderNotReadyException: scm-1-id is in LEADER state but not ready yet.")
               for line in not_ready), lines
    assert lines[-1] == "DONE 1 unique 1 failovers 0", lines
    assert follower.calls == []  # never failed over to the other SCM
