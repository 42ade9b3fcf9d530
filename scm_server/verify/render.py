"""Dump a checked history as a text timeline and an HTML timeline for humans.

Where it sits: when a chaos or HA test finds a non-linearizable (or undecided) history it
calls :func:`write_report` next to the kept data directories. The text file lists the
failing partition's operations in call order, marks the longest linearization the search
found (with the model state after each step) and the operation the search got stuck on;
the HTML file draws one lane per client with a bar per operation (indeterminate ones run
to the right edge), colour-coded the same way (in the best linearization / stuck / other).
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from scm_server.verify.linearizability import CheckResult, Operation, PartitionResult, Verdict
from scm_server.verify.models import Model


def _fmt_t(t: float, t0: float) -> str:
    return "+inf" if t == math.inf else f"{t - t0:10.6f}"


def _states_along(model: Model, part: PartitionResult) -> list[Any]:
    state = model.init()
    states = []
    for i in part.best_linearization:
        op = part.ops[i]
        _legal, state = model.step(state, op.input, op.output)
        states.append(state)
    return states


def render_text(result: CheckResult, model: Model, title: str = "", *, max_ops: int | None = None) -> str:
    """The report as text. ``max_ops`` limits the operation listing of a long partition to
    the window around the operation the search got stuck on (the CLI's default)."""
    lines = [f"# {title}" if title else "# linearizability check", f"verdict: {result.summary()}"]
    undecided = [p for p in result.partitions if p.verdict is Verdict.UNKNOWN]
    if result.verdict is Verdict.UNKNOWN and undecided:
        lines.append(f"undecided partitions ({len(undecided)} of {len(result.partitions)}):")
        for p in undecided[:20]:
            label = repr(p.key) if p.key else "(whole history)"
            lines.append(f"  {label}: {len(p.ops)} ops, {p.explored} model steps, {p.elapsed:.3f}s: {p.reason}")
        if len(undecided) > 20:
            lines.append(f"  ... and {len(undecided) - 20} more")
    part = result.failing_partition()
    if part is None:
        lines.append("every partition is linearizable")
        return "\n".join(lines) + "\n"
    if part.verdict is not Verdict.ILLEGAL:
        return "\n".join(lines) + "\n"
    ops = part.ops
    key = model.partition_key(ops[0]) if ops else ""
    label = f"failing partition: {key!r}" if key else "failing history"
    lines.append(f"{label} ({len(ops)} ops), verdict {part.verdict.value}")
    t0 = min(op.call for op in ops) if ops else 0.0
    order = {opi: n for n, opi in enumerate(part.best_linearization)}
    if part.best_linearization:
        lines.append("")
        lines.append(f"longest linearizable prefix found ({len(part.best_linearization)} ops):")
        steps = list(zip(part.best_linearization, _states_along(model, part), strict=True))
        shown = steps if max_ops is None or len(steps) <= max_ops else steps[-max_ops:]
        if len(shown) < len(steps):
            lines.append(f"  ... {len(steps) - len(shown)} earlier steps not shown")
        for n, (opi, st) in enumerate(shown, start=len(steps) - len(shown)):
            op = ops[opi]
            lines.append(
                f"  {n:4d}. client {op.client_id!s:>6}  {model.describe_operation(op.input, op.output):40s}"
                f"  state -> {model.describe_state(st)}"
            )
    if part.stuck_op is not None:
        op = ops[part.stuck_op]
        lines.append("")
        lines.append(
            f"stuck: no order lets this op return when it did: client {op.client_id} "
            f"{model.describe_operation(op.input, op.output)} [{_fmt_t(op.call, t0)} .. {_fmt_t(op.ret, t0)}]"
        )
    lines.append("")
    by_call = sorted(range(len(ops)), key=lambda i: (ops[i].call, ops[i].ret))
    if max_ops is not None and len(by_call) > max_ops:
        at = by_call.index(part.stuck_op) if part.stuck_op is not None else len(by_call) - 1
        lo = max(0, min(at - max_ops // 2, len(by_call) - max_ops))
        window = by_call[lo:lo + max_ops]
        lines.append(f"operations {lo + 1}-{lo + len(window)} of {len(ops)} of the partition in call order, around "
                     "the stuck one (times relative to the first call):")
    else:
        window = by_call
        lines.append("all operations of the partition in call order (times relative to the first call):")
    lines.append(f"  {'call':>10}  {'return':>10}  {'client':>6}  {'lin#':>5}  operation")
    for i in window:
        op = ops[i]
        mark = "STUCK" if i == part.stuck_op else (str(order[i]) if i in order else "")
        lines.append(
            f"  {_fmt_t(op.call, t0)}  {_fmt_t(op.ret, t0)}  {op.client_id!s:>6}  {mark:>5}  "
            f"{model.describe_operation(op.input, op.output)}"
        )
    return "\n".join(lines) + "\n"


def render_html(result: CheckResult, model: Model, title: str = "") -> str:
    part = result.failing_partition() or (result.partitions[0] if result.partitions else None)
    head = (
        "<!doctype html><html><head><meta charset='utf-8'><title>"
        + html.escape(title or "history")
        + "</title><style>body{font:12px monospace}.lane{position:relative;height:22px;border-bottom:1px solid #eee}"
        ".op{position:absolute;height:18px;top:2px;overflow:hidden;white-space:nowrap;border-radius:3px;"
        "font-size:10px;padding:0 2px;box-sizing:border-box}.lin{background:#b7e4c7}.stuck{background:#f08080}"
        ".other{background:#ddd}.inf{border-right:3px dashed #555}.label{position:absolute;left:0;width:70px}"
        ".track{position:absolute;left:75px;right:0;top:0;bottom:0}</style></head><body>"
    )
    body = [f"<h2>{html.escape(title)}</h2><p>{html.escape(result.summary())}</p>"]
    if part is None or not part.ops:
        return head + "".join(body) + "</body></html>"
    ops: list[Operation] = part.ops
    key = model.partition_key(ops[0])
    body.append(
        f"<p>partition {html.escape(repr(key))}: {len(ops)} ops, verdict {part.verdict.value}. "
        "Green: in the longest linearizable prefix (number = position); red: the op the search "
        "could not get past; dashed right edge: indeterminate (return at +inf).</p>"
    )
    t0 = min(op.call for op in ops)
    finite = [op.ret for op in ops if op.ret != math.inf] + [op.call for op in ops]
    t1 = max(finite) if finite else t0
    span = (t1 - t0) * 1.05 or 1.0
    order = {opi: n for n, opi in enumerate(part.best_linearization)}
    clients = sorted({str(op.client_id) for op in ops})
    for c in clients:
        body.append(f"<div class='lane'><span class='label'>{html.escape(c)}</span><div class='track'>")
        for i, op in enumerate(ops):
            if str(op.client_id) != c:
                continue
            left = (op.call - t0) / span * 100
            right = 100.0 if op.ret == math.inf else (op.ret - t0) / span * 100
            width = max(right - left, 0.3)
            cls = "stuck" if i == part.stuck_op else ("lin" if i in order else "other")
            if op.ret == math.inf:
                cls += " inf"
            desc = model.describe_operation(op.input, op.output)
            tip = f"{desc} call={op.call - t0:.6f} ret={'inf' if op.ret == math.inf else f'{op.ret - t0:.6f}'}"
            label = (f"{order[i]}: " if i in order else "") + desc
            body.append(
                f"<div class='op {cls}' style='left:{left:.4f}%;width:{width:.4f}%' "
                f"title='{html.escape(tip, quote=True)}'>{html.escape(label)}</div>"
            )
        body.append("</div></div>")
    body.append("<pre>" + html.escape(render_text(result, model, title)) + "</pre>")
    return head + "".join(body) + "</body></html>"


def write_report(result: CheckResult, model: Model, directory: Path, name: str = "history") -> list[Path]:
    """Write ``<name>.txt`` and ``<name>.html`` into ``directory``; returns the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    txt = directory / f"{name}.txt"
    page = directory / f"{name}.html"
    txt.write_text(render_text(result, model, name))
    page.write_text(render_html(result, model, name))
    return [txt, page]
