"""The replicated certificate store of issue 19: lookups by public key through an index (no parse per
call), revocations keyed by canonical serials only (old non-canonical records still revoke what they
name), and a renewal's supersession that takes effect after the overlap and yields to a revocation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from scm_state_harness import make_conf, make_scm

from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha import stateful_service_state_manager as ssm
from scm_server.proto import hdds_pb2
from scm_server.scm import StorageContainerManager
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids

EC = pki.KeySpec("EC", 256, "SHA256withECDSA")


def _cert(serial: int) -> tuple[hdds_pb2.CertificateProto, str]:
    key = pki.generate_key(EC)
    cert = pki.build_root_ca(key, ids.client_subject(f"user{serial}"), serial=serial, now=datetime.now(UTC),
                             lifetime=timedelta(days=1), spec=EC)
    proto = hdds_pb2.CertificateProto(serialId=str(serial), x509Certificate=pki.cert_pem(cert), nodeType="CLIENT",
                                      ownerId=f"user{serial}")
    return proto, pki.public_key_sha256(cert)


async def test_lookups_by_key_use_the_index_and_parse_nothing_per_call(tmp_path: Path, monkeypatch: Any) -> None:
    scm = await make_scm(tmp_path)
    store = scm.certificate_store
    made = [_cert(100 + i) for i in range(20)]
    for proto, _ in made[:10]:
        await store.store_valid_certificate(proto, False)
    assert store.certificate_for_key(made[3][1]) == made[3][0]  # builds the index: each certificate parsed once
    parsed = []
    real = pki.load_certificate
    monkeypatch.setattr(ssm.pki, "load_certificate", lambda *a, **k: parsed.append(1) or real(*a, **k))
    for proto, sha in made[:10]:
        assert store.certificate_for_key(sha.upper()) == proto
    assert store.certificate_for_key("0" * 64) is None
    assert parsed == []
    for proto, _ in made[10:]:
        await store.store_valid_certificate(proto, False)  # recorded: indexed once each
    assert len(parsed) == 10
    assert store.certificate_for_key(made[15][1]) == made[15][0] and len(parsed) == 10
    assert store.serials_of("CLIENT", "user105") == ["105"] and store.not_after_ms("105")
    await scm.stop()


async def test_revocations_are_keyed_by_canonical_serials(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    store = scm.certificate_store
    for bad in ("0x7b", "+123", "", "0", "1 23", "12a"):
        with pytest.raises(SCMException) as info:
            await store.revoke_certificates([hdds_pb2.RevokedCertificateProto(serialId=bad, revocationTimeMs=1)])
        assert info.value.result is ResultCodes.INVALID_REQUEST and "decimal ASCII digits" in info.value.message
    assert not store.revocations()
    # a log entry an older leader replicated with the serial as typed is stored under the serial it names
    await store.revoke_certificates([hdds_pb2.RevokedCertificateProto(serialId="0123", revocationTimeMs=1)])
    await store.revoke_certificates([hdds_pb2.RevokedCertificateProto(serialId="١٢٤", revocationTimeMs=1)])
    assert store.is_revoked("123") and store.is_revoked("124") and store.revoked_serials() == {"123", "124"}
    assert scm.metadata_store.revoked_certs.get("0123") is None and scm.metadata_store.revoked_certs.get("123")
    # records written before serials were canonical: kept as stored, and they revoke the serial they name
    scm.metadata_store.revoked_certs.put("0456", hdds_pb2.RevokedCertificateProto(serialId="0456", revocationTimeMs=1))
    scm.metadata_store.revoked_certs.put("٧٨٩", hdds_pb2.RevokedCertificateProto(serialId="٧٨٩", revocationTimeMs=1))
    store.reinitialize()
    assert store.is_revoked("456") and store.is_revoked("789")
    assert scm.metadata_store.revoked_certs.get("0456") is not None  # nothing stored is lost
    await scm.stop()


async def test_a_supersession_takes_effect_after_the_overlap_and_yields_to_a_revocation(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    store = scm.certificate_store
    await store.revoke_certificates([hdds_pb2.RevokedCertificateProto(
        serialId="200", revocationTimeMs=5_000, reason=4, supersededBy="201")])
    assert not store.is_revoked("200", now_ms=4_999)  # still in its overlap for the per-call check
    assert store.is_revoked("200", now_ms=5_000)
    assert store.is_revoked("200")  # without a time (renewal, listings): superseded already
    # an administrator's revocation during the overlap replaces the supersession at once
    await store.revoke_certificates([hdds_pb2.RevokedCertificateProto(serialId="200", revocationTimeMs=4_000, reason=1)])
    assert store.is_revoked("200", now_ms=4_001)
    revocation = store.revocation("200")
    assert revocation is not None and revocation.reason == 1 and not revocation.supersededBy
    # and nothing replaces a definitive revocation
    await store.revoke_certificates([hdds_pb2.RevokedCertificateProto(
        serialId="200", revocationTimeMs=9_000, reason=4, supersededBy="202")])
    revocation = store.revocation("200")
    assert revocation is not None and revocation.reason == 1
    await scm.stop()
    again = await StorageContainerManager.create(make_conf(tmp_path))
    revocation = again.certificate_store.revocation("200")
    assert revocation is not None and revocation.reason == 1
    await again.stop()
