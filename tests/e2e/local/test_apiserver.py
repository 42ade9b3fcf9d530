"""The emulated API server answers as a real one does, for the behaviours the operator, kopf, kubectl and helm use.

Every test talks HTTP to a served emulator (aiohttp, or the official ``kubernetes`` client), never to its internals,
except to set up state the way ``kubectl create`` would.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kubernetes
import pytest

from tests.e2e.local.apiserver import EmulatedAPIServer, ThreadedAPIServer, parse_api_path, serving
from tests.e2e.local.test_crdschema import CRD

CM = "/api/v1/namespaces/default/configmaps"
PODS = "/api/v1/namespaces/default/pods"
WIDGETS = "/apis/example.test/v1alpha1/namespaces/default/widgets"
MERGE = {"Content-Type": "application/merge-patch+json"}
JSONPATCH = {"Content-Type": "application/json-patch+json"}
STRATEGIC = {"Content-Type": "application/strategic-merge-patch+json"}
APPLY = {"Content-Type": "application/apply-patch+yaml"}


class Client:
    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url = url
        self.session = session

    async def call(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
                   params: dict[str, str] | None = None) -> tuple[int, Any]:
        data = None if body is None else (body if isinstance(body, str) else json.dumps(body))
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        async with self.session.request(method, self.url + path, data=data, headers=hdrs, params=params) as resp:
            text = await resp.text()
            return resp.status, json.loads(text) if text else None

    async def ok(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
                 params: dict[str, str] | None = None) -> Any:
        status, out = await self.call(method, path, body, headers, params)
        assert status in (200, 201), (status, out)
        return out


@pytest.fixture
async def api() -> AsyncIterator[tuple[EmulatedAPIServer, Client]]:
    async with serving() as (emulator, url), aiohttp.ClientSession() as session:
        yield emulator, Client(url, session)
        assert emulator.internal_errors == []


def cm(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels or {}},
            "data": data}


def pod(name: str, labels: dict[str, str] | None = None, image: str = "img:1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "main", "image": image, "command": ["sleep", "1"]}]}}


def test_path_parsing() -> None:
    p = parse_api_path("/api/v1/namespaces")
    assert p is not None and (p.plural, p.name, p.namespace) == ("namespaces", None, None)
    p = parse_api_path("/api/v1/namespaces/ns1")
    assert p is not None and (p.plural, p.name) == ("namespaces", "ns1")
    p = parse_api_path("/api/v1/namespaces/ns1/status")
    assert p is not None and (p.plural, p.name, p.subresource) == ("namespaces", "ns1", "status")
    p = parse_api_path("/api/v1/namespaces/ns1/pods/p/status")
    assert p is not None and (p.namespace, p.plural, p.name, p.subresource) == ("ns1", "pods", "p", "status")
    p = parse_api_path("/apis/ozone.apache.org/v1alpha1/namespaces/x/ozonescmclusters")
    assert p is not None and (p.group, p.version, p.plural) == ("ozone.apache.org", "v1alpha1", "ozonescmclusters")
    assert parse_api_path("/version") is None


async def test_discovery_says_v1_and_registers_crds(api: tuple[EmulatedAPIServer, Client]) -> None:
    _emu, c = api
    core = await c.ok("GET", "/api/v1")
    assert core["groupVersion"] == "v1"
    assert any(r["name"] == "pods" and r["namespaced"] for r in core["resources"])
    assert any(r["name"] == "pods/status" for r in core["resources"])
    assert (await c.ok("GET", "/version"))["minor"] == "35"
    status, _ = await c.call("GET", "/apis/example.test/v1alpha1")
    assert status == 404
    await c.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)
    group = await c.ok("GET", "/apis/example.test")
    assert group["preferredVersion"]["groupVersion"] == "example.test/v1alpha1"
    res = await c.ok("GET", "/apis/example.test/v1alpha1")
    widgets = next(r for r in res["resources"] if r["name"] == "widgets")
    assert widgets["kind"] == "Widget" and widgets["shortNames"] == ["wdg"] and widgets["namespaced"]
    assert any(r["name"] == "widgets/status" for r in res["resources"])
    apis = await c.ok("GET", "/apis")
    assert "example.test" in [g["name"] for g in apis["groups"]]
    crd = await c.ok("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.test")
    assert {cond["type"]: cond["status"] for cond in crd["status"]["conditions"]}["Established"] == "True"
    listing = await c.ok("GET", "/api/v1/namespaces")
    assert listing["kind"] == "NamespaceList" and listing["apiVersion"] == "v1"
    assert "default" in [n["metadata"]["name"] for n in listing["items"]]


async def test_create_fills_server_fields_and_refuses_duplicates(api: tuple[EmulatedAPIServer, Client]) -> None:
    _emu, c = api
    status, created = await c.call("POST", CM, cm("a", x="1"))
    assert status == 201
    meta = created["metadata"]
    assert meta["namespace"] == "default" and meta["uid"] and meta["creationTimestamp"] and meta["generation"] == 1
    assert int(meta["resourceVersion"]) > 0
    assert created["kind"] == "ConfigMap" and created["apiVersion"] == "v1"
    status, body = await c.call("POST", CM, cm("a"))
    assert (status, body["reason"]) == (409, "AlreadyExists")
    status, body = await c.call("POST", "/api/v1/namespaces/nope/configmaps", cm("a"))
    assert status == 404 and body["message"] == 'namespaces "nope" not found'
    status, gen = await c.call("POST", CM, {"metadata": {"generateName": "scm-"}, "data": {}})
    assert status == 201 and gen["metadata"]["name"].startswith("scm-") and len(gen["metadata"]["name"]) == 9
    status, body = await c.call("POST", CM, cm("Bad_Name"))
    assert status == 422 and "metadata.name" in body["message"]
    status, body = await c.call("POST", CM, {"metadata": {}})
    assert status == 422


async def test_resource_version_conflicts_and_no_op_writes(api: tuple[EmulatedAPIServer, Client]) -> None:
    _emu, c = api
    created = await c.ok("POST", CM, cm("a", x="1"))
    rv0 = created["metadata"]["resourceVersion"]
    patched = await c.ok("PATCH", f"{CM}/a", {"data": {"x": "2"}}, MERGE)
    rv1 = patched["metadata"]["resourceVersion"]
    assert int(rv1) > int(rv0)
    status, body = await c.call("PATCH", f"{CM}/a", {"metadata": {"resourceVersion": rv0}, "data": {"x": "3"}},
                                MERGE)
    assert (status, body["reason"]) == (409, "Conflict")
    ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": rv0},
           {"op": "replace", "path": "/data/x", "value": "4"}]
    status, body = await c.call("PATCH", f"{CM}/a", ops, JSONPATCH)
    assert status == 422
    ops[0]["value"] = rv1
    assert (await c.ok("PATCH", f"{CM}/a", ops, JSONPATCH))["data"]["x"] == "4"
    current = await c.ok("GET", f"{CM}/a")
    same = await c.ok("PATCH", f"{CM}/a", {"data": {"x": "4"}}, MERGE)
    assert same["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]
    stale = copy.deepcopy(current)
    stale["metadata"]["resourceVersion"] = rv0
    status, _ = await c.call("PUT", f"{CM}/a", stale)
    assert status == 409
    current["data"] = {"y": "5"}
    replaced = await c.ok("PUT", f"{CM}/a", current)
    assert replaced["data"] == {"y": "5"}
    status, _ = await c.call("PUT", f"{CM}/missing", cm("missing"))
    assert status == 404


async def test_generation_and_status_subresource(api: tuple[EmulatedAPIServer, Client]) -> None:
    _emu, c = api
    await c.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)
    w = await c.ok("POST", WIDGETS, {"apiVersion": "example.test/v1alpha1", "kind": "Widget",
                                     "metadata": {"name": "w"}, "spec": {"image": "i"},
                                     "status": {"phase": "ignored"}})
    assert w["metadata"]["generation"] == 1 and "status" not in w
    assert w["spec"]["replicas"] == 3  # schema default
    w = await c.ok("PATCH", f"{WIDGETS}/w/status", {"status": {"phase": "Running"}, "spec": {"replicas": 5}},
                   MERGE)
    assert w["status"] == {"phase": "Running"} and w["spec"]["replicas"] == 3 and w["metadata"]["generation"] == 1
    w = await c.ok("PATCH", f"{WIDGETS}/w", {"metadata": {"labels": {"a": "b"}}, "status": {"phase": "x"}}, MERGE)
    assert w["metadata"]["generation"] == 1 and w["status"] == {"phase": "Running"}
    w = await c.ok("PATCH", f"{WIDGETS}/w", {"spec": {"replicas": 5}}, MERGE)
    assert w["metadata"]["generation"] == 2
    status, body = await c.call("PATCH", f"{WIDGETS}/w", {"spec": {"replicas": 2}}, MERGE)
    assert status == 422
    assert body["message"].startswith('Widget.example.test "w" is invalid: ')
    assert "spec.replicas: Invalid value: 2: replicas must be 1, 3 or 5" in body["message"]
    status, body = await c.call("PATCH", f"{WIDGETS}/w", {"spec": {"replicas": 3}}, STRATEGIC)
    assert status == 415
    status, body = await c.call("POST", WIDGETS, {"metadata": {"name": "w2"}, "spec": {"image": "i", "bogus": 1}},
                                params={"fieldValidation": "Strict"})
    assert status == 400 and 'unknown field "spec.bogus"' in body["message"]
    status, body = await c.call("POST", WIDGETS, {"metadata": {"name": "w2"}, "spec": {"image": "i", "bogus": 1}})
    assert status == 201 and "bogus" not in body["spec"]


async def test_list_selectors_and_pagination(api: tuple[EmulatedAPIServer, Client]) -> None:
    _emu, c = api
    for n in range(5):
        await c.ok("POST", CM, cm(f"c{n}", {"app": "scm" if n % 2 else "om", "i": str(n)}))
    got = await c.ok("GET", CM, params={"labelSelector": "app=scm"})
    assert [i["metadata"]["name"] for i in got["items"]] == ["c1", "c3"]
    got = await c.ok("GET", CM, params={"labelSelector": "app in (scm,om),i notin (0,1)"})
    assert [i["metadata"]["name"] for i in got["items"]] == ["c2", "c3", "c4"]
    got = await c.ok("GET", CM, params={"fieldSelector": "metadata.name=c4"})
    assert [i["metadata"]["name"] for i in got["items"]] == ["c4"]
    page = await c.ok("GET", CM, params={"limit": "2"})
    names = [i["metadata"]["name"] for i in page["items"]]
    while page["metadata"].get("continue"):
        page = await c.ok("GET", CM, params={"limit": "2", "continue": page["metadata"]["continue"]})
        names += [i["metadata"]["name"] for i in page["items"]]
    assert names == ["c0", "c1", "c2", "c3", "c4"]
    everywhere = await c.ok("GET", "/api/v1/configmaps")
    assert len(everywhere["items"]) == 5


async def _watch(c: Client, path: str, params: dict[str, str], count: int) -> list[tuple[str, str]]:
    events: list[tuple[str, str]] = []
    async with c.session.get(c.url + path, params={"watch": "true", **params}) as resp:
        assert resp.status == 200
        async for line in resp.content:
            ev = json.loads(line)
            events.append((ev["type"], ev["object"]["metadata"].get("name", "")))
            if len(events) >= count:
                break
    return events


async def test_watch_resumes_from_a_version_and_follows_selectors(api: tuple[EmulatedAPIServer, Client]) -> None:
    emu, c = api
    first = await c.ok("POST", CM, cm("a", {"app": "scm"}))
    await c.ok("POST", CM, cm("b", {"app": "om"}))
    # Without a version: synthetic ADDED for what exists and matches.
    assert await _watch(c, CM, {"labelSelector": "app=scm", "timeoutSeconds": "1"}, 10) == [("ADDED", "a")]
    # From a version: the history since then, with selector transitions.
    since = first["metadata"]["resourceVersion"]
    await c.ok("PATCH", f"{CM}/b", {"metadata": {"labels": {"app": "scm"}}}, MERGE)  # enters the selector
    await c.ok("PATCH", f"{CM}/a", {"metadata": {"labels": {"app": "om"}}}, MERGE)  # leaves it
    await c.ok("DELETE", f"{CM}/b")
    events = await _watch(c, CM, {"labelSelector": "app=scm", "resourceVersion": since, "timeoutSeconds": "1"}, 10)
    assert events == [("ADDED", "b"), ("DELETED", "a"), ("DELETED", "b")]
    # Live events arrive on an open stream.
    task = asyncio.create_task(_watch(c, CM, {"resourceVersion": str(emu.resource_version)}, 1))
    await asyncio.sleep(0)
    await c.ok("POST", CM, cm("live"))
    assert await asyncio.wait_for(task, 10) == [("ADDED", "live")]


async def test_watch_from_a_compacted_version_is_gone() -> None:
    emulator = EmulatedAPIServer(event_log_size=3)
    async with serving(emulator) as (_emu, url), aiohttp.ClientSession() as session:
        c = Client(url, session)
        first = await c.ok("POST", CM, cm("a"))
        for n in range(5):
            await c.ok("PATCH", f"{CM}/a", {"data": {"n": str(n)}}, MERGE)
        status, body = await c.call("GET", CM, params={"watch": "true",
                                                        "resourceVersion": first["metadata"]["resourceVersion"]})
        assert (status, body["reason"]) == (410, "Expired")


async def test_watch_bookmarks_and_initial_events_end(api: tuple[EmulatedAPIServer, Client]) -> None:
    _emu, c = api
    await c.ok("POST", CM, cm("a"))
    async with c.session.get(c.url + CM, params={"watch": "true", "sendInitialEvents": "true",
                                                 "resourceVersionMatch": "NotOlderThan",
                                                 "allowWatchBookmarks": "true", "timeoutSeconds": "1"}) as resp:
        events = [json.loads(line) async for line in resp.content]
    assert events[0]["type"] == "ADDED"
    assert events[1]["type"] == "BOOKMARK"
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_finalizers_and_garbage_collection(api: tuple[EmulatedAPIServer, Client]) -> None:
    _emu, c = api
    owner = await c.ok("POST", CM, {**cm("owner"), "metadata": {"name": "owner", "finalizers": ["x/y"]}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"],
           "controller": True, "blockOwnerDeletion": True}
    await c.ok("POST", CM, {"metadata": {"name": "child", "ownerReferences": [ref]}})
    await c.ok("POST", CM, {"metadata": {"name": "grandchild", "ownerReferences": [
        {**ref, "name": "child", "uid": (await c.ok("GET", f"{CM}/child"))["metadata"]["uid"]}]}})
    deleting = await c.ok("DELETE", f"{CM}/owner")
    assert deleting["metadata"]["deletionTimestamp"]
    assert (await c.call("GET", f"{CM}/child"))[0] == 200  # owner still exists (finalizer)
    status, body = await c.call("PATCH", f"{CM}/owner", {"metadata": {"finalizers": ["x/y", "new"]}}, MERGE)
    assert status == 422 and "no new finalizers" in body["message"]
    await c.ok("PATCH", f"{CM}/owner", {"metadata": {"finalizers": None}}, MERGE)
    for name in ("owner", "child", "grandchild"):
        assert (await c.call("GET", f"{CM}/{name}"))[0] == 404


async def test_orphan_and_foreground_propagation(api: tuple[EmulatedAPIServer, Client]) -> None:
    _emu, c = api

    async def family(name: str) -> None:
        owner = await c.ok("POST", CM, cm(name))
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": owner["metadata"]["uid"],
               "blockOwnerDeletion": True}
        await c.ok("POST", CM, {"metadata": {"name": f"{name}-child", "ownerReferences": [ref],
                                             "finalizers": ["hold"]}})

    await family("o")
    await c.ok("DELETE", f"{CM}/o", {"propagationPolicy": "Orphan"})
    child = await c.ok("GET", f"{CM}/o-child")
    assert "ownerReferences" not in child["metadata"]
    await family("f")
    await c.ok("DELETE", f"{CM}/f", {"propagationPolicy": "Foreground"})
    owner = await c.ok("GET", f"{CM}/f")
    assert "foregroundDeletion" in owner["metadata"]["finalizers"]  # waits for the blocking child
    assert (await c.ok("GET", f"{CM}/f-child"))["metadata"]["deletionTimestamp"]
    await c.ok("PATCH", f"{CM}/f-child", {"metadata": {"finalizers": None}}, MERGE)
    assert (await c.call("GET", f"{CM}/f"))[0] == 404


async def test_namespace_deletion_removes_its_contents(api: tuple[EmulatedAPIServer, Client]) -> None:
    _emu, c = api
    await c.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "team"}})
    await c.ok("POST", "/api/v1/namespaces/team/configmaps", cm("a"))
    await c.ok("DELETE", "/api/v1/namespaces/team")
    assert (await c.call("GET", "/api/v1/namespaces/team"))[0] == 404
    assert (await c.ok("GET", "/api/v1/configmaps"))["items"] == []


async def test_crd_deletion_removes_custom_resources(api: tuple[EmulatedAPIServer, Client]) -> None:
    _emu, c = api
    await c.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)
    await c.ok("POST", WIDGETS, {"metadata": {"name": "w"}, "spec": {"image": "i"}})
    await c.ok("DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.test")
    assert (await c.call("GET", WIDGETS))[0] == 404


async def test_pods_immutability_binding_and_graceful_deletion(api: tuple[EmulatedAPIServer, Client]) -> None:
    _emu, c = api
    created = await c.ok("POST", PODS, pod("p"))
    assert created["status"]["phase"] == "Pending"
    assert created["spec"]["restartPolicy"] == "Always"
    status, body = await c.call("PATCH", f"{PODS}/p", {"spec": {"containers": [
        {"name": "main", "command": ["other"]}]}}, STRATEGIC)
    assert status == 422 and "pod updates may not change fields" in body["message"]
    updated = await c.ok("PATCH", f"{PODS}/p", {"spec": {"containers": [{"name": "main", "image": "img:2"}]}},
                         STRATEGIC)
    assert updated["spec"]["containers"][0]["image"] == "img:2"
    assert updated["spec"]["containers"][0]["command"] == ["sleep", "1"]
    await c.ok("POST", f"{PODS}/p/binding", {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
                                             "target": {"kind": "Node", "name": "node-1"}})
    assert (await c.ok("GET", f"{PODS}/p"))["spec"]["nodeName"] == "node-1"
    status, _ = await c.call("POST", f"{PODS}/p/binding", {"target": {"name": "node-2"}})
    assert status == 409
    terminating = await c.ok("DELETE", f"{PODS}/p", {"gracePeriodSeconds": 5})
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 5
    assert (await c.call("GET", f"{PODS}/p"))[0] == 200  # the kubelet has not confirmed yet
    await c.ok("DELETE", f"{PODS}/p", {"gracePeriodSeconds": 0})
    assert (await c.call("GET", f"{PODS}/p"))[0] == 404
    await c.ok("POST", PODS, pod("unbound"))
    await c.ok("DELETE", f"{PODS}/unbound")  # not on a node: gone at once
    assert (await c.call("GET", f"{PODS}/unbound"))[0] == 404


async def test_eviction_honours_disruption_budgets(api: tuple[EmulatedAPIServer, Client]) -> None:
    _emu, c = api
    for n in range(3):
        await c.ok("POST", PODS, pod(f"scm-{n}", {"app": "scm"}))
        await c.ok("PATCH", f"{PODS}/scm-{n}/status", {"status": {"conditions": [
            {"type": "Ready", "status": "True"}]}}, MERGE)
    await c.ok("POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets", {
        "metadata": {"name": "scm"}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "scm"}}}})
    pdb = await c.ok("GET", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/scm")
    assert pdb["status"]["disruptionsAllowed"] == 1 and pdb["status"]["currentHealthy"] == 3
    await c.ok("PATCH", f"{PODS}/scm-2/status", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
               MERGE)
    status, body = await c.call("POST", f"{PODS}/scm-0/eviction", {"apiVersion": "policy/v1", "kind": "Eviction",
                                                                    "metadata": {"name": "scm-0"}})
    assert (status, body["reason"]) == (429, "TooManyRequests")
    await c.ok("PATCH", f"{PODS}/scm-2/status", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
               MERGE)
    status, _ = await c.call("POST", f"{PODS}/scm-0/eviction", {"metadata": {"name": "scm-0"}})
    assert status == 201
    assert (await c.call("GET", f"{PODS}/scm-0"))[0] == 404


async def test_server_side_apply_creates_updates_and_removes(api: tuple[EmulatedAPIServer, Client]) -> None:
    _emu, c = api
    doc = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {x: '1', y: '2'}\ndata:\n  k: v\n"
    status, _ = await c.call("PATCH", f"{CM}/a", doc, APPLY)
    assert status == 400  # fieldManager is required
    status, created = await c.call("PATCH", f"{CM}/a", doc, APPLY, {"fieldManager": "helm"})
    assert status == 201 and created["metadata"]["labels"] == {"x": "1", "y": "2"}
    await c.ok("PATCH", f"{CM}/a", {"metadata": {"labels": {"other": "kept"}}}, MERGE)
    doc2 = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {x: '1'}\ndata:\n  k: w\n"
    updated = await c.ok("PATCH", f"{CM}/a", doc2, APPLY, {"fieldManager": "helm"})
    assert updated["metadata"]["labels"] == {"x": "1", "other": "kept"}
    assert updated["data"] == {"k": "w"}


async def test_table_output_for_kubectl(api: tuple[EmulatedAPIServer, Client]) -> None:
    _emu, c = api
    crd = copy.deepcopy(CRD)
    crd["spec"]["versions"][0]["additionalPrinterColumns"] = [
        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"}]
    await c.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    await c.ok("POST", WIDGETS, {"metadata": {"name": "w"}, "spec": {"image": "i"}})
    table = await c.ok("GET", WIDGETS, headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    assert table["kind"] == "Table"
    assert [col["name"] for col in table["columnDefinitions"]] == ["Name", "Replicas", "Phase", "Age"]
    assert table["rows"][0]["cells"][:3] == ["w", 3, None]


async def test_builtin_kinds_are_schema_checked(api: tuple[EmulatedAPIServer, Client]) -> None:
    _emu, c = api
    bad = pod("p")
    bad["spec"]["containers"][0]["image"] = 5
    status, body = await c.call("POST", PODS, bad)
    assert status == 422 and "spec.containers[0].image" in body["message"]
    odd = pod("q")
    odd["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    status, body = await c.call("POST", PODS, odd, params={"fieldValidation": "Strict"})
    assert status == 400 and "imagePullPolicyy" in body["message"]
    secret = await c.ok("POST", "/api/v1/namespaces/default/secrets", {"metadata": {"name": "s"},
                                                                         "stringData": {"k": "v"}})
    assert secret["data"] == {"k": "dg=="} and "stringData" not in secret


def test_the_official_client_and_threaded_server() -> None:
    with ThreadedAPIServer() as srv:
        cfg = kubernetes.client.Configuration()
        cfg.host = srv.url
        core = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(cfg))
        created = core.create_namespaced_config_map("default", cm("a", x="1"))  # type: ignore[arg-type]
        assert created.metadata is not None and created.metadata.uid
        with pytest.raises(kubernetes.client.ApiException) as err:
            core.create_namespaced_config_map("default", cm("a"))  # type: ignore[arg-type]
        assert err.value.status == 409
        seen = [ev["object"].metadata.name for ev in kubernetes.watch.Watch().stream(
            core.list_namespaced_config_map, "default", timeout_seconds=1)]
        assert seen == ["a"]
        stored = srv.get_object("v1", "ConfigMap", "a", "default")
        assert stored is not None and stored["data"] == {"x": "1"}
        assert srv.api.internal_errors == []


async def test_pod_security_admission_enforces_the_namespace_level(api: tuple[EmulatedAPIServer, Client]) -> None:
    _emu, c = api
    await c.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "strict", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    await c.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "base", "labels": {"pod-security.kubernetes.io/enforce": "baseline"}}})
    plain = pod("p")
    status, body = await c.call("POST", "/api/v1/namespaces/strict/pods", plain)
    assert status == 403 and body["reason"] == "Forbidden"
    assert 'violates PodSecurity "restricted:latest"' in body["message"]
    assert "allowPrivilegeEscalation" in body["message"] and "seccompProfile" in body["message"]
    await c.ok("POST", "/api/v1/namespaces/base/pods", pod("p"))  # baseline takes a plain Pod
    await c.ok("POST", PODS, pod("p"))  # and an unlabelled namespace anything
    host = pod("h")
    host["spec"]["hostNetwork"] = True
    status, body = await c.call("POST", "/api/v1/namespaces/base/pods", host)
    assert status == 403 and "hostNetwork" in body["message"]
    good = pod("g")
    good["spec"]["securityContext"] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    good["spec"]["containers"][0]["securityContext"] = {"allowPrivilegeEscalation": False,
                                                        "capabilities": {"drop": ["ALL"]}}
    await c.ok("POST", "/api/v1/namespaces/strict/pods", good)


EVENTS_V1 = "/apis/events.k8s.io/v1/namespaces/default/events"
CORE_EVENTS = "/api/v1/namespaces/default/events"


def event_v1(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"generateName": "scm-"},
        "eventTime": "2026-11-27T10:00:00.000001Z", "reportingController": "ozone-scm.io/operator",
        "reportingInstance": "operator-a", "action": "CreatePod", "reason": "CreatingPod",
        "regarding": {"apiVersion": "ozone-scm.io/v1alpha1", "kind": "OzoneSCMCluster", "name": "scm",
                      "namespace": "default", "uid": "u-1"},
        "note": "creating Pod scm-0", "type": "Normal",
    }
    body.update(overrides)
    return body


async def test_events_v1_are_core_events_seen_through_another_api(api: tuple[EmulatedAPIServer, Client]) -> None:
    """An Event posted through events.k8s.io/v1 is listed and watched through both APIs, converted field by field
    as a real server converts it (note = message, regarding = involvedObject, reportingController =
    reportingComponent); a repeat is counted with a merge patch of ``series``."""
    _, c = api
    watch = await c.session.get(c.url + EVENTS_V1, params={"watch": "true", "resourceVersion": "1"})
    created = await c.ok("POST", EVENTS_V1, event_v1())
    name = created["metadata"]["name"]
    assert name.startswith("scm-") and created["apiVersion"] == "events.k8s.io/v1" and created["note"] == \
        "creating Pod scm-0"
    core = (await c.ok("GET", CORE_EVENTS))["items"]
    assert len(core) == 1
    assert core[0]["apiVersion"] == "v1" and core[0]["metadata"]["name"] == name
    assert core[0]["message"] == "creating Pod scm-0" and core[0]["involvedObject"]["name"] == "scm"
    assert core[0]["reportingComponent"] == "ozone-scm.io/operator" and core[0]["action"] == "CreatePod"
    # kubectl describe's query
    selected = await c.ok("GET", CORE_EVENTS, params={"fieldSelector": "involvedObject.name=scm,involvedObject.uid=u-1"})
    assert [e["metadata"]["name"] for e in selected["items"]] == [name]
    patched = await c.ok("PATCH", f"{EVENTS_V1}/{name}",
                         {"series": {"count": 2, "lastObservedTime": "2026-11-27T10:00:05.000001Z"}}, MERGE)
    assert patched["series"] == {"count": 2, "lastObservedTime": "2026-11-27T10:00:05.000001Z"}
    assert patched["note"] == "creating Pod scm-0" and "message" not in patched
    core_one = await c.ok("GET", f"{CORE_EVENTS}/{name}")
    assert core_one["series"]["count"] == 2
    seen = []
    async with watch:
        async for line in watch.content:
            seen.append(json.loads(line))
            if len(seen) == 2:
                break
    assert [(e["type"], e["object"]["apiVersion"], (e["object"].get("series") or {}).get("count")) for e in seen] == \
        [("ADDED", "events.k8s.io/v1", None), ("MODIFIED", "events.k8s.io/v1", 2)]
    # and the other way round: a core Event (the kubelet's) through events.k8s.io/v1
    await c.ok("POST", CORE_EVENTS, {"metadata": {"name": "pod-x.1"}, "involvedObject": {"kind": "Pod", "name": "x"},
                                     "reason": "Started", "message": "started", "type": "Normal", "count": 1})
    v1 = await c.ok("GET", f"{EVENTS_V1}/pod-x.1")
    assert (v1["regarding"], v1["note"], v1["deprecatedCount"]) == ({"kind": "Pod", "name": "x"}, "started", 1)


@pytest.mark.parametrize(("overrides", "field"), [
    ({"action": ""}, "action"),
    ({"eventTime": None}, "eventTime"),
    ({"reportingController": "not a name"}, "reportingController"),
    ({"reportingInstance": ""}, "reportingInstance"),
    ({"type": "Bad"}, "type"),
    ({"note": "x" * 1025}, "note"),
    ({"series": {"count": 1, "lastObservedTime": "2026-11-27T10:00:00.000001Z"}}, "series.count"),
    # what a real kube-apiserver answered the operator's first events.k8s.io/v1 Events (core v1 took "scm.")
    ({"metadata": {"generateName": "scm."}}, "metadata.generateName"),
])
async def test_events_v1_create_is_validated_as_a_real_server_does(
        api: tuple[EmulatedAPIServer, Client], overrides: dict[str, Any], field: str) -> None:
    _, c = api
    status, body = await c.call("POST", EVENTS_V1, event_v1(**overrides))
    assert status == 422, body
    assert field in body["message"], body


async def test_events_v1_only_the_series_changes_on_update(api: tuple[EmulatedAPIServer, Client]) -> None:
    _, c = api
    name = (await c.ok("POST", EVENTS_V1, event_v1()))["metadata"]["name"]
    status, body = await c.call("PATCH", f"{EVENTS_V1}/{name}", {"note": "something else"}, MERGE)
    assert status == 422 and "note: Invalid value: field is immutable" in body["message"], body
    status, body = await c.call("PATCH", f"{EVENTS_V1}/gone", {"series": {"count": 2}}, MERGE)
    assert status == 404, body


def test_occurrences_stand_once_per_occurrence_in_the_order_they_happened() -> None:
    from tests.e2e.local.eventsapi import occurrences

    def ev(rv: int, reason: str, first: str, series: tuple[int, str] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"metadata": {"resourceVersion": str(rv)}, "reason": reason, "eventTime": first}
        if series:
            body["series"] = {"count": series[0], "lastObservedTime": series[1]}
        return body

    a = ev(9, "A", "2026-11-27T10:00:00.000001Z", (3, "2026-11-27T10:00:09.000001Z"))
    b = ev(5, "B", "2026-11-27T10:00:05.000001Z")
    kubelet = {"metadata": {"resourceVersion": "6"}, "reason": "K", "lastTimestamp": "2026-11-27T10:00:06Z",
               "firstTimestamp": "2026-11-27T10:00:06Z", "count": 1}
    assert [e["reason"] for e in occurrences([a, b, kubelet])] == ["A", "A", "B", "K", "A"]


SVC = "/api/v1/namespaces/default/services"


def svc_intent(ports: list[int], labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "labels": labels},
            "spec": {"selector": {"app": "a"}, "ports": [{"name": f"p{p}", "port": p} for p in ports]}}


async def test_server_side_apply_field_ownership(api: tuple[EmulatedAPIServer, Client]) -> None:
    """A manager's dropped fields go (a label, a Service port: an item of an associative list), fields another
    manager owns stay, shared fields stay while the other owner keeps them, and managedFields says who owns what."""
    emu, c = api
    op = {"fieldManager": "op", "force": "true"}
    await c.ok("PATCH", f"{SVC}/s", svc_intent([80, 81], {"a": "1", "b": "2"}), APPLY, op)
    # another manager adds a label and a port of its own, and sets label a to the same value (co-owned)
    await c.ok("PATCH", f"{SVC}/s", {"metadata": {"labels": {"user": "x"}}}, MERGE, {"fieldManager": "kubectl"})
    await c.ok("PATCH", f"{SVC}/s", svc_intent([9000], {"a": "1"}) | {"spec": {"ports": [{"name": "m", "port": 9000}]}},
               APPLY, {"fieldManager": "mon"})
    out = await c.ok("PATCH", f"{SVC}/s", svc_intent([80], {"a": "1"}), APPLY, op)
    assert out["metadata"]["labels"] == {"a": "1", "user": "x"}  # b dropped; user (kubectl's) kept
    assert sorted(p["port"] for p in out["spec"]["ports"]) == [80, 9000]  # 81 dropped, mon's 9000 kept
    owners = {m["manager"]: m for m in out["metadata"]["managedFields"]}
    assert set(owners) == {"op", "kubectl", "mon"}
    assert owners["op"]["operation"] == "Apply" and owners["kubectl"]["operation"] == "Update"
    assert "k:{\"port\": 80}" in owners["op"]["fieldsV1"]["f:spec"]["f:ports"]
    assert "f:user" in owners["kubectl"]["fieldsV1"]["f:metadata"]["f:labels"]
    # label a is co-owned by op and mon: op dropping it keeps it (mon still applies it)
    out = await c.ok("PATCH", f"{SVC}/s", svc_intent([80], {}), APPLY, op)
    assert out["metadata"]["labels"] == {"a": "1", "user": "x"}
    assert ("mon", "Apply") in emu.managed_fields("v1", "Service", "s", "default")
    # the same again changes nothing (no new resourceVersion)
    again = await c.ok("PATCH", f"{SVC}/s", svc_intent([80], {}), APPLY, op)
    assert again["metadata"]["resourceVersion"] == out["metadata"]["resourceVersion"]


async def test_server_side_apply_conflicts_unless_forced(api: tuple[EmulatedAPIServer, Client]) -> None:
    _emu, c = api
    await c.ok("PATCH", f"{SVC}/s", svc_intent([80], {"a": "1"}), APPLY, {"fieldManager": "op"})
    await c.ok("PATCH", f"{SVC}/s", {"metadata": {"labels": {"a": "2"}}}, MERGE, {"fieldManager": "kubectl"})
    status, body = await c.call("PATCH", f"{SVC}/s", svc_intent([80], {"a": "1"}), APPLY, {"fieldManager": "op"})
    assert status == 409 and 'conflict with "kubectl": .metadata.labels.a' in body["message"], body
    out = await c.ok("PATCH", f"{SVC}/s", svc_intent([80], {"a": "1"}), APPLY, {"fieldManager": "op", "force": "true"})
    assert out["metadata"]["labels"] == {"a": "1"}
    # the field changed hands: kubectl no longer owns it, so op dropping it removes it
    out = await c.ok("PATCH", f"{SVC}/s", svc_intent([80], {}), APPLY, {"fieldManager": "op", "force": "true"})
    assert "labels" not in out["metadata"] or out["metadata"]["labels"] == {}
    # applying the same value another manager set is no conflict (shared ownership)
    await c.ok("PATCH", f"{SVC}/s", {"metadata": {"labels": {"c": "3"}}}, MERGE, {"fieldManager": "kubectl"})
    await c.ok("PATCH", f"{SVC}/s", svc_intent([80], {"c": "3"}), APPLY, {"fieldManager": "op"})
