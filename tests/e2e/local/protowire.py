"""Decoding of the few Kubernetes protobuf bodies clients send to the emulated API server.

Called by ``apiserver.py`` when a request arrives with ``Content-Type: application/vnd.kubernetes.protobuf``: Helm's
release storage (client-go typed clients) writes its release Secrets that way. Only the kinds clients actually send
as protobuf here are mapped (Secret, ConfigMap, DeleteOptions, and the metadata of Namespace and
ServiceAccount for ``kubectl create``); anything else is refused by the caller with 415 so
the gap is visible. Pure: bytes in, dict out; no I/O.

The envelope is ``b"k8s\\x00"`` + ``runtime.Unknown{typeMeta{apiVersion=1, kind=2}=1, raw=2, contentEncoding=3,
contentType=4}``; ``raw`` holds the object in the field numbering of Kubernetes' ``generated.proto`` files.
"""

from __future__ import annotations

import base64
import datetime
from typing import Any

MAGIC = b"k8s\x00"

Fields = list[tuple[int, int, Any]]  # (field number, wire type, value: int or bytes)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def fields(buf: bytes) -> Fields:
    """The raw (number, wire type, value) triples of one message."""
    out: Fields = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            out.append((num, wire, value))
        elif wire == 2:
            length, pos = _varint(buf, pos)
            out.append((num, wire, buf[pos:pos + length]))
            pos += length
        elif wire == 1:
            out.append((num, wire, buf[pos:pos + 8]))
            pos += 8
        elif wire == 5:
            out.append((num, wire, buf[pos:pos + 4]))
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return out


def _str(v: Any) -> str:
    return bytes(v).decode("utf-8")


def _map(entries: list[bytes], value_bytes: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for entry in entries:
        key, value = "", b""
        for num, _w, v in fields(entry):
            if num == 1:
                key = _str(v)
            elif num == 2:
                value = v
        out[key] = base64.b64encode(value).decode() if value_bytes else _str(value)
    return out


def _time(buf: bytes) -> str:
    seconds = 0
    for num, _w, v in fields(buf):
        if num == 1:
            seconds = v
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _group(buf: bytes) -> dict[int, list[Any]]:
    grouped: dict[int, list[Any]] = {}
    for num, _w, v in fields(buf):
        grouped.setdefault(num, []).append(v)
    return grouped


def object_meta(buf: bytes) -> dict[str, Any]:
    g = _group(buf)
    meta: dict[str, Any] = {}
    for num, key in ((1, "name"), (2, "generateName"), (3, "namespace"), (5, "uid"), (6, "resourceVersion")):
        if g.get(num) and _str(g[num][-1]):
            meta[key] = _str(g[num][-1])
    if g.get(7) and g[7][-1]:
        meta["generation"] = g[7][-1]
    if g.get(8) and g[8][-1]:
        meta["creationTimestamp"] = _time(g[8][-1])
    if g.get(11):
        meta["labels"] = _map(g[11])
    if g.get(12):
        meta["annotations"] = _map(g[12])
    if g.get(13):
        refs = []
        for raw in g[13]:
            r = _group(raw)
            ref: dict[str, Any] = {}
            for num, key in ((5, "apiVersion"), (1, "kind"), (3, "name"), (4, "uid")):
                if r.get(num):
                    ref[key] = _str(r[num][-1])
            for num, key in ((6, "controller"), (7, "blockOwnerDeletion")):
                if r.get(num):
                    ref[key] = bool(r[num][-1])
            refs.append(ref)
        meta["ownerReferences"] = refs
    if g.get(14):
        meta["finalizers"] = [_str(v) for v in g[14]]
    return meta


def _secret(raw: bytes) -> dict[str, Any]:
    g = _group(raw)
    obj: dict[str, Any] = {"metadata": object_meta(g[1][-1]) if g.get(1) else {}}
    if g.get(2):
        obj["data"] = _map(g[2], value_bytes=True)
    if g.get(3):
        obj["type"] = _str(g[3][-1])
    if g.get(4):
        obj["stringData"] = _map(g[4])
    if g.get(5):
        obj["immutable"] = bool(g[5][-1])
    return obj


def _configmap(raw: bytes) -> dict[str, Any]:
    g = _group(raw)
    obj: dict[str, Any] = {"metadata": object_meta(g[1][-1]) if g.get(1) else {}}
    if g.get(2):
        obj["data"] = _map(g[2])
    if g.get(3):
        obj["binaryData"] = _map(g[3], value_bytes=True)
    if g.get(4):
        obj["immutable"] = bool(g[4][-1])
    return obj


def _delete_options(raw: bytes) -> dict[str, Any]:
    g = _group(raw)
    out: dict[str, Any] = {}
    if g.get(1):
        out["gracePeriodSeconds"] = g[1][-1]
    if g.get(2):
        pre = _group(g[2][-1])
        out["preconditions"] = {k: _str(pre[n][-1]) for n, k in ((1, "uid"), (2, "resourceVersion")) if pre.get(n)}
    if g.get(3):
        out["orphanDependents"] = bool(g[3][-1])
    if g.get(4):
        out["propagationPolicy"] = _str(g[4][-1])
    if g.get(5):
        out["dryRun"] = [_str(v) for v in g[5]]
    return out


def _metadata_only(raw: bytes) -> dict[str, Any]:
    """Kinds whose create bodies from kubectl carry nothing but metadata (``kubectl create namespace|sa``)."""
    g = _group(raw)
    return {"metadata": object_meta(g[1][-1]) if g.get(1) else {}}


DECODERS = {("v1", "Secret"): _secret, ("v1", "ConfigMap"): _configmap, ("v1", "DeleteOptions"): _delete_options,
            ("v1", "Namespace"): _metadata_only, ("v1", "ServiceAccount"): _metadata_only,
            ("meta.k8s.io/v1", "DeleteOptions"): _delete_options}


class UnsupportedProtobuf(ValueError):
    pass


def decode(body: bytes) -> dict[str, Any]:
    """A Kubernetes protobuf body as the JSON-shaped dict the API would have received."""
    if not body.startswith(MAGIC):
        raise UnsupportedProtobuf("missing the k8s protobuf envelope")
    unknown = _group(body[len(MAGIC):])
    type_meta = _group(unknown[1][-1]) if unknown.get(1) else {}
    api_version = _str(type_meta[1][-1]) if type_meta.get(1) else ""
    kind = _str(type_meta[2][-1]) if type_meta.get(2) else ""
    decoder = DECODERS.get((api_version, kind))
    if decoder is None:
        raise UnsupportedProtobuf(f"protobuf bodies of {api_version}/{kind} are not supported by the emulator")
    obj = decoder(unknown[2][-1] if unknown.get(2) else b"")
    if kind != "DeleteOptions":
        obj = {"apiVersion": api_version, "kind": kind, **obj}
    return obj
