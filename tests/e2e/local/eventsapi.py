"""``events.k8s.io/v1`` Events for the emulated API server: the same objects as core ``v1`` Events, another view.

A real API server stores one kind of Event and serves it through both APIs, converting field by field
(``pkg/apis/events/v1``'s conversion in Kubernetes): an Event posted through ``events.k8s.io/v1`` is listed by
``kubectl get events`` and ``kubectl describe`` (core ``v1``) and the other way round. The emulator does the same:
the ``events.k8s.io`` resource shares the core ``events`` store, and these pure functions convert between the two
shapes and check what the real server's validation checks on create and update through ``events.k8s.io/v1``.
"""

from __future__ import annotations

import copy
import datetime
import re
from typing import Any

from . import apimachinery as am

Obj = dict[str, Any]

API_VERSION = "events.k8s.io/v1"
# events.k8s.io/v1 field <-> core v1 field (the same value under another name)
_RENAMED = (
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
)
_SAME = ("metadata", "eventTime", "series", "reportingInstance", "action", "reason", "related", "type")
NOTE_LIMIT = 1024  # bytes
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def to_core(event: Obj) -> Obj:
    """An ``events.k8s.io/v1`` Event as the core ``v1`` Event the server stores."""
    out: Obj = {"apiVersion": "v1", "kind": "Event"}
    for field in _SAME:
        if event.get(field) not in (None, "", {}):
            out[field] = copy.deepcopy(event[field])
    for new, old in _RENAMED:
        if event.get(new) not in (None, "", {}, 0):
            out[old] = copy.deepcopy(event[new])
    return out


def from_core(event: Obj) -> Obj:
    """A stored (core ``v1``) Event as ``events.k8s.io/v1`` presents it."""
    out: Obj = {"apiVersion": API_VERSION, "kind": "Event"}
    for field in _SAME:
        if event.get(field) not in (None, "", {}):
            out[field] = copy.deepcopy(event[field])
    for new, old in _RENAMED:
        if event.get(old) not in (None, "", {}, 0):
            out[new] = copy.deepcopy(event[old])
    return out


def check_create(event: Obj) -> list[am.FieldError]:
    """What ``events.k8s.io/v1`` refuses on create (Kubernetes' ``ValidateEventCreate`` for this version)."""
    errors: list[am.FieldError] = []
    generate = (event.get("metadata") or {}).get("generateName") or ""
    if generate and not _DNS_SUBDOMAIN.match(generate[:-1] + "a" if generate.endswith("-") else generate):
        # a prefix may end in "-" (the random suffix follows), never in "."; a real server says the same
        errors.append(am.FieldError("metadata.generateName", f"Invalid value: {generate!r}: a lowercase RFC 1123 "
                                                             "subdomain must consist of lower case alphanumeric "
                                                             "characters, '-' or '.', and must start and end with "
                                                             "an alphanumeric character"))

    def required(field: str) -> None:
        errors.append(am.FieldError(field, "Required value", "FieldValueRequired"))

    if not event.get("eventTime"):
        required("eventTime")
    controller = event.get("reportingController") or ""
    if not controller:
        required("reportingController")
    elif not _QUALIFIED.match(controller) or len(controller) > 316:
        errors.append(am.FieldError("reportingController", f"Invalid value: {controller!r}: must be a qualified "
                                                           "name"))
    for field in ("reportingInstance", "action", "reason"):
        value = event.get(field) or ""
        if not value:
            required(field)
        elif len(value) > 128:
            errors.append(am.FieldError(field, "Too long: may not be more than 128 bytes", "FieldValueTooLong"))
    if event.get("type") not in ("Normal", "Warning"):
        errors.append(am.FieldError("type", f"Unsupported value: {event.get('type')!r}: supported values: "
                                            '"Normal", "Warning"', "FieldValueNotSupported"))
    if len((event.get("note") or "").encode()) > NOTE_LIMIT:
        errors.append(am.FieldError("note", f"Too long: may not be more than {NOTE_LIMIT} bytes",
                                    "FieldValueTooLong"))
    errors += _check_series(event)
    namespace = (event.get("metadata") or {}).get("namespace")
    regarding_ns = (event.get("regarding") or {}).get("namespace")
    if regarding_ns and namespace and regarding_ns != namespace:
        errors.append(am.FieldError("regarding.namespace", f"Invalid value: {regarding_ns!r}: does not match "
                                                           "event.namespace"))
    return errors


def check_update(new: Obj, old: Obj) -> list[am.FieldError]:
    """On update only ``series`` (and metadata) may change (Kubernetes' ``ValidateEventUpdate``)."""
    errors = _check_series(new)
    for field in ("eventTime", "action", "reason", "reportingController", "reportingInstance", "regarding",
                  "related", "note", "type", "deprecatedSource", "deprecatedFirstTimestamp",
                  "deprecatedLastTimestamp", "deprecatedCount"):
        if new.get(field) != old.get(field):
            errors.append(am.FieldError(field, "Invalid value: field is immutable", "FieldValueInvalid"))
    return errors


def _check_series(event: Obj) -> list[am.FieldError]:
    series = event.get("series")
    if series is None:
        return []
    errors = []
    count = series.get("count") if isinstance(series, dict) else None
    if not isinstance(count, int) or count < 2:
        errors.append(am.FieldError("series.count", "Invalid value: should be at least 2", "FieldValueInvalid"))
    if not isinstance(series, dict) or not series.get("lastObservedTime"):
        errors.append(am.FieldError("series.lastObservedTime", "Required value", "FieldValueRequired"))
    return errors


def _time(value: Any) -> datetime.datetime:
    if not value:
        return datetime.datetime.min.replace(tzinfo=datetime.UTC)
    return datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def occurrences(events: list[Obj]) -> list[Obj]:
    """Core ``v1`` Events as occurrences in the order they happened: an Event whose ``series`` (or ``count``) says
    it happened k times stands k times in the list, its first occurrence at ``eventTime`` (``firstTimestamp``), its
    last at ``series.lastObservedTime`` (``lastTimestamp``) and the ones between, whose times no API records, next to
    its first. So a test that remembers ``len(...)`` and later reads the entries after that index sees each
    occurrence since, whether it became a new Event or extended a series."""
    entries: list[tuple[datetime.datetime, int, Obj]] = []
    for ev in events:
        rv = int((ev.get("metadata") or {}).get("resourceVersion") or 0)
        series = ev.get("series") or {}
        count = int(series.get("count") or ev.get("count") or 1)
        first = _time(ev.get("eventTime") or ev.get("firstTimestamp") or ev.get("lastTimestamp"))
        last = _time(series.get("lastObservedTime") or ev.get("lastTimestamp")) if count > 1 else first
        entries += [(first, rv, ev)] * (count - 1 if count > 1 else 1)
        if count > 1:
            entries.append((last, rv, ev))
    entries.sort(key=lambda e: (e[0], e[1]))
    return [e[2] for e in entries]
