"""Headless Chromium (Debian's ``chromium``) driven over the DevTools protocol, for the page checks.

One browser process per test module, on a loopback debugging port of its own choosing (``--remote-debugging-port=0``;
the port is read from ``DevToolsActivePort`` in its profile directory). Each :class:`Page` is one tab reached through
its own DevTools WebSocket (aiohttp's client): it records every console message, uncaught exception, log entry and
network request while a page loads, evaluates expressions in the page and takes screenshots.

Nothing here waits by sleeping: a load waits for ``Page.loadEventFired``, a start waits for the port file, each with
a deadline that names what did not happen.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
LOCAL_SCHEMES = frozenset({"data", "about", "blob", "file", "chrome", "devtools"})


def chromium_binary() -> str:
    """The system Chromium; installed by ``make browser-tools``. Fails loudly when missing."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError("chromium is not installed: run `make browser-tools` (Debian's chromium package)")


def leaves_the_machine(url: str) -> bool:
    """Whether a request URL goes anywhere but this machine (loopback) or the page itself (data:, about:)."""
    parts = urlsplit(url)
    if parts.scheme in LOCAL_SCHEMES:
        return False
    return (parts.hostname or "") not in LOOPBACK_HOSTS


@dataclasses.dataclass
class PageLog:
    """What a page did while it loaded: console messages and log entries by level, exceptions, requests."""

    console: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (type, text)
    log_entries: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)  # (level, source, text)
    exceptions: list[str] = dataclasses.field(default_factory=list)
    requests: list[str] = dataclasses.field(default_factory=list)
    failed_requests: list[str] = dataclasses.field(default_factory=list)

    def errors(self) -> list[str]:
        """Every console error, error-level log entry and uncaught exception, as one line each."""
        return [
            *(f"console.{kind}: {text}" for kind, text in self.console if kind in ("error", "assert")),
            *(f"log {source} {level}: {text}" for level, source, text in self.log_entries if level == "error"),
            *(f"exception: {text}" for text in self.exceptions),
        ]

    def outside_requests(self) -> list[str]:
        return [url for url in self.requests if leaves_the_machine(url)]


class Page:
    """One tab, over its own DevTools WebSocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._events: dict[str, list[asyncio.Future[dict[str, Any]]]] = {}
        self.log = PageLog()
        self._request_urls: dict[str, str] = {}
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for msg in self._ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(msg.data)
            if "id" in data:
                fut = self._pending.pop(data["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(data)
                continue
            self._record(data["method"], data.get("params", {}))
            for fut in self._events.pop(data["method"], []):
                if not fut.done():
                    fut.set_result(data.get("params", {}))
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("the DevTools connection closed"))

    def _record(self, method: str, params: dict[str, Any]) -> None:
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.log.console.append((params.get("type", ""), text))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.log.exceptions.append(details.get("exception", {}).get("description") or details.get("text", "?"))
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            self.log.log_entries.append((entry.get("level", ""), entry.get("source", ""), entry.get("text", "")))
        elif method == "Network.requestWillBeSent":
            url = params.get("request", {}).get("url", "")
            self._request_urls[params.get("requestId", "")] = url
            self.log.requests.append(url)
        elif method == "Network.loadingFailed":
            url = self._request_urls.get(params.get("requestId", ""), "?")
            self.log.failed_requests.append(f"{url}: {params.get('errorText', '')}")

    async def call(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[self._next_id] = fut
        await self._ws.send_str(json.dumps({"id": self._next_id, "method": method, "params": params}))
        try:
            reply = await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise TimeoutError(f"DevTools {method} got no answer in {timeout:.0f} s") from None
        if "error" in reply:
            raise RuntimeError(f"DevTools {method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    def _next_event(self, method: str) -> asyncio.Future[dict[str, Any]]:
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._events.setdefault(method, []).append(fut)
        return fut

    async def open(self, url: str, timeout: float = 30.0) -> PageLog:
        """Load ``url`` with a fresh log; returns the log once the load event fired."""
        self.log = PageLog()
        for domain in ("Page", "Runtime", "Log", "Network"):
            await self.call(f"{domain}.enable")
        loaded = self._next_event("Page.loadEventFired")
        nav = await self.call("Page.navigate", url=url)
        if nav.get("errorText"):
            raise RuntimeError(f"loading {url} failed: {nav['errorText']}")
        try:
            await asyncio.wait_for(loaded, timeout)
        except TimeoutError:
            raise TimeoutError(f"{url} did not finish loading in {timeout:.0f} s") from None
        return self.log

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable results only)."""
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluating {expression!r}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    async def screenshot(self, path: Path) -> Path:
        """A full-page PNG of what the page shows now."""
        shot = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    async def close(self) -> None:
        await self._ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


class Chromium:
    """A headless Chromium process with its own throwaway profile."""

    def __init__(self, profile: Path, *, ignore_certificate_errors: bool = False) -> None:
        self.profile = profile
        self.ignore_certificate_errors = ignore_certificate_errors
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._session: aiohttp.ClientSession | None = None

    async def start(self, timeout: float = 60.0) -> None:
        self.profile.mkdir(parents=True, exist_ok=True)
        args = [
            chromium_binary(), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--disable-extensions", "--metrics-recording-only", "--mute-audio",
            "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
            f"--user-data-dir={self.profile}", "--window-size=1280,1600", "about:blank",
        ]
        if self.ignore_certificate_errors:
            args.append("--ignore-certificate-errors")
        log = (self.profile / "chromium.log").open("wb")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}: see {self.profile / 'chromium.log'}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"chromium wrote no DevToolsActivePort in {timeout:.0f} s")
            await asyncio.sleep(0.05)  # polling a file the browser writes once: there is no event to wait on
        self.port = int(port_file.read_text().split()[0])
        self._session = aiohttp.ClientSession()

    @contextlib.asynccontextmanager
    async def page(self) -> AsyncIterator[Page]:
        assert self._session is not None, "start() first"
        async with self._session.put(f"http://127.0.0.1:{self.port}/json/new?about:blank") as resp:
            resp.raise_for_status()
            target = await resp.json()
        ws = await self._session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=64 * 1024 * 1024)
        page = Page(ws)
        try:
            yield page
        finally:
            await page.close()
            async with self._session.get(f"http://127.0.0.1:{self.port}/json/close/{target['id']}") as resp:
                await resp.read()

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(asyncio.to_thread(self.proc.wait), 15)
            except TimeoutError:
                self.proc.kill()
                self.proc.wait()
