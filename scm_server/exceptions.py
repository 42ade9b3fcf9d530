"""SCM error hierarchy, with Ozone's ``SCMException.ResultCodes`` vocabulary.

Library errors (plyvel, grpc, ...) are wrapped at the edge with ``raise ... from exc`` so the
rest of the code only sees these types. Over gRPC an ``SCMException`` travels as a status
code plus trailing metadata ``x-scm-result`` (the result code name); ``NotLeaderException``
adds ``x-scm-leader-id`` and ``x-scm-leader-address`` so clients can fail over.
"""

from __future__ import annotations

import enum


class ResultCodes(enum.Enum):
    OK = "OK"
    FAILED_TO_LOAD_NODEPOOL = "FAILED_TO_LOAD_NODEPOOL"
    FAILED_TO_FIND_NODE_IN_POOL = "FAILED_TO_FIND_NODE_IN_POOL"
    FAILED_TO_FIND_HEALTHY_NODES = "FAILED_TO_FIND_HEALTHY_NODES"
    FAILED_TO_FIND_NODES_WITH_SPACE = "FAILED_TO_FIND_NODES_WITH_SPACE"
    FAILED_TO_FIND_SUITABLE_NODE = "FAILED_TO_FIND_SUITABLE_NODE"
    INVALID_CAPACITY = "INVALID_CAPACITY"
    INVALID_BLOCK_SIZE = "INVALID_BLOCK_SIZE"
    SAFE_MODE_EXCEPTION = "SAFE_MODE_EXCEPTION"
    FAILED_TO_LOAD_OPEN_CONTAINER = "FAILED_TO_LOAD_OPEN_CONTAINER"
    FAILED_TO_ALLOCATE_CONTAINER = "FAILED_TO_ALLOCATE_CONTAINER"
    FAILED_TO_CHANGE_CONTAINER_STATE = "FAILED_TO_CHANGE_CONTAINER_STATE"
    CONTAINER_NOT_FOUND = "CONTAINER_NOT_FOUND"
    CONTAINER_EXISTS = "CONTAINER_EXISTS"
    UNEXPECTED_CONTAINER_STATE = "UNEXPECTED_CONTAINER_STATE"
    DUPLICATE_DATANODE = "DUPLICATE_DATANODE"
    NO_SUCH_DATANODE = "NO_SUCH_DATANODE"
    NO_REPLICA_FOUND = "NO_REPLICA_FOUND"
    FAILED_TO_ALLOCATE_ENOUGH_BLOCKS = "FAILED_TO_ALLOCATE_ENOUGH_BLOCKS"
    PIPELINE_NOT_FOUND = "PIPELINE_NOT_FOUND"
    DUPLICATED_PIPELINE_ID = "DUPLICATED_PIPELINE_ID"
    INVALID_PIPELINE_STATE = "INVALID_PIPELINE_STATE"
    FAILED_TO_CREATE_PIPELINE = "FAILED_TO_CREATE_PIPELINE"
    INVALID_REQUEST = "INVALID_REQUEST"
    INVALID_CLUSTER_ID = "INVALID_CLUSTER_ID"
    SCM_NOT_LEADER = "SCM_NOT_LEADER"
    SCM_NOT_INITIALIZED = "SCM_NOT_INITIALIZED"
    SCM_ALREADY_INITIALIZED = "SCM_ALREADY_INITIALIZED"
    SCM_VERSION_MISMATCH = "SCM_VERSION_MISMATCH"
    TIMEOUT = "TIMEOUT"
    IO_EXCEPTION = "IO_EXCEPTION"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    UNSUPPORTED_OPERATION = "UNSUPPORTED_OPERATION"
    # security (ours; Ozone reports these as SCMSecurityException / AccessControlException)
    PERMISSION_DENIED = "PERMISSION_DENIED"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    INVALID_CSR = "INVALID_CSR"
    CERTIFICATE_NOT_FOUND = "CERTIFICATE_NOT_FOUND"
    RATE_LIMITED = "RATE_LIMITED"  # anonymous enrolment over its rate limit (gRPC RESOURCE_EXHAUSTED)


class SCMError(Exception):
    """Base of every error this project raises on purpose."""


def one_line(text: str) -> str:
    """``text`` as one printable line: line breaks and other control characters (which a bad
    configuration value can carry into a message) shown as escapes, so an error stays one line."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


class SCMException(SCMError):
    """An SCM operation failed with an Ozone result code.

    INTERNAL_ERROR and IO_EXCEPTION raised while applying a replicated request are fatal
    (the process stops rather than letting replicas diverge); every other code is a logical
    rejection returned to the caller, leaving state intact.
    """

    def __init__(self, result: ResultCodes, message: str) -> None:
        super().__init__(f"{result.value}: {message}")
        self.result = result
        self.message = message

    @property
    def is_fatal(self) -> bool:
        return self.result in (ResultCodes.INTERNAL_ERROR, ResultCodes.IO_EXCEPTION)


class NotLeaderException(SCMException):
    """The call reached an SCM that is not the leader. Carries a hint where the leader is."""

    def __init__(self, message: str = "", leader_id: str = "", leader_address: str = "") -> None:
        hint = f" (leader: {leader_id} at {leader_address})" if leader_id else " (leader unknown)"
        super().__init__(ResultCodes.SCM_NOT_LEADER, (message or "this SCM is not the leader") + hint)
        self.leader_id = leader_id
        self.leader_address = leader_address


class ConfigError(SCMError):
    """A configuration value is missing or malformed. The message names the key and the fix."""


class StorageError(SCMError):
    """Local storage (LevelDB, VERSION file, metadata dirs) is unusable. Wraps the library error."""


class SCMFatalError(SCMError):
    """The process must stop: continuing could let replicas diverge."""
