"""Replicated state of the token signing keys (Ozone's ``SecretKeyState``, RequestType.SECRET_KEY).

The leader decides (:mod:`scm_server.security.core.secret_keys`) and replicates the whole key set in one
``updateKeys`` entry; every SCM applies it into ``secretKeys`` of scm.db, in the same batch as the applied
index. So the keys are in every snapshot and checkpoint, and a new leader serves and rotates the same key
set (Ozone keeps them in a ``secret_keys.json`` beside each SCM and ships them with a bootstrap instead).
"""

from __future__ import annotations

import logging

from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha.replicate import RequestType, replicate
from scm_server.ha.state_manager import ReplicatedStateManager
from scm_server.proto.ozone import ScmSecretKeyProtocol_pb2 as wire_sk
from scm_server.security.core import secret_keys as sk

log = logging.getLogger(__name__)


class SecretKeyState(ReplicatedStateManager):
    _keys: dict[str, sk.SecretKey]

    def reinitialize(self) -> None:
        keys: dict[str, sk.SecretKey] = {}
        for key_id, proto in self._store.secret_keys.items():
            try:
                keys[key_id] = sk.SecretKey.from_proto(proto)
            except ValueError as exc:
                log.warning("secretKeys: ignoring the record under %r: %s", key_id, exc)
        self._keys = keys

    def all_keys(self) -> list[sk.SecretKey]:
        """Every key held, oldest first."""
        return sorted(self._keys.values(), key=lambda k: (k.creation_ms, k.id.int))

    def current_key(self) -> sk.SecretKey | None:
        return sk.current_key(self._keys.values())

    def get(self, key_id: str) -> sk.SecretKey | None:
        return self._keys.get(key_id)

    @replicate(RequestType.SECRET_KEY)
    def update_keys(self, keys: list[wire_sk.ManagedSecretKey]) -> None:
        """Replace the key set with ``keys`` (the newest of them is the current key)."""
        if not keys:
            raise SCMException(ResultCodes.INVALID_REQUEST, "updateKeys needs at least one secret key")
        new = {str(k.id): k for k in (sk.SecretKey.from_proto(p) for p in keys)}
        for key_id in set(self._keys) - set(new):
            self._buffer.remove_from_buffer(self._store.secret_keys, key_id)
        for key_id, key in new.items():
            self._buffer.add_to_buffer(self._store.secret_keys, key_id, key.to_proto())
        self._keys = new
