"""Hadoop's servlets on the SCM's web port, as an Ozone admin calls them: /jmx, /conf, /logLevel, /stacks.

* ``/jmx`` (Hadoop's JMXJsonServlet): ``{"beans": [...]}``, filtered by ``?qry=<object name pattern>``, every bean
  with ``?get=<bean>::<attribute>`` reduced to that attribute; the beans are Ozone's SCM beans with our values
  (:mod:`scm_server.ozone_beans`).
* ``/conf`` (Hadoop's ConfServlet): the effective configuration as Hadoop's XML (``<configuration><property>``
  with ``name``, ``value``, ``final``, ``source``), or JSON with ``?format=json`` (``{"properties": [...]}``, or
  ``{"property": {...}}`` with ``?name=<key>``); a key unknown to this SCM answers 404, a format other than xml or
  json 400. Values of sensitive keys (``hadoop.security.sensitive-config-keys``) are shown as ``<redacted>``.
* ``/logLevel`` (Hadoop's LogLevel servlet, what ``ozone daemonlog`` calls): ``?log=<logger>`` shows a logger's
  effective level, ``&level=<LEVEL>`` sets it (Log4j's names: TRACE, DEBUG, INFO, WARN, ERROR, FATAL, OFF, ALL,
  and Python's WARNING, CRITICAL). On a secure SCM (``ozone.security.enabled``) only administrators may, as in
  Hadoop: the caller presents, over HTTPS, a client certificate issued under the ring's roots whose CN is in
  ``ozone.administrators`` (or an SCM's); anyone else gets 403 saying so (there is no SPNEGO here).
* ``/stacks`` (Hadoop's StackServlet): a dump of every thread's stack and of every asyncio task's, as text.

The page bodies are built by pure functions (tested on their own); the handlers only read the request.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import sys
import threading
import traceback
from collections.abc import Callable, Collection, Mapping
from xml.sax.saxutils import escape

from aiohttp import web
from cryptography import x509

from scm_server.node.decommission_metrics import object_name_matches
from scm_server.ozone_metrics import Bean
from scm_server.security.core.authz import is_admin
from scm_server.security.core.identity import identity_of

REDACTED = "<redacted>"
SENSITIVE_KEY = "hadoop.security.sensitive-config-keys"
# Hadoop's default for hadoop.security.sensitive-config-keys (core-default.xml), regular expressions
DEFAULT_SENSITIVE = (
    "secret$,password$,ssl.keystore.pass$,fs.s3.*[Ss]ecret.?[Kk]ey,fs.s3a.*.server-side-encryption.key,"
    "fs.azure.account.key.*,credential$,oauth.*secret,oauth.*password,oauth.*token,"
    "hadoop.security.sensitive-config-keys"
)


# ---------------------------------------------------------------- /jmx

def jmx_answer(beans: list[dict[str, object]], qry: str | None, get: str | None) -> tuple[int, dict[str, object]]:
    """(HTTP status, body) of Hadoop's JMX servlet: ``qry`` filters by object name; ``get=<bean>::<attr>``
    answers that one attribute of that bean (400 when the attribute does not exist, as Hadoop answers)."""
    if get:
        bean_name, sep, attr = get.partition("::")
        if not sep or not attr:
            return 400, {"result": "ERROR", "message": f"query format is not as expected: {get!r}; use "
                         "?get=<object name>::<attribute>"}
        matched = [b for b in beans if object_name_matches(bean_name, str(b["name"]))]
        if not any(attr in b for b in matched):
            return 404, {"result": "ERROR", "message": f"no bean {bean_name} with attribute {attr}"}
        return 200, {"beans": [{"name": b["name"], attr: b[attr]} for b in matched if attr in b]}
    pattern = qry or "*:*"
    return 200, {"beans": [b for b in beans if object_name_matches(pattern, str(b["name"]))]}


# ---------------------------------------------------------------- /conf

def _resource(source: str) -> str:
    if source == "default":
        return "ozone-default.xml"
    if source.endswith(".xml"):
        return source.rsplit("/", 1)[-1]
    return source


def _sensitive(conf: Mapping[str, str]) -> list[re.Pattern[str]]:
    patterns = conf.get(SENSITIVE_KEY) or DEFAULT_SENSITIVE
    return [re.compile(p.strip()) for p in patterns.split(",") if p.strip()]


def conf_properties(conf: Mapping[str, str], source_of: dict[str, str]) -> list[dict[str, object]]:
    """Every key with its value (redacted when sensitive), Hadoop's ``isFinal`` and the resource it came from."""
    sensitive = _sensitive(conf)
    rows = []
    for key in sorted(conf):
        value = conf[key]
        if any(p.search(key) for p in sensitive):
            value = REDACTED
        rows.append({"key": key, "value": value, "isFinal": False, "resource": _resource(source_of.get(key, ""))})
    return rows


def conf_answer(rows: list[dict[str, object]], fmt: str, name: str | None) -> tuple[int, str, str]:
    """(status, content type, body) of Hadoop's ConfServlet for ``format`` and ``name``."""
    if fmt not in ("xml", "json"):
        return 400, "text/plain", f"Bad format: {fmt}; use format=xml or format=json\n"
    if name is not None:
        rows = [r for r in rows if r["key"] == name]
        if not rows:
            return 404, "text/plain", f"Property {name} not found\n"
    if fmt == "json":
        body = {"property": rows[0]} if name is not None else {"properties": rows}
        return 200, "application/json", json.dumps(body)
    out = ['<?xml version="1.0" encoding="UTF-8" standalone="no"?><configuration>']
    for r in rows:
        out.append(
            f"<property><name>{escape(str(r['key']))}</name><value>{escape(str(r['value']))}</value>"
            f"<final>false</final><source>{escape(str(r['resource']))}</source></property>"
        )
    out.append("</configuration>")
    return 200, "text/xml", "".join(out)


# ---------------------------------------------------------------- /logLevel

_LEVELS = {
    "ALL": logging.NOTSET + 1, "TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
    "WARN": logging.WARNING, "WARNING": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL,
    "CRITICAL": logging.CRITICAL, "OFF": logging.CRITICAL + 10,
}
_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARN", logging.ERROR: "ERROR",
          logging.CRITICAL: "FATAL", logging.CRITICAL + 10: "OFF", logging.NOTSET + 1: "ALL"}


def level_name(level: int) -> str:
    return _NAMES.get(level, logging.getLevelName(level))


def log_level_page(name: str | None, level: str | None, manager: logging.Manager | None = None) -> str:
    """Hadoop's LogLevel page: what was submitted, the level set, the effective level (its lines are what
    ``ozone daemonlog`` prints). Sets the level as a side effect when ``level`` names one."""
    lines = ["<html><head><title>Log Level</title></head><body>", "<h1>Log Level</h1>"]
    if name:
        logger = (manager or logging.Logger.manager).getLogger(name) if name != "root" else logging.getLogger()
        lines.append(f"Submitted Log Name: <b>{escape(name)}</b><br />")
        lines.append(f"Log Class: <b>{type(logger).__module__}.{type(logger).__name__}</b><br />")
        if level:
            lines.append(f"Submitted Level: <b>{escape(level)}</b><br />")
            value = _LEVELS.get(level.upper())
            if value is None:
                lines.append(f"Bad Level : <b>{escape(level)}</b>; use one of {', '.join(sorted(_LEVELS))}<br />")
            else:
                logger.setLevel(value)
                lines.append(f"Setting Level to {escape(level.upper())} ...<br />")
        lines.append(f"Effective Level: <b>{level_name(logger.getEffectiveLevel())}</b><br />")
    lines.append(
        '<hr /><form>Log: <input type="text" size="50" name="log" /> <input type="submit" value="Get Log Level" />'
        '</form><form>Log: <input type="text" size="50" name="log" /> Level: <input type="text" name="level" />'
        ' <input type="submit" value="Set Log Level" /></form></body></html>'
    )
    return "\n".join(lines) + "\n"


def log_level_denial(peer_der: bytes | None, administrators: Collection[str]) -> str | None:
    """Why a secure SCM refuses /logLevel to the caller whose TLS client certificate is ``peer_der`` (DER; None:
    none was presented, or plain HTTP), or None when it is an administrator. The TLS handshake has already checked
    the certificate against the ring's roots."""
    if peer_der is None:
        return ("logLevel: this SCM is secure (ozone.security.enabled=true) and only administrators may read or set "
                "log levels: call it over HTTPS with a client certificate whose CN is listed in ozone.administrators")
    try:
        identity = identity_of(x509.load_der_x509_certificate(peer_der))
    except ValueError as exc:  # PKIError too
        return f"logLevel: the client certificate cannot be read ({exc})"
    if not is_admin(identity, administrators):
        return (f"logLevel: access denied for {identity.name}: only administrators (ozone.administrators) may read "
                "or set log levels")
    return None


# ---------------------------------------------------------------- /stacks

def stacks_text(frames: Mapping[int, object], threads: list[threading.Thread], tasks: list[asyncio.Task[object]]) -> str:
    """Hadoop's StackServlet text: a header, then each thread (name, id, daemon) with its stack, then each asyncio
    task with its coroutine's stack (an SCM does most of its work in tasks of one event loop)."""
    out = io.StringIO()
    out.write(f"Process Thread Dump: \n{len(threads)} active threads\n")
    by_id = {t.ident: t for t in threads}
    for ident, frame in sorted(frames.items()):
        t = by_id.get(ident)
        out.write(f"Thread {ident} ({t.name if t else '?'}):{' daemon' if t is not None and t.daemon else ''}\n")
        for line in traceback.format_stack(frame):  # type: ignore[arg-type]
            out.write("    " + line.rstrip().replace("\n", "\n    ") + "\n")
    out.write(f"\n{len(tasks)} asyncio tasks\n")
    for task in sorted(tasks, key=lambda t: t.get_name()):
        out.write(f"Task {task.get_name()} ({'done' if task.done() else 'pending'}):\n")
        buf = io.StringIO()
        task.print_stack(file=buf)
        out.write("    " + buf.getvalue().rstrip().replace("\n", "\n    ") + "\n")
    return out.getvalue()


# ---------------------------------------------------------------- handlers

class Servlets:
    """The handlers, with what they read: the beans (a callable, fresh per request), the configuration (with the
    source of each key) and whether the SCM is secure."""

    def __init__(
        self,
        beans: Callable[[], list[Bean]],
        conf: Mapping[str, str] | None,
        source_of: Callable[[str], str],
        secure: bool,
        administrators: Collection[str] = (),
    ) -> None:
        self._beans = beans
        self._conf = conf
        self._source_of = source_of
        self._secure = secure
        self._administrators = administrators  # a LiveAdministrators follows ozone admin reconfig

    def bean_list(self) -> list[Bean]:
        return self._beans()

    async def jmx(self, request: web.Request) -> web.Response:
        rendered = [b.as_jmx() for b in self.bean_list()]
        status, body = jmx_answer(rendered, request.query.get("qry"), request.query.get("get"))
        return web.Response(status=status, text=json.dumps(body, indent=2), content_type="application/json")

    async def conf(self, request: web.Request) -> web.Response:
        if self._conf is None:
            return web.Response(status=503, text="no configuration is loaded in this process\n")
        accept = request.headers.get("Accept", "")
        fmt = request.query.get("format") or ("json" if "application/json" in accept else "xml")
        sources = {k: self._source_of(k) for k in self._conf}
        status, ctype, body = conf_answer(conf_properties(self._conf, sources), fmt, request.query.get("name"))
        return web.Response(status=status, text=body, content_type=ctype)

    async def log_level(self, request: web.Request) -> web.Response:
        if self._secure:
            ssl_object = request.transport.get_extra_info("ssl_object") if request.transport is not None else None
            peer = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            denial = log_level_denial(peer, self._administrators)
            if denial is not None:
                return web.Response(status=403, content_type="text/plain", text=denial + "\n")
        page = log_level_page(request.query.get("log"), request.query.get("level"))
        return web.Response(text=page, content_type="text/html")

    async def stacks(self, request: web.Request) -> web.Response:
        text = stacks_text(sys._current_frames(), threading.enumerate(), list(asyncio.all_tasks()))
        return web.Response(text=text, content_type="text/plain")

