"""Watch-fed observation: the objects of every cluster, from kopf's indexes instead of a LIST per kind and pass.

Called by ``handlers`` (the index functions: :func:`index_entries` per watched kind) and by the reconciler
(``WatchStore.snapshot`` at the start of a pass). kopf keeps one watch per kind (Pods, volumes, Secrets, Services,
ConfigMaps, PodDisruptionBudgets, CronJobs, Jobs, ``OzoneSCMBackup``) and runs no handler before every index has
its initial listing, so the first pass already sees everything.

A watch cache lags behind the API server. The planner must never repeat an action because the cache has not seen
its effect yet, so the store also listens to the operator's own writes (``KubeClient.write_listeners``): for each
object written (created, applied, patched, deleted) it remembers the ``resourceVersion`` the server returned (or
that it should be gone). Until the watch has delivered that version (the indexed copy is at least as new, compared
as integers as etcd-backed servers issue them) or the object's absence, every snapshot re-reads that object with a
GET and uses the answer instead of the cached copy; a GET that finds a newer version raises the bar. So an object
the operator wrote is always seen at least as new as the write, and everything else as of the watch, which
delivers each object's changes in order (a snapshot is never older than a previous one for the same object).

kopf does not drop from an index an object that was deleted while its watch was being re-established after a
``410 Gone`` (the fresh listing only adds). So every ``resync`` seconds a pass of each cluster LISTs as before
(``Resync``): an indexed object the LIST does not show although the LIST is at least as new is hidden from then on
(for as long as the index keeps that copy of it).

Nothing here decides anything; with no index attached (unit tests, a fake client) the reconciler LISTs instead.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from ozone_scm_operator import BACKUP_KIND, naming
from ozone_scm_operator.effects.kube import Body, KubeClient

# The kinds the reconciler observes through the store, by kopf's (group, version, plural).
WATCHED: dict[str, tuple[str, str, str]] = {
    "Pod": ("", "v1", "pods"),
    "PersistentVolumeClaim": ("", "v1", "persistentvolumeclaims"),
    "Secret": ("", "v1", "secrets"),
    "Service": ("", "v1", "services"),
    "ConfigMap": ("", "v1", "configmaps"),
    "PodDisruptionBudget": ("policy", "v1", "poddisruptionbudgets"),
    "CronJob": ("batch", "v1", "cronjobs"),
    "Job": ("batch", "v1", "jobs"),
    BACKUP_KIND: ("ozone-scm.io", "v1alpha1", "ozonescmbackups"),
}
# The labels the reconciler selects by (a cluster's objects, its audit's, its backups'): an object is indexed under
# each of them it carries; objects carrying none (and are no OzoneSCMBackup) are not kept at all.
SELECTORS = (naming.LABEL_CLUSTER, naming.LABEL_AUDIT, naming.LABEL_BACKUP)

Key = tuple[str, ...]


def _rv(obj: Mapping[str, Any] | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")


def _newer_or_same(have: str, want: str) -> bool:
    try:
        return int(have) >= int(want)
    except ValueError:
        return have == want


def slim(kind: str, body: Mapping[str, Any]) -> Body:
    """What the store keeps of an object: no managedFields, and no Secret payload (the reconciler reads only a
    Secret's annotations; it GETs the few it needs the data of)."""
    out = copy.deepcopy(dict(body))
    (out.get("metadata") or {}).pop("managedFields", None)
    if kind == "Secret":
        out.pop("data", None)
        out.pop("stringData", None)
    return out


def index_entries(kind: str, body: Mapping[str, Any]) -> dict[Key, Body]:
    """The index keys of one object (kopf's index function for its kind): by each selector label it carries, by
    name, and OzoneSCMBackups by namespace; empty for objects that are none of the operator's."""
    meta = body.get("metadata") or {}
    ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    labels = meta.get("labels") or {}
    keys: list[Key] = [(kind, ns, "label", label, str(labels[label])) for label in SELECTORS if labels.get(label)]
    if kind == BACKUP_KIND:
        keys.append((kind, ns, "all"))
    if not keys:
        return {}
    keys.append((kind, ns, "name", name))
    value = slim(kind, body)
    return {k: value for k in keys}


@dataclasses.dataclass
class _Pending:
    resource_version: str | None  # None: the object should be gone
    indexed: bool  # whether its last known version is one the index keeps at all


class Snapshot:
    """One pass's view: the index's objects with the operator's not yet watched writes replaced by fresh GETs.
    Offers the two reads the reconciler's observation makes (``list`` by a selector label, ``get`` by name)."""

    def __init__(self, store: WatchStore, namespace: str, fresh: Mapping[tuple[str, str], Body | None]) -> None:
        self._store = store
        self._ns = namespace
        self._fresh = fresh  # (kind, name) -> the object as just read (None: absent)

    @property
    def fresh_reads(self) -> int:
        """How many objects this snapshot read with a GET because the watch had not delivered a write yet."""
        return len(self._fresh)

    async def list(self, kind: str, namespace: str, labels: Mapping[str, str] | None = None) -> list[Body]:
        assert namespace == self._ns, "a snapshot covers one namespace"
        if labels:
            first = next((k for k in SELECTORS if k in labels), None)
            if first is None:
                raise ValueError(f"the store indexes no selector in {dict(labels)}")
            key: Key = (kind, namespace, "label", first, labels[first])
        elif kind == BACKUP_KIND:
            key = (kind, namespace, "all")
        else:
            raise ValueError(f"the store lists {kind} only by a selector label")
        out = {str(o["metadata"]["name"]): o for o in self._store.lookup(key)
               if (kind, str(o["metadata"]["name"])) not in self._fresh and not self._store.vanished(kind, o)}
        for (k, name), obj in self._fresh.items():
            if k == kind and obj is not None and (key in index_entries(kind, obj)):
                out[name] = obj
        wanted = dict(labels or {})
        return [copy.deepcopy(o) for _, o in sorted(out.items())
                if all(((o.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in wanted.items())]

    async def get(self, kind: str, namespace: str, name: str) -> Body | None:
        assert namespace == self._ns, "a snapshot covers one namespace"
        if (kind, name) in self._fresh:
            obj = self._fresh[(kind, name)]
            return copy.deepcopy(obj) if obj is not None else None
        cached = self._store.cached(kind, namespace, name)
        return copy.deepcopy(cached) if cached is not None and not self._store.vanished(kind, cached) else None


class Resync:
    """A pass's reads straight from the API server (LIST and GET, as without a store) that also tell the store
    which indexed objects the server no longer has."""

    def __init__(self, store: WatchStore) -> None:
        self._store = store

    async def list(self, kind: str, namespace: str, labels: Mapping[str, str] | None = None) -> list[Body]:
        items, version = await self._store.kube.list_versioned(kind, namespace, labels)
        if kind in WATCHED:
            self._store.listed(kind, namespace, labels, items, version)
        return items

    async def get(self, kind: str, namespace: str, name: str) -> Body | None:
        return await self._store.kube.get(kind, namespace, name)


class WatchStore:
    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self.indexes: dict[str, Mapping[Any, Iterable[Body]]] = {}
        self._pending: dict[tuple[str, str, str], _Pending] = {}
        self.fresh_reads = 0  # GETs made because the watch had not caught up with a write (tests, /metrics)
        # indexed copies a newer LIST did not show: (kind, namespace, name) -> (uid, resourceVersion) of the copy
        self._vanished: dict[tuple[str, str, str], tuple[str, str]] = {}
        kube.write_listeners.append(self.written)

    @property
    def ready(self) -> bool:
        return set(self.indexes) >= set(WATCHED)

    def attach(self, kind: str, index: Mapping[Any, Iterable[Body]]) -> None:
        self.indexes[kind] = index

    def written(self, kind: str, namespace: str, name: str, obj: Body | None) -> None:
        if kind not in WATCHED:
            return
        key = (kind, namespace, name)
        if obj is None or obj.get("kind") == "Status":
            self._pending[key] = _Pending(None, False)
            return
        rv = _rv(obj)
        old = self._pending.get(key)
        if old is not None and old.resource_version and rv and _newer_or_same(old.resource_version, rv) \
                and old.resource_version != rv:
            return  # an older answer than one already seen
        self._pending[key] = _Pending(rv or None, bool(index_entries(kind, obj)))

    def lookup(self, key: Key) -> list[Body]:
        index = self.indexes.get(key[0])
        if index is None or key not in index:
            return []
        return list(index[key])

    def vanished(self, kind: str, obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        key = (kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        mark = self._vanished.get(key)
        if mark is None:
            return False
        if mark == (str(meta.get("uid") or ""), _rv(obj)):
            return True
        del self._vanished[key]  # the index moved on (a newer copy, another object of the name)
        return False

    def listed(self, kind: str, namespace: str, labels: Mapping[str, str] | None, items: list[Body],
               version: str) -> None:
        """A LIST of ``version`` showed ``items``: indexed objects of that selection it did not show, and not
        newer than it, are gone."""
        names = {str((i.get("metadata") or {}).get("name")) for i in items}
        first = next((k for k in SELECTORS if labels and k in labels), None)
        if first is not None and labels:
            key: Key = (kind, namespace, "label", first, labels[first])
        elif not labels and kind == BACKUP_KIND:
            key = (kind, namespace, "all")
        else:
            return
        for obj in self.lookup(key):
            meta = obj.get("metadata") or {}
            if str(meta.get("name")) in names or not _newer_or_same(version, _rv(obj)):
                continue
            if labels and not all((meta.get("labels") or {}).get(k) == v for k, v in labels.items()):
                continue
            self._vanished[(kind, namespace, str(meta.get("name")))] = (str(meta.get("uid") or ""), _rv(obj))

    def cached(self, kind: str, namespace: str, name: str) -> Body | None:
        found = self.lookup((kind, namespace, "name", name))
        return max(found, key=lambda o: int(_rv(o)) if _rv(o).isdigit() else 0) if found else None

    def _caught_up(self, kind: str, namespace: str, name: str, pending: _Pending) -> bool:
        cached = self.cached(kind, namespace, name)
        if pending.resource_version is None or not pending.indexed:
            return cached is None or (pending.resource_version is not None
                                      and _newer_or_same(_rv(cached), pending.resource_version)
                                      and _rv(cached) != pending.resource_version)
        return cached is not None and _newer_or_same(_rv(cached), pending.resource_version)

    async def snapshot(self, namespace: str) -> Snapshot:
        fresh: dict[tuple[str, str], Body | None] = {}
        for key, pending in list(self._pending.items()):
            kind, ns, name = key
            if ns != namespace:
                continue
            if self._caught_up(kind, ns, name, pending):
                if self._pending.get(key) is pending:
                    del self._pending[key]
                continue
            obj = await self.kube.get(kind, ns, name)
            self.fresh_reads += 1
            fresh[(kind, name)] = slim(kind, obj) if obj is not None else None
            self.written(kind, ns, name, obj)
        return Snapshot(self, namespace, fresh)
