"""The Kubernetes API, as the operator uses it: plain dict bodies in, plain dicts out.

Called by the reconciler (observe and act) and by ``main`` (configuration). Built on the official ``kubernetes``
client: it resolves the connection (in-cluster service account, kubeconfig, or an explicit ``--server``) and does
authentication and TLS; requests go through its ``ApiClient`` with resource paths computed from ``apiVersion`` and
kind, so one small class covers Pods, volumes, Services, ConfigMaps, Secrets, PodDisruptionBudgets, Events and
the ``OzoneSCMCluster`` itself. Events go through ``events.k8s.io/v1`` (``KubeClient.event``): a repeat of a recent
Event extends its ``series`` (``EventSeries``) instead of creating another object, as Kubernetes' recorder does. The client is synchronous; every call runs in a worker thread so the event loop
(kopf's watches, the SCM probes) never blocks.

Errors become :class:`KubeError` (with ``status``); 404 and 409 get their own subclasses because the reconciler
treats "already gone" and "already exists" as success. Nothing here decides anything.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
import json
import logging
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

import kubernetes.client
import kubernetes.config
from kubernetes.client.exceptions import ApiException

from ozone_scm_operator import API_GROUP, API_VERSION, BACKUP_KIND, BACKUP_PLURAL, KIND, PLURAL, naming

LOG = logging.getLogger(__name__)

Body = dict[str, Any]
Bodies = list[Body]

_PLURALS = {
    "Pod": "pods",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "Service": "services",
    "ConfigMap": "configmaps",
    "Secret": "secrets",
    "Event": "events",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "CronJob": "cronjobs",
    "Job": "jobs",
    "Namespace": "namespaces",
    "StorageClass": "storageclasses",
    KIND: PLURAL,
    BACKUP_KIND: BACKUP_PLURAL,
}
_API_VERSIONS = {"StorageClass": "storage.k8s.io/v1", "PodDisruptionBudget": "policy/v1", "CronJob": "batch/v1", "Job": "batch/v1", KIND: f"{API_GROUP}/{API_VERSION}",
                 BACKUP_KIND: f"{API_GROUP}/{API_VERSION}"}
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"  # server-side apply (a JSON body is valid YAML)
FIELD_MANAGER = naming.MANAGER  # the one field manager every write of the operator names

# Called after every write of a namespaced object that may have changed it (kind, namespace, name, the object the
# server returned, or None after a delete, which is reported even when it failed). The watch-fed store (effects/store.py) uses it to know which objects it must
# not trust its cache for until the watch has caught up with the write.
WriteListener = Callable[[str, str, str, "dict[str, Any] | None"], None]


class KubeError(Exception):
    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        # the server's Retry-After (seconds), sent with 429 Too Many Requests (API Priority and Fairness) or 503
        self.retry_after = retry_after


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds (the API server sends delta-seconds); None when absent or not a number."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    pass


def load_configuration(server: str | None = None, kubeconfig: str | None = None) -> kubernetes.client.Configuration:
    """``--server`` (no auth: tests and ``kubectl proxy``), else the in-cluster service account, else kubeconfig."""
    if server:
        cfg = kubernetes.client.Configuration()
        cfg.host = server.rstrip("/")
        return cfg
    cfg = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_incluster_config(client_configuration=cfg)
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    return cfg


def resource_path(api_version: str, kind: str, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
    plural = _PLURALS.get(kind)
    if plural is None:
        raise ValueError(f"unknown kind {kind}")
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"
    if name:
        path += f"/{name}"
    if sub:
        path += f"/{sub}"
    return path


def api_version_of(kind: str) -> str:
    return _API_VERSIONS.get(kind, "v1")


EVENTS_API_VERSION = "events.k8s.io/v1"
# the Events' reportingController (a domain-qualified name, as events.k8s.io/v1 requires); reportingInstance is the
# replica's leader-election identity, the operator Pod's name
REPORTING_CONTROLLER = f"{API_GROUP}/operator"
EVENT_ACTION_RECONCILE = "Reconcile"  # the action of Events that report what a pass found rather than a step
NOTE_LIMIT = 1024  # events.k8s.io/v1 refuses a longer note (bytes)
# a repeat of an Event this long after its last occurrence starts a new Event instead of extending the series
# (client-go's events recorder finishes a series after 6 minutes without an occurrence)
SERIES_FINISH_AFTER = 6 * 60.0


def micro_time(now: datetime.datetime) -> str:
    """A Kubernetes ``MicroTime``: RFC 3339 in UTC with microseconds."""
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def truncate_note(message: str) -> str:
    """The message cut to what ``note`` may hold (1 kB of UTF-8), on a character boundary."""
    data = message.encode()
    if len(data) <= NOTE_LIMIT:
        return message
    return data[:NOTE_LIMIT - 3].decode(errors="ignore") + "..."


@dataclasses.dataclass(frozen=True)
class EventKey:
    """What makes two Events the same occurrence repeated: the object, the action, the reason, the type and the
    note (client-go leaves the note out of its key; here a changed message is news, so it starts a new Event)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    action: str
    reason: str
    type: str
    note: str


@dataclasses.dataclass
class Series:
    name: str  # the Event object
    count: int  # occurrences so far (``series.count`` once it is 2 or more)
    last_seen: float  # monotonic time of the last occurrence


class EventSeries:
    """Which Event each recent occurrence went into, so a repeat extends that Event's ``series`` (count and
    ``lastObservedTime``) instead of creating a new object, as Kubernetes' own events recorder does. Pure
    bookkeeping: no I/O, the caller's monotonic clock; bounded (the least recently seen keys are dropped)."""

    def __init__(self, finish_after: float = SERIES_FINISH_AFTER, capacity: int = 4096) -> None:
        self.finish_after = finish_after
        self.capacity = capacity
        self._series: collections.OrderedDict[EventKey, Series] = collections.OrderedDict()

    def observe(self, key: EventKey, now: float) -> Series | None:
        """A repeat of a recent Event: its series with this occurrence counted; None: post a new Event."""
        series = self._series.get(key)
        if series is None or now - series.last_seen > self.finish_after:
            self._series.pop(key, None)
            return None
        series.count += 1
        series.last_seen = now
        self._series.move_to_end(key)
        return series

    def started(self, key: EventKey, name: str, now: float) -> None:
        self._series[key] = Series(name, 1, now)
        self._series.move_to_end(key)
        while len(self._series) > self.capacity:
            self._series.popitem(last=False)

    def forget(self, key: EventKey) -> None:
        self._series.pop(key, None)


class KubeClient:
    def __init__(self, configuration: kubernetes.client.Configuration, *, timeout: float = 30.0,
                 instance: str | None = None) -> None:
        self.configuration = configuration
        self.api = kubernetes.client.ApiClient(configuration)
        self.timeout = timeout
        # who posts the Events (``reportingInstance``): the leader-election identity of this replica
        self.instance = instance or socket.gethostname()
        self.event_series = EventSeries()
        self.write_listeners: list[WriteListener] = []

    def _written(self, kind: str, namespace: str | None, name: str, obj: Body | None) -> None:
        if not namespace:
            return
        for listener in self.write_listeners:
            listener(kind, namespace, name, obj)

    def close(self) -> None:
        self.api.close()

    # ---- the one request method ----
    def _request_sync(
        self, method: str, path: str, body: Any = None, *, content_type: str | None = None, query: Mapping[str, str] | None = None
    ) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        if query:
            path = f"{path}?{urlencode(dict(query))}"
        _, url, headers, sbody, _ = self.api.param_serialize(
            method=method, resource_path=path, header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        try:
            resp = self.api.call_api(method, url, header_params=headers, body=sbody, _request_timeout=self.timeout)
            data = resp.read()
        except ApiException as exc:  # raised for transport-level failures by some client versions
            raise KubeError(exc.status or 0, str(exc.reason)) from exc
        status = resp.status
        if status >= 400:
            try:
                message = json.loads(data).get("message", "")
            except (ValueError, AttributeError):
                message = (data or b"").decode(errors="replace")[:300]
            cls = NotFound if status == 404 else Conflict if status == 409 else KubeError
            raise cls(status, f"{method} {path}: {message}", retry_after_seconds(resp.headers.get("Retry-After")))
        return json.loads(data) if data else None

    async def request(
        self, method: str, path: str, body: Any = None, *, content_type: str | None = None, query: Mapping[str, str] | None = None
    ) -> Any:
        return await asyncio.to_thread(self._request_sync, method, path, body, content_type=content_type, query=query)

    async def get_path(self, path: str) -> Body | None:
        """GET an API path; None on 404."""
        try:
            result: Body = await self.request("GET", path)
        except NotFound:
            return None
        return result

    # ---- generic object operations ----
    async def get(self, kind: str, namespace: str, name: str) -> Body | None:
        try:
            result: Body = await self.request("GET", resource_path(api_version_of(kind), kind, namespace, name))
        except NotFound:
            return None
        return result

    async def list(self, kind: str, namespace: str, labels: Mapping[str, str] | None = None) -> list[Body]:
        """Objects of a kind in a namespace, filtered by labels here (also sent as a selector for real servers)."""
        return (await self.list_versioned(kind, namespace, labels))[0]

    async def list_versioned(self, kind: str, namespace: str, labels: Mapping[str, str] | None = None
                             ) -> tuple[Bodies, str]:
        """``list`` and the list's ``resourceVersion`` (the state it shows)."""
        query = {"labelSelector": ",".join(f"{k}={v}" for k, v in labels.items())} if labels else None
        result = await self.request("GET", resource_path(api_version_of(kind), kind, namespace), query=query)
        items: Bodies = result.get("items") or []
        if labels:
            items = [i for i in items if all((i.get("metadata", {}).get("labels") or {}).get(k) == v for k, v in labels.items())]
        return items, str((result.get("metadata") or {}).get("resourceVersion") or "")

    async def create(self, body: Body) -> Body:
        """POST, under the operator's field manager (for objects created once: Pods, volumes, Jobs, Secrets holding
        generated keys; 409 Conflict when the object exists)."""
        meta = body["metadata"]
        path = resource_path(body["apiVersion"], body["kind"], meta.get("namespace"))
        result: Body = await self.request("POST", path, body, query={"fieldManager": FIELD_MANAGER})
        if body["kind"] != "Event":
            self._written(body["kind"], meta.get("namespace"), (result or {}).get("metadata", {}).get("name", meta.get("name", "")), result)
        return result

    async def merge_patch(self, kind: str, namespace: str, name: str, patch: Body, *, subresource: str | None = None) -> Body:
        path = resource_path(api_version_of(kind), kind, namespace, name, subresource)
        result: Body = await self.request("PATCH", path, patch, content_type=MERGE_PATCH,
                                          query={"fieldManager": FIELD_MANAGER})
        self._written(kind, namespace, name, result)
        return result

    async def delete(self, kind: str, namespace: str, name: str) -> bool:
        """True if deleted (or being deleted), False if it did not exist."""
        try:
            await self.request("DELETE", resource_path(api_version_of(kind), kind, namespace, name))
        except NotFound:
            return False
        finally:
            self._written(kind, namespace, name, None)
        return True

    async def apply(self, body: Body) -> Body:
        """Server-side apply of a complete intent (apiVersion, kind, metadata with labels and ownerReferences, and
        every field the operator sets): ``PATCH`` with ``application/apply-patch+yaml`` under the field manager
        ``ozone-scm-operator``, ``force=true`` (the operator's intent wins over a field another manager changed).
        Creates the object when absent. A field this manager applied before and leaves out now is removed by the
        API server, unless another manager also owns it; fields only others own (a Service's clusterIP, labels a
        user added) are kept."""
        meta = body["metadata"]
        path = resource_path(body["apiVersion"], body["kind"], meta["namespace"], meta["name"])
        result: Body = await self.request("PATCH", path, body, content_type=APPLY_PATCH,
                                          query={"fieldManager": FIELD_MANAGER, "force": "true"})
        self._written(body["kind"], meta["namespace"], meta["name"], result)
        return result

    # ---- the OzoneSCMCluster ----
    async def get_cluster(self, namespace: str, name: str) -> Body | None:
        return await self.get(KIND, namespace, name)

    async def patch_cluster_status(self, namespace: str, name: str, status: Body) -> Body:
        return await self.merge_patch(KIND, namespace, name, {"status": status}, subresource="status")

    # ---- Events (events.k8s.io/v1) ----
    async def event(self, involved: Body, type_: str, reason: str, message: str, now: datetime.datetime, *,
                    action: str = EVENT_ACTION_RECONCILE) -> None:
        """Post an ``events.k8s.io/v1`` Event about ``involved``, or count a repeat of one into its ``series``.

        Best effort: a refused or failed post is logged, never raised (no reconcile pass fails over an Event)."""
        meta = involved["metadata"]
        regarding = {
            "apiVersion": involved.get("apiVersion", f"{API_GROUP}/{API_VERSION}"),
            "kind": involved.get("kind", KIND),
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
        }
        note = truncate_note(message)
        key = EventKey(regarding["apiVersion"], regarding["kind"], meta["namespace"], meta["name"],
                       meta.get("uid") or "", action, reason, type_, note)
        try:
            series = self.event_series.observe(key, time.monotonic())
            if series is not None:
                try:
                    await self.request(
                        "PATCH", resource_path(EVENTS_API_VERSION, "Event", meta["namespace"], series.name),
                        {"series": {"count": series.count, "lastObservedTime": micro_time(now)}},
                        content_type=MERGE_PATCH,
                    )
                    return
                except NotFound:  # the Event expired (the API server's event TTL) or was deleted: a new one
                    self.event_series.forget(key)
            body = {
                "apiVersion": EVENTS_API_VERSION,
                "kind": "Event",
                # named as client-go's recorder names them (events.k8s.io/v1 refuses a generateName ending in ".")
                "metadata": {"name": f"{meta['name']}.{time.time_ns():x}", "namespace": meta["namespace"]},
                "eventTime": micro_time(now),
                "reportingController": REPORTING_CONTROLLER,
                "reportingInstance": self.instance[:128],
                "action": action[:128],
                "reason": reason[:128],
                "regarding": regarding,
                "note": note,
                "type": type_,
            }
            created = await self.request("POST", resource_path(EVENTS_API_VERSION, "Event", meta["namespace"]), body)
            self.event_series.started(key, created["metadata"]["name"], time.monotonic())
        except KubeError as exc:  # an Event is best effort: never fail a reconcile pass over one
            LOG.warning("could not post Event %s for %s: %s", reason, meta["name"], exc)


@dataclasses.dataclass(frozen=True)
class ConnectionSettings:
    """What kopf's login handler needs, derived from the same configuration the client uses."""

    server: str
    ca_path: str | None
    insecure: bool
    token: str | None
    certificate_path: str | None
    private_key_path: str | None

    @classmethod
    def of(cls, cfg: kubernetes.client.Configuration) -> ConnectionSettings:
        token = None
        auth = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
        if auth:
            token = auth.split(" ", 1)[1] if auth.lower().startswith("bearer ") else auth
        return cls(
            server=cfg.host,
            ca_path=cfg.ssl_ca_cert,
            insecure=not cfg.verify_ssl,
            token=token,
            certificate_path=cfg.cert_file,
            private_key_path=cfg.key_file,
        )
