"""Small helpers for white-box tests of one Raft node."""

from __future__ import annotations

from scm_server.raft.core.rawnode import RawNode
from scm_server.raft.core.storage import MemoryStorage
from scm_server.raft.core.types import ConfState, Entry, HardState, Message, MessageType

from .cluster import FixedRandom

MT = MessageType


def msg(t: MessageType, frm: str, to: str, term: int, **kw: object) -> Message:
    return Message(t, to, frm, term, **kw)  # type: ignore[arg-type]


def ents(*terms: int, start: int = 1) -> list[Entry]:
    """Entries with the given terms at indexes start, start+1, ..."""
    return [Entry(term=t, index=start + i) for i, t in enumerate(terms)]


def node_with_log(
    nid: str,
    voters: tuple[str, ...],
    terms: tuple[int, ...] = (),
    *,
    term: int | None = None,
    vote: str = "",
    commit: int = 0,
    learners: tuple[str, ...] = (),
    rng_offset: int = 0,
    **cfg: object,
) -> tuple[RawNode, MemoryStorage]:
    from scm_server.raft.core.rawnode import Config

    st = MemoryStorage(ConfState(voters=voters, learners=learners))
    st.append(ents(*terms))
    t = term if term is not None else (terms[-1] if terms else 0)
    st.set_hard_state(HardState(term=t, vote=vote, commit=commit))
    return RawNode(Config(id=nid, **cfg), st, FixedRandom(rng_offset)), st  # type: ignore[arg-type]


def persist(node: RawNode, st: MemoryStorage) -> list[Message]:
    """Run the driver's Ready cycle (persist, collect messages, advance) until nothing is ready."""
    out: list[Message] = []
    while node.has_ready():
        rd = node.ready()
        if rd.snapshot is not None:
            st.apply_snapshot(rd.snapshot)
        st.append(rd.entries)
        if rd.hard_state is not None:
            st.set_hard_state(rd.hard_state)
        out.extend(rd.messages)
        node.advance(rd)
    return out


def of_type(msgs: list[Message], t: MessageType) -> list[Message]:
    return [m for m in msgs if m.type == t]
