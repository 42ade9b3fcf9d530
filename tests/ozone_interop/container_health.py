"""Whether every container of an Ozone cluster is back to full health, as Ozone's own admin CLI shows it.

Shared by the EC tier (tests/ozone_interop/test_ozone_ec.py) and the time-to-healthy benchmark (bench/ec_heal.py),
which ask the same question of our SCM ring and of Ozone's: ``ozone admin container list --all --json`` for the
containers, one ``ozone admin container info <id>... --json`` for the replicas of all of them, ``ozone admin
container report`` for the ReplicationManager's counts. The judging (:func:`shortfalls`, :func:`report_counts`) is pure: it reads the
CLI's JSON and text and says what is still wrong, so it is tested without a cluster.

Full health, per container (DELETING and DELETED ones are leaving and need nothing, nor does one never written:
no replica anywhere and no key, as a container the SCM allocated but no client wrote to):

- OPEN: no replica on a dead datanode (a container whose pipeline lost a member must be closed and repaired; an
  open one on live datanodes gains replicas as it is written, so their count is not judged);
- otherwise no replica in CLOSING or QUASI_CLOSED state (closed first), and then:
- RATIS: at least ``requiredNodes`` replicas on live datanodes (THREE: 3);
- EC: every index 1..data+parity on a live datanode;
- none of the live replicas UNHEALTHY.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

LEAVING = ("DELETING", "DELETED")
# the health states of Ozone's ReplicationManagerReport that mean a written container still lacks a copy (MISSING
# is left out: the report may count a never-written container so, and a written one missing replicas is caught
# by the replicas themselves)
NOT_HEALTHY = ("UNDER_REPLICATED", "UNHEALTHY")


class AdminCli(Protocol):
    def admin(self, *args: str, timeout: float = 120, user: str | None = None) -> str: ...


def details(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    """A `datanode list --json` entry's datanode details (nested or flat, as the CLI version prints them)."""
    nested = entry.get("datanodeDetails")
    return nested if isinstance(nested, dict) else entry


def node_uuid(entry: Mapping[str, Any]) -> str:
    d = details(entry)
    return str(d.get("uuid") or d.get("uuidString") or d.get("id"))


def required_replicas(config: Mapping[str, Any]) -> tuple[str, int]:
    """(replication type, replicas a healthy container has) from a ContainerInfo's ``replicationConfig``."""
    kind = str(config.get("replicationType", "RATIS"))
    if kind == "EC":
        return kind, int(config["data"]) + int(config["parity"])
    if "requiredNodes" in config:
        return kind, int(config["requiredNodes"])
    factor = str(config.get("replicationFactor", "THREE"))
    return kind, {"ONE": 1, "THREE": 3}.get(factor, 3)


@dataclass(frozen=True)
class Replica:
    uuid: str
    index: int
    state: str


def replicas_of(info: Mapping[str, Any]) -> list[Replica]:
    """The replicas `ozone admin container info <id> --json` lists (datanode uuid, replica index, state)."""
    out = []
    for r in info.get("replicas", []):
        dn = r.get("datanodeDetails", {})
        uuid = str(dn.get("uuid") or dn.get("uuidString") or dn.get("hostName"))
        out.append(Replica(uuid, int(r.get("replicaIndex", 0)), str(r.get("state", ""))))
    return out


def shortfalls(containers: Iterable[Mapping[str, Any]], infos: Mapping[int, Mapping[str, Any]],
               dead: set[str]) -> list[str]:
    """What keeps the cluster from full health: one line per container still short (empty: all healthy).

    ``containers``: `container list --all --json`'s entries; ``infos``: container ID -> `container info --json`;
    ``dead``: uuids of datanodes gone for good (their replicas do not count)."""
    problems = []
    for c in containers:
        cid = int(c["containerID"])
        if str(c.get("state")) in LEAVING:
            continue
        kind, need = required_replicas(c.get("replicationConfig", {}))
        info = infos.get(cid)
        if info is None:
            problems.append(f"container {cid}: no `container info` answer")
            continue
        replicas = replicas_of(info)
        if not replicas and int(c.get("numberOfKeys", 0)) == 0:
            continue  # never written: nothing to keep
        live = [r for r in replicas if r.uuid not in dead]
        if str(c.get("state")) == "OPEN":
            if len(live) < len(replicas):
                problems.append(f"container {cid} ({kind}): OPEN with a replica on a dead datanode")
            continue
        closing = sorted({r.state for r in live if r.state in ("CLOSING", "QUASI_CLOSED")})
        bad = [r.uuid for r in live if r.state == "UNHEALTHY"]
        if str(c.get("state")) in ("CLOSING", "QUASI_CLOSED") or closing:
            problems.append(f"container {cid} ({kind}): {c.get('state')}, replicas {closing or '-'}: not closed yet")
        elif bad:
            problems.append(f"container {cid} ({kind}): UNHEALTHY replicas on {bad}")
        elif kind == "EC":
            missing = sorted(set(range(1, need + 1)) - {r.index for r in live})
            if missing:
                problems.append(f"container {cid} (EC): indexes {missing} not on a live datanode")
        elif len({r.uuid for r in live}) < need:
            problems.append(f"container {cid} ({kind}): {len(live)} live replicas of {need}")
    return problems


def report_counts(text: str) -> dict[str, int]:
    """`ozone admin container report`'s ``STATE: count`` lines (lifecycle states and health states)."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*([A-Z_]+): (\d+)\s*$", text, re.MULTILINE)}


def infos_by_id(text: str) -> dict[int, Mapping[str, Any]]:
    """`ozone admin container info ID... --json`: one object for one ID, an array of them for several (Ozone 2.x
    prints ``[``, the objects separated by ``,``, then ``]``), keyed by container ID."""
    parsed = json.loads(text)
    items = parsed if isinstance(parsed, list) else [parsed]
    out: dict[int, Mapping[str, Any]] = {}
    for item in items:
        container = item.get("containerInfo", item)
        out[int(container["containerID"])] = item
    return out


def cluster_containers(c: AdminCli) -> tuple[list[Mapping[str, Any]], dict[int, Mapping[str, Any]]]:
    """`container list --all` and one `container info ... --json` of every container not leaving (two CLI JVMs)."""
    listed = json.loads(c.admin("container", "list", "--all"))
    ids = [str(x["containerID"]) for x in listed if str(x.get("state")) not in LEAVING]
    return listed, (infos_by_id(c.admin("container", "info", *ids, "--json")) if ids else {})


def full_holders(containers: Iterable[Mapping[str, Any]], infos: Mapping[int, Mapping[str, Any]]) -> dict[str, set[str]]:
    """Replication type -> datanodes (uuids) holding a replica of a container of that type that has its full set
    (EC: every index; RATIS: ``requiredNodes`` datanodes): the datanodes whose loss leaves a container short."""
    out: dict[str, set[str]] = {}
    for x in containers:
        kind, need = required_replicas(x.get("replicationConfig", {}))
        info = infos.get(int(x["containerID"]))
        if info is None or str(x.get("state")) in LEAVING:
            continue
        replicas = replicas_of(info)
        full = (set(range(1, need + 1)) <= {r.index for r in replicas}) if kind == "EC" \
            else len({r.uuid for r in replicas}) >= need
        if full:
            out.setdefault(kind, set()).update(r.uuid for r in replicas)
    return out


def cluster_shortfalls(c: AdminCli, dead: set[str]) -> list[str]:
    """Ask the cluster (list, one `container info` of every container at once, report) and judge: empty when every
    container is healthy. Three CLI JVMs whatever the number of containers."""
    listed, infos = cluster_containers(c)
    problems = shortfalls(listed, infos, dead)
    if not problems:  # the replicas say healthy; the ReplicationManager's own counts must agree
        counts = report_counts(c.admin("container", "report"))
        problems = [f"container report: {state}: {counts[state]}" for state in NOT_HEALTHY if counts.get(state)]
    return problems
