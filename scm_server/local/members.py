"""``ozone-scm local status|down|stop|start|restart``: the members of the cluster ``local up`` started.

Called by ``scm_server/cli/local.py`` (the click commands) and ``local_quorum.status/down``. The
recorded state (``<data-dir>/cluster.json``: conf and metadata directories, ports, log files, the
last PIDs) says what the members are; which process is which member is found by identity through
``scm_server.local.procs`` (configuration/data directory on the command line or held open),
so a member restarted by hand is found, and a PID reused by another process is never signalled.

``stop``/``restart`` ask the members who leads (``--leader``), stop one (SIGTERM, or SIGKILL with
``--kill``) and report the new leader once the others elect one; ``start`` runs the daemon again
from the member's own configuration (its ports and Raft identity are in its ``ozone-site.xml``
and metadata) and waits until it serves and knows its leader. Talks to SCMs only over gRPC/HTTP.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from scm_server.client.ha_admin import HAAdminClient
from scm_server.client.retryable import is_answer_or_transient
from scm_server.local import procs as local_procs
from scm_server.local.cluster import child_env, configured_web_url, tail, web_ok
from scm_server.security.tls import FileClientSecurity

STATE_FILE = "cluster.json"
DATANODES = "datanodes"


class LocalClusterError(RuntimeError):
    """A request about the local cluster that cannot be carried out; the message says why and what to do."""


@dataclasses.dataclass(frozen=True)
class ScmMember:
    name: str
    conf_dir: Path
    metadata_dir: Path | None
    grpc: str
    http: str
    client: str
    log: Path | None

    @property
    def spec(self) -> local_procs.MemberSpec:
        return local_procs.MemberSpec(self.name, conf_dir=self.conf_dir, metadata_dir=self.metadata_dir)


@dataclasses.dataclass
class LocalState:
    path: Path
    raw: dict[str, Any]
    scms: list[ScmMember]
    datanode_addresses: frozenset[str]

    @property
    def security(self) -> FileClientSecurity | None:
        """The admin client identity of a secure cluster (mutual TLS), else None."""
        return state_security(self.raw)[0]

    @property
    def specs(self) -> list[local_procs.MemberSpec]:
        specs = [s.spec for s in self.scms]
        if self.datanode_addresses:
            specs.append(local_procs.MemberSpec(DATANODES, datanode_addresses=self.datanode_addresses))
        return specs

    def member(self, name: str) -> ScmMember:
        for s in self.scms:
            if s.name == name:
                return s
        raise LocalClusterError(
            f"no SCM named {name!r} in {self.path}; the members are {', '.join(s.name for s in self.scms)}"
        )

    def record_pid(self, name: str, info: local_procs.ProcInfo | None) -> None:
        """Keep the last known PID in cluster.json (informational: identity is what counts)."""
        for s in self.raw.get("scms", []):
            if _name_of(s) == name:
                s["pid"] = info.pid if info else None
                s["start_ticks"] = info.start_ticks if info else None
        self.path.write_text(json.dumps(self.raw, indent=2))


def state_security(state: Mapping[str, Any]) -> tuple[FileClientSecurity | None, Path | None]:
    """The admin identity and root CA file a secure `local up` recorded, else (None, None)."""
    if not state.get("secure"):
        return None, None
    admin = Path(state["admin_conf"]).parent
    return FileClientSecurity(admin / "admin.crt", admin / "admin.key", admin / "ca.crt"), admin / "ca.crt"


def _name_of(s: dict[str, Any]) -> str:
    return str(s.get("node_id") or "scm")


def _metadata_dir(conf_dir: Path) -> Path | None:
    try:
        root = ET.parse(conf_dir / "ozone-site.xml").getroot()
    except (OSError, ET.ParseError):
        return None
    for prop in root.iter("property"):
        if (prop.findtext("name") or "").strip() == "ozone.metadata.dirs":
            value = (prop.findtext("value") or "").strip()
            return Path(value.split(",")[0]) if value else None
    return None


def load(data_dir: Path) -> LocalState:
    path = data_dir / STATE_FILE
    if not path.exists():
        raise LocalClusterError(f"no local cluster recorded in {path}: start one with `ozone-scm local up`")
    try:
        raw = json.loads(path.read_text())
        scms = []
        for s in raw["scms"]:
            conf = Path(s["conf_dir"])
            meta = Path(s["metadata_dir"]) if s.get("metadata_dir") else _metadata_dir(conf)
            scms.append(ScmMember(_name_of(s), conf, meta, s["grpc"], s["http"], s["client"],
                                  Path(s["log"]) if s.get("log") else None))
        dn = frozenset(s["datanode"] for s in raw["scms"] if s.get("datanode")) if raw.get("datanode_sim_pid") else \
            frozenset()
    except (ValueError, KeyError, TypeError) as exc:
        raise LocalClusterError(f"{path} is not a local cluster state file ({type(exc).__name__}: {exc}); "
                                "stop the processes by hand and remove the data directory") from exc
    return LocalState(path, raw, scms, dn)


def running(state: LocalState) -> dict[str, list[local_procs.ProcInfo]]:
    return local_procs.find(state.specs)


# ----------------------------------------------------------------------------- roles


async def _own_view(member: ScmMember, timeout: float, security: FileClientSecurity | None) -> tuple[str, Any]:
    async with HAAdminClient([member.grpc], rounds=1, timeout=timeout, security=security) as c:
        return member.name, await c.scm_info()


async def views(members: Sequence[ScmMember], security: FileClientSecurity | None = None,
                timeout: float = 2.0) -> dict[str, Any]:
    """Each member's own GetScmInfo (asked concurrently; a member that does not answer is left out)."""
    results = await asyncio.gather(*(_own_view(m, timeout, security) for m in members), return_exceptions=True)
    return {r[0]: r[1] for r in results if isinstance(r, tuple)}


def leader_name(state: LocalState, alive: Sequence[str], timeout: float = 10.0) -> str | None:
    """The member that says it leads (and whose peers agree), waiting up to ``timeout`` for an election."""
    members = [m for m in state.scms if m.name in alive]
    deadline = time.monotonic() + timeout
    while True:
        seen = asyncio.run(views(members, state.security))
        leaders = [name for name, info in seen.items() if info.leaderId and info.leaderId == info.scmId]
        if len(leaders) == 1:
            return leaders[0]
        if time.monotonic() >= deadline or not members:
            return None
        time.sleep(0.2)


# ----------------------------------------------------------------------------- status / down


def status(data_dir: Path) -> dict[str, Any]:
    state = load(data_dir)
    procs = running(state)
    alive = {s.name: bool(procs[s.name]) for s in state.scms}

    async def roles() -> Any:
        addresses = [s.grpc for s in state.scms if alive[s.name]]
        if not addresses:
            return "no SCM of this cluster is running"
        try:
            async with HAAdminClient(addresses, rounds=2, timeout=5, security=state.security) as c:
                return await c.roles()
        except Exception as exc:  # shown as "roles unavailable: ..."; a harness error is raised, not shown as a role
            if not is_answer_or_transient(exc):
                raise
            return str(exc)

    return {
        "state": state.raw, "alive": alive,
        "pids": {name: [p.pid for p in ps] for name, ps in procs.items()},
        "datanodes_alive": bool(procs.get(DATANODES)),
        "roles": asyncio.run(roles()),
    }


def down(data_dir: Path, timeout: float = 20.0) -> list[str]:
    """Stop every process of the cluster (SCMs and the datanode simulator), found by identity."""
    state = load(data_dir)
    specs = {s.name: s for s in state.specs}
    stopped = []
    for name, procs in running(state).items():
        for info in procs:
            outcome = local_procs.stop_verified(info.pid, _verifier(specs[name]), timeout=timeout)
            if outcome in ("stopped", "killed"):
                stopped.append(name)
        if name != DATANODES and procs:
            state.record_pid(name, None)
    return sorted(set(stopped))


def _verifier(spec: local_procs.MemberSpec) -> Callable[[local_procs.ProcInfo], bool]:
    return lambda info: local_procs.matches(spec, info)


# ----------------------------------------------------------------------------- stop / start


@dataclasses.dataclass
class StopResult:
    name: str
    pids: list[int]
    was_leader: bool
    outcome: str
    signal_name: str = "SIGTERM"
    new_leader: str | None = None
    election_seconds: float | None = None


def resolve_target(state: LocalState, scm: str | None, leader: bool) -> str:
    if bool(scm) == leader:
        raise LocalClusterError("name one member: --scm scmN or --leader")
    if scm:
        return state.member(scm).name
    procs = running(state)
    alive = [s.name for s in state.scms if procs[s.name]]
    if not alive:
        raise LocalClusterError(f"no SCM of the cluster in {state.path.parent} is running: nothing leads")
    name = leader_name(state, alive)
    if name is None:
        raise LocalClusterError(
            f"no leader among the running SCMs ({', '.join(alive)}) within 10s: a majority may be down; "
            "name the member with --scm"
        )
    return name


def stop(data_dir: Path, name: str, *, kill: bool = False, timeout: float = 20.0,
         await_new_leader: float = 15.0) -> StopResult:
    state = load(data_dir)
    member = state.member(name)
    found = running(state)
    procs = found[name]
    if not procs:
        raise LocalClusterError(f"{name} is not running (start it with `ozone-scm local start --scm {name}`)")
    alive_others = [s.name for s in state.scms if s.name != name and found[s.name]]
    seen = asyncio.run(views([member], state.security))
    info = seen.get(name)
    was_leader = bool(info is not None and info.leaderId and info.leaderId == info.scmId)
    verify = _verifier(member.spec)
    outcomes = [local_procs.stop_verified(p.pid, verify, sig=signal.SIGKILL if kill else signal.SIGTERM,
                                          timeout=timeout) for p in procs]
    state.record_pid(name, None)
    outcome = "killed" if "killed" in outcomes else outcomes[0]
    result = StopResult(name, [p.pid for p in procs], was_leader, outcome, "SIGKILL" if kill else "SIGTERM")
    if was_leader and alive_others and await_new_leader > 0:
        started = time.monotonic()
        result.new_leader = leader_name(state, alive_others, timeout=await_new_leader)
        if result.new_leader is not None:
            result.election_seconds = time.monotonic() - started
    return result


@dataclasses.dataclass
class StartResult:
    name: str
    pid: int
    seconds_to_serve: float
    leader: str | None
    role: str


def start(data_dir: Path, name: str, *, timeout: float = 90.0) -> StartResult:
    state = load(data_dir)
    member = state.member(name)
    procs = running(state)[name]
    if procs:
        raise LocalClusterError(
            f"{name} is already running (pid {', '.join(str(p.pid) for p in procs)}); "
            f"use `ozone-scm local restart --scm {name}`"
        )
    if not (member.conf_dir / "ozone-site.xml").is_file():
        raise LocalClusterError(f"{member.conf_dir / 'ozone-site.xml'} is missing: the member's data was removed")
    log_path = member.log or member.conf_dir.parent / "scm.log"
    started = time.monotonic()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "scm_server.cli.main", "--conf", str(member.conf_dir), "scm"],
            stdout=log, stderr=subprocess.STDOUT, env=child_env(), start_new_session=True,
            cwd=str(data_dir.resolve()),
        )
    deadline = started + timeout
    # the page the member's configuration serves now (ozone.http.policy may have changed since `local up`)
    web = configured_web_url(member.conf_dir) or member.http
    ca = state_security(state.raw)[1]
    while not web_ok(web + "/health", ca):
        if proc.poll() is not None:
            raise LocalClusterError(
                f"{name} exited with {proc.returncode} while starting; last lines of {log_path}:\n{tail(log_path, 15)}"
            )
        if time.monotonic() > deadline:
            raise LocalClusterError(f"{name} did not serve {web}/health within {timeout:.0f}s; see {log_path}")
        time.sleep(0.1)
    serve = time.monotonic() - started
    info = local_procs.read_proc(proc.pid)
    state.record_pid(name, info)
    # wait (bounded) until it knows who leads: then it is back in the ring
    leader, role = None, "UNKNOWN"
    while time.monotonic() < deadline:
        seen = asyncio.run(views(state.scms, state.security))
        mine = seen.get(name)
        if mine is not None and mine.leaderId:
            by_id = {v.scmId: n for n, v in seen.items()}
            leader = by_id.get(mine.leaderId, mine.leaderId)
            role = "LEADER" if mine.leaderId == mine.scmId else "FOLLOWER"
            break
        time.sleep(0.2)
    return StartResult(name, proc.pid, serve, leader, role)


def http_ok(url: str, ca_file: Path | None = None) -> bool:
    """True if ``url`` (HTTP or HTTPS, verified with ``ca_file``) answers 200 within 2s."""
    return web_ok(url, ca_file)


def describe_stop(r: StopResult) -> str:
    what = {
        "stopped": "killed (SIGKILL)" if r.signal_name == "SIGKILL" else "stopped (SIGTERM)",
        "killed": f"did not exit on {r.signal_name}: killed (SIGKILL)",
        "gone": "had already exited",
        "not-ours": "left alone (its PID now belongs to another process)",
    }
    line = f"{r.name} (pid {', '.join(map(str, r.pids))}{', was LEADER' if r.was_leader else ''}) {what[r.outcome]}"
    if r.was_leader:
        if r.new_leader is not None and r.election_seconds is not None:
            line += f"; new leader {r.new_leader} after {r.election_seconds:.1f}s"
        else:
            line += "; no new leader yet (a majority may be down)"
    return line


def describe_start(r: StartResult) -> str:
    lead = f", leader {r.leader}" if r.leader else ", no leader known yet"
    return f"{r.name} started (pid {r.pid}), serving after {r.seconds_to_serve:.1f}s: {r.role}{lead}"

