"""Mapping between our SCMException vocabulary and gRPC status codes.

Every gRPC servicer in ``scm_server.server`` turns an ``SCMException`` raised by the facade into
a gRPC status plus trailing metadata, and ``scm_server.client`` turns it back. Both directions
live here so the wire contract is written down once:

* ``x-scm-result``: the ``ResultCodes`` name (``CONTAINER_NOT_FOUND``, ``SCM_NOT_LEADER``...);
* ``x-scm-leader-id`` / ``x-scm-leader-address``: only for ``SCM_NOT_LEADER``, the leader's node
  id and its address *for the same protocol* the client called, so it can fail over directly.

Pure functions, no I/O: the servicers do the ``context.abort`` call.
"""

from __future__ import annotations

import grpc

from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException

RESULT_KEY = "x-scm-result"
LEADER_ID_KEY = "x-scm-leader-id"
LEADER_ADDRESS_KEY = "x-scm-leader-address"

_STATUS_BY_RESULT: dict[ResultCodes, grpc.StatusCode] = {
    ResultCodes.CONTAINER_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ResultCodes.PIPELINE_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ResultCodes.NO_SUCH_DATANODE: grpc.StatusCode.NOT_FOUND,
    ResultCodes.NO_REPLICA_FOUND: grpc.StatusCode.NOT_FOUND,
    ResultCodes.FAILED_TO_FIND_NODE_IN_POOL: grpc.StatusCode.NOT_FOUND,
    ResultCodes.INVALID_BLOCK_SIZE: grpc.StatusCode.INVALID_ARGUMENT,
    ResultCodes.INVALID_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
    ResultCodes.INVALID_CAPACITY: grpc.StatusCode.INVALID_ARGUMENT,
    ResultCodes.INVALID_CLUSTER_ID: grpc.StatusCode.PERMISSION_DENIED,
    ResultCodes.CONTAINER_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ResultCodes.DUPLICATED_PIPELINE_ID: grpc.StatusCode.ALREADY_EXISTS,
    ResultCodes.DUPLICATE_DATANODE: grpc.StatusCode.ALREADY_EXISTS,
    ResultCodes.SCM_ALREADY_INITIALIZED: grpc.StatusCode.ALREADY_EXISTS,
    ResultCodes.SAFE_MODE_EXCEPTION: grpc.StatusCode.FAILED_PRECONDITION,
    ResultCodes.UNEXPECTED_CONTAINER_STATE: grpc.StatusCode.FAILED_PRECONDITION,
    ResultCodes.INVALID_PIPELINE_STATE: grpc.StatusCode.FAILED_PRECONDITION,
    ResultCodes.FAILED_TO_CHANGE_CONTAINER_STATE: grpc.StatusCode.FAILED_PRECONDITION,
    ResultCodes.SCM_NOT_INITIALIZED: grpc.StatusCode.FAILED_PRECONDITION,
    ResultCodes.SCM_VERSION_MISMATCH: grpc.StatusCode.FAILED_PRECONDITION,
    # Not-leader is retriable elsewhere: UNAVAILABLE tells generic gRPC tooling "try another".
    ResultCodes.SCM_NOT_LEADER: grpc.StatusCode.UNAVAILABLE,
    ResultCodes.FAILED_TO_FIND_HEALTHY_NODES: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ResultCodes.FAILED_TO_FIND_NODES_WITH_SPACE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ResultCodes.FAILED_TO_FIND_SUITABLE_NODE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ResultCodes.FAILED_TO_ALLOCATE_CONTAINER: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ResultCodes.FAILED_TO_ALLOCATE_ENOUGH_BLOCKS: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ResultCodes.FAILED_TO_CREATE_PIPELINE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ResultCodes.FAILED_TO_LOAD_NODEPOOL: grpc.StatusCode.INTERNAL,
    ResultCodes.FAILED_TO_LOAD_OPEN_CONTAINER: grpc.StatusCode.INTERNAL,
    ResultCodes.TIMEOUT: grpc.StatusCode.DEADLINE_EXCEEDED,
    ResultCodes.IO_EXCEPTION: grpc.StatusCode.INTERNAL,
    ResultCodes.INTERNAL_ERROR: grpc.StatusCode.INTERNAL,
    ResultCodes.UNSUPPORTED_OPERATION: grpc.StatusCode.FAILED_PRECONDITION,
    ResultCodes.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    ResultCodes.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    ResultCodes.INVALID_CSR: grpc.StatusCode.INVALID_ARGUMENT,
    ResultCodes.CERTIFICATE_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ResultCodes.RATE_LIMITED: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def status_for(result: ResultCodes) -> grpc.StatusCode:
    """The gRPC status code an SCM result code travels as (INTERNAL for anything unlisted)."""
    return _STATUS_BY_RESULT.get(result, grpc.StatusCode.INTERNAL)


def to_grpc_error(
    exc: SCMException, leader_address: str | None = None
) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]:
    """(status, details, trailing metadata) for an SCMException.

    ``leader_address`` overrides the address carried by a NotLeaderException: the servicer
    resolves the leader's node id to the address of the protocol that was called.
    """
    metadata: list[tuple[str, str]] = [(RESULT_KEY, exc.result.value)]
    if isinstance(exc, NotLeaderException):
        if exc.leader_id:
            metadata.append((LEADER_ID_KEY, exc.leader_id))
        address = leader_address or exc.leader_address
        if address:
            metadata.append((LEADER_ADDRESS_KEY, address))
    return status_for(exc.result), str(exc), tuple(metadata)


def _metadata_dict(metadata: object) -> dict[str, str]:
    out: dict[str, str] = {}
    if not metadata:
        return out
    for item in metadata:  # type: ignore[attr-defined]
        key, value = item[0], item[1]
        out[str(key).lower()] = value.decode() if isinstance(value, bytes) else str(value)
    return out


def from_grpc_error(
    code: grpc.StatusCode, details: str, trailing_metadata: object
) -> SCMException | None:
    """Rebuild the SCMException a server sent, or None if the status carries no SCM result.

    None means a transport-level failure (UNAVAILABLE from a dead socket, DEADLINE_EXCEEDED...)
    which the client handles by failing over, not by re-raising.
    """
    md = _metadata_dict(trailing_metadata)
    name = md.get(RESULT_KEY)
    if name is None:
        return None
    try:
        result = ResultCodes(name)
    except ValueError:
        result = ResultCodes.INTERNAL_ERROR
    message = details or ""
    prefix = f"{result.value}: "
    if message.startswith(prefix):
        message = message[len(prefix):]
    if result is ResultCodes.SCM_NOT_LEADER:
        exc = NotLeaderException("", md.get(LEADER_ID_KEY, ""), md.get(LEADER_ADDRESS_KEY, ""))
        exc.message = message
        exc.args = (details,)
        return exc
    return SCMException(result, message)
