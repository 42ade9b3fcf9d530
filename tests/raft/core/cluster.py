"""A tiny synchronous cluster for the core's unit and paper tests (not the randomized simulator).

Each node is a RawNode over a MemoryStorage. ``process(id)`` plays the driver: it persists a
Ready, collects its messages, applies committed entries and advances. ``deliver`` steps
messages breadth-first until the network is quiet, honouring dropped links.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from scm_server.raft.core.rawnode import Config, RawNode
from scm_server.raft.core.storage import MemoryStorage
from scm_server.raft.core.types import ConfState, Entry, EntryType, Message, MessageType, NodeId, ReadState


class FixedRandom:
    """randrange always returns start + offset (clamped): deterministic election timeouts."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset

    def randrange(self, start: int, stop: int) -> int:
        return min(start + self.offset, stop - 1)


class SeqRandom:
    """randrange returns successive values of a sequence (wrapped into range)."""

    def __init__(self, values: Iterable[int]) -> None:
        self.values = list(values)
        self.i = 0

    def randrange(self, start: int, stop: int) -> int:
        v = self.values[self.i % len(self.values)]
        self.i += 1
        return start + v % (stop - start)


def ids(n: int) -> tuple[str, ...]:
    return tuple(str(i) for i in range(1, n + 1))


def new_node(
    nid: str,
    voters: tuple[str, ...],
    *,
    learners: tuple[str, ...] = (),
    storage: MemoryStorage | None = None,
    rng_offset: int = 0,
    **cfg: object,
) -> tuple[RawNode, MemoryStorage]:
    st = storage or MemoryStorage(ConfState(voters=voters, learners=learners))
    config = Config(id=nid, **cfg)  # type: ignore[arg-type]
    return RawNode(config, st, FixedRandom(rng_offset)), st


@dataclass
class Cluster:
    nodes: dict[NodeId, RawNode] = field(default_factory=dict)
    storages: dict[NodeId, MemoryStorage] = field(default_factory=dict)
    applied: dict[NodeId, list[Entry]] = field(default_factory=dict)
    dropped: set[tuple[NodeId, NodeId]] = field(default_factory=set)
    drop_types: set[MessageType] = field(default_factory=set)
    delivered: list[Message] = field(default_factory=list)
    read_states: dict[NodeId, list[ReadState]] = field(default_factory=dict)
    filter: Callable[[Message], bool] | None = None  # returns True to drop a message

    @staticmethod
    def of(n: int, **cfg: object) -> Cluster:
        c = Cluster()
        vs = ids(n)
        for i, nid in enumerate(vs):
            offset = cfg.pop("stagger", None)
            node, st = new_node(nid, vs, rng_offset=i if offset else 0, **cfg)
            if offset:
                cfg["stagger"] = offset
            c.add(nid, node, st)
        return c

    def add(self, nid: NodeId, node: RawNode, st: MemoryStorage) -> None:
        self.nodes[nid] = node
        self.storages[nid] = st
        self.applied.setdefault(nid, [])

    def process(self, nid: NodeId) -> list[Message]:
        node = self.nodes[nid]
        st = self.storages[nid]
        out: list[Message] = []
        while node.has_ready():
            rd = node.ready()
            if rd.snapshot is not None:
                st.apply_snapshot(rd.snapshot)
            st.append(rd.entries)
            if rd.hard_state is not None:
                st.set_hard_state(rd.hard_state)
            out.extend(rd.messages)
            self.applied[nid].extend(rd.committed_entries)
            self.read_states.setdefault(nid, []).extend(rd.read_states)
            node.advance(rd)
        return out

    def blocked(self, m: Message) -> bool:
        if self.filter is not None and self.filter(m):
            return True
        return (m.frm, m.to) in self.dropped or m.type in self.drop_types or m.to not in self.nodes

    def deliver(self, msgs: Iterable[Message], limit: int = 100_000) -> None:
        queue = list(msgs)
        steps = 0
        while queue:
            steps += 1
            assert steps < limit, "network did not quiesce"
            m = queue.pop(0)
            if self.blocked(m):
                continue
            self.delivered.append(m)
            self.nodes[m.to].step(m)
            queue.extend(self.process(m.to))

    def step_one(self, queue: list[Message]) -> Message | None:
        """Deliver the first message of queue (appending the replies); None if it was dropped."""
        m = queue.pop(0)
        if self.blocked(m):
            return None
        self.delivered.append(m)
        self.nodes[m.to].step(m)
        queue.extend(self.process(m.to))
        return m

    def settle(self) -> None:
        """Process every node's Ready and deliver until quiet."""
        msgs: list[Message] = []
        for nid in list(self.nodes):
            msgs.extend(self.process(nid))
        self.deliver(msgs)

    def campaign(self, nid: NodeId) -> None:
        self.nodes[nid].campaign()
        self.deliver(self.process(nid))

    def propose(self, nid: NodeId, data: bytes) -> int:
        idx = self.nodes[nid].propose(data)
        self.deliver(self.process(nid))
        return idx

    def tick(self, nid: NodeId, n: int = 1) -> None:
        for _ in range(n):
            self.nodes[nid].tick()
        self.deliver(self.process(nid))

    def cut(self, a: NodeId, b: NodeId) -> None:
        self.dropped.add((a, b))
        self.dropped.add((b, a))

    def isolate(self, a: NodeId) -> None:
        for b in self.nodes:
            if b != a:
                self.cut(a, b)

    def heal(self) -> None:
        self.dropped.clear()
        self.drop_types.clear()

    def leader(self) -> NodeId | None:
        from scm_server.raft.core.types import StateRole

        leaders = [nid for nid, n in self.nodes.items() if n.raft.role == StateRole.LEADER]
        return leaders[0] if len(leaders) == 1 else None

    def data_applied(self, nid: NodeId) -> list[bytes]:
        return [e.data for e in self.applied[nid] if e.type == EntryType.NORMAL and e.data]
