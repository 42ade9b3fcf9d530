"""The simulated datanode load (bench/dn_load.py): which reports a heartbeat carries at Ozone's default intervals,
and that the encoded heartbeat is Ozone's message with the layout version Ozone's SCM requires."""

from __future__ import annotations

import pytest

from bench import dn_load
from bench.dn_load import ICR, NODE, PIPELINES, ReportSchedule
from scm_server.proto.ozone import ScmServerDatanodeHeartbeatProtocol_pb2 as wire_dn


def test_default_schedule_sends_node_and_pipeline_reports_every_second_heartbeat_and_an_icr_every_fourth() -> None:
    s = ReportSchedule()
    assert s.every() == {NODE: 2, PIPELINES: 2, ICR: 4}
    assert s.period() == 4
    assert [s.carries(b) for b in range(5)] == [
        frozenset({NODE, PIPELINES, ICR}), frozenset(), frozenset({NODE, PIPELINES}), frozenset(),
        frozenset({NODE, PIPELINES, ICR})]


@pytest.mark.parametrize(("schedule", "period"), [
    (ReportSchedule(heartbeat_s=30, node_report_s=90, pipeline_report_s=60, icr_every=1), 6),
    (ReportSchedule(heartbeat_s=60, node_report_s=30, pipeline_report_s=30, icr_every=1), 1),  # at least every beat
])
def test_period_is_the_least_common_multiple_of_the_report_periods(schedule: ReportSchedule, period: int) -> None:
    assert schedule.period() == period


def test_encoded_heartbeat_is_ozones_send_heartbeat_with_the_layout_and_the_reports_asked_for() -> None:
    load = dn_load.DatanodeLoad(2, "t")
    dn = load.datanodes[1]
    full = wire_dn.SCMDatanodeRequest.FromString(
        dn_load.wire_request(dn_load.heartbeat(dn, frozenset({NODE, PIPELINES, ICR}), 7, load.layout)))
    assert full.cmdType == wire_dn.SendHeartbeat
    hb = full.sendHeartbeatRequest
    assert hb.datanodeDetails.uuid == dn.uuid
    assert (hb.dataNodeLayoutVersion.metadataLayoutVersion, hb.dataNodeLayoutVersion.softwareLayoutVersion) == (
        dn_load.OZONE_LAYOUT_VERSION, dn_load.OZONE_LAYOUT_VERSION)
    assert hb.HasField("nodeReport") and hb.HasField("pipelineReports")
    # the Ratis metadata volume Ozone's pipeline placement asks about is reported
    assert hb.nodeReport.metadataStorageReport[0].remaining > 1 << 30
    assert [r.containerID for icr in hb.incrementalContainerReport for r in icr.report] == [7]
    bare = wire_dn.SCMDatanodeRequest.FromString(
        dn_load.wire_request(dn_load.heartbeat(dn, frozenset(), 7, load.layout))).sendHeartbeatRequest
    assert not bare.HasField("nodeReport") and not bare.HasField("pipelineReports")
    assert not bare.incrementalContainerReport


async def test_keep_alive_sends_each_datanode_its_next_heartbeat_each_interval_until_stopped() -> None:
    """Between the rows every datanode heartbeats at its interval (none goes stale while a ring is measured): each
    round one call per datanode, each datanode's own requests in its schedule's order, until ``stop`` is set."""
    import asyncio

    load = dn_load.DatanodeLoad(3, "t", ReportSchedule(heartbeat_s=0.01))
    load.requests = [[f"dn{i}-beat{b}".encode() for b in range(2)] for i in range(3)]
    sent: list[tuple[int, bytes]] = []
    stop = asyncio.Event()

    async def submit(i: int, body: bytes) -> None:
        sent.append((i, body))
        if len(sent) == 6:
            stop.set()

    load._submit = submit  # type: ignore[method-assign]
    assert await asyncio.wait_for(load.keep_alive(stop), 10) == 6
    assert sorted(sent) == [(i, f"dn{i}-beat{b}".encode()) for i in range(3) for b in range(2)]
    assert load._beat == [2, 2, 2]  # the measuring loop's next heartbeat of each datanode follows these
