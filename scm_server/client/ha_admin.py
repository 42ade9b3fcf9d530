"""Client for SCM HA administration (``ozone admin scm roles|transfer|decommission``).

Talks to the SCMs' ``InterSCMProtocolService`` (``ozone.scm.grpc.port``, proto/scm_ha.proto), the
same calls an operator (or the Kubernetes operator) would use; under mutual TLS with the caller's
client certificate (``security``). Given the list of SCM gRPC
addresses it finds the leader by itself: a call answered with SCM_NOT_LEADER is retried on the
hinted leader, an unreachable SCM is skipped, and the whole list is retried a bounded number of
times with a short pause (an election takes about a second with our defaults).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc
import grpc.aio

from scm_server import grpc_options
from scm_server.client.errors import SCMUnavailableError
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.grpc_errors import from_grpc_error
from scm_server.proto import scm_ha_pb2, scm_ha_pb2_grpc
from scm_server.security.tls import ChannelCache, ChannelSecurity

T = TypeVar("T")

CHANNEL_OPTIONS = grpc_options.channel_options(max_message_bytes=64 << 20)


@dataclasses.dataclass(frozen=True)
class PeerRole:
    host: str
    ratis_port: int
    role: str  # as the SCM itself said when it answered; UNKNOWN if it did not answer
    peer_id: str
    node_id: str
    match_index: int | None  # the leader's view
    lag: int | None  # the leader's view
    client_address: str
    grpc_address: str
    answered: bool = True
    term: int | None = None  # the term the SCM itself reported
    applied_index: int | None = None  # the SCM's own applied index
    note: str = ""  # why the role is what it is (no answer, stale term, ...)
    last_index: int | None = None  # the SCM's own last Raft log index (quorum recovery)
    last_term: int | None = None  # the term of that entry
    last_contact: float | None = None  # the leader's view: seconds since this peer last answered it in its term

    @property
    def line(self) -> str:
        """Ozone's ``host:port:ROLE:peerId`` form."""
        return f"{self.host}:{self.ratis_port}:{self.role}:{self.peer_id}"


@dataclasses.dataclass(frozen=True)
class Roles:
    answered_by: str
    leader_id: str
    term: int
    commit_index: int
    applied_index: int
    peers: list[PeerRole]
    asked: int = 0  # how many SCMs were asked
    answers: int = 0  # how many answered in time
    election_timeout: float | None = None  # seconds, as the SCM whose view is used reported it
    heartbeat_interval: float | None = None  # seconds between the leader's heartbeats, as that SCM reported it

    @property
    def leader(self) -> PeerRole | None:
        return next((p for p in self.peers if p.role == "LEADER" and p.answered), None)

    @property
    def most_up_to_date(self) -> PeerRole | None:
        """The answering SCM whose log is the most up to date in Raft's sense (last term, then last
        index): the one to run ``scm --recover`` on after a lost quorum."""
        known = [p for p in self.peers if p.answered and p.last_index is not None]
        return max(known, key=lambda p: (p.last_term or 0, p.last_index or 0)) if known else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "answeredBy": self.answered_by,
            "leaderId": self.leader_id,
            "term": self.term,
            "commitIndex": self.commit_index,
            "appliedIndex": self.applied_index,
            "asked": self.asked,
            "answers": self.answers,
            "electionTimeout": self.election_timeout,
            "heartbeatInterval": self.heartbeat_interval,
            "peers": [dataclasses.asdict(p) | {"line": p.line} for p in self.peers],
        }


def roles_from_proto(p: scm_ha_pb2.ScmRatisRolesResponseProto) -> Roles:
    """One SCM's own view of the ring (what it answered), as Roles."""
    return Roles(
        answered_by=p.answeredBy,
        leader_id=p.leaderId,
        term=p.term,
        commit_index=p.commitIndex,
        applied_index=p.appliedIndex,
        peers=[
            PeerRole(
                host=r.host,
                ratis_port=r.ratisPort,
                role=r.role,
                peer_id=r.peerId,
                node_id=r.nodeId,
                match_index=r.matchIndex if r.HasField("matchIndex") else None,
                lag=r.lag if r.HasField("lag") else None,
                client_address=r.clientAddress,
                grpc_address=r.grpcAddress,
                last_contact=r.lastContactMs / 1000 if r.HasField("lastContactMs") else None,
            )
            for r in p.peers
        ],
        asked=1,
        answers=1,
        election_timeout=p.electionTimeoutMs / 1000 if p.HasField("electionTimeoutMs") else None,
        heartbeat_interval=p.heartbeatIntervalMs / 1000 if p.HasField("heartbeatIntervalMs") else None,
    )


def combine_views(
    asked: list[str],
    answers: dict[str, scm_ha_pb2.ScmRatisRolesResponseProto],
    timeout: float,
    complete: bool | None = None,
) -> Roles:
    """Every SCM's own answer -> one table (pure).

    Each SCM's role is what that SCM said about itself, never what another SCM believes: a dead SCM
    is UNKNOWN ("no answer"), not FOLLOWER; a just-restarted SCM's view of the others is not used.
    ``complete`` (default: more than one SCM was asked) says the caller asked every SCM of the ring;
    otherwise (one SCM asked, as the operator asks the leader) the SCMs that did not answer keep the
    leader's view of them, marked "not asked". ``answered_by``: the peer ids of the SCMs that answered.
    The leader is the SCM that says it leads, in the highest term; membership, match index and lag
    come from its view (else from the most recent view). An SCM that claims to lead in an older term
    is marked stale."""
    views = list(answers.values())
    if not views:
        raise SCMUnavailableError(",".join(asked), f"no SCM answered GetScmRatisRoles within {timeout:g}s")
    claims = [v for v in views if v.leaderId and v.leaderId == v.answeredBy]
    top_term = max(v.term for v in views)
    leader = max(claims, key=lambda v: v.term) if claims else None
    if leader is not None and leader.term < top_term:
        leader = None  # a deposed leader that has not heard of the new term yet
    base = leader or max(views, key=lambda v: (v.term, v.commitIndex))
    by_peer = {v.answeredBy: v for v in views}
    members = {r.peerId: r for r in base.peers}
    if leader is None:  # no authority on membership: list every SCM that answered too
        for v in views:
            for r in v.peers:
                if r.peerId == v.answeredBy and r.peerId not in members:
                    members[r.peerId] = r
    peers: list[PeerRole] = []
    if complete is None:
        complete = len(asked) > 1
    for peer_id, r in members.items():
        own = by_peer.get(peer_id)
        if own is None and not complete and leader is not None:
            # not asked at all (the caller asked only some SCMs): the leader's view of it, said so
            role, note, answered, term, applied = r.role, "not asked: as the leader sees it", False, None, None
        elif own is None:
            role, note, answered, term, applied = "UNKNOWN", f"no answer within {timeout:g}s", False, None, None
        else:
            answered, term, applied = True, own.term, own.appliedIndex
            role = own.selfRole or ("LEADER" if own.leaderId == own.answeredBy else "FOLLOWER")
            if role == "LEADER" and (leader is None or own.answeredBy != leader.answeredBy):
                note = f"stale: claims to lead in term {own.term}, the ring is in term {top_term}"
            elif own.term < top_term:
                note = f"behind: term {own.term} < {top_term}"
            elif leader is not None and own.leaderId and own.leaderId != leader.answeredBy:
                note = f"follows {own.leaderId}, not the leader"
            elif leader is not None and not own.leaderId and role != "LEADER":
                note = "knows no leader yet"
            else:
                note = ""
        from_leader = leader is not None
        peers.append(
            PeerRole(
                host=r.host,
                ratis_port=r.ratisPort,
                role=role,
                peer_id=peer_id,
                node_id=r.nodeId or (own.answeredByNode if own is not None else ""),
                match_index=r.matchIndex if from_leader and r.HasField("matchIndex") else None,
                lag=r.lag if from_leader and r.HasField("lag") else None,
                client_address=r.clientAddress,
                grpc_address=r.grpcAddress,
                answered=answered,
                term=term,
                applied_index=applied,
                note=note,
                last_index=own.lastIndex if own is not None and own.HasField("lastIndex") else None,
                last_term=own.lastTerm if own is not None and own.HasField("lastTerm") else None,
                last_contact=r.lastContactMs / 1000 if from_leader and r.HasField("lastContactMs") else None,
            )
        )
    return Roles(
        answered_by=",".join(sorted(v.answeredBy for v in views)),
        leader_id=leader.answeredBy if leader is not None else "",
        term=top_term,
        commit_index=base.commitIndex,
        applied_index=base.appliedIndex,
        peers=peers,
        asked=len(asked),
        answers=len(views),
        election_timeout=base.electionTimeoutMs / 1000 if base.HasField("electionTimeoutMs") else None,
        heartbeat_interval=base.heartbeatIntervalMs / 1000 if base.HasField("heartbeatIntervalMs") else None,
    )


class HAAdminClient:
    def __init__(
        self,
        addresses: Sequence[str],
        *,
        rounds: int = 10,
        pause: float = 0.3,
        timeout: float = 30.0,
        security: ChannelSecurity | None = None,
        channel_options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        """``channel_options`` are extra gRPC channel arguments. Under TLS the server must carry the SCM role name
        whatever address is dialled (a name override given here is replaced: ``tls.scm_channel_options``)."""
        if not addresses:
            raise ValueError(
                "no SCM gRPC address: configure ozone.scm.nodes.<serviceId> / ozone.scm.grpc.port or pass --grpc"
            )
        self.addresses = list(addresses)
        self.rounds = rounds
        self.pause = pause
        self.timeout = timeout
        self._channels = ChannelCache(security, [*CHANNEL_OPTIONS, *channel_options])

    async def close(self) -> None:
        await self._channels.close()

    async def __aenter__(self) -> HAAdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _stub(self, address: str) -> scm_ha_pb2_grpc.InterSCMProtocolServiceStub:
        return scm_ha_pb2_grpc.InterSCMProtocolServiceStub(self._channels.get(address))

    async def _call(self, invoke: Callable[[scm_ha_pb2_grpc.InterSCMProtocolServiceStub], Awaitable[T]]) -> T:
        """Call on the leader: follow NotLeader hints, skip unreachable SCMs, bounded rounds."""
        last: Exception | None = None
        for _ in range(self.rounds):
            queue = list(self.addresses)
            tried: set[str] = set()
            while queue:
                address = queue.pop(0)
                if address in tried:
                    continue
                tried.add(address)
                try:
                    return await invoke(self._stub(address))
                except grpc.aio.AioRpcError as err:
                    exc = from_grpc_error(err.code(), err.details() or "", err.trailing_metadata())
                    if isinstance(exc, NotLeaderException):
                        last = exc
                        if exc.leader_address and exc.leader_address not in tried:
                            if exc.leader_address not in self.addresses:
                                self.addresses.append(exc.leader_address)
                            queue.insert(0, exc.leader_address)
                        continue
                    if exc is not None:
                        raise exc from err
                    last = SCMUnavailableError(address, f"{err.code().name}: {err.details()}")
            await asyncio.sleep(self.pause)
        if last is None:
            last = SCMUnavailableError(",".join(self.addresses), "no answer")
        raise last

    async def _any(self, invoke: Callable[[scm_ha_pb2_grpc.InterSCMProtocolServiceStub], Awaitable[T]]) -> T:
        """Call on any reachable SCM: the list in order, then again after a short pause, bounded rounds as
        :meth:`_call` (a member whose network has just come up can drop the first connection)."""
        last: Exception | None = None
        for round_ in range(self.rounds):
            if round_:
                await asyncio.sleep(self.pause)
            for address in self.addresses:
                try:
                    return await invoke(self._stub(address))
                except grpc.aio.AioRpcError as err:
                    exc = from_grpc_error(err.code(), err.details() or "", err.trailing_metadata())
                    if exc is not None:
                        raise exc from err
                    last = SCMUnavailableError(address, f"{err.code().name}: {err.details()}", attempts=round_ + 1)
        if last is None:
            last = SCMUnavailableError(",".join(self.addresses), "no answer")
        raise last

    async def scm_info(self) -> scm_ha_pb2.ScmInfoResponseProto:
        return await self._any(lambda s: s.GetScmInfo(scm_ha_pb2.ScmInfoRequestProto(), timeout=self.timeout))

    async def roles(self, timeout: float = 2.0) -> Roles:
        """Ask every SCM at once (each within ``timeout``) and combine their own answers
        (:func:`combine_views`): who answered, who leads, who did not answer."""

        async def ask(address: str) -> scm_ha_pb2.ScmRatisRolesResponseProto | None:
            try:
                return await self._stub(address).GetScmRatisRoles(
                    scm_ha_pb2.ScmRatisRolesRequestProto(), timeout=timeout
                )
            except grpc.aio.AioRpcError:
                return None

        addresses = list(dict.fromkeys(self.addresses))
        results = await asyncio.gather(*(ask(a) for a in addresses))
        answers = {a: r for a, r in zip(addresses, results, strict=True) if r is not None}
        return combine_views(addresses, answers, timeout)

    async def transfer(self, new_leader_id: str | None) -> str:
        req = scm_ha_pb2.TransferLeadershipRequestProto(newLeaderId=new_leader_id or "")
        resp = await self._call(lambda s: s.TransferLeadership(req, timeout=self.timeout))
        return str(resp.newLeaderId)

    async def decommission(self, scm_id: str) -> str:
        info = await self.scm_info()
        req = scm_ha_pb2.RemoveScmRequestProto(clusterId=info.clusterId, scmId=scm_id)
        resp = await self._call(lambda s: s.RemoveSCM(req, timeout=self.timeout))
        if not resp.success:
            raise SCMException(ResultCodes.INTERNAL_ERROR, f"decommission of {scm_id} failed: {resp.message}")
        return str(resp.message)

    async def backup(
        self, *, allow_safemode: bool = False, include_keys: bool = False, timeout: float = 600.0
    ) -> tuple[dict[str, Any], bytes, dict[str, bytes]]:
        """The leader's backup stream (``Backup``): (the JSON header as a dict; the checkpoint tar; the
        leader's key files by name, only with ``include_keys``). The stream's sha256 and size are
        checked here: a truncated or corrupt stream raises, nothing is returned."""
        info = await self.scm_info()
        req = scm_ha_pb2.BackupRequestProto(
            clusterId=info.clusterId, allowSafemode=allow_safemode, includeKeys=include_keys
        )

        async def invoke(stub: scm_ha_pb2_grpc.InterSCMProtocolServiceStub) -> list[scm_ha_pb2.CopyDBCheckpointResponseProto]:
            return [m async for m in stub.Backup(req, timeout=timeout)]

        messages = await self._call(invoke)
        header = next((m for m in messages if m.HasField("transactionInfo")), None)
        trailer = next((m.sha256 for m in messages if m.HasField("sha256")), "")
        blob = b"".join(m.data for m in messages if m.HasField("data"))
        if header is None or not header.backupInfoJson or not trailer:
            raise SCMException(ResultCodes.IO_EXCEPTION, "the backup stream ended early (no header or no sha256 trailer)")
        if hashlib.sha256(blob).hexdigest() != trailer or (header.totalSize and len(blob) != header.totalSize):
            raise SCMException(ResultCodes.IO_EXCEPTION, "the backup stream is corrupt (sha256 or size mismatch); retry")
        meta: dict[str, Any] = json.loads(header.backupInfoJson)
        return meta, blob, {k.name: bytes(k.data) for k in header.keyFiles}

    async def table_digests(self, address: str, min_applied_index: int = 0, wait: float = 10.0) -> scm_ha_pb2.TableDigestsResponseProto:
        req = scm_ha_pb2.TableDigestsRequestProto(minAppliedIndex=min_applied_index, waitSeconds=wait)
        return await self._stub(address).GetTableDigests(req, timeout=wait + self.timeout)


def run_sync(coro_fn: Callable[[HAAdminClient], Awaitable[T]], addresses: Sequence[str], **kwargs: Any) -> T:
    """Run one admin call from synchronous code (the CLI)."""

    async def go() -> T:
        async with HAAdminClient(addresses, **kwargs) as client:
            return await coro_fn(client)

    return asyncio.run(go())
