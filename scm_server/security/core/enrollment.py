"""Enrolment proofs: how a party without a certificate proves it may get one, and how it learns
to trust the cluster's root CA (pure).

Ozone authenticates certificate requests with Kerberos; we have none. An enrolling party (a
bootstrapping SCM, a datanode, an OM) instead knows a per-role **enrolment secret**
(``ozone.scm.security.enrollment.<role>.secret.file``), as a kubeadm bootstrap token:

* the request carries ``HMAC-SHA256(secret, "ozone-scm-enroll-v2" | role | cluster id | node id |
  owner id (scmUuid, datanode uuid, OM id) | host | IP | sha256(CSR DER) | time | nonce)``, each
  field length-prefixed (:class:`EnrollmentClaims`): the secret never travels, the proof is bound to
  the whole request (a replay with any field changed does not verify, and a datanode secret can never
  produce an SCM request: the role is in the MAC and each role has its own secret), and to a moment:
  the SCM refuses a proof whose time is more than the window away from its clock, and a nonce it has
  already seen within that window (:class:`ReplayGuard`);
* a caller that has no root CA certificate yet (CA mode ``scm``: the primordial made it) learns it
  from the chain the security port presents and trusts it only after the SCM proves it knows the
  same secret: ``HMAC-SHA256(secret, "ozone-scm-ca" | nonce | sha256(root DER))`` over the caller's
  fresh nonce. A man in the middle without the secret cannot produce it.

Who calls it: the security service (verifying), :mod:`scm_server.security.cert_client` (proving).
No I/O: secrets are passed in as bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import itertools
from collections import OrderedDict

MIN_SECRET_BYTES = 16
MIN_NONCE_BYTES = 16
_ENROLL = b"ozone-scm-enroll-v2"
_CA = b"ozone-scm-ca"


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def check_secret(secret: bytes, where: str) -> bytes:
    """Trimmed secret bytes; refuses short secrets (the file should hold 32+ random bytes)."""
    value = secret.strip()
    if len(value) < MIN_SECRET_BYTES:
        raise ValueError(
            f"the enrolment secret in {where} is {len(value)} bytes; use at least {MIN_SECRET_BYTES} random bytes "
            "(e.g. `openssl rand -hex 32 > FILE`)"
        )
    return value


class EnrollmentRefused(ValueError):
    """A proof that must not be accepted; ``replay`` tells a replay from a bad or stale proof."""

    def __init__(self, message: str, *, replay: bool = False, busy: bool = False) -> None:
        super().__init__(message)
        self.replay = replay
        self.busy = busy


@dataclasses.dataclass(frozen=True)
class EnrollmentClaims:
    """Everything an enrolment request asks for, as the proof covers it.

    ``node_id`` is the SCM node id (``ozone.scm.node.id``) for SCMs and empty for datanodes and OMs;
    ``owner_id`` the scmUuid, datanode uuid or OM id; ``time_ms`` the requester's wall clock (ms since
    the epoch); ``nonce`` 16+ random bytes chosen per request."""

    role: str
    cluster_id: str
    node_id: str
    owner_id: str
    host: str
    ip: str
    csr_der: bytes
    time_ms: int
    nonce: bytes

    def message(self) -> bytes:
        parts = [
            self.role.encode(),
            self.cluster_id.encode(),
            self.node_id.encode(),
            self.owner_id.encode(),
            self.host.encode(),
            self.ip.encode(),
            _sha(self.csr_der),
            str(int(self.time_ms)).encode(),
            self.nonce,
        ]
        return _ENROLL + b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def enrollment_proof(secret: bytes, claims: EnrollmentClaims) -> bytes:
    return hmac.new(secret, claims.message(), hashlib.sha256).digest()


def verify_enrollment_proof(secret: bytes, claims: EnrollmentClaims, proof: bytes) -> bool:
    return hmac.compare_digest(enrollment_proof(secret, claims), proof)


def check_enrollment(
    secret: bytes, claims: EnrollmentClaims, proof: bytes, *, now_ms: int, window_ms: int, secret_key: str
) -> None:
    """Refuse a proof that does not cover exactly these claims with this secret, or whose time is
    more than ``window_ms`` away from ``now_ms``. The nonce is checked separately (:class:`ReplayGuard`)
    once the proof verified, so that unauthenticated junk cannot fill the guard."""
    if len(claims.nonce) < MIN_NONCE_BYTES:
        raise EnrollmentRefused(
            f"the enrolment request carries a nonce of {len(claims.nonce)} bytes; at least {MIN_NONCE_BYTES} "
            "random bytes are needed (an enrolment client of this version sends them)"
        )
    if not verify_enrollment_proof(secret, claims, proof):
        raise EnrollmentRefused(
            f"enrolment proof does not match: the requester does not know the {claims.role} enrolment secret "
            f"({secret_key}), or the request was changed after it was signed (the proof covers role, cluster id, "
            "node id, uuid, host, IP, CSR, time and nonce)"
        )
    skew = claims.time_ms - now_ms
    if abs(skew) > window_ms:
        raise EnrollmentRefused(
            f"enrolment proof made at {claims.time_ms} ms is {abs(skew) / 1000:.0f} s "
            f"{'ahead of' if skew > 0 else 'behind'} this SCM's clock; proofs are accepted for "
            f"{window_ms / 1000:.0f} s (ozone.scm.security.enrollment.proof.window): synchronise the clocks "
            "(NTP) and send a fresh request"
        )


class ReplayGuard:
    """The nonces of accepted proofs, remembered until their proof's window has passed (pure: the
    caller passes ``now_ms``). Bounded: at ``capacity`` live entries new requests are refused as busy
    (the enrolment rate limit keeps it far from that)."""

    def __init__(self, window_ms: int, capacity: int = 100_000) -> None:
        self.window_ms = window_ms
        self.capacity = capacity
        self._seen: OrderedDict[bytes, int] = OrderedDict()  # key -> expiry, in insertion order

    def __len__(self) -> int:
        return len(self._seen)

    def _purge(self, now_ms: int) -> None:
        # insertion order is not expiry order (times differ by skew); purge what is due, cheaply
        for key in list(itertools.islice(self._seen, max(64, len(self._seen) // 8))):
            if self._seen[key] < now_ms:
                del self._seen[key]
        if len(self._seen) >= self.capacity:
            for key, expiry in list(self._seen.items()):
                if expiry < now_ms:
                    del self._seen[key]

    def check_and_remember(self, claims: EnrollmentClaims, now_ms: int) -> None:
        key = _sha(claims.role.encode() + b"|" + claims.nonce)
        self._purge(now_ms)
        expiry = self._seen.get(key)
        if expiry is not None and expiry >= now_ms:
            raise EnrollmentRefused(
                "this enrolment request was already used (its nonce was seen); a replayed request is refused: "
                "send a fresh request with a new nonce",
                replay=True,
            )
        if len(self._seen) >= self.capacity:
            raise EnrollmentRefused("too many enrolment requests in the proof window; retry later", busy=True)
        self._seen[key] = max(claims.time_ms, now_ms) + self.window_ms


def ca_proof(secret: bytes, nonce: bytes, root_der: bytes) -> bytes:
    return hmac.new(secret, _CA + b"|" + nonce + b"|" + _sha(root_der), hashlib.sha256).digest()


def verify_ca_proof(secret: bytes, nonce: bytes, root_der: bytes, proof: bytes) -> bool:
    return hmac.compare_digest(ca_proof(secret, nonce, root_der), proof)
