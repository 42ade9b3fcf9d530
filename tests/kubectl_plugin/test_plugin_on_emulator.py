"""``kubectl ozone-scm`` against the emulated API server, no SCM running (fast, in ``make test``): the backup command
against the ``OzoneSCMBackup`` contract (``apiVersion ozone-scm.io/v1alpha1``, ``spec.cluster``, ``status.phase``
Pending|Running|Completed|Failed, ``status.message``) with this test playing the backup controller; the kind not
installed, a bad or taken name, a missing cluster; and the request annotations the other commands write.

The ``OzoneSCMBackup`` definition is the project's own (``crds/ozonescmbackups.yaml``); the backup controller's side is
played by the test here and run for real in the e2e scenario ``test_kubectl_plugin.py``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.local.apiserver import EmulatedAPIServer, serving, write_kubeconfig
from tests.e2e.local.operator_env import BIN, CRD_PATH

NS = "ozone"
GROUP = "ozone-scm.io"
PLUGIN = str(BIN / "kubectl-ozone_scm")
KUBECTL = Path(__file__).resolve().parents[2] / ".tools" / "bin" / "kubectl"  # the real kubectl (make k8s-tools)

# the project's own OzoneSCMBackup definition (crds/ozonescmbackups.yaml): the plugin and the operator's backup
# controller agree on it; this test plays the controller's part
BACKUP_CRD: dict[str, Any] = yaml.safe_load((CRD_PATH.parent / "ozonescmbackups.yaml").read_text())


async def run(kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        PLUGIN, "--kubeconfig", str(kubeconfig), *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(kubeconfig.parent)})
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def cluster_object(api: EmulatedAPIServer) -> None:
    api.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    api.put_object(yaml.safe_load(CRD_PATH.read_text()))
    api.put_object({"apiVersion": f"{GROUP}/v1alpha1", "kind": "OzoneSCMCluster",
                    "metadata": {"name": "scm", "namespace": NS}, "spec": {"replicas": 3}})


async def test_backup_without_the_kind_installed_is_one_line(tmp_path: Path) -> None:
    async with serving() as (api, url):
        cluster_object(api)
        kc = write_kubeconfig(tmp_path / "kubeconfig", url, NS)
        rc, _, err = await run(kc, "backup", "scm")
        assert rc == 1 and err.strip().count("\n") == 0, err
        assert "the OzoneSCMBackup kind is not installed" in err
        rc, _, err = await run(kc, "backup", "nope")
        assert rc == 1 and "OzoneSCMCluster nope not found in namespace ozone" in err, err
        rc, out, err = await run(kc, "status", "scm", "-o", "json")
        assert rc == 0, err
        assert json.loads(out)["backupKindInstalled"] is False

        # the same through the real kubectl, which finds the console script on PATH as the plugin `ozone-scm`
        if not KUBECTL.exists():
            pytest.fail(f"{KUBECTL} is missing: run `make k8s-tools`")
        proc = await asyncio.create_subprocess_exec(
            str(KUBECTL), "ozone-scm", "status", "scm", "-o", "json", stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(kc)})
        out_b, err_b = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err_b.decode()
        assert json.loads(out_b)["name"] == "scm"


async def test_backup_waits_for_the_controller_and_reports_its_outcome(tmp_path: Path) -> None:
    async with serving() as (api, url):
        cluster_object(api)
        api.put_object(BACKUP_CRD)
        kc = write_kubeconfig(tmp_path / "kubeconfig", url, NS)

        async def controller(name: str, phases: list[tuple[str, str]]) -> None:
            """Plays the backup controller: waits for the object, then walks it through ``phases``."""
            for _ in range(400):
                if api.get_object(f"{GROUP}/v1alpha1", "OzoneSCMBackup", name, NS) is not None:
                    break
                await asyncio.sleep(0.05)
            for phase, message in phases:
                await asyncio.sleep(0.3)
                api.patch_object(f"{GROUP}/v1alpha1", "OzoneSCMBackup", name, NS,
                                 {"status": {"phase": phase, "message": message}}, subresource="status")

        task = asyncio.create_task(controller("nightly", [("Running", ""), ("Completed", "3 files, 1.2 MiB")]))
        rc, out, err = await run(kc, "backup", "scm", "--name", "nightly", "--wait", "--timeout", "60")
        await task
        assert rc == 0, err
        assert "OzoneSCMBackup nightly Completed: 3 files, 1.2 MiB" in out
        body = api.get_object(f"{GROUP}/v1alpha1", "OzoneSCMBackup", "nightly", NS)
        assert body is not None and body["spec"] == {"cluster": "scm"}

        task = asyncio.create_task(controller("second", [("Failed", "the ring is in safemode; wait for it")]))
        rc, _, err = await run(kc, "backup", "scm", "--name", "second", "--wait", "--timeout", "60")
        await task
        assert rc == 1 and "OzoneSCMBackup second Failed: the ring is in safemode; wait for it" in err, err

        rc, _, err = await run(kc, "backup", "scm", "--name", "nightly")
        assert rc == 1 and "OzoneSCMBackup nightly already exists" in err, err
        rc, _, err = await run(kc, "backup", "scm", "--name", "Bad_Name")
        assert rc == 1 and "--name 'Bad_Name' is not a valid name" in err, err
        rc, _, err = await run(kc, "backup", "scm", "--name", "late", "--wait", "--timeout", "2")
        assert rc == 1 and "not done within 2s (last seen: phase none yet)" in err, err

        rc, out, err = await run(kc, "status", "scm", "-o", "json")
        assert rc == 0, err
        last = json.loads(out)["lastBackup"]
        assert last["phase"] in ("Pending", "Failed") and last["lastCompleted"]["name"] == "nightly", last


async def test_requests_are_the_annotations_the_operator_reads(tmp_path: Path) -> None:
    async with serving() as (api, url):
        cluster_object(api)
        kc = write_kubeconfig(tmp_path / "kubeconfig", url, NS)
        rc, _, err = await run(kc, "hibernate", "on", "scm")
        assert rc == 1 and "has not formed its ring yet" in err, err
        api.patch_object(f"{GROUP}/v1alpha1", "OzoneSCMCluster", "scm", NS, {"status": {
            "clusterID": "CID-1", "leader": "scm-0", "members": [
                {"name": "scm-0", "role": "LEADER", "state": "Joined", "ready": True},
                {"name": "scm-1", "role": "FOLLOWER", "state": "Joined", "ready": True, "lag": 0}]}},
            subresource="status")
        for args in (("hibernate", "on", "scm"), ("restart", "scm", "scm-1"), ("switchover", "scm", "scm-1",
                                                                               "--no-wait")):
            rc, _, err = await run(kc, *args)
            assert rc == 0, (args, err)
        ann = api.get_object(f"{GROUP}/v1alpha1", "OzoneSCMCluster", "scm", NS)["metadata"]["annotations"]  # type: ignore[index]
        assert ann["ozone-scm.io/hibernation"] == "on" and ann["ozone-scm.io/switchover-to"] == "scm-1"
        assert ann["ozone-scm.io/restartedAt.scm-1"].endswith("Z")
        rc, _, err = await run(kc, "restart", "scm", "scm-7")
        assert rc == 1 and "scm-7 is not a member of scm (members: scm-0, scm-1)" in err, err
