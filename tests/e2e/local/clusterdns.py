"""Cluster DNS for the kubelet fixture: the part of CoreDNS's ``kubernetes`` plugin that Pods use.

Called by ``kubelet.py``, which serves it on the Pod network's host address (port 53, UDP and TCP) and points every
Pod's ``/etc/resolv.conf`` at it with Kubernetes' search path (``<ns>.svc.cluster.local svc.cluster.local
cluster.local``, ``ndots:5``), exactly as a kubelet does with CoreDNS. Names come from ``podspec.dns_entries``:
``<svc>.<ns>.svc.cluster.local`` (endpoints), ``<hostname>.<subdomain>.<ns>.svc.cluster.local`` (pods behind a
headless Service), plus ``<a-b-c-d>.<ns>.pod.cluster.local``. It answers A queries; AAAA and other types of known
names get an empty answer (NODATA); unknown names under the cluster domain get NXDOMAIN; anything else is REFUSED:
it never forwards, so a Pod's lookups never leave the machine.

Why not ``/etc/hosts`` for the cluster names: resolvers differ in how they merge hosts-file lines (c-ares, which
gRPC uses, merges lines that share an address or a name, so a headless Service's name and a Pod's name on the same
address end up resolving to every endpoint); a DNS server gives every resolver the same answers, as on a cluster.

``answer`` is pure (bytes in, bytes out); ``ClusterDNS`` adds the sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Callable, Mapping
from typing import Any

from dnslib import AAAA, QTYPE, RCODE, RR, A, DNSRecord

Zone = Mapping[str, list[str]]  # fully qualified name (no trailing dot) -> IPv4 addresses
IP_FREEBIND = 15


def answer(query: bytes, zone: Zone, domain: str = "cluster.local", ttl: int = 5) -> bytes:
    """The DNS response to ``query`` from ``zone``."""
    try:
        request = DNSRecord.parse(query)
    except Exception:  # not DNS: answer nothing useful, but well-formed
        return b""
    reply = request.reply()
    reply.header.ra = 0
    for q in request.questions:
        name = str(q.qname).rstrip(".").lower()
        if name != domain and not name.endswith(f".{domain}"):
            reply.header.rcode = RCODE.REFUSED
            continue
        addresses = zone.get(name)
        if addresses is None:
            reply.header.rcode = RCODE.NXDOMAIN
            continue
        if q.qtype in (QTYPE.A, QTYPE.ANY):
            for ip in addresses:
                reply.add_answer(RR(q.qname, QTYPE.A, rdata=A(ip), ttl=ttl))
        elif q.qtype == QTYPE.AAAA:
            _ = AAAA  # IPv4-only cluster: NODATA
    reply.header.aa = 1
    return bytes(reply.pack())


def pod_records(pods: list[tuple[str, str]], domain: str = "cluster.local") -> dict[str, list[str]]:
    """``<a-b-c-d>.<ns>.pod.<domain>`` names for (ip, namespace) pairs."""
    return {f"{ip.replace('.', '-')}.{ns}.pod.{domain}": [ip] for ip, ns in pods}


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, server: ClusterDNS) -> None:
        self.server = server
        self.transport: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        out = self.server.respond(data)
        if out and self.transport is not None:
            self.transport.sendto(out, addr)


class ClusterDNS:
    """Serves ``zone()`` (re-read at every query) on ``host``:``port`` over UDP and TCP."""

    def __init__(self, zone: Callable[[], Zone], domain: str = "cluster.local", ttl: int = 5) -> None:
        self.zone = zone
        self.domain = domain
        self.ttl = ttl
        self.queries = 0
        self._udp: Any = None
        self._tcp: asyncio.Server | None = None

    def respond(self, query: bytes) -> bytes:
        self.queries += 1
        return answer(query, self.zone(), self.domain, self.ttl)

    async def start(self, host: str, port: int = 53) -> None:
        loop = asyncio.get_running_loop()
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        for s in (udp, tcp):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            # The address may not exist yet (a podman bridge appears with its first container).
            s.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
            s.bind((host, port))
        transport, _ = await loop.create_datagram_endpoint(lambda: _Udp(self), sock=udp)
        self._udp = transport
        tcp.listen(16)
        self._tcp = await asyncio.start_server(self._serve_tcp, sock=tcp)

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack("!H", await reader.readexactly(2))[0]
                out = self.respond(await reader.readexactly(size))
                writer.write(struct.pack("!H", len(out)) + out)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def stop(self) -> None:
        if self._udp is not None:
            self._udp.close()
            self._udp = None
        if self._tcp is not None:
            self._tcp.close()
            await self._tcp.wait_closed()
            self._tcp = None


def resolv_conf(namespace: str, nameserver: str, domain: str = "cluster.local") -> str:
    """A Pod's ``/etc/resolv.conf`` with the kubelet's ClusterFirst settings."""
    return (f"search {namespace}.svc.{domain} svc.{domain} {domain}\n"
            f"nameserver {nameserver}\n"
            "options ndots:5\n")
