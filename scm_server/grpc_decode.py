"""Malformed request frames answer ``INVALID_ARGUMENT`` (a server interceptor, edge).

Who uses it: the servers whose servicers are generated stubs with protobuf deserializers (the Raft
peer and admin services, the inter-SCM service). Left to gRPC, a frame that does not parse fails
inside the library: the caller gets ``UNKNOWN`` and the server logs a traceback. This interceptor
registers each handler with raw bytes and parses them itself, so the caller learns which message was
malformed (``INVALID_ARGUMENT: malformed <Message> for <method>: ...``) and nothing is logged above
debug. The SCM's own servicers (scm_server.server.grpc_services) already parse raw bytes this way.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
from google.protobuf import message as pb_message

log = logging.getLogger(__name__)


async def _parse(parse: Callable[[bytes], Any], raw: bytes, method: str, context: Any) -> Any:
    try:
        return parse(raw)
    except (pb_message.DecodeError, ValueError, TypeError) as exc:
        log.debug("malformed request for %s: %s", method, exc)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed request for {method}: {exc}")


class DecodeGuard(grpc.aio.ServerInterceptor):
    """Parses request frames inside the call (see the module docstring)."""

    def __init__(self) -> None:
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        method = handler_call_details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = _wrap(handler, method)
        self._wrapped[method] = (handler, wrapped)
        return wrapped


def _wrap(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    parse = handler.request_deserializer
    assert parse is not None
    kwargs = {"request_deserializer": None, "response_serializer": handler.response_serializer}

    async def requests(raw_iterator: AsyncIterator[bytes], context: Any) -> AsyncIterator[Any]:
        async for raw in raw_iterator:
            yield await _parse(parse, raw, method, context)

    if handler.unary_unary is not None:
        uu = handler.unary_unary

        async def unary_unary(raw: bytes, context: Any) -> Any:
            return await uu(await _parse(parse, raw, method, context), context)

        return grpc.unary_unary_rpc_method_handler(unary_unary, **kwargs)
    if handler.unary_stream is not None:
        us = handler.unary_stream
        if inspect.isasyncgenfunction(us):

            async def unary_stream_gen(raw: bytes, context: Any) -> AsyncIterator[Any]:
                async for response in us(await _parse(parse, raw, method, context), context):
                    yield response

            return grpc.unary_stream_rpc_method_handler(unary_stream_gen, **kwargs)

        async def unary_stream(raw: bytes, context: Any) -> Any:
            return await us(await _parse(parse, raw, method, context), context)

        return grpc.unary_stream_rpc_method_handler(unary_stream, **kwargs)
    if handler.stream_unary is not None:
        su = handler.stream_unary

        async def stream_unary(raw_iterator: AsyncIterator[bytes], context: Any) -> Any:
            return await su(requests(raw_iterator, context), context)

        return grpc.stream_unary_rpc_method_handler(stream_unary, **kwargs)
    ss = handler.stream_stream
    if inspect.isasyncgenfunction(ss):

        async def stream_stream_gen(raw_iterator: AsyncIterator[bytes], context: Any) -> AsyncIterator[Any]:
            async for response in ss(requests(raw_iterator, context), context):
                yield response

        return grpc.stream_stream_rpc_method_handler(stream_stream_gen, **kwargs)

    async def stream_stream(raw_iterator: AsyncIterator[bytes], context: Any) -> Any:
        return await ss(requests(raw_iterator, context), context)

    return grpc.stream_stream_rpc_method_handler(stream_stream, **kwargs)
