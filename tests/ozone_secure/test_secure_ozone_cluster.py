"""Apache Ozone 2.2.0's own datanodes, OM and CLIs in secure mode on this project's 3-SCM ring: Kerberos on every
Hadoop RPC connection (a real MIT KDC on loopback), certificates from our CA over Hadoop RPC, secret keys from our
ring, block and container tokens enforced, gRPC TLS between datanodes. Run by `make ozone-secure-test` only
(marker ozone_secure); the cluster is started once per module (conftest.secure_cluster)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import socket
import ssl
import time
import uuid
from pathlib import Path

import pytest
from cryptography import x509

from scm_server.proto.ozone import hdds_pb2
from scm_server.security.core import secret_keys as sk
from tests.kerberos.documented import documented_block
from tests.ozone_interop.ozone_procs import (
    ADMIN_MAIN,
    SHELL_MAIN,
    digest,
    keys_survive_leader_kill,
    wait_for,
)
from tests.ozone_secure.secure_procs import (
    ADMIN,
    HOST,
    NO_TICKET,
    RENEWING_DATANODE,
    USER,
    SecureOzoneCluster,
)
from tests.ozone_secure.xceiver import (
    container_token,
    current_secret_key,
    datanode_uuid,
    encode_token,
    messages,
    read_container,
)

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


def served_certificate(port: int, root_pem: bytes) -> x509.Certificate:
    """The certificate a datanode's gRPC TLS port presents now (its chain checked against our root CA)."""
    context = ssl.create_default_context(cadata=root_pem.decode("ascii"))
    context.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw, \
            context.wrap_socket(raw, server_hostname=HOST) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_a_datanode_in_the_grace_window_renews_its_certificate_and_serves_on(secure_cluster: SecureOzoneCluster,
                                                                             tmp_path: Path) -> None:
    """The datanode whose `hdds.x509.renew.grace.duration` covers its certificate's whole life renews it on its own,
    as Ozone's CertificateRenewerService does (a new key, a new CSR, GetDataNodeCertificate again with its Kerberos
    principal, GetAllRootCaCertificates): our leader issues the new certificate for the same host and supersedes the
    first; the datanode then presents the new one on its gRPC TLS port and serves ReadContainer with a container
    token, and a key written afterwards reads back."""
    c = secure_cluster
    dn = c.datanodes[RENEWING_DATANODE]
    log = c.base / "logs" / f"{dn.name}.log"
    renewed = wait_for(f"{dn.name} to renew its certificate",
                       lambda: re.search(r"Successful renew key and certificate\. New certificate (\d+)",
                                         log.read_text(errors="replace")), timeout=300)
    new_serial = int(renewed.group(1))
    old = re.search(r"Current certificate (\d+) needs to be renewed", log.read_text(errors="replace"))
    assert old is not None and int(old.group(1)) != new_serial, old
    scm_logs = "".join((c.base / "logs" / f"{s.node_id}.log").read_text(errors="replace") for s in c.scms)
    assert re.search(rf"certificate\(s\) {old.group(1)} of \S+ superseded by serial {new_serial} "
                     rf"\(renewed by dn/{HOST}@{re.escape(c.kdc.realm)}\)", scm_logs), "no supersession logged"
    certs_dir = c.base / dn.name / "metadata" / "dn" / "certs"
    root_pem = (c.base / c.scms[0].node_id / "metadata" / "scm" / "ca" / "certs" / "ROOTCA-1.crt").read_bytes()
    port = dn.ports["ipc"]

    def on_disk() -> x509.Certificate | None:
        try:
            held = certificates(certs_dir)[0]
        except (AssertionError, OSError):  # Ozone swaps the certs directory for the new one: a moment without it
            return None
        return held if held.serial_number == new_serial else None

    def on_the_port() -> x509.Certificate | None:
        try:
            presented = served_certificate(port, root_pem)
        except (OSError, ssl.SSLError):  # the port reloading its key manager
            return None
        return presented if presented.serial_number == new_serial else None

    own = wait_for("the renewed certificate on disk", on_disk, timeout=60)
    presented = wait_for("the renewed certificate on the gRPC TLS port", on_the_port, timeout=120)
    assert presented == own
    c.sh("volume", "create", "/renewvol", user=USER)
    c.sh("bucket", "create", "/renewvol/bucket", user=USER)
    src, back = tmp_path / "after-renewal.in", tmp_path / "after-renewal.out"
    src.write_bytes(os.urandom(256 * 1024))
    c.sh("key", "put", "/renewvol/bucket/after", str(src), user=USER)
    c.sh("key", "get", "/renewvol/bucket/after", str(back), user=USER)
    assert digest(back.read_bytes()) == digest(src.read_bytes())
    info = json.loads(c.sh("key", "info", "/renewvol/bucket/after", user=USER))
    cid = int(info["ozoneKeyLocations"][0]["containerID"])  # RATIS/THREE: a replica on the renewed datanode too
    leader = next(s for s in c.scms if s.node_id == c.scm_leader())
    token = asyncio.run(container_token(leader.client_port, c.ccaches[ADMIN], cid))
    uuid_of_dn = datanode_uuid(c.base / dn.name / "metadata" / "datanode.id")
    served = read_container(port, root_pem, uuid_of_dn, cid, encode_token(token))
    assert served.result == messages().SUCCESS, served


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


def test_the_documented_commands_run_as_written(secure_cluster: SecureOzoneCluster) -> None:
    """docs/security.md's step 5 ("Use") as written: `kinit alice@EXAMPLE.COM` (alice's tickets, made from her keytab
    with kinit -kt), then each `ozone sh` / `ozone admin` line with Ozone's own CLIs, run where `data.bin` lies;
    every shell command succeeds and `data.out` is `data.bin`; `ozone admin safemode exit` is refused to alice with
    the message the document quotes, and runs for the administrator."""
    c = secure_cluster
    lines = documented_block("**5. Use**")
    assert lines[0] == f"kinit {USER}@{c.kdc.realm}", lines  # the tier's tickets for alice: c.ccaches[USER]
    data = c.base / "data.bin"
    data.write_bytes(os.urandom(128 * 1024))
    (c.base / "data.out").unlink(missing_ok=True)
    mains = {"sh": SHELL_MAIN, "admin": ADMIN_MAIN}
    refused = None
    for line in lines[1:]:
        argv = shlex.split(line)
        assert argv[0] == "ozone" and argv[1] in mains, line
        result = c.tool(mains[argv[1]], *argv[2:], user=USER)  # run in c.base, where data.bin is
        if argv[1] == "admin":
            refused = (argv, result)
            continue
        assert result.returncode == 0, (line, result.stderr[-2000:])
    assert (c.base / "data.out").read_bytes() == data.read_bytes()
    assert refused is not None, "the block has no `ozone admin` line"
    argv, result = refused
    assert result.returncode != 0, result.stdout
    assert f"Access denied for user {USER}@{c.kdc.realm}. SCM superuser privilege is required." in result.stderr
    served = c.tool(ADMIN_MAIN, *argv[2:], user=ADMIN)
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


def test_datanodes_refuse_tokens_of_an_unknown_secret_key_and_expired_tokens(secure_cluster: SecureOzoneCluster,
                                                                              tmp_path: Path) -> None:
    """Container tokens the test forges itself: signed with the secret key our leader hands a datanode principal
    (GetCurrentSecretKey over SecretKeyProtocolDatanode) and a future expiry, Ozone's datanode serves ReadContainer;
    with the same key and an expiry in the past it refuses ("Expired token"); signed with a key of an id our ring
    never made (the datanode asks our SCM for it with GetSecretKey, which answers no key) it refuses ("Can't find
    the signing secret key"). Each over its gRPC TLS port, with Ozone's BLOCK_TOKEN_VERIFICATION_FAILED."""
    c = secure_cluster
    c.sh("volume", "create", "/badtokvol", user=USER)
    c.sh("bucket", "create", "/badtokvol/bucket", user=USER)
    src = tmp_path / "small.in"
    src.write_bytes(os.urandom(16 * 1024))
    c.sh("key", "put", "/badtokvol/bucket/small", str(src), user=USER)
    info = json.loads(c.sh("key", "info", "/badtokvol/bucket/small", user=USER))
    cid = int(info["ozoneKeyLocations"][0]["containerID"])
    leader = next(s for s in c.scms if s.node_id == c.scm_leader())
    dn_tickets = c.kdc.kinit(f"dn/{HOST}", c.keytabs["dn"], "dn-secret-key-reader")
    key = asyncio.run(current_secret_key(leader.security_port, dn_tickets))
    owner = f"{ADMIN}@{c.kdc.realm}"
    now_ms = int(time.time() * 1000)  # the datanode judges expiry by its own clock: the test's must be the same
    good = sk.container_token(key, owner, cid, now_ms + 10 * 60_000)
    expired = sk.container_token(key, owner, cid, now_ms - 60_000)
    stranger = sk.SecretKey(uuid.uuid4(), now_ms - 60_000, now_ms + 3_600_000, key.algorithm, os.urandom(len(key.encoded)))
    unknown = sk.container_token(stranger, owner, cid, now_ms + 10 * 60_000)
    root_pem = (c.base / c.scms[0].node_id / "metadata" / "scm" / "ca" / "certs" / "ROOTCA-1.crt").read_bytes()
    pb = messages()
    for dn in c.datanodes:
        uuid_of_dn = datanode_uuid(c.base / dn.name / "metadata" / "datanode.id")
        port = dn.ports["ipc"]
        served = read_container(port, root_pem, uuid_of_dn, cid, encode_token(good))
        assert served.result == pb.SUCCESS, (dn.name, served)
        for token, reason in ((expired, f"Expired token for user: {owner}"),
                              (unknown, f"Can't find the signing secret key {stranger.id} of the token for user: {owner}")):
            refused = read_container(port, root_pem, uuid_of_dn, cid, encode_token(token))
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
