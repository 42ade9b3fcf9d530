"""SCMSecretKeyProtocol over Hadoop RPC, on the security port (Ozone's ``SecretKeyProtocolServerSideTranslatorPB``).

Ozone registers one implementation under three protocol names, one per kind of caller, so that service-level
authorization can tell them apart: ``org.apache.hadoop.hdds.protocol.SecretKeyProtocolDatanode`` (datanodes
verify tokens), ``...SecretKeyProtocolOm`` (the OM signs block tokens) and ``...SecretKeyProtocolScm`` (SCMs
and ``ozone admin scm rotate``). One method, ``submitRequest``, carries an ``SCMSecretKeyRequest``:

* ``GetCurrentSecretKey``: the key tokens are signed with now;
* ``GetSecretKey``: a key by id; an unknown (or expired and dropped) id answers a response *without* a key,
  as Ozone does, and the verifier then refuses the token ("Can't find the signing secret key ...");
* ``GetAllSecretKeys``: every key held (the unexpired ones), oldest first;
* ``CheckAndRotate``: rotate if due, or at once with ``force``; an administrator's call (``ozone.administrators``).

Only the leader answers (a follower answers ``ServerNotLeaderException`` naming the leader's security port, a
leader not ready yet ``RetriableWithNoFailoverException``), as Ozone's translator does before anything else.
Refusals are successful RPCs with ``success=false``, a ``status`` and a message: ``SECRET_KEY_NOT_ENABLED``
(no ``ozone.security.enabled`` with block or container tokens), ``SECRET_KEY_NOT_INITIALIZED`` (the leader has
not made its first key yet), ``INTERNAL_ERROR`` for the rest (an access refusal included, as Ozone answers an
``AccessControlException`` here).

Who is trusted: the caller is ``call.user``. With ``require_authentication`` only an authenticated (Kerberos)
caller gets a key; without it (an SCM whose Hadoop RPC is configured for SIMPLE authentication) the
connection's stated user is believed, as Hadoop's SIMPLE authentication does everywhere (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Collection

from scm_server.ca.secret_key_manager import SecretKeyManager, SecretKeysNotInitialized
from scm_server.exceptions import NotLeaderException
from scm_server.hadoop_ipc import Call
from scm_server.proto.ozone import ScmSecretKeyProtocol_pb2 as wire_sk
from scm_server.security.core import secret_keys as sk
from scm_server.security.core.principals import is_administrator
from scm_server.server.hadoop_rpc.leadership import Leadership
from scm_server.server.hadoop_rpc.server import parse_request

PROTOCOL_DATANODE = "org.apache.hadoop.hdds.protocol.SecretKeyProtocolDatanode"
PROTOCOL_OM = "org.apache.hadoop.hdds.protocol.SecretKeyProtocolOm"
PROTOCOL_SCM = "org.apache.hadoop.hdds.protocol.SecretKeyProtocolScm"
PROTOCOLS = (PROTOCOL_DATANODE, PROTOCOL_OM, PROTOCOL_SCM)
SERVED = frozenset({"GetCurrentSecretKey", "GetSecretKey", "GetAllSecretKeys", "CheckAndRotate"})
ADMINISTRATORS_ONLY = frozenset({"CheckAndRotate"})  # ozone.administrators only
VERSION = 1

Type = wire_sk.Type
Request = wire_sk.SCMSecretKeyRequest
Response = wire_sk.SCMSecretKeyResponse

NOT_ENABLED = "Secret keys are not enabled."
NOT_INITIALIZED = "Secret key initialization is not finished yet."


class Refusal(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class SecretKeyService:
    """The calls of SCMSecretKeyProtocol on one SCM, shared by its three protocol names.

    ``manager`` is None when secret keys are off; ``leadership`` None on an SCM without HA checks (tests)."""

    def __init__(
        self,
        manager: SecretKeyManager | None,
        leadership: Leadership | None,
        *,
        administrators: Collection[str] = (),
        require_authentication: bool = True,
    ) -> None:
        self.manager = manager
        self.leadership = leadership
        self.administrators = administrators  # a LiveAdministrators follows ozone admin reconfig
        self.require_authentication = require_authentication

    async def answer(self, call: Call) -> bytes:
        request = parse_request(call.body, Request())
        try:
            if self.leadership is not None:
                self.leadership.require_leader()
            response = Response(cmdType=request.cmdType, status=wire_sk.OK, success=True)
            if request.HasField("traceID"):
                response.traceID = request.traceID
            try:
                await self._answer(call, request, response)
            except Refusal as refusal:
                response = Response(cmdType=request.cmdType, status=refusal.status,  # type: ignore[arg-type]
                                    success=False, message=refusal.message)
                if request.HasField("traceID"):
                    response.traceID = request.traceID
            return response.SerializeToString()
        except NotLeaderException as exc:
            if self.leadership is None:
                raise
            raise self.leadership.error(exc) from exc

    async def _answer(self, call: Call, request: Request, response: Response) -> None:
        command = Type.Name(request.cmdType)
        manager = self.manager
        if manager is None:
            raise Refusal(wire_sk.SECRET_KEY_NOT_ENABLED, NOT_ENABLED)
        if self.require_authentication and not call.authenticated:
            raise Refusal(wire_sk.INTERNAL_ERROR, (
                f"{command} refused: the caller {call.user or '(no user)'} is not authenticated; secret keys are "
                "served to Kerberos-authenticated datanodes, OMs and SCMs only"))
        if command in ADMINISTRATORS_ONLY and not is_administrator(call.user, self.administrators):
            raise Refusal(wire_sk.INTERNAL_ERROR, (
                f"Access denied for user {call.user or '(no user)'}. SCM superuser privilege is required "
                "(ozone.administrators)"))
        if command == "CheckAndRotate":
            force = request.checkAndRotateRequest.force if request.HasField("checkAndRotateRequest") else False
            rotated = await manager.check_and_rotate(force)
            response.checkAndRotateResponseProto.status = rotated
            return
        if not manager.is_initialized():
            raise Refusal(wire_sk.SECRET_KEY_NOT_INITIALIZED, NOT_INITIALIZED)
        if command == "GetCurrentSecretKey":
            try:
                key = manager.current_key()
            except SecretKeysNotInitialized as exc:
                raise Refusal(wire_sk.SECRET_KEY_NOT_INITIALIZED, str(exc)) from exc
            response.currentSecretKeyResponseProto.secretKey.CopyFrom(key.to_proto())
        elif command == "GetSecretKey":
            if not request.HasField("getSecretKeyRequest"):
                raise Refusal(wire_sk.INTERNAL_ERROR, "GetSecretKey without getSecretKeyRequest (the key id)")
            key_id = sk.uuid_from_proto(request.getSecretKeyRequest.secretKeyId)
            response.getSecretKeyResponseProto.SetInParent()
            found = manager.get(str(key_id))
            if found is not None:
                response.getSecretKeyResponseProto.secretKey.CopyFrom(found.to_proto())
        elif command == "GetAllSecretKeys":
            response.secretKeysListResponseProto.SetInParent()
            response.secretKeysListResponseProto.secretKeys.extend(k.to_proto() for k in manager.all_keys())
        else:
            raise Refusal(wire_sk.INTERNAL_ERROR, f"Unknown request type: {command}")


class SecretKeyTranslator:
    """One of the three protocol names, answering through the shared :class:`SecretKeyService`."""

    version = VERSION
    methods = frozenset({"submitRequest"})

    def __init__(self, protocol: str, service: SecretKeyService) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"{protocol} is not one of Ozone's secret key protocols ({', '.join(PROTOCOLS)})")
        self.protocol = protocol
        self.service = service

    async def call(self, method: str, call: Call) -> bytes:
        return await self.service.answer(call)


def translators(service: SecretKeyService) -> list[SecretKeyTranslator]:
    return [SecretKeyTranslator(p, service) for p in PROTOCOLS]
