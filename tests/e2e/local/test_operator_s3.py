"""The operator's backups in object storage end to end: the real operator on the emulated API server, every Pod a real
process (the backup Job's run by the emulator's Job controller fixture), and a real radosgw (tests/s3/radosgw.py)
listening on the test process's address of the Pod network -- the only address the Pods reach, inside the network
namespaces the kubelet fixture made, over HTTPS with the CA in ``caSecret``. A ring with ``spec.backup.s3`` is backed up (the objects listed), a new cluster
is created from that backup (its first member downloads and verifies it), and deleting the backup deletes the
objects. Needs radosgw: only ``make s3-test`` selects it (marker ``s3``)."""

from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path

import pytest

from scm_server.client.object_store import S3Settings, make_client
from scm_server.metadata.backup import CHECKPOINT_FILE, MANIFEST
from tests.e2e.local import jobcontroller
from tests.e2e.local.operator_env import API, BACKUP_KIND, environment
from tests.s3.radosgw import radosgw

pytestmark = pytest.mark.s3

NAME = "scm"
BUCKET = "scm-backups"


async def test_backups_to_radosgw_restore_into_a_new_cluster_and_are_deleted(tmp_path: Path) -> None:
    async with environment(tmp_path / "env") as env, jobcontroller.running(env.api, env.ns) as jobs:
        host = env.kubelet.network.host_ip
        started = time.monotonic()
        with radosgw(tmp_path, host=host) as s3:
            print(f"\nradosgw up at {s3.tls_endpoint} (the Pod network's host address) in "
                  f"{time.monotonic() - started:.1f}s", flush=True)
            admin = make_client(S3Settings.from_env(None, None, s3.env()))
            admin.make_bucket(BUCKET)
            env.api.put_object({"apiVersion": "v1", "kind": "Secret",
                                "metadata": {"name": "s3-keys", "namespace": env.ns},
                                "data": {"AWS_ACCESS_KEY_ID": base64.b64encode(s3.access_key.encode()).decode(),
                                         "AWS_SECRET_ACCESS_KEY": base64.b64encode(s3.secret_key.encode()).decode()}})
            # over HTTPS: the gateway's certificate is from a CA made for the run, given as spec.backup.s3.caSecret
            env.api.put_object({"apiVersion": "v1", "kind": "Secret",
                                "metadata": {"name": "s3-ca", "namespace": env.ns},
                                "data": {"ca.crt": base64.b64encode(s3.ca_file.read_bytes()).decode()}})
            target = {"s3": {"endpoint": s3.tls_endpoint, "bucket": BUCKET, "prefix": "ozone/scm",
                             "credentialsSecret": "s3-keys", "caSecret": "s3-ca"}}

            await env.create(NAME, {"replicas": 1, "backup": target})
            await env.wait_ready(NAME, timeout=240)
            cid = env.status(NAME)["clusterID"]
            out = env.start_workload(NAME)
            await env.workload_ready(out)
            result = await env.stop_workload(out)
            assert result.block_ids and not result.failures
            backed_up = await env.containers(NAME)

            t0 = time.monotonic()
            env.create_backup("b1", NAME)
            b1 = await env.wait_backup_done("b1", timeout=240)
            took = time.monotonic() - t0
            url = f"s3://{BUCKET}/ozone/scm/b1/"
            assert b1["phase"] == "Completed", b1
            assert b1["location"] == url and "backupPath" not in b1
            assert b1["clusterID"] == cid and b1["index"] > 0 and b1["sizeBytes"] > 0
            stored = {str(o.object_name): int(o.size or 0)
                      for o in admin.list_objects(BUCKET, prefix="ozone/scm/b1/", recursive=True)}
            assert set(stored) == {f"ozone/scm/b1/{MANIFEST}", f"ozone/scm/b1/{CHECKPOINT_FILE}"}
            assert env.api.get_object("v1", "PersistentVolumeClaim", f"{NAME}-backups", env.ns) is None
            assert not jobs.refused  # the Job's Pod (backup, verify, upload) passed Pod Security restricted
            print(f"operator backup to S3: Job created to Completed in {took:.1f}s ({b1['sizeBytes']} bytes)")

            # a new cluster from the backup in S3: its first member downloads and verifies it, then restores
            await env.create("restored", {"replicas": 1, "bootstrap": {"fromBackup": "b1"}, "backup": target})
            await env.wait_ready("restored", timeout=300)
            assert env.status("restored")["clusterID"] == cid
            assert backed_up <= await env.containers("restored")
            launched = [r.container for r in env.kubelet.launches if r.pod == "restored-0"]
            assert launched[:2] == ["download", "restore"], launched

            # deleting the backup deletes its objects (the manifest first), then the object goes
            env.api.call_delete(API, BACKUP_KIND, "b1", env.ns)
            await env.wait_for(lambda: env.backup("b1") is None, 120, "backup b1 deleted")
            left = await asyncio.to_thread(
                lambda: list(admin.list_objects(BUCKET, prefix="ozone/scm/b1/", recursive=True)))
            assert left == []
