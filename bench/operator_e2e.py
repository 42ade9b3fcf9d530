#!/usr/bin/env python3
"""The operator's benchmarks, in the local end-to-end tier (emulated API server + the kubelet fixture running every
Pod as a real SCM process in its own network namespace; ``tests/e2e/local/``).

1. **Time to a Ready 3-member cluster** (``--runs``, default 3): from creating the ``OzoneSCMCluster`` to
   ``Ready=True`` (every member a ready, caught-up voter under one leader). Goal: under 60 s.
   Anchor, measured side by side: the same ring as hand-written Pods (``tests/e2e/local/scm_ring.py``, the recipe
   of docs/operations.md and of Ozone's Helm chart: every Pod at once, each running ``scm --init && scm
   --bootstrap``, joiners retrying until the primordial SCM answers), from creating the objects to every Pod ready
   and one leader.
2. **Rolling restart of 3 members** with a client allocating blocks throughout (a workload Pod:
   ``tests/e2e/local/scm_workload.py``, simulated datanodes + one allocation at a time): the operator's roll
   (followers first, the leader last after a leadership transfer), triggered by a Pod annotation change; measured
   from the change to Ready again, plus the **longest client-observed gap** between successful allocations
   (goal: under 2 s) and the failed calls. Anchor: the hand-written ring rolled as a StatefulSet controller would
   (delete and recreate each Pod, highest ordinal first, waiting for it to be ready; no leadership transfer).

The operator's runs and the anchor's alternate (operator, anchor, operator, ...), and the machine's load average
is recorded beside each run, so that both sides meet the same load. ``--control-plane`` runs everything on the real
control plane (etcd, kube-apiserver, kube-controller-manager from ``make k8s-control-plane``; the chart installed
with ``helm install``, the operator as its ServiceAccount) instead of the emulator. ``--trace`` prints, for each
operator run, when each step of the operations began and when each member's Pod became ready: where the time goes.

Prints a table with both and their ratio, writes ``bench/results/operator_e2e.json``. Needs root (network
namespaces). On a machine shared with other work the figures are noisy: re-run on a quiet machine to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if not __package__:  # `python bench/operator_e2e.py`: import bench.* and tests.* from this checkout, as `python -m` does
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.local import scm_ring
from tests.e2e.local.operator_env import FAST_SITE, Env, WorkloadResult, environment

ROOT = Path(__file__).resolve().parent.parent

NAME = "scm"


def _pod_ready(env: Env, name: str) -> bool:
    pod = env.api.get_object("v1", "Pod", name, env.ns) or {}
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions", []))


EnvFactory = Callable[[Path], contextlib.AbstractAsyncContextManager[Env]]


def _load() -> float:
    return round(os.getloadavg()[0], 2)


async def _trace(env: Env, t0: float, lines: list[str]) -> None:
    """Every change of the operation in progress and of the members' Pod readiness, with its time since ``t0``."""
    seen: tuple[Any, ...] = ()
    while True:
        op = env.status(NAME).get("currentOperation") or {}
        ready = tuple(sorted(p["metadata"]["name"] for p in env.api.list_objects("v1", "Pod", env.ns)
                             if p["metadata"]["name"].startswith(f"{NAME}-") and _pod_ready(env, p["metadata"]["name"])))
        now = (op.get("type"), op.get("member"), op.get("step"), ready)
        if now != seen:
            lines.append(f"{time.monotonic() - t0:6.2f} s  op={op.get('type')}/{op.get('member')}/{op.get('step')}"
                         f"  ready={','.join(ready) or '-'}")
            seen = now
        await asyncio.sleep(0.05)


async def operator_ready(make_env: EnvFactory, workdir: Path, trace: bool) -> tuple[float, list[str]]:
    lines: list[str] = []
    async with make_env(workdir) as env:
        t0 = time.monotonic()
        await env.create(NAME, {"replicas": 3})
        tracer = asyncio.ensure_future(_trace(env, t0, lines)) if trace else None
        try:
            await env.wait_ready(NAME, timeout=300)
            return time.monotonic() - t0, lines
        finally:
            if tracer is not None:
                tracer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await tracer


async def anchor_ready(make_env: EnvFactory, workdir: Path) -> float:
    """The hand-written ring; the operator is stopped (it must not touch these objects)."""
    async with make_env(workdir) as env:
        await env.stop_operator()
        t0 = time.monotonic()
        for obj in scm_ring.ring_objects("ring", env.ns, 3, "ozone-scm:0.1.0", extra_site=FAST_SITE, datanodes=0):
            env.api.put_object(obj)
        members = scm_ring.member_names("ring", 3)
        await env.wait_for(lambda: all(_pod_ready(env, m) for m in members), 300, "hand-written ring ready")
        return time.monotonic() - t0


async def operator_roll(make_env: EnvFactory, workdir: Path) -> dict[str, Any]:
    async with make_env(workdir) as env:
        await env.create(NAME, {"replicas": 3})
        await env.wait_ready(NAME, timeout=300)
        out = env.start_workload(NAME)
        await env.workload_ready(out)
        await asyncio.sleep(3)  # a few seconds of steady allocations before the roll (a baseline, not a wait)
        t0 = time.monotonic()
        env.patch_spec(NAME, {"podMetadata": {"annotations": {"ozone-scm.io/restartedAt": str(time.time())}}})
        await env.wait_for(lambda: env.status(NAME).get("currentOperation"), 60, "the roll starts")
        await env.wait_ready(NAME, timeout=600)
        duration = time.monotonic() - t0
        result = await env.stop_workload(out)
        return _roll_figures(duration, result)


async def anchor_roll(make_env: EnvFactory, workdir: Path) -> dict[str, Any]:
    async with make_env(workdir) as env:
        await env.stop_operator()
        objects = scm_ring.ring_objects("ring", env.ns, 3, "ozone-scm:0.1.0", extra_site=FAST_SITE, datanodes=0)
        for obj in objects:
            env.api.put_object(obj)
        members = scm_ring.member_names("ring", 3)
        await env.wait_for(lambda: all(_pod_ready(env, m) for m in members), 300, "hand-written ring ready")
        out = env.start_workload("ring")
        await env.workload_ready(out)
        await asyncio.sleep(3)
        pods = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Pod"}
        t0 = time.monotonic()
        for m in reversed(members):  # a StatefulSet's RollingUpdate: highest ordinal first, one at a time
            env.delete("Pod", m)
            await env.wait_for(lambda m=m: env.api.get_object("v1", "Pod", m, env.ns) is None, 120, f"{m} gone")
            env.api.put_object(pods[m])
            await env.wait_for(lambda m=m: _pod_ready(env, m), 300, f"{m} ready again")
        duration = time.monotonic() - t0
        result = await env.stop_workload(out)
        return _roll_figures(duration, result)


def _roll_figures(duration: float, result: WorkloadResult) -> dict[str, Any]:
    return {
        "duration_s": round(duration, 2),
        "longest_gap_s": round(result.longest_gap, 3),
        "calls": len(result.calls),
        "failed_calls": len(result.failures),
        "failure_samples": [f["error"] for f in result.failures[:3]],
        "duplicate_block_ids": len(result.duplicates),
    }


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


@contextlib.contextmanager
def _control_plane(base: Path) -> Any:
    from tests.e2e.controlplane.fixture import ControlPlane
    with ControlPlane(base / "control-plane") as cp:
        yield cp


async def run(runs: int, roll_runs: int, control_plane: bool, trace: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="operator-bench-") as tmp, contextlib.ExitStack() as stack:
        base = Path(tmp)
        make_env: EnvFactory = environment
        if control_plane:
            from tests.e2e.controlplane.env import control_plane_environment
            cp = stack.enter_context(_control_plane(base))

            def make_env(workdir: Path) -> contextlib.AbstractAsyncContextManager[Env]:
                return control_plane_environment(cp, workdir)
        ready_op: list[float] = []
        ready_anchor: list[float] = []
        loads: list[dict[str, float]] = []
        traces: list[list[str]] = []
        for i in range(runs):  # interleaved: both sides meet the same load
            load_op = _load()
            seconds, lines = await operator_ready(make_env, base / f"op-ready-{i}", trace)
            ready_op.append(seconds)
            traces.append(lines)
            load_anchor = _load()
            ready_anchor.append(await anchor_ready(make_env, base / f"anchor-ready-{i}"))
            loads.append({"operator": load_op, "anchor": load_anchor})
        roll_op: list[dict[str, Any]] = []
        roll_anchor: list[dict[str, Any]] = []
        for i in range(roll_runs):
            roll_op.append(await operator_roll(make_env, base / f"op-roll-{i}"))
            roll_anchor.append(await anchor_roll(make_env, base / f"anchor-roll-{i}"))
    return {
        "machine": platform.node(),
        "api_server": "real control plane" if control_plane else "emulator",
        "ready_s": {"operator": [round(x, 2) for x in ready_op], "anchor": [round(x, 2) for x in ready_anchor]},
        "load_average": loads,
        "traces": traces,
        "roll": {"operator": roll_op, "anchor": roll_anchor},
    }


def report(res: dict[str, Any]) -> None:
    op_ready = statistics.median(res["ready_s"]["operator"])
    an_ready = statistics.median(res["ready_s"]["anchor"])
    rows = [("time to Ready, 3 members (median s)", f"{op_ready:.1f}", f"{an_ready:.1f}", _ratio(op_ready, an_ready),
             "<= 1.2x")]
    op_roll = res["roll"]["operator"]
    an_roll = res["roll"]["anchor"]
    if op_roll and an_roll:
        op_gap = max(r["longest_gap_s"] for r in op_roll)
        an_gap = max(r["longest_gap_s"] for r in an_roll)
        op_dur = statistics.median(r["duration_s"] for r in op_roll)
        an_dur = statistics.median(r["duration_s"] for r in an_roll)
        rows += [
            ("rolling restart of 3 members (median s)", f"{op_dur:.1f}", f"{an_dur:.1f}", _ratio(op_dur, an_dur), ""),
            ("longest allocation gap during the roll (s)", f"{op_gap:.2f}", f"{an_gap:.2f}", _ratio(op_gap, an_gap),
             "< 2 s"),
            ("failed allocations during the roll", str(sum(r["failed_calls"] for r in op_roll)),
             str(sum(r["failed_calls"] for r in an_roll)), "", "0"),
            ("duplicate block IDs", str(sum(r["duplicate_block_ids"] for r in op_roll)),
             str(sum(r["duplicate_block_ids"] for r in an_roll)), "", "0"),
        ]
    print(f"API server: {res['api_server']}")
    print(f"{'metric':<46} {'operator':>10} {'hand-written Pods':>18} {'ratio':>7}  goal")
    for metric, a, b, r, goal in rows:
        print(f"{metric:<46} {a:>10} {b:>18} {r:>7}  {goal}")
    print(f"runs: ready {res['ready_s']}, load average (1 min) at each start {res['load_average']}")
    if op_roll:
        print(f"roll operator {op_roll}, roll anchor {an_roll}")
    for i, lines in enumerate(res["traces"]):
        if lines:
            print(f"operator run {i}:")
            print("\n".join(f"  {line}" for line in lines))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="time-to-Ready runs of each")
    ap.add_argument("--roll-runs", type=int, default=1, help="rolling-restart runs of each")
    ap.add_argument("--control-plane", action="store_true",
                    help="the real control plane (make k8s-control-plane) instead of the emulated API server")
    ap.add_argument("--trace", action="store_true", help="print each operator run's steps and Pod readiness in time")
    args = ap.parse_args()
    res = asyncio.run(run(args.runs, args.roll_runs, args.control_plane, args.trace))
    report(res)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "operator_e2e.json").write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
