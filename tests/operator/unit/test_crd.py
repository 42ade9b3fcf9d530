"""The OzoneSCMCluster CRD as an API server applies it (structural schema, defaults, pruning, CEL; the emulator's
``crdschema``), and the contract with the operator: every example validates, bad input gets the CRD's messages, and
no status field the operator writes is pruned."""

from __future__ import annotations

import copy
import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from ozone_scm_operator.model import (
    ClusterStatus,
    Condition,
    MemberStatus,
    Operation,
    SecurityStatus,
)
from ozone_scm_operator.spec import parse_spec
from tests.e2e.local.crdschema import CRDVersion, SchemaInvalid, check_crd, crd_versions

ROOT = Path(__file__).resolve().parents[3]
CRD = yaml.safe_load((ROOT / "crds" / "ozonescmclusters.yaml").read_text())
T = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


@pytest.fixture(scope="module")
def version() -> CRDVersion:
    (v,) = crd_versions(CRD)
    return v


def resource(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "ozone-scm.io/v1alpha1", "kind": "OzoneSCMCluster",
            "metadata": {"name": "scm", "namespace": "ns"}, "spec": spec}


def test_the_crd_is_structural_and_every_rule_is_checkable(version: CRDVersion) -> None:
    assert check_crd(CRD) == []
    assert version.unsupported == []  # every CEL rule can be evaluated here (none silently unchecked)
    names = CRD["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"], CRD["spec"]["group"]) == (
        "OzoneSCMCluster", "ozonescmclusters", ["oscm"], "ozone-scm.io")
    assert [c["name"] for c in version.printer_columns or []][:5] == ["Ready", "Members", "Leader", "Phase", "Age"]


@pytest.mark.parametrize("path", sorted((ROOT / "crds" / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_examples_validate_and_lose_nothing(version: CRDVersion, path: Path) -> None:
    obj = yaml.safe_load(path.read_text())
    admitted, pruned = version.admit(obj, None, part="main")
    assert pruned == []
    assert admitted["spec"]["membership"]["replaceAfter"] == obj["spec"].get("membership", {}).get("replaceAfter", "10m")


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"replicas": 2}, "replicas must be 1, 3 or 5"),
        ({"replicas": 4}, "replicas must be 1, 3 or 5"),
        ({"replicas": 7}, "spec.replicas"),
        ({"security": {"caMode": "vault"}}, "spec.security.caMode"),
        ({"security": {"renewBefore": "800h"}}, "renewBefore must be shorter than security.certificateDuration"),
        ({"storage": {"size": "ten gigs"}}, "spec.storage.size"),
        ({"membership": {"replaceAfter": "10 minutes"}}, "spec.membership.replaceAfter"),
        ({"audit": {"master": "yarn"}}, "spec.audit.master"),
        ({"service": {"type": "ExternalName"}}, "spec.service.type"),
        ({"backup": {"volume": {"size": "1Gi"}, "s3": {"endpoint": "http://127.0.0.1:9000", "bucket": "bkt",
                                                      "prefix": "scm", "credentialsSecret": "k"}}},
         "spec.backup takes one target: volume (a PersistentVolumeClaim) or s3 (object storage), not both"),
        ({"backup": {"s3": {"endpoint": "http://127.0.0.1:9000", "bucket": "bkt", "prefix": "scm"}}},
         "credentialsSecret"),
        ({"backup": {"s3": {"endpoint": "s3.example.test", "bucket": "bkt", "prefix": "scm",
                            "credentialsSecret": "k"}}}, "spec.backup.s3.endpoint"),
        ({"backup": {"s3": {"endpoint": "http://h:1", "bucket": "Bad_Bucket", "prefix": "scm",
                            "credentialsSecret": "k"}}}, "spec.backup.s3.bucket"),
    ],
)
def test_bad_specs_are_refused_with_a_message(version: CRDVersion, spec: dict[str, Any], words: str) -> None:
    with pytest.raises(SchemaInvalid) as exc:
        version.admit(resource(**spec), None, part="main")
    assert words in str(exc.value)


def test_an_s3_target_is_admitted_whole_and_read_the_same_by_the_operator(version: CRDVersion) -> None:
    s3 = {"endpoint": "https://s3.example.test:9000", "bucket": "bkt", "prefix": "ozone/scm/",
          "credentialsSecret": "keys", "caSecret": "ca"}
    admitted, pruned = version.admit(resource(backup={"s3": s3, "schedule": "0 3 * * *"}), None, part="main")
    assert pruned == [] and admitted["spec"]["backup"]["s3"] == s3 and "volume" not in admitted["spec"]["backup"]
    spec, problems = parse_spec(admitted["spec"])
    assert problems == [] and spec.backup.s3 is not None and spec.backup.s3.url("b") == "s3://bkt/ozone/scm/b/"


def test_kerberos_is_admitted_with_its_default_key_read_the_same_and_changeable(version: CRDVersion) -> None:
    kerberos = {"keytabSecret": "scm-keytab", "principal": "scm/_HOST@EXAMPLE.COM", "krb5ConfigMap": "krb5"}
    admitted, pruned = version.admit(resource(security={"enabled": True, "kerberos": kerberos}), None, part="main")
    assert pruned == [] and admitted["spec"]["security"]["kerberos"] == {**kerberos, "keytabKey": "scm.keytab"}
    spec, problems = parse_spec(admitted["spec"])
    assert problems == [] and spec.security.kerberos is not None and spec.security.kerberos.krb5_config_map == "krb5"
    # not immutable: a new principal (or keytab Secret) rolls the members
    changed = resource(security={"enabled": True, "kerberos": {**kerberos, "principal": "ozone/_HOST@EXAMPLE.COM"}})
    version.admit(changed, admitted, part="main")


@pytest.mark.parametrize(
    ("kerberos", "words"),
    [
        ({"principal": "scm/_HOST@EXAMPLE.COM"}, "keytabSecret"),
        ({"keytabSecret": "k"}, "principal"),
        ({"keytabSecret": "k", "principal": "scm/_HOST"}, "spec.security.kerberos.principal"),
        ({"keytabSecret": "k", "principal": "scm@R", "keytabKey": "a/b"}, "spec.security.kerberos.keytabKey"),
    ],
)
def test_bad_kerberos_is_refused_by_the_schema(version: CRDVersion, kerberos: dict[str, Any], words: str) -> None:
    with pytest.raises(SchemaInvalid) as exc:
        version.admit(resource(security={"kerberos": kerberos}), None, part="main")
    assert words in str(exc.value)


@pytest.mark.parametrize(
    ("before", "after", "words"),
    [
        ({"storage": {"storageClassName": "fast"}}, {"storage": {"storageClassName": "slow"}},
         "storage.storageClassName is immutable"),
        ({}, {"storage": {"storageClassName": "slow"}}, "storage.storageClassName is immutable"),
        ({"storage": {"size": "6Gi"}}, {"storage": {"size": "5Gi"}}, "storage.size cannot shrink"),
        ({"storage": {"size": "1Gi"}}, {"storage": {"size": "1000Mi"}}, "storage.size cannot shrink"),
        ({"storage": {"adoptClusterID": "CID-a"}}, {"storage": {"adoptClusterID": "CID-b"}},
         "storage.adoptClusterID is immutable"),
        ({"security": {"enabled": False}}, {"security": {"enabled": True}}, "security.enabled is immutable"),
        ({"security": {"caMode": "operator"}}, {"security": {"caMode": "scm"}}, "security.caMode is immutable"),
    ],
)
def test_immutable_fields(version: CRDVersion, before: dict[str, Any], after: dict[str, Any], words: str) -> None:
    old, _ = version.admit(resource(**before), None, part="main")
    new = copy.deepcopy(old)
    for k, v in after.items():
        new["spec"][k] = {**new["spec"][k], **v}
    with pytest.raises(SchemaInvalid) as exc:
        version.admit(new, old, part="main")
    assert words in str(exc.value)
    # everything else may change: replicas, image, config, membership timings
    ok = copy.deepcopy(old)
    ok["spec"].update(replicas=5, image="ozone-scm:0.2.0", ozoneSite={"a": "b"}, paused=True)
    version.admit(ok, old, part="main")


@pytest.mark.parametrize(("before", "after"), [("5Gi", "6Gi"), ("10Gi", "11G"), ("1Gi", "1Gi"), ("1G", "1Gi")])
def test_storage_size_may_grow(version: CRDVersion, before: str, after: str) -> None:
    old, _ = version.admit(resource(storage={"size": before}), None, part="main")
    new = copy.deepcopy(old)
    new["spec"]["storage"]["size"] = after
    version.admit(new, old, part="main")
    assert version.unsupported == []  # quantity() is checked, not skipped


def _full_status() -> dict[str, Any]:
    """A status with every field the operator can write set."""
    st = ClusterStatus(
        phase="Running", observed_generation=3,
        conditions=(Condition("Ready", "True", "AllMembersReady", "3/3", T, 3),),
        cluster_id="CID-x", primordial_member="scm-0", leader="scm-1", term=7, replicas=3, members_ready="3/3",
        next_member_index=4, revision="abc", immutable_spec={"storageClassName": "fast", "storageSize": "1Gi",
                                                             "securityEnabled": True, "caMode": "operator"},
        members=(MemberStatus("scm-0", 0, "Joined", scm_id="u0", role="LEADER", ready=True, lag=0, cluster_id="CID-x",
                              pod_ip="10.0.0.1", revision="abc", out_of_quorum_since=T, certificate_expiry=T,
                              certificate_serial="1f"),),
        current_operation=Operation("ReplaceMember", "scm-2", T, step="Decommission", step_started_at=T,
                                    replacement="scm-3", reason="VolumeLost", message="m"),
        security=SecurityStatus("scm-root-ca", T, "ab", ("1e",)),
    )
    return st.to_raw()


def test_no_status_field_the_operator_writes_is_pruned(version: CRDVersion) -> None:
    obj, _ = version.admit(resource(), None, part="main")
    obj["status"] = _full_status()
    admitted, pruned = version.admit(obj, None, part="status")
    assert pruned == []
    assert admitted["status"]["members"][0]["outOfQuorumSince"] == "2026-01-01T00:00:00Z"
    assert ClusterStatus.from_raw(admitted["status"]).to_raw() == _full_status()
