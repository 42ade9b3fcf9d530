"""Issue 29 (6) through the server edge: an in-process secure SCM whose sub-CA names its Kubernetes host
(``scm-0.scm-headless.ozone.svc.cluster.local``, as the operator's members are named) refuses, over a real socket to
its gRPC security port, a datanode enrolment for that name, its Pod and Service forms, and a name in its certificate;
the refusal names the host and the member and nothing is recorded. A datanode of its own name in the same namespace
enrols. (Issuance over Hadoop RPC is refused altogether: tests/unit/hadoop_rpc.)"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import grpc.aio
import pytest
import pytest_asyncio

from scm_server.ca.scm_security import SCMSecurity
from scm_server.clock import FakeClock
from scm_server.conf.security import SecurityConfig
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.metadata import SCMStorageConfig
from scm_server.proto import scm_security_pb2
from scm_server.scm import StorageContainerManager
from scm_server.security import init as sec_init
from scm_server.security.cert_client import SecurityProtocolClient
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids
from scm_server.server import endpoints
from scm_server.server.grpc_services import RpcMetrics
from scm_server.server.security_services import SecurityProtocolService

from .pki_helpers import secure_scm_conf

EC = pki.KeySpec("EC", 256, "SHA256withECDSA")
HOST = "scm-0.scm-headless.ozone.svc.cluster.local"
SECRET = b"d" * 40


@pytest_asyncio.fixture
async def scm_and_port(tmp_path: Path) -> AsyncIterator[tuple[SCMSecurity, SecurityProtocolClient]]:
    conf = secure_scm_conf(tmp_path, SECRET)
    cluster_id, scm_id = "CID-" + str(uuid.uuid4()), str(uuid.uuid4())
    serial = sec_init.initialize_primordial(SecurityConfig.from_conf(conf), metadata_dir=tmp_path / "meta",
                                            cluster_id=cluster_id, scm_id=scm_id, hostname=HOST)
    storage = SCMStorageConfig(tmp_path / "meta")
    storage.set_scm_cert_serial_id(serial)
    storage.initialize(cluster_id=cluster_id, scm_id=scm_id, primary_scm_node_id=scm_id, scm_ha=False)
    security = SCMSecurity.load(conf, storage)
    assert security is not None
    scm = await StorageContainerManager.create(
        conf, clock=FakeClock(start_wall_ms=int(datetime.now(UTC).timestamp() * 1000)), storage_config=storage)
    security.attach(scm)
    await scm.start()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((SecurityProtocolService(
        scm, endpoints.Protocol.SECURITY, conf.get_str, RpcMetrics(None), security).generic_handler(),))
    port = server.add_secure_port("127.0.0.1:0", security.material.server_credentials(require_client_auth=False))
    await server.start()
    try:
        client = SecurityProtocolClient([f"127.0.0.1:{port}"], roots=security.material.current.roots,
                                        role="datanode", secret=SECRET, rounds=1)
        yield security, client
    finally:
        await server.stop(0)
        await scm.stop()


async def _enrol(security: SCMSecurity, client: SecurityProtocolClient, host: str, ip: str = "10.0.0.12") -> str:
    csr = pki.build_csr(pki.generate_key(EC), ids.datanode_subject("csr-host", "u", security.cluster_id), EC)
    details = scm_security_pb2.NodeCertDetailsProto(clusterId=security.cluster_id, uuid=str(uuid.uuid4()),
                                                    hostName=host, ipAddress=ip)
    return str((await client.enroll_node(csr, details)).serialId)


@pytest.mark.parametrize(
    ("host", "what"),
    [
        (HOST, "a name in its certificate serial 2"),  # the example
        ("Scm-0.scm-headless.ozone.svc.cluster.local.", "a name in its certificate serial 2"),
        ("scm-0.scm-headless", "its name through the headless Service scm-headless"),
        ("scm-0", "its Pod name"),
        ("scm.ozone.svc.cluster.local", "the ring's client Service scm.ozone"),
    ],
)
async def test_a_datanode_cannot_enrol_under_a_members_name_over_the_security_port(
    scm_and_port: tuple[SCMSecurity, SecurityProtocolClient], host: str, what: str
) -> None:
    security, client = scm_and_port
    assert security.ca is not None
    before = len(security.ca.store.list_certificates())
    with pytest.raises(SCMException) as info:
        await _enrol(security, client, host)
    assert info.value.result is ResultCodes.PERMISSION_DENIED, info.value
    message = info.value.message
    assert f"host name {host!r} belongs to" in message and what in message, message
    assert "datanode certificate cannot carry a name of the SCM ring" in message, message
    assert len(security.ca.store.list_certificates()) == before  # nothing issued, nothing recorded


async def test_a_datanode_of_its_own_name_enrols_and_no_client_certificate_is_named_as_the_scm(
    scm_and_port: tuple[SCMSecurity, SecurityProtocolClient]
) -> None:
    security, client = scm_and_port
    ca = security.ca
    assert ca is not None
    serial = await _enrol(security, client, "dn-0.dn-headless.ozone.svc.cluster.local")
    assert ca.store.get_certificate(serial) is not None
    admin = ids.Identity(ids.Role.CLIENT, "admin", "", security.cluster_id, 99, datetime.now(UTC))
    csr = pki.build_csr(pki.generate_key(EC), ids.client_subject(HOST), EC)
    with pytest.raises(SCMException, match=f"user name \\(CN\\) '{HOST}' belongs to SCM") as info:
        await ca.sign_client_certificate(pki.csr_pem(csr), admin)
    assert info.value.result is ResultCodes.PERMISSION_DENIED
