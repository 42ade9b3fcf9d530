"""A real kopf operator, in-process, against the emulated API server: discovery, watching, finalizers, status
patches that the CRD schema prunes or keeps, adopted children garbage-collected with their owner. This is the
wiring the OzoneSCMCluster operator's integration tests rely on."""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

import kopf

from tests.e2e.local.apiserver import serving
from tests.e2e.local.test_crdschema import CRD


async def test_kopf_operator_against_the_emulator(caplog: Any) -> None:
    caplog.set_level(logging.WARNING)
    crd = copy.deepcopy(CRD)
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["handled"] = {
        "type": "object", "x-kubernetes-preserve-unknown-fields": True}
    async with serving() as (api, url):
        api.put_object(crd)
        registry = kopf.OperatorRegistry()
        deleted: list[str] = []

        @kopf.on.login(registry=registry)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return kopf.ConnectionInfo(server=url, insecure=True)

        @kopf.on.create("example.test", "v1alpha1", "widgets", registry=registry, id="handled")
        async def create(body: kopf.Body, patch: kopf.Patch, **_: Any) -> dict[str, Any]:
            child = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{body.metadata.name}-cm"},
                     "data": {"replicas": str(body.spec["replicas"])}}
            kopf.adopt(child, owner=body)
            api.put_object(child)
            patch.status["phase"] = "Running"
            return {"ok": True}

        @kopf.on.delete("example.test", "v1alpha1", "widgets", registry=registry)
        async def delete(body: kopf.Body, **_: Any) -> None:
            deleted.append(body.metadata.name)

        stop = asyncio.Event()
        operator = asyncio.create_task(kopf.operator(registry=registry, clusterwide=True, standalone=True,
                                                     stop_flag=stop))
        try:
            api.put_object({"apiVersion": "example.test/v1alpha1", "kind": "Widget",
                            "metadata": {"name": "w", "namespace": "default"}, "spec": {"image": "i"}})

            def handled() -> dict[str, Any] | None:
                w = api.get_object("example.test/v1alpha1", "Widget", "w", "default")
                return w if w and (w.get("status") or {}).get("handled") else None

            w = await api.wait_for(handled, 30)
            assert w["status"]["phase"] == "Running" and w["status"]["handled"] == {"ok": True}
            assert w["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]
            child = api.get_object("v1", "ConfigMap", "w-cm", "default")
            assert child is not None and child["metadata"]["ownerReferences"][0]["uid"] == w["metadata"]["uid"]
            api.call_delete("example.test/v1alpha1", "Widget", "w", "default")
            await api.wait_for(lambda: api.get_object("example.test/v1alpha1", "Widget", "w", "default") is None, 30)
            assert deleted == ["w"]
            assert api.get_object("v1", "ConfigMap", "w-cm", "default") is None
        finally:
            stop.set()
            await asyncio.wait_for(operator, 30)
        assert api.internal_errors == []
