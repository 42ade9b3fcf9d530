"""The operator's local end-to-end scenarios: the real operator, the emulated API server, and every Pod it creates run
as a real SCM process (``operator_env``). Each scenario ends with one cluster ID on every member and identical
replicated tables (``Env.verify_consistent``). Run by ``make e2e-local``; ``make test`` runs only the 1-member scenario."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from ozone_scm_operator import naming, planner
from ozone_scm_operator.effects.kube import REPORTING_CONTROLLER
from ozone_scm_operator.spec import DEFAULT_IMAGE
from scm_server.metadata.backup import verify_backup
from tests.e2e.local import jobcontroller, scm_ring
from tests.e2e.local.eventsapi import occurrences
from tests.e2e.local.operator_env import API, BACKUP_KIND, Env, WorkloadResult, environment

NAME = "scm"
# Together these take about 4-5 minutes on 2 cores (more under load), plus about 1 minute for the two operator-HA
# scenarios: `make e2e-local` (and .ci/run) runs them.
# The 1-member scenario stays in `make test`, so the tier's whole path (operator process, emulator, kubelet, real SCM)
# is always exercised.
HEAVY = pytest.mark.e2e_local
# Scenarios that need Kubernetes' own controllers (CronJob, Job), which the emulator does not run: only the tiers with
# a real control plane (`make e2e-control-plane`, the kind tier) call them; `make test` and `make e2e-local` never
# select the marker.
NEEDS_CONTROLLERS = pytest.mark.control_plane


def _job_controller(env: Env) -> contextlib.AbstractAsyncContextManager[jobcontroller.JobController]:
    """The Job controller for the backup Jobs: the fixture on the emulator, none on a real control plane (its
    kube-controller-manager runs the real one)."""
    return jobcontroller.running(env.api, env.ns, enabled=not env.real_controllers)


async def _create_ready(env: Env, replicas: int = 3, **spec: Any) -> dict[str, Any]:
    await env.create(NAME, {"replicas": replicas, **spec})
    await env.wait_ready(NAME, timeout=240)
    await env.verify_consistent(NAME)
    return env.status(NAME)


@HEAVY
async def test_create_kill_replace_and_scale(tmp_path: Path) -> None:
    async with environment(tmp_path) as env:
        st = await _create_ready(env)
        assert env.members(NAME) == ["scm-0", "scm-1", "scm-2"] and st["primordialMember"] == "scm-0"
        cid = st["clusterID"]
        reasons = [r for _, r, _ in env.events(NAME)]
        assert "ClusterInitialized" in reasons and "ClusterReady" in reasons

        # a killed SCM process is restarted in place: same member, same identity
        ids = {m["name"]: m["scmId"] for m in st["members"]}
        await env.kill_scm("scm-1")
        await env.wait_for(lambda: not env.is_ready(NAME), 60, "scm-1 seen down")
        await env.wait_ready(NAME)
        assert {m["name"]: m["scmId"] for m in env.status(NAME)["members"]} == ids

        # a member whose volume and Pod are deleted is replaced with a fresh identity
        env.delete("PersistentVolumeClaim", "scm-2-data")
        env.delete("Pod", "scm-2")
        await env.wait_for(lambda: "scm-3" in env.members(NAME), 120, "replacement scm-3")
        await env.wait_ready(NAME)
        st = env.status(NAME)
        assert env.members(NAME) == ["scm-0", "scm-1", "scm-3"] and st["clusterID"] == cid
        assert ids["scm-2"] not in {m["scmId"] for m in st["members"]}
        assert any(r == "DecommissioningMember" and "scm-2" in msg for _, r, msg in env.events(NAME))
        await env.verify_consistent(NAME)

        # 3 -> 5 -> 3, one member at a time
        env.patch_spec(NAME, {"replicas": 5})
        await env.wait_ready(NAME, replicas=5)
        assert len(env.members(NAME)) == 5
        await env.verify_consistent(NAME)
        env.patch_spec(NAME, {"replicas": 3})
        await env.wait_ready(NAME, replicas=3)
        st = env.status(NAME)
        assert "scm-0" in env.members(NAME) and st["clusterID"] == cid
        assert set(env.pods(NAME)) == set(env.members(NAME))
        await env.verify_consistent(NAME)


async def test_one_member_cluster(tmp_path: Path) -> None:
    async with environment(tmp_path) as env:
        st = await _create_ready(env, replicas=1)
        assert env.members(NAME) == ["scm-0"] and st["leader"] == "scm-0"
        pdb = env.api.get_object("policy/v1", "PodDisruptionBudget", NAME, env.ns)
        assert pdb is not None and pdb["spec"]["maxUnavailable"] == 0

        # children are written by server-side apply (field manager ozone-scm-operator): a label dropped from
        # spec.service.labels leaves the Service, a label someone else put there stays
        def labels() -> dict[str, str]:
            return dict(((env.api.get_object("v1", "Service", NAME, env.ns) or {}).get("metadata") or {})
                        .get("labels") or {})

        env.patch_spec(NAME, {"service": {"labels": {"team": "a", "tier": "x"}}})
        await env.wait_for(lambda: labels().get("tier") == "x", 30, "the Service labels applied")
        env.api.patch_object("v1", "Service", NAME, env.ns, {"metadata": {"labels": {"mine": "y"}}})
        env.patch_spec(NAME, {"service": {"labels": {"tier": None}}})
        await env.wait_for(lambda: "tier" not in labels(), 30, "the dropped label removed")
        assert labels()["team"] == "a" and labels()["mine"] == "y"


@HEAVY
async def test_operator_killed_in_the_middle_of_bootstrap_and_of_scaling(tmp_path: Path) -> None:
    async with environment(tmp_path) as env:
        await env.stop_operator()
        # killed right after recording that scm-1 is joining (beside the primordial) and before creating its Pod
        await env.start_operator(crash_before=(planner.CreatePod.kind, "scm-1"))
        await env.create(NAME, {"replicas": 3})
        assert await env.operator_exited() == 86, env.operator_output()[-2000:]
        st = env.status(NAME)
        assert st["currentOperation"]["type"] == "Bootstrap" and st["currentOperation"]["member"] == "scm-0"
        assert {m["name"]: m["state"] for m in st["members"]}["scm-1"] == "Joining"
        assert "scm-1" not in env.pods(NAME)
        await env.start_operator()
        await env.wait_ready(NAME, timeout=240)
        await env.verify_consistent(NAME)
        assert env.members(NAME) == ["scm-0", "scm-1", "scm-2"]

        # killed after the intent to decommission a member and before the RemoveSCM call
        await env.stop_operator()
        env.patch_spec(NAME, {"replicas": 1})
        await env.start_operator(crash_before=(planner.Decommission.kind, "scm-2"))
        assert await env.operator_exited() == 86, env.operator_output()[-2000:]
        assert env.status(NAME)["currentOperation"]["type"] == "RemoveMember"
        await env.start_operator()
        await env.wait_ready(NAME, replicas=1, timeout=240)
        assert env.members(NAME) == ["scm-0"] and set(env.pods(NAME)) == {"scm-0"}
        await env.verify_consistent(NAME)


@HEAVY
async def test_rolling_image_change_leader_last_without_failed_allocations(tmp_path: Path) -> None:
    async with environment(tmp_path) as env:
        await _create_ready(env)
        out = env.start_workload(NAME)
        await env.workload_ready(out)
        leader = await env.leader(NAME)
        env.patch_spec(NAME, {"image": "ozone-scm:0.2.0"})
        await env.wait_for(lambda: env.status(NAME).get("currentOperation"), 30, "the roll starts")
        await env.wait_ready(NAME, timeout=200)
        result = await env.stop_workload(out, timeout=180)  # the machine may be loaded: done, not fast
        pods = env.pods(NAME)
        assert all(p["spec"]["containers"][0]["image"] == "ozone-scm:0.2.0" for p in pods.values()), _diagnose(env)
        evs = [(r, msg) for _, r, msg in env.events(NAME) if r in ("RollingMember", "TransferringLeadership")]
        rolled = [msg.split()[1] for r, msg in evs if r == "RollingMember"]
        assert sorted(rolled) == sorted(env.members(NAME)), evs
        # the leader goes last, and only after leadership moved away from it
        moved = [msg.split()[3] for r, msg in evs if r == "TransferringLeadership"]
        assert moved and moved[-1] == rolled[-1], evs
        assert evs.index(("TransferringLeadership", next(m for r, m in evs if r == "TransferringLeadership"
                                                         and m.split()[3] == rolled[-1]))) < len(evs) - 1, evs
        assert leader in env.members(NAME)
        assert len(result.calls) > 100 and result.failures == [], result.failures[:5]
        assert result.duplicates == set()
        await env.verify_consistent(NAME)


@HEAVY
async def test_secure_cluster_certificates_chain_to_one_root(tmp_path: Path) -> None:
    async with environment(tmp_path) as env:
        st = await _create_ready(env, security={"enabled": True})
        root_secret = env.api.get_object("v1", "Secret", f"{NAME}-root-ca", env.ns)
        assert root_secret is not None
        root = x509.load_pem_x509_certificate(base64.b64decode(root_secret["data"]["ca.crt"]))
        for m in env.members(NAME):
            secret = env.api.get_object("v1", "Secret", f"{m}-tls", env.ns)
            assert secret is not None
            cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
            cert.verify_directly_issued_by(root)
            assert base64.b64decode(secret["data"]["ca.crt"]) == base64.b64decode(root_secret["data"]["ca.crt"])
        assert all(m.get("certificateExpiry") for m in st["members"])
        # a deleted member certificate is issued again from the same root
        env.delete("Secret", "scm-1-tls")
        await env.wait_for(lambda: env.api.get_object("v1", "Secret", "scm-1-tls", env.ns), 60, "re-issued")
        again = env.api.get_object("v1", "Secret", "scm-1-tls", env.ns)
        assert again is not None
        x509.load_pem_x509_certificate(base64.b64decode(again["data"]["tls.crt"])).verify_directly_issued_by(root)
        await env.verify_consistent(NAME)
        # scale down: the removed members' certificates are revoked in SCM (not only recorded in status), and a
        # call presenting one is refused by the surviving member
        removed = {m: env.api.get_object("v1", "Secret", f"{m}-tls", env.ns) for m in ("scm-1", "scm-2")}
        env.patch_spec(NAME, {"replicas": 1})
        await env.wait_for(lambda: env.members(NAME) == ["scm-0"] and env.is_ready(NAME, 1), 240, "scaled to 1")
        serials = {}
        for m, secret in removed.items():
            assert secret is not None
            leaf = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
            serials[m] = leaf.serial_number
            assert env.api.get_object("v1", "Secret", f"{m}-tls", env.ns) is None
        assert set(env.status(NAME)["security"]["revokedSerials"]) == {format(s, "x") for s in serials.values()}
        report = await env.revocation_report(NAME, removed["scm-2"])  # type: ignore[arg-type]
        assert {str(s) for s in serials.values()} <= set(report["revokedSerials"]), report
        assert "UNAUTHENTICATED" in report["removedMemberCall"] and "revoked" in report["removedMemberCall"], report
        await env.verify_consistent(NAME)


@HEAVY
async def test_secure_ca_mode_scm_cluster_chains_to_the_primordials_root(tmp_path: Path) -> None:
    """CA mode scm: the primordial SCM is the root CA; the operator enrols its administrator identity through it
    (CSR signed at --init, fetched by public key) and manages the ring over mutual TLS with it."""
    async with environment(tmp_path) as env:
        st = await _create_ready(env, security={"enabled": True, "caMode": "scm"})
        assert env.api.get_object("v1", "Secret", f"{NAME}-root-ca", env.ns) is None  # SCM holds the root
        client = env.api.get_object("v1", "Secret", f"{NAME}-operator-client", env.ns)
        assert client is not None
        root = x509.load_pem_x509_certificate(base64.b64decode(client["data"]["ca.crt"]))
        assert root.issuer == root.subject and st["security"]["rootCAFingerprint"]
        chain = x509.load_pem_x509_certificates(base64.b64decode(client["data"]["tls.crt"]))
        issued = [c for c in chain if c != root]
        for child, parent in zip(issued, [*issued[1:], root], strict=True):
            child.verify_directly_issued_by(parent)
        # SCM names the cluster in what it signs
        assert issued[0].subject.rfc4514_string() == f"O={st['clusterID']},CN=ozone-scm-operator"
        # every member's sub-CA (on its volume, made by --init / --bootstrap) chains to that one root
        sub_cas = {}
        for m in env.members(NAME):
            pvc = env.api.get_object("v1", "PersistentVolumeClaim", f"{m}-data", env.ns)
            assert pvc is not None
            crt = env.kubelet.pvc_dir(pvc) / "metadata" / "scm" / "sub-ca" / "certs" / "certificate.crt"
            member_chain = [c for c in x509.load_pem_x509_certificates(crt.read_bytes()) if c != root]
            for child, parent in zip(member_chain, [*member_chain[1:], root], strict=True):
                child.verify_directly_issued_by(parent)  # the root signs, or the leader's sub-CA (HDDS-8286)
            sub_cas[m] = member_chain[0]
        assert len({c.serial_number for c in sub_cas.values()}) == 3
        await env.verify_consistent(NAME)


@HEAVY
async def test_bad_input_keeps_the_cluster_serving(tmp_path: Path) -> None:
    async with environment(tmp_path) as env:
        await _create_ready(env, membership={"operationTimeout": "20s"})
        # refused by the API server's CEL rules: nothing reaches the operator
        for patch in ({"replicas": 2}, {"storage": {"storageClassName": "other"}}, {"security": {"enabled": True}}):
            try:
                env.patch_spec(NAME, patch)
            except Exception as exc:
                assert "must be 1, 3 or 5" in str(exc) or "is immutable" in str(exc), exc
            else:
                raise AssertionError(f"{patch} was accepted")
        # an image that never becomes ready: the roll stops at the first member, the others keep serving
        env.patch_spec(NAME, {"image": "registry.invalid/ozone-scm:broken"})

        def stuck() -> bool:
            deg = env.conditions(NAME).get("Degraded") or {}
            return deg.get("reason") == "OperationStuck"

        await env.wait_for(stuck, 180, "OperationStuck")
        msg = env.conditions(NAME)["Degraded"]["message"]
        assert "did not become ready" in msg and ("ErrImagePull" in msg or "ImagePullBackOff" in msg), msg
        # the Event is posted right after the status patch that carries the condition
        await env.wait_for(lambda: any(t == "Warning" and r == "OperationStuck" for t, r, _ in env.events(NAME)),
                           30, "an OperationStuck Warning Event")
        st = env.status(NAME)
        assert st.get("leader") and sum(1 for m in st["members"] if m.get("ready")) == 2
        assert len(env.pvcs(NAME)) == 3  # nothing deleted
        # reverting rolls the stuck member back
        env.patch_spec(NAME, {"image": "ozone-scm:0.1.0"})
        await env.wait_ready(NAME, timeout=240)
        await env.verify_consistent(NAME)

        # a member whose volume now holds another cluster's VERSION: its Pod cannot bootstrap; the ring serves on,
        # the member is reported, and neither its volume nor anything else is deleted
        victim = next(m for m in env.members(NAME) if m != env.status(NAME)["leader"])
        pvc = env.pvcs(NAME)[f"{victim}-data"]
        version = env.kubelet.pvc_dir(pvc) / "metadata" / "scm" / "current" / "VERSION"
        text = version.read_text()
        cid = env.status(NAME)["clusterID"]
        version.write_text(text.replace(cid, "CID-00000000-0000-4000-8000-000000000000"))
        env.delete("Pod", victim)

        def reported() -> bool:
            deg = env.conditions(NAME).get("Degraded") or {}
            return deg.get("status") == "True" and victim in deg.get("message", "")

        await env.wait_for(reported, 180, f"{victim} reported")
        await env.wait_for(lambda: victim in env.pods(NAME), 60, f"{victim} recreated")
        st = env.status(NAME)
        assert st.get("leader") and sum(1 for m in st["members"] if m.get("ready")) == 2
        assert version.exists() and "CID-00000000" in version.read_text()  # nothing deleted or overwritten
        assert f"{victim}-data" in env.pvcs(NAME) and env.members(NAME).count(victim) == 1


# ---- issue 22, items 8-10: adversarial scenarios ----


def _rolled(env: Env, member: str, image: str) -> bool:
    pod = env.pods(NAME).get(member)
    if pod is None:
        return False
    return bool(pod["spec"]["containers"][0]["image"] == image and not pod["metadata"].get("deletionTimestamp"))


def _diagnose(env: Env) -> str:
    """What a failed check needs: every Pod's image and revision, the status, the recent Events."""
    pods = {n: (p["spec"]["containers"][0]["image"], (p["metadata"].get("annotations") or {}).get("ozone-scm.io/revision"),
                bool(p["metadata"].get("deletionTimestamp"))) for n, p in env.pods(NAME).items()}
    st = {k: v for k, v in env.status(NAME).items() if k != "appliedSpec"}
    return f"pods {pods}; status {st}; events {env.events(NAME)[-25:]}"


async def _stop_before_restarting(env: Env, member: str) -> None:
    """Restart the operator armed to exit right after recording the roll's restart of ``member`` (its intent is in
    status), before deleting its Pod: the moment "just before the next roll step"."""
    await env.stop_operator()
    await env.start_operator(crash_before=(planner.DeletePod.kind, member))


def _events_after(env: Env, n: int) -> list[tuple[str, str]]:
    return [(r, msg) for _, r, msg in env.events(NAME)[n:]]


@HEAVY
async def test_roll_with_the_primordial_lost_replaces_it_before_restarting_another_member(tmp_path: Path) -> None:
    """Item 8: a roll is about to restart scm-2 when the primordial member's volume and Pod are deleted. The operator
    must not restart scm-2 while the lost member is still a voter (that leaves no quorum): it replaces it first,
    then finishes the roll; allocations never fail and never pause for a second."""
    image = "ozone-scm:0.2.0"
    async with environment(tmp_path) as env:
        await _create_ready(env)
        if await env.leader(NAME) != "scm-1":
            await env.transfer_leadership(NAME, "scm-1")  # the primordial is a follower: losing it keeps a leader
        out = env.start_workload(NAME)
        await env.workload_ready(out)
        await _stop_before_restarting(env, "scm-2")
        env.patch_spec(NAME, {"image": image})
        assert await env.operator_exited(180) == 86, env.operator_output()[-2000:]
        op = env.status(NAME)["currentOperation"]
        assert op["type"] == "RollMember" and op["member"] == "scm-2" and op["step"] == "Restart", op
        scm2 = env.pods(NAME)["scm-2"]["metadata"]["uid"]

        env.delete("PersistentVolumeClaim", "scm-0-data")
        env.delete("Pod", "scm-0")
        await env.wait_for(lambda: "scm-0" not in env.pods(NAME), 60, "scm-0's Pod gone")
        n = len(env.events(NAME))
        await env.start_operator()
        await env.wait_for(lambda: "scm-3" in env.members(NAME), 180, "the replacement scm-3")
        await env.wait_ready(NAME, timeout=300)
        result = await env.stop_workload(out, timeout=180)  # the machine may be loaded: done, not fast
        print(f"item 8: {len(result.calls)} calls, {len(result.failures)} failed, longest gap "
              f"{result.longest_gap:.3f}s")
        assert len(result.calls) > 100 and result.failures == [], result.failures[:5]
        assert result.longest_gap < 1.0, result.longest_gap
        assert result.duplicates == set()

        evs = _events_after(env, n)
        decommissioned = next(i for i, (r, msg) in enumerate(evs) if r == "DecommissioningMember" and "scm-0" in msg)
        restarts = [i for i, (r, msg) in enumerate(evs) if r == "RollingMember" and msg.split()[1] == "scm-2"]
        assert restarts and min(restarts) > decommissioned, evs  # scm-2 kept running while scm-0 was a voter
        assert env.pods(NAME)["scm-2"]["metadata"]["uid"] != scm2  # and was rolled afterwards
        assert any(r == "WaitingForQuorum" and "restarting scm-2" in msg and "scm-0" in msg for r, msg in evs), evs
        assert env.members(NAME) == ["scm-1", "scm-2", "scm-3"]
        assert all(_rolled(env, m, image) for m in env.members(NAME)), _diagnose(env)
        await env.verify_consistent(NAME)


@HEAVY
async def test_a_member_frozen_just_before_the_next_roll_step_holds_the_roll(tmp_path: Path) -> None:
    """Item 9: a follower already rolled is frozen (SIGSTOP) just before the roll restarts the other follower. Its Pod
    still reads ready and its lag is small, but it no longer answers the leader: the operator must not restart the
    other follower (no quorum would remain), must say why, and must go on once the frozen member answers again."""
    image = "ozone-scm:0.2.0"
    async with environment(tmp_path) as env:
        await _create_ready(env)
        leader = await env.leader(NAME)
        a, b = [m for m in env.members(NAME) if m != leader]
        out = env.start_workload(NAME)
        await env.workload_ready(out)
        await _stop_before_restarting(env, b)
        env.patch_spec(NAME, {"image": image})
        assert await env.operator_exited(180) == 86, env.operator_output()[-2000:]
        if not _rolled(env, a, image):  # b came first: let it be rolled, stop before a instead
            a, b = b, a
            await env.start_operator(crash_before=(planner.DeletePod.kind, b))
            assert await env.operator_exited(180) == 86, env.operator_output()[-2000:]
        assert _rolled(env, a, image) and not _rolled(env, b, image)
        assert env.status(NAME)["currentOperation"]["member"] == b
        pending = env.pods(NAME)[b]["metadata"]["uid"]

        await env.freeze(a)
        try:
            # "just before": the leader has seen it silent for an election timeout (the bound the check uses), well
            # before its Pod's readiness probe notices (seconds)
            deadline = time.monotonic() + 30
            while not await env.silent_to_the_leader(NAME, a):
                assert time.monotonic() < deadline, f"the leader never reported {a} silent"
            print(f"item 9: {a} frozen; its Pod ready when the operator starts: "
                  f"{any(c['type'] == 'Ready' and c['status'] == 'True' for c in env.pods(NAME)[a]['status']['conditions'])}")
            await env.start_operator()

            def holding() -> bool:
                deg = env.conditions(NAME).get("Degraded") or {}
                st = env.status(NAME)
                frozen = next(m for m in st["members"] if m["name"] == a)
                return (deg.get("reason") == "WaitingForQuorum" and f"{a} has not answered the leader" in
                        deg.get("message", "") and frozen.get("ready") is False)

            await env.wait_for(holding, 60, f"the roll held while {a} is frozen")
            pod = env.pods(NAME)[b]
            assert pod["metadata"]["uid"] == pending and not pod["metadata"].get("deletionTimestamp")
            assert env.pods(NAME)[leader]["metadata"].get("deletionTimestamp") is None
        finally:
            await env.thaw(a)
        await env.wait_ready(NAME, timeout=300)
        result = await env.stop_workload(out, timeout=180)  # the machine may be loaded: done, not fast
        print(f"item 9: {len(result.calls)} calls, {len(result.failures)} failed, longest gap "
              f"{result.longest_gap:.3f}s")
        assert all(_rolled(env, m, image) for m in env.members(NAME)), _diagnose(env)
        assert len(result.calls) > 100 and result.failures == [], result.failures[:5]
        assert result.longest_gap < 1.0, result.longest_gap
        assert result.duplicates == set()
        await env.verify_consistent(NAME)


# what a cluster owns (besides its member Pods and volumes), each with the cluster's label
_OWNED_KINDS = (("v1", "ConfigMap"), ("v1", "Service"), ("policy/v1", "PodDisruptionBudget"))


def _controllers(env: Env) -> dict[str, str | None]:
    """``kind name`` -> the uid of its controller owner (None: owned by nothing), for the cluster's Pods, volumes,
    ConfigMap, Services and PDB."""
    objs = [("Pod", p) for p in env.pods(NAME).values()] + [("PersistentVolumeClaim", p)
                                                               for p in env.pvcs(NAME).values()]
    objs += [(kind, o) for api, kind in _OWNED_KINDS for o in env.api.list_objects(api, kind, env.ns)
             if (o["metadata"].get("labels") or {}).get("ozone-scm.io/cluster") == NAME]
    return {f"{kind} {o['metadata']['name']}": next(
        (r.get("uid") for r in o["metadata"].get("ownerReferences") or () if r.get("controller")), None)
        for kind, o in objs}


def _not_owned(env: Env, uid: str) -> list[str]:
    return sorted(name for name, owner in _controllers(env).items() if owner != uid)


async def _orphan(env: Env) -> None:
    """``kubectl delete oscm --cascade=orphan``: the resource goes, what it owned stays, owned by nothing."""
    env.delete_cluster(NAME, "Orphan")
    await env.wait_for(lambda: env.api.get_object(API, "OzoneSCMCluster", NAME, env.ns) is None, 60, "deleted")
    await env.wait_for(lambda: not any(_controllers(env).values()), 60, "orphans")


async def _open_gates(env: Env, gate: Path, first: int) -> None:
    """Let every gated step from the ``first``-th on through, as the operator reaches it."""
    n = first
    while True:
        await env.gate_reached(n, timeout=600)
        env.open_gate(gate)
        n += 1


async def _roll_behind_gates(env: Env, gate: Path, image: str) -> tuple[str, Path]:
    """A ready 3-member ring under allocation load, the operator restarted with a gate after the plan's check of
    every Pod deletion, and the image changed: returns the leader and the workload's output directory."""
    await _create_ready(env)
    leader = await env.leader(NAME)
    out = env.start_workload(NAME)
    await env.workload_ready(out)
    await env.stop_operator()
    await env.start_operator(gate_before=(planner.DeletePod.kind, "*", gate))
    env.patch_spec(NAME, {"image": image})
    return leader, out


async def _finish_gated_roll(env: Env, gate: Path, next_gate: int, out: Path, image: str,
                             what: str) -> WorkloadResult:
    """Open every further gate until the roll is done, then check the workload: every member rolled, more than 100
    calls and none failed, no duplicate block ID, the ring consistent. Returns the workload's result."""
    opener = asyncio.create_task(_open_gates(env, gate, next_gate))
    try:
        await env.wait_ready(NAME, timeout=300)
    finally:
        opener.cancel()
    result = await env.stop_workload(out, timeout=180)  # the machine may be loaded: done, not fast
    print(f"issue 29 item 4, {what}: {len(result.calls)} calls, {len(result.failures)} failed, longest gap "
          f"{result.longest_gap:.3f}s")
    assert all(_rolled(env, m, image) for m in env.members(NAME)), _diagnose(env)
    assert len(result.calls) > 100 and result.failures == [], result.failures[:5]
    assert result.duplicates == set()
    await env.verify_consistent(NAME)
    return result


def _held(env: Env, since: int, step: str, why: str) -> bool:
    return any(r == "WaitingForQuorum" and f"DeletePod {step} held: " in msg and why in msg
               for r, msg in _events_after(env, since))


@HEAVY
async def test_a_follower_frozen_after_the_check_at_the_start_of_a_roll_costs_no_call(tmp_path: Path) -> None:
    """Issue 29 item 4: the plan allows the roll's first restart (every member live), then the other follower is
    frozen (SIGSTOP) before the step. The re-check right before the delete reads the leader's view again and finds
    the frozen follower has not answered since: the restart is held, the leader keeps its quorum (no failed call, no
    gap over 1 s), and the roll finishes once the follower answers again."""
    image = "ozone-scm:0.2.0"
    gate = tmp_path / "gate"
    async with environment(tmp_path) as env:
        leader, out = await _roll_behind_gates(env, gate, image)
        first = await env.gate_reached(1)
        assert first != leader, _diagnose(env)
        other = next(m for m in env.members(NAME) if m not in (leader, first))
        pending = env.pods(NAME)[first]["metadata"]["uid"]
        n = len(env.events(NAME))
        await env.freeze(other)
        try:
            env.open_gate(gate)
            await env.wait_for(lambda: _held(env, n, first, f"{other} has not answered the leader since the check"),
                               60, f"the restart of {first} held while {other} is frozen")
            pod = env.pods(NAME)[first]
            assert pod["metadata"]["uid"] == pending and not pod["metadata"].get("deletionTimestamp"), _diagnose(env)
        finally:
            await env.thaw(other)
        result = await _finish_gated_roll(env, gate, 2, out, image,
                                          f"follower {other} frozen after the check of {first}'s restart")
        assert result.longest_gap < 1.0, result.longest_gap


@HEAVY
async def test_a_leader_frozen_after_the_first_member_rolled_gets_no_restart_from_the_operator(tmp_path: Path) -> None:
    """Issue 29 item 4: after the first follower rolled, the plan allows restarting the second; the leader is frozen
    before the step. The re-check's fresh read goes to the leader, which answers nobody: the restart is held, so the
    two followers keep a quorum and elect a new leader (the frozen leader costs that election, not more)."""
    image = "ozone-scm:0.2.0"
    gate = tmp_path / "gate"
    async with environment(tmp_path) as env:
        leader, out = await _roll_behind_gates(env, gate, image)
        first = await env.gate_reached(1)
        env.open_gate(gate)
        second = await env.gate_reached(2)  # first rolled and caught up again: the next restart is checked
        assert _rolled(env, first, image) and leader not in (first, second) and first != second, _diagnose(env)
        pending = env.pods(NAME)[second]["metadata"]["uid"]
        n = len(env.events(NAME))
        await env.freeze(leader)
        try:
            env.open_gate(gate)
            await env.wait_for(lambda: _held(env, n, second, f"the leader {leader} did not answer"), 60,
                               f"the restart of {second} held while the leader {leader} is frozen")
            pod = env.pods(NAME)[second]
            assert pod["metadata"]["uid"] == pending and not pod["metadata"].get("deletionTimestamp"), _diagnose(env)
            # the two followers elect a leader among themselves; the operator's status follows it
            await env.wait_for(lambda: env.status(NAME).get("leader") in (first, second), 60, "a new leader")
        finally:
            await env.thaw(leader)
        await _finish_gated_roll(env, gate, 3, out, image, f"leader {leader} frozen after the check of {second}'s restart")


@HEAVY
async def test_a_recreated_resource_adopts_and_owns_the_orphaned_ring(tmp_path: Path) -> None:
    """Item 10: ``kubectl delete --cascade=orphan``, the resource created again: Ready only once it owns every Pod,
    volume, ConfigMap, Service and PDB of the ring (issue 29 item 5: it was Ready about 70 ms before the last Pod was
    adopted, and a delete in that window left the Pod behind). Then again with one volume swapped for another
    cluster's: the ring is adopted (same cluster ID and identities, nothing restarted), owned (a later delete removes
    it), the Event says it was adopted, and the foreign volume is reported at once and never owned or deleted."""
    async with environment(tmp_path) as env:
        st = await _create_ready(env)
        cid = st["clusterID"]
        ids = {m["name"]: m["scmId"] for m in st["members"]}

        await _orphan(env)
        started, n = time.monotonic(), len(env.events(NAME))
        await env.create(NAME, {"replicas": 3, "storage": {"reclaimPolicy": "Delete"}})
        uid = env.cluster(NAME)["metadata"]["uid"]
        left_at_ready: list[list[str]] = []

        def ready() -> bool:
            if (env.conditions(NAME).get("Ready") or {}).get("status") != "True":
                return False
            left_at_ready.append(_not_owned(env, uid))
            return True

        await env.wait_for(ready, 120, "the re-created resource Ready", poll=0.05)
        took = time.monotonic() - started
        assert left_at_ready == [[]], left_at_ready
        st = env.status(NAME)
        assert st["clusterID"] == cid and {m["name"]: m["scmId"] for m in st["members"]} == ids
        # the exact order, whatever the polling saw: every object's adoption step (AdoptingPod/AdoptingVolume, or
        # Apply<Kind> with the owner reference) has its Event before the first ClusterReady (each is posted before
        # its step acts, and Ready is decided in a later pass, from what that pass observed)
        await env.wait_for(lambda: any(r == "ClusterReady" for r, _ in _events_after(env, n)), 30,
                           "the ClusterReady Event (posted just after the status that says Ready)")
        reasons = _events_after(env, n)
        ready_at = next(i for i, (r, _) in enumerate(reasons) if r == "ClusterReady")
        # "adopting Pod scm-0 (owned by nothing)", "updating ConfigMap scm-config": the object is words 2-3
        adopted = {" ".join(m.split()[1:3]) for r, m in reasons[:ready_at] if r.startswith(("Adopting", "Apply"))}
        assert adopted == set(_controllers(env)) and len(adopted) == 10, reasons  # 3 Pods, 3 volumes, CM, 2 Svc, PDB
        assert not any(r.startswith("Adopting") for r, _ in reasons[ready_at:]), reasons
        print(f"issue 29 item 5: Ready {took:.1f}s after the resource was created, after {len(adopted)} objects were "
              "adopted")

        st = env.status(NAME)
        old_uid = uid
        victim = next(m for m in env.members(NAME) if m not in (st["leader"], st["primordialMember"]))
        await _orphan(env)
        assert set(env.pods(NAME)) == set(ids) and len(env.pvcs(NAME)) == 3

        version = env.kubelet.pvc_dir(env.pvcs(NAME)[f"{victim}-data"]) / "metadata" / "scm" / "current" / "VERSION"
        version.write_text(version.read_text().replace(cid, "CID-00000000-0000-4000-8000-000000000000"))
        env.delete("Pod", victim)
        await env.wait_for(lambda: victim not in env.pods(NAME), 60, f"{victim}'s Pod gone")
        uids = {n: p["metadata"]["uid"] for n, p in env.pods(NAME).items()}

        started, n = time.monotonic(), len(env.events(NAME))  # the old resource's Events carry the same name
        # reclaimPolicy Delete: the adopted volumes are owned too (under Retain, the default, only the Pods are)
        await env.create(NAME, {"replicas": 3, "storage": {"reclaimPolicy": "Delete"}})
        new_uid = env.cluster(NAME)["metadata"]["uid"]
        assert new_uid != old_uid

        def foreign() -> bool:
            deg = env.conditions(NAME).get("Degraded") or {}
            return deg.get("reason") == "ForeignVolume" and f"member {victim} cannot start" in deg.get("message", "")

        await env.wait_for(foreign, 120, "ForeignVolume")
        print(f"item 10: ForeignVolume reported {time.monotonic() - started:.1f}s after the resource was created")
        msg = env.conditions(NAME)["Degraded"]["message"]
        assert "holds cluster CID-00000000-0000-4000-8000-000000000000" in msg and f"{victim}-data is kept" in msg

        def owned() -> bool:
            return all((p["metadata"].get("ownerReferences") or [{}])[0].get("uid") == new_uid
                       for n, p in list(env.pods(NAME).items()) + list(env.pvcs(NAME).items())
                       if n not in (f"{victim}-data",))

        await env.wait_for(owned, 60, "adopted Pods and volumes owned by the new resource")
        st = env.status(NAME)
        assert st["clusterID"] == cid and {m["name"]: m["scmId"] for m in st["members"]} == ids
        assert st.get("leader") and sum(1 for m in st["members"] if m.get("ready")) == 2
        assert {n: env.pods(NAME)[n]["metadata"]["uid"] for n in uids} == uids  # nothing restarted
        assert not env.pvcs(NAME)[f"{victim}-data"]["metadata"].get("ownerReferences")  # foreign: never owned
        init = env.conditions(NAME)["Initialized"]
        assert init["reason"] == "ClusterAdopted" and f"adopted the existing ring of cluster {cid}" in init["message"]
        reasons = _events_after(env, n)
        assert any(r == "ClusterAdopted" and cid in m for r, m in reasons), reasons
        assert not any("primordial SCM created" in m for _, m in reasons), reasons
        assert "CID-00000000" in version.read_text()  # nothing overwritten

        # a later delete cleans up what was adopted; the foreign volume, never owned, stays
        env.delete_cluster(NAME)
        await env.wait_for(lambda: not env.pods(NAME) and set(env.pvcs(NAME)) == {f"{victim}-data"}, 180,
                           "the adopted ring garbage-collected with the resource")


@HEAVY
async def test_deleting_a_retained_cluster_keeps_its_volumes_and_a_new_resource_adopts_them(tmp_path: Path) -> None:
    """Item 4: under reclaimPolicy Retain (the default) ``kubectl delete oscm`` keeps the members' volumes, labelled
    with the cluster ID; a new resource naming that cluster ID adopts them (same cluster ID and SCM identities, no
    scm --init, the allocations made before still there); one naming another cluster ID adopts nothing."""
    async with environment(tmp_path) as env:
        st = await _create_ready(env)
        cid = st["clusterID"]
        ids = {m["name"]: m["scmId"] for m in st["members"]}
        await env.wait_for(lambda: all((p["metadata"].get("labels") or {}).get("ozone-scm.io/cluster-id") == cid
                                       for p in env.pvcs(NAME).values()), 60, "volumes labelled with the cluster ID")
        assert all(not p["metadata"].get("ownerReferences") for p in env.pvcs(NAME).values())
        before = await env.scm_check(NAME)
        env.delete_cluster(NAME)
        await env.wait_for(lambda: env.api.get_object(API, "OzoneSCMCluster", NAME, env.ns) is None
                           and not env.pods(NAME), 120, "the resource and its Pods gone")
        assert sorted(env.pvcs(NAME)) == sorted(f"{m}-data" for m in ids)  # the data is kept

        # another cluster ID: nothing adopted, started or deleted
        await env.create(NAME, {"replicas": 3, "storage": {"adoptClusterID": "CID-00000000-0000-4000-8000-000000000000"}})

        def foreign() -> bool:
            deg = env.conditions(NAME).get("Degraded") or {}
            return deg.get("reason") == "ForeignVolume" and "adoptClusterID" in deg.get("message", "")

        await env.wait_for(foreign, 60, "ForeignVolume")
        assert not env.pods(NAME) and len(env.pvcs(NAME)) == 3
        env.delete_cluster(NAME)
        await env.wait_for(lambda: env.api.get_object(API, "OzoneSCMCluster", NAME, env.ns) is None, 60, "deleted")

        await env.create(NAME, {"replicas": 3, "storage": {"adoptClusterID": cid}})
        await env.wait_ready(NAME, timeout=240)
        st = env.status(NAME)
        assert st["clusterID"] == cid and {m["name"]: m["scmId"] for m in st["members"]} == ids
        assert env.conditions(NAME)["Initialized"]["reason"] == "ClusterAdopted"
        assert all(p["metadata"]["annotations"]["ozone-scm.io/init-mode"] == "bootstrap"
                   for p in env.pods(NAME).values())
        after = await env.verify_consistent(NAME)
        assert after["commitIndex"] >= before["commitIndex"]  # the Raft log was kept, not started over


@NEEDS_CONTROLLERS
async def test_scheduled_audit_runs_from_the_cronjob_and_reports_to_status(tmp_path: Path) -> None:
    """The scheduled Spark audit end to end with Kubernetes' own CronJob and Job controllers: the operator's
    CronJob (every minute once unsuspended) makes a Job, the Job a Pod, the kubelet runs it from the audit image
    (export from every SCM, then ``audit run`` on a local Spark), the Job completes, and the operator copies the
    run's summary (the audit container's termination message) into ``status.audit``; the report is on the report
    volume."""
    async with environment(tmp_path) as env:
        # suspended until the simulated datanodes have made containers: an audit of an empty ring proves little
        await env.create(NAME, {"replicas": 3, "audit": {"enabled": True, "schedule": "* * * * *", "suspend": True}})
        dn = scm_ring.datanode_pod(NAME, env.ns, scm_ring.member_names(NAME, 3), DEFAULT_IMAGE)
        dn["spec"]["containers"][0]["command"] += ["--containers-per-node", "2"]
        env.api.put_object(dn)
        await env.wait_ready(NAME, timeout=300)
        await env.wait_for(lambda: env.api.get_object("batch/v1", "CronJob", naming.audit_cronjob_name(NAME), env.ns),
                           60, "the audit CronJob")
        deadline = time.monotonic() + 300
        while not await env.containers(NAME):
            assert time.monotonic() < deadline, "no container allocated by the simulated datanodes within 300s"
            await asyncio.sleep(1)

        env.patch_spec(NAME, {"audit": {"suspend": False}})
        labels = naming.audit_labels(NAME)

        def jobs() -> list[dict[str, Any]]:
            return [j for j in env.api.list_objects("batch/v1", "Job", env.ns)
                    if all((j["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())]

        # the CronJob controller creates the Job at the next minute
        (job,) = await env.wait_for(jobs, 150, "a Job from the audit CronJob")
        job_name = job["metadata"]["name"]
        owner = job["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("CronJob", naming.audit_cronjob_name(NAME)), owner
        env.patch_spec(NAME, {"audit": {"suspend": True}})  # one run is enough; the one started goes on

        def finished() -> dict[str, Any] | None:
            j = env.api.get_object("batch/v1", "Job", job_name, env.ns) or {}
            conds = {c["type"]: c["status"] for c in (j.get("status") or {}).get("conditions") or ()}
            return j if "True" in (conds.get("Complete"), conds.get("Failed")) else None

        done = await env.wait_for(finished, 600, f"Job {job_name} finished (its Job controller's condition)")
        pods = [p for p in env.api.list_objects("v1", "Pod", env.ns)
                if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == job_name]
        assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
        pod = pods[0]
        statuses = {c["name"]: c for c in pod["status"].get("initContainerStatuses", [])
                    + pod["status"].get("containerStatuses", [])}
        logs = {n: env.kubelet.logs(env.ns, pod["metadata"]["name"], n)[-3000:] for n in ("export", "audit")}
        assert (done["status"].get("succeeded") == 1 and pod["status"]["phase"] == "Succeeded"), json.dumps(
            {"job": done["status"], "statuses": statuses, "logs": logs}, indent=1)
        message = statuses["audit"]["state"]["terminated"].get("message")
        assert message, json.dumps({"pod": pod["status"], "logs": logs}, indent=1)
        summary = json.loads(message)
        assert summary["containers"] > 0 and summary["agreesWithSCM"] is True, summary

        # the report is on the report volume, where the next runs find it for their trends
        pvc = env.api.get_object("v1", "PersistentVolumeClaim", naming.audit_pvc_name(NAME), env.ns)
        assert pvc is not None
        reports = env.kubelet.pvc_dir(pvc)
        on_disk = json.loads((reports / "summary.json").read_text())
        assert on_disk["runId"] == summary["runId"] and on_disk["containers"]["total"] == summary["containers"]
        assert summary["runId"] in (reports / "report.html").read_text()

        def recorded() -> dict[str, Any] | None:
            audit = env.status(NAME).get("audit") or {}
            done = audit.get("lastJob") == job_name and audit.get("lastSummary")
            # lastSuccessfulTime: the CronJob controller's own record of the run, copied by the operator
            return audit if done and audit.get("lastSuccessfulTime") else None

        audit = await env.wait_for(recorded, 120, "status.audit of the run")
        assert audit["lastResult"] == "Succeeded" and audit["lastSummary"] == {**summary, "job": job_name}, audit
        # the audit Pod is nobody's member: the ring is still the three members, Ready
        assert env.members(NAME) == ["scm-0", "scm-1", "scm-2"] and env.is_ready(NAME, 3)


# ---- issue 22 item 6: two operator replicas, one active ----

LEASE_API = "coordination.k8s.io/v1"
LEASE_NAME = "ozone-scm-operator"
# shorter than the defaults (15/10/2 s) so the takeover is quick; the same proportions
HA_TIMING = ("--leader-elect-lease-duration", "4", "--leader-elect-renew-deadline", "3",
             "--leader-elect-retry-period", "0.5")


def _lease(env: Env) -> dict[str, Any]:
    lease = env.api.get_object(LEASE_API, "Lease", LEASE_NAME, env.ns)
    return (lease or {}).get("spec") or {}


def _operator_events(env: Env) -> list[tuple[str, str, str]]:
    """(reportingInstance, reason, message) of every occurrence of the operator's Events on the cluster, in the order
    they happened (a repeat counted into a ``series`` once per occurrence)."""
    evs = [e for e in env.api.list_objects("v1", "Event", env.ns)
           if (e.get("involvedObject") or {}).get("name") == NAME
           and e.get("reportingComponent") == REPORTING_CONTROLLER]  # events.k8s.io's reportingController
    return [(e.get("reportingInstance", ""), e.get("reason", ""), e.get("message", "")) for e in occurrences(evs)]


def _init_launches(env: Env) -> list[tuple[str, str]]:
    """(Pod, --init | --bootstrap) for every init container the kubelet fixture started."""
    return [(r.pod, next(a for a in r.argv if a in ("--init", "--bootstrap")))
            for r in env.kubelet.launches if r.namespace == env.ns and r.container in ("init", "bootstrap")]


def _healthz(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
        body: dict[str, Any] = json.loads(resp.read())
        return body


@HEAVY
async def test_two_operators_one_active_and_the_standby_finishes_after_a_sigkill(tmp_path: Path) -> None:
    """Two operator processes share a Lease: only the holder acts (bootstrap of a 3-member ring with both running);
    the active one is SIGKILLed in the middle of a scale-down, between decommissioning scm-2 and deleting its
    volume, and the standby takes the Lease and finishes. No step is taken twice: one ``scm --init``, one
    ``--bootstrap`` per member, one decommission per member, every Event from the replica holding the Lease."""
    async with environment(tmp_path) as env:
        await env.stop_operator()  # the environment's single operator (it releases its Lease)
        args = (*HA_TIMING, "--leader-elect-resource-namespace", env.ns)
        await env.start_operator(identity="operator-a", args=args,
                                 pause_before=(planner.DeletePVC.kind, naming.pvc_name("scm-2")))
        await env.wait_for(lambda: _lease(env).get("holderIdentity") == "operator-a", 30, "operator-a holds the Lease")
        await env.start_operator(identity="operator-b", args=args)
        b_log = env.operator_logs["operator-b"]
        await env.wait_for(lambda: "held by operator-a; operator-b stands by" in b_log.read_text(), 30,
                           "operator-b standing by")
        b_port = env.health_port  # operator-b's: healthy (ready for a rolling update), idle, naming the holder
        health = await env.wait_for(lambda: (h := _healthz(b_port)).get("leaseHolder") == "operator-a" and h, 10,
                                    "operator-b's /healthz naming the holder")
        assert health["operator"] == "standby" and health["status"] == "ok", health

        # with both running, the ring is bootstrapped once
        st = await _create_ready(env)
        cid = st["clusterID"]
        assert sorted(_init_launches(env)) == [("scm-0", "--init"), ("scm-1", "--bootstrap"),
                                               ("scm-2", "--bootstrap")], env.kubelet.launches
        assert {i for i, _, _ in _operator_events(env)} == {"operator-a"}, _operator_events(env)

        # scale-down 3 -> 1: operator-a decommissions scm-2, deletes its Pod, and blocks before deleting its volume
        env.patch_spec(NAME, {"replicas": 1})
        a_log = env.operator_logs["operator-a"]
        await env.wait_for(lambda: "failpoint: pausing before DeletePVC scm-2-data" in a_log.read_text(), 180,
                           "operator-a stopped between decommission and volume deletion")
        op = env.status(NAME)["currentOperation"]
        assert op["type"] == "RemoveMember" and op["member"] == "scm-2", op
        assert "scm-2" not in env.pods(NAME) and "scm-2-data" in env.pvcs(NAME)
        # operator-a keeps renewing while it is stuck: operator-b, seeing the Lease change, waits and does nothing
        renewals: set[str] = set()

        def renewed_for_two_lease_durations() -> bool:
            renewals.add(str(_lease(env).get("renewTime")))
            return len(renewals) > 16  # 0.5 s apart: 8 s, twice the lease duration

        await env.wait_for(renewed_for_two_lease_durations, 60, "operator-a renewing", poll=0.1)
        assert _lease(env)["holderIdentity"] == "operator-a" and "scm-2-data" in env.pvcs(NAME)
        assert {i for i, _, _ in _operator_events(env)} == {"operator-a"}
        transitions = int(_lease(env).get("leaseTransitions") or 0)
        before_kill = len(_operator_events(env))

        # SIGKILL the active operator in the middle of the operation: the standby takes over and finishes it
        await env.kill_operator("operator-a")
        killed = time.monotonic()
        await env.wait_for(lambda: _lease(env).get("holderIdentity") == "operator-b", 30, "operator-b takes the Lease",
                           poll=0.05)
        took = time.monotonic() - killed
        # no earlier than the lease duration after its last renewal, and soon after: 4 s, plus a retry and slack
        assert 4 - 0.5 - 0.6 < took < 4 + 0.6 + 2, f"operator-b took the Lease {took:.1f}s after the SIGKILL"
        assert int(_lease(env)["leaseTransitions"]) == transitions + 1
        await env.wait_ready(NAME, replicas=1, timeout=240)
        st = env.status(NAME)
        assert env.members(NAME) == ["scm-0"] and st["clusterID"] == cid
        assert set(env.pods(NAME)) == {"scm-0"} and set(env.pvcs(NAME)) == {"scm-0-data"}
        await env.verify_consistent(NAME)

        events = _operator_events(env)
        assert {i for i, _, _ in events[before_kill:]} == {"operator-b"}, events[before_kill:]
        assert {i for i, _, _ in events[:before_kill]} == {"operator-a"}
        decommissions = [(i, m.split()[2]) for i, r, m in events if r == "DecommissioningMember"]
        assert decommissions == [("operator-a", "scm-2"), ("operator-b", "scm-1")], decommissions
        # the volume deletion operator-a announced and never did, operator-b did once
        deletions = [(i, m) for i, r, m in events if r == "DeletingVolume" and "scm-2-data" in m]
        assert [i for i, _ in deletions] == ["operator-a", "operator-b"], deletions
        # nothing started again: still one --init and one --bootstrap per member
        assert sorted(_init_launches(env)) == [("scm-0", "--init"), ("scm-1", "--bootstrap"),
                                               ("scm-2", "--bootstrap")], env.kubelet.launches
        assert "failpoint" not in b_log.read_text()


@HEAVY
async def test_the_standby_finishes_a_bootstrap_the_active_operator_was_killed_in(tmp_path: Path) -> None:
    """The active operator is SIGKILLed while the second member of a new ring runs ``scm --bootstrap``; the standby
    takes the Lease and completes the ring without creating any Pod again: one ``--init``, one ``--bootstrap`` per
    member, one Pod (uid) per member."""
    async with environment(tmp_path) as env:
        await env.stop_operator()
        args = (*HA_TIMING, "--leader-elect-resource-namespace", env.ns)
        await env.start_operator(identity="operator-a", args=args)
        await env.wait_for(lambda: _lease(env).get("holderIdentity") == "operator-a", 30, "operator-a holds the Lease")
        await env.start_operator(identity="operator-b", args=args)
        b_log = env.operator_logs["operator-b"]
        await env.wait_for(lambda: "held by operator-a; operator-b stands by" in b_log.read_text(), 30,
                           "operator-b standing by")
        await env.create(NAME, {"replicas": 3})
        await env.wait_for(lambda: ("scm-1", "--bootstrap") in _init_launches(env), 180,
                           "scm-1's scm --bootstrap started", poll=0.05)
        await env.kill_operator("operator-a")
        before_kill = len(_operator_events(env))
        await env.wait_for(lambda: _lease(env).get("holderIdentity") == "operator-b", 30, "operator-b takes the Lease")
        await env.wait_ready(NAME, timeout=240)
        await env.verify_consistent(NAME)
        assert env.members(NAME) == ["scm-0", "scm-1", "scm-2"]
        assert sorted(_init_launches(env)) == [("scm-0", "--init"), ("scm-1", "--bootstrap"),
                                               ("scm-2", "--bootstrap")], env.kubelet.launches
        uids: dict[str, set[str]] = {}
        for r in env.kubelet.launches:
            uids.setdefault(r.pod, set()).add(r.uid)
        assert {p: len(u) for p, u in uids.items() if p.startswith("scm-")} == {"scm-0": 1, "scm-1": 1, "scm-2": 1}
        assert {p: pod["metadata"]["uid"] for p, pod in env.pods(NAME).items()} == {
            p: next(iter(u)) for p, u in uids.items() if p.startswith("scm-")}
        events = _operator_events(env)
        assert {i for i, _, _ in events[:before_kill]} == {"operator-a"}
        assert {i for i, _, _ in events[before_kill:]} == {"operator-b"}, events[before_kill:]


@HEAVY
async def test_backup_runs_as_a_verified_job_into_the_backup_volume_and_deleting_it_deletes_its_data(
        tmp_path: Path) -> None:
    async with environment(tmp_path) as env, _job_controller(env) as jobs:
        st = await _create_ready(env, replicas=1)
        cid = st["clusterID"]
        # no datanode has reported yet: the ring is in safemode, and the backup says so in one line
        env.create_backup("early", NAME)
        early = await env.wait_backup_done("early")
        assert early["phase"] == "Failed" and "safemode" in early["message"] and "\n" not in early["message"]

        out = env.start_workload(NAME)
        await env.workload_ready(out)
        result = await env.stop_workload(out)
        assert result.block_ids and not result.failures

        env.create_backup("b1", NAME)
        b1 = await env.wait_backup_done("b1")
        assert b1["phase"] == "Completed", b1
        assert b1["clusterID"] == cid and b1["index"] > 0 and b1["sizeBytes"] > 0
        assert b1["backupPath"] == "/backups/b1" and b1["startedAt"] <= b1["completedAt"]
        # what the Job wrote verifies offline, at the index the status reports
        data = env.backup_dir(NAME, "b1")
        manifest = verify_backup(data, cid)
        assert (manifest.term, manifest.index) == (b1["term"], b1["index"])
        reasons = [r for _, r, _ in env.events("b1")]
        assert reasons[:1] == ["BackupRunning"] and "BackupStarted" in reasons and reasons[-1] == "BackupCompleted"
        await env.wait_for(lambda: (env.status(NAME).get("backup") or {}).get("lastBackup") == "b1", 30,
                           "status.backup.lastBackup")
        # the backup Job's Pod is as restricted as the members' (the namespace enforces it) and is not a member
        assert set(env.pods(NAME)) == {"scm-0"} and not jobs.refused

        # deleting the object deletes its data first (finalizer), then the object goes
        env.api.call_delete(API, BACKUP_KIND, "b1", env.ns)
        await env.wait_for(lambda: env.backup("b1") is None, 120, "backup b1 deleted")
        assert not data.exists() and env.backup_dir(NAME, "early").parent.exists()
        # the cluster still serves and still names its last backup
        assert (env.status(NAME).get("backup") or {}).get("lastBackup") == "b1"


@HEAVY
async def test_operator_recovers_a_lost_quorum_from_the_named_survivor(tmp_path: Path) -> None:
    recover = "ozone-scm.io/recover-from"
    async with environment(tmp_path) as env:
        st = await _create_ready(env)
        cid = st["clusterID"]
        out = env.start_workload(NAME)
        await env.workload_ready(out)
        result = await env.stop_workload(out)
        assert result.block_ids and not result.failures
        before = await env.containers(NAME)
        assert {c for c, _ in result.block_ids} <= before

        # refused while the ring has its quorum: a condition and an Event, nothing done
        env.annotate(NAME, recover, "scm-0")
        await env.wait_for(lambda: env.conditions(NAME).get("Degraded", {}).get("reason") == "RecoveryRefused", 60,
                           "RecoveryRefused")
        assert "the ring has a leader" in env.conditions(NAME)["Degraded"]["message"]
        assert env.members(NAME) == ["scm-0", "scm-1", "scm-2"] and not env.status(NAME).get("currentOperation")
        # the Event is posted after the status is written: a real API server under load shows it a moment later
        await env.wait_for(lambda: any(r == "RecoveryRefused" for _, r, _ in env.events(NAME)), 30,
                           "the RecoveryRefused Event")
        env.annotate(NAME, recover, None)
        await env.wait_ready(NAME)

        # two of three members lost for good, their volumes with them
        for member in ("scm-1", "scm-2"):
            env.delete("PersistentVolumeClaim", f"{member}-data")
            env.delete("Pod", member)
        await env.wait_for(lambda: not env.status(NAME).get("leader"), 120, "the ring has lost its leader")
        env.annotate(NAME, recover, "scm-0")
        await env.wait_for(lambda: (env.status(NAME).get("currentOperation") or {}).get("type") == "RecoverQuorum",
                           60, "RecoverQuorum started")
        await env.wait_ready(NAME, timeout=360, replicas=3)
        st = env.status(NAME)
        members = env.members(NAME)
        assert "scm-0" in members and len(members) == 3 and not {"scm-1", "scm-2"} & set(members)
        assert st["clusterID"] == cid and st["primordialMember"] == "scm-0"
        assert recover not in (env.cluster(NAME)["metadata"].get("annotations") or {})
        reasons = [r for _, r, _ in env.events(NAME)]
        for step in ("StoppingSurvivor", "RestartingSurvivor", "RecoveryAnnotationRemoved"):
            assert step in reasons, reasons
        # every container committed before the loss is there, on every member alike
        assert before <= await env.containers(NAME)
        await env.verify_consistent(NAME)


@HEAVY
async def test_a_cluster_created_from_a_backup_has_its_containers_and_hands_out_higher_block_ids(
        tmp_path: Path) -> None:
    async with environment(tmp_path) as env, _job_controller(env):
        st = await _create_ready(env, replicas=1)
        cid = st["clusterID"]
        out = env.start_workload(NAME)
        await env.workload_ready(out)
        first = await env.stop_workload(out)
        assert first.block_ids and not first.failures
        backed_up = await env.containers(NAME)
        env.create_backup("b1", NAME)
        b1 = await env.wait_backup_done("b1")
        assert b1["phase"] == "Completed", b1
        # the old ring goes on allocating after the backup: the restored ring must never hand those IDs out again
        out = env.start_workload(NAME, name="workload-after")
        await env.workload_ready(out)
        after = await env.stop_workload(out)
        assert after.block_ids and not after.failures
        old_ids = {local for _, local in first.block_ids + after.block_ids}

        await env.create("restored", {"replicas": 3, "bootstrap": {"fromBackup": "b1"}})
        await env.wait_ready("restored", timeout=300, replicas=3)
        st = env.status("restored")
        assert st["clusterID"] == cid and st["primordialMember"] == "restored-0"
        reasons = [r for _, r, _ in env.events("restored")]
        assert "RestartingRestoredMember" in reasons, reasons
        assert backed_up <= await env.containers("restored")  # every container of the backup is there
        await env.verify_consistent("restored")

        out = env.start_workload("restored", name="workload-restored")
        await env.workload_ready(out)
        new = await env.stop_workload(out)
        assert new.block_ids and not new.failures
        assert min(local for _, local in new.block_ids) > max(old_ids)


@HEAVY
async def test_a_secure_cluster_created_from_a_backup_keeps_the_old_root_ca_and_its_certificates(
        tmp_path: Path) -> None:
    """Issue 23 item 4, CA mode operator: a backup of a secure ring, the ring deleted (Retain keeps its root CA
    Secret), a new cluster from the backup naming that root CA Secret. Refused first with a root of another ring
    (no root CA taken, no Pod); then the new ring restores under the old root: the old ring's administrator certificate is
    accepted by it, every container of the backup is there, and new block IDs are above the old ring's."""
    async with environment(tmp_path) as env, _job_controller(env):
        st = await _create_ready(env, replicas=1, security={"enabled": True})
        cid, old_root = st["clusterID"], st["security"]["rootCAFingerprint"]
        out = env.start_workload(NAME, secure=True)
        await env.workload_ready(out)
        first = await env.stop_workload(out)
        assert first.block_ids and not first.failures, first.failures[:3]
        backed_up = await env.containers(NAME)
        env.create_backup("b1", NAME)
        b1 = await env.wait_backup_done("b1")
        assert b1["phase"] == "Completed", b1
        assert b1["rootCAFingerprint"] == old_root and b1["includesRootKey"] is False
        out = env.start_workload(NAME, name="workload-after", secure=True)
        await env.workload_ready(out)
        after = await env.stop_workload(out)
        assert after.block_ids and not after.failures, after.failures[:3]
        old_ids = {local for _, local in first.block_ids + after.block_ids}
        old_admin = env.api.get_object("v1", "Secret", f"{NAME}-operator-client", env.ns)
        assert old_admin is not None

        env.delete_cluster(NAME)
        await env.wait_for(lambda: env.api.get_object(API, "OzoneSCMCluster", NAME, env.ns) is None
                           and not env.pods(NAME), 120, "the old cluster and its Pods gone")
        assert env.api.get_object("v1", "Secret", f"{NAME}-root-ca", env.ns) is not None  # never owned: kept

        # a root CA of another ring: Degraded with the reason, an Event, and nothing created
        await env.create("alt", {"replicas": 1, "security": {"enabled": True}})
        await env.wait_ready("alt", timeout=240)
        spec = {"replicas": 3, "security": {"enabled": True},
                "bootstrap": {"fromBackup": "b1", "rootCASecret": "alt-root-ca"}}
        # short names: the member's sub-CA CN (scm-sub@<member>.<name>-headless.<namespace>.svc.cluster.local) must
        # fit in 64 characters, and the real control plane's namespaces are longer than the emulator's
        await env.create("new", spec)

        def refused() -> bool:
            deg = env.conditions("new").get("Degraded") or {}
            return deg.get("reason") == "RestoreSource" and f"not the root CA {old_root}" in deg.get("message", "")

        await env.wait_for(refused, 60, "RestoreSource: another root CA")
        await env.wait_for(lambda: any(r == "RestoreSource" for _, r, _ in env.events("new")), 30,
                           "the RestoreSource Event")
        # no root CA taken, no Pod started (the primordial's empty volume may already exist, as for any refusal)
        assert not env.pods("new")
        assert env.api.get_object("v1", "Secret", "new-root-ca", env.ns) is None

        env.patch_spec("new", {"bootstrap": {"rootCASecret": f"{NAME}-root-ca"}})
        await env.wait_ready("new", timeout=360, replicas=3)
        st = env.status("new")
        assert st["clusterID"] == cid and st["security"]["rootCAFingerprint"] == old_root
        reasons = [r for _, r, _ in env.events("new")]
        assert "TakingRootCA" in reasons and "RestartingRestoredMember" in reasons, reasons
        await env.verify_consistent("new")
        # the old ring's administrator certificate (issued under the kept root) works against the new ring
        assert backed_up <= await env.containers("new", client=old_admin)

        out = env.start_workload("new", name="workload-new", secure=True)
        await env.workload_ready(out)
        new = await env.stop_workload(out)
        assert new.block_ids and not new.failures, new.failures[:3]
        assert min(local for _, local in new.block_ids) > max(old_ids)


@HEAVY
async def test_scheduled_backups_keep_the_newest_and_export_the_deadline(tmp_path: Path) -> None:
    async with environment(tmp_path) as env, _job_controller(env):
        await _create_ready(env, replicas=1, backup={"schedule": "* * * * *", "retention": {"keepLast": 1}})
        out = env.start_workload(NAME)  # datanodes: the ring leaves safemode, so backups are taken
        await env.workload_ready(out)
        await env.stop_workload(out)

        seen: dict[str, str] = {}

        def two_done_one_left() -> bool:
            for b in env.api.list_objects(API, BACKUP_KIND, env.ns):
                seen[b["metadata"]["name"]] = (b.get("status") or {}).get("phase") or ""
            left = [b["metadata"]["name"] for b in env.api.list_objects(API, BACKUP_KIND, env.ns)]
            done = [n for n, ph in seen.items() if ph == "Completed"]
            return len(done) >= 2 and len(left) == 1 and left[0] == max(done)

        await env.wait_for(two_done_one_left, 240, "two scheduled backups, the older one deleted")
        names = sorted(n for n, ph in seen.items() if ph == "Completed")
        assert all(n.startswith(f"{NAME}-20") and len(n) == len(NAME) + 13 for n in names), names
        assert not env.backup_dir(NAME, names[0]).exists()  # its data went with it
        assert env.backup_dir(NAME, names[-1]).exists()
        st = await env.wait_for(lambda: (b := env.status(NAME).get("backup") or {}).get("lastBackup") == names[-1]
                                and b, 60, "status.backup.lastBackup")
        assert st["schedule"] == "* * * * *" and st["deadline"] > st["lastBackupTime"]
        metrics = await env.operator_metrics()
        assert f'ozone_scm_operator_backup_deadline_timestamp_seconds{{cluster="{NAME}",namespace="{env.ns}"}}' \
            in metrics
