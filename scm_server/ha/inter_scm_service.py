"""Server side of ``InterSCMProtocolService`` (proto/scm_ha.proto), served on ozone.scm.grpc.port.

Ozone serves checkpoint downloads on this port (``InterSCMGrpcProtocolService``) and puts the HA
admin calls (roles, transfer, decommission, addSCM) on the client protocol; we keep every
inter-SCM and HA-admin call on this one service so an operator and the CLI use the same calls:

* ``Download``: flush the transaction buffer, take a consistent checkpoint of scm.db, stream it
  as a gzip'd tar in 1 MiB chunks with its TransactionInfo first and its sha256 last;
* ``GetScmInfo``: cluster id + scm id, answered by ANY SCM (no leader needed: the cluster id is
  immutable), which is what lets ``scm --bootstrap`` succeed while there is no leader (HDDS-5062);
* ``AddSCM`` / ``RemoveSCM`` / ``TransferLeadership``: leader only (NotLeader with the leader's
  address on this port otherwise); both membership calls check the cluster id, and RemoveSCM
  refuses the leader ("Cannot remove current leader"), as Ozone's ``removePeerFromHARing``;
* ``GetScmRatisRoles``: a ``ScmPeerRoleProto`` per member and the ``host:port:ROLE:peerId:ip`` lines of
  GetScmInfo's peerRoles, plus term, commit/applied index and lag;
* ``Backup`` (leader, admin only): the ``Download`` checkpoint plus a JSON header a restore needs
  (membership, VERSION, sequence-id ceilings at the checkpoint's index, safemode, leader clock);
  refused in safemode unless ``allowSafemode``;
* ``GetTableDigests``: sha256 per replicated column family at this SCM's applied index, for the
  cross-SCM consistency check.

Errors are SCMExceptions travelling as status + ``x-scm-result`` metadata (same contract as the
client protocols).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import grpc
import grpc.aio

from scm_server.conf import OzoneConfiguration, SCMNodeDetails
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.ha.bootstrap import LocalSCM
from scm_server.ha.inter_scm_client import error_metadata, pack_checkpoint
from scm_server.ha.scm_ha_manager_api import SCMHAHost
from scm_server.metadata.scm_db_definition import SCMDBDefinition
from scm_server.metadata.scm_metadata_store import SCMMetadataStore
from scm_server.proto import hdds_pb2, scm_ha_pb2, scm_ha_pb2_grpc
from scm_server.raft.core.types import ConfState
from scm_server.security.core.identity import Role
from scm_server.security.tls import current_identity

LOG = logging.getLogger(__name__)

CHUNK_SIZE = 1 << 20
# Column families that are NOT replicated state (the applied index itself).
NON_REPLICATED_TABLES = frozenset({SCMDBDefinition.TRANSACTION_INFO.name})

_STATUS = {
    ResultCodes.SCM_NOT_LEADER: grpc.StatusCode.UNAVAILABLE,
    ResultCodes.INVALID_CLUSTER_ID: grpc.StatusCode.PERMISSION_DENIED,
    ResultCodes.INVALID_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
    ResultCodes.TIMEOUT: grpc.StatusCode.DEADLINE_EXCEEDED,
    ResultCodes.SAFE_MODE_EXCEPTION: grpc.StatusCode.FAILED_PRECONDITION,
}


async def _abort(context: grpc.aio.ServicerContext[Any, Any], exc: SCMException, leader_address: str = "") -> None:
    context.set_trailing_metadata(error_metadata(exc, leader_address))
    await context.abort(_STATUS.get(exc.result, grpc.StatusCode.INTERNAL), str(exc))


def _backup_contents(db_path: Path) -> dict[str, Any]:
    """Read from a (closed) checkpoint: the persisted lastId of every sequence, and how many rows
    each table holds (the certificate tables among them, in secure mode)."""
    store = SCMMetadataStore(db_path.parent, create=False, sync=False)
    try:
        seq = {name: int(value.lastId) for name, value in store.sequence_id.items()}
        counts = {}
        for cf in SCMDBDefinition.column_families():
            counts[cf.name] = sum(1 for _ in store.db.iterator(prefix=cf.prefix, include_value=False))
        out: dict[str, Any] = {"sequenceIds": seq, "tableCounts": counts}
        root = _recorded_root_fingerprint(store)
        if root is not None:
            out["rootCAFingerprint"] = root
        return out
    finally:
        store.stop()


def _recorded_root_fingerprint(store: Any) -> str | None:
    """SHA-256 (hex, of the DER) of the root CA a secure ring recorded in ``validSCMCerts``: the root a restore
    from this checkpoint must keep (``scm --restore`` checks it; the operator checks it before it starts one)."""
    from cryptography.hazmat.primitives import hashes

    from scm_server.security.core import certificates as pki
    from scm_server.security.core import identity as ids

    for proto in store.valid_scm_certs.values():
        if proto.nodeType != ids.Role.ROOT_CA.value:
            continue
        try:
            return pki.load_certificate(proto.x509Certificate).fingerprint(hashes.SHA256()).hex()
        except pki.PKIError:
            continue
    return None


def table_digests(store: Any) -> list[scm_ha_pb2.TableDigestProto]:
    """sha256 over the sorted raw (key, value) pairs of each replicated column family."""
    out = []
    for cf in SCMDBDefinition.column_families():
        if cf.name in NON_REPLICATED_TABLES:
            continue
        h = hashlib.sha256()
        count = 0
        for key, value in store.db.iterator(prefix=cf.prefix):
            h.update(len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value)
            count += 1
        out.append(scm_ha_pb2.TableDigestProto(table=cf.name, sha256=h.hexdigest(), count=count))
    return out


class RaftMembership(Protocol):
    """The Raft server as the backup manifest reads it: the current membership."""

    @property
    def conf(self) -> ConfState: ...


class InterSCMHost(Protocol):
    """What the service needs from this SCM's HA manager (``SCMHAManagerImpl``, which builds the service
    and so is not imported here): identity, leadership, membership changes and the SCM behind it."""

    @property
    def conf(self) -> OzoneConfiguration: ...

    @property
    def local(self) -> LocalSCM: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def peer_id(self) -> str: ...

    @property
    def node_id(self) -> str | None: ...

    @property
    def raft(self) -> RaftMembership | None: ...

    @property
    def host(self) -> SCMHAHost: ...

    def checkpoint_work_dir(self) -> str: ...

    def is_leader(self) -> bool: ...

    def current_term(self) -> int: ...

    def leader_peer_id(self) -> str | None: ...

    def node_of_peer(self, peer_id: str) -> SCMNodeDetails | None: ...

    def not_leader_exception(self, leader_id: str | None = None) -> NotLeaderException: ...

    def peer_roles(self) -> list[str]: ...

    def roles_proto(self) -> scm_ha_pb2.ScmRatisRolesResponseProto: ...

    async def add_scm(self, scm_id: str, ratis_address: str, node_id: str = "") -> str: ...

    async def remove_scm(self, scm_id: str) -> str: ...

    async def transfer_leadership(self, target: str | None) -> str: ...


class InterSCMService(scm_ha_pb2_grpc.InterSCMProtocolServiceServicer):
    def __init__(self, ha: InterSCMHost) -> None:
        self._ha = ha

    def _leader_grpc_address(self, exc: NotLeaderException) -> str:
        node = self._ha.node_of_peer(exc.leader_id) if exc.leader_id else None
        return node.grpc_address if node is not None else ""

    async def _require_leader(self, context: grpc.aio.ServicerContext[Any, Any]) -> bool:
        if self._ha.is_leader():
            return True
        exc = self._ha.not_leader_exception()
        await _abort(context, exc, self._leader_grpc_address(exc))
        return False

    async def _check_cluster(self, cluster_id: str, context: grpc.aio.ServicerContext[Any, Any]) -> bool:
        if cluster_id and cluster_id != self._ha.cluster_id:
            await _abort(
                context,
                SCMException(
                    ResultCodes.INVALID_CLUSTER_ID,
                    f"SCM ClusterId mismatch: request carries {cluster_id}, this SCM is in {self._ha.cluster_id}",
                ),
            )
            return False
        return True

    # ---- checkpoint download ----
    async def _checkpoint(
        self, flush: bool, inspect: Callable[[Path], dict[str, Any]] | None = None
    ) -> tuple[hdds_pb2.TransactionInfoProto, bytes, dict[str, Any]]:
        """A consistent checkpoint of scm.db as a gzip'd tar: (its TransactionInfo, the tar, what
        ``inspect`` read from the checkpoint before it was packed). Shared by Download and Backup."""
        host = self._ha.host
        tmp = Path(tempfile.mkdtemp(prefix="checkpoint-", dir=self._ha.checkpoint_work_dir()))
        try:
            if flush:
                host.transaction_buffer.flush()
            # The copy runs in a thread (a large scm.db must not stall this SCM's Raft loop); it reads
            # a LevelDB snapshot, and state + #TRANSACTIONINFO are always flushed in one batch, so the
            # checkpoint's own TransactionInfo describes exactly the state it holds.
            db_path = await asyncio.to_thread(host.metadata_store.checkpoint, tmp)
            trx = host.metadata_store.read_transaction_info(db_path) or hdds_pb2.TransactionInfoProto(term=0, index=0)
            extra = await asyncio.to_thread(inspect, db_path) if inspect is not None else {}
            blob = await asyncio.to_thread(pack_checkpoint, db_path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return trx, blob, extra

    async def _stream(
        self,
        trx: hdds_pb2.TransactionInfoProto,
        blob: bytes,
        backup_info: str = "",
        keys: list[scm_ha_pb2.KeyFileProto] | None = None,
    ) -> AsyncIterator[scm_ha_pb2.CopyDBCheckpointResponseProto]:
        header = scm_ha_pb2.CopyDBCheckpointResponseProto(
            transactionInfo=trx, totalSize=len(blob), clusterId=self._ha.cluster_id
        )
        if backup_info:
            header.backupInfoJson = backup_info
        header.keyFiles.extend(keys or [])
        yield header
        for off in range(0, len(blob), CHUNK_SIZE):
            yield scm_ha_pb2.CopyDBCheckpointResponseProto(data=blob[off : off + CHUNK_SIZE])
        yield scm_ha_pb2.CopyDBCheckpointResponseProto(sha256=hashlib.sha256(blob).hexdigest())

    async def Download(
        self, request: scm_ha_pb2.CopyDBCheckpointRequestProto, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[scm_ha_pb2.CopyDBCheckpointResponseProto]:
        if not await self._check_cluster(request.clusterId, context):
            return
        trx, blob, _ = await self._checkpoint(request.flush)
        LOG.info("serving checkpoint at (term %d, index %d), %d bytes", trx.term, trx.index, len(blob))
        async for msg in self._stream(trx, blob):
            yield msg

    async def Backup(
        self, request: scm_ha_pb2.BackupRequestProto, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[scm_ha_pb2.CopyDBCheckpointResponseProto]:
        """The leader's checkpoint (as Download) plus what a restore needs: membership, VERSION,
        the sequence-id ceilings read from the checkpoint itself, safemode, the leader's clock."""
        if not await self._check_cluster(request.clusterId, context) or not await self._require_leader(context):
            return
        host = self._ha.host
        in_safemode = bool(host.scm_context.is_in_safe_mode())
        if in_safemode and not request.allowSafemode:
            await _abort(
                context,
                SCMException(
                    ResultCodes.SAFE_MODE_EXCEPTION,
                    "the SCM ring is in safemode: its state may not reflect every datanode yet; wait for it to "
                    "leave safemode, or back it up anyway with --allow-safemode (the manifest then says so)",
                ),
            )
            return
        trx, blob, contents = await self._checkpoint(True, _backup_contents)
        conf = self._ha.raft.conf if self._ha.raft is not None else None
        members = []
        if conf is not None:
            for peer in conf.members():
                node = self._ha.node_of_peer(peer)
                members.append(
                    {"peerId": peer, "ratisAddress": conf.address_of(peer), "nodeId": node.node_id if node else "",
                     "role": "LEARNER" if peer in conf.learners else "VOTER"}
                )
        info = {
            "clusterId": self._ha.cluster_id,
            "term": trx.term,
            "index": trx.index,
            "leaderPeerId": self._ha.peer_id,
            "leaderNodeId": self._ha.node_id or "",
            "members": members,
            "version": host.storage_config.to_properties(),
            **contents,
            "sequenceBatchSize": host.sequence_batch_size,
            "safemode": in_safemode,
            "warnings": ["taken while the ring was in safemode (--allow-safemode)"] if in_safemode else [],
            "leaderTimeMs": int(time.time() * 1000),
        }
        keys = self._key_files() if request.includeKeys else []
        if keys:
            info["keyFiles"] = sorted(k.name for k in keys)
            LOG.warning("backup includes %d key file(s) of this SCM (includeKeys): %s", len(keys), info["keyFiles"])
        LOG.info("serving backup at (term %d, index %d), %d bytes", trx.term, trx.index, len(blob))
        async for msg in self._stream(trx, blob, json.dumps(info, sort_keys=True), keys):
            yield msg
        # the whole stream went out: the backup metric (OzoneSCMBackupTooOld) counts from here
        host.on_backup_served(time.time())

    def _key_files(self) -> list[scm_ha_pb2.KeyFileProto]:
        """This SCM's root CA (if it holds it) and sub-CA private keys and certificates."""
        from scm_server.conf.security import SecurityConfig
        from scm_server.security.init import root_ca_store, sub_ca_store

        config = SecurityConfig.from_conf(self._ha.conf)
        metadata = self._ha.local.scm.metadata_dir
        out = []
        for label, store in (("root-ca", root_ca_store(metadata, config)), ("sub-ca", sub_ca_store(metadata, config))):
            for kind, path in (("private.pem", store.private_key_path), ("certificate.crt", store.certificate_path)):
                if path.is_file():
                    out.append(scm_ha_pb2.KeyFileProto(name=f"{label}-{kind}", data=path.read_bytes()))
        return out

    # ---- info / roles ----
    async def GetScmInfo(
        self, request: scm_ha_pb2.ScmInfoRequestProto, context: grpc.aio.ServicerContext[Any, Any]
    ) -> scm_ha_pb2.ScmInfoResponseProto:
        leader = self._ha.leader_peer_id() or ""
        return scm_ha_pb2.ScmInfoResponseProto(
            clusterId=self._ha.cluster_id,
            scmId=self._ha.peer_id,
            nodeId=self._ha.node_id or "",
            leaderId=leader,
            term=self._ha.current_term(),
            peerRoles=self._ha.peer_roles(),
        )

    async def GetScmRatisRoles(
        self, request: scm_ha_pb2.ScmRatisRolesRequestProto, context: grpc.aio.ServicerContext[Any, Any]
    ) -> scm_ha_pb2.ScmRatisRolesResponseProto:
        return self._ha.roles_proto()

    # ---- membership / leadership (leader only) ----
    async def _change_membership(
        self, cluster_id: str, change: Callable[[], Awaitable[str]], context: grpc.aio.ServicerContext[Any, Any]
    ) -> str | None:
        """Shared guard for AddSCM/RemoveSCM: cluster id, leadership, error mapping. None = aborted."""
        if not await self._check_cluster(cluster_id, context) or not await self._require_leader(context):
            return None
        try:
            return await change()
        except NotLeaderException as exc:
            await _abort(context, exc, self._leader_grpc_address(exc))
        except SCMException as exc:
            await _abort(context, exc)
        return None

    async def AddSCM(
        self, request: scm_ha_pb2.AddScmRequestProto, context: grpc.aio.ServicerContext[Any, Any]
    ) -> scm_ha_pb2.AddScmResponseProto:
        caller = current_identity()
        if caller is not None and caller.role is Role.SCM and caller.owner_id not in (request.scmId, request.nodeId):
            # an SCM adds only itself: its certificate's owner (scmUuid, or the node id in CA mode operator)
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"the certificate of scm:{caller.owner_id} may add only its own SCM, not scmId {request.scmId} "
                f"(node {request.nodeId or '?'})",
            )
        message = await self._change_membership(
            request.clusterId, lambda: self._ha.add_scm(request.scmId, request.ratisAddr, request.nodeId), context
        )
        if message is None:
            return scm_ha_pb2.AddScmResponseProto(success=False)
        return scm_ha_pb2.AddScmResponseProto(success=True, message=message)

    async def RemoveSCM(
        self, request: scm_ha_pb2.RemoveScmRequestProto, context: grpc.aio.ServicerContext[Any, Any]
    ) -> scm_ha_pb2.RemoveScmResponseProto:
        message = await self._change_membership(request.clusterId, lambda: self._ha.remove_scm(request.scmId), context)
        if message is None:
            return scm_ha_pb2.RemoveScmResponseProto(success=False)
        return scm_ha_pb2.RemoveScmResponseProto(success=True, message=message)

    async def TransferLeadership(
        self, request: scm_ha_pb2.TransferLeadershipRequestProto, context: grpc.aio.ServicerContext[Any, Any]
    ) -> scm_ha_pb2.TransferLeadershipResponseProto:
        if not await self._require_leader(context):
            return scm_ha_pb2.TransferLeadershipResponseProto(newLeaderId="")
        try:
            new_leader = await self._ha.transfer_leadership(request.newLeaderId or None)
        except NotLeaderException as exc:
            await _abort(context, exc, self._leader_grpc_address(exc))
            return scm_ha_pb2.TransferLeadershipResponseProto(newLeaderId="")
        except SCMException as exc:
            await _abort(context, exc)
            return scm_ha_pb2.TransferLeadershipResponseProto(newLeaderId="")
        return scm_ha_pb2.TransferLeadershipResponseProto(newLeaderId=new_leader)

    # ---- consistency ----
    async def GetTableDigests(
        self, request: scm_ha_pb2.TableDigestsRequestProto, context: grpc.aio.ServicerContext[Any, Any]
    ) -> scm_ha_pb2.TableDigestsResponseProto:
        host = self._ha.host
        want = request.minAppliedIndex
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, request.waitSeconds)
        while host.transaction_buffer.latest_trx_info().index < want:
            if loop.time() >= deadline:
                await _abort(
                    context,
                    SCMException(
                        ResultCodes.TIMEOUT,
                        f"applied index {host.transaction_buffer.latest_trx_info().index} did not reach {want} "
                        f"within {request.waitSeconds}s",
                    ),
                )
                return scm_ha_pb2.TableDigestsResponseProto()
            await asyncio.sleep(0.05)
        info = host.transaction_buffer.flush()
        return scm_ha_pb2.TableDigestsResponseProto(
            transactionInfo=info.to_proto(),
            digests=table_digests(host.metadata_store),
            scmId=self._ha.peer_id,
        )
