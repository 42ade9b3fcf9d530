"""SCMStateMachineDispatcher: applies one replicated request on the local SCM.

Registry RequestType -> handler (ContainerStateManager for CONTAINER, PipelineStateManager for
PIPELINE, DeletedBlockLogStateManager for BLOCK, the SequenceIdGenerator state manager for
SEQUENCE_ID, ...). ``apply`` decodes, invokes the undecorated method body and encodes the
result. As in Ozone's ``SCMStateMachine.applyTransaction``:

* an SCMException with a non-fatal code is a *logical rejection*: it is returned in the
  response (``errorResult``/``errorMessage``) and the state is untouched, identically on every SCM;
* INTERNAL_ERROR / IO_EXCEPTION and any other exception propagate: the caller (the HA state
  machine) must stop the process, because a replica that diverges is worse than one that is down.
"""

from __future__ import annotations

import logging
from typing import Any

from google.protobuf.message import DecodeError

from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha import codec
from scm_server.ha.replicate import ReplicatedMethod, replicated_methods
from scm_server.proto import scm_ratis_pb2

log = logging.getLogger(__name__)


def _rejection(code: ResultCodes, message: str) -> scm_ratis_pb2.SCMRatisResponseProto:
    return scm_ratis_pb2.SCMRatisResponseProto(errorResult=code.name, errorMessage=message)


class SCMStateMachineDispatcher:
    def __init__(self) -> None:
        self._handlers: dict[int, tuple[object, dict[str, ReplicatedMethod]]] = {}

    def register(self, request_type: int, handler: object) -> None:
        methods = {n: m for n, m in replicated_methods(handler).items() if m.request_type == request_type}
        if not methods:
            raise ValueError(f"{type(handler).__name__} has no @replicate methods for request type {request_type}")
        self._handlers[request_type] = (handler, methods)

    def handler(self, request_type: int) -> object | None:
        entry = self._handlers.get(request_type)
        return entry[0] if entry else None

    def apply(self, request_bytes: bytes) -> scm_ratis_pb2.SCMRatisResponseProto:
        request = scm_ratis_pb2.SCMRatisRequestProto()
        try:
            request.ParseFromString(request_bytes)
            if not request.IsInitialized():
                raise DecodeError("missing required fields")
        except DecodeError as exc:
            # Deterministic on every SCM (same bytes), so a rejection, not a divergence.
            return _rejection(ResultCodes.INVALID_REQUEST, f"malformed SCMRatisRequestProto: {exc}")
        return self.apply_request(request)

    def apply_request(self, request: scm_ratis_pb2.SCMRatisRequestProto) -> scm_ratis_pb2.SCMRatisResponseProto:
        entry = self._handlers.get(request.type)
        if entry is None:
            return _rejection(ResultCodes.INVALID_REQUEST, f"no handler registered for request type {request.type}")
        handler, methods = entry
        method = methods.get(request.method.name)
        if method is None:
            return _rejection(
                ResultCodes.INVALID_REQUEST,
                f"{type(handler).__name__} has no replicated method {request.method.name!r}",
            )
        try:
            args: list[Any] = codec.decode_args(request)
            result = method.local(handler, *args)
            return codec.encode_result(result)
        except SCMException as exc:
            if exc.is_fatal:
                log.error("fatal error applying %s.%s: %s", type(handler).__name__, method.wire_name, exc)
                raise
            log.info("rejected %s.%s: %s", type(handler).__name__, method.wire_name, exc)
            return _rejection(exc.result, exc.message)
