"""Unit tests of what a Pod spec means to the kubelet fixture (``podspec.py``): commands, environment, volume files,
cluster names and phases."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.e2e.local import podspec
from tests.e2e.local.podspec import ConfigError, ImageSpec

POD: dict[str, Any] = {
    "metadata": {"name": "scm-0", "namespace": "ozone", "uid": "u-1", "labels": {"app": "scm", "idx": "0"},
                 "annotations": {"a": "b"}},
    "spec": {"hostname": "scm-0", "subdomain": "scm-headless", "nodeName": "n1", "serviceAccountName": "sa"},
    "status": {"podIP": "198.18.1.2", "hostIP": "198.18.1.1", "podIPs": [{"ip": "198.18.1.2"}],
               "conditions": [{"type": "Ready", "status": "True"}]},
}
CMS = {"conf": {"data": {"k": "v", "site": "<x/>"}, "binaryData": {"bin": base64.b64encode(b"\x00\x01").decode()}}}
SECRETS = {"tls": {"data": {"key": base64.b64encode(b"private").decode()}}}
IMAGE = ImageSpec(entrypoint=("ozone-scm",), cmd=("scm",), env={"PATH": "/opt/bin", "LANG": "C"})


def test_expansion_rules() -> None:
    env = {"A": "1", "B": "two"}
    assert podspec.expand("$(A)-$(B)", env) == "1-two"
    assert podspec.expand("$(MISSING)", env) == "$(MISSING)"
    assert podspec.expand("$$(A)", env) == "$(A)"
    assert podspec.expand("cost $$5", env) == "cost $5"


def test_command_and_args_override_the_image_like_docker() -> None:
    env = {"ID": "scm-0"}
    assert podspec.container_command({}, IMAGE, env) == ["ozone-scm", "scm"]
    assert podspec.container_command({"args": ["scm", "--init"]}, IMAGE, env) == ["ozone-scm", "scm", "--init"]
    assert podspec.container_command({"command": ["bash", "-c"], "args": ["echo $(ID)"]}, IMAGE, env) == \
        ["bash", "-c", "echo scm-0"]
    assert podspec.container_command({"command": ["true"]}, IMAGE, env) == ["true"]
    with pytest.raises(ConfigError):
        podspec.container_command({}, ImageSpec(), env)


def test_environment_sources_in_order() -> None:
    container = {
        "envFrom": [{"configMapRef": {"name": "conf"}, "prefix": "CM_"}, {"secretRef": {"name": "tls"}}],
        "env": [
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "IDX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['idx']"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "K", "valueFrom": {"configMapKeyRef": {"name": "conf", "key": "k"}}},
            {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "tls", "key": "key"}}},
            {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "x", "optional": True}}},
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {"name": "OZONE-SITE.XML_ozone.scm.nodes", "value": "$(NAME).$(NS)"},
            {"name": "LANG", "value": "en_US.UTF-8"},
        ]}
    env = podspec.container_env(POD, container, IMAGE, CMS, SECRETS, {"HOSTNAME": "scm-0"})
    assert env["PATH"] == "/opt/bin" and env["HOSTNAME"] == "scm-0"
    assert env["CM_k"] == "v" and env["key"] == "private"
    assert (env["NAME"], env["NS"], env["IP"], env["IDX"], env["NODE"]) == ("scm-0", "ozone", "198.18.1.2", "0", "n1")
    assert env["K"] == "v" and env["KEY"] == "private" and "OPT" not in env
    assert env["CPU"] == "1"
    assert env["OZONE-SITE.XML_ozone.scm.nodes"] == "scm-0.ozone"
    assert env["LANG"] == "en_US.UTF-8"  # the spec overrides the image


@pytest.mark.parametrize("var", [
    {"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "x"}}},
    {"name": "X", "valueFrom": {"secretKeyRef": {"name": "tls", "key": "missing"}}},
    {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "conf", "key": "missing"}}},
    {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.unknown"}}},
])
def test_missing_references_are_config_errors(var: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        podspec.container_env(POD, {"env": [var]}, IMAGE, CMS, SECRETS)


def test_volume_files() -> None:
    files = podspec.volume_files(POD, {"name": "c", "configMap": {"name": "conf"}}, CMS, SECRETS)
    assert files is not None and {f.path: f.content for f in files} == {"k": b"v", "site": b"<x/>",
                                                                       "bin": b"\x00\x01"}
    files = podspec.volume_files(POD, {"name": "c", "configMap": {"name": "conf", "items": [
        {"key": "site", "path": "etc/ozone-site.xml", "mode": 0o600}]}}, CMS, SECRETS)
    assert files == [podspec.RenderedFile("etc/ozone-site.xml", b"<x/>", 0o600)]
    files = podspec.volume_files(POD, {"name": "p", "projected": {"sources": [
        {"secret": {"name": "tls"}},
        {"downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}]}}, CMS, SECRETS)
    assert files is not None and {f.path: f.content for f in files} == {"key": b"private", "name": b"scm-0"}
    assert podspec.volume_files(POD, {"name": "d", "emptyDir": {}}, CMS, SECRETS) is None
    with pytest.raises(ConfigError):
        podspec.volume_files(POD, {"name": "s", "secret": {"secretName": "nope"}}, CMS, SECRETS)
    assert podspec.volume_files(POD, {"name": "s", "secret": {"secretName": "nope", "optional": True}}, CMS,
                                SECRETS) == []
    assert podspec.referenced_objects({"spec": {"volumes": [{"name": "x", "configMap": {"name": "conf"}}],
                                                "containers": [{"envFrom": [{"secretRef": {"name": "tls"}}]}]}}) == \
        ({"conf"}, {"tls"})


def _pod(name: str, ip: str, ready: bool, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ozone", "labels": {"app": "scm"}}, "spec": spec,
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_cluster_names_follow_service_rules() -> None:
    pods = [_pod("scm-0", "10.0.0.2", True, hostname="scm-0", subdomain="scm-headless"),
            _pod("scm-1", "10.0.0.3", False, hostname="scm-1", subdomain="scm-headless")]
    headless: dict[str, Any] = {"metadata": {"name": "scm-headless", "namespace": "ozone"},
                "spec": {"clusterIP": "None", "selector": {"app": "scm"}, "publishNotReadyAddresses": True}}
    client = {"metadata": {"name": "scm", "namespace": "ozone"}, "spec": {"selector": {"app": "scm"}}}
    records = podspec.dns_entries(pods, [headless, client])
    names = {(ip, name) for ip, name, _ns in records}
    assert ("10.0.0.2", "scm-0.scm-headless.ozone.svc.cluster.local") in names
    assert ("10.0.0.3", "scm-1.scm-headless.ozone.svc.cluster.local") in names  # published while not ready
    assert ("10.0.0.2", "scm.ozone.svc.cluster.local") in names
    assert ("10.0.0.3", "scm.ozone.svc.cluster.local") not in names  # a normal service: ready endpoints only
    strict = {**headless, "spec": {**headless["spec"], "publishNotReadyAddresses": False}}
    strict_names = {n for _ip, n, _ns in podspec.dns_entries(pods, [strict])}
    assert "scm-1.scm-headless.ozone.svc.cluster.local" not in strict_names
    zone = podspec.dns_zone(pods, [headless, client])
    assert zone["scm-headless.ozone.svc.cluster.local"] == ["10.0.0.2", "10.0.0.3"]
    assert zone["scm-1.scm-headless.ozone.svc.cluster.local"] == ["10.0.0.3"]
    assert zone["scm.ozone.svc.cluster.local"] == ["10.0.0.2"]
    assert zone["10-0-0-3.ozone.pod.cluster.local"] == ["10.0.0.3"]
    hosts = podspec.hosts_file(_pod("scm-0", "10.0.0.2", True, hostname="scm-0", subdomain="scm-headless"))
    assert "10.0.0.2\tscm-0.scm-headless.ozone.svc.cluster.local scm-0\n" in hosts
    assert "scm-1" not in hosts  # other names come from cluster DNS


@pytest.mark.parametrize(("args", "phase"), [
    (("Always", False, False, [{"waiting": {}}], [True], [False]), "Pending"),
    (("Always", True, False, [{"running": {}}], [True], [True]), "Running"),
    (("Always", True, False, [{"waiting": {"reason": "CrashLoopBackOff"}}], [True], [True]), "Running"),
    (("Never", True, False, [{"terminated": {"exitCode": 0}}], [False], [True]), "Succeeded"),
    (("Never", True, False, [{"terminated": {"exitCode": 1}}], [False], [True]), "Failed"),
    (("OnFailure", True, False, [{"terminated": {"exitCode": 0}}], [False], [True]), "Succeeded"),
    (("Never", False, True, [{"waiting": {}}], [False], [False]), "Failed"),
    (("Always", True, False, [{"waiting": {"reason": "ImagePullBackOff"}}], [True], [False]), "Pending"),
])
def test_pod_phase(args: tuple[Any, ...], phase: str) -> None:
    assert podspec.pod_phase(*args) == phase
