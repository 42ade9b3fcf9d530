"""``kubectl ozone-scm`` end to end: the plugin's console script run as a subprocess against the emulated API server
(through a kubeconfig, as a user would), the real operator honouring its requests, and every member a real SCM
process (``operator_env``). Run by ``make e2e-local``."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from ozone_scm_operator import naming
from tests.e2e.local import jobcontroller
from tests.e2e.local.operator_env import BIN, Env, environment

NAME = "scm"
PLUGIN = str(BIN / "kubectl-ozone_scm")
HEAVY = pytest.mark.e2e_local
SLOW = pytest.mark.timeout(900)  # a 3-member ring, a whole roll under load and one more restart: minutes on 2 cores
KEY_PEM = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIPLUGINTESTSECRET\n-----END EC PRIVATE KEY-----\n"


def kubeconfig(env: Env) -> Path:
    path = env.workdir / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "emulator",
        "clusters": [{"name": "emulator", "cluster": {"server": env.url}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "u", "namespace": env.ns}}],
        # the person running the plugin: the administrator (the emulator enforces RBAC)
        "users": [{"name": "u", "user": {"token": env.admin_token} if env.admin_token else {}}],
    }))
    return path


async def plugin(env: Env, *args: str, timeout: float = 600) -> tuple[int, str, str]:
    """The console script as a subprocess (asynchronously: the emulator and the kubelet fixture run in this loop)."""
    proc = await asyncio.create_subprocess_exec(
        PLUGIN, *args, env={"KUBECONFIG": str(kubeconfig(env)), "PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(env.workdir),
                            "COLUMNS": "200"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=str(env.workdir))
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def ok(env: Env, *args: str, timeout: float = 600) -> str:
    rc, out, err = await plugin(env, *args, timeout=timeout)
    assert rc == 0, f"kubectl ozone-scm {' '.join(args)} exited {rc}: {err[-3000:]} {out[-2000:]}"
    return out


def pod_uids(env: Env) -> dict[str, str]:
    return {n: p["metadata"]["uid"] for n, p in env.pods(NAME).items()}


def cluster_annotations(env: Env) -> dict[str, str]:
    return dict(env.cluster(NAME)["metadata"].get("annotations") or {})


async def container_ids(env: Env) -> set[int]:
    """The container IDs the leader lists (``ozone-scm admin container list --json``, over every member's client
    address)."""
    scm = ",".join(f"{ip}:{naming.PORTS['client-grpc']}" for ip in env.member_ips(NAME).values())
    proc = await asyncio.create_subprocess_exec(
        str(BIN / "ozone-scm"), "admin", "--scm", scm, "container", "list", "--json", "--count", "100000",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-2000:]
    data = json.loads(out)
    items = data if isinstance(data, list) else data.get("containers") or []
    return {int(c.get("containerID", c.get("containerId", -1))) for c in items}


async def _ready(env: Env) -> dict[str, Any]:
    await env.create(NAME, {"replicas": 3})
    await env.wait_ready(NAME, timeout=240)
    await env.verify_consistent(NAME)
    return env.status(NAME)


def step(what: str) -> None:
    """A progress line (shown with -s, and in the captured output of a failure)."""
    print(f"{time.strftime('%H:%M:%S')} {what}", file=sys.stderr, flush=True)


@HEAVY
@SLOW
async def test_plugin_status_switchover_restart_and_report(tmp_path: Path) -> None:
    async with environment(tmp_path) as env:
        st = await _ready(env)
        step("ready")
        # status, as JSON and as a table
        s = json.loads(await ok(env, "status", NAME, "-o", "json"))
        assert s["leader"] == st["leader"] and s["clusterID"] == st["clusterID"] and s["phase"] == "Running"
        assert sorted(m["name"] for m in s["members"]) == ["scm-0", "scm-1", "scm-2"]
        assert sorted(m["role"] for m in s["members"]) == ["FOLLOWER", "FOLLOWER", "LEADER"]
        assert all(m["ready"] and m["podPhase"] == "Running" and m["lag"] is not None for m in s["members"])
        table = await ok(env, "status")  # the namespace's clusters, from the kubeconfig's context
        for word in ("scm-0", "scm-1", "scm-2", "LEADER", "FOLLOWER", "Running", st["clusterID"], "Ready"):
            assert word in table, (word, table)

        step("status checked")
        # switchover: refused for a stranger (nothing written), done for a caught-up follower
        rc, _, err = await plugin(env, "switchover", NAME, "scm-9")
        assert rc == 1 and "not a member of scm" in err and "ozone-scm.io/switchover-to" not in cluster_annotations(env)
        leader = st["leader"]
        target = next(m for m in env.members(NAME) if m != leader)
        out = await ok(env, "switchover", NAME, target, "--timeout", "120")
        assert f"SwitchoverDone: {target} is the leader" in out, out
        assert env.status(NAME)["leader"] == target and "ozone-scm.io/switchover-to" not in cluster_annotations(env)
        assert any(t == "Normal" and r == "SwitchoverDone" for t, r, _ in env.events(NAME))
        await env.wait_ready(NAME)

        step("switchover done")
        # restart of the whole ring under a block-allocation workload: every member once, the leader last after a
        # transfer, no failed allocation, no duplicate block ID
        out_dir = env.start_workload(NAME)
        await env.workload_ready(out_dir)
        leader = await env.leader(NAME)
        before = pod_uids(env)
        n_events = len(env.events(NAME))
        await ok(env, "restart", NAME, "--wait", "--timeout", "400", timeout=500)
        after = pod_uids(env)
        assert all(after[m] != before[m] for m in before), (before, after)
        evs = [(r, msg) for _, r, msg in env.events(NAME)[n_events:] if r in ("RollingMember", "TransferringLeadership")]
        rolled = [msg.split()[1] for r, msg in evs if r == "RollingMember"]
        assert sorted(rolled) == sorted(env.members(NAME)) and rolled[-1] == leader, evs
        transfers = [i for i, (r, msg) in enumerate(evs) if r == "TransferringLeadership" and msg.split()[3] == leader]
        assert transfers and transfers[0] < len(evs) - 1, evs

        step("ring restarted")
        # restart of one member, still under load (a restarted SCM leaves safemode on the datanodes' reports): only
        # its Pod is new
        before = pod_uids(env)
        member = next(m for m in env.members(NAME) if m != env.status(NAME)["leader"])
        await ok(env, "restart", NAME, member, "--wait", "--timeout", "300", timeout=400)
        after = pod_uids(env)
        assert [m for m in before if after[m] != before[m]] == [member], (before, after)
        result = await env.stop_workload(out_dir)
        assert len(result.calls) > 50 and result.failures == [], result.failures[:5]
        assert result.duplicates == set()

        step("member restarted")
        # the support bundle: everything an engineer asks for, and no secret
        env.api.put_object({"apiVersion": "v1", "kind": "Secret", "metadata": {
            "name": f"{NAME}-extra", "namespace": env.ns, "labels": {"ozone-scm.io/cluster": NAME}},
            "data": {"tls.key": base64.b64encode(KEY_PEM.encode()).decode()}})
        zpath = env.workdir / "bundle.zip"
        out = await ok(env, "report", NAME, "-o", str(zpath))
        assert "wrote" in out and zpath.exists()
        with zipfile.ZipFile(zpath) as z:
            names = set(z.namelist())
            read = {n.split("/", 1)[1]: z.read(n) for n in names}
        for f in ("cluster.yaml", "events.yaml", "pods.yaml", "pvcs.yaml", "secrets.yaml", "scm-roles.txt",
                  "manifest.json"):
            assert f in read, (f, sorted(read))
        for m in env.members(NAME):
            assert read[f"logs/{m}/scm.log"].strip(), f"empty log of {m}"
            assert f"logs/{m}/bootstrap.log" in read or f"logs/{m}/init.log" in read
        roles = read["scm-roles.txt"].decode()
        assert "asked SCM directly" in roles and roles.count(":LEADER:") == 2 and roles.count(":FOLLOWER:") == 4, roles
        assert yaml.safe_load(read["cluster.yaml"])["status"]["clusterID"] == st["clusterID"]
        assert any(e.get("reason") == "SwitchoverDone" for e in yaml.safe_load(read["events.yaml"]))
        secrets = yaml.safe_load(read["secrets.yaml"])
        assert {"name": f"{NAME}-extra", "keys": ["tls.key"]}.items() <= secrets[0].items()
        blob = b"".join(read.values())
        assert b"PLUGINTESTSECRET" not in blob and base64.b64encode(KEY_PEM.encode())[:40] not in blob
        # never over an existing bundle
        rc, _, err = await plugin(env, "report", NAME, "-o", str(zpath))
        assert rc == 1 and "exists" in err
        await env.verify_consistent(NAME)


@HEAVY
@SLOW
async def test_plugin_hibernate_keeps_the_ring_and_every_container(tmp_path: Path) -> None:
    async with environment(tmp_path) as env, jobcontroller.running(env.api, env.ns, enabled=not env.real_controllers):
        st = await _ready(env)
        ids = {m["name"]: m["scmId"] for m in st["members"]}
        out_dir = env.start_workload(NAME)
        await env.workload_ready(out_dir)
        await env.wait_for(lambda: len((out_dir / "calls.jsonl").read_text().splitlines()) > 30, 120, "allocations")
        result = await env.stop_workload(out_dir)
        allocated = {c for c, _ in result.block_ids}
        assert allocated and result.failures == []
        held = await container_ids(env)
        assert allocated <= held
        digests = {t: (sha, count) for t, sha, count in (await env.verify_consistent(NAME))["members"]["scm-0"]["digests"]}

        # a backup before sleeping, through the plugin and the operator's real backup controller (a verified Job)
        out = await ok(env, "backup", NAME, "--name", "before-sleep", "--wait", timeout=400)
        assert "OzoneSCMBackup before-sleep Completed" in out, out
        backup = env.api.get_object("ozone-scm.io/v1alpha1", "OzoneSCMBackup", "before-sleep", env.ns)
        assert backup is not None and backup["status"]["clusterID"] == st["clusterID"], backup
        await env.wait_for(lambda: (env.status(NAME).get("backup") or {}).get("lastBackup") == "before-sleep", 60,
                           "status.backup.lastBackup")
        assert "before-sleep" in await ok(env, "status", NAME)

        out = await ok(env, "hibernate", "on", NAME, "--wait", "--timeout", "180")
        assert "Hibernated" in out
        assert env.pods(NAME) == {} and sorted(env.pvcs(NAME)) == ["scm-0-data", "scm-1-data", "scm-2-data"]
        s = json.loads(await ok(env, "status", NAME, "-o", "json"))
        assert s["phase"] == "Hibernated" and s["annotations"] == {"ozone-scm.io/hibernation": "on"}
        cond = {c["type"]: c for c in s["conditions"]}
        assert cond["Hibernated"]["status"] == "True" and cond["Ready"]["reason"] == "Hibernated"
        assert cond["Degraded"]["status"] == "False", cond
        rc, _, err = await plugin(env, "restart", NAME)
        assert rc == 1 and "Hibernated" in err

        out = await ok(env, "hibernate", "off", NAME, "--wait", "--timeout", "300", timeout=400)
        assert "running again" in out
        await env.wait_ready(NAME)
        st2 = env.status(NAME)
        assert st2["clusterID"] == st["clusterID"] and {m["name"]: m["scmId"] for m in st2["members"]} == ids
        assert allocated <= await container_ids(env) and held <= await container_ids(env)
        after = {t: (sha, count) for t, sha, count in (await env.verify_consistent(NAME))["members"]["scm-0"]["digests"]}
        assert after["containers"][1] == digests["containers"][1], (digests, after)
        reasons = [r for _, r, _ in env.events(NAME)]
        assert "Hibernated" in reasons and "Resumed" in reasons
        print(json.dumps({"containers": len(held), "allocations": len(result.calls)}), file=sys.stderr)
