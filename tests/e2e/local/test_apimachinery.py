"""Unit tests of the pure API-machinery pieces the emulated API server is built from."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

from tests.e2e.local import apimachinery as am

NOW = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("app=scm", {"app": "scm"}, True),
        ("app==scm", {"app": "scm"}, True),
        ("app=scm", {"app": "om"}, False),
        ("app!=scm", {"app": "om"}, True),
        ("app!=scm", {}, True),
        ("app in (scm,om)", {"app": "om"}, True),
        ("app in (scm, om)", {"app": "dn"}, False),
        ("app notin (scm)", {"app": "dn"}, True),
        ("app notin (scm)", {}, True),
        ("app", {"app": ""}, True),
        ("!app", {"app": "x"}, False),
        ("!app", {}, True),
        ("app=scm,tier in (a,b),!legacy", {"app": "scm", "tier": "b"}, True),
        ("app=scm,tier in (a,b),!legacy", {"app": "scm", "tier": "b", "legacy": "1"}, False),
        ("", {"anything": "x"}, True),
    ],
)
def test_label_selectors(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert am.labels_match(am.parse_label_selector(selector), labels) is expected


def test_malformed_label_selector_is_a_400() -> None:
    with pytest.raises(am.ApiError) as err:
        am.parse_label_selector("app in scm")
    assert err.value.code == 400


def test_label_selector_object() -> None:
    reqs = am.selector_from_match_labels({"matchLabels": {"a": "1"},
                                          "matchExpressions": [{"key": "b", "operator": "In", "values": ["x"]},
                                                               {"key": "c", "operator": "DoesNotExist"}]})
    assert am.labels_match(reqs, {"a": "1", "b": "x"})
    assert not am.labels_match(reqs, {"a": "1", "b": "x", "c": ""})


def test_field_selectors() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "status": {"phase": "Running"}, "spec": {"x": True}}
    assert am.fields_match(am.parse_field_selector("metadata.name=p,status.phase!=Pending"), pod)
    assert not am.fields_match(am.parse_field_selector("status.phase=Pending"), pod)
    assert am.fields_match(am.parse_field_selector("spec.x=true"), pod)
    assert am.fields_match(am.parse_field_selector("spec.nodeName="), pod)


def test_merge_patch_rfc7386() -> None:
    target = {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}
    patch = {"a": "z", "c": {"f": None}, "l": [3]}
    assert am.merge_patch(target, patch) == {"a": "z", "c": {"d": "e"}, "l": [3]}
    assert target["c"] == {"d": "e", "f": "g"}  # not mutated


def test_strategic_merge_merges_lists_by_key() -> None:
    pod = {"spec": {"containers": [{"name": "scm", "image": "a", "env": [{"name": "X", "value": "1"}]},
                                   {"name": "side", "image": "s"}],
                    "finalizers": ["a"]}}
    patch = {"spec": {"containers": [{"name": "scm", "image": "b", "env": [{"name": "Y", "value": "2"}]},
                                     {"name": "side", "$patch": "delete"}],
                      "finalizers": ["b", "a"]}}
    out = am.strategic_merge_patch(pod, patch)
    assert out["spec"]["containers"] == [{"name": "scm", "image": "b", "env": [{"name": "X", "value": "1"},
                                                                              {"name": "Y", "value": "2"}]}]
    assert out["spec"]["finalizers"] == ["a", "b"]


def test_strategic_merge_ports_and_replace_directive() -> None:
    svc = {"spec": {"ports": [{"port": 80, "name": "http"}], "selector": {"a": "1", "b": "2"}}}
    out = am.strategic_merge_patch(svc, {"spec": {"ports": [{"port": 443, "name": "https"}],
                                                  "selector": {"$patch": "replace", "c": "3"}}})
    assert [p["port"] for p in out["spec"]["ports"]] == [80, 443]
    assert out["spec"]["selector"] == {"c": "3"}
    out = am.strategic_merge_patch({"args": ["a", "b"]}, {"args": ["c"]})
    assert out == {"args": ["c"]}  # no merge key: replaced
    out = am.strategic_merge_patch({"finalizers": ["a", "b"]}, {"$deleteFromPrimitiveList/finalizers": ["a"]})
    assert out == {"finalizers": ["b"]}


def test_apply_deletions_removes_what_a_manager_stopped_applying() -> None:
    previous = {"metadata": {"labels": {"a": "1", "b": "2"}}, "data": {"x": "1", "y": "2"}}
    current = {"metadata": {"labels": {"a": "1"}}, "data": {"x": "1"}}
    assert am.apply_deletions(previous, current) == {"metadata": {"labels": {"b": None}}, "data": {"y": None}}
    assert am.apply_deletions({}, current) == {}


@pytest.mark.parametrize(
    ("kind", "name", "ok"),
    [("ConfigMap", "scm-0.config", True), ("ConfigMap", "SCM", False), ("Service", "scm-headless", True),
     ("Service", "0scm", False), ("Namespace", "a.b", False), ("Pod", "x" * 254, False), ("Pod", "scm-0", True)],
)
def test_names(kind: str, name: str, ok: bool) -> None:
    assert (am.validate_name(kind, name) == []) is ok


def test_labels() -> None:
    assert am.validate_labels({"app.kubernetes.io/name": "ozone-scm", "x": ""}) == []
    assert am.validate_labels({"bad key!": "v"})
    assert am.validate_labels({"k": "v" * 64})


def test_jsonpath_subset() -> None:
    obj = {"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Degraded", "status": "False"}],
                      "members": [{"name": "a"}, {"name": "b"}]},
           "metadata": {"annotations": {"x.io/y": "z"}}}
    assert am.jsonpath(obj, '.status.conditions[?(@.type=="Ready")].status') == ["True"]
    assert am.jsonpath(obj, ".status.members[1].name") == ["b"]
    assert am.jsonpath(obj, ".status.members[*].name") == ["a", "b"]
    assert am.jsonpath(obj, "{.metadata.annotations['x.io/y']}") == ["z"]
    assert am.jsonpath(obj, ".spec.missing") == []


def test_table_rendering_uses_printer_columns() -> None:
    items = [{"metadata": {"name": "c1", "creationTimestamp": am.rfc3339(NOW - datetime.timedelta(minutes=3))},
              "spec": {"replicas": 3},
              "status": {"conditions": [{"type": "Ready", "status": "True"}], "members": [{}, {}, {}],
                         "phase": "Running"}}]
    cols = [{"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
            {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
    table = am.to_table(items, "OzoneSCMCluster", cols, NOW, "7")
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Ready", "Replicas", "Phase", "Age"]
    assert table["rows"][0]["cells"] == ["c1", "True", 3, "Running", "3m"]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


def test_human_duration() -> None:
    assert [am.human_duration(s) for s in (5, 119, 150, 3600, 86400 * 3)] == ["5s", "119s", "2m30s", "60m", "3d"]


def test_status_bodies() -> None:
    err = am.invalid("OzoneSCMCluster", "c", "ozone.apache.org",
                     [am.FieldError("spec.replicas", "Unsupported value: 2")])
    body = err.body()
    assert body["code"] == 422 and body["reason"] == "Invalid"
    assert body["message"] == 'OzoneSCMCluster.ozone.apache.org "c" is invalid: spec.replicas: Unsupported value: 2'
    assert body["details"]["causes"][0]["field"] == "spec.replicas"


def test_leaf_fields_and_remove_fields() -> None:
    svc: dict[str, Any] = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "labels": {"a": "1"}},
           "spec": {"ports": [{"port": 80, "name": "x"}, {"port": 81}], "selector": {"k": "v"}, "x": []}}
    fields = am.leaf_fields(svc)
    assert fields[("spec", "ports", ("k", '{"port": 80}'), "name")] == "x"
    assert ("metadata", "name") not in fields and ("spec", "x") in fields
    assert ("spec", "ports") not in am.leaf_fields(svc, associative=True)
    assert am.leaf_fields(svc, associative=False)[("spec", "ports")] == svc["spec"]["ports"]
    out = am.remove_fields(copy.deepcopy(svc), [("metadata", "labels", "a"), ("spec", "ports", ("k", '{"port": 81}'), "port"),
                                                 ("spec", "selector", "k")])
    assert out["metadata"] == {"name": "s"} and out["spec"] == {"ports": [{"port": 80, "name": "x"}], "x": []}
    assert am.fields_v1([("spec", "ports", ("k", '{"port": 80}'), "name")]) == {
        "f:spec": {"f:ports": {'k:{"port": 80}': {".": {}, "f:name": {}}}}}
