"""The aiohttp endpoints over a fake facade."""

from __future__ import annotations

import json

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
        scm.leader = False  # the fake has no scm_context: leader-ready defaults to the safemode check
        assert (await client.get("/ready?leader=true")).status == 200
        prom = await (await client.get("/prom")).text()
        assert "scm_test_things_total 3.0" in prom
        status = json.loads(await (await client.get("/api/status")).text())
        assert status["cluster_id"] == "CID-x"
        assert status["safemode"]["in_safe_mode"] is False
        assert status["endpoints"] == {"client": "127.0.0.1:1"}
        page = await (await client.get("/")).text()
        assert "Storage Container Manager" in page and "dn1" in page and "FOLLOWER" in page


class _Gate:
    def __init__(self) -> None:
        self.open = False

    def dn_reports_ready(self) -> bool:
        return self.open


async def test_member_readiness_follows_the_catch_up_gate_not_safemode() -> None:
    """``/ready?member=true`` (the operator's Pod readiness probe): a caught-up Raft member, even in safemode."""
    scm = FakeSCM()
    async with TestClient(TestServer(make_app(scm, {}), host="127.0.0.1")) as client:
        # no HA manager: a single SCM is ready once it serves
        assert (await client.get("/ready?member=true")).status == 200
        gate = _Gate()
        scm.ha_manager = gate  # type: ignore[attr-defined]
        resp = await client.get("/ready?member=true")
        assert resp.status == 503
        assert (await resp.json())["reason"] == "not yet a caught-up member of the ring"
        gate.open = True
        assert (await client.get("/ready")).status == 503  # still in safemode
        assert (await client.get("/ready?member=true")).status == 200
