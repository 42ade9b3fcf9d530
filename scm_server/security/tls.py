"""gRPC transport security: credentials that follow renewals, the one channel factory, and the
server interceptor that authenticates and authorizes every call (edge).

Who calls it: the SCM daemon and the HA manager (servers: every port but the security port
demands a client certificate at the handshake), the Raft transport (through its
``TransportSecurity`` protocol), every client (``SCMClient``, ``HAAdminClient``, the datanode
client, inter-SCM calls, bootstrap) through :func:`make_channel`. It decides nothing about
certificates itself: identities and rules come from :mod:`scm_server.security.core`.

* **Renewal without restart.** A :class:`ReloadableMaterial` holds this process's key, chain and
  trust roots and a ``generation`` counter. Servers use ``grpc.dynamic_ssl_server_credentials``
  whose fetcher hands gRPC the new certificate once the generation moved (new handshakes use it;
  open connections keep theirs until they reconnect). Channel owners compare the generation they
  were built with and re-create their channels with the new client credentials.
* **Per-call checks** (:class:`AuthInterceptor`). gRPC Python has no CRL hook at the handshake,
  so each call reads the peer's certificate chain from ``context.auth_context()`` (cached per
  PEM) and refuses it if any certificate of the chain was revoked (the replicated revocation set),
  if it expired since the connection was opened, or if it names another cluster; then the
  authorization table decides. Client streams (the Raft ``Deliver`` stream, snapshots) are checked
  again on every message, so a revoked peer's open stream is cut at its next message (Raft sends
  one per heartbeat). The identity of the call is available to servicers via
  :func:`current_identity`.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import dataclasses
import inspect
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from cryptography import x509

from scm_server.conf.security import SecurityConfig
from scm_server.exceptions import ConfigError, ResultCodes
from scm_server.grpc_errors import RESULT_KEY
from scm_server.security.core import authz
from scm_server.security.core import certificates as pki
from scm_server.security.core.authz import sender_denial
from scm_server.security.core.identity import SCM_ROLE_NAME, Identity, identity_of
from scm_server.security.keystore import (
    Material,
    file_signature,
    load_certificate_file,
    load_private_key_file,
    split_chain,
)

LOG = logging.getLogger(__name__)

_CURRENT: contextvars.ContextVar[Identity | None] = contextvars.ContextVar("scm_peer_identity", default=None)


def current_identity() -> Identity | None:
    """The authenticated peer of the call being handled (None without mutual TLS)."""
    return _CURRENT.get()


# ---------------------------------------------------------------------------------------------
# material that can change at run time
# ---------------------------------------------------------------------------------------------


class ReloadableMaterial:
    """Key + chain + roots with a generation counter; :meth:`update` swaps them atomically."""

    def __init__(self, material: Material, *, scm_role_check: bool = True) -> None:
        self._material = material
        self.scm_role_check = scm_role_check
        self._generation = 1
        self._lock = threading.Lock()
        self._listeners: list[Callable[[Material], None]] = []

    @property
    def current(self) -> Material:
        return self._material

    @property
    def generation(self) -> int:
        return self._generation

    def update(self, material: Material) -> None:
        with self._lock:
            self._material = material
            self._generation += 1
        LOG.info(
            "TLS material now %s (serial %s, valid until %s)",
            material.certificate.subject.rfc4514_string(),
            material.serial_id,
            material.certificate.not_valid_after_utc.isoformat(),
        )
        for listener in list(self._listeners):
            try:
                listener(material)
            except Exception:
                LOG.exception("TLS material listener failed")

    def add_listener(self, listener: Callable[[Material], None]) -> None:
        self._listeners.append(listener)

    # ---- gRPC credentials ----
    def server_credentials(self, require_client_auth: bool = True) -> grpc.ServerCredentials:
        """Dynamic server credentials: a renewed certificate is served on the next handshake."""
        cache: dict[str, Any] = {"gen": self._generation}

        def config_for(m: Material) -> Any:
            return grpc.ssl_server_certificate_configuration(
                [(m.key_pem(), m.chain_pem(with_root=True))],
                root_certificates=m.roots_pem() if require_client_auth else None,
            )

        def fetch() -> Any:
            gen = self._generation
            if gen == cache["gen"]:
                return None
            cache["gen"] = gen
            return config_for(self._material)

        return grpc.dynamic_ssl_server_credentials(
            config_for(self._material), fetch, require_client_authentication=require_client_auth
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        m = self._material
        return grpc.ssl_channel_credentials(m.roots_pem(), m.key_pem(), m.chain_pem())


class FileClientSecurity:
    """Client identity from files (``hdds.x509.client.*`` + ``hdds.x509.rootca.certificate.file``),
    re-read when the files change (checked at most once a second), e.g. after ``cert renew``."""

    CHECK_INTERVAL = 1.0

    def __init__(self, cert_file: Path, key_file: Path, root_file: Path | None, *, scm_role_check: bool = True) -> None:
        self.cert_file, self.key_file, self.root_file = cert_file, key_file, root_file
        self.scm_role_check = scm_role_check
        self._signature = file_signature(cert_file, key_file, root_file)
        self._material = self._load()
        self._generation = 1
        self._checked = time.monotonic()
        self._credentials: grpc.ChannelCredentials | None = None

    def _load(self) -> Material:
        certs = load_certificate_file(self.cert_file, "hdds.x509.client.certificate.file")
        key = load_private_key_file(self.key_file, "hdds.x509.client.private.key.file")
        chain, embedded = split_chain(certs)
        roots = list(embedded)
        if self.root_file is not None:
            roots += load_certificate_file(self.root_file, "hdds.x509.rootca.certificate.file")
        if not chain or not pki.key_matches(chain[0], key):
            raise ConfigError(
                f"hdds.x509.client.private.key.file={self.key_file} does not match the certificate in "
                f"hdds.x509.client.certificate.file={self.cert_file}"
            )
        if not roots:
            raise ConfigError(
                "no root CA certificate to verify SCMs with: set hdds.x509.rootca.certificate.file (the cluster's "
                "root CA certificate)"
            )
        return Material(key, chain, tuple(roots))

    @property
    def material(self) -> Material:
        return self._material

    @property
    def generation(self) -> int:
        now = time.monotonic()
        if now - self._checked >= self.CHECK_INTERVAL:
            self._checked = now
            sig = file_signature(self.cert_file, self.key_file, self.root_file)
            if sig != self._signature:
                try:
                    material = self._load()
                except ConfigError as exc:
                    LOG.warning("client certificate files changed but cannot be loaded (keeping the old ones): %s", exc)
                else:
                    self._signature = sig
                    self._material = material
                    self._credentials = None
                    self._generation += 1
        return self._generation

    def channel_credentials(self) -> grpc.ChannelCredentials:
        if self._credentials is None:
            m = self._material
            self._credentials = grpc.ssl_channel_credentials(m.roots_pem(), m.key_pem(), m.chain_pem())
        return self._credentials


class StaticClientSecurity:
    """In-memory client material (tests, tools that just created a key)."""

    def __init__(self, material: Material, *, scm_role_check: bool = True) -> None:
        self.material = material
        self.generation = 1
        self.scm_role_check = scm_role_check

    def channel_credentials(self) -> grpc.ChannelCredentials:
        m = self.material
        return grpc.ssl_channel_credentials(m.roots_pem(), m.key_pem(), m.chain_pem())


ChannelSecurity = ReloadableMaterial | FileClientSecurity | StaticClientSecurity


def client_security_from_config(config: SecurityConfig) -> FileClientSecurity | None:
    """The CLI's/operator's identity under mutual TLS; None when TLS is off. A clear error when TLS
    is on but no client certificate is configured."""
    if not config.tls:
        return None
    if not config.client_identity_configured:
        raise ConfigError(
            "hdds.grpc.tls.enabled=true: this client needs a certificate; set hdds.x509.client.certificate.file and "
            "hdds.x509.client.private.key.file (and hdds.x509.rootca.certificate.file), e.g. the admin files "
            "`ozone-scm local up --secure` writes under <data-dir>/admin"
        )
    assert config.client_certificate_file and config.client_private_key_file
    return FileClientSecurity(
        Path(config.client_certificate_file), Path(config.client_private_key_file), config.rootca_certificate_path,
        scm_role_check=config.scm_role_check,
    )


NAME_OVERRIDE = "grpc.ssl_target_name_override"


def scm_channel_options(options: Sequence[tuple[str, Any]], *, role_check: bool = True) -> list[tuple[str, Any]]:
    """``options`` for a channel to an SCM port: the server must prove the SCM role at the handshake.

    gRPC Python cannot show a client the server's certificate, so the role is bound through the TLS name
    check: the certificate must carry :data:`SCM_ROLE_NAME`, which only the CA writes and only into SCM
    certificates (a datanode's certificate naming the SCM's host or 127.0.0.1 is refused). Any other name
    override in ``options`` is dropped. ``role_check=False`` (``ozone.scm.security.role.check=false``, only
    while upgrading certificates issued before role names) keeps the host-name check."""
    out = [(k, v) for k, v in options if k != NAME_OVERRIDE or not role_check]
    if role_check:
        out.append((NAME_OVERRIDE, SCM_ROLE_NAME))
    return out


def make_channel(
    address: str, security: ChannelSecurity | None, options: Sequence[tuple[str, Any]] = ()
) -> grpc.aio.Channel:
    """The one place channels to SCM ports are made: mutual TLS when ``security`` is given, plain otherwise.

    ``address`` stays an unresolved ``host:port`` (gRPC re-resolves names on reconnect, HDDS-15514); the
    server's certificate must carry the SCM role name (:func:`scm_channel_options`)."""
    if security is None:
        return grpc.aio.insecure_channel(address, options=list(options))
    opts = scm_channel_options(options, role_check=security.scm_role_check)
    return grpc.aio.secure_channel(address, security.channel_credentials(), options=opts)


class ChannelCache:
    """Channels per address that are re-created when the security generation moves (renewal)."""

    def __init__(self, security: ChannelSecurity | None, options: Sequence[tuple[str, Any]] = ()) -> None:
        self.security = security
        self.options = list(options)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._generation = security.generation if security is not None else 0
        self._closing: set[asyncio.Task[None]] = set()

    def get(self, address: str) -> grpc.aio.Channel:
        sec = self.security
        if sec is not None:
            gen = sec.generation
            if gen != self._generation:
                self._generation = gen
                old, self._channels = list(self._channels.values()), {}
                for ch in old:  # let calls in flight finish on the old credentials
                    task = asyncio.get_running_loop().create_task(ch.close(grace=30.0))
                    self._closing.add(task)
                    task.add_done_callback(self._closing.discard)
        ch = self._channels.get(address)
        if ch is None:
            ch = make_channel(address, sec, self.options)
            self._channels[address] = ch
        return ch

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for ch in channels:
            await ch.close()
        for task in list(self._closing):
            task.cancel()


# ---------------------------------------------------------------------------------------------
# per-call authentication and authorization
# ---------------------------------------------------------------------------------------------


class Denied(Exception):
    def __init__(self, code: grpc.StatusCode, result: ResultCodes, message: str) -> None:
        super().__init__(message)
        self.code, self.result, self.message = code, result, message


@dataclasses.dataclass(frozen=True)
class _Peer:
    identity: Identity
    chain_serials: tuple[str, ...]
    not_after: float
    # the peer's certificate and the non-self-signed ones of its chain (leaf first)
    chain: tuple[x509.Certificate, ...] = dataclasses.field(default=(), compare=False)
    # method -> None (allowed) or the denial message; the table and ozone.administrators are fixed
    decisions: dict[str, str | None] = dataclasses.field(default_factory=dict, compare=False)


class CallAuthenticator:
    """Reads and checks the peer certificate of a call; the rules come from the pure core."""

    CACHE_SIZE = 4096

    def __init__(
        self,
        *,
        cluster_id: Callable[[], str | None],
        is_revoked: Callable[[str], Any],
        administrators: Collection[str],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._cluster_id = cluster_id
        self.is_revoked = is_revoked
        self.administrators = frozenset(administrators)
        self._clock = clock
        self._cache: collections.OrderedDict[bytes, _Peer] = collections.OrderedDict()
        self.on_new_certificate: Callable[[x509.Certificate], None] | None = None
        # a retired SCM's sub-CA (revoked for cessationOfOperation: decommissioned, lost in a quorum
        # recovery, or of the ring a restore replaced) no longer passes as an SCM, but what it issued and
        # the ring recorded still does; see vouched_by_retired_issuer
        self.is_retired_issuer: Callable[[str], bool] = lambda _serial: False
        self.is_recorded: Callable[[x509.Certificate], bool] = lambda _cert: False
        self.refused: collections.Counter[str] = collections.Counter()  # by result code (metrics)

    def set_revocation_check(self, is_revoked: Callable[[str], Any]) -> None:
        self.is_revoked = is_revoked

    def set_retired_issuer_check(
        self, is_retired_issuer: Callable[[str], bool], is_recorded: Callable[[x509.Certificate], bool]
    ) -> None:
        self.is_retired_issuer = is_retired_issuer
        self.is_recorded = is_recorded

    def vouched_by_retired_issuer(self, peer: _Peer, issuer_serial: str) -> bool:
        """A revoked issuer in the peer's chain does not cut the peer when that issuer is a retired SCM's
        sub-CA (revoked for cessationOfOperation, not compromise) and every other certificate of the chain
        is exactly one the ring recorded when it was issued: a key taken from the retired SCM can sign new
        certificates, but none the ring recorded."""
        if not self.is_retired_issuer(issuer_serial):
            return False
        return all(self.is_recorded(c) for c in peer.chain if str(c.serial_number) != issuer_serial)

    def _peer(self, auth: dict[str, list[bytes]]) -> _Peer:
        pems = auth.get("x509_pem_cert")
        if not pems:
            raise Denied(grpc.StatusCode.UNAUTHENTICATED, ResultCodes.UNAUTHENTICATED,
                         "no client certificate: this port requires mutual TLS (hdds.grpc.tls.enabled=true)")
        pem = pems[0]
        peer = self._cache.get(pem)
        if peer is not None:
            self._cache.move_to_end(pem)
            return peer
        try:
            leaf = x509.load_pem_x509_certificate(pem)
            identity = identity_of(leaf)
        except ValueError as exc:  # includes PKIError: a certificate that contradicts its own role
            raise Denied(grpc.StatusCode.UNAUTHENTICATED, ResultCodes.UNAUTHENTICATED,
                         f"unusable client certificate: {exc}") from exc
        serials = [str(leaf.serial_number)]
        chain = [leaf]
        chain_pems = auth.get("x509_pem_cert_chain") or []
        for blob in chain_pems:
            try:
                for c in x509.load_pem_x509_certificates(blob):
                    if c.serial_number != leaf.serial_number and not pki.is_self_signed(c):
                        serials.append(str(c.serial_number))
                        chain.append(c)
            except ValueError:
                continue
        peer = _Peer(identity, tuple(dict.fromkeys(serials)), leaf.not_valid_after_utc.timestamp(), tuple(chain))
        self._cache[pem] = peer
        hook = self.on_new_certificate
        if hook is not None:
            try:
                hook(leaf)
            except Exception:
                LOG.exception("new-certificate hook failed")
        if len(self._cache) > self.CACHE_SIZE:
            self._cache.popitem(last=False)
        return peer

    def check_peer(self, peer: _Peer) -> None:
        """The checks repeated on every message of a stream: revocation, expiry."""
        for serial in peer.chain_serials:
            if self.is_revoked(serial):
                if serial != peer.identity.serial_id and self.vouched_by_retired_issuer(peer, serial):
                    continue
                which = "" if serial == peer.identity.serial_id else f" (its issuer, serial {serial})"
                raise Denied(
                    grpc.StatusCode.UNAUTHENTICATED,
                    ResultCodes.UNAUTHENTICATED,
                    f"certificate serial {peer.identity.serial_id} of {peer.identity.name}{which} has been revoked",
                )
        if self._clock() >= peer.not_after:
            raise Denied(grpc.StatusCode.UNAUTHENTICATED, ResultCodes.UNAUTHENTICATED,
                         f"certificate serial {peer.identity.serial_id} of {peer.identity.name} has expired")

    def authenticate(self, context: grpc.aio.ServicerContext[Any, Any]) -> _Peer:
        peer = self._peer(context.auth_context())
        self.check_peer(peer)
        cluster = self._cluster_id()
        ident = peer.identity
        if cluster and ident.cluster_id and ident.cluster_id != cluster:
            raise Denied(grpc.StatusCode.PERMISSION_DENIED, ResultCodes.PERMISSION_DENIED,
                         f"certificate of {ident.name} belongs to cluster {ident.cluster_id}, this SCM is in {cluster}")
        return peer

    def authorize(self, peer: _Peer, method: str) -> None:
        try:
            denial = peer.decisions[method]
        except KeyError:
            decision = authz.authorize(peer.identity, method, self.administrators)
            denial = peer.decisions[method] = None if decision.allowed else decision.reason
        if denial is not None:
            raise Denied(grpc.StatusCode.PERMISSION_DENIED, ResultCodes.PERMISSION_DENIED, denial)


async def _abort(context: grpc.aio.ServicerContext[Any, Any], denied: Denied, method: str) -> None:
    LOG.warning("refused %s: %s", method, denied.message)
    await context.abort(denied.code, f"{denied.result.value}: {denied.message}",
                        trailing_metadata=((RESULT_KEY, denied.result.value),))


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc.aio has no type stubs
    """Wraps every handler: authenticate + authorize before, re-check each message of a client stream."""

    def __init__(self, authenticator: CallAuthenticator) -> None:
        self.auth = authenticator
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:  # the registered handler of a method does not change
            return cached[1]
        wrapped = self._wrap(handler, method)
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        auth = self.auth

        async def admit(context: grpc.aio.ServicerContext[Any, Any]) -> _Peer | None:
            try:
                peer = auth.authenticate(context)
                auth.authorize(peer, method)
            except Denied as denied:
                auth.refused[denied.result.value] += 1
                await _abort(context, denied, method)
                return None
            _CURRENT.set(peer.identity)
            return peer

        async def guard(it: AsyncIterator[Any], peer: _Peer, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            async for message in it:
                try:
                    auth.check_peer(peer)
                except Denied as denied:
                    auth.refused[denied.result.value] += 1
                    await _abort(context, denied, method)
                yield message

        kwargs = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            inner_uu = handler.unary_unary

            async def unary_unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                await admit(context)
                return await inner_uu(request, context)

            return grpc.unary_unary_rpc_method_handler(unary_unary, **kwargs)
        if handler.unary_stream is not None:
            inner_us = handler.unary_stream
            if inspect.isasyncgenfunction(inner_us):

                async def unary_stream_gen(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
                    await admit(context)
                    async for response in inner_us(request, context):
                        yield response

                return grpc.unary_stream_rpc_method_handler(unary_stream_gen, **kwargs)

            async def unary_stream(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                await admit(context)
                return await inner_us(request, context)

            return grpc.unary_stream_rpc_method_handler(unary_stream, **kwargs)
        if handler.stream_unary is not None:
            inner_su = handler.stream_unary

            async def stream_unary(request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                peer = await admit(context)
                assert peer is not None
                return await inner_su(guard(request_iterator, peer, context), context)

            return grpc.stream_unary_rpc_method_handler(stream_unary, **kwargs)
        inner_ss = handler.stream_stream
        if inspect.isasyncgenfunction(inner_ss):

            async def stream_stream_gen(request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
                peer = await admit(context)
                assert peer is not None
                async for response in inner_ss(guard(request_iterator, peer, context), context):
                    yield response

            return grpc.stream_stream_rpc_method_handler(stream_stream_gen, **kwargs)

        async def stream_stream(request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            peer = await admit(context)
            assert peer is not None
            return await inner_ss(guard(request_iterator, peer, context), context)

        return grpc.stream_stream_rpc_method_handler(stream_stream, **kwargs)


# ---------------------------------------------------------------------------------------------
# what an SCM process hands to its servers, the Raft transport and its own channels
# ---------------------------------------------------------------------------------------------


class SCMTransportSecurity:
    """This SCM's TLS: its reloadable material, the call authenticator, the Raft peer filter.

    Satisfies :class:`scm_server.raft.transport.TransportSecurity` (duck-typed: Raft imports no
    SCM code)."""

    def __init__(
        self,
        material: ReloadableMaterial,
        authenticator: CallAuthenticator,
        *,
        peer_allowed: Callable[[str], bool] | None = None,
    ) -> None:
        self.material = material
        self.authenticator = authenticator
        self._peer_allowed = peer_allowed
        self._member_ids: Callable[[], dict[str, str]] = dict
        self._interceptor = AuthInterceptor(authenticator)

    @property
    def generation(self) -> int:
        return self.material.generation

    def set_peer_filter(self, peer_allowed: Callable[[str], bool]) -> None:
        self._peer_allowed = peer_allowed

    def set_member_ids(self, member_ids: Callable[[], dict[str, str]]) -> None:
        """Where :meth:`sender_denied` learns the ring: owner (scmUuid or node id) -> Raft peer id."""
        self._member_ids = member_ids

    def channel_options(self) -> Sequence[tuple[str, Any]]:
        """Raft channels to peers verify the SCM role name like every SCM client (:func:`scm_channel_options`)."""
        return scm_channel_options((), role_check=self.material.scm_role_check)

    def sender_denied(self, node_id: str) -> str | None:
        """May the caller of the current call send Raft (or inter-SCM) messages as member ``node_id``?

        Only as its own node: the certificate's owner (OU, or the role URI's owner) is the scmUuid — the Raft
        peer id — in CA modes scm/external-root, or the node id in CA mode operator. A certificate whose owner is
        a current member may send only as that member; one whose owner is no member yet (an SCM being added)
        may not use the id of a current member."""
        ident = current_identity()
        if ident is None:
            return f"no authenticated peer: Raft messages sent as {node_id} need the sender's SCM certificate"
        return sender_denial(ident, node_id, self._member_ids())

    def peer_allowed(self, node_id: str) -> bool:
        f = self._peer_allowed
        return True if f is None else f(node_id)

    def server_credentials(self) -> grpc.ServerCredentials:
        return self.material.server_credentials(require_client_auth=True)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return self.material.channel_credentials()

    def server_interceptors(self) -> Sequence[grpc.aio.ServerInterceptor]:
        return (self._interceptor,)
