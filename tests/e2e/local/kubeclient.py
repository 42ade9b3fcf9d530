"""A small asyncio Kubernetes API client for the kubelet fixture: requests, and list-then-watch informers.

Called by ``kubelet.py``. It talks HTTP to whatever API server URL it is given (the emulated one in tests), the way
a kubelet's informers do: list, then watch from the list's resourceVersion, re-watch from the last seen version
when a stream ends, and re-list when the server answers 410 Gone. It must not import the emulator.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp

Obj = dict[str, Any]
log = logging.getLogger(__name__)


class ApiStatusError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        message = body.get("message") if isinstance(body, dict) else str(body)
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.body = body


class KubeClient:
    def __init__(self, url: str, *, token: str | None = None, ca_file: str | None = None) -> None:
        """``token``: a bearer token (a real API server; the emulator needs none); ``ca_file``: the CA that signed
        an ``https`` server's certificate."""
        self.url = url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._ssl: ssl.SSLContext | None = ssl.create_default_context(cafile=ca_file) if ca_file else None

    async def __aenter__(self) -> KubeClient:
        connector = aiohttp.TCPConnector(ssl=self._ssl) if self._ssl is not None else None
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
                                              headers=self._headers, connector=connector)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use `async with KubeClient(url)`"
        return self._session

    async def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                      params: Mapping[str, str] | None = None, ok_missing: bool = False) -> Any:
        data = None if body is None else json.dumps(body)
        async with self.session.request(method, self.url + path, data=data, params=params,
                                        headers={"Content-Type": content_type},
                                        timeout=aiohttp.ClientTimeout(total=30)) as resp:
            text = await resp.text()
            payload = json.loads(text) if text else None
            if resp.status == 404 and ok_missing:
                return None
            if resp.status >= 400:
                raise ApiStatusError(resp.status, payload)
            return payload

    async def get(self, path: str) -> Obj | None:
        result: Obj | None = await self.request("GET", path, ok_missing=True)
        return result

    async def merge_patch(self, path: str, patch: Mapping[str, Any], *, ok_missing: bool = True) -> Obj | None:
        result: Obj | None = await self.request("PATCH", path, patch, content_type="application/merge-patch+json",
                                                ok_missing=ok_missing)
        return result

    async def post(self, path: str, body: Mapping[str, Any]) -> Obj:
        result: Obj = await self.request("POST", path, body)
        return result

    async def delete(self, path: str, options: Mapping[str, Any] | None = None) -> Obj | None:
        result: Obj | None = await self.request("DELETE", path, options or {}, ok_missing=True)
        return result

    async def informer(self, path: str, on_event: Callable[[str, Obj], Awaitable[None]],
                       synced: asyncio.Event | None = None) -> None:
        """List ``path`` then watch it forever, calling ``on_event(type, object)``; an initial list is delivered as
        ADDED events (and objects that vanished between lists as DELETED). Runs until cancelled."""
        known: dict[str, Obj] = {}
        while True:
            try:
                listing = await self.request("GET", path)
                rv = listing["metadata"]["resourceVersion"]
                current = {o["metadata"]["uid"]: o for o in listing["items"]}
                for uid, obj in list(known.items()):
                    if uid not in current:
                        del known[uid]
                        await on_event("DELETED", obj)
                for uid, obj in current.items():
                    etype = "MODIFIED" if uid in known else "ADDED"
                    known[uid] = obj
                    await on_event(etype, obj)
                if synced is not None:
                    synced.set()
                while True:
                    rv = await self._watch_once(path, rv, known, on_event)
                    if rv is None:
                        break  # 410 Gone: re-list
            except asyncio.CancelledError:
                raise
            except (aiohttp.ClientError, ApiStatusError, OSError, ValueError) as exc:
                log.debug("informer %s: %s; retrying", path, exc)
                await asyncio.sleep(0.5)

    async def _watch_once(self, path: str, rv: str, known: dict[str, Obj],
                          on_event: Callable[[str, Obj], Awaitable[None]]) -> str | None:
        params = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": "300"}
        async with self.session.get(self.url + path, params=params,
                                    timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as resp:
            if resp.status == 410:
                return None
            if resp.status >= 400:
                raise ApiStatusError(resp.status, await resp.text())
            async for line in resp.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":
                    if obj.get("code") == 410:
                        return None
                    raise ApiStatusError(int(obj.get("code", 500)), obj)
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if event["type"] == "BOOKMARK":
                    continue
                uid = obj["metadata"]["uid"]
                if event["type"] == "DELETED":
                    known.pop(uid, None)
                else:
                    known[uid] = obj
                await on_event(event["type"], obj)
        return rv


async def cancel_and_wait(tasks: list[asyncio.Task[Any]]) -> None:
    for t in tasks:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await t
