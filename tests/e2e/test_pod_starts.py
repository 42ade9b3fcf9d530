"""How the real-cluster tiers (kind, node) count container starts (``kind_env.PodStarts``): from Pod statuses as a
watch delivers them, keeping the starts of Pods deleted since. Runs in ``make test`` (no cluster: statuses are
given)."""

from __future__ import annotations

from typing import Any

from tests.e2e.controlplane.fixture import RealAPI
from tests.e2e.kind.kind_env import PodStarts, pod_starts


def _pod(name: str, uid: str, *, init: tuple[str, int, str] | None = None,
         main: tuple[str, int, str] | None = None) -> dict[str, Any]:
    """A Pod whose init container and main container have (name, restartCount, state)."""
    def status(c: tuple[str, int, str]) -> dict[str, Any]:
        return {"name": c[0], "restartCount": c[1], "state": {c[2]: {}}}
    return {
        "metadata": {"name": name, "uid": uid},
        "spec": {"initContainers": [{"name": init[0], "command": ["ozone-scm", "scm", "--bootstrap"]}] if init else [],
                 "containers": [{"name": main[0], "command": ["ozone-scm"], "args": ["scm"]}] if main else []},
        "status": {"initContainerStatuses": [status(init)] if init else [],
                   "containerStatuses": [status(main)] if main else []},
    }


def test_a_container_counts_once_started_and_once_more_per_restart() -> None:
    assert pod_starts(_pod("scm-1", "u1", init=("bootstrap", 0, "waiting"))) == {}
    assert pod_starts(_pod("scm-1", "u1", init=("bootstrap", 0, "terminated"), main=("scm", 2, "running"))) == {
        ("u1", "bootstrap"): ("scm-1", ("ozone-scm", "scm", "--bootstrap"), 1),
        ("u1", "scm"): ("scm-1", ("ozone-scm", "scm"), 3),
    }


def test_a_deleted_pod_keeps_its_starts_and_counts_never_go_down() -> None:
    starts = PodStarts(RealAPI("https://127.0.0.1:1", None, None), "ns")  # never started: statuses are given
    starts.record(_pod("scm-2", "u2", init=("bootstrap", 0, "terminated"), main=("scm", 1, "running")))
    # a later status of the same Pod with fewer starts (an older resourceVersion replayed) changes nothing
    starts.record(_pod("scm-2", "u2", init=("bootstrap", 0, "terminated"), main=("scm", 0, "running")))
    current = [_pod("scm-0", "u0", init=("init", 0, "terminated"), main=("scm", 0, "running"))]  # scm-2 deleted
    got = sorted((r.pod, r.container) for r in starts.launches(current))
    assert got == [("scm-0", "init"), ("scm-0", "scm"), ("scm-2", "bootstrap"), ("scm-2", "scm"), ("scm-2", "scm")]
    assert all(r.namespace == "ns" for r in starts.launches([]))
