"""GetScmInfo's peerRoles in Ozone 2.2.0's five fields, ``host:port:ROLE:peerId:ip`` (issue 29, item 7).

``ozone admin scm roles --table`` splits each line at ':' (Java's String.split, which drops trailing empty fields)
and adds it as a row under five headers; a line of four fields made it exit 255."""

from __future__ import annotations

import threading

from scm_server.clock import FakeClock
from scm_server.ha.peer_addresses import (
    NEGATIVE_TTL,
    POSITIVE_TTL,
    PeerAddresses,
    host_of,
    ip_literal,
    peer_role,
)

# ozone-2.2.0 GetScmRatisRolesSubcommand's table headers
OZONE_TABLE_HEADERS = ["Host Name", "Ratis Port", "Role", "Node ID", "Host Address"]


def java_split(line: str) -> list[str]:
    """Java's ``String.split(":")``: trailing empty strings are removed."""
    items = line.split(":")
    while items and items[-1] == "":
        items.pop()
    return items


def test_peer_role_has_ozones_five_fields_with_the_ip_address_last() -> None:
    line = peer_role("scm-1.scm-headless.ns.svc:9894", "LEADER", "a1b2", "10.0.0.7")
    assert line == "scm-1.scm-headless.ns.svc:9894:LEADER:a1b2:10.0.0.7"
    assert len(java_split(line)) == len(OZONE_TABLE_HEADERS)


def test_host_of_and_ip_literals() -> None:
    assert host_of("scm1:9894") == "scm1"
    assert host_of("[::1]:9894") == "::1"
    assert ip_literal("127.0.0.1") == "127.0.0.1"
    assert ip_literal("::1") == "::1"
    assert ip_literal("localhost") is None


class CountingResolver:
    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers
        self.calls: list[str] = []
        self.threads: set[int] = set()

    def __call__(self, host: str) -> str:
        self.calls.append(host)
        self.threads.add(threading.get_ident())
        if host not in self.answers:
            raise OSError(f"{host}: Name or service not known")
        return self.answers[host]


def test_an_ip_literal_is_its_own_address_without_a_lookup() -> None:
    resolver = CountingResolver({})
    addresses = PeerAddresses(FakeClock(), resolver)
    assert addresses.ip_of("127.0.0.1") == "127.0.0.1"
    assert addresses.stale(["127.0.0.1", "::1"]) == []
    assert resolver.calls == []


async def test_names_are_looked_up_in_a_worker_thread_and_kept_as_the_jvm_keeps_them() -> None:
    clock = FakeClock()
    resolver = CountingResolver({"scm1": "10.0.0.1", "scm2": "10.0.0.2"})
    addresses = PeerAddresses(clock, resolver)
    assert addresses.ip_of("scm1") == ""  # never looked up: answered from memory, no lookup on the caller's path
    assert resolver.calls == []
    await addresses.refresh(["scm1", "scm2", "scm3", "scm1"])
    assert sorted(resolver.calls) == ["scm1", "scm2", "scm3"]
    assert threading.get_ident() not in resolver.threads
    assert (addresses.ip_of("scm1"), addresses.ip_of("scm2"), addresses.ip_of("scm3")) == ("10.0.0.1", "10.0.0.2", "")

    # within the negative TTL nothing is stale; after it only the failed name is looked up again
    clock.advance(NEGATIVE_TTL - 0.1)
    assert addresses.stale(["scm1", "scm2", "scm3"]) == []
    clock.advance(0.1)
    assert addresses.stale(["scm1", "scm2", "scm3"]) == ["scm3"]
    resolver.answers["scm3"] = "10.0.0.3"
    await addresses.refresh(["scm1", "scm2", "scm3"])
    assert resolver.calls[3:] == ["scm3"] and addresses.ip_of("scm3") == "10.0.0.3"

    # a resolved name is kept for the positive TTL, then looked up again: a Pod back on a new IP is answered with it
    resolver.answers["scm1"] = "10.0.9.1"
    clock.advance(POSITIVE_TTL - NEGATIVE_TTL - 0.1)
    assert addresses.stale(["scm1"]) == []
    assert addresses.ip_of("scm1") == "10.0.0.1"
    clock.advance(0.1)
    await addresses.refresh(["scm1"])
    assert addresses.ip_of("scm1") == "10.0.9.1"


async def test_a_lookup_that_hangs_counts_as_failed_after_the_timeout() -> None:
    release = threading.Event()

    def hanging(host: str) -> str:
        release.wait(10)
        return "10.0.0.9"

    addresses = PeerAddresses(FakeClock(), hanging, lookup_timeout=0.05)
    try:
        await addresses.refresh(["slow-dns"])
        assert addresses.ip_of("slow-dns") == ""
    finally:
        release.set()

