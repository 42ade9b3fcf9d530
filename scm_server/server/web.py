"""The SCM's HTTP endpoint (aiohttp) on ``ozone.scm.http-address``.

* ``/prom``: Prometheus exposition of this SCM's own ``CollectorRegistry`` (never the global one,
  so several SCMs in one process, as in tests, do not mix their metrics);
* ``/health``: liveness, 200 while the process serves HTTP;
* ``/ready``: readiness, 200 only when the SCM is serving: out of safemode, or with
  ``?leader=true`` the leader-ready condition (leader that applied an entry of its term), or with
  ``?member=true`` (the Kubernetes operator's Pod readiness probe) a caught-up Raft member: the HDDS-14989
  datanode-report gate is open, whatever the safemode (a ring without datanodes stays in safemode);
* ``/api/status``: a JSON snapshot (``status_summary()`` of the facade);
* ``/jmx``, ``/conf``, ``/logLevel``, ``/stacks``: Hadoop's servlets as Ozone's SCM serves them
  (:mod:`scm_server.server.hadoop_servlets`); ``/prom`` also carries Ozone's beans under the names Ozone's
  Prometheus sink writes (``scm_node_manager_in_service_healthy_nodes``, ...), beside our own names;
* ``/``: a small status page rendered with jinja2 (templates/status.html.j2).

Handlers only read the facade; nothing here changes SCM state (``/logLevel`` changes only a logger's level).
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import jinja2
from aiohttp import web
from google.protobuf import json_format
from google.protobuf import message as pb_message
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from scm_server.conf.ozone_configuration import OzoneConfiguration
from scm_server.ozone_metrics import Bean, prom_families
from scm_server.protocols import ScmStatusView
from scm_server.server import hadoop_servlets, web_errors

LOG = logging.getLogger(__name__)

TEMPLATES = Path(__file__).parent / "templates"

SCM_KEY: web.AppKey[ScmStatusView] = web.AppKey("scm", ScmStatusView)
INFO_KEY: web.AppKey[dict[str, Any]] = web.AppKey("info", dict)
# beans of the process around the SCM (its Hadoop RPC listeners' RpcActivityForPort<port>), by hostname
EXTRA_BEANS_KEY: web.AppKey[Callable[[str], list[Bean]]] = web.AppKey("extra_beans")


def _jsonable(value: Any) -> Any:
    """Make a status summary JSON-safe (protobuf messages, enums, sets, dataclasses...)."""
    if isinstance(value, pb_message.Message):
        return json_format.MessageToDict(value, preserving_proto_field_name=True)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if hasattr(value, "name") and hasattr(value, "value") and not isinstance(value, str | int | float):
        return value.name  # enums
    if hasattr(value, "__dataclass_fields__"):
        import dataclasses

        return _jsonable(dataclasses.asdict(value))
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _safe_mode(scm: ScmStatusView) -> tuple[bool, bool]:
    try:
        result = scm.in_safe_mode()
        in_sm, pre = result
        return bool(in_sm), bool(pre)
    except Exception:
        LOG.exception("in_safe_mode failed")
        return True, False


def _is_caught_up_member(scm: ScmStatusView) -> bool:
    try:
        return scm.dn_reports_ready()  # always true without Raft (a single SCM: serving is all there is)
    except Exception:
        LOG.exception("dn_reports_ready failed")
        return False


def summary(scm: ScmStatusView, info: dict[str, Any]) -> dict[str, Any]:
    try:
        data = scm.status_summary()
    except Exception as exc:
        LOG.exception("status_summary failed")
        data = {"error": f"{type(exc).__name__}: {exc}"}
    data = _jsonable(data)
    if not isinstance(data, dict):
        data = {"summary": data}
    in_sm, pre = _safe_mode(scm)
    data.setdefault("safemode", {})
    if isinstance(data["safemode"], dict):
        data["safemode"].setdefault("in_safe_mode", in_sm)
        data["safemode"].setdefault("pre_check_complete", pre)
    data["endpoints"] = info
    return data


class _OzoneNames(Collector):
    """Ozone's beans as Ozone's Prometheus sink names them, collected once per scrape."""

    def __init__(self, beans: list[Bean]) -> None:
        self._beans = beans

    def collect(self) -> Iterator[Metric]:
        return prom_families(self._beans)


def _hostname() -> str:
    return socket.gethostname()


def _ports(info: dict[str, Any]) -> dict[str, int]:
    """The Hadoop RPC ports this SCM listens on, from the daemon's listener addresses."""
    ports = {}
    for name in ("client", "datanode"):
        address = str(info.get(f"{name}_hadoop") or "")
        if address.rpartition(":")[2].isdigit():
            ports[name] = int(address.rpartition(":")[2])
    return ports


def _beans(app: web.Application) -> list[Bean]:
    """The SCM's Ozone beans and the process's (its Hadoop RPC listeners'), for /jmx and /prom."""
    hostname = _hostname()
    return [*app[SCM_KEY].ozone_beans(hostname, _ports(app[INFO_KEY])), *app[EXTRA_BEANS_KEY](hostname)]


async def prom(request: web.Request) -> web.Response:
    ours = generate_latest(request.app[SCM_KEY].metrics_registry)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_OzoneNames(_beans(request.app)))
    return web.Response(body=ours + generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "UP"})


async def ready(request: web.Request) -> web.Response:
    scm = request.app[SCM_KEY]
    in_sm, _ = _safe_mode(scm)
    leader_mode = request.query.get("leader", "").lower() in ("1", "true", "yes")
    if request.query.get("member", "").lower() in ("1", "true", "yes"):
        ok = _is_caught_up_member(scm)
        reason = "caught-up member" if ok else "not yet a caught-up member of the ring"
    elif leader_mode:
        ok = scm.is_leader_ready() and not in_sm
        reason = "leader ready and out of safemode" if ok else "not the ready leader or in safemode"
    else:
        ok = not in_sm
        reason = "out of safemode" if ok else "in safemode"
    return web.json_response({"ready": ok, "reason": reason}, status=200 if ok else 503)


async def api_status(request: web.Request) -> web.Response:
    data = summary(request.app[SCM_KEY], request.app[INFO_KEY])
    return web.Response(text=json.dumps(data, indent=2, sort_keys=True), content_type="application/json")


_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(TEMPLATES)),
    autoescape=jinja2.select_autoescape(["html", "j2"]),
    undefined=jinja2.ChainableUndefined,
)


# What each listener the daemon records (``daemon.Listening``) serves: Ozone's protocol name and the transport
_LISTENERS: dict[str, tuple[str, str]] = {
    "client": ("StorageContainerLocationProtocol (admin client)", "gRPC"),
    "block": ("ScmBlockLocationProtocol (block client)", "gRPC"),
    "datanode": ("StorageContainerDatanodeProtocol (datanodes)", "gRPC"),
    "security": ("SCMSecurityProtocol (certificates)", "gRPC"),
    "client_hadoop": ("StorageContainerLocationProtocol (admin client)", "Hadoop RPC"),
    "block_hadoop": ("ScmBlockLocationProtocol (block client)", "Hadoop RPC"),
    "datanode_hadoop": ("StorageContainerDatanodeProtocol (datanodes)", "Hadoop RPC"),
    "security_hadoop": ("SCMSecurityProtocol (certificates)", "Hadoop RPC"),
    "http": ("web UI, /prom, /jmx, /conf, /logLevel, /stacks, /health, /ready", "HTTP"),
    "https": ("web UI, /prom, /jmx, /conf, /logLevel, /stacks, /health, /ready", "HTTPS"),
}


def endpoint_rows(listening: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(protocol, transport, address) of every listener this SCM runs, in the daemon's order; a listener it does
    not run (no address: security off, Hadoop RPC left out, HTTPS only) is left out rather than shown empty."""
    return [(*_LISTENERS.get(name, (name, "")), str(address)) for name, address in listening.items() if address]


def replication_rows(rm: dict[str, Any]) -> tuple[list[tuple[str, Any, str]], bool]:
    """The ReplicationManager table: (health state, containers, sample container ids) per state, and whether any row
    has samples (the samples column is shown only then). HEALTHY has none to show; at most 20 ids per state."""
    samples = rm.get("samples") or {}
    rows = []
    for state, count in (rm.get("stats") or {}).items():
        ids = [] if state == "HEALTHY" else list(samples.get(state) or [])[:20]
        rows.append((str(state), count, ", ".join(map(str, ids))))
    return rows, any(ids for _, _, ids in rows)


async def index(request: web.Request) -> web.Response:
    data = summary(request.app[SCM_KEY], request.app[INFO_KEY])
    rm = data.get("replication_manager")
    rm_rows, rm_samples = replication_rows(rm if isinstance(rm, dict) else {})
    html = _env.get_template("status.html.j2").render(
        s=data, endpoints=endpoint_rows(request.app[INFO_KEY]), rm_rows=rm_rows, rm_samples=rm_samples,
    )
    return web.Response(text=html, content_type="text/html")


def make_app(
    scm: ScmStatusView,
    info: dict[str, Any],
    conf: OzoneConfiguration | None = None,
    secure: bool = False,
    administrators: Collection[str] = (),
    extra_beans: Callable[[str], list[Bean]] = lambda _hostname: [],
) -> web.Application:
    """The web app. ``conf`` is what /conf shows (None: /conf answers 503); ``secure``: /logLevel serves only a
    caller whose HTTPS client certificate names one of ``administrators`` (ozone.administrators); ``extra_beans``:
    the beans of the process around the SCM (its Hadoop RPC listeners'), on /jmx and /prom beside the SCM's."""
    web_errors.install()  # a gRPC client on this port: one warning line, not a traceback
    app = web.Application()
    app[SCM_KEY] = scm
    app[INFO_KEY] = info
    app[EXTRA_BEANS_KEY] = extra_beans
    servlets = hadoop_servlets.Servlets(
        lambda: _beans(app),
        conf,
        conf.source_of if conf is not None else (lambda _key: ""),
        secure,
        administrators,
    )
    app.router.add_get("/jmx", servlets.jmx)
    app.router.add_get("/conf", servlets.conf)
    app.router.add_get("/logLevel", servlets.log_level)
    app.router.add_get("/stacks", servlets.stacks)
    app.router.add_get("/", index)
    app.router.add_get("/prom", prom)
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)
    app.router.add_get("/api/status", api_status)
    return app
