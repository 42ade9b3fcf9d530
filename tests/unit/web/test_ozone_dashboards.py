"""Reading Apache Ozone's Grafana dashboards (tests/ozone_dashboards): panels of both Grafana formats, variables
replaced as Grafana does with the saved selection, metric names found in PromQL, SCM panels told apart. The live
evaluation against real rings is ``make ozone-dashboards-test``."""

from __future__ import annotations

from tests.ozone_dashboards.panels import (
    RATE_INTERVAL,
    Panel,
    all_panels,
    metric_names,
    panels_of,
    scm_panels,
)


def test_metric_names_skip_functions_labels_grouping_and_numbers() -> None:
    expr = ('(sum by (hostname, type) (rate(scm_block_location_protocol_time{instance=~"$scm"}[1m])) / '
            "sum by (hostname, type) (clamp_min(rate(scm_block_location_protocol_counter[1m]), 1e-12)))"
            " and on (hostname) jvm_metrics_mem_heap_used_m * 1024")
    assert metric_names(expr) == {
        "scm_block_location_protocol_time", "scm_block_location_protocol_counter", "jvm_metrics_mem_heap_used_m"}


def test_classic_panels_rows_and_the_all_selection() -> None:
    dash = {
        "title": "D",
        "templating": {"list": [{"name": "scm", "allValue": ".*", "current": {"value": ["$__all"]}},
                                {"name": "host", "current": {"value": "a"}}]},
        "panels": [
            {"type": "row", "title": "r", "panels": [
                {"title": "inner", "targets": [{"expr": 'rate(x{instance=~"$scm",h="$host"}[$__rate_interval])'}]},
            ]},
            {"title": "text only"},
            {"title": "hidden", "targets": [{"expr": "y", "hide": True}]},
        ],
    }
    assert panels_of(dash) == [Panel("D", "inner", (f'rate(x{{instance=~".*",h="a"}}[{RATE_INTERVAL}])',))]


def test_v2_schema_elements() -> None:
    def query(expr: str, hidden: bool = False) -> dict[str, object]:
        return {"spec": {"hidden": hidden, "query": {"spec": {"expr": expr}}}}

    dash = {"title": "B", "variables": [], "elements": {
        "panel-1": {"kind": "Panel", "spec": {"title": "p", "data": {"spec": {"queries": [
            query("sum(a)"), query("b", hidden=True)]}}}},
        "lib": {"kind": "LibraryPanel", "spec": {}},
    }}
    assert panels_of(dash) == [Panel("B", "p", ("sum(a)",))]


def test_the_committed_dashboards() -> None:
    panels = all_panels()
    by_dashboard = {p.dashboard for p in panels}
    assert by_dashboard == {"Ozone - SCM overview", "Ozone - SCM Safemode", "Ozone - Container Balancer",
                            "Ozone - Datanode Decommission and Maintenance"}
    assert all("$" not in e for p in panels for e in p.exprs), "a variable was left unreplaced"
    scm = scm_panels(panels)
    # the datanodes' panels (replication supervisor, replicator, volume usage, per-host decommission) are not SCM's
    assert {p.title for p in panels if p not in scm} >= {"Supervisor Task Status", "Datanode Disk Usage (Convergence)"}
    assert all(p.dashboard != "Ozone - SCM Safemode" for p in panels if p not in scm)
    assert len(scm) == 46
