"""What the on-call reads first (``scm_audit.report``, pure: no Spark): the headline is the leader's
view with the others beside it, a view is marked partial while its SCM has not heard from every
datanode since it started, SCM's own verdict fills its column, the ReplicationManager report shows
its age and RM's state, and "every state carried" vs "main state" counts are labelled."""

from __future__ import annotations

import datetime as dt
import html
import re
from pathlib import Path
from typing import Any

from exports import write_export

from scm_audit import inputs, report
from scm_audit import vocabulary as V
from scm_server import audit_format as fmt

CAPTURED = 1_700_000_000_000  # write_export's capturedAtMs
STARTED = 1_699_999_000_000
NODES = [f"dn{i:02d}" for i in range(1, 19)]
FIELDS = ("kind", "container_id", "lifecycle_state", "datanode_uuid", "audit_verdict", "scm_verdict", "expected_replicas",
          "actual_replicas", "datanodes", "fields", "detail", "scm_ids")


def two_scms(root: Path, *, scm2_heard: int = 18, rm: dict[str, Any] | None = None) -> inputs.ExportSet:
    rows = {fmt.CONTAINERS: [{"container_id": 1}], fmt.RM_VERDICTS: [{"container_id": 1, "health": "HEALTHY"}]}
    write_export(root / "scm1", rows, scm_id="u1", node_id="scm1", is_leader=True, **(rm or {}))
    write_export(root / "scm2", rows, scm_id="u2", node_id="scm2", is_leader=False)
    return inputs.discover(root)


def node_rows(scm2_heard: int) -> list[dict[str, Any]]:
    leader = [{"scm": "scm1", "datanode_uuid": d, "health": "HEALTHY", "first_report_ms": STARTED + 5} for d in NODES]
    # scm2 restarted: 6 datanodes have re-registered with their full report, the other 12 it does not know yet.
    follower = [{"scm": "scm2", "datanode_uuid": d, "health": "HEALTHY", "first_report_ms": STARTED + 9} for d in NODES[:scm2_heard]]
    return leader + follower


def summary(exports: inputs.ExportSet, **over: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "run_id": "r1", "started_at": dt.datetime(2026, 11, 27, 6, 0, tzinfo=dt.UTC), "seconds": 1.0,
        "master": "local[2]", "spark_version": "4", "exports": exports,
        "health": {"scm1": {"HEALTHY": 96, "MISSING": 2, "UNDER_REPLICATED": 2},
                   "scm2": {"HEALTHY": 91, "MISSING": 7, "UNDER_REPLICATED": 2}},
        "lifecycle": {"scm1": {"CLOSED": 100}, "scm2": {"CLOSED": 100}},
        "replicas": {"scm1": 290, "scm2": 120}, "datanodes": {"scm1": 18, "scm2": 6},
        "by_kind": {"MISSING": 7, "UNDER_REPLICATED": 2},
        "per_scm_kind": {"scm1": {"MISSING": 2, "UNDER_REPLICATED": 2}, "scm2": {"MISSING": 7, "UNDER_REPLICATED": 2}},
        "by_datanode": [], "by_rack": [],
        "samples": {"MISSING": [{**dict.fromkeys(FIELDS), "kind": "MISSING", "container_id": 9, "audit_verdict": "MISSING",
                                 "scm_verdict": "MISSING", "scm_ids": ["scm1", "scm2"]}]},
        "datanode_rows": node_rows(6),
    }
    args.update(over)
    return report.build_summary(**args)


def text(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def test_the_headline_is_the_leaders_view_and_a_partial_view_is_marked(tmp_path: Path) -> None:
    s = summary(two_scms(tmp_path / "e"))
    assert s["primary"] == "scm1"
    assert (s["findings"]["total"], s["findings"]["byKind"]) == (4, {"MISSING": 2, "UNDER_REPLICATED": 2})
    assert s["findings"]["allViews"] == {"total": 9, "byKind": {"MISSING": 7, "UNDER_REPLICATED": 2}}
    assert s["perScm"]["scm2"]["findingsByKind"]["MISSING"] == 7
    assert s["perScm"]["scm1"]["view"]["partial"] is False
    view = s["perScm"]["scm2"]["view"]
    assert (view["partial"], view["heard"], view["expected"]) == (True, 6, 18) and view["notHeard"][0] == "dn07"
    assert s["views"] == {"primary": "scm1", "partial": ["scm2"], "complete": False}
    page = report.render_html(s, [report.trend_point(s)])
    words = text(page)
    assert re.search(r"findings \(scm1\) 4 9 across all SCMs' views", words), words[:800]
    assert "MISSING — 2 in scm1's view, 7 across all views" in words
    assert "The view of scm2 is partial : it has had a full container report from only 6 of 18 datanodes since it started" in words
    assert 'class="note good"' not in page  # no green "one barrier" banner over a partial view
    assert "their replicas need not, since scm2 has not heard from every datanode yet" in words
    assert report.trend_point(s)["findings"] == 4
    assert "PARTIAL view of scm2" in report.one_line(s, tmp_path)

    complete = summary(two_scms(tmp_path / "f"), datanode_rows=node_rows(18))
    assert complete["views"]["complete"] and 'class="note good"' in report.render_html(complete, [])


def test_a_datanode_only_an_open_pipeline_names_or_one_without_a_report_makes_a_view_partial(tmp_path: Path) -> None:
    exports = two_scms(tmp_path / "e")
    rows = node_rows(18)
    rows[-1] = {**rows[-1], "first_report_ms": 0}  # scm2 knows dn18 but has had no full report from it
    cov = report.view_coverage(exports, rows, open_pipeline_members=["dn-new"])
    assert (cov["scm1"]["heard"], cov["scm1"]["expected"], cov["scm1"]["notHeard"]) == (18, 19, ["dn-new"])
    assert (cov["scm2"]["heard"], cov["scm2"]["notHeard"]) == (17, ["dn-new", "dn18"])
    # A datanode DEAD wherever it is known is not waited for.
    dead = [{**r, "health": "DEAD"} if r["datanode_uuid"] == "dn18" else r for r in node_rows(17)]
    assert not report.view_coverage(exports, dead)["scm2"]["partial"]


def test_scms_own_verdict_fills_its_column(tmp_path: Path) -> None:
    s = summary(two_scms(tmp_path / "e"))
    page = report.render_html(s, [])
    assert re.search(r'<td class="scm-verdict">MISSING</td>', page)


def test_a_report_of_a_stopped_replication_manager_shows_its_age_and_state(tmp_path: Path) -> None:
    taken = CAPTURED - (3 * 3600 + 12 * 60) * 1000
    rm = {"rm_state": "STOPPED", "last_report": {"timestamp": taken, "stats": {"UNHEALTHY": 5, "CLOSED": 100}}}
    s = summary(two_scms(tmp_path / "e", rm=rm))
    status = s["replicationManager"]
    assert (status["state"], status["age"], status["current"]) == ("STOPPED", "3 h 12 min", False)
    words = text(report.render_html(s, []))
    assert "ReplicationManager STOPPED ; report taken 3 h 12 min before the export (2023-11-14 19:01:20 UTC)" in words
    assert "Not current: the ReplicationManager is STOPPED on scm1" in words
    assert str(taken) not in words  # no raw millisecond timestamp
    running = summary(two_scms(tmp_path / "f", rm={"last_report": {"timestamp": CAPTURED - 60_000, "stats": {}}}))
    assert running["replicationManager"]["current"] and running["replicationManager"]["age"] == "1 min"
    old = summary(two_scms(tmp_path / "g", rm={"last_report": {"timestamp": CAPTURED - 3_600_000, "stats": {}}}))
    assert old["replicationManager"]["notCurrentBecause"] == ["the report is older than two ReplicationManager intervals (10 min)"]
    assert [report.human_age(ms) for ms in (0, 59_999, 60_000, 7_200_000, 90_000_000)] == ["0 s", "59 s", "1 min", "2 h", "1 d 1 h"]


def test_unhealthy_counts_are_given_both_ways_and_labelled(tmp_path: Path) -> None:
    rm = {"last_report": {"timestamp": CAPTURED - 1000, "stats": {"UNHEALTHY": 5, "UNDER_REPLICATED": 4}}}
    s = summary(
        two_scms(tmp_path / "e", rm=rm),
        health={"scm1": {"HEALTHY": 95, "UNDER_REPLICATED": 2, "UNHEALTHY": 3}},
        states={"scm1": {"HEALTHY": 95, "UNDER_REPLICATED": 4, "UNHEALTHY": 5}},
    )
    assert s["containers"]["byHealth"][V.UNHEALTHY] == 3 and s["containers"]["byState"][V.UNHEALTHY] == 5
    words = text(report.render_html(s, []))
    assert "Containers by main health state (scm1) Each container once, under its main state" in words
    assert "SCM's ReplicationManager: containers carrying it (last pass) audit: containers carrying it (export) audit: main state (chart)" in words
    assert "UNHEALTHY 5 5 3" in words and "UNDER_REPLICATED 4 4 2" in words
    assert "counts a container under every state it carries" in words


def test_a_format_1_export_is_still_read(tmp_path: Path) -> None:
    d = write_export(tmp_path / "v1", {fmt.DATANODES: [{"datanode_uuid": "dn1"}]})
    data = __import__("json").loads((d / fmt.MANIFEST).read_text())
    data["formatVersion"] = 1
    del data["scmStartedAtMs"]
    del data["replicationManager"]["state"], data["replicationManager"]["intervalMs"]
    (d / fmt.MANIFEST).write_text(__import__("json").dumps(data))
    exports = inputs.discover(d)
    m = exports.exports[0].manifest
    assert (m.format_version, m.started_at_ms) == (1, 0)
    cov = report.view_coverage(exports, [{"scm": "scm1", "datanode_uuid": "dn1", "health": "HEALTHY", "first_report_ms": None}])
    assert cov["scm1"]["partial"] is False and cov["scm1"]["reportTimesKnown"] is False
    rm = report.rm_report_status(exports)
    assert rm["state"] == "UNKNOWN" and "the export (format 1) does not say whether the ReplicationManager runs" in rm["notCurrentBecause"]


def test_trend_grid_lines_are_whole_counts_without_repeats() -> None:
    # a peak of 1 once gave the labels 0, 0, 0, 1, 1 (quarters rounded); found by the browser tier's screenshot
    assert report.integer_ticks(1) == [0, 1]
    assert report.integer_ticks(4) == [0, 1, 2, 3, 4]
    assert report.integer_ticks(7) == [0, 2, 4, 6, 8]
    for peak in range(1, 500):
        ticks = report.integer_ticks(peak)
        assert ticks[0] == 0 and ticks[-1] >= peak and len(ticks) <= 5, (peak, ticks)
        assert len(set(ticks)) == len(ticks) and ticks == sorted(ticks), (peak, ticks)
    chart = str(report.line_chart([{"findings": 1}, {"findings": 0}], [("findings", "findings", "#000")]))
    labels = re.findall(r'class="val">([^<]*)<', chart)
    assert labels == ["0", "1"], labels
