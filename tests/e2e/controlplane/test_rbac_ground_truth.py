"""The emulator's RBAC authorizer (``tests/e2e/local/rbac.py``) asked the same questions as a real kube-apiserver
(``--authorization-mode=Node,RBAC``): the same Roles, ClusterRoles (one aggregated, filled by the real
aggregation controller) and bindings are created on the real server, and every question is put to it as a
``SubjectAccessReview`` and to ``rbac.authorize`` with the objects read back from it. The answers must agree.

The questions cover every rule kind: verbs, API groups, resources and subresources (``pods/status``,
``*/status``), ``resourceNames``, namespaced versus cluster scope, ClusterRoles bound by RoleBindings, aggregation,
User/Group/ServiceAccount subjects and non-resource URLs; plus the chart's own RBAC (``helm template``,
``watchNamespaces``) for what the operator asks.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.controlplane.fixture import ControlPlane, RealAPI, wait_until
from tests.e2e.local import rbac
from tests.e2e.local.rbac import Attributes, User

pytestmark = pytest.mark.control_plane
ROOT = Path(__file__).resolve().parents[3]
HELM = ROOT / ".tools" / "bin" / "helm"
NS, OTHER = "rbac-truth", "rbac-truth-other"
API = rbac.RBAC_API
REF = "rbac.authorization.k8s.io"


def _objects() -> list[dict[str, Any]]:
    def crole(name: str, rules: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"apiVersion": API, "kind": "ClusterRole", "metadata": {"name": name, **extra.pop("meta", {})},
                "rules": rules, **extra}

    def bind(kind: str, name: str, ref_kind: str, ref: str, subjects: list[dict[str, Any]],
             ns: str | None = None) -> dict[str, Any]:
        meta = {"name": name, **({"namespace": ns} if ns else {})}
        return {"apiVersion": API, "kind": kind, "metadata": meta,
                "roleRef": {"apiGroup": REF, "kind": ref_kind, "name": ref}, "subjects": subjects}

    alice = [{"kind": "User", "apiGroup": REF, "name": "rbac-truth-alice"}]
    group = [{"kind": "Group", "apiGroup": REF, "name": "rbac-truth-group"}]
    sa = [{"kind": "ServiceAccount", "name": "worker", "namespace": NS}]
    return [
        {"apiVersion": API, "kind": "Role", "metadata": {"name": "pods", "namespace": NS},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                   {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cm-a"],
                    "verbs": ["get", "update", "list"]},
                   {"apiGroups": ["ozone-scm.io"], "resources": ["ozonescmclusters/status"], "verbs": ["patch"]},
                   {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}]},
        bind("RoleBinding", "alice-pods", "Role", "pods", alice, NS),
        crole("rbac-truth-status", [{"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["get"]}]),
        bind("RoleBinding", "group-status", "ClusterRole", "rbac-truth-status", group, NS),
        crole("rbac-truth-agg-a", [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]}],
              meta={"labels": {"rbac-truth/aggregate": "yes"}}),
        crole("rbac-truth-agg-b", [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}],
              meta={"labels": {"rbac-truth/tier": "b"}}),
        crole("rbac-truth-agg", [], aggregationRule={"clusterRoleSelectors": [
            {"matchLabels": {"rbac-truth/aggregate": "yes"}},
            {"matchExpressions": [{"key": "rbac-truth/tier", "operator": "In", "values": ["b"]}]}]}),
        bind("ClusterRoleBinding", "rbac-truth-sa-agg", "ClusterRole", "rbac-truth-agg", sa),
        crole("rbac-truth-version", [{"nonResourceURLs": ["/rbac-truth/*", "/rbac-truth-exact"], "verbs": ["get"]}]),
        bind("ClusterRoleBinding", "rbac-truth-alice-version", "ClusterRole", "rbac-truth-version", alice),
        bind("RoleBinding", "sa-version", "ClusterRole", "rbac-truth-version", sa, NS),
    ]


def _chart(namespace: str) -> list[dict[str, Any]]:
    assert HELM.exists(), f"{HELM} is missing: run `make k8s-tools`"
    out = subprocess.run([str(HELM), "template", "truth", str(ROOT / "charts" / "ozone-scm-operator"), "--namespace",
                          namespace, "--set", f"watchNamespaces={{{namespace}}}"],
                         capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if isinstance(d, dict)
            and d.get("kind") in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")]


def _res(verb: str, resource: str, ns: str = NS, *, group: str = "", sub: str = "", name: str = "") -> Attributes:
    return Attributes(verb=verb, api_group=group, resource=resource, subresource=sub, namespace=ns, name=name)


ALICE = User("rbac-truth-alice", ("system:authenticated",))
GROUPED = User("rbac-truth-bob", ("rbac-truth-group", "system:authenticated"))
WORKER = User.service_account(NS, "worker")
OPERATOR = User.service_account(NS, "truth-ozone-scm-operator")
QUESTIONS: list[tuple[User, Attributes]] = [
    *[(ALICE, a) for a in (
        _res("get", "pods", name="p"), _res("list", "pods"), _res("watch", "pods"), _res("delete", "pods", name="p"),
        _res("list", "pods", OTHER), _res("list", "pods", ""), _res("get", "pods", sub="status", name="p"),
        _res("get", "pods", sub="log", name="p"), _res("get", "configmaps", name="cm-a"),
        _res("update", "configmaps", name="cm-a"), _res("get", "configmaps", name="cm-b"), _res("list", "configmaps"),
        _res("list", "configmaps", name="cm-a"),
        _res("patch", "ozonescmclusters", group="ozone-scm.io", sub="status", name="c"),
        _res("patch", "ozonescmclusters", group="ozone-scm.io", name="c"),
        _res("get", "namespaces", NS, name=NS), _res("get", "namespaces", OTHER, name=OTHER),
        _res("list", "namespaces", ""), _res("get", "deployments", group="apps", name="d"),
        Attributes(verb="get", path="/rbac-truth/x", resource_request=False),
        Attributes(verb="get", path="/rbac-truth-exact", resource_request=False),
        Attributes(verb="get", path="/rbac-truth-exact/more", resource_request=False),
        Attributes(verb="post", path="/rbac-truth/x", resource_request=False),
        Attributes(verb="get", path="/version", resource_request=False),
        Attributes(verb="get", path="/api", resource_request=False),
    )],
    *[(GROUPED, a) for a in (
        _res("get", "pods", sub="status", name="p"), _res("get", "deployments", group="apps", sub="status", name="d"),
        _res("get", "pods", name="p"), _res("get", "pods", OTHER, sub="status", name="p"),
        _res("update", "pods", sub="status", name="p"),
    )],
    *[(WORKER, a) for a in (
        _res("list", "deployments", group="apps"), _res("list", "deployments", OTHER, group="apps"),
        _res("list", "deployments", "", group="apps"), _res("create", "jobs", group="batch"),
        _res("delete", "jobs", group="batch", name="j"), _res("list", "pods"),
        Attributes(verb="get", path="/rbac-truth/x", resource_request=False),  # via a RoleBinding: never
    )],
    *[(User.service_account(OTHER, "worker"), a) for a in (_res("list", "deployments", group="apps"),)],
    *[(OPERATOR, a) for a in (
        _res("watch", "ozonescmclusters", group="ozone-scm.io"),
        _res("patch", "ozonescmclusters", group="ozone-scm.io", sub="status", name="c"),
        _res("update", "ozonescmclusters", group="ozone-scm.io", sub="finalizers", name="c"),
        _res("create", "pods"), _res("delete", "persistentvolumeclaims", name="v"), _res("watch", "secrets"),
        _res("create", "poddisruptionbudgets", group="policy"), _res("create", "cronjobs", group="batch"),
        _res("list", "jobs", group="batch"), _res("delete", "jobs", group="batch", name="j"),
        _res("create", "events"), _res("create", "events", group="events.k8s.io"),
        _res("get", "namespaces", NS, name=NS), _res("list", "secrets", OTHER), _res("list", "secrets", ""),
        _res("list", "namespaces", ""), _res("patch", "pods", sub="status", name="p"),
        _res("list", "customresourcedefinitions", "", group="apiextensions.k8s.io"),
        _res("get", "storageclasses", "", group="storage.k8s.io", name="s"),
        _res("watch", "ozonescmbackups", group="ozone-scm.io"),
        _res("create", "leases", group="coordination.k8s.io"),
        _res("update", "leases", group="coordination.k8s.io", name="truth-ozone-scm-operator"),
        _res("get", "leases", group="coordination.k8s.io", name="someone-else"),
        _res("list", "leases", group="coordination.k8s.io"),
    )],
]


def _review(admin: RealAPI, user: User, a: Attributes) -> bool:
    spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups)}
    if a.resource_request:
        spec["resourceAttributes"] = {k: v for k, v in {
            "namespace": a.namespace, "verb": a.verb, "group": a.api_group, "resource": a.resource,
            "subresource": a.subresource, "name": a.name}.items() if v}
    else:
        spec["nonResourceAttributes"] = {"path": a.path, "verb": a.verb}
    answer = admin.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                           {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
    return bool(answer["status"].get("allowed"))


def test_rbac_answers_match_the_real_api_server(control_plane: ControlPlane) -> None:
    admin = control_plane.admin()
    for ns in (NS, OTHER):
        admin.create_namespace(ns)
    created = [*_objects(), *_chart(NS)]
    for obj in created:
        admin.put_object(obj)

    def aggregated() -> bool:
        role = admin.get_object(API, "ClusterRole", "rbac-truth-agg") or {}
        return len(role.get("rules") or ()) == 2

    wait_until(aggregated, 60, "the aggregation controller fills rbac-truth-agg")
    # the policy as stored on the real server (its bootstrap policy included), read back
    policy = rbac.Policy(roles=admin.list_objects(API, "Role"), cluster_roles=admin.list_objects(API, "ClusterRole"),
                         role_bindings=admin.list_objects(API, "RoleBinding"),
                         cluster_role_bindings=admin.list_objects(API, "ClusterRoleBinding"))
    disagreements = []
    allowed = 0
    for user, attrs in QUESTIONS:
        real = _review(admin, user, attrs)
        ours = rbac.authorize(user, attrs, policy)
        allowed += real
        if real != ours.allowed:
            disagreements.append(f"{user.name} {attrs}: real {real}, emulator {ours.allowed} ({ours.reason})")
    assert not disagreements, "\n".join(disagreements)
    print(f"\n{len(QUESTIONS)} questions ({allowed} allowed by the real server): the emulator answered every one alike")
    # both kinds of answer were asked
    assert 0 < allowed < len(QUESTIONS), allowed
