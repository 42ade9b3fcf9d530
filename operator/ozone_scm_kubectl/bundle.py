"""Pure: the support bundle of ``kubectl ozone-scm report`` -- which files it holds and how secrets are kept out.

Called by ``main`` with what ``kube`` (and ``scm``) read; no I/O except writing the finished zip in ``write_zip``.
Redaction is applied to every file, whatever it came from:

* Secrets are listed by name, type, labels, annotations and the *names* of their keys -- never their data;
* anything that looks like a PEM block (certificates, private keys, CSRs) is replaced by a marker naming its type,
  wherever it appears (a Pod's environment, an annotation, a log line);
* ``metadata.managedFields`` is dropped (noise, not evidence).
"""

from __future__ import annotations

import datetime
import io
import json
import re
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

_PEM = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----.*?(?:-----END \1-----|\Z)", re.DOTALL)
# a PEM body without its armour lines, as a base64 ``data`` value carries it (LS0tLS1CRUdJTi = "-----BEGIN")
_PEM_B64 = re.compile(r"LS0tLS1CRUdJTi[A-Za-z0-9+/=]{8,}")
REDACTED = "<redacted {}>"


def redact_text(text: str) -> str:
    text = _PEM.sub(lambda m: REDACTED.format(f"PEM {m.group(1).strip()}"), text)
    return _PEM_B64.sub(REDACTED.format("base64 PEM"), text)


def redact(obj: Any) -> Any:
    """``obj`` with every PEM block replaced and managedFields dropped (recursively)."""
    if isinstance(obj, Mapping):
        return {k: redact(v) for k, v in obj.items() if k != "managedFields"}
    if isinstance(obj, list | tuple):
        return [redact(v) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


def secret_listing(secret: Mapping[str, Any]) -> dict[str, Any]:
    """What the bundle says about a Secret: never its data, only the names of its keys."""
    meta = secret.get("metadata") or {}
    return redact({
        "name": meta.get("name"),
        "type": secret.get("type"),
        "labels": meta.get("labels") or {},
        "annotations": meta.get("annotations") or {},
        "keys": sorted(set(secret.get("data") or {}) | set(secret.get("stringData") or {})),
        "creationTimestamp": meta.get("creationTimestamp"),
    })


def roles_text(status: Mapping[str, Any], direct: Mapping[str, Any] | None) -> str:
    """``scm roles`` as an admin reads it: Ozone's ``host:port:ROLE:peerId`` lines from SCM itself when it answered,
    and the operator's last view from status either way."""
    lines = []
    if direct is not None:
        lines.append(f"# asked SCM directly (GetScmRatisRoles, {direct.get('answers')}/{direct.get('asked')} answered;"
                     f" leader {direct.get('leaderId') or '-'}, term {direct.get('term')})")
        for p in direct.get("peers") or ():
            lag = "" if p.get("lag") is None else f" lag={p['lag']}"
            lines.append(f"{p['line']} node={p.get('nodeId') or '-'}{lag}{' ' + p['note'] if p.get('note') else ''}")
        lines.append("")
    else:
        lines.append("# SCM was not asked directly (secure cluster, or no member answered); the operator's view follows")
    lines.append(f"# as the operator last recorded it in status (leader {status.get('leader') or '-'}, term "
                 f"{status.get('term')})")
    for m in status.get("members") or ():
        lag = "" if m.get("lag") is None else f" lag={m['lag']}"
        lines.append(f"{m.get('name')}:{m.get('role') or 'UNKNOWN'}:{m.get('scmId') or '-'} ready={bool(m.get('ready'))}"
                     f"{lag}")
    return "\n".join(lines) + "\n"


def files(
    *, cluster: Mapping[str, Any], events: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]],
    pvcs: Sequence[Mapping[str, Any]], secrets: Sequence[Mapping[str, Any]], logs: Mapping[str, str],
    backups: Sequence[Mapping[str, Any]] | None, roles: Mapping[str, Any] | None, now: datetime.datetime,
    tool: str,
) -> dict[str, bytes]:
    """Path in the zip -> content, every file redacted. ``logs``: ``<pod>/<container>.log`` -> text."""

    def dump(obj: Any) -> bytes:
        return yaml.safe_dump(redact(obj), sort_keys=False, default_flow_style=False).encode()

    name = (cluster.get("metadata") or {}).get("name", "cluster")
    out: dict[str, bytes] = {
        "cluster.yaml": dump(cluster),
        "events.yaml": dump(sorted(events, key=_event_order)),
        "pods.yaml": dump(list(pods)),
        "pvcs.yaml": dump(list(pvcs)),
        "secrets.yaml": dump([secret_listing(s) for s in secrets]),
        "scm-roles.txt": redact_text(roles_text(cluster.get("status") or {}, roles)).encode(),
    }
    if roles is not None:
        out["scm-roles.json"] = json.dumps(redact(roles), indent=1).encode()
    if backups is not None:
        out["backups.yaml"] = dump(list(backups))
    for path, text in sorted(logs.items()):
        out[f"logs/{path}"] = redact_text(text).encode()
    manifest = {
        "cluster": name,
        "namespace": (cluster.get("metadata") or {}).get("namespace"),
        "createdAt": now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "tool": tool,
        "files": sorted([*out, "manifest.json"]),
        "redaction": "Secrets listed without data; PEM blocks (certificates, keys, requests) replaced; managedFields dropped",
    }
    out["manifest.json"] = json.dumps(manifest, indent=1).encode()
    return out


def write_zip(path: Path, contents: Mapping[str, bytes], top: str) -> None:
    """Write the bundle under one top folder; never over an existing file (the caller checks first too)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in contents.items():
            z.writestr(f"{top}/{name}", data)
    with open(path, "xb") as f:
        f.write(buf.getvalue())


def _event_order(event: Mapping[str, Any]) -> datetime.datetime:
    """When an Event last happened: ``series.lastObservedTime`` (a repeat posted through events.k8s.io/v1), else
    ``lastTimestamp`` (core v1 posters such as the kubelet), else ``eventTime``."""
    for value in ((event.get("series") or {}).get("lastObservedTime"), event.get("lastTimestamp"),
                  event.get("eventTime")):
        if isinstance(value, str) and value:
            try:
                t = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            return t if t.tzinfo else t.replace(tzinfo=datetime.UTC)
    return datetime.datetime.min.replace(tzinfo=datetime.UTC)
