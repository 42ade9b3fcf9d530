"""Spec parsing: the CRD's defaults, the operator's own validation, and the immutable fields."""

from __future__ import annotations

import copy
import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from ozone_scm_operator.spec import (
    ClusterSpec,
    ImmutableSpec,
    effective_spec,
    format_duration,
    parse_duration,
    parse_spec,
)
from tests.e2e.local import crdschema

ROOT = Path(__file__).resolve().parents[3]
CRD = ROOT / "crds" / "ozonescmclusters.yaml"


def crd_spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    return dict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"])


def apply_defaults(schema: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    """The API server's structural defaulting (the emulator's implementation)."""
    out = copy.deepcopy(value)
    crdschema.apply_defaults(schema, out)
    return out


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"replicas": 5},
        {"security": {"enabled": True}},
        {"storage": {"storageClassName": "fast"}, "audit": {"enabled": True}},
        {"backup": {"schedule": "0 3 * * *", "retention": {"keepLast": 7}}},
    ],
)
def test_operator_defaults_equal_the_crd_defaults(raw: dict[str, Any]) -> None:
    """The operator applies the same defaults the API server would (the emulator and old objects have none)."""
    defaulted = apply_defaults(crd_spec_schema(), raw)
    assert parse_spec(raw) == parse_spec(defaulted)
    spec, problems = parse_spec(defaulted)
    assert problems == []
    assert defaulted["replicas"] == spec.replicas and defaulted["image"] == spec.image


def test_every_crd_spec_field_is_read() -> None:
    """A field in the CRD that the operator ignores is a silent lie: compare the property names."""
    read = {
        "replicas", "image", "imagePullPolicy", "imagePullSecrets", "storage", "security", "ozoneSite", "resources",
        "scheduling", "podMetadata", "service", "podDisruptionBudget", "membership", "audit", "backup", "bootstrap", "paused",
        "podSecurityContext", "containerSecurityContext",
    }
    assert set(crd_spec_schema()["properties"]) == read


def test_full_example_parses_without_problems() -> None:
    doc = yaml.safe_load((ROOT / "crds" / "examples" / "scm-full.yaml").read_text())
    spec, problems = parse_spec(doc["spec"])
    assert problems == []
    assert spec.replicas == 5 and spec.storage.storage_class_name == "fast-ssd" and spec.security.operator_ca
    assert spec.membership.replace_after == datetime.timedelta(minutes=10)
    assert spec.scheduling.tolerations[0]["key"] == "dedicated" and spec.service.type == "LoadBalancer"
    assert spec.ozone_site["hdds.scm.safemode.min.datanode"] == "3"


@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        ({"replicas": 2}, "replicas", "must be 1, 3 or 5, got 2"),
        ({"replicas": "three"}, "replicas", "must be an integer"),
        ({"ozoneSite": {"ozone.scm.nodes.scm": "a,b"}}, "ozoneSite", "may not set ozone.scm.nodes.scm"),
        ({"ozoneSite": {"hdds.x509.subca.certificate.file": "x"}}, "ozoneSite", "the operator owns these keys"),
        ({"ozoneSite": {"a": 3}}, "ozoneSite", 'quote numbers and booleans: "3"'),
        ({"membership": {"replaceAfter": "ten minutes"}}, "membership.replaceAfter", "is not a duration"),
        ({"security": {"caMode": "vault"}}, "security.caMode", "must be one of operator, scm"),
        ({"security": {"renewBefore": "800h"}}, "security.renewBefore", "must be shorter than certificateDuration"),
        ({"storage": {"size": "ten"}}, "storage.size", "not a Kubernetes quantity"),
        ({"audit": {"master": "yarn"}}, "audit.master", "use local[*] or k8s://"),
        ({"service": {"type": "ExternalName"}}, "service.type", "must be one of ClusterIP"),
        ({"paused": "yes"}, "paused", "must be true or false"),
        ({"backup": {"schedule": "0 3 * *"}}, "backup.schedule", "needs five fields"),
        ({"backup": {"schedule": "0 25 * * *"}}, "backup.schedule", "not a valid cron schedule"),
        ({"backup": {"schedule": "0 3 30 2 *"}}, "backup.schedule", "never fires"),  # else CroniterBadDateError
        ({"backup": {"schedule": "0 3 31 4,6 *"}}, "backup.schedule", "never fires"),  # every pass of the planner
        ({"backup": {"retention": {"keepLast": 0}}}, "backup.retention.keepLast", "must be at least 1"),
        ({"backup": {"retention": {"maxAge": "a week"}}}, "backup.retention.maxAge", "is not a duration"),
        ({"backup": {"volume": {"size": "big"}}}, "backup.volume.size", "not a Kubernetes quantity"),
        ({"bootstrap": {"fromBackup": "/etc/passwd"}}, "bootstrap.fromBackup", "neither the name of an OzoneSCMBackup"),
        ({"bootstrap": {"fromBackup": "/backups/../x"}}, "bootstrap.fromBackup", "neither the name"),
        ("not a map", "spec", "must be an object"),
    ],
)
def test_bad_input_gets_a_one_line_problem_naming_the_field(raw: Any, field: str, words: str) -> None:
    spec, problems = parse_spec(raw)
    assert len(problems) == 1, problems
    assert problems[0].field == field and words in problems[0].message
    assert "\n" not in str(problems[0])
    assert isinstance(spec, ClusterSpec)


def test_owned_keys_are_dropped_but_the_rest_kept() -> None:
    spec, problems = parse_spec({"ozoneSite": {"ozone.scm.node.id": "x", "hdds.scm.safemode.min.datanode": "1"}})
    assert spec.ozone_site == {"hdds.scm.safemode.min.datanode": "1"} and len(problems) == 1


def test_durations() -> None:
    assert parse_duration("1h30m") == datetime.timedelta(minutes=90)
    assert parse_duration("500ms") == datetime.timedelta(milliseconds=500)
    assert parse_duration("0s") == datetime.timedelta(0)
    for bad in ("", "10", "1d", "m5", "5m 3s"):
        with pytest.raises(ValueError, match="is not a duration"):
            parse_duration(bad)
    assert format_duration(datetime.timedelta(hours=168)) == "168h"
    assert format_duration(datetime.timedelta(minutes=5)) == "5m"


def test_effective_spec_pins_immutable_fields_and_keeps_the_accepted_replicas() -> None:
    created, _ = parse_spec({"storage": {"storageClassName": "fast", "size": "5Gi"}})
    recorded = ImmutableSpec.of(created)
    assert ImmutableSpec.from_status(recorded.to_status()) == recorded
    changed, problems = parse_spec(
        {"replicas": 4, "storage": {"storageClassName": "slow", "size": "4Gi"}, "security": {"enabled": True, "caMode": "scm"}}
    )
    eff, all_problems = effective_spec(changed, problems, recorded, accepted_replicas=3)
    assert eff.storage.storage_class_name == "fast" and eff.storage.size == "5Gi"
    assert not eff.security.enabled and eff.security.ca_mode == "operator"
    assert eff.replicas == 3
    fields = sorted(p.field for p in all_problems)
    assert fields == ["replicas", "security.caMode", "security.enabled", "storage.size", "storage.storageClassName"]
    # growing is accepted (the volumes are expanded); shrinking is refused above
    grown, _ = effective_spec(parse_spec({"storage": {"storageClassName": "fast", "size": "9Gi"}})[0], [], recorded, 3)
    assert grown.storage.size == "9Gi"
    # never accepted: stays invalid, so the planner starts nothing
    eff2, _ = effective_spec(changed, problems, None, accepted_replicas=None)
    assert eff2.replicas == 4


KERBEROS = {"keytabSecret": "scm-keytab", "principal": "scm/_HOST@EXAMPLE.COM"}


def test_kerberos_is_read_with_its_defaults_as_the_crd_gives_them() -> None:
    raw = {"security": {"enabled": True, "kerberos": dict(KERBEROS)}}
    spec, problems = parse_spec(raw)
    assert problems == []
    kerberos = spec.security.kerberos
    assert kerberos is not None and kerberos.keytab_secret == "scm-keytab" and kerberos.keytab_key == "scm.keytab"
    assert kerberos.principal == "scm/_HOST@EXAMPLE.COM" and kerberos.realm == "EXAMPLE.COM"
    assert kerberos.krb5_config_map is None
    assert parse_spec(apply_defaults(crd_spec_schema(), raw)) == (spec, [])
    assert parse_spec({})[0].security.kerberos is None


@pytest.mark.parametrize(
    ("kerberos", "field", "words"),
    [
        ({"principal": "scm/_HOST@EXAMPLE.COM"}, "security.kerberos.keytabSecret", "must name the Secret"),
        ({"keytabSecret": "k"}, "security.kerberos.principal", "e.g. scm/_HOST@EXAMPLE.COM"),
        ({**KERBEROS, "principal": "scm/_HOST"}, "security.kerberos.principal", "is not service/host@REALM"),
        ({**KERBEROS, "keytabKey": "keys/scm.keytab"}, "security.kerberos.keytabKey", "usable as a file name"),
        ({**KERBEROS, "keytabSecret": 3}, "security.kerberos.keytabSecret", "must be a string"),
    ],
)
def test_bad_kerberos_input_is_named_and_kerberos_left_off(kerberos: dict[str, Any], field: str, words: str) -> None:
    spec, problems = parse_spec({"security": {"kerberos": kerberos}})
    assert [p.field for p in problems if p.field == field] == [field], problems
    assert any(words in p.message and "\n" not in str(p) for p in problems), problems
    if field != "security.kerberos.keytabKey":
        assert spec.security.kerberos is None
    else:  # a bad key name falls back to the default key; the rest applies
        assert spec.security.kerberos is not None and spec.security.kerberos.keytab_key == "scm.keytab"


def test_kerberos_keys_are_owned_while_kerberos_is_set() -> None:
    site = {"hdds.scm.kerberos.principal": "x/_HOST@R", "hadoop.rpc.protection": "privacy"}
    spec, problems = parse_spec({"security": {"kerberos": dict(KERBEROS)}, "ozoneSite": site})
    assert [p.field for p in problems] == ["ozoneSite"] and "hdds.scm.kerberos.principal" in problems[0].message
    assert spec.ozone_site == {"hadoop.rpc.protection": "privacy"}
    # without spec.security.kerberos they are the user's to set
    spec, problems = parse_spec({"ozoneSite": site})
    assert problems == [] and spec.ozone_site == site
