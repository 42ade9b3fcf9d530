"""The pure secret-key core: rotation decisions, key generation, container tokens and their verifier."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta

import pytest

from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.security.core import secret_keys as sk

DAY_MS = 86_400_000
T0 = 1_800_000_000_000
SETTINGS = sk.Settings(rotate=timedelta(days=1), expiry=timedelta(days=9), algorithm="HmacSHA256")


def entropy(seed: int = 7) -> sk.Entropy:
    rng = random.Random(seed)
    return lambda n: rng.randbytes(n)


def key_at(ms: int, seed: int = 1, settings: sk.Settings = SETTINGS) -> sk.SecretKey:
    return sk.generate(ms, settings, entropy(seed))


def test_generate_uses_the_entropy_and_the_settings() -> None:
    a, b = key_at(T0, 1), key_at(T0, 1)
    assert a == b  # the same entropy makes the same key: nothing else is random
    c = key_at(T0, 2)
    assert c.id != a.id and c.encoded != a.encoded
    assert a.id.version == 4
    assert a.creation_ms == T0 and a.expiry_ms == T0 + 9 * DAY_MS
    assert len(a.encoded) == 32 and a.algorithm == "HmacSHA256"
    assert len(key_at(T0, settings=sk.Settings(algorithm="HmacSHA512")).encoded) == 64
    assert "encoded" not in repr(a) and a.encoded.hex() not in repr(a)


def test_unknown_algorithm_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"hdds\.secret\.key\.algorithm=HmacMD5: use one of HmacSHA1"):
        key_at(T0, settings=sk.Settings(algorithm="HmacMD5"))


def test_first_key_when_none() -> None:
    decision = sk.plan([], T0, SETTINGS)
    assert decision.rotate and decision.keep == () and "first" in decision.reason


def test_no_rotation_before_the_rotate_duration() -> None:
    k = key_at(T0)
    assert not sk.plan([k], T0 + DAY_MS - 1, SETTINGS).rotate


def test_rotation_at_the_rotate_duration_keeps_unexpired_keys() -> None:
    old = key_at(T0 - 9 * DAY_MS - 1, 1)  # expired at T0 + DAY_MS
    mid = key_at(T0 - DAY_MS, 2)
    cur = key_at(T0, 3)
    decision = sk.plan([old, cur, mid], T0 + DAY_MS, SETTINGS)
    assert decision.rotate
    assert decision.keep == (mid, cur)  # oldest first, the expired one dropped
    assert "hdds.secret.key.rotate.duration" in decision.reason


def test_force_rotates_a_fresh_key() -> None:
    k = key_at(T0)
    assert not sk.plan([k], T0 + 1, SETTINGS).rotate
    assert sk.plan([k], T0 + 1, SETTINGS, force=True).rotate


@pytest.mark.parametrize("seed", range(8))
def test_the_new_key_is_current_even_within_the_same_millisecond(seed: int) -> None:
    """Forced twice in one millisecond (or a clock stepped back): the new key is created one millisecond
    after the newest, whatever the random ids, so it is the current one on every SCM."""
    k = key_at(T0, seed)
    for now in (T0, T0 - 5_000):
        decision = sk.plan([k], now, SETTINGS, force=True)
        assert decision.create_ms == T0 + 1
        new = sk.generate(decision.create_ms, SETTINGS, entropy(seed + 100))
        assert sk.current_key([*decision.keep, new]) == new
    assert sk.plan([k], T0 + DAY_MS, SETTINGS).create_ms == T0 + DAY_MS


def test_an_expired_current_key_is_replaced() -> None:
    k = key_at(T0)
    decision = sk.plan([k], k.expiry_ms + 1, sk.Settings(rotate=timedelta(days=30), expiry=timedelta(days=9)))
    assert decision.rotate and decision.keep == () and "expired" in decision.reason


def test_current_key_is_the_newest_and_ties_are_deterministic() -> None:
    a, b = key_at(T0, 1), key_at(T0, 2)
    newer = key_at(T0 + 1, 3)
    assert sk.current_key([a, newer, b]) == newer
    assert sk.current_key([a, b]) == sk.current_key([b, a])
    assert sk.current_key([]) is None


def test_a_day_by_day_schedule() -> None:
    """Two weeks of checks every 10 minutes: one rotation a day; each rotation drops the expired keys, so no
    key is held longer than a rotation past its expiry, and at most expiry/rotate + 1 keys are held."""
    keys: list[sk.SecretKey] = []
    source = entropy(3)
    rotations = 0
    for step in range(0, 14 * 24 * 6):
        now = T0 + step * 600_000
        decision = sk.plan(keys, now, SETTINGS)
        if decision.rotate:
            keys = [*decision.keep, sk.generate(decision.create_ms, SETTINGS, source)]
            rotations += 1
            assert all(not k.is_expired(now) for k in keys)
        assert len(keys) <= 10
        assert all(now - k.expiry_ms <= DAY_MS for k in keys)
        assert not sk.current_key(keys).is_expired(now)  # type: ignore[union-attr]
    assert rotations == 14


def test_proto_round_trip_and_uuid_signs() -> None:
    k = key_at(T0)
    assert sk.SecretKey.from_proto(k.to_proto()) == k
    for value in (uuid.UUID(int=0), uuid.UUID(int=(1 << 128) - 1), uuid.UUID("80000000-0000-0000-8000-000000000000")):
        proto = sk.uuid_to_proto(value)
        assert -(1 << 63) <= proto.mostSigBits < 1 << 63
        assert sk.uuid_from_proto(proto) == value
    # Java's UUID(most, least) halves: the high bit set reads as a negative long
    assert sk.uuid_to_proto(uuid.UUID(int=(1 << 128) - 1)).mostSigBits == -1


def test_sign_is_hmac_of_the_algorithm() -> None:
    import hashlib
    import hmac

    k = key_at(T0)
    assert sk.sign(k, b"data") == hmac.new(k.encoded, b"data", hashlib.sha256).digest()
    assert sk.valid_signature(k, b"data", sk.sign(k, b"data"))
    assert not sk.valid_signature(k, b"datA", sk.sign(k, b"data"))


def lookup_of(*keys: sk.SecretKey):  # type: ignore[no-untyped-def]
    by_id = {k.id: k for k in keys}
    return by_id.get


def test_container_token_format_and_verification() -> None:
    k = key_at(T0)
    token = sk.container_token(k, "admin@EXAMPLE.COM", 42, T0 + DAY_MS)
    assert token.kind == "HDDS_CONTAINER_TOKEN" and token.service == "#42"
    ident = wire_loc.ContainerTokenSecretProto.FromString(token.identifier)
    assert ident.ownerId == "admin@EXAMPLE.COM" and ident.containerId.id == 42 and ident.expiryDate == T0 + DAY_MS
    assert sk.uuid_from_proto(ident.secretKeyId) == k.id
    assert token.password == sk.sign(k, token.identifier)
    assert sk.verify_container_token(token, 42, lookup_of(k), T0 + 5).ownerId == "admin@EXAMPLE.COM"


def test_verifier_refuses_an_expired_token() -> None:
    k = key_at(T0)
    token = sk.container_token(k, "u", 1, T0 + 10)
    with pytest.raises(sk.TokenInvalid, match=r"^Expired token for user: u$"):
        sk.verify_container_token(token, 1, lookup_of(k), T0 + 11)


def test_verifier_refuses_an_unknown_key() -> None:
    signer, other = key_at(T0, 1), key_at(T0, 2)
    token = sk.container_token(signer, "u", 1, T0 + DAY_MS)
    with pytest.raises(sk.TokenInvalid, match=f"Can't find the signing secret key {signer.id} of the token"):
        sk.verify_container_token(token, 1, lookup_of(other), T0 + 1)


def test_verifier_refuses_a_token_signed_with_an_expired_key() -> None:
    k = key_at(T0)
    token = sk.container_token(k, "u", 1, k.expiry_ms + DAY_MS)  # the token outlives its key
    with pytest.raises(sk.TokenInvalid, match=f"expired secret key {k.id}"):
        sk.verify_container_token(token, 1, lookup_of(k), k.expiry_ms + 1)


def test_verifier_refuses_a_forged_signature_and_a_tampered_identifier() -> None:
    k = key_at(T0)
    attacker = sk.SecretKey(k.id, k.creation_ms, k.expiry_ms, k.algorithm, b"\x00" * 32)  # right id, wrong bytes
    forged = sk.container_token(attacker, "u", 1, T0 + DAY_MS)
    with pytest.raises(sk.TokenInvalid, match=r"^Invalid token for user: u$"):
        sk.verify_container_token(forged, 1, lookup_of(k), T0 + 1)
    genuine = sk.container_token(k, "u", 1, T0 + DAY_MS)
    ident = wire_loc.ContainerTokenSecretProto.FromString(genuine.identifier)
    ident.ownerId = "root"
    tampered = type(genuine)(identifier=ident.SerializeToString(), password=genuine.password,
                             kind=genuine.kind, service=genuine.service)
    with pytest.raises(sk.TokenInvalid, match=r"^Invalid token for user: root$"):
        sk.verify_container_token(tampered, 1, lookup_of(k), T0 + 1)


def test_verifier_refuses_a_token_for_another_container_or_kind() -> None:
    k = key_at(T0)
    token = sk.container_token(k, "u", 1, T0 + DAY_MS)
    with pytest.raises(sk.TokenInvalid, match="Token for container #1 presented for container #2"):
        sk.verify_container_token(token, 2, lookup_of(k), T0 + 1)
    token.kind = "HDDS_BLOCK_TOKEN"
    with pytest.raises(sk.TokenInvalid, match="Invalid token kind"):
        sk.verify_container_token(token, 1, lookup_of(k), T0 + 1)
    garbage = type(token)(identifier=b"\xff\xff", password=b"", kind=sk.CONTAINER_TOKEN_KIND, service="#1")
    with pytest.raises(sk.TokenInvalid, match="Invalid token identifier"):
        sk.verify_container_token(garbage, 1, lookup_of(k), T0 + 1)
