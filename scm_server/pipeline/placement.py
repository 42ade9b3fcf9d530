"""Placement policies: which datanodes host a new pipeline or a new container replica, as Ozone chooses them.

Selected by Ozone's keys (:class:`scm_server.conf.PlacementConfig`, short or full Java class names):

* ``ozone.scm.container.placement.impl`` (Ratis replicas; the ReplicationManager's targets):
  :class:`SCMContainerPlacementRackAware` (default), :class:`SCMContainerPlacementRackScatter`,
  :class:`SCMContainerPlacementCapacity`, :class:`SCMContainerPlacementRandom`;
* ``ozone.scm.container.placement.ec.impl`` (EC replicas): the same classes, RackScatter by default;
* ``ozone.scm.pipeline.placement.impl``: :class:`PipelinePlacementPolicy`;
* ``ozone.scm.pipeline.leader-choose.policy``: :class:`MinLeaderCountChoosePolicy` (default),
  :class:`DefaultLeaderChoosePolicy`.

The rules every container policy shares (Ozone's SCMCommonPlacementPolicy.chooseDatanodes): candidates are the
HEALTHY, IN_SERVICE datanodes not excluded and not already used (holding a replica); fewer than required raises
``FAILED_TO_FIND_HEALTHY_NODES``; of those, the ones with a volume whose remaining space less its committed space
and the space the datanode reports it spares exceeds the data size asked (``ozone.scm.container.size``) are kept, fewer than
required raises ``FAILED_TO_FIND_NODES_WITH_SPACE``. A node that has reported no volume yet is not judged on
space. Favored nodes are taken first whenever they fit the policy's rule. Each policy then picks one node at a
time given the racks already holding replicas (the used nodes' and those picked so far):

* RackAware (HDFS's rule): the first node anywhere; while fewer than ``min(2, racks)`` racks hold replicas, a
  node on a new rack; then a node on a rack holding exactly one replica that is not the first one's (the third
  replica beside the second); further replicas anywhere. Satisfied when replicas span ``min(2, racks)`` racks.
* RackScatter: always a node on a rack holding the fewest replicas (so replicas span as many racks as exist).
  Satisfied when replicas span ``min(replicas, racks)`` racks and no rack holds more than its fair share.
* Capacity: of two random candidates, the one using less of its capacity (power of two choices).
* Random: any candidate. Capacity and Random accept any spread (one rack is enough).

When no candidate fits the rule (too few racks) the pick falls back to any candidate, as Ozone's policies do.

Fixing a spread (Ozone's SCMCommonPlacementPolicy):
:meth:`ContainerPlacementPolicy.replicas_to_copy_to_fix_misreplication` names the replicas of the fullest racks
beyond their share ``ceil(replicas / required racks)``;
:meth:`ContainerPlacementPolicy.replicas_to_remove_to_fix_overreplication` takes a duplicated index's extra
copies from the racks holding the most replicas.

``PipelinePlacementPolicy``: HEALTHY, IN_SERVICE datanodes not excluded, below their pipeline limit and with
space; an anchor (a favored node, else the least-loaded, random among equals), then a node on another rack
(if the cluster has one), then nodes on the anchor's rack, any node as the fallback.

Everything here is a pure decision over the nodes given; randomness comes from an injected ``random.Random``.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from typing import ClassVar, Protocol

from scm_server.conf import groups
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.node.node_manager import DatanodeInfo


def usable_space(node: DatanodeInfo, min_free_space: int) -> int:
    """The most a new container can take on one of the node's volumes (Ozone's VolumeUsage.getUsableSpace):
    remaining less committed less the space the datanode reports it spares (``freeSpaceToSpare``), or
    ``min_free_space`` if larger (0 unless a caller sets it: the SCM takes the datanode's figure)."""
    best = 0
    for report in node.storage_reports:
        if report.failed:
            continue
        spare = max(min_free_space, report.freeSpaceToSpare)
        best = max(best, report.remaining - report.committed - spare)
    return best


def has_enough_space(node: DatanodeInfo, data_size: int, min_free_space: int) -> bool:
    """Whether a new container of ``data_size`` bytes fits; a node with no volume reported is not judged."""
    if data_size <= 0 or not node.storage_reports:
        return True
    return usable_space(node, min_free_space) > data_size


class ContainerPlacementPolicy:
    """What the ReplicationManager (and EC allocation) calls. Subclasses give :meth:`_wanted` (the nodes the
    next pick should come from) and :meth:`is_policy_satisfied`."""

    name: ClassVar[str] = ""

    def __init__(self, rng: random.Random | None = None, *, min_free_space: int = 0) -> None:
        self._rng = rng or random.Random(0)
        self.min_free_space = min_free_space

    # ---- the Ozone-shaped call ----
    def choose_datanodes(
        self,
        candidates: Sequence[DatanodeInfo],
        required: int,
        *,
        used: Sequence[DatanodeInfo] = (),
        excluded: Collection[str] = (),
        favored: Sequence[str] = (),
        data_size: int = 0,
    ) -> list[DatanodeInfo]:
        """``required`` distinct nodes for new replicas, none used or excluded; raises SCMException with
        FAILED_TO_FIND_HEALTHY_NODES or FAILED_TO_FIND_NODES_WITH_SPACE when there are too few."""
        skip = set(excluded) | {n.uuid for n in used}
        healthy = [n for n in candidates if n.is_healthy_in_service() and n.uuid not in skip]
        if len(healthy) < required:
            raise SCMException(
                ResultCodes.FAILED_TO_FIND_HEALTHY_NODES,
                f"Not enough healthy nodes to allocate container. {required} datanodes required. "
                f"Found {len(healthy)} (of {len(candidates)}, {len(skip)} excluded or used).",
            )
        roomy = [n for n in healthy if has_enough_space(n, data_size, self.min_free_space)]
        if len(roomy) < required:
            raise SCMException(
                ResultCodes.FAILED_TO_FIND_NODES_WITH_SPACE,
                f"Unable to find enough nodes that meet the space requirement of {data_size} bytes for data in "
                f"healthy node set. Required {required}. Found {len(roomy)}.",
            )
        rack_count = len({n.rack for n in candidates if n.is_healthy_in_service()} | {n.rack for n in used})
        return self._pick_many(roomy, required, [n.rack for n in used], favored, rack_count, lambda _u: 0)

    # ---- the ReplicationManager's call (best effort: fewer targets rather than an error) ----
    def choose_targets(
        self,
        candidates: Sequence[DatanodeInfo],
        existing_racks: Sequence[str],
        count: int,
        load: Callable[[str], int],
        exclude: set[str],
    ) -> list[DatanodeInfo]:
        """Up to ``count`` targets not in ``exclude`` for replicas of a container whose replicas sit on
        ``existing_racks``; among the nodes the rule allows, the least loaded (in-flight commands) first."""
        usable = [n for n in candidates if n.is_healthy_in_service() and n.uuid not in exclude]
        roomy = [n for n in usable if has_enough_space(n, 0, self.min_free_space)]
        rack_count = len({n.rack for n in candidates} | set(existing_racks))
        return self._pick_many(roomy, min(count, len(roomy)), list(existing_racks), (), rack_count, load)

    def _pick_many(
        self,
        pool: Sequence[DatanodeInfo],
        count: int,
        placed: list[str],
        favored: Sequence[str],
        rack_count: int,
        load: Callable[[str], int],
    ) -> list[DatanodeInfo]:
        remaining = list(pool)
        self._rng.shuffle(remaining)
        placed = list(placed)
        first_rack = placed[0] if placed else None
        chosen: list[DatanodeInfo] = []
        rank = {uuid: i for i, uuid in reversed(list(enumerate(favored)))}  # a favored node's first position
        for _ in range(count):
            wanted = self._wanted(remaining, placed, first_rack, rack_count) or remaining
            # the first favored node the rule allows, in the order given (as Ozone's rack-aware policy tries its
            # favored nodes); else the policy's own pick
            in_favor = [n for n in wanted if n.uuid in rank]
            pick = min(in_favor, key=lambda n: rank[n.uuid]) if in_favor else self._pick_one(wanted, load)
            chosen.append(pick)
            remaining.remove(pick)
            placed.append(pick.rack)
            first_rack = first_rack or pick.rack
        return chosen

    def _pick_one(self, nodes: list[DatanodeInfo], load: Callable[[str], int]) -> DatanodeInfo:
        return min(nodes, key=lambda n: load(n.uuid))  # the list is shuffled: ties fall randomly

    def _wanted(
        self, pool: list[DatanodeInfo], placed: list[str], first_rack: str | None, rack_count: int
    ) -> list[DatanodeInfo]:
        return pool

    @staticmethod
    def is_policy_satisfied(replica_racks: Sequence[str], replication: int, cluster_racks: int) -> bool:
        return True

    @staticmethod
    def required_rack_count(replicas: int, cluster_racks: int) -> int:
        """How many racks ``replicas`` replicas must span under this policy (one: any spread will do)."""
        return 1

    # ---- fixing a spread (Ozone's SCMCommonPlacementPolicy) ----
    def replicas_to_copy_to_fix_misreplication(
        self, replicas: Sequence[tuple[str, bool]], cluster_racks: int
    ) -> list[int]:
        """Which replicas to copy elsewhere so the spread satisfies the policy, as positions in ``replicas``
        (each a ``(rack, copyable)`` pair; only copyable ones are chosen). Racks are taken fullest first
        (ties by name), as many as the policy requires; each keeps at most ``ceil(replicas left / racks
        left)`` and the rest of its copyable replicas, in the order given, are to be copied."""
        by_rack: dict[str, list[int]] = {}
        for position, (rack, _copyable) in enumerate(replicas):
            by_rack.setdefault(rack, []).append(position)
        total = len(replicas)
        required = self.required_rack_count(total, cluster_racks)
        fullest = sorted(by_rack.items(), key=lambda item: (-len(item[1]), item[0]))[:required]
        chosen: list[int] = []
        for _rack, positions in fullest:
            keep = max_replicas_per_rack(total, required)
            excess = len(positions) - keep
            total -= keep
            required -= 1
            if excess > 0:
                chosen.extend([p for p in positions if replicas[p][1]][:excess])
        return chosen

    @staticmethod
    def replicas_to_remove_to_fix_overreplication(
        replicas: Sequence[tuple[int, str]], expected_per_index: int = 1
    ) -> list[int]:
        """Which replicas to delete so no index (of ``(replica index, rack)`` pairs) has more than
        ``expected_per_index`` copies, as positions in ``replicas``: the most copied index first, each extra
        copy taken from the rack holding the most replicas of the container (ties: the last such replica
        given), so the spread left is the widest."""
        per_index: dict[int, list[int]] = {}
        rack_load: Counter[str] = Counter()
        for position, (index, rack) in enumerate(replicas):
            per_index.setdefault(index, []).append(position)
            rack_load[rack] += 1
        removed: list[int] = []
        for index in sorted(per_index, key=lambda i: (-len(per_index[i]), i)):
            copies = list(per_index[index])
            while len(copies) > expected_per_index:
                victim = max(copies, key=lambda p: (rack_load[replicas[p][1]], p))
                copies.remove(victim)
                rack_load[replicas[victim][1]] -= 1
                removed.append(victim)
        return removed


def max_replicas_per_rack(replicas: int, racks: int) -> int:
    """The most replicas one rack may hold when ``replicas`` spread over ``racks`` racks: ceil(replicas / racks)."""
    return -(-replicas // max(1, racks))


class SCMContainerPlacementRackAware(ContainerPlacementPolicy):
    name = groups.RACK_AWARE
    REQUIRED_RACKS = 2

    def _wanted(
        self, pool: list[DatanodeInfo], placed: list[str], first_rack: str | None, rack_count: int
    ) -> list[DatanodeInfo]:
        if not placed:
            return pool
        distinct = set(placed)
        if len(distinct) < min(self.REQUIRED_RACKS, rack_count):
            return [n for n in pool if n.rack not in distinct]
        counts = Counter(placed)
        lonely = {r for r, c in counts.items() if c == 1 and r != first_rack}
        return [n for n in pool if n.rack in lonely]

    @staticmethod
    def is_policy_satisfied(replica_racks: Sequence[str], replication: int, cluster_racks: int) -> bool:
        """Replicas must span min(2, racks available) racks (for replication > 1)."""
        if replication <= 1 or not replica_racks:
            return True
        required = min(SCMContainerPlacementRackAware.REQUIRED_RACKS, cluster_racks, replication)
        return len(set(replica_racks)) >= required

    @staticmethod
    def required_rack_count(replicas: int, cluster_racks: int) -> int:
        return max(1, min(SCMContainerPlacementRackAware.REQUIRED_RACKS, cluster_racks, replicas))


class SCMContainerPlacementRackScatter(ContainerPlacementPolicy):
    name = groups.RACK_SCATTER

    def _wanted(
        self, pool: list[DatanodeInfo], placed: list[str], first_rack: str | None, rack_count: int
    ) -> list[DatanodeInfo]:
        counts = Counter(placed)
        fewest = min((counts.get(n.rack, 0) for n in pool), default=0)
        return [n for n in pool if counts.get(n.rack, 0) == fewest]

    @staticmethod
    def is_policy_satisfied(replica_racks: Sequence[str], replication: int, cluster_racks: int) -> bool:
        """Replicas span min(replicas, racks) racks, and no rack holds more than ceil(replicas / that)."""
        if not replica_racks:
            return True
        replicas = max(replication, len(replica_racks))
        required = max(1, min(replicas, cluster_racks))
        per_rack = -(-replicas // required)
        counts = Counter(replica_racks)
        return len(counts) >= required and max(counts.values()) <= per_rack

    @staticmethod
    def required_rack_count(replicas: int, cluster_racks: int) -> int:
        return max(1, min(replicas, cluster_racks))


class SCMContainerPlacementCapacity(ContainerPlacementPolicy):
    name = groups.CAPACITY

    def _pick_one(self, nodes: list[DatanodeInfo], load: Callable[[str], int]) -> DatanodeInfo:
        if len(nodes) == 1:
            return nodes[0]
        first, second = self._rng.sample(nodes, 2)
        return min((first, second), key=lambda n: (_used_ratio(n), load(n.uuid)))


def _used_ratio(node: DatanodeInfo) -> float:
    capacity = sum(r.capacity for r in node.storage_reports if not r.failed)
    if capacity <= 0:
        return 0.0
    return 1.0 - node.remaining_bytes() / capacity


class SCMContainerPlacementRandom(ContainerPlacementPolicy):
    name = groups.RANDOM

    def _pick_one(self, nodes: list[DatanodeInfo], load: Callable[[str], int]) -> DatanodeInfo:
        return self._rng.choice(nodes)


# The name this project used before the policies were selectable.
ContainerPlacementRackAware = SCMContainerPlacementRackAware

CONTAINER_POLICIES: dict[str, type[ContainerPlacementPolicy]] = {
    cls.name: cls
    for cls in (
        SCMContainerPlacementRackAware,
        SCMContainerPlacementRackScatter,
        SCMContainerPlacementCapacity,
        SCMContainerPlacementRandom,
    )
}


def container_policy(class_name: str, rng: random.Random | None = None, *, min_free_space: int = 0
                     ) -> ContainerPlacementPolicy:
    """The policy a placement key names (the full class name, as :class:`PlacementConfig` normalises it)."""
    return CONTAINER_POLICIES[class_name](rng, min_free_space=min_free_space)


class PipelinePlacementPolicy:
    name: ClassVar[str] = groups.PIPELINE_PLACEMENT

    def __init__(self, rng: random.Random | None = None, *, min_free_space: int = 0) -> None:
        self._rng = rng or random.Random(0)
        self.min_free_space = min_free_space

    def choose_datanodes(
        self,
        candidates: Sequence[DatanodeInfo],
        count: int,
        load: Callable[[str], int],
        limit: Callable[[str], int],
        exclude: set[str] | None = None,
        *,
        favored: Sequence[str] = (),
        data_size: int = 0,
    ) -> list[DatanodeInfo]:
        """``count`` members for a new pipeline; raises FAILED_TO_FIND_SUITABLE_NODE (too few healthy nodes
        below their pipeline limit) or FAILED_TO_FIND_NODES_WITH_SPACE."""
        excluded = exclude or set()
        # one pass over the candidates (a background creation at a thousand datanodes runs this once per pipeline)
        healthy: list[DatanodeInfo] = []
        below = 0
        usable: list[DatanodeInfo] = []
        loads: dict[int, int] = {}  # by id() of the candidate: its load, asked once
        for n in candidates:
            if not n.is_healthy_in_service():
                continue
            uuid = n.uuid
            if uuid in excluded:
                continue
            healthy.append(n)
            n_load = load(uuid)
            if n_load >= limit(uuid):
                continue
            below += 1
            if has_enough_space(n, data_size, self.min_free_space):
                loads[id(n)] = n_load
                usable.append(n)
        if len(healthy) < count:
            raise SCMException(
                ResultCodes.FAILED_TO_FIND_SUITABLE_NODE,
                f"Pipeline creation failed due to no sufficient healthy datanodes. Required {count}. "
                f"Found {len(healthy)}. Excluded {len(excluded)}.",
            )
        if below < count:
            raise SCMException(
                ResultCodes.FAILED_TO_FIND_SUITABLE_NODE,
                f"Pipeline creation failed because nodes are engaged in other pipelines and every node can only "
                f"be engaged in max {max((limit(n.uuid) for n in healthy), default=0)} pipelines. Required {count}. "
                f"Found {below}. Excluded: {len(excluded)}.",
            )
        if len(usable) < count:
            raise SCMException(
                ResultCodes.FAILED_TO_FIND_NODES_WITH_SPACE,
                f"Unable to find enough nodes that meet the space requirement of {data_size} bytes for data. "
                f"Required {count}. Found {len(usable)}.",
            )
        shuffled = list(usable)
        self._rng.shuffle(shuffled)
        ordered = sorted(shuffled, key=lambda n: loads[id(n)])
        wanted = set(favored)
        anchor = next((n for n in ordered if n.uuid in wanted), ordered[0]) if wanted else ordered[0]
        chosen = [anchor]
        rest = [n for n in ordered if n is not anchor]
        rack = anchor.rack
        # each pick is the first of the rest (least loaded first) that fits: scans stop at it
        if count > 1:
            second = next((n for n in rest if n.rack != rack), rest[0])
            chosen.append(second)
            rest.remove(second)
        while len(chosen) < count:
            pick = next((n for n in rest if n.rack == rack), rest[0])
            chosen.append(pick)
            rest.remove(pick)
        return chosen


PIPELINE_POLICIES: dict[str, type[PipelinePlacementPolicy]] = {PipelinePlacementPolicy.name: PipelinePlacementPolicy}


class LeaderChoosePolicy(Protocol):
    def choose_leader(self, members: Sequence[str], leader_count: Callable[[str], int]) -> str | None:
        """The member suggested as the new pipeline's leader, or None to let Ratis elect one."""
        ...


class MinLeaderCountChoosePolicy:
    """The member that is the suggested leader of the fewest pipelines (the first such in member order)."""

    name: ClassVar[str] = groups.MIN_LEADER_COUNT

    def choose_leader(self, members: Sequence[str], leader_count: Callable[[str], int]) -> str | None:
        if not members:
            return None
        return min(members, key=leader_count)


class DefaultLeaderChoosePolicy:
    """No suggestion: every member gets the same Raft priority and Ratis elects."""

    name: ClassVar[str] = groups.DEFAULT_LEADER

    def choose_leader(self, members: Sequence[str], leader_count: Callable[[str], int]) -> str | None:
        return None


def leader_choose_policy(class_name: str) -> LeaderChoosePolicy:
    if class_name == DefaultLeaderChoosePolicy.name:
        return DefaultLeaderChoosePolicy()
    return MinLeaderCountChoosePolicy()
