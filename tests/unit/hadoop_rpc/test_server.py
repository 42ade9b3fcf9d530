"""The asyncio Hadoop RPC edge and the block translator, over real loopback sockets, with a fake facade."""

from __future__ import annotations

import asyncio
import os
import struct
from typing import Any

import pytest

from scm_server import hadoop_ipc as codec
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.hadoop_ipc import ErrorCode
from scm_server.proto import hdds_pb2
from scm_server.proto.ozone import ScmServerProtocol_pb2 as wire_block
from scm_server.proto.ozone import hdds_pb2 as wire
from scm_server.protocols import BlockAllocation
from scm_server.server.hadoop_rpc.block_translator import PROTOCOL, SERVER_NOT_LEADER, BlockLocationTranslator
from scm_server.server.hadoop_rpc.server import HadoopRpcServer
from tests.unit.edges.fakes import FakeSCM

CONF = {
    "ozone.scm.service.ids": "cluster1",
    "ozone.scm.nodes.cluster1": "scm1,scm2",
    "ozone.scm.address.cluster1.scm1": "127.0.0.1",
    "ozone.scm.address.cluster1.scm2": "scm2.example",
    "ozone.scm.block.client.port.cluster1.scm2": "29863",
}


class Client:
    """A minimal Hadoop IPC client over the codec (one connection)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.client_id = os.urandom(16)
        self.decoder = codec.ResponseDecoder()
        self.pending: list[codec.Response] = []

    @classmethod
    async def connect(cls, port: int, protocol: str = PROTOCOL) -> Client:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        writer.write(codec.encode_preamble() + codec.encode_context(client.client_id, protocol, "om"))
        return client

    def send(self, call_id: int, request: Any, *, protocol: str = PROTOCOL, method: str = "send",
             version: int = 1, retry: int = -1) -> None:
        self.writer.write(codec.encode_call(call_id, self.client_id, protocol, method, request,
                                            version=version, retry_count=retry))

    async def receive(self) -> codec.Response:
        while not self.pending:
            data = await asyncio.wait_for(self.reader.read(65536), 10)
            if not data:
                raise ConnectionError("server closed the connection")
            self.pending += self.decoder.feed(data)
        return self.pending.pop(0)

    async def closed_by_server(self) -> bool:
        return await asyncio.wait_for(self.reader.read(65536), 10) == b""

    async def call(self, call_id: int, request: Any, **kw: Any) -> codec.Response:
        self.send(call_id, request, **kw)
        return await self.receive()

    def close(self) -> None:
        self.writer.close()


def block_request(cmd: str, **fields: Any) -> wire_block.SCMBlockLocationRequest:
    return wire_block.SCMBlockLocationRequest(cmdType=wire_block.Type.Value(cmd), traceID="t-1", **fields)


def block_response(resp: codec.Response) -> wire_block.SCMBlockLocationResponse:
    assert resp.header.status == codec.Status.SUCCESS, resp.header
    assert resp.body is not None
    out = wire_block.SCMBlockLocationResponse()
    out.ParseFromString(resp.body)
    return out


def allocate(num: int = 1, size: int = 1024) -> wire_block.SCMBlockLocationRequest:
    return block_request(
        "AllocateScmBlock",
        allocateScmBlockRequest=wire_block.AllocateScmBlockRequestProto(
            size=size, numBlocks=num, type=wire.RATIS, factor=wire.THREE, owner="om1"
        ),
    )


class SlowSCM(FakeSCM):
    """AllocateScmBlock (async in the facade too: it may wait on Raft) waits for a gate, so a later call can
    overtake it."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def allocate_block(
        self,
        size: int,
        num_blocks: int,
        replication_type: int,
        replication_factor: int,
        owner: str,
        exclude_list: hdds_pb2.ExcludeListProto | None = None,
        *,
        ec: hdds_pb2.ECReplicationConfig | None = None,
    ) -> list[BlockAllocation]:
        await self.gate.wait()
        return await super().allocate_block(size, num_blocks, replication_type, replication_factor, owner,
                                            exclude_list)


@pytest.fixture
async def served() -> Any:
    servers: list[HadoopRpcServer] = []

    async def start(scm: Any, **kw: Any) -> tuple[HadoopRpcServer, int]:
        translator = BlockLocationTranslator(scm, CONF.get, "scm-1-id", "scm1.example")
        server = HadoopRpcServer([translator], **kw)
        port = await server.start("127.0.0.1", 0)
        servers.append(server)
        return server, port

    yield start
    for s in servers:
        await s.stop()


async def test_every_supported_command(served: Any) -> None:
    scm = FakeSCM()
    _, port = await served(scm)
    c = await Client.connect(port)
    info = block_response(await c.call(1, block_request("GetScmInfo", getScmInfoRequest=wire.GetScmInfoRequestProto())))
    assert info.success and info.status == wire_block.OK and info.traceID == "t-1"
    assert (info.getScmInfoResponse.clusterId, info.getScmInfoResponse.scmId) == ("CID-x", "scm-x")

    blocks = block_response(await c.call(2, allocate(num=3))).allocateScmBlockResponse.blocks
    assert [b.containerBlockID.localID for b in blocks] == [1, 2, 3]
    assert blocks[0].pipeline.id.id == "p1"

    delete = block_request(
        "DeleteScmKeyBlocks",
        deleteScmKeyBlocksRequest=wire_block.DeleteScmKeyBlocksRequestProto(keyBlocks=[
            wire_block.KeyBlocks(key="/v/b/k", blocks=[wire.BlockID(containerBlockID=wire.ContainerBlockID(
                containerID=1, localID=1))])
        ]),
    )
    deleted = block_response(await c.call(3, delete))
    assert deleted.success
    (result,) = deleted.deleteScmKeyBlocksResponse.results
    assert result.objectKey == "/v/b/k"
    assert result.blockResults[0].result == wire_block.DeleteScmBlockResult.success
    assert result.blockResults[0].blockID.containerBlockID.localID == 1
    c.close()


@pytest.mark.parametrize("cmd", ["SortDatanodes"])
async def test_unsupported_command_names_itself(served: Any, cmd: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cmdType of Ozone 2.2.0's block protocol is served; a translator without a handler for one (as a
    newer Ozone's cmdType would be) answers UNSUPPORTED_OPERATION naming it."""
    handlers = BlockLocationTranslator._handlers
    monkeypatch.setattr(BlockLocationTranslator, "_handlers",
                        lambda self: {k: v for k, v in handlers(self).items() if k != cmd})
    _, port = await served(FakeSCM())
    c = await Client.connect(port)
    resp = block_response(await c.call(1, block_request(cmd)))
    assert not resp.success and resp.status == wire_block.UNSUPPORTED_OPERATION
    assert cmd in resp.message and "AllocateScmBlock" in resp.message
    assert block_response(await c.call(2, allocate())).success  # the connection serves on
    c.close()


async def test_get_cluster_tree_reads_back_as_ozone_builds_it(served: Any) -> None:
    scm = FakeSCM()
    scm.nodes = [hdds_pb2.Node(nodeID=d) for d in (_dn("u2", "dn2", "/r2"), _dn("u1", "dn1", "/r1"),
                                                   _dn("u3", "dn3", ""), _dn("u4", "dn4", "/dc1/r9"))]
    _, port = await served(scm)
    c = await Client.connect(port)
    resp = block_response(await c.call(1, block_request("GetClusterTree")))
    assert resp.success and resp.status == wire_block.OK
    root = resp.getClusterTreeResponse.clusterTree
    topo = root.nodeTopology
    assert (topo.name, topo.location, topo.level, topo.cost, root.numOfLeaves) == ("", "", 1, 1, 4)
    children = {c.networkName: c.networkNode for c in root.childrenMap}
    assert list(children) == ["dc1", "default-rack", "r1", "r2"]
    r1 = children["r1"].innerNode
    assert (r1.nodeTopology.name, r1.nodeTopology.location, r1.nodeTopology.level, r1.nodeTopology.cost) == (
        "r1", "/", 2, 1)
    assert r1.numOfLeaves == 1 and r1.childrenMap[0].networkName == "u1"
    assert r1.childrenMap[0].networkNode.datanodeDetails.hostName == "dn1"
    default = children["default-rack"].innerNode
    assert default.childrenMap[0].networkNode.datanodeDetails.networkLocation == "/default-rack"
    dc1 = children["dc1"].innerNode
    r9 = dc1.childrenMap[0].networkNode.innerNode
    assert dc1.numOfLeaves == 1 and (r9.nodeTopology.name, r9.nodeTopology.location, r9.nodeTopology.level) == (
        "r9", "/dc1", 3)
    c.close()


def _dn(uuid: str, host: str, rack: str) -> Any:
    from scm_server.proto import hdds_pb2 as ours

    return ours.DatanodeDetailsProto(uuid=uuid, ipAddress=f"10.0.0.{uuid[-1]}", hostName=host, networkLocation=rack)


def test_sort_by_distance_orders_node_rack_then_other_racks() -> None:
    from scm_server.server.hadoop_rpc.convert import sort_by_distance

    known = [_dn("u1", "dn1", "/r1"), _dn("u2", "dn2", "/r2"), _dn("u3", "dn3", "/r1"), _dn("u4", "dn4", "/r2")]
    sort = lambda wanted, client: [d.uuid for d in sort_by_distance(known, wanted, client)]  # noqa: E731
    assert sort(["u2", "u4", "u3", "u1"], "dn1") == ["u1", "u3", "u2", "u4"]  # self, same rack, others (stable)
    assert sort(["u2", "u4", "u3", "u1"], "10.0.0.4") == ["u4", "u2", "u3", "u1"]  # by address too
    assert sort(["u3", "nope", "u1"], "om.example") == ["u3", "u1"]  # not a datanode: as asked; unknown dropped
    assert sort([], "dn1") == []


async def test_sort_datanodes_over_the_wire(served: Any) -> None:
    from scm_server.proto import hdds_pb2 as ours

    scm = FakeSCM()
    scm.nodes = [
        ours.Node(nodeID=_dn("11111111-1111-1111-1111-111111111111", "dn1", "/r1")),
        ours.Node(nodeID=_dn("22222222-2222-2222-2222-222222222222", "dn2", "/r2")),
    ]
    _, port = await served(scm)
    c = await Client.connect(port)
    req = block_request("SortDatanodes", sortDatanodesRequest=wire_block.SortDatanodesRequestProto(
        client="dn2", nodeNetworkName=["11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"]))
    resp = block_response(await c.call(1, req))
    assert resp.success
    assert [n.hostName for n in resp.sortDatanodesResponse.node] == ["dn2", "dn1"]
    first = resp.sortDatanodesResponse.node[0]
    assert first.uuid128.mostSigBits == 0x2222222222222222 and first.networkLocation == "/r2"


async def test_scm_exception_is_a_failed_response_with_ozone_status(served: Any) -> None:
    _, port = await served(FakeSCM())
    c = await Client.connect(port)
    resp = block_response(await c.call(1, allocate(size=0)))
    assert not resp.success and resp.status == wire_block.INVALID_BLOCK_SIZE and "block size 0" in resp.message


class SafeModeSCM(FakeSCM):
    async def allocate_block(
        self,
        size: int,
        num_blocks: int,
        replication_type: int,
        replication_factor: int,
        owner: str,
        exclude_list: hdds_pb2.ExcludeListProto | None = None,
        *,
        ec: hdds_pb2.ECReplicationConfig | None = None,
    ) -> list[BlockAllocation]:
        raise SCMException(ResultCodes.SAFE_MODE_EXCEPTION, "SCM is in safe mode; block allocation is not allowed")


async def test_safemode_answers_safe_mode_exception(served: Any) -> None:
    scm = SafeModeSCM()
    _, port = await served(scm)
    c = await Client.connect(port)
    resp = block_response(await c.call(1, allocate()))
    assert not resp.success and resp.status == wire_block.SAFE_MODE_EXCEPTION == 9


async def test_follower_answers_server_not_leader_with_ozone_hint(served: Any) -> None:
    _, port = await served(FakeSCM(leader=False, leader_id="scm2"))
    c = await Client.connect(port)
    resp = await c.call(1, allocate())
    assert resp.header.status == codec.Status.ERROR
    assert resp.header.exceptionClassName == SERVER_NOT_LEADER
    assert resp.header.errorMsg == (
        "SCM Server:scm-1-id(scm1.example) is not the leader. Suggested leader is Server:scm2.example:29863."
    )
    # GetScmInfo is answered by any SCM (the call rules of the gRPC path)
    assert block_response(await c.call(2, block_request("GetScmInfo"))).success


async def test_follower_without_known_leader(served: Any) -> None:
    scm = FakeSCM(leader=False, leader_id="")
    _, port = await served(scm)
    c = await Client.connect(port)
    resp = await c.call(1, allocate())
    assert resp.header.exceptionClassName == SERVER_NOT_LEADER
    assert resp.header.errorMsg.endswith("is not the leader. Could not determine the leader node.")


async def test_retry_with_same_client_and_call_id_gets_the_first_blocks(served: Any) -> None:
    scm = FakeSCM()
    _, port = await served(scm)
    c = await Client.connect(port)
    first = block_response(await c.call(7, allocate(num=2)))
    again = block_response(await c.call(7, allocate(num=2), retry=1))
    other = block_response(await c.call(8, allocate(num=2)))
    ids = lambda r: [b.containerBlockID.localID for b in r.allocateScmBlockResponse.blocks]  # noqa: E731
    assert ids(first) == ids(again) == [1, 2] and ids(other) == [3, 4]
    assert scm.calls.count("allocate_block") == 2
    # another client (another connection, another client id) with the same call id is another call
    d = await Client.connect(port)
    assert ids(block_response(await d.call(7, allocate(num=2)))) == [5, 6]


async def test_a_retried_large_allocation_gets_the_same_bytes_from_a_compact_cache_entry(served: Any) -> None:
    """A 100-block answer is kept as its ids and its pipelines' bytes (not compressed) and written again on a
    retry: byte for byte the first answer, and smaller in the cache than the answer."""
    import uuid

    from scm_server.server.hadoop_rpc.block_translator import KeptAllocation

    pipelines = [hdds_pb2.Pipeline(
        id=hdds_pb2.PipelineID(id=str(uuid.uuid4())), state=hdds_pb2.PIPELINE_OPEN, type=hdds_pb2.RATIS,
        factor=hdds_pb2.THREE, members=[hdds_pb2.DatanodeDetailsProto(
            uuid=str(uuid.uuid4()), ipAddress="10.0.0.1", hostName=f"dn{i}",
            ports=[hdds_pb2.Port(name="RATIS", value=9858)]) for i in range(3)],
    ) for _ in range(2)]
    asked: list[int] = []

    class RoundRobinSCM(FakeSCM):
        async def allocate_block(
            self,
            size: int,
            num_blocks: int,
            replication_type: int,
            replication_factor: int,
            owner: str,
            exclude_list: hdds_pb2.ExcludeListProto | None = None,
            *,
            ec: hdds_pb2.ECReplicationConfig | None = None,
        ) -> list[BlockAllocation]:
            asked.append(num_blocks)
            return [BlockAllocation(1 + n // 20, 1000 + n, pipelines[n % 2]) for n in range(num_blocks)]  # as ours

    scm = RoundRobinSCM()
    server, port = await served(scm)
    translator = server.handlers[PROTOCOL]
    c = await Client.connect(port)
    first = await c.call(9, allocate(num=100))
    again = await c.call(9, allocate(num=100), retry=1)
    assert first.body == again.body and asked == [100]
    blocks = block_response(first).allocateScmBlockResponse.blocks
    assert [b.containerBlockID.localID for b in blocks] == list(range(1000, 1100))
    assert [b.pipeline.id.id for b in blocks[:2]] == [p.id.id for p in pipelines]
    (kept,) = [v for _, v in translator.responses._done.values()]
    assert isinstance(kept, KeptAllocation)
    assert first.body is not None and 0 < translator.responses.bytes == kept.weight < len(first.body)


async def test_calls_in_flight_are_answered_out_of_order(served: Any) -> None:
    scm = SlowSCM()
    _, port = await served(scm)
    c = await Client.connect(port)
    c.send(1, allocate())
    c.send(2, block_request("GetScmInfo"))
    first = await c.receive()
    assert first.call_id == 2  # call 1 still waits for the gate
    assert block_response(first).getScmInfoResponse.clusterId == "CID-x"
    scm.gate.set()
    second = await c.receive()
    assert second.call_id == 1 and block_response(second).allocateScmBlockResponse.blocks[0].containerBlockID.localID == 1


async def test_calls_past_the_in_flight_limit_wait_for_one_to_finish_in_order(
    served: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection with MAX_IN_FLIGHT calls waiting serves nothing more it has read until one finishes; the
    calls after it are then served in the order they came (here a GetScmInfo, which never waits, behind four
    allocations waiting for Raft)."""
    from scm_server.server.hadoop_rpc import server as server_mod

    monkeypatch.setattr(server_mod, "MAX_IN_FLIGHT", 4)
    scm = SlowSCM()
    server, port = await served(scm)
    c = await Client.connect(port)
    for call_id in range(1, 5):
        c.send(call_id, allocate())
    c.send(5, block_request("GetScmInfo"))
    c.send(6, block_request("GetScmInfo"))

    async def parked() -> bool:
        (connection,) = server._connections
        return server.stats["calls"] == 4 and connection._waiting is not None

    deadline = asyncio.get_running_loop().time() + 10
    while not await parked():
        assert asyncio.get_running_loop().time() < deadline, "the fifth call was served past the limit"
        await asyncio.sleep(0.01)
    assert server.stats["answered"] == 0  # nothing answered: four wait, two are held back
    scm.gate.set()
    answers = [await c.receive() for _ in range(6)]
    order = [a.call_id for a in answers]
    assert sorted(order) == [1, 2, 3, 4, 5, 6]
    assert order.index(5) < order.index(6) and order.index(5) > 0  # after a finished allocation, before call 6
    assert all(a.header.status == codec.Status.SUCCESS for a in answers)
    c.close()


async def test_unknown_protocol_method_and_version(served: Any) -> None:
    server, port = await served(FakeSCM())
    c = await Client.connect(port)
    r = await c.call(1, allocate(), protocol="org.example.Nope")
    assert server.metrics.requests("unknown", "unknown", codec.NO_SUCH_PROTOCOL) == 1
    assert (r.header.status, r.header.errorDetail) == (codec.Status.ERROR, ErrorCode.ERROR_NO_SUCH_PROTOCOL)
    assert r.header.exceptionClassName == codec.NO_SUCH_PROTOCOL and "org.example.Nope" in r.header.errorMsg
    r = await c.call(2, allocate(), method="submitRequest")
    assert r.header.errorDetail == ErrorCode.ERROR_NO_SUCH_METHOD and "submitRequest" in r.header.errorMsg
    r = await c.call(3, allocate(), version=2)
    assert r.header.errorDetail == ErrorCode.ERROR_RPC_VERSION_MISMATCH
    assert r.header.exceptionClassName == codec.VERSION_MISMATCH
    r = await c.call(4, b"\xff\xff\xff")  # not an SCMBlockLocationRequest
    assert r.header.status == codec.Status.ERROR and "malformed SCMBlockLocationRequest" in r.header.errorMsg
    assert block_response(await c.call(5, allocate())).success  # still serving this connection


async def test_garbage_and_oversized_frames_are_fatal_and_the_server_serves_on(served: Any) -> None:
    server, port = await served(FakeSCM(), max_frame=4096)
    healthy = await Client.connect(port)
    assert block_response(await healthy.call(1, allocate())).success

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"\x00garbage\x01\x02\x03")
    fatal, = codec.ResponseDecoder().feed(await asyncio.wait_for(reader.read(65536), 10))
    assert fatal.header.status == codec.Status.FATAL and "preamble" in fatal.header.errorMsg
    assert await asyncio.wait_for(reader.read(65536), 10) == b""

    big = await Client.connect(port)
    big.writer.write(struct.pack(">i", 1 << 30))
    answer = await big.receive()
    assert answer.header.status == codec.Status.FATAL and "ipc.maximum.data.length" in answer.header.errorMsg
    assert await big.closed_by_server()

    assert block_response(await healthy.call(2, allocate())).success
    assert server.stats["fatal"] == 2
    assert server.metrics.fatal == 2
    assert server.metrics.requests(PROTOCOL, "send", "SUCCESS") == 2


async def test_http_request_gets_a_plain_answer(served: Any) -> None:
    _, port = await served(FakeSCM())
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    data = await asyncio.wait_for(reader.read(), 10)
    assert data.startswith(b"HTTP/1.1 404") and b"Hadoop IPC" in data


async def test_idle_connection_is_closed_and_pings_are_ignored(served: Any) -> None:
    server, port = await served(FakeSCM(), idle_timeout=0.3)
    c = await Client.connect(port)
    c.writer.write(codec.encode_ping(c.client_id))
    assert block_response(await c.call(1, allocate())).success  # the ping got no answer of its own
    assert await c.closed_by_server()
    assert server.stats["idle_closed"] == 1


async def test_a_call_running_past_the_idle_timeout_keeps_its_connection(served: Any) -> None:
    """Idle means no read and nothing in flight: a call slower than the idle timeout is answered on its open
    connection, which is closed only after a whole idle period with nothing in flight; traffic in between moves
    the timeout on (one timer per connection, not one per read)."""
    scm = SlowSCM()
    # an idle period ten times the gap between the pings below: a loaded machine's scheduling delay between two
    # pings must not look like an idle period
    server, port = await served(scm, idle_timeout=1.0)
    c = await Client.connect(port)
    c.send(1, allocate())
    await asyncio.sleep(2.1)  # two idle periods with the call in flight
    assert server.stats["idle_closed"] == 0
    scm.gate.set()
    assert block_response(await c.receive()).allocateScmBlockResponse.blocks
    c.writer.write(codec.encode_ping(c.client_id))
    for _ in range(20):  # reads every 0.1 s, well inside the idle period, for twice its length
        await asyncio.sleep(0.1)
        c.writer.write(codec.encode_ping(c.client_id))
    assert server.stats["idle_closed"] == 0
    assert await c.closed_by_server()
    assert server.stats["idle_closed"] == 1


async def test_stopping_the_server_ends_connections_without_counting_them_idle(served: Any) -> None:
    server, port = await served(FakeSCM(), idle_timeout=30)
    c = await Client.connect(port)
    assert block_response(await c.call(1, allocate())).success
    await server.stop()
    assert await c.closed_by_server()
    assert server.stats["idle_closed"] == 0


async def test_sasl_client_is_refused_clearly(served: Any) -> None:
    _, port = await served(FakeSCM())
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(codec.encode_preamble(auth_protocol=codec.AUTH_SASL))
    fatal, = codec.ResponseDecoder().feed(await asyncio.wait_for(reader.read(65536), 10))
    assert fatal.header.errorDetail == ErrorCode.FATAL_UNAUTHORIZED
    assert "SIMPLE authentication only" in fatal.header.errorMsg


def test_not_leader_message_parses_as_ozone_does() -> None:
    """Ozone's ServerNotLeaderException(String) finds the leader with two patterns; ours as regexes."""
    import re

    current = re.compile(r".* Server:(.*?) is not the leader[.]+.*", re.DOTALL)
    suggested = re.compile(r".*Suggested leader is Server:([^:]*)(:[0-9]+).*", re.DOTALL)
    t = BlockLocationTranslator(FakeSCM(), CONF.get, "scm-1-id", "scm1.example")
    msg = t.not_leader_message(NotLeaderException("x", "scm2"))
    assert current.fullmatch(msg)
    m = suggested.fullmatch(msg)
    assert m is not None and m.group(1) + m.group(2) == "scm2.example:29863"


async def test_a_leader_not_ready_yet_answers_retriable_with_no_failover_as_ozone(served: Any) -> None:
    scm = FakeSCM()
    scm.not_ready_for = 1
    _, port = await served(scm)
    c = await Client.connect(port)
    resp = await c.call(1, allocate())
    assert resp.header.status == codec.Status.ERROR
    assert resp.header.exceptionClassName == "org.apache.hadoop.hdds.scm.ha.RetriableWithNoFailoverException"
    assert resp.header.errorMsg == ("org.apache.ratis.protocol.exceptions.LeaderNotReadyException: scm-1-id is in "
                                    "LEADER state but not ready yet.")
    assert scm.calls == []  # refused before the facade ran
    # the same call again, once ready: answered (nothing was cached for the refusal)
    assert [b.containerBlockID.localID for b in block_response(await c.call(1, allocate(), retry=0))
            .allocateScmBlockResponse.blocks] == [1]


async def test_the_python_block_client_retries_a_leader_not_ready_on_the_same_scm(served: Any) -> None:
    from scm_server.client.hadoop_rpc import BlockLocationClient

    scm = FakeSCM()
    scm.not_ready_for = 2
    _, port = await served(scm)
    _, other = await served(FakeSCM(leader=False, leader_id=""))
    client = BlockLocationClient([f"127.0.0.1:{port}", f"127.0.0.1:{other}"], retry_interval=0.01)
    try:
        answer = await client.allocate_blocks(1024, 1, "om")
    finally:
        await client.close()
    assert answer.success and client.failovers == 0


@pytest.mark.parametrize("host", ["[::1]", "::1", "[::]"])
async def test_an_ipv6_bind_host_in_brackets_or_bare_listens(host: str) -> None:
    # the address keys write IPv6 in brackets (ozone.scm.security.service.bind.host=[::]); the socket layer wants it
    # bare ("[::]" once stopped a secure SCM at start: "Name or service not known")
    server = HadoopRpcServer([BlockLocationTranslator(FakeSCM(), CONF.get, "scm-1-id", "scm1.example")])
    port = await server.start(host, 0)
    try:
        _reader, writer = await asyncio.open_connection("::1", port)
        writer.close()
        await writer.wait_closed()
    finally:
        await server.stop()


class RingSCM(FakeSCM):
    """The facade's add_scm rule (cluster id checked, then the HA manager's membership change), recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.added: list[tuple[str, str]] = []

    async def add_scm(self, cluster_id: str, scm_id: str, ratis_address: str) -> str:
        if cluster_id != self.cluster_id:
            raise SCMException(ResultCodes.INVALID_CLUSTER_ID, f"SCM {scm_id} has cluster Id {cluster_id}")
        self.added.append((scm_id, ratis_address))
        return f"SCM {scm_id} added"


async def test_add_scm_joins_the_ring_of_the_same_cluster_only(served: Any) -> None:
    scm = RingSCM()
    _, port = await served(scm)
    c = await Client.connect(port)
    join = wire.AddScmRequestProto(clusterId="CID-x", scmId="scm-4", ratisAddr="scm4.example:9894")
    ok = block_response(await c.call(1, block_request("AddScm", addScmRequestProto=join)))
    assert ok.success and ok.addScmResponse.success and ok.addScmResponse.scmId == "scm-4"
    assert scm.added == [("scm-4", "scm4.example:9894")]
    other = wire.AddScmRequestProto(clusterId="CID-y", scmId="scm-5", ratisAddr="scm5.example:9894")
    refused = block_response(await c.call(2, block_request("AddScm", addScmRequestProto=other)))
    assert not refused.success and refused.status == wire_block.INTERNAL_ERROR  # Ozone has no such code
    assert "INVALID_CLUSTER_ID" in refused.message and "CID-y" in refused.message
    assert scm.added == [("scm-4", "scm4.example:9894")]
    c.close()


async def test_the_ports_rpc_activity_counts_connections_bytes_and_calls(served: Any) -> None:
    """Hadoop's RpcActivityForPort<port> figures (rpc_num_open_connections on /prom): what the client wrote and
    read, byte for byte; the calls answered; the connection counted while it is open only."""
    server, port = await served(FakeSCM(), server_name="ScmBlockLocationProtocolService")
    assert server.port == port and server.activity()["NumOpenConnections"] == 0
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    client_id = os.urandom(16)
    sent = codec.encode_preamble() + codec.encode_context(client_id, PROTOCOL, "om")
    sent += b"".join(codec.encode_call(i, client_id, PROTOCOL, "send", allocate()) for i in (1, 2))
    writer.write(sent)
    got, responses, decoder = b"", [], codec.ResponseDecoder()
    while len(responses) < 2:
        data = await asyncio.wait_for(reader.read(65536), 10)
        assert data, "the server closed the connection"
        got += data
        responses += decoder.feed(data)
    assert all(r.header.status == codec.Status.SUCCESS for r in responses)
    activity = server.activity()
    assert activity["NumOpenConnections"] == 1
    assert (activity["ReceivedBytes"], activity["SentBytes"]) == (len(sent), len(got))
    assert activity["RpcProcessingTimeNumOps"] == 2
    assert activity["RpcAuthenticationSuccesses"] == activity["RpcAuthenticationFailures"] == 0
    writer.close()
    # the server sees the end of the stream and forgets the connection, which we wait for
    (connection,) = server._connections
    await asyncio.wait_for(connection.closed(), 10)
    assert server.activity()["NumOpenConnections"] == 0


def test_the_rpc_metrics_are_written_under_their_prometheus_names_when_scraped() -> None:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from scm_server.server.hadoop_rpc.server import HadoopRpcMetrics

    registry = CollectorRegistry()
    metrics = HadoopRpcMetrics(registry)
    for seconds in (0.0002, 0.0005, 0.003, 7.0):  # the second on a bucket's bound: counted in it, as Prometheus does
        metrics.answered(PROTOCOL, "send", "SUCCESS", seconds)
    metrics.answered(PROTOCOL, "send", codec.SERVER_EXCEPTION, 0.02)
    metrics.fatal_answered()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(generate_latest(registry).decode())
               for s in family.samples}
    labels = (("method", "send"), ("protocol", PROTOCOL))
    assert samples[("scm_hadoop_rpc_requests_total", (("answer", "SUCCESS"), *labels))] == 4
    assert samples[("scm_hadoop_rpc_requests_total", (("answer", codec.SERVER_EXCEPTION), *labels))] == 1
    assert samples[("scm_hadoop_rpc_fatal_total", ())] == 1
    bucket = {le: samples[("scm_hadoop_rpc_latency_seconds_bucket", tuple(sorted((*labels, ("le", le)))))]
              for le in ("0.0005", "0.001", "0.005", "0.025", "5.0", "+Inf")}
    assert bucket == {"0.0005": 2, "0.001": 2, "0.005": 3, "0.025": 4, "5.0": 4, "+Inf": 5}
    assert samples[("scm_hadoop_rpc_latency_seconds_count", labels)] == 5
    assert samples[("scm_hadoop_rpc_latency_seconds_sum", labels)] == pytest.approx(7.0237)
