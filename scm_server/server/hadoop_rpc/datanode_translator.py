"""StorageContainerDatanodeProtocol over Hadoop RPC: Ozone's server-side translator pattern.

``submitRequest`` carries an ``SCMDatanodeRequest``; the translator dispatches on ``cmdType`` (GetVersion,
Register, SendHeartbeat) to the same facade methods as the gRPC ``StorageContainerDatanodeProtocolService``
(every SCM answers datanodes; the facade decides what a follower does with reports and commands), carrying
the messages across by name (:func:`convert.by_name`: our datanode messages share Ozone's names, not its
numbers). As in Ozone, a failure is an RPC error naming ``org.apache.hadoop.hdds.scm.exceptions.SCMException``
(the datanode retries the call); the commands in a heartbeat answer keep their id inside the command message
and carry the issuing leader's term.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from scm_server import ozone_wire
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.hadoop_ipc import Call, ErrorCode
from scm_server.proto import scm_datanode_pb2 as ours
from scm_server.proto.ozone import ScmServerDatanodeHeartbeatProtocol_pb2 as wire_dn
from scm_server.protocols import StorageContainerDatanodeProtocol
from scm_server.server.hadoop_rpc.server import IO_EXCEPTION, RpcCallError, parse_request

LOG = logging.getLogger(__name__)

PROTOCOL = "org.apache.hadoop.ozone.protocol.StorageContainerDatanodeProtocol"
_COMMANDS = {number: name for name, number in wire_dn.Type.items()}  # cmdType -> name, without the enum wrapper's calls
SERVED = ("GetVersion", "Register", "SendHeartbeat")  # every cmdType of the protocol, dispatched in ``call``
VERSION = 1
SCM_EXCEPTION = "org.apache.hadoop.hdds.scm.exceptions.SCMException"


class ReceivedReport(NamedTuple):
    """A full container report's replicas in Ozone's message, as received (a :class:`ContainerReport`)."""

    reports: list[wire_dn.ContainerReplicaProto]


class DatanodeTranslator:
    """Serves ``submitRequest`` of StorageContainerDatanodeProtocol for one SCM."""

    protocol = PROTOCOL
    version = VERSION
    methods = frozenset({"submitRequest"})

    def __init__(self, scm: StorageContainerDatanodeProtocol) -> None:
        self.scm = scm

    async def call(self, method: str, call: Call) -> bytes:
        request = parse_request(call.body, wire_dn.SCMDatanodeRequest())
        command = _COMMANDS.get(request.cmdType) or wire_dn.Type.Name(request.cmdType)
        response = wire_dn.SCMDatanodeResponse(cmdType=request.cmdType, status=wire_dn.OK, success=True)
        if request.HasField("traceID"):
            response.traceID = request.traceID
        try:
            if command == "GetVersion":
                version = self.scm.get_version()
                response.getVersionResponse.CopyFrom(ozone_wire.by_name(version, wire_dn.SCMVersionResponseProto))
            elif command == "Register":
                registered = await self.scm.register_datanode(self._register_request(request))
                response.registerResponse.CopyFrom(ozone_wire.by_name(registered, wire_dn.SCMRegisteredResponseProto))
            else:  # SendHeartbeat: the enum has no other value
                heartbeat, report = self._heartbeat_request(request.sendHeartbeatRequest)
                answer = await self.scm.process_heartbeat(heartbeat, report)
                response.sendHeartbeatResponse.CopyFrom(ozone_wire.heartbeat_response_to_wire(answer))
        except SCMException as exc:
            raise RpcCallError(SCM_EXCEPTION, str(exc), ErrorCode.ERROR_APPLICATION) from exc
        except ValueError as exc:  # a value that does not fit our model (convert.by_name names the field)
            raise RpcCallError(IO_EXCEPTION, f"{command}: {exc}", ErrorCode.ERROR_APPLICATION) from exc
        return response.SerializeToString()

    @staticmethod
    def _heartbeat_request(
        wire_req: wire_dn.SCMHeartbeatRequestProto,
    ) -> tuple[ours.SCMHeartbeatRequestProto, ReceivedReport | None]:
        """The heartbeat in our message, and its full container report apart, as it arrived: the report's
        replicas are read where they are (:class:`scm_server.protocols.ReplicaReport`), not copied by name one
        field at a time (docs/performance.md, "Levers: container reads and reports"). A negative ``used`` or ``keyCount``
        (signed in Ozone's message, unsigned in ours) is refused as the by-name copy refuses it."""
        if not wire_req.HasField("containerReport"):
            return ozone_wire.by_name(wire_req, ours.SCMHeartbeatRequestProto), None
        report = wire_req.containerReport
        wire_req.ClearField("containerReport")  # ``report`` keeps its replicas
        # each replica's Python object made once, for this check and the report handler's loop both
        replicas = list(report.reports)
        bad = next((r for r in replicas if r.used < 0 or r.keyCount < 0), None)
        if bad is not None:
            field = "used" if bad.used < 0 else "keyCount"
            raise ValueError(f"ContainerReplicaProto.{field}: container {bad.containerID} reported"
                             f" {getattr(bad, field)}, and a replica's {field} is never negative")
        return ozone_wire.by_name(wire_req, ours.SCMHeartbeatRequestProto), ReceivedReport(replicas)

    @staticmethod
    def _register_request(request: wire_dn.SCMDatanodeRequest) -> ours.SCMRegisterRequestProto:
        wire_req = request.registerRequest
        if not request.HasField("registerRequest"):
            raise SCMException(ResultCodes.INVALID_REQUEST, "Register without registerRequest")
        out = ozone_wire.by_name(wire_req, ours.SCMRegisterRequestProto)
        out.datanodeDetails.CopyFrom(ozone_wire.datanode_from_wire(wire_req.extendedDatanodeDetails.datanodeDetails))
        # the report fields are required in both models: present, even when empty
        out.nodeReport.SetInParent()
        out.containerReport.SetInParent()
        out.pipelineReports.SetInParent()
        return out

