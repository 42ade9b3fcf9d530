"""Invalid values never replace recorded ones (issue 22, item 11): on an API server that skips the schema (no
``minLength``, no CEL), a bad value in spec is reported as ``InvalidSpec`` naming the field and why, and the
operator keeps acting on the last valid value it recorded (``status.appliedSpec``), never on the default."""

from __future__ import annotations

import pytest

from ozone_scm_operator import planner
from ozone_scm_operator.spec import read_spec

from .sim import World


def kinds(w: World, *wanted: type[planner.Action]) -> list[tuple[type[planner.Action], str]]:
    return [(type(a), a.target) for a in w.actions if not wanted or isinstance(a, wanted)]


def test_an_empty_image_keeps_the_recorded_image_not_the_default() -> None:
    spec, problems, applied = read_spec({"image": ""}, {"image": "ozone-scm:0.2.0", "replicas": 3})
    assert spec.image == "ozone-scm:0.2.0" and applied["image"] == "ozone-scm:0.2.0"
    [pr] = problems
    assert pr.field == "image" and "must be a non-empty string, got ''" in pr.message
    assert "keeping the last valid value (image='ozone-scm:0.2.0')" in pr.message


def test_a_field_absent_from_the_record_was_at_its_default() -> None:
    spec, problems, applied = read_spec({"image": "", "imagePullPolicy": "Sometimes"}, {"imagePullPolicy": "Always"})
    assert spec.image == "ozone-scm:0.1.0" and "image" not in applied and "image at its default" in str(problems[0])
    assert spec.image_pull_policy == "Always"


def test_a_bad_replica_count_type_keeps_the_recorded_size() -> None:
    spec, problems, _ = read_spec({"replicas": "three"}, {"replicas": 5})
    assert spec.replicas == 5 and "must be an integer" in problems[0].message


def test_related_durations_are_kept_together() -> None:
    spec, problems, _ = read_spec(
        {"security": {"renewBefore": "800h", "certificateDuration": "720h"}},
        {"security": {"renewBefore": "24h", "certificateDuration": "240h"}},
    )
    assert spec.security.renew_before.total_seconds() == 24 * 3600
    assert spec.security.certificate_duration.total_seconds() == 240 * 3600
    assert "must be shorter than certificateDuration (800h >= 720h)" in problems[0].message


@pytest.mark.parametrize(
    ("replicas", "why"),
    [
        (0, "a ring needs at least one member"),
        (-1, "a ring needs at least one member"),
        (7, "rings of more than 5 members are not supported"),
        (2, "2 members tolerate no more failures than 1"),
        (4, "4 members tolerate no more failures than 3"),
    ],
)
def test_replica_count_wording(replicas: int, why: str) -> None:
    _, problems, _ = read_spec({"replicas": replicas}, {"replicas": 3})
    [pr] = problems
    assert pr.field == "replicas" and f"must be 1, 3 or 5, got {replicas}: " in pr.message and why in pr.message
    assert f"{replicas} tolerates no more failures than {replicas}" not in pr.message


@pytest.mark.parametrize("replicas", [0, -1, 7])
def test_out_of_range_replicas_keep_the_running_ring_and_say_so(replicas: int) -> None:
    w = World({"replicas": 3})
    w.run()
    w.spec_raw = {"replicas": replicas}
    for _ in range(10):
        w.step()
        w.operator_pass()
    deg = w.status.condition("Degraded")
    assert deg is not None and deg.reason == "InvalidSpec"
    assert f"spec.replicas: must be 1, 3 or 5, got {replicas}" in deg.message
    assert "keeping the ring at its last valid size, 3" in deg.message
    assert len(w.voters) == 3 and kinds(w, planner.Decommission) == []


def test_an_empty_image_never_rolls_the_ring_back_to_the_default() -> None:
    w = World({"replicas": 3, "image": "ozone-scm:0.2.0"})
    w.run()
    assert w.status.applied_spec is not None and w.status.applied_spec["image"] == "ozone-scm:0.2.0"
    n = len(w.actions)
    w.spec_raw = {"replicas": 3, "image": ""}  # what a server skipping minLength stores
    for _ in range(20):
        w.step()
        w.operator_pass()
    assert [a for a in w.actions[n:] if isinstance(a, planner.DeletePod)] == []
    assert all(p.image == "ozone-scm:0.2.0" for p in w.pods.values())
    deg = w.status.condition("Degraded")
    assert deg is not None and deg.reason == "InvalidSpec" and "spec.image" in deg.message
    assert "keeping the last valid value (image='ozone-scm:0.2.0')" in deg.message
    # fixed: the value is taken, nothing lost on the way
    w.spec_raw = {"replicas": 3, "image": "ozone-scm:0.3.0"}
    w.run()
    assert all(p.image == "ozone-scm:0.3.0" for p in w.pods.values())
    assert w.status.applied_spec["image"] == "ozone-scm:0.3.0"  # type: ignore[index]
