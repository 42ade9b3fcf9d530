"""Pure pieces of Kubernetes API machinery that the emulated API server (``apiserver.py``) is assembled from.

Called by ``tests/e2e/local/apiserver.py`` (and unit-tested in ``tests/e2e/local/test_apimachinery.py``). Everything
here is a deterministic function of its arguments: no I/O, no clock, no randomness (callers pass ``now`` and
identifiers in). It must not import the emulator, kmock or anything of ``scm_server``.

What it covers, in the spellings the real API server uses:

- label selectors (``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``) and field selectors
  (``metadata.name=x``, ``status.phase!=Running``, any dotted path);
- JSON merge patch (RFC 7386) and a strategic-merge patch that merges the lists Kubernetes marks with a merge key
  (containers by ``name``, env by ``name``, volumes by ``name``, volumeMounts by ``mountPath``, container ports by
  ``containerPort``, service ports by ``port``, conditions by ``type``, ownerReferences by ``uid``, ...), honouring
  ``$patch: delete|replace`` and ``$deleteFromPrimitiveList``; list fields without a merge key are replaced;
- the three-way "last applied vs new applied" deletion patch used to emulate server-side apply;
- name and label validation (DNS-1123 subdomain/label, DNS-1035 label, qualified label keys);
- the JSONPath subset of ``additionalPrinterColumns`` and the server-side Table rendering kubectl asks for;
- ``metav1.Status`` bodies for errors.
"""

from __future__ import annotations

import copy
import datetime
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

JSON = Any
Obj = dict[str, Any]

# ---------------------------------------------------------------------------------------------------------------------
# Status bodies


def status_body(code: int, reason: str, message: str, details: Mapping[str, Any] | None = None) -> Obj:
    """A ``metav1.Status`` failure body, as the API server returns it for every error."""
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = dict(details)
    return body


class ApiError(Exception):
    """An error the emulated API server answers with a ``Status`` body and an HTTP status code."""

    def __init__(self, code: int, reason: str, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = dict(details or {})

    def body(self) -> Obj:
        return status_body(self.code, self.reason, self.message, self.details)


def not_found(kind_plural: str, name: str, group: str = "") -> ApiError:
    qualified = f"{kind_plural}.{group}" if group else kind_plural
    return ApiError(404, "NotFound", f'{qualified} "{name}" not found',
                    {"name": name, "group": group, "kind": kind_plural})


def already_exists(kind_plural: str, name: str, group: str = "") -> ApiError:
    qualified = f"{kind_plural}.{group}" if group else kind_plural
    return ApiError(409, "AlreadyExists", f'{qualified} "{name}" already exists',
                    {"name": name, "group": group, "kind": kind_plural})


def conflict(kind_plural: str, name: str, group: str = "", why: str = "") -> ApiError:
    qualified = f"{kind_plural}.{group}" if group else kind_plural
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {qualified} "{name}": {why}',
                    {"name": name, "group": group, "kind": kind_plural})


@dataclass(frozen=True)
class FieldError:
    """One cause of a 422 Invalid answer: ``field`` is the dotted path, ``reason`` Kubernetes' cause type."""

    field: str
    message: str
    reason: str = "FieldValueInvalid"


def invalid(kind: str, name: str, group: str, errors: Iterable[FieldError]) -> ApiError:
    errs = list(errors)
    qualified = f"{kind}.{group}" if group else kind
    summary = ", ".join(f"{e.field}: {e.message}" if e.field else e.message for e in errs)
    return ApiError(
        422, "Invalid", f'{qualified} "{name}" is invalid: {summary}',
        {"name": name, "group": group, "kind": kind,
         "causes": [{"reason": e.reason, "message": e.message, "field": e.field} for e in errs]},
    )


# ---------------------------------------------------------------------------------------------------------------------
# Timestamps


def rfc3339(now: datetime.datetime) -> str:
    """Kubernetes' timestamp format (second precision, ``Z``)."""
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(value: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


def human_duration(seconds: float) -> str:
    """kubectl's short age format (``5s``, ``3m12s``, ``4h``, ``2d``)."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 48:
        return f"{hours}h"
    return f"{hours // 24}d"


# ---------------------------------------------------------------------------------------------------------------------
# Selectors

@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op == "=":
            return present and value == self.values[0]
        if self.op == "!=":
            return not present or value != self.values[0]
        if self.op == "in":
            return present and value in self.values
        if self.op == "notin":
            return not present or value not in self.values
        raise AssertionError(self.op)


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse a label selector string; raises ``ApiError`` 400 on malformed input."""
    if not text:
        return []
    reqs: list[Requirement] = []
    for part in _split_top_level(text):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"([^\s!=()]+)\s+(in|notin)\s+\(([^)]*)\)", part)
        if m:
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            reqs.append(Requirement(m.group(1), m.group(2), values))
            continue
        m = re.fullmatch(r"([^\s!=()]+)\s*(==|!=|=)\s*([^\s!=(),]*)", part)
        if m:
            reqs.append(Requirement(m.group(1), "=" if m.group(2) == "==" else m.group(2), (m.group(3),)))
            continue
        m = re.fullmatch(r"!\s*([^\s!=()]+)", part)
        if m:
            reqs.append(Requirement(m.group(1), "!"))
            continue
        m = re.fullmatch(r"([^\s!=()]+)", part)
        if m:
            reqs.append(Requirement(m.group(1), "exists"))
            continue
        raise ApiError(400, "BadRequest", f"unable to parse requirement: {part!r} in label selector {text!r}")
    return reqs


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def labels_match(reqs: Iterable[Requirement], labels: Mapping[str, str] | None) -> bool:
    labels = labels or {}
    return all(r.matches(labels) for r in reqs)


def selector_from_match_labels(selector: Mapping[str, Any] | None) -> list[Requirement]:
    """A ``metav1.LabelSelector`` (matchLabels + matchExpressions) as requirements."""
    if not selector:
        return []
    reqs = [Requirement(k, "=", (str(v),)) for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        op = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}[expr["operator"]]
        reqs.append(Requirement(expr["key"], op, tuple(expr.get("values") or ())))
    return reqs


def parse_field_selector(text: str | None) -> list[tuple[str, str, str]]:
    """``metadata.name=x,status.phase!=Running`` as (path, op, value) triples."""
    if not text:
        return []
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*(==|!=|=)\s*(.*)", part)
        if not m:
            raise ApiError(400, "BadRequest", f"invalid field selector: {part!r}")
        out.append((m.group(1), "!=" if m.group(2) == "!=" else "=", m.group(3)))
    return out


def fields_match(selectors: Iterable[tuple[str, str, str]], obj: Mapping[str, Any]) -> bool:
    for path, op, value in selectors:
        actual = get_path(obj, path.split("."))
        actual_s = "" if actual is None else (str(actual).lower() if isinstance(actual, bool) else str(actual))
        if (actual_s == value) != (op == "="):
            return False
    return True


def field_path(parts: Iterable[str | int]) -> str:
    """Kubernetes' spelling of a field path: ``spec.containers[0].image``."""
    out = ""
    for part in parts:
        out = f"{out}[{part}]" if isinstance(part, int) else (f"{out}.{part}" if out else str(part))
    return out


def get_path(obj: Any, path: Iterable[str]) -> Any:
    cur = obj
    for key in path:
        if not isinstance(cur, Mapping) or key not in cur:
            return None
        cur = cur[key]
    return cur


# ---------------------------------------------------------------------------------------------------------------------
# Patches


def merge_patch(target: JSON, patch: JSON) -> JSON:
    """RFC 7386 JSON merge patch: dicts merge recursively, ``null`` deletes, everything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# Strategic-merge keys of the Kubernetes types the project's objects use. A list field whose name is here merges
# element-wise by that key; ``ports`` picks containerPort or port by what its elements carry.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "podIPs": "ip",
    "resourceClaims": "name",
}
# Lists of scalars with patch strategy "merge" (union).
MERGE_PRIMITIVE_LISTS = {"finalizers"}


def _merge_key_for(field: str, items: list[Any]) -> str | None:
    if field == "ports":
        if any(isinstance(i, Mapping) and "containerPort" in i for i in items):
            return "containerPort"
        return "port"
    return MERGE_KEYS.get(field)


def strategic_merge_patch(target: JSON, patch: JSON) -> JSON:
    """Strategic merge patch for the built-in kinds (see ``MERGE_KEYS``)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, Mapping) else {}
    deletions: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            deletions[key.split("/", 1)[1]] = list(value or [])
            continue
        if value is None:
            result.pop(key, None)
            continue
        current = result.get(key)
        if isinstance(value, list):
            result[key] = _merge_list(key, current if isinstance(current, list) else [], value)
        elif isinstance(value, Mapping):
            merged = strategic_merge_patch(current, value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = copy.deepcopy(value)
    for key, values in deletions.items():
        if isinstance(result.get(key), list):
            result[key] = [v for v in result[key] if v not in values]
    return result


def _merge_list(field: str, current: list[Any], patch: list[Any]) -> list[Any]:
    if field in MERGE_PRIMITIVE_LISTS:
        out = list(current)
        for v in patch:
            if v not in out:
                out.append(v)
        return out
    key = _merge_key_for(field, current + patch)
    if key is None or not all(isinstance(i, Mapping) for i in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, Mapping) and i.get("$patch"))]
    if any(isinstance(i, Mapping) and i.get("$patch") == "replace" for i in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, Mapping) and i.get("$patch"))]
    out = [copy.deepcopy(i) for i in current]
    for item in patch:
        k = item.get(key)
        idx = next((n for n, cur in enumerate(out) if isinstance(cur, Mapping) and cur.get(key) == k), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                del out[idx]
            continue
        if idx is None:
            out.append({kk: copy.deepcopy(vv) for kk, vv in item.items() if vv is not None})
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out


def apply_deletions(previous: JSON, current: JSON) -> JSON:
    """The keys a re-apply must remove: present in the previous applied config, absent from the new one.

    Returns a merge-patch fragment of ``None`` values (recursing into dicts both sides have), so that
    ``merge(live, apply_deletions(prev, new))`` followed by merging ``new`` mirrors kubectl's three-way apply and,
    approximately, server-side apply's removal of fields a manager stopped applying.
    """
    if not isinstance(previous, Mapping) or not isinstance(current, Mapping):
        return {}
    out: dict[str, Any] = {}
    for key, old in previous.items():
        if key not in current:
            out[key] = None
        elif isinstance(old, Mapping) and isinstance(current[key], Mapping):
            sub = apply_deletions(old, current[key])
            if sub:
                out[key] = sub
    return out


# ---------------------------------------------------------------------------------------------------------------------
# Names and labels

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

# Kinds whose names must be DNS-1123 labels (63 chars) or DNS-1035 labels; everything else: subdomain (253).
DNS1035_KINDS = {"Service"}
DNS1123_LABEL_KINDS = {"Namespace"}


# RBAC objects' names are path segments (``system:discovery``), as in Kubernetes' ValidateRBACName
PATH_SEGMENT_KINDS = {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}


def validate_name(kind: str, name: str) -> list[FieldError]:
    if kind in PATH_SEGMENT_KINDS:
        bad = not name or name in (".", "..") or "/" in name or "%" in name
        return [FieldError("metadata.name", f'Invalid value: "{name}": may not be "." or ".." and may not contain '
                                            '"/" or "%"')] if bad else []
    if kind in DNS1035_KINDS:
        ok, limit, what = DNS1035_LABEL.match(name), 63, "a DNS-1035 label"
    elif kind in DNS1123_LABEL_KINDS:
        ok, limit, what = DNS1123_LABEL.match(name), 63, "a lowercase RFC 1123 label"
    else:
        ok, limit, what = DNS1123_SUBDOMAIN.match(name), 253, "a lowercase RFC 1123 subdomain"
    if ok and len(name) <= limit:
        return []
    return [FieldError("metadata.name", f'Invalid value: "{name}": must be {what} of at most {limit} characters')]


def validate_labels(labels: Mapping[str, Any] | None, field: str = "metadata.labels") -> list[FieldError]:
    errors = []
    for key, value in (labels or {}).items():
        prefix, _, name = key.rpartition("/")
        if (prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix))) or len(name) > 63 \
                or not LABEL_NAME.match(name):
            errors.append(FieldError(field, f'Invalid value: "{key}": name part must be a qualified label key'))
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            errors.append(FieldError(field, f'Invalid value: "{value}": a valid label value must be 63 '
                                            "characters or less and consist of alphanumerics, '-', '_' or '.'"))
    return errors


# ---------------------------------------------------------------------------------------------------------------------
# JSONPath subset (printer columns) and server-side Table rendering

_JP_TOKEN = re.compile(r"\.([A-Za-z0-9_\-$]+)|\[(\d+)\]|\[\?\(@\.([A-Za-z0-9_.\-]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]|"
                       r"\[\*\]|\[['\"]([^'\"]+)['\"]\]")


def jsonpath(obj: Any, expr: str) -> list[Any]:
    """Evaluate the JSONPath forms printer columns use: ``.a.b``, ``[0]``, ``[*]``, ``[?(@.type=="Ready")]``,
    ``['dotted.key']``. Returns every match (an empty list when nothing matches)."""
    expr = expr.strip()
    if expr.startswith("{") and expr.endswith("}"):
        expr = expr[1:-1]
    expr = expr.removeprefix("$")
    nodes = [obj]
    pos = 0
    while pos < len(expr):
        m = _JP_TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"unsupported JSONPath {expr!r} at {expr[pos:]!r}")
        text = m.group(0)
        nxt: list[Any] = []
        for node in nodes:
            if m.group(1) is not None or m.group(5) is not None:
                key = m.group(1) if m.group(1) is not None else m.group(5)
                if isinstance(node, Mapping) and key in node:
                    nxt.append(node[key])
            elif m.group(2) is not None:
                if isinstance(node, list) and int(m.group(2)) < len(node):
                    nxt.append(node[int(m.group(2))])
            elif m.group(3) is not None:
                if isinstance(node, list):
                    for item in node:
                        if str(get_path(item, m.group(3).split("."))) == m.group(4):
                            nxt.append(item)
            elif text == "[*]" and isinstance(node, list):
                nxt.extend(node)
        nodes = nxt
        pos = m.end()
    return nodes


def _cell(value: list[Any], col_type: str, now: datetime.datetime) -> Any:
    if not value:
        return None
    v = value[0] if len(value) == 1 else value
    if col_type == "date" and isinstance(v, str):
        try:
            return human_duration((now - parse_rfc3339(v)).total_seconds())
        except ValueError:
            return v
    if col_type == "integer" and isinstance(v, bool | int | float):
        return int(v)
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    return v


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0
    format: str = ""


AGE_COLUMN = Column("Age", "date", ".metadata.creationTimestamp",
                    "CreationTimestamp is a timestamp representing the server time when this object was created.")


def _pod_ready(pod: Mapping[str, Any]) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pod_restarts(pod: Mapping[str, Any]) -> int:
    return sum(int(s.get("restartCount", 0)) for s in (pod.get("status") or {}).get("containerStatuses") or [])


# Built-in kinds' columns beyond Name (computed ones are callables).
BUILTIN_COLUMNS: dict[str, list[tuple[Column, Callable[[Mapping[str, Any]], Any] | None]]] = {
    "Pod": [
        (Column("Ready", "string", ""), _pod_ready),
        (Column("Status", "string", ".status.phase"), None),
        (Column("Restarts", "integer", ""), _pod_restarts),
        (AGE_COLUMN, None),
        (Column("IP", "string", ".status.podIP", priority=1), None),
    ],
    "PersistentVolumeClaim": [
        (Column("Status", "string", ".status.phase"), None),
        (Column("Capacity", "string", ".status.capacity.storage"), None),
        (AGE_COLUMN, None),
    ],
    "Service": [
        (Column("Type", "string", ".spec.type"), None),
        (Column("Cluster-IP", "string", ".spec.clusterIP"), None),
        (AGE_COLUMN, None),
    ],
}


ColumnSpec = tuple[Column, Callable[[Mapping[str, Any]], Any] | None]


def columns_for(kind: str, printer_columns: Sequence[Mapping[str, Any]] | None) -> list[ColumnSpec]:
    if printer_columns is not None:
        cols: list[ColumnSpec] = [(Column(c["name"], c.get("type", "string"), c["jsonPath"], c.get("description", ""),
                        int(c.get("priority", 0)), c.get("format", "")), None) for c in printer_columns]
        if not any(c.json_path == AGE_COLUMN.json_path for c, _ in cols):
            cols.append((AGE_COLUMN, None))
        return cols
    return BUILTIN_COLUMNS.get(kind, [(AGE_COLUMN, None)])


def to_table(items: Sequence[Mapping[str, Any]], kind: str, printer_columns: Sequence[Mapping[str, Any]] | None,
             now: datetime.datetime, resource_version: str, include_object: str = "Metadata") -> Obj:
    """A ``meta.k8s.io/v1 Table`` of ``items``, as the server renders it for ``Accept: ...;as=Table``."""
    cols = columns_for(kind, printer_columns)
    definitions = [{"name": "Name", "type": "string", "format": "name", "description": "Name of the resource",
                    "priority": 0}]
    definitions += [{"name": c.name, "type": c.type, "format": c.format, "description": c.description,
                     "priority": c.priority} for c, _ in cols]
    rows = []
    for item in items:
        cells: list[Any] = [item.get("metadata", {}).get("name")]
        for col, fn in cols:
            cells.append(fn(item) if fn is not None else _cell(jsonpath(item, col.json_path), col.type, now))
        if include_object == "Object":
            row_obj: Mapping[str, Any] = item
        elif include_object == "None":
            row_obj = {}
        else:
            row_obj = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                       "metadata": item.get("metadata", {})}
        rows.append({"cells": cells, "object": row_obj})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": definitions, "rows": rows}


def strip_for_compare(obj: Mapping[str, Any], *, keep_status: bool) -> Obj:
    """The object without the fields whose change must not bump ``metadata.generation``."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "apiVersion", "kind")
            and (keep_status or k != "status")}


# ---------------------------------------------------------------------------------------------------------------------
# Server-side apply: field sets and ownership

# A field path: map keys, and for an item of an associative list (one with a merge key, ``MERGE_KEYS``) the pair
# ("k", '{"<key>": <value>}') naming the item, as the k: elements of the API server's FieldsV1. Lists without a
# merge key are atomic: the whole list is one leaf, owned as a unit.
FieldPath = tuple[Any, ...]
# Not owned by anyone: identity and server-set metadata, and status (the operator never applies status).
_UNOWNED_META = {"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
                 "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink", "generateName"}


def _item_key(field: str, items: list[Any], associative: bool) -> str | None:
    if not associative or not items or field in MERGE_PRIMITIVE_LISTS:
        return None
    key = _merge_key_for(field, items)
    if key is None or not all(isinstance(i, Mapping) and key in i for i in items):
        return None
    return key


def leaf_fields(obj: Mapping[str, Any], *, associative: bool = True) -> dict[FieldPath, Any]:
    """Every owned leaf of an object with its value: the field set server-side apply tracks per manager."""
    out: dict[FieldPath, Any] = {}

    def walk(value: Any, path: FieldPath, field: str) -> None:
        if isinstance(value, Mapping) and value:
            for k, v in value.items():
                walk(v, (*path, k), k)
        elif isinstance(value, list) and (key := _item_key(field, value, associative)) is not None:
            for item in value:
                walk(item, (*path, ("k", json.dumps({key: item[key]}, sort_keys=True))), field)
        else:
            out[path] = value

    for k, v in obj.items():
        if k in ("apiVersion", "kind", "status"):
            continue
        if k == "metadata" and isinstance(v, Mapping):
            for mk, mv in v.items():
                if mk not in _UNOWNED_META:
                    walk(mv, ("metadata", mk), mk)
            continue
        walk(v, (k,), k)
    return out


def _child(container: Any, step: Any) -> Any:
    if isinstance(step, tuple) and isinstance(container, list):
        want = json.loads(step[1])
        return next((i for i in container if isinstance(i, Mapping) and all(i.get(k) == v for k, v in want.items())),
                    None)
    if isinstance(container, Mapping):
        return container.get(step)
    return None


def remove_fields(obj: JSON, paths: Iterable[FieldPath]) -> JSON:
    """``obj`` without the given leaves; maps and associative-list items left empty by a removal go too (an item
    whose merge key was removed is removed whole)."""
    for path in sorted(paths, key=len, reverse=True):
        parents = [obj]
        for step in path[:-1]:
            nxt = _child(parents[-1], step)
            if nxt is None:
                break
            parents.append(nxt)
        else:
            last = path[-1]
            holder = parents[-1]
            if isinstance(last, tuple) and isinstance(holder, list):
                item = _child(holder, last)
                if item is not None:
                    holder.remove(item)
            elif isinstance(holder, Mapping):
                holder.pop(last, None)  # type: ignore[attr-defined]
                if isinstance(path[-2] if len(path) > 1 else None, tuple) and isinstance(parents[-2], list):
                    key = next(iter(json.loads(path[-2][1])))
                    if key == last:
                        parents[-2].remove(holder)
            # prune what the removal emptied, innermost first
            for depth in range(len(parents) - 1, 0, -1):
                node, parent, step = parents[depth], parents[depth - 1], path[depth - 1]
                if node:
                    break
                if isinstance(parent, list):
                    if node in parent:
                        parent.remove(node)
                elif isinstance(parent, dict):
                    parent.pop(step, None)
    return obj


def fields_v1(paths: Iterable[FieldPath]) -> Obj:
    """A field set in the API server's FieldsV1 form (``f:<key>``, ``k:{...}`` and ``.`` for an item itself)."""
    root: dict[str, Any] = {}
    for path in paths:
        node = root
        for step in path:
            name = f"k:{step[1]}" if isinstance(step, tuple) else f"f:{step}"
            node = node.setdefault(name, {})
            if isinstance(step, tuple):
                node.setdefault(".", {})
    return root
