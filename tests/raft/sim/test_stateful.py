"""Hypothesis stateful testing of the simulated Raft cluster (with shrinking).

Hypothesis chooses the actions (which node ticks, which in-flight message is delivered,
dropped, duplicated or delayed, crashes, restarts, pauses, partitions, membership changes,
transfers, compactions) and their arguments; every action is a simulation step with the
incremental invariants of :mod:`.invariants` checked after it, and the ``@invariant`` methods
below re-check the core properties *directly* (pairwise over all nodes, not incrementally), which
also cross-checks the incremental checker. Teardown heals every fault and requires the cluster to
converge (liveness) and keep every acknowledged write.

A failure is shrunk to a minimal action sequence; Hypothesis prints it as a reproducible program.
``make test`` runs a derandomized, bounded number of examples; the soak tier runs many more.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from scm_server.raft.core.types import EntryType, StateRole

from .cluster import Cluster, SimNode, storage_term
from .invariants import InvariantViolation
from .walk import Walk

IDX = st.integers(min_value=0, max_value=1_000)


class RaftClusterMachine(RuleBasedStateMachine):
    c: Cluster
    walk: Walk

    @initialize(seed=st.integers(min_value=0, max_value=2**31), n=st.sampled_from([3, 5]))
    def setup(self, seed: int, n: int) -> None:
        self.c = Cluster(seed, n)
        self.walk = Walk(self.c)

    # ---- helpers ----

    def _node(self, i: int, pool: list[str]) -> str | None:
        return pool[i % len(pool)] if pool else None

    def _msg(self, k: int) -> int | None:
        n = len(self.c.net.in_flight)
        return k % n if n else None

    # ---- rules: time and the network ----

    @rule(i=IDX)
    def tick(self, i: int) -> None:
        nid = self._node(i, self.c.active_ids())
        if nid is not None:
            self.c.tick(nid)

    @rule(k=IDX)
    def deliver(self, k: int) -> None:
        i = self._msg(k)
        if i is not None:
            self.c.deliver_index(i)

    @rule(k=IDX)
    def drop(self, k: int) -> None:
        i = self._msg(k)
        if i is not None:
            self.c.drop_index(i)

    @rule(k=IDX)
    def duplicate(self, k: int) -> None:
        i = self._msg(k)
        if i is not None:
            self.c.duplicate_index(i)

    @rule(k=IDX, steps=st.integers(min_value=1, max_value=60))
    def delay(self, k: int, steps: int) -> None:
        i = self._msg(k)
        if i is not None:
            self.c.delay_index(i, steps)

    @rule(steps=st.integers(min_value=1, max_value=40))
    def run_a_while(self, steps: int) -> None:
        """A burst of ticks and in-order deliveries (lets elections and replication complete)."""
        for _ in range(steps):
            if self.c.rng.random() < 0.35:
                self.walk.tick()
            else:
                self.c.deliver_one()

    # ---- rules: clients ----

    @rule(i=IDX, at_leader=st.booleans())
    def propose(self, i: int, at_leader: bool) -> None:
        lead = self.c.leader()
        nid = lead.id if at_leader and lead is not None and lead.active else self._node(i, self.c.active_ids())
        if nid is not None:
            self.c.propose(nid)

    @rule(i=IDX, at_leader=st.booleans())
    def read(self, i: int, at_leader: bool) -> None:
        lead = self.c.leader()
        nid = lead.id if at_leader and lead is not None and lead.active else self._node(i, self.c.active_ids())
        if nid is not None:
            self.c.read(nid)

    # ---- rules: process faults ----

    @rule(i=IDX, lose=st.sampled_from([None, True, False]))
    def crash(self, i: int, lose: bool | None) -> None:
        nid = self._node(i, self.c.up_ids())
        if nid is not None:
            self.c.crash(nid, lose_unsynced=lose)

    @rule(i=IDX)
    def restart(self, i: int) -> None:
        down = [nid for nid, n in self.c.nodes.items() if n.raw is None and not n.retired]
        nid = self._node(i, down)
        if nid is not None:
            self.c.restart(nid)

    @rule(i=IDX)
    def pause(self, i: int) -> None:
        nid = self._node(i, self.c.active_ids())
        if nid is not None:
            self.c.pause(nid)

    @rule(i=IDX)
    def resume(self, i: int) -> None:
        paused = [nid for nid, n in self.c.nodes.items() if n.paused and n.up]
        nid = self._node(i, paused)
        if nid is not None:
            self.c.resume(nid)

    @rule(i=IDX, steps=st.integers(min_value=1, max_value=30))
    def slow_disk(self, i: int, steps: int) -> None:
        nid = self._node(i, self.c.active_ids())
        if nid is not None:
            self.c.stall_disk(nid, steps)

    @rule(i=IDX, keep=st.integers(min_value=0, max_value=3))
    def compact(self, i: int, keep: int) -> None:
        nid = self._node(i, self.c.up_ids())
        if nid is not None:
            self.c.compact(nid, keep)

    # ---- rules: partitions ----

    @rule(kind=st.sampled_from(["halves", "isolate", "one-way", "bridge", "ring", "isolate-leader"]), rot=IDX)
    def partition(self, kind: str, rot: int) -> None:
        ids = [nid for nid, n in self.c.nodes.items() if not n.retired]
        r = rot % len(ids)
        ids = ids[r:] + ids[:r]
        if kind == "halves":
            self.c.partition([ids[: len(ids) // 2], ids[len(ids) // 2 :]])
        elif kind == "isolate":
            self.c.isolate(ids[0])
        elif kind == "one-way" and len(ids) > 1:
            self.c.cut(ids[0], ids[1])
        elif kind == "bridge" and len(ids) >= 3:
            self.c.bridge(ids)
        elif kind == "ring" and len(ids) == 5:
            self.c.majorities_ring(ids)
        elif kind == "isolate-leader":
            lead = self.c.leader()
            if lead is not None:
                self.c.isolate(lead.id)

    @rule()
    def heal(self) -> None:
        self.c.heal()

    # ---- rules: membership and leadership ----

    @precondition(lambda self: self.c.leader() is not None)
    @rule(op=st.sampled_from(["add", "promote", "remove", "remove-leader"]), i=IDX)
    def membership(self, op: str, i: int) -> None:
        lead = self.c.leader()
        assert lead is not None
        cs = lead.storage.initial_state()[1]
        alive = [nid for nid, n in self.c.nodes.items() if not n.retired]
        if op == "add" and len(cs.members()) < 6 and len(alive) < 8:
            self.c.add_learner(lead.id)
        elif op == "promote" and cs.learners and len(cs.voters) < 5:
            self.c.promote(lead.id, cs.learners[i % len(cs.learners)])
        elif op == "remove" and len(cs.voters) > 3:
            self.c.remove(lead.id, cs.voters[i % len(cs.voters)])
        elif op == "remove-leader" and len(cs.voters) > 3:
            self.c.remove(lead.id, lead.id)

    @precondition(lambda self: self.c.leader() is not None)
    @rule(i=IDX)
    def transfer(self, i: int) -> None:
        lead = self.c.leader()
        assert lead is not None
        voters = [v for v in lead.storage.initial_state()[1].voters if v != lead.id]
        if voters:
            self.c.transfer(lead.id, voters[i % len(voters)])

    @rule(i=IDX)
    def campaign(self, i: int) -> None:
        nid = self._node(i, self.c.active_ids())
        if nid is not None:
            self.c.campaign(nid)

    # ---- direct (non-incremental) invariants ----

    @invariant()
    def logs_match_pairwise(self) -> None:
        """Log matching, checked directly: equal (index, term) on two nodes => equal prefixes."""
        nodes = [n for n in self.c.nodes.values() if n.raw is not None]
        for a_i, a in enumerate(nodes):
            for b in nodes[a_i + 1 :]:
                _check_pair(self.c, a, b)

    @invariant()
    def applied_sequences_agree(self) -> None:
        """State machine safety, checked directly: applied values agree wherever both nodes applied."""
        nodes = list(self.c.nodes.values())
        for a_i, a in enumerate(nodes):
            for b in nodes[a_i + 1 :]:
                upto = min(a.sm.live.index, b.sm.live.index)
                for idx, data in a.sm.values.items():
                    if idx <= upto and idx in b.sm.values and b.sm.values[idx] != data:
                        raise InvariantViolation(f"{a.id} and {b.id} applied different values at {idx}")

    @invariant()
    def one_leader_per_term_now(self) -> None:
        terms: dict[int, str] = {}
        for n in self.c.nodes.values():
            if n.up and n.role == StateRole.LEADER and terms.setdefault(n.hs.term, n.id) != n.id:
                raise InvariantViolation(f"two leaders in term {n.hs.term}")

    def teardown(self) -> None:
        if hasattr(self, "c"):
            self.walk.finish()


def _check_pair(c: Cluster, a: SimNode, b: SimNode) -> None:
    sa, sb = a.storage, b.storage
    lo = max(sa.first_index(), sb.first_index())
    hi = min(sa.last_index(), sb.last_index())
    # the highest common index where the terms agree: everything from lo up to it must be equal
    top = None
    for i in range(hi, lo - 1, -1):
        ta = storage_term(sa, i)
        if ta is not None and ta == storage_term(sb, i):
            top = i
            break
    if top is None:
        return
    ea = sa.entries(lo, top + 1)
    eb = sb.entries(lo, top + 1)
    for x, y in zip(ea, eb, strict=True):
        if x != y:
            raise InvariantViolation(
                f"log matching: {a.id} and {b.id} agree on ({top}, term) but differ at {x.index}: {x} vs {y}\n"
                f"{c.describe_failure()}"
            )
        if x.type == EntryType.CONF_CHANGE and x.data != y.data:
            raise InvariantViolation(f"conf entries differ at {x.index}")


SOAK = os.environ.get("SIM_SOAK_HYPOTHESIS_EXAMPLES")

TestRaftCluster = RaftClusterMachine.TestCase
TestRaftCluster.settings = settings(
    max_examples=60,
    stateful_step_count=60,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.mark.soak
@pytest.mark.timeout(4 * 3600)  # a long run by design; the default 300 s applies to make test
def test_stateful_soak() -> None:
    """make soak: many more (random, not derandomized) examples and longer action sequences.

    ``SIM_SOAK_HYPOTHESIS_EXAMPLES`` sets the number of examples (default 1,500).
    """
    examples = int(SOAK or 1_500)
    run_state_machine_as_test(
        RaftClusterMachine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=200,
            derandomize=False,
            database=None,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


@pytest.mark.parametrize("case_name", ["vote_not_cleared_same_term", "stale_message_commit_monotonic"])
def test_stateful_machine_catches_a_broken_core(case_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state machine itself (not a scripted scenario) finds deliberately broken cores.

    Generation only: shrinking a failure is what Hypothesis does on a real failure, but it can
    take minutes on a loaded machine, so this check stops at the first counterexample.
    """
    from .cluster import STATS
    from .test_regressions import CASES

    case = next(c for c in CASES if c.name == case_name)
    assert case.mutate is not None
    case.mutate(monkeypatch)
    with pytest.raises(InvariantViolation):
        run_state_machine_as_test(
            RaftClusterMachine,
            settings=settings(
                max_examples=60,
                stateful_step_count=60,
                derandomize=True,
                database=None,
                deadline=None,
                phases=[Phase.generate],
                report_multiple_bugs=False,
                suppress_health_check=list(HealthCheck),
            ),
        )
    STATS["violations_expected"] += 1
