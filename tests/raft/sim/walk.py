"""Seeded random walks over a simulated cluster: one weighted random action per step.

Why it exists: the Hypothesis state machine (``test_stateful.py``) explores and shrinks, but
costs more per step; a plain random walk gets most simulated steps per second and is what the
soak run scales up. Both use the same :class:`~.cluster.Cluster` actions and invariants.

A walk ends by healing every fault and requiring the cluster to converge (a leader commits a
fresh write on every member within a bounded number of rounds: the liveness check), then the
final durability check (every acknowledged write is in every node's applied sequence).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable

from .cluster import Cluster, SimNode, SimOptions


def _conf_of(node: SimNode) -> tuple[tuple[str, ...], tuple[str, ...]]:
    cs = node.storage.initial_state()[1]
    return cs.voters, cs.learners


class Walk:
    """Chooses and performs random actions on a cluster (fault mix tuned for coverage and liveness)."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        membership: bool = True,
        faults: bool = True,
        boost: dict[str, float] | None = None,
    ) -> None:
        self.c = cluster
        self.rng = cluster.rng
        actions: list[tuple[float, Callable[[], None]]] = [
            (26.0, self.tick),
            (44.0, self.deliver),
            (8.0, self.deliver_reordered),
            (6.0, self.propose),
            (2.0, self.read),
            (1.0, self.compact),
            (0.3, self.transfer),
            (0.15, self.campaign),
            (0.3, self.unreachable),
            (0.05, self.forget_leader),
        ]
        if faults:
            actions += [
                (2.5, self.drop),
                (1.5, self.duplicate),
                (1.5, self.delay),
                (0.35, self.crash),
                (2.0, self.restart),
                (0.3, self.pause),
                (0.5, self.resume),
                (0.4, self.stall),
                (0.4, self.partition),
                (1.2, self.heal),
            ]
        if membership:
            actions.append((0.5, self.membership))
        if boost:  # multiply the weight of some actions, e.g. {"crash": 5} for a crash-heavy walk
            actions = [(w * boost.get(fn.__name__, 1.0), fn) for w, fn in actions]
        self._fns = [fn for _, fn in actions]
        self._cum = list(itertools.accumulate(w for w, _ in actions))

    def step(self) -> None:
        r = self.rng.random() * self._cum[-1]
        self._fns[bisect.bisect_right(self._cum, r)]()

    def run(self, steps: int) -> None:
        c = self.c
        end = c.step_no + steps
        with c.report_exceptions():
            while c.step_no < end:
                self.step()

    def finish(self, max_rounds: int = 300) -> None:
        with self.c.report_exceptions():
            self.c.heal_all()
            self.c.converge(max_rounds)
            self.c.final_checks()

    # ---- helpers ----

    def _any(self, ids: list[str]) -> str | None:
        return ids[self.rng.randrange(len(ids))] if ids else None

    def _live(self) -> list[str]:
        return self.c.active_ids()

    def _leader_or_any(self) -> str | None:
        lead = self.c.leader()
        if lead is not None and lead.active and self.rng.random() < 0.85:
            return lead.id
        return self._any(self._live())

    # ---- actions ----

    def tick(self) -> None:
        nid = self._any(self._live())
        if nid is None:
            self.restart()
        else:
            self.c.tick(nid)

    def deliver(self) -> None:
        self.c.deliver_one(reorder=False)

    def deliver_reordered(self) -> None:
        self.c.deliver_one(reorder=True)

    def _msg_index(self) -> int | None:
        n = len(self.c.net.in_flight)
        return self.rng.randrange(n) if n else None

    def drop(self) -> None:
        i = self._msg_index()
        if i is None:
            self.tick()
        else:
            self.c.drop_index(i)

    def duplicate(self) -> None:
        i = self._msg_index()
        if i is None:
            self.tick()
        else:
            self.c.duplicate_index(i)

    def delay(self) -> None:
        i = self._msg_index()
        if i is None:
            self.tick()
        else:
            self.c.delay_index(i, self.rng.randrange(5, 80))

    def propose(self) -> None:
        nid = self._leader_or_any()
        if nid is not None:
            self.c.propose(nid)
        else:
            self.tick()

    def read(self) -> None:
        # Reads also go to nodes that merely *believe* they lead (a stale leader after a pause or
        # partition): exactly where an unconfirmed ReadIndex would return stale data.
        believers = [n.id for n in self.c.leaders() if n.active]
        if believers and self.rng.random() < 0.3:
            nid: str | None = believers[self.rng.randrange(len(believers))]
        else:
            nid = self._leader_or_any()
        if nid is not None:
            self.c.read(nid)
        else:
            self.tick()

    def compact(self) -> None:
        nid = self._any(self.c.up_ids())
        if nid is None:
            self.tick()
        else:
            self.c.compact(nid, keep=self.rng.randrange(0, 4))

    def transfer(self) -> None:
        lead = self.c.leader()
        if lead is None or not lead.active:
            self.tick()
            return
        voters = [v for v in _conf_of(lead)[0] if v != lead.id]
        target = self._any(voters)
        if target is None:
            self.tick()
        else:
            self.c.transfer(lead.id, target)

    def campaign(self) -> None:
        nid = self._any(self._live())
        if nid is None:
            self.tick()
        else:
            self.c.campaign(nid)

    def unreachable(self) -> None:
        nid = self._leader_or_any()
        peers = [p for p in self.c.node_ids() if p != nid]
        if nid is None or not peers:
            self.tick()
        else:
            self.c.report_unreachable(nid, peers[self.rng.randrange(len(peers))])

    def forget_leader(self) -> None:
        nid = self._any(self._live())
        if nid is None:
            self.tick()
        else:
            self.c.forget_leader(nid)

    def crash(self) -> None:
        nid = self._any(self.c.up_ids())
        if nid is None:
            self.tick()
        else:
            self.c.crash(nid)

    def restart(self) -> None:
        down = [nid for nid, n in self.c.nodes.items() if n.raw is None and not n.retired]
        nid = self._any(down)
        if nid is None:
            self.c.tick(self._any(self._live()) or self.c.node_ids()[0])
        else:
            self.c.restart(nid)

    def pause(self) -> None:
        nid = self._any(self._live())
        if nid is None:
            self.tick()
        else:
            self.c.pause(nid)

    def resume(self) -> None:
        paused = [nid for nid, n in self.c.nodes.items() if n.paused and n.up]
        nid = self._any(paused)
        if nid is None:
            self.tick()
        else:
            self.c.resume(nid)

    def stall(self) -> None:
        nid = self._any(self._live())
        if nid is None:
            self.tick()
        else:
            self.c.stall_disk(nid, self.rng.randrange(2, 30))

    def partition(self) -> None:
        c = self.c
        ids = [nid for nid, n in c.nodes.items() if not n.retired]
        self.rng.shuffle(ids)
        kind = self.rng.randrange(6)
        if kind == 0:
            cut = self.rng.randrange(1, len(ids)) if len(ids) > 1 else 1
            c.partition([ids[:cut], ids[cut:]])
        elif kind == 1:
            c.isolate(ids[0])
        elif kind == 2 and len(ids) > 1:
            c.cut(ids[0], ids[1])  # asymmetric: one direction only
        elif kind == 3 and len(ids) >= 3:
            c.bridge(ids)
        elif kind == 4 and len(ids) == 5:
            c.majorities_ring(ids)
        else:
            lead = c.leader()
            if lead is not None:
                c.isolate(lead.id)  # the classic: cut the leader off
            else:
                c.heal()

    def heal(self) -> None:
        self.c.heal()

    def membership(self) -> None:
        c = self.c
        lead = c.leader()
        if lead is None or not lead.active:
            self.tick()
            return
        voters, learners = _conf_of(lead)
        alive = [nid for nid, n in c.nodes.items() if not n.retired]
        choice = self.rng.randrange(3)
        if choice == 0 and len(voters) + len(learners) < 6 and len(alive) < 8:
            c.add_learner(lead.id)
        elif choice == 1 and learners and len(voters) < 5:
            c.promote(lead.id, learners[self.rng.randrange(len(learners))])
        elif choice == 2 and (len(voters) > 3 or learners):
            pool = list(learners) if learners and (len(voters) <= 3 or self.rng.random() < 0.3) else list(voters)
            c.remove(lead.id, pool[self.rng.randrange(len(pool))])
        else:
            self.tick()


# Option profiles: the same walk under different core settings (the default is SCM's: pre-vote and
# check-quorum on). "tight" sends one entry per APPEND with one in flight, so flow control,
# probing and the proposal bound are exercised hard.
PROFILES: dict[str, SimOptions] = {
    "default": SimOptions(),
    "plain": SimOptions(pre_vote=False, check_quorum=False),
    "prevote-only": SimOptions(pre_vote=True, check_quorum=False),
    "checkquorum-only": SimOptions(pre_vote=False, check_quorum=True),
    "tight": SimOptions(
        election_tick=5, heartbeat_tick=1, max_size_per_msg=1, max_inflight_msgs=1, max_uncommitted_entries=8
    ),
    "roomy": SimOptions(election_tick=20, heartbeat_tick=4, max_size_per_msg=1 << 20, max_inflight_msgs=64),
}


def run_walk(
    seed: int,
    steps: int,
    n: int = 3,
    *,
    trace: bool = False,
    options: SimOptions | None = None,
    boost: dict[str, float] | None = None,
    membership: bool = True,
    faults: bool = True,
) -> Cluster:
    """One seeded walk of ``steps`` actions, then heal, converge and the final checks."""
    c = Cluster(seed, n, trace=trace, options=options)
    w = Walk(c, membership=membership, faults=faults, boost=boost)
    w.run(steps)
    w.finish()
    return c


__all__ = ["Walk", "run_walk"]
