"""Ozone's Grafana dashboards without Prometheus: every SCM panel that `make ozone-dashboards-test` expects to find
series on our ring (those not in its WITHOUT_SERIES_ON_OURS) has an expression all of whose metric names our /prom
serves, and every panel listed there has none. The heavy tier checks the same with a real Prometheus scraping
real SCMs; this catches a renamed or dropped metric in seconds."""

from __future__ import annotations

from pathlib import Path

from tests.ozone_dashboards.panels import all_panels, metric_names, scm_panels
from tests.ozone_dashboards.test_dashboards import WITHOUT_SERIES_ON_OURS
from tests.unit.web.test_ozone_names import _serve

# Ozone's ProtocolMessageMetrics: one series per cmdType, from the first Hadoop RPC call of that type on (this
# in-process SCM takes none; the heavy tier's real cluster does)
PER_CALL_PREFIXES = ("scm_block_location_protocol_", "scm_container_location_protocol_", "scm_datanode_protocol_")


async def test_the_panels_expected_to_find_series_read_names_we_serve(tmp_path: Path) -> None:
    _, served = await _serve(tmp_path)
    served |= {n for p in all_panels() for n in p.metric_names() if n.startswith(PER_CALL_PREFIXES)}
    served_or_not: dict[str, bool] = {}
    for panel in scm_panels(all_panels()):
        served_or_not[panel.label] = any(metric_names(e) and metric_names(e) <= served for e in panel.exprs)
    lacking = sorted(label for label, ok in served_or_not.items() if not ok and label not in WITHOUT_SERIES_ON_OURS)
    assert not lacking, f"SCM panels whose metrics our /prom does not serve: {lacking}"
    stale = sorted(label for label in WITHOUT_SERIES_ON_OURS if served_or_not[label])
    assert not stale, f"listed as without series on ours, yet every name of an expression is served: {stale}"
