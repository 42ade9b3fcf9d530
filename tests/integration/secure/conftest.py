"""A secure 3-SCM quorum (security + mutual TLS on every port) with 3 simulated datanodes, shared
by the attack tests of this package (starting one costs ~30 s), plus helpers to call any service
with any credentials over real sockets."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from ha.harness import TEST_SETTINGS, start_sim, wait_open_pipeline

from scm_server.conf.security import SecurityConfig
from scm_server.datanode_sim import DatanodeSimulator
from scm_server.local.cluster import SERVICE_ID, free_port
from scm_server.local.quorum import HALocalCluster
from scm_server.security.core import certificates as pki
from scm_server.security.init import sub_ca_store


@dataclasses.dataclass
class SecureQuorum:
    cluster: HALocalCluster
    sim: DatanodeSimulator
    root: pki.x509.Certificate
    https_ports: list[int]

    def sub_ca(self, index: int) -> tuple[pki.x509.Certificate, pki.PrivateKey]:
        """An SCM's sub-CA certificate and key, read from its keystore (a test's privilege, to forge
        certificates that chain to the real root)."""
        m = sub_ca_store(self.cluster.scms[index].metadata_dir, SecurityConfig()).load()
        return m.certificate, m.key


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def quorum(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SecureQuorum]:
    base: Path = tmp_path_factory.mktemp("secure") / "c"
    cluster = HALocalCluster(base, 3, settings={**TEST_SETTINGS, "ozone.http.policy": "HTTP_AND_HTTPS"}, secure=True)
    https_ports = [free_port() for _ in cluster.scms]
    for s, port in zip(cluster.scms, https_ports, strict=True):
        cluster.node_settings[str(s.node_id)] = {f"ozone.scm.https-address.{SERVICE_ID}.{s.node_id}": f"127.0.0.1:{port}"}
    sim = None
    try:
        cluster.start_quorum()
        sim = await start_sim(cluster, 3)
        await cluster.wait_healthy_quorum(timeout=90)
        await wait_open_pipeline(cluster)
        assert cluster.secure is not None
        root = pki.load_certificate(cluster.secure.root_cert.read_bytes())
        yield SecureQuorum(cluster, sim, root, https_ports)
    finally:
        if sim is not None:
            await sim.stop()
        cluster.stop_all()
