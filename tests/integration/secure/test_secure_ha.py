"""Secure SCM HA with real processes (issue 7): rolling restarts, a new SCM bootstrapped while the
primordial SCM is down (the leader's sub-CA signs), decommission revoking the sub-CA; CA mode
``operator`` (no root key anywhere in the cluster: a new SCM joins with an externally issued
sub-CA; a swapped sub-CA Secret is served without a restart); renewal of every certificate
without a restart. Timings are printed, never asserted tightly."""

from __future__ import annotations

import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from ha.harness import (
    TEST_SETTINGS,
    Workload,
    cli,
    containers_on,
    start_sim,
    wait_caught_up,
    wait_open_pipeline,
    wait_until,
)

from scm_server.conf.security import SecurityConfig
from scm_server.local.quorum import HALocalCluster
from scm_server.proto import scm_client_pb2, scm_client_pb2_grpc
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids
from scm_server.security.init import sub_ca_store
from scm_server.security.tls import StaticClientSecurity, make_channel

pytestmark = [pytest.mark.processes, pytest.mark.timeout(420)]


async def _true(value: bool) -> bool:
    return value


def _openssl_verify(tmp: Path, root: Path, leaf_chain: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["openssl", "verify", "-CAfile", str(root), "-untrusted", str(leaf_chain), str(leaf_chain)],
                          capture_output=True, text=True, timeout=30)


async def _serials(cluster: HALocalCluster) -> dict[str, str]:
    from scm_server.local.quorum import scm_certificates

    assert cluster.secure is not None
    running = [a for i, a in enumerate(cluster.security_addresses) if cluster.is_running(i)]
    return {c.get("nodeId") or c["address"]: c.get("serial", "?") for c in
            await scm_certificates(running, cluster.secure.root_cert)}


async def test_secure_rolling_restart_bootstrap_without_primordial_and_decommission(tmp_path: Path) -> None:
    cluster = HALocalCluster(tmp_path / "c", 3, settings=TEST_SETTINGS, secure=True)
    sim = None
    try:
        cluster.start_quorum()
        sim = await start_sim(cluster, 3)
        await cluster.wait_healthy_quorum(timeout=90)
        await wait_open_pipeline(cluster)
        work = Workload(cluster.client_addresses, clients=3, security=cluster.client_security)
        work.start()
        # rolling restart: scm2 and scm3 in turn (scm1 is killed and restarted below), the quorum keeps
        # serving, certificates survive restarts
        for i in (1, 2):
            before = len(work.successes())
            cluster.kill(i, signal.SIGTERM)
            cluster.start_node(i)
            await cluster.wait_healthy_quorum(timeout=90)
            await wait_until(lambda b=before: _true(len(work.successes()) > b + 50), 60, "progress after a restart")
        # the primordial (the only root-key holder) goes down; a new SCM bootstraps anyway
        cluster.kill(0, signal.SIGKILL)
        leader = await cluster.wait_leader(timeout=30, exclude=0)
        leader_cert = sub_ca_store(cluster.scms[leader].metadata_dir, SecurityConfig()).load().certificate
        i4 = cluster.add_scm()
        cluster.wait_serving(i4, 90)
        await wait_caught_up(cluster, timeout=60)
        new = sub_ca_store(cluster.scms[i4].metadata_dir, SecurityConfig()).load()
        # HDDS-8286: signed by the leader's sub-CA, and the chain root -> leader sub-CA -> new sub-CA verifies
        assert new.certificate.issuer == leader_cert.subject
        assert new.certificate.not_valid_after_utc <= leader_cert.not_valid_after_utc
        chain_file = tmp_path / "scm4-chain.pem"
        chain_file.write_text(pki.certs_pem(list(new.chain)))
        assert cluster.secure is not None
        verified = _openssl_verify(tmp_path, cluster.secure.root_cert, chain_file)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        # datanodes still enrol without the primordial: a new one gets a certificate from the leader
        dn = sim.add_datanode()
        dn.start()
        await wait_until(lambda: _true(sum(ep.heartbeats for ep in dn.endpoints) >= 3), 60, "the new datanode's heartbeats")
        # revoking a member's sub-CA is refused: decommission does it
        out = cli(cluster, "admin", "cert", "revoke", new.serial_id)
        assert out.returncode != 0 and "still a member of the ring" in out.stderr, out.stderr
        scm4_id = next(v["scmId"] for v in await cluster.node_views() if v["index"] == i4)
        out = cli(cluster, "admin", "scm", "decommission", "--nodeid", scm4_id)
        assert out.returncode == 0, out.stderr
        assert "certificates are revoked" in out.stdout
        listed = cli(cluster, "admin", "cert", "list", "--revoked", "--json")
        assert listed.returncode == 0 and f'"serialId": "{new.serial_id}"' in listed.stdout, listed.stdout
        # the decommissioned SCM (still running) is refused by the ring with its revoked certificate
        scm4 = StaticClientSecurity(new)
        target = cluster.scms[leader].client_address
        async with make_channel(target, scm4) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await scm_client_pb2_grpc.StorageContainerLocationProtocolServiceStub(ch).InSafeMode(
                    scm_client_pb2.Empty(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED and "revoked" in (info.value.details() or "")
        cluster.kill(i4, signal.SIGTERM)
        # the primordial comes back and the 3-member ring is whole again
        cluster.start_node(0)
        await wait_caught_up(cluster, timeout=60)
        await work.stop()
        work.assert_unique()
        acked = work.acknowledged_containers()
        for i in range(3):
            assert await containers_on(cluster, i, acked) == acked
    finally:
        if sim is not None:
            await sim.stop()
        cluster.stop_all()


def _private_keys_under(directory: Path) -> list[pki.PrivateKey]:
    keys = []
    for path in directory.rglob("*"):
        if path.is_file() and path.stat().st_size < 20000:
            data = path.read_bytes()
            if b"PRIVATE KEY" in data:
                keys.append(pki.load_private_key(data, str(path)))
    return keys


async def test_operator_mode_new_scm_joins_without_any_root_key_and_sub_ca_swaps_are_served(tmp_path: Path) -> None:
    cluster = HALocalCluster(tmp_path / "c", 3, settings=TEST_SETTINGS, secure=True, ca_mode="operator")
    sim = None
    try:
        cluster.start_quorum()
        assert cluster.secure is not None and cluster.secure.operator is not None
        operator = cluster.secure.operator
        sim = await start_sim(cluster, 3)
        await cluster.wait_healthy_quorum(timeout=90)
        await wait_open_pipeline(cluster)
        # no SCM holds the root key: none of the keys under any SCM's directory is the root's
        for s in cluster.scms:
            for key in _private_keys_under(s.metadata_dir.parent):
                assert not pki.key_matches(operator.root, key), f"{s.node_id} holds the root key"
        # a datanode certificate signed by an operator-issued sub-CA verifies up to the operator's root
        dn_chain = cluster.secure.datanodes_dir / sim.datanodes[0].hostname / "dn" / "certs" / "certificate.crt"
        verified = _openssl_verify(tmp_path, operator.root_cert_path, dn_chain)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        work = Workload(cluster.client_addresses, clients=3, security=cluster.client_security)
        work.start()
        # HDDS-16035: a new SCM joins with an externally issued sub-CA, no CSR, no root key anywhere
        i4 = cluster.add_scm()
        cluster.wait_serving(i4, 90)
        await wait_caught_up(cluster, timeout=60)
        roles = await cluster.roles()
        assert len(roles.peers) == 4
        # the operator renews scm2's sub-CA by swapping the mounted files: served without a restart
        pid = cluster.scms[1].proc.pid if cluster.scms[1].proc else None
        before = (await _serials(cluster))["scm2"]
        t0 = time.monotonic()
        cert_path, _ = operator.issue_sub_ca("scm2", "127.0.0.1", cluster.secure.subca_dir("scm2"))
        new_serial = str(pki.load_certificate(cert_path.read_bytes()).serial_number)

        async def swapped() -> bool:
            return (await _serials(cluster)).get("scm2") == new_serial

        await wait_until(swapped, 30, "scm2 to serve its swapped sub-CA")
        print(f"\noperator swap: scm2 served its new sub-CA {time.monotonic() - t0:.2f}s after the files changed "
              f"(serial {before} -> {new_serial})")
        assert cluster.scms[1].proc is not None and cluster.scms[1].proc.pid == pid
        successes = len(work.successes())
        await wait_until(lambda: _true(len(work.successes()) > successes + 50), 60, "progress after the swap")
        await wait_until(lambda: _true(new_serial in cli(cluster, "admin", "cert", "list", "--type", "scm", "--json").stdout),
                         30, "the leader to record the swapped sub-CA in validSCMCerts")
        # an operator-issued sub-CA of a current member (owned by its node id) cannot be revoked either
        out = cli(cluster, "admin", "cert", "revoke", new_serial)
        assert out.returncode != 0 and "still a member of the ring" in out.stderr, out.stderr
        # a broken swap (garbage certificate) is refused; the SCM keeps serving its current one
        good = cert_path.read_bytes()
        cert_path.write_text("not a certificate\n")
        await wait_until(lambda: _true("not usable (keeping the current ones)" in cluster.scms[1].log_path.read_text()),
                         30, "scm2 to notice (and refuse) the broken sub-CA file")
        assert (await _serials(cluster)).get("scm2") == new_serial
        cert_path.write_bytes(good)
        await work.stop()
        work.assert_unique()
    finally:
        if sim is not None:
            await sim.stop()
        cluster.stop_all()


RENEWAL_SETTINGS = {
    **TEST_SETTINGS,
    "hdds.x509.default.duration": "PT40S",
    "hdds.x509.renew.grace.duration": "PT30S",
    "hdds.x509.renew.check.interval": "PT1S",
}


async def test_every_certificate_is_renewed_without_a_restart(tmp_path: Path) -> None:
    """Sub-CAs and datanode certificates live 40 s and renew 30 s before expiry: the quorum keeps
    serving past the first certificates' expiry, with the same processes."""
    cluster = HALocalCluster(tmp_path / "c", 3, settings=RENEWAL_SETTINGS, secure=True,
                             key_spec=pki.KeySpec("EC", 256, "SHA256withECDSA"))
    sim = None
    try:
        cluster.start_quorum()
        assert cluster.secure is not None
        started = time.monotonic()
        first_expiry = min(
            sub_ca_store(s.metadata_dir, SecurityConfig()).load().certificate.not_valid_after_utc for s in cluster.scms
        )
        pids = [s.proc.pid for s in cluster.scms if s.proc is not None]
        initial = await _serials(cluster)
        sim = await start_sim(cluster, 3)
        await cluster.wait_healthy_quorum(timeout=90)
        # the admin keeps its own client certificate renewed too (signed at --init with the same 40 s, and never
        # past the primordial's first sub-CA), as any client must: `admin cert renew` whenever it is within the
        # grace period. The harness has done so since it fetched the certificate (cluster.admin_renewer): it was
        # due while the quorum was still starting, and an expired one cannot be renewed any more.
        renewer = cluster.admin_renewer
        assert renewer is not None and renewer.running
        work = Workload(cluster.client_addresses, clients=2, security=cluster.client_security)
        work.start()

        async def all_renewed() -> bool:
            now = await _serials(cluster)
            return all(now.get(n) not in (None, "?", initial[n]) for n in initial) and all(
                dn.certificates is not None and dn.certificates.renewals >= 1 for dn in sim.datanodes  # type: ignore[union-attr]
            )

        await wait_until(all_renewed, 120, "every SCM sub-CA and datanode certificate to be renewed", interval=0.5)
        print(f"\nrenewal: every certificate renewed {time.monotonic() - started:.1f}s after start: {await _serials(cluster)}")
        # past the expiry of every first certificate: still the same processes, still serving
        await wait_until(lambda: _true(datetime.now(UTC) > first_expiry + timedelta(seconds=3)), 120,
                         "the first certificates to expire", interval=0.5)
        after = time.monotonic()
        await cluster.wait_healthy_quorum(timeout=60)
        await wait_until(lambda: _true(work.first_success_after(after) is not None), 30, "a success past the expiry")
        assert renewer.running
        assert renewer.renewals >= 1, renewer.errors
        assert [s.proc.pid for s in cluster.scms if s.proc is not None] == pids
        await work.stop()
        work.assert_unique()
        leaf = cluster.secure.datanodes_dir / sim.datanodes[0].hostname / "dn" / "certs" / "certificate.crt"
        verified = _openssl_verify(tmp_path, cluster.secure.root_cert, leaf)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert ids.identity_of(pki.load_certificate(leaf.read_bytes())).role is ids.Role.DATANODE
    finally:
        if sim is not None:
            await sim.stop()
        cluster.stop_all()
