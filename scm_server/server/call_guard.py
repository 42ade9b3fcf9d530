"""What every client-facing gRPC call passes through before and around the facade.

Called by :class:`scm_server.server.grpc_services._ServiceBase` for each call, after the request was
parsed. It must not hold SCM state beyond the response cache, and knows the facade only through
two small methods (``require_leader`` and ``answer_label``).

* **Who may answer** (:data:`ACCESS`). As in Ozone, only the leader answers the client and admin
  protocols, so a follower refuses with SCM_NOT_LEADER and a leader hint, and the client follows
  it; reads from a follower's soft state went stale after a leadership change. Three admin
  commands are meant for every SCM (Ozone's ``ADMIN_COMMAND_TYPE``: ForceExitSafeMode,
  Start/StopReplicationManager), and GetScmInfo is answered by any SCM (the cluster id never
  changes). A read may be answered by a follower only when the caller asks for that SCM's own
  view (``x-scm-read: local``); the answer then carries who answered and its role, so a per-SCM
  view is always explicit and labelled. Datanodes talk to every SCM (not guarded here).
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


_LOCATION = "StorageContainerLocationProtocolService"
_BLOCK = "ScmBlockLocationProtocolService"
_DATANODE = "StorageContainerDatanodeProtocolService"

ACCESS: dict[tuple[str, str], Access] = {
    (_LOCATION, "AllocateContainer"): Access.LEADER,
    (_LOCATION, "CloseContainer"): Access.LEADER,
    (_LOCATION, "AllocatePipeline"): Access.LEADER,
    (_LOCATION, "ClosePipeline"): Access.LEADER,
    (_LOCATION, "ActivatePipeline"): Access.LEADER,
    (_LOCATION, "DeactivatePipeline"): Access.LEADER,
    (_LOCATION, "DecommissionNodes"): Access.LEADER,
    (_LOCATION, "StartMaintenanceNodes"): Access.LEADER,
    (_LOCATION, "RecommissionNodes"): Access.LEADER,
    (_LOCATION, "ForceExitSafeMode"): Access.ANY,
    (_LOCATION, "StartReplicationManager"): Access.ANY,
    (_LOCATION, "StopReplicationManager"): Access.ANY,
    (_LOCATION, "GetScmInfo"): Access.ANY,
    (_BLOCK, "AllocateScmBlock"): Access.LEADER,
    (_BLOCK, "DeleteScmKeyBlocks"): Access.LEADER,
    (_BLOCK, "GetScmInfo"): Access.ANY,
}

NON_IDEMPOTENT: frozenset[tuple[str, str]] = frozenset(
    {
        (_BLOCK, "AllocateScmBlock"),
        (_BLOCK, "DeleteScmKeyBlocks"),
        (_LOCATION, "AllocateContainer"),
        (_LOCATION, "AllocatePipeline"),
    }
)


# Calls decided by one replicated write, which then carries the client's ids (see the docstring).
RAFT_CLIENT_CALLS: frozenset[tuple[str, str]] = frozenset({(_LOCATION, "AllocateContainer")})


def client_call_scope(md: dict[str, str], service: str, method: str) -> contextlib.AbstractContextManager[None]:
    """Around the facade call: make its replicated write on behalf of the client call, if it is one."""
    ident = call_metadata.CallIdentity.from_metadata(md) if (service, method) in RAFT_CLIENT_CALLS else None
    if ident is None:
        return contextlib.nullcontext()
    return client_call(ident.client_id, ident.call_id)


def access_of(service: str, method: str) -> Access:
    """The access rule of a method of the client and block protocols; anything not listed there (new
    reads) is READ. Other services (datanode protocol, security) decide for themselves: ANY here."""
    if service not in (_LOCATION, _BLOCK):
        return Access.ANY
    return ACCESS.get((service, method), Access.READ)


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
