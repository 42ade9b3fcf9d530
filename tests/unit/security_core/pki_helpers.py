"""A small test PKI (root -> sub-CA -> datanode/client) built with the pure builders, fixed clock."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509

from scm_server.conf import OzoneConfiguration
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
EC = pki.KeySpec("EC", 256, "SHA256withECDSA")
CLUSTER = "CID-5f0d4a8e-1111-4222-8333-944455556666"
SCM1 = "0b5c4c2e-0000-4000-8000-000000000001"


def secure_scm_conf(tmp: Path, datanode_secret: bytes, **extra: str) -> OzoneConfiguration:
    """A one-SCM secure configuration under ``tmp`` (EC keys, mutual TLS, ``admin`` the administrator, no datanode
    needed to leave safemode) with the datanode enrolment secret written to ``tmp/dn.secret``; ``extra`` keys
    (dotted names as keyword arguments through ``**{...}``) are added."""
    secret = tmp / "dn.secret"
    secret.write_bytes(datanode_secret)
    return OzoneConfiguration({
        "ozone.metadata.dirs": str(tmp / "meta"),
        "ozone.security.enabled": "true",
        "hdds.grpc.tls.enabled": "true",
        "hdds.key.algo": "EC",
        "hdds.key.len": "256",
        "hdds.x509.signature.algorithm": "SHA256withECDSA",
        "ozone.administrators": "admin",
        "ozone.scm.security.enrollment.datanode.secret.file": str(secret),
        "hdds.scm.safemode.min.datanode": "0",
        **extra,
    })


@dataclasses.dataclass
class SamplePKI:
    root: x509.Certificate
    root_key: pki.PrivateKey
    sub: x509.Certificate
    sub_key: pki.PrivateKey

    def datanode(self, uuid: str = "dn-1", host: str = "127.0.0.1", serial: int = 3,
                 now: datetime = NOW, lifetime: timedelta = timedelta(days=30)) -> tuple[x509.Certificate, pki.PrivateKey]:
        key = pki.generate_key(EC)
        cert = pki.issue_certificate(
            ids.datanode_subject(host, uuid, CLUSTER), key.public_key(), issuer=self.sub, issuer_key=self.sub_key,
            serial=serial, now=now, lifetime=lifetime, profile=pki.Profile.END_ENTITY, spec=EC,
        )
        return cert, key

    def client(self, user: str = "admin", serial: int = 4) -> tuple[x509.Certificate, pki.PrivateKey]:
        key = pki.generate_key(EC)
        cert = pki.issue_certificate(
            ids.client_subject(user, CLUSTER), key.public_key(), issuer=self.root, issuer_key=self.root_key,
            serial=serial, now=NOW, lifetime=timedelta(days=30), profile=pki.Profile.END_ENTITY, spec=EC,
        )
        return cert, key


def make_pki(spec: pki.KeySpec = EC, cluster: str = CLUSTER, now: datetime = NOW) -> SamplePKI:
    root_key = pki.generate_key(spec)
    root = pki.build_root_ca(root_key, ids.root_ca_subject("127.0.0.1", SCM1, cluster), serial=1, now=now,
                             lifetime=timedelta(days=3650), spec=spec)
    sub_key = pki.generate_key(spec)
    sub = pki.issue_certificate(
        ids.scm_subject("127.0.0.1", SCM1, cluster), sub_key.public_key(), issuer=root, issuer_key=root_key,
        serial=2, now=now, lifetime=timedelta(days=365), profile=pki.Profile.SUB_CA, spec=spec,
    )
    return SamplePKI(root, root_key, sub, sub_key)
