"""Per-call gRPC metadata between ``SCMClient`` and the SCM servicers (the wire contract, written once).

Request metadata, set by :mod:`scm_server.client.scm_client` on every call:

* ``x-scm-client-id`` / ``x-scm-call-id``: who is calling and which logical call this is. A retry
  (after a timeout, a lost connection or a failover) keeps both, so an SCM that already ran the call
  answers the retry with the first outcome instead of running it twice (Hadoop RPC's clientId and
  callId, which Ozone's retry cache keys on);
* ``x-scm-read: local``: "answer from your own state even if you are not the leader". Only read
  calls honour it; the answer then carries who answered (below). Without it, a follower refuses
  leader-only calls with SCM_NOT_LEADER and the client follows to the leader, as in Ozone.

Response (trailing) metadata of a local read, set by :mod:`scm_server.server.call_guard`:
``x-scm-answered-by`` (node id, else peer id), ``x-scm-role`` (LEADER / FOLLOWER / ...),
``x-scm-follows``: the leader that SCM follows (peer id, may be empty).

Pure functions, no I/O; imported by both the client and the server layers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

CLIENT_ID_KEY = "x-scm-client-id"
CALL_ID_KEY = "x-scm-call-id"
READ_KEY = "x-scm-read"
READ_LOCAL = "local"
ANSWERED_BY_KEY = "x-scm-answered-by"
ROLE_KEY = "x-scm-role"
FOLLOWS_KEY = "x-scm-follows"

Metadata = tuple[tuple[str, str], ...]


def request_metadata(client_id: str, call_id: int, *, local_read: bool = False) -> Metadata:
    md: list[tuple[str, str]] = [(CLIENT_ID_KEY, client_id), (CALL_ID_KEY, str(call_id))]
    if local_read:
        md.append((READ_KEY, READ_LOCAL))
    return tuple(md)


def as_dict(metadata: Iterable[object] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in metadata or ():
        key, value = item[0], item[1]  # type: ignore[index]
        out[str(key).lower()] = value.decode() if isinstance(value, bytes) else str(value)
    return out


@dataclasses.dataclass(frozen=True)
class CallIdentity:
    client_id: str
    call_id: int

    @classmethod
    def from_metadata(cls, md: dict[str, str]) -> CallIdentity | None:
        """The caller's (client id, call id), or None if absent or malformed (old clients, grpcurl)."""
        client = md.get(CLIENT_ID_KEY, "")
        call = md.get(CALL_ID_KEY, "")
        if not client or len(client) > 128 or not call.isdigit():
            return None
        return cls(client, int(call))


def wants_local_read(md: dict[str, str]) -> bool:
    return md.get(READ_KEY, "") == READ_LOCAL


@dataclasses.dataclass(frozen=True)
class AnswerLabel:
    """Who answered a local read: shown next to a per-SCM view so nobody mistakes it for the leader's."""

    address: str
    answered_by: str
    role: str
    follows: str

    @property
    def is_leader(self) -> bool:
        return self.role == "LEADER"

    def describe(self) -> str:
        who = self.answered_by or "?"
        if self.is_leader:
            return f"answered by {who} at {self.address} (LEADER)"
        leader = f"; it follows leader {self.follows}" if self.follows else "; it knows no leader"
        return f"answered by {who} at {self.address} ({self.role}: its own view, may lag the leader{leader})"

    @classmethod
    def from_metadata(cls, address: str, md: dict[str, str]) -> AnswerLabel:
        return cls(address, md.get(ANSWERED_BY_KEY, ""), md.get(ROLE_KEY, "UNKNOWN"), md.get(FOLLOWS_KEY, ""))


def answer_metadata(answered_by: str, role: str, follows: str) -> Metadata:
    return ((ANSWERED_BY_KEY, answered_by), (ROLE_KEY, role), (FOLLOWS_KEY, follows))
