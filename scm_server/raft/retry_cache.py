"""Retry cache for exactly-once client submissions (Ratis ``RetryCache``, 60 s by default).

Every client request travels inside the log entry as an envelope ``(client_id, call_id,
timestamp, payload)``. The cache is filled on APPLY on every replica, from the log itself, so a new
leader already knows what the old one applied, and a retried submit whose (client_id, call_id) is
cached returns the original result without proposing again.

The cache is consulted only on the leader, at submit time; apply never depends on it. Every
replica applies every committed entry, so replicas stay identical even though caches differ (a
member that installed a snapshot never saw the calls inside it). The remaining race — a retry that
reaches a new leader before the first copy is applied — is closed by the driver: a leader waits for
a copy already in its own log instead of proposing a second one (a leader's log entries all commit
under it, and a copy missing from its log can never commit later).

Expiry is driven by the leader timestamps carried in the applied entries, never by a replica's own
clock. On restart the driver re-fills the cache from the entries still in the log (their results
are unknown: a retry of such a call gets RESULT_UNAVAILABLE, an indeterminate outcome; Ratis forgets
its whole cache on restart).
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from dataclasses import dataclass

from scm_server.raft.statemachine import ApplyRejected

ENVELOPE_MAGIC = 0xE1
_HEADER = struct.Struct(">BHQd")  # magic, len(client_id), call_id, leader timestamp


@dataclass(frozen=True, slots=True)
class Envelope:
    client_id: bytes
    call_id: int
    timestamp: float
    payload: bytes


def encode_envelope(client_id: bytes, call_id: int, timestamp: float, payload: bytes) -> bytes:
    return _HEADER.pack(ENVELOPE_MAGIC, len(client_id), call_id, timestamp) + client_id + payload


def decode_envelope(data: bytes) -> Envelope:
    if len(data) < _HEADER.size or data[0] != ENVELOPE_MAGIC:
        # not produced by RaftServer.submit (e.g. a raw proposal): no client identity
        return Envelope(b"", 0, 0.0, data)
    _, n, call_id, ts = _HEADER.unpack_from(data)
    start = _HEADER.size
    return Envelope(bytes(data[start : start + n]), call_id, ts, bytes(data[start + n :]))


Result = bytes | ApplyRejected


class RetryCache:
    """(client_id, call_id) -> result of the applied call, expiring ``expiry`` seconds of log time."""

    def __init__(self, expiry: float = 60.0) -> None:
        self.expiry = expiry
        self._entries: OrderedDict[tuple[bytes, int], tuple[float, int, Result]] = OrderedDict()
        self._log_time = 0.0  # max leader timestamp applied so far

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, client_id: bytes, call_id: int) -> Result | None:
        if not client_id:
            return None
        hit = self._entries.get((client_id, call_id))
        return None if hit is None else hit[2]

    def applied_index(self, client_id: bytes, call_id: int) -> int | None:
        hit = self._entries.get((client_id, call_id))
        return None if hit is None else hit[1]

    def record(self, env: Envelope, index: int, result: Result) -> None:
        if not env.client_id:
            return
        self._entries[(env.client_id, env.call_id)] = (env.timestamp, index, result)
        self._entries.move_to_end((env.client_id, env.call_id))

    def advance_time(self, timestamp: float) -> None:
        """Expire entries older than ``expiry`` relative to the newest applied timestamp."""
        if timestamp <= self._log_time:
            return
        self._log_time = timestamp
        horizon = timestamp - self.expiry
        while self._entries:
            key, (ts, _, _) = next(iter(self._entries.items()))
            if ts >= horizon:
                break
            del self._entries[key]

    def clear(self) -> None:
        self._entries.clear()
