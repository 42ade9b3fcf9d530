"""The token signing keys at run time (Ozone's ``SecretKeyManager`` + ``SecretKeyManagerService`` on SCM).

Only the leader decides: once it is leader-ready, and then every ``hdds.secret.key.rotate.check.duration``,
:meth:`SecretKeyManager.check_and_rotate` asks the pure :func:`~scm_server.security.core.secret_keys.plan`
whether the current key is due (``hdds.secret.key.rotate.duration``), makes the new key from the injected
entropy and replicates the whole set (``updateKeys``, :class:`~scm_server.ha.secret_key_state.SecretKeyState`).
Followers answer from the replicated state; a new leader continues with the keys it applied, so tokens
signed before a failover still verify after it. ``CheckAndRotate`` with ``force`` (``ozone admin scm
rotate``) rotates at once.

:func:`sign_container_token` is what the location protocol's ``GetContainerToken`` calls.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta

from scm_server.clock import Clock
from scm_server.conf.security import SecurityConfig
from scm_server.ha.scm_context import SCMContext
from scm_server.ha.scm_service import BackgroundSCMService
from scm_server.ha.secret_key_state import SecretKeyState
from scm_server.proto.ozone import hdds_pb2 as wire
from scm_server.security.core import secret_keys as sk

LOG = logging.getLogger(__name__)
SERVICE_NAME = "SecretKeyManagerService"


class SecretKeysNotInitialized(Exception):
    """No secret key has been made yet (the leader makes the first one once it is ready)."""


class SecretKeyManager:
    def __init__(
        self,
        state: SecretKeyState,
        settings: sk.Settings,
        *,
        context: SCMContext,
        clock: Clock,
        entropy: sk.Entropy,
        check_interval: timedelta,
        token_lifetime: timedelta,
    ) -> None:
        sk.check_algorithm(settings.algorithm)
        self.state = state
        self.settings = settings
        self.context = context
        self.clock = clock
        self._entropy = entropy
        self.token_lifetime = token_lifetime
        self._lock = asyncio.Lock()
        self.rotations = 0
        self.service = BackgroundSCMService(
            SERVICE_NAME, scm_context=context, clock=clock, interval=check_interval,
            run_once=self._check, run_in_safe_mode=True,
        )

    def is_initialized(self) -> bool:
        return self.state.current_key() is not None

    def current_key(self) -> sk.SecretKey:
        key = self.state.current_key()
        if key is None:
            raise SecretKeysNotInitialized("Secret key initialization is not finished yet.")
        return key

    def get(self, key_id: str) -> sk.SecretKey | None:
        return self.state.get(key_id)

    def all_keys(self) -> list[sk.SecretKey]:
        return self.state.all_keys()

    async def _check(self) -> None:
        await self.check_and_rotate()

    async def check_and_rotate(self, force: bool = False) -> bool:
        """On the leader: rotate if due (or ``force``); True if a new key was replicated. A follower raises
        :class:`~scm_server.exceptions.NotLeaderException`."""
        async with self._lock:
            self.context.check_leader()
            now = self.clock.wall_ms()
            held = self.state.all_keys()
            decision = sk.plan(held, now, self.settings, force=force)
            if not decision.rotate:
                return False
            new = sk.generate(decision.create_ms, self.settings, self._entropy)
            await self.state.update_keys([k.to_proto() for k in (*decision.keep, new)])
            self.rotations += 1
            LOG.info("secret keys: %s; the current key is now %s (%d key(s) held, %d expired dropped)",
                     decision.reason, new.id, len(decision.keep) + 1, len(held) - len(decision.keep))
            return True


def sign_container_token(
    manager: SecretKeyManager, owner: str, container_id: int, now_ms: Callable[[], int]
) -> wire.TokenProto:
    """A container token for ``owner`` on ``container_id``, signed with the current key and valid for
    ``hdds.block.token.expiry.time`` (Ozone's ``ContainerTokenGenerator``)."""
    key = manager.current_key()
    expiry = now_ms() + int(manager.token_lifetime.total_seconds() * 1000)
    return sk.container_token(key, owner, container_id, expiry)


def from_config(
    state: SecretKeyState, config: SecurityConfig, *, context: SCMContext, clock: Clock, entropy: sk.Entropy
) -> SecretKeyManager | None:
    """The manager for an SCM whose configuration turns secret keys on (security with block or container
    tokens), else None."""
    if not config.secret_keys_enabled:
        return None
    settings = sk.Settings(
        rotate=config.secret_key_rotate_duration, expiry=config.secret_key_expiry_duration,
        algorithm=config.secret_key_algorithm,
    )
    return SecretKeyManager(
        state, settings, context=context, clock=clock, entropy=entropy,
        check_interval=config.secret_key_rotate_check_duration, token_lifetime=config.block_token_expiry,
    )
