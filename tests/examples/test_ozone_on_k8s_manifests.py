"""examples/ozone-on-k8s/ read without a cluster (the node tier, tests/e2e/node/test_ozone_on_k8s.py, runs them):
the Ozone side's ozone-site.xml names the OzoneSCMCluster's members exactly as the operator names them (HA
service id, node ids, each member's host through the headless Service, Ozone's port numbers the members serve), the
settings both sides share agree, the OzoneSCMCluster's spec parses without a problem, every Pod passes Pod Security
``restricted``, and every container runs the Ozone image ``make ozone-image`` builds."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from ozone_scm_operator import naming, podsecurity
from ozone_scm_operator.spec import parse_spec

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "ozone-on-k8s"
NAMESPACE = "ozone"  # the namespace the example's addresses name (its README)
OZONE_VERSION = re.search(r"<ozone.version>(.+)</ozone.version>",
                          (REPO / "interop" / "ozone" / "pom.xml").read_text()).group(1)  # type: ignore[union-attr]


def objects() -> list[dict[str, Any]]:
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        out += [o for o in yaml.safe_load_all(path.read_text()) if o]
    return out


def one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects() if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def ozone_site() -> dict[str, str]:
    root = ET.fromstring(one("ConfigMap", "ozone-config")["data"]["ozone-site.xml"])
    props = {}
    for prop in root.iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        assert name and value is not None and name not in props, f"property {name!r} missing, empty or twice"
        props[name] = value
    return props


def test_the_ozone_side_names_the_members_as_the_operator_does() -> None:
    cluster = one("OzoneSCMCluster")
    name, replicas = cluster["metadata"]["name"], cluster["spec"]["replicas"]
    props = ozone_site()
    svc = naming.service_id(name)
    members = [naming.member_name(name, i) for i in range(replicas)]
    assert props["ozone.scm.service.ids"] == svc and props["ozone.scm.default.service.id"] == svc
    assert props[f"ozone.scm.nodes.{svc}"].split(",") == members
    for m in members:
        # the member's DNS name as the operator writes it into the members' own ozone-site.xml
        assert props[f"ozone.scm.address.{svc}.{m}"] == naming.member_host(m, name, NAMESPACE, "cluster.local")
    for port_name in ("client-hadoop", "datanode-hadoop", "block-hadoop", "security-hadoop"):
        assert props[naming.PORT_KEYS[port_name]] == str(naming.PORTS[port_name]), port_name
    # nothing else points Ozone's processes elsewhere
    stray = [k for k in props if k.startswith(("ozone.scm.address.", "ozone.scm.nodes."))
             and not k.endswith(tuple(f".{x}" for x in [svc, *members]))]
    assert not stray and "ozone.scm.names" not in props, stray


def test_the_om_address_is_the_om_statefulsets_first_pod() -> None:
    om = one("StatefulSet", "ozone-om")
    host, port = ozone_site()["ozone.om.address"].split(":")
    assert host == f"{om['metadata']['name']}-0.{om['spec']['serviceName']}"
    assert one("Service", om["spec"]["serviceName"])["spec"]["clusterIP"] == "None"
    assert int(port) in [p["containerPort"] for p in om["spec"]["template"]["spec"]["containers"][0]["ports"]]


def test_settings_both_sides_hold_agree_and_the_cluster_spec_parses() -> None:
    cluster = one("OzoneSCMCluster")
    spec, problems = parse_spec(cluster["spec"])
    assert not problems, problems
    props = ozone_site()
    shared = set(spec.ozone_site) & set(props)
    assert {"ozone.scm.container.size", "ozone.scm.block.size", "hdds.heartbeat.interval"} <= shared
    assert {k: spec.ozone_site[k] for k in shared} == {k: props[k] for k in shared}
    datanodes = one("StatefulSet", "ozone-datanode")["spec"]["replicas"]
    assert spec.ozone_site["hdds.scm.safemode.min.datanode"] == str(datanodes) == props["ozone.replication"]


@pytest.mark.parametrize("kind,name", [("StatefulSet", "ozone-datanode"), ("StatefulSet", "ozone-om"),
                                       ("Pod", "ozone-client")])
def test_every_pod_is_restricted_and_runs_the_ozone_image(kind: str, name: str) -> None:
    body = one(kind, name)
    spec = podsecurity.pod_spec_of(body)
    assert spec is not None
    assert podsecurity.check(spec, "restricted") == []
    for c in spec["containers"]:
        assert c["image"] == f"localhost/ozone:{OZONE_VERSION}"
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        assert mounts["/etc/ozone"] == "config" and "/tmp" in mounts  # OZONE_CONF_DIR; the JVM's scratch space
        if kind == "StatefulSet":
            assert mounts["/data"] in [t["metadata"]["name"] for t in body["spec"]["volumeClaimTemplates"]]


def test_the_datanodes_are_three_with_a_volume_of_the_default_class_each() -> None:
    dn = one("StatefulSet", "ozone-datanode")
    assert dn["spec"]["replicas"] == 3
    (claim,) = dn["spec"]["volumeClaimTemplates"]
    assert "storageClassName" not in claim["spec"]  # the namespace's default StorageClass
    props = ozone_site()
    assert all(props[k].startswith("/data/") for k in ("hdds.datanode.dir", "ozone.metadata.dirs",
                                                      "hdds.container.ratis.datanode.storage.dir"))
