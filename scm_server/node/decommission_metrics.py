"""Ozone's NodeDecommissionMetrics bean, as ``GetMetrics`` (Ozone's JMX query over the location protocol) answers it.

``ozone admin datanode status decommission`` asks SCM for the bean
``Hadoop:service=StorageContainerManager,name=NodeDecommissionMetrics`` and reads, per datanode leaving, the
attributes Hadoop's metrics system writes for the bean's extra records: ``tag.datanode.<i>``,
``PipelinesWaitingToCloseDN.<i>``, ``UnderReplicatedDN.<i>``, ``SufficientlyReplicatedDN.<i>``,
``UnclosedContainersDN.<i>``, ``StartTimeDN.<i>`` (``i`` from 1), next to the totals
(``DecommissioningMaintenanceNodesTotal``, ...). The answer is the JMX servlet's JSON: ``{"beans": [...]}``
holding the beans whose object name matches the query (an empty list when none does).

Pure: the facade (:meth:`StorageContainerManager.get_metrics`) gathers the progress; this module builds values.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Sequence
from dataclasses import dataclass

BEAN_NAME = "Hadoop:service=StorageContainerManager,name=NodeDecommissionMetrics"


@dataclass(frozen=True)
class NodeDecommissionProgress:
    """Where one decommissioning (or entering-maintenance) datanode stands."""

    host: str
    pipelines_waiting_to_close: int
    under_replicated: tuple[int, ...]
    unclosed: tuple[int, ...]
    sufficiently_replicated: int
    start_time_ms: int


def node_decommission_bean(nodes: Sequence[NodeDecommissionProgress]) -> dict[str, object]:
    """The bean as Hadoop's JMX servlet writes it: the totals, then each node's record with the suffix ``.i``."""
    bean: dict[str, object] = {
        "name": BEAN_NAME,
        "modelerType": "NodeDecommissionMetrics",
        "tag.Context": "ozone",
        "DecommissioningMaintenanceNodesTotal": len(nodes),
        "RecommissionNodesTotal": 0,
        "PipelinesWaitingToCloseTotal": sum(n.pipelines_waiting_to_close for n in nodes),
        "ContainersUnderReplicatedTotal": sum(len(n.under_replicated) for n in nodes),
        "ContainersUnClosedTotal": sum(len(n.unclosed) for n in nodes),
        "ContainersSufficientlyReplicatedTotal": sum(n.sufficiently_replicated for n in nodes),
    }
    for i, node in enumerate(nodes, start=1):
        bean[f"tag.Context.{i}"] = "ozone"
        bean[f"tag.datanode.{i}"] = node.host
        bean[f"PipelinesWaitingToCloseDN.{i}"] = node.pipelines_waiting_to_close
        bean[f"UnderReplicatedDN.{i}"] = len(node.under_replicated)
        bean[f"SufficientlyReplicatedDN.{i}"] = node.sufficiently_replicated
        bean[f"UnclosedContainersDN.{i}"] = len(node.unclosed)
        bean[f"StartTimeDN.{i}"] = node.start_time_ms
    return bean


def object_name_matches(pattern: str, name: str) -> bool:
    """JMX object-name pattern matching: ``domain:key=value,...`` with ``*``/``?`` wildcards in the domain and
    values, key order free, and a trailing ``*`` property allowing any further keys (``*:*`` matches all)."""
    p_domain, _, p_props = pattern.partition(":")
    n_domain, _, n_props = name.partition(":")
    if not fnmatch.fnmatchcase(n_domain, p_domain or "*"):
        return False
    wanted = [p for p in p_props.split(",") if p]
    open_ended = "*" in wanted
    wanted_pairs = dict(p.split("=", 1) for p in wanted if p != "*" and "=" in p)
    have = dict(p.split("=", 1) for p in n_props.split(",") if "=" in p)
    if not open_ended and set(have) != set(wanted_pairs):
        return False
    return all(k in have and fnmatch.fnmatchcase(have[k], v) for k, v in wanted_pairs.items())


def query_beans(query: str, beans: Sequence[dict[str, object]]) -> str:
    """The JMX servlet's answer to ``query`` (every bean when empty): ``{"beans": [...]}``, pretty-printed."""
    pattern = query or "*:*"
    return json.dumps({"beans": [b for b in beans if object_name_matches(pattern, str(b["name"]))]}, indent=2)
