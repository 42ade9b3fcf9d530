"""What every client-facing call passes through before and around the facade, on either transport.

Called by :class:`scm_server.server.grpc_services._ServiceBase` for each gRPC call, after the request was
parsed, and by the Hadoop RPC translators (:mod:`scm_server.server.hadoop_rpc`) for each command. The rules
live in one table (:data:`RULES`, by Ozone protocol and command), keyed for each transport by its own names:
(gRPC service, method) and (Hadoop RPC protocol, ``cmdType``). It holds no SCM state beyond the response cache,
and its callers ask the facade through :class:`scm_server.protocols.LeaderRole`.

* **Who may answer** (:data:`ACCESS`, :data:`HADOOP_ACCESS`). As in Ozone, only the leader answers the client and
  admin protocols, so a follower refuses with SCM_NOT_LEADER and a leader hint, and the client follows
  it; reads from a follower's soft state went stale after a leadership change. Three admin
  commands are meant for every SCM (Ozone's ``ADMIN_COMMAND_TYPE``: ForceExitSafeMode,
  Start/StopReplicationManager), and GetScmInfo is answered by any SCM (the cluster id never
  changes). A read may be answered by a follower only when the caller asks for that SCM's own
  view (``x-scm-read: local``); the answer then carries who answered and its role, so a per-SCM
  view is always explicit and labelled. Over Hadoop RPC no caller can ask that, so there Ozone's
  ``FOLLOWER_READABLE_COMMAND_TYPES`` (InSafeMode, GetSafeModeRuleStatuses) are answered by every SCM, and
  every other read by the leader. Datanodes talk to every SCM (not guarded here).
* **Exactly-once retries** (:class:`ResponseCache`). Non-idempotent calls carrying a client id and
  call id (:mod:`scm_server.call_metadata`) are remembered for ``expiry`` seconds: a retry of a call
  still running joins it, a retry of a finished call gets the first answer. The answers are kept
  serialized and the cache is bounded in bytes as well as in entries: at full speed a leader
  answers hundreds of 100-block allocations a second, about 30 KB each on the wire and four times
  that as message objects, and 60 s of them would take more than a GiB (seen in ``freon stb``).
  An answer evicted early costs a retry only unused block IDs, never a reused one. This covers the
  client's retries to the same SCM (a lost connection, a liveness timeout on a slow SCM). For
  AllocateContainer, whose result is one replicated write, the write itself carries the client's
  ids (:data:`RAFT_CLIENT_CALLS`, :mod:`scm_server.ha.client_call`), so a retry that reaches the next
  leader after a failover gets the same container too. Other retries that reach another SCM are new
  calls there (their effect is unused block IDs, never a reused ID).
* **Deadlines.** A call whose deadline has already passed (it waited in a queue) is refused with
  DEADLINE_EXCEEDED without running; gRPC cancels the handler of a call that expires or is
  cancelled while it runs, and long handlers yield regularly so the cancellation lands.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import enum
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

from scm_server import call_metadata
from scm_server.ha.client_call import client_call


class Access(enum.Enum):
    LEADER = "leader"  # leader only (mutations)
    READ = "read"  # leader only, unless the caller asks for this SCM's own view
    ANY = "any"  # every SCM answers


@dataclasses.dataclass(frozen=True)
class Face:
    """One Ozone protocol as each transport names it: the gRPC service and the Hadoop RPC protocol."""

    grpc_service: str
    hadoop_protocol: str


BLOCK = Face("ScmBlockLocationProtocolService", "org.apache.hadoop.hdds.scm.protocol.ScmBlockLocationProtocol")
LOCATION = Face(
    "StorageContainerLocationProtocolService", "org.apache.hadoop.hdds.scm.protocol.StorageContainerLocationProtocol"
)
GUARDED = (BLOCK, LOCATION)  # datanodes talk to every SCM, and security decides for itself


@dataclasses.dataclass(frozen=True)
class Rule:
    """The call rules of one command (the gRPC method and the Hadoop RPC ``cmdType`` share Ozone's name).

    ``follower_readable``: one of Ozone's ``FOLLOWER_READABLE_COMMAND_TYPES``, each SCM's own view; over Hadoop RPC,
    where a caller cannot ask for a local read, every SCM answers it; over gRPC it stays ``access`` (a follower
    answers when asked for its own view, ``x-scm-read: local``)."""

    access: Access = Access.READ
    non_idempotent: bool = False  # kept in the retry cache under the client's (client id, call id)
    raft_client_call: bool = False  # decided by one replicated write, which carries the client's ids
    follower_readable: bool = False


# (protocol, command) -> its rules; a command of BLOCK or LOCATION not listed is a READ. The one table both
# transports key by their own names (ACCESS and the rest below: gRPC; HADOOP_*: Hadoop RPC).
RULES: dict[tuple[Face, str], Rule] = {
    (LOCATION, "AllocateContainer"): Rule(Access.LEADER, non_idempotent=True, raft_client_call=True),
    (LOCATION, "CloseContainer"): Rule(Access.LEADER),
    (LOCATION, "AllocatePipeline"): Rule(Access.LEADER, non_idempotent=True),
    (LOCATION, "ClosePipeline"): Rule(Access.LEADER),
    (LOCATION, "ActivatePipeline"): Rule(Access.LEADER),
    (LOCATION, "DeactivatePipeline"): Rule(Access.LEADER),
    (LOCATION, "DecommissionNodes"): Rule(Access.LEADER),
    (LOCATION, "StartMaintenanceNodes"): Rule(Access.LEADER),
    (LOCATION, "RecommissionNodes"): Rule(Access.LEADER),
    (LOCATION, "ForceExitSafeMode"): Rule(Access.ANY),
    (LOCATION, "StartReplicationManager"): Rule(Access.ANY),
    (LOCATION, "StopReplicationManager"): Rule(Access.ANY),
    (LOCATION, "GetScmInfo"): Rule(Access.ANY),
    (LOCATION, "InSafeMode"): Rule(follower_readable=True),
    (LOCATION, "GetSafeModeRuleStatuses"): Rule(follower_readable=True),
    (BLOCK, "AllocateScmBlock"): Rule(Access.LEADER, non_idempotent=True),
    (BLOCK, "DeleteScmKeyBlocks"): Rule(Access.LEADER, non_idempotent=True),
    (BLOCK, "GetScmInfo"): Rule(Access.ANY),
}

# gRPC: keyed by (service, method)
ACCESS: dict[tuple[str, str], Access] = {
    (face.grpc_service, command): rule.access for (face, command), rule in RULES.items() if rule.access is not Access.READ
}
NON_IDEMPOTENT: frozenset[tuple[str, str]] = frozenset(
    (face.grpc_service, command) for (face, command), rule in RULES.items() if rule.non_idempotent
)
RAFT_CLIENT_CALLS: frozenset[tuple[str, str]] = frozenset(
    (face.grpc_service, command) for (face, command), rule in RULES.items() if rule.raft_client_call
)

# Hadoop RPC: keyed by (protocol, cmdType)
HADOOP_ACCESS: dict[tuple[str, str], Access] = {
    (face.hadoop_protocol, command): Access.ANY if rule.follower_readable else rule.access
    for (face, command), rule in RULES.items()
    if rule.follower_readable or rule.access is not Access.READ
}
HADOOP_NON_IDEMPOTENT: frozenset[tuple[str, str]] = frozenset(
    (face.hadoop_protocol, command) for (face, command), rule in RULES.items() if rule.non_idempotent
)
HADOOP_RAFT_CLIENT_CALLS: frozenset[tuple[str, str]] = frozenset(
    (face.hadoop_protocol, command) for (face, command), rule in RULES.items() if rule.raft_client_call
)


def client_call_scope(md: dict[str, str], service: str, method: str) -> contextlib.AbstractContextManager[None]:
    """Around the facade call: make its replicated write on behalf of the client call, if it is one."""
    ident = call_metadata.CallIdentity.from_metadata(md) if (service, method) in RAFT_CLIENT_CALLS else None
    if ident is None:
        return contextlib.nullcontext()
    return client_call(ident.client_id, ident.call_id)


def access_of(service: str, method: str) -> Access:
    """The access rule of a gRPC method of the client and block protocols; anything not listed there (new
    reads) is READ. Other services (datanode protocol, security) decide for themselves: ANY here."""
    if service not in (face.grpc_service for face in GUARDED):
        return Access.ANY
    return ACCESS.get((service, method), Access.READ)


_GUARDED_HADOOP = frozenset(face.hadoop_protocol for face in GUARDED)


def hadoop_access_of(protocol: str, command: str) -> Access:
    """The access rule of a Hadoop RPC ``cmdType`` of the client and block protocols (a READ needs the leader
    there: no caller asks for a local read); other protocols decide for themselves: ANY here."""
    if protocol not in _GUARDED_HADOOP:
        return Access.ANY
    return HADOOP_ACCESS.get((protocol, command), Access.READ)


def hadoop_cache_key(client_id: bytes, call_id: int, protocol: str, command: str) -> tuple[str, int, str] | None:
    """The retry-cache key of a Hadoop RPC call (its connection's client id and the call id, which Hadoop clients
    keep across retries), or None when it must not be cached."""
    if (protocol, command) not in HADOOP_NON_IDEMPOTENT or not client_id:
        return None
    return f"hrpc:{client_id.hex()}", call_id, f"{protocol}/{command}"


class ResponseCache:
    """(client id, call id, method) -> the call's outcome, for ``expiry`` seconds, at most ``capacity``
    answers and ``max_bytes`` of them (a ``bytes`` answer weighs its length, anything else nothing),
    the oldest evicted first.

    Only successful answers are kept (a failed call changed nothing to remember, and failures such
    as NOT_LEADER must not stick). A retry that arrives while the first copy runs waits for it; if
    the first copy is cancelled (its client went away), the retry runs the call itself.
    """

    def __init__(
        self,
        expiry: float = 60.0,
        capacity: int = 20000,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int = 64 << 20,
    ) -> None:
        self.expiry = expiry
        self.capacity = capacity
        self.max_bytes = max_bytes
        self._clock = clock
        self._done: collections.OrderedDict[tuple[str, int, str], tuple[float, Any]] = collections.OrderedDict()
        self._running: dict[tuple[str, int, str], asyncio.Future[Any]] = {}
        self.hits = 0
        self.bytes = 0  # weight of the answers held

    def __len__(self) -> int:
        return len(self._done)

    def _expire(self, now: float) -> None:
        done = self._done
        while done:
            key, (at, result) = next(iter(done.items()))
            if now - at < self.expiry and len(done) <= self.capacity and self.bytes <= self.max_bytes:
                break
            del done[key]
            self.bytes -= _weight(result)

    async def run(self, key: tuple[str, int, str], call: Callable[[], Awaitable[Any]]) -> Any:
        now = self._clock()
        self._expire(now)
        hit = self._done.get(key)
        if hit is not None:
            self.hits += 1
            return _unpack(hit[1])
        running = self._running.get(key)
        if running is not None:
            try:
                result = await asyncio.shield(running)
            except asyncio.CancelledError:
                if running.cancelled():  # the first copy was cancelled, not us: run it ourselves
                    return await self.run(key, call)
                raise
            self.hits += 1
            return result
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._running[key] = future
        try:
            result = await call()
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                future.cancel()
            else:
                future.set_exception(exc)
                future.exception()  # retrieved: no "never retrieved" warning when nobody joined
            raise
        finally:
            self._running.pop(key, None)
        future.set_result(result)
        kept = _pack(result)
        self._done[key] = (self._clock(), kept)
        self.bytes += _weight(kept)
        self._expire(self._clock())
        return result


class _Packed:
    """A serialized answer kept compressed. A 100-block AllocateScmBlock answer repeats its pipeline
    (three datanodes with their ports) in every block, which zlib's fastest level packs cheaply to
    a small fraction of its size, so the cache holds its count bound of answers in far less memory
    than the raw bytes would take (the figures: docs/performance.md, "Figures behind choices in the code")."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


PACK_FROM = 1024  # smaller answers are kept as they are


class CompactAnswer:
    """An answer that knows a smaller form of itself to keep (:meth:`kept`) than its serialized bytes, cheaper to
    make than compressing them; the cache holds that form and gives back :meth:`Kept.answer` on a retry."""

    def kept(self) -> Kept | bytes:
        raise NotImplementedError


class Kept:
    """The kept form of a :class:`CompactAnswer`: ``weight`` bytes towards the cache's bound."""

    weight: int

    def answer(self) -> Any:
        raise NotImplementedError


def _pack(result: Any) -> Any:
    if isinstance(result, bytes):
        return _Packed(zlib.compress(result, 1)) if len(result) >= PACK_FROM else result
    if isinstance(result, CompactAnswer):
        return result.kept()
    return result


def _unpack(kept: Any) -> Any:
    if isinstance(kept, _Packed):
        return zlib.decompress(kept.data)
    if isinstance(kept, Kept):
        return kept.answer()
    return kept


def _weight(kept: Any) -> int:
    if isinstance(kept, _Packed):
        return len(kept.data)
    if isinstance(kept, Kept):
        return kept.weight
    return len(kept) if isinstance(kept, bytes) else 0


def cache_key(md: dict[str, str], service: str, method: str) -> tuple[str, int, str] | None:
    """The retry-cache key of a call, or None when it must not be cached."""
    if (service, method) not in NON_IDEMPOTENT:
        return None
    ident = call_metadata.CallIdentity.from_metadata(md)
    if ident is None:
        return None
    return ident.client_id, ident.call_id, f"{service}/{method}"
