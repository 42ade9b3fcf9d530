"""Real-process chaos tests of the Raft runtime, checked for linearizability.

Three ``python -m scm_server.raft.kv`` servers on loopback (fault injection on), concurrent
asyncio clients doing put / get / cas on a few keys with unique values, and a nemesis:
leader SIGKILL + restart, SIGSTOP/SIGCONT, symmetric partition of the leader, one-way cuts,
random drop + delay, bridge (and majorities-ring with 5 members), leader transfer, and
member replacement (remove, wipe, restart empty, add back). After healing, a write must succeed within a bound, and the
recorded history must be linearizable under the KV model (per-key partitions).

* ``make test`` runs two short runs whose schedules together cover every nemesis (the second
  with aggressive log compaction, so lagging members install snapshots), plus a
  run with a deliberately lying client to show the pipeline does catch a stale read.
* ``make chaos`` (``-m chaos``) runs many randomized runs: ``RAFT_CHAOS_RUNS`` (default 12),
  ``RAFT_CHAOS_DURATION`` seconds each (default 20), base seed ``RAFT_CHAOS_SEED``.

Seeds are printed; a failing run keeps its data dirs, node logs, history.jsonl and the
history.txt/html timeline under a temp dir whose path is printed.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

import pytest

from scm_server.verify.chaos import (
    ChaosConfig,
    ChaosReport,
    KvOps,
    cleanup,
    counts_line,
    default_client,
    describe_failure,
    run_chaos,
)
from scm_server.verify.kvcluster import KvCluster
from scm_server.verify.linearizability import Verdict

pytestmark = pytest.mark.processes  # whole-SCM scenarios: make test-slow


def _base_seed() -> int:
    env = os.environ.get("RAFT_CHAOS_SEED")
    return int(env) if env else random.SystemRandom().randrange(1 << 31)


def _workdir(seed: int) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"raft-chaos-{seed}-"))


def _check(report: ChaosReport) -> None:
    print(report.summary())
    if not report.ok:
        print(describe_failure(report))
    assert report.check is not None
    assert report.check.verdict is Verdict.OK, describe_failure(report)
    assert report.liveness_s is not None, "no write succeeded after healing:\n" + describe_failure(report)
    assert not report.crashed, f"servers exited on their own: {report.crashed}\n" + describe_failure(report)
    assert not report.error, describe_failure(report)
    assert report.counts.get("ok", 0) > 50, "too few operations completed to mean anything:\n" + report.summary()


# The second run compacts the log aggressively so restarted/lagging members need snapshots.
SHORT_SERVER_ARGS = [(), ("--snapshot-threshold", "100", "--purge-gap", "20")]
SERVER_ARG_CHOICES = [
    (),
    ("--snapshot-threshold", "100", "--purge-gap", "20"),
    ("--snapshot-threshold", "50", "--purge-gap", "10", "--install-mode", "chunked"),
]
SHORT_SCHEDULES = [
    ("kill-leader", "partition-leader", "pause-leader", "oneway-leader-out", "flaky", "transfer-leader"),
    ("bridge", "oneway-leader-in", "member-replace", "kill-random", "pause-random", "partition-leader"),
]


async def test_short_chaos_runs_are_linearizable() -> None:
    base = _base_seed()
    print(f"chaos base seed {base} (rerun with RAFT_CHAOS_SEED={base})")
    reports = []
    for n, schedule in enumerate(SHORT_SCHEDULES):
        seed = base + n
        cfg = ChaosConfig(
            seed=seed, duration=11.0, clients=5, keys=3, schedule=schedule,
            fault_min=0.8, fault_max=1.6, quiet_min=0.2, quiet_max=0.6,
            server_args=SHORT_SERVER_ARGS[n],
        )  # fmt: skip
        report = await run_chaos(cfg, _workdir(seed))
        reports.append(report)
        _check(report)
        cleanup(report)
    print(counts_line(reports))


class _StaleReadClient:
    """A broken client: after its first read of a key it keeps returning that value
    (the classic stale-read bug). The pipeline must flag the history as ILLEGAL."""

    def __init__(self, inner: KvOps) -> None:
        self.inner = inner
        self.first: dict[str, str | None] = {}

    async def put(self, key: str, value: str) -> None:
        await self.inner.put(key, value)

    async def get(self, key: str) -> str | None:
        value = await self.inner.get(key)
        return self.first.setdefault(key, value)

    async def cas(self, key: str, expected: str | None, value: str) -> bool:
        return await self.inner.cas(key, expected, value)

    async def close(self) -> None:
        await self.inner.close()


async def test_chaos_pipeline_catches_a_stale_read() -> None:
    seed = _base_seed()

    def lying(cluster: KvCluster, timeout: float, worker: int) -> KvOps:
        return _StaleReadClient(default_client(cluster, timeout, worker))

    cfg = ChaosConfig(seed=seed, duration=3.0, clients=3, keys=1, nemeses=("flaky",), quiet_min=5, quiet_max=5)
    workdir = _workdir(seed)
    report = await run_chaos(cfg, workdir, lying)
    print(report.summary())
    assert report.check is not None and report.check.verdict is Verdict.ILLEGAL, report.summary()
    # the failing history is rendered for humans
    assert (workdir / "history.txt").is_file() and (workdir / "history.html").is_file()
    assert "stuck" in (workdir / "history.txt").read_text()
    shutil.rmtree(workdir, ignore_errors=True)


RUNS = int(os.environ.get("RAFT_CHAOS_RUNS", "12"))
DURATION = float(os.environ.get("RAFT_CHAOS_DURATION", "20"))


@pytest.mark.chaos
@pytest.mark.timeout(RUNS * (DURATION + 60) + 60)
async def test_many_randomized_chaos_runs() -> None:
    runs, duration = RUNS, DURATION
    base = _base_seed()
    print(f"chaos: {runs} runs of {duration}s, base seed {base} (rerun with RAFT_CHAOS_SEED={base})")
    reports: list[ChaosReport] = []
    failures: list[str] = []
    for n in range(runs):
        seed = base + n
        rng = random.Random(seed)
        cfg = ChaosConfig(
            seed=seed,
            duration=duration,
            clients=rng.choice([3, 5, 8]),
            keys=rng.choice([1, 2, 3, 5]),
            op_timeout=rng.choice([1.0, 2.0, 3.0]),
            server_args=rng.choice(SERVER_ARG_CHOICES),
            size=rng.choice([3, 3, 3, 5]),  # 5 members: majorities-ring and wider bridges
        )
        report = await run_chaos(cfg, _workdir(seed))
        reports.append(report)
        print(report.summary(), flush=True)
        if report.ok:
            cleanup(report)
        else:
            failures.append(describe_failure(report))
    print(counts_line(reports))
    assert not failures, "\n\n".join(failures)
