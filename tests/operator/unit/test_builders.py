"""Builders: the bodies of the objects the operator creates, checked field by field."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from ozone_scm_operator import builders, naming
from ozone_scm_operator.builders import ClusterRef
from ozone_scm_operator.spec import parse_spec

REF = ClusterRef(name="scm", namespace="ozone", uid="u-1", cluster_domain="cluster.local")


def site(cm: dict) -> dict[str, str]:  # type: ignore[type-arg]
    root = ET.fromstring(cm["data"]["ozone-site.xml"])
    return {p.findtext("name"): p.findtext("value") for p in root.iter("property")}  # type: ignore[misc]


def test_configmap_has_the_ha_layout_and_user_overrides() -> None:
    spec, _ = parse_spec({"ozoneSite": {"hdds.scm.safemode.min.datanode": "3", "x.y": "a<b&c"}})
    cm = builders.build_configmap(REF, spec, ["scm-0", "scm-1"], "scm-0")
    props = site(cm)
    assert props["ozone.scm.service.ids"] == "scm"
    assert props["ozone.scm.nodes.scm"] == "scm-0,scm-1"
    assert props["ozone.scm.address.scm.scm-1"] == "scm-1.scm-headless.ozone.svc.cluster.local"
    assert props["ozone.scm.primordial.node.id"] == "scm-0"
    assert props["ozone.metadata.dirs"] == "/data/metadata" and props["ozone.security.enabled"] == "false"
    assert props["hdds.scm.safemode.min.datanode"] == "3" and props["x.y"] == "a<b&c"
    assert "ozone.scm.node.id" not in props  # per Pod, from the environment
    assert cm["metadata"]["ownerReferences"][0] == {
        "apiVersion": "ozone-scm.io/v1alpha1", "kind": "OzoneSCMCluster", "name": "scm", "uid": "u-1",
        "controller": True, "blockOwnerDeletion": True,
    }


def test_content_hash_changes_with_content_only() -> None:
    spec, _ = parse_spec({})
    a = builders.build_configmap(REF, spec, ["scm-0"], "scm-0")
    b = builders.build_configmap(REF, spec, ["scm-0"], "scm-0")
    c = builders.build_configmap(REF, spec, ["scm-0", "scm-1"], "scm-0")
    h = naming.ANN_CONTENT_HASH
    assert a["metadata"]["annotations"][h] == b["metadata"]["annotations"][h] != c["metadata"]["annotations"][h]
    assert builders.content_hash(a) == a["metadata"]["annotations"][h]


def test_headless_service_publishes_not_ready_addresses() -> None:
    svc = builders.build_headless_service(REF)
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert {p["port"] for p in svc["spec"]["ports"]} == {
        9860, 9861, 9863, 9961, 19860, 19861, 19863, 19961, 9876, 9894, 9895}
    assert svc["spec"]["selector"] == naming.selector_labels("scm")


def test_the_configmap_puts_hadoop_rpc_on_ozones_keys_and_grpc_on_ours_as_the_scm_reads_them() -> None:
    """The ports the operator exposes are the ones the SCM binds, read through the SCM's own endpoint lookups."""
    from scm_server.server import endpoints

    spec, problems = parse_spec({"ozoneSite": {"ozone.scm.client.hadoop-rpc.port": "19999"}})
    assert [p.field for p in problems] == ["ozoneSite"] and "ozone.scm.client.hadoop-rpc.port" in problems[0].message
    props = site(builders.build_configmap(REF, spec, ["scm-0", "scm-1"], "scm-0"))
    assert not any(".hadoop-rpc." in k for k in props)
    P = endpoints.Protocol
    expected = {
        P.CLIENT_HADOOP: "client-hadoop", P.DATANODE_HADOOP: "datanode-hadoop", P.BLOCK_HADOOP: "block-hadoop",
        P.SECURITY_HADOOP: "security-hadoop", P.CLIENT: "client-grpc", P.DATANODE: "datanode-grpc",
        P.BLOCK: "block-grpc", P.SECURITY: "security-grpc",
    }
    assert set(expected) == set(P)
    for protocol, name in expected.items():
        addresses = endpoints.protocol_addresses(props.get, protocol)
        assert {a.rsplit(":", 1)[1] for a in addresses} == {str(naming.PORTS[name])}, protocol
        assert naming.PORTS[name] == protocol.default_port  # the SCM's defaults, so a Pod without the keys agrees
    assert [props["ozone.scm.client.port"], props["ozone.scm.client.grpc.port"]] == ["9860", "19860"]


def test_client_service_type_and_annotations() -> None:
    spec, _ = parse_spec({"service": {"type": "LoadBalancer", "annotations": {"a": "b"}, "labels": {"team": "x"}}})
    svc = builders.build_client_service(REF, spec)
    assert svc["spec"]["type"] == "LoadBalancer" and svc["metadata"]["annotations"]["a"] == "b"
    assert svc["metadata"]["labels"]["team"] == "x" and "publishNotReadyAddresses" not in svc["spec"]
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {
        "client-hadoop": 9860, "block-hadoop": 9863, "datanode-hadoop": 9861, "security-hadoop": 9961,
        "client-grpc": 19860, "block-grpc": 19863, "datanode-grpc": 19861, "security-grpc": 19961, "http": 9876}
    assert all(len(p["name"]) <= 15 for p in svc["spec"]["ports"])  # IANA service names, as Kubernetes wants


def test_pvc() -> None:
    spec, _ = parse_spec({"storage": {"size": "5Gi", "storageClassName": "fast"}})
    pvc = builders.build_pvc(REF, spec, "scm-3")
    assert pvc["metadata"]["name"] == "scm-3-data"
    assert pvc["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}},
                           "storageClassName": "fast"}
    assert pvc["metadata"]["labels"][naming.LABEL_MEMBER] == "scm-3"


@pytest.mark.parametrize("mode", ["init", "bootstrap"])
def test_member_pod(mode: str) -> None:
    spec, _ = parse_spec({"image": "img:1", "resources": {"requests": {"cpu": "1"}}})
    pod = builders.build_pod(REF, spec, "scm-2", mode)
    ps = pod["spec"]
    assert ps["hostname"] == "scm-2" and ps["subdomain"] == "scm-headless"
    (init,) = ps["initContainers"]
    extra = ["--termination-log", "/dev/termination-log"] if mode == "bootstrap" else []
    assert init["command"] == ["ozone-scm", "scm", f"--{mode}", *extra] and init["image"] == "img:1"
    (scm,) = ps["containers"]
    assert scm["command"] == ["ozone-scm", "scm"]
    env = {e["name"]: e.get("value") for e in scm["env"]}
    assert env["OZONE-SITE.XML_ozone.scm.node.id"] == "scm-2" and env["OZONE_CONF_DIR"] == "/etc/ozone"
    assert scm["readinessProbe"]["httpGet"] == {"path": "/ready?member=true", "port": "http"}
    assert scm["livenessProbe"]["httpGet"]["path"] == "/health"
    assert {p["containerPort"] for p in scm["ports"]} == set(naming.PORTS.values())
    vols = {v["name"]: v for v in ps["volumes"]}
    assert vols["data"]["persistentVolumeClaim"]["claimName"] == "scm-2-data"
    assert vols["config"]["configMap"]["name"] == "scm-config" and "tls" not in vols
    assert ps["securityContext"]["runAsNonRoot"] is True and ps["securityContext"]["runAsUser"] == 1000
    assert pod["metadata"]["annotations"][naming.ANN_INIT_MODE] == mode
    assert pod["metadata"]["annotations"][naming.ANN_REVISION] == builders.pod_revision(spec)
    assert scm["resources"] == {"requests": {"cpu": "1"}}
    assert ps["affinity"]["podAntiAffinity"]  # spread by default


def test_secure_pod_mounts_its_certificate_secret() -> None:
    spec, _ = parse_spec({"security": {"enabled": True}})
    pod = builders.build_pod(REF, spec, "scm-0", "bootstrap")
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert vols["tls"]["secret"]["secretName"] == "scm-0-tls"
    props = site(builders.build_configmap(REF, spec, ["scm-0"], "scm-0"))
    assert props["ozone.security.enabled"] == "true"
    assert props["hdds.x509.subca.certificate.file"] == "/var/run/ozone-scm/tls/tls.crt"


def test_revision_follows_user_settings_not_membership() -> None:
    base, _ = parse_spec({"replicas": 3})
    assert builders.pod_revision(base) == builders.pod_revision(parse_spec({"replicas": 5, "paused": True})[0])
    for change in ({"image": "x:2"}, {"ozoneSite": {"a": "b"}}, {"resources": {"limits": {"memory": "1Gi"}}},
                   {"scheduling": {"nodeSelector": {"a": "b"}}}, {"podMetadata": {"labels": {"a": "b"}}}):
        assert builders.pod_revision(parse_spec(change)[0]) != builders.pod_revision(base), change


def test_scheduling_passthrough() -> None:
    spec, _ = parse_spec({"scheduling": {"nodeSelector": {"n": "1"}, "tolerations": [{"key": "k"}],
                                         "affinity": {"nodeAffinity": {}}, "priorityClassName": "high",
                                         "topologySpreadConstraints": [{"maxSkew": 1}]},
                          "imagePullSecrets": [{"name": "reg"}]})
    ps = builders.build_pod(REF, spec, "scm-0", "bootstrap")["spec"]
    assert ps["nodeSelector"] == {"n": "1"} and ps["tolerations"] == [{"key": "k"}]
    assert ps["affinity"] == {"nodeAffinity": {}} and ps["priorityClassName"] == "high"
    assert ps["topologySpreadConstraints"] == [{"maxSkew": 1}] and ps["imagePullSecrets"] == [{"name": "reg"}]


def test_pdb() -> None:
    pdb = builders.build_pdb(REF, 1)
    assert pdb["apiVersion"] == "policy/v1" and pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == naming.selector_labels("scm")


def test_names() -> None:
    assert naming.member_index("scm", "scm-12") == 12 and naming.member_index("scm", "scm-x") is None
    assert naming.member_index("scm", "other-1") is None
    assert naming.check_cluster_name("scm") is None
    assert "DNS label" in (naming.check_cluster_name("Bad_Name") or "")
    assert "at most 45" in (naming.check_cluster_name("a" * 46) or "")


KERBEROS_SPEC = {"security": {"enabled": True, "kerberos": {
    "keytabSecret": "scm-keytab", "keytabKey": "scm.kt", "principal": "scm/_HOST@EXAMPLE.COM",
    "krb5ConfigMap": "realm-krb5"}}}


def test_kerberos_renders_ozones_keys_and_mounts_the_keytab_read_only_0400() -> None:
    spec, problems = parse_spec(KERBEROS_SPEC)
    assert problems == []
    props = site(builders.build_configmap(REF, spec, ["scm-0"], "scm-0"))
    assert props["hadoop.security.authentication"] == "kerberos"
    assert props["hdds.scm.kerberos.principal"] == "scm/_HOST@EXAMPLE.COM"
    assert props["hdds.scm.kerberos.keytab.file"] == f"{naming.KEYTAB_DIR}/scm.kt"
    pod = builders.build_pod(REF, spec, "scm-0", builders.INIT_MODE_BOOTSTRAP, revision="r")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["keytab"]["secret"] == {"secretName": "scm-keytab", "defaultMode": 0o400,
                                           "items": [{"key": "scm.kt", "path": "scm.kt"}]}
    assert volumes["krb5"]["configMap"] == {"name": "realm-krb5", "items": [{"key": "krb5.conf", "path": "krb5.conf"}]}
    for container in [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]:
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["keytab"] == {"name": "keytab", "mountPath": naming.KEYTAB_DIR, "readOnly": True}
        assert mounts["krb5"] == {"name": "krb5", "mountPath": naming.KRB5_DIR, "readOnly": True}
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["KRB5_CONFIG"] == f"{naming.KRB5_DIR}/krb5.conf"
        assert env["KRB5RCACHEDIR"] == builders.TMP_DIR  # the root filesystem is read-only


def test_without_kerberos_nothing_of_it_is_rendered_and_a_change_rolls_the_members() -> None:
    plain, _ = parse_spec({"security": {"enabled": True}})
    props = site(builders.build_configmap(REF, plain, ["scm-0"], "scm-0"))
    assert not any(k.startswith("hdds.scm.kerberos.") or k == "hadoop.security.authentication" for k in props)
    pod = builders.build_pod(REF, plain, "scm-0", builders.INIT_MODE_BOOTSTRAP, revision="r")
    assert not {"keytab", "krb5"} & {v["name"] for v in pod["spec"]["volumes"]}
    assert "KRB5_CONFIG" not in {e["name"] for c in pod["spec"]["containers"] for e in c["env"]}
    kerberized, _ = parse_spec(KERBEROS_SPEC)
    other_principal, _ = parse_spec({"security": {"enabled": True, "kerberos": {
        **KERBEROS_SPEC["security"]["kerberos"], "principal": "ozone-scm/_HOST@EXAMPLE.COM"}}})  # type: ignore[dict-item]
    revisions = {builders.pod_revision(s) for s in (plain, kerberized, other_principal)}
    assert len(revisions) == 3
    # no ConfigMap named: the image's /etc/krb5.conf, no KRB5_CONFIG
    no_conf, _ = parse_spec({"security": {"kerberos": {"keytabSecret": "k", "principal": "scm/_HOST@R"}}})
    pod = builders.build_pod(REF, no_conf, "scm-0", builders.INIT_MODE_BOOTSTRAP, revision="r")
    assert "krb5" not in {v["name"] for v in pod["spec"]["volumes"]}
    assert "KRB5_CONFIG" not in {e["name"] for c in pod["spec"]["containers"] for e in c["env"]}
