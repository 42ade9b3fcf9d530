"""ScmBlockLocationProtocol over Hadoop RPC: Ozone's server-side translator pattern.

One method, ``send``, carries an ``SCMBlockLocationRequest``; the translator dispatches on its
``cmdType`` to the same facade (:class:`scm_server.scm.StorageContainerManager`) and the same call
rules (:mod:`scm_server.server.call_guard`: who answers, the retry cache) as the gRPC
``ScmBlockLocationProtocolService``, and answers an ``SCMBlockLocationResponse``. As in Ozone:

* a logical failure (an ``SCMException``: safe mode, no pipeline, ...) is a *successful* RPC whose
  response has ``success=false``, ``status`` = the result code and ``message``;
* leadership travels as an RPC error, ``org.apache.hadoop.hdds.ratis.ServerNotLeaderException``,
  whose message names the suggested leader as ``Server:host:port`` (the host of the leader's
  configured address and its Hadoop RPC block port), the form Ozone's failover proxy parses;
* a cmdType not served here answers ``success=false``, ``status=UNSUPPORTED_OPERATION`` and a
  message naming the command.

Retries: Hadoop clients keep (clientId, callId) across retries (``retryCount`` counts them), so the
answer of a non-idempotent call (AllocateScmBlock, DeleteScmKeyBlocks) is kept in a
:class:`call_guard.ResponseCache` under those ids: a retry to this SCM gets the first answer, a
retry while the first copy runs joins it. Like the gRPC path, a retry that reaches another SCM
after a failover is a new call there (it may get other, never reused, block IDs).
"""

from __future__ import annotations

import array
import logging
from collections.abc import Awaitable, Callable

from scm_server import hadoop_ipc as codec
from scm_server import ozone_wire
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.hadoop_ipc import Call
from scm_server.proto import hdds_pb2
from scm_server.proto.ozone import ScmServerProtocol_pb2 as wire_block
from scm_server.proto.ozone import hdds_pb2 as wire_hdds
from scm_server.protocols import ScmBlockLocationProtocol
from scm_server.server import call_guard, endpoints
from scm_server.server.hadoop_rpc import convert
from scm_server.server.hadoop_rpc.leadership import Leadership
from scm_server.server.hadoop_rpc.server import parse_request

LOG = logging.getLogger(__name__)

PROTOCOL = call_guard.BLOCK.hadoop_protocol  # org.apache.hadoop.hdds.scm.protocol.ScmBlockLocationProtocol
VERSION = 1
SERVER_NOT_LEADER = codec.SERVER_NOT_LEADER

Type = wire_block.Type
_COMMANDS = {number: name for name, number in Type.items()}  # cmdType -> its name, without the enum wrapper's calls
SUPPORTED = ("AllocateScmBlock", "DeleteScmKeyBlocks", "GetScmInfo", "SortDatanodes", "AddScm", "GetClusterTree")


class BlockLocationTranslator:
    """Serves ``send`` of ScmBlockLocationProtocol for one SCM."""

    protocol = PROTOCOL
    version = VERSION
    methods = frozenset({"send"})

    def __init__(self, scm: ScmBlockLocationProtocol, get: endpoints.Getter, self_name: str, hostname: str) -> None:
        self.scm = scm
        self.get = get
        self.self_name = self_name  # how this SCM names itself in ServerNotLeaderException (its scm id)
        self.hostname = hostname
        self.leadership = Leadership(scm, get, endpoints.Protocol.BLOCK_HADOOP, self_name, hostname)
        self.responses = call_guard.ResponseCache()
        self._by_command = self._handlers()

    async def call(self, method: str, call: Call) -> bytes:
        request = parse_request(call.body, wire_block.SCMBlockLocationRequest())
        command = _COMMANDS.get(request.cmdType) or Type.Name(request.cmdType)
        response = wire_block.SCMBlockLocationResponse(cmdType=request.cmdType, status=wire_block.OK, success=True)
        if request.HasField("traceID"):
            response.traceID = request.traceID
        handler = self._by_command.get(command)
        if handler is None:
            response.success = False
            response.status = wire_block.UNSUPPORTED_OPERATION
            response.message = (
                f"{command} is not supported by this SCM over Hadoop RPC yet "
                f"(ScmBlockLocationProtocol serves {', '.join(SUPPORTED)})"
            )
            return response.SerializeToString()
        try:
            self._check_access(command)
            key = self._cache_key(call, command)
            if key is None:
                body = await handler(request)
            else:
                body = await self.responses.run(key, lambda: handler(request))
        except NotLeaderException as exc:
            raise self.leadership.error(exc) from exc
        except SCMException as exc:
            response.success = False
            response.status = convert.status_of(exc.result)  # type: ignore[assignment]
            response.message = str(exc)
            return response.SerializeToString()
        if isinstance(body, AllocateAnswer):  # the first copy's answer (a retry from the cache gets bytes)
            body = body.data
        # the command's answer, serialized (maybe from the cache), joined to the wrapper's own fields
        return response.SerializeToString() + body

    # ---- commands: each returns the serialized field of the response that carries its answer ----

    def _handlers(self) -> dict[str, Callable[[wire_block.SCMBlockLocationRequest], Awaitable[bytes | AllocateAnswer]]]:
        return {
            "AllocateScmBlock": self._allocate,
            "DeleteScmKeyBlocks": self._delete,
            "GetScmInfo": self._scm_info,
            "SortDatanodes": self._sort,
            "GetClusterTree": self._cluster_tree,
            "AddScm": self._add_scm,
        }

    async def _add_scm(self, request: wire_block.SCMBlockLocationRequest) -> bytes:
        """Ozone's addSCM: leader only; another cluster's SCM is refused (``success=false`` with the reason)."""
        req = request.addScmRequestProto
        if not request.HasField("addScmRequestProto"):
            raise SCMException(ResultCodes.INVALID_REQUEST, "AddScm without addScmRequestProto")
        await self.scm.add_scm(req.clusterId, req.scmId, req.ratisAddr)
        return wire_block.SCMBlockLocationResponse(
            addScmResponse=wire_hdds.AddScmResponseProto(success=True, scmId=req.scmId)
        ).SerializePartialToString()

    async def _allocate(self, request: wire_block.SCMBlockLocationRequest) -> AllocateAnswer:
        req = request.allocateScmBlockRequest
        if not request.HasField("allocateScmBlockRequest"):
            raise SCMException(ResultCodes.INVALID_REQUEST, "AllocateScmBlock without allocateScmBlockRequest")
        rtype = convert.replication_type_from_wire(req.type)
        if rtype not in (hdds_pb2.RATIS, hdds_pb2.STAND_ALONE, hdds_pb2.EC):
            raise SCMException(
                ResultCodes.INVALID_REQUEST,
                f"replication type {wire_hdds.ReplicationType.Name(req.type)} is not served "
                "(RATIS, STAND_ALONE and EC are)",
            )
        ec = None
        if rtype == hdds_pb2.EC:
            if not req.HasField("ecReplicationConfig"):
                raise SCMException(
                    ResultCodes.INVALID_REQUEST,
                    "replication type EC without ecReplicationConfig: send data, parity, codec and ecChunkSize "
                    "(e.g. rs-3-2-1024k)",
                )
            ec = ozone_wire.by_name(req.ecReplicationConfig, hdds_pb2.ECReplicationConfig)
        factor = convert.replication_factor_from_wire(req.factor) if req.HasField("factor") else None
        if factor is None:
            factor = 3  # THREE, Ozone's default replication
        exclude = convert.exclude_list_from_wire(req.excludeList) if req.HasField("excludeList") else None
        blocks = await self.scm.allocate_block(req.size, req.numBlocks, rtype, factor, req.owner, exclude, ec=ec)
        if len(blocks) < req.numBlocks:
            raise SCMException(
                ResultCodes.FAILED_TO_ALLOCATE_ENOUGH_BLOCKS,
                f"Allocated {len(blocks)} blocks. Requested {req.numBlocks} blocks",
            )
        return AllocateAnswer(*convert.split_blocks(blocks))

    async def _delete(self, request: wire_block.SCMBlockLocationRequest) -> bytes:
        blocks = [convert.key_blocks_from_wire(kb) for kb in request.deleteScmKeyBlocksRequest.keyBlocks]
        results = await self.scm.delete_key_blocks(blocks)
        return wire_block.SCMBlockLocationResponse(
            deleteScmKeyBlocksResponse=convert.delete_results_to_wire(list(results))
        ).SerializePartialToString()

    async def _scm_info(self, request: wire_block.SCMBlockLocationRequest) -> bytes:
        info = self.scm.get_scm_info()
        return wire_block.SCMBlockLocationResponse(
            getScmInfoResponse=convert.scm_info_to_wire(info)
        ).SerializePartialToString()

    async def _sort(self, request: wire_block.SCMBlockLocationRequest) -> bytes:
        req = request.sortDatanodesRequest
        nodes = self.scm.query_nodes()
        ordered = convert.sort_by_distance([n.nodeID for n in nodes], list(req.nodeNetworkName), req.client)
        return wire_block.SCMBlockLocationResponse(
            sortDatanodesResponse=wire_block.SortDatanodesResponseProto(
                node=[ozone_wire.datanode_to_wire(dn) for dn in ordered]
            )
        ).SerializePartialToString()

    async def _cluster_tree(self, request: wire_block.SCMBlockLocationRequest) -> bytes:
        nodes = self.scm.query_nodes()
        try:
            tree = convert.cluster_tree([n.nodeID for n in nodes])
        except ValueError as exc:
            raise SCMException(ResultCodes.INTERNAL_ERROR, f"GetClusterTree: {exc}") from exc
        return wire_block.SCMBlockLocationResponse(
            getClusterTreeResponse=wire_block.GetClusterTreeResponseProto(clusterTree=tree)
        ).SerializePartialToString()

    # ---- the call rules (call_guard's table, by this protocol's name and the cmdType) ----

    def _check_access(self, command: str) -> None:
        if call_guard.hadoop_access_of(PROTOCOL, command) is not call_guard.Access.ANY:
            self.leadership.require_leader()

    @staticmethod
    def _cache_key(call: Call, command: str) -> tuple[str, int, str] | None:
        return call_guard.hadoop_cache_key(call.client_id, call.call_id, PROTOCOL, command)

    def not_leader_message(self, exc: NotLeaderException) -> str:
        return self.leadership.message(exc)


class AllocateAnswer(call_guard.CompactAnswer):
    """An AllocateScmBlock answer: ``data``, the serialized ``allocateScmBlockResponse`` field of the response, and
    what the retry cache keeps of it instead of compressing ``data`` (a 100-block answer repeats its pipeline in
    every block, and packing it was a visible share of the leader's time: docs/performance.md, "Figures behind
    choices in the code"): the ids and each block's pipeline index in arrays, the distinct pipelines' bytes
    (shared with the pipeline cache)."""

    __slots__ = ("_parts", "data")

    def __init__(self, ids: array.array[int], which: array.array[int], fields: list[bytes]) -> None:
        self._parts = (ids, which, fields)
        # SCMBlockLocationResponse.allocateScmBlockResponse = 11, written directly (see convert.blocks_bytes)
        self.data = convert.field_bytes(11, convert.blocks_bytes(ids, which, fields))

    def kept(self) -> KeptAllocation | bytes:
        """The compact form, or ``data`` itself when that is no larger (a small answer, small pipelines)."""
        compact = KeptAllocation(*self._parts)
        return compact if compact.weight < len(self.data) else self.data


class KeptAllocation(call_guard.Kept):
    """An :class:`AllocateAnswer` as the retry cache holds it; :meth:`answer` writes the same bytes again."""

    __slots__ = ("fields", "ids", "weight", "which")

    def __init__(self, ids: array.array[int], which: array.array[int], fields: list[bytes]) -> None:
        self.ids, self.which, self.fields = ids, which, fields
        self.weight = len(ids) * ids.itemsize + len(which) * which.itemsize + sum(len(f) for f in fields)

    def answer(self) -> bytes:
        return convert.field_bytes(11, convert.blocks_bytes(self.ids, self.which, self.fields))
