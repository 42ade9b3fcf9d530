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

With a ``k8s://`` master (``spec.audit.on_kubernetes``) the audit Pod is Spark's driver in client mode and Spark's
own Kubernetes scheduler backend starts the executor Pods:

* the Pod runs as ``spec.audit.serviceAccountName`` with its token mounted (the chart grants that ServiceAccount
  what Spark needs: executor Pods and their ConfigMap), and names itself to Spark (``spark.kubernetes.driver.pod.name``:
  the executors are owned by it, so they go when it goes);
* the executors reach the driver through the headless Service ``<cluster>-audit-driver``
  (:func:`build_audit_driver_service`, selecting the audit Pods), on fixed driver and block manager ports;
* the export goes onto the report volume (``/audit/reports/.scratch/export``, a hidden directory the report ignores),
  which every executor mounts at the same path, as it mounts the report directory the job writes its findings into;
  a ReadWriteOnce volume mounts on one node only, so the executors carry a required affinity to the audit Pod's
  node (:func:`build_executor_pod_template`: also the cluster's security contexts, so they pass Pod Security
  ``restricted``, and the command that starts Spark's executor backend from the image's PySpark).

The image: ``spec.audit.image``, or else the audit image built next to the cluster's (:func:`audit_image`:
``<repository>-audit:<tag>``, what ``make audit-image`` builds beside ``make image``): the SCM image has no Java.

The audit objects carry :func:`naming.audit_labels`, never the member labels: the reconciler lists a cluster's
Pods and PVCs by ``LABEL_CLUSTER`` as members' objects. ``suspend`` is computed by the caller (the user's
``spec.audit.suspend``, or the cluster Degraded or paused) and is part of the content hash, so flipping it
rewrites the CronJob.
"""

from __future__ import annotations

import json
from typing import Any

from ozone_scm_operator import builders, naming
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.spec import ClusterSpec

Body = dict[str, Any]

WORK_DIR = f"{naming.AUDIT_DIR}/scratch"  # the emptyDir; the export goes into a directory inside it (the export
EXPORT_DIR = f"{WORK_DIR}/export"  # replaces its --out by renaming, which a mount point cannot be)
REPORTS_DIR = f"{naming.AUDIT_DIR}/reports"
SHARED_EXPORT_DIR = f"{REPORTS_DIR}/.scratch/export"  # executors on Kubernetes: the export on the report volume
TERMINATION_LOG = "/dev/termination-log"
KEEP_RUNS = 20  # past runs kept on the report volume (the report's trends)
DRIVER_PORT = 7078  # Spark's driver RPC and block manager ports, fixed so that the driver Service names them
BLOCK_MANAGER_PORT = 7079
EXECUTOR_CONTAINER = "executor"
# starts Spark's Kubernetes executor backend from the environment Spark gives an executor Pod (scm_audit.executor)
EXECUTOR_COMMAND = ["python", "-m", "scm_audit.executor"]
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


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


def executor_labels(cluster: str) -> dict[str, str]:
    """The executor Pods' labels: the audit's, as another component (so the driver Service never selects them)."""
    return {**naming.audit_labels(cluster), naming.LABEL_COMPONENT: "audit-executor"}


def build_audit_driver_service(ref: ClusterRef) -> Body:
    """The headless Service the executors reach the driver through (``spark.driver.host``): the audit Pods' IPs,
    published before they are ready (the driver has no probe)."""
    return builders.with_content_hash({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": ref.metadata(naming.audit_driver_service_name(ref.name), naming.audit_labels(ref.name)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": naming.audit_labels(ref.name),
            "ports": [{"name": "driver", "port": DRIVER_PORT, "targetPort": DRIVER_PORT, "protocol": "TCP"},
                      {"name": "block-manager", "port": BLOCK_MANAGER_PORT, "targetPort": BLOCK_MANAGER_PORT,
                       "protocol": "TCP"}],
        },
    })


def build_executor_pod_template(ref: ClusterRef, spec: ClusterSpec) -> Body:
    """The Pod template Spark starts each executor from (``spark.kubernetes.executor.podTemplateFile``); Spark adds
    the image, resources, its environment, a local-dir ``emptyDir`` and its configuration volume."""
    pod: Body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"labels": executor_labels(ref.name)},
        "spec": {
            "securityContext": builders.pod_security_context(spec),
            "automountServiceAccountToken": False,  # executors talk to the driver, never to the API
            "enableServiceLinks": False,
            "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": naming.audit_labels(ref.name)}}]}},
            "containers": [{
                "name": EXECUTOR_CONTAINER,
                "command": list(EXECUTOR_COMMAND),
                "workingDir": builders.TMP_DIR,
                "securityContext": builders.container_security_context(spec),
                "volumeMounts": [{"name": "reports", "mountPath": REPORTS_DIR},
                                 {"name": "tmp", "mountPath": builders.TMP_DIR}],
            }],
            "volumes": [{"name": "reports", "persistentVolumeClaim": {"claimName": naming.audit_pvc_name(ref.name)}},
                        {"name": "tmp", "emptyDir": {}}],
        },
    }
    if spec.image_pull_secrets:
        pod["spec"]["imagePullSecrets"] = [{"name": n} for n in spec.image_pull_secrets]
    if spec.scheduling.node_selector:
        pod["spec"]["nodeSelector"] = dict(spec.scheduling.node_selector)
    if spec.scheduling.tolerations:
        pod["spec"]["tolerations"] = [dict(t) for t in spec.scheduling.tolerations]
    return pod


def spark_kubernetes_conf(ref: ClusterRef, spec: ClusterSpec) -> list[str]:
    """The ``--conf`` items of a run with executors on Kubernetes (client mode, the audit Pod the driver);
    ``$(POD_NAME)`` and ``$(POD_NAMESPACE)`` are expanded by the kubelet from the container's environment."""
    ex = spec.audit.executors
    service = naming.audit_driver_service_name(ref.name)
    return [
        "spark.submit.deployMode=client",
        "spark.kubernetes.namespace=$(POD_NAMESPACE)",
        "spark.kubernetes.driver.pod.name=$(POD_NAME)",
        f"spark.driver.host={service}.$(POD_NAMESPACE).svc",
        # Spark 4.1+ hands executors spark.driver.bindAddress (here 0.0.0.0) as the driver's address unless told to
        # use spark.driver.host, the Service above (found on the node: executors dialled 0.0.0.0:7078)
        "spark.kubernetes.executor.useDriverPodIP=false",
        "spark.driver.bindAddress=0.0.0.0",
        f"spark.driver.port={DRIVER_PORT}",
        f"spark.driver.blockManager.port={BLOCK_MANAGER_PORT}",
        f"spark.executor.instances={ex.instances}",
        f"spark.executor.cores={ex.cores}",
        f"spark.executor.memory={ex.memory}",
        *([f"spark.kubernetes.executor.request.cores={ex.cpu_request}"] if ex.cpu_request else []),
        f"spark.kubernetes.container.image={audit_image(spec)}",
        f"spark.kubernetes.container.image.pullPolicy={spec.image_pull_policy}",
        f"spark.kubernetes.executor.podNamePrefix={ref.name}-audit",
        f"spark.kubernetes.executor.podTemplateContainerName={EXECUTOR_CONTAINER}",
        f"spark.kubernetes.authenticate.caCertFile={SERVICE_ACCOUNT_DIR}/ca.crt",
        f"spark.kubernetes.authenticate.oauthTokenFile={SERVICE_ACCOUNT_DIR}/token",
        "spark.ui.enabled=false",
    ]


def build_audit_pod_spec(ref: ClusterRef, spec: ClusterSpec) -> Body:
    """The Pod of one audit run (``restartPolicy: Never``: a failed run is a failed Job, retried by the schedule)."""
    image = audit_image(spec)
    k8s = spec.audit.on_kubernetes
    export_dir = SHARED_EXPORT_DIR if k8s else EXPORT_DIR
    env: list[Body] = [{"name": "OZONE_CONF_DIR", "value": naming.CONF_DIR}]
    if k8s:
        env += [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]
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
    reports_mount = {"name": "reports", "mountPath": REPORTS_DIR}
    export: Body = {
        "name": "export",
        "command": ["ozone-scm", "admin", "audit", "export", "--all-scms", "--out", export_dir],
        **common,
        "volumeMounts": [*mounts, reports_mount] if k8s else mounts,
    }
    run = ["ozone-scm", "audit", "run", "--input", export_dir, "--out", REPORTS_DIR, "--master", spec.audit.master,
           "--keep-runs", str(KEEP_RUNS), "--status-file", TERMINATION_LOG]
    if k8s:
        run += [a for item in spark_kubernetes_conf(ref, spec) for a in ("--conf", item)]
        run += ["--executor-pod-template", json.dumps(build_executor_pod_template(ref, spec), sort_keys=True,
                                                      separators=(",", ":"))]
    audit: Body = {
        "name": "audit",
        "command": run,
        **common,
        "volumeMounts": [*mounts, reports_mount],
    }
    if spec.audit.resources:
        export["resources"] = dict(spec.audit.resources)
        audit["resources"] = dict(spec.audit.resources)
    pod_spec: Body = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "securityContext": builders.pod_security_context(spec),
        # local mode: the export and the audit talk to the SCMs, never to the API; on Kubernetes Spark's driver
        # creates and deletes its executor Pods as the audit's ServiceAccount
        "automountServiceAccountToken": k8s,
        "initContainers": [export],
        "containers": [audit],
        "volumes": volumes,
    }
    if k8s:
        pod_spec["serviceAccountName"] = spec.audit.service_account_name
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
