"""The nemesis really does what it says: fault rules are built right, and a partition
installed through the admin RPC isolates a real leader process."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from scm_server.verify.kvcluster import Fault, KvCluster, wait_for


class _Capture(KvCluster):
    def __init__(self, workdir: Path, size: int) -> None:
        super().__init__(workdir, size)
        self.installed: dict[int, list[Fault]] = {}

    def reachable(self) -> list[int]:
        return list(range(self.size))

    async def _set_faults_best_effort(self, i: int, faults: object, seed: int) -> bool:
        self.installed[i] = list(faults)  # type: ignore[call-overload]
        return True


async def test_cut_both_ways_merges_into_one_rule_per_peer(tmp_path: Path) -> None:
    c = _Capture(tmp_path, 3)
    await c.cut([(0, 2), (2, 0), (1, 2)])
    assert c.installed[0] == [Fault(peer="n3", cut_outbound=True, cut_inbound=True)]
    assert c.installed[1] == [Fault(peer="n3", cut_outbound=True)]
    assert sorted(c.installed[2], key=lambda f: f.peer) == [
        Fault(peer="n1", cut_outbound=True, cut_inbound=True),
        Fault(peer="n2", cut_inbound=True),
    ]


async def test_partition_cuts_only_across_groups(tmp_path: Path) -> None:
    c = _Capture(tmp_path, 5)
    await c.partition([[0, 1], [2, 3, 4]])
    assert {f.peer for f in c.installed[0]} == {"n3", "n4", "n5"}
    assert {f.peer for f in c.installed[3]} == {"n1", "n2"}
    assert all(f.cut_inbound and f.cut_outbound for rules in c.installed.values() for f in rules)


@pytest.mark.timeout(120)
async def test_partitioned_leader_is_replaced_and_rejoins(tmp_path: Path) -> None:
    cluster = KvCluster(tmp_path / "c", 3, fault_injection=True)
    try:
        await cluster.start()
        old = await cluster.wait_leader()
        old_term = (await cluster.status(old)).term
        others = [i for i in range(3) if i != old]
        await cluster.partition([[old], others])
        new_leader: list[int] = []

        async def replaced() -> bool:
            for i in others:
                st = await cluster.status(i)
                if st.role == "LEADER" and st.term > old_term:
                    new_leader.append(i)
                    return True
            return False

        await wait_for(replaced, 20, "the majority side to elect a new leader")
        client = cluster.client(timeout=10)
        t0 = time.monotonic()
        await client.put("k", "during-partition")
        assert time.monotonic() - t0 < 10
        # the isolated old leader cannot have committed anything new: with check-quorum it
        # steps down, and it never learns the majority's write while cut off
        old_status = await cluster.status(old)
        assert old_status.commit_index < (await cluster.status(new_leader[-1])).commit_index
        await cluster.heal_network()

        async def caught_up() -> bool:
            st_old = await cluster.status(old)
            st_new = await cluster.status(new_leader[-1])
            return st_old.role != "LEADER" and st_old.applied_index >= st_new.commit_index

        await wait_for(caught_up, 20, "the old leader to rejoin as a follower and catch up")
        assert await client.get("k") == "during-partition"
    finally:
        await cluster.stop()
