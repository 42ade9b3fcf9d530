"""Apache Ozone's Grafana dashboards (copied into ``dashboards/``, see its README) read as data: every panel with
its PromQL expressions, the dashboard's variables replaced as Grafana replaces them with the dashboard's saved
selection, and which panels are SCM panels.

Two Grafana formats occur: the classic one (``panels``, rows nesting ``panels``, ``templating.list``) and the
version 2 schema (``elements`` of kind ``Panel``, queries under ``spec.data.spec.queries``, ``variables``).

A panel is an SCM panel when one of the metric names its expressions read is a name Apache Ozone 2.2.0's own SCM
served on ``/prom`` when recorded (``tests/unit/web/data/ozone_scm_metrics.json``); the other panels read the
datanodes' or the OM's metrics. Nothing here does I/O beyond reading the committed files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DASHBOARDS = HERE / "dashboards"
OZONE_SCM_NAMES = HERE.parent / "unit" / "web" / "data" / "ozone_scm_metrics.json"

# What ``$__rate_interval`` stands for here: at least four scrape intervals, as Grafana computes it, for the
# tests' scrape interval of a few seconds.
RATE_INTERVAL = "1m"

# PromQL words that look like metric names in an expression but are not.
_PROMQL_WORDS = frozenset({
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values", "group",
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool",
    "rate", "irate", "increase", "delta", "idelta", "deriv", "clamp", "clamp_max", "clamp_min", "abs", "ceil",
    "floor", "round", "sqrt", "exp", "ln", "log2", "log10", "histogram_quantile", "label_replace", "label_join",
    "vector", "scalar", "time", "timestamp", "absent", "absent_over_time", "changes", "resets", "sort",
    "sort_desc", "predict_linear", "holt_winters", "avg_over_time", "min_over_time", "max_over_time",
    "sum_over_time", "count_over_time", "last_over_time", "quantile_over_time", "stddev_over_time",
    "stdvar_over_time", "present_over_time", "inf", "nan",
})
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACES = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")


@dataclass(frozen=True)
class Panel:
    """One panel: its dashboard's title, its own title and its expressions with the variables replaced."""

    dashboard: str
    title: str
    exprs: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.dashboard} / {self.title}"

    def metric_names(self) -> frozenset[str]:
        names: set[str] = set()
        for expr in self.exprs:
            names |= metric_names(expr)
        return frozenset(names)


def metric_names(expr: str) -> frozenset[str]:
    """The metric names a PromQL expression reads (label matchers, strings, ranges and grouping labels left out)."""
    text = _RANGES.sub(" ", _BRACES.sub(" ", _STRINGS.sub(" ", expr)))
    # grouping clauses name labels, not metrics: "by (hostname, type)", "on(instance)", "group_left()"
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    return frozenset(
        m.group(0) for m in _IDENT.finditer(text)
        if m.group(0).lower() not in _PROMQL_WORDS and not _is_number_suffix(text, m.start())
    )


def _is_number_suffix(text: str, start: int) -> bool:
    """``1e-12``'s ``e`` and the like: an identifier glued to a digit before it is part of a number."""
    return start > 0 and (text[start - 1].isdigit() or text[start - 1] == ".")


def _variables_v1(dash: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for var in dash.get("templating", {}).get("list", []):
        out[var["name"]] = _selected(var)
    return out


def _variables_v2(dash: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for var in dash.get("variables", []):
        spec = var.get("spec", {})
        out[spec["name"]] = _selected(spec)
    return out


def _selected(var: Mapping[str, Any]) -> str:
    """The value Grafana substitutes for the dashboard's saved selection: "All" -> the variable's ``allValue`` (a
    regex matching every value), otherwise the saved value itself."""
    current = var.get("current", {}).get("value")
    values = current if isinstance(current, list) else [current]
    if "$__all" in values:
        return str(var.get("allValue") or ".*")
    return "|".join(str(v) for v in values if v is not None)


def _substitute(expr: str, variables: Mapping[str, str]) -> str:
    expr = expr.replace("$__rate_interval", RATE_INTERVAL).replace("${__rate_interval}", RATE_INTERVAL)
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", variables[name]).replace("$" + name, variables[name])
    return expr


def _walk_v1(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _walk_v1(panel.get("panels", []))


def panels_of(dash: Mapping[str, Any]) -> list[Panel]:
    """Every panel of one dashboard that has at least one PromQL expression."""
    title = str(dash.get("title", "?"))
    out = []
    if "elements" in dash:
        variables = _variables_v2(dash)
        for element in dash["elements"].values():
            if element.get("kind") != "Panel":
                continue
            spec = element["spec"]
            queries = spec.get("data", {}).get("spec", {}).get("queries", [])
            exprs = [q["spec"]["query"]["spec"].get("expr", "") for q in queries if not q["spec"].get("hidden")]
            exprs = [_substitute(e, variables) for e in exprs if e]
            if exprs:
                out.append(Panel(title, str(spec.get("title", "?")), tuple(exprs)))
        return out
    variables = _variables_v1(dash)
    for panel in _walk_v1(list(dash.get("panels", []))):
        exprs = [_substitute(t["expr"], variables) for t in panel.get("targets", [])
                 if t.get("expr") and not t.get("hide")]
        if exprs:
            out.append(Panel(title, str(panel.get("title", "?")), tuple(exprs)))
    return out


def all_panels(folder: Path = DASHBOARDS) -> list[Panel]:
    files = sorted(folder.glob("*.json"))
    assert files, f"no dashboards under {folder}"
    return [p for f in files for p in panels_of(json.loads(f.read_text()))]


def ozone_scm_names(path: Path = OZONE_SCM_NAMES) -> frozenset[str]:
    return frozenset(json.loads(path.read_text())["prom"])


def scm_panels(panels: list[Panel] | None = None, scm_names: frozenset[str] | None = None) -> list[Panel]:
    """The panels that read at least one metric Ozone's SCM serves."""
    names = scm_names if scm_names is not None else ozone_scm_names()
    return [p for p in (panels if panels is not None else all_panels()) if p.metric_names() & names]
