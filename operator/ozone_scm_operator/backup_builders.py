"""Pure builders of the backups: the backup volume, the Job that takes and verifies one backup, the Job that
deletes one backup's data, and the ``OzoneSCMBackup`` objects the schedule creates.

Called by the planner (through ``backups``) to build what the reconciler then creates. No I/O, no clock.

One backup ``B`` of cluster ``C`` is one Job (``<B>-backup``) whose Pod runs, with the SCM image and the member
Pods' Pod Security settings (``restricted``: non-root, read-only root filesystem, no privilege escalation, every
capability dropped, seccomp ``RuntimeDefault``, no service account token):

* init container ``backup``: ``ozone-scm admin scm backup --out /backups/B`` against the members listed in the
  cluster ConfigMap's ozone-site.xml (the leader answers; a follower sends the client on), on a secure cluster
  with the operator's client certificate (an administrator);
* container ``verify``: ``ozone-scm admin scm backup verify /backups/B --clusterid <cluster ID>
  --status-file /dev/termination-log``: the digests of every file checked offline, and a small JSON summary (term,
  index, cluster ID, size) as the termination message, which the operator copies into the backup's status.

With ``spec.backup.s3`` the Pod writes to its own ``/scratch`` (an emptyDir) instead, ``verify`` becomes the second
init container, and a third container ``upload`` runs ``ozone-scm admin scm backup upload /scratch/B
s3://<bucket>/<prefix>/B/ --endpoint-url ... --status-file /dev/termination-log`` (the manifest last, so a partial
upload is never a backup) with the keys of ``spec.backup.s3.credentialsSecret`` as ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY``; no backup volume is created. The clean-up Job then runs ``backup delete s3://...``
(the manifest first).

``/backups`` is the backup volume (``<C>-backups``, ``spec.backup.volume``), a PVC owned by nothing: it outlives the
cluster, like the members' volumes under ``reclaimPolicy: Retain``. ``backoffLimit: 0``: a failed backup is a
``Failed`` OzoneSCMBackup (its directory is left for inspection, and deleted with the object); a new object is a new
try. The Jobs are owned by their OzoneSCMBackup (deleted with it) and carry :func:`naming.backup_labels`, never the
member labels.
"""

from __future__ import annotations

import datetime
from typing import Any

from ozone_scm_operator import API_GROUP, API_VERSION, BACKUP_KIND, builders, naming
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.spec import BackupS3, ClusterSpec

Body = dict[str, Any]

TERMINATION_LOG = "/dev/termination-log"
PURPOSE_BACKUP = "backup"
PURPOSE_DELETE = "delete"
LABEL_PURPOSE = f"{API_GROUP}/backup-job"  # on a backup Job and its Pods: PURPOSE_BACKUP or PURPOSE_DELETE


def backup_ref(ref: ClusterRef, name: str, uid: str) -> Body:
    """The owner reference (and Event subject) of one OzoneSCMBackup."""
    return {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": BACKUP_KIND, "name": name, "uid": uid,
            "namespace": ref.namespace}


def build_backup_pvc(ref: ClusterRef, spec: ClusterSpec) -> Body:
    """The backup volume: owned by nothing, so deleting the OzoneSCMCluster keeps the backups."""
    body = builders.pvc_body(
        ref, naming.backup_pvc_name(ref.name), naming.backup_labels(ref.name), spec.backup.volume_size,
        spec.backup.storage_class_name or spec.storage.storage_class_name,
    )
    del body["metadata"]["ownerReferences"]
    return body


def _pod_spec(ref: ClusterRef, spec: ClusterSpec, init: list[Body], main: list[Body], *, cluster_api: bool,
              s3: BackupS3 | None = None) -> Body:
    if s3 is None:
        volumes: list[Body] = [
            {"name": "backups", "persistentVolumeClaim": {"claimName": naming.backup_pvc_name(ref.name)}}]
    else:
        volumes = [{"name": "scratch", "emptyDir": {}}, *builders.s3_ca_volume(s3)[0]]
    volumes.append({"name": "tmp", "emptyDir": {}})
    if cluster_api:
        volumes.append({"name": "config", "configMap": {"name": naming.configmap_name(ref.name)}})
        if spec.security.enabled:
            volumes.append({"name": "tls", "secret": {"secretName": naming.operator_client_secret_name(ref.name)}})
    pod_spec: Body = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "securityContext": builders.pod_security_context(spec),
        "automountServiceAccountToken": False,  # the backup talks to the SCMs, never to the Kubernetes API
        "initContainers": init,
        "containers": main,
        "volumes": volumes,
    }
    if not init:
        del pod_spec["initContainers"]
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in spec.image_pull_secrets]
    if spec.scheduling.node_selector:
        pod_spec["nodeSelector"] = dict(spec.scheduling.node_selector)
    if spec.scheduling.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in spec.scheduling.tolerations]
    return pod_spec


def _container(spec: ClusterSpec, name: str, command: list[str], *, cluster_api: bool,
               s3: BackupS3 | None = None, talks_s3: bool = False) -> Body:
    """One container of a backup Job. ``s3``: the Pod writes to its scratch emptyDir instead of the backup volume;
    ``talks_s3``: this container reaches the object storage (its keys and CA mounted)."""
    env: list[Body] = [{"name": "OZONE_CONF_DIR", "value": naming.CONF_DIR}] if cluster_api else []
    if s3 is None:
        mounts: list[Body] = [{"name": "backups", "mountPath": naming.BACKUP_DIR}]
    else:
        mounts = [{"name": "scratch", "mountPath": naming.SCRATCH_DIR}]
        if talks_s3:
            env.extend(builders.s3_env(s3))
            mounts.extend(builders.s3_ca_volume(s3)[1])
    mounts.append({"name": "tmp", "mountPath": builders.TMP_DIR})  # the root filesystem is read-only
    if cluster_api:
        mounts.append({"name": "config", "mountPath": naming.CONF_DIR, "readOnly": True})
        if spec.security.enabled:
            env.extend(builders.client_tls_env())
            mounts.append({"name": "tls", "mountPath": naming.TLS_DIR, "readOnly": True})
    out: Body = {
        "name": name,
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": command,
        "env": env,
        "volumeMounts": mounts,
        "securityContext": builders.container_security_context(spec),
        "workingDir": builders.TMP_DIR,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    return out


def _job(ref: ClusterRef, name: str, backup: str, owner: Body, purpose: str, pod_spec: Body) -> Body:
    labels = {**naming.backup_labels(ref.name), naming.LABEL_BACKUP_NAME: backup, LABEL_PURPOSE: purpose}
    owner_ref = {k: owner[k] for k in ("apiVersion", "kind", "name", "uid")}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": ref.namespace,
            "labels": labels,
            "ownerReferences": [{**owner_ref, "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "backoffLimit": 0,  # never a second run into the directory the first one wrote
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


def backup_location(spec: ClusterSpec, backup: str) -> str:
    """Where a new backup goes: ``s3://<bucket>/<prefix>/<backup>/`` (``spec.backup.s3``), else its directory on
    the backup volume. Recorded in the backup's status (``location``) before its Job starts."""
    return spec.backup.s3.url(backup) if spec.backup.s3 is not None else naming.backup_path(backup)


def build_backup_job(ref: ClusterRef, spec: ClusterSpec, backup: str, owner: Body, cluster_id: str) -> Body:
    """The Job that backs the ring up into ``/backups/<backup>`` and verifies what it wrote; with
    ``spec.backup.s3``, into its own ``/scratch/<backup>`` (an emptyDir), verified, then uploaded by a third
    container (``upload``: the manifest last; its summary is the termination message)."""
    s3 = spec.backup.s3
    path = naming.backup_path(backup) if s3 is None else naming.scratch_path(backup)
    take = _container(spec, "backup", ["ozone-scm", "admin", "scm", "backup", "--out", path], cluster_api=True,
                      s3=s3)
    verify = _container(
        spec, "verify",
        ["ozone-scm", "admin", "scm", "backup", "verify", path, "--clusterid", cluster_id,
         "--status-file", TERMINATION_LOG],
        cluster_api=False, s3=s3,
    )
    if s3 is None:
        pod_spec = _pod_spec(ref, spec, [take], [verify], cluster_api=True)
    else:
        upload = _container(
            spec, "upload",
            ["ozone-scm", "admin", "scm", "backup", "upload", path, s3.url(backup), *builders.s3_args(s3),
             "--status-file", TERMINATION_LOG],
            cluster_api=False, s3=s3, talks_s3=True,
        )
        pod_spec = _pod_spec(ref, spec, [take, verify], [upload], cluster_api=True, s3=s3)
    return _job(ref, naming.backup_job_name(backup), backup, owner, PURPOSE_BACKUP, pod_spec)


def build_delete_job(ref: ClusterRef, spec: ClusterSpec, backup: str, owner: Body,
                     location: str | None = None) -> Body:
    """The Job that deletes the backup's data: ``/backups/<backup>`` (only a directory that holds a backup
    manifest, or nothing), or, when ``location`` is an ``s3://`` URL, the objects under it (manifest first; the
    endpoint and keys of ``spec.backup.s3``, which must be set)."""
    if location is not None and location.startswith("s3://"):
        s3 = spec.backup.s3
        if s3 is None:
            raise ValueError("a backup in object storage is deleted with spec.backup.s3's endpoint and keys")
        remove = _container(spec, "delete", ["ozone-scm", "admin", "scm", "backup", "delete", location,
                                             *builders.s3_args(s3)], cluster_api=False, s3=s3, talks_s3=True)
        pod_spec = _pod_spec(ref, spec, [], [remove], cluster_api=False, s3=s3)
    else:
        remove = _container(spec, "delete", ["ozone-scm", "admin", "scm", "backup", "delete",
                                             naming.backup_path(backup)], cluster_api=False)
        pod_spec = _pod_spec(ref, spec, [], [remove], cluster_api=False)
    return _job(ref, naming.backup_delete_job_name(backup), backup, owner, PURPOSE_DELETE, pod_spec)


def schedule_stamp(t: datetime.datetime) -> str:
    """The scheduled time as it appears in a scheduled backup's name (UTC, to the minute)."""
    return t.astimezone(datetime.UTC).strftime("%Y%m%d%H%M")


def build_scheduled_backup(ref: ClusterRef, scheduled_at: datetime.datetime) -> Body:
    """An OzoneSCMBackup the schedule creates for ``scheduled_at``. Owned by nothing (it outlives the cluster, like
    the volume its data is on); the annotation marks it as the schedule's (retention counts only those)."""
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": BACKUP_KIND,
        "metadata": {
            "name": naming.scheduled_backup_name(ref.name, schedule_stamp(scheduled_at)),
            "namespace": ref.namespace,
            "labels": naming.backup_labels(ref.name),
            "annotations": {
                naming.ANN_SCHEDULED_AT: scheduled_at.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        },
        "spec": {"cluster": ref.name},
    }
