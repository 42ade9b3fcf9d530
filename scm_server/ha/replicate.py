"""``@replicate``: the one narrow boundary between SCM managers and Raft (Ozone's ``@Replicate``).

A *StateManager* method marked ``@replicate(RequestType.CONTAINER)`` becomes ``async``: calling it
on the leader encodes ``(type, method name, arguments)`` into an ``SCMRatisRequestProto`` and
awaits ``self.ha_manager.submit_request(request)``. The undecorated body is what runs on apply,
on EVERY SCM, via :class:`~scm_server.ha.dispatcher.SCMStateMachineDispatcher`.

Ozone's four rules for a replicated method (ContainerStateManager's Javadoc):

1. The method call should be idempotent (replay after restart re-applies entries newer than the
   persisted #TRANSACTIONINFO; applying one twice must not change the outcome).
2. Arguments should be protobuf objects (or int/str/bool/bytes and lists of those; see codec).
3. Return type should be a protobuf object (or one of those scalars, or None).
4. The declaration should raise the Raft error type: here SCMException (a logical rejection,
   state untouched) or, for INTERNAL_ERROR/IO_EXCEPTION, a fatal error that stops the SCM.

Plus the determinism rule that makes it work: no clock, random, uuid or I/O other than the
transaction buffer inside the body; such values are chosen by the caller on the leader and
passed as arguments.

The Ozone method name (camelCase, e.g. ``updateContainerState``) is what goes on the wire, so
requests read the same as Ozone's.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, cast

from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha import client_call as client_call_mod
from scm_server.ha import codec
from scm_server.proto import scm_ratis_pb2

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")

RequestType = scm_ratis_pb2.RequestType


class _Submitter(Protocol):
    async def submit_request(
        self, request: scm_ratis_pb2.SCMRatisRequestProto
    ) -> scm_ratis_pb2.SCMRatisResponseProto: ...


class _ClientCallSubmitter(Protocol):
    async def submit_request(
        self, request: scm_ratis_pb2.SCMRatisRequestProto, *, client_call: tuple[bytes, int] | None = None
    ) -> scm_ratis_pb2.SCMRatisResponseProto: ...


@dataclass(frozen=True)
class ReplicatedMethod:
    request_type: int
    wire_name: str
    local: Callable[..., Any]


REPLICATED_ATTR = "__scm_replicated__"


def to_wire_name(python_name: str) -> str:
    head, *rest = python_name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def replicate(
    request_type: int, wire_name: str | None = None, *, client_call: bool = False
) -> Callable[[Callable[Concatenate[S, P], R]], Callable[Concatenate[S, P], Awaitable[R]]]:
    """Mark a state-manager mutation as replicated. The instance must have ``ha_manager``.

    ``client_call=True``: the write may be made on behalf of a client call (see
    :mod:`scm_server.ha.client_call`); a retry of that call then returns this write's first result,
    so the method's result must describe what was applied (e.g. the id it stored)."""

    def decorate(fn: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], Awaitable[R]]:
        name = wire_name or to_wire_name(fn.__name__)
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        async def submit(self: S, *args: P.args, **kwargs: P.kwargs) -> R:
            bound = sig.bind(self, *args, **kwargs)
            bound.apply_defaults()
            call_args = list(bound.arguments.values())[1:]
            request = codec.encode_request(request_type, name, call_args)
            ha_manager: _Submitter | None = getattr(self, "ha_manager", None)
            if ha_manager is None:
                raise SCMException(ResultCodes.INTERNAL_ERROR, f"{type(self).__name__} has no ha_manager to submit {name}")
            call = client_call_mod.take() if client_call else None
            if call is not None:
                response = await cast(_ClientCallSubmitter, ha_manager).submit_request(request, client_call=call)
            else:
                response = await ha_manager.submit_request(request)
            result: R = codec.decode_result(response)
            return result

        setattr(submit, REPLICATED_ATTR, ReplicatedMethod(request_type, name, fn))
        return submit

    return decorate


def replicated_methods(handler: object) -> dict[str, ReplicatedMethod]:
    """All replicated methods of ``handler``'s class, by wire name."""
    result: dict[str, ReplicatedMethod] = {}
    for klass in reversed(type(handler).__mro__):
        for attr in vars(klass).values():
            info = getattr(attr, REPLICATED_ATTR, None)
            if isinstance(info, ReplicatedMethod):
                result[info.wire_name] = info
    return result


def invoke_local(handler: object, method: str, args: list[Any]) -> Any:
    """Run the undecorated body of a replicated method (what apply does)."""
    info = replicated_methods(handler).get(method)
    if info is None:
        raise SCMException(ResultCodes.INVALID_REQUEST, f"{type(handler).__name__} has no replicated method {method!r}")
    return info.local(handler, *args)
