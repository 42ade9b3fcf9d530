"""Issue 19 (enrolment, revocation, renewal): the pure rules, with an injected clock.

Canonical serials, proofs that bind the whole request and a moment, the replay guard, token-bucket
rate limits, host-name checks, the duplicate-uuid rule and the renewal rule."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from scm_server.security.core import certificates as pki
from scm_server.security.core import enrollment, serials
from scm_server.security.core import identity as ids
from scm_server.security.core import requests as reqs
from scm_server.security.core.ratelimit import RateLimiter

from .pki_helpers import CLUSTER, EC, NOW

# ---------------------------------------------------------------- serials


@pytest.mark.parametrize("typed", ["1234", "0x4d2", "0X4D2", "0x04d2", "0x04:d2", " 1234 "])
def test_every_accepted_spelling_names_one_canonical_serial(typed: str) -> None:
    assert serials.parse_serial(typed) == 1234
    assert serials.canonical_serial(typed) == "1234"


@pytest.mark.parametrize(
    ("typed", "why"),
    [
        ("01234", "leading zero"),
        ("0", "out of range"),
        ("١٢٣٤", "ASCII digits only"),  # Arabic-Indic digits: int() would accept them
        ("１２３４", "ASCII digits only"),  # fullwidth digits
        ("+1234", "not a serial number"),
        ("-1", "not a serial number"),
        ("1_234", "not a serial number"),
        ("12 34", "not a serial number"),
        ("0x", "not a serial number"),
        ("0xg1", "not a serial number"),
        ("", "not a serial number"),
        ("0b101", "not a serial number"),
        (str(1 << 159), "out of range"),
    ],
)
def test_anything_else_is_refused_with_one_line_naming_the_input(typed: str, why: str) -> None:
    with pytest.raises(serials.SerialError, match=why) as info:
        serials.parse_serial(typed)
    assert "\n" not in str(info.value) and "0x" in str(info.value)


def test_canonical_and_legacy_forms() -> None:
    assert serials.is_canonical("1234") and not serials.is_canonical("01234") and not serials.is_canonical("0x4d2")
    assert serials.legacy_serial("01234") == "1234"
    assert serials.legacy_serial("١٢٣٤") == "1234"
    assert serials.legacy_serial("junk") is None


# ---------------------------------------------------------------- proofs

SECRET = b"s" * 32
CLAIMS = enrollment.EnrollmentClaims("datanode", CLUSTER, "", "u1", "dn1.example.com", "10.0.0.1", b"csr", 1_000_000,
                                     b"n" * 32)
WINDOW = 300_000


def _check(claims: enrollment.EnrollmentClaims, proof: bytes, now_ms: int = 1_000_000) -> None:
    enrollment.check_enrollment(SECRET, claims, proof, now_ms=now_ms, window_ms=WINDOW, secret_key="k")


@pytest.mark.parametrize(
    "field", ["role", "cluster_id", "node_id", "owner_id", "host", "ip", "csr_der", "time_ms", "nonce"]
)
def test_the_proof_covers_every_field(field: str) -> None:
    proof = enrollment.enrollment_proof(SECRET, CLAIMS)
    _check(CLAIMS, proof)
    value = getattr(CLAIMS, field)
    changed = value + 1 if isinstance(value, int) else (value + b"x" if isinstance(value, bytes) else value + "x")
    with pytest.raises(enrollment.EnrollmentRefused, match="does not match"):
        _check(dataclasses.replace(CLAIMS, **{field: changed}), proof)


def test_fields_cannot_be_shifted_between_neighbours() -> None:
    a = dataclasses.replace(CLAIMS, owner_id="u1dn", host="1")
    b = dataclasses.replace(CLAIMS, owner_id="u1", host="dn1")
    assert enrollment.enrollment_proof(SECRET, a) != enrollment.enrollment_proof(SECRET, b)


def test_a_proof_outside_the_window_or_without_nonce_is_refused() -> None:
    proof = enrollment.enrollment_proof(SECRET, CLAIMS)
    _check(CLAIMS, proof, now_ms=1_000_000 + WINDOW)
    with pytest.raises(enrollment.EnrollmentRefused, match="behind this SCM's clock"):
        _check(CLAIMS, proof, now_ms=1_000_000 + WINDOW + 1)
    with pytest.raises(enrollment.EnrollmentRefused, match="ahead of this SCM's clock"):
        _check(CLAIMS, proof, now_ms=1_000_000 - WINDOW - 1)
    short = dataclasses.replace(CLAIMS, nonce=b"n" * 8)
    with pytest.raises(enrollment.EnrollmentRefused, match="nonce of 8 bytes"):
        _check(short, enrollment.enrollment_proof(SECRET, short))


def test_the_replay_guard_accepts_a_nonce_once_per_window_and_stays_bounded() -> None:
    guard = enrollment.ReplayGuard(WINDOW, capacity=3)
    guard.check_and_remember(CLAIMS, 1_000_000)
    with pytest.raises(enrollment.EnrollmentRefused, match="already used") as info:
        guard.check_and_remember(CLAIMS, 1_000_500)
    assert info.value.replay
    # the same nonce for another role is another request
    guard.check_and_remember(dataclasses.replace(CLAIMS, role="om"), 1_000_500)
    guard.check_and_remember(dataclasses.replace(CLAIMS, nonce=b"m" * 32), 1_000_500)
    with pytest.raises(enrollment.EnrollmentRefused, match="too many") as busy:
        guard.check_and_remember(dataclasses.replace(CLAIMS, nonce=b"o" * 32), 1_000_600)
    assert busy.value.busy
    # after the window the entries are forgotten (a proof that old is refused by its time anyway)
    guard.check_and_remember(dataclasses.replace(CLAIMS, nonce=b"o" * 32), 1_000_600 + WINDOW + 1)
    assert len(guard) == 1


# ---------------------------------------------------------------- rate limits


def test_a_noisy_source_exhausts_its_own_bucket_not_the_shared_one() -> None:
    rl = RateLimiter(per_source_rate=1, per_source_burst=3, total_rate=10, total_burst=5)
    now = 0
    assert [rl.acquire("10.0.0.1", now).allowed for _ in range(5)] == [True, True, True, False, False]
    refused = rl.acquire("10.0.0.1", now)
    assert refused.reason == "source" and "10.0.0.1" in refused.message and "per.source" in refused.message
    # another source still gets the two tokens left in the shared bucket, then the total limit applies
    assert rl.acquire("10.0.0.2", now).allowed and rl.acquire("10.0.0.2", now).allowed
    total = rl.acquire("10.0.0.3", now)
    assert not total.allowed and total.reason == "total" and "from all sources" in total.message
    # refill: one token per second per source, ten per second shared
    assert rl.acquire("10.0.0.1", now + 1000).allowed
    assert not rl.acquire("10.0.0.1", now + 1000).allowed


def test_the_number_of_tracked_sources_is_bounded() -> None:
    rl = RateLimiter(per_source_rate=1, per_source_burst=1, total_rate=1000, total_burst=1000, max_sources=16)
    for i in range(16):
        assert rl.acquire(f"10.0.0.{i}", 0).allowed
    # every tracked bucket is draining: a 17th source is refused rather than tracked
    assert not rl.acquire("10.0.1.1", 0).allowed
    assert rl.tracked_sources == 16
    # once buckets are full again they are forgotten first
    assert rl.acquire("10.0.1.1", 2000).allowed
    assert rl.tracked_sources <= 16


# ---------------------------------------------------------------- host names

SCM_HOSTS = frozenset({"scm1.example.com", "10.0.0.10"})
STRICT = reqs.HostPolicy(scm_hosts=SCM_HOSTS)
LOCAL = reqs.HostPolicy(allow_loopback=True, scm_hosts=SCM_HOSTS | {"127.0.0.1"})


@pytest.mark.parametrize(
    ("host", "ip", "why"),
    [
        ("*.example.com", "", "wildcards"),
        ("dn1.example.com", "*", "wildcards"),
        ("0.0.0.0", "", "unspecified"),
        ("::", "", "unspecified"),
        ("dn1.example.com", "0.0.0.0", "unspecified"),
        ("dn1.example.com", "::", "unspecified"),
        ("dn1.example.com", "::ffff:0.0.0.0", "unspecified"),
        ("127.0.0.1", "", "loopback"),
        ("dn1.example.com", "::1", "loopback"),
        ("localhost", "", "loopback"),
        ("scm.ozone-scm.invalid", "", "reserves"),
        ("SCM1.cid.OZONE-SCM.invalid.", "", "reserves"),
        ("scm1.example.com", "", "configured host of an SCM"),
        ("SCM1.example.com.", "", "configured host of an SCM"),
        ("dn1.example.com", "10.0.0.10", "configured host of an SCM"),
        ("dn1.example.com", "dn1.example.com", "not an IP address"),
        ("dn1.example.com", "224.0.0.1", "multicast"),
        ("", "", "no host name"),
    ],
)
def test_bad_host_names_and_ips_are_refused(host: str, ip: str, why: str) -> None:
    key = pki.generate_key(EC)
    csr = pki.build_csr(key, ids.datanode_subject("dn1", "u1", CLUSTER), EC)
    with pytest.raises(reqs.RequestRejected, match=why):
        reqs.approve_node_request(csr, role=ids.Role.DATANODE, cluster_id=CLUSTER, claimed_cluster_id=CLUSTER,
                                  owner_id="u1", hostname=host, ip=ip, policy=STRICT)


def test_loopback_only_in_local_mode_and_good_names_pass() -> None:
    key = pki.generate_key(EC)
    csr = pki.build_csr(key, ids.datanode_subject("dn1", "u1", CLUSTER), EC)
    for host, ip, policy in (("dn1.example.com", "10.0.0.1", STRICT), ("dn-0", "127.0.0.1", LOCAL),
                             ("127.0.0.1", "", LOCAL), ("dn1", "2001:db8::1", STRICT)):
        approved = reqs.approve_node_request(csr, role=ids.Role.DATANODE, cluster_id=CLUSTER,
                                             claimed_cluster_id=CLUSTER, owner_id="u1", hostname=host, ip=ip,
                                             policy=policy)
        assert approved.subject.common_name == f"dn@{host}"
    # local mode still refuses the other SCM names, the reserved space and unspecified addresses
    for host in ("scm1.example.com", "x.ozone-scm.invalid", "0.0.0.0"):
        with pytest.raises(reqs.RequestRejected):
            reqs.check_node_host(host, field="host name", what="datanode", policy=LOCAL)


# ---------------------------------------------------------------- one certificate per uuid


def _rec(serial: str, *, revoked: bool = False, days: int = 30, owner: str = "u1") -> reqs.IssuedRecord:
    return reqs.IssuedRecord(serial, ids.Role.DATANODE, owner, "", NOW + timedelta(days=days), revoked)


def test_an_enrolled_uuid_cannot_enrol_again_until_its_certificate_is_revoked() -> None:
    def check(issued: list[reqs.IssuedRecord], registered: str | None = None, host: str = "dn1") -> None:
        reqs.check_not_enrolled(ids.Role.DATANODE, "u1", host, issued=issued, registered_host=registered, now=NOW)

    check([])  # new
    check([_rec("5", owner="u2")])  # another uuid's certificate
    with pytest.raises(reqs.RequestRejected, match="already holds certificate serial 5") as info:
        check([_rec("5")])
    assert "ozone-scm admin cert revoke 5" in str(info.value)
    check([_rec("5", revoked=True)])  # revoked: the node may enrol again
    check([_rec("5", days=-1)])  # expired and not registered
    with pytest.raises(reqs.RequestRejected, match="never revoked"):
        check([_rec("5", days=-1)], registered="dn1")  # registered with an expired, unrevoked certificate
    check([_rec("5", days=-1, revoked=True)], registered="dn1")
    with pytest.raises(reqs.RequestRejected, match="registered at host 'dn1'"):
        check([], registered="dn1", host="other")  # registered without certificate: keeps its host
    check([], registered="dn1")


def test_a_certificate_renews_once_and_never_once_revoked() -> None:
    reqs.check_renewable("7", revoked=False, superseded_by="")
    with pytest.raises(reqs.RequestRejected, match=r"already renewed.*serial 9"):
        reqs.check_renewable("7", revoked=True, superseded_by="9")
    with pytest.raises(reqs.RequestRejected, match="has been revoked and cannot be renewed"):
        reqs.check_renewable("7", revoked=True, superseded_by="")
