"""``GetContainerToken`` of the location protocol (Ozone's ``SCMClientProtocolServer.getContainerToken``).

An administrator's client (``ozone admin container ...`` reading replicas straight from datanodes) asks SCM for
a token on one container; the token names the caller as its owner, is signed with the current secret key
(:func:`scm_server.ca.secret_key_manager.sign_container_token`) and lives ``hdds.block.token.expiry.time``.
With container tokens off (``hdds.container.token.enabled=false`` or no secret keys) Ozone's generator answers
an empty token, and so does this one. The location translator calls :func:`answer`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from scm_server.ca.secret_key_manager import SecretKeyManager, SecretKeysNotInitialized, sign_container_token
from scm_server.clock import Clock
from scm_server.hadoop_ipc import ACCESS_CONTROL
from scm_server.proto.ozone import hdds_pb2 as wire
from scm_server.security.core.principals import is_administrator
from scm_server.server.hadoop_rpc.server import RpcCallError

IO_EXCEPTION = "java.io.IOException"


@dataclasses.dataclass(frozen=True)
class ContainerTokens:
    """What signing a container token needs on one SCM (None in the translator when tokens are off)."""

    manager: SecretKeyManager
    clock: Clock
    administrators: Collection[str] = ()
    require_authentication: bool = True


def answer(tokens: ContainerTokens | None, user: str, authenticated: bool, container_id: int, *,
           admitted: bool = False) -> wire.TokenProto:
    """The token for ``user`` on ``container_id``; an RPC error (``AccessControlException``) for a caller who
    is not an administrator, or not authenticated where authentication is required. ``admitted``: the
    Kerberos authorizer has already admitted the caller to this read-only admin command (administrators and
    their groups, read-only administrators), so the name list is not asked again."""
    if tokens is None:
        return wire.TokenProto(identifier=b"", password=b"", kind="", service="")
    who = user or "(no user)"
    if tokens.require_authentication and not authenticated:
        raise RpcCallError(ACCESS_CONTROL, f"GetContainerToken refused: the caller {who} is not authenticated "
                                           "(container tokens are issued to Kerberos-authenticated administrators)")
    if not admitted and not is_administrator(user, tokens.administrators):
        raise RpcCallError(ACCESS_CONTROL, f"Access denied for user {who}. SCM superuser privilege is required "
                                           "(ozone.administrators)")
    try:
        return sign_container_token(tokens.manager, user, container_id, tokens.clock.wall_ms)
    except SecretKeysNotInitialized as exc:
        raise RpcCallError(IO_EXCEPTION, f"GetContainerToken: {exc}") from exc
