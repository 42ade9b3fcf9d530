"""Unit tests of CRD defaulting, pruning, OpenAPI validation and CEL rules (``crdschema.py``)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.e2e.local.crdschema import CRDVersion, SchemaInvalid, check_crd, crd_versions, to_jsonschema

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.test"},
    "spec": {
        "group": "example.test",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wdg"]},
        "versions": [{
            "name": "v1alpha1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {
                        "type": "object",
                        "required": ["image"],
                        "x-kubernetes-validations": [
                            {"rule": "!has(oldSelf.storageClass) || self.storageClass == oldSelf.storageClass",
                             "message": "storageClass is immutable"},
                            {"rule": "self.replicas % 2 == 1", "message": "replicas must be odd",
                             "fieldPath": ".replicas"},
                        ],
                        "properties": {
                            "replicas": {"type": "integer", "default": 3, "minimum": 1,
                                         "x-kubernetes-validations": [
                                             {"rule": "self in [1, 3, 5]", "message": "replicas must be 1, 3 or 5"}]},
                            "image": {"type": "string", "minLength": 1},
                            "storageClass": {"type": "string"},
                            "security": {"type": "object", "default": {},
                                         "properties": {
                                             "enabled": {"type": "boolean", "default": False,
                                                         "x-kubernetes-validations": [
                                                             {"rule": "self == oldSelf",
                                                              "message": "security.enabled is immutable"}]},
                                             "caMode": {"type": "string", "enum": ["operator", "scm"],
                                                        "default": "operator"}}},
                            "ozoneSite": {"type": "object", "additionalProperties": {"type": "string"}},
                            "resources": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            "size": {"x-kubernetes-int-or-string": True},
                            "maybe": {"type": "string", "nullable": True},
                            "tags": {"type": "array", "items": {
                                "type": "string", "x-kubernetes-validations": [
                                    {"rule": "self.startsWith('t-')", "message": "tags start with t-"}]}},
                        },
                    },
                    "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
                },
            }},
        }],
    },
}


def version() -> CRDVersion:
    return crd_versions(CRD)[0]


def good(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.test/v1alpha1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"image": "ozone-scm:dev", **spec}}


def errors_of(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    with pytest.raises(SchemaInvalid) as err:
        version().admit(obj, old, part="main")
    return [f"{e.field}: {e.message}" for e in err.value.errors]


def test_defaults_are_applied_recursively() -> None:
    out, pruned = version().admit(good(), None, part="main")
    assert out["spec"]["replicas"] == 3
    assert out["spec"]["security"] == {"enabled": False, "caMode": "operator"}
    assert pruned == []


def test_replicas_two_is_refused_by_the_cel_rule() -> None:
    errs = errors_of(good(replicas=2))
    assert "spec.replicas: Invalid value: 2: replicas must be 1, 3 or 5" in errs
    assert "spec.replicas: Invalid value: \"object\": replicas must be odd" in errs


def test_openapi_errors_use_kubernetes_wording() -> None:
    assert errors_of(good(replicas="three")) == [
        'spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"']
    errs = errors_of({"apiVersion": "example.test/v1alpha1", "kind": "Widget", "metadata": {"name": "w"},
                      "spec": {}})
    assert errs == ["spec.image: Required value"]
    errs = errors_of(good(security={"caMode": "vault"}))
    assert errs == ['spec.security.caMode: Unsupported value: "vault": supported values: "operator", "scm"']
    assert errors_of(good(replicas=0))[0].startswith("spec.replicas: Invalid value: 0: spec.replicas in body "
                                                     "should be greater than or equal to 1")


def test_transition_rules_need_an_old_value() -> None:
    v = version()
    created, _ = v.admit(good(storageClass="fast", security={"enabled": True}), None, part="main")
    changed = copy.deepcopy(created)
    changed["spec"]["storageClass"] = "slow"
    changed["spec"]["security"]["enabled"] = False
    errs = errors_of(changed, created)
    assert any("storageClass is immutable" in e for e in errs)
    assert any(e.startswith("spec.security.enabled:") and "immutable" in e for e in errs)
    same = copy.deepcopy(created)
    same["spec"]["replicas"] = 5
    v.admit(same, created, part="main")  # allowed


def test_rules_below_arrays_run_per_element() -> None:
    errs = errors_of(good(tags=["t-a", "b"]))
    assert errs == ['spec.tags[1]: Invalid value: "b": tags start with t-']


def test_pruning_drops_unknown_fields_but_keeps_preserved_and_maps() -> None:
    out, pruned = version().admit(good(bogus=1, ozoneSite={"ozone.scm.x": "1"}, resources={"limits": {"cpu": 1}},
                                       size="10Gi", maybe=None), None, part="main")
    assert pruned == ["spec.bogus"]
    assert "bogus" not in out["spec"]
    assert out["spec"]["ozoneSite"] == {"ozone.scm.x": "1"}
    assert out["spec"]["resources"] == {"limits": {"cpu": 1}}
    assert out["spec"]["size"] == "10Gi" and out["spec"]["maybe"] is None


def test_int_or_string_and_nullable_translation() -> None:
    schema = to_jsonschema({"type": "object", "properties": {"a": {"x-kubernetes-int-or-string": True},
                                                             "b": {"type": "string", "nullable": True}}})
    assert schema["properties"]["a"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert schema["properties"]["b"] == {"type": ["string", "null"]}
    assert errors_of(good(size=True))


def test_crd_structural_checks() -> None:
    assert check_crd(CRD) == []
    bad = copy.deepcopy(CRD)
    bad["metadata"]["name"] = "wrong"
    del bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["type"]
    fields = [e.field for e in check_crd(bad)]
    assert "metadata.name" in fields
    assert "spec.versions[0].schema.openAPIV3Schema.properties[status].type" in fields


def test_unsupported_cel_functions_are_reported_not_silently_passed() -> None:
    crd = copy.deepcopy(CRD)
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    props["size"]["x-kubernetes-validations"] = [{"rule": "url(self).getHost() == 'x'"}]
    v = crd_versions(crd)[0]
    assert v.unsupported and "url" in v.unsupported[0]
    # the quantity library is provided
    props["size"]["x-kubernetes-validations"] = [{"rule": "quantity(self).isGreaterThan(quantity('1Gi'))"}]
    v = crd_versions(crd)[0]
    assert v.unsupported == []


def test_uncompilable_rule_refuses_the_crd() -> None:
    crd = copy.deepcopy(CRD)
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] = [
        {"rule": "self.replicas >"}]
    with pytest.raises(ValueError, match="does not compile"):
        crd_versions(crd)
