"""The aiohttp endpoints over a fake facade."""

from __future__ import annotations

import json
from html.parser import HTMLParser

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import Counter

from scm_server.server.web import make_app

from .fakes import FakeSCM


async def test_endpoints() -> None:
    scm = FakeSCM()
    Counter("scm_test_things", "things", registry=scm.metrics_registry).inc(3)
    async with TestClient(TestServer(make_app(scm, {"client": "127.0.0.1:1"}), host="127.0.0.1")) as client:
        resp = await client.get("/health")
        assert resp.status == 200
        resp = await client.get("/ready")
        assert resp.status == 503
        assert (await resp.json())["reason"] == "in safemode"
        scm.force_exit_safe_mode()
        assert (await client.get("/ready")).status == 200
        assert (await client.get("/ready?leader=true")).status == 200
        scm.leader_ready = False  # elected, its own term's first entry not applied yet
        resp = await client.get("/ready?leader=true")
        assert resp.status == 503 and (await resp.json())["reason"] == "not the ready leader or in safemode"
        scm.leader_ready, scm.leader = True, False
        assert (await client.get("/ready?leader=true")).status == 503
        prom = await (await client.get("/prom")).text()
        assert "scm_test_things_total 3.0" in prom
        status = json.loads(await (await client.get("/api/status")).text())
        assert status["cluster_id"] == "CID-x"
        assert status["safemode"]["in_safe_mode"] is False
        assert status["endpoints"] == {"client": "127.0.0.1:1"}
        page = await (await client.get("/")).text()
        assert "Storage Container Manager" in page and "dn1" in page and "FOLLOWER" in page


async def test_member_readiness_follows_the_catch_up_gate_not_safemode() -> None:
    """``/ready?member=true`` (the operator's Pod readiness probe): a caught-up Raft member, even in safemode."""
    scm = FakeSCM()
    async with TestClient(TestServer(make_app(scm, {}), host="127.0.0.1")) as client:
        assert (await client.get("/ready?member=true")).status == 200
        scm.caught_up = False
        resp = await client.get("/ready?member=true")
        assert resp.status == 503
        assert (await resp.json())["reason"] == "not yet a caught-up member of the ring"
        scm.caught_up = True
        assert (await client.get("/ready")).status == 503  # still in safemode
        assert (await client.get("/ready?member=true")).status == 200


class _Tables(HTMLParser):
    """Each table of a page, under the ``<h2>`` before it: its rows as lists of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.heading = ""
        self._in_h2 = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "h2":
            self._in_h2, self.heading = True, ""
        elif tag == "tr":
            self.tables.setdefault(self.heading, []).append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "h2":
            self._in_h2 = False
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[self.heading][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._in_h2:
            self.heading += data
        elif self._cell is not None:
            self._cell.append(data)


async def _page_tables(scm: FakeSCM, listening: dict[str, str]) -> dict[str, list[list[str]]]:
    async with TestClient(TestServer(make_app(scm, listening), host="127.0.0.1")) as client:
        parser = _Tables()
        parser.feed(await (await client.get("/")).text())
        return parser.tables


async def test_the_page_lists_running_listeners_by_protocol_and_transport_and_no_empty_cells() -> None:
    # as the daemon records them: security off (no SCMSecurityProtocol), HTTP only (no https)
    listening = {"datanode": "0.0.0.0:19861", "block": "0.0.0.0:19863", "block_hadoop": "0.0.0.0:9863",
                 "datanode_hadoop": "0.0.0.0:9861", "client_hadoop": "0.0.0.0:9860", "security_hadoop": "",
                 "client": "0.0.0.0:19860", "http": "0.0.0.0:9876", "security": "", "https": ""}
    scm = FakeSCM()
    report = {"running": True, "stats": {"HEALTHY": 7, "UNDER_REPLICATED": 2, "MIS_REPLICATED": 0},
              "samples": {"UNDER_REPLICATED": [12, 15], "HEALTHY": [1, 2]}}
    scm.status_summary = lambda: {"cluster_id": "CID-x", "replication_manager": report}  # type: ignore[method-assign]
    tables = await _page_tables(scm, listening)

    endpoints = tables["Endpoints"]
    assert endpoints[0] == ["protocol", "transport", "listening on"]
    assert endpoints[1:] == [
        ["StorageContainerDatanodeProtocol (datanodes)", "gRPC", "0.0.0.0:19861"],
        ["ScmBlockLocationProtocol (block client)", "gRPC", "0.0.0.0:19863"],
        ["ScmBlockLocationProtocol (block client)", "Hadoop RPC", "0.0.0.0:9863"],
        ["StorageContainerDatanodeProtocol (datanodes)", "Hadoop RPC", "0.0.0.0:9861"],
        ["StorageContainerLocationProtocol (admin client)", "Hadoop RPC", "0.0.0.0:9860"],
        ["StorageContainerLocationProtocol (admin client)", "gRPC", "0.0.0.0:19860"],
        ["web UI, /prom, /jmx, /conf, /logLevel, /stacks, /health, /ready", "HTTP", "0.0.0.0:9876"],
    ]
    rm = tables["Replication manager"]
    assert rm == [["health state", "containers", "sample container IDs (up to 20)"],
                  ["HEALTHY", "7", ""], ["UNDER_REPLICATED", "2", "12, 15"], ["MIS_REPLICATED", "0", ""]]
    # nothing to sample: no samples column at all (it used to be a third column, empty in every row)
    report["samples"] = {}
    rm = (await _page_tables(scm, listening))["Replication manager"]
    assert rm == [["health state", "containers"], ["HEALTHY", "7"], ["UNDER_REPLICATED", "2"], ["MIS_REPLICATED", "0"]]
    for heading, rows in tables.items():
        assert all(len(row) == len(rows[0]) for row in rows), f"{heading}: rows of unequal width {rows}"
