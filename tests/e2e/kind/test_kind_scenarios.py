"""The operator's scenarios on a real kind cluster, only through kubectl and helm (see README.md in this folder).

Skipped unless selected with ``make e2e-kind``: the project's machines have no Kubernetes cluster.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest
import yaml

from tests.e2e.kind.conftest import IMAGE, OPERATOR_NS, SCENARIO_NS, Kube

pytestmark = [pytest.mark.kind, pytest.mark.timeout(1800)]
NS = SCENARIO_NS  # the namespace the chart is installed to watch
GV = "ozone-scm.io/v1alpha1"

# Table digests of one member, read inside its Pod through the inter-SCM service on localhost.
DIGESTS = textwrap.dedent("""
    import asyncio, json
    from scm_server.client.ha_admin import HAAdminClient
    async def main():
        async with HAAdminClient(["localhost:9895"], rounds=3, timeout=10) as c:
            roles = await c.roles()
            d = await c.table_digests("localhost:9895", min_applied_index=roles.commit_index)
        print(json.dumps({"clusterID": (await HAAdminClient(["localhost:9895"]).scm_info()).clusterId,
                          "tables": {t.table: t.sha256 for t in d.digests}}))
    asyncio.run(main())
""")


def cluster(name: str, replicas: int, **spec: Any) -> str:
    body = {"apiVersion": GV, "kind": "OzoneSCMCluster", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                     "storage": {"size": "1Gi"}, **spec}}
    return yaml.safe_dump(body)


@pytest.fixture(scope="module")
def ns(kube: Kube) -> str:
    kube.kubectl("create", "namespace", NS, check=False)
    return NS


def status(kube: Kube, name: str) -> dict[str, Any]:
    return dict(kube.json("get", "oscm", name, "-n", NS).get("status") or {})


def condition(kube: Kube, name: str, ctype: str) -> str | None:
    for c in status(kube, name).get("conditions") or []:
        if c["type"] == ctype:
            return str(c["status"])
    return None


def wait_ready(kube: Kube, name: str, members: int, timeout: float = 600) -> dict[str, Any]:
    kube.kubectl("wait", f"oscm/{name}", "-n", NS, "--for=condition=Ready", f"--timeout={int(timeout)}s")
    return dict(kube.wait(lambda: (s := status(kube, name)) and s.get("membersReady") == f"{members}/{members}"
                          and s, 120, f"{name}: {members}/{members} members ready"))


def consistent(kube: Kube, name: str) -> None:
    """One cluster ID on every member and identical replicated tables."""
    members = [m["name"] for m in status(kube, name)["members"]]

    def same() -> bool:
        views = [json.loads(kube.kubectl("exec", "-n", NS, m, "-c", "scm", "--", "python", "-c", DIGESTS,
                                         timeout=60).stdout) for m in members]
        return len({v["clusterID"] for v in views}) == 1 and all(v["tables"] == views[0]["tables"] for v in views)

    kube.wait(same, 120, f"{name}: one cluster ID and identical tables on {members}")
    assert condition(kube, name, "ConsistentClusterID") == "True"


def test_crd_and_operator_are_installed(kube: Kube) -> None:
    crd = kube.json("get", "crd", "ozonescmclusters.ozone-scm.io")
    assert any(c["type"] == "Established" and c["status"] == "True" for c in crd["status"]["conditions"])
    kube.kubectl("rollout", "status", "deployment/ozone-scm-operator", "-n", OPERATOR_NS, "--timeout=300s")


def test_invalid_resources_are_refused_by_the_api_server(kube: Kube, ns: str) -> None:
    for replicas in (2, 4):
        result = kube.kubectl("apply", "-f", "-", stdin=cluster("bad", replicas), check=False)
        assert result.returncode != 0 and "replicas must be 1, 3 or 5" in result.stderr


def test_three_members_ready_then_member_loss_and_replacement(kube: Kube, ns: str) -> None:
    kube.kubectl("apply", "-f", "-", stdin=cluster("scm", 3))
    first = wait_ready(kube, "scm", 3)
    assert first["leader"] and first["clusterID"]
    table = kube.kubectl("get", "oscm", "scm", "-n", NS).stdout.splitlines()
    assert table[0].split()[:5] == ["NAME", "READY", "MEMBERS", "LEADER", "PHASE"]
    consistent(kube, "scm")
    changed = kube.kubectl("patch", "oscm", "scm", "-n", NS, "--type=merge", "-p",
                           '{"spec": {"security": {"enabled": true}}}', check=False)
    assert changed.returncode != 0 and "immutable" in changed.stderr

    victim = first["members"][1]["name"]
    kube.kubectl("delete", "pod", victim, "-n", NS, "--grace-period=0", "--force")
    wait_ready(kube, "scm", 3)
    consistent(kube, "scm")

    before = {m["name"]: m["scmId"] for m in status(kube, "scm")["members"]}
    victim = sorted(before)[-1]
    kube.kubectl("delete", "pvc", f"data-{victim}", "-n", NS, "--wait=false")
    kube.kubectl("delete", "pod", victim, "-n", NS)
    after = kube.wait(lambda: (s := status(kube, "scm")) and s.get("membersReady") == "3/3"
                      and set(m["scmId"] for m in s["members"]) != set(before.values()) and s, 900,
                      "the member with the deleted PVC replaced by a new identity")
    assert len(after["members"]) == 3
    consistent(kube, "scm")


def test_scale_up_and_down_one_member_at_a_time(kube: Kube, ns: str) -> None:
    kube.kubectl("patch", "oscm", "scm", "-n", NS, "--type=merge", "-p", '{"spec": {"replicas": 5}}')
    wait_ready(kube, "scm", 5, timeout=900)
    consistent(kube, "scm")
    kube.kubectl("patch", "oscm", "scm", "-n", NS, "--type=merge", "-p", '{"spec": {"replicas": 3}}')
    final = kube.wait(lambda: (s := status(kube, "scm")) and len(s.get("members") or []) == 3
                      and s.get("membersReady") == "3/3" and s, 900, "scaled back to 3")
    assert sum(1 for m in final["members"] if m.get("role") in ("LEADER", "FOLLOWER")) == 3
    consistent(kube, "scm")


def test_rolling_image_change_leader_last(kube: Kube, ns: str) -> None:
    leader = status(kube, "scm")["leader"]
    # The same image under another tag is a new revision: the operator rolls every member.
    kube.kubectl("patch", "oscm", "scm", "-n", NS, "--type=merge", "-p",
                 json.dumps({"spec": {"podMetadata": {"annotations": {"e2e/roll": "1"}}}}))
    rolled = kube.wait(lambda: (s := status(kube, "scm")) and s.get("membersReady") == "3/3"
                       and len({m.get("revision") for m in s["members"]}) == 1
                       and s["members"][0].get("revision") == s.get("revision") and s, 900, "roll finished")
    events = kube.kubectl("get", "events", "-n", NS, "--sort-by=.lastTimestamp", "-o",
                          "custom-columns=REASON:.reason,MESSAGE:.message", "--no-headers").stdout
    restarts = [line for line in events.splitlines() if line.startswith("RollingMember")]
    assert len(restarts) >= 3, restarts  # one member at a time, each restarted once
    assert f"restarting {leader} " in restarts[-1], restarts  # the old leader went last, after a transfer
    assert rolled["leader"] != leader
    consistent(kube, "scm")


def test_operator_killed_in_the_middle_of_bootstrap(kube: Kube, ns: str) -> None:
    kube.kubectl("apply", "-f", "-", stdin=cluster("boot", 3))
    kube.wait(lambda: (status(kube, "boot").get("currentOperation") or {}).get("type"), 300,
              "a bootstrap operation in progress")
    kube.kubectl("delete", "pod", "-n", OPERATOR_NS, "-l", "app.kubernetes.io/name=ozone-scm-operator")
    wait_ready(kube, "boot", 3, timeout=900)
    consistent(kube, "boot")


def test_one_member_cluster(kube: Kube, ns: str) -> None:
    kube.kubectl("apply", "-f", "-", stdin=cluster("solo", 1))
    wait_ready(kube, "solo", 1)
    consistent(kube, "solo")


def test_secure_cluster_certificates_chain_to_one_root(kube: Kube, ns: str) -> None:
    kube.kubectl("apply", "-f", "-", stdin=cluster("sec", 3, security={"enabled": True, "caMode": "operator"}))
    ready = wait_ready(kube, "sec", 3, timeout=900)
    issuers = set()
    for m in ready["members"]:
        issuer = kube.kubectl("exec", "-n", NS, m["name"], "-c", "scm", "--", "python", "-c",
                              "from cryptography import x509; import sys; "
                              "c = x509.load_pem_x509_certificate(open('/var/run/ozone-scm/tls/ca.crt','rb').read()); "
                              "print(c.subject.rfc4514_string())").stdout.strip()
        issuers.add(issuer)
    assert len(issuers) == 1
