"""Certificates of simulated datanodes (what a secure Ozone datanode does before talking to SCM).

Who calls it: :class:`~scm_server.datanode_sim.simulator.DatanodeSimulator` when it is given a
:class:`DatanodeSecurity`, and ``ozone-scm datanode-sim`` / ``local up --secure`` which build one
from the configuration. Each simulated datanode keeps its identity (``datanode.id``: its uuid) and
its key and certificate under ``<base_dir>/<hostname>/dn/{keys,certs}``; a datanode without a
certificate enrols with the leader over the security port (CSR + enrolment proof), then uses it
for every connection; a certificate within the renewal grace period is renewed over mutual TLS
(the channels follow the new one). It only speaks the wire protocol (import contract of the
simulator).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509

from scm_server.conf import OzoneConfiguration
from scm_server.conf.security import SecurityConfig
from scm_server.exceptions import ConfigError
from scm_server.proto import scm_security_pb2
from scm_server.security.cert_client import NodeCertificateClient, SecurityProtocolClient
from scm_server.security.core import certificates as pki
from scm_server.security.keystore import KeyStore, load_certificate_file, read_secret

LOG = logging.getLogger(__name__)


def _is_loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclasses.dataclass
class DatanodeSecurity:
    base_dir: Path
    security_addresses: Sequence[str]
    secret: bytes
    roots: tuple[x509.Certificate, ...] = ()
    spec: pki.KeySpec = dataclasses.field(default_factory=pki.KeySpec)
    renew_grace: timedelta = timedelta(days=28)
    renew_check_interval: float = 3600.0
    now: Callable[[], datetime] = _utc_now
    config: SecurityConfig = dataclasses.field(default_factory=SecurityConfig)

    @classmethod
    def from_conf(
        cls, conf: OzoneConfiguration, base_dir: Path, security_addresses: Sequence[str]
    ) -> DatanodeSecurity | None:
        """From the SCMs' configuration (datanode enrolment secret, trust anchor, key spec); None
        without mutual TLS. ``security_addresses``: the SCMs' ozone.scm.security.service.grpc.port."""
        config = SecurityConfig.from_conf(conf)
        if not config.tls:
            return None
        secret_file = config.enrollment_secret_file("datanode")
        if secret_file is None:
            raise ConfigError(
                "secure datanodes need ozone.scm.security.enrollment.datanode.secret.file (the datanode enrolment "
                "secret, the same file content as on the SCMs)"
            )
        roots: tuple[x509.Certificate, ...] = ()
        if config.rootca_certificate_file:
            roots = tuple(load_certificate_file(config.rootca_certificate_file, "hdds.x509.rootca.certificate.file"))
        return cls(
            base_dir=base_dir,
            security_addresses=list(security_addresses),
            secret=read_secret(secret_file, "ozone.scm.security.enrollment.datanode.secret.file"),
            roots=roots,
            spec=pki.KeySpec(config.key_algorithm.upper(), config.key_length, config.signature_algorithm),
            renew_grace=config.renew_grace_duration,
            renew_check_interval=config.renew_check_interval.total_seconds(),
            config=config,
        )

    def node_dir(self, hostname: str) -> Path:
        return self.base_dir / hostname

    def datanode_uuid(self, hostname: str) -> str:
        """The datanode's persisted uuid (Ozone's datanode.id), created on first use."""
        path = self.node_dir(hostname) / "datanode.id"
        if path.exists():
            return path.read_text().strip()
        path.parent.mkdir(parents=True, exist_ok=True)
        value = str(uuid.uuid4())
        path.write_text(value + "\n")
        return value

    def client_for(
        self, hostname: str, dn_uuid: str, ip: str, cluster_id: str, renew_addresses: Sequence[str]
    ) -> NodeCertificateClient:
        """The certificate client of one simulated datanode. A simulated datanode's IP is loopback; the
        SCMs refuse loopback addresses in certificates unless they run on one machine
        (``ozone.scm.security.enrollment.loopback.allowed``), so elsewhere the IP is left out of the request."""
        if _is_loopback(ip) and not self.config.enrollment_loopback_allowed:
            ip = ""
        protocol = SecurityProtocolClient(
            self.security_addresses, roots=self.roots, role="datanode", secret=self.secret, rounds=30,
            scm_role_check=self.config.scm_role_check,
        )
        return NodeCertificateClient(
            store=KeyStore(self.node_dir(hostname) / "dn", self.config),
            role="datanode",
            details=scm_security_pb2.NodeCertDetailsProto(
                clusterId=cluster_id, uuid=dn_uuid, hostName=hostname, ipAddress=ip
            ),
            protocol=protocol,
            spec=self.spec,
            renew_grace=self.renew_grace,
            now=self.now,
            renew_addresses=renew_addresses,
        )

    async def cluster_id(self) -> str:
        """Learn the cluster id (and, without a root file, the root CA, proven with the secret)."""
        protocol = SecurityProtocolClient(
            self.security_addresses, roots=self.roots, role="datanode", secret=self.secret, rounds=30,
            scm_role_check=self.config.scm_role_check,
        )
        trusted = await protocol.establish_trust()
        self.roots = trusted.roots
        return trusted.info.clusterId
