"""The scheduled Spark audit (its report volume and CronJob) and the cluster's backups (``backups.plan``'s
next step as an action, its Event also on the OzoneSCMBackup it is about). Pure."""

from __future__ import annotations

from typing import assert_never

from ozone_scm_operator import audit_builders, backup_builders, backups, naming
from ozone_scm_operator.planner.actions import (
    Action,
    Apply,
    CreateBackup,
    CreateJob,
    CreatePVC,
    DeleteBackup,
    DeleteObject,
    UpdateBackup,
)
from ozone_scm_operator.planner.passes import _admissible, _Pass


def _audit(p: _Pass, *, only_existing: bool = False) -> Action | None:
    """The scheduled Spark audit: its report volume, then its CronJob (suspended until the ring has formed, while
    the cluster is Degraded as the last pass found it, or paused); deleted when ``spec.audit.enabled`` is false (the reports are kept).
    ``only_existing`` (a paused cluster): only rewrite a CronJob that exists (to suspend it), create nothing."""
    key = ("CronJob", naming.audit_cronjob_name(p.ref.name))
    if only_existing and key not in p.obs.children:
        return None
    if not p.spec.audit.enabled:
        if key in p.obs.children:
            return DeleteObject(
                target=key[1],
                reason="DeleteAuditCronJob",
                message=f"deleting CronJob {key[1]} (spec.audit.enabled=false; the report volume is kept)",
                object_kind="CronJob",
            )
        return None
    pvc = audit_builders.build_audit_pvc(p.ref, p.spec)
    if ("PersistentVolumeClaim", pvc["metadata"]["name"]) not in p.obs.children:
        return CreatePVC(
            target=pvc["metadata"]["name"],
            reason="CreateAuditVolume",
            message=f"creating the audit report volume {pvc['metadata']['name']}",
            body=pvc,
        )
    service = _audit_driver_service(p)
    if service is not None:
        return service
    cond = p.status.condition("Degraded")
    degraded = cond is not None and cond.status == "True"
    # before the ring has formed there is nothing to export either
    # before the ring has formed there is nothing to export either, nor while it hibernates
    suspend = audit_builders.audit_suspended(p.spec, degraded=degraded or p.status.cluster_id is None or p.hibernate)
    body = audit_builders.build_audit_cronjob(p.ref, p.spec, suspend=suspend)
    want = body["metadata"]["annotations"][naming.ANN_CONTENT_HASH]
    have = p.obs.children.get(key, "<absent>")
    if have == want and p.obs.child_owners.get(key) == p.ref.uid:
        return None  # as wanted, and this resource its controller (else applied again with the owner reference)
    if not _admissible(p, f"the audit CronJob's Pods ({key[1]})",
                       body["spec"]["jobTemplate"]["spec"]["template"]["spec"]):
        return None
    verb = "creating" if have == "<absent>" else "updating"
    why = ""
    if suspend:
        cause = ("spec.audit.suspend" if p.spec.audit.suspend else "spec.paused" if p.spec.paused
                 else "hibernated" if p.hibernate else "Degraded" if degraded else "the ring has not formed yet")
        why = f" (suspended: {cause})"
    return Apply(
        target=key[1],
        reason="ApplyAuditCronJob",
        message=f"{verb} CronJob {key[1]}{why}",
        body=body,
    )


def _audit_driver_service(p: _Pass) -> Action | None:
    """With executors on Kubernetes, the headless Service they reach the audit's driver through; deleted when the
    master is local again."""
    key = ("Service", naming.audit_driver_service_name(p.ref.name))
    if not p.spec.audit.on_kubernetes:
        if key in p.obs.children:
            return DeleteObject(target=key[1], reason="DeleteAuditDriverService", object_kind="Service",
                                message=f"deleting Service {key[1]} (spec.audit.master is local)")
        return None
    body = audit_builders.build_audit_driver_service(p.ref)
    want = body["metadata"]["annotations"][naming.ANN_CONTENT_HASH]
    have = p.obs.children.get(key, "<absent>")
    if have == want and p.obs.child_owners.get(key) == p.ref.uid:
        return None
    verb = "creating" if have == "<absent>" else "updating"
    return Apply(target=key[1], reason="ApplyAuditDriverService", body=body,
                 message=f"{verb} Service {key[1]} (the Spark executors reach the audit's driver through it)")


def _backups(p: _Pass) -> Action | None:
    """The cluster's OzoneSCMBackups, the backup schedule and retention (``backups.plan``), after the members' own
    work: one step per pass, its Event also on the backup it is about."""
    result = backups.plan(backups.Inputs(
        ref=p.ref, spec=p.spec, now=p.now, cluster_id=p.status.cluster_id, has_leader=p.obs.ring is not None,
        backups=p.obs.backups, jobs=p.obs.backup_jobs,
        volume_exists=("PersistentVolumeClaim", naming.backup_pvc_name(p.ref.name)) in p.obs.children,
        recorded=p.status.backup, admissible=lambda what, spec: _admissible(p, what, spec),
    ))
    p.set_status(backup=result.status)
    for reason, message in result.notes:
        p.note(reason, message)
    step = result.step
    if step is None:
        return None
    match step:
        case backups.CreateVolume(body=body):
            return CreatePVC(
                target=body["metadata"]["name"],
                reason=result.reason,
                message=result.message,
                body=body,
            )
        case backups.UpdateBackup(backup=b, status=status, finalizers=finalizers):
            return UpdateBackup(
                target=b.name,
                reason=result.reason,
                message=result.message,
                status=status,
                finalizers=finalizers,
                subject=backup_builders.backup_ref(p.ref, b.name, b.uid),
            )
        case backups.CreateJob(backup=b, body=body):
            return CreateJob(
                target=body["metadata"]["name"],
                reason=result.reason,
                message=result.message,
                body=body,
                subject=backup_builders.backup_ref(p.ref, b.name, b.uid),
            )
        case backups.CreateBackup(body=body):
            return CreateBackup(
                target=body["metadata"]["name"],
                reason=result.reason,
                message=result.message,
                body=body,
            )
        case backups.DeleteBackup(backup=b):
            return DeleteBackup(
                target=b.name,
                reason=result.reason,
                message=result.message,
                subject=backup_builders.backup_ref(p.ref, b.name, b.uid),
            )
        case _:
            assert_never(step)
