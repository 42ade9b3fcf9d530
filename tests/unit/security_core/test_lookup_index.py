"""The anonymous ``GetCertificate(publicKeySha256)`` answers from the store's index: however many
certificates are recorded, a lookup parses none of them (issue 19, point 6)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from scm_server.proto import hdds_pb2, scm_security_pb2
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids
from scm_server.server import endpoints
from scm_server.server.grpc_services import RpcMetrics
from scm_server.server.security_services import SecurityProtocolService

from .test_renewal_clock import EC, Harness, harness  # noqa: F401  (the in-process secure SCM fixture)


async def test_lookup_by_public_key_parses_no_stored_certificate(harness: Harness, monkeypatch: Any) -> None:  # noqa: F811
    h = harness
    service = SecurityProtocolService(h.scm, endpoints.Protocol.SECURITY, h.conf.get_str, RpcMetrics(None), h.security)
    m = h.security.material.current
    shas = []
    for i in range(30):
        key = pki.generate_key(EC)
        cert = pki.issue_certificate(ids.client_subject(f"u{i}"), key.public_key(), issuer=m.certificate, issuer_key=m.key,
                                     serial=1000 + i, now=datetime.now(UTC), lifetime=timedelta(days=1),
                                     profile=pki.Profile.END_ENTITY, spec=EC)
        await h.ca.store.store_valid_certificate(hdds_pb2.CertificateProto(
            serialId=str(1000 + i), x509Certificate=pki.cert_pem(cert), nodeType="CLIENT", ownerId=f"u{i}"), False)
        shas.append(pki.public_key_sha256(cert))

    async def lookup(sha: str) -> Any:
        req = scm_security_pb2.SCMGetCertificateRequestProto(publicKeySha256=sha)
        return await service.GetCertificate(req, None)  # type: ignore[arg-type]

    assert (await lookup(shas[0])).certificate.serialId == "1000"  # the first lookup may build the index
    parsed: list[int] = []
    real = pki.load_certificate
    monkeypatch.setattr(pki, "load_certificate", lambda *a, **k: parsed.append(1) or real(*a, **k))
    for i, sha in enumerate(shas):
        assert (await lookup(sha)).certificate.serialId == str(1000 + i)
    assert parsed == [], f"{len(parsed)} certificates parsed for {len(shas)} lookups"
