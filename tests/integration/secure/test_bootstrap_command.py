"""``ozone-scm scm --init`` / ``scm --bootstrap`` with security on parse the security configuration once
per command and hand it down (to the cluster-id fetch over the security port, the interrupted-bootstrap
check and the sub-CA enrolment).

The commands run in-process through the CLI's ``main``; the running ring's leader is played at the
network boundary (``SecurityProtocolClient.establish_trust`` / ``enroll_scm``) by a test CA that signs
the bootstrapping SCM's real CSR, so everything between the command line and the socket is the real code.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from ha.minihost import alloc_ports, make_conf

from scm_server.cli.main import main
from scm_server.conf import OzoneConfiguration
from scm_server.conf.security import SecurityConfig
from scm_server.metadata import SCMStorageConfig
from scm_server.proto import scm_security_pb2
from scm_server.security import init as sec_init
from scm_server.security.cert_client import SecurityProtocolClient, TrustedInfo
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids

pytestmark = pytest.mark.processes  # whole-SCM scenarios: make test-slow

NODES = ["scm1", "scm2", "scm3"]
CLUSTER = "CID-" + str(uuid.uuid4())
EC = pki.KeySpec("EC", 256, "SHA256withECDSA")


def _secure_conf_dir(tmp_path: Path, node: str, **extra: str) -> Path:
    secret = tmp_path / "scm-enrolment-secret"
    secret.write_text("x" * 64)
    conf = make_conf(
        tmp_path, NODES, node, alloc_ports(NODES),
        **{
            "ozone.security.enabled": "true",
            "hdds.grpc.tls.enabled": "true",
            "hdds.key.algo": "EC",
            "hdds.key.len": "256",
            "hdds.x509.signature.algorithm": "SHA256withECDSA",
            "ozone.scm.security.enrollment.scm.secret.file": str(secret),
            **extra,
        },
    )
    conf_dir = tmp_path / f"{node}-conf"
    conf_dir.mkdir()
    (conf_dir / "ozone-site.xml").write_text(conf.to_site_xml())
    return conf_dir


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[OzoneConfiguration]:
    """Every ``SecurityConfig.from_conf`` call, recorded."""
    calls: list[OzoneConfiguration] = []
    original = SecurityConfig.from_conf.__func__  # type: ignore[attr-defined]

    def counting(cls: type[SecurityConfig], conf: OzoneConfiguration) -> SecurityConfig:
        calls.append(conf)
        result: SecurityConfig = original(cls, conf)
        return result

    monkeypatch.setattr(SecurityConfig, "from_conf", classmethod(counting))
    return calls


class FakeLeader:
    """The running ring's leader as the bootstrapping SCM sees it on the security port: it answers
    GetScmInfo with the cluster id and signs the SCM's CSR with its root CA."""

    def __init__(self) -> None:
        now = datetime.now(UTC)
        self.root_key = pki.generate_key(EC)
        self.root = pki.build_root_ca(self.root_key, ids.root_ca_subject("127.0.0.1", str(uuid.uuid4()), CLUSTER),
                                      serial=1, now=now, lifetime=timedelta(days=30), spec=EC)
        self.signed: list[x509.Certificate] = []

    async def establish_trust(self, client: SecurityProtocolClient) -> TrustedInfo:
        info = scm_security_pb2.SCMSecurityInfoResponseProto(clusterId=CLUSTER, scmId="primordial-scm-id")
        return TrustedInfo(roots=(self.root,), info=info, address="127.0.0.1:9961", proven=True)

    async def enroll_scm(
        self, client: SecurityProtocolClient, csr: x509.CertificateSigningRequest,
        details: scm_security_pb2.ScmNodeDetailsProto,
    ) -> scm_security_pb2.SCMGetCertResponseProto:
        assert details.clusterId == CLUSTER and details.scmNodeId == "scm2"
        cert = pki.issue_certificate(
            ids.scm_subject(details.hostName, details.scmId, CLUSTER), csr.public_key(),  # type: ignore[arg-type]
            issuer=self.root, issuer_key=self.root_key, serial=1000 + len(self.signed), now=datetime.now(UTC),
            lifetime=timedelta(days=7), profile=pki.Profile.SUB_CA, spec=EC,
        )
        self.signed.append(cert)
        return scm_security_pb2.SCMGetCertResponseProto(
            responseCode=scm_security_pb2.SCMGetCertResponseProto.success,
            x509Certificate=pki.cert_pem(cert), x509RootCACertificate=pki.cert_pem(self.root),
        )


@pytest.fixture
def leader(monkeypatch: pytest.MonkeyPatch) -> FakeLeader:
    fake = FakeLeader()
    monkeypatch.setattr(SecurityProtocolClient, "enroll_scm",
                        lambda client, csr, details: fake.enroll_scm(client, csr, details))
    monkeypatch.setattr(SecurityProtocolClient, "establish_trust",
                        lambda client: fake.establish_trust(client))
    return fake


def _run(*argv: str) -> None:
    main(list(argv))


def test_bootstrap_parses_the_security_configuration_once(
    tmp_path: Path, parses: list[OzoneConfiguration], leader: FakeLeader
) -> None:
    conf_dir = _secure_conf_dir(tmp_path, "scm2")
    _run("--conf", str(conf_dir), "scm", "--bootstrap")
    assert len(parses) == 1, "scm --bootstrap parsed the security configuration more than once"
    # and the one parse reached every step: cluster id over the security port, the sub-CA signed by the leader
    (issued,) = leader.signed
    storage = SCMStorageConfig(tmp_path / "scm2")
    assert storage.cluster_id == CLUSTER and storage.scm_cert_serial_id == str(issued.serial_number)
    stored = sec_init.sub_ca_store(tmp_path / "scm2", SecurityConfig()).load()
    assert stored.certificate == issued and ids.identity_of(issued).owner_id == storage.scm_id


def test_init_and_bootstrap_on_the_primordial_parse_it_once(tmp_path: Path, parses: list[OzoneConfiguration]) -> None:
    conf_dir = _secure_conf_dir(tmp_path, "scm1")
    _run("--conf", str(conf_dir), "scm", "--init", "--bootstrap")
    assert len(parses) == 1
    storage = SCMStorageConfig(tmp_path / "scm1")
    sub = sec_init.sub_ca_store(tmp_path / "scm1", SecurityConfig()).load()
    assert storage.scm_cert_serial_id == sub.serial_id and ids.identity_of(sub.certificate).owner_id == storage.scm_id


def test_a_malformed_security_key_stops_bootstrap_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], leader: FakeLeader
) -> None:
    conf_dir = _secure_conf_dir(tmp_path, "scm2", **{"hdds.key.len": "1000"})
    with pytest.raises(SystemExit) as exit_info:
        _run("--conf", str(conf_dir), "scm", "--bootstrap")
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "SCM bootstrap failed: security: hdds.key.len=1000" in err and "Traceback" not in err
    assert not leader.signed and not SCMStorageConfig(tmp_path / "scm2").is_initialized
