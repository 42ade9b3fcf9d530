"""Where EC replicas go: the one place erasure coding asks for datanodes.

Ozone chooses the nodes of a new EC pipeline and the targets of a reconstruction with the policy
named by ``ozone.scm.container.placement.ec.impl`` (SCMContainerPlacementRackScatter by default:
every replica on a different rack while racks last). Until that policy is served here,
:func:`choose_ec_nodes` asks the rack-aware container placement for nodes on the least used racks
first, which scatters across racks the same way while racks last. Every EC caller goes through
this function, so swapping the policy changes this module only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from scm_server.node.node_manager import DatanodeInfo
from scm_server.pipeline.placement import ContainerPlacementRackAware


def choose_ec_nodes(
    policy: ContainerPlacementRackAware,
    candidates: Sequence[DatanodeInfo],
    count: int,
    load: Callable[[str], int],
    excluded: set[str],
    used_racks: Sequence[str] = (),
) -> list[DatanodeInfo]:
    """Up to ``count`` healthy in-service nodes outside ``excluded``, racks not in ``used_racks``
    (and then the least used ones) first; fewer when the cluster has fewer."""
    return policy.choose_targets(candidates, used_racks, count, load, excluded)
