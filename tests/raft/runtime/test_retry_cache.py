"""Retry cache: envelopes and deterministic, log-time driven expiry."""

from __future__ import annotations

from scm_server.raft.retry_cache import RetryCache, decode_envelope, encode_envelope
from scm_server.raft.statemachine import ApplyRejected


def test_envelope_round_trip_and_raw_payloads() -> None:
    env = decode_envelope(encode_envelope(b"cid", 42, 1000.5, b"payload"))
    assert (env.client_id, env.call_id, env.timestamp, env.payload) == (b"cid", 42, 1000.5, b"payload")
    raw = decode_envelope(b"not an envelope")
    assert raw.client_id == b"" and raw.payload == b"not an envelope"


def test_expiry_follows_log_time_not_wall_clock() -> None:
    cache = RetryCache(expiry=60.0)
    old = decode_envelope(encode_envelope(b"a", 1, 100.0, b""))
    new = decode_envelope(encode_envelope(b"b", 1, 150.0, b""))
    cache.record(old, 1, b"r1")
    cache.record(new, 2, ApplyRejected("X", "y"))
    cache.advance_time(150.0)
    assert cache.get(b"a", 1) == b"r1"  # 50 s of log time: still cached
    cache.advance_time(161.0)
    assert cache.get(b"a", 1) is None and cache.get(b"b", 1) == ApplyRejected("X", "y")
    cache.advance_time(120.0)  # time never goes backwards
    assert cache.get(b"b", 1) is not None
    assert cache.get(b"", 0) is None  # anonymous calls are never cached
