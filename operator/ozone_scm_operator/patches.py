"""Every patch body the reconciler writes, built from the step and what the pass observed (pure: no I/O, no clock).

``Reconciler.act`` sends what these return and builds nothing itself: the status merge patch (:func:`status_patch`),
the merge patches of the steps that change an existing object (:func:`step_patches`), and the object an Event about
a step's subject is posted on (:func:`event_subject`). A patch that replaces a list (``ownerReferences``,
``finalizers``) carries the ``resourceVersion`` the pass observed, so the API server refuses it (409) when the object
changed since, and the next pass plans again from the new version.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from ozone_scm_operator import BACKUP_KIND, KIND, naming, planner
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.observations import Reads

Body = dict[str, Any]

# status keys written by others (kopf's bookkeeping, the audit integration)
KEEP = ("kopf", "audit")

_UNCHANGED = object()


def merge_patch_diff(old: Any, new: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns ``old`` into ``new``, or ``_UNCHANGED``: objects recursively, keys
    that disappear (or become None) nulled -- a merge patch merges nested objects, so a stale nested key would
    otherwise survive -- and everything else replaced whole."""
    if isinstance(old, dict) and isinstance(new, dict):
        patch: Body = {}
        for k, v in new.items():
            if k not in old:
                if v is not None:
                    patch[k] = v
                continue
            d = merge_patch_diff(old[k], v)
            if d is not _UNCHANGED:
                patch[k] = d
        for k in old:
            if k not in new:
                patch[k] = None
        return patch if patch else _UNCHANGED
    return _UNCHANGED if old == new else new


def status_patch(old: Body | None, new: Body) -> Body | None:
    """The merge patch turning the stored status into ``new`` (keys owned by others are left alone), or None."""
    old = {k: v for k, v in (old or {}).items() if k not in KEEP}
    result = merge_patch_diff(old, new)
    return None if result is _UNCHANGED else dict(result)


@dataclasses.dataclass(frozen=True)
class Patch:
    """One merge patch: of ``kind``/``name`` (in the cluster's namespace), or of its ``subresource``."""

    kind: str
    name: str
    body: Body
    subresource: str | None = None


def _guarded(meta: Body, body: Body) -> Body:
    """``body``'s metadata with the observed ``resourceVersion`` (the API server's optimistic lock)."""
    return {**body, "metadata": {**body.get("metadata", {}), "resourceVersion": meta.get("resourceVersion")}}


def retain_pvc(ref: ClusterRef, now: datetime.datetime) -> Body:
    """``storage.reclaimPolicy: Retain`` on a removed member's volume: owned by nothing, labelled as retained."""
    return {"metadata": {
        "ownerReferences": None,
        "labels": {naming.LABEL_CLUSTER: None, f"{naming.LABEL_CLUSTER}-retained": ref.name},
        "annotations": {f"{naming.LABEL_CLUSTER}-retained-at": now.strftime("%Y-%m-%dT%H:%M:%SZ")},
    }}


def release(ref: ClusterRef, meta: Body) -> Body:
    """The cluster's owner reference dropped from an object (the others kept)."""
    refs = [r for r in meta.get("ownerReferences") or () if r.get("uid") != ref.uid]
    return _guarded(meta, {"metadata": {"ownerReferences": refs or None}})


def adopt(ref: ClusterRef, meta: Body) -> Body:
    """The cluster made the object's controller owner (any other controller reference replaced)."""
    refs = [r for r in meta.get("ownerReferences") or () if not r.get("controller")]
    return _guarded(meta, {"metadata": {"ownerReferences": [*refs, ref.owner_reference()]}})


def finalizers(meta: Body, wanted: tuple[str, ...]) -> Body:
    """An object's finalizers set to ``wanted`` (none: the field removed)."""
    return _guarded(meta, {"metadata": {"finalizers": list(wanted) or None}})


def step_patches(ref: ClusterRef, a: planner.Action, now: datetime.datetime, reads: Reads) -> list[Patch]:
    """The merge patches a step writes into existing objects, in order (empty: the step writes none)."""
    match a:
        case planner.RetainPVC():
            return [Patch("PersistentVolumeClaim", a.target, retain_pvc(ref, now))]
        case planner.ReleasePVC():
            return [Patch("PersistentVolumeClaim", a.target, release(ref, reads.meta("PersistentVolumeClaim", a.target)))]
        case planner.LabelPVC(cluster_id=cluster_id):
            return [Patch("PersistentVolumeClaim", a.target, {"metadata": {"labels": {naming.LABEL_CLUSTER_ID: cluster_id}}})]
        case planner.ExpandPVC(size=size):
            return [Patch("PersistentVolumeClaim", a.target, {"spec": {"resources": {"requests": {"storage": size}}}})]
        case planner.Adopt(object_kind=kind):
            return [Patch(kind, a.target, adopt(ref, reads.meta(kind, a.target)))]
        case planner.ClearAnnotation(key=key) | planner.RemoveAnnotation(key=key):
            return [Patch(KIND, ref.name, {"metadata": {"annotations": {key: None}}})]
        case planner.RevokeCertificate():
            # the observed proof that the revocation is done (a pass that finds it moves on to deleting the Secret)
            return [Patch("Secret", a.target, {"metadata": {"annotations": {naming.ANN_CERT_REVOKED: "true"}}})]
        case planner.UpdateBackup(status=status, finalizers=wanted):
            out = []
            if wanted is not None:
                out.append(Patch(BACKUP_KIND, a.target, finalizers(reads.meta(BACKUP_KIND, a.target), wanted)))
            if status:
                out.append(Patch(BACKUP_KIND, a.target, {"status": status}, subresource="status"))
            return out
        case _:
            return []


# the kind each deleting step deletes (``DeleteObject`` names its own)
DELETED_KIND: dict[type, str] = {
    planner.DeletePod: "Pod",
    planner.DeletePVC: "PersistentVolumeClaim",
    planner.DeleteSecret: "Secret",
    planner.DeleteBackup: BACKUP_KIND,
}


def event_subject(subject: Body) -> Body:
    """The object an Event about a step's subject is posted on: its kind and identity, nothing else."""
    return {"apiVersion": subject["apiVersion"], "kind": subject["kind"],
            "metadata": {k: subject[k] for k in ("name", "namespace", "uid")}}
