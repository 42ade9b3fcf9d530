"""Pure: what ``kubectl ozone-scm`` shows and writes, from the objects the API server returned.

Called by ``main``. No I/O, no clock (``now`` is passed in). ``summary`` turns an ``OzoneSCMCluster``, its Pods and
its ``OzoneSCMBackup`` objects into one JSON-able value (what ``status -o json`` prints); ``render_status`` draws it
as rich tables; ``switchover_refusal`` is the plugin's own check before it asks the operator (the operator checks
again when it acts); ``backup_body`` and ``annotation_patch`` are the bodies the plugin writes.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ozone_scm_operator import API_GROUP, API_VERSION

Body = Mapping[str, Any]

BACKUP_KIND = "OzoneSCMBackup"
BACKUP_PLURAL = "ozonescmbackups"
BACKUP_PHASES_DONE = ("Completed", "Failed")
CERT_WARN = datetime.timedelta(days=7)  # certificates closer to expiry than this are flagged
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def parse_time(v: Any) -> datetime.datetime | None:
    if not v or not isinstance(v, str):
        return None
    try:
        t = datetime.datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=datetime.UTC)


def event_last_seen(event: Mapping[str, Any]) -> datetime.datetime | None:
    """When an Event (read through core v1) last happened: the operator posts through events.k8s.io/v1, where a
    repeat moves ``series.lastObservedTime`` and the first occurrence is ``eventTime``; Events posted through core
    v1 (the kubelet's) carry ``lastTimestamp``."""
    return parse_time((event.get("series") or {}).get("lastObservedTime")) or parse_time(event.get("lastTimestamp")) \
        or parse_time(event.get("eventTime"))


def format_time(t: datetime.datetime) -> str:
    return t.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def age(t: datetime.datetime | None, now: datetime.datetime) -> str:
    """kubectl's compact age: 45s, 12m, 3h, 5d; a time in the future as 'in 5d'."""
    if t is None:
        return "-"
    delta = (now - t).total_seconds()
    future = delta < 0
    s = abs(delta)
    text = (f"{int(s)}s" if s < 120 else f"{int(s // 60)}m" if s < 7200 else f"{int(s // 3600)}h" if s < 172800
            else f"{int(s // 86400)}d")
    return f"in {text}" if future else text


def check_name(what: str, name: str) -> str | None:
    """None if ``name`` can name a Kubernetes object, else a one-line reason."""
    if not name or len(name) > 253 or not _NAME.match(name):
        return (f"{what} {name!r} is not a valid name: lower-case letters, digits, '-' and '.', starting and "
                "ending with a letter or digit")
    return None


# ---------------------------------------------------------------------------------------------------------------
# status
# ---------------------------------------------------------------------------------------------------------------


def _pod_facts(pod: Body | None) -> dict[str, Any]:
    if pod is None:
        return {"pod": None}
    st = pod.get("status") or {}
    statuses = list(st.get("containerStatuses") or ())
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or ())
    return {
        "pod": (pod.get("metadata") or {}).get("name"),
        "podPhase": st.get("phase") or "Pending",
        "podReady": ready,
        "restarts": sum(int(c.get("restartCount") or 0) for c in statuses),
        "deleting": bool((pod.get("metadata") or {}).get("deletionTimestamp")),
    }


def last_backup(backups: Sequence[Body], cluster: str) -> dict[str, Any] | None:
    """The newest ``OzoneSCMBackup`` of ``cluster`` (by creation time), with its phase and message."""
    mine = [b for b in backups if ((b.get("spec") or {}).get("cluster")) == cluster]
    if not mine:
        return None
    newest = max(mine, key=lambda b: (str((b.get("metadata") or {}).get("creationTimestamp") or ""),
                                      str((b.get("metadata") or {}).get("name") or "")))
    st = newest.get("status") or {}
    out = {"name": newest["metadata"]["name"], "created": newest["metadata"].get("creationTimestamp"),
           "phase": st.get("phase") or "Pending"}
    if st.get("message"):
        out["message"] = st["message"]
    completed = [b for b in mine if (b.get("status") or {}).get("phase") == "Completed"]
    if completed and newest not in completed:
        last_ok = max(completed, key=lambda b: str(b["metadata"].get("creationTimestamp") or ""))
        out["lastCompleted"] = {"name": last_ok["metadata"]["name"], "created": last_ok["metadata"].get("creationTimestamp")}
    return out


def summary(cluster: Body, pods: Sequence[Body], backups: Sequence[Body] | None,
            now: datetime.datetime) -> dict[str, Any]:
    """Everything ``status`` shows, as one JSON-able value. ``backups`` None: the backup kind is not installed."""
    meta = cluster.get("metadata") or {}
    st = cluster.get("status") or {}
    by_name = {(p.get("metadata") or {}).get("name"): p for p in pods}
    members = []
    for m in st.get("members") or ():
        expiry = parse_time(m.get("certificateExpiry"))
        members.append({
            "name": m.get("name"),
            "role": m.get("role") or "UNKNOWN",
            "state": m.get("state"),
            "ready": bool(m.get("ready")),
            "lag": m.get("lag"),
            "scmId": m.get("scmId"),
            "podIP": m.get("podIP"),
            "certificateExpiry": m.get("certificateExpiry"),
            "certificateExpiresIn": age(expiry, now).removeprefix("in ") if expiry and expiry > now else
            ("expired" if expiry else None),
            "certificateExpiringSoon": bool(expiry and expiry - now < CERT_WARN),
            **_pod_facts(by_name.get(m.get("name"))),
        })
    conditions = [{k: c.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
                  for c in st.get("conditions") or ()]
    audit = st.get("audit") or None
    out: dict[str, Any] = {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "phase": st.get("phase") or "Pending",
        "clusterID": st.get("clusterID"),
        "leader": st.get("leader"),
        "term": st.get("term"),
        "replicas": (cluster.get("spec") or {}).get("replicas", st.get("replicas")),
        "membersReady": st.get("membersReady"),
        "revision": st.get("revision"),
        "currentOperation": st.get("currentOperation") or None,
        "members": members,
        "conditions": conditions,
        "lastAudit": audit,
        "lastBackup": last_backup(backups, meta.get("name", "")) if backups is not None else None,
        "backupKindInstalled": backups is not None,
        "annotations": {k: v for k, v in (meta.get("annotations") or {}).items()
                        if k.startswith(f"{API_GROUP}/") and not k.startswith(f"{API_GROUP}/last-handled")
                        and k != f"{API_GROUP}/finalizer"},
    }
    return out


_COND_STYLE = {"True": "green", "False": "red", "Unknown": "yellow"}
_GOOD_WHEN_FALSE = {"Degraded", "Progressing", "Hibernated"}


def _cond_style(c: Mapping[str, Any]) -> str:
    if c.get("type") == "Hibernated" and c.get("status") == "True":
        return "yellow"  # asked for, not a fault
    good = (c.get("status") == "False") if c.get("type") in _GOOD_WHEN_FALSE else (c.get("status") == "True")
    return "green" if good else ("yellow" if c.get("status") == "Unknown" else "red")


def render_status(s: Mapping[str, Any]) -> Group:
    """The summary as rich renderables: a header, the members, the conditions."""
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("Cluster", f"{s['namespace']}/{s['name']}")
    head.add_row("Phase", s["phase"])
    head.add_row("Cluster ID", s.get("clusterID") or "-")
    head.add_row("Leader", f"{s.get('leader') or '-'} (term {s.get('term') if s.get('term') is not None else '-'})")
    head.add_row("Members ready", str(s.get("membersReady") or "-"))
    op = s.get("currentOperation")
    if op:
        step = f" (step {op['step']})" if op.get("step") else ""
        head.add_row("Operation", f"{op.get('type')} {op.get('member')}{step}")
    head.add_row("Last backup", _backup_line(s))
    head.add_row("Last audit", _audit_line(s.get("lastAudit")))
    for k, v in sorted((s.get("annotations") or {}).items()):
        head.add_row("Requested", f"{k}={v}")

    members = Table(title="Members", title_justify="left", expand=False)
    for col in ("MEMBER", "ROLE", "STATE", "READY", "LAG", "POD", "RESTARTS", "CERT EXPIRES", "SCM ID"):
        members.add_column(col, overflow="fold")
    for m in s["members"]:
        role = Text(m["role"], style="bold green" if m["role"] == "LEADER" else "")
        cert = m.get("certificateExpiresIn") or "-"
        members.add_row(
            m["name"], role, m.get("state") or "-",
            Text("yes" if m["ready"] else "no", style="green" if m["ready"] else "red"),
            "-" if m.get("lag") is None else str(m["lag"]),
            "-" if m.get("pod") is None else f"{m['podPhase']}{' (deleting)' if m.get('deleting') else ''}",
            "-" if m.get("pod") is None else str(m["restarts"]),
            Text(cert, style="red" if m.get("certificateExpiringSoon") else ""),
            m.get("scmId") or "-",
        )
    conditions = Table(title="Conditions", title_justify="left")
    for col in ("TYPE", "STATUS", "REASON", "MESSAGE"):
        conditions.add_column(col, overflow="fold")
    for c in s["conditions"]:
        conditions.add_row(c["type"], Text(str(c["status"]), style=_cond_style(c)), c.get("reason") or "",
                           c.get("message") or "")
    return Group(head, members, conditions)


def _backup_line(s: Mapping[str, Any]) -> str:
    if not s.get("backupKindInstalled"):
        return f"- ({BACKUP_KIND} is not installed)"
    b = s.get("lastBackup")
    if not b:
        return "none"
    line = f"{b['name']} {b['phase']} (created {b.get('created') or '?'})"
    if b.get("message"):
        line += f": {b['message']}"
    if b.get("lastCompleted"):
        line += f"; last completed {b['lastCompleted']['name']} ({b['lastCompleted'].get('created')})"
    return line


def _audit_line(audit: Mapping[str, Any] | None) -> str:
    if not audit:
        return "none"
    parts = []
    if audit.get("lastJob"):
        parts.append(f"{audit['lastJob']} {audit.get('lastResult') or ''}".strip())
    if audit.get("lastSuccessfulTime"):
        parts.append(f"last success {audit['lastSuccessfulTime']}")
    summ = audit.get("lastSummary") or {}
    if isinstance(summ, Mapping) and summ.get("findings") is not None:
        parts.append(f"findings {summ['findings']}")
    if audit.get("lastMessage"):
        parts.append(str(audit["lastMessage"]))
    return "; ".join(parts) or "scheduled, no run yet"


def switchover_refusal(s: Mapping[str, Any], member: str) -> str | None:
    """Why the plugin will not ask for a switchover to ``member`` (one line saying what to do), or None."""
    names = [m["name"] for m in s["members"]]
    m = next((x for x in s["members"] if x["name"] == member), None)
    if m is None:
        return f"{member} is not a member of {s['name']} (members: {', '.join(names) or 'none'})"
    voters = [x["name"] for x in s["members"] if x["role"] in ("LEADER", "FOLLOWER") and x["ready"]
              and x["name"] != member]
    choose = f"; choose one of: {', '.join(voters)}" if voters else ""
    if m["state"] != "Joined" or m["role"] not in ("LEADER", "FOLLOWER"):
        return f"{member} is not a voter (state {m['state']}, role {m['role']}){choose}"
    if not m["ready"]:
        return (f"{member} is not a caught-up voter (lag {m.get('lag') if m.get('lag') is not None else 'unknown'}, "
                f"not ready){choose}")
    return None


# ---------------------------------------------------------------------------------------------------------------
# bodies the plugin writes
# ---------------------------------------------------------------------------------------------------------------


def annotation_patch(values: Mapping[str, str | None]) -> dict[str, Any]:
    """A merge patch setting (or, with None, removing) annotations."""
    return {"metadata": {"annotations": dict(values)}}


def backup_name(cluster: str, now: datetime.datetime) -> str:
    return f"{cluster}-{now.astimezone(datetime.UTC).strftime('%Y%m%d%H%M%S')}"


def backup_body(cluster: str, namespace: str, name: str) -> dict[str, Any]:
    """The one-off ``OzoneSCMBackup`` of ``cluster`` (the operator's backup controller takes it from there)."""
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": BACKUP_KIND,
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {f"{API_GROUP}/cluster": cluster, "app.kubernetes.io/managed-by": "kubectl-ozone_scm"}},
        "spec": {"cluster": cluster},
    }
