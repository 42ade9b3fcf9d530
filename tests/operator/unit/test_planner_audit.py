"""The planner and the scheduled Spark audit (issue 8 item 4): the report volume and the CronJob are created,
suspended while the cluster is Degraded or paused, resumed, and deleted when the audit is disabled."""

from __future__ import annotations

from typing import Any

from ozone_scm_operator import audit_builders, naming, planner
from ozone_scm_operator.spec import parse_spec

from .sim import World

AUDIT = {"enabled": True, "schedule": "0 4 * * *"}


def cronjob(w: World) -> dict[str, Any] | None:
    """The CronJob as the operator last wrote it (None: never written, or deleted since)."""
    if ("CronJob", "scm-audit") not in w.children:
        return None
    applied = [a for a in w.actions if isinstance(a, planner.Apply) and a.target == "scm-audit"]
    return applied[-1].body


def suspended(w: World) -> bool | None:
    cj = cronjob(w)
    return None if cj is None else bool(cj["spec"]["suspend"])


def test_enabled_audit_gets_its_volume_then_a_running_cronjob_built_by_the_builder() -> None:
    w = World({"replicas": 3, "audit": AUDIT})
    w.run()
    creates = [a.target for a in w.actions if isinstance(a, planner.CreatePVC)]
    assert "scm-audit-reports" in creates and "scm-audit-reports" not in w.pvcs  # not taken for a member's volume
    first_cj = next(i for i, a in enumerate(w.actions) if a.target == "scm-audit")
    assert next(i for i, a in enumerate(w.actions) if a.target == "scm-audit-reports") < first_cj
    spec, _ = parse_spec(w.spec_raw)
    assert cronjob(w) == audit_builders.build_audit_cronjob(w.ref, spec, suspend=False)
    # written suspended while the ring had not formed, resumed once it had
    first = next(a for a in w.actions if a.target == "scm-audit")
    assert first.body is not None and first.body["spec"]["suspend"] is True
    assert "suspended: the ring has not formed yet" in first.message
    assert w.quiet()  # nothing rewritten once it matches


def test_no_audit_objects_unless_enabled() -> None:
    w = World({"replicas": 1})
    w.run()
    assert not any(a.target in ("scm-audit", "scm-audit-reports") for a in w.actions)


def test_suspended_while_degraded_and_resumed_after() -> None:
    w = World({"replicas": 3, "audit": AUDIT})
    w.run()
    assert suspended(w) is False
    w.kill_pod("scm-2")
    w.broken_pods.add("scm-2")
    w.run(until=lambda w: suspended(w) is True, max_passes=30)
    assert w.condition("Degraded") == "True"
    msg = next(a.message for a in reversed(w.actions) if a.target == "scm-audit")
    assert "suspended: Degraded" in msg
    w.broken_pods.clear()
    w.run()
    assert suspended(w) is False and w.condition("Degraded") == "False"


def test_paused_cluster_suspends_an_existing_audit_and_creates_none() -> None:
    w = World({"replicas": 1, "audit": AUDIT})
    w.run()
    w.spec_raw = {"replicas": 1, "paused": True, "audit": AUDIT}
    w.run()
    assert suspended(w) is True
    w.spec_raw = {"replicas": 1, "audit": AUDIT}
    w.run()
    assert suspended(w) is False

    fresh = World({"replicas": 1, "paused": True, "audit": AUDIT})
    for _ in range(5):
        fresh.step()
        fresh.operator_pass()
    assert fresh.actions == []


def test_user_suspend_and_schedule_changes_rewrite_the_cronjob_and_disable_deletes_it() -> None:
    w = World({"replicas": 1, "audit": AUDIT})
    w.run()
    w.spec_raw = {"replicas": 1, "audit": {**AUDIT, "suspend": True, "schedule": "*/30 * * * *"}}
    w.run()
    cj = cronjob(w)
    assert cj is not None and cj["spec"]["suspend"] is True and cj["spec"]["schedule"] == "*/30 * * * *"
    w.spec_raw = {"replicas": 1, "audit": {**AUDIT, "enabled": False}}
    w.run()
    assert ("CronJob", "scm-audit") not in w.children
    deleted = [a for a in w.actions if isinstance(a, planner.DeleteObject) and a.target == "scm-audit"]
    assert len(deleted) == 1 and "report volume is kept" in deleted[0].message
    assert ("PersistentVolumeClaim", naming.audit_pvc_name("scm")) in w.children  # the reports (trends) stay


def test_executors_on_kubernetes_get_the_driver_service_which_goes_when_the_master_is_local_again() -> None:
    k8s = {**AUDIT, "master": "k8s://https://kubernetes.default.svc"}
    w = World({"replicas": 1, "audit": k8s})
    w.run()
    key = ("Service", naming.audit_driver_service_name("scm"))
    assert key in w.children
    applied = [a for a in w.actions if isinstance(a, planner.Apply) and a.target == key[1]]
    assert len(applied) == 1 and applied[0].body == audit_builders.build_audit_driver_service(w.ref)
    spec, _ = parse_spec(w.spec_raw)
    assert cronjob(w) == audit_builders.build_audit_cronjob(w.ref, spec, suspend=False)
    assert w.quiet()
    w.spec_raw = {"replicas": 1, "audit": AUDIT}  # local[*] again
    w.run()
    assert key not in w.children
    deleted = [a for a in w.actions if isinstance(a, planner.DeleteObject) and a.target == key[1]]
    assert len(deleted) == 1 and deleted[0].object_kind == "Service"
    assert "--executor-pod-template" not in pod_command(w)


def pod_command(w: World) -> list[str]:
    cj = cronjob(w)
    assert cj is not None
    return list(cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"])
