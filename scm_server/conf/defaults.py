"""Every config key of ``conf/`` in one list, and the raw default table generated from it.

The typed groups declare each key once (:func:`scm_server.conf.groups.setting`: key, kind, description,
default text); the port table (:mod:`scm_server.conf.ports`) declares the service ports. This module walks
them and builds:

* :data:`DEFAULTS`, the built-in layer of :class:`~scm_server.conf.ozone_configuration.OzoneConfiguration`
  (our slice of ``ozone-default.xml``): the default text of every field of the daemon's groups
  (:data:`TABLE_GROUPS`), every port of the port table, and the few keys in :data:`TABLE_ONLY`;
* :func:`all_keys`, the rows docs/operations.md's key tables are generated from (``make config-docs``).

:class:`~scm_server.conf.security.SecurityConfig` is read only when ``ozone.security.enabled`` is true, and
its defaults stay in its fields: they are not in the raw table, so a raw read of a security key that is not
set answers "unset" (as Ozone's own code paths see it), and the typed group supplies the default.

Pure data; imports nothing above ``conf``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from scm_server.conf import ports
from scm_server.conf.groups import (
    BlockConfig,
    ContainerBalancerConfig,
    NodeManagerConfig,
    PipelineConfig,
    PlacementConfig,
    ReplicationManagerConfig,
    SafeModeConfig,
    SCMConfig,
    SCMHAConfig,
    TopologyConfig,
)
from scm_server.conf.security import SecurityConfig


@dataclasses.dataclass(frozen=True)
class KeyInfo:
    """One key as the docs show it: where it is declared, its kind, default text (None: none) and meaning."""

    key: str
    kind: str
    default: str | None
    description: str
    source: str  # the group class name, "ports" or "table only"
    in_table: bool  # whether DEFAULTS holds it


# The groups the daemon parses (SCMConfigurations), whose defaults form the raw table, in table order.
TABLE_GROUPS: tuple[type[Any], ...] = (
    SCMConfig,
    SafeModeConfig,
    NodeManagerConfig,
    PipelineConfig,
    ReplicationManagerConfig,
    BlockConfig,
    SCMHAConfig,
    TopologyConfig,
    PlacementConfig,
    ContainerBalancerConfig,
)
# Every typed group of conf/ (the docs and the drift test cover each).
ALL_GROUPS: tuple[type[Any], ...] = (*TABLE_GROUPS, SecurityConfig)

# Keys with a default in the raw table but no field in any group, each with why.
TABLE_ONLY: tuple[KeyInfo, ...] = (
    KeyInfo(
        "ozone.scm.event.loop", "string", "uvloop",
        "Ours: the event loop the SCM daemon runs on, uvloop (libuv; 10-19 % less CPU per Hadoop RPC call, "
        "docs/performance.md) or asyncio (Python's own). Read once when the daemon starts, before its loop "
        "exists, so it has no group.",
        "table only", True,
    ),
    KeyInfo(
        "ozone.scm.ratis.port", "port", "9894",
        "Port of the Raft (Ozone: Ratis) service between the SCMs; read per node (ozone.scm.ratis.port.<svc>.<node>) "
        "by SCMHAConfig's node list and by bootstrap, so it has no single-valued field.",
        "table only", True,
    ),
    KeyInfo(
        "ozone.scm.grpc.port", "port", "9895",
        "Port of the inter-SCM service (checkpoint transfer, backup, bootstrap); read per node like "
        "ozone.scm.ratis.port, so it has no single-valued field.",
        "table only", True,
    ),
    KeyInfo(
        "ozone.scm.ha.ratis.leader.ready.check.interval", "duration", "2s",
        "Ozone's key (how often a new leader checks whether it is ready), kept in the table with Ozone's "
        "default so configurations written for Ozone read the same; this SCM does not read it.",
        "table only", True,
    ),
)


def _group_keys(group: type[Any], in_table: bool) -> list[KeyInfo]:
    rows = []
    for f in dataclasses.fields(group):
        key = f.metadata.get("key")
        if key:
            m = f.metadata
            rows.append(KeyInfo(key, m["kind"], m["default"], m["description"], group.__name__, in_table))
    return rows


def _port_keys() -> list[KeyInfo]:
    return [
        KeyInfo(
            p.port_key, "port", str(p.default_port),
            (f"Port of the {p.protocol} protocol over Hadoop RPC, Ozone's key and number."
             if p.transport is ports.Transport.HADOOP_RPC
             else f"Ours: port of the {p.protocol} protocol over gRPC."),
            "ports", True,
        )
        for p in ports.ALL
    ]


def all_keys() -> list[KeyInfo]:
    """Every key of every group, the port table and :data:`TABLE_ONLY`, in declaration order (a key declared in
    two places, such as ``ozone.security.enabled``, appears once per place)."""
    rows: list[KeyInfo] = []
    for group in ALL_GROUPS:
        rows += _group_keys(group, group in TABLE_GROUPS)
    return rows + _port_keys() + list(TABLE_ONLY)


def build_defaults() -> dict[str, str]:
    """The raw default table: key -> default text. Raises AssertionError when one key has two default texts
    (a field and the port table, or two groups), so a disagreement cannot be imported."""
    table: dict[str, str] = {}
    for row in all_keys():
        if not row.in_table or row.default is None:
            continue
        known = table.setdefault(row.key, row.default)
        assert known == row.default, f"{row.key}: default {row.default!r} ({row.source}) vs {known!r}"
    return table


DEFAULTS: dict[str, str] = build_defaults()
