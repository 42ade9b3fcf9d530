"""Hadoop's SASL exchange on call id -33, server side, as a pure state machine: messages in, messages out.

No I/O, clock, randomness or GSSAPI library here (checked by the ``hadoop-rpc-codec-is-pure`` import
contract). The Kerberos mechanism sits behind :class:`GssAcceptor`, a small interface the edge implements
with PyPI ``gssapi`` (:mod:`scm_server.server.hadoop_rpc.kerberos`) and the unit tests with a fake, so every
step and refusal of the exchange is testable without a KDC.

The exchange, as Hadoop's ``ipc.Server`` and ``SaslRpcClient`` speak it (every message an
``RpcSaslProto`` in a frame whose request header has call id -33)::

    client NEGOTIATE                      server NEGOTIATE + auths [KERBEROS/GSSAPI, protocol, serverId]
    client INITIATE + auth + GSS token    server CHALLENGE + GSS token (mutual authentication)
    client RESPONSE (empty)               server CHALLENGE + wrap(offered layers | max buffer)
    client RESPONSE + wrap(chosen layer | max buffer [| authzid])
                                          server SUCCESS            (the caller is the GSS initiator)

The last two steps are RFC 4752's security-layer negotiation (GSSAPI SASL mechanism), what Java's
``GssKrb5Server`` does: the server offers the layers ``hadoop.rpc.protection`` lists (authentication 1,
integrity 2, privacy 4), the client picks one. Under integrity or privacy every later frame travels
wrapped (:class:`SecurityLayer`), in both directions. A client may skip NEGOTIATE and INITIATE at once;
when it names an auth the server does not offer, the server answers NEGOTIATE (once) as Hadoop does.

Every refusal raises :class:`SaslRefused` carrying the Java exception class and message Hadoop answers
(``javax.security.sasl.SaslException`` / ``org.apache.hadoop.security.AccessControlException``) and a
reason for the server's log (the GSS library's words, which the client is not told).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Protocol

from scm_server.proto.ozone import RpcHeader_pb2

RpcSasl = RpcHeader_pb2.RpcSaslProto
SaslState = RpcSasl.SaslState

SASL_EXCEPTION = "javax.security.sasl.SaslException"
ACCESS_CONTROL = "org.apache.hadoop.security.AccessControlException"

KERBEROS = "KERBEROS"
GSSAPI = "GSSAPI"
DEFAULT_MAX_BUFFER = 65536  # what Java's GssKrb5Server offers as its receive buffer (javax.security.sasl.maxbuffer)


class Qop(enum.Enum):
    """A value of ``hadoop.rpc.protection`` with its SASL name and RFC 4752 security-layer bit."""

    AUTHENTICATION = ("authentication", "auth", 1)
    INTEGRITY = ("integrity", "auth-int", 2)
    PRIVACY = ("privacy", "auth-conf", 4)

    def __init__(self, hadoop_name: str, sasl_name: str, bit: int) -> None:
        self.hadoop_name = hadoop_name
        self.sasl_name = sasl_name
        self.bit = bit

    @property
    def wraps(self) -> bool:
        return self is not Qop.AUTHENTICATION


PROTECTION_KEY = "hadoop.rpc.protection"


def parse_protection(value: str | None) -> tuple[Qop, ...]:
    """``hadoop.rpc.protection`` (comma-separated, default authentication) as the layers offered; ValueError
    with one line naming the bad value."""
    if value is None or not value.strip():
        return (Qop.AUTHENTICATION,)
    by_name = {q.hadoop_name: q for q in Qop}
    out: list[Qop] = []
    for part in value.split(","):
        name = part.strip().lower()
        if not name:
            continue
        qop = by_name.get(name)
        if qop is None:
            raise ValueError(
                f"{PROTECTION_KEY}={value!r}: {part.strip()!r} is not a protection; give authentication, integrity "
                "or privacy (comma-separated, e.g. privacy)"
            )
        if qop not in out:
            out.append(qop)
    return tuple(out) or (Qop.AUTHENTICATION,)


class GssError(Exception):
    """The GSS-API mechanism refused a token; the message is the library's reason (logged, not sent)."""


class GssAcceptor(Protocol):
    """One acceptor security context (RFC 2743), as the state machine needs it."""

    @property
    def complete(self) -> bool: ...

    @property
    def initiator(self) -> str:
        """The authenticated client principal (``name[/host]@REALM``); valid once :attr:`complete`."""
        ...

    def step(self, token: bytes) -> bytes | None:
        """Accept one context token; the token to send back (None when there is none). Raises GssError."""
        ...

    def wrap(self, data: bytes, encrypt: bool) -> bytes: ...

    def unwrap(self, data: bytes) -> tuple[bytes, bool]:
        """(the message, whether it was encrypted); raises GssError when it does not verify."""
        ...


class SaslRefused(Exception):
    """The exchange failed: answer FATAL_UNAUTHORIZED with ``exception_class``/``message`` and close.
    ``reason`` is for the log (what exactly went wrong); ``principal`` who tried ('' when the GSS context
    never named a client)."""

    def __init__(self, exception_class: str, message: str, reason: str, principal: str) -> None:
        super().__init__(message)
        self.exception_class = exception_class
        self.message = message
        self.reason = reason
        self.principal = principal


@dataclasses.dataclass(frozen=True)
class Established:
    """SASL succeeded: ``principal`` is the caller of every later call on the connection."""

    principal: str
    qop: Qop
    layer: SecurityLayer | None  # None under authentication: frames travel as they are


@dataclasses.dataclass(frozen=True)
class SaslOffer:
    """What the server advertises in its NEGOTIATE answer: Kerberos with the service and host of its principal
    (a Hadoop client checks them against the principal it expects the server to have)."""

    protocol: str  # the service part of the server principal, e.g. 'scm'
    server_id: str  # the host part, e.g. 'scm-0.example.com'

    def auth(self) -> RpcSasl.SaslAuth:
        return RpcSasl.SaslAuth(method=KERBEROS, mechanism=GSSAPI, protocol=self.protocol, serverId=self.server_id)


class _Stage(enum.Enum):
    START = "start"  # nothing received yet
    NEGOTIATED = "negotiated"  # NEGOTIATE answered
    CONTEXT = "context"  # GSS context tokens being exchanged
    OFFER = "offer"  # context complete: the next (empty) RESPONSE gets the layer offer
    CHOICE = "choice"  # the offer was sent: the next RESPONSE carries the client's choice
    DONE = "done"
    FAILED = "failed"


class SaslServer:
    """The server's side of one connection's SASL exchange. :meth:`receive` takes each RpcSaslProto the
    client sent and returns the answer to send (None: nothing) and, once, :class:`Established`."""

    def __init__(
        self,
        offer: SaslOffer,
        new_context: Callable[[], GssAcceptor],
        qops: tuple[Qop, ...],
        max_buffer: int = DEFAULT_MAX_BUFFER,
    ) -> None:
        if not qops:
            raise ValueError("at least one quality of protection must be offered")
        self.offer = offer
        self._new_context = new_context
        self.qops = qops
        self.max_buffer = max_buffer
        self._stage = _Stage.START
        self._sent_negotiate = False
        self._context: GssAcceptor | None = None

    @property
    def offered_layers(self) -> int:
        bits = 0
        for q in self.qops:
            bits |= q.bit
        return bits

    @property
    def principal(self) -> str:
        """The client principal once the GSS context named it, else ''."""
        ctx = self._context
        return ctx.initiator if ctx is not None and ctx.complete else ""

    def negotiate_answer(self) -> RpcSasl:
        return RpcSasl(state=SaslState.NEGOTIATE, auths=[self.offer.auth()])

    def receive(self, message: RpcSasl) -> tuple[RpcSasl | None, Established | None]:
        if self._stage in (_Stage.DONE, _Stage.FAILED):
            raise self._refuse(SASL_EXCEPTION, "Negotiation is already complete", "a SASL message after the end")
        try:
            return self._receive(message)
        except SaslRefused:
            self._stage = _Stage.FAILED
            raise

    def _receive(self, message: RpcSasl) -> tuple[RpcSasl | None, Established | None]:
        state = message.state
        if state == SaslState.NEGOTIATE:
            if self._sent_negotiate:
                raise self._refuse(ACCESS_CONTROL, "Client already attempted negotiation", "a second NEGOTIATE")
            self._sent_negotiate = True
            self._stage = _Stage.NEGOTIATED
            return self.negotiate_answer(), None
        if state == SaslState.INITIATE:
            if self._stage not in (_Stage.START, _Stage.NEGOTIATED):
                raise self._refuse(SASL_EXCEPTION, "Client sent INITIATE twice", "a second INITIATE")
            if len(message.auths) != 1:
                raise self._refuse(SASL_EXCEPTION, "Client mechanism is malformed",
                                   f"INITIATE names {len(message.auths)} auths, not one")
            asked = message.auths[0]
            if asked != self.offer.auth():
                if self._sent_negotiate:
                    raise self._refuse(
                        ACCESS_CONTROL, f"{asked.method} authentication is not enabled.  Available:[{KERBEROS}]",
                        f"the client asked for {asked.method}/{asked.mechanism} "
                        f"({asked.protocol}/{asked.serverId}), not what was offered",
                    )
                self._sent_negotiate = True
                self._stage = _Stage.NEGOTIATED
                return self.negotiate_answer(), None
            self._context = self._new_context()
            self._stage = _Stage.CONTEXT
            return self._token(message), None
        if state == SaslState.RESPONSE:
            if self._stage not in (_Stage.CONTEXT, _Stage.OFFER, _Stage.CHOICE):
                raise self._refuse(SASL_EXCEPTION, "Client sent RESPONSE before INITIATE", "RESPONSE out of order")
            if self._stage is _Stage.CHOICE:
                return self._choice(message)
            return self._token(message), None
        name = SaslState.Name(state) if state in SaslState.values() else str(state)
        raise self._refuse(SASL_EXCEPTION, f"Client sent unsupported state {name}", f"state {name} during SASL")

    def _token(self, message: RpcSasl) -> RpcSasl:
        if not message.HasField("token"):
            raise self._refuse(SASL_EXCEPTION, "Client did not send a token", "a SASL message without a token")
        ctx = self._context
        assert ctx is not None
        if self._stage is _Stage.OFFER:
            if message.token:
                raise self._refuse(SASL_EXCEPTION, "Final handshake step failed: Expecting no response data",
                                   "data after the context was complete")
            return self._offer(ctx)
        try:
            out = ctx.step(message.token)
        except GssError as exc:
            raise self._refuse(SASL_EXCEPTION, "GSS initiate failed", str(exc)) from exc
        if not ctx.complete:
            return RpcSasl(state=SaslState.CHALLENGE, token=out or b"")
        self._stage = _Stage.OFFER
        if out is None:  # nothing for the client to finish its side with: offer the layers at once
            return self._offer(ctx)
        return RpcSasl(state=SaslState.CHALLENGE, token=out)

    def _offer(self, ctx: GssAcceptor) -> RpcSasl:
        layer = bytes([self.offered_layers]) + self.max_buffer.to_bytes(3, "big")
        try:
            token = ctx.wrap(layer, False)
        except GssError as exc:
            raise self._refuse(SASL_EXCEPTION, "Final handshake step failed", str(exc)) from exc
        self._stage = _Stage.CHOICE
        return RpcSasl(state=SaslState.CHALLENGE, token=token)

    def _choice(self, message: RpcSasl) -> tuple[RpcSasl | None, Established | None]:
        if not message.HasField("token"):
            raise self._refuse(SASL_EXCEPTION, "Client did not send a token", "a SASL message without a token")
        ctx = self._context
        assert ctx is not None
        try:
            data, _ = ctx.unwrap(message.token)
        except GssError as exc:
            raise self._refuse(SASL_EXCEPTION, "Final handshake step failed", str(exc)) from exc
        if len(data) < 4:
            raise self._refuse(SASL_EXCEPTION, "Final handshake step failed: the client's layer choice is "
                               f"{len(data)} bytes, not at least 4", "a short layer choice")
        chosen = data[0]
        if chosen & self.offered_layers == 0:
            offered = ", ".join(q.hadoop_name for q in self.qops)
            raise self._refuse(
                SASL_EXCEPTION, f"Client selected unsupported protection: {chosen}",
                f"the client chose layer {chosen} ({_layer_names(chosen)}) but {PROTECTION_KEY} offers {offered}",
            )
        qop = next(q for q in (Qop.PRIVACY, Qop.INTEGRITY, Qop.AUTHENTICATION) if chosen & q.bit)
        peer = ctx.initiator
        if len(data) > 4:
            authzid = data[4:].decode("utf-8", "replace")
            if authzid != peer:
                raise self._refuse(SASL_EXCEPTION, f"{peer} is not authorized to connect as {authzid}",
                                   "a different authorization id")
        client_max = int.from_bytes(data[1:4], "big")
        self._stage = _Stage.DONE
        layer = SecurityLayer(ctx, qop, client_max) if qop.wraps else None
        return RpcSasl(state=SaslState.SUCCESS), Established(peer, qop, layer)

    def _refuse(self, exception_class: str, message: str, reason: str) -> SaslRefused:
        return SaslRefused(exception_class, message, reason, self.principal)


def _layer_names(bits: int) -> str:
    return "+".join(q.hadoop_name for q in Qop if bits & q.bit) or "none"


class SecurityLayer:
    """Wrapping of every frame after an integrity or privacy exchange: the client's frames arrive as
    RpcSaslProto WRAP tokens whose unwrapped bytes are a stream of ordinary frames; each answer frame
    leaves wrapped the same way. Under privacy a token that was not encrypted is refused."""

    def __init__(self, context: GssAcceptor, qop: Qop, peer_max_buffer: int) -> None:
        self.context = context
        self.qop = qop
        self.peer_max_buffer = peer_max_buffer

    def wrap(self, data: bytes) -> bytes:
        return self.context.wrap(data, self.qop is Qop.PRIVACY)

    def unwrap(self, token: bytes) -> bytes:
        """Raises GssError when the token does not verify or lacks the negotiated protection."""
        data, encrypted = self.context.unwrap(token)
        if self.qop is Qop.PRIVACY and not encrypted:
            raise GssError("a wrapped frame was not encrypted although privacy was negotiated")
        return data
