"""Enrolment requests as a client of this version makes them (the proof covers every field, a time and
a nonce), for tests that forge, replay or alter them."""

from __future__ import annotations

import os
import time
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from scm_server.proto import scm_security_pb2
from scm_server.security.core import enrollment


def proof_fields(
    secret: bytes,
    role: str,
    csr: x509.CertificateSigningRequest,
    details: scm_security_pb2.ScmNodeDetailsProto | scm_security_pb2.NodeCertDetailsProto,
    *,
    time_ms: int | None = None,
    nonce: bytes | None = None,
) -> dict[str, Any]:
    """``enrollmentProof``, ``enrollmentTimeMs`` and ``enrollmentNonce`` of a request for ``details``."""
    t = int(time.time() * 1000) if time_ms is None else time_ms
    n = os.urandom(32) if nonce is None else nonce
    der = csr.public_bytes(serialization.Encoding.DER)
    if isinstance(details, scm_security_pb2.ScmNodeDetailsProto):
        claims = enrollment.EnrollmentClaims(role, details.clusterId, details.scmNodeId, details.scmId,
                                             details.hostName, "", der, t, n)
    else:
        claims = enrollment.EnrollmentClaims(role, details.clusterId, "", details.uuid, details.hostName,
                                             details.ipAddress, der, t, n)
    return {"enrollmentProof": enrollment.enrollment_proof(secret, claims), "enrollmentTimeMs": t, "enrollmentNonce": n}
