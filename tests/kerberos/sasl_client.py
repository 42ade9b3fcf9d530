"""A Hadoop IPC client that authenticates with Kerberos the way Hadoop's ``SaslRpcClient`` does, over PyPI
``gssapi``, written for the tests (it can also misbehave on purpose: choose a layer the server did not offer,
replay a captured INITIATE token, skip wrapping).

Exchange: preamble with auth protocol SASL (-33); NEGOTIATE; the server's KERBEROS auth names the service and
host of its principal; INITIATE with the first GSS token; CHALLENGE/RESPONSE until the context is complete;
the server's wrapped layer offer answered with the chosen layer; SUCCESS. Then the connection context and the
calls, wrapped under integrity/privacy as RpcSaslProto WRAP frames of call id -33.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import gssapi

from scm_server import hadoop_ipc as codec
from scm_server import hadoop_sasl
from scm_server.hadoop_sasl import Qop, RpcSasl, SaslState

TIMEOUT = 15.0


class ServerFatal(Exception):
    """The server answered FATAL and closed the connection."""

    def __init__(self, header: Any) -> None:
        super().__init__(f"{header.exceptionClassName}: {header.errorMsg}")
        self.header = header
        self.exception_class = header.exceptionClassName
        self.message = header.errorMsg


class NoCommonLayer(Exception):
    """The client's own refusal (as Java's GssKrb5Client): the server offers no layer the client accepts."""


class KerberosClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.client_id = os.urandom(16)
        self.outer = codec.ResponseDecoder()
        self.inner = codec.ResponseDecoder()
        self.pending: list[codec.Response] = []
        self.ctx: gssapi.SecurityContext | None = None
        self.qop: Qop | None = None
        self.sent_tokens: list[bytes] = []  # every SASL token sent, for replay attacks
        self._backlog: list[codec.Response] = []  # outer frames read but not consumed yet

    @classmethod
    async def open(cls, port: int) -> KerberosClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    # ---- raw frames ----

    async def _read_outer(self) -> codec.Response:
        while not self._backlog:
            data = await asyncio.wait_for(self.reader.read(65536), TIMEOUT)
            if not data:
                raise ConnectionError("the server closed the connection")
            self._backlog += self.outer.feed(data)
        return self._backlog.pop(0)

    async def sasl_receive(self) -> RpcSasl:
        response = await self._read_outer()
        if response.header.status == codec.Status.FATAL:
            raise ServerFatal(response.header)
        assert response.call_id == codec.SASL_CALL_ID, response.header
        message = RpcSasl()
        assert response.body is not None
        message.ParseFromString(response.body)
        return message

    def sasl_send(self, message: RpcSasl) -> None:
        if message.HasField("token"):
            self.sent_tokens.append(message.token)
        self.writer.write(codec.encode_sasl_request(message))

    # ---- the exchange ----

    async def authenticate(
        self,
        ccache: Path | None,
        accept: tuple[Qop, ...] = (Qop.PRIVACY, Qop.INTEGRITY, Qop.AUTHENTICATION),
        *,
        force_layer: int | None = None,
        initiate_token: bytes | None = None,
        target: str | None = None,
    ) -> Qop:
        """Run the SASL exchange; returns the negotiated protection. ``force_layer`` sends that layer byte
        whatever the server offers; ``initiate_token`` sends that (e.g. replayed) token instead of a fresh one;
        ``target`` asks a ticket for another service (``service@host``) than the one the server names."""
        self.writer.write(codec.encode_preamble(codec.AUTH_SASL))
        self.sasl_send(RpcSasl(state=SaslState.NEGOTIATE))
        offer = await self.sasl_receive()
        assert offer.state == SaslState.NEGOTIATE, offer
        auth = next(a for a in offer.auths if a.method == hadoop_sasl.KERBEROS)
        service = target or f"{auth.protocol}@{auth.serverId}"
        creds = gssapi.Credentials(usage="initiate", store={"ccache": f"FILE:{ccache}"}) if ccache else None
        flags = (
            gssapi.RequirementFlag.mutual_authentication
            | gssapi.RequirementFlag.integrity
            | gssapi.RequirementFlag.confidentiality
        )
        self.ctx = gssapi.SecurityContext(
            name=gssapi.Name(service, gssapi.NameType.hostbased_service), creds=creds, usage="initiate", flags=flags
        )
        token = initiate_token if initiate_token is not None else self.ctx.step()
        self.sasl_send(RpcSasl(state=SaslState.INITIATE, token=token, auths=[auth]))
        while True:
            answer = await self.sasl_receive()
            if answer.state == SaslState.SUCCESS:
                assert self.qop is not None
                return self.qop
            assert answer.state == SaslState.CHALLENGE, answer
            if not self.ctx.complete:
                out = self.ctx.step(answer.token)
                self.sasl_send(RpcSasl(state=SaslState.RESPONSE, token=out or b""))
                continue
            offered = self.ctx.unwrap(answer.token).message
            bits, max_buffer = offered[0], offered[1:4]
            if force_layer is not None:
                chosen = force_layer
            else:
                wanted = [q for q in accept if q.bit & bits]
                if not wanted:
                    self.writer.close()
                    raise NoCommonLayer(f"No common protection layer between client and server (offered {bits})")
                chosen = wanted[0].bit
            self.qop = next((q for q in (Qop.PRIVACY, Qop.INTEGRITY) if chosen & q.bit), Qop.AUTHENTICATION)
            reply = self.ctx.wrap(bytes([chosen]) + max_buffer, False).message
            self.sasl_send(RpcSasl(state=SaslState.RESPONSE, token=reply))

    # ---- after SASL ----

    @property
    def wrapping(self) -> bool:
        return self.qop is not None and self.qop.wraps

    def send_frame(self, frame: bytes, *, wrap: bool | None = None) -> None:
        if wrap if wrap is not None else self.wrapping:
            assert self.ctx is not None
            token = self.ctx.wrap(frame, self.qop is Qop.PRIVACY).message
            frame = codec.encode_sasl_request(RpcSasl(state=SaslState.WRAP, token=token))
        self.writer.write(frame)

    def send_context(self, protocol: str, user: str = "") -> None:
        self.send_frame(codec.encode_context(self.client_id, protocol, user))

    def send_call(self, call_id: int, protocol: str, method: str, request: Any, *, wrap: bool | None = None) -> None:
        self.send_frame(codec.encode_call(call_id, self.client_id, protocol, method, request), wrap=wrap)

    async def receive(self) -> codec.Response:
        """The next answer (unwrapped when the connection wraps); ServerFatal for a FATAL answer."""
        while not self.pending:
            response = await self._read_outer()
            if response.call_id == codec.SASL_CALL_ID and response.header.status == codec.Status.SUCCESS:
                message = RpcSasl()
                assert response.body is not None
                message.ParseFromString(response.body)
                assert message.state == SaslState.WRAP, message
                assert self.ctx is not None
                unwrapped = self.ctx.unwrap(message.token)
                if self.qop is Qop.PRIVACY:
                    assert unwrapped.encrypted, "a privacy answer must arrive encrypted"
                self.pending += self.inner.feed(unwrapped.message)
            else:
                self.pending.append(response)
        response = self.pending.pop(0)
        if response.header.status == codec.Status.FATAL:
            raise ServerFatal(response.header)
        return response

    async def call(self, call_id: int, protocol: str, method: str, request: Any) -> codec.Response:
        self.send_call(call_id, protocol, method, request)
        return await self.receive()

    async def closed_by_server(self) -> bool:
        try:
            while True:
                data = await asyncio.wait_for(self.reader.read(65536), TIMEOUT)
                if not data:
                    return True
        except ConnectionError:
            return True

    def close(self) -> None:
        self.writer.close()
