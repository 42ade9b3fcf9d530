"""ReconfigureProtocol over Hadoop RPC against a real in-process SCM whose ozone-site.xml the test rewrites:
`ozone admin reconfig properties|start|status` as Ozone's SCM answers them, the new values reaching the running
replication manager and deleted-block log."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from scm_server.client.hadoop_rpc import HadoopRpcConnection, RemoteError
from scm_server.conf.reconfiguration import (
    RECONFIGURABLE,
    PropertyChange,
    changed_properties,
    reconfigurable_changes,
)
from scm_server.proto.ozone import ReconfigureProtocol_pb2 as wire
from scm_server.server.hadoop_rpc import reconfigure_translator
from scm_server.server.hadoop_rpc.reconfigure_translator import PROTOCOL, ReconfigureTranslator
from scm_server.server.hadoop_rpc.server import HadoopRpcServer
from tests.unit.scm_state_harness import make_scm

LIMIT = "hdds.scm.replication.datanode.replication.limit"
PER_INTERVAL = "hdds.scm.block.deletion.per-interval.max"
SAMPLES = "hdds.scm.replication.container.sample.limit"
TASK_TIMEOUT = 30.0  # seconds: generous on a loaded 2-core machine


def write_site(path: Path, values: dict[str, str]) -> None:
    props = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in values.items())
    path.write_text(f"<?xml version=\"1.0\"?><configuration>{props}</configuration>")


class Reconfig:
    def __init__(self, conn: HadoopRpcConnection) -> None:
        self.conn = conn
        self.next_id = 0

    async def __call__(self, method: str, request: Any, response_cls: Any) -> Any:
        self.next_id += 1
        return response_cls.FromString(await self.conn.call(method, request, call_id=self.next_id))

    async def status(self) -> wire.GetReconfigureStatusResponseProto:
        return await self("getReconfigureStatus", wire.GetReconfigureStatusRequestProto(),
                          wire.GetReconfigureStatusResponseProto)

    async def start_and_wait(self) -> wire.GetReconfigureStatusResponseProto:
        await self("startReconfigure", wire.StartReconfigureRequestProto(), wire.StartReconfigureResponseProto)
        deadline = asyncio.get_running_loop().time() + TASK_TIMEOUT  # the task reads one small file
        while asyncio.get_running_loop().time() < deadline:
            status = await self.status()
            if status.HasField("endTime"):
                return status
            await asyncio.sleep(0.01)
        raise AssertionError(f"the reconfiguration task did not end within {TASK_TIMEOUT} s")


@pytest.fixture
async def served(tmp_path: Path) -> Any:
    scm = await make_scm(tmp_path / "meta")
    site = tmp_path / "ozone-site.xml"
    write_site(site, {LIMIT: "20"})
    scm.conf.add_site_xml(site)
    translator = ReconfigureTranslator(scm)
    server = HadoopRpcServer([translator])
    port = await server.start("127.0.0.1", 0)
    conn = HadoopRpcConnection(f"127.0.0.1:{port}", PROTOCOL)
    await conn.connect()
    yield Reconfig(conn), scm, site, translator
    await conn.close()
    await server.stop()
    await scm.stop()


async def test_server_name_and_properties(served: Any) -> None:
    call, scm, _site, _t = served
    name = await call("getServerName", wire.GetServerNameRequestProto(), wire.GetServerNameResponseProto)
    assert name.name == "SCM"
    listed = await call("listReconfigureProperties", wire.ListReconfigurePropertiesRequestProto(),
                        wire.ListReconfigurePropertiesResponseProto)
    assert list(listed.name) == sorted(RECONFIGURABLE) == scm.reconfigurable_properties()
    assert {LIMIT, PER_INTERVAL, "hdds.scm.replication.thread.interval"} <= set(listed.name)
    before = await call.status()
    assert before.startTime == 0 and not before.HasField("endTime") and list(before.changes) == []


async def test_start_applies_changed_keys_and_reports_each(served: Any) -> None:
    call, scm, site, _t = served
    write_site(site, {LIMIT: "7", PER_INTERVAL: "1234", SAMPLES: "many", "ozone.scm.container.size": "2GB"})
    scm.clock.advance(5)
    started_at = scm.clock.wall_ms()
    status = await call.start_and_wait()
    assert status.startTime == started_at and status.endTime >= started_at
    got = {c.name: (c.oldValue, c.newValue if c.HasField("newValue") else None,
                    c.errorMessage if c.HasField("errorMessage") else None) for c in status.changes}
    assert set(got) == {LIMIT, PER_INTERVAL, SAMPLES}  # the container size waits for a restart
    assert got[LIMIT] == ("20", "7", None)
    assert got[PER_INTERVAL] == ("100000", "1234", None)  # the old value is the default, as Ozone's defaults
    assert got[SAMPLES][1] == "many" and "invalid integer" in (got[SAMPLES][2] or "")
    assert scm.replication_manager.config.datanode_replication_limit == 7
    assert scm.config.replication.datanode_replication_limit == 7
    assert scm.deleted_block_log.config.deletion_per_interval_max == 1234
    assert scm.replication_manager.config.container_sample_limit == 100  # refused: unchanged
    assert scm.config.scm.container_size == 1 << 30

    write_site(site, {PER_INTERVAL: "1234"})  # the limit removed from the file: back to its default
    again = await call.start_and_wait()
    (change,) = again.changes
    assert (change.name, change.oldValue, change.newValue) == (LIMIT, "7", "20")
    assert scm.replication_manager.config.datanode_replication_limit == 20


async def test_one_task_at_a_time(served: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    call, _scm, site, translator = served
    release = threading.Event()
    real_read = reconfigure_translator.read_site_xml

    def slow_read(path: Path) -> dict[str, str]:
        assert release.wait(5), "the test never released the reconfiguration task"
        return real_read(path)

    monkeypatch.setattr(reconfigure_translator, "read_site_xml", slow_read)
    write_site(site, {LIMIT: "9"})
    await call("startReconfigure", wire.StartReconfigureRequestProto(), wire.StartReconfigureResponseProto)
    running = await call.status()
    assert running.startTime > 0 and not running.HasField("endTime")
    with pytest.raises(RemoteError) as err:
        await call("startReconfigure", wire.StartReconfigureRequestProto(), wire.StartReconfigureResponseProto)
    assert err.value.exception_class == "java.io.IOException"
    assert err.value.message == "Another reconfiguration task is running."
    release.set()
    await asyncio.wait_for(translator.wait(), 5)
    assert [c.name for c in (await call.status()).changes] == [LIMIT]


def test_changed_properties_cover_added_removed_and_changed_keys() -> None:
    changes = changed_properties({"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "5", "d": "4"})
    assert changes == [PropertyChange("b", "2", "5"), PropertyChange("c", "3", None), PropertyChange("d", None, "4")]
    assert changes[1].new_value is None  # a key without a default removed from the file: unset
    assert reconfigurable_changes([PropertyChange(LIMIT, None, "3"), PropertyChange("x", None, "1")]) == [
        PropertyChange(LIMIT, None, "3")]


async def test_every_key_ozone_lists_that_this_scm_has_is_applied_at_run_time(served: Any) -> None:
    """The keys beyond the replication manager's limits: the datanode deadline offset (commands sent from now on
    carry the new deadline), the EC pipeline keys (the pipeline manager's next EC allocation reads them) and the
    administrators (handed to the listeners the edges registered, which check calls with them)."""
    call, scm, site, _t = served
    offset, ec_min, ec_factor = ("hdds.scm.replication.event.timeout.datanode.offset", "ozone.scm.ec.pipeline.minimum",
                                 "ozone.scm.ec.pipeline.per.volume.factor")
    admins, readonly = "ozone.administrators", "ozone.readonly.administrators"
    assert {offset, ec_min, ec_factor, admins, readonly} <= set(scm.reconfigurable_properties())
    heard: list[Any] = []
    scm.administrator_listeners.append(heard.append)
    before = scm.replication_manager.datanode_deadline_ms() - scm.clock.wall_ms()
    assert before == 6 * 60 * 1000  # 12 minutes' event timeout less the 6 minutes' default offset

    write_site(site, {LIMIT: "20", offset: "10m", ec_min: "2", ec_factor: "0.5", admins: "alice, bob",
                      readonly: "carol"})
    status = await call.start_and_wait()
    errors = {c.name: c.errorMessage for c in status.changes if c.HasField("errorMessage")}
    assert errors == {} and {c.name for c in status.changes} == {offset, ec_min, ec_factor, admins, readonly}
    assert scm.replication_manager.datanode_deadline_ms() - scm.clock.wall_ms() == 2 * 60 * 1000
    assert (scm.pipeline_manager.config.ec_pipeline_minimum, scm.pipeline_manager.config.ec_pipeline_per_volume_factor
            ) == (2, 0.5)
    assert heard[-1].administrators == ("alice", "bob") and heard[-1].readonly_administrators == ("carol",)
    assert scm.administrators == heard[-1]

    write_site(site, {LIMIT: "20", offset: "12m", ec_min: "2", ec_factor: "0.5", admins: "alice, bob",
                      readonly: "carol"})  # not less than the 12 minutes' event timeout: refused, nothing applied
    (refused,) = (await call.start_and_wait()).changes
    assert refused.name == offset and "must be at least 0 and less than" in refused.errorMessage
    assert scm.replication_manager.config.event_timeout_datanode_offset.total_seconds() == 600


async def test_safemode_log_interval_reconfigured_paces_the_running_log(
        served: Any, caplog: pytest.LogCaptureFixture) -> None:
    """hdds.scm.safemode.log.interval: while in safemode the SCM logs its status and rules every interval; a
    reconfigured interval is read before the next wait."""
    call, scm, site, _t = served
    assert scm.safe_mode_manager.in_safe_mode(), "the harness SCM has no datanodes: it stays in safemode"
    assert scm.safe_mode_manager.config.log_interval.total_seconds() == 60
    write_site(site, {LIMIT: "20", "hdds.scm.safemode.log.interval": "50ms"})
    (change,) = (await call.start_and_wait()).changes
    assert change.name == "hdds.scm.safemode.log.interval" and not change.HasField("errorMessage")
    caplog.set_level("INFO", logger="scm_server.scm")
    task = asyncio.get_running_loop().create_task(scm._safemode_log_loop())
    try:
        deadline = asyncio.get_running_loop().time() + TASK_TIMEOUT
        while sum("SCM in safemode" in r.getMessage() for r in caplog.records) < 2:
            assert asyncio.get_running_loop().time() < deadline, "no safemode status lines at a 50 ms interval"
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
    line = next(r.getMessage() for r in caplog.records if "SCM in safemode" in r.getMessage())
    assert "DataNodeSafeModeRule: not validated" in line, line
