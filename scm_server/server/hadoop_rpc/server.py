"""The asyncio edge of Hadoop RPC: sockets around the pure codec (:mod:`.codec`).

One task reads each connection and feeds the decoder; every call runs in its own task, so many
calls are in flight per connection and are answered as they finish (out of order, by call id, as
Hadoop clients expect). A connection is closed:

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
import contextlib
import logging
import socket
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from google.protobuf import message as pb_message
from prometheus_client import CollectorRegistry, Counter, Histogram

from scm_server import hadoop_ipc as codec
from scm_server.hadoop_ipc import Call, ErrorCode

if TYPE_CHECKING:
    from scm_server.server.hadoop_rpc.kerberos import RpcSecurity

LOG = logging.getLogger(__name__)
M = TypeVar("M", bound=pb_message.Message)

MAX_IN_FLIGHT = 256  # calls running per connection before its reads pause (back-pressure)
READ_CHUNK = 64 << 10


class HadoopRpcMetrics:
    """Hadoop RPC counters in the SCM's own registry (exposed on /prom), next to the gRPC ones."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        registry = registry if registry is not None else CollectorRegistry()
        self.requests = Counter(
            "scm_hadoop_rpc_requests", "Hadoop RPC calls answered, by protocol, method and answer (SUCCESS, or "
            "the exception class of an ERROR)", ["protocol", "method", "answer"], registry=registry,
        )
        self.latency = Histogram(
            "scm_hadoop_rpc_latency_seconds", "Hadoop RPC call handling time", ["protocol", "method"],
            registry=registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.fatal = Counter(
            "scm_hadoop_rpc_fatal", "Hadoop RPC connections closed with a FATAL answer (bad preamble, frame, "
            "header or authentication)", registry=registry,
        )
        # the labelled children, looked up once per label set (``labels()`` costs a lock and a tuple per call)
        self._answered: dict[tuple[str, str, str], Any] = {}
        self._timed: dict[tuple[str, str], Any] = {}

    def answered(self, protocol: str, method: str, answer: str, seconds: float) -> None:
        """One call answered: counted by (protocol, method, answer), its handling time by (protocol, method)."""
        counter = self._answered.get((protocol, method, answer))
        if counter is None:
            counter = self._answered[(protocol, method, answer)] = self.requests.labels(protocol, method, answer)
        timer = self._timed.get((protocol, method))
        if timer is None:
            timer = self._timed[(protocol, method)] = self.latency.labels(protocol, method)
        counter.inc()
        timer.observe(seconds)


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
        self._connections: set[asyncio.Task[None]] = set()
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
        self._server = await asyncio.start_server(self._accept, bare, port, reuse_address=True)
        sock = self._server.sockets[0]
        self.port = int(sock.getsockname()[1])
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(BaseException):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self.stats["connections"] += 1
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = writer.get_extra_info("peername")
        try:
            await self._serve(reader, writer, peer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            LOG.exception("%s: connection from %s failed", self.name, peer)
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: Any) -> None:
        decoder = codec.ConnectionDecoder(
            self.max_frame, sasl=self.security.new_sasl() if self.security is not None else None
        )
        calls: set[asyncio.Task[None]] = set()
        slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        watch = _IdleWatch(self.idle_timeout, calls)
        try:
            while not decoder.closed:
                try:
                    data = await reader.read(READ_CHUNK)
                except asyncio.CancelledError:
                    if not watch.expired:
                        raise
                    watch.uncancel()
                    self.stats["idle_closed"] += 1
                    LOG.debug("%s: closing connection from %s idle for %.1fs", self.name, peer, self.idle_timeout)
                    return
                if not data:
                    return
                self.stats["received_bytes"] += len(data)
                watch.last_read = watch.loop.time()
                for event in decoder.feed(data):
                    if isinstance(event, codec.Call):
                        await slots.acquire()
                        task = asyncio.create_task(self._run(event, writer, slots, decoder.seal))
                        calls.add(task)
                        task.add_done_callback(calls.discard)
                    elif isinstance(event, codec.Fatal):
                        await self._fatal(writer, peer, event, decoder.seal)
                        return
                    elif isinstance(event, codec.SaslReply):
                        self.stats["sent_bytes"] += len(event.data)
                        writer.write(event.data)
                        with contextlib.suppress(ConnectionError):
                            await writer.drain()
                    elif isinstance(event, codec.Authenticated):
                        self.stats["authenticated"] += 1
                        LOG.debug("%s: %s authenticated as %s (%s)", self.name, peer, event.principal,
                                  event.qop.hadoop_name)
                    elif isinstance(event, codec.ConnectionContext) and decoder.principal:
                        refusal = await self._authorize(decoder.principal, event.protocol, peer)
                        if refusal is not None:
                            await self._fatal(writer, peer, refusal, decoder.seal)
                            return
                    elif isinstance(event, codec.HttpRequest):
                        LOG.warning("%s: an HTTP request from %s on a Hadoop IPC port", self.name, peer)
                        writer.write(codec.HTTP_ANSWER)
                        with contextlib.suppress(ConnectionError):
                            await writer.drain()
                        return
                    elif (
                        isinstance(event, codec.ConnectionContext)
                        and event.protocol
                        and event.protocol not in self.handlers
                    ):
                        LOG.info("%s: %s opened a connection for unserved protocol %s", self.name, peer, event.protocol)
                    # Preamble, Ping: nothing to answer; CloseRequested ends the loop (decoder.closed)
        finally:
            watch.stop()
            for task in calls:
                task.cancel()

    async def _fatal(
        self, writer: asyncio.StreamWriter, peer: Any, event: codec.Fatal, seal: Callable[[bytes], bytes] | None = None
    ) -> None:
        """Answer FATAL (wrapped when the connection wraps), log it once, and let the caller close."""
        self.stats["fatal"] += 1
        self.metrics.fatal.inc()
        if event.call_id == codec.SASL_CALL_ID:
            self.stats["authentication_failed"] += 1
        who = f" ({event.principal})" if event.principal else ""
        why = f" [{event.reason}]" if event.reason else ""
        LOG.warning("%s: closing connection from %s%s: %s%s", self.name, peer, who, event.message, why)
        answer = codec.encode_fatal(event)
        frame = seal(answer) if seal is not None else answer
        self.stats["sent_bytes"] += len(frame)
        writer.write(frame)
        with contextlib.suppress(ConnectionError):
            await writer.drain()

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

    async def _run(
        self, call: Call, writer: asyncio.StreamWriter, slots: asyncio.Semaphore, seal: Callable[[bytes], bytes] | None = None
    ) -> None:
        started = time.perf_counter()
        protocol = call.protocol if call.protocol in self.handlers else "unknown"
        method = call.method if protocol != "unknown" and call.method in self.handlers[protocol].methods else "unknown"
        try:
            self.stats["calls"] += 1
            result = "SUCCESS"
            try:
                answer = codec.encode_success(call, await self._dispatch(call))
            except RpcCallError as exc:
                self.stats["errors"] += 1
                result = exc.exception_class
                answer = codec.encode_error(call, exc.exception_class, exc.message, exc.code)
            except asyncio.CancelledError:
                result = "CANCELLED"
                raise
            except Exception as exc:
                self.stats["errors"] += 1
                result = codec.SERVER_EXCEPTION
                LOG.exception("%s: %s.%s failed", self.name, call.protocol, call.method)
                answer = codec.encode_error(
                    call, codec.SERVER_EXCEPTION, f"{type(exc).__name__}: {exc}", ErrorCode.ERROR_RPC_SERVER
                )
            finally:
                self.metrics.answered(protocol, method, result, time.perf_counter() - started)
                self.stats["answered"] += 1
            if writer.is_closing():
                return
            frame = seal(answer) if seal is not None else answer
            self.stats["sent_bytes"] += len(frame)
            writer.write(frame)
            # drain() waits only while the transport holds more than its high-water mark; an answer the socket
            # took whole leaves nothing buffered, and the usual call skips drain()'s two coroutines
            if writer.transport.get_write_buffer_size():
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
        finally:
            slots.release()

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


class _IdleWatch:
    """The idle timeout of one connection, without a timer per read: ``asyncio.wait_for`` around every read
    costs a task, a future and a timer handle per read. One timer instead fires ``idle`` seconds after the
    last read it knows of; a read since moves it on, a call in flight starts a new idle period (as
    ``wait_for`` timing out with calls in flight did), and when neither happened the connection's task is
    cancelled with :attr:`expired` set, so its read loop tells this apart from a stop of the server."""

    def __init__(self, idle: float, calls: set[asyncio.Task[None]]) -> None:
        self.loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.idle = idle
        self.calls = calls
        self.last_read = self.loop.time()
        self.expired = False
        self._handle: asyncio.TimerHandle | None = self.loop.call_at(self.last_read + idle, self._check)

    def _check(self) -> None:
        now = self.loop.time()
        due = self.last_read + self.idle
        if now < due:  # read since: wait for the rest of the period
            self._handle = self.loop.call_at(due, self._check)
            return
        if self.calls:  # idle only when nothing is in flight either: a new period
            self.last_read = now
            self._handle = self.loop.call_at(now + self.idle, self._check)
            return
        self._handle = None
        self.expired = True
        self.task.cancel()

    def uncancel(self) -> None:
        """The cancellation was ours (the connection expired), not the server's stop."""
        self.task.uncancel()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
