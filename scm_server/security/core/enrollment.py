"""Enrolment proofs: how a party without a certificate proves it may get one, and how it learns
to trust the cluster's root CA (pure).

Ozone authenticates certificate requests with Kerberos; we have none. An enrolling party (a
bootstrapping SCM, a datanode, an OM) instead knows a per-role **enrolment secret**
(``ozone.scm.security.enrollment.<role>.secret.file``), as a kubeadm bootstrap token:

* the request carries ``HMAC-SHA256(secret, "ozone-scm-enroll" | role | sha256(CSR DER))``: the
  secret never travels, the proof is bound to this CSR (so to the requester's key), and a datanode
  secret can never produce an SCM (CA) request, because the role is part of the MAC and each role
  has its own secret;
* a caller that has no root CA certificate yet (CA mode ``scm``: the primordial made it) learns it
  from the chain the security port presents and trusts it only after the SCM proves it knows the
  same secret: ``HMAC-SHA256(secret, "ozone-scm-ca" | nonce | sha256(root DER))`` over the caller's
  fresh nonce. A man in the middle without the secret cannot produce it.

Who calls it: the security service (verifying), :mod:`scm_server.security.cert_client` (proving).
No I/O: secrets are passed in as bytes.
"""

from __future__ import annotations

import hashlib
import hmac

MIN_SECRET_BYTES = 16
_ENROLL = b"ozone-scm-enroll"
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


def enrollment_proof(secret: bytes, role: str, csr_der: bytes) -> bytes:
    return hmac.new(secret, _ENROLL + b"|" + role.encode() + b"|" + _sha(csr_der), hashlib.sha256).digest()


def verify_enrollment_proof(secret: bytes, role: str, csr_der: bytes, proof: bytes) -> bool:
    return hmac.compare_digest(enrollment_proof(secret, role, csr_der), proof)


def ca_proof(secret: bytes, nonce: bytes, root_der: bytes) -> bytes:
    return hmac.new(secret, _CA + b"|" + nonce + b"|" + _sha(root_der), hashlib.sha256).digest()


def verify_ca_proof(secret: bytes, nonce: bytes, root_der: bytes, proof: bytes) -> bool:
    return hmac.compare_digest(ca_proof(secret, nonce, root_der), proof)
