"""The fixture's cluster DNS answers like CoreDNS's kubernetes plugin and never forwards."""

from __future__ import annotations

import asyncio
import socket

from dnslib import RCODE, DNSRecord

from tests.e2e.local import clusterdns

ZONE = {"scm-0.scm-headless.ozone.svc.cluster.local": ["10.0.0.2"],
        "scm-headless.ozone.svc.cluster.local": ["10.0.0.2", "10.0.0.3"]}


def ask(name: str, qtype: str = "A") -> DNSRecord:
    return DNSRecord.parse(clusterdns.answer(DNSRecord.question(name, qtype).pack(), ZONE))


def test_answers() -> None:
    reply = ask("scm-0.scm-headless.ozone.svc.cluster.local")
    assert reply.header.rcode == RCODE.NOERROR and [str(r.rdata) for r in reply.rr] == ["10.0.0.2"]
    assert sorted(str(r.rdata) for r in ask("scm-headless.ozone.svc.cluster.local").rr) == ["10.0.0.2", "10.0.0.3"]
    nodata = ask("scm-0.scm-headless.ozone.svc.cluster.local", "AAAA")
    assert nodata.header.rcode == RCODE.NOERROR and nodata.rr == []
    assert ask("missing.ozone.svc.cluster.local").header.rcode == RCODE.NXDOMAIN
    assert ask("pypi.org").header.rcode == RCODE.REFUSED  # never forwarded
    assert clusterdns.answer(b"garbage", ZONE) == b""


def test_resolv_conf() -> None:
    assert clusterdns.resolv_conf("ozone", "198.18.1.1") == (
        "search ozone.svc.cluster.local svc.cluster.local cluster.local\nnameserver 198.18.1.1\noptions ndots:5\n")


async def test_served_over_udp_and_tcp() -> None:
    server = clusterdns.ClusterDNS(lambda: ZONE)
    await server.start("127.0.0.1", 15353)
    try:
        loop = asyncio.get_running_loop()
        query = DNSRecord.question("scm-headless.ozone.svc.cluster.local").pack()

        def udp() -> bytes:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.settimeout(5)
                s.sendto(query, ("127.0.0.1", 15353))
                return s.recv(4096)

        assert len(DNSRecord.parse(await loop.run_in_executor(None, udp)).rr) == 2
        reader, writer = await asyncio.open_connection("127.0.0.1", 15353)
        writer.write(len(query).to_bytes(2, "big") + query)
        size = int.from_bytes(await reader.readexactly(2), "big")
        assert len(DNSRecord.parse(await reader.readexactly(size)).rr) == 2
        writer.close()
        assert server.queries == 2
    finally:
        await server.stop()
