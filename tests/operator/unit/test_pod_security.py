"""Pod Security: the pure checker of the ``baseline`` and ``restricted`` levels, the Pods the operator builds (they
pass ``restricted``, with the site's overrides merged over the defaults), and the planner refusing to create or
roll onto a Pod the namespace's admission would refuse (Degraded PodSecurity, nothing deleted)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ozone_scm_operator import audit_builders, builders, planner, podsecurity
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.spec import parse_spec

from .sim import World

REF = ClusterRef(name="scm", namespace="ozone", uid="u-1")


def restricted_pod() -> dict[str, Any]:
    return {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "c",
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }],
        "volumes": [{"name": "v", "emptyDir": {}}, {"name": "d", "persistentVolumeClaim": {"claimName": "x"}}],
    }


def test_a_restricted_pod_passes_every_level() -> None:
    for level in podsecurity.LEVELS:
        assert podsecurity.check(restricted_pod(), level) == []


@pytest.mark.parametrize(("path", "value", "fails_baseline"), [
    (("hostNetwork",), True, True),
    (("hostPID",), True, True),
    (("containers", 0, "securityContext", "privileged"), True, True),
    (("containers", 0, "securityContext", "capabilities", "add"), ["SYS_ADMIN"], True),
    (("containers", 0, "securityContext", "capabilities", "add"), ["CHOWN"], False),
    (("containers", 0, "securityContext", "procMount"), "Unmasked", True),
    (("containers", 0, "ports"), [{"containerPort": 80, "hostPort": 80}], True),
    (("securityContext", "seccompProfile", "type"), "Unconfined", True),
    (("securityContext", "sysctls"), [{"name": "kernel.msgmax", "value": "1"}], True),
    (("securityContext", "seLinuxOptions"), {"type": "spc_t"}, True),
    (("volumes",), [{"name": "h", "hostPath": {"path": "/"}}], True),
    (("volumes",), [{"name": "n", "nfs": {"server": "x", "path": "/"}}], False),
    (("securityContext", "runAsNonRoot"), False, False),
    (("securityContext", "runAsUser"), 0, False),
    (("containers", 0, "securityContext", "allowPrivilegeEscalation"), True, False),
    (("containers", 0, "securityContext", "capabilities", "drop"), [], False),
    (("containers", 0, "securityContext", "capabilities", "add"), ["KILL"], False),
])
def test_each_rule_refuses_what_its_level_forbids(path: tuple[Any, ...], value: Any, fails_baseline: bool) -> None:
    pod = restricted_pod()
    target: Any = pod
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert podsecurity.check(pod, "restricted"), path
    assert bool(podsecurity.check(pod, "baseline")) == fails_baseline, path
    assert podsecurity.check(pod, "privileged") == []


def test_restricted_needs_seccomp_and_non_root_on_every_container_but_baseline_does_not() -> None:
    pod = restricted_pod()
    pod["securityContext"] = {}
    v = podsecurity.check(pod, "restricted")
    assert any("seccompProfile" in x for x in v) and any("runAsNonRoot" in x for x in v)
    assert podsecurity.check(pod, "baseline") == []
    # set on the container instead of the Pod: fine
    pod["containers"][0]["securityContext"].update(runAsNonRoot=True, seccompProfile={"type": "Localhost",
                                                                                      "localhostProfile": "p"})
    assert podsecurity.check(pod, "restricted") == []
    # init containers count too
    pod["initContainers"] = [{"name": "i"}]
    assert any("initContainers[i]" in x for x in podsecurity.check(pod, "restricted"))


def test_pod_spec_of_finds_the_template_of_every_workload() -> None:
    spec = restricted_pod()
    assert podsecurity.pod_spec_of({"kind": "Pod", "spec": spec}) is spec
    assert podsecurity.pod_spec_of({"kind": "Deployment", "spec": {"template": {"spec": spec}}}) is spec
    assert podsecurity.pod_spec_of({"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {
        "spec": spec}}}}}) is spec
    assert podsecurity.pod_spec_of({"kind": "ConfigMap"}) is None
    assert podsecurity.enforced_level({podsecurity.ENFORCE_LABEL: "baseline"}) == "baseline"
    assert podsecurity.enforced_level({}) == "privileged"


@pytest.mark.parametrize("raw", [{}, {"security": {"enabled": True, "caMode": "operator"}},
                                 {"security": {"enabled": True, "caMode": "scm"}}])
def test_every_pod_the_operator_builds_passes_restricted(raw: dict[str, Any]) -> None:
    spec, problems = parse_spec({**raw, "audit": {"enabled": True}})
    assert problems == []
    for mode in (builders.INIT_MODE_INIT, builders.INIT_MODE_BOOTSTRAP):
        pod = builders.build_pod(REF, spec, "scm-0", mode)
        assert podsecurity.check(pod["spec"], "restricted") == []
        ps = pod["spec"]
        assert ps["automountServiceAccountToken"] is False
        for c in [*ps["initContainers"], *ps["containers"]]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
            assert "/tmp" in {m["mountPath"] for m in c["volumeMounts"]}
    cron = audit_builders.build_audit_cronjob(REF, spec, suspend=False)
    audit_spec = podsecurity.pod_spec_of(cron)
    assert audit_spec is not None and podsecurity.check(audit_spec, "restricted") == []
    assert audit_spec["automountServiceAccountToken"] is False


def test_overrides_merge_over_the_defaults_and_roll() -> None:
    spec, _ = parse_spec({"podSecurityContext": {"runAsUser": 2000, "fsGroup": 3000},
                          "containerSecurityContext": {"readOnlyRootFilesystem": False}})
    ps = builders.build_pod(REF, spec, "scm-0", "bootstrap")["spec"]
    assert ps["securityContext"]["runAsUser"] == 2000 and ps["securityContext"]["fsGroup"] == 3000
    assert ps["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}  # the default kept
    sc = ps["containers"][0]["securityContext"]
    assert sc["readOnlyRootFilesystem"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert podsecurity.check(ps, "restricted") == []
    assert builders.pod_revision(spec) != builders.pod_revision(parse_spec({})[0])


BAD_OVERRIDE = {"containerSecurityContext": {"allowPrivilegeEscalation": True}}


def test_an_override_the_namespace_refuses_creates_no_pod_and_degrades() -> None:
    w = World({"replicas": 3, **BAD_OVERRIDE})
    w.pod_security = "restricted"
    w.run(until=lambda w: w.condition("Degraded") == "True", max_passes=30)
    assert not w.pods and not [a for a in w.actions if isinstance(a, planner.CreatePod)]
    cond = w.status.condition("Degraded")
    assert cond is not None and cond.reason == "PodSecurity"
    assert "allowPrivilegeEscalation" in cond.message and "spec.containerSecurityContext" in cond.message
    assert any("PodSecurity" in e for e in w.events)
    # the same spec where the namespace enforces nothing (or baseline) is created
    w.pod_security = "baseline"
    w.run()
    assert len(w.pods) == 3


def test_a_running_ring_is_not_rolled_onto_pods_the_namespace_refuses() -> None:
    w = World({"replicas": 3})
    w.pod_security = "restricted"
    w.run()
    before = copy.deepcopy({n: p.revision for n, p in w.pods.items()})
    w.actions = []
    w.spec_raw = {"replicas": 3, **BAD_OVERRIDE}
    w.run(until=lambda w: w.condition("Degraded") == "True", max_passes=30)
    for _ in range(20):
        w.step()
        w.operator_pass()
    assert not [a for a in w.actions if isinstance(a, (planner.DeletePod, planner.CreatePod))]
    assert {n: p.revision for n, p in w.pods.items()} == before
    cond = w.status.condition("Degraded")
    assert cond is not None and cond.reason == "PodSecurity"
    # fixed: the ring rolls to the (valid) new template and is healthy again
    w.spec_raw = {"replicas": 3, "containerSecurityContext": {"runAsUser": 1001}}
    w.run()
    assert w.condition("Degraded") == "False"
    assert len([a for a in w.actions if isinstance(a, planner.DeletePod)]) == 3
