"""The reconciler's pure helpers: status merge patches and reading raw Pods, volumes and Secrets."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ozone_scm_operator import naming
from ozone_scm_operator.reconciler import pod_obs, pvc_obs, secret_obs, status_patch

leaf = st.one_of(st.none(), st.integers(), st.text(max_size=3), st.lists(st.integers(), max_size=2))
tree = st.recursive(st.dictionaries(st.sampled_from("abcd"), leaf, max_size=3),
                    lambda t: st.dictionaries(st.sampled_from("abcd"), t | leaf, max_size=3), max_leaves=8)


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, as the API server applies it."""
    if not isinstance(patch, dict):
        return patch
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = apply_merge_patch(out.get(k), v)
    return out


def drop_nones(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: drop_nones(x) for k, x in v.items() if x is not None}
    return v


@settings(deadline=None)
@given(old=tree, new=tree)
def test_status_patch_turns_old_into_new(old: dict[str, Any], new: dict[str, Any]) -> None:
    patch = status_patch(old, new)
    result = apply_merge_patch(old, patch or {})
    assert drop_nones(result) == drop_nones(new)


def test_stale_nested_keys_are_nulled_and_others_fields_kept() -> None:
    old = {"currentOperation": {"type": "Bootstrap", "step": "WaitForLeader"}, "kopf": {"x": 1}, "audit": {"y": 2}}
    new = {"currentOperation": {"type": "AddMember"}}
    assert status_patch(old, new) == {"currentOperation": {"type": "AddMember", "step": None}}
    assert status_patch(new, new) is None


def test_pod_observation() -> None:
    pod = {
        "metadata": {"name": "scm-1", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "annotations": {naming.ANN_REVISION: "r1", naming.ANN_INIT_MODE: "bootstrap"}},
        "status": {
            "phase": "Running", "podIP": "10.0.0.5",
            "conditions": [{"type": "Ready", "status": "True"}],
            "initContainerStatuses": [{"name": "bootstrap", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                       "lastState": {"terminated": {"exitCode": 1, "message": "Could not bootstrap"}},
                                       "restartCount": 3}],
        },
    }
    p = pod_obs(pod)
    assert p.ready and p.running and p.revision == "r1" and p.pod_ip == "10.0.0.5"
    assert p.trouble() == "init container bootstrap CrashLoopBackOff (last exit 1: Could not bootstrap)"
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    assert pod_obs(pod).deleting and not pod_obs(pod).running


def test_pvc_and_secret_observation() -> None:
    pvc = pvc_obs({"metadata": {"name": "scm-0-data"}, "spec": {"storageClassName": "fast"}, "status": {"phase": "Bound"}})
    assert pvc.phase == "Bound" and pvc.storage_class_name == "fast" and not pvc.deleting
    s = secret_obs({"metadata": {"name": "scm-0-tls", "annotations": {
        naming.ANN_CERT_SERIAL: "1f", naming.ANN_CERT_NOT_AFTER: "2026-02-01T00:00:00Z", naming.ANN_ROOT_FINGERPRINT: "ab"}}})
    assert s.certificate_serial == "1f" and s.root_fingerprint == "ab" and s.certificate_not_after is not None
    assert not s.revoked
    marked = secret_obs({"metadata": {"name": "scm-1-tls", "annotations": {naming.ANN_CERT_REVOKED: "true"}}})
    assert marked.revoked
