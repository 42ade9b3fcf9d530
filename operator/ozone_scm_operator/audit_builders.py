"""Pure builders of the scheduled Spark audit: ``spec.audit`` -> a CronJob and its report volume.

Called by the planner (to compare with what exists) and the reconciler (to create or replace). No I/O, no clock.
Like :mod:`ozone_scm_operator.builders`, every body carries the owner reference to the ``OzoneSCMCluster`` and a
``content-hash`` annotation the planner compares with the live object's.

One audit run is one Job (from the CronJob) whose Pod:

* init container ``export``: ``ozone-scm admin audit export --all-scms --out /audit/scratch/export`` against the members
  listed in the cluster ConfigMap's ozone-site.xml (mounted at ``/etc/ozone`` as in the member Pods); on a secure
  cluster with the operator's client certificate Secret at the TLS directory (its ``ca.crt`` is the root the
  ConfigMap names, ``hdds.x509.client.*`` point at its ``tls.crt``/``tls.key``: the operator is an administrator);
* container ``audit``: ``ozone-scm audit run --input /audit/scratch/export --out /audit/reports --master <spec.audit.master>``
  with ``--status-file /dev/termination-log``, so the run's summary (a small JSON) is the container's termination
  message, which the operator copies into ``status.audit``;
* the export on an ``emptyDir`` (it is rewritten every run), the reports on a PVC (``<cluster>-audit-reports``),
  which keeps past runs for the report's trends (``--keep-runs``) across Pods.

The image: ``spec.audit.image``, or else the audit image built next to the cluster's (:func:`audit_image`:
``<repository>-audit:<tag>``, what ``make audit-image`` builds beside ``make image``): the SCM image has no Java.

The audit objects carry :func:`naming.audit_labels`, never the member labels: the reconciler lists a cluster's
Pods and PVCs by ``LABEL_CLUSTER`` as members' objects. ``suspend`` is computed by the caller (the user's
``spec.audit.suspend``, or the cluster Degraded or paused) and is part of the content hash, so flipping it
rewrites the CronJob.
"""

from __future__ import annotations

from typing import Any

from ozone_scm_operator import builders, naming
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.spec import ClusterSpec

Body = dict[str, Any]

WORK_DIR = f"{naming.AUDIT_DIR}/scratch"  # the emptyDir; the export goes into a directory inside it (the export
EXPORT_DIR = f"{WORK_DIR}/export"  # replaces its --out by renaming, which a mount point cannot be)
REPORTS_DIR = f"{naming.AUDIT_DIR}/reports"
TERMINATION_LOG = "/dev/termination-log"
KEEP_RUNS = 20  # past runs kept on the report volume (the report's trends)


def build_audit_pvc(ref: ClusterRef, spec: ClusterSpec) -> Body:
    """The report volume; never deleted by the operator while the audit is enabled (it holds the trends)."""
    return builders.pvc_body(ref, naming.audit_pvc_name(ref.name), naming.audit_labels(ref.name),
                             spec.audit.report_storage_size, spec.storage.storage_class_name)


def derived_audit_image(image: str) -> str:
    """The audit image that goes with an SCM image: ``<repository>-audit`` with the same tag (``ozone-scm:1.2`` ->
    ``ozone-scm-audit:1.2``, ``registry:5000/ozone/scm`` -> ``registry:5000/ozone/scm-audit``). A digest names
    one image only, so a digest-pinned cluster image gives the repository's ``-audit`` name without a tag; set
    ``spec.audit.image`` to pin the audit image too."""
    name = image.partition("@")[0]
    colon = name.rfind(":")
    if colon > name.rfind("/"):
        return f"{name[:colon]}-audit{name[colon:]}"
    return f"{name}-audit"


def audit_image(spec: ClusterSpec) -> str:
    return spec.audit.image or derived_audit_image(spec.image)


def build_audit_pod_spec(ref: ClusterRef, spec: ClusterSpec) -> Body:
    """The Pod of one audit run (``restartPolicy: Never``: a failed run is a failed Job, retried by the schedule)."""
    image = audit_image(spec)
    env: list[Body] = [{"name": "OZONE_CONF_DIR", "value": naming.CONF_DIR}]
    mounts: list[Body] = [
        {"name": "config", "mountPath": naming.CONF_DIR, "readOnly": True},
        {"name": "work", "mountPath": WORK_DIR},
        {"name": "tmp", "mountPath": builders.TMP_DIR},  # the root filesystem is read-only (Spark's scratch)
    ]
    volumes: list[Body] = [
        {"name": "config", "configMap": {"name": naming.configmap_name(ref.name)}},
        {"name": "work", "emptyDir": {}},
        {"name": "tmp", "emptyDir": {}},
        {"name": "reports", "persistentVolumeClaim": {"claimName": naming.audit_pvc_name(ref.name)}},
    ]
    if spec.security.enabled:
        env.extend(builders.client_tls_env())
        mounts.append({"name": "tls", "mountPath": naming.TLS_DIR, "readOnly": True})
        volumes.append({"name": "tls", "secret": {"secretName": naming.operator_client_secret_name(ref.name)}})
    common: Body = {
        "image": image,
        "imagePullPolicy": spec.image_pull_policy,
        "env": env,
        "securityContext": builders.container_security_context(spec),
        # Spark may write beside its working directory (spark-warehouse, metastore_db): the writable /tmp
        "workingDir": builders.TMP_DIR,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    export: Body = {
        "name": "export",
        "command": ["ozone-scm", "admin", "audit", "export", "--all-scms", "--out", EXPORT_DIR],
        **common,
        "volumeMounts": mounts,
    }
    audit: Body = {
        "name": "audit",
        "command": [
            "ozone-scm", "audit", "run", "--input", EXPORT_DIR, "--out", REPORTS_DIR,
            "--master", spec.audit.master, "--keep-runs", str(KEEP_RUNS), "--status-file", TERMINATION_LOG,
        ],
        **common,
        "volumeMounts": [*mounts, {"name": "reports", "mountPath": REPORTS_DIR}],
    }
    if spec.audit.resources:
        export["resources"] = dict(spec.audit.resources)
        audit["resources"] = dict(spec.audit.resources)
    pod_spec: Body = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "securityContext": builders.pod_security_context(spec),
        "automountServiceAccountToken": False,  # the export and the audit talk to the SCMs, never to the API
        "initContainers": [export],
        "containers": [audit],
        "volumes": volumes,
    }
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in spec.image_pull_secrets]
    if spec.scheduling.node_selector:
        pod_spec["nodeSelector"] = dict(spec.scheduling.node_selector)
    if spec.scheduling.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in spec.scheduling.tolerations]
    return pod_spec


def build_audit_cronjob(ref: ClusterRef, spec: ClusterSpec, *, suspend: bool) -> Body:
    """The CronJob of ``spec.audit`` (``suspend`` as the caller decided it, see the module docstring)."""
    labels = naming.audit_labels(ref.name)
    body: Body = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": ref.metadata(naming.audit_cronjob_name(ref.name), labels),
        "spec": {
            "schedule": spec.audit.schedule,
            "suspend": suspend,
            # one run at a time: a run still going when the next is due makes that one skip, never pile up
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 600,
            "successfulJobsHistoryLimit": spec.audit.successful_jobs_history_limit,
            "failedJobsHistoryLimit": spec.audit.failed_jobs_history_limit,
            "jobTemplate": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "backoffLimit": 0,
                    "template": {
                        "metadata": {"labels": dict(labels)},
                        "spec": build_audit_pod_spec(ref, spec),
                    },
                },
            },
        },
    }
    return builders.with_content_hash(body)


def audit_suspended(spec: ClusterSpec, *, degraded: bool) -> bool:
    """Whether the CronJob should be suspended: the user asked, the cluster is paused, or it is Degraded (an
    audit of a degraded ring would report the outage, not the replication)."""
    return spec.audit.suspend or spec.paused or degraded
