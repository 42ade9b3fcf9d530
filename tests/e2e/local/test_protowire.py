"""Decoding of Kubernetes protobuf bodies (what Helm's release storage and ``kubectl create`` send)."""

from __future__ import annotations

import base64

import pytest

from tests.e2e.local import protowire


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(num: int, value: bytes | int | str) -> bytes:
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(num << 3 | 2) + varint(len(data)) + data


def entry(key: str, value: bytes | str) -> bytes:
    return field(1, key) + field(2, value)


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    return protowire.MAGIC + field(1, field(1, api_version) + field(2, kind)) + field(2, raw)


def test_helm_release_secret() -> None:
    meta = field(1, "sh.helm.release.v1.r1.v1") + field(3, "default") + field(11, entry("owner", "helm")) + \
        field(11, entry("status", "deployed")) + field(14, "x/y")
    raw = field(1, meta) + field(2, entry("release", b"\x1f\x8b payload")) + field(3, "helm.sh/release.v1")
    obj = protowire.decode(envelope("v1", "Secret", raw))
    assert obj["apiVersion"] == "v1" and obj["kind"] == "Secret"
    assert obj["metadata"] == {"name": "sh.helm.release.v1.r1.v1", "namespace": "default",
                               "labels": {"owner": "helm", "status": "deployed"}, "finalizers": ["x/y"]}
    assert base64.b64decode(obj["data"]["release"]) == b"\x1f\x8b payload"
    assert obj["type"] == "helm.sh/release.v1"


def test_delete_options_and_namespace() -> None:
    raw = field(1, 0) + field(2, field(1, "uid-1")) + field(4, "Foreground")
    opts = protowire.decode(envelope("meta.k8s.io/v1", "DeleteOptions", raw))
    assert opts == {"gracePeriodSeconds": 0, "preconditions": {"uid": "uid-1"}, "propagationPolicy": "Foreground"}
    ns = protowire.decode(envelope("v1", "Namespace", field(1, field(1, "team"))))
    assert ns == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}


def test_unsupported_kinds_and_garbage_are_refused() -> None:
    with pytest.raises(protowire.UnsupportedProtobuf, match="apps/v1/Deployment"):
        protowire.decode(envelope("apps/v1", "Deployment", b""))
    with pytest.raises(protowire.UnsupportedProtobuf):
        protowire.decode(b"not protobuf")
