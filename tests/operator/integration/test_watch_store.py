"""The watch-fed store (``effects/store.py``) against the emulated API server: the reconciler's observation reads
kopf's indexes, and an object the operator wrote is re-read with a GET until the watch has delivered the write.

kopf's index is played by a dict this test fills with ``index_entries`` from the server's objects when it decides the
"watch" delivers them, so a lagging watch is exact and deterministic; the writes and GETs are real HTTP requests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from ozone_scm_operator import naming
from ozone_scm_operator.effects.kube import KubeClient, load_configuration
from ozone_scm_operator.effects.store import WATCHED, Resync, WatchStore, index_entries
from tests.e2e.local.apiserver import EmulatedAPIServer, serving

NS = "ozone"
LABELS = {naming.LABEL_CLUSTER: "scm", naming.LABEL_MANAGED_BY: naming.MANAGER}


class Watch:
    """kopf's indexes for every watched kind, delivered up to what the test says."""

    def __init__(self, api: EmulatedAPIServer, store: WatchStore) -> None:
        self.api = api
        self.indexes: dict[str, dict[Any, list[dict[str, Any]]]] = {kind: {} for kind in WATCHED}
        for kind, index in self.indexes.items():
            store.attach(kind, index)

    def deliver(self) -> None:
        """The watch catches up with everything the server holds now."""
        for kind, index in self.indexes.items():
            index.clear()
            group, version, _plural = WATCHED[kind]
            for obj in self.api.list_objects(f"{group}/{version}" if group else version, kind, NS):
                for key, value in index_entries(kind, obj).items():
                    index.setdefault(key, []).append(value)


@pytest.fixture
async def env() -> AsyncIterator[tuple[EmulatedAPIServer, KubeClient, WatchStore, Watch]]:
    async with serving() as (api, url):
        api.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        kube = KubeClient(load_configuration(url))
        store = WatchStore(kube)
        try:
            yield api, kube, store, Watch(api, store)
        finally:
            kube.close()


def cm(name: str, value: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NS, "labels": dict(LABELS if labels is None else labels)},
            "data": {"k": value}}


def gets(api: EmulatedAPIServer) -> int:
    return api.request_counts.get(("get", "configmaps"), 0)


async def test_reads_come_from_the_index_without_requests(env: Any) -> None:
    api, _kube, store, watch = env
    api.put_object(cm("a", "1"))
    api.put_object(cm("other", "1", labels={"app": "x"}))  # none of the operator's: not indexed at all
    watch.deliver()
    assert store.ready
    before = dict(api.request_counts)
    snap = await store.snapshot(NS)
    assert [o["data"]["k"] for o in await snap.list("ConfigMap", NS, {naming.LABEL_CLUSTER: "scm"})] == ["1"]
    assert (await snap.get("ConfigMap", NS, "a"))["data"] == {"k": "1"}  # type: ignore[index]
    assert await snap.get("ConfigMap", NS, "other") is None
    assert api.request_counts == before


async def test_a_write_is_seen_before_the_watch_delivers_it(env: Any) -> None:
    api, kube, store, watch = env
    await kube.apply(cm("a", "1"))
    watch.deliver()
    await kube.apply(cm("a", "2"))  # the watch has not delivered this yet
    snap = await store.snapshot(NS)
    assert [o["data"]["k"] for o in await snap.list("ConfigMap", NS, {naming.LABEL_CLUSTER: "scm"})] == ["2"]
    assert gets(api) == 1
    snap = await store.snapshot(NS)  # still lagging: read again
    assert (await snap.get("ConfigMap", NS, "a"))["data"] == {"k": "2"}  # type: ignore[index]
    assert gets(api) == 2
    watch.deliver()
    snap = await store.snapshot(NS)  # caught up: the index is enough
    assert (await snap.get("ConfigMap", NS, "a"))["data"] == {"k": "2"}  # type: ignore[index]
    assert gets(api) == 2 and store.fresh_reads == 2


async def test_a_delete_and_a_label_removal_hide_the_object_until_the_watch_agrees(env: Any) -> None:
    _api, kube, store, watch = env
    await kube.create(cm("gone", "1"))
    await kube.create(cm("released", "1"))
    watch.deliver()
    await kube.delete("ConfigMap", NS, "gone")
    await kube.merge_patch("ConfigMap", NS, "released", {"metadata": {"labels": {naming.LABEL_CLUSTER: None}}})
    snap = await store.snapshot(NS)
    assert await snap.list("ConfigMap", NS, {naming.LABEL_CLUSTER: "scm"}) == []
    assert await snap.get("ConfigMap", NS, "gone") is None
    watch.deliver()
    reads = store.fresh_reads
    snap = await store.snapshot(NS)
    assert await snap.list("ConfigMap", NS, {naming.LABEL_CLUSTER: "scm"}) == []
    assert store.fresh_reads == reads  # nothing pending any more
    # created again by someone: the index shows it once delivered
    await kube.create(cm("gone", "3"))
    watch.deliver()
    snap = await store.snapshot(NS)
    assert [o["data"]["k"] for o in await snap.list("ConfigMap", NS, {naming.LABEL_CLUSTER: "scm"})] == ["3"]


async def test_secret_payloads_are_not_kept(env: Any) -> None:
    _api, kube, store, watch = env
    await kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": NS, "labels": LABELS,
                       "annotations": {naming.ANN_CERT_SERIAL: "ab"}}, "data": {"k": "c2VjcmV0"}})
    snap = await store.snapshot(NS)  # not delivered yet: a GET, kept without its data
    secret = await snap.get("Secret", NS, "s")
    assert secret is not None and "data" not in secret and secret["metadata"]["annotations"][naming.ANN_CERT_SERIAL] == "ab"
    watch.deliver()
    assert all("data" not in v for vs in watch.indexes["Secret"].values() for v in vs)


async def test_a_resync_list_hides_what_the_watch_missed_being_deleted(env: Any) -> None:
    """kopf keeps in its index an object deleted while its watch re-listed (no DELETED event ever comes): the
    periodic LIST pass (``Resync``) hides it, until the index holds another copy of that name."""
    api, _kube, store, watch = env
    api.put_object(cm("a", "1"))
    api.put_object(cm("b", "1"))
    watch.deliver()
    api.call_delete("v1", "ConfigMap", "b", NS)  # someone else's delete the index never hears of
    sel = {naming.LABEL_CLUSTER: "scm"}
    assert [o["metadata"]["name"] for o in await (await store.snapshot(NS)).list("ConfigMap", NS, sel)] == ["a", "b"]
    listed = await Resync(store).list("ConfigMap", NS, sel)
    assert [o["metadata"]["name"] for o in listed] == ["a"]
    snap = await store.snapshot(NS)
    assert [o["metadata"]["name"] for o in await snap.list("ConfigMap", NS, sel)] == ["a"]
    assert await snap.get("ConfigMap", NS, "b") is None
    api.put_object(cm("b", "2"))  # a new object of that name, once the watch delivers it, is seen
    watch.deliver()
    snap = await store.snapshot(NS)
    assert [o["data"]["k"] for o in await snap.list("ConfigMap", NS, sel)] == ["1", "2"]


async def test_a_resync_list_does_not_hide_what_is_newer_than_it(env: Any) -> None:
    api, _kube, store, watch = env
    api.put_object(cm("a", "1"))
    watch.deliver()
    sel = {naming.LABEL_CLUSTER: "scm"}
    # the LIST's version predates the indexed copy (the object was created after the LIST was served)
    store.listed("ConfigMap", NS, sel, [], "1")
    assert [o["metadata"]["name"] for o in await (await store.snapshot(NS)).list("ConfigMap", NS, sel)] == ["a"]
