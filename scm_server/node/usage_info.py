"""Datanode usage as ``ozone admin datanode usageinfo`` shows it (Ozone's DatanodeUsageInfo).

Pure: built from what the node manager already holds (the last node report's volumes, the container and pipeline
counts the facade passes in); no I/O, no clock. The facade (:meth:`StorageContainerManager.datanode_usage_info`)
picks the nodes; the Hadoop RPC location translator writes them as Ozone's ``DatanodeUsageInfoProto``.

Utilization is Ozone's: ``(capacity - remaining) / capacity`` over the volumes not reported failed, 0 for a node
without capacity. "Most used" sorts by it, highest first; "least used" lowest first; ties keep the given order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from scm_server.node.node_manager import DatanodeInfo
from scm_server.protocols import DatanodeUsageInfo


def usage_of(info: DatanodeInfo, container_count: int, pipeline_count: int) -> DatanodeUsageInfo:
    """The usage of ``info`` from its last node report (failed volumes left out, as Ozone's node stat)."""
    volumes = [r for r in info.storage_reports if not r.failed]
    return DatanodeUsageInfo(
        details=info.details,
        capacity=sum(r.capacity for r in volumes),
        used=sum(r.scmUsed for r in volumes),
        remaining=sum(r.remaining for r in volumes),
        committed=sum(r.committed for r in volumes),
        container_count=container_count,
        pipeline_count=pipeline_count,
        free_space_to_spare=sum(r.freeSpaceToSpare for r in volumes),
        reserved=sum(r.reserved for r in volumes),
        fs_capacity=sum(r.fsCapacity for r in volumes),
        fs_available=sum(r.fsAvailable for r in volumes),
    )


def most_or_least_used(usages: Iterable[DatanodeUsageInfo], most_used: bool, count: int) -> list[DatanodeUsageInfo]:
    """The ``count`` most (or least) utilized of ``usages``; ``count`` must be at least 1 (Ozone's rule)."""
    if count < 1:
        raise ValueError("The specified parameter count must be an integer greater than zero.")
    ranked: Sequence[DatanodeUsageInfo] = sorted(usages, key=DatanodeUsageInfo.utilization, reverse=most_used)
    return list(ranked[:count])
