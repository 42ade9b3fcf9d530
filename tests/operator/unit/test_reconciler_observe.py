"""``Reconciler.observe`` is a pass's only reader: the resource, its objects, and the payload of the Secrets a
security step needs (the watch-fed store keeps no Secret payload, so it GETs each once per resourceVersion it
observes). The Kubernetes API is a counting fake that lists Secrets without their data, as the store does; the SCMs
answer nothing."""

from __future__ import annotations

import copy
from typing import Any

from ozone_scm_operator import naming, planner
from ozone_scm_operator.reconciler import Reconciler

BODY = {"apiVersion": "ozone-scm.io/v1alpha1", "kind": "OzoneSCMCluster",
        "metadata": {"name": "scm", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {"replicas": 1, "security": {"enabled": True}}}


def _secret(name: str, version: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "data": data,
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": version,
                         "labels": {naming.LABEL_CLUSTER: "scm"}}}


class SlimKube:
    """Lists without Secret payloads (as ``effects/store.py`` keeps them); GETs whole objects, counted."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.gets: list[tuple[str, str]] = []
        self.body = copy.deepcopy(BODY)

    async def get_cluster(self, namespace: str, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.body)

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets.append((kind, name))
        obj = self.objects.get((kind, name))
        return copy.deepcopy(obj) if obj is not None else None

    async def list(self, kind: str, namespace: str, labels: Any = None) -> list[dict[str, Any]]:
        out = []
        for (k, _), obj in sorted(self.objects.items()):
            if k == kind and all((obj["metadata"].get("labels") or {}).get(x) == v for x, v in (labels or {}).items()):
                out.append({key: v for key, v in copy.deepcopy(obj).items() if key != "data"})
        return out


class NoSCM:
    async def probe_all(self, endpoints: Any, security: Any) -> dict[str, Any]:
        return {}

    async def ring(self, endpoint: Any, security: Any) -> None:
        return None


def _secret_gets(kube: SlimKube) -> list[str]:
    return [name for kind, name in kube.gets if kind == "Secret"]


async def test_secret_payloads_are_read_once_per_version_observed() -> None:
    kube = SlimKube()
    client = naming.operator_client_secret_name("scm")
    kube.objects[("Secret", client)] = _secret(client, "10", **{"tls.key": "a2V5"})
    kube.objects[("Secret", "scm-other")] = _secret("scm-other", "11", x="eA==")
    r = Reconciler(kube, NoSCM())  # type: ignore[arg-type]
    seen = await r.observe("ns", "scm")
    assert seen is not None
    assert seen.reads.secret_data[client] == {"tls.key": "a2V5"}
    assert "scm-other" not in seen.reads.secret_data  # only the Secrets a step signs or proves with
    assert ("Secret", client) in seen.reads.metadata and seen.security is None  # no certificate yet
    assert _secret_gets(kube).count(client) == 1
    kube.gets.clear()
    again = await r.observe("ns", "scm")
    assert again is not None and again.reads.secret_data[client] == {"tls.key": "a2V5"}
    assert client not in _secret_gets(kube)  # the same version: kept, not read again
    kube.objects[("Secret", client)] = _secret(client, "12", **{"tls.key": "bmV3"})
    changed = await r.observe("ns", "scm")
    assert changed is not None and changed.reads.secret_data[client] == {"tls.key": "bmV3"}
    assert _secret_gets(kube).count(client) == 1


async def test_a_resource_being_deleted_is_not_observed() -> None:
    kube = SlimKube()
    r = Reconciler(kube, NoSCM())  # type: ignore[arg-type]
    kube.body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert await r.observe("ns", "scm") is None


class PatchingKube(SlimKube):
    def __init__(self) -> None:
        super().__init__()
        self.patches: list[tuple[str, str, dict[str, Any], str | None]] = []

    async def merge_patch(self, kind: str, namespace: str, name: str, patch: dict[str, Any], *,
                          subresource: str | None = None) -> dict[str, Any]:
        self.patches.append((kind, name, patch, subresource))
        return patch


async def test_a_step_patches_from_the_observation_and_reads_nothing_more() -> None:
    kube = PatchingKube()
    kube.objects[("PersistentVolumeClaim", "scm-0-data")] = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "scm-0-data", "namespace": "ns", "resourceVersion": "31",
                     "labels": {naming.LABEL_CLUSTER: "scm"},
                     "ownerReferences": [{"uid": "u", "controller": True}, {"uid": "keep"}]}}
    r = Reconciler(kube, NoSCM())  # type: ignore[arg-type]
    seen = await r.observe("ns", "scm")
    assert seen is not None
    kube.gets.clear()
    await r.act(seen.ref, planner.ReleasePVC(target="scm-0-data", reason="", message=""), seen)
    assert kube.gets == []  # act reads nothing: observe did
    assert kube.patches == [("PersistentVolumeClaim", "scm-0-data",
                             {"metadata": {"ownerReferences": [{"uid": "keep"}], "resourceVersion": "31"}}, None)]
