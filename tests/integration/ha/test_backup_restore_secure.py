"""Issue 23, secure rings, with real SCM processes: a secure ring restored from a backup taken with
``--include-keys`` keeps its root CA, so the old ring's datanode, admin and client certificates keep
working while a certificate revoked before the backup stays refused and the old SCMs' certificates are
retired; bad input is refused in one line with nothing written. And a secure quorum recovery revokes the
removed members' SCM certificates once the survivor leads."""

from __future__ import annotations

import json
import shutil
import signal
import time
from pathlib import Path

import grpc
import pytest
from cryptography.hazmat.primitives import hashes

from scm_server.conf.security import SecurityConfig
from scm_server.local.quorum import HALocalCluster
from scm_server.metadata.backup import backup_summary, load_manifest
from scm_server.proto import scm_client_pb2, scm_client_pb2_grpc
from scm_server.security.core import certificates as pki
from scm_server.security.init import sub_ca_store
from scm_server.security.keystore import Material
from scm_server.security.tls import FileClientSecurity, StaticClientSecurity, make_channel

from .harness import (
    TEST_SETTINGS,
    Workload,
    cli,
    start_serving,
    start_sim,
    wait_caught_up,
    wait_open_pipeline,
    wait_until,
)
from .test_backup_restore import (
    SETTINGS,
    _assert_no_duplicates,
    _datanodes_registered,
    _ok,
    _refused,
    _run,
    _wipe,
)

pytestmark = [pytest.mark.processes, pytest.mark.timeout(600)]


async def _true(v: bool) -> bool:
    return v


def _scm_cli(cluster: HALocalCluster, index: int, *args: str):  # type: ignore[no-untyped-def]
    """``ozone-scm`` with that SCM's own configuration (``scm --restore`` / ``--recover`` run on the SCM host)."""
    return cluster.cli(cluster.scms[index], *args, timeout=120)


def _client_cert(cluster: HALocalCluster, tmp: Path, user: str) -> tuple[FileClientSecurity, str]:
    """A client certificate for ``user`` signed by the ring (``cert request`` + ``admin cert sign``)."""
    key, csr, crt = tmp / f"{user}.key", tmp / f"{user}.csr", tmp / f"{user}.crt"
    _ok(cli(cluster, "cert", "request", "--user", user, "--key", str(key), "--csr", str(csr)), f"cert request {user}")
    _ok(cli(cluster, "admin", "cert", "sign", "--csr", str(csr), "--out", str(crt)), f"admin cert sign {user}")
    assert cluster.secure is not None
    serial = str(pki.load_certificates(crt.read_bytes())[0].serial_number)
    return FileClientSecurity(crt, key, cluster.secure.root_cert), serial


async def _in_safe_mode_call(address: str, security: object) -> grpc.aio.AioRpcError | None:
    """A read any certificate of the cluster may make; None if it was answered, else the refusal."""
    async with make_channel(address, security) as ch:  # type: ignore[arg-type]
        try:
            await scm_client_pb2_grpc.StorageContainerLocationProtocolServiceStub(ch).InSafeMode(
                scm_client_pb2.Empty(), timeout=10)
        except grpc.aio.AioRpcError as exc:
            return exc
    return None


def _assert_revoked(refusal: grpc.aio.AioRpcError | None, what: str) -> None:
    assert refusal is not None, f"{what} was accepted"
    assert refusal.code() == grpc.StatusCode.UNAUTHENTICATED and "revoked" in (refusal.details() or ""), (
        f"{what}: {refusal.code()} {refusal.details()}")


def _revoked_serials(cluster: HALocalCluster) -> dict[str, dict[str, object]]:
    out = _ok(cli(cluster, "admin", "cert", "list", "--revoked", "--json"), "admin cert list --revoked")
    return {str(r["serialId"]): r for r in json.loads(out)["certificates"]}


async def test_restore_a_secure_ring(tmp_path: Path) -> None:
    cluster = HALocalCluster(tmp_path / "c", 3, settings=SETTINGS, secure=True)
    sim = None
    try:
        sim = await start_serving(cluster)
        sec = cluster.client_security
        assert cluster.secure is not None and sec is not None
        bob, bob_serial = _client_cert(cluster, tmp_path, "bob")
        carol, carol_serial = _client_cert(cluster, tmp_path, "carol")
        _ok(cli(cluster, "admin", "cert", "revoke", carol_serial, "--reason", "keyCompromise"), "revoke carol")
        phase1 = Workload(cluster.client_addresses, clients=2, security=sec)
        await _run(phase1, 120, "phase 1: 120 allocations")

        # a backup without keys, then one with them while the root-key holder (the primordial scm1) leads
        plain = tmp_path / "plain"
        _ok(cli(cluster, "admin", "scm", "backup", "--out", str(plain)), "backup without keys")
        leader = await cluster.wait_leader(timeout=30)
        if leader != 0:
            scm1 = next(v["scmId"] for v in await cluster.node_views() if v["index"] == 0)
            _ok(cli(cluster, "admin", "scm", "transfer", "-n", scm1), "transfer to scm1")

            async def scm1_leads() -> bool:
                return await cluster.leader_index() == 0

            await wait_until(scm1_leads, 30, "scm1 leads")
        backup = tmp_path / "backup"
        _ok(cli(cluster, "admin", "scm", "backup", "--out", str(backup), "--include-keys"), "backup --include-keys")
        assert (backup / "keys" / "root-ca-private.pem").is_file()
        # the summary (backup verify --status-file, the operator's backup status) names the root and the root key
        root_fp = pki.load_certificate(cluster.secure.root_cert.read_bytes()).fingerprint(hashes.SHA256()).hex()
        for taken, with_root_key in ((plain, False), (backup, True)):
            summary = backup_summary(load_manifest(taken))
            assert summary["rootCAFingerprint"] == root_fp and summary["includesRootKey"] is with_root_key
        old_scm_serials = {str(sub_ca_store(s.metadata_dir, SecurityConfig()).load().certificate.serial_number)
                           for s in cluster.scms}

        phase2 = Workload(cluster.client_addresses, clients=2, security=sec)
        await _run(phase2, 150, "phase 2: 150 allocations after the backup")

        # the old ring is lost, disks and all; keep scm2's old material to try it against the new ring
        for i in range(3):
            cluster.kill(i, signal.SIGKILL)
        lost = [_wipe(cluster, i) for i in range(3)]
        old_scm2 = sub_ca_store(lost[1], SecurityConfig()).load()

        # bad input: each refused in one line, nothing written
        _refused(_scm_cli(cluster, 0, "scm", "--restore", str(plain)),
                 "holds no keys/root-ca-private.pem", "--include-keys", "--root-ca-key")
        loose = tmp_path / "loose"
        shutil.copytree(backup, loose)
        (loose / "keys" / "root-ca-private.pem").chmod(0o644)
        _refused(_scm_cli(cluster, 0, "scm", "--restore", str(loose)), "readable by others", "chmod 600")
        root_key = tmp_path / "root.key"
        shutil.copy(backup / "keys" / "root-ca-private.pem", root_key)
        root_key.chmod(0o640)
        _refused(_scm_cli(cluster, 0, "scm", "--restore", str(plain), "--root-ca-cert", str(cluster.secure.root_cert),
                          "--root-ca-key", str(root_key)), "readable by others")
        wrong_key = tmp_path / "wrong.key"
        shutil.copy(tmp_path / "bob.key", wrong_key)
        wrong_key.chmod(0o600)
        _refused(_scm_cli(cluster, 0, "scm", "--restore", str(plain), "--root-ca-cert", str(cluster.secure.root_cert),
                          "--root-ca-key", str(wrong_key)), "does not match the root CA certificate")
        assert not any(cluster.scms[0].metadata_dir.iterdir()), "a refused restore left files behind"
        # keys an earlier SCM left in this metadata directory are never overwritten
        stray = cluster.scms[0].metadata_dir / "scm" / "sub-ca" / "keys" / "private.pem"
        stray.parent.mkdir(parents=True)
        stray.write_bytes(b"an earlier SCM's key")
        _refused(_scm_cli(cluster, 0, "scm", "--restore", str(backup)), "already holds data", "sub-ca")
        assert stray.read_bytes() == b"an earlier SCM's key"
        shutil.rmtree(cluster.scms[0].metadata_dir / "scm")

        t0 = time.monotonic()
        out = _ok(_scm_cli(cluster, 0, "scm", "--restore", str(backup)), "scm --restore (secure)")
        print(f"\nscm --restore of the secure ring: {time.monotonic() - t0:.2f} s (the command, process start included)")
        assert "Revoked the old ring's SCM certificates" in out, out
        cluster.start_node(0)
        cluster.wait_serving(0, 90)
        new_scm1 = sub_ca_store(cluster.scms[0].metadata_dir, SecurityConfig()).load()
        assert str(new_scm1.certificate.serial_number) not in old_scm_serials
        assert new_scm1.roots[0] == pki.load_certificate(cluster.secure.root_cert.read_bytes())
        for i in (1, 2):  # bootstrap as usual: sub-CAs signed by the restored root holder
            cluster.start_node(i)
            cluster.wait_serving(i, 90)
        await wait_caught_up(cluster, timeout=90)
        await wait_until(lambda: _datanodes_registered(cluster), 90, "the datanodes re-registered")
        status = cli(cluster, "admin", "safemode", "status", "--verbose")
        if "is in safe mode" in status.stdout:
            _ok(cli(cluster, "admin", "safemode", "exit"), "admin safemode exit")
        await cluster.wait_healthy_quorum(timeout=120)
        await wait_open_pipeline(cluster)

        # the admin (every cli call above), bob and the datanodes (their certificates from the old ring's
        # sub-CAs) keep working; carol, revoked before the backup, stays refused; old scm2 is no SCM here
        revoked = _revoked_serials(cluster)
        assert carol_serial in revoked and bob_serial not in revoked
        assert old_scm_serials <= set(revoked), (old_scm_serials, sorted(revoked))
        target = cluster.scms[await cluster.wait_leader(timeout=30)].client_address
        assert await _in_safe_mode_call(target, bob) is None
        _assert_revoked(await _in_safe_mode_call(target, carol), "carol's certificate (revoked before the backup)")
        _assert_revoked(await _in_safe_mode_call(target, StaticClientSecurity(old_scm2)), "old scm2's certificate")
        # a certificate signed with an old SCM's key now (its key was taken) is refused: it was never recorded
        mallory_key = pki.generate_key(pki.KeySpec("RSA", 2048, "SHA256withRSA"))
        mallory = pki.issue_certificate(
            pki.SubjectInfo("mallory"), mallory_key.public_key(), issuer=old_scm2.certificate,
            issuer_key=old_scm2.key, serial=pki.EXTERNAL_SERIAL_FLOOR + 7, now=new_scm1.certificate.not_valid_before_utc,
            lifetime=new_scm1.certificate.not_valid_after_utc - new_scm1.certificate.not_valid_before_utc,
            profile=pki.Profile.END_ENTITY, spec=pki.KeySpec("RSA", 2048, "SHA256withRSA"),
        )
        forged_identity = StaticClientSecurity(Material(mallory_key, (mallory, *old_scm2.chain), old_scm2.roots))
        _assert_revoked(await _in_safe_mode_call(target, forged_identity), "a certificate minted with old scm2's key")

        phase3 = Workload(cluster.client_addresses, clients=2, security=sec)
        await _run(phase3, 120, "phase 3: 120 allocations on the restored ring")
        _assert_no_duplicates([phase1, phase2, phase3])
    finally:
        if sim is not None:
            await sim.stop()
        cluster.stop_all()


async def test_secure_recover_revokes_the_removed_members(tmp_path: Path) -> None:
    cluster = HALocalCluster(tmp_path / "c", 3, settings=TEST_SETTINGS, secure=True)
    sim = None
    try:
        sim = await start_serving(cluster)
        sec = cluster.client_security
        phase1 = Workload(cluster.client_addresses, clients=2, security=sec)
        await _run(phase1, 100, "100 committed allocations")
        await wait_caught_up(cluster, timeout=60)
        old = {i: sub_ca_store(cluster.scms[i].metadata_dir, SecurityConfig()).load() for i in (1, 2)}

        # scm2 and scm3 are lost for good; scm1 survives
        for i in (1, 2, 0):
            cluster.kill(i, signal.SIGKILL)
        lost = {i: _wipe(cluster, i) for i in (1, 2)}
        out = _ok(_scm_cli(cluster, 0, "scm", "--recover"), "scm --recover (secure)")
        assert "only member" in out
        cluster.start_node(0)
        cluster.wait_serving(0, 90)
        await cluster.wait_leader(timeout=60)
        t_lead = time.monotonic()

        # once it leads, the removed members' SCM certificates are revoked (cessationOfOperation)
        wanted = {str(m.certificate.serial_number) for m in old.values()}

        async def all_revoked() -> bool:
            return wanted <= set(_revoked_serials(cluster))

        await wait_until(all_revoked, 60, "the removed members' certificates revoked")
        print(f"\nremoved members' certificates revoked {time.monotonic() - t_lead:.2f} s after the survivor led "
              "(as seen by `admin cert list`, a CLI process per poll)")
        revoked = _revoked_serials(cluster)
        for serial in wanted:
            assert revoked[serial]["revocation"]["reason"] == 5, revoked[serial]
        target = cluster.scms[0].client_address
        for i, m in old.items():
            _assert_revoked(await _in_safe_mode_call(target, StaticClientSecurity(m)), f"lost scm{i + 1}'s certificate")

        # lost scm2 comes back on its old data (its old Raft log names the old ring): the recovered ring refuses it
        scm2_dir = cluster.scms[1].metadata_dir
        scm2_dir.rmdir()
        lost[1].rename(scm2_dir)
        cluster.start(1)
        serial2 = str(old[1].certificate.serial_number)

        async def scm2_refused() -> bool:
            text = cluster.scms[0].log_path.read_text(errors="replace")
            return any(f"certificate serial {serial2} " in line and "has been revoked" in line
                       for line in text.splitlines())

        await wait_until(scm2_refused, 60, "the recovered SCM refusing the returning scm2")
        assert await cluster.wait_leader(timeout=30) == 0
        roles = json.loads(_ok(cli(cluster, "admin", "scm", "--grpc", cluster.scms[0].grpc_address, "roles", "--json"),
                               "roles"))
        assert len(roles["peers"]) == 1, roles  # still the survivor alone: the returning member did not get in
        cluster.kill(1, signal.SIGKILL)
        _wipe(cluster, 1)

        # the ring grows back by bootstrap (fresh identities; the same node ids are not hit by the revocation)
        for i in (1, 2):
            cluster.start_node(i)
            cluster.wait_serving(i, 90)
        await cluster.wait_healthy_quorum(timeout=120)
        await wait_open_pipeline(cluster)
        target = cluster.scms[await cluster.wait_leader(timeout=30)].client_address
        for i in (1, 2):
            fresh = sub_ca_store(cluster.scms[i].metadata_dir, SecurityConfig()).load()
            assert str(fresh.certificate.serial_number) not in wanted
            assert await _in_safe_mode_call(target, StaticClientSecurity(fresh)) is None
        phase2 = Workload(cluster.client_addresses, clients=2, security=sec)
        await _run(phase2, 100, "100 allocations on the recovered ring")
        _assert_no_duplicates([phase1, phase2])
    finally:
        if sim is not None:
            await sim.stop()
        cluster.stop_all()


async def test_restore_a_ca_mode_operator_ring(tmp_path: Path) -> None:
    """CA mode operator: no root key in the cluster, so none in the backup and none needed; the operator issues
    the restored ring's members fresh sub-CAs from the same root, and the old members' sub-CAs are retired."""
    cluster = HALocalCluster(tmp_path / "c", 3, settings=SETTINGS, secure=True, ca_mode="operator")
    sim = None
    try:
        cluster.start_quorum()
        assert cluster.secure is not None and cluster.secure.operator is not None
        sim = await start_sim(cluster, 3)
        await cluster.wait_healthy_quorum(timeout=90)
        await wait_open_pipeline(cluster)
        sec = cluster.client_security
        phase1 = Workload(cluster.client_addresses, clients=2, security=sec)
        await _run(phase1, 80, "phase 1: 80 allocations")
        backup = tmp_path / "backup"
        _ok(cli(cluster, "admin", "scm", "backup", "--out", str(backup)), "backup (CA mode operator)")
        summary = backup_summary(load_manifest(backup))  # the operator's root, which a restore must keep
        assert summary["rootCAFingerprint"] == cluster.secure.operator.root.fingerprint(hashes.SHA256()).hex()
        assert summary["includesRootKey"] is False
        old_subcas = {s.node_id: cluster.secure.subca_dir(str(s.node_id)) / "subca.crt" for s in cluster.scms}
        old_serials = {str(pki.load_certificates(p.read_bytes())[0].serial_number) for p in old_subcas.values()}
        old_scm2 = Material(
            pki.load_private_key((cluster.secure.subca_dir("scm2") / "subca.key").read_bytes()),
            tuple(pki.load_certificates(old_subcas["scm2"].read_bytes())[:1]),
            (cluster.secure.operator.root,),
        )
        for i in range(3):
            cluster.kill(i, signal.SIGKILL)
        for i in range(3):
            _wipe(cluster, i)
            shutil.rmtree(cluster.secure.subca_dir(str(cluster.scms[i].node_id)))
        cluster._prepare_security()  # the operator issues the new ring's sub-CAs from the same root
        cluster.write_configs()
        # the root key stays with the operator: giving one is refused
        _refused(_scm_cli(cluster, 0, "scm", "--restore", str(backup), "--root-ca-cert", str(cluster.secure.root_cert),
                          "--root-ca-key", str(cluster.secure.operator.root_key_path)), "CA mode operator")
        out = _ok(_scm_cli(cluster, 0, "scm", "--restore", str(backup)), "scm --restore (CA mode operator)")
        assert "Revoked the old ring's SCM certificates" in out, out
        cluster.start_node(0)
        cluster.wait_serving(0, 90)
        for i in (1, 2):
            cluster.start_node(i)
            cluster.wait_serving(i, 90)
        await wait_caught_up(cluster, timeout=90)
        await wait_until(lambda: _datanodes_registered(cluster), 90, "the datanodes re-registered")
        status = cli(cluster, "admin", "safemode", "status", "--verbose")
        if "is in safe mode" in status.stdout:
            _ok(cli(cluster, "admin", "safemode", "exit"), "admin safemode exit")
        await cluster.wait_healthy_quorum(timeout=120)
        await wait_open_pipeline(cluster)
        assert old_serials <= set(_revoked_serials(cluster))
        target = cluster.scms[await cluster.wait_leader(timeout=30)].client_address
        _assert_revoked(await _in_safe_mode_call(target, StaticClientSecurity(old_scm2)), "old scm2's sub-CA")
        phase2 = Workload(cluster.client_addresses, clients=2, security=sec)
        await _run(phase2, 80, "phase 2: 80 allocations on the restored ring")
        _assert_no_duplicates([phase1, phase2])
    finally:
        if sim is not None:
            await sim.stop()
        cluster.stop_all()
