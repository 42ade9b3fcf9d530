"""Rendering for the CLI: ``--json`` (Ozone's shapes where Ozone has them) and rich tables.

Pure formatting helpers: protobuf message -> dict, report -> Ozone's text layout. The commands
in ``admin.py`` fetch through the client and hand the results here. Tables go out through
:func:`print_table`, which never cuts a value (IDs must survive copy and paste).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from typing import Any

from google.protobuf import message as pb_message
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from scm_server.proto import hdds_pb2

console = Console()
err_console = Console(stderr=True)

LIFECYCLE_STATES = [hdds_pb2.LifeCycleState.Name(v) for v in hdds_pb2.LifeCycleState.values()]
HEALTH_STATES = [
    "HEALTHY", "UNDER_REPLICATED", "MIS_REPLICATED", "OVER_REPLICATED", "MISSING",
    "UNHEALTHY", "EMPTY", "OPEN_UNHEALTHY", "QUASI_CLOSED_STUCK", "OPEN_WITHOUT_PIPELINE",
]


def to_dict(msg: pb_message.Message) -> dict[str, Any]:
    """Protobuf -> JSON-ready dict with set fields only, enums as names and int64 as numbers.

    (``json_format.MessageToDict`` renders int64 as strings; Ozone's ``--json`` shows numbers.)
    """
    out: dict[str, Any] = {}
    for field, value in msg.ListFields():
        out[field.name] = _field_value(field, value)
    return out


def _scalar(field: Any, value: Any) -> Any:
    if field.type == field.TYPE_MESSAGE:
        return to_dict(value)
    if field.type == field.TYPE_ENUM:
        enum_value = field.enum_type.values_by_number.get(value)
        return enum_value.name if enum_value is not None else value
    if field.type == field.TYPE_BYTES:
        return value.hex()
    return value


def _field_value(field: Any, value: Any) -> Any:
    if field.is_repeated:
        return [_scalar(field, v) for v in value]
    return _scalar(field, value)


def table_lines(table: Table) -> list[str]:
    """The table as plain text: a header and one line per row, columns aligned with two spaces,
    every value whole (no borders, no truncation, no markup)."""

    def plain(cell: Any) -> str:
        if isinstance(cell, Text):
            return cell.plain
        return Text.from_markup(str(cell)).plain if isinstance(cell, str) else str(cell)

    headers = [plain(c.header) for c in table.columns]
    columns = [[plain(cell) for cell in c.cells] for c in table.columns]
    rows = [list(r) for r in zip(*columns, strict=True)] if columns else []
    widths = [max([len(h)] + [len(v) for v in col]) for h, col in zip(headers, columns, strict=True)]
    lines = [plain(table.title)] if table.title else []
    for row in [headers, *rows]:
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    return lines


def print_table(table: Table, out: Console | None = None) -> None:
    """Print a table without ever cutting a value: a bordered table on a terminal wide enough for
    it, else (piped, or a narrow terminal) the plain aligned form of :func:`table_lines`, whose
    long lines the terminal may wrap but which keeps every ID whole for copy and paste."""
    out = out or console
    natural = Measurement.get(out, out.options.update_width(1 << 20), table).maximum
    if out.is_terminal and natural <= out.width:
        out.print(table)
        return
    for line in table_lines(table):
        out.print(line, markup=False, highlight=False, soft_wrap=True)


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))


def report_to_dict(report: hdds_pb2.ReplicationManagerReportProto) -> dict[str, Any]:
    """Ozone's ReplicationManagerReport JSON: reportTimeStamp, stats, samples."""
    return {
        "reportTimeStamp": int(report.timestamp),
        "stats": {c.key: int(c.count) for c in report.stat},
        "samples": {s.key: list(s.containerIds) for s in report.statSample},
    }


def report_text(report: hdds_pb2.ReplicationManagerReportProto) -> str:
    """The layout of ``ozone admin container report``."""
    stats = {c.key: int(c.count) for c in report.stat}
    samples = {s.key: list(s.containerIds) for s in report.statSample}
    when = dt.datetime.fromtimestamp(report.timestamp / 1000, tz=dt.UTC) if report.timestamp else None
    lines = [f"Container Summary Report generated at {when.isoformat() if when else 'unknown'}", "=" * 58, ""]
    lines += ["Container State Summary", "=" * 23]
    lines += [f"{s}: {stats.get(s, 0)}" for s in LIFECYCLE_STATES]
    lines += ["", "Container Health Summary", "=" * 24]
    health = HEALTH_STATES + sorted(k for k in stats if k not in HEALTH_STATES and k not in LIFECYCLE_STATES)
    lines += [f"{s}: {stats.get(s, 0)}" for s in health]
    for key in health:
        ids = samples.get(key)
        if not ids:
            continue
        lines.append("")
        lines.append(f"First {min(len(ids), 100)} {key} containers:")
        lines.append(", ".join(str(i) for i in ids[:100]))
    return "\n".join(lines).rstrip() + "\n"


def container_table(containers: Sequence[hdds_pb2.ContainerInfoProto]) -> Table:
    table = Table(title=f"{len(containers)} container(s)")
    for col in ("id", "state", "replication", "pipeline", "used", "keys", "owner", "seq id"):
        table.add_column(col)
    for c in containers:
        table.add_row(
            str(c.containerID),
            hdds_pb2.LifeCycleState.Name(c.state),
            f"{hdds_pb2.ReplicationType.Name(c.replicationType)}/{hdds_pb2.ReplicationFactor.Name(c.replicationFactor)}",
            c.pipelineID.id if c.HasField("pipelineID") else "",
            str(c.usedBytes),
            str(c.numberOfKeys),
            c.owner,
            str(c.sequenceId),
        )
    return table


def _members(members: Iterable[hdds_pb2.DatanodeDetailsProto]) -> str:
    return ", ".join(f"{m.hostName or m.uuid}{m.networkLocation}" for m in members)


def pipeline_table(pipelines: Sequence[hdds_pb2.Pipeline]) -> Table:
    table = Table(title=f"{len(pipelines)} pipeline(s)")
    for col in ("id", "state", "replication", "leader", "members"):
        table.add_column(col)
    for p in pipelines:
        table.add_row(
            p.id.id,
            hdds_pb2.PipelineState.Name(p.state) if p.HasField("state") else "",
            f"{hdds_pb2.ReplicationType.Name(p.type)}/{hdds_pb2.ReplicationFactor.Name(p.factor)}",
            p.leaderID,
            _members(p.members),
        )
    return table


def node_to_dict(n: hdds_pb2.Node) -> dict[str, Any]:
    d = n.nodeID
    return {
        "uuid": d.uuid,
        "hostName": d.hostName,
        "ipAddress": d.ipAddress,
        "networkLocation": d.networkLocation,
        "healthState": hdds_pb2.NodeState.Name(n.nodeStates[0]) if n.nodeStates else "UNKNOWN",
        "opState": hdds_pb2.NodeOperationalState.Name(n.nodeOperationalStates[0]) if n.nodeOperationalStates else "UNKNOWN",
        "containerCount": int(n.containerCount),
        "pipelineCount": int(n.pipelineCount),
        "lastHeartbeatMs": int(n.lastHeartbeatMs),
        "totalVolumeCount": int(n.totalVolumeCount),
        "healthyVolumeCount": int(n.healthyVolumeCount),
        "failedVolumes": list(n.failedVolumes),
    }


def node_table(nodes: Sequence[hdds_pb2.Node]) -> Table:
    table = Table(title=f"{len(nodes)} datanode(s)")
    for col in ("host", "uuid", "rack", "health", "op state", "containers", "pipelines"):
        table.add_column(col)
    for n in nodes:
        d = node_to_dict(n)
        table.add_row(
            d["hostName"], d["uuid"], d["networkLocation"], d["healthState"], d["opState"],
            str(d["containerCount"]), str(d["pipelineCount"]),
        )
    return table


def topology_text(nodes: Sequence[hdds_pb2.Node], full_info: bool = False) -> str:
    """``ozone admin printTopology``'s layout: per health state, per network location (sorted), one line per
    datanode, ``ip(hostname)``, with its ports and operational state under ``--full-info``."""
    lines: list[str] = []
    for state in (hdds_pb2.HEALTHY, hdds_pb2.STALE, hdds_pb2.DEAD):
        chosen = [n for n in nodes if n.nodeStates and n.nodeStates[0] == state]
        if not chosen:
            continue
        lines.append(f"State = {hdds_pb2.NodeState.Name(state)}")
        by_location: dict[str, list[hdds_pb2.DatanodeDetailsProto]] = {}
        for n in chosen:
            by_location.setdefault(n.nodeID.networkLocation or "/default-rack", []).append(n.nodeID)
        for location in sorted(by_location):
            lines.append(f"Location: {location}")
            for dn in sorted(by_location[location], key=lambda d: (d.ipAddress, d.hostName)):
                line = f" {dn.ipAddress}({dn.hostName})"
                if full_info:
                    ports = ",".join(f"{p.name}={p.value}" for p in dn.ports)
                    op = hdds_pb2.NodeOperationalState.Name(dn.persistedOpState)
                    line += f" {ports} {op}"
                lines.append(line)
    return "\n".join(lines)


def container_info_dict(
    cwp: hdds_pb2.ContainerWithPipeline, replicas: Sequence[hdds_pb2.ContainerReplicaInfo]
) -> dict[str, Any]:
    out: dict[str, Any] = {"containerInfo": to_dict(cwp.containerInfo)}
    if cwp.HasField("pipeline"):
        out["pipeline"] = to_dict(cwp.pipeline)
    out["replicas"] = [
        {
            "datanodeDetails": {
                "uuid": r.datanode.uuid, "hostName": r.datanode.hostName,
                "networkLocation": r.datanode.networkLocation,
            },
            "state": hdds_pb2.ContainerReplicaProto.State.Name(r.replica.state),
            "bcsId": int(r.replica.blockCommitSequenceId),
            "keyCount": int(r.replica.keyCount),
            "used": int(r.replica.used),
            "lastReportedMs": int(r.lastReportedMs),
        }
        for r in replicas
    ]
    return out
