"""Apache Ozone 2.2.0's own datanodes, OM and CLIs in secure mode on this project's 3-SCM ring: Kerberos on every
Hadoop RPC connection (a real MIT KDC on loopback), certificates from our CA over Hadoop RPC, secret keys from our
ring, block and container tokens enforced, gRPC TLS between datanodes. Run by `make ozone-secure-test` only
(marker ozone_secure); the cluster is started once per module (conftest.secure_cluster)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path

import pytest
from cryptography import x509

from scm_server.proto.ozone import hdds_pb2
from tests.ozone_interop.ozone_procs import ADMIN_MAIN, digest, keys_survive_leader_kill
from tests.ozone_secure.secure_procs import ADMIN, HOST, NO_TICKET, USER, SecureOzoneCluster
from tests.ozone_secure.xceiver import container_token, datanode_uuid, encode_token, messages, read_container

pytestmark = [pytest.mark.ozone_secure, pytest.mark.timeout(2400)]

VOLUME = "secvol"
BUCKET = "secbucket"


def certificates(certs_dir: Path) -> tuple[x509.Certificate, x509.Certificate, x509.Certificate]:
    """(own certificate, issuing CA, root CA) as Ozone's certificate client stored them: `<serial>.crt`,
    `CA-<serial>.crt`, `ROOTCA-<serial>.crt` under the component's `certs` directory."""
    files = {p.name: p for p in certs_dir.glob("*.crt")}
    own = [p for name, p in files.items() if re.fullmatch(r"\d+\.crt", name)]
    cas = [p for name, p in files.items() if name.startswith("CA-")]
    roots = [p for name, p in files.items() if name.startswith("ROOTCA-")]
    assert len(own) == 1 and len(cas) == 1 and len(roots) == 1, sorted(files)
    # a stored file may hold a chain (leaf first): its first certificate is the one it is named after
    load = lambda p: x509.load_pem_x509_certificates(p.read_bytes())[0]  # noqa: E731
    return load(own[0]), load(cas[0]), load(roots[0])


def test_datanodes_and_om_hold_certificates_from_our_ca(secure_cluster: SecureOzoneCluster) -> None:
    """Each datanode and the OM enrolled over Hadoop RPC with its Kerberos principal: its certificate names its
    role and host, was signed by an SCM's sub-CA, and that sub-CA by the root our primordial SCM made at --init."""
    c = secure_cluster
    ours = x509.load_pem_x509_certificate(
        (c.base / c.scms[0].node_id / "metadata" / "scm" / "ca" / "certs" / "ROOTCA-1.crt").read_bytes())
    holders = {dn.name: (c.base / dn.name / "metadata" / "dn" / "certs", "dn") for dn in c.datanodes}
    holders["om"] = (c.base / "om" / "metadata" / "om" / "certs", "om")
    for name, (certs_dir, role) in holders.items():
        own, ca, root = certificates(certs_dir)
        assert root == ours, (name, root.subject)
        own.verify_directly_issued_by(ca)
        ca.verify_directly_issued_by(root)
        cn = own.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value
        assert cn == f"{role}@{HOST}", (name, own.subject)
        assert not own.extensions.get_extension_for_class(x509.BasicConstraints).value.ca, name
    calls = c.our_hadoop_rpc_calls()  # what Ozone's processes asked our SCMs, by protocol
    for protocol in ("SCMSecurityProtocol", "SecretKeyProtocolDatanode", "SecretKeyProtocolOm",
                     "StorageContainerDatanodeProtocol", "ScmBlockLocationProtocol"):
        assert calls.get(protocol, 0) > 0, (protocol, calls)


def test_user_puts_and_gets_a_key(secure_cluster: SecureOzoneCluster, tmp_path: Path) -> None:
    """After `kinit alice`: volume, bucket, a 9 MiB key (three chunks on three datanodes, each write and read
    carrying the OM's block token) back byte for byte."""
    c = secure_cluster
    start = time.monotonic()
    c.sh("volume", "create", f"/{VOLUME}", user=USER)
    c.sh("bucket", "create", f"/{VOLUME}/{BUCKET}", user=USER)
    data = os.urandom(9 * 1024 * 1024 + 4321)
    src, dst = tmp_path / "k.in", tmp_path / "k.out"
    src.write_bytes(data)
    c.sh("key", "put", f"/{VOLUME}/{BUCKET}/first", str(src), user=USER)
    c.sh("key", "get", f"/{VOLUME}/{BUCKET}/first", str(dst), user=USER)
    assert digest(dst.read_bytes()) == digest(data)
    c.timings.add("scenario: alice puts and gets 9 MiB", time.monotonic() - start)


def test_admin_command_refused_for_a_user_and_served_to_an_administrator(secure_cluster: SecureOzoneCluster) -> None:
    """`ozone admin safemode exit` (an admin command: Ozone's checkAdminAccess): refused to alice with Ozone's
    message, served to the member of ozone.administrators; a read-only command is served to alice."""
    c = secure_cluster
    assert "out of safe mode" in c.admin("safemode", "status", user=USER).lower()
    refused = c.tool(ADMIN_MAIN, "safemode", "exit", user=USER)
    assert refused.returncode != 0, refused.stdout
    assert f"Access denied for user {USER}@{c.kdc.realm}. SCM superuser privilege is required." in refused.stderr, (
        refused.stderr[-2000:])
    served = c.tool(ADMIN_MAIN, "safemode", "exit", user=ADMIN)
    assert served.returncode == 0, served.stderr[-2000:]


def test_a_client_without_a_ticket_is_refused(secure_cluster: SecureOzoneCluster) -> None:
    """A CLI whose ticket cache is empty gets no answer from SCM: every Hadoop RPC connection needs Kerberos."""
    result = secure_cluster.tool(ADMIN_MAIN, "scm", "roles", user=NO_TICKET, timeout=300)
    assert result.returncode != 0, result.stdout
    assert re.search(r"GSS initiate failed|Failed to find any Kerberos tgt|Client cannot authenticate via:\[KERBEROS\]",
                     result.stderr), result.stderr[-2000:]


def test_datanodes_enforce_container_tokens_signed_with_our_secret_keys(secure_cluster: SecureOzoneCluster,
                                                                        tmp_path: Path) -> None:
    """Ozone's datanode, asked ReadContainer over its gRPC TLS port, serves it with a container token our SCM
    signed (GetContainerToken, as the administrator over Kerberos) and refuses it without a token, with the token's
    password altered, and with a token for another container: it verifies tokens with the secret keys it fetched
    from our ring."""
    c = secure_cluster
    c.sh("volume", "create", "/tokvol", user=USER)
    c.sh("bucket", "create", "/tokvol/tokbucket", user=USER)
    src = tmp_path / "small.in"
    src.write_bytes(os.urandom(64 * 1024))
    c.sh("key", "put", "/tokvol/tokbucket/small", str(src), user=USER)
    info = json.loads(c.sh("key", "info", "/tokvol/tokbucket/small", user=USER))
    cid = int(info["ozoneKeyLocations"][0]["containerID"])  # on all three datanodes (RATIS/THREE)
    leader = next(s for s in c.scms if s.node_id == c.scm_leader())
    token = asyncio.run(container_token(leader.client_port, c.ccaches[ADMIN], cid))
    assert token.kind == "HDDS_CONTAINER_TOKEN" and token.password, token
    other = asyncio.run(container_token(leader.client_port, c.ccaches[ADMIN], cid + 1000))
    forged = hdds_pb2.TokenProto()
    forged.CopyFrom(token)
    forged.password = bytes(b ^ 0xFF for b in token.password)
    root_pem = (c.base / c.scms[0].node_id / "metadata" / "scm" / "ca" / "certs" / "ROOTCA-1.crt").read_bytes()
    pb = messages()
    for dn in c.datanodes:
        uuid = datanode_uuid(c.base / dn.name / "metadata" / "datanode.id")
        port = dn.ports["ipc"]
        served = read_container(port, root_pem, uuid, cid, encode_token(token))
        assert served.result == pb.SUCCESS, (dn.name, served)
        assert served.readContainer.containerData.containerID == cid, (dn.name, served)
        # Ozone's verifier's own messages: each refusal for its own reason
        for encoded, reason in ((None, "Failed to find any token"),
                                (encode_token(forged), f"Invalid token for user: {ADMIN}@{c.kdc.realm}"),
                                (encode_token(other), f"Token for ID: #{cid + 1000} can't be used to access: #{cid}")):
            refused = read_container(port, root_pem, uuid, cid, encoded)
            assert refused.result == pb.BLOCK_TOKEN_VERIFICATION_FAILED, (dn.name, reason, refused)
            assert reason in refused.message, (dn.name, refused.message)


def test_scm_leader_sigkilled_while_keys_are_written(secure_cluster: SecureOzoneCluster, tmp_path: Path) -> None:
    """alice writes keys while our SCM leader is SIGKILLed: the survivors elect a leader, keep the secret keys (the
    OM goes on signing block tokens the datanodes verify), and every acknowledged key reads back identical."""
    c = secure_cluster
    c.sh("volume", "create", "/failvol", user=USER)
    c.sh("bucket", "create", "/failvol/failbucket", user=USER)
    written = keys_survive_leader_kill(c, tmp_path, "failvol", "failbucket", user=USER)
    assert len(written) >= 5, sorted(written)
