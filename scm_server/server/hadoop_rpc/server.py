"""The asyncio edge of Hadoop RPC: sockets around the pure codec (:mod:`.codec`).

Each connection is an :class:`asyncio.Protocol` that feeds the decoder what the socket delivers and serves the
events in order. A call's handler runs as soon as its frame is read, in a context of its own: a call that never
waits (a read, an answer from a cache) is answered there and then, without a task or a turn of the loop; a call
that waits (Raft, the disk) goes on in its own task. So many calls are in flight per connection and are answered
as they finish (out of order, by call id, as Hadoop clients expect). A connection is closed:

* after a FATAL answer (bad preamble, unsupported version or authentication, a malformed or
  oversized frame): the FATAL response is written first; other connections are untouched;
* when the client asks (RPC_CLOSE_CONNECTION) or goes away; its running calls are then cancelled;
* when it has been idle for ``idle_timeout`` seconds with no call in flight (Hadoop's server closes
  idle connections after twice ``ipc.client.connection.maxidletime``).

With Kerberos (an :class:`RpcSecurity`, :mod:`.kerberos`) each connection first runs Hadoop's SASL exchange
(the decoder drives the pure state machine; its answers are written here); a failed exchange is answered
FATAL and logged once with the principal and the reason. When the connection context names its protocol the
service-level authorization (:mod:`.authorization`) is checked; a refusal is FATAL ``AuthorizationException``.
Under integrity or privacy every answer leaves wrapped (``decoder.seal``).

Calls are served by *protocol handlers* (one per Hadoop protocol name, e.g. the block translator).
An unknown protocol, method or protocol version answers the Hadoop error a Java client maps to
``RpcNoSuchProtocolException``, ``RpcNoSuchMethodException`` or ``RPC.VersionMismatch``.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import contextvars
import logging
import socket
import time
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from google.protobuf import message as pb_message
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from scm_server import hadoop_ipc as codec
from scm_server.hadoop_ipc import Call, ErrorCode

if TYPE_CHECKING:
    from scm_server.server.hadoop_rpc.kerberos import RpcSecurity

LOG = logging.getLogger(__name__)
M = TypeVar("M", bound=pb_message.Message)
T = TypeVar("T")

MAX_IN_FLIGHT = 256  # calls running per connection before its reads pause (back-pressure)


class HadoopRpcMetrics(Collector):
    """Hadoop RPC counters in the SCM's own registry (exposed on /prom), next to the gRPC ones:
    ``scm_hadoop_rpc_requests_total{protocol,method,answer}`` (answer: SUCCESS, or the exception class of an ERROR),
    ``scm_hadoop_rpc_latency_seconds{protocol,method}`` (a histogram) and ``scm_hadoop_rpc_fatal_total``.

    Kept as plain numbers and written out by :meth:`collect` when scraped: prometheus_client's labelled
    ``Counter.inc`` and ``Histogram.observe`` take a lock and several Python calls each, on every call answered."""

    BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.answers: dict[tuple[str, str, str], int] = {}
        # (protocol, method) -> [count in each bucket and past the last..., sum of the seconds]
        self.timings: dict[tuple[str, str], list[float]] = {}
        self.fatal = 0
        if registry is not None:
            registry.register(self)

    def answered(self, protocol: str, method: str, answer: str, seconds: float) -> None:
        """One call answered: counted by (protocol, method, answer), its handling time by (protocol, method)."""
        key = (protocol, method, answer)
        self.answers[key] = self.answers.get(key, 0) + 1
        timing = self.timings.get((protocol, method))
        if timing is None:
            timing = self.timings[(protocol, method)] = [0.0] * (len(self.BUCKETS) + 2)
        timing[bisect.bisect_left(self.BUCKETS, seconds)] += 1  # the first bucket whose bound is >= seconds
        timing[-1] += seconds

    def fatal_answered(self) -> None:
        self.fatal += 1

    def requests(self, protocol: str, method: str, answer: str) -> int:
        """Calls answered so far with ``answer``."""
        return self.answers.get((protocol, method, answer), 0)

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "scm_hadoop_rpc_requests", "Hadoop RPC calls answered, by protocol, method and answer (SUCCESS, or "
            "the exception class of an ERROR)", labels=["protocol", "method", "answer"])
        for answer_labels, count in list(self.answers.items()):
            requests.add_metric(list(answer_labels), count)
        latency = HistogramMetricFamily(
            "scm_hadoop_rpc_latency_seconds", "Hadoop RPC call handling time", labels=["protocol", "method"])
        for call_labels, timing in list(self.timings.items()):
            cumulative, buckets = 0.0, []
            for bound, seen in zip(_BOUNDS, timing[:-1], strict=True):
                cumulative += seen
                buckets.append((bound, cumulative))
            latency.add_metric(list(call_labels), buckets, timing[-1])
        fatal = CounterMetricFamily(
            "scm_hadoop_rpc_fatal", "Hadoop RPC connections closed with a FATAL answer (bad preamble, frame, "
            "header or authentication)")
        fatal.add_metric([], self.fatal)
        yield from (requests, latency, fatal)


_BOUNDS = (*(repr(float(b)) for b in HadoopRpcMetrics.BUCKETS), "+Inf")  # the le labels, as Prometheus writes them


class RpcCallError(Exception):
    """A call failed: answered as an ERROR naming ``exception_class`` (the connection stays open)."""

    def __init__(self, exception_class: str, message: str, code: int = ErrorCode.ERROR_APPLICATION) -> None:
        super().__init__(message)
        self.exception_class = exception_class
        self.message = message
        self.code = code


IO_EXCEPTION = "java.io.IOException"


def parse_request(body: bytes, request: M) -> M:
    """``request`` filled from a call's ``body``. A body that does not parse, or lacks a required field, is an RPC
    ERROR (``java.io.IOException``, the connection stays open) naming the message, as a Java server answers it."""
    name = type(request).__name__
    try:
        request.ParseFromString(body)
    except pb_message.DecodeError as exc:
        raise RpcCallError(IO_EXCEPTION, f"malformed {name}: {exc}", ErrorCode.ERROR_RPC_SERVER) from exc
    missing = request.FindInitializationErrors()  # type: ignore[attr-defined]
    if missing:
        raise RpcCallError(IO_EXCEPTION, f"{name} lacks required field(s) {', '.join(missing)}", ErrorCode.ERROR_RPC_SERVER)
    return request


class ProtocolHandler(Protocol):
    protocol: str  # the Hadoop protocol name (@ProtocolInfo protocolName)
    version: int
    methods: frozenset[str]

    async def call(self, method: str, call: Call) -> bytes | pb_message.Message: ...


class HadoopRpcServer:
    """Serves ``handlers`` on one TCP port."""

    def __init__(
        self,
        handlers: Iterable[ProtocolHandler],
        *,
        max_frame: int = codec.DEFAULT_MAX_FRAME,
        idle_timeout: float = 20.0,
        name: str = "hadoop-rpc",
        metrics: HadoopRpcMetrics | None = None,
        security: RpcSecurity | None = None,
        server_name: str = "",
    ) -> None:
        if idle_timeout <= 0:
            raise ValueError(f"idle_timeout must be positive, got {idle_timeout}")
        self.handlers = {h.protocol: h for h in handlers}
        self.max_frame = max_frame
        self.idle_timeout = idle_timeout
        self.name = name
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[_Connection] = set()
        # also Hadoop's RpcMetrics of the port (RpcActivityForPort<port> on /jmx and /prom: :meth:`activity`)
        self.stats = {"connections": 0, "calls": 0, "answered": 0, "errors": 0, "fatal": 0, "idle_closed": 0,
                      "received_bytes": 0, "sent_bytes": 0, "authenticated": 0, "authentication_failed": 0,
                      "authorized": 0, "authorization_refused": 0}
        self.server_name = server_name  # Hadoop's serverName tag: the protocol's protobuf service
        self.port = 0
        self.metrics = metrics if metrics is not None else HadoopRpcMetrics(None)
        self.security = security

    async def start(self, host: str, port: int) -> int:
        """Listen on host:port; returns the bound port (port 0: any free port). An IPv6 host may be written in
        brackets, as the address keys write it (``[::]``, ``[::1]``): the socket layer wants it bare."""
        bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), bare, port, reuse_address=True)
        sock = self._server.sockets[0]
        self.port = int(sock.getsockname()[1])
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        connections = list(self._connections)
        for connection in connections:
            connection.close()
        for connection in connections:
            await connection.closed()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    def _fatal(self, connection: _Connection, event: codec.Fatal) -> None:
        """Answer FATAL (wrapped when the connection wraps) and log it once; the caller closes."""
        self.stats["fatal"] += 1
        self.metrics.fatal_answered()
        if event.call_id == codec.SASL_CALL_ID:
            self.stats["authentication_failed"] += 1
        who = f" ({event.principal})" if event.principal else ""
        why = f" [{event.reason}]" if event.reason else ""
        LOG.warning("%s: closing connection from %s%s: %s%s", self.name, connection.peer, who, event.message, why)
        connection.send(codec.encode_fatal(event))

    async def _authorize(self, principal: str, protocol: str, peer: Any) -> codec.Fatal | None:
        """Service-level authorization of a Kerberos connection for ``protocol`` (None: allowed)."""
        assert self.security is not None
        authorizer = self.security.authorizer
        host = None
        if authorizer.client_principal_needs_host(protocol) and isinstance(peer, tuple):
            host = await _canonical_peer_name(str(peer[0]))
        refusal = authorizer.connection(principal, protocol, host)
        self.stats["authorized" if refusal is None else "authorization_refused"] += 1
        if refusal is None:
            return None
        return codec.Fatal(
            codec.CONNECTION_CONTEXT_CALL_ID, ErrorCode.FATAL_UNAUTHORIZED, refusal.exception_class,
            refusal.message, reason="service-level authorization (hadoop.security.authorization)",
            principal=principal,
        )

    def _begin(self, call: Call, connection: _Connection) -> asyncio.Task[None] | None:
        """Serve ``call``: its handler runs at once, in a context of its own (a call's context variables, such
        as the client call a replicated write is made for, never reach another call), up to its first wait; a
        call that never waits (most reads, and every answer from a cache) is answered here, without a task or a
        turn of the loop. One that waits goes on in a task of its own (returned) in the same context."""
        self.stats["calls"] += 1
        context = contextvars.copy_context()
        coro = self._serve_call(call, connection, time.perf_counter())
        if _EAGER_TASKS is not None:  # Python 3.12+: the loop's own eager start (current_task() is the call's)
            task = _EAGER_TASKS(asyncio.get_running_loop(), coro, context=context)
            return None if task.done() else task
        try:
            waiting = context.run(coro.send, None)
        except StopIteration:
            return None
        return asyncio.get_running_loop().create_task(_go_on(coro, waiting), context=context)

    async def _serve_call(self, call: Call, connection: _Connection, started: float) -> None:
        """Dispatch ``call`` and write its answer, whatever the handler did."""
        try:
            result = await self._dispatch(call)
        except asyncio.CancelledError:
            self.metrics.answered(*self._labels(call), "CANCELLED", time.perf_counter() - started)
            self.stats["answered"] += 1
            raise
        except Exception as exc:
            self._answer(call, connection, started, None, exc)
        else:
            self._answer(call, connection, started, result, None)

    def _labels(self, call: Call) -> tuple[str, str]:
        protocol = call.protocol if call.protocol in self.handlers else "unknown"
        method = call.method if protocol != "unknown" and call.method in self.handlers[protocol].methods else "unknown"
        return protocol, method

    def _answer(
        self, call: Call, connection: _Connection, started: float, result: bytes | pb_message.Message | None,
        error: Exception | None,
    ) -> None:
        """Write the answer of ``call``: SUCCESS with ``result``, or the ERROR ``error`` maps to; counted and
        timed either way. A :class:`RpcCallError` is the answer it names; any other exception is logged and
        answered as Hadoop's server exception, the connection staying open."""
        if error is None:
            assert result is not None
            outcome = "SUCCESS"
            answer = codec.encode_success(call, result)
        elif isinstance(error, RpcCallError):
            self.stats["errors"] += 1
            outcome = error.exception_class
            answer = codec.encode_error(call, error.exception_class, error.message, error.code)
        else:
            self.stats["errors"] += 1
            outcome = codec.SERVER_EXCEPTION
            LOG.error("%s: %s.%s failed", self.name, call.protocol, call.method, exc_info=error)
            answer = codec.encode_error(
                call, codec.SERVER_EXCEPTION, f"{type(error).__name__}: {error}", ErrorCode.ERROR_RPC_SERVER
            )
        self.metrics.answered(*self._labels(call), outcome, time.perf_counter() - started)
        self.stats["answered"] += 1
        connection.send(answer)

    def activity(self) -> dict[str, int]:
        """Hadoop's ``RpcMetrics`` of this port that this server keeps, under Hadoop's attribute names: open
        connections, bytes received and sent (frames, SASL included), calls answered, SASL authentications and
        service-level authorizations (Kerberos only) that succeeded and failed."""
        stats = self.stats
        return {
            "NumOpenConnections": len(self._connections),
            "ReceivedBytes": stats["received_bytes"],
            "SentBytes": stats["sent_bytes"],
            "RpcProcessingTimeNumOps": stats["answered"],
            "RpcAuthenticationSuccesses": stats["authenticated"],
            "RpcAuthenticationFailures": stats["authentication_failed"],
            "RpcAuthorizationSuccesses": stats["authorized"],
            "RpcAuthorizationFailures": stats["authorization_refused"],
        }

    async def _dispatch(self, call: Call) -> bytes | pb_message.Message:
        handler = self.handlers.get(call.protocol)
        if handler is None:
            raise RpcCallError(
                codec.NO_SUCH_PROTOCOL,
                f"Unknown protocol: {call.protocol} (this SCM serves {', '.join(sorted(self.handlers)) or 'none'})",
                ErrorCode.ERROR_NO_SUCH_PROTOCOL,
            )
        if call.client_version != handler.version:
            raise RpcCallError(
                codec.VERSION_MISMATCH,
                f"Protocol {call.protocol} version mismatch. (client = {call.client_version}, "
                f"server = {handler.version})",
                ErrorCode.ERROR_RPC_VERSION_MISMATCH,
            )
        if call.method not in handler.methods:
            raise RpcCallError(
                codec.NO_SUCH_METHOD,
                f"Unknown method {call.method} called on {call.protocol} protocol.",
                ErrorCode.ERROR_NO_SUCH_METHOD,
            )
        return await handler.call(call.method, call)


async def _canonical_peer_name(address: str) -> str:
    """The peer's host name by reverse lookup (Hadoop's ``_HOST`` of a client principal), lowercased; the
    address itself when it has no name."""
    loop = asyncio.get_running_loop()
    try:
        name, _ = await loop.getnameinfo((address, 0), socket.NI_NAMEREQD)
    except OSError:
        return address
    return str(name).lower()


class _Connection(asyncio.Protocol):
    """One client connection: bytes in, the decoder's events served in order as they arrive.

    A call starts as soon as its frame is read (:meth:`HadoopRpcServer._begin`): most are answered before this
    returns, the rest go on in tasks of their own, answered as they finish. Only two things wait, and reading
    pauses while they do, so that the events after them keep their order: a Kerberos connection's service-level
    authorization (it may look up the peer's name), and a call beyond ``MAX_IN_FLIGHT`` running ones. Reading
    also pauses while the socket does not take the answers (the client does not read them), and the connection
    is closed after a FATAL answer, at the client's request (RPC_CLOSE_CONNECTION), when the client goes away
    (its running calls are then cancelled), or after ``idle_timeout`` seconds with neither a read nor a call in
    flight (Hadoop's server closes idle connections after twice ``ipc.client.connection.maxidletime``)."""

    def __init__(self, server: HadoopRpcServer) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.decoder = codec.ConnectionDecoder(
            server.max_frame, sasl=server.security.new_sasl() if server.security is not None else None
        )
        self.transport: asyncio.Transport | None = None
        self.peer: Any = None
        self.calls: set[asyncio.Task[None]] = set()
        self.last_read = self.loop.time()
        self._idle: asyncio.TimerHandle | None = None
        self._waiting: asyncio.Task[None] | None = None  # the events being served after something that waits
        self._backlog: list[codec.Event] = []  # events read meanwhile (reading is paused: none, as a rule)
        self._write_paused = False
        self._lost = self.loop.create_future()

    # ---- asyncio.Protocol ----

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's TCPTransport does not subclass it
        self.peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server._connections.add(self)
        self.server.stats["connections"] += 1
        self._idle = self.loop.call_at(self.last_read + self.server.idle_timeout, self._check_idle)

    def data_received(self, data: bytes) -> None:
        self.server.stats["received_bytes"] += len(data)
        self.last_read = self.loop.time()
        try:
            events = self.decoder.feed(data)
            if self._waiting is not None:  # served after what waits, in order
                self._backlog.extend(events)
                return
            self._serve(events)
        except Exception:
            LOG.exception("%s: connection from %s failed", self.server.name, self.peer)
            self.close()

    def eof_received(self) -> bool:
        return False  # the client is done: close

    def connection_lost(self, exc: Exception | None) -> None:
        self.server._connections.discard(self)
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        for task in list(self.calls):
            task.cancel()
        if self._waiting is not None:
            self._waiting.cancel()
        if not self._lost.done():
            self._lost.set_result(None)

    def pause_writing(self) -> None:  # the socket does not take the answers: read no more calls meanwhile
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    # ---- what the server calls ----

    def send(self, frame: bytes) -> None:
        """Write one answer frame (wrapped when the connection negotiated integrity or privacy)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        frame = self.decoder.seal(frame)
        self.server.stats["sent_bytes"] += len(frame)
        transport.write(frame)

    def close(self) -> None:
        """Close after what was written leaves; running calls are cancelled when the connection is gone."""
        if self.transport is not None:
            self.transport.close()

    async def closed(self) -> None:
        await asyncio.shield(self._lost)

    # ---- events ----

    def _serve(self, events: list[codec.Event], start: int = 0) -> None:
        """Serve ``events[start:]`` in order; at the first that must wait, the rest go on in a task."""
        server = self.server
        for i in range(start, len(events)):
            event = events[i]
            if isinstance(event, codec.Call):
                if len(self.calls) >= MAX_IN_FLIGHT:  # back-pressure: no more calls until one finishes
                    self._wait_then_serve(events, i, asyncio.wait(self.calls, return_when=asyncio.FIRST_COMPLETED))
                    return
                task = server._begin(event, self)
                if task is not None:
                    self.calls.add(task)
                    task.add_done_callback(self.calls.discard)
            elif isinstance(event, codec.Fatal):
                server._fatal(self, event)
                self.close()
                return
            elif isinstance(event, codec.SaslReply):
                server.stats["sent_bytes"] += len(event.data)
                assert self.transport is not None
                self.transport.write(event.data)
            elif isinstance(event, codec.Authenticated):
                server.stats["authenticated"] += 1
                LOG.debug("%s: %s authenticated as %s (%s)", server.name, self.peer, event.principal,
                          event.qop.hadoop_name)
            elif isinstance(event, codec.ConnectionContext) and self.decoder.principal:
                self._wait_then_serve(events, i + 1, self._authorized(event.protocol))
                return
            elif isinstance(event, codec.HttpRequest):
                LOG.warning("%s: an HTTP request from %s on a Hadoop IPC port", server.name, self.peer)
                assert self.transport is not None
                self.transport.write(codec.HTTP_ANSWER)
                self.close()
                return
            elif isinstance(event, codec.ConnectionContext) and event.protocol and event.protocol not in server.handlers:
                LOG.info("%s: %s opened a connection for unserved protocol %s", server.name, self.peer, event.protocol)
            # Preamble, Ping: nothing to answer; CloseRequested: the decoder is closed, see below
        if self.decoder.closed:
            self.close()

    def _wait_then_serve(self, events: list[codec.Event], rest: int, wait: Awaitable[Any]) -> None:
        """Pause reading, wait for ``wait``, then serve ``events[rest:]`` and read on."""

        async def then() -> None:
            me = asyncio.current_task()
            try:
                if await wait is False:  # a refused authorization: answered, closed
                    return
                pending, self._backlog = events[rest:] + self._backlog, []
                self._waiting = None
                self._update_reading()
                self._serve(pending)
            except asyncio.CancelledError:
                pass
            except Exception:
                LOG.exception("%s: connection from %s failed", self.server.name, self.peer)
                self.close()
            finally:
                if self._waiting is me:  # not a later wait that serving the rest started
                    self._waiting = None

        self._waiting = self.loop.create_task(then())
        self._update_reading()

    async def _authorized(self, protocol: str) -> bool:
        refusal = await self.server._authorize(self.decoder.principal, protocol, self.peer)
        if refusal is None:
            return True
        self.server._fatal(self, refusal)
        self.close()
        return False

    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self._write_paused or self._waiting is not None:
            if transport.is_reading():
                transport.pause_reading()
        elif not transport.is_reading():
            transport.resume_reading()

    def _check_idle(self) -> None:
        """The idle timeout without a timer per read: the timer fires ``idle_timeout`` after the last read it
        knows of; a read since moves it on, a call in flight starts a new period, else the connection closes."""
        now = self.loop.time()
        idle = self.server.idle_timeout
        due = self.last_read + idle
        if now < due:  # read since: wait for the rest of the period
            self._idle = self.loop.call_at(due, self._check_idle)
            return
        if self.calls or self._waiting is not None:  # idle only when nothing is in flight either
            self.last_read = now
            self._idle = self.loop.call_at(now + idle, self._check_idle)
            return
        self._idle = None
        self.server.stats["idle_closed"] += 1
        LOG.debug("%s: closing connection from %s idle for %.1fs", self.server.name, self.peer, idle)
        self.close()


# Python 3.12's eager task factory, when there is one; 3.11 starts a call by hand (:meth:`HadoopRpcServer._begin`)
_EAGER_TASKS: Callable[..., asyncio.Task[None]] | None = getattr(asyncio, "eager_task_factory", None)


async def _go_on(coro: Coroutine[Any, Any, None], waiting: Any) -> None:
    await _resume(coro, waiting)


@types.coroutine
def _resume(coro: Coroutine[Any, Any, T], waiting: Any) -> Generator[Any, Any, T]:
    """Go on driving ``coro``, which has already run up to yielding ``waiting`` (what ``yield from`` would
    do, had ``coro`` been awaited from its start): the task this runs in waits on ``waiting`` first, and what
    the task sends or throws in (a result, a cancellation) goes to ``coro``."""
    while True:
        try:
            sent = yield waiting
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # a cancellation (or anything thrown in): it is the coroutine's to handle
            try:
                waiting = coro.throw(exc)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
        else:
            try:
                waiting = coro.send(sent)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
