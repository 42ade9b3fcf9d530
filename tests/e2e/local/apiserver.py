"""An emulated Kubernetes API server for the operator's integration and local end-to-end tiers.

Used by the tests under ``tests/e2e/`` (the kopf operator, the kubelet-playing fixture ``kubelet.py``, ``kubectl``
and ``helm`` run against it), by the operator's integration tests and by ``bench/``. It is test support: it must
never be imported by ``scm_server`` or the operator package, and it only listens on loopback.

There is no Kubernetes cluster on the project's machines (see docs/kubernetes.md, "Test tiers"), so this module
plays the API server: ``EmulatedAPIServer`` is a ``kmock.KubernetesEmulator`` (kmock serves the HTTP endpoint, the
bundled table of core resources and the request log) whose request handling is replaced by the server-side
behaviour clients depend on:

- every write bumps a cluster-wide ``metadata.resourceVersion``; stale versions in a merge patch, a PUT or a
  failed JSON-patch ``test`` are refused (409 Conflict / 422); no-op writes change nothing and emit no event;
- create fills ``uid``, ``creationTimestamp``, ``generation``, namespace from the URL, ``apiVersion``/``kind``,
  ``generateName``, answers 201, refuses duplicates (409 AlreadyExists) and unknown namespaces (404);
- ``metadata.generation`` increments on changes outside metadata and status; the ``status`` subresource writes
  only status and main-resource writes never touch status;
- PATCH as JSON patch, merge patch, strategic-merge patch (built-in kinds; 415 for custom resources, as the real
  server) and server-side apply (``application/apply-patch+yaml``, creating absent objects); PUT replaces;
  ``dryRun=All`` validates without storing;
- server-side apply's field ownership: every write records which fields its manager (``fieldManager``, else the
  user agent's first word; operation ``Apply`` or ``Update``) set or changed, taking them from other managers, and
  responses carry it as ``metadata.managedFields`` (FieldsV1); an apply removes the fields its manager applied
  before and leaves out now unless another manager owns them too, and is refused with 409 when it would change a
  field another manager owns, unless ``force=true`` (then the field changes hands). Fields are map keys, items of
  lists with a merge key (containers, ports, volumes... by name or port) and other lists whole (atomic);
- lists and watches honour label and field selectors, ``limit``/``continue``; lists carry ``kind``/``apiVersion``
  and the list ``resourceVersion``; watches resume from a ``resourceVersion`` (410 Gone once it is compacted),
  honour ``timeoutSeconds``, send bookmarks and the initial-events-end bookmark of ``sendInitialEvents``; an object
  leaving a label selector is sent as DELETED and one entering it as ADDED;
- deletion honours finalizers (``deletionTimestamp`` then removal when the last finalizer goes), preconditions,
  ``gracePeriodSeconds`` (Pods bound to a node stay Terminating until the kubelet confirms), and
  ``propagationPolicy`` Background/Foreground/Orphan; a garbage collector deletes dependents whose
  ``ownerReferences`` owners are all gone; deleting a Namespace deletes its contents;
- CustomResourceDefinitions created through the API register their resources (discovery, short names,
  categories, the ``status`` subresource, printer columns) and get ``Established``; custom resources are defaulted,
  pruned and validated against the CRD's ``openAPIV3Schema`` with its CEL rules (``crdschema.py``);
  ``fieldValidation=Strict`` refuses unknown fields (400);
- built-in kinds are checked against the Kubernetes 1.35 JSON schemas bundled with ``kubernetes-validate``, names
  and labels with the DNS-1123 rules, Pod specs for the fields Kubernetes keeps immutable, PVC specs likewise;
  Secrets' ``stringData`` is folded into ``data``; the ``pods/binding`` subresource binds a Pod to a node and
  ``pods/eviction`` honours PodDisruptionBudgets (429 when the budget has no disruption left), whose status a small
  disruption controller keeps current;
- discovery (``/api``, ``/apis``, ``/api/v1`` with ``groupVersion: v1``, groups, versions), ``/version``, the
  server-side ``Table`` rendering kubectl asks for (printer columns of CRDs, Name/Age otherwise), and
  ``pods/log`` proxied to the kubelet fixture of the Pod's node (``kubectl logs``).

With ``enable_rbac()``, requests are authenticated by bearer token (tokens the server issues: an administrator in
``system:masters``, ServiceAccounts' through ``service_account_token``) and authorized by Kubernetes' RBAC rules
against the stored Roles, ClusterRoles and bindings (``rbac.py``), refused with 403 and the API server's message.

What it still does not do: RBAC unless enabled (then every request is admitted), admission webhooks, API
aggregation, OpenAPI documents (kubectl therefore needs ``--validate=false``), the schema's list types of custom
resources in server-side apply (their lists are atomic), ownership of status fields, Service cluster IPs and Endpoints, the scheduler and the kubelet (``kubelet.py`` plays both).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import dataclasses
import datetime
import gzip
import importlib.resources
import json
import random
import re
import string
import threading
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import jsonpatch
import jsonschema
import kmock
import yaml
from kmock._internal import rendering  # the Request type kmock hands to _handle()

from . import apimachinery as am
from . import eventsapi, protowire, rbac
from .crdschema import CRDVersion, SchemaInvalid, check_crd, crd_versions

# Pod Security admission: the pure checker (stdlib only, imports nothing else of the operator)
from ozone_scm_operator import podsecurity  # isort: skip

Obj = dict[str, Any]

KUBERNETES_VERSION = "1.35.0"
CRD_RESOURCE = ("apiextensions.k8s.io", "customresourcedefinitions")
EVENTS_STORE = ("", "events")
# Where a node's kubelet serves container logs (the kubelet fixture annotates its Node with it).
KUBELET_ENDPOINT = "kubelet.local-fixture/endpoint"
# Resources stored per cluster, not per namespace, for GC and namespace deletion.


@dataclasses.dataclass
class Resource:
    """One API resource (a group/version/plural) as discovery describes it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    verbs: tuple[str, ...] = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    crd: CRDVersion | None = None
    # another API's view of a stored resource (events.k8s.io/v1 Events are core Events): the store it shares
    stored_as: tuple[str, str] | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def store(self) -> tuple[str, str]:
        return self.stored_as or (self.group, self.plural)

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


@dataclasses.dataclass(frozen=True)
class WatchEvent:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    obj: Obj
    old: Obj | None


@dataclasses.dataclass(frozen=True)
class ApiPath:
    group: str
    version: str
    namespace: str | None
    plural: str | None
    name: str | None
    subresource: str | None


def parse_api_path(path: str) -> ApiPath | None:
    """Split ``/api/v1/...`` and ``/apis/<group>/<version>/...`` paths; ``None`` for any other path."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if rest and rest[0] == "namespaces" and len(rest) >= 3 and not (
            group == "" and len(rest) == 3 and rest[2] in ("status", "finalize")):
        namespace, rest = rest[1], rest[2:]
    plural = rest[0] if rest else None
    name = rest[1] if len(rest) > 1 else None
    sub = "/".join(rest[2:]) or None
    return ApiPath(group, version, namespace, plural, name, sub)


def _guess_action(path: ApiPath, method: str, query: Mapping[str, str]) -> kmock.action | None:
    if query.get("watch") in ("true", "1"):
        return kmock.action.WATCH
    if path.name is None:
        return {"GET": kmock.action.LIST, "POST": kmock.action.CREATE}.get(method)
    return {"GET": kmock.action.FETCH, "PATCH": kmock.action.UPDATE, "PUT": kmock.action.UPDATE,
            "DELETE": kmock.action.DELETE}.get(method)


def _now() -> datetime.datetime:
    return datetime.datetime.now(tz=datetime.UTC)


class _BuiltinSchemas:
    """Cached validators for the built-in kinds, from the schemas ``kubernetes-validate`` bundles."""

    def __init__(self, version: str) -> None:
        import referencing

        self._dir = importlib.resources.files("kubernetes_validate").joinpath(
            f"kubernetes-json-schema/v{version}-local-strict")
        if not self._dir.is_dir():
            raise RuntimeError(f"kubernetes-validate has no schemas for Kubernetes {version}")
        defs = json.loads(self._dir.joinpath("_definitions.json").read_text())
        self._registry: Any = referencing.Resource.from_contents(defs) @ referencing.Registry()
        self._validators: dict[tuple[str, str], Any] = {}

    def validator(self, api_version: str, kind: str) -> Any:
        key = (api_version, kind)
        if key not in self._validators:
            # kubernetes-validate's file naming: rbac.authorization.k8s.io/v1 -> rbac-v1, apps/v1 -> apps-v1
            group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
            path = self._dir.joinpath(f"{kind.lower()}-{group_version}.json")
            if not path.is_file():
                self._validators[key] = None
            else:
                schema = json.loads(path.read_text())
                self._validators[key] = jsonschema.Draft202012Validator(schema, registry=self._registry)
        return self._validators[key]


# Pod spec fields that may change on a live Pod (everything else is immutable once created).
POD_MUTABLE_SPEC = {"activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates"}


@attrs.define(kw_only=True)
class EmulatedAPIServer(kmock.KubernetesEmulator):
    """The emulated API server. Serve it with ``async with api, kmock.Server(api) as server`` or use ``serving()``
    (same loop) / ``ThreadedAPIServer`` (own thread and loop, for synchronous tests, kubectl and helm)."""

    kubernetes_version: str = KUBERNETES_VERSION
    validate_builtins: bool = True
    event_log_size: int = 20000
    bookmark_interval: float = 5.0
    request_log_size: int = 2000
    default_namespaces: tuple[str, ...] = ("default", "kube-system", "kube-public", "kube-node-lease")
    clock: Callable[[], datetime.datetime] = _now

    _registry: dict[tuple[str, str, str], Resource] = attrs.field(factory=dict, init=False)
    _objects_by_key: dict[tuple[str, str, str, str], Obj] = attrs.field(factory=dict, init=False)
    _rv: int = attrs.field(default=1, init=False)
    _logs: dict[tuple[str, str], deque[WatchEvent]] = attrs.field(factory=dict, init=False)
    _compacted: dict[tuple[str, str], int] = attrs.field(factory=dict, init=False)
    _watchers: dict[tuple[str, str], set[asyncio.Queue[WatchEvent | None]]] = attrs.field(factory=dict, init=False)
    # server-side apply: per object, the fields each (manager, operation) owns (``_own``)
    _managed: dict[tuple[str, str, str, str], dict[tuple[str, str], set[am.FieldPath]]] = attrs.field(
        factory=dict, init=False)
    # the manager of the write in progress: (fieldManager, "Update") for HTTP writes, ("emulator", "Update") for the
    # fixtures' direct writes and the emulated controllers; None while an apply assigns ownership itself
    _writer: tuple[str, str] | None = attrs.field(default=("emulator", "Update"), init=False)
    # requests served, by (verb, resource) -- e.g. ("list", "pods"), ("patch", "services"); the scale bench reads it
    request_counts: dict[tuple[str, str], int] = attrs.field(factory=dict, init=False)
    _builtin_schemas: _BuiltinSchemas | None = attrs.field(default=None, init=False)
    _rng: random.Random = attrs.field(factory=lambda: random.Random(0), init=False)
    _waiters: set[asyncio.Future[None]] = attrs.field(factory=set, init=False)
    _gc_running: bool = attrs.field(default=False, init=False)
    # RBAC (``rbac.py``): off by default (every request admitted); ``enable_rbac()`` turns authentication by bearer
    # token and authorization against the stored Roles/ClusterRoles/bindings on for requests over HTTP
    rbac_enabled: bool = attrs.field(default=False, init=False)
    _tokens: dict[str, rbac.User] = attrs.field(factory=dict, init=False)
    refusals: list[str] = attrs.field(factory=list, init=False)
    unsupported_rules: list[str] = attrs.field(factory=list, init=False)
    warnings: list[str] = attrs.field(factory=list, init=False)
    internal_errors: list[BaseException] = attrs.field(factory=list, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        data = importlib.resources.files("kmock._internal").joinpath("resources.json.gz").read_bytes()
        for doc in json.loads(gzip.decompress(data)):
            self._register_discovery_doc(doc)
        # events.k8s.io/v1 serves the core Events (one store, converted on the way in and out: eventsapi.py)
        self._registry[("events.k8s.io", "v1", "events")].stored_as = EVENTS_STORE
        if self.validate_builtins:
            self._builtin_schemas = _BuiltinSchemas(self.kubernetes_version)
        for ns in self.default_namespaces:
            self.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        # Discovery and version endpoints the kmock scaffold serves are replaced by ours (priority over fallback).
        self["get /version"] << (lambda: self._version_body())
        self["get /api"] << (lambda: {"kind": "APIVersions", "versions": ["v1"],
                                      "serverAddressByClientCIDRs": []})
        self["get /apis"] << (lambda: self._api_group_list())

    # ---------------------------------------------------------------------------------------------------------------
    # Registry and discovery

    def _register_discovery_doc(self, doc: Mapping[str, Any]) -> None:
        gv = doc["groupVersion"]
        group, version = gv.rsplit("/", 1) if "/" in gv else ("", gv)
        subs: dict[str, list[str]] = {}
        for entry in doc.get("resources", []):
            if "/" in entry["name"]:
                parent, sub = entry["name"].split("/", 1)
                subs.setdefault(parent, []).append(sub)
        for entry in doc.get("resources", []):
            if "/" in entry["name"]:
                continue
            self.register(Resource(
                group=group, version=version, plural=entry["name"], kind=entry["kind"],
                namespaced=bool(entry.get("namespaced")), singular=entry.get("singularName") or "",
                verbs=tuple(entry.get("verbs", ())), short_names=tuple(entry.get("shortNames") or ()),
                categories=tuple(entry.get("categories") or ()), subresources=tuple(subs.get(entry["name"], ())),
            ))

    def register(self, res: Resource) -> None:
        """Add a resource to discovery and routing (CRDs do this when they are created through the API)."""
        self._registry[(res.group, res.version, res.plural)] = res
        self.resources[f"{res.group}/{res.version}/{res.plural}" if res.group else f"v1/{res.plural}"] = \
            kmock.ResourceInfo(namespaced=res.namespaced, kind=res.kind, singular=res.singular or res.kind.lower(),
                               verbs=set(res.verbs), shortnames=set(res.short_names),
                               categories=set(res.categories), subresources=set(res.subresources))

    def unregister(self, group: str, plural: str) -> None:
        for key in [k for k in self._registry if k[0] == group and k[2] == plural]:
            del self._registry[key]

    def lookup_resource(self, group: str, version: str, plural: str) -> Resource:
        res = self._registry.get((group, version, plural))
        if res is None:
            raise am.ApiError(404, "NotFound", f"the server could not find the requested resource "
                                               f"({plural}.{group or 'core'}/{version})")
        return res

    def resource_for_kind(self, api_version: str, kind: str) -> Resource | None:
        group, version = api_version.rsplit("/", 1) if "/" in api_version else ("", api_version)
        for res in self._registry.values():
            if res.group == group and res.version == version and res.kind == kind:
                return res
        return None

    def _version_body(self) -> Obj:
        major, minor, _patch = self.kubernetes_version.split(".")
        return {"major": major, "minor": minor, "gitVersion": f"v{self.kubernetes_version}-emulated",
                "gitCommit": "0" * 40, "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "go1.25", "compiler": "gc", "platform": "linux/amd64"}

    def _groups(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for res in self._registry.values():
            if res.group:
                versions = groups.setdefault(res.group, [])
                if res.version not in versions:
                    versions.append(res.version)
        for versions in groups.values():
            versions.sort(key=_version_priority)
        return groups

    def _api_group(self, group: str, versions: list[str]) -> Obj:
        return {"name": group,
                "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                "preferredVersion": {"groupVersion": f"{group}/{versions[0]}", "version": versions[0]}}

    def _api_group_list(self) -> Obj:
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [self._api_group(g, v) for g, v in sorted(self._groups().items())]}

    def _resource_list(self, group: str, version: str) -> Obj:
        resources = [r for r in self._registry.values() if r.group == group and r.version == version]
        if not resources:
            raise am.ApiError(404, "NotFound", "the server could not find the requested resource")
        entries = []
        for res in sorted(resources, key=lambda r: r.plural):
            entry: Obj = {"name": res.plural, "singularName": res.singular or res.kind.lower(),
                          "namespaced": res.namespaced, "kind": res.kind, "verbs": list(res.verbs)}
            if res.short_names:
                entry["shortNames"] = list(res.short_names)
            if res.categories:
                entry["categories"] = list(res.categories)
            entries.append(entry)
            for sub in res.subresources:
                sub_verbs = {"status": ["get", "patch", "update"], "binding": ["create"],
                             "eviction": ["create"], "scale": ["get", "patch", "update"]}.get(sub, ["get"])
                entries.append({"name": f"{res.plural}/{sub}", "singularName": "", "namespaced": res.namespaced,
                                "kind": {"binding": "Binding", "eviction": "Eviction", "scale": "Scale"}
                                .get(sub, res.kind), "verbs": sub_verbs})
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version, "resources": entries}

    def _openapi_v3(self, path: str) -> Obj:
        """OpenAPI v3 discovery and per-group-version documents: every resource's paths with their PATCH
        operation and ``fieldValidation`` parameter (kubectl checks these before it relies on server-side field
        validation), and the schemas of custom resources (what ``kubectl explain`` reads). Built-in kinds carry no
        schema documents here."""
        gvs: dict[str, list[Resource]] = {}
        for res in self._registry.values():
            gv = f"apis/{res.group}/{res.version}" if res.group else f"api/{res.version}"
            gvs.setdefault(gv, []).append(res)
        rest = path.removeprefix("/openapi/v3").strip("/")
        if not rest:
            return {"paths": {gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash={self._rv}"} for gv in sorted(gvs)}}
        if rest not in gvs:
            raise am.ApiError(404, "NotFound", f"the server could not find the requested resource ({rest})")
        paths: Obj = {}
        schemas: Obj = {}
        params = [{"name": n, "in": "query", "schema": {"type": "string"}, "uniqueItems": True}
                  for n in ("dryRun", "fieldManager", "fieldValidation", "force")]
        for res in gvs[rest]:
            gvk = {"group": res.group, "version": res.version, "kind": res.kind}
            base = f"/{rest}/namespaces/{{namespace}}/{res.plural}" if res.namespaced else f"/{rest}/{res.plural}"
            op = {"x-kubernetes-group-version-kind": gvk, "parameters": params,
                  "responses": {"200": {"description": "OK"}}}
            paths[f"{base}/{{name}}"] = {"get": {**op, "x-kubernetes-action": "get"},
                                         "patch": {**op, "x-kubernetes-action": "patch"},
                                         "put": {**op, "x-kubernetes-action": "put"},
                                         "delete": {**op, "x-kubernetes-action": "delete"}}
            paths[base] = {"get": {**op, "x-kubernetes-action": "list"},
                           "post": {**op, "x-kubernetes-action": "post"}}
            if res.crd is not None:
                schema = copy.deepcopy(dict(res.crd.schema))
                schema["x-kubernetes-group-version-kind"] = [gvk]
                props = schema.setdefault("properties", {})
                props.setdefault("apiVersion", {"type": "string", "description": "APIVersion defines the "
                                                "versioned schema of this representation of an object."})
                props.setdefault("kind", {"type": "string", "description": "Kind is a string value representing "
                                          "the REST resource this object represents."})
                props.setdefault("metadata", {"type": "object", "description": "Standard object's metadata."})
                reversed_group = ".".join(reversed(res.group.split(".")))
                schemas[f"{reversed_group}.{res.version}.{res.kind}"] = schema
        return {"openapi": "3.0.0", "info": {"title": "Kubernetes (emulated)", "version": self.kubernetes_version},
                "paths": paths, "components": {"schemas": schemas}}

    # ---------------------------------------------------------------------------------------------------------------
    # Direct (in-process) access for tests and fixtures

    def put_object(self, obj: Mapping[str, Any]) -> Obj:
        """Create an object directly (no HTTP), as a test's setup would ``kubectl create`` it."""
        res = self.resource_for_kind(obj["apiVersion"], obj["kind"])
        if res is None:
            raise KeyError(f"unknown kind {obj['apiVersion']}/{obj['kind']}")
        ns = (obj.get("metadata") or {}).get("namespace") if res.namespaced else None
        if res.namespaced and not ns:
            ns = "default"
        return self._create(res, ns, copy.deepcopy(dict(obj)), {})

    def call_delete(self, api_version: str, kind: str, name: str, namespace: str | None = None,
                    options: Mapping[str, Any] | None = None) -> Obj:
        """Delete directly (no HTTP), with the server's semantics (finalizers, grace, propagation)."""
        res = self.resource_for_kind(api_version, kind)
        if res is None:
            raise KeyError(f"unknown kind {api_version}/{kind}")
        return self._delete(res, namespace, name, options or {})

    def patch_object(self, api_version: str, kind: str, name: str, namespace: str | None, patch: Mapping[str, Any],
                     subresource: str | None = None) -> Obj:
        """Merge-patch directly (no HTTP), with the server's validation and status-subresource rules."""
        res = self.resource_for_kind(api_version, kind)
        if res is None:
            raise KeyError(f"unknown kind {api_version}/{kind}")
        key = (*res.store, namespace or "", name)
        current = self._objects_by_key.get(key)
        if current is None:
            raise am.not_found(res.plural, name, res.group)
        patched = am.merge_patch(copy.deepcopy(current), dict(patch))
        return self._update(res, key, patched, current, subresource, {}, False, None,
                            precondition=(patch.get("metadata") or {}).get("resourceVersion"))

    def get_object(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        """The stored object (a deep copy), or None."""
        res = self.resource_for_kind(api_version, kind)
        if res is None:
            return None
        obj = self._objects_by_key.get((*res.store, namespace or "", name))
        return self._present(res, obj) if obj is not None else None

    def list_objects(self, api_version: str, kind: str, namespace: str | None = None) -> list[Obj]:
        res = self.resource_for_kind(api_version, kind)
        if res is None:
            return []
        return [self._present(res, o) for (g, p, ns, _n), o in sorted(self._objects_by_key.items())
                if (g, p) == res.store and (namespace is None or ns == namespace)]

    @property
    def resource_version(self) -> int:
        return self._rv

    async def wait_for(self, predicate: Callable[[], Any], timeout: float, poll: float = 0.25) -> Any:
        """Wait until ``predicate()`` is truthy; it is re-checked after every write and at least every ``poll``
        seconds (for conditions outside the API, such as files or processes). Returns its value."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            value = predicate()
            if value:
                return value
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError("condition not met before the deadline")
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.add(waiter)
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter, min(remaining, poll))
            finally:
                self._waiters.discard(waiter)

    # ---------------------------------------------------------------------------------------------------------------
    # Authentication and RBAC

    def enable_rbac(self) -> str:
        """Authenticate every HTTP request by its bearer token and authorize it with Kubernetes' RBAC rules
        against the stored RBAC objects (``rbac.authorize``); seeds the bootstrap policy (``cluster-admin`` for
        the group ``system:masters``, discovery for everyone authenticated) and returns an administrator token
        (``system:masters``). A request without a token is ``system:anonymous``; an unknown token gets 401."""
        self.rbac_enabled = True
        for obj in rbac.BOOTSTRAP:
            if self.get_object(obj["apiVersion"], obj["kind"], obj["metadata"]["name"]) is None:
                self.put_object(obj)
        return self.issue_token(rbac.User("system:admin", ("system:masters", "system:authenticated")))

    def issue_token(self, user: rbac.User) -> str:
        token = uuid.uuid4().hex
        self._tokens[token] = user
        return token

    def service_account_token(self, namespace: str, name: str) -> str:
        """A token for the ServiceAccount (which must exist), as the TokenRequest API hands one out."""
        if self.get_object("v1", "ServiceAccount", name, namespace) is None:
            raise am.not_found("serviceaccounts", name)
        return self.issue_token(rbac.User.service_account(namespace, name))

    def _token_request(self, path: ApiPath, body: Obj) -> Obj:
        """``serviceaccounts/<name>/token`` (the TokenRequest API): a token for the ServiceAccount, valid until the
        emulator stops (expiry and audiences are echoed, not enforced)."""
        assert path.namespace is not None and path.name is not None
        token = self.service_account_token(path.namespace, path.name)
        seconds = int((body.get("spec") or {}).get("expirationSeconds") or 3600)
        expires = (self.clock() + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "metadata": {"name": path.name, "namespace": path.namespace},
                "spec": {"audiences": [], **(body.get("spec") or {}), "expirationSeconds": seconds},
                "status": {"token": token, "expirationTimestamp": expires}}

    def _policy(self) -> rbac.Policy:
        api = rbac.RBAC_API
        return rbac.Policy(roles=self.list_objects(api, "Role"), cluster_roles=self.list_objects(api, "ClusterRole"),
                           role_bindings=self.list_objects(api, "RoleBinding"),
                           cluster_role_bindings=self.list_objects(api, "ClusterRoleBinding"))

    def _authorize(self, raw_request: aiohttp.web.BaseRequest) -> None:
        header = raw_request.headers.get("Authorization", "")
        if header:
            scheme, _, token = header.partition(" ")
            user = self._tokens.get(token.strip()) if scheme.lower() == "bearer" else None
            if user is None:
                raise am.ApiError(401, "Unauthorized", "Unauthorized")
        else:
            user = rbac.ANONYMOUS
        attributes = rbac.request_attributes(raw_request.method, raw_request.path, dict(raw_request.query))
        decision = rbac.authorize(user, attributes, self._policy())
        if not decision.allowed:
            self.refusals.append(decision.reason)
            details = {"kind": attributes.resource} if attributes.resource_request else {}
            if attributes.name:
                details["name"] = attributes.name
            if attributes.api_group:
                details["group"] = attributes.api_group
            raise am.ApiError(403, "Forbidden", decision.reason, details)

    # ---------------------------------------------------------------------------------------------------------------
    # Request handling

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        """Parse API paths ourselves (kmock's parser fails on ``/api/v1/namespaces``), keep kmock's request log
        (bounded by ``request_log_size``) and answer every failure as a Kubernetes ``Status``."""
        if self.rbac_enabled:
            try:
                self._authorize(raw_request)
            except am.ApiError as exc:
                return self._error_response(exc)
        if raw_request.path.startswith("/openapi/v3") and raw_request.method == "GET":
            try:
                return aiohttp.web.json_response(self._openapi_v3(raw_request.path))
            except am.ApiError as exc:
                return self._error_response(exc)
        path = parse_api_path(raw_request.path)
        if path is None:
            return await super().__call__(raw_request)
        body = await raw_request.read()
        text = body.decode("utf-8", errors="replace")
        data: Any = None
        if raw_request.headers.get("Content-Type", "").startswith("application/vnd.kubernetes.protobuf") and body:
            try:
                data = protowire.decode(body)
            except ValueError as exc:
                return self._error_response(am.ApiError(415, "UnsupportedMediaType", str(exc)))
            text = json.dumps(data)
        elif text.strip():
            try:
                data = json.loads(text)
            except ValueError:
                data = None
        method = kmock.method(raw_request.method)
        query = dict(raw_request.query)
        request = rendering.Request(
            id=len(self._requests), raw_request=raw_request, url=raw_request.url, method=method, params=query,
            headers=dict(raw_request.headers), cookies=dict(raw_request.cookies), data=data, body=body, text=text,
            action=_guess_action(path, raw_request.method, query),
            resource=kmock.resource(path.group, path.version, path.plural) if path.plural else None,
            namespace=path.namespace, name=path.name, subresource=path.subresource,
        )
        self._requests.append(request)
        if len(self._requests) > self.request_log_size:
            del self._requests[: len(self._requests) - self.request_log_size // 2]
        try:
            return await self._handle(request)
        except am.ApiError as exc:
            return self._error_response(exc)
        except Exception as exc:  # a bug in the emulator: answer 500 with the cause, and keep it for the test
            self.internal_errors.append(exc)
            return self._error_response(am.ApiError(500, "InternalError", f"emulator error: {exc!r}"))

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        path = parse_api_path(request.url.path)
        if path is None or path.plural is None:
            if path is not None and request.method.value == "GET" and path.plural is None:
                try:
                    return aiohttp.web.json_response(self._resource_list(path.group, path.version))
                except am.ApiError as exc:
                    return self._error_response(exc)
            if request.url.path.startswith("/apis/") and request.url.path.count("/") == 2 \
                    and request.method.value == "GET":
                group = request.url.path.split("/")[2]
                versions = self._groups().get(group)
                if not versions:
                    return self._error_response(am.ApiError(404, "NotFound", "the server could not find the "
                                                                             "requested resource"))
                return aiohttp.web.json_response({"kind": "APIGroup", "apiVersion": "v1",
                                                  **self._api_group(group, versions)})
            return await super(kmock.KubernetesEmulator, self)._handle(request)
        try:
            return await self._dispatch(request, path)
        except am.ApiError as exc:
            return self._error_response(exc)

    def _error_response(self, exc: am.ApiError) -> aiohttp.web.StreamResponse:
        return aiohttp.web.json_response(exc.body(), status=exc.code)

    async def _dispatch(self, request: rendering.Request, path: ApiPath) -> aiohttp.web.StreamResponse:
        assert path.plural is not None
        res = self.lookup_resource(path.group, path.version, path.plural)
        params = dict(request.params)
        method = request.method.value
        if res.namespaced and path.namespace is None and method not in ("GET",) and path.name is not None:
            raise am.ApiError(404, "NotFound", "the server could not find the requested resource")
        if not res.namespaced and path.namespace is not None:
            raise am.ApiError(404, "NotFound", "the server could not find the requested resource")
        dry_run = params.get("dryRun") == "All"
        warnings: list[str] = []
        verb = {"GET": "watch" if params.get("watch") in ("true", "1") else "get" if path.name else "list",
                "POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}.get(method, method.lower())
        counted = (verb, res.plural + (f"/{path.subresource}" if path.subresource else ""))
        self.request_counts[counted] = self.request_counts.get(counted, 0) + 1
        if method == "GET":
            return await self._dispatch_verb(request, res, path, params, method, dry_run, warnings)
        # writes run without awaiting (no other request interleaves), so the writer is this request's
        self._writer = (params.get("fieldManager") or _default_manager(request.headers.get("User-Agent")), "Update")
        try:
            return await self._dispatch_verb(request, res, path, params, method, dry_run, warnings)
        finally:
            self._writer = ("emulator", "Update")

    async def _dispatch_verb(self, request: rendering.Request, res: Resource, path: ApiPath, params: dict[str, str],
                             method: str, dry_run: bool, warnings: list[str]) -> aiohttp.web.StreamResponse:
        if res.stored_as == EVENTS_STORE and method != "GET":
            return self._write_event_view(request, res, path, params, dry_run, warnings)
        if method == "GET" and params.get("watch") in ("true", "1"):
            return await self._serve_watch_stream(request, res, path, params)
        if method == "GET" and path.name is None:
            return self._json(self._list(res, path.namespace, params, request.headers.get("Accept", "")))
        if method == "GET" and path.subresource == "log" and res.store == ("", "pods"):
            return await self._pod_log(path, params)
        if method == "GET" and path.subresource not in (None, "status"):
            raise am.ApiError(404, "NotFound", f"the server could not find the requested resource "
                                               f"({res.plural}/{path.subresource})")
        if method == "GET":
            return self._json(self._present(res, self._fetch(res, path.namespace, path.name)))
        if method == "POST" and path.name is None:
            body = self._body(request)
            if path.namespace is None and res.namespaced:
                raise am.ApiError(404, "NotFound", "the server could not find the requested resource")
            created = self._create(res, path.namespace, body, params, dry_run=dry_run, warnings=warnings)
            return self._json(self._present(res, created), 201, warnings)
        if method == "POST" and path.subresource == "token" and res.store == ("", "serviceaccounts"):
            return self._json(self._token_request(path, self._body(request)), 201)
        if method == "POST" and path.subresource == "binding":
            return self._json(self._bind(res, path, self._body(request)), 201)
        if method == "POST" and path.subresource == "eviction":
            return self._json(self._evict(res, path, self._body(request)), 201)
        if method == "PATCH" and path.name is not None:
            ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
            obj, status = self._patch(res, path, ctype, request, params, dry_run, warnings)
            return self._json(self._present(res, obj), status, warnings)
        if method == "PUT" and path.name is not None:
            obj = self._replace(res, path, self._body(request), params, dry_run, warnings)
            return self._json(self._present(res, obj), 200, warnings)
        if method == "DELETE" and path.name is not None:
            options = self._delete_options(request, params)
            return self._json(self._delete(res, path.namespace, path.name, options, dry_run=dry_run))
        if method == "DELETE":
            return self._json(self._delete_collection(res, path.namespace, params, self._delete_options(
                request, params), dry_run))
        raise am.ApiError(405, "MethodNotAllowed", f"{method} is not supported on {request.url.path}")

    def _write_event_view(self, request: rendering.Request, res: Resource, path: ApiPath, params: Mapping[str, str],
                          dry_run: bool, warnings: list[str]) -> aiohttp.web.Response:
        """Writes through ``events.k8s.io/v1``: checked as that API checks them, converted, stored as core Events."""
        core = self._resource_of_store(EVENTS_STORE)
        method = request.method.value
        if path.subresource is not None:
            raise am.ApiError(404, "NotFound", "the server could not find the requested resource")
        if method == "POST" and path.name is None:
            body = self._body(request)
            if path.namespace is None:
                raise am.ApiError(404, "NotFound", "the server could not find the requested resource")
            body.setdefault("metadata", {}).setdefault("namespace", path.namespace)
            self._check_event_view(res, body, eventsapi.check_create(body), params, warnings)
            created = self._create(core, path.namespace, eventsapi.to_core(body), params, dry_run=dry_run,
                                   warnings=warnings)
            return self._json(self._present(res, created), 201, warnings)
        if path.name is None:
            if method == "DELETE":
                return self._json(self._delete_collection(res, path.namespace, params, self._delete_options(
                    request, params), dry_run))
            raise am.ApiError(405, "MethodNotAllowed", f"{method} is not supported on {request.url.path}")
        key = (*EVENTS_STORE, path.namespace or "", path.name)
        if method == "DELETE":
            return self._json(self._present(res, self._delete(core, path.namespace, path.name, self._delete_options(
                request, params), dry_run=dry_run)))
        current = self._objects_by_key.get(key)
        if current is None:
            raise am.not_found(res.plural, path.name, res.group)
        view = eventsapi.from_core(current)
        ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
        if method == "PUT":
            new = self._body(request)
        elif method == "PATCH" and ctype == "application/json-patch+json":
            ops = request.data if isinstance(request.data, list) else json.loads(request.text or "[]")
            try:
                new = jsonpatch.apply_patch(copy.deepcopy(view), ops)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise am.ApiError(422, "Invalid", f"the server rejected our request due to an error in our "
                                                  f"request: {exc}") from exc
        elif method == "PATCH" and ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            new = am.merge_patch(copy.deepcopy(view), self._body(request))
        elif method == "PATCH":
            raise am.ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: "
                                                           f"{ctype or 'no Content-Type'}")
        else:
            raise am.ApiError(405, "MethodNotAllowed", f"{method} is not supported on {request.url.path}")
        if not isinstance(new, dict):
            raise am.ApiError(422, "Invalid", "the patch does not produce an object")
        new.setdefault("metadata", {})
        if new["metadata"].get("name") not in (None, path.name):
            raise am.ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        self._check_event_view(res, new, eventsapi.check_update(new, view), params, warnings)
        precondition = (new.get("metadata") or {}).get("resourceVersion")
        if method == "PATCH" and precondition == current["metadata"].get("resourceVersion"):
            precondition = None  # carried over from the stored object, not asked for by the patch
        stored = eventsapi.to_core(new)
        updated = self._update(core, key, stored, current, None, params, dry_run, warnings, precondition=precondition)
        return self._json(self._present(res, updated), 200, warnings)

    def _check_event_view(self, res: Resource, body: Obj, errors: list[am.FieldError], params: Mapping[str, str],
                          warnings: list[str]) -> None:
        if body.get("kind") not in (None, "Event") or body.get("apiVersion") not in (None, res.api_version):
            raise am.ApiError(400, "BadRequest", f"the API version in the data ({body.get('apiVersion')}) and kind "
                                                 f"({body.get('kind')}) do not match the resource {res.plural}")
        if errors:
            raise am.invalid(res.kind, (body.get("metadata") or {}).get("name", ""), res.group, errors)
        if self._builtin_schemas is not None:
            self._validate_builtin(res, {**body, "apiVersion": res.api_version, "kind": res.kind}, params, warnings)

    @staticmethod
    def _json(body: Any, status: int = 200, warnings: list[str] | None = None) -> aiohttp.web.Response:
        headers = {}
        if warnings:
            headers["Warning"] = ", ".join(f'299 - "{w}"' for w in warnings)
        return aiohttp.web.json_response(body, status=status, headers=headers)

    @staticmethod
    def _body(request: rendering.Request) -> Obj:
        if isinstance(request.data, dict):
            return copy.deepcopy(request.data)
        text = request.text.strip()
        if text:
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise am.ApiError(400, "BadRequest", f"the body of the request could not be decoded: {exc}") from exc
            if isinstance(data, dict):
                return data
        raise am.ApiError(400, "BadRequest", "the body of the request must be a JSON or YAML object")

    def _present(self, res: Resource, obj: Obj) -> Obj:
        if res.stored_as == EVENTS_STORE:
            return eventsapi.from_core(obj)
        out = copy.deepcopy(obj)
        out["apiVersion"] = res.api_version
        out["kind"] = res.kind
        meta = out.get("metadata") or {}
        owners = self._managed.get((res.group, res.plural, meta.get("namespace") or "", meta.get("name") or ""))
        if owners:
            meta["managedFields"] = [
                {"manager": manager, "operation": op, "apiVersion": res.api_version, "fieldsType": "FieldsV1",
                 "fieldsV1": am.fields_v1(paths)}
                for (manager, op), paths in sorted(owners.items()) if paths]
        return out

    def managed_fields(self, api_version: str, kind: str, name: str, namespace: str | None = None
                       ) -> dict[tuple[str, str], set[am.FieldPath]]:
        """Who owns which fields of an object (server-side apply's bookkeeping), by (manager, operation)."""
        res = self.resource_for_kind(api_version, kind)
        assert res is not None
        return {k: set(v) for k, v in self._managed.get((res.group, res.plural, namespace or "", name), {}).items()}

    def _own(self, res: Resource, key: tuple[str, str, str, str], new: Obj | None, old: Obj | None) -> None:
        """Field ownership after a committed write: the writer owns every field the write changed and nobody else
        does any more (an apply's manager owns exactly what it applied, set by ``_patch``); fields that are gone
        are owned by no one."""
        if new is None:
            self._managed.pop(key, None)
            return
        associative = res.crd is None
        now = am.leaf_fields(new, associative=associative)
        before = am.leaf_fields(old, associative=associative) if old is not None else {}
        changed = {p for p, v in now.items() if p not in before or before[p] != v}
        owners = self._managed.setdefault(key, {})
        for entry in list(owners):
            owners[entry] = {p for p in owners[entry] if p in now and p not in changed}
        if self._writer is not None:
            owners.setdefault(self._writer, set()).update(changed)
        for entry in [e for e, paths in owners.items() if not paths]:
            del owners[entry]

    # ---------------------------------------------------------------------------------------------------------------
    # Reads

    def _fetch(self, res: Resource, namespace: str | None, name: str | None) -> Obj:
        assert name is not None
        obj = self._objects_by_key.get((*res.store, namespace or "", name))
        if obj is None:
            raise am.not_found(res.plural, name, res.group)
        return obj

    def _select(self, res: Resource, namespace: str | None, params: Mapping[str, str]) -> list[Obj]:
        labels = am.parse_label_selector(params.get("labelSelector"))
        fields = am.parse_field_selector(params.get("fieldSelector"))
        out = []
        for (g, p, ns, _name), obj in sorted(self._objects_by_key.items()):
            if (g, p) != res.store or (namespace is not None and ns != namespace):
                continue
            if am.labels_match(labels, obj["metadata"].get("labels")) and am.fields_match(fields, obj):
                out.append(obj)
        return out

    def _list(self, res: Resource, namespace: str | None, params: Mapping[str, str], accept: str) -> Obj:
        items = self._select(res, namespace, params)
        meta: Obj = {"resourceVersion": str(self._rv)}
        start = 0
        if params.get("continue"):
            try:
                start = int(base64.urlsafe_b64decode(params["continue"].encode()).decode())
            except ValueError as exc:
                raise am.ApiError(400, "BadRequest", "invalid continue token") from exc
        limit = int(params.get("limit") or 0)
        page = items[start:start + limit] if limit > 0 else items[start:]
        if limit > 0 and start + limit < len(items):
            meta["continue"] = base64.urlsafe_b64encode(str(start + limit).encode()).decode()
            meta["remainingItemCount"] = len(items) - start - limit
        presented = [self._present(res, o) for o in page]
        if "as=Table" in accept:
            include = params.get("includeObject", "Metadata")
            table = am.to_table(presented, res.kind, res.crd.printer_columns if res.crd else None, self.clock(),
                                str(self._rv), include)
            table["metadata"].update({k: v for k, v in meta.items() if k != "resourceVersion"})
            return table
        return {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta, "items": presented}

    # ---------------------------------------------------------------------------------------------------------------
    # Watches

    async def _serve_watch_stream(self, request: rendering.Request, res: Resource, path: ApiPath,
                                  params: Mapping[str, str]) -> aiohttp.web.StreamResponse:
        raw = request._raw_request
        assert raw is not None
        labels = am.parse_label_selector(params.get("labelSelector"))
        fields = am.parse_field_selector(params.get("fieldSelector"))
        if path.name is not None:
            fields = [*fields, ("metadata.name", "=", path.name)]
        namespace = path.namespace

        def matches(obj: Obj | None) -> bool:
            if obj is None:
                return False
            meta = obj["metadata"]
            if namespace is not None and meta.get("namespace") != namespace:
                return False
            return am.labels_match(labels, meta.get("labels")) and am.fields_match(fields, obj)

        rv_param = params.get("resourceVersion") or ""
        initial: list[WatchEvent] = []
        send_initial_end = params.get("sendInitialEvents") == "true"
        if rv_param in ("", "0") or send_initial_end:
            initial = [WatchEvent(self._rv, "ADDED", o, None)
                       for o in self._select(res, namespace, {**params, "resourceVersion": ""})
                       if matches(o)]
        else:
            try:
                since = int(rv_param)
            except ValueError as exc:
                raise am.ApiError(400, "BadRequest", f"invalid resourceVersion {rv_param!r}") from exc
            if since < self._compacted.get(res.store, 0):
                raise am.ApiError(410, "Expired", f"too old resource version: {since} "
                                                  f"({self._compacted.get(res.store, 0)})")
            initial = [e for e in self._logs.get(res.store, ()) if e.rv > since]
        queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()
        self._watchers.setdefault(res.store, set()).add(queue)
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(raw)
        loop = asyncio.get_running_loop()
        timeout = float(params["timeoutSeconds"]) if params.get("timeoutSeconds") else None
        deadline = loop.time() + timeout if timeout else None
        bookmarks = params.get("allowWatchBookmarks") == "true"

        as_table = "as=Table" in request.headers.get("Accept", "")

        async def send(etype: str, obj: Obj) -> None:
            if etype == "BOOKMARK":
                body = obj
            elif as_table:  # kubectl get -w: every event's object is a one-row Table
                body = am.to_table([self._present(res, obj)], res.kind, res.crd.printer_columns if res.crd else None,
                                   self.clock(), obj["metadata"].get("resourceVersion", ""),
                                   params.get("includeObject", "Object"))
            else:
                body = self._present(res, obj)
            await response.write(json.dumps({"type": etype, "object": body}).encode() + b"\n")

        def translate(event: WatchEvent) -> tuple[str, Obj] | None:
            now_in, was_in = matches(event.obj), matches(event.old)
            if event.type == "ADDED":
                return ("ADDED", event.obj) if now_in else None
            if event.type == "DELETED":
                return ("DELETED", event.obj) if now_in else None
            if now_in and was_in:
                return ("MODIFIED", event.obj)
            if now_in:
                return ("ADDED", event.obj)
            if was_in:
                return ("DELETED", event.obj)
            return None

        def bookmark(extra: Mapping[str, str] | None = None) -> Obj:
            meta: Obj = {"resourceVersion": str(self._rv)}
            if extra:
                meta["annotations"] = dict(extra)
            return {"kind": res.kind, "apiVersion": res.api_version, "metadata": meta}

        try:
            for event in initial:
                if event.old is None and event.type == "ADDED" and not rv_param:
                    await send("ADDED", event.obj)
                else:
                    out = translate(event)
                    if out is not None:
                        await send(*out)
            if send_initial_end:
                await send("BOOKMARK", bookmark({"k8s.io/initial-events-end": "true"}))
            while True:
                wait = self.bookmark_interval if bookmarks else None
                if deadline is not None:
                    left = deadline - loop.time()
                    if left <= 0:
                        break
                    wait = left if wait is None else min(wait, left)
                try:
                    event_or_end = await asyncio.wait_for(queue.get(), wait) if wait else await queue.get()
                except TimeoutError:
                    if bookmarks:
                        await send("BOOKMARK", bookmark())
                    continue
                if event_or_end is None:
                    break
                out = translate(event_or_end)
                if out is not None:
                    await send(*out)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._watchers.get(res.store, set()).discard(queue)
        with contextlib.suppress(ConnectionResetError, RuntimeError):
            await response.write_eof()
        return response

    def close_watches(self) -> None:
        """End every open watch stream (clients reconnect), as an apiserver restart would."""
        for queues in self._watchers.values():
            for q in queues:
                q.put_nowait(None)

    # ---------------------------------------------------------------------------------------------------------------
    # The single write path

    def _commit(self, res: Resource, key: tuple[str, str, str, str], new: Obj | None, old: Obj | None,
                etype: str) -> Obj | None:
        self._own(res, key, new, old)
        self._rv += 1
        if new is not None:
            new["metadata"]["resourceVersion"] = str(self._rv)
            self._objects_by_key[key] = new
        else:
            self._objects_by_key.pop(key, None)
        obj = new if new is not None else copy.deepcopy(old)
        assert obj is not None
        if new is None:
            obj["metadata"]["resourceVersion"] = str(self._rv)
        event = WatchEvent(self._rv, etype, obj, old)
        log = self._logs.setdefault(res.store, deque())
        log.append(event)
        while len(log) > self.event_log_size:
            dropped = log.popleft()
            self._compacted[res.store] = dropped.rv
        for queue in self._watchers.get(res.store, set()):
            queue.put_nowait(event)
        for waiter in list(self._waiters):
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()
        self._after_commit(res, new, old, etype)
        return new

    def _after_commit(self, res: Resource, new: Obj | None, old: Obj | None, etype: str) -> None:
        if res.store == CRD_RESOURCE and new is not None and not new["metadata"].get("deletionTimestamp"):
            self._install_crd(new)
        if etype == "DELETED" or (new is not None and new["metadata"].get("deletionTimestamp")):
            self._collect_garbage()
        if res.store in (("", "pods"), ("policy", "poddisruptionbudgets")):
            ns = (new or old or {}).get("metadata", {}).get("namespace")
            if ns:
                self._refresh_pdbs(ns)

    # ---------------------------------------------------------------------------------------------------------------
    # Create

    def _create(self, res: Resource, namespace: str | None, body: Obj, params: Mapping[str, str], *,
                dry_run: bool = False, warnings: list[str] | None = None) -> Obj:
        if not isinstance(body, dict):
            raise am.ApiError(400, "BadRequest", "the body of the request must be an object")
        if body.get("kind") and body["kind"] != res.kind:
            raise am.ApiError(400, "BadRequest", f"the API version in the data ({body.get('apiVersion')}) and kind "
                                                 f"({body['kind']}) do not match the resource {res.plural}")
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise am.ApiError(400, "BadRequest", "metadata must be an object")
        if res.namespaced:
            if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                raise am.ApiError(400, "BadRequest", "the namespace of the provided object does not match the "
                                                     "namespace sent on the request")
            namespace = namespace or meta.get("namespace")
            self._check_namespace(namespace)
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if meta.get("generateName"):
                suffix = "".join(self._rng.choice(string.ascii_lowercase + string.digits) for _ in range(5))
                meta["name"] = meta["generateName"] + suffix
            else:
                raise am.invalid(res.kind, "", res.group, [am.FieldError(
                    "metadata.name", "Required value: name or generateName is required", "FieldValueRequired")])
        name = meta["name"]
        key = (*res.store, namespace or "", name)
        if key in self._objects_by_key:
            raise am.already_exists(res.plural, name, res.group)
        for server_field in ("uid", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds",
                             "managedFields", "selfLink"):
            meta.pop(server_field, None)
        if meta.get("finalizers") is None:
            meta.pop("finalizers", None)
        meta["uid"] = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
        meta["creationTimestamp"] = am.rfc3339(self.clock())
        meta["generation"] = 1
        body["apiVersion"] = res.api_version
        body["kind"] = res.kind
        if res.has_status:
            body.pop("status", None)
        body = self._admit(res, body, None, "create", params, warnings)
        if dry_run:
            body["metadata"]["resourceVersion"] = str(self._rv)
            return body
        created = self._commit(res, key, body, None, "ADDED")
        assert created is not None
        return created

    def _check_namespace(self, namespace: str | None) -> None:
        if not namespace:
            raise am.ApiError(400, "BadRequest", "a namespace must be specified for a namespaced resource")
        ns = self._objects_by_key.get(("", "namespaces", "", namespace))
        if ns is None:
            raise am.not_found("namespaces", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise am.ApiError(403, "Forbidden", f"unable to create new content in namespace {namespace} because "
                                                f"it is being terminated")

    # ---------------------------------------------------------------------------------------------------------------
    # Admission: defaults, validation, kind-specific rules

    def _admit(self, res: Resource, obj: Obj, old: Obj | None, op: str, params: Mapping[str, str],
               warnings: list[str] | None, part: str = "main") -> Obj:
        name = obj["metadata"].get("name", "")
        errors = am.validate_name(res.kind, name) if op == "create" else []
        errors += am.validate_labels(obj["metadata"].get("labels"))
        if old is not None and old["metadata"].get("deletionTimestamp"):
            added = set(obj["metadata"].get("finalizers") or []) - set(old["metadata"].get("finalizers") or [])
            if added:
                errors.append(am.FieldError("metadata.finalizers", "Forbidden: no new finalizers can be added if "
                                                                   "the object is being deleted",
                                            "FieldValueForbidden"))
        if errors:
            raise am.invalid(res.kind, name, res.group, errors)
        self._defaults(res, obj, op)
        if res.crd is not None:
            try:
                admitted, pruned = res.crd.admit(obj, old, part=part)
            except SchemaInvalid as exc:
                raise am.invalid(res.kind, name, res.group, exc.errors) from exc
            if pruned:
                self._unknown_fields(res, name, pruned, params, warnings)
            obj = admitted
        elif res.store == CRD_RESOURCE:
            errs = check_crd(obj)
            if not errs:
                try:
                    crd_versions(obj)
                except ValueError as exc:
                    errs = [am.FieldError("spec.versions", f"Invalid value: {exc}")]
            if errs:
                raise am.invalid(res.kind, name, res.group, errs)
        elif self._builtin_schemas is not None and part == "main":
            self._validate_builtin(res, obj, params, warnings)
        if old is not None:
            self._immutable(res, obj, old)
        if res.kind == "Pod" and res.group == "" and op == "create" and part == "main":
            self._pod_security(obj)
        return obj

    def _pod_security(self, pod: Obj) -> None:
        """Pod Security admission in enforce mode: a Pod created in a namespace labelled
        ``pod-security.kubernetes.io/enforce`` must pass that level (workload templates are only warned about by the
        real admission, so they are not refused here either)."""
        namespace = pod["metadata"].get("namespace") or ""
        ns = self._objects_by_key.get(("", "namespaces", "", namespace))
        level = podsecurity.enforced_level((ns or {}).get("metadata", {}).get("labels"))
        violations = podsecurity.check(pod.get("spec") or {}, level)
        if violations:
            raise am.ApiError(403, "Forbidden", f'pods "{pod["metadata"].get("name", "")}" is forbidden: violates '
                                                f'PodSecurity "{level}:latest": {"; ".join(violations)}')

    def _unknown_fields(self, res: Resource, name: str, pruned: list[str], params: Mapping[str, str],
                        warnings: list[str] | None) -> None:
        mode = params.get("fieldValidation", "Warn")
        if mode == "Strict":
            raise am.ApiError(400, "BadRequest", f'{res.kind} in version "{res.version}" cannot be handled as a '
                                                 f"{res.kind}: strict decoding error: "
                                                 + ", ".join(f'unknown field "{p}"' for p in pruned))
        if mode == "Warn" and warnings is not None:
            warnings.extend(f'unknown field "{p}"' for p in pruned)

    def _validate_builtin(self, res: Resource, obj: Obj, params: Mapping[str, str],
                          warnings: list[str] | None) -> None:
        assert self._builtin_schemas is not None
        validator = self._builtin_schemas.validator(res.api_version, res.kind)
        if validator is None:
            return
        errors = []
        unknown = []
        for err in validator.iter_errors(obj):
            path = am.field_path(err.absolute_path)
            if err.validator == "additionalProperties":
                for extra in re.findall(r"'([^']+)'", err.message.split("(", 1)[-1]):
                    unknown.append(f"{path}.{extra}" if path else extra)
                continue
            errors.append(am.FieldError(path, f"Invalid value: {err.message}"))
        if errors:
            raise am.invalid(res.kind, obj["metadata"].get("name", ""), res.group, errors[:5])
        if unknown:
            self._unknown_fields(res, obj["metadata"].get("name", ""), unknown, params, warnings)

    def _defaults(self, res: Resource, obj: Obj, op: str) -> None:
        kind = res.kind if not res.group else ""
        if kind == "Secret":
            string_data = obj.pop("stringData", None) or {}
            if string_data:
                data = obj.setdefault("data", {})
                for k, v in string_data.items():
                    data[k] = base64.b64encode(str(v).encode()).decode()
            obj.setdefault("type", "Opaque")
        elif kind == "Pod":
            spec = obj.setdefault("spec", {})
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            spec.setdefault("dnsPolicy", "ClusterFirst")
            spec.setdefault("schedulerName", "default-scheduler")
            if op == "create":
                obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        elif kind == "PersistentVolumeClaim" and op == "create":
            obj.setdefault("spec", {}).setdefault("volumeMode", "Filesystem")
            obj["status"] = {"phase": "Pending"}
        elif kind == "Service":
            obj.setdefault("spec", {}).setdefault("type", "ClusterIP")
        elif kind == "Namespace":
            labels = obj["metadata"].setdefault("labels", {})
            labels.setdefault("kubernetes.io/metadata.name", obj["metadata"]["name"])
            if op == "create":
                obj["spec"] = {"finalizers": ["kubernetes"]}
                obj["status"] = {"phase": "Active"}

    def _immutable(self, res: Resource, new: Obj, old: Obj) -> None:
        kind = res.kind if not res.group else ""
        errors: list[am.FieldError] = []
        if kind == "Pod":
            a, b = copy.deepcopy(new.get("spec") or {}), copy.deepcopy(old.get("spec") or {})
            for spec in (a, b):
                for fld in POD_MUTABLE_SPEC:
                    spec.pop(fld, None)
                for group in ("containers", "initContainers"):
                    for c in spec.get(group) or []:
                        c.pop("image", None)
            if not b.get("nodeName"):
                a.pop("nodeName", None)
                b.pop("nodeName", None)
            if a != b:
                errors.append(am.FieldError("spec", "Forbidden: pod updates may not change fields other than "
                                                    "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                                                    "`spec.activeDeadlineSeconds`, `spec.tolerations` (only "
                                                    "additions to existing tolerations), "
                                                    "`spec.terminationGracePeriodSeconds`", "FieldValueForbidden"))
        elif kind == "PersistentVolumeClaim":
            a, b = copy.deepcopy(new.get("spec") or {}), copy.deepcopy(old.get("spec") or {})
            for spec in (a, b):
                spec.pop("resources", None)
                spec.pop("volumeAttributesClassName", None)
                if not b.get("volumeName"):
                    spec.pop("volumeName", None)
            if a != b:
                errors.append(am.FieldError("spec", "Forbidden: spec is immutable after creation except "
                                                    "resources.requests and volumeAttributesClassName for bound "
                                                    "claims", "FieldValueForbidden"))
        elif res.store == CRD_RESOURCE and (new.get("spec") or {}).get("group") != (old.get("spec") or {}).get(
                "group"):
            errors.append(am.FieldError("spec.group", "Invalid value: field is immutable"))
        if errors:
            raise am.invalid(res.kind, new["metadata"]["name"], res.group, errors)

    # ---------------------------------------------------------------------------------------------------------------
    # Update (PATCH, PUT, subresources)

    def _patch(self, res: Resource, path: ApiPath, ctype: str, request: rendering.Request,
               params: Mapping[str, str], dry_run: bool, warnings: list[str]) -> tuple[Obj, int]:
        assert path.name is not None
        key = (*res.store, path.namespace or "", path.name)
        current = self._objects_by_key.get(key)
        if ctype == "application/apply-patch+yaml":
            manager = params.get("fieldManager")
            if not manager:
                raise am.ApiError(400, "BadRequest", "PATCH requests with apply content type require "
                                                     "fieldManager to be set")
            applied = self._body(request)
            applied.setdefault("metadata", {})
            if applied["metadata"].get("name") not in (None, path.name):
                raise am.ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
            applied["metadata"]["name"] = path.name
            entry = (manager, "Apply")
            associative = res.crd is None
            fields = am.leaf_fields(applied, associative=associative)
            if current is None:
                if path.subresource:
                    raise am.not_found(res.plural, path.name, res.group)
                self._writer = None
                created = self._create(res, path.namespace, copy.deepcopy(applied), params, dry_run=dry_run,
                                       warnings=warnings)
                if not dry_run:
                    self._managed.setdefault(key, {})[entry] = set(fields)
                return created, 201
            owners = self._managed.get(key, {})
            others: dict[am.FieldPath, list[str]] = {}
            for (other, op), paths in owners.items():
                if (other, op) != entry:
                    for p in paths:
                        others.setdefault(p, []).append(other)
            live = am.leaf_fields(current, associative=associative)
            conflicts = sorted((p, m) for p, v in fields.items() if p in others and live.get(p) != v
                               for m in others[p])
            if conflicts and params.get("force") not in ("true", "1"):
                raise am.ApiError(409, "Conflict", "Apply failed with {} conflict{}: {}".format(
                    len(conflicts), "s" if len(conflicts) > 1 else "",
                    "; ".join(f'conflict with "{m}": .{".".join(str(s[1] if isinstance(s, tuple) else s) for s in p)}'
                              for p, m in conflicts)), {"causes": [{"reason": "FieldManagerConflict"}]})
            # fields this manager applied before and leaves out now go, unless another manager owns them too
            dropped = owners.get(entry, set()) - fields.keys() - others.keys()
            merge = am.strategic_merge_patch if not res.crd else am.merge_patch
            base = am.remove_fields(copy.deepcopy(current), dropped)
            patched = merge(base, applied)
            self._writer = entry
            updated = self._update(res, key, patched, current, path.subresource, params, dry_run, warnings,
                                   precondition=applied["metadata"].get("resourceVersion"))
            if not dry_run and key in self._objects_by_key:
                self._managed.setdefault(key, {})[entry] = set(fields)
            return updated, 200
        if current is None:
            raise am.not_found(res.plural, path.name, res.group)
        if ctype == "application/json-patch+json":
            ops = request.data if isinstance(request.data, list) else json.loads(request.text or "[]")
            try:
                patched = jsonpatch.apply_patch(copy.deepcopy(current), ops)
            except jsonpatch.JsonPatchTestFailed as exc:
                raise am.ApiError(422, "Invalid", f"the server rejected our request due to an error in our "
                                                  f"request: {exc}") from exc
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise am.ApiError(422, "Invalid", f"the server rejected our request due to an error in our "
                                                  f"request: {exc}") from exc
            precondition = None
            if patched["metadata"].get("resourceVersion") != current["metadata"].get("resourceVersion"):
                precondition = patched["metadata"].get("resourceVersion")
        elif ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            if ctype == "application/strategic-merge-patch+json" and res.crd is not None:
                raise am.ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                                  "accepted media types include: application/json-patch+json, "
                                  "application/merge-patch+json, application/apply-patch+yaml")
            body = self._body(request)
            precondition = (body.get("metadata") or {}).get("resourceVersion")
            fn = am.strategic_merge_patch if ctype.startswith("application/strategic") else am.merge_patch
            patched = fn(copy.deepcopy(current), body)
        else:
            raise am.ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: "
                                                           f"{ctype or 'no Content-Type'}")
        if not isinstance(patched, dict):
            raise am.ApiError(422, "Invalid", "the patch does not produce an object")
        return self._update(res, key, patched, current, path.subresource, params, dry_run, warnings,
                            precondition=precondition), 200

    def _replace(self, res: Resource, path: ApiPath, body: Obj, params: Mapping[str, str], dry_run: bool,
                 warnings: list[str]) -> Obj:
        assert path.name is not None
        key = (*res.store, path.namespace or "", path.name)
        current = self._objects_by_key.get(key)
        meta = body.setdefault("metadata", {})
        if meta.get("name") not in (None, path.name):
            raise am.ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        if current is None:
            raise am.not_found(res.plural, path.name, res.group)
        return self._update(res, key, body, current, path.subresource, params, dry_run, warnings,
                            precondition=meta.get("resourceVersion"))

    def _update(self, res: Resource, key: tuple[str, str, str, str], patched: Obj, current: Obj,
                subresource: str | None, params: Mapping[str, str], dry_run: bool, warnings: list[str] | None,
                precondition: str | None) -> Obj:
        name = key[3]
        if precondition and precondition != current["metadata"].get("resourceVersion"):
            raise am.conflict(res.plural, name, res.group)
        if subresource not in (None, "status"):
            raise am.ApiError(404, "NotFound", f"the server could not find the requested resource "
                                               f"({res.plural}/{subresource})")
        if subresource == "status":
            new = copy.deepcopy(current)
            if "status" in patched:
                new["status"] = patched["status"]
            else:
                new.pop("status", None)
        else:
            new = patched
            if res.has_status:
                if "status" in current:
                    new["status"] = copy.deepcopy(current["status"])
                else:
                    new.pop("status", None)
        meta = new.setdefault("metadata", {})
        old_meta = current["metadata"]
        if meta.get("namespace", old_meta.get("namespace")) != old_meta.get("namespace") or \
                meta.get("name", name) != name:
            raise am.ApiError(400, "BadRequest", "the name or namespace of the object cannot be changed")
        for server_field in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                             "generation", "resourceVersion", "name", "namespace", "managedFields"):
            if server_field in old_meta:
                meta[server_field] = old_meta[server_field]
            else:
                meta.pop(server_field, None)
        if not meta.get("finalizers"):
            meta.pop("finalizers", None)
        new["apiVersion"] = res.api_version
        new["kind"] = res.kind
        new = self._admit(res, new, current, "update", params, warnings,
                          part="status" if subresource == "status" else "main")
        if am.strip_for_compare(new, keep_status=False) != am.strip_for_compare(current, keep_status=False) \
                and subresource != "status":
            new["metadata"]["generation"] = int(old_meta.get("generation", 1)) + 1
        if _same(new, current):
            return current
        if dry_run:
            return new
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers") \
                and not self._pending_graceful(res, new):
            self._commit(res, key, None, current, "DELETED")
            return new
        updated = self._commit(res, key, new, current, "MODIFIED")
        assert updated is not None
        return updated

    # ---------------------------------------------------------------------------------------------------------------
    # Delete and garbage collection

    def _delete_options(self, request: rendering.Request, params: Mapping[str, str]) -> Obj:
        options: Obj = {}
        if isinstance(request.data, dict):
            options.update(request.data)
        if "gracePeriodSeconds" in params:
            options["gracePeriodSeconds"] = int(params["gracePeriodSeconds"])
        if "propagationPolicy" in params:
            options["propagationPolicy"] = params["propagationPolicy"]
        if params.get("orphanDependents") == "true":
            options["propagationPolicy"] = "Orphan"
        return options

    def _pending_graceful(self, res: Resource, obj: Obj) -> bool:
        """A Pod bound to a node stays until the kubelet confirms with grace period 0."""
        if res.store != ("", "pods") or not (obj.get("spec") or {}).get("nodeName"):
            return False
        return int(obj["metadata"].get("deletionGracePeriodSeconds") or 0) > 0

    def _delete(self, res: Resource, namespace: str | None, name: str, options: Mapping[str, Any], *,
                dry_run: bool = False) -> Obj:
        key = (*res.store, namespace or "", name)
        current = self._objects_by_key.get(key)
        if current is None:
            raise am.not_found(res.plural, name, res.group)
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != current["metadata"]["uid"]:
            raise am.conflict(res.plural, name, res.group, f"Precondition failed: UID in precondition: {pre['uid']}, "
                                                            f"UID in object meta: {current['metadata']['uid']}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise am.conflict(res.plural, name, res.group, "Precondition failed: resourceVersion mismatch")
        if dry_run:
            return self._present(res, current)
        policy = options.get("propagationPolicy") or "Background"
        new = copy.deepcopy(current)
        meta = new["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        grace = options.get("gracePeriodSeconds")
        if res.store == ("", "pods") and (new.get("spec") or {}).get("nodeName"):
            if grace is None:
                grace = int((new.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
            if meta.get("deletionTimestamp") and int(grace) != 0 and \
                    int(grace) >= int(meta.get("deletionGracePeriodSeconds") or 0):
                return self._present(res, current)
            meta["deletionGracePeriodSeconds"] = int(grace)
            when = self.clock() + datetime.timedelta(seconds=int(grace))
            meta["deletionTimestamp"] = am.rfc3339(when)
        elif meta.get("deletionTimestamp"):
            return self._present(res, current)
        if policy == "Orphan":
            self._orphan_dependents(current["metadata"]["uid"])
        if policy == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
            meta["finalizers"] = finalizers
        if res.store == ("", "namespaces"):
            new.setdefault("status", {})["phase"] = "Terminating"
            meta.setdefault("deletionTimestamp", am.rfc3339(self.clock()))
            meta["deletionGracePeriodSeconds"] = 0
            self._commit(res, key, new, current, "MODIFIED")
            return self._present(res, new)
        if finalizers or self._pending_graceful(res, new):
            meta.setdefault("deletionTimestamp", am.rfc3339(self.clock()))
            meta.setdefault("deletionGracePeriodSeconds", 0)
            if new == current:
                return self._present(res, current)
            self._commit(res, key, new, current, "MODIFIED")
            return self._present(res, new)
        self._commit(res, key, None, current, "DELETED")
        return self._present(res, current)

    def _delete_collection(self, res: Resource, namespace: str | None, params: Mapping[str, str],
                           options: Mapping[str, Any], dry_run: bool) -> Obj:
        items = [copy.deepcopy(o) for o in self._select(res, namespace, params)]
        for obj in items:
            if (*res.store, obj["metadata"].get("namespace") or "", obj["metadata"]["name"]) \
                    in self._objects_by_key:
                self._delete(res, obj["metadata"].get("namespace"), obj["metadata"]["name"], options,
                             dry_run=dry_run)
        return {"kind": f"{res.kind}List", "apiVersion": res.api_version,
                "metadata": {"resourceVersion": str(self._rv)}, "items": [self._present(res, o) for o in items]}

    def _resource_of_store(self, store: tuple[str, str]) -> Resource:
        candidates = [r for r in self._registry.values() if r.store == store and r.stored_as is None]
        candidates.sort(key=lambda r: _version_priority(r.version))
        return candidates[0]

    def _orphan_dependents(self, owner_uid: str) -> None:
        for key, obj in list(self._objects_by_key.items()):
            refs = obj["metadata"].get("ownerReferences") or []
            if any(r.get("uid") == owner_uid for r in refs):
                new = copy.deepcopy(obj)
                kept = [r for r in refs if r.get("uid") != owner_uid]
                if kept:
                    new["metadata"]["ownerReferences"] = kept
                else:
                    new["metadata"].pop("ownerReferences", None)
                self._commit(self._resource_of_store(key[:2]), key, new, obj, "MODIFIED")

    def _collect_garbage(self) -> None:
        """Delete dependents of vanished owners, finish foreground deletions and terminating namespaces and CRDs.
        Runs synchronously after deletions; loops until nothing changes."""
        if self._gc_running:
            return  # the running collection loops until nothing changes, this write included
        self._gc_running = True
        try:
            for _ in range(100000):
                if not self._gc_pass():
                    return
        finally:
            self._gc_running = False

    def _gc_pass(self) -> bool:
        uids = {o["metadata"]["uid"]: k for k, o in self._objects_by_key.items()}
        for key, obj in list(self._objects_by_key.items()):
            if key not in self._objects_by_key:
                continue
            obj = self._objects_by_key[key]
            meta = obj["metadata"]
            res = self._resource_of_store(key[:2])
            refs = meta.get("ownerReferences") or []
            if refs and not meta.get("deletionTimestamp") and all(r.get("uid") not in uids for r in refs):
                self._delete(res, key[2] or None, key[3], {"propagationPolicy": "Background"})
                return True
            finalizers = meta.get("finalizers") or []
            if meta.get("deletionTimestamp") and "foregroundDeletion" in finalizers:
                blocking = False
                for dkey, dep in list(self._objects_by_key.items()):
                    drefs = dep["metadata"].get("ownerReferences") or []
                    if any(r.get("uid") == meta["uid"] for r in drefs):
                        if not dep["metadata"].get("deletionTimestamp"):
                            self._delete(self._resource_of_store(dkey[:2]), dkey[2] or None, dkey[3],
                                         {"propagationPolicy": "Foreground"})
                            return True
                        if any(r.get("uid") == meta["uid"] and r.get("blockOwnerDeletion") for r in drefs):
                            blocking = True
                if not blocking:
                    new = copy.deepcopy(obj)
                    new["metadata"]["finalizers"] = [f for f in finalizers if f != "foregroundDeletion"]
                    if not new["metadata"]["finalizers"]:
                        self._commit(res, key, None, obj, "DELETED")
                    else:
                        self._commit(res, key, new, obj, "MODIFIED")
                    return True
            if key[:2] == ("", "namespaces") and meta.get("deletionTimestamp"):
                contents = [k for k in self._objects_by_key if k[2] == key[3] and k[:2] != ("", "namespaces")]
                for ckey in contents:
                    cobj = self._objects_by_key[ckey]
                    if not cobj["metadata"].get("deletionTimestamp"):
                        self._delete(self._resource_of_store(ckey[:2]), ckey[2], ckey[3], {})
                        return True
                if not contents:
                    self._commit(res, key, None, obj, "DELETED")
                    return True
            if key[:2] == CRD_RESOURCE and meta.get("deletionTimestamp"):
                spec = obj.get("spec") or {}
                store = (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
                remaining = [k for k in self._objects_by_key if k[:2] == store]
                for ckey in remaining:
                    cobj = self._objects_by_key[ckey]
                    if not cobj["metadata"].get("deletionTimestamp"):
                        self._delete(self._resource_of_store(store), ckey[2] or None, ckey[3], {})
                        return True
                if not remaining and "customresourcecleanup.apiextensions.k8s.io" in finalizers:
                    new = copy.deepcopy(obj)
                    new["metadata"]["finalizers"] = [f for f in finalizers
                                                     if f != "customresourcecleanup.apiextensions.k8s.io"]
                    if not new["metadata"]["finalizers"]:
                        self.unregister(*store)
                        self._commit(res, key, None, obj, "DELETED")
                    else:
                        self._commit(res, key, new, obj, "MODIFIED")
                    return True
        return False

    # ---------------------------------------------------------------------------------------------------------------
    # CRDs

    def _install_crd(self, crd: Obj) -> None:
        spec = crd["spec"]
        names = spec["names"]
        versions = crd_versions(crd)
        self.unregister(spec["group"], names["plural"])
        for ver in versions:
            self.unsupported_rules.extend(f"{names['kind']}/{ver.version}: {u}" for u in ver.unsupported)
            self.register(Resource(
                group=spec["group"], version=ver.version, plural=names["plural"], kind=names["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                singular=names.get("singular") or names["kind"].lower(),
                short_names=tuple(names.get("shortNames") or ()), categories=tuple(names.get("categories") or ()),
                subresources=("status",) if ver.status_subresource else (), crd=ver,
            ))
        wanted_status = {
            "acceptedNames": {k: v for k, v in names.items()},
            "storedVersions": [v["name"] for v in spec["versions"] if v.get("storage")],
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": crd["metadata"]["creationTimestamp"]},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted",
                 "lastTransitionTime": crd["metadata"]["creationTimestamp"]},
            ],
        }
        finalizers = crd["metadata"].get("finalizers") or []
        if crd.get("status") != wanted_status or "customresourcecleanup.apiextensions.k8s.io" not in finalizers:
            new = copy.deepcopy(crd)
            new["status"] = wanted_status
            if "customresourcecleanup.apiextensions.k8s.io" not in finalizers:
                new["metadata"]["finalizers"] = [*finalizers, "customresourcecleanup.apiextensions.k8s.io"]
            key = (CRD_RESOURCE[0], CRD_RESOURCE[1], "", crd["metadata"]["name"])
            self._commit(self._resource_of_store(CRD_RESOURCE), key, new, crd, "MODIFIED")

    # ---------------------------------------------------------------------------------------------------------------
    # Pods: binding (the scheduler's write), eviction, disruption budgets

    def _bind(self, res: Resource, path: ApiPath, body: Obj) -> Obj:
        if res.store != ("", "pods"):
            raise am.ApiError(404, "NotFound", "the server could not find the requested resource")
        pod = self._fetch(res, path.namespace, path.name)
        target = (body.get("target") or {}).get("name")
        if not target:
            raise am.invalid("Binding", path.name or "", "", [am.FieldError("target.name", "Required value")])
        if (pod.get("spec") or {}).get("nodeName"):
            raise am.conflict("pods/binding", path.name or "", "", f"pod {path.name} is already assigned to node "
                                                                   f"\"{pod['spec']['nodeName']}\"")
        new = copy.deepcopy(pod)
        new["spec"]["nodeName"] = target
        new.setdefault("status", {}).setdefault("conditions", []).append(
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": am.rfc3339(self.clock())})
        key = (*res.store, path.namespace or "", path.name or "")
        self._commit(res, key, new, pod, "MODIFIED")
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _evict(self, res: Resource, path: ApiPath, body: Obj) -> Obj:
        if res.store != ("", "pods"):
            raise am.ApiError(404, "NotFound", "the server could not find the requested resource")
        pod = self._fetch(res, path.namespace, path.name)
        if not pod["metadata"].get("deletionTimestamp"):
            for pdb in self._pdbs_for(pod):
                status = pdb.get("status") or {}
                healthy = _pod_ready(pod)
                if (healthy and int(status.get("disruptionsAllowed", 0)) <= 0) or (
                        not healthy and int(status.get("currentHealthy", 0)) < int(status.get("desiredHealthy", 0))):
                    raise am.ApiError(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's "
                                                              "disruption budget.",
                                      {"causes": [{"reason": "DisruptionBudget",
                                                   "message": f"The disruption budget {pdb['metadata']['name']} "
                                                              f"needs {status.get('desiredHealthy', 0)} healthy "
                                                              f"pods and has {status.get('currentHealthy', 0)} "
                                                              f"currently"}]})
        options = (body.get("deleteOptions") or {}) if isinstance(body, dict) else {}
        self._delete(res, path.namespace, path.name or "", options)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    async def _pod_log(self, path: ApiPath, params: Mapping[str, str]) -> aiohttp.web.StreamResponse:
        """``pods/{name}/log``: proxied, as the real API server does, to the kubelet of the Pod's node, whose
        endpoint the fixture records on its Node object (annotation ``KUBELET_ENDPOINT``)."""
        res = self.lookup_resource("", "v1", "pods")
        pod = self._fetch(res, path.namespace, path.name)
        node_name = (pod.get("spec") or {}).get("nodeName")
        node = self._objects_by_key.get(("", "nodes", "", node_name or ""))
        endpoint = ((node or {}).get("metadata", {}).get("annotations") or {}).get(KUBELET_ENDPOINT)
        if not endpoint:
            raise am.ApiError(400, "BadRequest", f'pod "{path.name}" has no kubelet to read logs from '
                                                 f"(node {node_name or 'none'})")
        containers = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
        container = params.get("container") or (containers[0] if len(containers) == 1 else "")
        if not container:
            raise am.ApiError(400, "BadRequest", f"a container name must be specified for pod {path.name}, "
                                                 f"choose one of: {containers}")
        query = {k: v for k, v in params.items() if k in ("tailLines", "previous")}
        async with aiohttp.ClientSession() as session, session.get(
                f"{endpoint}/containerLogs/{path.namespace}/{path.name}/{container}", params=query,
                timeout=aiohttp.ClientTimeout(total=30)) as resp:
            text = await resp.text()
            if resp.status != 200:
                raise am.ApiError(resp.status, "BadRequest", text.strip())
        return aiohttp.web.Response(text=text, content_type="text/plain")

    def _pdbs_for(self, pod: Obj) -> list[Obj]:
        ns = pod["metadata"].get("namespace", "")
        out = []
        for (g, p, pns, _n), pdb in self._objects_by_key.items():
            if (g, p) == ("policy", "poddisruptionbudgets") and pns == ns:
                reqs = am.selector_from_match_labels((pdb.get("spec") or {}).get("selector"))
                if reqs and am.labels_match(reqs, pod["metadata"].get("labels")):
                    out.append(pdb)
        return out

    def _refresh_pdbs(self, namespace: str) -> None:
        pods = [o for (g, p, ns, _n), o in self._objects_by_key.items() if (g, p) == ("", "pods") and ns == namespace]
        for key, pdb in list(self._objects_by_key.items()):
            if key[:2] != ("policy", "poddisruptionbudgets") or key[2] != namespace:
                continue
            spec = pdb.get("spec") or {}
            reqs = am.selector_from_match_labels(spec.get("selector"))
            selected = [p for p in pods if reqs and am.labels_match(reqs, p["metadata"].get("labels"))
                        and not p["metadata"].get("deletionTimestamp")]
            expected = len(selected)
            healthy = sum(1 for p in selected if _pod_ready(p))
            if "minAvailable" in spec:
                desired = _scaled(spec["minAvailable"], expected, round_up=True)
            elif "maxUnavailable" in spec:
                desired = max(0, expected - _scaled(spec["maxUnavailable"], expected, round_up=True))
            else:
                desired = expected
            status = {"observedGeneration": pdb["metadata"].get("generation", 1), "currentHealthy": healthy,
                      "desiredHealthy": desired, "expectedPods": expected,
                      "disruptionsAllowed": max(0, healthy - desired),
                      "conditions": [{"type": "DisruptionAllowed",
                                      "status": "True" if healthy - desired > 0 else "False",
                                      "reason": "SufficientPods" if healthy - desired > 0 else "InsufficientPods",
                                      "message": "", "observedGeneration": pdb["metadata"].get("generation", 1),
                                      "lastTransitionTime": pdb["metadata"]["creationTimestamp"]}]}
            old_status = pdb.get("status") or {}
            if {k: v for k, v in old_status.items() if k != "conditions"} != \
                    {k: v for k, v in status.items() if k != "conditions"}:
                new = copy.deepcopy(pdb)
                new["status"] = status
                self._commit(self._resource_of_store(key[:2]), key, new, pdb, "MODIFIED")


def _default_manager(user_agent: str | None) -> str:
    """The manager of a write that names no ``fieldManager``: the client's user agent up to the first '/', as the
    API server does."""
    return (user_agent or "unknown").split("/")[0] or "unknown"


def _same(a: Obj, b: Obj) -> bool:
    strip = ("resourceVersion", "generation")
    am_ = {k: v for k, v in a.get("metadata", {}).items() if k not in strip}
    bm_ = {k: v for k, v in b.get("metadata", {}).items() if k not in strip}
    return am_ == bm_ and {k: v for k, v in a.items() if k != "metadata"} == \
        {k: v for k, v in b.items() if k != "metadata"}


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _scaled(value: int | str, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        pct = int(value[:-1])
        whole, rest = divmod(pct * total, 100)
        return whole + (1 if rest and round_up else 0)
    return int(value)


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes' version ordering: GA > beta > alpha, then higher numbers first."""
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0)
    stage = {"": 0, "beta": 1, "alpha": 2}[m.group(2) or ""]
    return (stage, -int(m.group(1)), -int(m.group(3) or 0))


# ---------------------------------------------------------------------------------------------------------------------
# Serving helpers


@contextlib.asynccontextmanager
async def serving(api: EmulatedAPIServer | None = None, host: str = "127.0.0.1") -> AsyncIterator[
        tuple[EmulatedAPIServer, str]]:
    """Serve an emulator in the running event loop; yields ``(api, url)``."""
    api = EmulatedAPIServer() if api is None else api
    async with api, kmock.Server(api, host=host) as server:
        try:
            yield api, str(server.url).rstrip("/")
        finally:
            api.close_watches()


def write_kubeconfig(path: Path, url: str, namespace: str = "default", token: str | None = None) -> Path:
    """A kubeconfig for kubectl, helm and the kubernetes client pointing at ``url`` (with ``token`` as the bearer
    token when given: an emulator with RBAC enabled)."""
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "emulated",
        "clusters": [{"name": "emulated", "cluster": {"server": url}}],
        "users": [{"name": "emulated", "user": {"token": token} if token else {}}],
        "contexts": [{"name": "emulated", "context": {"cluster": "emulated", "user": "emulated",
                                                      "namespace": namespace}}],
        "preferences": {},
    }
    path.write_text(yaml.safe_dump(config))
    return path


class ThreadedAPIServer:
    """The emulator on its own thread and event loop, for synchronous code (kubectl, helm, the kubelet fixture's
    processes): ``with ThreadedAPIServer() as api: api.url ...``. ``call(fn)`` runs ``fn(emulator)`` on the
    server's loop and returns its result (the emulator is not thread-safe; never touch it from another thread)."""

    def __init__(self, api: EmulatedAPIServer | None = None) -> None:
        self.api = EmulatedAPIServer() if api is None else api
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="emulated-apiserver", daemon=True)
        self._stop: asyncio.Event | None = None
        self._serving: Any = None

    def __enter__(self) -> ThreadedAPIServer:
        self._thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    async def _start(self) -> str:
        self._serving = serving(self.api)
        _api, url = await self._serving.__aenter__()
        return url

    def __exit__(self, *exc: object) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self._serving.__aexit__(None, None, None), self._loop).result(30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
            self._loop.close()

    def call(self, fn: Callable[[EmulatedAPIServer], Any]) -> Any:
        async def run() -> Any:
            return fn(self.api)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=30)

    def wait_for(self, predicate: Callable[[EmulatedAPIServer], Any], timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(
            self.api.wait_for(lambda: predicate(self.api), timeout), self._loop).result(timeout + 5)

    def objects(self, api_version: str, kind: str, namespace: str | None = None) -> list[Obj]:
        return self.call(lambda api: api.list_objects(api_version, kind, namespace))

    def put_object(self, obj: Mapping[str, Any]) -> Obj:
        return self.call(lambda api: api.put_object(obj))

    def call_delete(self, api_version: str, kind: str, name: str, namespace: str | None = None,
                    options: Mapping[str, Any] | None = None) -> Obj:
        return self.call(lambda api: api.call_delete(api_version, kind, name, namespace, options))

    def patch_object(self, api_version: str, kind: str, name: str, namespace: str | None, patch: Mapping[str, Any],
                     subresource: str | None = None) -> Obj:
        return self.call(
            lambda api: api.patch_object(api_version, kind, name, namespace, patch, subresource))

    def get_object(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        return self.call(lambda api: api.get_object(api_version, kind, name, namespace))


def iter_yaml_documents(text: str) -> Iterator[Obj]:
    for doc in yaml.safe_load_all(text):
        if isinstance(doc, dict) and doc:
            yield doc
