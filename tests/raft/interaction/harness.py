"""A scripted driver for the pure Raft core, with golden transcripts (like etcd's interaction tests).

A test file holds blocks of the form::

    # optional comment lines
    command arg key=value ...
    ----
    expected output (no blank lines; "ok" when empty)

The :class:`Env` plays every node's driver: it persists Readys into a MemoryStorage, queues
the messages on a network it prints as they are delivered, applies committed entries and
advances. Everything is deterministic (election timeouts are fixed at ``election_tick``), so
the output is the specification: review a diff of it like code.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from scm_server.raft.core.confchange import conf_state_after, describe
from scm_server.raft.core.rawnode import Config, RawNode, ReadOnlyOption
from scm_server.raft.core.storage import MemoryStorage
from scm_server.raft.core.types import (
    ConfChange,
    ConfChangeType,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Message,
    MessageType,
    ProposalDroppedError,
    Ready,
    Snapshot,
    SnapshotMetadata,
    StateRole,
)

MT = MessageType


class FirstValue:
    """Deterministic 'random' source: the randomized election timeout is always election_tick."""

    def randrange(self, start: int, stop: int) -> int:
        return start


# ------------------------------------------------------------------ formatting


def fmt_entry(e: Entry) -> str:
    head = f"{e.term}/{e.index}"
    if e.type == EntryType.CONF_CHANGE:
        cc = ConfChange.decode(e.data)
        kind = {ConfChangeType.ADD_NODE: "add", ConfChangeType.REMOVE_NODE: "remove"}.get(cc.type, "add-learner")
        return f"{head} conf({kind} {cc.node_id})"
    if e.data:
        return f'{head} "{e.data.decode(errors="replace")}"'
    return head


def fmt_entries(es: tuple[Entry, ...] | list[Entry]) -> str:
    return "[" + ", ".join(fmt_entry(e) for e in es) + "]"


def fmt_msg(m: Message) -> str:
    s = f"{m.frm}->{m.to} {m.type.name} term={m.term}"
    t = m.type
    if t == MT.APPEND:
        s += f" log={m.log_term}/{m.index} commit={m.commit}"
        if m.entries:
            s += " entries=" + fmt_entries(m.entries)
    elif t == MT.APPEND_RESP:
        s += f" index={m.index}"
        if m.reject:
            s += f" rejected hint={m.log_term}/{m.reject_hint}"
    elif t in (MT.VOTE, MT.PRE_VOTE):
        s += f" log={m.log_term}/{m.index}"
    elif t in (MT.VOTE_RESP, MT.PRE_VOTE_RESP):
        if m.reject:
            s += " rejected"
    elif t == MT.HEARTBEAT:
        s += f" commit={m.commit}"
    elif t == MT.SNAPSHOT and m.snapshot is not None:
        md = m.snapshot.metadata
        s += f" snapshot={md.term}/{md.index} {describe(md.conf_state)}"
    elif t == MT.READ_INDEX_RESP:
        s += f" index={m.index}"
    if m.context:
        s += f" ctx={m.context.decode(errors='replace')}"
    return s


def fmt_ready(rd: Ready) -> list[str]:
    out = [f"Ready must_sync={str(rd.must_sync).lower()}:"]
    if rd.soft_state is not None:
        out.append(f"  soft: {rd.soft_state.role.name} lead={rd.soft_state.leader or '0'}")
    if rd.hard_state is not None:
        hs = rd.hard_state
        out.append(f"  hard: term={hs.term} vote={hs.vote or '0'} commit={hs.commit}")
    if rd.entries:
        out.append("  entries: " + fmt_entries(rd.entries))
    if rd.snapshot is not None:
        md = rd.snapshot.metadata
        out.append(f"  snapshot: {md.term}/{md.index} {describe(md.conf_state)}")
    if rd.committed_entries:
        out.append("  committed: " + fmt_entries(rd.committed_entries))
    if rd.conf_state is not None:
        out.append(f"  conf: {describe(rd.conf_state)}")
    for rs in rd.read_states:
        out.append(f"  read-state: index={rs.index} ctx={rs.request_ctx.decode(errors='replace')}")
    if rd.messages:
        out.append("  messages:")
        out.extend("    " + fmt_msg(m) for m in rd.messages)
    return out


# ------------------------------------------------------------------ the environment


@dataclass
class NodeEnv:
    id: str
    config: Config
    storage: MemoryStorage
    node: RawNode | None
    applied: list[Entry] = field(default_factory=list)
    applied_snapshot: str = ""


class HarnessError(Exception):
    pass


class Env:
    def __init__(self) -> None:
        self.nodes: dict[str, NodeEnv] = {}
        self.queue: list[Message] = []
        self.partition: list[set[str]] | None = None
        self.log_level = "info"
        self.out: list[str] = []

    # ---- output helpers

    def emit(self, line: str) -> None:
        self.out.append(line)

    def flush_logs(self, nid: str, indent: str = "") -> None:
        ne = self.nodes[nid]
        if ne.node is None:
            return
        for line in ne.node.drain_logs():
            level = line.split(" ", 1)[0]
            if self.log_level == "none" or (self.log_level == "info" and level == "DEBUG"):
                continue
            self.emit(indent + line)

    def live(self, nid: str) -> RawNode:
        ne = self.nodes.get(nid)
        if ne is None:
            raise HarnessError(f"no node {nid}")
        if ne.node is None:
            raise HarnessError(f"node {nid} is crashed")
        return ne.node

    # ---- the driver

    def handle_ready(self, nid: str) -> None:
        ne = self.nodes[nid]
        node = self.live(nid)
        rd = node.ready()
        for line in fmt_ready(rd):
            self.emit(line)
        st = ne.storage
        if rd.snapshot is not None:
            st.apply_snapshot(rd.snapshot)
            md = rd.snapshot.metadata
            ne.applied, ne.applied_snapshot = [], f"snapshot {md.term}/{md.index} then "
        st.append(rd.entries)
        if rd.hard_state is not None:
            st.set_hard_state(rd.hard_state)
        # a message to a crashed node is lost (the transport could not connect)
        self.queue.extend(m for m in rd.messages if m.to in self.nodes and self.nodes[m.to].node is not None)
        ne.applied.extend(rd.committed_entries)
        node.advance(rd)
        self.flush_logs(nid)

    def blocked(self, m: Message) -> str | None:
        target = self.nodes.get(m.to)
        if target is None or target.node is None:
            return "node down"
        if self.partition is not None and not any(m.frm in g and m.to in g for g in self.partition):
            return "partition"
        return None

    def deliver(self, targets: set[str] | None, drop: set[str], types: set[str] | None) -> int:
        keep: list[Message] = []
        todo: list[Message] = []
        for m in self.queue:
            if (targets is None or m.to in targets) and (types is None or m.type.name in types):
                todo.append(m)
            else:
                keep.append(m)
        self.queue = keep
        for m in todo:
            why = "dropped" if m.to in drop else self.blocked(m)
            if why:
                self.emit(f"  {fmt_msg(m)} ({why})")
                continue
            self.emit(f"  {fmt_msg(m)}")
            self.live(m.to).step(m)
            self.flush_logs(m.to, "  ")
        return len(todo)

    # ---- commands

    def run(self, line: str) -> str:
        self.out = []
        parts = shlex.split(line)
        cmd, args = parts[0], parts[1:]
        pos = [a for a in args if "=" not in a]
        kw = dict(a.split("=", 1) for a in args if "=" in a)
        handler = getattr(self, "cmd_" + cmd.replace("-", "_"), None)
        if handler is None:
            raise HarnessError(f"unknown command {cmd!r}")
        handler(pos, kw)
        text = "\n".join(x for x in self.out if x.strip())
        return text or "ok"

    def cmd_log_level(self, pos: list[str], kw: dict[str, str]) -> None:
        self.log_level = pos[0]
        for ne in self.nodes.values():
            if ne.node is not None:
                ne.node.set_debug_logs(self.log_level == "debug")

    def cmd_add_nodes(self, pos: list[str], kw: dict[str, str]) -> None:
        n = int(pos[0])
        voters = _ids(kw.get("voters", ""))
        learners = _ids(kw.get("learners", ""))
        index = int(kw.get("index", "0"))
        cfg = {
            "pre_vote": kw.get("prevote", "true") == "true",
            "check_quorum": kw.get("checkquorum", "true") == "true",
            "max_inflight_msgs": int(kw.get("max-inflight", "256")),
            "max_size_per_msg": int(kw.get("max-size", str(1 << 20))),
            "max_uncommitted_entries": int(kw.get("max-uncommitted", "4096")),
            "read_only_option": ReadOnlyOption.LEASE_BASED if kw.get("read-only") == "lease" else ReadOnlyOption.SAFE,
        }
        conf = ConfState(voters=voters, learners=learners)
        start = len(self.nodes) + 1
        for i in range(start, start + n):
            nid = str(i)
            if index > 0:
                st = MemoryStorage()
                st.apply_snapshot(Snapshot(SnapshotMetadata(index=index, term=1, conf_state=conf)))
                st.set_hard_state(HardState(term=1, commit=index))
            else:
                st = MemoryStorage(conf)
            config = Config(id=nid, applied=index, **cfg)  # type: ignore[arg-type]
            node = RawNode(config, st, FirstValue())
            node.set_debug_logs(self.log_level == "debug")
            self.nodes[nid] = NodeEnv(nid, config, st, node)
            self.flush_logs(nid)

    def cmd_campaign(self, pos: list[str], kw: dict[str, str]) -> None:
        self.live(pos[0]).campaign()
        self.flush_logs(pos[0])

    def cmd_propose(self, pos: list[str], kw: dict[str, str]) -> None:
        try:
            idx = self.live(pos[0]).propose(pos[1].encode())
            self.emit(f"index {idx}")
        except ProposalDroppedError as e:
            self.emit(f"dropped: {e}")
        self.flush_logs(pos[0])

    def cmd_propose_conf_change(self, pos: list[str], kw: dict[str, str]) -> None:
        kinds = {"add": ConfChangeType.ADD_NODE, "remove": ConfChangeType.REMOVE_NODE, "add-learner": ConfChangeType.ADD_LEARNER}
        cc = ConfChange(kinds[pos[1]], pos[2], f"host{pos[2]}:9894")
        try:
            idx = self.live(pos[0]).propose_conf_change(cc)
            self.emit(f"index {idx}")
        except ProposalDroppedError as e:
            self.emit(f"dropped: {e}")
        self.flush_logs(pos[0])

    def cmd_process_ready(self, pos: list[str], kw: dict[str, str]) -> None:
        for nid in pos:
            if len(pos) > 1:
                self.emit(f"> {nid} handling Ready")
            self.handle_ready(nid)

    def cmd_deliver_msgs(self, pos: list[str], kw: dict[str, str]) -> None:
        targets = set(pos) or None
        drop = set(_ids(kw.get("drop", "")))
        types = set(kw["type"].split(",")) if "type" in kw else None
        self.deliver(targets, drop, types)

    def cmd_stabilize(self, pos: list[str], kw: dict[str, str]) -> None:
        ids = pos or sorted(self.nodes, key=int)
        for _ in range(1000):
            busy = False
            for nid in ids:
                ne = self.nodes[nid]
                if ne.node is not None and ne.node.has_ready():
                    busy = True
                    self.emit(f"> {nid} handling Ready")
                    self.handle_ready(nid)
            for nid in ids:
                if any(m.to == nid for m in self.queue):
                    busy = True
                    self.emit(f"> {nid} receiving messages")
                    self.deliver({nid}, set(), None)
            if not busy:
                return
        raise HarnessError("stabilize did not converge in 1000 rounds")

    def cmd_partition(self, pos: list[str], kw: dict[str, str]) -> None:
        groups = " ".join(pos).split("/")
        self.partition = [set(g.split()) for g in groups]
        self.emit("partition: " + " / ".join(" ".join(sorted(g, key=int)) for g in self.partition))

    def cmd_heal(self, pos: list[str], kw: dict[str, str]) -> None:
        """End the partition; messages in flight across it were lost, not delayed."""
        if self.partition is not None:
            lost = [m for m in self.queue if self.blocked(m) == "partition"]
            self.queue = [m for m in self.queue if self.blocked(m) != "partition"]
            if lost:
                self.emit(f"dropped {len(lost)} message(s) in flight across the partition")
        self.partition = None

    def cmd_crash(self, pos: list[str], kw: dict[str, str]) -> None:
        ne = self.nodes[pos[0]]
        ne.node = None  # volatile state (and anything not yet handed to storage) is gone
        self.queue = [m for m in self.queue if m.to != pos[0]]

    def cmd_restart(self, pos: list[str], kw: dict[str, str]) -> None:
        ne = self.nodes[pos[0]]
        if ne.node is not None:
            raise HarnessError(f"node {pos[0]} is running")
        # the harness state machine lives in memory: after a restart it starts from the snapshot
        applied = ne.storage.snapshot().metadata.index
        ne.applied, ne.applied_snapshot = [], ""
        ne.config = Config(**{**_config_dict(ne.config), "applied": applied})
        ne.node = RawNode(ne.config, ne.storage, FirstValue())
        ne.node.set_debug_logs(self.log_level == "debug")
        self.flush_logs(pos[0])

    def cmd_tick_election(self, pos: list[str], kw: dict[str, str]) -> None:
        node = self.live(pos[0])
        for _ in range(node.raft.randomized_election_timeout):
            node.tick()
        self.flush_logs(pos[0])

    def cmd_tick_heartbeat(self, pos: list[str], kw: dict[str, str]) -> None:
        node = self.live(pos[0])
        for _ in range(node.raft.heartbeat_timeout):
            node.tick()
        self.flush_logs(pos[0])

    def cmd_compact(self, pos: list[str], kw: dict[str, str]) -> None:
        ne = self.nodes[pos[0]]
        index = int(pos[1])
        st = ne.storage
        snap = st.snapshot()
        cs = snap.metadata.conf_state
        for e in st.entries(st.first_index(), index + 1):
            if e.type == EntryType.CONF_CHANGE:
                cs = conf_state_after(cs, ConfChange.decode(e.data))
        st.create_snapshot(index, cs, b"")
        st.compact(index)
        self.cmd_raft_log([pos[0]], {})

    def cmd_transfer_leadership(self, pos: list[str], kw: dict[str, str]) -> None:
        self.live(kw["from"]).transfer_leader(kw["to"])
        self.flush_logs(kw["from"])

    def cmd_read_index(self, pos: list[str], kw: dict[str, str]) -> None:
        self.live(pos[0]).read_index(pos[1].encode())
        self.flush_logs(pos[0])

    def cmd_forget_leader(self, pos: list[str], kw: dict[str, str]) -> None:
        self.live(pos[0]).forget_leader()
        self.flush_logs(pos[0])

    def cmd_report_unreachable(self, pos: list[str], kw: dict[str, str]) -> None:
        self.live(pos[0]).report_unreachable(pos[1])
        self.flush_logs(pos[0])

    def cmd_report_snapshot(self, pos: list[str], kw: dict[str, str]) -> None:
        self.live(pos[0]).report_snapshot(pos[1], pos[2] == "ok")
        self.flush_logs(pos[0])

    def cmd_raft_log(self, pos: list[str], kw: dict[str, str]) -> None:
        st = self.nodes[pos[0]].storage
        fi, li = st.first_index(), st.last_index()
        if li < fi:
            self.emit(f"log is empty: first index={fi}, last index={li}")
            return
        for e in st.entries(fi, li + 1):
            self.emit(fmt_entry(e))

    def cmd_raft_state(self, pos: list[str], kw: dict[str, str]) -> None:
        for nid in sorted(self.nodes, key=int):
            ne = self.nodes[nid]
            if ne.node is None:
                self.emit(f"{nid}: crashed")
                continue
            r = ne.node.raft
            kind = "voter" if nid in r.conf.voters else "learner" if nid in r.conf.learners else "non-member"
            self.emit(f"{nid}: {r.role.name} ({kind}) term={r.term} lead={r.lead or '0'}")

    def cmd_status(self, pos: list[str], kw: dict[str, str]) -> None:
        r = self.live(pos[0]).raft
        self.emit(f"{pos[0]}: {r.role.name} term={r.term} commit={r.log.committed} applied={r.log.applied}")
        if r.role == StateRole.LEADER:
            for nid in sorted(r.prs, key=int):
                self.emit(f"{nid}: {r.prs[nid].describe()}")

    def cmd_applied(self, pos: list[str], kw: dict[str, str]) -> None:
        """What the node's state machine applied since (re)start."""
        ne = self.nodes[pos[0]]
        self.emit(ne.applied_snapshot + fmt_entries(ne.applied))


def _ids(text: str) -> tuple[str, ...]:
    text = text.strip("()")
    return tuple(x for x in text.replace(",", " ").split() if x)


def _config_dict(c: Config) -> dict[str, object]:
    return {name: getattr(c, name) for name in c.__dataclass_fields__}


# ------------------------------------------------------------------ the file format


@dataclass
class Block:
    preamble: list[str]
    command: str
    expected: list[str]


def parse(text: str) -> tuple[list[Block], list[str]]:
    lines = text.splitlines()
    blocks: list[Block] = []
    pre: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            pre.append(line)
            i += 1
            continue
        if i + 1 >= len(lines) or lines[i + 1] != "----":
            raise HarnessError(f"line {i + 1}: command {line!r} must be followed by '----'")
        j = i + 2
        exp: list[str] = []
        while j < len(lines) and lines[j].strip():
            exp.append(lines[j])
            j += 1
        blocks.append(Block(pre, line, exp))
        pre = []
        i = j
    return blocks, pre


def run_file(text: str) -> tuple[str, list[tuple[str, str, str]]]:
    """Run every block; return (rewritten text, [(command, expected, actual)] mismatches)."""
    blocks, trailer = parse(text)
    env = Env()
    out: list[str] = []
    mismatches: list[tuple[str, str, str]] = []
    for b in blocks:
        actual = env.run(b.command)
        expected = "\n".join(b.expected)
        if actual != expected:
            mismatches.append((b.command, expected, actual))
        out.extend(b.preamble)
        out.append(b.command)
        out.append("----")
        out.append(actual)
    out.extend(trailer)
    return "\n".join(out).rstrip("\n") + "\n", mismatches
