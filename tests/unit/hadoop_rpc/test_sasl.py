"""Hadoop's SASL exchange (pure state machine) and the codec around it, with a fake GSS mechanism.

The fake accepts the token ``init:<principal>`` (anything else fails as a GSS library would), answers one
mutual-authentication token, and wraps by prefixing ``E`` (encrypted) or ``I`` (integrity only).
"""

from __future__ import annotations

import os

import pytest

from scm_server import hadoop_ipc as codec
from scm_server import hadoop_sasl as sasl
from scm_server.hadoop_sasl import GssError, Qop, RpcSasl, SaslOffer, SaslRefused, SaslServer, SaslState

REALM = "EXAMPLE.COM"
ALICE = f"alice@{REALM}"
OFFER = SaslOffer(protocol="scm", server_id="scm-0.example.com")


class FakeGss:
    def __init__(self) -> None:
        self._peer = ""
        self._complete = False

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def initiator(self) -> str:
        return self._peer

    def step(self, token: bytes) -> bytes | None:
        if not token.startswith(b"init:"):
            raise GssError("Wrong principal in request")
        self._peer = token[5:].decode()
        self._complete = True
        return b"ap-rep"

    def wrap(self, data: bytes, encrypt: bool) -> bytes:
        return (b"E" if encrypt else b"I") + data

    def unwrap(self, data: bytes) -> tuple[bytes, bool]:
        if data[:1] not in (b"E", b"I"):
            raise GssError("Token header is malformed or corrupt")
        return data[1:], data[:1] == b"E"


def server(*qops: Qop) -> SaslServer:
    return SaslServer(OFFER, FakeGss, qops or (Qop.AUTHENTICATION,))


def exchange(srv: SaslServer, principal: str = ALICE, choose: int | None = None, authzid: bytes = b""):
    """Run the client's side to the end; returns the server's last answer and the Established."""
    answer, done = srv.receive(RpcSasl(state=SaslState.NEGOTIATE))
    assert answer is not None and done is None
    auth = answer.auths[0]
    answer, done = srv.receive(RpcSasl(state=SaslState.INITIATE, token=b"init:" + principal.encode(), auths=[auth]))
    assert answer is not None and answer.state == SaslState.CHALLENGE and answer.token == b"ap-rep"
    answer, done = srv.receive(RpcSasl(state=SaslState.RESPONSE, token=b""))
    assert answer is not None and answer.state == SaslState.CHALLENGE
    offered = answer.token
    assert offered[:1] == b"I", "the layer offer is integrity-protected, never encrypted"
    bits = offered[1]
    chosen = bits if choose is None else choose
    if choose is None:  # the strongest offered
        chosen = next(q.bit for q in (Qop.PRIVACY, Qop.INTEGRITY, Qop.AUTHENTICATION) if q.bit & bits)
    return srv.receive(RpcSasl(state=SaslState.RESPONSE, token=b"I" + bytes([chosen]) + offered[2:5] + authzid))


def test_negotiate_offers_kerberos_with_the_service_and_host_of_the_server_principal() -> None:
    answer, done = server().receive(RpcSasl(state=SaslState.NEGOTIATE))
    assert done is None and answer is not None
    assert answer.state == SaslState.NEGOTIATE
    assert [(a.method, a.mechanism, a.protocol, a.serverId) for a in answer.auths] == [
        ("KERBEROS", "GSSAPI", "scm", "scm-0.example.com")]


@pytest.mark.parametrize("qop", list(Qop), ids=lambda q: q.hadoop_name)
def test_the_exchange_ends_in_success_naming_the_initiator_and_the_protection(qop: Qop) -> None:
    answer, done = exchange(server(qop))
    assert answer is not None and answer.state == SaslState.SUCCESS and not answer.HasField("token")
    assert done is not None and done.principal == ALICE and done.qop is qop
    assert (done.layer is None) == (qop is Qop.AUTHENTICATION)


def test_the_offer_lists_every_configured_protection_and_the_receive_buffer() -> None:
    srv = server(Qop.PRIVACY, Qop.AUTHENTICATION)
    srv.receive(RpcSasl(state=SaslState.NEGOTIATE))
    srv.receive(RpcSasl(state=SaslState.INITIATE, token=b"init:" + ALICE.encode(), auths=[OFFER.auth()]))
    answer, _ = srv.receive(RpcSasl(state=SaslState.RESPONSE, token=b""))
    assert answer is not None
    assert answer.token == b"I" + bytes([4 | 1]) + (65536).to_bytes(3, "big")


def test_a_client_choosing_a_layer_not_offered_is_refused_naming_who_and_why() -> None:
    with pytest.raises(SaslRefused) as refused:
        exchange(server(Qop.PRIVACY), choose=Qop.AUTHENTICATION.bit)
    assert refused.value.exception_class == sasl.SASL_EXCEPTION
    assert refused.value.message == "Client selected unsupported protection: 1"
    assert refused.value.principal == ALICE and "privacy" in refused.value.reason


def test_a_gss_failure_is_refused_and_ends_the_exchange() -> None:
    srv = server()
    srv.receive(RpcSasl(state=SaslState.NEGOTIATE))
    with pytest.raises(SaslRefused) as refused:
        srv.receive(RpcSasl(state=SaslState.INITIATE, token=b"forged", auths=[OFFER.auth()]))
    assert (refused.value.message, refused.value.reason) == ("GSS initiate failed", "Wrong principal in request")
    assert refused.value.principal == ""
    with pytest.raises(SaslRefused, match="Negotiation is already complete"):
        srv.receive(RpcSasl(state=SaslState.NEGOTIATE))


def test_another_mechanism_is_refused_after_negotiate_and_renegotiated_before_it() -> None:
    token_auth = RpcSasl.SaslAuth(method="TOKEN", mechanism="DIGEST-MD5", protocol="", serverId="default")
    fresh = server()
    answer, _ = fresh.receive(RpcSasl(state=SaslState.INITIATE, token=b"x", auths=[token_auth]))
    assert answer is not None and answer.state == SaslState.NEGOTIATE  # Hadoop answers NEGOTIATE once
    with pytest.raises(SaslRefused) as refused:
        fresh.receive(RpcSasl(state=SaslState.INITIATE, token=b"x", auths=[token_auth]))
    assert refused.value.exception_class == sasl.ACCESS_CONTROL
    assert refused.value.message == "TOKEN authentication is not enabled.  Available:[KERBEROS]"


@pytest.mark.parametrize(("messages", "expected"), [
    ([RpcSasl(state=SaslState.NEGOTIATE)] * 2, "Client already attempted negotiation"),
    ([RpcSasl(state=SaslState.INITIATE, token=b"init:a@R")], "Client mechanism is malformed"),
    ([RpcSasl(state=SaslState.INITIATE, auths=[OFFER.auth()])], "Client did not send a token"),
    ([RpcSasl(state=SaslState.RESPONSE, token=b"")], "Client sent RESPONSE before INITIATE"),
    ([RpcSasl(state=SaslState.WRAP, token=b"")], "Client sent unsupported state WRAP"),
])
def test_out_of_order_or_malformed_messages_are_refused(messages: list[RpcSasl], expected: str) -> None:
    srv = server()
    with pytest.raises(SaslRefused, match=expected):
        for m in messages:
            srv.receive(m)


def test_an_authorization_id_other_than_the_principal_is_refused() -> None:
    with pytest.raises(SaslRefused, match=f"{ALICE} is not authorized to connect as bob@{REALM}"):
        exchange(server(), authzid=f"bob@{REALM}".encode())
    _, done = exchange(server(), authzid=ALICE.encode())
    assert done is not None and done.principal == ALICE


def test_hadoop_rpc_protection_is_parsed_with_one_line_for_a_bad_value() -> None:
    assert sasl.parse_protection(None) == (Qop.AUTHENTICATION,)
    assert sasl.parse_protection(" privacy, integrity ,privacy") == (Qop.PRIVACY, Qop.INTEGRITY)
    with pytest.raises(ValueError, match="'secret' is not a protection; give authentication, integrity or privacy"):
        sasl.parse_protection("privacy,secret")


def test_under_privacy_an_unencrypted_token_is_refused() -> None:
    _, done = exchange(server(Qop.PRIVACY))
    assert done is not None and done.layer is not None
    assert done.layer.unwrap(b"Edata") == b"data"
    with pytest.raises(GssError, match="not encrypted"):
        done.layer.unwrap(b"Idata")


# ---- the codec around it ----

def sasl_frames(principal: str = ALICE, chosen: int | None = None) -> list[bytes]:
    """The client's SASL frames for the fake mechanism, choosing ``chosen`` (the offer is known: 65536)."""
    return [
        codec.encode_sasl_request(RpcSasl(state=SaslState.NEGOTIATE)),
        codec.encode_sasl_request(RpcSasl(state=SaslState.INITIATE, token=b"init:" + principal.encode(),
                                          auths=[OFFER.auth()])),
        codec.encode_sasl_request(RpcSasl(state=SaslState.RESPONSE, token=b"")),
        codec.encode_sasl_request(RpcSasl(state=SaslState.RESPONSE,
                                          token=b"I" + bytes([chosen or 1]) + (65536).to_bytes(3, "big"))),
    ]


def wrapped(data: bytes, encrypt: bool = True) -> bytes:
    return codec.encode_sasl_request(RpcSasl(state=SaslState.WRAP, token=(b"E" if encrypt else b"I") + data))


def test_a_simple_client_of_a_kerberos_decoder_is_refused_with_hadoops_text() -> None:
    decoder = codec.ConnectionDecoder(sasl=server())
    (fatal,) = decoder.feed(codec.encode_preamble())
    assert isinstance(fatal, codec.Fatal)
    assert (fatal.call_id, fatal.code, fatal.exception_class, fatal.message) == (
        -1, codec.ErrorCode.FATAL_UNAUTHORIZED, codec.ACCESS_CONTROL,
        "SIMPLE authentication is not enabled.  Available:[KERBEROS]")
    assert decoder.closed


def test_the_connection_context_before_sasl_is_refused() -> None:
    decoder = codec.ConnectionDecoder(sasl=server())
    events = decoder.feed(codec.encode_preamble(codec.AUTH_SASL) + codec.encode_context(os.urandom(16), "p"))
    fatal = events[-1]
    assert isinstance(fatal, codec.Fatal) and fatal.message == "Connection header sent during SASL negotiation"


def test_under_privacy_calls_arrive_wrapped_as_a_stream_and_answers_leave_wrapped() -> None:
    decoder = codec.ConnectionDecoder(sasl=server(Qop.PRIVACY))
    events = decoder.feed(codec.encode_preamble(codec.AUTH_SASL) + b"".join(sasl_frames(chosen=4)))
    assert [type(e).__name__ for e in events] == ["Preamble", "SaslReply", "SaslReply", "SaslReply", "SaslReply",
                                                  "Authenticated"]
    cid = os.urandom(16)
    stream = codec.encode_context(cid, "proto") + codec.encode_call(0, cid, "proto", "m", b"one") + \
        codec.encode_call(1, cid, "proto", "m", b"two")
    # one token carries the context and half a call, the next the rest: frames are a stream inside the tokens
    cut = len(stream) - 10
    events = decoder.feed(wrapped(stream[:cut])) + decoder.feed(wrapped(stream[cut:]))
    assert isinstance(events[0], codec.ConnectionContext)
    calls = [e for e in events if isinstance(e, codec.Call)]
    assert [(c.call_id, c.body, c.user, c.authenticated) for c in calls] == [
        (0, b"one", ALICE, True), (1, b"two", ALICE, True)]
    sealed = decoder.seal(b"answer-frame")
    (outer,) = codec.ResponseDecoder().feed(sealed)
    message = RpcSasl()
    assert outer.body is not None
    message.ParseFromString(outer.body)
    assert outer.call_id == -33 and message.state == SaslState.WRAP and message.token == b"Eanswer-frame"
    # an unencrypted token under privacy ends the connection
    (fatal,) = decoder.feed(wrapped(codec.encode_ping(cid), encrypt=False))
    assert isinstance(fatal, codec.Fatal) and fatal.code == codec.ErrorCode.FATAL_UNAUTHORIZED


def test_an_unwrapped_call_under_integrity_is_refused() -> None:
    decoder = codec.ConnectionDecoder(sasl=server(Qop.INTEGRITY))
    decoder.feed(codec.encode_preamble(codec.AUTH_SASL) + b"".join(sasl_frames(chosen=2)))
    cid = os.urandom(16)
    decoder.feed(wrapped(codec.encode_context(cid, "proto"), encrypt=False))
    (fatal,) = decoder.feed(codec.encode_call(0, cid, "proto", "m", b"x"))
    assert isinstance(fatal, codec.Fatal) and "every frame must arrive wrapped" in fatal.message


def test_under_authentication_frames_travel_as_they_are_and_a_wrap_is_refused() -> None:
    decoder = codec.ConnectionDecoder(sasl=server())
    decoder.feed(codec.encode_preamble(codec.AUTH_SASL) + b"".join(sasl_frames()))
    cid = os.urandom(16)
    events = decoder.feed(codec.encode_context(cid, "proto", ALICE) + codec.encode_call(3, cid, "proto", "m", b"x"))
    call = events[-1]
    assert isinstance(call, codec.Call) and (call.user, call.authenticated) == (ALICE, True)
    assert decoder.seal(b"frame") == b"frame"
    (fatal,) = decoder.feed(wrapped(b"x"))
    assert isinstance(fatal, codec.Fatal) and fatal.message == "Server is not wrapping data"


def test_a_connection_context_naming_another_user_is_refused() -> None:
    decoder = codec.ConnectionDecoder(sasl=server())
    decoder.feed(codec.encode_preamble(codec.AUTH_SASL) + b"".join(sasl_frames()))
    (fatal,) = decoder.feed(codec.encode_context(os.urandom(16), "proto", f"bob@{REALM}"))
    assert isinstance(fatal, codec.Fatal)
    assert fatal.exception_class == codec.AUTHORIZATION
    assert fatal.message == f"User: {ALICE} is not allowed to impersonate bob@{REALM}"


def test_a_failed_exchange_is_one_fatal_answer_naming_the_reason_for_the_log() -> None:
    decoder = codec.ConnectionDecoder(sasl=server())
    frames = [codec.encode_sasl_request(RpcSasl(state=SaslState.NEGOTIATE)),
              codec.encode_sasl_request(RpcSasl(state=SaslState.INITIATE, token=b"forged", auths=[OFFER.auth()]))]
    events = decoder.feed(codec.encode_preamble(codec.AUTH_SASL) + b"".join(frames))
    fatal = events[-1]
    assert isinstance(fatal, codec.Fatal)
    assert (fatal.call_id, fatal.exception_class, fatal.message, fatal.reason) == (
        -33, sasl.SASL_EXCEPTION, "GSS initiate failed", "Wrong principal in request")
    assert decoder.closed
