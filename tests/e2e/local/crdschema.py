"""CustomResourceDefinition schemas as the API server applies them: defaulting, pruning, OpenAPI v3 validation and
CEL validation rules (``x-kubernetes-validations``).

Called by the emulated API server (``apiserver.py``) on every create/update of a custom resource, and by the tests
that check example resources and the Helm chart's ``OzoneSCMCluster`` against the CRD in ``crds/``. Pure: no I/O, no
clock; it must not import the emulator or kmock.

How each server step is reproduced:

- **defaulting**: a property with a ``default`` that is absent from the object gets the default, recursively, before
  validation (the apiserver defaults on the request and on reads from storage; for a fresh emulator both coincide);
- **pruning**: fields not declared in ``properties`` are dropped unless the node has
  ``x-kubernetes-preserve-unknown-fields: true`` or ``additionalProperties``; the dropped paths are returned so that
  ``fieldValidation=Strict`` (kubectl's default) can refuse them as the real server does;
- **validation**: the structural schema is translated to JSON Schema draft 4 (``nullable`` adds ``null``,
  ``x-kubernetes-int-or-string`` becomes integer-or-string) and checked with ``jsonschema``; errors are reported
  with Kubernetes' field paths and wording (``spec.replicas: Unsupported value: 2: supported values: ...``);
- **CEL**: every ``x-kubernetes-validations`` rule is compiled once with ``cel-python`` and evaluated with ``self``
  bound to the node and, on updates, ``oldSelf`` to the previous value of the same node; transition rules (those
  that mention ``oldSelf``) are skipped when there is no old value (creates, or a field that was just added), as
  Kubernetes does unless ``optionalOldSelf`` is set. Rules below an array are evaluated per element, without
  ``oldSelf`` (Kubernetes only correlates map-type lists, which this emulator does not). Functions of Kubernetes'
  CEL libraries that cel-python lacks are reported by ``unsupported_rules`` when the CRD is registered, so a CRD that
  relies on one is visible instead of silently unchecked. Of Kubernetes' quantity library (1.29+), ``quantity()``,
  ``isQuantity()``, ``compareTo()``, ``isGreaterThan()``, ``isLessThan()``, ``asInteger()`` are provided here.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import celpy
import jsonschema

from .apimachinery import FieldError, field_path

Schema = Mapping[str, Any]

# CEL functions and macros cel-python provides (Kubernetes adds libraries on top; see unsupported_rules()).
_CEL_MACROS = {"has", "all", "exists", "exists_one", "map", "filter", "size", "dyn"}
_CEL_KNOWN = _CEL_MACROS | {
    "bool", "bytes", "contains", "double", "duration", "endsWith", "getDate", "getDayOfMonth", "getDayOfWeek",
    "getDayOfYear", "getFullYear", "getHours", "getMilliseconds", "getMinutes", "getMonth", "getSeconds", "int",
    "list", "matches", "startsWith", "string", "timestamp", "type", "uint",
}

# Kubernetes' CEL quantity library (k8s.io/apiserver/pkg/cel/library/quantity.go), on exact fractions
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$")
_SUFFIX: dict[str, int | Fraction] = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "n": Fraction(1, 10**9),
           "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
           "P": 10**15, "E": 10**18}


class _Quantity(celpy.celtypes.StringType):
    """A CEL value of Kubernetes' quantity type: the text, and its exact amount."""

    amount: Fraction


def _parse_quantity(text: Any) -> Fraction | None:
    m = _QUANTITY.match(str(text))
    if m is None:
        return None
    number, suffix = Fraction(m.group(1)), m.group(2) or ""
    if suffix[:1] in ("e", "E") and suffix not in _SUFFIX:
        return number * Fraction(10) ** int(suffix[1:])
    return number * _SUFFIX.get(suffix, 1)


def _quantity(text: Any) -> _Quantity:
    amount = _parse_quantity(text)
    if amount is None:
        raise ValueError(f"invalid quantity {text!r}")
    q = _Quantity(str(text))
    q.amount = amount
    return q


def _compare(a: _Quantity, b: _Quantity) -> int:
    return (a.amount > b.amount) - (a.amount < b.amount)


CEL_FUNCTIONS: dict[str, Any] = {
    "quantity": _quantity,
    "isQuantity": lambda t: celpy.celtypes.BoolType(_parse_quantity(t) is not None),
    "compareTo": lambda a, b: celpy.celtypes.IntType(_compare(a, b)),
    "isGreaterThan": lambda a, b: celpy.celtypes.BoolType(_compare(a, b) > 0),
    "isLessThan": lambda a, b: celpy.celtypes.BoolType(_compare(a, b) < 0),
    "asInteger": lambda a: celpy.celtypes.IntType(int(a.amount)),
}
_CEL_KNOWN = _CEL_KNOWN | set(CEL_FUNCTIONS)
_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def _strip_strings(rule: str) -> str:
    return re.sub(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", "''", rule)


@dataclass
class _Rule:
    rule: str
    message: str
    message_expression: str | None
    reason: str
    field_path: str | None
    optional_old_self: bool
    transition: bool
    program: Any


@dataclass
class CRDVersion:
    """One served version of a CRD: its schema, subresources and printer columns."""

    group: str
    version: str
    plural: str
    kind: str
    schema: Schema
    status_subresource: bool
    printer_columns: list[dict[str, Any]] | None
    _validator: Any = field(default=None, repr=False)
    _rules: dict[int, list[_Rule]] = field(default_factory=dict, repr=False)
    unsupported: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._validator = jsonschema.Draft4Validator(to_jsonschema(self.schema))
        env = celpy.Environment()
        self._compile_rules(self.schema, env)

    # -- CEL -------------------------------------------------------------------------------------------------------
    def _compile_rules(self, node: Schema, env: Any) -> None:
        rules = []
        for spec in node.get("x-kubernetes-validations") or []:
            text = spec["rule"]
            called = {m.group(1) for m in _CALL.finditer(_strip_strings(text))}
            missing = sorted(called - _CEL_KNOWN)
            if missing:
                self.unsupported.append(f"{text!r} uses {', '.join(missing)}")
                continue
            try:
                program = env.program(env.compile(text), functions=CEL_FUNCTIONS)
            except Exception as exc:  # CELParseError and friends
                raise ValueError(f"x-kubernetes-validations rule {text!r} does not compile: {exc}") from exc
            rules.append(_Rule(
                rule=text,
                message=spec.get("message") or "",
                message_expression=spec.get("messageExpression"),
                reason=spec.get("reason") or "FieldValueInvalid",
                field_path=spec.get("fieldPath"),
                optional_old_self=bool(spec.get("optionalOldSelf")),
                transition=bool(re.search(r"\boldSelf\b", _strip_strings(text))),
                program=program,
            ))
        if rules:
            self._rules[id(node)] = rules
        for child in (node.get("properties") or {}).values():
            self._compile_rules(child, env)
        if isinstance(node.get("items"), Mapping):
            self._compile_rules(node["items"], env)
        if isinstance(node.get("additionalProperties"), Mapping):
            self._compile_rules(node["additionalProperties"], env)

    # -- the server's steps ----------------------------------------------------------------------------------------
    def admit(self, obj: dict[str, Any], old: Mapping[str, Any] | None, *, part: str) -> tuple[dict[str, Any],
                                                                                            list[str]]:
        """Default, prune and validate ``obj`` (a whole custom resource). ``part`` is ``"main"`` (status is
        ignored/kept from ``old`` by the caller) or ``"status"``. Returns the admitted object and the pruned field
        paths; raises ``SchemaInvalid`` with the field errors."""
        out = copy.deepcopy(obj)
        apply_defaults(self.schema, out, top=True)
        pruned = prune(self.schema, out, "", top=True)
        errors = self.validate(out, old)
        if errors:
            raise SchemaInvalid(errors)
        return out, pruned

    def validate(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[FieldError]:
        errors = [_to_field_error(e) for e in sorted(self._validator.iter_errors(_without_meta(obj)),
                                                      key=lambda e: list(e.absolute_path))]
        if not errors:
            self._run_rules(self.schema, _without_meta(obj), None if old is None else _without_meta(old), [],
                            errors, correlated=True)
        return errors

    def _run_rules(self, node: Schema, value: Any, old: Any, path: list[str], errors: list[FieldError],
                   correlated: bool) -> None:
        if value is None:
            return
        for rule in self._rules.get(id(node), []):
            has_old = correlated and old is not None
            if rule.transition and not has_old and not rule.optional_old_self:
                continue
            activation = {"self": celpy.json_to_cel(value)}
            if rule.transition:
                activation["oldSelf"] = celpy.json_to_cel(old) if has_old else celpy.json_to_cel(None)
            where = ".".join(path)
            try:
                ok = rule.program.evaluate(activation)
            except Exception as exc:
                errors.append(FieldError(where, f"Invalid value: {_type_name(value)}: rule {rule.rule!r} "
                                                f"could not be evaluated: {exc}", "FieldValueInvalid"))
                continue
            if not bool(ok):
                message = rule.message or f"failed rule: {rule.rule}"
                target = where
                if rule.field_path:
                    target = ".".join(p for p in [where, rule.field_path.lstrip(".")] if p)
                errors.append(FieldError(target, f"Invalid value: {_describe(value)}: {message}", rule.reason))
        if isinstance(value, Mapping):
            props = node.get("properties") or {}
            for key, child in props.items():
                if key in value:
                    child_old = old.get(key) if correlated and isinstance(old, Mapping) else None
                    self._run_rules(child, value[key], child_old, [*path, key], errors, correlated)
            extra = node.get("additionalProperties")
            if isinstance(extra, Mapping):
                for key, item in value.items():
                    if key not in props:
                        child_old = old.get(key) if correlated and isinstance(old, Mapping) else None
                        self._run_rules(extra, item, child_old, [*path, key], errors, correlated)
        elif isinstance(value, list) and isinstance(node.get("items"), Mapping):
            for n, item in enumerate(value):
                self._run_rules(node["items"], item, None, [*path[:-1], f"{path[-1]}[{n}]"] if path else [f"[{n}]"],
                                errors, correlated=False)


class SchemaInvalid(Exception):
    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(f"{e.field}: {e.message}" for e in errors))
        self.errors = errors


def _without_meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    # The apiserver validates metadata with its own rules, not with the CRD schema.
    return {k: v for k, v in obj.items() if k not in ("metadata", "apiVersion", "kind")}


def _type_name(value: Any) -> str:
    return {bool: '"boolean"', int: '"integer"', float: '"number"', str: '"string"', list: '"array"',
            dict: '"object"'}.get(type(value), '"null"')


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return f'"{value}"'
    return _type_name(value)


def _to_field_error(err: jsonschema.ValidationError) -> FieldError:
    path = field_path(err.absolute_path)
    value = err.instance
    if err.validator == "required":
        missing = re.search(r"'([^']+)' is a required property", err.message)
        name = missing.group(1) if missing else "?"
        return FieldError(f"{path}.{name}" if path else name, "Required value", "FieldValueRequired")
    if err.validator == "enum":
        allowed = ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in err.validator_value)
        return FieldError(path, f"Unsupported value: {_describe(value)}: supported values: {allowed}",
                          "FieldValueNotSupported")
    if err.validator == "type":
        want = err.validator_value if isinstance(err.validator_value, str) else " or ".join(err.validator_value)
        return FieldError(path, f"Invalid value: {_type_name(value)}: {path} in body must be of type {want}: "
                                f"{_type_name(value)}", "FieldValueTypeInvalid")
    wording = {
        "minimum": "should be greater than or equal to", "maximum": "should be less than or equal to",
        "minLength": "should be at least", "maxLength": "may not be longer than",
        "minItems": "should have at least", "maxItems": "must have at most", "pattern": "should match",
    }.get(str(err.validator))
    if wording:
        return FieldError(path, f"Invalid value: {_describe(value)}: {path} in body {wording} "
                                f"{err.validator_value}", "FieldValueInvalid")
    return FieldError(path, f"Invalid value: {_describe(value)}: {err.message}", "FieldValueInvalid")


def to_jsonschema(node: Schema) -> dict[str, Any]:
    """Translate a structural OpenAPI v3 schema node to JSON Schema draft 4."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in ("nullable", "default", "description", "example",
                                                       "externalDocs", "format", "title"):
            continue
        if key == "properties":
            out[key] = {k: to_jsonschema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, Mapping):
            out[key] = to_jsonschema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [to_jsonschema(v) for v in value]
        else:
            out[key] = copy.deepcopy(value)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [*out.get("anyOf", []), {"type": "integer"}, {"type": "string"}] if "anyOf" not in out \
            else out["anyOf"]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"] if isinstance(out["type"], str) else [*out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def apply_defaults(node: Schema, value: Any, *, top: bool = False) -> None:
    """Fill ``default`` values for absent properties, recursively (in place)."""
    if isinstance(value, dict):
        for key, child in (node.get("properties") or {}).items():
            if top and key in ("metadata", "apiVersion", "kind"):
                continue
            if key not in value and "default" in child:
                value[key] = copy.deepcopy(child["default"])
            if key in value:
                apply_defaults(child, value[key])
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping):
            for key in list(value):
                if key not in (node.get("properties") or {}):
                    apply_defaults(extra, value[key])
    elif isinstance(value, list) and isinstance(node.get("items"), Mapping):
        for item in value:
            apply_defaults(node["items"], item)


def prune(node: Schema, value: Any, path: str, *, top: bool = False) -> list[str]:
    """Drop fields the schema does not declare (in place); returns their paths."""
    dropped: list[str] = []
    if isinstance(value, dict):
        props = node.get("properties") or {}
        keep_unknown = bool(node.get("x-kubernetes-preserve-unknown-fields")) or \
            isinstance(node.get("additionalProperties"), Mapping) or node.get("additionalProperties") is True
        for key in list(value):
            sub = f"{path}.{key}" if path else key
            if top and key in ("metadata", "apiVersion", "kind"):
                continue
            if key in props:
                dropped += prune(props[key], value[key], sub)
            elif isinstance(node.get("additionalProperties"), Mapping):
                dropped += prune(node["additionalProperties"], value[key], sub)
            elif not keep_unknown:
                del value[key]
                dropped.append(sub)
    elif isinstance(value, list) and isinstance(node.get("items"), Mapping):
        for n, item in enumerate(value):
            dropped += prune(node["items"], item, f"{path}[{n}]")
    return dropped


def crd_versions(crd: Mapping[str, Any]) -> list[CRDVersion]:
    """Every served version of a CRD object (``apiextensions.k8s.io/v1``)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    out = []
    for ver in spec.get("versions") or []:
        if not ver.get("served", True):
            continue
        schema = ((ver.get("schema") or {}).get("openAPIV3Schema")) or {"type": "object",
                                                                         "x-kubernetes-preserve-unknown-fields": True}
        out.append(CRDVersion(
            group=spec["group"], version=ver["name"], plural=names["plural"], kind=names["kind"], schema=schema,
            status_subresource="status" in (ver.get("subresources") or {}),
            printer_columns=ver.get("additionalPrinterColumns"),
        ))
    return out


def check_crd(crd: Mapping[str, Any]) -> list[FieldError]:
    """The structural checks the apiserver runs on a CRD before accepting it (a subset)."""
    errors = []
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    for fld in ("group", "scope"):
        if not spec.get(fld):
            errors.append(FieldError(f"spec.{fld}", "Required value", "FieldValueRequired"))
    for fld in ("plural", "kind"):
        if not names.get(fld):
            errors.append(FieldError(f"spec.names.{fld}", "Required value", "FieldValueRequired"))
    name = (crd.get("metadata") or {}).get("name")
    if names.get("plural") and spec.get("group") and name != f"{names['plural']}.{spec['group']}":
        errors.append(FieldError("metadata.name", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group'))
    versions = spec.get("versions") or []
    if not versions:
        errors.append(FieldError("spec.versions", "Required value", "FieldValueRequired"))
    if sum(1 for v in versions if v.get("storage")) != 1:
        errors.append(FieldError("spec.versions", "Invalid value: must have exactly one version marked as storage "
                                                  "version"))
    for n, ver in enumerate(versions):
        schema = (ver.get("schema") or {}).get("openAPIV3Schema")
        if schema is None:
            errors.append(FieldError(f"spec.versions[{n}].schema.openAPIV3Schema", "Required value",
                                     "FieldValueRequired"))
            continue
        errors += _structural(schema, f"spec.versions[{n}].schema.openAPIV3Schema")
    return errors


def _structural(node: Schema, path: str) -> list[FieldError]:
    errors = []
    if "type" not in node and not node.get("x-kubernetes-int-or-string") and \
            not node.get("x-kubernetes-preserve-unknown-fields"):
        errors.append(FieldError(f"{path}.type", "Required value: must not be empty for specified object fields",
                                 "FieldValueRequired"))
    for key, child in (node.get("properties") or {}).items():
        errors += _structural(child, f"{path}.properties[{key}]")
    if isinstance(node.get("items"), Mapping):
        errors += _structural(node["items"], f"{path}.items")
    if isinstance(node.get("additionalProperties"), Mapping):
        errors += _structural(node["additionalProperties"], f"{path}.additionalProperties")
    return errors
