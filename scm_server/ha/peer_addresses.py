"""GetScmInfo's peerRoles as Ozone 2.2.0 answers them: ``host:port:ROLE:peerId:ip``, five fields.

Ozone's ``SCMRatisServerImpl.getRatisRoles`` appends to each member's Raft address its role, its peer id and the
IP address its host name resolves to (``InetAddress.getByName(host).getHostAddress()``; an empty last field when
the name does not resolve). ``ozone admin scm roles --table`` prints the fields as the five columns "Host Name",
"Ratis Port", "Role", "Node ID", "Host Address", and fails when a line has another number of fields; ``--json``
reads the role, the id and the address only from a five-field line.

:func:`peer_role` is the pure formatting. :class:`PeerAddresses` keeps the host -> IP answers: an IP literal is
its own answer (no lookup), a host name is answered from a cache that never blocks the caller. A stale or missing
name is looked up by :meth:`PeerAddresses.refresh` (the resolver runs in a worker thread), kept 30 s, a failed
lookup 10 s, as the JVM caches names by default (``networkaddress.cache.ttl``,
``networkaddress.cache.negative.ttl``), so a Pod that came back on a new IP is answered with it.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
from collections.abc import Callable, Iterable

from scm_server.clock import Clock

POSITIVE_TTL = 30.0  # seconds a resolved name is kept (the JVM's networkaddress.cache.ttl default)
NEGATIVE_TTL = 10.0  # seconds a failed lookup is kept (networkaddress.cache.negative.ttl)
LOOKUP_TIMEOUT = 5.0  # seconds one lookup may take before it counts as failed


def peer_role(address: str, role: str, peer: str, ip: str) -> str:
    """One of GetScmInfo's peerRoles: ``host:port:ROLE:peerId:ip`` (the Raft address split at its last colon)."""
    host, _, port = address.rpartition(":")
    return f"{host}:{port}:{role}:{peer}:{ip}"


def host_of(address: str) -> str:
    """The host part of a Raft address ``host:port`` (an IPv6 literal may be bracketed)."""
    return address.rpartition(":")[0].strip("[]")


@functools.lru_cache(maxsize=256)
def ip_literal(host: str) -> str | None:
    """``host`` normalised if it is an IPv4 or IPv6 address, else None (a name to look up). Cached: GetScmInfo asks
    for every member's host on every call, and a name fails ``ip_address`` by raising."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


def resolve_host(host: str) -> str:
    """The address ``host`` resolves to, IPv4 first as Java's InetAddress.getByName answers by default.

    Raises OSError when it does not resolve."""
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    if not infos:
        raise OSError(f"{host} resolves to no address")
    v4 = [i for i in infos if i[0] == socket.AF_INET]
    return str((v4 or infos)[0][4][0])


class PeerAddresses:
    """Host -> IP address for peerRoles' last field; answers from memory only, :meth:`refresh` looks names up."""

    def __init__(
        self,
        clock: Clock,
        resolve: Callable[[str], str] = resolve_host,
        *,
        ttl: float = POSITIVE_TTL,
        negative_ttl: float = NEGATIVE_TTL,
        lookup_timeout: float = LOOKUP_TIMEOUT,
    ) -> None:
        self._clock = clock
        self._resolve = resolve
        self._ttl = ttl
        self._negative_ttl = negative_ttl
        self._lookup_timeout = lookup_timeout
        self._known: dict[str, tuple[str, float]] = {}  # host -> (ip, "" if it did not resolve; when looked up)

    def ip_of(self, host: str) -> str:
        """The IP address of ``host`` as last looked up ("" if never, or if it did not resolve)."""
        literal = ip_literal(host)
        if literal is not None:
            return literal
        known = self._known.get(host)
        return known[0] if known else ""

    def stale(self, hosts: Iterable[str]) -> list[str]:
        """The host names among ``hosts`` never looked up, or looked up longer ago than their answer is kept."""
        now = self._clock.monotonic()
        out: list[str] = []
        for host in dict.fromkeys(hosts):
            if ip_literal(host) is not None:
                continue
            known = self._known.get(host)
            if known is None or now - known[1] >= (self._ttl if known[0] else self._negative_ttl):
                out.append(host)
        return out

    def record(self, host: str, ip: str) -> None:
        """Keep one lookup's answer ("" for a name that did not resolve) from now."""
        self._known[host] = (ip, self._clock.monotonic())

    async def refresh(self, hosts: Iterable[str]) -> None:
        """Look up every stale name of ``hosts`` (in a worker thread each, bounded by the lookup timeout)."""
        stale = self.stale(hosts)
        if not stale:
            return
        loop = asyncio.get_running_loop()

        async def one(host: str) -> None:
            try:
                ip = await asyncio.wait_for(loop.run_in_executor(None, self._resolve, host), self._lookup_timeout)
            except (OSError, TimeoutError, UnicodeError):
                ip = ""
            self.record(host, ip)

        await asyncio.gather(*(one(h) for h in stale))
