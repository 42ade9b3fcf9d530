"""The emulator's RBAC authorizer (``rbac.py``), rule kind by rule kind, against Kubernetes' documented semantics
(kubernetes.io/docs/reference/access-authn-authz/rbac/), then through the emulated API server over HTTP (401 for
an unknown token, 403 ``Status`` bodies worded as the API server words them), then with the chart's own RBAC as
``helm template`` renders it: what the operator does is granted in its namespace and nothing outside it."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.e2e.local import rbac
from tests.e2e.local.apiserver import EmulatedAPIServer, serving
from tests.e2e.local.operator_env import environment
from tests.e2e.local.rbac import Attributes, Policy, User, authorize, request_attributes, rule_allows

ROOT = Path(__file__).resolve().parents[3]
HELM = ROOT / ".tools" / "bin" / "helm"
SA = User.service_account("ozone", "op")


def role(name: str, rules: list[dict[str, Any]], namespace: str | None = None,
         labels: Mapping[str, str] | None = None, aggregation: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {}),
                            **({"labels": dict(labels)} if labels else {})}
    obj = {"apiVersion": rbac.RBAC_API, "kind": "Role" if namespace else "ClusterRole", "metadata": meta,
           "rules": rules}
    if aggregation is not None:
        obj["aggregationRule"] = {"clusterRoleSelectors": aggregation}
    return obj


def binding(name: str, ref_kind: str, ref: str, subjects: list[dict[str, Any]],
            namespace: str | None = None) -> dict[str, Any]:
    return {"apiVersion": rbac.RBAC_API, "kind": "RoleBinding" if namespace else "ClusterRoleBinding",
            "metadata": {"name": name, **({"namespace": namespace} if namespace else {})},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": ref_kind, "name": ref},
            "subjects": subjects}


SA_SUBJECT = {"kind": "ServiceAccount", "name": "op", "namespace": "ozone"}


def res(verb: str, resource: str, *, group: str = "", sub: str = "", ns: str = "ozone", name: str = "") -> Attributes:
    return Attributes(verb=verb, api_group=group, resource=resource, subresource=sub, namespace=ns, name=name)


# ---- one rule -------------------------------------------------------------------------------------------------------

def test_verbs_match_exactly_or_by_star() -> None:
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch"]}
    assert rule_allows(rule, res("get", "pods"))
    assert rule_allows(rule, res("watch", "pods"))
    assert not rule_allows(rule, res("list", "pods"))
    assert not rule_allows(rule, res("delete", "pods"))
    assert rule_allows({**rule, "verbs": ["*"]}, res("deletecollection", "pods"))


def test_api_groups_core_is_the_empty_string() -> None:
    rule = {"apiGroups": [""], "resources": ["*"], "verbs": ["get"]}
    assert rule_allows(rule, res("get", "pods"))
    assert not rule_allows(rule, res("get", "deployments", group="apps"))
    assert rule_allows({**rule, "apiGroups": ["*"]}, res("get", "deployments", group="apps"))
    assert not rule_allows({**rule, "apiGroups": ["apps"]}, res("get", "pods"))


def test_subresources_need_their_own_entry() -> None:
    pods = {"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}
    assert not rule_allows(pods, res("patch", "pods", sub="status", name="p"))
    assert not rule_allows(pods, res("get", "pods", sub="log", name="p"))
    status = {"apiGroups": ["ozone-scm.io"], "resources": ["ozonescmclusters/status"], "verbs": ["patch"]}
    assert rule_allows(status, res("patch", "ozonescmclusters", group="ozone-scm.io", sub="status", name="c"))
    assert not rule_allows(status, res("patch", "ozonescmclusters", group="ozone-scm.io", name="c"))
    any_status = {"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["patch"]}
    assert rule_allows(any_status, res("patch", "pods", sub="status", name="p"))
    assert not rule_allows(any_status, res("patch", "pods", sub="binding", name="p"))
    # "pods/*" is not a pattern Kubernetes knows: it matches nothing but a subresource literally named "*"
    assert not rule_allows({**pods, "resources": ["pods/*"]}, res("get", "pods", sub="log", name="p"))
    assert rule_allows({**pods, "resources": ["*"]}, res("get", "pods", sub="log", name="p"))


def test_resource_names_limit_named_requests_and_never_grant_list_watch_or_create() -> None:
    rule = {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["*"]}
    assert rule_allows(rule, res("get", "configmaps", name="a"))
    assert rule_allows(rule, res("delete", "configmaps", name="a"))
    assert not rule_allows(rule, res("get", "configmaps", name="b"))
    assert not rule_allows(rule, res("list", "configmaps"))
    assert not rule_allows(rule, res("create", "configmaps"))
    # a watch of one object by field selector names it, so resourceNames can allow it
    one = request_attributes("GET", "/api/v1/namespaces/ozone/configmaps",
                             {"watch": "true", "fieldSelector": "metadata.name=a"})
    assert one.name == "a" and rule_allows(rule, one)


def test_non_resource_urls_exact_and_prefix() -> None:
    rule = {"nonResourceURLs": ["/version", "/apis/*"], "verbs": ["get"]}
    assert rule_allows(rule, Attributes(verb="get", path="/version", resource_request=False))
    assert rule_allows(rule, Attributes(verb="get", path="/apis/apps/v1", resource_request=False))
    assert not rule_allows(rule, Attributes(verb="get", path="/api", resource_request=False))
    assert not rule_allows(rule, Attributes(verb="post", path="/version", resource_request=False))
    # a resource rule never matches a path, nor a path rule a resource
    assert not rule_allows({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                           Attributes(verb="get", path="/version", resource_request=False))
    assert not rule_allows(rule, res("get", "pods"))


# ---- request attributes ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("method", "path", "query", "expected"), [
    ("GET", "/api/v1/namespaces/ozone/pods", {}, ("list", "", "pods", "", "ozone", "")),
    ("GET", "/api/v1/namespaces/ozone/pods", {"watch": "1"}, ("watch", "", "pods", "", "ozone", "")),
    ("GET", "/api/v1/pods", {"watch": "true"}, ("watch", "", "pods", "", "", "")),
    ("GET", "/api/v1/namespaces/ozone/pods/p", {}, ("get", "", "pods", "", "ozone", "p")),
    ("POST", "/api/v1/namespaces/ozone/pods", {}, ("create", "", "pods", "", "ozone", "")),
    ("PUT", "/api/v1/namespaces/ozone/pods/p/status", {}, ("update", "", "pods", "status", "ozone", "p")),
    ("PATCH", "/apis/ozone-scm.io/v1alpha1/namespaces/ozone/ozonescmclusters/c/status", {},
     ("patch", "ozone-scm.io", "ozonescmclusters", "status", "ozone", "c")),
    ("DELETE", "/api/v1/namespaces/ozone/pods/p", {}, ("delete", "", "pods", "", "ozone", "p")),
    ("DELETE", "/api/v1/namespaces/ozone/pods", {}, ("deletecollection", "", "pods", "", "ozone", "")),
    ("POST", "/api/v1/namespaces/ozone/pods/p/eviction", {}, ("create", "", "pods", "eviction", "ozone", "p")),
    ("GET", "/api/v1/namespaces/ozone", {}, ("get", "", "namespaces", "", "ozone", "ozone")),
    ("GET", "/api/v1/namespaces", {}, ("list", "", "namespaces", "", "", "")),
    ("PUT", "/api/v1/namespaces/ozone/finalize", {}, ("update", "", "namespaces", "finalize", "ozone", "ozone")),
    ("GET", "/api/v1/namespaces/ozone/status", {}, ("get", "", "namespaces", "status", "ozone", "ozone")),
    ("GET", "/apis/storage.k8s.io/v1/storageclasses/fast", {}, ("get", "storage.k8s.io", "storageclasses", "", "",
                                                                 "fast")),
])
def test_request_attributes(method: str, path: str, query: dict[str, str], expected: tuple[str, ...]) -> None:
    a = request_attributes(method, path, query)
    assert a.resource_request
    assert (a.verb, a.api_group, a.resource, a.subresource, a.namespace, a.name) == expected


@pytest.mark.parametrize("path", ["/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1", "/version",
                                  "/openapi/v3"])
def test_discovery_is_a_non_resource_request(path: str) -> None:
    a = request_attributes("GET", path, {})
    assert not a.resource_request and a.verb == "get" and a.path == path


# ---- bindings, scope, subjects, aggregation ---------------------------------------------------------------------------

PODS_RULE = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}


def test_a_role_binding_grants_in_its_namespace_only() -> None:
    policy = Policy(roles=[role("r", [PODS_RULE], "ozone")],
                    role_bindings=[binding("b", "Role", "r", [SA_SUBJECT], "ozone")])
    assert authorize(SA, res("list", "pods"), policy).allowed
    assert not authorize(SA, res("list", "pods", ns="other"), policy).allowed
    assert not authorize(SA, res("list", "pods", ns=""), policy).allowed  # every namespace: cluster scope


def test_a_role_binding_to_a_cluster_role_is_still_namespaced() -> None:
    policy = Policy(cluster_roles=[role("cr", [PODS_RULE])],
                    role_bindings=[binding("b", "ClusterRole", "cr", [SA_SUBJECT], "ozone")])
    assert authorize(SA, res("get", "pods", name="p"), policy).allowed
    assert not authorize(SA, res("get", "pods", name="p", ns="other"), policy).allowed


def test_a_role_binding_names_a_role_of_its_own_namespace() -> None:
    policy = Policy(roles=[role("r", [PODS_RULE], "other")],
                    role_bindings=[binding("b", "Role", "r", [SA_SUBJECT], "ozone")])
    assert not authorize(SA, res("list", "pods"), policy).allowed


def test_a_cluster_role_binding_grants_everywhere_and_at_cluster_scope() -> None:
    policy = Policy(cluster_roles=[role("cr", [PODS_RULE, {"apiGroups": ["storage.k8s.io"],
                                                           "resources": ["storageclasses"], "verbs": ["get"]}])],
                    cluster_role_bindings=[binding("b", "ClusterRole", "cr", [SA_SUBJECT])])
    assert authorize(SA, res("list", "pods", ns="any"), policy).allowed
    assert authorize(SA, res("list", "pods", ns=""), policy).allowed
    assert authorize(SA, res("get", "storageclasses", group="storage.k8s.io", ns="", name="x"), policy).allowed


def test_a_role_in_a_namespace_reads_that_namespace_object_only() -> None:
    rule = {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}
    policy = Policy(roles=[role("r", [rule], "ozone")], role_bindings=[binding("b", "Role", "r", [SA_SUBJECT],
                                                                               "ozone")])
    assert authorize(SA, request_attributes("GET", "/api/v1/namespaces/ozone", {}), policy).allowed
    assert not authorize(SA, request_attributes("GET", "/api/v1/namespaces/other", {}), policy).allowed
    assert not authorize(SA, request_attributes("GET", "/api/v1/namespaces", {}), policy).allowed


def test_subjects_users_groups_and_service_accounts() -> None:
    policy = Policy(roles=[role("r", [PODS_RULE], "ozone")], role_bindings=[
        binding("u", "Role", "r", [{"kind": "User", "name": "alice"}], "ozone"),
        binding("g", "Role", "r", [{"kind": "Group", "name": "system:serviceaccounts:ozone"}], "ozone"),
    ])
    assert authorize(User("alice"), res("list", "pods"), policy).allowed
    assert not authorize(User("bob"), res("list", "pods"), policy).allowed
    # every ServiceAccount of namespace ozone is in that group; one of another namespace is not
    assert authorize(User.service_account("ozone", "x"), res("list", "pods"), policy).allowed
    assert not authorize(User.service_account("other", "x"), res("list", "pods"), policy).allowed
    # a ServiceAccount subject without a namespace means the binding's namespace
    only_sa = Policy(roles=policy.roles, role_bindings=[
        binding("s", "Role", "r", [{"kind": "ServiceAccount", "name": "op"}], "ozone")])
    assert authorize(SA, res("list", "pods"), only_sa).allowed
    assert not authorize(User.service_account("other", "op"), res("list", "pods", ns="other"), only_sa).allowed
    assert not authorize(rbac.ANONYMOUS, res("list", "pods"), policy).allowed


def test_aggregated_cluster_roles_hold_the_rules_of_the_roles_they_select() -> None:
    pods = role("pods-reader", [PODS_RULE], labels={"ozone-scm.test/aggregate": "true"})
    events = role("events-writer", [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}],
                  labels={"tier": "b"})
    unlabelled = role("secrets", [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}])
    agg = role("aggregate", [], aggregation=[{"matchLabels": {"ozone-scm.test/aggregate": "true"}},
                                             {"matchExpressions": [{"key": "tier", "operator": "In",
                                                                    "values": ["b"]}]}])
    policy = Policy(cluster_roles=[pods, events, unlabelled, agg],
                    cluster_role_bindings=[binding("b", "ClusterRole", "aggregate", [SA_SUBJECT])])
    assert authorize(SA, res("list", "pods"), policy).allowed
    assert authorize(SA, res("create", "events"), policy).allowed
    assert not authorize(SA, res("get", "secrets", name="s"), policy).allowed
    effective = rbac.aggregate(policy.cluster_roles)
    assert effective["aggregate"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}, PODS_RULE]
    not_in = role("not-in", [], aggregation=[{"matchExpressions": [{"key": "tier", "operator": "NotIn",
                                                                    "values": ["b"]}]}])
    assert PODS_RULE in rbac.aggregate([pods, events, not_in])["not-in"]
    assert events["rules"][0] not in rbac.aggregate([pods, events, not_in])["not-in"]


def test_non_resource_urls_only_through_cluster_role_bindings() -> None:
    rule = {"nonResourceURLs": ["/version"], "verbs": ["get"]}
    version = Attributes(verb="get", path="/version", resource_request=False)
    by_rb = Policy(cluster_roles=[role("cr", [rule])],
                   role_bindings=[binding("b", "ClusterRole", "cr", [SA_SUBJECT], "ozone")])
    assert not authorize(SA, version, by_rb).allowed
    by_crb = Policy(cluster_roles=[role("cr", [rule])],
                    cluster_role_bindings=[binding("b", "ClusterRole", "cr", [SA_SUBJECT])])
    assert authorize(SA, version, by_crb).allowed


def test_the_refusal_reads_as_the_api_servers() -> None:
    decision = authorize(SA, res("list", "secrets", ns="other"), Policy())
    assert not decision.allowed
    assert decision.reason == ('secrets is forbidden: User "system:serviceaccount:ozone:op" cannot list resource '
                               '"secrets" in API group "" in the namespace "other"')
    named = authorize(SA, res("patch", "ozonescmclusters", group="ozone-scm.io", sub="status", name="c"), Policy())
    assert named.reason == ('ozonescmclusters.ozone-scm.io "c" is forbidden: User "system:serviceaccount:ozone:op" '
                            'cannot patch resource "ozonescmclusters/status" in API group "ozone-scm.io" in the '
                            'namespace "ozone"')
    cluster = authorize(SA, res("list", "namespaces", ns=""), Policy())
    assert cluster.reason.endswith('cannot list resource "namespaces" in API group "" at the cluster scope')


# ---- the emulator over HTTP -----------------------------------------------------------------------------------------

async def test_the_emulator_authenticates_and_refuses_with_403_status_bodies() -> None:
    async with serving() as (api, url):
        admin = api.enable_rbac()
        api.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ozone"}})
        api.put_object({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "op", "namespace": "ozone"}})
        api.put_object(role("r", [PODS_RULE], "ozone"))
        api.put_object(binding("b", "Role", "r", [SA_SUBJECT], "ozone"))
        token = api.service_account_token("ozone", "op")
        async with aiohttp.ClientSession() as session:
            async def call(path: str, bearer: str | None, method: str = "GET") -> tuple[int, Any]:
                headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
                async with session.request(method, url + path, headers=headers) as resp:
                    return resp.status, await resp.json()

            assert (await call("/api/v1/namespaces/ozone/pods", token))[0] == 200
            assert (await call("/api", token))[0] == 200  # discovery, for everyone authenticated
            status, body = await call("/api/v1/namespaces/ozone/secrets", token)
            assert status == 403
            assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": 'secrets is forbidden: User "system:serviceaccount:ozone:op" cannot list '
                                       'resource "secrets" in API group "" in the namespace "ozone"',
                            "reason": "Forbidden", "details": {"kind": "secrets"}, "code": 403}
            assert (await call("/api/v1/namespaces/default/pods", token))[0] == 403
            assert (await call("/api/v1/pods", token))[0] == 403
            status, body = await call("/api/v1/namespaces/ozone/pods", "not-a-token")
            assert (status, body["reason"]) == (401, "Unauthorized")
            status, body = await call("/api/v1/namespaces/ozone/pods", None)
            assert status == 403 and 'User "system:anonymous"' in body["message"]
            assert (await call("/api/v1/namespaces/ozone/secrets", admin))[0] == 200  # system:masters
            assert (await call("/version", None))[0] == 200  # public info
        assert len(api.refusals) == 4


# ---- the chart's RBAC -----------------------------------------------------------------------------------------------

def chart_rbac(*values: str) -> Policy:
    assert HELM.exists(), f"{HELM} is missing: run `make k8s-tools`"
    args = [str(HELM), "template", "op", str(ROOT / "charts" / "ozone-scm-operator"), "--namespace", "ozone"]
    for v in values:
        args += ["--set", v]
    docs = [d for d in yaml.safe_load_all(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
            if isinstance(d, dict)]
    return Policy(roles=[d for d in docs if d["kind"] == "Role"],
                  cluster_roles=[d for d in docs if d["kind"] == "ClusterRole"],
                  role_bindings=[d for d in docs if d["kind"] == "RoleBinding"],
                  cluster_role_bindings=[d for d in docs if d["kind"] == "ClusterRoleBinding"])


OPERATOR = User.service_account("ozone", "op-ozone-scm-operator")
# what the operator asks, in the namespace it watches
OPERATOR_REQUESTS = [
    ("GET", "/apis/ozone-scm.io/v1alpha1/namespaces/{ns}/ozonescmclusters", {"watch": "true"}),
    ("PATCH", "/apis/ozone-scm.io/v1alpha1/namespaces/{ns}/ozonescmclusters/c/status", {}),
    ("PATCH", "/apis/ozone-scm.io/v1alpha1/namespaces/{ns}/ozonescmclusters/c", {}),
    ("POST", "/api/v1/namespaces/{ns}/pods", {}),
    ("DELETE", "/api/v1/namespaces/{ns}/pods/scm-0", {}),
    ("GET", "/api/v1/namespaces/{ns}/persistentvolumeclaims", {"watch": "true"}),
    ("POST", "/api/v1/namespaces/{ns}/secrets", {}),
    ("GET", "/api/v1/namespaces/{ns}/secrets", {"watch": "true"}),
    ("PATCH", "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/c", {}),
    ("POST", "/apis/batch/v1/namespaces/{ns}/cronjobs", {}),
    ("GET", "/apis/batch/v1/namespaces/{ns}/jobs", {}),
    ("POST", "/api/v1/namespaces/{ns}/events", {}),
    ("POST", "/apis/events.k8s.io/v1/namespaces/{ns}/events", {}),
    ("PATCH", "/apis/events.k8s.io/v1/namespaces/{ns}/events/c.x7k2p", {}),  # a repeat: its series
    ("GET", "/api/v1/namespaces/{ns}", {}),
    ("GET", "/apis/ozone-scm.io/v1alpha1/namespaces/{ns}/ozonescmbackups", {"watch": "true"}),
    # leader election: its own Lease in the release namespace (the watched one here)
    ("POST", "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", {}),
    ("GET", "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/op-ozone-scm-operator", {}),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/op-ozone-scm-operator", {}),
]


def test_the_chart_in_watch_namespaces_mode_grants_the_operator_its_namespace_only() -> None:
    policy = chart_rbac("watchNamespaces={ozone}")
    for method, path, query in OPERATOR_REQUESTS:
        allowed = authorize(OPERATOR, request_attributes(method, path.format(ns="ozone"), query), policy)
        assert allowed.allowed, allowed.reason
        elsewhere = authorize(OPERATOR, request_attributes(method, path.format(ns="other"), query), policy)
        assert not elsewhere.allowed, f"{method} {path} allowed outside the watched namespace"
    for method, path in (("GET", "/api/v1/secrets"), ("GET", "/api/v1/namespaces"),
                         ("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"),
                         ("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/ozone/roles"),
                         ("PATCH", "/api/v1/namespaces/ozone/pods/scm-0/status"),
                         ("GET", "/apis/coordination.k8s.io/v1/namespaces/ozone/leases/someone-else"),
                         ("GET", "/apis/coordination.k8s.io/v1/namespaces/ozone/leases"),
                         ("DELETE", "/apis/coordination.k8s.io/v1/namespaces/ozone/leases/op-ozone-scm-operator"),
                         ("GET", "/api/v1/nodes")):
        assert not authorize(OPERATOR, request_attributes(method, path, {}), policy).allowed, path


# ---- the operator's environment fails a scenario the chart's RBAC does not cover ---------------------------------------

async def test_the_local_tier_fails_when_the_operator_is_refused(tmp_path: Path) -> None:
    """``rbac.create=false``: the ServiceAccount exists but nothing is bound to it, so the operator's first requests
    are refused (403); the environment must fail the scenario on exit, naming the refusal."""
    with pytest.raises(AssertionError, match="refused or warned about permissions") as caught:
        async with environment(tmp_path, chart_values=("rbac.create=false",)) as env:
            api = env.api
            assert isinstance(api, EmulatedAPIServer)
            await env.wait_for(lambda: any("system:serviceaccount:ozone:" in r for r in api.refusals), 60,
                               "the operator refused")
    assert "is forbidden: User \"system:serviceaccount:ozone:ozone-scm-operator\"" in str(caught.value)


def test_the_chart_grants_secrets_beyond_its_namespace_only_when_asked() -> None:
    """The production default (no values): the release's namespace only; ``clusterWide=true`` is the one mode with
    Secrets in every namespace."""
    default = chart_rbac()
    secrets = "/api/v1/namespaces/{ns}/secrets"
    assert authorize(OPERATOR, request_attributes("GET", secrets.format(ns="ozone"), {"watch": "1"}), default).allowed
    for path in (secrets.format(ns="other"), "/api/v1/secrets"):
        assert not authorize(OPERATOR, request_attributes("GET", path, {"watch": "1"}), default).allowed, path
    wide = chart_rbac("clusterWide=true")
    for path in (secrets.format(ns="other"), "/api/v1/secrets"):
        assert authorize(OPERATOR, request_attributes("GET", path, {"watch": "1"}), wide).allowed, path
