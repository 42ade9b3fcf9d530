"""Kubernetes' RBAC authorizer as a pure function, for the emulated API server (``apiserver.py``).

Test support, stdlib only: no I/O, no clock. Given who asks (``User``), what they ask (``Attributes``, derived from
an HTTP request by ``request_attributes`` as the API server's RequestInfo resolver does) and the RBAC objects
stored (Roles, ClusterRoles, RoleBindings, ClusterRoleBindings), ``authorize`` answers allowed or not, with the
reason, following Kubernetes' documented semantics (kubernetes.io/docs/reference/access-authn-authz/rbac/ and the
rule matching of ``k8s.io/component-helpers/auth/rbac/validation``):

- a rule matches when its ``verbs``, ``apiGroups`` and ``resources`` each contain the request's value or ``*``;
  a resource request for a subresource is matched by ``<resource>/<subresource>``, ``*/<subresource>`` or ``*``,
  never by the bare resource; ``resourceNames``, when present, must contain the object's name (so they never grant
  ``list``, ``watch``, ``create`` or ``deletecollection``, which name no object); ``nonResourceURLs`` match a path
  exactly or by a trailing ``*`` prefix and only count in ClusterRoles bound by ClusterRoleBindings;
- a RoleBinding grants its Role's (or ClusterRole's) rules inside the binding's namespace only; a ClusterRoleBinding
  grants its ClusterRole's rules in every namespace and at cluster scope;
- subjects: ``User`` by name, ``Group`` by name, ``ServiceAccount`` as ``system:serviceaccount:<ns>:<name>``
  (a ServiceAccount's groups are ``system:serviceaccounts``, ``system:serviceaccounts:<ns>`` and
  ``system:authenticated``);
- ClusterRole aggregation: a ClusterRole with ``aggregationRule.clusterRoleSelectors`` holds the rules of every
  ClusterRole whose labels match any selector (``matchLabels`` and ``matchExpressions``), as the API server's
  aggregation controller writes them (``aggregate``);
- a request for a Namespace object by name carries that name as its namespace, so a Role in namespace ``n`` that
  grants ``get`` on ``namespaces`` lets one read Namespace ``n`` (and no other);
- there are no deny rules: anything no binding grants is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Obj = Mapping[str, Any]
RBAC_API = "rbac.authorization.k8s.io/v1"
SA_PREFIX = "system:serviceaccount:"


@dataclasses.dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()

    @staticmethod
    def service_account(namespace: str, name: str) -> User:
        return User(f"{SA_PREFIX}{namespace}:{name}",
                    ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"))


ANONYMOUS = User("system:anonymous", ("system:unauthenticated",))


@dataclasses.dataclass(frozen=True)
class Attributes:
    """What a request asks (the API server's ``authorizer.Attributes``)."""

    verb: str
    path: str = ""
    resource_request: bool = True
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    def describe(self, user: User) -> str:
        """The message of the 403, worded as the API server words it."""
        if not self.resource_request:
            return f'forbidden: User "{user.name}" cannot {self.verb} path "{self.path}"'
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        qualified = f"{self.resource}.{self.api_group}" if self.api_group else self.resource
        named = f' "{self.name}"' if self.name else ""
        scope = f'in the namespace "{self.namespace}"' if self.namespace else "at the cluster scope"
        return (f'{qualified}{named} is forbidden: User "{user.name}" cannot {self.verb} resource "{what}" in API '
                f'group "{self.api_group}" {scope}')


@dataclasses.dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str


def request_attributes(method: str, path: str, query: Mapping[str, str]) -> Attributes:
    """The attributes of an HTTP request, as the API server's RequestInfo resolver derives them."""
    parts = [p for p in path.split("/") if p]
    method = method.upper()
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:  # discovery, /version, /openapi, /healthz: non-resource requests
        verb = {"GET": "get", "HEAD": "get", "POST": "post", "PUT": "put", "PATCH": "patch",
                "DELETE": "delete"}.get(method, method.lower())
        return Attributes(verb=verb, path=path, resource_request=False)
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 2:
        namespace = rest[1]  # a Namespace object's own name is its request's namespace too
        if len(rest) >= 3 and rest[2] not in ("status", "finalize"):  # namespaces/<n>/status: the Namespace's
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    watching = query.get("watch") in ("true", "1")
    if method in ("GET", "HEAD"):
        verb = "watch" if watching else ("get" if name else "list")
    elif method == "POST":
        verb = "create"
    elif method == "PUT":
        verb = "update"
    elif method == "PATCH":
        verb = "patch"
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = method.lower()
    if verb in ("list", "watch"):  # a list or watch of one object by field selector names it
        for term in query.get("fieldSelector", "").split(","):
            if term.startswith("metadata.name="):
                name = term.split("=", 1)[1]
    return Attributes(verb=verb, path=path, api_group=group, resource=resource, subresource=subresource,
                      namespace=namespace, name=name)


# ---------------------------------------------------------------------------------------------------------------
# Rules


def _has(values: Iterable[str], wanted: str) -> bool:
    values = list(values)
    return "*" in values or wanted in values


def _resource_matches(rule: Obj, attrs: Attributes) -> bool:
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    for res in rule.get("resources") or ():
        if res == "*" or res == combined:
            return True
        if attrs.subresource and res == f"*/{attrs.subresource}":
            return True
    return False


def _path_matches(rule: Obj, path: str) -> bool:
    for url in rule.get("nonResourceURLs") or ():
        if url == "*" or url == path or (url.endswith("*") and path.startswith(url[:-1])):
            return True
    return False


def rule_allows(rule: Obj, attrs: Attributes) -> bool:
    """One PolicyRule against one request (no scope: the binding decides where the rule applies)."""
    if not _has(rule.get("verbs") or (), attrs.verb):
        return False
    if not attrs.resource_request:
        return _path_matches(rule, attrs.path)
    if not _has(rule.get("apiGroups") or (), attrs.api_group) or not _resource_matches(rule, attrs):
        return False
    names = rule.get("resourceNames") or ()
    return not names or attrs.name in names


def subject_matches(subject: Obj, user: User, binding_namespace: str) -> bool:
    kind = subject.get("kind")
    if kind == "User":
        return bool(subject.get("name") == user.name)
    if kind == "Group":
        return subject.get("name") in user.groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_namespace
        return user.name == f"{SA_PREFIX}{ns}:{subject.get('name')}"
    return False


# ---------------------------------------------------------------------------------------------------------------
# Aggregation


def _selector_matches(selector: Obj, labels: Mapping[str, str]) -> bool:
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr.get("key"), expr.get("operator"), list(expr.get("values") or ())
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def aggregate(cluster_roles: Sequence[Obj]) -> dict[str, list[Obj]]:
    """ClusterRole name -> its effective rules: its own, or for an aggregated one the rules of every ClusterRole
    its selectors match (not itself), in name order, without duplicates."""
    by_name = {r["metadata"]["name"]: r for r in cluster_roles}
    out: dict[str, list[Obj]] = {}
    for name, role in by_name.items():
        agg = role.get("aggregationRule")
        if not agg:
            out[name] = list(role.get("rules") or ())
            continue
        rules: list[Obj] = []
        for other_name in sorted(by_name):
            other = by_name[other_name]
            if other_name == name:
                continue
            labels = (other.get("metadata") or {}).get("labels") or {}
            if any(_selector_matches(sel, labels) for sel in agg.get("clusterRoleSelectors") or ()):
                for rule in other.get("rules") or ():
                    if rule not in rules:
                        rules.append(rule)
        out[name] = rules
    return out


# ---------------------------------------------------------------------------------------------------------------
# The decision


@dataclasses.dataclass(frozen=True)
class Policy:
    """The RBAC objects stored on the server."""

    roles: Sequence[Obj] = ()
    cluster_roles: Sequence[Obj] = ()
    role_bindings: Sequence[Obj] = ()
    cluster_role_bindings: Sequence[Obj] = ()


def authorize(user: User, attrs: Attributes, policy: Policy) -> Decision:
    cluster_rules = aggregate(policy.cluster_roles)
    for crb in policy.cluster_role_bindings:
        ref = crb.get("roleRef") or {}
        if ref.get("kind") != "ClusterRole" or not any(
                subject_matches(s, user, "") for s in crb.get("subjects") or ()):
            continue
        for rule in cluster_rules.get(ref.get("name", ""), ()):
            if rule_allows(rule, attrs):
                return Decision(True, f'ClusterRoleBinding "{crb["metadata"]["name"]}" of ClusterRole '
                                      f'"{ref.get("name")}"')
    if attrs.resource_request and attrs.namespace:
        roles = {(r["metadata"].get("namespace"), r["metadata"]["name"]): r for r in policy.roles}
        for rb in policy.role_bindings:
            ns = rb["metadata"].get("namespace")
            if ns != attrs.namespace or not any(subject_matches(s, user, ns) for s in rb.get("subjects") or ()):
                continue
            ref = rb.get("roleRef") or {}
            if ref.get("kind") == "Role":
                role = roles.get((ns, ref.get("name")))
                rules: Sequence[Obj] = (role or {}).get("rules") or ()
            elif ref.get("kind") == "ClusterRole":
                rules = cluster_rules.get(ref.get("name", ""), ())
            else:
                continue
            for rule in rules:
                if not rule.get("nonResourceURLs") and rule_allows(rule, attrs):
                    return Decision(True, f'RoleBinding "{ns}/{rb["metadata"]["name"]}" of {ref.get("kind")} '
                                          f'"{ref.get("name")}"')
    return Decision(False, attrs.describe(user))


# What a fresh API server's bootstrap policy grants that every client needs (a subset of it): the superuser group,
# discovery and version for everyone authenticated, and self-review.
BOOTSTRAP: tuple[Obj, ...] = (
    {"apiVersion": RBAC_API, "kind": "ClusterRole", "metadata": {"name": "cluster-admin"},
     "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
               {"nonResourceURLs": ["*"], "verbs": ["*"]}]},
    {"apiVersion": RBAC_API, "kind": "ClusterRoleBinding", "metadata": {"name": "cluster-admin"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}]},
    {"apiVersion": RBAC_API, "kind": "ClusterRole", "metadata": {"name": "system:discovery"},
     "rules": [{"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/readyz",
                                    "/openapi", "/openapi/*", "/version", "/version/"], "verbs": ["get"]}]},
    {"apiVersion": RBAC_API, "kind": "ClusterRoleBinding", "metadata": {"name": "system:discovery"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:discovery"},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}]},
    {"apiVersion": RBAC_API, "kind": "ClusterRole", "metadata": {"name": "system:public-info-viewer"},
     "rules": [{"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]}]},
    {"apiVersion": RBAC_API, "kind": "ClusterRoleBinding", "metadata": {"name": "system:public-info-viewer"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                 "name": "system:public-info-viewer"},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"},
                  {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:unauthenticated"}]},
    {"apiVersion": RBAC_API, "kind": "ClusterRole", "metadata": {"name": "system:basic-user"},
     "rules": [{"apiGroups": ["authorization.k8s.io"],
                "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]}]},
    {"apiVersion": RBAC_API, "kind": "ClusterRoleBinding", "metadata": {"name": "system:basic-user"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:basic-user"},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}]},
)
