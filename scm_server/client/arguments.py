"""Argument checks of the public client API, so a bad argument is named before anything is sent.

Applied to :class:`scm_server.client.scm_client.SCMClient` by its class decorator
:func:`validate_arguments` (the blocking ``SyncSCMClient`` forwards to it). Without these checks a
negative count or an unknown enum value surfaced as protobuf's ``ValueError: Value out of range:
-1``, naming neither the method nor the parameter. Pure checks of the call's arguments: no I/O.
The rules mirror the request fields' protobuf types (``proto/scm_client.proto``): the client refuses
what it cannot encode (a negative unsigned, an overflow, an unknown enum value, a string where a
list belongs); what a value means (a block size of 0, a container that does not exist) is the
SCM's to judge, and it answers with Ozone's result codes as before. The one exception is a rule both
ends share word for word (``scm_server.block_requests``: ``numBlocks`` of at least 1), checked here
too so that the call fails before it is sent, with the SCM's own message.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from scm_server.block_requests import num_blocks_problem
from scm_server.exceptions import SCMError
from scm_server.proto import hdds_pb2

INT64_MIN = -(1 << 63)
UINT32_MAX = (1 << 32) - 1
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1

Check = Callable[[str, str, Any], None]
C = TypeVar("C", bound=type)


class InvalidArgumentError(SCMError, ValueError):
    """A client method was called with an argument it cannot send; the message names both."""


def _fail(method: str, name: str, value: Any, want: str) -> None:
    raise InvalidArgumentError(f"{method}: {name}={value!r} is invalid; {want}")


def integer(lo: int, hi: int) -> Check:
    def check(method: str, name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            _fail(method, name, value, f"use an integer from {lo} to {hi}")
    return check


def num_blocks() -> Check:
    """``numBlocks``: a uint32 the SCM accepts only from 1 (its upper limit is the SCM's setting)."""
    encodable = integer(0, UINT32_MAX)

    def check(method: str, name: str, value: Any) -> None:
        encodable(method, name, value)
        problem = num_blocks_problem(value)
        if problem is not None:
            raise InvalidArgumentError(f"{method}: {problem}")
    return check


def enum(wrapper: Any) -> Check:
    """A value of a protobuf enum (``hdds_pb2.ReplicationFactor`` ...), given as its number."""
    names = {int(v): wrapper.Name(v) for v in wrapper.values()}

    def check(method: str, name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value not in names:
            choices = ", ".join(f"{n} ({v})" for v, n in sorted(names.items()))
            _fail(method, name, value, f"use one of {choices}")
    return check


def optional(inner: Check) -> Check:
    def check(method: str, name: str, value: Any) -> None:
        if value is not None:
            inner(method, name, value)
    return check


def text(*, empty: bool = False) -> Check:
    def check(method: str, name: str, value: Any) -> None:
        if not isinstance(value, str) or (not empty and not value.strip()):
            _fail(method, name, value, "use a non-empty string" if not empty else "use a string")
    return check


def hosts() -> Check:
    def check(method: str, name: str, value: Any) -> None:
        if isinstance(value, str) or not isinstance(value, Sequence):
            _fail(method, name, value, "use a list of hostnames, IP addresses or datanode UUIDs (not a string)")
        if not value or any(not isinstance(h, str) or not h.strip() for h in value):
            _fail(method, name, value, "use a non-empty list of non-empty hostnames, IP addresses or UUIDs")
    return check


CONTAINER_ID = integer(INT64_MIN, INT64_MAX)
REPLICATION_TYPE = enum(hdds_pb2.ReplicationType)
REPLICATION_FACTOR = enum(hdds_pb2.ReplicationFactor)

RULES: dict[str, dict[str, Check]] = {
    "allocate_block": {
        "size": integer(0, UINT64_MAX), "num_blocks": num_blocks(),
        "replication_type": REPLICATION_TYPE, "replication_factor": REPLICATION_FACTOR, "owner": text(empty=True),
    },
    "allocate_container": {
        "replication_type": REPLICATION_TYPE, "replication_factor": REPLICATION_FACTOR, "owner": text(empty=True),
    },
    "get_container": {"container_id": CONTAINER_ID},
    "get_container_with_pipeline": {"container_id": CONTAINER_ID},
    "close_container": {"container_id": CONTAINER_ID},
    "list_containers": {
        "start_id": integer(INT64_MIN, INT64_MAX), "count": integer(0, UINT32_MAX),
        "state": optional(enum(hdds_pb2.LifeCycleState)),
        "replication_type": optional(REPLICATION_TYPE), "replication_factor": optional(REPLICATION_FACTOR),
    },
    "create_pipeline": {"replication_type": REPLICATION_TYPE, "replication_factor": REPLICATION_FACTOR},
    "close_pipeline": {"pipeline_id": text()},
    "activate_pipeline": {"pipeline_id": text()},
    "deactivate_pipeline": {"pipeline_id": text()},
    "query_nodes": {
        "state": optional(enum(hdds_pb2.NodeState)), "op_state": optional(enum(hdds_pb2.NodeOperationalState)),
    },
    "decommission_nodes": {"hosts": hosts()},
    "start_maintenance_nodes": {"hosts": hosts(), "end_hours": integer(INT64_MIN, INT64_MAX)},
    "recommission_nodes": {"hosts": hosts()},
}


def validate_arguments(cls: C) -> C:
    """Class decorator: check the arguments of every method named in :data:`RULES` before it runs."""
    for method_name, rules in RULES.items():
        method = getattr(cls, method_name, None)
        if method is None:
            continue
        setattr(cls, method_name, _checked(method, method_name, rules))
    return cls


def _checked(method: Callable[..., Any], method_name: str, rules: dict[str, Check]) -> Callable[..., Any]:
    signature = inspect.signature(method)
    unknown = set(rules) - set(signature.parameters)
    if unknown:
        raise TypeError(f"argument rules for {method_name} name parameters it does not have: {sorted(unknown)}")

    def check(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidArgumentError(f"{method_name}: {exc}") from None
        bound.apply_defaults()
        for name, rule in rules.items():
            rule(method_name, name, bound.arguments[name])

    if inspect.iscoroutinefunction(method):
        @functools.wraps(method)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            check(args, kwargs)
            return await method(*args, **kwargs)

        return async_wrapper

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        check(args, kwargs)
        return method(*args, **kwargs)

    return wrapper
