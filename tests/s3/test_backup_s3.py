"""``admin scm backup upload|download|delete`` against a real S3 server (radosgw on loopback): the bad inputs as
one-line errors with nothing overwritten, and a whole round trip -- a ring backed up, uploaded, listed, downloaded,
verified, and a one-member ring restored from the download with every container of the backup."""

from __future__ import annotations

import io
import json
import os
import secrets
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from minio import Minio

from scm_server.local.quorum import HALocalCluster
from scm_server.metadata.backup import CHECKPOINT_FILE, MANIFEST, write_backup
from scm_server.ports import dead_address
from tests.integration.ha.harness import (
    TEST_SETTINGS,
    Workload,
    cli,
    containers_on,
    start_serving,
    wait_until,
)
from tests.s3.radosgw import S3Server

pytestmark = pytest.mark.s3

CLUSTER_ID = "CID-11111111-2222-3333-4444-555555555555"


def ozone_scm(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scm_server.cli.main", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def client_env(server: S3Server, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {**base, **server.env(), **extra}


def ok(result: subprocess.CompletedProcess[str], what: str) -> str:
    assert result.returncode == 0, f"{what} failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr[-3000:]}"
    return result.stdout


def refused(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert result.returncode != 0, f"expected a refusal, got exit 0:\n{result.stdout}"
    err = result.stderr.strip()
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, f"not one line: {err!r}"
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in the error line: {lines[0]!r}"
    return lines[0]


def fake_backup(out: Path, payload: bytes = b"x" * 4096) -> dict[str, object]:
    """A backup directory as `admin scm backup` writes it (a real tar.gz holding scm.db/), without a ring."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        d = tarfile.TarInfo("scm.db")
        d.type = tarfile.DIRTYPE
        tar.addfile(d)
        f = tarfile.TarInfo("scm.db/CURRENT")
        f.size = len(payload)
        tar.addfile(f, io.BytesIO(payload))
    out.mkdir(parents=True)
    m = write_backup(out, buf.getvalue(), {"clusterId": CLUSTER_ID, "term": 3, "index": 42, "members": [],
                                           "sequenceIds": {"localId": 1000}}, created_ms=int(time.time() * 1000))
    return m.raw


def new_bucket(admin: Minio) -> str:
    name = "b-" + secrets.token_hex(6)
    admin.make_bucket(name)
    return name


def listing(admin: Minio, bucket: str, prefix: str) -> dict[str, int]:
    return {str(o.object_name)[len(prefix):]: int(o.size or 0)
            for o in admin.list_objects(bucket, prefix=prefix, recursive=True)}


def test_bad_inputs_are_one_line_errors_and_nothing_is_overwritten(
        s3_server: S3Server, s3_admin: Minio, tmp_path: Path) -> None:
    env = client_env(s3_server)
    backup = tmp_path / "backup"
    raw = fake_backup(backup)
    bucket = new_bucket(s3_admin)
    url = f"s3://{bucket}/scm/first/"

    # before any request: a bad URL, no credentials, no endpoint
    refused(ozone_scm(env, "admin", "scm", "backup", "upload", str(backup), "http://x/y/"), "not an s3:// URL")
    refused(ozone_scm(env, "admin", "scm", "backup", "upload", str(backup), f"s3://{bucket}"), "names no prefix")
    refused(ozone_scm(env, "admin", "scm", "backup", "upload", str(backup), "s3://Bad_Bucket/p/"),
            "not a valid bucket name")
    no_keys = {k: v for k, v in env.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    refused(ozone_scm(no_keys, "admin", "scm", "backup", "upload", str(backup), url), "no S3 credentials",
            "AWS_ACCESS_KEY_ID")
    no_endpoint = {k: v for k, v in env.items() if k != "AWS_ENDPOINT_URL"}
    refused(ozone_scm(no_endpoint, "admin", "scm", "backup", "upload", str(backup), url), "no S3 endpoint")
    # the server's answers: a missing bucket, wrong keys
    refused(ozone_scm(env, "admin", "scm", "backup", "upload", str(backup), "s3://no-such-bucket-here/p/"),
            "bucket no-such-bucket-here does not exist")
    dead = {**env, "AWS_ENDPOINT_URL": f"http://{dead_address()}"}
    refused(ozone_scm(dead, "admin", "scm", "backup", "upload", str(backup), url), "cannot reach the S3 endpoint",
            "--endpoint-url")
    wrong = {**env, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    refused(ozone_scm(wrong, "admin", "scm", "backup", "upload", str(backup), url), "refused the request")
    # a local backup that does not verify is not uploaded
    broken = tmp_path / "broken"
    fake_backup(broken)
    with (broken / CHECKPOINT_FILE).open("r+b") as f:
        f.truncate(10)
    refused(ozone_scm(env, "admin", "scm", "backup", "upload", str(broken), f"s3://{bucket}/scm/broken/"),
            "truncated", "nothing was uploaded")
    assert listing(s3_admin, bucket, "scm/broken/") == {}

    # the upload: every file, the manifest last; a second upload to the same prefix is refused, nothing changes
    out = ok(ozone_scm(env, "admin", "scm", "backup", "upload", str(backup), url), "upload")
    assert CLUSTER_ID in out
    stored = listing(s3_admin, bucket, "scm/first/")
    assert stored == {MANIFEST: (backup / MANIFEST).stat().st_size, CHECKPOINT_FILE: raw["files"][CHECKPOINT_FILE]["size"]}  # type: ignore[index]
    before = s3_admin.stat_object(bucket, "scm/first/" + MANIFEST).etag
    refused(ozone_scm(env, "admin", "scm", "backup", "upload", str(backup), url), "already holds 2 object(s)")
    assert s3_admin.stat_object(bucket, "scm/first/" + MANIFEST).etag == before

    # download: into a non-empty directory refused; a prefix without a manifest is not a backup
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep").write_text("mine")
    refused(ozone_scm(env, "admin", "scm", "backup", "download", url, str(busy)), "not empty")
    assert [p.name for p in busy.iterdir()] == ["keep"]
    s3_admin.put_object(bucket, "scm/partial/" + CHECKPOINT_FILE, io.BytesIO(b"abc"), 3)
    refused(ozone_scm(env, "admin", "scm", "backup", "download", f"s3://{bucket}/scm/partial/", str(tmp_path / "p")),
            "holds no manifest.json")
    # the checkpoint replaced by other bytes of the same size: a digest mismatch, and nothing left behind
    corrupt_url = f"s3://{bucket}/scm/corrupt/"
    ok(ozone_scm(env, "admin", "scm", "backup", "upload", str(backup), corrupt_url), "upload (to corrupt)")
    size = int(raw["files"][CHECKPOINT_FILE]["size"])  # type: ignore[index]
    s3_admin.put_object(bucket, "scm/corrupt/" + CHECKPOINT_FILE, io.BytesIO(b"\0" * size), size)
    dest = tmp_path / "corrupt"
    refused(ozone_scm(env, "admin", "scm", "backup", "download", corrupt_url, str(dest)), "sha256 of scm.db.tar.gz")
    assert not dest.exists() or not any(dest.iterdir()), "a failed download left files behind"

    # the download that works, verified (and the cluster check)
    good = tmp_path / "good"
    refused(ozone_scm(env, "admin", "scm", "backup", "download", url, str(good), "--clusterid", "CID-other"),
            "belongs to cluster")
    out = ok(ozone_scm(env, "admin", "scm", "backup", "download", url, str(good), "--clusterid", CLUSTER_ID),
             "download")
    assert out.startswith("OK")
    assert (good / CHECKPOINT_FILE).read_bytes() == (backup / CHECKPOINT_FILE).read_bytes()
    assert json.loads((good / MANIFEST).read_text()) == raw
    # run again into the same directory (an init container restarted): this very backup is only verified again;
    # a directory holding another backup is refused, untouched
    assert ok(ozone_scm(env, "admin", "scm", "backup", "download", url, str(good)), "download again").startswith("OK")
    other = tmp_path / "other"
    fake_backup(other, payload=b"y" * 100)
    refused(ozone_scm(env, "admin", "scm", "backup", "download", url, str(other)), "not empty")
    assert (other / MANIFEST).read_bytes() != (good / MANIFEST).read_bytes()

    # delete: refused over foreign objects; otherwise everything, manifest first; a second delete finds nothing
    s3_admin.put_object(bucket, "scm/mixed/" + MANIFEST, io.BytesIO(b"{}"), 2)
    s3_admin.put_object(bucket, "scm/mixed/other-data.bin", io.BytesIO(b"keep"), 4)
    refused(ozone_scm(env, "admin", "scm", "backup", "delete", f"s3://{bucket}/scm/mixed/"), "not backup files")
    assert set(listing(s3_admin, bucket, "scm/mixed/")) == {MANIFEST, "other-data.bin"}
    out = ok(ozone_scm(env, "admin", "scm", "backup", "delete", url), "delete")
    assert "2 object(s)" in out
    assert listing(s3_admin, bucket, "scm/first/") == {}
    assert "nothing to delete" in ok(ozone_scm(env, "admin", "scm", "backup", "delete", url), "delete again")
    # a partial upload (no manifest) is deleted too: only backup file names under the prefix
    ok(ozone_scm(env, "admin", "scm", "backup", "delete", f"s3://{bucket}/scm/partial/"), "delete partial")
    assert listing(s3_admin, bucket, "scm/partial/") == {}


async def test_upload_download_restore_a_one_member_ring(s3_server: S3Server, s3_admin: Minio,
                                                         tmp_path: Path) -> None:
    env = client_env(s3_server)
    bucket = new_bucket(s3_admin)
    url = f"s3://{bucket}/ozone/scm/backup-1/"
    cluster = HALocalCluster(tmp_path / "c", 1, settings=TEST_SETTINGS)
    sim = None
    try:
        sim = await start_serving(cluster)
        work = Workload(cluster.client_addresses, clients=2)
        work.start()

        async def enough() -> bool:
            return len(work.successes()) >= 60

        await wait_until(enough, 90, "60 allocations")
        await work.stop()
        containers = work.acknowledged_containers()
        assert containers, "the workload created no container"

        backup = tmp_path / "backup"
        ok(cli(cluster, "admin", "scm", "backup", "--out", str(backup)), "admin scm backup")
        manifest = json.loads((backup / MANIFEST).read_text())
        t0 = time.monotonic()
        status = tmp_path / "status.json"
        ok(ozone_scm(env, "admin", "scm", "backup", "upload", str(backup), url, "--status-file", str(status)),
           "upload")
        up_s = time.monotonic() - t0
        summary = json.loads(status.read_text())
        assert summary["clusterID"] == manifest["clusterId"] and summary["index"] == manifest["index"]
        stored = listing(s3_admin, bucket, "ozone/scm/backup-1/")
        assert stored == {**{rel: f["size"] for rel, f in manifest["files"].items()},
                          MANIFEST: (backup / MANIFEST).stat().st_size}

        # the ring is lost, disk and all; the backup comes back from the bucket
        cluster.kill(0, signal.SIGKILL)
        cluster.scms[0].metadata_dir.rename(cluster.scms[0].metadata_dir.with_name("lost"))
        cluster.scms[0].metadata_dir.mkdir()
        fetched = tmp_path / "fetched"
        t0 = time.monotonic()
        ok(ozone_scm(env, "admin", "scm", "backup", "download", url, str(fetched), "--clusterid",
                     manifest["clusterId"]), "download")
        down_s = time.monotonic() - t0
        assert ok(cli(cluster, "admin", "scm", "backup", "verify", str(fetched)), "verify").startswith("OK")
        out = ok(cli(cluster, "scm", "--restore", str(fetched), "--clusterid", manifest["clusterId"]), "restore")
        assert manifest["clusterId"] in out
        cluster.start_node(0)
        cluster.wait_serving(0, 90)
        await cluster.wait_healthy_quorum(timeout=90)
        assert await containers_on(cluster, 0, containers) == containers
        size = sum(f["size"] for f in manifest["files"].values())
        print(f"\nS3 round trip: {size} bytes, upload {up_s:.2f}s, download + verify {down_s:.2f}s, "
              f"{len(containers)} containers restored")
    finally:
        if sim is not None:
            await sim.stop()
        cluster.stop_all()


def test_https_with_the_servers_ca_and_a_one_line_error_without_it(
        s3_server: S3Server, s3_admin: Minio, tmp_path: Path) -> None:
    tls = client_env(s3_server, AWS_ENDPOINT_URL=s3_server.tls_endpoint)
    backup = tmp_path / "backup"
    fake_backup(backup)
    bucket = new_bucket(s3_admin)
    url = f"s3://{bucket}/tls/b1/"
    # the system's CAs do not know the gateway's: refused before anything is sent, one line naming the fix
    refused(ozone_scm(tls, "admin", "scm", "backup", "upload", str(backup), url), "TLS with", "--ca-bundle")
    assert listing(s3_admin, bucket, "tls/b1/") == {}
    ok(ozone_scm(tls, "admin", "scm", "backup", "upload", str(backup), url, "--ca-bundle", str(s3_server.ca_file)),
       "upload over https")
    assert set(listing(s3_admin, bucket, "tls/b1/")) == {MANIFEST, CHECKPOINT_FILE}
    # AWS_CA_BUNDLE does the same as the flag; a CA file that does not exist is refused up front
    with_ca = {**tls, "AWS_CA_BUNDLE": str(s3_server.ca_file)}
    out = ok(ozone_scm(with_ca, "admin", "scm", "backup", "download", url, str(tmp_path / "got")), "download")
    assert out.startswith("OK")
    refused(ozone_scm(tls, "admin", "scm", "backup", "download", url, str(tmp_path / "x"), "--ca-bundle",
                      str(tmp_path / "missing.pem")), "CA bundle", "does not exist")
