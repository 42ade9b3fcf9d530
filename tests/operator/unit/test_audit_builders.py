"""The scheduled Spark audit's CronJob and report volume, checked field by field (issue 8 item 4)."""

from __future__ import annotations

import json
from typing import Any

from ozone_scm_operator import audit_builders, builders, naming
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.spec import parse_spec

REF = ClusterRef(name="scm", namespace="ozone", uid="u-1", cluster_domain="cluster.local")


def pod_spec(cj: dict[str, Any]) -> dict[str, Any]:
    return cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


def test_cronjob_exports_every_scm_then_audits_on_local_spark() -> None:
    spec, problems = parse_spec({"audit": {"enabled": True, "schedule": "15 2 * * *"}})
    assert problems == []
    cj = audit_builders.build_audit_cronjob(REF, spec, suspend=False)
    assert cj["apiVersion"] == "batch/v1" and cj["kind"] == "CronJob"
    assert cj["metadata"]["name"] == "scm-audit" and cj["metadata"]["namespace"] == "ozone"
    assert cj["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    s = cj["spec"]
    assert s["schedule"] == "15 2 * * *" and s["suspend"] is False and s["concurrencyPolicy"] == "Forbid"
    assert (s["successfulJobsHistoryLimit"], s["failedJobsHistoryLimit"]) == (3, 1)
    assert s["jobTemplate"]["spec"]["backoffLimit"] == 0
    ps = pod_spec(cj)
    assert ps["restartPolicy"] == "Never" and ps["securityContext"]["runAsNonRoot"] is True
    (export,) = ps["initContainers"]
    (audit,) = ps["containers"]
    assert export["command"] == ["ozone-scm", "admin", "audit", "export", "--all-scms", "--out", "/audit/scratch/export"]
    assert audit["command"] == [
        "ozone-scm", "audit", "run", "--input", "/audit/scratch/export", "--out", "/audit/reports", "--master", "local[*]",
        "--keep-runs", "20", "--status-file", "/dev/termination-log",
    ]
    assert export["image"] == audit["image"] == audit_builders.derived_audit_image(spec.image)
    assert env_of(export) == {"OZONE_CONF_DIR": "/etc/ozone"}  # plain cluster: no client certificate
    vols = {v["name"]: v for v in ps["volumes"]}
    assert vols["config"]["configMap"]["name"] == naming.configmap_name("scm")
    assert vols["reports"]["persistentVolumeClaim"]["claimName"] == "scm-audit-reports"
    assert "emptyDir" in vols["work"] and "tls" not in vols
    assert {m["mountPath"] for m in audit["volumeMounts"]} == {"/etc/ozone", "/audit/scratch", "/audit/reports", "/tmp"}
    assert {m["mountPath"] for m in export["volumeMounts"]} == {"/etc/ozone", "/audit/scratch", "/tmp"}


def test_secure_cluster_exports_with_the_operators_client_certificate() -> None:
    spec, _ = parse_spec({"security": {"enabled": True}, "audit": {"enabled": True}})
    ps = pod_spec(audit_builders.build_audit_cronjob(REF, spec, suspend=False))
    export = ps["initContainers"][0]
    vols = {v["name"]: v for v in ps["volumes"]}
    assert vols["tls"]["secret"]["secretName"] == naming.operator_client_secret_name("scm")
    assert {"name": "tls", "mountPath": naming.TLS_DIR, "readOnly": True} in export["volumeMounts"]
    env = env_of(export)
    assert env["OZONE-SITE.XML_hdds.x509.client.certificate.file"] == f"{naming.TLS_DIR}/tls.crt"
    assert env["OZONE-SITE.XML_hdds.x509.client.private.key.file"] == f"{naming.TLS_DIR}/tls.key"
    # the root the ConfigMap names for a secure cluster is the client Secret's ca.crt, mounted at the same place
    cm = builders.build_configmap(REF, spec, ["scm-0"], "scm-0")
    assert f"<value>{naming.TLS_DIR}/ca.crt</value>" in cm["data"]["ozone-site.xml"]
    # the operator's certificate must be an administrator for the export
    assert naming.MANAGER in builders.static_properties(spec)["ozone.administrators"].split(",")


def test_user_settings_reach_the_pod() -> None:
    spec, problems = parse_spec({
        "image": "ozone-scm:1",
        "imagePullSecrets": [{"name": "reg"}],
        "audit": {
            "enabled": True, "image": "ozone-scm-audit:1", "master": "k8s://https://kubernetes.default.svc",
            "successfulJobsHistoryLimit": 5, "failedJobsHistoryLimit": 2, "reportStorageSize": "5Gi",
            "resources": {"limits": {"memory": "4Gi"}},
        },
    })
    assert problems == []
    cj = audit_builders.build_audit_cronjob(REF, spec, suspend=True)
    assert cj["spec"]["suspend"] is True
    assert (cj["spec"]["successfulJobsHistoryLimit"], cj["spec"]["failedJobsHistoryLimit"]) == (5, 2)
    ps = pod_spec(cj)
    audit = ps["containers"][0]
    assert audit["image"] == ps["initContainers"][0]["image"] == "ozone-scm-audit:1"
    assert audit["command"][audit["command"].index("--master") + 1] == "k8s://https://kubernetes.default.svc"
    assert audit["resources"] == {"limits": {"memory": "4Gi"}}
    assert ps["imagePullSecrets"] == [{"name": "reg"}]
    pvc = audit_builders.build_audit_pvc(REF, spec)
    assert pvc["metadata"]["name"] == "scm-audit-reports"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "5Gi"


def test_audit_objects_are_never_taken_for_member_objects() -> None:
    spec, _ = parse_spec({"audit": {"enabled": True}})
    cj = audit_builders.build_audit_cronjob(REF, spec, suspend=False)
    pvc = audit_builders.build_audit_pvc(REF, spec)
    selector = naming.selector_labels("scm")
    for labels in (
        cj["metadata"]["labels"],
        cj["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"],
        pvc["metadata"]["labels"],
    ):
        assert naming.LABEL_CLUSTER not in labels  # the reconciler lists member Pods/PVCs by it
        assert not selector.items() <= labels.items()  # Services and the PDB select member Pods by these
        assert labels[naming.LABEL_AUDIT] == "scm"


def test_suspend_is_in_the_content_hash_and_follows_degraded_and_paused() -> None:
    spec, _ = parse_spec({"audit": {"enabled": True}})
    a = audit_builders.build_audit_cronjob(REF, spec, suspend=False)
    b = audit_builders.build_audit_cronjob(REF, spec, suspend=True)
    h = naming.ANN_CONTENT_HASH
    assert a["metadata"]["annotations"][h] != b["metadata"]["annotations"][h]
    assert builders.content_hash(a) == a["metadata"]["annotations"][h]
    assert audit_builders.audit_suspended(spec, degraded=False) is False
    assert audit_builders.audit_suspended(spec, degraded=True) is True
    paused, _ = parse_spec({"paused": True, "audit": {"enabled": True}})
    assert audit_builders.audit_suspended(paused, degraded=False) is True
    user, _ = parse_spec({"audit": {"enabled": True, "suspend": True}})
    assert audit_builders.audit_suspended(user, degraded=False) is True


def test_longest_cluster_name_keeps_the_cronjob_name_within_52_characters() -> None:
    name = "c" * naming.MAX_CLUSTER_NAME
    assert naming.check_cluster_name(name) is None
    assert len(naming.audit_cronjob_name(name)) <= 52  # CronJob names: Jobs append an 11-character suffix


def test_the_default_audit_image_is_the_one_built_beside_the_cluster_image() -> None:
    derived = audit_builders.derived_audit_image
    assert derived("localhost/ozone-scm:dev") == "localhost/ozone-scm-audit:dev"
    assert derived("ozone-scm") == "ozone-scm-audit"
    assert derived("registry:5000/ozone/scm:1.2.0") == "registry:5000/ozone/scm-audit:1.2.0"
    assert derived("registry:5000/ozone/scm") == "registry:5000/ozone/scm-audit"
    assert derived("ozone/scm:1@sha256:" + "0" * 64) == "ozone/scm-audit:1"
    assert derived("ozone/scm@sha256:" + "0" * 64) == "ozone/scm-audit"


def test_executors_on_kubernetes_the_audit_pod_is_sparks_driver_and_the_export_is_on_the_report_volume() -> None:
    from ozone_scm_operator import podsecurity

    spec, problems = parse_spec({"image": "ozone-scm:1.2", "imagePullSecrets": [{"name": "regcred"}], "audit": {
        "enabled": True, "master": "k8s://https://kubernetes.default.svc",
        "executors": {"instances": 3, "cores": 2, "memory": "768m", "cpuRequest": "250m"}}})
    assert problems == [] and spec.audit.on_kubernetes
    ps = pod_spec(audit_builders.build_audit_cronjob(REF, spec, suspend=False))
    assert ps["serviceAccountName"] == "ozone-scm-audit" and ps["automountServiceAccountToken"] is True
    (export,) = ps["initContainers"]
    (audit,) = ps["containers"]
    shared = "/audit/reports/.scratch/export"  # hidden from the report directory's own check
    assert export["command"][-2:] == ["--out", shared]
    assert {m["mountPath"] for m in export["volumeMounts"]} >= {"/audit/reports"}
    cmd = audit["command"]
    assert cmd[cmd.index("--input") + 1] == shared and cmd[cmd.index("--master") + 1] == spec.audit.master
    confs = dict(c.split("=", 1) for c in (cmd[i + 1] for i, a in enumerate(cmd) if a == "--conf"))
    assert confs["spark.executor.instances"] == "3" and confs["spark.executor.cores"] == "2"
    assert confs["spark.executor.memory"] == "768m" and confs["spark.kubernetes.executor.request.cores"] == "250m"
    assert confs["spark.kubernetes.container.image"] == "ozone-scm-audit:1.2"
    assert confs["spark.driver.host"] == "scm-audit-driver.$(POD_NAMESPACE).svc"
    # executors dial spark.driver.host (the Service), not the bind address 0.0.0.0 (Spark 4.1+'s default)
    assert confs["spark.kubernetes.executor.useDriverPodIP"] == "false"
    assert confs["spark.kubernetes.driver.pod.name"] == "$(POD_NAME)"
    assert confs["spark.kubernetes.namespace"] == "$(POD_NAMESPACE)"
    assert {e["name"] for e in audit["env"]} >= {"POD_NAME", "POD_NAMESPACE"}  # what $(...) expands from
    # the executors: restricted, the report volume at the same path, on the driver's node (ReadWriteOnce)
    template = json.loads(cmd[cmd.index("--executor-pod-template") + 1])
    assert template == audit_builders.build_executor_pod_template(REF, spec)
    tspec = template["spec"]
    assert podsecurity.check(tspec, "restricted") == []
    (ex,) = tspec["containers"]
    assert ex["command"] == ["python", "-m", "scm_audit.executor"]
    assert {m["mountPath"]: m["name"] for m in ex["volumeMounts"]}["/audit/reports"] == "reports"
    assert {v["name"]: v for v in tspec["volumes"]}["reports"]["persistentVolumeClaim"]["claimName"] == "scm-audit-reports"
    (term,) = tspec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["labelSelector"]["matchLabels"] == naming.audit_labels("scm")
    assert tspec["imagePullSecrets"] == [{"name": "regcred"}] and tspec["automountServiceAccountToken"] is False
    # the driver Service selects the audit Pods and never an executor
    svc = audit_builders.build_audit_driver_service(REF)
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["selector"] == naming.audit_labels("scm")
    assert {p["port"] for p in svc["spec"]["ports"]} == {int(confs["spark.driver.port"]),
                                                        int(confs["spark.driver.blockManager.port"])}
    labels = template["metadata"]["labels"]
    assert not all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())


def test_local_mode_keeps_its_pod_as_it_was_and_bad_executor_fields_are_named() -> None:
    spec, _ = parse_spec({"audit": {"enabled": True}})
    ps = pod_spec(audit_builders.build_audit_cronjob(REF, spec, suspend=False))
    assert ps["automountServiceAccountToken"] is False and "serviceAccountName" not in ps
    assert "--executor-pod-template" not in ps["containers"][0]["command"]
    _, problems = parse_spec({"audit": {"executors": {"memory": "1GB", "instances": 0, "cpuRequest": "lots"},
                                        "serviceAccountName": "Not_A_Name"}})
    fields = {p.field for p in problems}
    assert fields == {"audit.executors.memory", "audit.executors.instances", "audit.executors.cpuRequest",
                      "audit.serviceAccountName"}, problems
