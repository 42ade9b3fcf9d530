"""Hadoop's servlets on the SCM's web port (/jmx, /conf, /logLevel, /stacks), over the edge tests' fake facade."""

from __future__ import annotations

import asyncio
import logging
import xml.etree.ElementTree as ET

from aiohttp.test_utils import TestClient, TestServer

from scm_server.conf.ozone_configuration import OzoneConfiguration
from scm_server.server.hadoop_servlets import conf_answer, conf_properties, jmx_answer, log_level_page
from scm_server.server.web import make_app
from tests.unit.edges.fakes import FakeSCM

BEAN = "Hadoop:service=StorageContainerManager,name=SCMContainerMetrics"


def _conf() -> OzoneConfiguration:
    return OzoneConfiguration(
        {"ozone.scm.names": "scm1", "ssl.server.keystore.password": "hunter2"},
        defaults={"ozone.scm.container.size": "5GB"},
    )


async def test_jmx_filters_by_query_and_answers_one_attribute() -> None:
    async with TestClient(TestServer(make_app(FakeSCM(), {}), host="127.0.0.1")) as client:
        beans = (await (await client.get("/jmx")).json())["beans"]
        assert [b["name"] for b in beans] == [BEAN] and beans[0]["modelerType"] == "SCMContainerMetrics"
        assert (await (await client.get("/jmx?qry=Hadoop:service=StorageContainerManager,name=*")).json())["beans"]
        assert (await (await client.get("/jmx?qry=Hadoop:service=OzoneManager,*")).json()) == {"beans": []}
        resp = await client.get(f"/jmx?get={BEAN}::TotalContainers")
        assert resp.status == 200 and (await resp.json())["beans"][0] == {"name": BEAN, "TotalContainers": 1}
        resp = await client.get(f"/jmx?get={BEAN}::NoSuchThing")
        assert resp.status == 404
        resp = await client.get(f"/jmx?get={BEAN}")
        assert resp.status == 400 and "<object name>::<attribute>" in (await resp.json())["message"]


def test_jmx_answer_with_no_query_is_every_bean() -> None:
    beans: list[dict[str, object]] = [{"name": "a:name=x", "v": 1}, {"name": "b:name=y"}]
    assert jmx_answer(beans, None, None) == (200, {"beans": beans})


async def test_conf_as_xml_and_json_with_sources_and_redaction() -> None:
    app = make_app(FakeSCM(), {}, _conf())
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        resp = await client.get("/conf")
        assert resp.status == 200 and resp.content_type == "text/xml"
        props = {p.findtext("name"): (p.findtext("value"), p.findtext("source"))
                 for p in ET.fromstring(await resp.text()).iter("property")}
        assert props["ozone.scm.names"] == ("scm1", "explicit setting")
        assert props["ozone.scm.container.size"] == ("5GB", "ozone-default.xml")
        assert props["ssl.server.keystore.password"][0] == "<redacted>"
        body = await (await client.get("/conf?format=json")).json()
        assert {"key": "ozone.scm.names", "value": "scm1", "isFinal": False, "resource": "explicit setting"} in (
            body["properties"]
        )
        one = await (await client.get("/conf", params={"format": "json", "name": "ozone.scm.names"})).json()
        assert one == {"property": {"key": "ozone.scm.names", "value": "scm1", "isFinal": False,
                                    "resource": "explicit setting"}}
        assert (await client.get("/conf", headers={"Accept": "application/json"})).content_type == "application/json"
        resp = await client.get("/conf?name=no.such.key")
        assert resp.status == 404 and await resp.text() == "Property no.such.key not found\n"
        resp = await client.get("/conf?format=yaml")
        assert resp.status == 400 and "Bad format: yaml" in await resp.text()


def test_conf_answer_escapes_xml() -> None:
    rows = conf_properties({"k": "<a&b>"}, {"k": "/etc/ozone/ozone-site.xml"})
    status, _, body = conf_answer(rows, "xml", None)
    assert status == 200 and "<value>&lt;a&amp;b&gt;</value><final>false</final><source>ozone-site.xml</source>" in body


async def test_log_level_reads_and_sets_a_logger() -> None:
    name = "scm_server.tests.loglevel"
    logging.getLogger(name).setLevel(logging.INFO)
    async with TestClient(TestServer(make_app(FakeSCM(), {}), host="127.0.0.1")) as client:
        page = await (await client.get("/logLevel", params={"log": name})).text()
        assert f"Submitted Log Name: <b>{name}</b>" in page and "Effective Level: <b>INFO</b>" in page
        page = await (await client.get("/logLevel", params={"log": name, "level": "debug"})).text()
        assert "Setting Level to DEBUG ..." in page and "Effective Level: <b>DEBUG</b>" in page
        assert logging.getLogger(name).level == logging.DEBUG
        page = await (await client.get("/logLevel", params={"log": name, "level": "WARN"})).text()
        assert "Effective Level: <b>WARN</b>" in page and logging.getLogger(name).level == logging.WARNING
        page = await (await client.get("/logLevel", params={"log": name, "level": "LOUD"})).text()
        assert "Bad Level : <b>LOUD</b>" in page and logging.getLogger(name).level == logging.WARNING


async def test_log_level_is_refused_on_a_secure_scm() -> None:
    name = "scm_server.tests.loglevel.secure"
    logging.getLogger(name).setLevel(logging.INFO)
    async with TestClient(TestServer(make_app(FakeSCM(), {}, secure=True), host="127.0.0.1")) as client:
        resp = await client.get("/logLevel", params={"log": name, "level": "DEBUG"})
        assert resp.status == 403 and "ozone.security.enabled" in await resp.text()
    assert logging.getLogger(name).level == logging.INFO


def test_log_level_page_without_a_logger_shows_the_forms_only() -> None:
    page = log_level_page(None, None)
    assert "Submitted Log Name" not in page and 'name="level"' in page


async def test_stacks_dumps_threads_and_tasks() -> None:
    async def parked() -> None:
        await asyncio.Event().wait()

    task = asyncio.create_task(parked(), name="parked-for-stacks")
    try:
        async with TestClient(TestServer(make_app(FakeSCM(), {}), host="127.0.0.1")) as client:
            resp = await client.get("/stacks")
            text = await resp.text()
        assert resp.content_type == "text/plain" and text.startswith("Process Thread Dump: \n")
        assert "MainThread" in text and "Task parked-for-stacks (pending)" in text and "in parked" in text
    finally:
        task.cancel()
