"""The operator's Kubernetes client reads a 429's ``Retry-After`` (API Priority and Fairness) from a real HTTP answer,
so the reconcile loop can wait at least that long (``backoff.Backoff``); other errors carry none."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web

from ozone_scm_operator.effects.kube import KubeClient, KubeError, load_configuration, retry_after_seconds


@pytest_asyncio.fixture
async def server() -> AsyncIterator[str]:
    async def too_many(_request: web.Request) -> web.Response:
        return web.json_response({"kind": "Status", "status": "Failure", "reason": "TooManyRequests",
                                  "message": "the server has received too many requests", "code": 429},
                                 status=429, headers={"Retry-After": "3"})

    async def broken(_request: web.Request) -> web.Response:
        return web.json_response({"kind": "Status", "message": "boom", "code": 500}, status=500)

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/ns/pods", too_many)
    app.router.add_get("/api/v1/namespaces/ns/services", broken)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_a_429_carries_the_servers_retry_after(server: str) -> None:
    kube = KubeClient(load_configuration(server))
    try:
        with pytest.raises(KubeError) as too_many:
            await kube.request("GET", "/api/v1/namespaces/ns/pods")
        assert too_many.value.status == 429 and too_many.value.retry_after == 3.0
        with pytest.raises(KubeError) as broken:
            await kube.request("GET", "/api/v1/namespaces/ns/services")
        assert broken.value.status == 500 and broken.value.retry_after is None
    finally:
        await asyncio.to_thread(kube.close)


@pytest.mark.parametrize(("header", "seconds"), [("3", 3.0), (" 1.5 ", 1.5), (None, None), ("soon", None), ("-1", None)])
def test_retry_after_header_values(header: str | None, seconds: float | None) -> None:
    assert retry_after_seconds(header) == seconds
