"""Placement policies: which datanodes host a new pipeline or a new container replica.

``PipelinePlacementPolicy`` (Ozone's, simplified): healthy IN_SERVICE nodes below the per-node
pipeline limit; an *anchor* (least loaded), then a node on a different rack (spread), then a
node near the second (same rack) or, failing that, any other node. With one rack it simply
takes the least-loaded nodes.

``ContainerPlacementRackAware`` (Ozone's SCMContainerPlacementRackAware idea): choose targets
for re-replication so the replicas of a container span at least two racks when the cluster has
two racks or more; otherwise least-used nodes.

Both are pure decisions over the node list given; ties are broken by an injected
``random.Random`` so tests are reproducible.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence

from scm_server.exceptions import ResultCodes, SCMException
from scm_server.node.node_manager import DatanodeInfo


class PipelinePlacementPolicy:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random(0)

    def choose_datanodes(
        self,
        candidates: Sequence[DatanodeInfo],
        count: int,
        load: Callable[[str], int],
        limit: Callable[[str], int],
        exclude: set[str] | None = None,
    ) -> list[DatanodeInfo]:
        excluded = exclude or set()
        usable = [
            n for n in candidates if n.is_healthy_in_service() and n.uuid not in excluded and load(n.uuid) < limit(n.uuid)
        ]
        if len(usable) < count:
            raise SCMException(
                ResultCodes.FAILED_TO_FIND_SUITABLE_NODE,
                f"pipeline needs {count} healthy in-service datanodes below the pipeline limit, "
                f"found {len(usable)} (of {len(candidates)} registered)",
            )

        def order(nodes: list[DatanodeInfo]) -> list[DatanodeInfo]:
            shuffled = list(nodes)
            self._rng.shuffle(shuffled)
            return sorted(shuffled, key=lambda n: load(n.uuid))

        ordered = order(usable)
        anchor = ordered[0]
        chosen = [anchor]
        if count == 1:
            return chosen
        rest = [n for n in ordered if n.uuid != anchor.uuid]
        other_rack = [n for n in rest if n.rack != anchor.rack]
        second = other_rack[0] if other_rack else rest[0]
        chosen.append(second)
        while len(chosen) < count:
            taken = {n.uuid for n in chosen}
            remaining = [n for n in rest if n.uuid not in taken]
            nearby = [n for n in remaining if n.rack == second.rack]
            chosen.append(nearby[0] if nearby else remaining[0])
        return chosen


class ContainerPlacementRackAware:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random(0)

    def choose_targets(
        self,
        candidates: Sequence[DatanodeInfo],
        existing_racks: Sequence[str],
        count: int,
        load: Callable[[str], int],
        exclude: set[str],
    ) -> list[DatanodeInfo]:
        """``count`` targets not in ``exclude``; prefer racks not yet holding a replica."""
        usable = [n for n in candidates if n.is_healthy_in_service() and n.uuid not in exclude]
        shuffled = list(usable)
        self._rng.shuffle(shuffled)
        rack_use = Counter(existing_racks)
        chosen: list[DatanodeInfo] = []
        for _ in range(count):
            taken = {c.uuid for c in chosen}
            pool = [n for n in shuffled if n.uuid not in taken]
            if not pool:
                break
            pool.sort(key=lambda n: (rack_use.get(n.rack, 0), load(n.uuid), -n.remaining_bytes()))
            pick = pool[0]
            chosen.append(pick)
            rack_use[pick.rack] += 1
        return chosen

    @staticmethod
    def is_policy_satisfied(replica_racks: Sequence[str], replication: int, cluster_racks: int) -> bool:
        """Replicas must span min(2, racks available) racks (for replication > 1)."""
        if replication <= 1 or not replica_racks:
            return True
        required = min(2, cluster_racks, replication)
        return len(set(replica_racks)) >= required
