"""The patch bodies the reconciler writes (``patches``): the status merge patch, each step's merge patches (guarded by
the resourceVersion the pass observed where they replace a list) and an Event's subject."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ozone_scm_operator import BACKUP_KIND, KIND, naming, planner
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.observations import Reads
from ozone_scm_operator.patches import Patch, event_subject, status_patch, step_patches

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


REF = ClusterRef(name="scm", namespace="ns", uid="u-1")
NOW = datetime.datetime(2026, 3, 4, 5, 6, 7, tzinfo=datetime.UTC)


def _step(cls: type, **fields: Any) -> Any:
    return cls(target=fields.pop("target", "scm-0-data"), reason="", message="", **fields)


def test_retain_drops_the_owner_and_the_cluster_label_and_records_when() -> None:
    [p] = step_patches(REF, _step(planner.RetainPVC), NOW, Reads())
    assert p == Patch("PersistentVolumeClaim", "scm-0-data", {"metadata": {
        "ownerReferences": None,
        "labels": {naming.LABEL_CLUSTER: None, f"{naming.LABEL_CLUSTER}-retained": "scm"},
        "annotations": {f"{naming.LABEL_CLUSTER}-retained-at": "2026-03-04T05:06:07Z"},
    }})


def test_release_keeps_other_owners_and_is_guarded_by_the_observed_version() -> None:
    other = {"uid": "other", "kind": "Thing"}
    reads = Reads(metadata={("PersistentVolumeClaim", "scm-0-data"): {
        "name": "scm-0-data", "resourceVersion": "42", "ownerReferences": [{"uid": "u-1", "controller": True}, other]}})
    [p] = step_patches(REF, _step(planner.ReleasePVC), NOW, reads)
    assert p.body == {"metadata": {"ownerReferences": [other], "resourceVersion": "42"}}
    alone = Reads(metadata={("PersistentVolumeClaim", "scm-0-data"): {
        "resourceVersion": "7", "ownerReferences": [{"uid": "u-1", "controller": True}]}})
    [p] = step_patches(REF, _step(planner.ReleasePVC), NOW, alone)
    assert p.body == {"metadata": {"ownerReferences": None, "resourceVersion": "7"}}  # the field removed


def test_adopt_replaces_another_controller_and_keeps_plain_owners() -> None:
    plain = {"uid": "x", "kind": "Thing"}
    reads = Reads(metadata={("Pod", "scm-0"): {
        "resourceVersion": "9", "ownerReferences": [{"uid": "old", "controller": True}, plain]}})
    [p] = step_patches(REF, _step(planner.Adopt, target="scm-0", object_kind="Pod"), NOW, reads)
    assert p.kind == "Pod" and p.name == "scm-0"
    assert p.body == {"metadata": {"ownerReferences": [plain, REF.owner_reference()], "resourceVersion": "9"}}


def test_a_step_on_an_object_the_pass_did_not_see_fails_before_any_write() -> None:
    with pytest.raises(RuntimeError, match="Pod scm-0 is gone"):
        step_patches(REF, _step(planner.Adopt, target="scm-0", object_kind="Pod"), NOW, Reads())
    with pytest.raises(RuntimeError, match=f"{BACKUP_KIND} b1 is gone"):
        step_patches(REF, _step(planner.UpdateBackup, target="b1", status={}, finalizers=()), NOW, Reads())


def test_backup_finalizers_then_status_on_its_subresource() -> None:
    reads = Reads(metadata={(BACKUP_KIND, "b1"): {"resourceVersion": "3", "finalizers": ["f"]}})
    step = _step(planner.UpdateBackup, target="b1", status={"phase": "Done"}, finalizers=())
    assert step_patches(REF, step, NOW, reads) == [
        Patch(BACKUP_KIND, "b1", {"metadata": {"finalizers": None, "resourceVersion": "3"}}),
        Patch(BACKUP_KIND, "b1", {"status": {"phase": "Done"}}, subresource="status"),
    ]
    only_status = _step(planner.UpdateBackup, target="b1", status={"phase": "Running"})
    assert step_patches(REF, only_status, NOW, Reads()) == [
        Patch(BACKUP_KIND, "b1", {"status": {"phase": "Running"}}, subresource="status")]


def test_label_expand_annotation_and_revocation_mark() -> None:
    assert step_patches(REF, _step(planner.LabelPVC, cluster_id="CID"), NOW, Reads()) == [
        Patch("PersistentVolumeClaim", "scm-0-data", {"metadata": {"labels": {naming.LABEL_CLUSTER_ID: "CID"}}})]
    assert step_patches(REF, _step(planner.ExpandPVC, size="2Gi"), NOW, Reads()) == [
        Patch("PersistentVolumeClaim", "scm-0-data", {"spec": {"resources": {"requests": {"storage": "2Gi"}}}})]
    assert step_patches(REF, _step(planner.ClearAnnotation, key="k"), NOW, Reads()) == [
        Patch(KIND, "scm", {"metadata": {"annotations": {"k": None}}})]
    revoke = _step(planner.RevokeCertificate, target="scm-2-tls", serial="12", revocation_reason=5)
    assert step_patches(REF, revoke, NOW, Reads()) == [
        Patch("Secret", "scm-2-tls", {"metadata": {"annotations": {naming.ANN_CERT_REVOKED: "true"}}})]


def test_steps_that_patch_nothing() -> None:
    assert step_patches(REF, _step(planner.DeletePVC), NOW, Reads()) == []


def test_event_subject_is_the_identity_only() -> None:
    subject = {"apiVersion": "v1", "kind": "Pod", "name": "scm-0", "namespace": "ns", "uid": "p", "extra": 1}
    assert event_subject(subject) == {"apiVersion": "v1", "kind": "Pod",
                                      "metadata": {"name": "scm-0", "namespace": "ns", "uid": "p"}}
