"""The audit's outputs for people: ``summary.json`` and a self-contained ``report.html``.

Pure functions over plain data (what the job collected to the driver): no Spark, no I/O, no
clock (times are passed in). The HTML page is rendered with jinja2 from
``templates/report.html.j2``; its charts are inline SVG drawn here, its style and the small
table-sorting script are inline, and it loads nothing from the network, so it can be mailed or
opened from a bucket as is.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from scm_audit import vocabulary as V
from scm_audit.inputs import ExportSet

SUMMARY_VERSION = 2

COLORS = {
    V.HEALTHY: "#2e9d5b",
    V.UNDER_REPLICATED: "#e08a1e",
    V.OVER_REPLICATED: "#7b5cc4",
    V.MIS_REPLICATED: "#2f7fc1",
    V.MISSING: "#c8312b",
    V.UNHEALTHY: "#8f1d1d",
    V.EMPTY: "#8c8c8c",
    V.OPEN_UNHEALTHY: "#a0652a",
    V.QUASI_CLOSED_STUCK: "#c9a700",
    V.OPEN_WITHOUT_PIPELINE: "#d05a9c",
    V.REPLICA_BCSID_MISMATCH: "#1f9c9c",
    V.REPLICA_ON_DEAD_NODE: "#5a5a5a",
    V.REPLICA_ON_DECOMMISSIONED_NODE: "#9a8a6a",
    V.VERDICT_MISMATCH: "#e0457b",
    V.CROSS_SCM_CONTAINER: "#3a3ad0",
    V.CROSS_SCM_PIPELINE: "#5f7fe0",
    V.CROSS_SCM_TABLE: "#20208a",
}
DEFAULT_COLOR = "#607080"

DESCRIPTIONS = {
    V.UNDER_REPLICATED: "fewer in-service copies than the replication factor (maintenance copies considered)",
    V.OVER_REPLICATED: "more in-service copies than the replication factor",
    V.MIS_REPLICATED: "copies on too few racks for the placement policy (rack-aware; RackScatter for EC)",
    V.MISSING: "no replica reported at all",
    V.UNHEALTHY: "unhealthy replicas (none good, or beside enough good ones)",
    V.EMPTY: "closed, no keys, only empty replicas: to be deleted",
    V.OPEN_UNHEALTHY: "open container with a replica that is not open",
    V.QUASI_CLOSED_STUCK: "quasi-closed replicas from too few origins to force-close",
    V.OPEN_WITHOUT_PIPELINE: "open container whose pipeline is not open",
    V.REPLICA_BCSID_MISMATCH: "closed replica whose BCSID is below the container's (stale data)",
    V.REPLICA_ON_DEAD_NODE: "replica still listed on a DEAD (or unknown) datanode",
    V.REPLICA_ON_DECOMMISSIONED_NODE: "replica still listed on a DECOMMISSIONED datanode",
    V.VERDICT_MISMATCH: "the audit and SCM's ReplicationManager classify the container differently",
    V.CROSS_SCM_CONTAINER: "the replicated container row differs between SCMs",
    V.CROSS_SCM_PIPELINE: "the replicated pipeline row differs between SCMs",
    V.CROSS_SCM_TABLE: "a replicated table's digest differs between SCMs",
}


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    return value


def human_age(ms: int) -> str:
    """A duration for people: ``45 s``, ``12 min``, ``3 h 12 min``, ``2 d 4 h``."""
    seconds = max(0, int(ms) // 1000)
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def _utc(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if ms else ""


def view_coverage(
    exports: ExportSet, datanodes: Sequence[Mapping[str, Any]], open_pipeline_members: Sequence[str] = ()
) -> dict[str, dict[str, Any]]:
    """Whether each SCM's view is complete: it has had a full container report since it started
    from every datanode the cluster has registered. Replicas are soft state an SCM rebuilds from
    those reports, so until then its replica counts (MISSING, UNDER_REPLICATED, ...) are partial.

    The datanodes expected are those any exported SCM knows and does not see as DEAD, plus the
    members of open pipelines (the replicated table names them even to an SCM that has heard from
    none of them). ``datanodes`` holds rows (scm, datanode_uuid, health, first_report_ms).
    Format 1 exports carry no report times: a datanode an SCM knows counts as heard (registration
    carries a full report)."""
    by_scm: dict[str, list[Mapping[str, Any]]] = {}
    for row in datanodes:
        by_scm.setdefault(str(row["scm"]), []).append(row)
    known = {str(r["datanode_uuid"]) for r in datanodes}
    alive = {str(r["datanode_uuid"]) for r in datanodes if r.get("health") != V.NODE_DEAD}
    expected = alive | {m for m in open_pipeline_members if m not in known or m in alive}
    out: dict[str, dict[str, Any]] = {}
    for e in exports.exports:
        rows = by_scm.get(e.label, [])
        times_known = e.manifest.format_version >= 2
        heard = {
            str(r["datanode_uuid"]) for r in rows if not times_known or int(r.get("first_report_ms") or 0) > 0
        }
        missing = sorted(expected - heard)
        out[e.label] = {
            "partial": bool(missing),
            "heard": len(expected & heard),
            "expected": len(expected),
            "notHeard": missing[:10],
            "startedAtMs": e.manifest.started_at_ms,
            "startedAt": _utc(e.manifest.started_at_ms),
            "reportTimesKnown": times_known,
        }
    return out


def rm_report_status(exports: ExportSet) -> dict[str, Any]:
    """The primary SCM's last ReplicationManager report: when, how old at the export, RM's state, and
    whether it can be taken as current (RM running and the report within two intervals)."""
    m = exports.primary.manifest
    rm = m.replication_manager
    report = rm.get("lastReport") or {}
    ts = int(report.get("timestamp") or 0)
    state = str(rm.get("state") or "UNKNOWN")
    interval = int(rm.get("intervalMs") or 0)
    age = m.captured_at_ms - ts if ts else None
    reasons = []
    if not ts:
        reasons.append("the ReplicationManager has not published a report since this SCM started")
    if state == "UNKNOWN":
        reasons.append(f"the export (format {m.format_version}) does not say whether the ReplicationManager runs")
    elif state != "RUNNING":
        reasons.append(f"the ReplicationManager is {state} on {exports.primary.label}")
    if age is not None and interval and age > 2 * interval:
        reasons.append(f"the report is older than two ReplicationManager intervals ({human_age(2 * interval)})")
    return {
        "scm": exports.primary.label,
        "state": state,
        "intervalMs": interval,
        "timestampMs": ts,
        "takenAt": _utc(ts),
        "exportCapturedAtMs": m.captured_at_ms,
        "ageMs": age,
        "age": human_age(age) if age is not None else "",
        "current": not reasons,
        "notCurrentBecause": reasons,
    }


def build_summary(
    *,
    run_id: str,
    started_at: dt.datetime,
    seconds: float,
    master: str,
    spark_version: str,
    exports: ExportSet,
    health: Mapping[str, Mapping[str, int]],
    lifecycle: Mapping[str, Mapping[str, int]],
    replicas: Mapping[str, int],
    datanodes: Mapping[str, int],
    by_kind: Mapping[str, int],
    per_scm_kind: Mapping[str, Mapping[str, int]],
    by_datanode: Sequence[Mapping[str, Any]],
    by_rack: Sequence[Mapping[str, Any]],
    samples: Mapping[str, Sequence[Mapping[str, Any]]],
    states: Mapping[str, Mapping[str, int]] | None = None,
    datanode_rows: Sequence[Mapping[str, Any]] = (),
    open_pipeline_members: Sequence[str] = (),
) -> dict[str, Any]:
    """``health`` counts each container once, under its main state; ``states`` counts every state a
    container carries (as SCM's ReplicationManager report does). ``by_kind`` counts distinct
    findings over all SCMs' views, ``per_scm_kind`` each SCM's view: the headline is the primary's."""
    primary = exports.primary.label
    labels = [e.label for e in exports.exports]
    states = states or {}
    coverage = view_coverage(exports, datanode_rows, open_pipeline_members)
    scms = []
    for e in exports.exports:
        m = e.manifest
        scms.append(
            {
                "label": e.label,
                "scmId": m.scm_id,
                "nodeId": m.node_id,
                "isLeader": m.is_leader,
                "appliedTerm": m.applied_term,
                "appliedIndex": m.applied_index,
                "capturedAtMs": m.captured_at_ms,
                "consistency": m.consistency,
                "barrierId": m.barrier_id,
                "path": str(e.path),
                "containers": sum(health.get(e.label, {}).values()),
                "replicas": replicas.get(e.label, 0),
                "datanodes": datanodes.get(e.label, 0),
                "formatVersion": m.format_version,
                "view": coverage[e.label],
            }
        )
    by_health = {s: int(health.get(primary, {}).get(s, 0)) for s in V.HEALTH_STATES}
    total = sum(by_health.values())
    disagreements = {label: int(per_scm_kind.get(label, {}).get(V.VERDICT_MISMATCH, 0)) for label in labels}
    rm = exports.primary.manifest.replication_manager.get("lastReport") or {}
    primary_kinds = per_scm_kind.get(primary, {})
    partial = [label for label in labels if coverage[label]["partial"]]
    return {
        "summaryVersion": SUMMARY_VERSION,
        "runId": run_id,
        "startedAt": started_at.astimezone(dt.UTC).isoformat(timespec="seconds"),
        "seconds": round(seconds, 2),
        "master": master,
        "sparkVersion": spark_version,
        "input": {
            "path": str(exports.root),
            "clusterId": exports.cluster_id,
            "consistency": exports.consistency,
            "sameAppliedIndex": exports.same_index,
            "scms": scms,
        },
        "primary": primary,
        "containers": {
            "total": total,
            "healthy": by_health.get(V.HEALTHY, 0),
            "byHealth": by_health,
            "byLifecycleState": dict(sorted(lifecycle.get(primary, {}).items())),
            "byState": {s: int(states.get(primary, {}).get(s, 0)) for s in V.HEALTH_STATES},
        },
        "perScm": {
            label: {
                "byHealth": {s: int(health.get(label, {}).get(s, 0)) for s in V.HEALTH_STATES},
                "byState": {s: int(states.get(label, {}).get(s, 0)) for s in V.HEALTH_STATES},
                "findingsTotal": int(sum(per_scm_kind.get(label, {}).values())),
                "findingsByKind": {k: int(per_scm_kind[label][k]) for k in V.FINDING_KINDS if per_scm_kind.get(label, {}).get(k)},
                "view": coverage[label],
            }
            for label in labels
        },
        "views": {"primary": primary, "partial": partial, "complete": not partial},
        "replicas": {"total": replicas.get(primary, 0)},
        "findings": {
            "view": primary,
            "total": int(sum(primary_kinds.values())),
            "byKind": {k: int(primary_kinds[k]) for k in V.FINDING_KINDS if primary_kinds.get(k)},
            "allViews": {
                "total": int(sum(by_kind.values())),
                "byKind": {k: int(by_kind[k]) for k in V.FINDING_KINDS if by_kind.get(k)},
            },
            "byDatanode": [_jsonable(r) for r in by_datanode],
            "byRack": [_jsonable(r) for r in by_rack],
        },
        "agreement": {
            "containersCompared": {label: int(sum(health.get(label, {}).values())) for label in labels},
            "disagreements": disagreements,
            "agrees": not any(disagreements.values()),
        },
        "crossScm": {
            "scms": len(labels),
            "compared": len(labels) > 1,
            "containersDiffering": int(by_kind.get(V.CROSS_SCM_CONTAINER, 0)),
            "pipelinesDiffering": int(by_kind.get(V.CROSS_SCM_PIPELINE, 0)),
            "tablesDiffering": sorted(
                {f for r in samples.get(V.CROSS_SCM_TABLE, []) for f in (r.get("fields") or [])}
            ),
        },
        "replicationManagerLastReport": _jsonable(rm),
        "replicationManager": rm_report_status(exports),
        "samples": {k: [_jsonable(r) for r in rows] for k, rows in sorted(samples.items())},
    }


def trend_point(summary: Mapping[str, Any]) -> dict[str, Any]:
    """What the trend charts keep of a run (small; one file per run under OUT/history)."""
    containers = summary["containers"]
    return {
        "runId": summary["runId"],
        "startedAt": summary["startedAt"],
        "containers": containers["total"],
        "unhealthyContainers": containers["total"] - containers["healthy"],
        "findings": summary["findings"]["total"],
        "byKind": summary["findings"]["byKind"],
        "verdictMismatches": sum(summary["agreement"]["disagreements"].values()),
        "crossScmMismatches": summary["crossScm"]["containersDiffering"] + summary["crossScm"]["pipelinesDiffering"]
        + len(summary["crossScm"]["tablesDiffering"]),
    }


def to_json(summary: Mapping[str, Any]) -> str:
    return json.dumps(_jsonable(summary), indent=2, sort_keys=True) + "\n"


def one_line(summary: Mapping[str, Any], out: Path) -> str:
    f, c = summary["findings"], summary["containers"]
    agree = "agrees with SCM" if summary["agreement"]["agrees"] else "DISAGREES with SCM on some containers"
    partial = summary.get("views", {}).get("partial") or []
    views = f"; PARTIAL view of {', '.join(partial)} (not every datanode has reported since it started)" if partial else ""
    return (
        f"audit {summary['runId']}: {c['total']} containers ({c['total'] - c['healthy']} not healthy), "
        f"{f['total']} findings in {summary['primary']}'s view, {agree}{views}; report: {out / 'report.html'}"
    )


# ---- SVG charts ----
def bar_chart(items: Sequence[tuple[str, int]], *, width: int = 680, bar: int = 22, label_width: int = 250,
              colors: Mapping[str, str] | None = None, empty: str = "nothing to show") -> Markup:
    """A horizontal bar chart as inline SVG (one bar per item, value at the end of the bar)."""
    if not items:
        return Markup('<p class="empty">{}</p>').format(empty)
    top = max(v for _, v in items) or 1
    gap = 6
    height = len(items) * (bar + gap) + gap
    span = width - label_width - 70
    parts = [f'<svg class="chart" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">']
    for i, (label, value) in enumerate(items):
        y = gap + i * (bar + gap)
        w = 0 if value <= 0 else max(2, round(span * value / top))
        color = (colors or {}).get(label, DEFAULT_COLOR)
        text = escape(label)
        parts.append(
            f'<text x="{label_width - 8}" y="{y + bar * 0.7:.1f}" text-anchor="end" class="lbl">{text}</text>'
            f'<rect x="{label_width}" y="{y}" width="{w}" height="{bar}" rx="3" fill="{color}">'
            f"<title>{text}: {value:,}</title></rect>"
            f'<text x="{label_width + w + 6}" y="{y + bar * 0.7:.1f}" class="val">{value:,}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def integer_ticks(peak: int, most: int = 5) -> list[int]:
    """Grid values for counts up to ``peak``: 0 and whole multiples of one step, at most ``most`` of them, the last
    at or above ``peak`` (counts have no fractions: a peak of 1 gives 0 and 1, not 0, 0.25, 0.5 rounded)."""
    step = max(1, -(-peak // (most - 1)))
    return [step * k for k in range(-(-peak // step) + 1)]


def line_chart(points: Sequence[Mapping[str, Any]], series: Sequence[tuple[str, str, str]], *, width: int = 720,
               height: int = 260) -> Markup:
    """Trend lines over runs as inline SVG. ``series`` is (key in a point, legend, color)."""
    if len(points) < 2:
        return Markup('<p class="empty">Trends appear from the second run on ({} run so far).</p>').format(len(points))
    left, right, top_pad, bottom = 56, 16, 16, 52
    plot_w, plot_h = width - left - right, height - top_pad - bottom
    ticks = integer_ticks(max([int(p.get(key) or 0) for p in points for key, _, _ in series] + [1]))
    top = ticks[-1]
    n = len(points)

    def x(i: int) -> float:
        return left + plot_w * i / (n - 1)

    def y(v: float) -> float:
        return top_pad + plot_h * (1 - v / top)

    parts = [f'<svg class="chart" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">']
    for v in ticks:
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid"/>'
            f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end" class="val">{v:,}</text>'
        )
    step = max(1, n // 8)
    for i in range(0, n, step):
        label = escape(str(points[i].get("startedAt", ""))[:16].replace("T", " "))
        parts.append(f'<text x="{x(i):.1f}" y="{height - bottom + 18}" text-anchor="middle" class="tick">{label}</text>')
    for s, (key, legend, color) in enumerate(series):
        coords = " ".join(f"{x(i):.1f},{y(int(p.get(key) or 0)):.1f}" for i, p in enumerate(points))
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{coords}"/>')
        for i, p in enumerate(points):
            value = int(p.get(key) or 0)
            parts.append(
                f'<circle cx="{x(i):.1f}" cy="{y(value):.1f}" r="3" fill="{color}">'
                f"<title>{escape(legend)} {escape(str(p.get('runId', '')))}: {value:,}</title></circle>"
            )
        lx = left + s * 180
        parts.append(
            f'<rect x="{lx}" y="{height - 18}" width="12" height="12" fill="{color}"/>'
            f'<text x="{lx + 16}" y="{height - 8}" class="lbl">{escape(legend)}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("scm_audit", "templates"),
    autoescape=jinja2.select_autoescape(["html", "j2"]),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render_html(summary: Mapping[str, Any], trend: Sequence[Mapping[str, Any]]) -> str:
    """The whole page. ``trend`` holds the trend points of past runs and this one, oldest first."""
    health = summary["containers"]["byHealth"]
    health_items = [(s, health.get(s, 0)) for s in V.PRIMARY_ORDER if health.get(s, 0) or s == V.HEALTHY]
    kinds = summary["findings"]["byKind"]
    kind_items = [(k, kinds[k]) for k in V.FINDING_KINDS if kinds.get(k)]
    dn_items = [
        (f"{r.get('hostname') or r['datanode_uuid'][:8]} ({r.get('rack') or '?'})", int(r["findings"]))
        for r in summary["findings"]["byDatanode"]
    ]
    rack_items = [(str(r["rack"]), int(r["findings"])) for r in summary["findings"]["byRack"]]
    charts = {
        "health": bar_chart(health_items, colors=COLORS, empty="no containers"),
        "kinds": bar_chart(kind_items, colors=COLORS, empty="no findings"),
        "datanodes": bar_chart(dn_items, empty="no finding involves a datanode"),
        "racks": bar_chart(rack_items, empty="no finding involves a rack"),
        "trend": line_chart(
            trend,
            (
                ("findings", "findings", "#2f5fc1"),
                ("unhealthyContainers", "unhealthy containers", "#e08a1e"),
                ("verdictMismatches", "verdict mismatches", "#e0457b"),
                ("crossScmMismatches", "cross-SCM mismatches", "#20208a"),
            ),
        ),
    }
    template = _ENV.get_template("report.html.j2")
    return template.render(
        s=summary,
        charts=charts,
        trend=trend,
        colors=COLORS,
        descriptions=DESCRIPTIONS,
        health_states=[h for h in V.PRIMARY_ORDER],
        kinds=[k for k in V.FINDING_KINDS],
        cross_scm_kinds=[V.CROSS_SCM_CONTAINER, V.CROSS_SCM_PIPELINE, V.CROSS_SCM_TABLE],
    )
