#!/usr/bin/env python3
"""The operator at scale (issue 22, item 5): API requests per minute per cluster in steady state, and reconcile
latency, for 1, 10 and 50 ``OzoneSCMCluster`` objects under one operator; this tree's operator ("after": observation
from kopf's watch-fed indexes, children written by server-side apply) next to the operator of ``--before-ref``
("before", default the last commit that LISTed about ten kinds every pass and wrote by create-then-merge-patch),
measured in the same run on the same emulated API server.

Setup, per variant and size: the emulated API server (``tests/e2e/local/apiserver.py``, on a thread of this
process, counting every request it serves by verb and resource), the CRDs and one namespace; the operator as its
own process (``ozone-scm-operator --server ... --no-leader-elect``, that tree's ``operator/`` first on
PYTHONPATH: ``git archive`` of ``--before-ref`` for "before"), ``--poll-interval`` 5 s as deployed.

**What a cluster is here.** 50 clusters of real SCM processes (150, or 50 at one member each, plus the kubelet
fixture's network namespaces) do not fit 2 shared cores next to the operator and the API server, so no kubelet
runs and the Pods never start: each cluster stays in its bootstrap, waiting for its primordial member, and every
pass is a full observation that finds nothing to do. For the API server that is what a steady Ready cluster's
pass costs too (the same reads; the SCM probes of a Ready ring go to the members, not to the API server), and it
is the same stand-in for 1, 10 and 50 clusters so the sizes compare. Clusters have one member (``replicas: 1``).

1. **Steady-state requests**: once every cluster has its Pod, volume, ConfigMap, Services and PDB (and a settle
   time for the last writes' passes), the requests served during ``--window`` seconds, per minute and per cluster,
   by verb and resource; kopf's watch requests (long-lived, re-opened every ``timeoutSeconds``) are in the count.
2. **Reconcile latency**: for ``--samples`` clusters in turn, the time from a spec change (a label added to
   ``spec.service.labels``) to the operator's effect: the client Service carrying the label and
   ``status.observedGeneration`` equal to the new generation. Polled every 10 ms.

Prints a table with before, after and their ratio per size, and writes ``bench/results/operator_scale.json``.
On a machine shared with other work the latencies are noisy (the request counts much less so).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

if not __package__:  # `python bench/operator_scale.py`: import bench.* and tests.* from this checkout, as `python -m` does
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

from scm_server.local.cluster import wait_for
from tests.e2e.local.apiserver import ThreadedAPIServer

ROOT = Path(__file__).resolve().parent.parent
API = "ozone-scm.io/v1alpha1"
NS = "bench"
# the last operator that LISTed every kind each pass and wrote by create-then-merge-patch (before issue 22 item 5)
BEFORE_REF = "5efcd20"


@contextlib.contextmanager
def operator_tree(ref: str | None) -> Iterator[Path]:
    """This tree (ref None), or ``operator/`` of ``ref`` unpacked into a temporary directory."""
    if ref is None:
        yield ROOT / "operator"
        return
    with tempfile.TemporaryDirectory(prefix="operator-scale-") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", ref, "operator"],
                                 check=True, capture_output=True).stdout
        tar_path = Path(tmp) / "operator.tar"
        tar_path.write_bytes(archive)
        with tarfile.open(tar_path) as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp) / "operator"


@contextlib.contextmanager
def operator_process(tree: Path, url: str, poll: float, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(ROOT)])}
    cmd = [sys.executable, "-c", "from ozone_scm_operator.main import main; main()", "--server", url,
           "--no-leader-elect", "-n", NS, "--poll-interval", str(poll), "--health-host", "127.0.0.1",
           "--health-port", "0", "--log-level", "WARNING"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def cluster(name: str) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "OzoneSCMCluster", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": 1, "service": {"labels": {"bench": "0"}}}}


def settled(emu: ThreadedAPIServer, names: list[str]) -> bool:
    def check(api: Any) -> bool:
        for n in names:
            for version, kind, obj in (("v1", "Pod", f"{n}-0"), ("v1", "Service", n),
                                       ("policy/v1", "PodDisruptionBudget", n), ("v1", "ConfigMap", f"{n}-config")):
                if api.get_object(version, kind, obj, NS) is None:
                    return False
        return True
    return bool(emu.call(check))


def run_variant(label: str, tree: Path, size: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    with ThreadedAPIServer() as emu:
        for crd in sorted((ROOT / "crds").glob("*.yaml")):
            emu.put_object(yaml.safe_load(crd.read_text()))
        emu.put_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        names = [f"c{i:02d}" for i in range(size)]
        log = workdir / f"operator-{label}-{size}.log"
        with operator_process(tree, emu.url, args.poll_interval, log) as proc:
            t0 = time.monotonic()
            for n in names:
                emu.put_object(cluster(n))
            wait_for(lambda: proc.poll() is not None or settled(emu, names), args.timeout, f"{size} clusters created",
                     interval=0.01)
            if proc.poll() is not None:
                raise RuntimeError(f"the {label} operator exited ({proc.returncode}); see {log}")
            created = time.monotonic() - t0
            time.sleep(args.settle)  # the passes after the last writes; the window then sees only steady passes
            before = dict(emu.call(lambda api: dict(api.request_counts)))
            t1 = time.monotonic()
            time.sleep(args.window)
            after = dict(emu.call(lambda api: dict(api.request_counts)))
            elapsed = time.monotonic() - t1
            delta = {f"{v} {r}": after[(v, r)] - before.get((v, r), 0) for (v, r) in after
                     if after[(v, r)] != before.get((v, r), 0)}
            total = sum(delta.values())
            latencies = []
            for i, n in enumerate(names[: args.samples]):
                latencies.append(measure_latency(emu, n, i + 1, args.timeout))
        return {
            "clusters": size,
            "seconds_to_create": round(created, 1),
            "window_seconds": round(elapsed, 1),
            "requests_per_minute_per_cluster": round(total / elapsed * 60 / size, 1),
            # a pass GETs its resource once, whichever operator
            "passes_per_minute_per_cluster": round(delta.get("get ozonescmclusters", 0) / elapsed * 60 / size, 1),
            "requests_per_pass": round(total / max(1, delta.get("get ozonescmclusters", 0)), 1),
            "by_request_per_minute_per_cluster": {k: round(v / elapsed * 60 / size, 2)
                                                  for k, v in sorted(delta.items(), key=lambda kv: -kv[1])},
            "latency_seconds": [round(x, 3) for x in latencies],
            "latency_median_seconds": round(statistics.median(latencies), 3) if latencies else None,
        }


def measure_latency(emu: ThreadedAPIServer, name: str, value: int, timeout: float) -> float:
    t0 = time.monotonic()
    patched = emu.patch_object(API, "OzoneSCMCluster", name, NS, {"spec": {"service": {"labels": {"bench": str(value)}}}})
    generation = patched["metadata"]["generation"]

    def done(api: Any) -> bool:
        svc = api.get_object("v1", "Service", name, NS) or {}
        res = api.get_object(API, "OzoneSCMCluster", name, NS) or {}
        return ((svc.get("metadata") or {}).get("labels") or {}).get("bench") == str(value) and \
            (res.get("status") or {}).get("observedGeneration") == generation

    wait_for(lambda: emu.call(done), timeout, f"{name}: spec change applied", interval=0.01)
    return time.monotonic() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1,10,50", help="numbers of clusters (comma-separated)")
    p.add_argument("--before-ref", default=BEFORE_REF, help="git ref of the 'before' operator")
    p.add_argument("--poll-interval", type=float, default=5.0)
    p.add_argument("--window", type=float, default=30.0, help="seconds of steady state counted")
    p.add_argument("--settle", type=float, default=12.0, help="seconds after the last cluster is created")
    p.add_argument("--samples", type=int, default=5, help="spec changes timed per size")
    p.add_argument("--timeout", type=float, default=240.0)
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    results: dict[str, Any] = {"machine": platform.node(), "cpus": os.cpu_count(), "before_ref": args.before_ref,
                               "poll_interval": args.poll_interval, "window": args.window, "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="operator-scale-logs-") as logs, \
            operator_tree(args.before_ref) as before_tree:
        for size in sizes:
            row = {}
            for label, tree in (("before", before_tree), ("after", ROOT / "operator")):
                row[label] = run_variant(label, tree, size, args, Path(logs))
                print(f"  {size:>3} clusters, {label:<6}: {row[label]['requests_per_minute_per_cluster']:7.1f} "
                      f"requests/min/cluster, latency median {row[label]['latency_median_seconds']} s", flush=True)
            results["sizes"][str(size)] = row
    print(f"\nOperator at scale (one operator, steady state, poll interval {args.poll_interval:.0f} s; before = "
          f"{args.before_ref}, after = this tree; same run)")
    print(f"{'clusters':>8}  {'req/min/cluster before':>22}  {'after':>7}  {'after/before':>12}  "
          f"{'req/pass before':>15}  {'after':>5}  {'latency p50 before':>18}  {'after':>7}  {'after/before':>12}")
    for size, row in results["sizes"].items():
        b, a = row["before"], row["after"]
        rr = a["requests_per_minute_per_cluster"] / b["requests_per_minute_per_cluster"]
        lr = (a["latency_median_seconds"] / b["latency_median_seconds"]) if b["latency_median_seconds"] else float("nan")
        print(f"{size:>8}  {b['requests_per_minute_per_cluster']:>22.1f}  {a['requests_per_minute_per_cluster']:>7.1f}  "
              f"{rr:>12.2f}  {b['requests_per_pass']:>15.1f}  {a['requests_per_pass']:>5.1f}  "
              f"{b['latency_median_seconds']:>17.3f}s  {a['latency_median_seconds']:>6.3f}s  {lr:>12.2f}")
    for size, row in results["sizes"].items():
        for label in ("before", "after"):
            top = ", ".join(f"{k} {v}" for k, v in list(row[label]["by_request_per_minute_per_cluster"].items())[:6])
            print(f"  {size} clusters {label}: {top}")
    out = ROOT / "bench" / "results" / "operator_scale.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
