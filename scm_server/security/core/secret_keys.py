"""Symmetric secret keys that sign Ozone's block and container tokens, and the tokens themselves: pure.

Ozone's SCM generates these keys (``SecretKeyManager``), replicates them through Raft
(``SecretKeyState.updateKeys``) and hands them to the OM (which signs block tokens) and to the datanodes
(which verify them) over ``SCMSecretKeyProtocol``. This module holds every decision about them, as
functions of (keys, now, settings) with the randomness passed in, so that a test can replay any rotation:

* :func:`plan` answers what the leader should do now: nothing, make the first key, or rotate (a new
  current key, the expired ones dropped). The caller makes the new key with :func:`generate` from its
  own entropy and replicates the result.
* :func:`current_key` is the newest key (by creation time), as Ozone's state picks it.
* :func:`sign` / :func:`valid_signature`: HMAC of a token identifier with a key's algorithm
  (``HmacSHA256`` by default, ``hdds.secret.key.algorithm``), as ``ManagedSecretKey.sign`` does.
* :func:`container_token` builds the token ``GetContainerToken`` answers (Ozone's
  ``ContainerTokenIdentifier``: a ``ContainerTokenSecretProto`` signed with the current key, kind
  ``HDDS_CONTAINER_TOKEN``, service ``#<containerID>``); :func:`verify_container_token` is the check a
  datanode makes before it serves the token's holder (``ShortLivedTokenVerifier``), with Ozone's messages.

Times are epoch milliseconds, as on the wire (``ManagedSecretKey.creationTime``/``expiryTime``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta

from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import ScmSecretKeyProtocol_pb2 as wire_sk
from scm_server.proto.ozone import hdds_pb2 as wire

# JCE algorithm name -> (hashlib digest, the key length in bytes Java's KeyGenerator makes by default)
ALGORITHMS: Mapping[str, tuple[str, int]] = {
    "HmacSHA1": ("sha1", 64),
    "HmacSHA224": ("sha224", 28),
    "HmacSHA256": ("sha256", 32),
    "HmacSHA384": ("sha384", 48),
    "HmacSHA512": ("sha512", 64),
}
CONTAINER_TOKEN_KIND = "HDDS_CONTAINER_TOKEN"

Entropy = Callable[[int], bytes]  # n random bytes (os.urandom at the edge, a seeded source in tests)


class TokenInvalid(Exception):
    """A token a datanode must refuse; the message is Ozone's ``BlockTokenException`` text."""


@dataclasses.dataclass(frozen=True)
class SecretKey:
    """One key (Ozone's ``ManagedSecretKey``)."""

    id: uuid.UUID
    creation_ms: int
    expiry_ms: int
    algorithm: str
    encoded: bytes

    def __repr__(self) -> str:  # never print the key bytes
        return f"SecretKey(id={self.id}, created={self.creation_ms}, expires={self.expiry_ms}, {self.algorithm})"

    def is_expired(self, now_ms: int) -> bool:
        return now_ms > self.expiry_ms

    def to_proto(self) -> wire_sk.ManagedSecretKey:
        return wire_sk.ManagedSecretKey(
            id=uuid_to_proto(self.id),
            creationTime=self.creation_ms,
            expiryTime=self.expiry_ms,
            algorithm=self.algorithm,
            encoded=self.encoded,
        )

    @classmethod
    def from_proto(cls, proto: wire_sk.ManagedSecretKey) -> SecretKey:
        return cls(uuid_from_proto(proto.id), proto.creationTime, proto.expiryTime, proto.algorithm, proto.encoded)


@dataclasses.dataclass(frozen=True)
class Settings:
    """``hdds.secret.key.rotate.duration``, ``hdds.secret.key.expiry.duration``, ``hdds.secret.key.algorithm``."""

    rotate: timedelta = timedelta(days=1)
    expiry: timedelta = timedelta(days=9)
    algorithm: str = "HmacSHA256"


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the leader does now. ``keep`` are the keys that stay (the unexpired ones); ``rotate`` says a
    new current key must be made at ``create_ms`` and added to them; ``reason`` says why, in a line for the log.
    ``create_ms`` is now, or one millisecond after the newest key held if that is later (a forced rotation
    within the same millisecond, a clock stepped back), so that the new key is always the current one."""

    rotate: bool
    keep: tuple[SecretKey, ...]
    reason: str
    create_ms: int = 0


def uuid_to_proto(value: uuid.UUID) -> wire.UUID:
    most, least = value.int >> 64, value.int & ((1 << 64) - 1)
    return wire.UUID(mostSigBits=_signed(most), leastSigBits=_signed(least))


def uuid_from_proto(proto: wire.UUID) -> uuid.UUID:
    return uuid.UUID(int=((proto.mostSigBits & ((1 << 64) - 1)) << 64) | (proto.leastSigBits & ((1 << 64) - 1)))


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def check_algorithm(algorithm: str) -> None:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"hdds.secret.key.algorithm={algorithm}: use one of {', '.join(ALGORITHMS)}")


def generate(now_ms: int, settings: Settings, entropy: Entropy) -> SecretKey:
    """A new key created now, valid for ``settings.expiry``; its id is a random (version 4) UUID."""
    check_algorithm(settings.algorithm)
    _, length = ALGORITHMS[settings.algorithm]
    key_id = uuid.UUID(bytes=entropy(16), version=4)
    expiry_ms = now_ms + int(settings.expiry.total_seconds() * 1000)
    return SecretKey(key_id, now_ms, expiry_ms, settings.algorithm, entropy(length))


def current_key(keys: Iterable[SecretKey]) -> SecretKey | None:
    """The newest key (the latest creation time; the id breaks a tie so every SCM picks the same one)."""
    return max(keys, key=lambda k: (k.creation_ms, k.id.int), default=None)


def plan(keys: Sequence[SecretKey], now_ms: int, settings: Settings, *, force: bool = False) -> Plan:
    """Ozone's ``SecretKeyManager.checkAndRotate``: rotate when the current key is at least
    ``settings.rotate`` old (or ``force``, ``ozone admin scm rotate``), or when there is no unexpired key
    at all (the first start, or a ring that was down longer than the expiry); expired keys are dropped
    whenever the key set is rewritten."""
    alive = tuple(sorted((k for k in keys if not k.is_expired(now_ms)), key=lambda k: (k.creation_ms, k.id.int)))
    current = current_key(keys)
    if current is None:
        return Plan(True, alive, "no secret key yet: generating the first one", now_ms)
    create_ms = max(now_ms, current.creation_ms + 1)
    if current.is_expired(now_ms):
        return Plan(True, alive, f"the current secret key {current.id} has expired: generating a new one", create_ms)
    age_ms = now_ms - current.creation_ms
    if force:
        return Plan(True, alive, f"rotation forced (the current secret key {current.id} is {age_ms} ms old)",
                    create_ms)
    if age_ms >= settings.rotate.total_seconds() * 1000:
        return Plan(True, alive, f"the current secret key {current.id} is {age_ms} ms old, at least "
                                 f"hdds.secret.key.rotate.duration ({settings.rotate})", create_ms)
    return Plan(False, tuple(keys), "")


def sign(key: SecretKey, data: bytes) -> bytes:
    check_algorithm(key.algorithm)
    return hmac.new(key.encoded, data, getattr(hashlib, ALGORITHMS[key.algorithm][0])).digest()


def valid_signature(key: SecretKey, data: bytes, signature: bytes) -> bool:
    try:
        expected = sign(key, data)
    except ValueError:
        return False
    return hmac.compare_digest(expected, signature)


def container_token(
    key: SecretKey, owner: str, container_id: int, expiry_ms: int
) -> wire.TokenProto:
    """The container token ``GetContainerToken`` answers: the identifier is the serialized
    ``ContainerTokenSecretProto`` naming ``key``, the password its HMAC with ``key``."""
    identifier = wire_loc.ContainerTokenSecretProto(
        ownerId=owner,
        containerId=wire.ContainerID(id=container_id),
        expiryDate=expiry_ms,
        secretKeyId=uuid_to_proto(key.id),
    ).SerializeToString()
    return wire.TokenProto(
        identifier=identifier, password=sign(key, identifier), kind=CONTAINER_TOKEN_KIND, service=f"#{container_id}"
    )


def verify_container_token(
    token: wire.TokenProto, container_id: int, lookup: Callable[[uuid.UUID], SecretKey | None], now_ms: int
) -> wire_loc.ContainerTokenSecretProto:
    """What a datanode checks before it acts on ``container_id`` for the token's holder: the identifier
    parses and names this container, the token has not expired, its key is known and not expired, and the
    password is the key's HMAC of the identifier. Returns the identifier; raises :class:`TokenInvalid` with
    Ozone's message otherwise. ``lookup`` is the datanode's view of SCM's keys (``GetSecretKey``)."""
    if token.kind != CONTAINER_TOKEN_KIND:
        raise TokenInvalid(f"Invalid token kind {token.kind!r}, expected {CONTAINER_TOKEN_KIND}")
    ident = wire_loc.ContainerTokenSecretProto()
    try:
        ident.ParseFromString(token.identifier)
    except Exception as exc:  # protobuf's DecodeError; anything unparsable is refused the same way
        raise TokenInvalid(f"Invalid token identifier: {exc}") from exc
    if not ident.IsInitialized() or not ident.HasField("secretKeyId"):
        raise TokenInvalid("Invalid token identifier: a container token must name its owner, container, expiry "
                           "and secret key")
    owner = ident.ownerId
    if ident.containerId.id != container_id:
        raise TokenInvalid(f"Token for container #{ident.containerId.id} presented for container #{container_id} "
                           f"by user: {owner}")
    if now_ms > ident.expiryDate:
        raise TokenInvalid(f"Expired token for user: {owner}")
    key_id = uuid_from_proto(ident.secretKeyId)
    key = lookup(key_id)
    if key is None:
        raise TokenInvalid(f"Can't find the signing secret key {key_id} of the token for user: {owner}")
    if key.is_expired(now_ms):
        raise TokenInvalid(f"Token can't be verified due to expired secret key {key_id}")
    if not valid_signature(key, token.identifier, token.password):
        raise TokenInvalid(f"Invalid token for user: {owner}")
    return ident
