"""A deterministic, fault-injecting network for the Raft simulation.

Why it exists: the pure core (``scm_server.raft.core``) only produces and consumes
:class:`~scm_server.raft.core.types.Message` values, so a simulated network is just a bag of
messages in flight plus a connectivity relation. Every choice (which message goes next, which
is dropped, duplicated or delayed) is made by the cluster's single seeded ``random.Random``, so a
run is reproduced exactly by its seed.

Where it sits: :class:`~tests.raft.sim.cluster.Cluster` owns one :class:`Network`; nodes' Ready
messages are handed to :meth:`Network.send` *after* the Ready's write (types.py order), and the
cluster's event loop calls :meth:`Network.take` to deliver one.

Faults modelled here: loss (drop), duplication, reordering (any in-flight message may be
picked, with a bias towards old ones so that progress happens), delay (a message is held back
for some steps), and link cuts. A cut is one-way (``src -> dst``), which gives asymmetric
partitions; symmetric partitions, Jepsen's ``bridge`` and ``majorities-ring`` are built from
one-way cuts. Messages already in flight on a link that gets cut are lost when they would be
delivered (a TCP connection reset), and messages sent over a cut link are lost at once.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from scm_server.raft.core.types import Message, NodeId


@dataclass(slots=True)
class Envelope:
    seq: int  # send order, unique per network
    msg: Message
    not_before: int = 0  # step number before which the message cannot be delivered (delay)


class Network:
    """Messages in flight between simulated nodes, and which links currently work."""

    def __init__(self) -> None:
        self.in_flight: list[Envelope] = []
        self.cut_links: set[tuple[NodeId, NodeId]] = set()  # one-way: (src, dst) is cut
        self._seq = 0
        self.sent = 0
        self.delivered = 0
        self.dropped = 0

    # ---- connectivity ----

    def connected(self, src: NodeId, dst: NodeId) -> bool:
        return (src, dst) not in self.cut_links

    def cut(self, src: NodeId, dst: NodeId) -> None:
        """One-way cut: messages from src to dst are lost (dst -> src still works)."""
        if src != dst:
            self.cut_links.add((src, dst))

    def isolate(self, node: NodeId, others: Iterable[NodeId]) -> None:
        for other in others:
            self.cut(node, other)
            self.cut(other, node)

    def partition(self, groups: Sequence[Sequence[NodeId]]) -> None:
        """Symmetric partition: nodes talk only within their own group (replaces existing cuts)."""
        self.heal()
        for i, ga in enumerate(groups):
            for gb in groups[i + 1 :]:
                for a in ga:
                    for b in gb:
                        self.cut(a, b)
                        self.cut(b, a)

    def bridge(self, nodes: Sequence[NodeId]) -> None:
        """Jepsen's bridge: two halves, plus the middle node connected to both."""
        nodes = list(nodes)
        mid = len(nodes) // 2
        left, bridge_node, right = nodes[:mid], nodes[mid], nodes[mid + 1 :]
        self.heal()
        for a in left:
            for b in right:
                self.cut(a, b)
                self.cut(b, a)
        del bridge_node  # connected to everyone

    def majorities_ring(self, nodes: Sequence[NodeId]) -> None:
        """Jepsen's majorities-ring: every node sees a majority, but no two see the same one.

        Nodes sit on a ring and each keeps links only to its ``k`` nearest neighbours on either
        side, where ``2k + 1`` is a majority (5 nodes: each sees itself and its two ring
        neighbours, and the five visible sets are all different).
        """
        nodes = list(nodes)
        n = len(nodes)
        k = (n // 2 + 1) // 2
        self.heal()
        for i, a in enumerate(nodes):
            for j, b in enumerate(nodes):
                if i != j and min((i - j) % n, (j - i) % n) > k:
                    self.cut(a, b)

    def heal(self) -> None:
        self.cut_links.clear()

    # ---- messages ----

    def send(self, msg: Message, now: int) -> None:
        self.sent += 1
        if not self.connected(msg.frm, msg.to):
            self.dropped += 1
            return
        self._seq += 1
        self.in_flight.append(Envelope(self._seq, msg, now))

    def pick(self, rng: random.Random, now: int, deliverable: set[NodeId], reorder: bool) -> int | None:
        """Index of an in-flight message to deliver next, or None.

        Without ``reorder`` the oldest deliverable message goes first (FIFO over the whole
        network); with it, any deliverable message may go, biased towards old ones.
        """
        flight = self.in_flight
        n = len(flight)
        if n == 0:
            return None
        if reorder:
            start = min(rng.randrange(n), rng.randrange(n))
        else:
            start = 0
        for k in range(n):
            i = (start + k) % n
            env = flight[i]
            if env.not_before <= now and env.msg.to in deliverable:
                return i
        return None

    def take(self, i: int) -> Message | None:
        """Remove the i-th in-flight message; None if its link is cut now (it is lost)."""
        env = self.in_flight.pop(i)
        msg = env.msg
        if not self.connected(msg.frm, msg.to):
            self.dropped += 1
            return None
        self.delivered += 1
        return msg

    def drop(self, i: int) -> Message:
        self.dropped += 1
        return self.in_flight.pop(i).msg

    def duplicate(self, i: int) -> Message:
        env = self.in_flight[i]
        self._seq += 1
        self.in_flight.append(Envelope(self._seq, env.msg, env.not_before))
        return env.msg

    def delay(self, i: int, until: int) -> Message:
        env = self.in_flight[i]
        env.not_before = max(env.not_before, until)
        return env.msg

    def drop_to(self, node: NodeId) -> list[Message]:
        """Lose every message in flight to ``node`` (it crashed: its connections are gone)."""
        lost = [e.msg for e in self.in_flight if e.msg.to == node]
        self.in_flight = [e for e in self.in_flight if e.msg.to != node]
        self.dropped += len(lost)
        return lost

    def clear(self) -> None:
        self.dropped += len(self.in_flight)
        self.in_flight.clear()
